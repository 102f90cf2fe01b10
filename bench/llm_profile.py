"""Where an llm training step's time goes: the benchmark's own step (benchmarks/llm/main.py: its read_config,
build (fp8 conversion, compile, FSDP2), Trainer and data, as a case runs them) for a vendor config, warmed up,
then STEPS steps under torch.profiler on every rank. Rank 0 prints the step time (device events) with the clocks,
power and energy of those steps (NVML, benchmarks/common/devicestats.py), the kernel
time per step by class and the top kernels:
  GEMM fp8 (torch._scaled_mm: the float8 projections), GEMM (mm) (mm/addmm/bmm in the run's base precision: the
  LM head, and every projection of a bf16 run), attention (SDPA's flash/cuDNN/efficient kernels), compiled
  (Triton: norms, RoPE, SwiGLU, fp8 casts and amax), collectives (NCCL all-gather/reduce-scatter/all-reduce,
  on their own stream, overlapping the compute), optimizer, copy / cast, other.
Each kernel is classed by its own name and counted once, from its own device event. FSDP2's copies run on streams
of their own, so beside the sums per class the device's view is given: the union of the compute kernels' intervals
(busy), the time NCCL runs with no compute kernel beside it (exposed communication), and the rest (idle). On the
CPU (a rehearsal) the classes hold each aten operator's own CPU time.
Usage (one host, N GPUs): torchrun --nproc-per-node N bench/llm_profile.py --hw 8b_8k_fp8 [--steps 6]
       [--warmup 8] [--vendor nvidia] [--set key=value ...]; on the CPU: --vendor cpu --hw quick."""
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

# each kernel by its name, first match: NCCL, Triton (inductor's fused kernels: norms, RoPE, SwiGLU, and in an fp8
# run the casts and amax reductions), attention (cuDNN/flash SDPA), fp8 GEMMs (cuBLASLt's nvjet kernels with fp8
# inputs are named nvjet_sm90_q..., CUTLASS's name e4m3/e5m2), other GEMMs, the optimizer, copies and casts
CLASSES = (("collectives (NCCL)", ("nccl",)),
           ("compiled (Triton)", ("triton_",)),
           ("attention", ("flash", "fmha", "sdpa", "attn")),
           ("GEMM fp8", ("e4m3", "e5m2", "fp8", "f8f8", "aten::_scaled_mm")),
           ("GEMM", ("gemm", "nvjet", "cutlass", "cublas", "xmma", "aten::mm", "aten::addmm", "aten::bmm")),
           ("optimizer", ("adam", "multi_tensor", "foreach")),
           ("copy / cast", ("copy", "cat_", "split", "memcpy", "memset", "fill", "float8", "cast")),
           ("elementwise (eager)", ("elementwise", "reduce_kernel")))


# the device-side spans that torch and FSDP draw around kernels: not kernels, never counted
ANNOTATIONS = ("nccl:", "Optimizer.", "FSDP::", "## ", "ProfilerStep", "record_param_comms")


def kind(name):
    """The class of a kernel (CLASSES, first match; cuBLASLt's fp8 GEMMs: nvjet_sm<NN>_q...), else "other"."""
    low = name.lower()
    for label, keys in CLASSES:
        if label == "GEMM fp8" and low.startswith("nvjet_sm") and low.split("_")[2:3] and \
                low.split("_")[2].startswith("q"):
            return label
        if any(k in low for k in keys):
            return label
    return "other"


