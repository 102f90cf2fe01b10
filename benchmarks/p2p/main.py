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
    keys = harness.CaseKeys(cfg, "p2p")
    c = {"sizes": keys.size_sweep()}
    pairs = cfg.get("pairs", [[0, 1]])
    ok = isinstance(pairs, list) and pairs and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                    for x in p) and p[0] != p[1] for p in pairs)
    if not ok:
        keys.error(f"pairs must be a non-empty list of [src, dst] rank pairs with src != dst, got {pairs!r}")
    c["pairs"] = [list(p) for p in dict.fromkeys(tuple(p) for p in pairs)]
    modes = keys.choices("modes", list(MODES), MODES)
    c["modes"] = [m for m in MODES if m in modes]
    c["dtype"] = keys.choice("dtype", "fp32", DTYPES)
    c["timing"] = keys.timing(warmup=5, budget_s=DEFAULT_BUDGET_S)
    c["seed"] = keys.int("seed", 1234, minimum=0)
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

def run_one(pair, mode, nbytes, ctx, dt, gen, fault_rank, budget, label):
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
    t = budget.time(f"{mode}_{src}_{dst}_{label}", fn, ctx, label=f"p2p {mode} {src}->{dst} {label}",
                    before_repeat=ctx.barrier)
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
            harness.corrupt_for_test("p2p", rbuf, rank == fault_rank)
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


def pairs_within(c, world_size):
    """The configured pairs within WORLD_SIZE, and {"<src>_<dst>": why} for the others."""
    pairs, skipped = [], {}
    for p in c["pairs"]:
        if max(p) >= world_size:
            skipped[f"{p[0]}_{p[1]}"] = f"pair {p} outside WORLD_SIZE={world_size}"
        else:
            pairs.append(p)
    return pairs, skipped


def where_pairs_are(ctx, pairs):
    """For every pair: its ranks' nodes and hosts, and whether they share a node (an all_gather_object: also
    the first collective of the group, before any send/recv)."""
    where = [None] * ctx.world_size
    dist.all_gather_object(where, {"node": node_of(ctx.rank), "host": socket.gethostname()})
    info = []
    for src, dst in pairs:
        a, b = where[src], where[dst]
        same = a["node"] == b["node"] if a["node"] is not None and b["node"] is not None else a["host"] == b["host"]
        info.append({"pair": [src, dst], "same_node": bool(same), "nodes": [a["node"], b["node"]],
                     "hosts": [a["host"], b["host"]]})
    return info


def sweep(pairs, c, ctx, dt, gen, skipped, labels):
    """Every pair, size and mode within the budget split evenly over them; prints rank 0's table. Returns
    ({(src, dst, mode, size): result}, the BudgetReport)."""
    budget = harness.BudgetReport(c["timing"], len(pairs) * len(c["sizes"]) * len(c["modes"]),
                                  split="evenly over the timed windows: one per pair, size and mode")
    results = {}
    for src, dst in pairs:
        for s in c["sizes"]:
            for mode in c["modes"]:
                r = run_one([src, dst], mode, s, ctx, dt, gen, pairs[0][1], budget, labels[s])
                if r is None:
                    skipped[f"{src}_{dst}_{labels[s]}"] = f"{s} bytes is less than one {c['dtype']} element"
                    continue
                results[(src, dst, mode, s)] = r
                harness.sweep_step(LOG, ctx, r, {"pair": [src, dst], "mode": mode}, labels[s],
                                   {"bw": r["bw"], "mismatches": r["bad"]},
                                   f"{f'{src}->{dst}' if mode == 'uni' else f'{src}<->{dst}':>7} {mode:>4}",
                                   f"{r['bw']:>10.3f} {r['bad']:>5}")
            if ctx.is_cuda:
                torch.cuda.empty_cache()
    return results, budget


def sweep_metrics(results, c, first, labels):
    """bw and time per pair, mode and size; bw at the largest size per pair and mode; the other modes of the
    first pair. -> (metrics, headline result, headline size)."""
    metrics, largest = {}, {}
    for (src, dst, mode, s), r in results.items():
        metrics[f"bw_{mode}_{src}_{dst}_{labels[s]}"] = {"value": r["bw"], "unit": "GB/s"}
        metrics[f"time_us_{mode}_{src}_{dst}_{labels[s]}"] = {"value": r["time_s"] * 1e6, "unit": "us"}
        largest[(src, dst, mode)] = max(s, largest.get((src, dst, mode), 0))
    for (src, dst, mode), s in largest.items():
        metrics[f"bw_{mode}_{src}_{dst}"] = {"value": results[(src, dst, mode, s)]["bw"], "unit": "GB/s"}
    for mode in c["modes"][1:]:
        metrics[f"bw_{mode}"] = dict(metrics[f"bw_{mode}_{first[0]}_{first[1]}"])
    head_size = largest[(first[0], first[1], c["modes"][0])]
    return metrics, results[(first[0], first[1], c["modes"][0], head_size)], head_size


def main():
    global torch, dist
    _args, cfg = harness.parse_args()
    c = read_config(cfg)
    world_size = harness.skip_below_ranks(LOG, 2, SKIP_REASON)
    pairs, skipped = pairs_within(c, world_size)
    if not pairs:
        LOG.skipped(f"no pair of {c['pairs']} within WORLD_SIZE={world_size}")

    import torch as _torch
    import torch.distributed as _dist
    torch, dist = _torch, _dist

    ctx = harness.setup_distributed(cfg)
    rank, n = ctx.rank, ctx.world_size
    nnodes = harness.env_int("NNODES", 1)
    dt_name = c["dtype"]
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + rank)
    pair_info = where_pairs_are(ctx, pairs)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=n)

    labels = {s: harness.format_size(s) for s in c["sizes"]}
    if rank == 0:
        print(f"p2p: {n} ranks on {nnodes} node(s), backend {ctx.backend}, device {ctx.device.type}, dtype {dt_name}, "
              f"pairs {[(i['pair'], 'same node' if i['same_node'] else 'cross node') for i in pair_info]}",
              flush=True)
        print(f"{'pair':>7} {'mode':>4} {'size':>6} {'bytes':>12} {'time_us':>11} {'GB/s':>10} {'bad':>5}", flush=True)
    LOG.event("RUN_START")
    results, budget = sweep(pairs, c, ctx, getattr(torch, DTYPES[dt_name]), gen, skipped, labels)
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
    harness.check_all_ranks(LOG, ctx, failures, details)
    if not results:
        harness.config_error(f"p2p: every size is too small (skipped: {skipped})")

    metrics, head, head_size = sweep_metrics(results, c, pairs[0], labels)
    details["headline"] = f"bw_{c['modes'][0]} of pair {pairs[0]} at {labels[head_size]}"
    env = harness.env_info(ctx, nnodes=nnodes, node_rank=node_of(rank), dtype=dt_name, pairs=pair_info,
                           sizes=[labels[s] for s in c["sizes"]])
    ctx.destroy()
    LOG.finished(metric=f"bw_{c['modes'][0]}", value=head["bw"], unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
