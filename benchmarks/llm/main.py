"""Pretrain a Llama-style decoder for a time budget: tokens/s, MFU (formula in the payload) and a real
convergence check on a learnable synthetic language (or a tokenized corpus); see README.md."""
import contextlib
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness, stragglers  # noqa: E402

# The caching allocator with expandable segments (as torchtitan runs): blocks grow in place instead of fragmenting,
# so a step near the card's memory does not stall in allocator retries (details.allocator counts them). A setting
# the environment already has is kept.
if not (os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

LOG = harness.PerfLog(benchmark="llm")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it
T_START = time.monotonic()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import data as llm_data  # noqa: E402
import fp8 as llm_fp8  # noqa: E402
from model import (PRESET_SEQ_LEN, PRESETS, Block, Llama, count_params, flop_conventions, lm_loss,  # noqa: E402
                   rope_tables, shape_from)

SHAPE_KEYS = ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "rope_theta")
CHOICES = {"activation_checkpointing": ("none", "selective", "full"), "parallel": ("auto", "fsdp", "ddp", "none"),
           "compile": ("auto", "true", "false"), "baseline": ("auto", "true", "false"),
           "attention_backend": ("auto", "cudnn", "flash", "efficient", "math"), "optimizer": ("fused", "foreach"),
           "precision": ("auto", "fp8"), "fp8_recipe": llm_fp8.RECIPES, "reshard_after_forward": ("true", "false"),
           "fp8_fsdp_all_gather": ("auto", "true", "false"), "fp8_emulate": ("true", "false")}
DEFAULTS = dict(preset="tiny", seq_len=0, micro_batch=16, grad_accum=1, activation_checkpointing="none",
                compile="auto", parallel="auto", attention_backend="auto", optimizer="fused",
                reshard_after_forward="true", precision="auto", fp8_recipe="tensorwise", fp8_fsdp_all_gather="auto",
                fp8_emulate="false", straggler_probe_steps=10,
                straggler_margin_pct=stragglers.MARGIN_PCT,
                lr=1e-2, weight_decay=0.0, lr_warmup_steps=10, warmup_steps=3, time_budget_s=12.0, min_steps=0,
                max_steps=100000,
                log_every=10, lang_vocab=16, order=2, p_follow=0.9, target_margin=0.8, target_loss=-1.0,
                data_tokens=1 << 18, eval_batches=2, baseline="auto", seed=1234)


def read_config(cfg):
    def value(key, v, default):
        if key in CHOICES:
            v = str(v).lower() if isinstance(v, bool) or isinstance(v, str) else v
            if v not in CHOICES[key]:
                harness.config_error(f"llm: {key} must be one of {', '.join(CHOICES[key])}, got {v!r}")
            return v
        if key == "seq_len" and v is None:
            return 0                    # null: the preset's (PRESET_SEQ_LEN)
        if key == "preset":
            if v not in PRESETS:
                harness.config_error(f"llm: preset must be one of {', '.join(PRESETS)}, got {v!r}")
            return v
        try:
            if isinstance(v, bool):
                raise TypeError
            out = type(default)(v)
        except (TypeError, ValueError, OverflowError):
            harness.config_error(f"llm: {key} must be a {type(default).__name__}, got {v!r}")
        if isinstance(out, float) and not math.isfinite(out):
            harness.config_error(f"llm: {key} must be finite, got {v!r}")
        return out

    keys = harness.CaseKeys(cfg, "llm")
    c = keys.typed(DEFAULTS, value)
    if c["min_steps"] < 0:
        harness.config_error(f"llm: min_steps must be >= 0, got {c['min_steps']}")
    if c["fp8_fsdp_all_gather"] == "true" and c["fp8_recipe"] != "tensorwise":
        harness.config_error(f"llm: fp8_fsdp_all_gather: true needs fp8_recipe: tensorwise (one scale per weight), "
                             f"got fp8_recipe: {c['fp8_recipe']}")
    if cfg.get("seq_len") is None:
        c["seq_len"] = PRESET_SEQ_LEN[c["preset"]]
    if c["straggler_probe_steps"] < 0 or c["straggler_margin_pct"] <= 0:
        harness.config_error(f"llm: straggler_probe_steps must be >= 0 and straggler_margin_pct > 0, got "
                             f"{c['straggler_probe_steps']} and {c['straggler_margin_pct']}")
    keys.require_positive(c, ("seq_len", "micro_batch", "grad_accum", "max_steps", "log_every",
                                        "lang_vocab", "data_tokens", "eval_batches"))
    if c["time_budget_s"] <= 0:
        harness.config_error(f"llm: time_budget_s must be > 0, got {c['time_budget_s']}")
    if c["order"] not in (1, 2):
        harness.config_error(f"llm: order must be 1 or 2, got {c['order']}")
    if not 0.0 <= c["p_follow"] <= 1.0:
        harness.config_error(f"llm: p_follow must be within [0, 1], got {c['p_follow']}")
    overrides = {}
    for key in SHAPE_KEYS:
        if key in cfg and cfg[key] is not None:
            overrides[key] = value(key, cfg[key], getattr(PRESETS[c["preset"]], key))
            if overrides[key] <= 0:
                harness.config_error(f"llm: {key} must be > 0, got {cfg[key]!r}")
    if "tie_embeddings" in cfg:
        if not isinstance(cfg["tie_embeddings"], bool):
            harness.config_error(f"llm: tie_embeddings must be true or false, got {cfg['tie_embeddings']!r}")
        overrides["tie_embeddings"] = cfg["tie_embeddings"]
    shape = shape_from(c["preset"], overrides)
    if shape.dim % shape.n_heads or shape.n_heads % shape.n_kv_heads or shape.head_dim % 2:
        harness.config_error(f"llm: dim={shape.dim}, n_heads={shape.n_heads}, n_kv_heads={shape.n_kv_heads}: dim "
                             f"must divide into n_heads heads of an even size, and n_heads into n_kv_heads groups")
    if c["lang_vocab"] > shape.vocab_size:
        harness.config_error(f"llm: lang_vocab={c['lang_vocab']} exceeds vocab_size={shape.vocab_size}")
    return c, shape


