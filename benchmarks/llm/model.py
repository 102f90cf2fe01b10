"""A Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention through
scaled_dot_product_attention, SwiGLU), written for this benchmark; torch only.

Presets follow the published shapes of Llama-3.2 1B / 3B and Llama-3 8B (the rope scaling of Llama-3.2's long
context is left out: it changes no FLOP and no kernel at the sequence lengths benchmarked here).
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaShape:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


PRESETS = {
    # CPU and CI: learns the synthetic language within seconds on 2 cores
    "tiny": LlamaShape(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=192, rope_theta=10000.0),
    # Llama-3.2 1B: 1.24 B parameters (embedding tied to the LM head)
    "1b": LlamaShape(vocab_size=128256, dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim=8192),
    # Llama-3.2 3B: 3.21 B parameters (tied)
    "3b": LlamaShape(vocab_size=128256, dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim=8192),
    # Llama-3 8B: 8.03 B parameters (untied LM head)
    "8b": LlamaShape(vocab_size=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                     tie_embeddings=False),
}


# The sequence length a preset trains at when the case gives none (seq_len: null): long context for the Llama
# shapes, a short one for the CPU preset (the same code path, a size two cores train in seconds).
PRESET_SEQ_LEN = {"tiny": 64, "1b": 8192, "3b": 8192, "8b": 8192}


def shape_from(preset: str, overrides: dict) -> LlamaShape:
    """The preset's shape with the given fields replaced (keys are LlamaShape's field names)."""
    return replace(PRESETS[preset], **overrides)


def rope_tables(head_dim: int, seq_len: int, theta: float, device=None):
    """cos and sin of shape [seq_len, head_dim // 2], float32."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x: [batch, heads, seq, head_dim]; rotates the (even, odd) halves pairwise, in x's dtype."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    return out.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = s.n_heads, s.n_kv_heads, s.head_dim
        self.wq = nn.Linear(s.dim, s.n_heads * s.head_dim, bias=False)
        self.wk = nn.Linear(s.dim, s.n_kv_heads * s.head_dim, bias=False)
        self.wv = nn.Linear(s.dim, s.n_kv_heads * s.head_dim, bias=False)
        self.wo = nn.Linear(s.n_heads * s.head_dim, s.dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv != self.n_heads:       # grouped-query attention: each kv head serves n_heads / n_kv heads
            rep = self.n_heads // self.n_kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, s: LlamaShape):
        super().__init__()
        self.w1 = nn.Linear(s.dim, s.ffn_dim, bias=False)
        self.w3 = nn.Linear(s.dim, s.ffn_dim, bias=False)
        self.w2 = nn.Linear(s.ffn_dim, s.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.attention_norm = RMSNorm(s.dim, s.norm_eps)
        self.attention = Attention(s)
        self.ffn_norm = RMSNorm(s.dim, s.norm_eps)
        self.feed_forward = FeedForward(s)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, s: LlamaShape, max_seq_len: int):
        super().__init__()
        self.shape = s
        self.tok_embeddings = nn.Embedding(s.vocab_size, s.dim)
        self.layers = nn.ModuleList(Block(s) for _ in range(s.n_layers))
        self.norm = RMSNorm(s.dim, s.norm_eps)
        self.output = nn.Linear(s.dim, s.vocab_size, bias=False)
        self.tie()
        cos, sin = rope_tables(s.head_dim, max_seq_len, s.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.loss_fn = lm_loss          # replaced by its compiled form when the benchmark compiles
        self.reset_parameters()

    def tie(self):
        """Share the embedding table with the LM head (again after ``to_empty``, which unties them)."""
        if self.shape.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith(("wo.weight", "w2.weight")):     # residual projections, scaled by depth
                nn.init.normal_(p, std=std / math.sqrt(2 * self.shape.n_layers))
            else:
                nn.init.normal_(p, std=std)

    def hidden(self, tokens):
        """The final normed hidden states [batch, seq, dim] (everything but the LM head)."""
        h = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos, self.rope_sin
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)

    def forward(self, tokens, targets):
        """Mean next-token cross-entropy (nats); the logits are computed by the LM head and upcast to float32."""
        return self.loss_fn(self.hidden(tokens), self.output.weight, targets)


def lm_loss(h, weight, targets):
    logits = F.linear(h, weight)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def count_params(model: Llama) -> dict:
    """Parameter counts (each tensor once, tied or not) and the per-token matmul weights.

    ``matmul``: every weight a token is multiplied by, forward: the block projections plus the LM head, which
    counts even when it is tied to the embedding; the embedding lookup is no matmul and is left out.
    ``titan``: torchtitan's convention, every parameter once minus the embedding table (with a tied head the
    LM head drops out with it)."""
    s = model.shape
    total = sum(p.numel() for p in model.parameters())      # parameters() yields a tied tensor once
    embedding = s.vocab_size * s.dim
    blocks = sum(m.weight.numel() for m in model.layers.modules() if isinstance(m, nn.Linear))
    head = s.vocab_size * s.dim
    return {"total": total, "embedding": embedding, "block_matmul": blocks, "lm_head": head,
            "matmul": blocks + head, "titan": total - embedding}


def flops_per_token(n_matmul: int, s: LlamaShape, seq_len: int) -> int:
    """Training FLOPs per token: 6 N (forward 2 N, backward 4 N) plus attention's 12 L d T
    (QK^T and AV: 2 matmuls x 2 FLOP x d x T per layer and token forward, x3 for training; the causal mask
    is not discounted, as in the PaLM paper's appendix B and the MFU figures quoted from other projects)."""
    return 6 * n_matmul + 12 * s.n_layers * s.dim * seq_len


def flop_conventions(counts: dict, s: LlamaShape, seq_len: int) -> dict:
    """Training FLOPs per token in the three named conventions every payload states, each with its formula and N:

    ``headline``: 6 N_matmul + 12 L d T (flops_per_token above; N_matmul = block projections + LM head);
    ``torchtitan``: torchtitan's get_num_flop_per_token, 6 N + 12 L H Q T with N = every parameter once minus
    the embedding table, H heads of Q = head_dim (H Q = d), T = seq_len;
    ``flagperf_6n``: FlagPerf's training cases, 6 N with N = every parameter once (embedding included), no
    attention term (FlagPerf writes a nominal N such as 8e9; this counts the model's exact N)."""
    attention = 12 * s.n_layers * s.n_heads * s.head_dim * seq_len
    return {
        "headline": {"formula": "6*N + 12*n_layers*dim*seq_len; N = block projections + LM head (tied or not), "
                                "embedding lookup excluded",
                     "N": counts["matmul"], "flops_per_token": flops_per_token(counts["matmul"], s, seq_len)},
        "torchtitan": {"formula": "6*N + 12*n_layers*n_heads*head_dim*seq_len; N = all parameters - embedding "
                                  "(a tied LM head leaves with the embedding)",
                       "N": counts["titan"], "flops_per_token": 6 * counts["titan"] + attention},
        "flagperf_6n": {"formula": "6*N; N = all parameters (each tensor once, embedding included), no attention term",
                        "N": counts["total"], "flops_per_token": 6 * counts["total"]},
    }
