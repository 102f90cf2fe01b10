"""Point-to-point (send/recv) bandwidth between pairs of ranks over a sweep of message sizes, one direction and
both at once, with the received data checked; see README.md and docs/benchmarks.md."""
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="p2p")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

# torch is imported in main() once the case config is read: config errors (exit 2) and SKIPPED stay cheap.
torch = dist = None

MODES = ("uni", "bi")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
PERIOD = 61            # check pattern p(i) = 1 + i % 61
CHUNK = 1 << 24        # elements per step when writing / verifying the check pattern
SKIP_REASON = "p2p needs at least 2 ranks"
DEFAULT_BUDGET_S = 2.0  # time_budget_s when the case config has none (the CPU default's value)


# --------------------------------------------------------------------------- configuration

def read_config(cfg):
    """Pure Python (no torch): the validated case configuration."""
    c = {"sizes": harness.size_sweep(cfg, "p2p")}
    pairs = cfg.get("pairs", [[0, 1]])
    ok = isinstance(pairs, list) and pairs and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                    for x in p) and p[0] != p[1] for p in pairs)
    if not ok:
        harness.config_error(f"p2p: pairs must be a non-empty list of [src, dst] rank pairs with src != dst, "
                             f"got {pairs!r}")
    c["pairs"] = [list(p) for p in dict.fromkeys(tuple(p) for p in pairs)]
    modes = cfg.get("modes", list(MODES))
    modes = [modes] if isinstance(modes, str) else modes
    if not isinstance(modes, list) or not modes or any(m not in MODES for m in modes):
        harness.config_error(f"p2p: modes must be a non-empty list of {list(MODES)}, got {modes!r}")
    c["modes"] = [m for m in MODES if m in modes]
    c["dtype"] = cfg.get("dtype", "fp32")
    if c["dtype"] not in DTYPES:
        harness.config_error(f"p2p: dtype must be one of {sorted(DTYPES)}, got {c['dtype']!r}")
    c["warmup"] = harness.config_int(cfg, "p2p", "warmup", 5, 0)
    c["time_budget_s"] = harness.config_budget(cfg, "p2p", DEFAULT_BUDGET_S)
    # explicit overrides of the counts the budget picks (null / absent: the budget decides)
    c["iters"] = harness.config_opt_int(cfg, "p2p", "iters")
    c["repeats"] = harness.config_opt_int(cfg, "p2p", "repeats")
    c["seed"] = harness.config_int(cfg, "p2p", "seed", 1234, 0)
    c["inject_error"] = bool(cfg.get("inject_error", False))
    return c


# --------------------------------------------------------------------------- data

def _p(start, end, device):
    idx = torch.arange(start, end, dtype=torch.int64, device=device)
    return (idx % PERIOD + 1).to(torch.float64)


def fill_pattern(t, coef, dt):
    """t[i] = dt(coef * p(i)), chunk by chunk."""
    for a in range(0, t.numel(), CHUNK):
        b = min(a + CHUNK, t.numel())
        t[a:b].copy_((_p(a, b, t.device) * coef).to(dt))


def mismatches(t, coef, dt):
    """How many elements of t differ from dt(coef * p(i)) (exact: the data only moved). NaN counts."""
    bad = 0
    for a in range(0, t.numel(), CHUNK):
        b = min(a + CHUNK, t.numel())
        e = (_p(a, b, t.device) * coef).to(dt)
        bad += int((t[a:b] != e).sum().item())
    return bad


# --------------------------------------------------------------------------- one pair, one size, one mode

