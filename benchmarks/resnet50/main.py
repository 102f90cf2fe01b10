"""Train ResNet-50 with DDP for a fixed time budget on learnable synthetic ImageNet-shaped images (or an image
folder): images/s, MFU, a held-out accuracy check and a torchvision baseline; see README.md and docs/benchmarks.md."""
import contextlib
import copy
import math
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness, stragglers  # noqa: E402

NAME = "resnet50"
LOG = harness.PerfLog(benchmark=NAME)
LOG.event("INIT_START")  # before `import torch`, so that e2e_time and time_to_first_step_s include it

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from model import conv_linear_macs, resnet  # noqa: E402

# The model and data shape of a preset; each key can be overridden one by one (null in case_config.yaml: the
# preset's value).
PRESETS = {
    "resnet50": dict(image_size=224, num_classes=1000, base_width=64, blocks=[3, 4, 6, 3], batch_size=256,
                     dataset_size=32768, eval_size=10000, pattern_size=4, pattern_scale=8, target_accuracy=0.9),
    "small": dict(image_size=64, num_classes=10, base_width=16, blocks=[1, 1, 1, 1], batch_size=32,
                  dataset_size=2048, eval_size=512, pattern_size=4, pattern_scale=4, target_accuracy=0.9),
}
DEFAULTS = dict(preset="small", data="auto", noise_std=0.5, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5,
                lr_warmup_steps=20, warmup_steps=3, time_budget_s=20.0, max_steps=1000, log_every=10,
                eval_every=20, early_stop=True, channels_last=True, compile="auto", compile_mode="default",
                optimizer="fused", baseline="auto", straggler_probe_steps=10,
                straggler_margin_pct=stragglers.MARGIN_PCT, seed=1234)
CHOICES = {"preset": tuple(PRESETS), "data": ("auto", "synthetic", "folder", "dali"),
           "compile_mode": ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
           "optimizer": ("fused", "foreach")}
# torch.compile's modes that capture CUDA graphs (inductor's cudagraph trees; on a CPU they change nothing)
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
TRI_STATE = ("compile", "baseline")  # "auto", true or false
PEAK_KEY = "bf16_tflops"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# ImageNet's per-channel mean and std (0..255): the folder images and the synthetic ones are normalised alike
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
FLOP_FORMULA = ("forward_flops_per_image = 2 * sum over every Conv2d and Linear of its MACs at image_size "
                "(Conv2d: C_out * H_out * W_out * C_in/groups * kh * kw; Linear: in_features * out_features; "
                "BN, ReLU, pooling and residual adds not counted); train_flops_per_image = 3 * "
                "forward_flops_per_image (backward = 2 x forward); model_tflops_per_device = train_flops_per_image "
                "* images_per_s_per_device / 1e12; mfu = model_tflops_per_device / peak_tflops")