def sdpa_context(choice):
    if choice == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[choice])


def build(c, shape, ctx, parallel, use_compile, dtype, fp8=False):
    """The model on the device (its block projections in fp8 when ``fp8``, all-gathered in fp8 under FSDP2 when
    fp8.fsdp_all_gather), wrapped for the chosen parallelism; returns (module to call, model, fp8 linear count)."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(c["seed"])
    with torch.device("meta"):
        model = Llama(shape, c["seq_len"])
    model.to_empty(device=ctx.device)
    model.tie()
    with torch.no_grad():
        model.reset_parameters()
        cos, sin = rope_tables(shape.head_dim, c["seq_len"], shape.rope_theta, ctx.device)
        model.rope_cos.copy_(cos)
        model.rope_sin.copy_(sin)
    fp8_linears = (llm_fp8.convert(model, c["fp8_recipe"], llm_fp8.fsdp_all_gather(c, parallel),  # before compile
                                   c["fp8_emulate"] == "true") if fp8 else 0)                       # and sharding
    if use_compile:
        model.loss_fn = torch.compile(lm_loss)     # LM head + float32 cross-entropy, fused by inductor
    ac = c["activation_checkpointing"]
    for i, block in enumerate(model.layers):
        if ac == "full" or (ac == "selective" and i % 2 == 0):
            forward = block.forward
            block.forward = (lambda f: lambda *a: checkpoint(f, *a, use_reentrant=False))(forward)
        if use_compile:
            block.compile(fullgraph=True)
    if parallel == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        reshard = c["reshard_after_forward"] == "true"
        for block in model.layers:
            fully_shard(block, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model, mp_policy=mp)
        return model, model, fp8_linears
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[ctx.device.index] if ctx.is_cuda else None), model, fp8_linears
    return model, model, fp8_linears


def make_optimizer(params, c, ctx):
    kw = dict(lr=c["lr"], weight_decay=c["weight_decay"], betas=(0.9, 0.95), eps=1e-8)
    if ctx.is_accelerator and c["optimizer"] == "fused":
        try:
            return torch.optim.AdamW(params, fused=True, **kw), "AdamW (fused)"
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(params, foreach=True, **kw), "AdamW (foreach)"


class Trainer:
    """One training loop, used for our model and for the baseline alike (same batches, same timing)."""

    def __init__(self, c, ctx, forward, params, autocast, no_sync, after_step=None):
        self.c, self.ctx, self.forward, self.autocast, self.no_sync = c, ctx, forward, autocast, no_sync
        self.after_step = after_step    # called after each optimizer step (fp8's scale precompute)
        self.opt, self.opt_name = make_optimizer(params, c, ctx)
        warm = max(1, c["lr_warmup_steps"])
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))

    def step(self, batches):
        """One optimizer step over grad_accum micro-batches; returns the mean loss (a device tensor)."""
        total = None
        n = len(batches)
        for i, (x, y) in enumerate(batches):
            with self.no_sync(i < n - 1), self.autocast:
                loss = self.forward(x, y)
            (loss / n).backward()
            total = loss.detach() if total is None else total + loss.detach()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.sched.step()
        if self.after_step is not None:
            self.after_step()
        return total / n


def trainer_for(c, ctx, parallel, forward, model, fp8, dtype):
    """The run's (Trainer, autocast context, fp8 all-gather on?) for a model from build(): bf16 autocast only
    where the parameters are float32 on an accelerator (FSDP2 already computes in bf16); gradient sync skipped
    on all but the last micro-step; after each optimizer step the fp8 weights' scales when they are all-gathered
    in fp8 (bench/llm_profile.py profiles this same step)."""
    autocast = (torch.autocast(ctx.device.type, dtype=dtype) if ctx.is_accelerator and parallel != "fsdp"
                else contextlib.nullcontext())

    def no_sync(skip):
        if skip and parallel == "ddp":
            return forward.no_sync()
        if parallel == "fsdp":
            forward.set_requires_gradient_sync(not skip)
        return contextlib.nullcontext()

    all_gather = fp8 and llm_fp8.fsdp_all_gather(c, parallel)
    trainer = Trainer(c, ctx, forward, model.parameters(), autocast, no_sync,
                      after_step=(lambda: llm_fp8.precompute_scales(model)) if all_gather else None)
    return trainer, autocast, all_gather


def run_loop(trainer, data, c, ctx, budget_s, max_steps, log_steps=True, min_steps=0):
    """Warm-up (compile) steps, then a measured window of whole steps sized to fill budget_s (all ranks run the
    same count), and at least min_steps (what a convergence check needs; a window that runs past twice the
    budget for it says so). Returns a dict of timings, per-step times and the loss windows."""
    ga, mb = c["grad_accum"], c["micro_batch"]
    out = {"loss_windows": []}
    t0 = time.monotonic()
    first = None
    warm = max(1, c["warmup_steps"])
    for i in range(warm):
        loss = trainer.step(data.batches(ga, mb))
        if i == 0:
            loss.item()
            first = time.monotonic() - t0
    ctx.barrier()
    out["compile_s"] = first                         # the first step: compilation, allocator warm-up
    out["warmup_s"] = time.monotonic() - t0
    out["time_to_first_step_s"] = (t0 - T_START) + first
    window = harness.device_window(ctx).start()
    clock = harness.StepClock(ctx, sync=False)      # the steps stay queued: no device sync between them
    ctx.barrier()
    w0 = time.perf_counter()
    clock.mark()
    steps, planned = 0, None       # planned: the step count the measured window ends at
    loss_sum, loss_n = torch.zeros((), device=ctx.device), 0
    calib = 3
    while True:
        loss = trainer.step(data.batches(ga, mb))
        clock.mark()
        steps += 1
        loss_sum += loss
        loss_n += 1
        if log_steps and (steps % c["log_every"] == 0):
            mean = ctx.all_reduce([loss_sum.item() / loss_n])[0] / ctx.world_size
            out["loss_windows"].append((warm + steps, mean))
            LOG.event("STEP", step=warm + steps, loss=mean, lr=trainer.sched.get_last_lr()[0])
            loss_sum.zero_()
            loss_n = 0
        if steps == calib or steps % c["log_every"] == 0:
            # decision point (every rank, same numbers): the rate so far sizes the window to fill the budget
            ctx.sync()
            elapsed = ctx.all_reduce([time.perf_counter() - w0], "max")[0]
            per_step = elapsed / steps
            planned = int(min(max(steps, math.ceil(budget_s / max(per_step, 1e-9)), min_steps),
                              max(calib, max_steps - warm)))
            if steps == calib and elapsed > budget_s:
                out["budget_warning"] = (f"one step takes {per_step:.3g} s: {calib} steps already exceed "
                                         f"time_budget_s={budget_s:g}")
                print(f"warning: {out['budget_warning']}", file=sys.stderr, flush=True)
        if planned is not None and steps >= planned:
            break
    ctx.barrier()
    out["measured_s"] = ctx.all_reduce([time.perf_counter() - w0], "max")[0]     # one figure for the job
    if min_steps and steps <= min_steps and out["measured_s"] > 2 * budget_s and "budget_warning" not in out:
        out["budget_warning"] = (f"min_steps={min_steps} took {out['measured_s']:.1f} s, more than twice "
                                 f"time_budget_s={budget_s:g}")
        print(f"warning: {out['budget_warning']}", file=sys.stderr, flush=True)
    window.stop()
    out.update(steps=steps, warmup_steps=warm, step_times=clock.times(), device_window=window.summary(),
               last_loss=loss.item())
    if loss_n and log_steps:
        mean = ctx.all_reduce([loss_sum.item() / loss_n])[0] / ctx.world_size
        out["loss_windows"].append((warm + steps, mean))
        LOG.event("STEP", step=warm + steps, loss=mean, lr=trainer.sched.get_last_lr()[0])
    return out


def baseline_transformers(c, shape, ctx, data, autocast, use_compile, budget_s):
    """Hugging Face transformers' LlamaForCausalLM at the same shape, timed by the same loop."""
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception as e:  # not installed, or broken
        return {"omitted": f"transformers is not importable ({type(e).__name__}: {e})"}
    hf_cfg = LlamaConfig(vocab_size=shape.vocab_size, hidden_size=shape.dim, intermediate_size=shape.ffn_dim,
                         num_hidden_layers=shape.n_layers, num_attention_heads=shape.n_heads,
                         num_key_value_heads=shape.n_kv_heads, max_position_embeddings=c["seq_len"],
                         rope_theta=shape.rope_theta, rms_norm_eps=shape.norm_eps,
                         tie_word_embeddings=shape.tie_embeddings, attn_implementation="sdpa", use_cache=False)
    torch.manual_seed(c["seed"])
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    hf = LlamaForCausalLM(hf_cfg).to(ctx.device)
    hf.train()
    n_params = sum(p.numel() for p in hf.parameters())

    def step_loss(x, y):
        return lm_loss(hf.model(input_ids=x).last_hidden_state, hf.lm_head.weight, y)

    # compiled as a whole (decoder + LM head + loss): the way a user would apply torch.compile to it
    forward = torch.compile(step_loss) if use_compile else step_loss

    trainer = Trainer(c, ctx, forward, hf.parameters(), autocast, lambda _skip: contextlib.nullcontext())
    r = run_loop(trainer, data, c, ctx, budget_s, c["max_steps"], log_steps=False)
    tokens = r["steps"] * c["grad_accum"] * c["micro_batch"] * c["seq_len"]
    res = {"model": f"transformers {transformers.__version__} LlamaForCausalLM (attn_implementation=sdpa)",
           "params": n_params, "compiled": use_compile, "tokens_per_s": tokens / r["measured_s"],
           "steps": r["steps"], "measured_s": r["measured_s"], "compile_s": r["compile_s"],
           "step_time_median_s": statistics.median(r["step_times"]), "device_window": r["device_window"],
           "final_loss": r["last_loss"], "optimizer": trainer.opt_name}
    if ctx.is_cuda:
        res["peak_memory_gib"] = torch.cuda.max_memory_allocated(ctx.device) / 2 ** 30
    trainer = forward = hf = None     # free the baseline's memory
    return res


