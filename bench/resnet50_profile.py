"""Where a ResNet-50 training step's time goes: the benchmark's own model (benchmarks/resnet50/model.py) in the
benchmark's setting (channels_last, bf16 autocast, torch.compile, fused SGD with Nesterov momentum, random data),
warmed up, then STEPS steps under torch.profiler. Prints the step time (device events), the GPU's busy time per
step, and the kernel time per class: convolutions (cuDNN/CUTLASS), other matmuls, compiled (Triton) kernels (the
batch-norm statistics, normalisation, ReLU and residual adds that inductor fuses), the optimizer, copies, the rest;
then the top kernels.
Usage: python3 bench/resnet50_profile.py [--batch 256] [--image 224] [--mode default] [--steps 10] [--device cuda]"""
import argparse
import collections
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "resnet50"))
from model import resnet  # noqa: E402

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
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    model = resnet(device=dev).to(memory_format=torch.channels_last)
    net = model if a.mode == "eager" else torch.compile(model, mode=a.mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5,
                          **({"fused": True} if cuda else {"foreach": True}))
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16)

    def step():
        if cuda and a.mode in ("reduce-overhead", "max-autotune"):
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            loss = F.cross_entropy(net(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

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
          f"{a.mode}, {torch.cuda.get_device_name(dev) if cuda else 'cpu'}, torch {torch.__version__})", flush=True)

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
