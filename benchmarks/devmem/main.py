"""Device memory copy bandwidth and capacity, one device per rank; see README.md and docs/benchmarks.md."""
import os
import sys

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
    keys = harness.CaseKeys(cfg, "devmem")
    return {"timing": keys.timing(warmup=2, budget_s=DEFAULT_BUDGET_S), "seed": keys.int("seed", 1234, minimum=0),
            "sizes_mib": keys.sizes_mib([64]), "capacity_search": keys.flag("capacity_search", True),
            "direct": keys.flag("direct", True)}


# --------------------------------------------------------------------------- bandwidth

def random_nonzero(n, gen, device):
    """n random int32 values in [1, 2^31 - 1): never zero, so that an unwritten (zeroed) destination shows."""
    return torch.randint(1, 2 ** 31 - 1, (n,), generator=gen, device=device, dtype=torch.int32)


def mismatches(a, b):
    return 0 if torch.equal(a, b) else int((a != b).sum())


def measure_size(size_mib, gen, ctx, budget, largest):
    """Time dst.copy_(src) of size_mib MiB within one share of the budget (window "<size>mib"); verify dst == src
    afterwards. dst starts zeroed and src has no zero, so a copy that did not write shows as mismatches."""
    n = size_mib * MIB // ELEM
    src = random_nonzero(n, gen, ctx.device)
    dst = torch.zeros_like(src)
    t = budget.time(f"{size_mib}mib", lambda: dst.copy_(src), ctx, label=f"devmem {size_mib} MiB",
                    before_repeat=ctx.barrier, aligned=True)  # ranks measure together, in one aligned window
    harness.corrupt_for_test("devmem", dst, largest)
    moved = 2.0 * n * ELEM  # bytes read + bytes written per copy
    res = {"gbs": moved / t["median"] / 1e9, "gbs_min": moved / t["max"] / 1e9, "gbs_max": moved / t["min"] / 1e9,
           "time_ms": t["median"] * 1e3, "src_zeros": int((src == 0).sum()), "mismatches": mismatches(dst, src),
           "timing": t}
    return res, src


def direct_copy(src, ctx, budget, like, like_name):
    """Plain torch operations, `dst.copy_(src)` and `src.clone()`, each timed with the counts that the harness
    measurement of the same size chose (``like``); both results are verified.
    Returns {"copy_": {"gbs", "mismatches"}, "clone": {...}}."""
    moved = 2.0 * src.numel() * ELEM
    dst = torch.zeros_like(src)
    t = budget.repeat("direct_copy_", lambda: dst.copy_(src), ctx, like, like_name)
    out = {"copy_": {"gbs": moved / t["median"] / 1e9, "mismatches": mismatches(dst, src)}}
    dst = None  # freed before the clone loop
    holder = {}

    def clone():
        holder.pop("c", None)  # free the previous clone first: at most one extra copy alive
        holder["c"] = src.clone()
    t = budget.repeat("direct_clone", clone, ctx, like, like_name)
    out["clone"] = {"gbs": moved / t["median"] / 1e9, "mismatches": mismatches(holder["c"], src)}
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

def measure_capacity(ctx, c):
    """(capacity search result or None, why it was not run or None)."""
    if not ctx.is_cuda:
        return None, ("cpu: host RAM is shared with the OS and the other ranks, and overcommitted allocations "
                      "succeed without memory behind them; reporting the total only (no allocation search)")
    if not c["capacity_search"]:
        return None, "capacity_search: false"
    ctx.barrier()
    cap = capacity_search(ctx)
    LOG.event("STEP", **cap)
    return cap, None


def memory_metrics(cap):
    """The memory figures: the capacity search's (GPU), else the host's total and available memory."""
    if cap is not None:
        return {"max_alloc_gib": {"value": cap["max_alloc_mib"] / 1024, "unit": "GiB"},
                "mem_total_gib": {"value": cap["total_mib"] / 1024, "unit": "GiB"},
                "mem_free_gib": {"value": cap["free_mib"] / 1024, "unit": "GiB"},
                "max_alloc_pct_of_total": {"value": 100.0 * cap["max_alloc_mib"] / cap["total_mib"], "unit": "%"}}
    metrics = {}
    total, avail = host_memory()
    if total:
        metrics["mem_total_gib"] = {"value": total / GIB, "unit": "GiB"}
    if avail:
        metrics["mem_available_gib"] = {"value": avail / GIB, "unit": "GiB"}
    return metrics


