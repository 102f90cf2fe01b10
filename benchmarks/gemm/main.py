"""GEMM throughput per dtype, one GEMM per rank; see README.md and docs/benchmarks.md."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="gemm")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402

# name -> (storage dtype, TF32 math allowed, relative error tolerance vs. the float64 reference)
DTYPES = {
    "fp64": (torch.float64, False, 1e-12),
    "fp32": (torch.float32, False, 1e-5),
    "tf32": (torch.float32, True, 5e-3),
    "fp16": (torch.float16, False, 2e-2),
    "bf16": (torch.bfloat16, False, 2e-2),
}


def read_config(cfg, ctx):
    def int_key(key, default, minimum=1):
        v = cfg.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            harness.config_error(f"gemm: {key} must be an integer >= {minimum}, got {v!r}")
        return v

    c = {key: int_key(key, d) for key, d in
         (("m", 512), ("n", 512), ("k", 512), ("iters", 20), ("repeats", 5), ("check_rows", 64))}
    c["warmup"] = int_key("warmup", 5, minimum=0)
    c["seed"] = int_key("seed", 1234, minimum=0)
    c["inject_error"] = bool(cfg.get("inject_error", False))
    dtypes = cfg.get("dtypes", ["fp32", "bf16"])
    dtypes = [dtypes] if isinstance(dtypes, str) else list(dtypes)
    unknown = [d for d in dtypes if d not in DTYPES]
    if not dtypes or unknown:
        harness.config_error(f"gemm: dtypes must be a non-empty list of {sorted(DTYPES)}, got {dtypes!r}")
    c["skipped"] = {}
    if not ctx.is_cuda and "tf32" in dtypes:
        c["skipped"]["tf32"] = "TF32 is a CUDA tensor-core mode; not meaningful on cpu"
        print("gemm: skipping tf32: " + c["skipped"]["tf32"], flush=True)
    c["dtypes"] = [d for d in dict.fromkeys(dtypes) if d not in c["skipped"]]
    if not c["dtypes"]:
        harness.config_error(f"gemm: no dtype left to run on {ctx.device.type} (skipped: {c['skipped']})")
    return c


def rel_err(c_out, a, b, rows):
    """Frobenius relative error of the first `rows` rows against a float64 reference."""
    ref = a[:rows].double() @ b.double()
    return ((c_out[:rows].double() - ref).norm() / ref.norm()).item()


def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg, ctx)
    m, n, k = c["m"], c["n"], c["k"]
    flop = 2.0 * m * n * k
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + ctx.rank)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=ctx.world_size)

    LOG.event("RUN_START")
    results, tf32_flags = {}, {}
    for name in c["dtypes"]:
        dtype, tf32, tol = DTYPES[name]
        torch.backends.cuda.matmul.allow_tf32 = tf32  # explicit for every dtype: True only for tf32
        tf32_flags[name] = bool(torch.backends.cuda.matmul.allow_tf32)
        gen_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        a = torch.randn(m, k, generator=gen, device=ctx.device, dtype=gen_dtype).to(dtype)
        b = torch.randn(k, n, generator=gen, device=ctx.device, dtype=gen_dtype).to(dtype)
        out = torch.empty(m, n, device=ctx.device, dtype=dtype)
        t = harness.time_fn(lambda: torch.matmul(a, b, out=out), ctx, warmup=c["warmup"], iters=c["iters"],
                            repeats=c["repeats"], before_repeat=ctx.barrier)  # ranks measure together
        if c["inject_error"]:
            out.mul_(1.5)  # test-only: corrupt the result so that the check must fail
        err = rel_err(out, a, b, min(c["check_rows"], m))
        results[name] = {"tflops": flop / t["median"] / 1e12, "tflops_min": flop / t["max"] / 1e12,
                         "tflops_max": flop / t["min"] / 1e12, "time_ms": t["median"] * 1e3,
                         "rel_err": err, "tol": tol, "ok": err <= tol}  # NaN fails too
        LOG.event("STEP", dtype=name, tflops=results[name]["tflops"], time_ms=t["median"] * 1e3, rel_err=err)
        del a, b, out
    torch.backends.cuda.matmul.allow_tf32 = False
    LOG.event("RUN_END")

    names = c["dtypes"]
    failed_here = [d for d in names if not results[d]["ok"]]
    # all ranks agree on the verdict (and so all exit the same way) and on the aggregate throughput
    any_failed = ctx.all_reduce([float(bool(failed_here))], "max")[0] > 0
    totals = ctx.all_reduce([results[d]["tflops"] for d in names], "sum")
    details = {f"{d}_rel_err": results[d]["rel_err"] for d in names}
    details.update({f"{d}_tol": results[d]["tol"] for d in names})
    details.update(shape=[m, n, k], check_rows=min(c["check_rows"], m), skipped=c["skipped"],
                   matmul_allow_tf32=tf32_flags)
    if c["inject_error"]:
        details["inject_error"] = True
    if any_failed:
        details.update(failed_dtypes=failed_here, failed_on_some_rank=True)
        LOG.check_failed(details)

    head = names[0]
    metrics = {}
    for i, d in enumerate(names):
        if d != head:
            metrics[f"tflops_{d}"] = {"value": results[d]["tflops"], "unit": "TFLOP/s"}
        metrics[f"tflops_{d}_min"] = {"value": results[d]["tflops_min"], "unit": "TFLOP/s"}
        metrics[f"tflops_{d}_max"] = {"value": results[d]["tflops_max"], "unit": "TFLOP/s"}
        metrics[f"time_ms_{d}"] = {"value": results[d]["time_ms"], "unit": "ms"}
        if ctx.world_size > 1:
            metrics[f"tflops_{d}_total"] = {"value": totals[i], "unit": "TFLOP/s"}
    env = harness.env_info(ctx, matmul_allow_tf32=tf32_flags)
    ctx.destroy()
    LOG.finished(metric=f"tflops_{head}", value=results[head]["tflops"], unit="TFLOP/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
