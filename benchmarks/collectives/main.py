"""Collective bandwidth over a sweep of message sizes (all_reduce, all_gather, reduce_scatter, broadcast), with
algbw/busbw as nccl-tests defines them and an exact check of every result; see README.md and docs/benchmarks.md."""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="collectives")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

# torch is imported in main() once the case config is read: config errors (exit 2) and SKIPPED stay cheap.
torch = dist = None

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
REDUCING = ("all_reduce", "reduce_scatter")
# name -> (torch dtype attribute, significand bits incl. the implicit one)
DTYPES = {"fp32": ("float32", 24), "bf16": ("bfloat16", 8)}
NCCL_TYPES = {"fp32": "float", "bf16": "bfloat16"}     # nccl-tests' type names
IN_PLACE = ("all_reduce", "broadcast")                  # the ops run in place (output buffer = input buffer)
PERIOD = 61            # check pattern p(i) = 1 + i % 61 (a prime, so chunk borders never line up with it)
CHUNK = 1 << 24        # elements per step when writing / verifying the check pattern (bounds temporaries)
ROOT = 0               # broadcast root
SKIP_REASON = "collectives need at least 2 ranks"
DEFAULT_BUDGET_S = 2.0  # time_budget_s when the case config has none (the CPU default's value)
GROWTH_DECADES = 60    # in-place all_reduce: values start at >= 1e-30 and may grow to <= 1e30 between refills


# --------------------------------------------------------------------------- configuration

def read_config(cfg):
    """Pure Python (no torch): the validated case configuration."""
    keys = harness.CaseKeys(cfg, "collectives")
    return {"sizes": keys.size_sweep(), "ops": keys.choices("ops", list(OPS), OPS),
            "dtype": keys.choice("dtype", "fp32", DTYPES),
            "timing": keys.timing(warmup=5, budget_s=DEFAULT_BUDGET_S), "seed": keys.int("seed", 1234, minimum=0)}


