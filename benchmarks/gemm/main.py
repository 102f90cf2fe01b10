"""GEMM throughput per dtype, one GEMM per rank; see README.md and docs/benchmarks.md."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="gemm")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402

FP8 = getattr(torch, "float8_e4m3fn", None)

# name -> (storage dtype, TF32 math allowed, relative error tolerance vs. the float64 reference)
# int8 is checked exactly (tolerance 0: no element may differ from the integer reference).
DTYPES = {
    "fp64": (torch.float64, False, 1e-12),
    "fp32": (torch.float32, False, 1e-5),
    "tf32": (torch.float32, True, 5e-3),
    "fp16": (torch.float16, False, 2e-2),
    "bf16": (torch.bfloat16, False, 2e-2),
    "int8": (torch.int8, False, 0),
    "fp8": (FP8, False, 2e-2),
}
DIRECT_DTYPES = ("bf16", "fp16", "fp32")  # also timed as plain `torch.matmul(a, b)` in a bare loop
INT8_MAX_K = (2 ** 31 - 1) // (128 * 128)  # |sum of k int8 products| <= k * 2^14 must fit the int32 output
DEFAULT_BUDGET_S = 1.0  # time_budget_s when the case config has none (the CPU default's value)


def unit_of(name):
    """(metric prefix, unit): int8 GEMMs are integer operations, TOP/s; the rest TFLOP/s."""
    return ("tops", "TOP/s") if name == "int8" else ("tflops", "TFLOP/s")


def peak_key(name):
    return "int8_tops" if name == "int8" else f"{name}_tflops"


# --------------------------------------------------------------------------- support probes

def int8_unsupported(ctx):
    """None when torch._int_mm (int8 x int8 -> int32) works on this device, else the reason."""
    if not hasattr(torch, "_int_mm"):
        return f"torch {torch.__version__} has no torch._int_mm"
    try:
        a = torch.ones(32, 32, dtype=torch.int8, device=ctx.device)
        r = torch._int_mm(a, a.t())
        ctx.sync()
        if r.dtype != torch.int32 or int(r[0, 0]) != 32:
            return f"torch._int_mm probe returned {r.dtype} {int(r[0, 0])}, expected int32 32"
    except Exception as e:  # not implemented for this device / build
        return f"torch._int_mm is not supported on {ctx.device.type} in this build: {type(e).__name__}: {e}"
    return None


def scaled_mm(a, b, scale_a, scale_b, fast_accum=False):
    """torch._scaled_mm with tensor-wise float32 scales and a bf16 result (old torch returned a tuple)."""
    r = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                         use_fast_accum=fast_accum)
    return r[0] if isinstance(r, tuple) else r


def fp8_unsupported(ctx):
    """None when the fp8 GEMM (torch._scaled_mm, e4m3 inputs) can run here, else the reason."""
    if not ctx.is_cuda:
        return (f"fp8 GEMM (torch._scaled_mm) is benchmarked on CUDA devices of compute capability >= 8.9 only; "
                f"not run on {ctx.device.type}")
    if getattr(torch.version, "hip", None):
        return "fp8 GEMM uses float8_e4m3fn with cuBLASLt; not run on ROCm"
    if FP8 is None or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8_e4m3fn / torch._scaled_mm"
    cap = torch.cuda.get_device_capability(ctx.device)
    if tuple(cap) < (8, 9):
        return f"fp8 tensor cores need compute capability >= 8.9; this GPU has {cap[0]}.{cap[1]}"
    try:
        one = torch.ones((), dtype=torch.float32, device=ctx.device)
        a = torch.ones(32, 32, device=ctx.device).to(FP8)
        r = scaled_mm(a, a.t(), one, one)
        ctx.sync()
        if float(r[0, 0]) != 32.0:
            return f"torch._scaled_mm probe returned {float(r[0, 0])}, expected 32"
    except Exception as e:
        return f"torch._scaled_mm failed on this GPU: {type(e).__name__}: {e}"
    return None


# --------------------------------------------------------------------------- configuration

def read_config(cfg, ctx):
    keys = harness.CaseKeys(cfg, "gemm")
    int_val = keys.check_int
    c = {key: keys.int(key, d) for key, d in (("m", 512), ("n", 512), ("k", 512), ("check_rows", 64))}
    c["timing"] = keys.timing(warmup=5, budget_s=DEFAULT_BUDGET_S)
    c["sustained_s"] = keys.number("sustained_s", 0, lambda v: v >= 0, "a number of seconds >= 0 (0: off)")
    c["seed"] = keys.int("seed", 1234, minimum=0)
    c["direct"] = keys.flag("direct", True)
    c["fp8_fast_accum"] = keys.flag("fp8_fast_accum", False)
    dtypes = cfg.get("dtypes", ["fp32", "bf16"])
    dtypes = [dtypes] if isinstance(dtypes, str) else list(dtypes)
    unknown = [d for d in dtypes if d not in DTYPES]
    if not dtypes or unknown:
        harness.config_error(f"gemm: dtypes must be a non-empty list of {sorted(DTYPES)}, got {dtypes!r}")

    # per-dtype overrides: sizes_per_dtype {dtype: N | [m, n, k] | {m:, n:, k:}}, iters_per_dtype {dtype: N}
    shapes = {d: (c["m"], c["n"], c["k"]) for d in DTYPES}
    spd = cfg.get("sizes_per_dtype") or {}
    if not isinstance(spd, dict) or set(spd) - set(DTYPES):
        harness.config_error(f"gemm: sizes_per_dtype must map dtypes of {sorted(DTYPES)} to sizes, got {spd!r}")
    for d, v in spd.items():
        key = f"sizes_per_dtype.{d}"
        if isinstance(v, dict) and not set(v) - {"m", "n", "k"}:
            shapes[d] = tuple(int_val(f"{key}.{x}", v.get(x, c[x])) for x in ("m", "n", "k"))
        elif isinstance(v, (list, tuple)) and len(v) == 3:
            shapes[d] = tuple(int_val(key, x) for x in v)
        elif isinstance(v, int) and not isinstance(v, bool):
            shapes[d] = (int_val(key, v),) * 3
        else:
            harness.config_error(f"gemm: {key} must be N, [m, n, k] or {{m, n, k}}, got {v!r}")
    ipd = cfg.get("iters_per_dtype") or {}
    if not isinstance(ipd, dict) or set(ipd) - set(DTYPES):
        harness.config_error(f"gemm: iters_per_dtype must map dtypes of {sorted(DTYPES)} to integers, got {ipd!r}")
    c["iters_of"] = {d: int_val(f"iters_per_dtype.{d}", ipd[d]) if d in ipd else None for d in DTYPES}

    c["skipped"] = {}
    if not ctx.is_cuda and "tf32" in dtypes:
        c["skipped"]["tf32"] = "TF32 is a CUDA tensor-core mode; not meaningful on cpu"
    if "int8" in dtypes:
        reason = int8_unsupported(ctx)
        if reason:
            c["skipped"]["int8"] = reason
    if "fp8" in dtypes:
        reason = fp8_unsupported(ctx)
        if reason:
            c["skipped"]["fp8"] = reason
    for d, reason in c["skipped"].items():
        print(f"gemm: skipping {d}: {reason}", flush=True)
    c["dtypes"] = [d for d in dict.fromkeys(dtypes) if d not in c["skipped"]]
    if not c["dtypes"]:
        harness.config_error(f"gemm: no dtype left to run on {ctx.device.type} (skipped: {c['skipped']})")

    # shape rules of the low-precision GEMMs (only for dtypes that will run)
    if "int8" in c["dtypes"]:
        m, n, k = shapes["int8"]
        if m <= 16 or m % 8 or n % 8 or k % 8 or k > INT8_MAX_K:
            harness.config_error(f"gemm: int8 (torch._int_mm) needs m > 16 and m, n, k multiples of 8 and "
                                 f"k <= {INT8_MAX_K} (int32 accumulation), got m, n, k = {m}, {n}, {k}")
    if "fp8" in c["dtypes"]:
        m, n, k = shapes["fp8"]
        if m % 16 or n % 16 or k % 16:
            harness.config_error(f"gemm: fp8 (torch._scaled_mm) needs m, n, k multiples of 16, "
                                 f"got m, n, k = {m}, {n}, {k}")
    c["shapes"] = {d: shapes[d] for d in c["dtypes"]}
    return c


# --------------------------------------------------------------------------- inputs and checks

def make_case(name, m, n, k, gen, ctx, fast_accum):
    """Inputs and the GEMM to time: (a, b, scale, fn, result) where fn() runs one GEMM, result() is its output
    and scale (fp8 only, else None) the product of the two dequantization scales.
    int8 and fp8 use B column-major (a (n, k) row-major tensor, transposed view): the layout their
    tensor-core GEMMs want (torch._scaled_mm requires it)."""
    dev = ctx.device
    if name == "int8":
        a = torch.randint(-128, 128, (m, k), generator=gen, device=dev, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, k), generator=gen, device=dev, dtype=torch.int8).t()
        out = torch.empty(m, n, device=dev, dtype=torch.int32)
        return a, b, None, (lambda: torch._int_mm(a, b, out=out)), (lambda: out)
    if name == "fp8":
        fp8_max = float(torch.finfo(FP8).max)  # 448
        a_f = torch.randn(m, k, generator=gen, device=dev, dtype=torch.float32)
        bt_f = torch.randn(n, k, generator=gen, device=dev, dtype=torch.float32)
        scale_a = (a_f.abs().amax() / fp8_max).float()  # 0-dim float32 tensors on the device: dequant scales
        scale_b = (bt_f.abs().amax() / fp8_max).float()
        a = (a_f / scale_a).to(FP8)
        b = (bt_f / scale_b).to(FP8).t()
        del a_f, bt_f
        state = {}

        def fn():
            state["out"] = scaled_mm(a, b, scale_a, scale_b, fast_accum)
        return a, b, scale_a.double() * scale_b.double(), fn, (lambda: state["out"])
    dtype = DTYPES[name][0]
    gen_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    a = torch.randn(m, k, generator=gen, device=dev, dtype=gen_dtype).to(dtype)
    b = torch.randn(k, n, generator=gen, device=dev, dtype=gen_dtype).to(dtype)
    out = torch.empty(m, n, device=dev, dtype=dtype)
    return a, b, None, (lambda: torch.matmul(a, b, out=out)), (lambda: out)


def rel_err(c_out, a, b, rows, scale=None):
    """Frobenius relative error of the first `rows` rows against a float64 reference (fp8: of the
    dequantized inputs, `scale` being the product of the two tensor-wise scales)."""
    ref = a[:rows].double() @ b.double()
    if scale is not None:
        ref = ref * scale
    return ((c_out[:rows].double() - ref).norm() / ref.norm()).item()


def int8_check(c_out, a, b, rows):
    """Exact comparison of the first `rows` rows with an int64 reference: (mismatching elements, max |diff|).
    On CUDA (no integer matmul there) the reference is computed in float64 and converted: every product is
    an integer of magnitude <= 2^14 and every partial sum <= k * 2^14 < 2^53, so the float64 GEMM is exact."""
    if a.device.type == "cpu":
        ref = a[:rows].long() @ b.long()
    else:
        ref = (a[:rows].double() @ b.double()).round().long()
    diff = (c_out[:rows].long() - ref).abs()
    return int((diff != 0).sum()), int(diff.max())


# --------------------------------------------------------------------------- one dtype

def measure_dtype(name, c, gen, ctx, budget, sustained):
    """Time, check and (for DIRECT_DTYPES) time again as plain torch.matmul one dtype's GEMM; returns (result
    dict, STEP record)."""
    _, tf32, tol = DTYPES[name]
    m, n, k = c["shapes"][name]
    flop = 2.0 * m * n * k
    rows = min(c["check_rows"], m)
    a, b, scale, fn, result = make_case(name, m, n, k, gen, ctx, c["fp8_fast_accum"])
    t = budget.time(name, fn, ctx, iters=c["iters_of"][name], label=f"gemm {name}",
                    before_repeat=ctx.barrier, aligned=True)  # ranks together, in one aligned window
    out = result()
    harness.corrupt_for_test("gemm", out)
    r = {"tflops": flop / t["median"] / 1e12, "tflops_min": flop / t["max"] / 1e12,
         "tflops_max": flop / t["min"] / 1e12, "time_ms": t["median"] * 1e3, "tol": tol, "window": t["window"]}
    if name == "int8":
        r["mismatches"], r["max_abs_err"] = int8_check(out, a, b, rows)
        r["ok"] = r["mismatches"] == 0
    else:
        r["rel_err"] = rel_err(out, a, b, rows, scale)
        r["ok"] = r["rel_err"] <= tol  # NaN fails too
    step = dict(dtype=name, time_ms=r["time_ms"], **{unit_of(name)[0]: r["tflops"]}, iters=t["iters"],
                repeats=t["repeats"], measured_s=t["measured_s"])
    step.update({key: r[key] for key in ("rel_err", "mismatches") if key in r})
    if c["direct"] and name in DIRECT_DTYPES:
        # plain `torch.matmul(a, b)`: a new output every call, no out=; the counts of this dtype's measurement
        held = {}

        def direct():
            held["c"] = torch.matmul(a, b)
        ctx.barrier()  # ranks start together; outside the timed loop
        td = budget.repeat(f"direct_{name}", direct, ctx, t, name)
        r["direct_tflops"] = flop / td["median"] / 1e12
        r["direct_rel_err"] = rel_err(held.pop("c"), a, b, rows)
        r["ok"] = r["ok"] and r["direct_rel_err"] <= tol
        step.update(direct_tflops=r["direct_tflops"], direct_rel_err=r["direct_rel_err"])
    if sustained is not None:
        ctx.barrier()
        ts = sustained.time(name, fn, ctx, label=f"gemm {name} sustained", before_repeat=ctx.barrier)
        r["sustained_tflops"] = flop / ts["median"] / 1e12
        step.update(sustained_tflops=r["sustained_tflops"], sustained_s=ts["measured_s"])
    return r, step


def check_details(c, results, tf32_flags, budget, sustained):
    """The FINISHED (or CHECK_FAILED) details: every dtype's error, the shapes, the budget's windows."""
    names, details = c["dtypes"], {}
    for d in names:
        r = results[d]
        if d == "int8":
            details.update(int8_mismatches=r["mismatches"], int8_max_abs_err=r["max_abs_err"],
                           int8_check="exact vs int64 reference")
        else:
            details[f"{d}_rel_err"] = r["rel_err"]
            details[f"{d}_tol"] = r["tol"]
        if "direct_rel_err" in r:
            details[f"direct_{d}_rel_err"] = r["direct_rel_err"]
    m, n, k = c["m"], c["n"], c["k"]
    details.update(shape=[m, n, k], check_rows=min(c["check_rows"], m), skipped=c["skipped"],
                   matmul_allow_tf32=tf32_flags)
    if any(c["shapes"][d] != (m, n, k) for d in names):
        details["shapes"] = {d: list(c["shapes"][d]) for d in names}
    if "fp8" in names:
        details["fp8_use_fast_accum"] = c["fp8_fast_accum"]
    details.update(budget.details())
    if sustained is not None:
        details["sustained"] = sustained.details()
        if "budget_warning" in details["sustained"]:
            details["budget_warning"] = "; ".join(w for w in (details.get("budget_warning"),
                                                              details["sustained"]["budget_warning"]) if w)
    return details


def dtype_metrics(cfg, results, node, device_name):
    """Every dtype's figures (the headline's own value is FINISHED's) and its share of the vendor's peak."""
    metrics, peaks = {}, {}
    for i, (d, r) in enumerate(results.items()):
        prefix, unit = unit_of(d)
        if i:
            metrics[f"{prefix}_{d}"] = {"value": r["tflops"], "unit": unit}
        metrics[f"{prefix}_{d}_min"] = {"value": r["tflops_min"], "unit": unit}
        metrics[f"{prefix}_{d}_max"] = {"value": r["tflops_max"], "unit": unit}
        metrics[f"time_ms_{d}"] = {"value": r["time_ms"], "unit": "ms"}
        if f"{prefix}_{d}_node" in node:     # this node's sum, only over simultaneous windows
            metrics[f"{prefix}_{d}_node"] = node[f"{prefix}_{d}_node"]
        if "direct_tflops" in r:
            metrics[f"direct_tflops_{d}"] = {"value": r["direct_tflops"], "unit": "TFLOP/s"}
        if "sustained_tflops" in r:
            metrics[f"{prefix}_{d}_sustained"] = {"value": r["sustained_tflops"], "unit": unit}
        peak, entry = harness.peak_for(cfg, peak_key(d), device_name)
        if peak:
            metrics[f"pct_of_peak_{d}"] = {"value": 100.0 * r["tflops"] / peak, "unit": "%"}
            peaks[d] = {"entry": entry, "key": peak_key(d), "value": peak}
    return metrics, peaks


# --------------------------------------------------------------------------- main

def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg, ctx)
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + ctx.rank)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=ctx.world_size)

    # the budget is split evenly over the timed windows: one per dtype, one more per dtype with a direct loop
    windows = {name: 2 if c["direct"] and name in DIRECT_DTYPES else 1 for name in c["dtypes"]}
    budget = harness.BudgetReport(c["timing"], sum(windows.values()),
                                  split="evenly over the timed windows: one per dtype, plus one per dtype with a "
                                        "direct torch.matmul loop (which reuses that dtype's counts)")
    sustained = None
    if c["sustained_s"] > 0:
        sustained = harness.BudgetReport(harness.Timing(0, c["sustained_s"] * len(c["dtypes"]), repeats=1),
                                         len(c["dtypes"]),
                                         split="sustained_s per dtype: one sample of as many GEMMs as fill it")

    LOG.event("RUN_START")
    results, tf32_flags = {}, {}
    for name in c["dtypes"]:
        torch.backends.cuda.matmul.allow_tf32 = DTYPES[name][1]  # explicit for every dtype: True only for tf32
        tf32_flags[name] = bool(torch.backends.cuda.matmul.allow_tf32)
        results[name], step = measure_dtype(name, c, gen, ctx, budget, sustained)
        LOG.event("STEP", **step)
    torch.backends.cuda.matmul.allow_tf32 = False
    LOG.event("RUN_END")

    names = c["dtypes"]
    failed_here = [d for d in names if not results[d]["ok"]]
    # all ranks agree on the verdict (and so all exit the same way) and on the node figures: every device's
    # throughput per node, summed only where the devices' windows were simultaneous
    node, figures = harness.node_metrics(ctx, [(f"{unit_of(d)[0]}_{d}", results[d]["tflops"], unit_of(d)[1],
                                                results[d]["window"]) for d in names])
    per_rank = harness.per_rank_list(ctx, results[names[0]]["tflops"])    # the headline of every rank
    details = check_details(c, results, tf32_flags, budget, sustained)
    harness.fail_on_any_rank(LOG, ctx, failed_here, details, failed_dtypes=failed_here)

    env = harness.env_info(ctx, matmul_allow_tf32=tf32_flags)
    metrics, details["peaks"] = dtype_metrics(cfg, results, node, env["device_name"])
    ctx.destroy()
    prefix, unit = unit_of(names[0])
    details["per_rank"] = {"metric": f"{prefix}_{names[0]}", "values": per_rank}
    details["node_figures"] = figures[f"{prefix}_{names[0]}"]
    LOG.finished(metric=f"{prefix}_{names[0]}", value=results[names[0]]["tflops"], unit=unit,
                 higher_is_better=True, metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
