"""Where an llm training step's time goes: the benchmark's own step (benchmarks/llm/main.py: its read_config,
build (fp8 conversion, compile, FSDP2), Trainer and data, as a case runs them) for a vendor config, warmed up,
then STEPS steps under torch.profiler on every rank. Rank 0 prints the step time (device events), the kernel
time per step by class and the top kernels:
  GEMM fp8 (torch._scaled_mm: the float8 projections), GEMM (mm) (mm/addmm/bmm in the run's base precision: the
  LM head, and every projection of a bf16 run), attention (SDPA's flash/cuDNN/efficient kernels), compiled
  (Triton: norms, RoPE, SwiGLU, fp8 casts and amax), collectives (NCCL all-gather/reduce-scatter/all-reduce,
  on their own stream, overlapping the compute), optimizer, copy / cast, other.
Compute kernels run one after another on one stream, so the step time minus their sum is the device's idle or
exposed-communication time. On the CPU (a rehearsal) the classes hold each aten operator's own CPU time.
Usage (one host, N GPUs): torchrun --nproc-per-node N bench/llm_profile.py --hw 8b_8k_fp8 [--steps 6]
       [--warmup 8] [--vendor nvidia] [--set key=value ...]; on the CPU: --vendor cpu --set preset=tiny."""
import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "llm"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import main as llm  # noqa: E402  (the benchmark: its import prints its INIT_START PerfLog line)
from main import harness, llm_data, llm_fp8  # noqa: E402

import torch  # noqa: E402

# a kernel's name first (NCCL, Triton and attention kernels are named for what they are), then the operator that
# launched it (the cuBLAS/cuBLASLt GEMM kernels' names do not say their input type; the operator does)
BY_KERNEL = (("collectives (NCCL)", ("nccl",)),
             ("compiled (Triton)", ("triton_",)),
             ("attention", ("flash", "fmha", "attn", "sdpa", "cudnn_generated_fort_native")))
