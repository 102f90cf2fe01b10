"""Synthetic data for FlagPerf's distilbert pytorch training case (SST-2 text classification), in the case's
on-disk layout, plus the case config that bounds one run. No network: the model directory is a random-init
DistilBERT built with the installed transformers, so `from_pretrained(DATA_DIR/model)` loads it offline.

  python3 bench/flagperf_training_data.py data DATA_DIR [--train-samples N] [--eval-samples N] [--seed S]
  python3 bench/flagperf_training_data.py config TRAINING_DIR --hardware H100 --nnodes 1 --nproc 1 [--set KEY=VALUE]

Layout written by `data` (what the case's dataloader and model reader open under --data_dir):
  dataset/train_dataset.npz, dataset/eval_dataset.npz   np.savez arrays: idx int32 [N], sentence str [N],
      label int64 [N] (0/1), input_ids int64 [N, 512], attention_mask int64 [N, 512]
      (padding to max_length 512, as the case's SST-2 preprocessing writes them)
  model/   config.json + weights (save_pretrained of DistilBertForSequenceClassification, random init),
      vocab.txt, tokenizer_config.json

Labels are random, so evaluation accuracy stays near 0.5 and the run never meets target_acc: it ends after
max_epoch epochs over the train set. Run length = max_epoch * train_samples / throughput.

`config` writes TRAINING_DIR/nvidia/distilbert-pytorch/config/config_<HW>x<NNODES>x<NPROC>.py, the file a
case key "distilbert:pytorch:<HW>:<NNODES>:<NPROC>:<REPEAT>" selects. Its defaults: train_batch_size 32 and
gradient_accumulation_steps 8 (the A100x1x1 hyperparameters), max_epoch 2; each --set KEY=VALUE overrides or adds
a key (VALUE is a Python literal).
"""
import argparse
import ast
import json
import sys
from pathlib import Path

import numpy as np

SEQ_LEN = 512  # the case pads every sentence to the tokenizer's max_length
VOCAB_SIZE = 30522
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
FIRST_WORD = 1000  # ids below are special / unused in a BERT uncased vocab
MODEL = dict(vocab_size=VOCAB_SIZE, dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
             max_position_embeddings=SEQ_LEN, dropout=0.1, attention_dropout=0.1, seq_classif_dropout=0.2,
             num_labels=2, pad_token_id=PAD)
CONFIG_DEFAULTS = {"train_batch_size": 32, "gradient_accumulation_steps": 8, "max_epoch": 2}
CASE_CONFIG_DIR = ("nvidia", "distilbert-pytorch", "config")


def vocab_tokens():
    toks = [f"[unused{i}]" for i in range(FIRST_WORD)]
    toks[PAD], toks[UNK], toks[CLS], toks[SEP], toks[MASK] = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
    toks += [f"w{i}" for i in range(FIRST_WORD, VOCAB_SIZE)]
    return toks


def make_split(rng, n, toks):
    """SST-2-like lengths: 4..64 word tokens between [CLS] and [SEP], zero padding to SEQ_LEN."""
    input_ids = np.zeros((n, SEQ_LEN), dtype=np.int64)
    attention_mask = np.zeros((n, SEQ_LEN), dtype=np.int64)
    lengths = rng.integers(4, 65, size=n)
    sentences = []
    for i, length in enumerate(lengths):
        words = rng.integers(FIRST_WORD, VOCAB_SIZE, size=length)
        input_ids[i, 0] = CLS
        input_ids[i, 1:length + 1] = words
        input_ids[i, length + 1] = SEP
        attention_mask[i, :length + 2] = 1
        sentences.append(" ".join(toks[w] for w in words))
    return dict(idx=np.arange(n, dtype=np.int32), sentence=np.array(sentences),
                label=rng.integers(0, 2, size=n).astype(np.int64), input_ids=input_ids,
                attention_mask=attention_mask)


def write_model(model_dir, seed, toks):
    import torch  # only the model part needs torch and transformers
    from transformers import DistilBertConfig, DistilBertForSequenceClassification
    torch.manual_seed(seed)
    model = DistilBertForSequenceClassification(DistilBertConfig(**MODEL))
    model.save_pretrained(str(model_dir))
    (model_dir / "vocab.txt").write_text("\n".join(toks) + "\n", encoding="utf-8")
    (model_dir / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "model_max_length": SEQ_LEN}), encoding="utf-8")
    return sum(p.numel() for p in model.parameters())


def cmd_data(a):
    root = Path(a.data_dir)
    for sub in ("dataset", "model"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    toks = vocab_tokens()
    rng = np.random.default_rng(a.seed)
    for name, n in (("train", a.train_samples), ("eval", a.eval_samples)):
        path = root / "dataset" / f"{name}_dataset.npz"
        np.savez(path, **make_split(rng, n, toks))
        print(f"wrote {path} ({n} samples, {path.stat().st_size / 2**20:.1f} MiB)")
    if a.no_model:
        return
    params = write_model(root / "model", a.seed, toks)
    print(f"wrote {root / 'model'} (random-init DistilBertForSequenceClassification, {params / 1e6:.1f}M params)")


def parse_overrides(pairs):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            sys.exit(f"flagperf_training_data: override {pair!r}: expected KEY=VALUE with a Python name as KEY")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            sys.exit(f"flagperf_training_data: override {pair!r}: expected a Python literal as VALUE")
    return out


def cmd_config(a):
    conf_dir = Path(a.training_dir).joinpath(*CASE_CONFIG_DIR)
    if not conf_dir.is_dir():
        sys.exit(f"flagperf_training_data: {conf_dir}: expected the distilbert-pytorch config folder of a "
                 "FlagPerf training tree")
    if not a.hardware.isidentifier():
        sys.exit(f"flagperf_training_data: --hardware {a.hardware!r}: expected letters and digits (e.g. H100)")
    values = dict(CONFIG_DEFAULTS, **parse_overrides(a.overrides))
    path = conf_dir / f"config_{a.hardware}x{a.nnodes}x{a.nproc}.py"
    path.write_text("".join(f"{k} = {v!r}\n" for k, v in values.items()), encoding="utf-8")
    print(f"wrote {path}: {values}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="write dataset/ and model/ under DATA_DIR")
    d.add_argument("data_dir")
    d.add_argument("--train-samples", type=int, default=24576)
    d.add_argument("--eval-samples", type=int, default=1024)
    d.add_argument("--seed", type=int, default=1234)
    d.add_argument("--no-model", action="store_true", help="write the dataset only")
    c = sub.add_parser("config", help="write the case config a case key selects")
    c.add_argument("training_dir", help="the training/ folder of a FlagPerf tree")
    c.add_argument("--hardware", default="H100")
    c.add_argument("--nnodes", type=int, default=1)
    c.add_argument("--nproc", type=int, default=1)
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config key to add or override (repeatable)")
    a = p.parse_args(argv)
    for name in ("train_samples", "eval_samples", "nnodes", "nproc"):
        if getattr(a, name, 1) < 1:
            p.error(f"--{name.replace('_', '-')}: expected a positive integer")
    if a.cmd == "data":
        cmd_data(a)
    else:
        cmd_config(a)


if __name__ == "__main__":
    main()