def _value(key, v, default):
    """Strings from a fixed set, tri-state auto/true/false, numbers of the default's type."""
    if key in TRI_STATE:
        if isinstance(v, str) and v.lower() in ("true", "false"):
            v = v.lower() == "true"       # "false" written as a string (a JSON override) means false
        if v is True or v is False or v == "auto":
            return v
        harness.config_error(f"{NAME}: {key} must be auto, true or false, got {v!r}")
    if isinstance(default, str):
        if key in CHOICES and v not in CHOICES[key]:
            harness.config_error(f"{NAME}: {key} must be one of {', '.join(CHOICES[key])}, got {v!r}")
        return str(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        harness.config_error(f"{NAME}: {key} must be a {type(default).__name__}, got {v!r}")
    if isinstance(default, int) and v != int(v):
        harness.config_error(f"{NAME}: {key} must be an integer, got {v!r}")
    return type(default)(v)


def read_config(cfg):
    """The typed configuration: DEFAULTS, then the preset's keys, each overridable (null: the preset's)."""
    keys = harness.CaseKeys(cfg, NAME)
    c = keys.typed(DEFAULTS, _value)
    preset = PRESETS[c["preset"]]
    for key, default in preset.items():
        v = cfg.get(key)
        if v is None:
            c[key] = default
        elif key == "blocks":
            if not (isinstance(v, list) and len(v) == 4 and all(isinstance(b, int) and not isinstance(b, bool)
                                                                and b >= 1 for b in v)):
                harness.config_error(f"{NAME}: blocks must be a list of 4 integers >= 1 (bottleneck blocks per "
                                     f"stage; ResNet-50: [3, 4, 6, 3]), got {v!r}")
            c[key] = list(v)
        else:
            c[key] = _value(key, v, default)
    keys.require_positive(c, ("num_classes", "base_width", "batch_size", "dataset_size", "eval_size",
                                       "pattern_size", "pattern_scale", "max_steps", "log_every"))
    if c["num_classes"] < 2:
        harness.config_error(f"{NAME}: num_classes must be >= 2, got {c['num_classes']}")
    if c["image_size"] < 32:
        harness.config_error(f"{NAME}: image_size must be >= 32 (the net downsamples by 32), got {c['image_size']}")
    if c["target_accuracy"] is not None and not 0.0 < c["target_accuracy"] <= 1.0:
        harness.config_error(f"{NAME}: target_accuracy must be within (0, 1], got {c['target_accuracy']}")
    if c["time_budget_s"] <= 0 or c["lr"] <= 0:
        harness.config_error(f"{NAME}: time_budget_s and lr must be > 0")
    if c["noise_std"] < 0 or c["weight_decay"] < 0 or not 0 <= c["momentum"] < 1:
        harness.config_error(f"{NAME}: noise_std and weight_decay must be >= 0, momentum within [0, 1)")
    if c["nesterov"] and c["momentum"] == 0:
        harness.config_error(f"{NAME}: nesterov needs momentum > 0")
    if c["warmup_steps"] < 1 or c["warmup_steps"] >= c["max_steps"]:
        harness.config_error(f"{NAME}: warmup_steps must be >= 1 and < max_steps={c['max_steps']}, "
                             f"got {c['warmup_steps']}")
    if c["straggler_probe_steps"] < 0 or c["straggler_margin_pct"] <= 0:
        harness.config_error(f"{NAME}: straggler_probe_steps must be >= 0 and straggler_margin_pct > 0, got "
                             f"{c['straggler_probe_steps']} and {c['straggler_margin_pct']}")
    if c["eval_every"] < 0 or c["lr_warmup_steps"] < 0:
        harness.config_error(f"{NAME}: eval_every (0: only at the end) and lr_warmup_steps must be >= 0")
    return c


# --------------------------------------------------------------------------- data

def class_textures(c):
    """One fixed smooth periodic RGB texture per class, (num_classes, 3, P, P) with period P = pattern_size x
    pattern_scale: a pattern_size x pattern_size tile of N(0, 1) values, upsampled pattern_scale times
    bilinearly with wrap-around (so the texture tiles the plane without a seam). Depends on the seed only."""
    g = torch.Generator().manual_seed(c["seed"])
    p, u = c["pattern_size"], c["pattern_scale"]
    tiles = torch.randn(c["num_classes"], 3, p, p, generator=g)
    up = F.interpolate(F.pad(tiles, (1, 1, 1, 1), mode="circular"), scale_factor=u, mode="bilinear",
                       align_corners=False)
    tex = up[:, :, u:u + p * u, u:u + p * u]
    return tex / tex.flatten(1).std(1).view(-1, 1, 1, 1)  # unit contrast per class


def synthetic_images(tex, c, n, seed, device, fmt, chunk=256):
    """n uint8 images (n, 3, S, S) and labels, built on ``device`` in chunks: the class texture tiled over the
    image, cyclically shifted by a random (dy, dx) within one period, times a random contrast in [0.5, 1.5),
    plus N(0, noise_std^2) noise, mapped to 0..255 with the ImageNet mean/std (so normalisation inverts it)
    and rounded."""
    g = torch.Generator(device=device).manual_seed(seed)
    k, s, period = c["num_classes"], c["image_size"], tex.shape[-1]
    tex = tex.to(device).flatten(2)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    images = torch.empty(n, 3, s, s, dtype=torch.uint8, device=device).contiguous(memory_format=fmt)
    labels = torch.randint(k, (n,), generator=g, device=device)
    pix = torch.arange(s, device=device)
    for lo in range(0, n, chunk):
        m = min(chunk, n - lo)
        dy = torch.randint(period, (m, 1, 1), generator=g, device=device)
        dx = torch.randint(period, (m, 1, 1), generator=g, device=device)
        idx = ((pix.view(1, s, 1) + dy) % period) * period + (pix.view(1, 1, s) + dx) % period
        x = torch.gather(tex[labels[lo:lo + m]], 2, idx.view(m, 1, s * s).expand(m, 3, s * s)).view(m, 3, s, s)
        x.mul_(0.5 + torch.rand(m, 1, 1, 1, generator=g, device=device))
        x.add_(torch.randn(m, 3, s, s, generator=g, device=device), alpha=c["noise_std"])
        images[lo:lo + m] = (x * std + mean).round_().clamp_(0, 255).to(torch.uint8)
    return images, labels


def find_image_folder(data_dir):
    """(train root, eval root or None, class names) when data_dir holds class subfolders of images (directly,
    or in train/ with an optional val/), else None."""
    def classes(root):
        try:
            names = sorted(d.name for d in os.scandir(root) if d.is_dir())
        except OSError:
            return []
        return [n for n in names if any(f.lower().endswith(IMAGE_EXTENSIONS)
                                        for f in os.listdir(os.path.join(root, n)))]

    if os.path.isdir(os.path.join(data_dir, "train")) and classes(os.path.join(data_dir, "train")):
        train = os.path.join(data_dir, "train")
        val = os.path.join(data_dir, "val")
        return train, (val if os.path.isdir(val) else None), classes(train)
    found = classes(data_dir)
    return (data_dir, None, found) if found else None


def list_images(root, class_names):
    out = []
    for label, name in enumerate(class_names):
        folder = os.path.join(root, name)
        if os.path.isdir(folder):
            out += [(os.path.join(folder, f), label) for f in sorted(os.listdir(folder))
                    if f.lower().endswith(IMAGE_EXTENSIONS)]
    return out


def folder_images(files, c, device, fmt):
    """Decode (torchvision.io.decode_image, RGB), resize the shorter side to image_size (antialiased) and centre
    crop; uint8 (n, 3, S, S) on ``device`` and labels."""
    from torchvision.io import ImageReadMode, decode_image, read_file

    s = c["image_size"]
    images = torch.empty(len(files), 3, s, s, dtype=torch.uint8, device=device).contiguous(memory_format=fmt)
    for i, (path, _) in enumerate(files):
        try:
            img = decode_image(read_file(path), mode=ImageReadMode.RGB).float().unsqueeze(0)
        except Exception as e:  # a broken file: say which
            harness.config_error(f"{NAME}: cannot decode {path}: {type(e).__name__}: {e}")
        h, w = img.shape[-2:]
        scale = s / min(h, w)
        nh, nw = max(s, round(h * scale)), max(s, round(w * scale))
        img = F.interpolate(img, size=(nh, nw), mode="bilinear", antialias=True, align_corners=False)
        top, left = (nh - s) // 2, (nw - s) // 2
        images[i] = img[0, :, top:top + s, left:left + s].round().clamp(0, 255).to(torch.uint8)
    labels = torch.tensor([label for _, label in files], dtype=torch.long, device=device)
    return images, labels


def dali_or_error(c, ctx):
    """``data: dali``, checked at case start: NVIDIA DALI must import and the device must be a CUDA GPU (it decodes
    there); else a one-line config error (exit 2)."""
    if c["data"] != "dali":
        return
    try:
        from nvidia.dali import fn, pipeline_def, types  # noqa: F401
    except Exception as e:  # not installed, or built for another CUDA
        harness.config_error(f"{NAME}: data: dali needs NVIDIA DALI (module nvidia.dali, package nvidia-dali-cuda120 "
                             f"or the one for this CUDA), which does not import here ({type(e).__name__}: {e}); "
                             f"data: folder decodes with torchvision instead")
    if not ctx.is_cuda:
        harness.config_error(f"{NAME}: data: dali decodes on a CUDA GPU; this run is on {ctx.device.type}")


def dali_images(files, c, ctx, fmt, batch=64):
    """Decode with NVIDIA DALI on this rank's GPU (nvJPEG through fn.decoders.image, device "mixed"), resize the
    shorter side to image_size (antialiased) and centre crop, as folder_images does; uint8 (n, 3, S, S) on the
    device and labels."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    s = c["image_size"]
    paths, labels = [f for f, _ in files], [label for _, label in files]

    @pipeline_def(batch_size=batch, num_threads=4, device_id=ctx.device.index, seed=c["seed"])
    def decode():
        raw, _ = fn.readers.file(files=paths, labels=labels, random_shuffle=False, name="reader")
        img = fn.decoders.image(raw, device="mixed", output_type=types.RGB)
        img = fn.resize(img, resize_shorter=s, antialias=True)
        img = fn.crop(img, crop=(s, s), crop_pos_x=0.5, crop_pos_y=0.5)
        return fn.transpose(img, perm=[2, 0, 1])

    pipe = decode()
    pipe.build()
    images = torch.empty(len(files), 3, s, s, dtype=torch.uint8, device=ctx.device).contiguous(memory_format=fmt)
    lo = 0
    for out in DALIGenericIterator([pipe], ["images"], reader_name="reader",
                                   last_batch_policy=LastBatchPolicy.PARTIAL):
        chunk = out[0]["images"]
        images[lo:lo + len(chunk)] = chunk.to(ctx.device)
        lo += len(chunk)
    return images, torch.tensor(labels, dtype=torch.long, device=ctx.device)


def load_data(args, c, ctx, fmt, given_classes=None):
    """Training images of this rank, the held-out shard of this rank, and a description for the details."""
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    data_dir = args.data_dir or ""
    folder = None
    if c["data"] != "synthetic" and data_dir:
        if not os.path.isdir(data_dir):
            harness.config_error(f"{NAME}: data directory {data_dir!r} does not exist (give null in CASES for "
                                 f"synthetic data)")
        folder = find_image_folder(data_dir)
    if c["data"] in ("folder", "dali") and folder is None:
        harness.config_error(f"{NAME}: data: {c['data']}, but {data_dir!r} holds no class subfolders of images "
                             f"({', '.join(IMAGE_EXTENSIONS)}), directly or under train/")
    per_rank = c["dataset_size"] // world
    if folder is None:
        tex = class_textures(c)
        train_x, train_y = synthetic_images(tex, c, per_rank, c["seed"] + 1000 + rank, dev, fmt)
        eval_x, eval_y = synthetic_images(tex, c, c["eval_size"], c["seed"] + 1, dev, fmt)
        desc = {"kind": "synthetic", "textures": "per-class smooth periodic RGB texture (pattern_size x "
                "pattern_size N(0,1) tile upsampled pattern_scale x), random cyclic shift, contrast in [0.5, 1.5), "
                "N(0, noise_std^2) noise, uint8", "period_px": c["pattern_size"] * c["pattern_scale"],
                "noise_std": c["noise_std"], "train_images": per_rank * world, "eval_images": c["eval_size"]}
        if data_dir:
            desc["data_dir_ignored"] = (f"{data_dir} holds no class subfolders of images" if c["data"] == "auto"
                                        else "data: synthetic")
        return train_x, train_y, eval_x[rank::world], eval_y[rank::world], desc
    try:
        if c["data"] != "dali":
            import torchvision  # noqa: F401
    except ImportError as e:
        harness.config_error(f"{NAME}: {data_dir} is an image folder, and reading it needs torchvision "
                             f"(torchvision.io.decode_image), which does not import here ({e}); install torchvision "
                             f"matching torch {torch.__version__}, or give no data directory (null in CASES) for "
                             f"synthetic data")
    train_root, val_root, names = folder
    if given_classes is not None and given_classes != len(names):
        harness.config_error(f"{NAME}: num_classes={given_classes} but {train_root} has {len(names)} classes")
    c["num_classes"] = len(names)
    files = list_images(train_root, names)
    if val_root:
        eval_files = list_images(val_root, names)
    else:  # every 10th image of the (sorted) folder is held out
        eval_files, files = files[::10], [f for i, f in enumerate(files) if i % 10]
    g = torch.Generator().manual_seed(c["seed"])
    files = [files[i] for i in torch.randperm(len(files), generator=g)[:c["dataset_size"]].tolist()]
    eval_files = [eval_files[i] for i in torch.randperm(len(eval_files), generator=g)[:c["eval_size"]].tolist()]
    mine = files[rank::world]
    if len(mine) < c["batch_size"] or not eval_files:
        harness.config_error(f"{NAME}: {train_root}: {len(files)} training images ({len(mine)} on rank {rank}) "
                             f"for batch_size={c['batch_size']}, {len(eval_files)} held-out images")
    if c["data"] == "dali":
        train_x, train_y = dali_images(mine, c, ctx, fmt)
        eval_x, eval_y = dali_images(eval_files[rank::world], c, ctx, fmt)
        decoded_by = ("NVIDIA DALI on the GPU (fn.decoders.image, device mixed) once, into memory; resize shorter "
                      "side + centre crop")
    else:
        train_x, train_y = folder_images(mine, c, dev, fmt)
        eval_x, eval_y = folder_images(eval_files[rank::world], c, dev, fmt)
        decoded_by = "torchvision.io.decode_image once, into memory; resize shorter side + centre crop"
    desc = {"kind": "folder", "train_root": train_root, "eval_root": val_root or "every 10th image of train_root",
            "classes": len(names), "train_images": len(files), "eval_images": len(eval_files),
            "decoded_by": decoded_by}
    return train_x, train_y, eval_x, eval_y, desc


# --------------------------------------------------------------------------- the training loop

class Trainer:
    """One model's training state and the loop that times it; used for our model and for the baseline."""

    def __init__(self, model, c, ctx, fmt, compile_on):
        self.c, self.ctx, self.fmt, self.model = c, ctx, fmt, model
        dev = ctx.device
        ddp = DDP(model, device_ids=[dev.index] if ctx.is_cuda else None) if ctx.initialized else model
        self.net = torch.compile(ddp, mode=c["compile_mode"]) if compile_on else ddp
        # CUDA graphs replay the step's kernels; each step starts a new graph generation
        self.cuda_graphs = compile_on and ctx.is_cuda and c["compile_mode"] in CUDA_GRAPH_MODES
        lr = c["lr"] * c["batch_size"] * ctx.world_size / 256  # linear scaling rule (Goyal et al. 2017)
        self.optimizer_impl, self.optimizer_note = "foreach", None
        if c["optimizer"] == "fused":
            try:
                self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=c["momentum"],
                                           nesterov=c["nesterov"], weight_decay=c["weight_decay"], fused=True)
                self.optimizer_impl = "fused"
            except (RuntimeError, TypeError, ValueError) as e:  # no fused SGD for this device / torch
                self.optimizer_note = f"fused SGD unavailable here ({type(e).__name__}: {e}); foreach instead"
        if self.optimizer_impl != "fused":
            self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=c["momentum"], nesterov=c["nesterov"],
                                       weight_decay=c["weight_decay"], foreach=True)
        warm = max(1, c["lr_warmup_steps"])
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.peak_lr = lr
        self.autocast = torch.autocast("cuda", dtype=torch.bfloat16) if ctx.is_cuda else contextlib.nullcontext()

    def step(self, x, y):
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with self.autocast:
            loss = F.cross_entropy(self.net(x).float(), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.sched.step()
        return loss.detach()

    def evaluate(self, eval_x, eval_y, normalize):
        """Held-out accuracy over all ranks' shards (all-reduced: every rank gets the same number), eager, in
        eval mode (BN running statistics)."""
        self.model.eval()
        correct = 0.0
        with torch.no_grad(), self.autocast:
            for lo in range(0, len(eval_x), 256):
                pred = self.model(normalize(eval_x[lo:lo + 256])).argmax(1)
                correct += (pred == eval_y[lo:lo + 256]).sum().item()
        self.model.train()
        total = self.ctx.all_reduce([correct, float(len(eval_x))])
        return total[0] / max(1.0, total[1])

    def run(self, batches, target=None, evaluate=None, log=None):
        """warmup_steps untimed (the first one, compilation included, timed on its own as compile_s), then the
        measured window: until its timed seconds reach time_budget_s, max_steps, or (early_stop) the held-out
        accuracy reaching ``target``. Every log_every steps the ranks all-reduce the window's loss and their
        elapsed seconds: all take the same decision. Evaluations (every eval_every steps, ``evaluate``) stop the
        clock."""
        c, ctx = self.c, self.ctx
        self.model.train()
        step, t0 = 0, time.perf_counter()
        first_step_s = None
        for _ in range(c["warmup_steps"]):
            self.step(*next(batches))
            step += 1
            if first_step_s is None:
                ctx.sync()
                first_step_s = time.perf_counter() - t0
                first_step_end = time.time()
        watch = harness.Stopwatch(ctx)
        watch.start()
        window = harness.device_window(ctx).start()     # clocks, power, energy of the measured steps (and evals)
        warmup_s = time.perf_counter() - t0
        clock = harness.StepClock(ctx)
        seg_start = time.perf_counter()
        clock.mark()
        timed_s, measured, loss_sum, loss_n = 0.0, 0, torch.zeros((), device=ctx.device), 0
        window_loss, accuracy, evals, converged_at, stop_reason = float("nan"), None, [], None, None
        while True:
            loss_sum += self.step(*next(batches))
            loss_n += 1
            step += 1
            measured += 1
            clock.mark()
            eval_due = evaluate is not None and c["eval_every"] and step % c["eval_every"] == 0
            if not (step % c["log_every"] == 0 or step >= c["max_steps"] or eval_due):
                continue
            local_loss = loss_sum.item()  # waits for this rank's queued steps
            elapsed = timed_s + time.perf_counter() - seg_start
            sums = ctx.all_reduce([local_loss / max(1, loss_n), elapsed])
            window_loss, elapsed = sums[0] / ctx.world_size, sums[1] / ctx.world_size
            loss_sum.zero_()
            loss_n = 0
            record = dict(step=step, loss=window_loss, elapsed_s=elapsed, lr=self.sched.get_last_lr()[0])
            if eval_due:
                timed_s += watch.stop()
                clock.pause()
                accuracy = evaluate()
                evals.append([step, round(accuracy, 4)])
                record["accuracy"] = accuracy
                if target is not None and accuracy >= target and converged_at is None:
                    converged_at = step
                if target is not None and accuracy >= target and c["early_stop"]:
                    stop_reason = "converged"
            if log is not None:
                log(**record)
            if stop_reason is None and step >= c["max_steps"]:
                stop_reason = "max_steps"
            if stop_reason is None and elapsed >= c["time_budget_s"]:
                stop_reason = "time_budget"
            if stop_reason is not None:
                break
            if eval_due:
                watch.start()
                seg_start = time.perf_counter()
                clock.mark()
        if not eval_due:  # else the last evaluation stopped the clock already
            timed_s += watch.stop()
        window.stop()
        return dict(steps=step, measured_steps=measured, timed_s=timed_s, step_times=clock.times(),
                    compile_s=first_step_s, warmup_s=warmup_s, first_step_end=first_step_end,
                    final_loss=window_loss, accuracy=accuracy, evals=evals, converged_at=converged_at,
                    stop_reason=stop_reason, device_window=window.summary())


def batch_stream(train_x, train_y, bs, seed, dev, fmt):
    """Endless random batches of this rank's images, a new order every epoch (the order is drawn on the device)."""
    n = len(train_x)
    gen = torch.Generator(device=dev).manual_seed(seed)
    while True:
        order = torch.randperm(n, generator=gen, device=dev)
        for lo in range(0, n - bs + 1, bs):
            idx = order[lo:lo + bs]
            yield train_x[idx].contiguous(memory_format=fmt), train_y[idx]


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] if s else float("nan")