def choose_parallel(c, ctx):
    """(parallelism, compile?) for this run; one rank with FSDP or DDP gets a process group of its own."""
    parallel = c["parallel"]
    if parallel == "auto":
        parallel = "fsdp" if ctx.world_size > 1 else "none"
    if parallel in ("fsdp", "ddp") and not ctx.initialized:
        # one rank: a process group of one, so that FSDP2/DDP run exactly as they would across ranks
        dist.init_process_group(ctx.backend, store=dist.HashStore(), rank=0, world_size=1)
        ctx.initialized = True
    use_compile = c["compile"] == "true" or (c["compile"] == "auto" and ctx.is_cuda)
    if ctx.is_cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return parallel, use_compile


MFU_METRIC = {"headline": "mfu", "torchtitan": "mfu_titan", "flagperf_6n": "mfu_flagperf"}


def mfu_of(cfg, c, shape, counts, tokens_per_s, ctx, device_name, precision):
    """The MFU record and the mfu metrics. Every payload states the FLOPs per token, the model TFLOP/s per device
    and the MFU of three named conventions (model.flop_conventions: headline, torchtitan, flagperf_6n); the MFU
    is there where the vendor's table has a dense bf16 peak for this device, which is also the peak of an fp8
    run (Megatron's convention: a model's TFLOP/s against the bf16 dense peak)."""
    world, gpu = ctx.world_size, ctx.is_accelerator
    conv = flop_conventions(counts, shape, c["seq_len"])
    head = conv["headline"]
    mfu = {"formula": "flops_per_token = 6*N + 12*n_layers*dim*seq_len; "
                      "mfu = flops_per_token * tokens_per_s / (world_size * peak)",
           "N": head["N"],
           "N_means": "weights every token is multiplied by: block projections + LM head (counted even when tied "
                      "to the embedding); the embedding lookup is excluded",
           "n_layers": shape.n_layers, "dim": shape.dim, "n_heads": shape.n_heads, "head_dim": shape.head_dim,
           "seq_len": c["seq_len"], "flops_per_token": head["flops_per_token"],
           "model_tflops_per_device": head["flops_per_token"] * tokens_per_s / world / 1e12,
           "titan": {"formula": conv["torchtitan"]["formula"], "N": conv["torchtitan"]["N"],
                     "flops_per_token": conv["torchtitan"]["flops_per_token"]},
           "conventions": conv, "dtype": precision}
    peak, entry = harness.peak_for(cfg, "bf16_tflops", device_name) if gpu else (None, None)
    metrics = {}
    for name, record in conv.items():
        record["model_tflops_per_device"] = record["flops_per_token"] * tokens_per_s / world / 1e12
        record["mfu_pct"] = 100.0 * record["model_tflops_per_device"] / peak if peak else None
        if peak:
            metrics[MFU_METRIC[name]] = {"value": record["mfu_pct"], "unit": "%"}
    if peak:
        mfu.update(peak_key="bf16_tflops", peak_entry=entry, peak_tflops=peak,
                   peak_note="dense bf16 from the vendor's datasheet table (never the sparse figure)"
                             + ("; an fp8 run is divided by the same bf16 peak (Megatron's convention)"
                                if precision == "fp8" else ""))
    elif gpu:
        mfu["omitted"] = f"no bf16_tflops entry in vendor_peaks matches {device_name!r}"
    else:
        mfu["omitted"] = "cpu run in fp32: the vendor peak tables hold accelerator peaks only, no peak to divide by"
    return mfu, metrics


