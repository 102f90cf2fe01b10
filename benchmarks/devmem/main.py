"""Device memory copy bandwidth and capacity, one device per rank; see README.md and docs/benchmarks.md."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="devmem")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
ELEM = 4  # int32 elements
DEFAULT_BUDGET_S = 1.0  # time_budget_s when the case config has none (the CPU default's value)


def read_config(cfg):
    c = {"time_budget_s": harness.config_budget(cfg, "devmem", DEFAULT_BUDGET_S)}
    # explicit overrides of the counts the budget picks (null / absent: the budget decides)
    c.update({key: harness.config_opt_int(cfg, "devmem", key) for key in ("iters", "repeats")})
    c["warmup"] = harness.config_int(cfg, "devmem", "warmup", 2, minimum=0)
    c["seed"] = harness.config_int(cfg, "devmem", "seed", 1234, minimum=0)
    c["sizes_mib"] = harness.sizes_mib(cfg, "devmem", [64])
    c["capacity_search"] = bool(cfg.get("capacity_search", True))
    c["direct"] = bool(cfg.get("direct", True))
    c["inject_error"] = bool(cfg.get("inject_error", False))
    return c


# --------------------------------------------------------------------------- bandwidth

def random_nonzero(n, gen, device):
    """n random int32 values in [1, 2^31 - 1): never zero, so that an unwritten (zeroed) destination shows."""
    return torch.randint(1, 2 ** 31 - 1, (n,), generator=gen, device=device, dtype=torch.int32)


def mismatches(a, b):
    return 0 if torch.equal(a, b) else int((a != b).sum())


def measure_size(size_mib, gen, ctx, c, corrupt, budget_s):
    """Time dst.copy_(src) of size_mib MiB with harness.time_fn within budget_s seconds; verify dst == src
    afterwards. dst starts zeroed and src has no zero, so a copy that did not write shows as mismatches."""
    n = size_mib * MIB // ELEM
    src = random_nonzero(n, gen, ctx.device)
    dst = torch.zeros_like(src)
    t = harness.time_fn(lambda: dst.copy_(src), ctx, warmup=c["warmup"], iters=c["iters"], repeats=c["repeats"],  # noqa: F821 (bound before use)
                        before_repeat=ctx.barrier,  # ranks measure together
                        budget_s=budget_s, label=f"devmem {size_mib} MiB")
    if corrupt:
        dst[n // 2] = 0  # test-only: one wrong element
    moved = 2.0 * n * ELEM  # bytes read + bytes written per copy
    res = {"gbs": moved / t["median"] / 1e9, "gbs_min": moved / t["max"] / 1e9, "gbs_max": moved / t["min"] / 1e9,
           "time_ms": t["median"] * 1e3, "src_zeros": int((src == 0).sum()), "mismatches": mismatches(dst, src),
           "timing": t}
    del dst
    return res, src


def direct_copy(src, ctx, warmup, iters, repeats):
    """Plain torch loops, no harness timing helper: `dst.copy_(src)` and `src.clone()`, each timed with CUDA
    events (CPU: time.perf_counter), median of `repeats` samples of `iters` calls (the counts that the harness
    measurement of the same size chose within its budget share). Both results are verified.
    Returns {"copy_": (seconds, mismatches, measured seconds), "clone": (...)}."""
    def timed(op):
        for _ in range(warmup):
            op()
        if ctx.is_cuda:
            torch.cuda.synchronize(ctx.device)
        samples = []
        for _ in range(repeats):
            if ctx.is_cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    op()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                for _ in range(iters):
                    op()
                samples.append(time.perf_counter() - t0)
        return statistics.median(samples) / iters, sum(samples)

    out = {}
    dst = torch.zeros_like(src)
    sec, measured = timed(lambda: dst.copy_(src))  # noqa: F821 (bound before use)
    out["copy_"] = (sec, mismatches(dst, src), measured)
    del dst
    holder = {}

    def clone():
        holder.pop("c", None)  # free the previous clone first: at most one extra copy alive
        holder["c"] = src.clone()
    sec, measured = timed(clone)
    out["clone"] = (sec, mismatches(holder["c"], src), measured)
    holder.clear()
    return out


# --------------------------------------------------------------------------- capacity

def _is_oom(e):
    return isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e).lower()


def try_alloc(mib, device):
    """Does one allocation of `mib` MiB succeed? The tensor is freed and the cache emptied either way."""
    try:
        t = torch.empty(mib * MIB, dtype=torch.uint8, device=device)
        del t
        return True
    except RuntimeError as e:
        if not _is_oom(e):
            raise
        return False
    finally:
        torch.cuda.empty_cache()


def capacity_search(ctx):
    """Largest single allocation (MiB) that succeeds on this GPU: binary search in [0, total MiB], the upper
    bound from torch.cuda.mem_get_info; every attempt is freed. The result is then allocated once more and
    written (fill_) to prove it is usable."""
    dev = ctx.device
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(dev)
    lo, hi, attempts = 0, total // MIB, 0  # invariant: lo MiB succeeds (0 trivially), hi + 1 MiB fails
    guess = min(free // MIB, hi)  # the free memory usually (nearly) succeeds: try it first
    if guess > 0:
        attempts += 1
        if try_alloc(guess, dev):
            lo = guess
        else:
            hi = guess - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        attempts += 1
        if try_alloc(mid, dev):
            lo = mid
        else:
            hi = mid - 1
    verified = False
    if lo > 0:
        t = torch.empty(lo * MIB, dtype=torch.uint8, device=dev)
        t.fill_(0x5A)
        verified = int(t[0]) == 0x5A and int(t[-1]) == 0x5A
        del t
        torch.cuda.empty_cache()
    return {"max_alloc_mib": lo, "total_mib": total // MIB, "free_mib": free // MIB, "attempts": attempts,
            "verified": verified}


def host_memory():
    """(total bytes, available bytes or None) of the host, without allocating anything."""
    total = avail = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import psutil  # optional
        vm = psutil.virtual_memory()
        total, avail = vm.total, vm.available
    except Exception:
        pass
    return total, avail


# --------------------------------------------------------------------------- main

def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg)
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + ctx.rank)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=ctx.world_size)

    sizes, largest = c["sizes_mib"], c["sizes_mib"][-1]
    # the budget is split evenly over the timed windows: one per size, two more for the direct loops
    budget = harness.BudgetReport(c["time_budget_s"], len(sizes) + (2 if c["direct"] else 0),
                                  split="evenly over the timed windows: one per size, plus the direct copy_ and "
                                        "clone loops at the largest size (which reuse that size's counts)")
    LOG.event("RUN_START")
    per_size, src = {}, None
    for s in sizes:
        src = None  # free the previous size's source first
        per_size[s], src = measure_size(s, gen, ctx, c, c["inject_error"] and s == largest, budget.share_s)
        r = per_size[s]
        t = budget.add(f"{s}mib", r["timing"])
        LOG.event("STEP", size_mib=s, copy_bw_gbs=r["gbs"], time_ms=r["time_ms"], mismatches=r["mismatches"],
                  iters=t["iters"], repeats=t["repeats"], measured_s=t["measured_s"])
    direct = None
    if c["direct"]:
        ctx.barrier()  # ranks start together; outside the timed loops
        t = per_size[largest]["timing"]
        direct = direct_copy(src, ctx, t["warmup"], t["iters"], t["repeats"])
        for op, (_, _, measured) in direct.items():
            budget.add(f"direct_{op}", {"mode": f"counts of {largest}mib", "warmup": t["warmup"], "iters": t["iters"],
                                        "repeats": t["repeats"], "measured_s": measured})
        moved = 2.0 * src.numel() * ELEM
        direct = {op: {"gbs": moved / sec / 1e9, "mismatches": bad} for op, (sec, bad, _) in direct.items()}
        LOG.event("STEP", size_mib=largest, direct_copy_bw_gbs=direct["copy_"]["gbs"],
                  direct_clone_bw_gbs=direct["clone"]["gbs"])
    del src
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    cap = None
    cap_skip = None
    if not ctx.is_cuda:
        cap_skip = ("cpu: host RAM is shared with the OS and the other ranks, and overcommitted allocations "
                    "succeed without memory behind them; reporting the total only (no allocation search)")
    elif not c["capacity_search"]:
        cap_skip = "capacity_search: false"
    else:
        ctx.barrier()
        cap = capacity_search(ctx)
        LOG.event("STEP", **cap)
    LOG.event("RUN_END")

    # ---- verdict (all ranks agree)
    problems = []
    for s in sizes:
        r = per_size[s]
        if r["mismatches"] or r["src_zeros"]:
            problems.append(f"{s} MiB copy_: {r['mismatches']} wrong elements, {r['src_zeros']} zeros in the source")
    if direct:
        problems += [f"direct {op}: {d['mismatches']} wrong elements" for op, d in direct.items() if d["mismatches"]]
    if cap is not None and not (0 < cap["max_alloc_mib"] <= cap["total_mib"] and cap["verified"]):
        problems.append(f"capacity search: {cap}")
    any_failed = ctx.all_reduce([float(bool(problems))], "max")[0] > 0

    head = per_size[largest]["gbs"]
    details = {"sizes_mib": sizes, "bytes_counted": "read + written (2 x size per copy)",
               "data": "random int32, never 0",
               "mismatches": {f"{s}mib": per_size[s]["mismatches"] for s in sizes}}
    if direct:
        details["direct_mismatches"] = {op: d["mismatches"] for op, d in direct.items()}
    if cap is not None:
        details["capacity"] = cap
    if cap_skip:
        details["capacity_search_skipped"] = cap_skip
    details.update(budget.details())
    if c["inject_error"]:
        details["inject_error"] = True
    if any_failed:
        details.update(problems=problems, failed_on_some_rank=True)
        LOG.check_failed(details)

    metrics = {}
    for s in sizes:
        r = per_size[s]
        metrics[f"copy_bw_gbs_{s}mib"] = {"value": r["gbs"], "unit": "GB/s"}
        metrics[f"copy_bw_gbs_{s}mib_min"] = {"value": r["gbs_min"], "unit": "GB/s"}
        metrics[f"copy_bw_gbs_{s}mib_max"] = {"value": r["gbs_max"], "unit": "GB/s"}
    metrics["copy_time_ms"] = {"value": per_size[largest]["time_ms"], "unit": "ms"}
    per_rank = [("copy_bw_gbs", head, "GB/s")]  # aggregated over the ranks below
    if direct:
        best = max(direct, key=lambda op: direct[op]["gbs"])
        metrics["direct_copy_bw_gbs"] = {"value": direct[best]["gbs"], "unit": "GB/s"}
        metrics["direct_tensor_copy_bw_gbs"] = {"value": direct["copy_"]["gbs"], "unit": "GB/s"}
        metrics["direct_clone_bw_gbs"] = {"value": direct["clone"]["gbs"], "unit": "GB/s"}
        details["direct_best"] = best
    if cap is not None:
        metrics["max_alloc_gib"] = {"value": cap["max_alloc_mib"] / 1024, "unit": "GiB"}
        metrics["mem_total_gib"] = {"value": cap["total_mib"] / 1024, "unit": "GiB"}
        metrics["mem_free_gib"] = {"value": cap["free_mib"] / 1024, "unit": "GiB"}
        metrics["max_alloc_pct_of_total"] = {"value": 100.0 * cap["max_alloc_mib"] / cap["total_mib"], "unit": "%"}
        per_rank.append(("max_alloc_gib", cap["max_alloc_mib"] / 1024, "GiB"))
    else:
        total, avail = host_memory()
        if total:
            metrics["mem_total_gib"] = {"value": total / GIB, "unit": "GiB"}
        if avail:
            metrics["mem_available_gib"] = {"value": avail / GIB, "unit": "GiB"}
    metrics.update(harness.rank_aggregates(ctx, per_rank, totals=("copy_bw_gbs",)))
    details["per_rank"] = {"metric": "copy_bw_gbs", "values": harness.per_rank_list(ctx, head)}

    env = harness.env_info(ctx)
    peak, entry = harness.peak_for(cfg, "mem_bw_gbs", env["device_name"])
    if peak:
        metrics["pct_of_peak_mem_bw"] = {"value": 100.0 * head / peak, "unit": "%"}
        details["peaks"] = {"mem_bw": {"entry": entry, "key": "mem_bw_gbs", "value": peak}}
    else:
        details["peaks"] = {}
    ctx.destroy()
    LOG.finished(metric="copy_bw_gbs", value=head, unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