def throughput(result, bs, world):
    return result["measured_steps"] * bs * world / result["timed_s"] if result["timed_s"] > 0 else 0.0


# --------------------------------------------------------------------------- the torchvision baseline

def baseline_plan(c):
    """(run it?, details): torchvision's resnet50 at our shape, where torchvision imports and the shape is
    ResNet-50's (preset small is not, unless baseline: true)."""
    try:
        import torchvision
    except ImportError:
        return False, {"omitted": "torchvision not installed"}
    if c["baseline"] is False:
        return False, {"omitted": "baseline: false"}
    same_arch = c["blocks"] == [3, 4, 6, 3] and c["base_width"] == 64
    if not same_arch and c["baseline"] == "auto":
        return False, {"omitted": f"the model is not ResNet-50's shape (blocks {c['blocks']}, base_width "
                                  f"{c['base_width']}, preset {c['preset']}); baseline: true forces it"}
    return True, {"torchvision": torchvision.__version__, "same_architecture": same_arch}


def run_baseline(c, ctx, fmt, compile_on, batches, n_params):
    import torchvision

    torch.manual_seed(c["seed"])
    model = torchvision.models.resnet50(num_classes=c["num_classes"]).to(ctx.device).to(memory_format=fmt)
    trainer = Trainer(model, c, ctx, fmt, compile_on)
    res = trainer.run(batches)
    return res, {"params": sum(p.numel() for p in model.parameters()), "params_ours": n_params,
                 "optimizer_impl": trainer.optimizer_impl}