def bus_factor(op, n):
    """nccl-tests' busbw / algbw."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


# --------------------------------------------------------------------------- which torch API runs each op

def _candidates(op, n):
    """(api name, fn(out, inp)) in order of preference; the list variants are the fallbacks for old torch/gloo."""
    if op == "all_gather":
        return [("all_gather_single", lambda out, inp: dist.all_gather_single(out, inp)),  # torch >= 2.13
                ("all_gather_into_tensor", lambda out, inp: dist.all_gather_into_tensor(out, inp)),
                ("all_gather", lambda out, inp: dist.all_gather(list(out.chunk(n)), inp))]
    if op == "reduce_scatter":
        return [("reduce_scatter_single", lambda out, inp: dist.reduce_scatter_single(out, inp)),
                ("reduce_scatter_tensor", lambda out, inp: dist.reduce_scatter_tensor(out, inp)),
                ("reduce_scatter", lambda out, inp: dist.reduce_scatter(out, list(inp.chunk(n))))]
    if op == "all_reduce":
        return [("all_reduce", lambda out, inp: dist.all_reduce(out))]
    return [("broadcast", lambda out, inp: dist.broadcast(out, ROOT))]


def resolve_apis(ops, ctx, dt):
    """Probe every op once on a few elements; returns ({op: (api, fn)}, {op: reason} for unsupported ops).
    An unsupported op raises on every rank alike (same torch, same backend), before any data moves;
    the verdict is all-reduced anyway so that the ranks run the same list."""
    n, apis, skipped = ctx.world_size, {}, {}
    for op in ops:
        errors = []
        for api, fn in _candidates(op, n):
            if not hasattr(dist, api):
                continue
            inp = torch.ones(4 * n if op == "reduce_scatter" else 4, dtype=dt, device=ctx.device)
            out = torch.empty(4 * n if op == "all_gather" else 4, dtype=dt, device=ctx.device)
            if op in ("all_reduce", "broadcast"):
                out = inp
            try:
                fn(out, inp)
                ok = True
            except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                ok = False
                errors.append(f"{api}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            ctx.sync()
            if ctx.all_reduce([1.0 if ok else 0.0], "min")[0] > 0:
                apis[op] = (api, fn)
                break
        if op not in apis:
            skipped[op] = f"not supported by the {ctx.backend} backend: " + ("; ".join(errors) or "no torch API")
            print(f"collectives: skipping {op}: {skipped[op]}", flush=True)
    return apis, skipped


# --------------------------------------------------------------------------- data

def _p(start, end, device):
    """The check pattern p(i) = 1 + i % PERIOD for i in [start, end), float64."""
    idx = torch.arange(start, end, dtype=torch.int64, device=device)
    return (idx % PERIOD + 1).to(torch.float64)


def fill_pattern(t, coef, dt, start=0):
    """t[i] = dt(coef * p(start + i)), chunk by chunk."""
    for a in range(0, t.numel(), CHUNK):
        b = min(a + CHUNK, t.numel())
        t[a:b].copy_((_p(start + a, start + b, t.device) * coef).to(dt))


class Expect:
    """Expected results of the check, in float64, chunk by chunk (same rounding of the inputs as fill_pattern)."""

    def __init__(self, n, dt, sig_bits):
        self.n, self.dt = n, dt
        # rank s holds dt((s + 1) * p); all of them exact in dt when n * PERIOD <= 2**sig_bits
        self.exact_inputs = n * PERIOD <= 2 ** sig_bits

    def reduced(self, start, end, device):
        """sum over ranks s of dt((s + 1) * p(i)) for i in [start, end)."""
        p = _p(start, end, device)
        if self.exact_inputs:
            return p * (self.n * (self.n + 1) / 2)
        total = torch.zeros_like(p)
        for s in range(self.n):
            total += (p * (s + 1)).to(self.dt).to(torch.float64)
        return total

    def gathered(self, start, end, count, device):
        """all_gather output position j comes from rank j // count, index j % count."""
        j = torch.arange(start, end, dtype=torch.int64, device=device)
        p = (j % count % PERIOD + 1).to(torch.float64)
        return (p * (j // count + 1).to(torch.float64)).to(self.dt).to(torch.float64)

    def plain(self, start, end, coef, device):
        return (_p(start, end, device) * coef).to(self.dt).to(torch.float64)


def max_rel_err(actual, expected_fn, tol=0.0):
    """(max_i |actual_i - e_i| / |e_i| (e_i >= 1 by construction), how many i exceed ``tol``: nccl-tests' #wrong
    of this rank); NaN propagates, so NaN fails the check (and counts as wrong)."""
    worst = torch.zeros((), dtype=torch.float64, device=actual.device)
    wrong = 0
    for a in range(0, actual.numel(), CHUNK):
        b = min(a + CHUNK, actual.numel())
        e = expected_fn(a, b)
        rel = (actual[a:b].to(torch.float64) - e).abs() / e.abs()
        worst = torch.maximum(worst, rel.max())
        wrong += int((~(rel <= tol)).sum().item())
    return worst.item(), wrong


def reduce_tol(n, sig_bits):
    """0 when every partial sum of the check is an integer that the dtype holds exactly (then any reduction
    order is exact), else (n - 1) roundings of at most 2**-(sig_bits - 1) relative each (a 2x margin)."""
    if PERIOD * n * (n + 1) / 2 <= 2 ** sig_bits:
        return 0.0
    return (n - 1) * 2.0 ** -(sig_bits - 1)


# --------------------------------------------------------------------------- one op at one size

def buffers(op, nbytes, elt, ctx, dt):
    """(count per rank, effective bytes S as nccl-tests counts them, input, output) or None if too small.
    all_reduce / broadcast: S = the buffer; all_gather: S = the total output; reduce_scatter: S = the total input."""
    n = ctx.world_size
    if op in ("all_reduce", "broadcast"):
        count = nbytes // elt
        if count < 1:
            return None
        buf = torch.empty(count, dtype=dt, device=ctx.device)
        return count, count * elt, buf, buf
    count = nbytes // (elt * n)
    if count < 1:
        return None
    big = torch.empty(count * n, dtype=dt, device=ctx.device)
    small = torch.empty(count, dtype=dt, device=ctx.device)
    if op == "all_gather":
        return count, count * n * elt, small, big
    return count, count * n * elt, big, small


def growth_cap(n):
    """In-place all_reduce multiplies the values by n per call: at most this many calls between refills keep
    them within GROWTH_DECADES decades (the calls per sample the budget may pick)."""
    return max(1, int(GROWTH_DECADES / math.log10(n)))


def run_one(op, fn, nbytes, ctx, dt, sig_bits, gen, expect, budget, label):
    """Time op at nbytes (slowest rank's median) within budget.share_s seconds (the window is recorded in
    ``budget`` as <op>_<label>), then check it once on the known pattern.
    Returns None when nbytes is too small for the op, else a result dict."""
    n, rank = ctx.world_size, ctx.rank
    elt = torch.empty((), dtype=dt).element_size()
    made = buffers(op, nbytes, elt, ctx, dt)
    if made is None:
        return None
    count, s_bytes, inp, out = made

    # timing data: never zeros, different on every rank (generator seeded with seed + rank)
    max_iters = None
    if op == "all_reduce":
        # in place, so the values grow by n per call: start at m0 in [1e-30, 1] so that 2 * m0 * n**k stays
        # below ~1e30 (finite, normal in fp32 and bf16) for k = max(warmup, iters) calls between refills; the
        # budget picks at most growth_cap(n) calls per sample (or calibration batch), refilled before each
        max_iters = growth_cap(n)
        k = max(budget.timing.warmup, budget.timing.iters or max_iters)
        m0 = 10.0 ** max(-30.0, min(0.0, 30.0 - k * math.log10(n)))

        def refill():
            inp.uniform_(m0, 2 * m0, generator=gen)  # positive: no cancellation towards zero

        def before_repeat():
            refill()
            ctx.barrier()
        refill()
    else:
        inp.uniform_(-1.0, 1.0, generator=gen)
        if out is not inp:
            out.uniform_(-1.0, 1.0, generator=gen)
        before_repeat = ctx.barrier
    t = budget.time(f"{op}_{label}", lambda: fn(out, inp), ctx, label=f"{op} {label}",
                    before_repeat=before_repeat, max_iters=max_iters)
    t_max = ctx.all_reduce([t["median"]], "max")[0]  # the slowest rank's median time

    # check: rank r holds (r + 1) * p; outputs start at -1 so that nothing stale can pass
    if op == "broadcast":
        if rank == ROOT:
            fill_pattern(inp, ROOT + 1, dt)
        else:
            inp.fill_(-1)
    else:
        fill_pattern(inp, rank + 1, dt)
        if out is not inp:
            out.fill_(-1)
    ctx.barrier()
    fn(out, inp)
    ctx.sync()
    harness.corrupt_for_test("collectives", out, rank == n - 1)
    dev = ctx.device
    tol = reduce_tol(n, sig_bits) if op in REDUCING else 0.0
    if op == "all_reduce":
        err, wrong = max_rel_err(out, lambda a, b: expect.reduced(a, b, dev), tol)
    elif op == "reduce_scatter":
        err, wrong = max_rel_err(out, lambda a, b: expect.reduced(rank * count + a, rank * count + b, dev), tol)
    elif op == "all_gather":
        err, wrong = max_rel_err(out, lambda a, b: expect.gathered(a, b, count, dev), tol)
    else:
        err, wrong = max_rel_err(out, lambda a, b: expect.plain(a, b, ROOT + 1, dev), tol)
    wrong = int(ctx.all_reduce([float(wrong)], "sum")[0])     # every rank's, as nccl-tests sums them

    algbw = s_bytes / t_max / 1e9
    return {"bytes": s_bytes, "count": count, "time_s": t_max, "time_s_this_rank": t["median"],
            "algbw": algbw, "busbw": algbw * bus_factor(op, n), "err": err, "tol": tol, "ok": err <= tol,
            "wrong": wrong, "warmup": t.get("warmup"), "iters": t["iters"], "repeats": t["repeats"],
            "measured_s": t["measured_s"]}


# --------------------------------------------------------------------------- main

def sweep(ops, apis, c, ctx, dt_name, gen, skipped, labels):
    """Every op at every size, within the budget split evenly over them; prints rank 0's table. Returns
    ({op: {size: result}}, the BudgetReport)."""
    n = ctx.world_size
    dt, sig_bits = getattr(torch, DTYPES[dt_name][0]), DTYPES[dt_name][1]
    expect = Expect(n, dt, sig_bits)
    # the same on every rank: the sizes too small for an op are known from the config, so a skipped window's
    # share is simply left unused
    budget = harness.BudgetReport(c["timing"], len(ops) * len(c["sizes"]),
                                  split="evenly over the timed windows: one per op and size")
    results = {op: {} for op in ops}
    for op in ops:
        for s in c["sizes"]:
            r = run_one(op, apis[op][1], s, ctx, dt, sig_bits, gen, expect, budget, labels[s])
            if r is None:
                skipped[f"{op}_{labels[s]}"] = (f"{s} bytes is less than one {dt_name} element per rank "
                                                f"({n} ranks)")
                continue
            results[op][s] = r
            harness.sweep_step(LOG, ctx, r, {"op": op}, labels[s],
                               {"algbw": r["algbw"], "busbw": r["busbw"], "max_rel_err": r["err"]},
                               f"{op:>15}", f"{r['algbw']:>11.3f} {r['busbw']:>11.3f} {r['err']:>9.2g}")
            if ctx.is_cuda:
                torch.cuda.empty_cache()
    return results, budget


def sweep_metrics(results, ran, labels):
    """busbw, algbw and time per op and size; busbw at the largest size per op. -> (metrics, headline op)."""
    head_op = "all_reduce" if "all_reduce" in ran else ran[0]
    metrics = {}
    for op in ran:
        for s, r in results[op].items():
            metrics[f"busbw_{op}_{labels[s]}"] = {"value": r["busbw"], "unit": "GB/s"}
            metrics[f"algbw_{op}_{labels[s]}"] = {"value": r["algbw"], "unit": "GB/s"}
            metrics[f"time_us_{op}_{labels[s]}"] = {"value": r["time_s"] * 1e6, "unit": "us"}
        if op != head_op:
            metrics[f"busbw_{op}"] = {"value": results[op][max(results[op])]["busbw"], "unit": "GB/s"}
        metrics[f"avg_busbw_{op}"] = {"value": avg_busbw(results[op]), "unit": "GB/s"}
    return metrics, head_op


def avg_busbw(op_results):
    """nccl-tests' `# Avg bus bandwidth` over one op's sizes: the mean of their busbw (one placement per size)."""
    return sum(r["busbw"] for r in op_results.values()) / len(op_results)


def sweep_rows(results, ran, dt_name):
    """details.sweep: one entry per op and size, ascending, in nccl-tests' terms (size: bytes S; count: elements
    per rank as nccl-tests passes them; type, redop, root as it prints them; wrong: #wrong over every rank)."""
    return [{"op": op, "size_bytes": r["bytes"], "count": r["count"], "dtype": NCCL_TYPES[dt_name],
             "redop": "sum" if op in REDUCING else "none", "root": ROOT if op == "broadcast" else -1,
             "placement": "in_place" if op in IN_PLACE else "out_of_place", "time_us": r["time_s"] * 1e6,
             "algbw": r["algbw"], "busbw": r["busbw"], "wrong": r["wrong"], "warmup": r["warmup"],
             "iters": r["iters"], "repeats": r["repeats"]}
            for op in ran for _, r in sorted(results[op].items())]


def main():
    global torch, dist
    _args, cfg = harness.parse_args()
    c = read_config(cfg)
    # world_size 1 would give busbw 0 for all_reduce and measure only local copies: not a collective
    harness.skip_below_ranks(LOG, 2, SKIP_REASON)

    import torch as _torch
    import torch.distributed as _dist
    torch, dist = _torch, _dist

    ctx = harness.setup_distributed(cfg)
    n = ctx.world_size
    nnodes = harness.env_int("NNODES", 1)
    dt_name = c["dtype"]
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + ctx.rank)
    apis, skipped = resolve_apis(c["ops"], ctx, getattr(torch, DTYPES[dt_name][0]))
    ops = [o for o in c["ops"] if o in apis]
    if not ops:
        harness.config_error(f"collectives: no op left to run on the {ctx.backend} backend (skipped: {skipped})")
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=n)

    labels = {s: harness.format_size(s) for s in c["sizes"]}
    if ctx.rank == 0:
        print(f"collectives: {n} ranks on {nnodes} node(s), backend {ctx.backend}, device {ctx.device.type}, "
              f"dtype {dt_name}, sizes {[labels[s] for s in c['sizes']]}", flush=True)
        print(f"{'op':>15} {'size':>6} {'bytes':>12} {'time_us':>11} {'algbw_GB/s':>11} {'busbw_GB/s':>11} "
              f"{'max_err':>9}", flush=True)
    LOG.event("RUN_START")
    results, budget = sweep(ops, apis, c, ctx, dt_name, gen, skipped, labels)
    LOG.event("RUN_END")

    # the verdict: every rank checked its own results; all ranks agree (check_all_ranks: MIN of the pass flags)
    failures = [{"op": op, "size": labels[s], "max_rel_err": r["err"], "tol": r["tol"]}
                for op in ops for s, r in results[op].items() if not r["ok"]]
    ran = [op for op in ops if results[op]]
    details = {
        "world_size": n, "nnodes": nnodes, "backend": ctx.backend, "dtype": dt_name, "ops": ran,
        "sizes": [labels[s] for s in c["sizes"]],
        # S below the nominal size: all_gather / reduce_scatter round down to a whole count per rank
        "bytes_rounded": {f"{op}_{labels[s]}": r["bytes"] for op in ran for s, r in results[op].items()
                          if r["bytes"] != s},
        "apis": {op: apis[op][0] for op in ops},
        "bus_factor": {op: bus_factor(op, n) for op in ran},
        "skipped": skipped,
        "timing": "slowest rank's median of `repeats` samples of `iters` back-to-back calls (counts per op and "
                  "size in `counts`, sized by the time budget unless iters/repeats are set)",
        "check": f"rank r holds (r + 1) * (1 + i % {PERIOD}); every rank verifies its result after each op and size",
        "sweep": sweep_rows(results, ran, dt_name),
    }
    for op in ran:
        details[f"max_rel_err_{op}"] = max(r["err"] for r in results[op].values())
        details[f"tol_{op}"] = max(r["tol"] for r in results[op].values())
    details.update(budget.details())
    harness.check_all_ranks(LOG, ctx, failures, details)
    if not ran:
        harness.config_error(f"collectives: every size is too small for {n} ranks (skipped: {skipped})")

    metrics, head_op = sweep_metrics(results, ran, labels)
    head = results[head_op][max(results[head_op])]
    details["headline"] = f"busbw_{head_op} at {labels[max(results[head_op])]}"
    env = harness.env_info(ctx, nnodes=nnodes, node_rank=harness.env_int("NODE_RANK", 0),
                           local_world_size=harness.env_int("LOCAL_WORLD_SIZE", n), dtype=dt_name,
                           sizes=[labels[s] for s in c["sizes"]])
    ctx.destroy()
    LOG.finished(metric=f"busbw_{head_op}", value=head["busbw"], unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