BY_OP = (("GEMM fp8 (_scaled_mm)", ("_scaled_mm",)),
         ("attention", ("attention", "flash")),
         ("GEMM (mm)", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")),
         ("optimizer", ("adam", "foreach", "multi_tensor")),
         ("collectives (NCCL)", ("nccl", "c10d", "all_gather", "reduce_scatter", "all_reduce")),
         ("copy / cast", ("copy", "to_copy", "cat", "fill", "zero")))


def kind(kernel, op):
    """The class of a kernel launched by operator ``op`` (BY_KERNEL by the kernel's name, then BY_OP)."""
    k, o = kernel.lower(), op.lower()
    for label, keys in BY_KERNEL:
        if any(s in k for s in keys):
            return label
    for label, keys in BY_OP:
        if any(s in o for s in keys):
            return label
    return "other"


def case_config(vendor, hw, sets):
    """The case config as flagperf merges it: the benchmark's case_config.yaml, the vendor's, then config_<hw>.yaml,
    then --set key=value (YAML values)."""
    cfg = yaml.safe_load((ROOT / "benchmarks" / "llm" / "case_config.yaml").read_text()) or {}
    for name in ("case_config.yaml", f"config_{hw}.yaml"):
        f = ROOT / "vendors" / vendor / "llm" / name
        if f.is_file():
            cfg.update(yaml.safe_load(f.read_text()) or {})
        elif name != "case_config.yaml":
            sys.exit(f"llm_profile: {f} not found (--hw names a config_<hw>.yaml of vendors/{vendor}/llm)")
    for s in sets:
        key, _, value = s.partition("=")
        cfg[key] = yaml.safe_load(value)
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="8b_8k", help="the vendor config: vendors/<vendor>/llm/config_<hw>.yaml")
    ap.add_argument("--vendor", default="nvidia")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a case key's value (YAML)")
    ap.add_argument("--json", help="also write the figures to this file (rank 0)")
    a = ap.parse_args()
    os.environ.setdefault("FLAGPERF_DEVICE", "cuda" if a.vendor != "cpu" else "cpu")
    cfg = case_config(a.vendor, a.hw, a.set)
    c, shape = llm.read_config(cfg)
    ctx = harness.setup_distributed(cfg)
    cuda = ctx.is_cuda
    dtype = torch.bfloat16 if ctx.is_accelerator else torch.float32
    parallel, use_compile = llm.choose_parallel(c, ctx)
    data = llm_data.make_source(c, shape, None, ctx)
    fp8, why_not = llm_fp8.plan_for(c, ctx)
    forward, model, fp8_linears = llm.build(c, shape, ctx, parallel, use_compile, dtype, fp8)
    all_gather = fp8 and llm_fp8.fsdp_all_gather(c, parallel)

    def no_sync(skip):
        if parallel == "fsdp":
            forward.set_requires_gradient_sync(not skip)
        return forward.no_sync() if skip and parallel == "ddp" else llm.contextlib.nullcontext()

    autocast = (torch.autocast(ctx.device.type, dtype=dtype) if ctx.is_accelerator and parallel != "fsdp"
                else llm.contextlib.nullcontext())
    trainer = llm.Trainer(c, ctx, forward, model.parameters(), autocast, no_sync,
                          after_step=(lambda: llm_fp8.precompute_scales(model)) if all_gather else None)

    def step():
        trainer.step(data.batches(c["grad_accum"], c["micro_batch"]))

    t0 = time.time()
    with llm.sdpa_context(c["attention_backend"]):
        for _ in range(a.warmup):
            step()
        ctx.sync()
        warm_s = time.time() - t0
        ctx.barrier()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        if cuda:
            end.record()
        ctx.sync()
        step_ms = start.elapsed_time(end) / a.steps if cuda else (time.perf_counter() - t0) * 1e3 / a.steps
        ctx.barrier()
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(a.steps):
                step()
            ctx.sync()
    if ctx.rank != 0:
        ctx.destroy()
        return
    per_kind, per_kernel = collections.Counter(), collections.Counter()
    for e in prof.events():
        if not cuda:            # the CPU: each aten operator's own time (the "kernels" are the operators)
            if e.name.startswith("aten::"):
                per_kind[kind(e.name, e.name)] += e.self_cpu_time_total
                per_kernel[(kind(e.name, e.name), e.name)] += e.self_cpu_time_total
            continue
        for k in getattr(e, "kernels", []) or []:        # the kernels this operator launched (device time, us)
            label = kind(k.name, e.name)
            per_kind[label] += k.duration
            per_kernel[(label, k.name)] += k.duration
    tokens = c["grad_accum"] * c["micro_batch"] * c["seq_len"]
    compute = sum(us for label, us in per_kind.items() if label != "collectives (NCCL)") / 1e3 / a.steps
    comm = per_kind["collectives (NCCL)"] / 1e3 / a.steps
    precision = "fp8" if fp8 else ("bf16" if ctx.is_accelerator else "fp32")
    device = torch.cuda.get_device_name(ctx.device) if cuda else "cpu"
    print(f"== llm profile: hw {a.hw}, preset {c['preset']}, seq {c['seq_len']}, micro-batch {c['micro_batch']}, "
          f"{precision}{f' ({fp8_linears} float8 linears, recipe ' + c['fp8_recipe'] if fp8 else ''}"
          f"{', fp8 all-gather' if all_gather else ''}{')' if fp8 else ''}{'; fp8: ' + why_not if why_not else ''}, "
          f"{parallel} on {ctx.world_size} x {device}, compile {use_compile}, torch {torch.__version__}")
    print(f"warm-up {a.warmup} steps (compile included): {warm_s:.1f} s")
    print(f"step {step_ms:.1f} ms (device events, {a.steps} steps unprofiled) = {tokens / step_ms * 1e3:,.0f} "
          f"tokens/s/rank")
    print(f"compute kernels {compute:.1f} ms/step ({100 * compute / step_ms:.1f}% of the step; the rest "
          f"{step_ms - compute:.1f} ms is idle or exposed communication); NCCL kernels {comm:.1f} ms/step on their "
          f"own stream")
    for label, us in per_kind.most_common():
        ms = us / 1e3 / a.steps
        share = f"{100 * ms / compute:5.1f}% of compute" if label != "collectives (NCCL)" else "  (overlapping)"
        print(f"  {label:<20} {ms:9.2f} ms/step  {share}")
    print("top kernels (ms/step):")
    for (label, name), us in per_kernel.most_common(18):
        print(f"  {us / 1e3 / a.steps:8.2f}  [{label}] {name[:110]}")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "hw": a.hw, "precision": precision, "fp8_linears": fp8_linears, "fp8_all_gather": all_gather,
            "step_ms": step_ms, "compute_ms": compute, "nccl_ms": comm, "tokens_per_step_per_rank": tokens,
            "per_class_ms": {k: v / 1e3 / a.steps for k, v in per_kind.items()}, "device": device,
            "world_size": ctx.world_size}, indent=1))
    ctx.destroy()


if __name__ == "__main__":
    main()