# --------------------------------------------------------------------------- main

def straggler_probe(c, ctx, model, trainer, batches):
    """Seconds of each of ``straggler_probe_steps`` forward + backward passes of a copy of the trained model (not
    DDP-wrapped: no gradient all-reduce) on one batch of this rank's, eager, under the run's autocast: this rank's
    compute alone (stragglers.time_probe). The copy leaves the model and its BN statistics as they were."""
    if c["straggler_probe_steps"] == 0:
        return []
    probe = copy.deepcopy(model).train()
    x, y = next(batches)

    def one_pass():
        with trainer.autocast:
            loss = F.cross_entropy(probe(x).float(), y)
        loss.backward()
        probe.zero_grad(set_to_none=True)

    return stragglers.time_probe(one_pass, ctx, c["straggler_probe_steps"])


def prepare_data(args, c, ctx, cfg, fmt):
    """This rank's training batches (``batches(seed)``: normalised, endless), the held-out evaluation of a
    trainer (``evaluate(trainer)``) and the data's description; a folder of real images without a
    target_accuracy gets one it can reach in a short budget."""
    dev = ctx.device
    train_x, train_y, eval_x, eval_y, data_desc = load_data(args, c, ctx, fmt, cfg.get("num_classes"))
    if data_desc["kind"] == "folder" and cfg.get("target_accuracy") is None:
        # real images in a short budget: twice chance, at most halfway between chance and 1
        c["target_accuracy"] = min(2.0 / c["num_classes"], (1.0 + 1.0 / c["num_classes"]) / 2)
    if len(train_x) < c["batch_size"]:
        harness.config_error(f"{NAME}: dataset_size={c['dataset_size']} gives {len(train_x)} images per rank, fewer "
                             f"than batch_size={c['batch_size']}")
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
    inv_std = 1.0 / torch.tensor(STD, device=dev).view(1, 3, 1, 1)

    def normalize(x):
        return (x.float() - mean) * inv_std

    def batches(seed):
        for x, y in batch_stream(train_x, train_y, c["batch_size"], seed, dev, fmt):
            yield normalize(x), y

    def evaluate(trainer):
        return trainer.evaluate(eval_x, eval_y, normalize)
    return batches, evaluate, data_desc