def problems_of(per_size, direct, cap):
    problems = [f"{s} MiB copy_: {r['mismatches']} wrong elements, {r['src_zeros']} zeros in the source"
                for s, r in per_size.items() if r["mismatches"] or r["src_zeros"]]
    if direct:
        problems += [f"direct {op}: {d['mismatches']} wrong elements" for op, d in direct.items() if d["mismatches"]]
    if cap is not None and not (0 < cap["max_alloc_mib"] <= cap["total_mib"] and cap["verified"]):
        problems.append(f"capacity search: {cap}")
    return problems


def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg)
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + ctx.rank)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=ctx.world_size)

    sizes, largest = c["sizes_mib"], c["sizes_mib"][-1]
    # the budget is split evenly over the timed windows: one per size, two more for the direct loops
    budget = harness.BudgetReport(c["timing"], len(sizes) + (2 if c["direct"] else 0),
                                  split="evenly over the timed windows: one per size, plus the direct copy_ and "
                                        "clone loops at the largest size (which reuse that size's counts)")
    LOG.event("RUN_START")
    per_size, src = {}, None
    for s in sizes:
        src = None  # free the previous size's source first
        per_size[s], src = measure_size(s, gen, ctx, budget, s == largest)
        r, t = per_size[s], per_size[s]["timing"]
        LOG.event("STEP", size_mib=s, copy_bw_gbs=r["gbs"], time_ms=r["time_ms"], mismatches=r["mismatches"],
                  iters=t["iters"], repeats=t["repeats"], measured_s=t["measured_s"])
    direct = None
    if c["direct"]:
        ctx.barrier()  # ranks start together; outside the timed loops
        direct = direct_copy(src, ctx, budget, per_size[largest]["timing"], f"{largest}mib")
        LOG.event("STEP", size_mib=largest, direct_copy_bw_gbs=direct["copy_"]["gbs"],
                  direct_clone_bw_gbs=direct["clone"]["gbs"])
    del src
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    cap, cap_skip = measure_capacity(ctx, c)
    LOG.event("RUN_END")

    problems = problems_of(per_size, direct, cap)
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
    harness.fail_on_any_rank(LOG, ctx, problems, details, problems=problems)

    metrics = {}
    for s in sizes:
        r = per_size[s]
        metrics[f"copy_bw_gbs_{s}mib"] = {"value": r["gbs"], "unit": "GB/s"}
        metrics[f"copy_bw_gbs_{s}mib_min"] = {"value": r["gbs_min"], "unit": "GB/s"}
        metrics[f"copy_bw_gbs_{s}mib_max"] = {"value": r["gbs_max"], "unit": "GB/s"}
    metrics["copy_time_ms"] = {"value": per_size[largest]["time_ms"], "unit": "ms"}
    if direct:
        best = max(direct, key=lambda op: direct[op]["gbs"])
        metrics["direct_copy_bw_gbs"] = {"value": direct[best]["gbs"], "unit": "GB/s"}
        metrics["direct_tensor_copy_bw_gbs"] = {"value": direct["copy_"]["gbs"], "unit": "GB/s"}
        metrics["direct_clone_bw_gbs"] = {"value": direct["clone"]["gbs"], "unit": "GB/s"}
        details["direct_best"] = best
    metrics.update(memory_metrics(cap))
    per_rank = [("copy_bw_gbs", head, "GB/s")] + ([("max_alloc_gib", cap["max_alloc_mib"] / 1024, "GiB")] if cap
                                                  else [])
    metrics.update(harness.rank_aggregates(ctx, per_rank))
    node, figures = harness.node_metrics(ctx, [("copy_bw_gbs", head, "GB/s", per_size[largest]["timing"]["window"])])
    metrics.update(node)        # copy_bw_gbs_node: this node's sum, only over simultaneous windows
    details["node_figures"] = figures["copy_bw_gbs"]
    details["per_rank"] = {"metric": "copy_bw_gbs", "values": harness.per_rank_list(ctx, head)}

    env = harness.env_info(ctx)
    peak, entry = harness.peak_for(cfg, "mem_bw_gbs", env["device_name"])
    details["peaks"] = {}
    if peak:
        metrics["pct_of_peak_mem_bw"] = {"value": 100.0 * head / peak, "unit": "%"}
        details["peaks"] = {"mem_bw": {"entry": entry, "key": "mem_bw_gbs", "value": peak}}
    ctx.destroy()
    LOG.finished(metric="copy_bw_gbs", value=head, unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
