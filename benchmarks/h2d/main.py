"""Host <-> device copy bandwidth (pinned and pageable host memory), one GPU per rank; see README.md and
docs/benchmarks.md."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="h2d")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402

MIB = 1 << 20
ELEM = 4  # int32 elements
MODES = ("pinned", "pageable")
DIRECTIONS = ("h2d", "d2h")
NO_DEVICE = "no accelerator: host-device copies need a GPU"
DEFAULT_BUDGET_S = 2.0  # time_budget_s when the case config has none


def read_config(cfg):
    keys = harness.CaseKeys(cfg, "h2d")
    return {"timing": keys.timing(warmup=2, budget_s=DEFAULT_BUDGET_S), "seed": keys.int("seed", 1234, minimum=0),
            "sizes_mib": keys.sizes_mib([1, 16, 64, 256, 1024])}


def checksum(t):
    """Sum of the int32 values in int64 (computed where the tensor lives)."""
    return int(t.sum(dtype=torch.int64))


def measure_size(size_mib, gen, ctx, budget, largest):
    """Both directions with pinned and pageable host buffers for one size, each within budget.share_s seconds
    (windows recorded in ``budget``). Returns ({"<dir>_<mode>": {gbs, gbs_min, gbs_max, ok, ...}}, problems)."""
    n = size_mib * MIB // ELEM
    nbytes = float(n * ELEM)  # bytes over the link per copy
    ref = torch.randint(1, 2 ** 31 - 1, (n,), generator=gen, dtype=torch.int32)  # host, never 0
    ref_sum = checksum(ref)
    dev_ref = ref.to(ctx.device)  # an independent upload: the H2D results must equal it, the D2H source
    problems = []
    if checksum(dev_ref) != ref_sum:
        problems.append(f"{size_mib} MiB: reference upload checksum differs")
    out = {}

    def timed(fn, key):
        t = budget.time(f"{key}_{size_mib}mib", fn, ctx, label=f"h2d {key} {size_mib} MiB",
                        before_repeat=ctx.barrier, aligned=True)  # ranks measure together, in one aligned window
        return {"gbs": nbytes / t["median"] / 1e9, "gbs_min": nbytes / t["max"] / 1e9,
                "gbs_max": nbytes / t["min"] / 1e9, "time_ms": t["median"] * 1e3, "window": t["window"]}

    for mode in MODES:
        pinned = mode == "pinned"
        host = torch.empty(n, dtype=torch.int32, pin_memory=pinned)
        host.copy_(ref)
        nb = pinned  # async copies only from/to pinned memory; pageable copies are synchronous anyway

        # host -> device: dev starts zeroed (the source has no zero), checked on the device against the
        # independent upload and by checksum against the host reference
        dev = torch.zeros(n, dtype=torch.int32, device=ctx.device)
        r = timed(lambda: dev.copy_(host, non_blocking=nb), f"h2d_{mode}")  # noqa: F821 (bound before use)
        ctx.sync()
        harness.corrupt_for_test("h2d", dev, pinned and largest)
        r["checksum_ok"] = checksum(dev) == ref_sum
        r["equal"] = bool(torch.equal(dev, dev_ref))
        r["host_pinned"] = bool(host.is_pinned())
        out[f"h2d_{mode}"] = r
        del dev

        # device -> host: host zeroed first, checked on the host against the reference
        host.zero_()
        r = timed(lambda: host.copy_(dev_ref, non_blocking=nb), f"d2h_{mode}")  # noqa: F821 (bound before use)
        ctx.sync()
        r["checksum_ok"] = checksum(host) == ref_sum
        r["equal"] = bool(torch.equal(host, ref))
        r["host_pinned"] = bool(host.is_pinned())
        out[f"d2h_{mode}"] = r
        del host

    for key, r in out.items():
        if not (r["checksum_ok"] and r["equal"]):
            problems.append(f"{size_mib} MiB {key}: checksum_ok={r['checksum_ok']} equal={r['equal']}")
    return out, problems


def main():
    args, cfg = harness.parse_args()
    c = read_config(cfg)  # config errors (exit 2) on every host, also where the case is skipped
    if os.environ.get("FLAGPERF_DEVICE", "cpu").strip().lower() == "cpu":
        LOG.skipped(NO_DEVICE)  # every rank, exit 0
    ctx = harness.setup_distributed(cfg)  # validates FLAGPERF_DEVICE (cuda needs a visible GPU)
    if not ctx.is_cuda:
        LOG.skipped(NO_DEVICE)
    gen = torch.Generator().manual_seed(c["seed"] + ctx.rank)  # host data
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=ctx.world_size)

    sizes, largest = c["sizes_mib"], c["sizes_mib"][-1]
    # the budget is split evenly over the timed windows: 4 per size (h2d/d2h x pinned/pageable)
    budget = harness.BudgetReport(c["timing"], len(sizes) * len(MODES) * len(DIRECTIONS),
                                  split="evenly over the timed windows: one per size, direction and host memory kind")
    LOG.event("RUN_START")
    results, problems = {}, []
    for s in sizes:
        results[s], bad = measure_size(s, gen, ctx, budget, s == largest)
        problems += bad
        LOG.event("STEP", size_mib=s, **{f"{k}_gbs": r["gbs"] for k, r in results[s].items()})
        torch.cuda.empty_cache()
    LOG.event("RUN_END")

    keys = [f"{d}_{m}" for m in MODES for d in DIRECTIONS]  # h2d_pinned first: the headline
    details = {"sizes_mib": sizes, "bytes_counted": "bytes transferred (size per copy)",
               "data": "random int32, never 0",
               "verified": {f"{s}mib": {k: results[s][k]["checksum_ok"] and results[s][k]["equal"] for k in keys}
                            for s in sizes},
               "host_pinned": {k: results[largest][k]["host_pinned"] for k in keys},
               "non_blocking": {"pinned": True, "pageable": False}}
    details.update(budget.details())
    harness.fail_on_any_rank(LOG, ctx, problems, details, problems=problems)

    big = results[largest]
    metrics = {}
    for k in keys:
        if k != "h2d_pinned":
            metrics[f"{k}_gbs"] = {"value": big[k]["gbs"], "unit": "GB/s"}
        metrics[f"{k}_gbs_min"] = {"value": big[k]["gbs_min"], "unit": "GB/s"}
        metrics[f"{k}_gbs_max"] = {"value": big[k]["gbs_max"], "unit": "GB/s"}
        for s in sizes:
            metrics[f"{k}_gbs_{s}mib"] = {"value": results[s][k]["gbs"], "unit": "GB/s"}
    metrics.update(harness.rank_aggregates(ctx, [(f"{k}_gbs", big[k]["gbs"], "GB/s") for k in keys]))
    # <key>_gbs_node: this node's sum, only over simultaneous windows
    node, figures = harness.node_metrics(ctx, [(f"{k}_gbs", big[k]["gbs"], "GB/s", big[k]["window"]) for k in keys])
    metrics.update(node)
    details["node_figures"] = figures["h2d_pinned_gbs"]
    details["per_rank"] = {"metric": "h2d_pinned_gbs", "values": harness.per_rank_list(ctx, big["h2d_pinned"]["gbs"])}
    env = harness.env_info(ctx)
    ctx.destroy()
    LOG.finished(metric="h2d_pinned_gbs", value=big["h2d_pinned"]["gbs"], unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