def run_details(c, ctx, res, trainer, data_desc, precision, compile_on, n_params):
    """The FINISHED (or CHECK_FAILED) details of our model's run, before the MFU and the baseline."""
    return {"device_window": res.get("device_window"),
            "converged": res["converged"], "converged_at_step": res["converged_at"],
            "target_accuracy": res["target"], "eval_accuracy": res["accuracy"], "final_loss": res["final_loss"],
            "evals": res["evals"], "replicas_in_sync": res["in_sync"], "param_checksum_spread": res["spread"],
            "steps": res["steps"], "measured_steps": res["measured_steps"], "warmup_steps": c["warmup_steps"],
            "max_steps": c["max_steps"], "time_budget_s": c["time_budget_s"], "stop_reason": res["stop_reason"],
            "chance_accuracy": 1.0 / c["num_classes"], "precision": precision,
            "memory_format": "channels_last" if c["channels_last"] else "contiguous",
            "compile": {"enabled": compile_on, "setting": c["compile"], "mode": c["compile_mode"],
                        "cuda_graphs": trainer.cuda_graphs,
                        "target": "the DDP-wrapped model" if ctx.initialized else "the model"},
            "optimizer": {"name": "SGD", "impl": trainer.optimizer_impl, "requested": c["optimizer"],
                          "note": trainer.optimizer_note, "momentum": c["momentum"],
                          "nesterov": c["nesterov"], "weight_decay": c["weight_decay"],
                          "peak_lr": trainer.peak_lr, "lr_rule": "lr x global_batch / 256, linear warm-up over "
                          "lr_warmup_steps, then constant"},
            "model": {"preset": c["preset"], "blocks": c["blocks"], "base_width": c["base_width"],
                      "num_classes": c["num_classes"], "image_size": c["image_size"], "params": n_params},
            "data": data_desc,
            "step_time_source": ("CUDA events recorded after every step" if ctx.is_cuda else
                                 "time.perf_counter after every step (after a device sync off the CPU)")}