def straggler_probe(c, shape, ctx, dtype):
    """Seconds of each of ``straggler_probe_steps`` forward + backward passes of one decoder block of the model's
    shape on this rank's data size (micro_batch x seq_len tokens), in the run's dtype, eager: this rank's compute
    alone, with no collective in it (stragglers.time_probe)."""
    if c["straggler_probe_steps"] == 0:
        return []
    g = torch.Generator(device="cpu").manual_seed(c["seed"] + 4242)
    block = Block(shape)
    with torch.no_grad():
        for prm in block.parameters():
            prm.copy_(torch.randn(prm.shape, generator=g) * 0.02 if prm.dim() > 1 else torch.ones(prm.shape))
    block = block.to(ctx.device, dtype=dtype)
    cos, sin = rope_tables(shape.head_dim, c["seq_len"], shape.rope_theta, ctx.device)
    x = torch.randn(c["micro_batch"], c["seq_len"], shape.dim, generator=g).to(ctx.device, dtype).requires_grad_()

    def one_pass():
        block(x, cos, sin).float().square().mean().backward()
        block.zero_grad(set_to_none=True)
        x.grad = None

    with sdpa_context(c["attention_backend"]):
        return stragglers.time_probe(one_pass, ctx, c["straggler_probe_steps"])


def replicas_check(model, parallel, ctx):
    """(replicas in sync, this rank's checksum over the full parameters): DDP replicas must agree; shards are
    consistent by construction."""
    with torch.no_grad():
        checksum = sum(float(p.full_tensor().double().sum()) if hasattr(p, "full_tensor") else float(p.double().sum())
                       for p in model.parameters())
    if parallel != "ddp":
        return True, checksum
    lo, = ctx.all_reduce([checksum], "min")
    hi, = ctx.all_reduce([checksum], "max")
    return abs(hi - lo) <= 1e-9 * max(1.0, abs(hi)), checksum


