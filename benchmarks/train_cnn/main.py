"""Train a small ResNet-style CNN with DDP on synthetic texture images; see README.md and docs/benchmarks.md."""
import contextlib
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="train_cnn")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from model import ResNet  # noqa: E402

DEFAULTS = dict(num_classes=10, image_size=32, pattern_size=4, noise_std=0.5, dataset_size=4096, eval_size=512,
                width=16, blocks_per_stage=1, norm="batch", batch_size=32, lr=0.003, weight_decay=0.0005,
                lr_warmup_steps=10, warmup_steps=5, max_steps=400, eval_every=20, target_accuracy=0.9,
                early_stop=True, channels_last=True, seed=1234, inject_error=False)
PEAK_KEY = "bf16_tflops"


def _value(key, v, default):
    """A string default takes any value as its string; a number must be a number (an integer for an int default)."""
    if isinstance(default, str):
        return str(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        harness.config_error(f"train_cnn: {key} must be a {type(default).__name__}, got {v!r}")
    if isinstance(default, int) and v != int(v):
        harness.config_error(f"train_cnn: {key} must be an integer, got {v!r}")
    return type(default)(v)


def read_config(cfg):
    c = harness.typed_config(cfg, DEFAULTS, "train_cnn", _value)
    harness.require_positive(c, "train_cnn", ("num_classes", "image_size", "pattern_size", "dataset_size",
                                              "eval_size", "width", "blocks_per_stage", "batch_size", "max_steps",
                                              "eval_every"))
    if c["num_classes"] < 2:
        harness.config_error(f"train_cnn: num_classes must be >= 2, got {c['num_classes']}")
    if c["image_size"] < 8:
        harness.config_error(f"train_cnn: image_size must be >= 8 (two stride-2 stages), got {c['image_size']}")
    if not 0.0 < c["target_accuracy"] <= 1.0:
        harness.config_error(f"train_cnn: target_accuracy must be within (0, 1], got {c['target_accuracy']}")
    if c["norm"] not in ("batch", "group", "none"):
        harness.config_error(f"train_cnn: norm must be batch, group or none, got {c['norm']!r}")
    if c["noise_std"] < 0 or c["lr"] <= 0 or c["weight_decay"] < 0:
        harness.config_error("train_cnn: noise_std and weight_decay must be >= 0 and lr > 0")
    return c


# --------------------------------------------------------------------------- data

def class_patterns(c):
    """One fixed random texture per class: a pattern_size x pattern_size x 3 tile of N(0, 1) values
    (identical on every rank: it depends on the seed only)."""
    g = torch.Generator().manual_seed(c["seed"])
    p = c["pattern_size"]
    return torch.randn(c["num_classes"], 3, p * p, generator=g)


def make_images(patterns, c, n, seed, device):
    """n labelled images: the class tile repeated over image_size x image_size, cyclically shifted by a random
    (dy, dx), times a random contrast in [0.5, 1.5), plus N(0, noise_std^2) pixel noise. Built on `device`
    with a generator seeded by `seed` (deterministic for a given device type)."""
    g = torch.Generator(device=device).manual_seed(seed)
    k, p, s = c["num_classes"], c["pattern_size"], c["image_size"]
    patterns = patterns.to(device)
    labels = torch.randint(k, (n,), generator=g, device=device)
    dy = torch.randint(p, (n, 1, 1), generator=g, device=device)
    dx = torch.randint(p, (n, 1, 1), generator=g, device=device)
    rows = (torch.arange(s, device=device).view(1, s, 1) + dy) % p
    cols = (torch.arange(s, device=device).view(1, 1, s) + dx) % p
    idx = (rows * p + cols).view(n, 1, s * s).expand(n, 3, s * s)
    x = torch.gather(patterns[labels], 2, idx).view(n, 3, s, s)
    x.mul_(0.5 + torch.rand(n, 1, 1, 1, generator=g, device=device))
    x.add_(torch.randn(n, 3, s, s, generator=g, device=device), alpha=c["noise_std"])
    return x, labels


# --------------------------------------------------------------------------- FLOPs / MFU

def forward_flops_per_sample(model, c, device, memory_format):
    """Model FLOPs of one forward pass per sample, counted by torch.utils.flop_counter.FlopCounterMode
    (convolutions and the linear head; BN, ReLU, pooling are not counted) on a batch of 2 in eval mode
    (so the BN running statistics are not touched)."""
    x = torch.zeros(2, 3, c["image_size"], c["image_size"], device=device).to(memory_format=memory_format)
    was_training = model.training
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    model.train(was_training)
    return counter.get_total_flops() / 2


def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg)
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    target = 1.01 if c["inject_error"] else c["target_accuracy"]  # test-only: an unreachable target
    fmt = torch.channels_last if (ctx.is_cuda and c["channels_last"]) else torch.contiguous_format
    if ctx.is_cuda:
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels (in warm-up)

    # the class textures and the held-out set are identical on every rank; each rank trains on its own images
    patterns = class_patterns(c)
    per_rank = c["dataset_size"] // world
    if per_rank < c["batch_size"]:
        harness.config_error(f"train_cnn: dataset_size={c['dataset_size']} gives fewer than batch_size="
                             f"{c['batch_size']} images per rank")
    train_x, train_y = make_images(patterns, c, per_rank, c["seed"] + 1000 + rank, dev)
    train_x = train_x.contiguous(memory_format=fmt)
    eval_x, eval_y = make_images(patterns, c, c["eval_size"], c["seed"] + 1, dev)
    eval_x, eval_y = eval_x[rank::world].contiguous(memory_format=fmt), eval_y[rank::world]

    torch.manual_seed(c["seed"])
    model = ResNet(c["num_classes"], c["width"], c["blocks_per_stage"], norm=c["norm"]).to(dev).to(memory_format=fmt)
    n_params = model.num_params()
    fwd_flops = forward_flops_per_sample(model, c, dev, fmt)
    train_flops = 3 * fwd_flops  # forward + backward (~2x forward) per sample
    ddp = DDP(model, device_ids=[dev.index] if ctx.is_cuda else None) if ctx.initialized else model
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=c["weight_decay"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, c["lr_warmup_steps"])))
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if ctx.is_cuda else contextlib.nullcontext()
    precision = "bf16-autocast" if ctx.is_cuda else "fp32"

    def evaluate():
        """Held-out accuracy over all ranks' shards (every rank gets the same number)."""
        ddp.eval()
        correct = 0.0
        with torch.no_grad(), autocast:
            for lo in range(0, len(eval_x), 256):
                correct += (model(eval_x[lo:lo + 256]).argmax(1) == eval_y[lo:lo + 256]).sum().item()
        ddp.train()
        total = ctx.all_reduce([correct, float(len(eval_x))])
        return total[0] / max(1.0, total[1])

    LOG.event("INIT_END", backend=ctx.backend, device=str(dev), world_size=world)
    LOG.event("RUN_START")
    bs, n_local = c["batch_size"], len(train_x)
    perm_gen = torch.Generator(device=dev).manual_seed(c["seed"] + 2000 + rank)  # on the device: no host copy
    order = torch.randperm(n_local, generator=perm_gen, device=dev)
    pos, step, epoch = 0, 0, 0
    watch = harness.Stopwatch(ctx)
    timed_s, measured, timing = 0.0, 0, False
    loss_sum, correct_sum, seen = torch.zeros((), device=dev), torch.zeros((), device=dev), 0
    window_loss, window_acc, accuracy = float("nan"), float("nan"), 0.0
    converged_at, evals = None, []
    ddp.train()
    while step < c["max_steps"]:
        if step >= c["warmup_steps"] and not timing:
            watch.start()  # throughput is measured from here, all ranks together, evaluations excluded
            timing, seg_start = True, step
        if pos + bs > n_local:  # next epoch: a new order of this rank's images
            epoch += 1
            order = torch.randperm(n_local, generator=perm_gen, device=dev)
            pos = 0
        idx = order[pos:pos + bs]
        pos += bs
        x, y = train_x[idx].contiguous(memory_format=fmt), train_y[idx]  # a no-op when indexing kept the format
        with autocast:
            logits = ddp(x)
            loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        loss_sum += loss.detach()
        correct_sum += (logits.detach().argmax(1) == y).sum()
        seen += 1
        if step % c["eval_every"] == 0 or step == c["max_steps"]:
            if timing:
                timed_s += watch.stop()
                measured += step - seg_start
                timing = False
            # mean training loss/accuracy of the window over all ranks, then the held-out accuracy
            sums = ctx.all_reduce([loss_sum.item() / seen, correct_sum.item() / (seen * bs)])
            window_loss, window_acc = sums[0] / world, sums[1] / world
            loss_sum.zero_()
            correct_sum.zero_()
            seen = 0
            accuracy = evaluate()
            evals.append([step, round(accuracy, 4)])
            LOG.event("STEP", step=step, loss=window_loss, train_accuracy=window_acc, accuracy=accuracy,
                      lr=sched.get_last_lr()[0])
            if accuracy >= target and converged_at is None:
                converged_at = step
            if accuracy >= target and c["early_stop"] and measured > 0:
                break
    if timing:
        timed_s += watch.stop()
        measured += step - seg_start
    LOG.event("RUN_END", steps=step)

    converged = accuracy >= target  # the last held-out evaluation (all ranks agree: it is all-reduced)
    with torch.no_grad():
        checksum = sum(p.double().sum() for p in model.parameters()).item()
    cs_min, = ctx.all_reduce([checksum], "min")
    cs_max, = ctx.all_reduce([checksum], "max")
    in_sync = abs(cs_max - cs_min) <= 1e-9 * max(1.0, abs(cs_max))
    samples_per_s = measured * bs * world / timed_s if timed_s > 0 and measured else 0.0
    details = {"converged": converged, "converged_at_step": converged_at, "target_accuracy": target,
               "accuracy": accuracy, "final_loss": window_loss, "final_train_accuracy": window_acc,
               "evals": evals, "replicas_in_sync": in_sync, "param_checksum_spread": cs_max - cs_min,
               "steps": step, "max_steps": c["max_steps"], "measured_steps": measured, "epochs": epoch,
               "chance_accuracy": 1.0 / c["num_classes"], "precision": precision,
               "memory_format": "channels_last" if fmt == torch.channels_last else "contiguous"}
    if c["inject_error"]:
        details["inject_error"] = True
    if not (converged and in_sync and math.isfinite(window_loss) and samples_per_s > 0):
        LOG.check_failed(details)

    env = harness.env_info(ctx, precision=precision, global_batch=bs * world, image_size=c["image_size"])
    metrics = {
        "final_loss": {"value": window_loss, "unit": "nats"},
        "accuracy": {"value": accuracy, "unit": "fraction"},
        "converged": {"value": int(converged), "unit": "bool"},
        "steps": {"value": step, "unit": "steps"},
        "params": {"value": n_params, "unit": "params"},
        "train_time": {"value": timed_s, "unit": "s"},
        "flops_per_sample": {"value": train_flops, "unit": "FLOP"},
        "model_tflops": {"value": train_flops * samples_per_s / world / 1e12, "unit": "TFLOP/s per device"},
    }
    mfu = {"formula": "mfu = flops_per_sample * samples_per_s / (world_size * peak)",
           "flops_per_sample": train_flops, "forward_flops_per_sample": fwd_flops,
           "flops_counted_by": "torch.utils.flop_counter.FlopCounterMode on one forward pass (convs + linear; "
                               "BN/ReLU/pooling not counted), x3 for forward + backward",
           "dtype": "bf16" if ctx.is_cuda else "fp32", "peak_key": PEAK_KEY if ctx.is_cuda else None}
    if ctx.is_cuda:
        peak, entry = harness.peak_for(cfg, PEAK_KEY, env["device_name"])
        if peak:
            metrics["mfu"] = {"value": 100.0 * train_flops * samples_per_s / (world * peak * 1e12), "unit": "%"}
            mfu.update(peak_tflops=peak, peak_entry=entry)
        else:
            mfu["omitted"] = f"no {PEAK_KEY} entry in vendor_peaks matches {env['device_name']!r}"
    else:
        mfu["omitted"] = ("cpu run in fp32: the vendor peak tables hold accelerator peaks only, so there is no "
                          "peak to divide by")
    details["mfu"] = mfu
    ctx.destroy()
    metrics["e2e_time"] = {"value": time.time() - LOG.init_start, "unit": "s"}
    LOG.finished(metric="samples_per_s", value=samples_per_s, unit="samples/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