def run_metrics(cfg, c, ctx, res, images_per_s, flops, n_params, device_name):
    """Our model's figures and the MFU record (``flops``: forward MACs, forward and train FLOPs per image)."""
    fwd_macs, fwd_flops, train_flops = flops
    per_device = images_per_s / ctx.world_size
    model_tflops = train_flops * per_device / 1e12
    step_times = res["step_times"]
    metrics = {
        "images_per_s_per_device": {"value": per_device, "unit": "images/s"},
        "step_time_median_s": {"value": statistics.median(step_times), "unit": "s"},
        "step_time_p90_s": {"value": percentile(step_times, 0.9), "unit": "s"},
        "model_tflops_per_device": {"value": model_tflops, "unit": "TFLOP/s"},
        "final_loss": {"value": res["final_loss"], "unit": "nats"},
        "eval_accuracy": {"value": res["accuracy"], "unit": "fraction"},
        "converged": {"value": int(res["converged"]), "unit": "bool"},
        "compile_s": {"value": res["compile_s"], "unit": "s"},
        "warmup_s": {"value": res["warmup_s"], "unit": "s"},
        "time_to_first_step_s": {"value": res["first_step_end"] - LOG.init_start, "unit": "s"},
        "train_time_s": {"value": res["timed_s"], "unit": "s"},
        "steps": {"value": res["steps"], "unit": "steps"},
        "params": {"value": n_params, "unit": "params"},
        "train_flops_per_image": {"value": train_flops, "unit": "FLOP"},
        "peak_rss_gib": {"value": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, "unit": "GiB"},
    }
    if res["peak_memory_gib"] is not None:
        metrics["peak_memory_gib"] = {"value": res["peak_memory_gib"], "unit": "GiB"}
    mfu = {"formula": FLOP_FORMULA, "forward_macs_per_image": fwd_macs, "forward_flops_per_image": fwd_flops,
           "train_flops_per_image": train_flops, "image_size": c["image_size"],
           "model_tflops_per_device": model_tflops, "dtype": "bf16" if ctx.is_cuda else "fp32"}
    if ctx.is_cuda:
        peak, entry = harness.peak_for(cfg, PEAK_KEY, device_name)
        if peak:
            metrics["mfu"] = {"value": 100.0 * model_tflops / peak, "unit": "%"}
            mfu.update(peak_key=PEAK_KEY, peak_entry=entry, peak_tflops=peak)
        else:
            mfu["omitted"] = f"no {PEAK_KEY} entry in vendor_peaks matches {device_name!r}"
    else:
        mfu["omitted"] = ("cpu run in fp32: the vendor peak tables hold accelerator peaks only, so there is no "
                          "peak to divide by")
    return metrics, mfu


