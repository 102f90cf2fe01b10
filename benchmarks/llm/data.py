"""Training data for the llm benchmark: a learnable synthetic language (default) or a tokenized corpus.

Synthetic language: ``lang_vocab`` symbols, each mapped to a fixed random token id of the model's vocabulary.
A fixed random grammar of order 1 or 2 picks the successor of the last ``order`` symbols; with probability
``p_follow`` the next symbol is that successor, otherwise a uniformly random symbol. The best achievable loss
(the entropy of the next token given the context) is known in closed form:
    floor = -(q0 ln q0 + (V-1) q1 ln q1), q0 = p + (1-p)/V, q1 = (1-p)/V, V = lang_vocab.
Order 2 needs attention to the token before the previous one. Each rank generates ``data_tokens`` tokens as
parallel streams on its device (its own seed), and draws random windows of seq_len + 1 tokens from them.

Corpus (a data directory in CASES): ``tokens.bin``, a flat array of token ids, and ``tokens.json``,
``{"dtype": "uint16" | "int32" | "int64", "vocab_size": N}``. Every rank reads random windows of it. The loss
floor of a corpus is unknown: the check is that the training loss fell below ``target_loss`` when one is set,
else below 90% of its first window.
"""
import json
import math
import os

import torch

from common import harness

CORPUS_DTYPES = {"uint16": (torch.int16, 2), "int32": (torch.int32, 4), "int64": (torch.int64, 8)}  # read as


def entropy_floor(v, p):
    q0, q1 = p + (1 - p) / v, (1 - p) / v
    return -sum(q * math.log(q) for q in [q0] + [q1] * (v - 1) if q > 0)


class Synthetic:
    def __init__(self, c, vocab_size, device, rank):
        v, self.seq_len, self.device = c["lang_vocab"], c["seq_len"], device
        self.order, self.p = c["order"], c["p_follow"]
        g = torch.Generator().manual_seed(c["seed"])
        self.token_of = torch.randperm(vocab_size, generator=g)[:v].to(device)     # symbol -> token id
        self.succ = torch.randint(v, (v,) * self.order, generator=g).to(device)
        self.v = v
        self.floor = entropy_floor(v, self.p)
        streams = max(1, min(4096, c["data_tokens"] // (4 * (self.seq_len + 1))))
        length = max(self.seq_len + 1, c["data_tokens"] // streams)
        self.stream = self._generate(streams, length, c["seed"] + 1 + rank)
        self.gen = torch.Generator(device="cpu").manual_seed(c["seed"] + 1000 + rank)
        self.eval_stream = self._generate(64, 2 * (self.seq_len + 1), c["seed"] + 500 + rank)

    def _generate(self, n, length, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        follow = (torch.rand(n, length, generator=g) < self.p).to(self.device)
        noise = torch.randint(self.v, (n, length), generator=g).to(self.device)
        sym = torch.empty(n, length, dtype=torch.long, device=self.device)
        sym[:, 0] = noise[:, 0]
        sym[:, 1] = noise[:, 1]
        for t in range(2 if self.order == 2 else 1, length):
            ctx = (sym[:, t - 1],) if self.order == 1 else (sym[:, t - 2], sym[:, t - 1])
            sym[:, t] = torch.where(follow[:, t], self.succ[ctx], noise[:, t])
        return sym

    def _windows(self, stream, count, gen):
        n, length = stream.shape
        rows = torch.randint(n, (count,), generator=gen)
        starts = torch.randint(length - self.seq_len, (count,), generator=gen)
        idx = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        win = stream[rows.to(self.device)[:, None], idx.to(self.device)]
        tok = self.token_of[win]
        return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()

    def batches(self, n, micro_batch):
        return [self._windows(self.stream, micro_batch, self.gen) for _ in range(n)]

    def eval_batches(self, n, micro_batch):
        g = torch.Generator(device="cpu").manual_seed(7)
        return [self._windows(self.eval_stream, micro_batch, g) for _ in range(n)]

    def describe(self):
        return {"source": "synthetic", "lang_vocab": self.v, "order": self.order, "p_follow": self.p,
                "loss_floor_nats": self.floor, "stream_tokens": self.stream.numel()}


class Corpus:
    def __init__(self, c, vocab_size, device, rank, folder):
        head_path, bin_path = os.path.join(folder, "tokens.json"), os.path.join(folder, "tokens.bin")
        try:
            with open(head_path, encoding="utf-8") as f:
                head = json.load(f)
        except (OSError, ValueError) as e:
            harness.config_error(f"llm: cannot read {head_path}: {e}")
        if not isinstance(head, dict) or head.get("dtype") not in CORPUS_DTYPES:
            harness.config_error(f"llm: {head_path}: dtype must be one of {', '.join(CORPUS_DTYPES)}")
        hv = head.get("vocab_size")
        if isinstance(hv, bool) or not isinstance(hv, int) or hv < 2:
            harness.config_error(f"llm: {head_path}: vocab_size must be an integer >= 2, got {hv!r}")
        if hv > vocab_size:
            harness.config_error(f"llm: {head_path}: vocab_size {hv} exceeds the model's vocab_size {vocab_size}")
        dtype, width = CORPUS_DTYPES[head["dtype"]]
        try:
            size = os.stat(bin_path).st_size
        except OSError as e:
            harness.config_error(f"llm: cannot read {bin_path}: {e}")
        count = size // width
        if count < 2 * (c["seq_len"] + 1):
            harness.config_error(f"llm: {bin_path} holds {count} tokens, fewer than two windows of seq_len + 1")
        self.tokens = torch.from_file(bin_path, shared=False, size=count, dtype=dtype)
        self.count, self.seq_len, self.device, self.vocab = count, c["seq_len"], device, hv
        self.floor = float("nan")
        self.folder = folder
        self.unsigned16 = head["dtype"] == "uint16"
        self.gen = torch.Generator().manual_seed(c["seed"] + 1000 + rank)

    def _windows(self, count, gen):
        starts = torch.randint(self.count - self.seq_len - 1, (count,), generator=gen)
        idx = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        win = self.tokens[idx].to(torch.int64)
        if self.unsigned16:
            win &= 0xFFFF
        if int(win.max()) >= self.vocab or int(win.min()) < 0:
            harness.config_error(f"llm: {self.folder}/tokens.bin holds ids outside [0, {self.vocab})")
        win = win.to(self.device, non_blocking=True)
        return win[:, :-1].contiguous(), win[:, 1:].contiguous()

    def batches(self, n, micro_batch):
        return [self._windows(micro_batch, self.gen) for _ in range(n)]

    def eval_batches(self, n, micro_batch):
        g = torch.Generator().manual_seed(7)
        return [self._windows(micro_batch, g) for _ in range(n)]

    def describe(self):
        return {"source": "corpus", "folder": self.folder, "tokens": self.count, "vocab_size": self.vocab}


def make_source(c, shape, data_dir, ctx):
    """The corpus in data_dir when it holds tokens.json, else the synthetic language."""
    if data_dir and os.path.isfile(os.path.join(data_dir, "tokens.json")):
        return Corpus(c, shape.vocab_size, ctx.device, ctx.rank, data_dir)
    return Synthetic(c, shape.vocab_size, ctx.device, ctx.rank)