def union_ms(intervals):
    """The length of the union of (start, end) intervals, in their unit."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def case_config(vendor, hw, sets):
    """The case config in flagperf's order (flagperf.plan.merged_case_config): the benchmark's case_config.yaml,
    the vendor's, then config_<hw>.yaml, then --set key=value (YAML values)."""
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
    trainer, _, all_gather = llm.trainer_for(c, ctx, parallel, forward, model, fp8, dtype)

    def step():
        trainer.step(data.batches(c["grad_accum"], c["micro_batch"]))

    t0 = time.time()
    with llm.sdpa_context(c["attention_backend"]):
        for _ in range(a.warmup):
            step()
        ctx.sync()
        warm_s = time.time() - t0
        ctx.barrier()
        window = harness.device_window(ctx).start()        # clocks, power, energy of the timed steps (NVML)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        if cuda:
            end.record()
        ctx.sync()
        window.stop()
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
    busy, comm_spans, all_spans = [], [], []
    for e in prof.events():
        if not cuda:            # the CPU: each aten operator's own time (the "kernels" are the operators)
            if e.name.startswith("aten::"):
                per_kind[kind(e.name)] += e.self_cpu_time_total
                per_kernel[(kind(e.name), e.name)] += e.self_cpu_time_total
            continue
        if not str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue            # a kernel's own event (device time), never its launching operator's copy
        if getattr(e, "is_user_annotation", False) or e.name.startswith(ANNOTATIONS):
            continue            # a span drawn on the device's timeline around kernels (nccl:..., Optimizer.step)
        label = kind(e.name)
        span = (e.time_range.start, e.time_range.end)
        per_kind[label] += span[1] - span[0]
        per_kernel[(label, e.name)] += span[1] - span[0]
        all_spans.append(span)
        (comm_spans if label == "collectives (NCCL)" else busy).append(span)
    tokens = c["grad_accum"] * c["micro_batch"] * c["seq_len"]
    compute = sum(us for label, us in per_kind.items() if label != "collectives (NCCL)") / 1e3 / a.steps
    comm = per_kind["collectives (NCCL)"] / 1e3 / a.steps
    # the device's view: the profiled steps' span, the union of its compute kernels (any stream) and of NCCL's
    # kernels outside them (communication that no compute hides)
    wall = (max(b for _, b in all_spans) - min(a for a, _ in all_spans)) / 1e3 / a.steps if all_spans else 0.0
    compute_union = union_ms(busy) / 1e3 / a.steps
    exposed = (union_ms(busy + comm_spans) - union_ms(busy)) / 1e3 / a.steps
    precision = "fp8" if fp8 else ("bf16" if ctx.is_accelerator else "fp32")
    device = torch.cuda.get_device_name(ctx.device) if cuda else "cpu"
    print(f"== llm profile: hw {a.hw}, preset {c['preset']}, seq {c['seq_len']}, micro-batch {c['micro_batch']}, "
          f"{precision}{f' ({fp8_linears} float8 linears, recipe ' + c['fp8_recipe'] if fp8 else ''}"
          f"{', fp8 all-gather' if all_gather else ''}{')' if fp8 else ''}{'; fp8: ' + why_not if why_not else ''}, "
          f"{parallel} on {ctx.world_size} x {device}, compile {use_compile}, torch {torch.__version__}")
    print(f"warm-up {a.warmup} steps (compile included): {warm_s:.1f} s")
    dw = window.summary()
    if "omitted" in dw:
        print(f"device window: {dw['omitted']}")
    else:
        print(f"device window of the timed steps: SM {dw.get('sm_clock_mhz_median')} MHz median, power "
              f"{dw.get('power_w_median')} W median, energy {dw.get('energy_j')} J, throttle reasons "
              f"{', '.join(dw.get('throttle_reasons') or []) or 'none'}")
    print(f"step {step_ms:.1f} ms ({'device events' if cuda else 'wall clock'}, {a.steps} steps unprofiled) = "
          f"{tokens / step_ms * 1e3:,.0f} tokens/s/rank")
    if cuda:
        print(f"profiled: {wall:.1f} ms/step from the first kernel to the last; compute kernels busy "
              f"{compute_union:.1f} ms/step ({100 * compute_union / wall if wall else 0:.1f}%; their sum "
              f"{compute:.1f} ms, streams overlap), NCCL alone (no compute kernel running) {exposed:.1f} ms/step, "
              f"device idle {wall - compute_union - exposed:.1f} ms/step; NCCL kernels {comm:.1f} ms/step in all")
    else:
        print(f"aten operators' own CPU time {compute:.1f} ms/step")
    for label, us in per_kind.most_common():
        ms = us / 1e3 / a.steps
        share = f"{100 * ms / compute:5.1f}% of the compute sum" if label != "collectives (NCCL)" else \
            "  (on its own stream)"
        print(f"  {label:<20} {ms:9.2f} ms/step  {share}")
    print("top kernels (ms/step):")
    for (label, name), us in per_kernel.most_common(18):
        print(f"  {us / 1e3 / a.steps:8.2f}  [{label}] {name[:110]}")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "hw": a.hw, "precision": precision, "fp8_linears": fp8_linears, "fp8_all_gather": all_gather,
            "step_ms": step_ms, "compute_ms": compute, "nccl_ms": comm, "tokens_per_step_per_rank": tokens,
            "profiled_step_ms": wall, "compute_busy_ms": compute_union, "nccl_exposed_ms": exposed,
            "device_window": dw,
            "per_class_ms": {k: v / 1e3 / a.steps for k, v in per_kind.items()}, "device": device,
            "kernels_ms": [[label, name[:200], us / 1e3 / a.steps]
                           for (label, name), us in per_kernel.most_common(80)],
            "world_size": ctx.world_size}, indent=1))
    ctx.destroy()


if __name__ == "__main__":
    main()