def baseline_run(c, ctx, fmt, compile_on, batches, n_params, images_per_s, planned, details, metrics):
    """torchvision's resnet50 through the same Trainer loop, after our measurement: its figures go into
    ``metrics``; returns the baseline details."""
    world = ctx.world_size
    base, extra = run_baseline(c, ctx, fmt, compile_on, batches(c["seed"] + 3000 + ctx.rank), n_params)
    base_ips = throughput(base, c["batch_size"], world)
    metrics["baseline_images_per_s"] = {"value": base_ips, "unit": "images/s"}
    if base_ips > 0:
        metrics["ratio_vs_torchvision"] = {"value": images_per_s / base_ips, "unit": "x"}
    out = dict(planned, **extra)
    out.update(
        compared=f"torchvision.models.resnet50(num_classes={c['num_classes']}) against benchmarks/resnet50/"
                 f"model.py, after our measurement, through the same Trainer loop: same data stream, SGD "
                 f"({extra['optimizer_impl']}), {details['precision']}, {details['memory_format']}, compile "
                 f"{'on' if compile_on else 'off'}, batch {c['batch_size']} per rank x {world} ranks, "
                 f"{c['warmup_steps']} warm-up steps, time_budget_s {c['time_budget_s']}, max_steps "
                 f"{c['max_steps']}; no evaluation, no convergence check",
        images_per_s=base_ips, measured_steps=base["measured_steps"], timed_s=base["timed_s"],
        compile_s=base["compile_s"], step_time_median_s=statistics.median(base["step_times"]),
        final_loss=base["final_loss"], stop_reason=base["stop_reason"])
    if ctx.is_cuda:
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(ctx.device) / 2 ** 30
    return out


