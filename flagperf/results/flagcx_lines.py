"""FlagCX's perf-test lines (``test/perf/test_<op>`` of FlagCX, run by mpirun) as per-size metrics, named like the
collectives benchmark's so that the nccl-tests view and ``flagperf compare`` show them alike (docs/flagcx.md).

FlagCX's rank 0 prints one line per message size::

    Comm size: 131072 bytes; Elapsed time: 0.000123 sec; Algo bandwidth: 1.065 GB/s; Bus bandwidth: 1.864 GB/s

The line does not name the operation: a line ``FlagCX perf test: test_<op>`` before it does (the shipped
``examples/flagcx_perf`` prints it); without one the operation is ``flagcx``. Each size gives
``busbw_<op>_<size>`` and ``algbw_<op>_<size>`` (GB/s) and ``time_us_<op>_<size>`` (us), ``<size>`` as the
collectives benchmark labels it (``128K``, ``4G``, ``1000B``); :func:`sweep` gives the ``details.sweep`` entries.
Pure: it parses lines it is given and trusts none (a non-finite or negative figure is no result).
"""

from __future__ import annotations

import math
import re

OP_MARK = "FlagCX perf test:"
KIND_FLAGCX = "flagcx"
UNKNOWN_OP = "flagcx"
MAX_LINES = 4096                 # result lines kept per log
# FlagCX's test names -> the collectives benchmark's op names (the others keep FlagCX's name)
OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
       "alltoall": "all_to_all", "alltoallv": "all_to_allv"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_LINE = re.compile(rf"Comm size:\s*(\d{{1,20}})\s*bytes;\s*Elapsed time:\s*{_NUM}\s*sec;\s*Algo bandwidth:\s*{_NUM}"
                   rf"\s*GB/s;\s*Bus bandwidth:\s*{_NUM}\s*GB/s")
_MARK = re.compile(re.escape(OP_MARK) + r"\s*(?:\S*/)?test_([a-z][a-z0-9_]{0,31})\b")
_METRIC = re.compile(r"(busbw|algbw|time_us)_([a-z][a-z0-9_]{0,40})_(\d{1,15}(?:[KMGT]|B))")
_UNITS = {"T": 1 << 40, "G": 1 << 30, "M": 1 << 20, "K": 1 << 10}


def size_label(n: int) -> str:
    """The collectives benchmark's label of a byte count: 131072 -> '128K', 1 << 30 -> '1G', 1000 -> '1000B'."""
    for suffix in ("T", "G", "M", "K"):
        if n and n % _UNITS[suffix] == 0:
            return f"{n // _UNITS[suffix]}{suffix}"
    return f"{n}B"


def label_bytes(label: str) -> int:
    return int(label[:-1]) * (_UNITS.get(label[-1], 1))


class FlagCXLines:
    """Fed one log's lines in order: the operation markers and the result lines. ``results`` holds
    (metric name, value, unit) in the order printed."""

    def __init__(self) -> None:
        self.op = UNKNOWN_OP
        self.results: list = []

    def feed(self, line: str) -> bool:
        """True when the line was FlagCX's (a marker or a result line)."""
        if OP_MARK in line:
            m = _MARK.search(line)
            if m:
                self.op = OPS.get(m.group(1), m.group(1))
            return True
        if "Comm size:" not in line:
            return False
        m = _LINE.search(line)
        if m is None or len(self.results) >= 3 * MAX_LINES:
            return m is not None
        size, t, alg, bus = int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))
        if not all(math.isfinite(v) and v >= 0 for v in (t, alg, bus)) or size <= 0 or t <= 0:
            return True
        label = size_label(size)
        self.results += [(f"busbw_{self.op}_{label}", bus, "GB/s"), (f"algbw_{self.op}_{label}", alg, "GB/s"),
                         (f"time_us_{self.op}_{label}", t * 1e6, "us")]
        return True


def sweep(metrics) -> list:
    """``details.sweep`` entries ({op, size_bytes, count, dtype, redop, root, time_us, algbw, busbw, wrong}) from
    (name, value) pairs of FlagCX metrics; FlagCX's perf tests use float elements."""
    rows: dict = {}
    for name, value in metrics:
        m = _METRIC.fullmatch(name)
        if m:
            rows.setdefault((m.group(2), m.group(3)), {})[m.group(1)] = value
    out = []
    for (op, label), v in rows.items():
        if {"busbw", "algbw", "time_us"} <= set(v):
            size = label_bytes(label)
            out.append({"op": op, "size_bytes": size, "count": size // 4, "dtype": "float",
                        "redop": "sum" if op in REDUCING else "none", "root": 0 if op in ROOTED else -1,
                        "time_us": v["time_us"], "algbw": v["algbw"], "busbw": v["busbw"], "wrong": None})
    return out


def headline(metrics) -> tuple | None:
    """(name, value, unit) of the case's figure: the first operation's busbw at its largest size."""
    entries = sweep(metrics)
    if not entries:
        return None
    op = entries[0]["op"]
    top = max((e for e in entries if e["op"] == op), key=lambda e: e["size_bytes"])
    return f"busbw_{op}_{size_label(top['size_bytes'])}", top["busbw"], "GB/s"