def baseline_of(c, shape, ctx, data, use_compile, dtype, tokens_per_s, metrics):
    """The transformers baseline's details (its figures go into ``metrics``), or why it did not run."""
    baseline = c["baseline"] == "true" or (c["baseline"] == "auto" and ctx.is_cuda and ctx.world_size == 1)
    if not baseline:
        return {"omitted": "baseline off (baseline: false, or auto off CUDA)"}
    if ctx.world_size > 1:
        return {"omitted": "the transformers baseline runs on one rank only (world_size 1)"}
    with sdpa_context(c["attention_backend"]):
        b = baseline_transformers(c, shape, ctx, data, torch.autocast(ctx.device.type, dtype=dtype)
                                  if ctx.is_accelerator else contextlib.nullcontext(), use_compile,
                                  c["time_budget_s"])
    if "tokens_per_s" in b:
        metrics["baseline_tokens_per_s"] = {"value": b["tokens_per_s"], "unit": "tokens/s"}
        metrics["ratio_vs_transformers"] = {"value": tokens_per_s / b["tokens_per_s"], "unit": "x"}
    return b


def train_metrics(r, tokens_per_s_per_device, model_tflops, final_loss, eval_loss, converged_at, counts, peak_mem):
    """The run's figures (the MFU's follow them)."""
    metrics = {
        "tokens_per_s_per_device": {"value": tokens_per_s_per_device, "unit": "tokens/s"},
        "model_tflops_per_device": {"value": model_tflops, "unit": "TFLOP/s"},
        "step_time_median_s": {"value": statistics.median(r["step_times"]), "unit": "s"},
        "step_time_p90_s": {"value": stragglers.percentile(r["step_times"], 0.9), "unit": "s"},
        "compile_s": {"value": r["compile_s"], "unit": "s"},
        "time_to_first_step_s": {"value": r["time_to_first_step_s"], "unit": "s"},
        "final_loss": {"value": final_loss, "unit": "nats/token"},
        "eval_loss": {"value": eval_loss, "unit": "nats/token"},
        "converged": {"value": int(converged_at is not None), "unit": "bool"},
        "params": {"value": counts["total"], "unit": "params"},
    }
    if peak_mem is not None:
        metrics["peak_memory_gib"] = {"value": peak_mem, "unit": "GiB"}
    return metrics


