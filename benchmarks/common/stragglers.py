"""The straggler view of a training run: every rank's step-time summary, the time of a probe of its compute alone
and its identity (node, host, local rank, GPU), gathered at the end of the run and judged by one rule.

In synchronous data-parallel training every rank waits for the slowest one inside the collectives, so all ranks'
steps take about as long and step times alone cannot name a straggler. The probe (a few forward + backward passes
of a piece of the model at the run's shape, with no collective in it) times each rank's compute on its own; the
rank with the slowest probe is named, and flagged when it exceeds the median over the ranks by more than
``margin_pct``. Each rank is judged by its best (minimum) probe time, not its median: the host's launch jitter
(a short, launch-bound probe waits on the CPU) only lengthens some passes, while a throttled clock, a slow card or
a GPU-bound neighbour lengthens every pass, the best one included. torch is imported lazily (the rule itself is
stdlib only).

    probe = stragglers.time_probe(lambda: piece(x).sum().backward(), ctx, steps=10)
    details["stragglers"] = stragglers.gathered_view(ctx, step_times, probe, margin_pct, "one decoder block")
"""
import math
import socket
import statistics
import sys
import time

from common import harness

# Identical GPUs of one node differ by 1-2% in a compute-bound pass (clocks under the power cap move that much);
# 5% is more than twice that, and in synchronous data-parallel training a rank 5% slower makes every step of the
# whole job 5% slower.
MARGIN_PCT = 5.0


def percentile(xs, q):
    """The q-quantile of xs, linearly interpolated; nan for an empty list."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


printable = harness.printable     # a host name or device text, kept only when short printable ASCII


def summary(times):
    """Count, median, p90, max and mean of a list of seconds (None values for an empty list)."""
    if not times:
        return {"n": 0, "median_s": None, "p90_s": None, "max_s": None, "mean_s": None}
    return {"n": len(times), "median_s": statistics.median(times), "p90_s": percentile(times, 0.9),
            "max_s": max(times), "mean_s": statistics.fmean(times)}


def view(rows, margin_pct=MARGIN_PCT, probe_what="the probe"):
    """The straggler record of the gathered ``rows`` (one per rank, by global rank: rank, node, host, local_rank,
    gpu, steps (a summary), probe (n, median_s, min_s)), every rank judged by its best probe (``judged_by``:
    "min"): ``median_probe_s`` (the median over the ranks of their best probes), ``limit_s``, ``slowest_rank`` and
    ``slowest`` (the rank with the slowest best probe, with its node, host, local rank, GPU, its best and median
    probe and how far its best is above ``median_probe_s``), ``flagged`` (the ranks whose best probe exceeds
    ``median_probe_s`` x (1 + margin_pct / 100); never with one rank), ``slowest_by_step_time``, the rule in words
    and every row."""
    out = {"margin_pct": margin_pct, "judged_by": "min",
           "rule": f"flagged: a rank whose best (minimum) probe time ({probe_what} forward + backward, its compute "
                   f"alone) exceeds the median over the ranks of their best probe times by more than "
                   f"{margin_pct:g}% (host launch jitter lengthens only some passes; a slow GPU lengthens every "
                   f"one, the best included)",
           "per_rank": rows, "slowest_rank": None, "flagged": []}
    steps = [r["steps"]["median_s"] for r in rows]
    if rows and all(v is not None for v in steps):
        out["slowest_by_step_time"] = rows[max(range(len(rows)), key=lambda i: steps[i])]["rank"]
    probes = [r["probe"].get("min_s") for r in rows]
    if not rows or any(v is None for v in probes):
        out["omitted"] = "no probe (straggler_probe_steps: 0)"
        return out
    median = statistics.median(probes)
    limit = median * (1.0 + margin_pct / 100.0)
    i = max(range(len(rows)), key=lambda k: probes[k])
    s = rows[i]
    out.update(median_probe_s=median, limit_s=limit, slowest_rank=s["rank"],
               slowest={"rank": s["rank"], "node": s["node"], "host": s["host"], "local_rank": s["local_rank"],
                        "gpu": s["gpu"], "probe_min_s": probes[i], "probe_median_s": s["probe"].get("median_s"),
                        "vs_median_pct": 100.0 * (probes[i] / median - 1.0) if median > 0 else None},
               flagged=[r["rank"] for r, v in zip(rows, probes) if len(rows) > 1 and v > limit])
    return out


def time_probe(fn, ctx, steps):
    """Seconds of each of ``steps`` calls of ``fn`` (after one untimed call), each between two device syncs. The
    test hook's ``slow`` fault (harness.slow_for_test) makes its rank sleep (factor - 1) x every call, inside the
    timing."""
    slow = harness.slow_for_test(ctx)
    times = []
    for i in range(1 + steps if steps else 0):
        ctx.sync()
        t0 = time.perf_counter()
        fn()
        ctx.sync()
        if slow > 1.0:
            time.sleep((slow - 1.0) * (time.perf_counter() - t0))
        if i:
            times.append(time.perf_counter() - t0)
    return times


def gather(ctx, row):
    """Every rank's ``row`` (a small JSON-able dict), indexed by global rank (all_gather_object: every rank calls)."""
    if not ctx.initialized or ctx.world_size == 1:
        return [row]
    import torch.distributed as dist

    rows = [None] * ctx.world_size
    dist.all_gather_object(rows, row)
    return rows


def gathered_view(ctx, step_times, probe_times, margin_pct, probe_what):
    """This rank's row (identity, step-time summary, probe) gathered from every rank and judged by view(): the same
    record on every rank. Rank 0 warns on stderr when a rank is flagged. Every rank must call it."""
    row = {"rank": ctx.rank, "node": harness.node_index(ctx), "host": printable(socket.gethostname()),
           "local_rank": ctx.local_rank, "gpu": harness.gpu_identity(ctx), "steps": summary(step_times),
           "probe": {"n": len(probe_times), "median_s": statistics.median(probe_times) if probe_times else None,
                     "min_s": min(probe_times) if probe_times else None}}
    out = view(gather(ctx, row), margin_pct, probe_what)
    if out["flagged"] and ctx.rank == 0:
        print(f"warning: straggler: rank(s) {out['flagged']} slower than the median by more than {margin_pct:g}% "
              f"(best probe times; slowest: rank {out['slowest_rank']}, local rank {out['slowest']['local_rank']})",
              file=sys.stderr, flush=True)
    return out