def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg)
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    fmt = torch.channels_last if c["channels_last"] else torch.contiguous_format
    compile_on = ctx.is_cuda if c["compile"] == "auto" else c["compile"]
    dali_or_error(c, ctx)
    if ctx.is_cuda:
        torch.backends.cudnn.benchmark = True  # fixed shapes: cuDNN picks its fastest kernels (in warm-up)
    batches, evaluate, data_desc = prepare_data(args, c, ctx, cfg, fmt)
    target = harness.target_for_test(NAME, c["target_accuracy"], 1.01)

    torch.manual_seed(c["seed"])
    model = resnet(c["blocks"], c["num_classes"], c["base_width"]).to(dev).to(memory_format=fmt)
    n_params = model.num_params()
    fwd_macs, _ = conv_linear_macs(model, c["image_size"])
    fwd_flops = 2 * fwd_macs
    train_flops = 3 * fwd_flops
    do_baseline, baseline_details = baseline_plan(c)
    agreed = ctx.all_reduce([1.0 if do_baseline else 0.0], "min")[0] > 0  # one decision for all ranks
    if do_baseline and not agreed:
        do_baseline, baseline_details = False, {"omitted": "another rank cannot run it (no torchvision there)"}
    trainer = Trainer(model, c, ctx, fmt, compile_on)
    precision = "bf16-autocast" if ctx.is_cuda else "fp32"
    LOG.event("INIT_END", backend=ctx.backend, device=str(dev), world_size=world)

    LOG.event("RUN_START")
    res = trainer.run(batches(c["seed"] + 2000 + rank), target=target, evaluate=lambda: evaluate(trainer),
                      log=lambda **kw: LOG.event("STEP", **kw))
    if not res["evals"] or res["evals"][-1][0] != res["steps"]:
        res["accuracy"] = evaluate(trainer)  # the last word: after the last step
        res["evals"].append([res["steps"], round(res["accuracy"], 4)])
    images_per_s = throughput(res, c["batch_size"], world)
    res.update(target=target, converged=res["accuracy"] >= target,  # all-reduced: every rank agrees
               peak_memory_gib=torch.cuda.max_memory_allocated(dev) / 2 ** 30 if ctx.is_cuda else None)
    with torch.no_grad():
        checksum = sum(p.double().sum() for p in model.parameters()).item()
    cs_min, = ctx.all_reduce([checksum], "min")
    cs_max, = ctx.all_reduce([checksum], "max")
    res.update(in_sync=abs(cs_max - cs_min) <= 1e-9 * max(1.0, abs(cs_max)), spread=cs_max - cs_min)
    LOG.event("RUN_END", steps=res["steps"], stop_reason=res["stop_reason"])

    details = run_details(c, ctx, res, trainer, data_desc, precision, compile_on, n_params)
    failures = []
    if not res["converged"]:
        failures.append(f"eval_accuracy {res['accuracy']:.4f} < target_accuracy {target} after {res['steps']} "
                        f"steps ({res['stop_reason']})")
    if not res["in_sync"]:
        failures.append("DDP replicas diverged")
    if not (math.isfinite(res["final_loss"]) and images_per_s > 0):
        failures.append(f"final_loss {res['final_loss']}, images_per_s {images_per_s}")
    if failures:
        details["failures"] = failures
        LOG.check_failed(details)

    details["stragglers"] = stragglers.gathered_view(
        ctx, res["step_times"], straggler_probe(c, ctx, model, trainer, batches(c["seed"] + 4000 + rank)),
        c["straggler_margin_pct"], "the model on one batch")
    env = harness.env_info(ctx, precision=precision, global_batch=c["batch_size"] * world,
                           image_size=c["image_size"])
    metrics, details["mfu"] = run_metrics(cfg, c, ctx, res, images_per_s, (fwd_macs, fwd_flops, train_flops),
                                          n_params, env["device_name"])
    if details["stragglers"]["flagged"]:
        metrics["straggler_ranks"] = {"value": len(details["stragglers"]["flagged"]), "unit": "ranks"}
    if do_baseline:
        del trainer
        model.to("cpu")
        if ctx.is_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        baseline_details = baseline_run(c, ctx, fmt, compile_on, batches, n_params, images_per_s,
                                        baseline_details, details, metrics)
    details["baseline"] = baseline_details
    ctx.destroy()
    metrics["e2e_time"] = {"value": time.time() - LOG.init_start, "unit": "s"}
    LOG.finished(metric="images_per_s", value=images_per_s, unit="images/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
