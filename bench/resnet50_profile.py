"""Where a ResNet-50 training step's time goes: the benchmark's own step (benchmarks/resnet50/main.py: its
read_config, model and Trainer, so channels_last, bf16 autocast, torch.compile in the case's mode, fused SGD with
Nesterov momentum and cuDNN autotuning as a case runs them) on random data, warmed up, then STEPS steps under
torch.profiler. Prints the step time (device events), the GPU's busy time per step, and the kernel time per class:
convolutions (cuDNN/CUTLASS), other matmuls, compiled (Triton) kernels (the batch-norm statistics, normalisation,
ReLU and residual adds that inductor fuses), the optimizer, copies, the rest; then the top kernels.
Usage: python3 bench/resnet50_profile.py [--batch 256] [--image 224] [--mode default] [--steps 10] [--device cuda]
       [--preset resnet50]"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "resnet50"))
import main as rn50  # noqa: E402  (the benchmark: its import prints its INIT_START PerfLog line)
from main import harness  # noqa: E402

import torch  # noqa: E402

# checked in this order: inductor names its kernels triton_<kind>_fused_<ops> (the ops may include
# "convolution_backward": the batch-norm backward fused around a convolution's gradient), so Triton comes first
CLASSES = (("compiled (triton)", ("triton_",)),
           ("convolution", ("conv", "xmma", "implicit", "dgrad", "wgrad", "cudnn", "cutlass", "nhwc")),
           ("matmul", ("gemm", "nvjet", "cublas")),
           ("optimizer", ("multi_tensor", "fused_sgd", "foreach")),
           ("copy / cast", ("copy", "memcpy", "memset", "cast", "elementwise_kernel")))


def kind(name):
    """The class of a kernel or operator name (CLASSES, first match), else "other"."""
    low = name.lower()
    for label, keys in CLASSES:
        if any(k in low for k in keys):
            return label
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--mode", default="default", help="torch.compile mode, or 'eager'")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="resnet50", help="the benchmark's preset (small: a CPU-sized check)")
    a = ap.parse_args()
    os.environ.setdefault("FLAGPERF_DEVICE", a.device)
    cfg = {"preset": a.preset, "batch_size": a.batch, "image_size": a.image,
           "compile": a.mode != "eager", "compile_mode": "default" if a.mode == "eager" else a.mode}
    c = rn50.read_config(cfg)
    ctx = harness.setup_distributed(cfg)
    cuda = ctx.is_cuda
    fmt = torch.channels_last if c["channels_last"] else torch.contiguous_format
    if cuda:
        torch.backends.cudnn.benchmark = True      # as the benchmark: fixed shapes, cuDNN's fastest kernels
    torch.manual_seed(0)
    model = rn50.resnet(c["blocks"], c["num_classes"], c["base_width"]).to(ctx.device).to(memory_format=fmt)
    trainer = rn50.Trainer(model, c, ctx, fmt, c["compile"])
    x = torch.randn(a.batch, 3, a.image, a.image, device=ctx.device).to(memory_format=fmt)
    y = torch.randint(0, c["num_classes"], (a.batch,), device=ctx.device)

    def step():
        trainer.step(x, y)

    t0 = time.time()
    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    print(f"warm-up ({a.warmup} steps, compile included): {time.time() - t0:.1f} s", flush=True)
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.steps):
            step()
        end.record()
        torch.cuda.synchronize()
        step_ms = start.elapsed_time(end) / a.steps
    else:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        step_ms = (time.perf_counter() - t0) * 1e3 / a.steps
    print(f"step {step_ms:.2f} ms = {a.batch / step_ms * 1e3:.0f} images/s (batch {a.batch}, {a.image}px, mode "
          f"{a.mode}, {torch.cuda.get_device_name(ctx.device) if cuda else 'cpu'}, torch {torch.__version__}, "
          f"optimizer {trainer.optimizer_impl})", flush=True)

    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(a.steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    per_kind, per_name = collections.Counter(), collections.Counter()
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        on_device = dt is not None and str(dt).endswith("CUDA")
        if cuda and not on_device:
            continue
        if not cuda and (e.cpu_parent is not None or not e.name.startswith("aten::")):
            continue
        us = getattr(e, "device_time", None) if cuda else e.cpu_time_total
        if us is None:
            us = getattr(e, "cuda_time", 0.0)
        per_kind[kind(e.name)] += us
        per_name[e.name] += us
    busy = sum(per_kind.values()) / 1e3 / a.steps
    print(f"{'GPU' if cuda else 'CPU'} busy {busy:.2f} ms per step of {step_ms:.2f} ms "
          f"({100 * busy / step_ms:.1f}%; the rest is the device idle, waiting for the host)")
    for label, us in per_kind.most_common():
        ms = us / 1e3 / a.steps
        print(f"  {label:<20} {ms:8.2f} ms/step  {100 * ms / busy:5.1f}% of busy")
    print("top kernels (ms/step):")
    for name, us in per_name.most_common(15):
        print(f"  {us / 1e3 / a.steps:8.3f}  [{kind(name)}] {name[:110]}")


if __name__ == "__main__":
    main()
