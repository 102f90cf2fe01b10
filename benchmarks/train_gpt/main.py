"""Train a small GPT with DDP on an in-process Markov-chain language; see README.md and docs/benchmarks.md."""
import contextlib
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="train_gpt")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from model import GPT  # noqa: E402

DEFAULTS = dict(vocab_size=16, seq_len=64, d_model=64, n_layers=2, n_heads=4, batch_size=16, lr=3e-3,
                weight_decay=0.0, lr_warmup_steps=10, warmup_steps=5, max_steps=600, target_loss=0.9,
                log_every=10, early_stop=True, order=2, p_follow=0.9, dataset_size=8192, eval_size=256, seed=1234,
                inject_error=False)


def _value(key, v, default):
    """The value converted by the default's type (int(v), float(v)); one it cannot convert is a config error."""
    try:
        return type(default)(v)
    except (TypeError, ValueError):
        harness.config_error(f"train_gpt: {key} must be a {type(default).__name__}, got {v!r}")


def read_config(cfg):
    c = harness.typed_config(cfg, DEFAULTS, "train_gpt", _value)
    harness.require_positive(c, "train_gpt", ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads",
                                              "batch_size", "max_steps", "log_every", "dataset_size", "eval_size"))
    if c["d_model"] % c["n_heads"]:
        harness.config_error(f"train_gpt: d_model={c['d_model']} is not divisible by n_heads={c['n_heads']}")
    if c["order"] not in (1, 2):
        harness.config_error(f"train_gpt: order must be 1 or 2, got {c['order']}")
    if not 0.0 <= c["p_follow"] <= 1.0:
        harness.config_error(f"train_gpt: p_follow must be within [0, 1], got {c['p_follow']}")
    return c


def markov_language(c):
    """A fixed random 'grammar' of order 1 or 2: the context (previous `order` tokens) is followed by
    succ[context] with probability p_follow, otherwise by a uniformly random token. Order 2 needs attention
    to the token before the previous one. Returns (succ, entropy floor in nats per predicted token)."""
    g = torch.Generator().manual_seed(c["seed"])
    succ = torch.randint(c["vocab_size"], (c["vocab_size"],) * c["order"], generator=g)
    v, p = c["vocab_size"], c["p_follow"]
    probs = [p + (1 - p) / v] + [(1 - p) / v] * (v - 1)
    return succ, -sum(q * math.log(q) for q in probs if q > 0)