def run_one(pair, mode, nbytes, c, ctx, dt, gen, inject_rank, budget, label):
    """Every rank calls this (the ranks outside the pair only join the barriers and the all-reduces that agree
    on the counts). The timing fills budget.share_s seconds (recorded in ``budget`` as <mode>_<src>_<dst>_<label>).
    Returns a result dict, or None when nbytes is less than one element."""
    src, dst = pair
    rank = ctx.rank
    elt = torch.empty((), dtype=dt).element_size()
    count = nbytes // elt
    if count < 1:
        return None  # the same on every rank: nobody joins a barrier for it
    active = rank in pair
    peer = dst if rank == src else src
    if active:
        sbuf = torch.empty(count, dtype=dt, device=ctx.device).uniform_(-1.0, 1.0, generator=gen)  # never zeros
        rbuf = torch.empty(count, dtype=dt, device=ctx.device).uniform_(-1.0, 1.0, generator=gen)
        if mode == "uni":
            if rank == src:
                def fn():
                    dist.send(sbuf, dst)
            else:
                def fn():
                    dist.recv(rbuf, src)
        else:
            def fn():
                ops = [dist.P2POp(dist.isend, sbuf, peer), dist.P2POp(dist.irecv, rbuf, peer)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
    else:
        def fn():
            pass
    # the idle ranks run the same number of barriers (before_repeat) and time nothing; time_fn all-reduces the
    # calibration (MAX), so the idle ranks take the pair's counts
    t = budget.add(f"{mode}_{src}_{dst}_{label}", harness.time_fn(
        fn, ctx, warmup=c["warmup"], iters=c["iters"], repeats=c["repeats"], before_repeat=ctx.barrier,
        budget_s=budget.share_s, label=f"p2p {mode} {src}->{dst} {label}"))
    t_pair = ctx.all_reduce([t["median"] if active else 0.0], "max")[0]  # the slower of the two ranks

    # check: the sender's data is (sender + 1) * p; the receiver's buffer starts at -1
    bad, checked = 0, 0
    if active:
        fill_pattern(sbuf, rank + 1, dt)
        rbuf.fill_(-1)
    ctx.barrier()
    if active:
        fn()
        ctx.sync()
        receives = mode == "bi" or rank == dst
        if receives:
            if c["inject_error"] and rank == inject_rank:
                rbuf[:1].neg_()  # test-only: corrupt what this rank received so that the check must fail
            bad = mismatches(rbuf, peer + 1, dt)
            checked = count
    moved = count * elt * (2 if mode == "bi" else 1)
    return {"bytes": count * elt, "time_s": t_pair, "bw": moved / t_pair / 1e9, "bad": bad, "checked": checked,
            "iters": t["iters"], "repeats": t["repeats"], "measured_s": t["measured_s"]}


# --------------------------------------------------------------------------- main

def node_of(rank):
    """This rank's node: NODE_RANK (the launcher sets it), else rank // LOCAL_WORLD_SIZE."""
    if os.environ.get("NODE_RANK", "").strip():
        return harness.env_int("NODE_RANK", 0)
    lws = harness.env_int("LOCAL_WORLD_SIZE", 0)
    return rank // lws if lws > 0 else None


def main():
    global torch, dist
    _args, cfg = harness.parse_args()
    c = read_config(cfg)
    world_size = harness.skip_below_ranks(LOG, 2, SKIP_REASON)
    skipped = {}
    pairs = []
    for p in c["pairs"]:
        if max(p) >= world_size:
            skipped[f"{p[0]}_{p[1]}"] = f"pair {p} outside WORLD_SIZE={world_size}"
        else:
            pairs.append(p)
    if not pairs:
        LOG.skipped(f"no pair of {c['pairs']} within WORLD_SIZE={world_size}")

    import torch as _torch
    import torch.distributed as _dist
    torch, dist = _torch, _dist

    ctx = harness.setup_distributed(cfg)
    rank, n = ctx.rank, ctx.world_size
    nnodes = harness.env_int("NNODES", 1)
    dt_name = c["dtype"]
    dt = getattr(torch, DTYPES[dt_name])
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + rank)
    # where every rank lives (also the first collective of the group, before any send/recv)
    where = [None] * n
    dist.all_gather_object(where, {"node": node_of(rank), "host": socket.gethostname()})
    pair_info = []
    for src, dst in pairs:
        a, b = where[src], where[dst]
        same = a["node"] == b["node"] if a["node"] is not None and b["node"] is not None else a["host"] == b["host"]
        pair_info.append({"pair": [src, dst], "same_node": bool(same), "nodes": [a["node"], b["node"]],
                          "hosts": [a["host"], b["host"]]})
    inject_rank = pairs[0][1]
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=n)

    labels = {s: harness.format_size(s) for s in c["sizes"]}
    if rank == 0:
        print(f"p2p: {n} ranks on {nnodes} node(s), backend {ctx.backend}, device {ctx.device.type}, dtype {dt_name}, "
              f"pairs {[(i['pair'], 'same node' if i['same_node'] else 'cross node') for i in pair_info]}",
              flush=True)
        print(f"{'pair':>7} {'mode':>4} {'size':>6} {'bytes':>12} {'time_us':>11} {'GB/s':>10} {'bad':>5}", flush=True)
    # the budget is split evenly over the timed windows: one per pair, size and mode
    budget = harness.BudgetReport(c["time_budget_s"], len(pairs) * len(c["sizes"]) * len(c["modes"]),
                                  split="evenly over the timed windows: one per pair, size and mode")
    LOG.event("RUN_START")
    results = {}
    for src, dst in pairs:
        for s in c["sizes"]:
            for mode in c["modes"]:
                r = run_one([src, dst], mode, s, c, ctx, dt, gen, inject_rank, budget, labels[s])
                if r is None:
                    skipped[f"{src}_{dst}_{labels[s]}"] = f"{s} bytes is less than one {dt_name} element"
                    continue
                results[(src, dst, mode, s)] = r
                LOG.event("STEP", pair=[src, dst], mode=mode, size=labels[s], bytes=r["bytes"],
                          time_us=r["time_s"] * 1e6, bw=r["bw"], mismatches=r["bad"], iters=r["iters"],
                          repeats=r["repeats"], measured_s=r["measured_s"])
                if rank == 0:
                    print(f"{f'{src}->{dst}' if mode == 'uni' else f'{src}<->{dst}':>7} {mode:>4} {labels[s]:>6} "
                          f"{r['bytes']:>12} {r['time_s'] * 1e6:>11.2f} {r['bw']:>10.3f} {r['bad']:>5}", flush=True)
            if ctx.is_cuda:
                torch.cuda.empty_cache()
    LOG.event("RUN_END")

    failures = [{"pair": [k[0], k[1]], "mode": k[2], "size": labels[k[3]], "mismatches": r["bad"]}
                for k, r in results.items() if r["bad"]]
    details = {
        "world_size": n, "nnodes": nnodes, "backend": ctx.backend, "dtype": dt_name, "modes": c["modes"],
        "sizes": [labels[s] for s in c["sizes"]], "pairs": pair_info, "skipped": skipped,
        "checked_elements_this_rank": sum(r["checked"] for r in results.values()),
        "timing": "slower rank of the pair, median of `repeats` samples of `iters` back-to-back transfers (counts "
                  "per pair, size and mode in `counts`, sized by the time budget unless iters/repeats are set)",
        "bw": "uni: bytes / time; bi: 2 x bytes / time (both directions together); GB = 1e9 B",
        "check": f"the sender's data is (sender + 1) * (1 + i % {PERIOD}); the receiver compares every element",
    }
    details.update(budget.details())
    if c["inject_error"]:
        details["inject_error"] = True
    harness.check_all_ranks(LOG, ctx, failures, details)
    if not results:
        harness.config_error(f"p2p: every size is too small (skipped: {skipped})")

    metrics = {}
    for (src, dst, mode, s), r in results.items():
        metrics[f"bw_{mode}_{src}_{dst}_{labels[s]}"] = {"value": r["bw"], "unit": "GB/s"}
        metrics[f"time_us_{mode}_{src}_{dst}_{labels[s]}"] = {"value": r["time_s"] * 1e6, "unit": "us"}
    largest = {}
    for (src, dst, mode, s) in results:
        largest[(src, dst, mode)] = max(s, largest.get((src, dst, mode), 0))
    for (src, dst, mode), s in largest.items():
        metrics[f"bw_{mode}_{src}_{dst}"] = {"value": results[(src, dst, mode, s)]["bw"], "unit": "GB/s"}
    first = pairs[0]
    head_mode = c["modes"][0]
    for mode in c["modes"][1:]:
        metrics[f"bw_{mode}"] = dict(metrics[f"bw_{mode}_{first[0]}_{first[1]}"])
    head_size = largest[(first[0], first[1], head_mode)]
    head = results[(first[0], first[1], head_mode, head_size)]
    details["headline"] = f"bw_{head_mode} of pair {first} at {labels[head_size]}"
    env = harness.env_info(ctx, nnodes=nnodes, node_rank=node_of(rank), dtype=dt_name, pairs=pair_info,
                           sizes=[labels[s] for s in c["sizes"]])
    ctx.destroy()
    LOG.finished(metric=f"bw_{head_mode}", value=head["bw"], unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
