"""Byte-level mutations shared by the config fuzz tests (test_config_fuzz.py, test_pyconfig_fuzz.py)."""
from __future__ import annotations

import random


def flip_or_truncate(rng: random.Random, data: bytes, op: float, alphabet: bytes, p_alphabet: float) -> bytes:
    """``data`` (not empty) with one byte replaced when ``op`` < 0.2 (by one of ``alphabet`` with probability
    ``p_alphabet``, else by any byte), else cut at a random point."""
    if op < 0.2:
        i = rng.randrange(len(data))
        new = bytes([rng.choice(alphabet) if rng.random() < p_alphabet else rng.randrange(256)])
        return data[:i] + new + data[i + 1:]
    return data[:rng.randrange(len(data))]


def dup_or_drop_line(rng: random.Random, lines: list, p_dup: float) -> bytes:
    """``lines`` (not empty) joined again, one of them duplicated (with probability ``p_dup``) or dropped."""
    i = rng.randrange(len(lines))
    if rng.random() < p_dup:
        lines.insert(i, lines[i])
    else:
        del lines[i]
    return b"\n".join(lines)