def sample_sequences(succ, c, n, seed):
    """n sequences of seq_len + 1 tokens (inputs + shifted targets), deterministic in seed."""
    g = torch.Generator().manual_seed(seed)
    v = c["vocab_size"]
    seq = torch.empty(n, c["seq_len"] + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(v, (n,), generator=g)
    for t in range(1, c["seq_len"] + 1):
        follow = torch.rand(n, generator=g) < c["p_follow"]
        ctx_tokens = (seq[:, t - 1],) if succ.dim() == 1 else (seq[:, max(t - 2, 0)], seq[:, t - 1])
        seq[:, t] = torch.where(follow, succ[ctx_tokens], torch.randint(v, (n,), generator=g))
    return seq


def main():
    args, cfg = harness.parse_args()
    ctx = harness.setup_distributed(cfg)
    c = read_config(cfg)
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    target_loss = 0.0 if c["inject_error"] else c["target_loss"]  # test-only: an unreachable target

    # identical language, dataset and initial weights on every rank; each rank trains on its own shard
    succ, entropy_floor = markov_language(c)
    data = sample_sequences(succ, c, c["dataset_size"], c["seed"] + 1)
    shard = data[rank::world]
    shard = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(c["seed"] + 2 + rank))]
    shard = shard.to(dev)
    eval_data = sample_sequences(succ, c, c["eval_size"], c["seed"] + 3)[rank::world].to(dev)
    if len(shard) < c["batch_size"]:
        harness.config_error(f"train_gpt: dataset_size={c['dataset_size']} gives fewer than batch_size "
                             f"sequences per rank")

    torch.manual_seed(c["seed"])
    model = GPT(c["vocab_size"], c["seq_len"], c["d_model"], c["n_layers"], c["n_heads"]).to(dev)
    n_params = model.num_params()
    ddp = DDP(model, device_ids=[dev.index] if ctx.is_cuda else None) if ctx.initialized else model
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=c["weight_decay"], betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, c["lr_warmup_steps"])))
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if ctx.is_cuda else contextlib.nullcontext())
    precision = "bf16-autocast" if ctx.is_cuda else "fp32"
    LOG.event("INIT_END", backend=ctx.backend, device=str(dev), world_size=world)

    LOG.event("RUN_START")
    bs, pos = c["batch_size"], 0
    watch = harness.Stopwatch(ctx)
    loss_sum, loss_n = torch.zeros((), device=dev), 0
    window_loss, converged, converged_at, step = float("nan"), False, None, 0
    ddp.train()
    while step < c["max_steps"]:
        if step == c["warmup_steps"]:
            watch.start()  # throughput is measured from here, all ranks together
        if pos + bs > len(shard):
            pos = 0
        batch = shard[pos:pos + bs]
        pos += bs
        with autocast:
            _, loss = ddp(batch[:, :-1], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        loss_sum += loss.detach()
        loss_n += 1
        if step % c["log_every"] == 0 or step == c["max_steps"]:
            # mean training loss of the window over all ranks: every rank takes the same decision
            window_loss = ctx.all_reduce([loss_sum.item() / loss_n])[0] / world
            loss_sum.zero_()
            loss_n = 0
            LOG.event("STEP", step=step, loss=window_loss, lr=sched.get_last_lr()[0])
            if not converged and window_loss < target_loss:
                converged, converged_at = True, step
            if converged and c["early_stop"] and step >= c["warmup_steps"] + c["log_every"]:
                break
    if step <= c["warmup_steps"]:
        watch.start()  # degenerate config: nothing after warm-up; measure an empty interval
    elapsed = watch.stop()
    measured = step - min(step, c["warmup_steps"])
    LOG.event("RUN_END", steps=step)

    # checks: convergence, a held-out loss, and DDP replicas still identical
    ddp.eval()
    with torch.no_grad(), autocast:
        eval_loss = model(eval_data[:, :-1], eval_data[:, 1:])[1].item() if len(eval_data) else 0.0
        checksum = sum(p.double().sum() for p in model.parameters()).item()
    eval_loss = ctx.all_reduce([eval_loss * len(eval_data), len(eval_data)])
    eval_loss = eval_loss[0] / max(1.0, eval_loss[1])
    cs_min, = ctx.all_reduce([checksum], "min")
    cs_max, = ctx.all_reduce([checksum], "max")
    in_sync = abs(cs_max - cs_min) <= 1e-9 * max(1.0, abs(cs_max))
    tokens_per_s = measured * bs * c["seq_len"] * world / elapsed if elapsed > 0 and measured else 0.0
    details = {"converged": converged, "converged_at_step": converged_at, "target_loss": target_loss,
               "final_loss": window_loss, "eval_loss": eval_loss, "entropy_floor": entropy_floor,
               "replicas_in_sync": in_sync, "param_checksum_spread": cs_max - cs_min,
               "steps": step, "max_steps": c["max_steps"], "measured_steps": measured}
    if c["inject_error"]:
        details["inject_error"] = True
    if not (converged and in_sync and math.isfinite(eval_loss) and tokens_per_s > 0):
        LOG.check_failed(details)

    metrics = {
        "final_loss": {"value": window_loss, "unit": "nats/token"},
        "eval_loss": {"value": eval_loss, "unit": "nats/token"},
        "steps": {"value": step, "unit": "steps"},
        "params": {"value": n_params, "unit": "params"},
        "samples_per_s": {"value": tokens_per_s / c["seq_len"], "unit": "samples/s"},
        "converged": {"value": int(converged), "unit": "bool"},
        "train_time": {"value": elapsed, "unit": "s"},
    }
    env = harness.env_info(ctx, precision=precision, global_batch=bs * world, seq_len=c["seq_len"])
    # MFU, PaLM (appendix B) convention: 6 FLOPs per matmul parameter and token (forward + backward) plus
    # 12 * n_layers * d_model * seq_len for attention (causal masking not discounted). N leaves out the position
    # table (a lookup, no matmul); the tied token embedding counts once, as the output projection.
    n_matmul = n_params - model.pos.weight.numel()
    flops_per_token = 6 * n_matmul + 12 * c["n_layers"] * c["d_model"] * c["seq_len"]
    mfu = {"formula": "mfu = (6*N + 12*n_layers*d_model*seq_len) * tokens_per_s / (world_size * peak)",
           "N": n_matmul, "flops_per_token": flops_per_token,
           "model_tflops_per_device": flops_per_token * tokens_per_s / world / 1e12,
           "dtype": "bf16" if ctx.is_cuda else "fp32"}
    peak, entry = harness.peak_for(cfg, "bf16_tflops", env["device_name"]) if ctx.is_cuda else (None, None)
    if peak:
        metrics["mfu"] = {"value": 100.0 * flops_per_token * tokens_per_s / (world * peak * 1e12), "unit": "%"}
        mfu.update(peak_key="bf16_tflops", peak_entry=entry, peak_tflops=peak)
    elif ctx.is_cuda:
        mfu["omitted"] = f"no bf16_tflops entry in vendor_peaks matches {env['device_name']!r}"
    else:
        mfu["omitted"] = "cpu run in fp32: the vendor peak tables hold accelerator peaks only, no peak to divide by"
    details["mfu"] = mfu
    ctx.destroy()
    LOG.finished(metric="tokens_per_s", value=tokens_per_s, unit="tokens/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