def main():
    args, cfg = harness.parse_args()
    c, shape = read_config(cfg)
    ctx = harness.setup_distributed(cfg)
    world, gpu = ctx.world_size, ctx.is_accelerator
    dtype = torch.bfloat16 if gpu else torch.float32
    parallel, use_compile = choose_parallel(c, ctx)
    data = llm_data.make_source(c, shape, args.data_dir, ctx)
    # synthetic: the known floor plus a margin; a corpus (floor unknown): 90% of the first loss window
    target_loss = c["target_loss"] if c["target_loss"] >= 0 else data.floor + c["target_margin"]
    target_loss = harness.target_for_test("llm", target_loss, -1.0)
    fp8, fp8_why_not = llm_fp8.plan_for(c, ctx)
    forward, model, fp8_linears = build(c, shape, ctx, parallel, use_compile, dtype, fp8)
    counts = count_params(model)
    trainer, autocast, fp8_all_gather = trainer_for(c, ctx, parallel, forward, model, fp8, dtype)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=world, parallel=parallel,
              compile=use_compile, params=counts["total"])
    LOG.event("RUN_START")
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    with sdpa_context(c["attention_backend"]):
        r = run_loop(trainer, data, c, ctx, c["time_budget_s"], c["max_steps"], min_steps=c["min_steps"])
    peak_mem = torch.cuda.max_memory_allocated(ctx.device) / 2 ** 30 if ctx.is_cuda else None
    allocator = None
    if ctx.is_cuda:
        stats = torch.cuda.memory_stats(ctx.device)
        allocator = {"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
                     "num_alloc_retries": stats.get("num_alloc_retries"),
                     "reserved_peak_gib": torch.cuda.max_memory_reserved(ctx.device) / 2 ** 30,
                     "device_total_gib": torch.cuda.get_device_properties(ctx.device).total_memory / 2 ** 30}
    LOG.event("RUN_END", steps=r["warmup_steps"] + r["steps"])

    # held-out loss on fresh windows, all ranks
    with torch.no_grad(), autocast, sdpa_context(c["attention_backend"]):
        eval_losses = [forward(x, y).float().item() for x, y in data.eval_batches(c["eval_batches"], c["micro_batch"])]
    eval_loss = ctx.all_reduce([statistics.fmean(eval_losses)])[0] / world
    windows = r["loss_windows"]
    if math.isnan(target_loss):
        target_loss = 0.9 * windows[0][1] if windows else float("nan")
    converged_at = next((s for s, v in windows if v < target_loss), None)
    final_loss = windows[-1][1] if windows else r["last_loss"]
    tokens_per_step = c["grad_accum"] * c["micro_batch"] * c["seq_len"] * world
    tokens_per_s = r["steps"] * tokens_per_step / r["measured_s"]

    details = {"converged": converged_at is not None, "converged_at_step": converged_at, "target_loss": target_loss,
               "final_loss": final_loss, "eval_loss": eval_loss, "data": data.describe(),
               "loss_floor": None if math.isnan(data.floor) else data.floor, "steps_measured": r["steps"],
               "warmup_steps": r["warmup_steps"],
               "parallel": parallel, "compile": use_compile, "precision_requested": c["precision"],
               "precision": "fp8" if fp8 else ("bf16" if gpu else "fp32"),
               "activation_checkpointing": c["activation_checkpointing"], "optimizer": trainer.opt_name,
               "reshard_after_forward": c["reshard_after_forward"] == "true" if parallel == "fsdp" else None,
               "attention_backend": c["attention_backend"],
               "shape": {k: getattr(shape, k) for k in SHAPE_KEYS + ("norm_eps", "tie_embeddings")},
               "params": counts, "time_budget_s": c["time_budget_s"], "measured_s": r["measured_s"],
               "device_window": r["device_window"], "allocator": allocator}
    details["precision_used"] = details["precision"]
    if fp8:
        details["fp8"] = {"recipe": c["fp8_recipe"], "float8_linears": fp8_linears,
                          "fsdp_float8_all_gather": fp8_all_gather,
                          "fp8_gathered_weights": llm_fp8.fp8_gathered_weights(model),
                          "emulated": c["fp8_emulate"] == "true",
                          "api": "torchao.float8.convert_to_float8_training (Float8LinearConfig.from_recipe_name)"
                                 + ("; enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp "
                                    "after each optimizer step" if fp8_all_gather else ""),
                          "scope": "the decoder blocks' projections (q, k, v, o, w1, w2, w3); the LM head, "
                                   "attention and norms stay in bf16"}
        if c["fp8_emulate"] == "true":
            details["fp8"]["note"] = "emulated casts (fp8_emulate): the fp8 code path, not fp8's speed"
        elif not use_compile:
            details["fp8"]["note"] = "compile is off: torchao's float8 casts run unfused, slower than compiled"
    elif fp8_why_not:
        details["fp8_fallback_reason"] = fp8_why_not
        print(f"warning: precision: fp8 falls back to {details['precision_used']}: {fp8_why_not}",
              file=sys.stderr, flush=True)
    if "budget_warning" in r:
        details["budget_warning"] = r["budget_warning"]
    env = harness.env_info(ctx, precision=details["precision_used"], global_batch_tokens=tokens_per_step,
                           seq_len=c["seq_len"])
    details["mfu"], mfu_metrics = mfu_of(cfg, c, shape, counts, tokens_per_s, ctx, env["device_name"],
                                         details["precision_used"])
    metrics = train_metrics(r, tokens_per_s / world, details["mfu"]["model_tflops_per_device"], final_loss,
                            eval_loss, converged_at, counts, peak_mem)
    metrics.update(mfu_metrics)
    details["replicas_in_sync"], details["param_checksum"] = replicas_check(model, parallel, ctx)
    trainer = forward = model = None     # free the memory before the probe and the baseline
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    details["stragglers"] = stragglers.gathered_view(ctx, r["step_times"], straggler_probe(c, shape, ctx, dtype),
                                                     c["straggler_margin_pct"], "one decoder block")
    if details["stragglers"]["flagged"]:
        metrics["straggler_ranks"] = {"value": len(details["stragglers"]["flagged"]), "unit": "ranks"}
    details["baseline"] = baseline_of(c, shape, ctx, data, use_compile, dtype, tokens_per_s, metrics)
    ok = (converged_at is not None and details["replicas_in_sync"] and math.isfinite(eval_loss)
          and tokens_per_s > 0)
    if not ok:
        ctx.destroy()
        LOG.check_failed(details)
    ctx.destroy()
    LOG.finished(metric="tokens_per_s", value=tokens_per_s, unit="tokens/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
