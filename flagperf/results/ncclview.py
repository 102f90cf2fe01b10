"""nccl-tests' view of a collectives or p2p case: one table per operation over its size sweep, with nccl-tests'
columns (size, count, type, redop, root, time, algbw, busbw, #wrong) and its average bus bandwidth.

The figures come from one round of the case (:func:`documented_round`): its FINISHED record's
``checks.details.sweep`` (one entry per operation and size), or, for a run from before that list, the metric
names ``busbw_<op>_<size>``, ``algbw_<op>_<size>`` and ``time_us_<op>_<size>`` (p2p: ``bw_<mode>_<src>_<dst>_<size>``,
``time_us_<mode>_<src>_<dst>_<size>``). Nothing here trusts the record: an entry that does not have the expected
types is left out. See docs/results.md, "nccl-tests' view".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from flagperf.results.interpret import Status
from flagperf.results.summary import CaseSummary

BENCHMARKS = ("collectives", "p2p")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
REDUCING = ("all_reduce", "reduce_scatter")
IN_PLACE = ("all_reduce", "broadcast")  # the collectives benchmark runs these in place
ROOT_OF = {"broadcast": 0}              # the collectives benchmark's broadcast root; -1: no root (nccl-tests)
TYPE_NAMES = {"fp32": "float", "bf16": "bfloat16"}          # flagperf dtype -> nccl-tests' type name
TYPE_BYTES = {"float": 4, "bfloat16": 2}
UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MAX_ROWS = 64                           # sizes per operation (the benchmarks' limit)
MAX_TABLES = 64                         # operations (or p2p pair and mode) per case
NAME_MAX = 64                           # characters of an op, type or redop name

_LABEL = r"(\d{1,15})([KMGT]|B)"
_COLL_METRIC = re.compile(rf"(busbw|algbw|time_us)_({'|'.join(COLLECTIVE_OPS)})_{_LABEL}")
_P2P_METRIC = re.compile(rf"(bw|time_us)_(uni|bi)_(\d{{1,6}})_(\d{{1,6}})_{_LABEL}")


@dataclass(frozen=True)
class SweepRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None


@dataclass(frozen=True)
class OpTable:
    case: str
    round: int
    op: str
    rows: tuple[SweepRow, ...]
    avg_busbw_gbs: float
    largest_busbw_gbs: float


# --------------------------------------------------------------------------- reading one record

def as_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _name(v) -> str | None:
    return v if isinstance(v, str) and v and len(v) <= NAME_MAX else None


def _details(finished) -> dict:
    checks = (finished or {}).get("checks")
    details = checks.get("details") if isinstance(checks, dict) else None
    return details if isinstance(details, dict) else {}


def _passed(finished) -> bool:
    checks = finished.get("checks")
    return isinstance(checks, dict) and checks.get("passed") is True


def label_bytes(number: str, unit: str) -> int:
    """The byte count of a size label's parts: ('64', 'K') -> 65536, ('1000', 'B') -> 1000."""
    return int(number) * UNITS[unit]


def _entry_row(e) -> tuple | None:
    """(op, SweepRow) of one ``details.sweep`` entry, or None when it is not one."""
    if not isinstance(e, dict):
        return None
    op, dtype, redop = _name(e.get("op")), _name(e.get("dtype")), _name(e.get("redop"))
    size, count, root = as_int(e.get("size_bytes")), as_int(e.get("count")), as_int(e.get("root"))
    t, alg, bus = _num(e.get("time_us")), _num(e.get("algbw")), _num(e.get("busbw"))
    wrong = e.get("wrong")
    if wrong is not None and (as_int(wrong) is None or wrong < 0):
        return None
    if op is None or dtype is None or redop is None or size is None or count is None or root is None \
            or t is None or alg is None or bus is None or size < 0 or count < 0:
        return None
    return op, SweepRow(size, count, dtype, redop, root, t, alg, bus, wrong)


def _from_sweep(sweep) -> dict:
    """{op: [SweepRow]} of a ``details.sweep`` list (the first entry of an op and size wins)."""
    out: dict = {}
    for e in sweep[:MAX_TABLES * MAX_ROWS]:
        got = _entry_row(e)
        if got is None:
            continue
        op, row = got
        rows = out.setdefault(op, {})
        if row.size_bytes not in rows:
            rows[row.size_bytes] = row
    return {op: list(rows.values()) for op, rows in out.items()}


def _metric_value(metrics, name):
    m = metrics.get(name)
    return _num(m.get("value")) if isinstance(m, dict) else None


def _from_collective_metrics(finished, details) -> dict:
    """{op: [SweepRow]} from a collectives record without ``details.sweep`` (its metric names)."""
    metrics = finished.get("metrics") if isinstance(finished.get("metrics"), dict) else {}
    dtype = TYPE_NAMES.get(details.get("dtype"), details.get("dtype")) if _name(details.get("dtype")) else "float"
    elt = TYPE_BYTES.get(dtype, 4)
    n = as_int(details.get("world_size")) or 0
    rounded = details.get("bytes_rounded") if isinstance(details.get("bytes_rounded"), dict) else {}
    passed = _passed(finished)
    out: dict = {}
    for name in metrics:
        m = _COLL_METRIC.fullmatch(name) if isinstance(name, str) else None
        if m is None or m.group(1) != "busbw":
            continue
        op, number, unit = m.group(2), m.group(3), m.group(4)
        label = f"{number}{unit}"
        bus = _metric_value(metrics, name)
        alg = _metric_value(metrics, f"algbw_{op}_{label}")
        t = _metric_value(metrics, f"time_us_{op}_{label}")
        if bus is None or alg is None or t is None:
            continue
        size = as_int(rounded.get(f"{op}_{label}")) or label_bytes(number, unit)
        per_rank = op in ("all_gather", "reduce_scatter")
        count = size // (elt * n) if per_rank and n else size // elt
        out.setdefault(op, []).append(SweepRow(size, count, dtype, "sum" if op in REDUCING else "none",
                                               ROOT_OF.get(op, -1), t, alg, bus,
                                               0 if passed else None))
    return out


def _from_p2p_metrics(finished, details) -> dict:
    """{op: [SweepRow]} from a p2p record without ``details.sweep``: op ``<mode>_<src>_<dst>``, busbw = algbw
    (bi: one direction's bytes / time, as the benchmark's ``nccl_bw``)."""
    metrics = finished.get("metrics") if isinstance(finished.get("metrics"), dict) else {}
    dtype = TYPE_NAMES.get(details.get("dtype"), details.get("dtype")) if _name(details.get("dtype")) else "float"
    elt = TYPE_BYTES.get(dtype, 4)
    passed = _passed(finished)
    out: dict = {}
    for name in metrics:
        m = _P2P_METRIC.fullmatch(name) if isinstance(name, str) else None
        if m is None or m.group(1) != "bw":
            continue
        mode, src, dst, number, unit = m.group(2), m.group(3), m.group(4), m.group(5), m.group(6)
        bw = _metric_value(metrics, name)
        t = _metric_value(metrics, f"time_us_{mode}_{src}_{dst}_{number}{unit}")
        if bw is None or t is None:
            continue
        count = label_bytes(number, unit) // elt
        if mode == "bi":            # flagperf's bi counts both directions; nccl-tests' sendrecv one rank's sends
            bw = bw / 2
        out.setdefault(f"{mode}_{src}_{dst}", []).append(
            SweepRow(count * elt, count, dtype, "none", -1, t, bw, bw, 0 if passed else None))
    return out


def round_rows(finished) -> dict:
    """{op: [SweepRow]} of one FINISHED record of the collectives or p2p benchmark, or of any record with a
    ``details.sweep`` list (FlagCX's perf-test lines read by results/flagcx_lines.py); {} for any other, and for
    p2p's link matrix, which measures one size."""
    if not isinstance(finished, dict):
        return {}
    details = _details(finished)
    sweep = details.get("sweep")
    if finished.get("benchmark") not in BENCHMARKS:
        return _from_sweep(sweep) if isinstance(sweep, list) else {}
    if finished["benchmark"] == "p2p" and details.get("plan") == "matrix":
        return {}
    if isinstance(sweep, list):
        return _from_sweep(sweep)
    if finished["benchmark"] == "collectives":
        return _from_collective_metrics(finished, details)
    return _from_p2p_metrics(finished, details)


# --------------------------------------------------------------------------- one case

def documented_round(case: CaseSummary):
    """The round whose sweep the view shows: of the passed rounds with a sweep, the one with the median headline
    value (the lower of the two middle ones when their number is even; the earlier round on a tie); None if none."""
    rounds = [r for r in case.rounds if r.status == Status.PASSED and r.finished and round_rows(r.finished)]
    if not rounds:
        return None
    ranked = sorted(rounds, key=lambda r: (_num(r.value) if _num(r.value) is not None else -math.inf, r.round))
    return ranked[(len(ranked) - 1) // 2]


def placement(op: str) -> str:
    """Where the benchmark puts an op's output, in nccl-tests' terms: all_reduce and broadcast run in place (the
    output is the input buffer), all_gather, reduce_scatter and p2p's transfers out of place."""
    return "in_place" if op in IN_PLACE else "out_of_place"


def average_busbw(rows) -> float:
    """nccl-tests' ``# Avg bus bandwidth``: the mean of busbw over the rows (here: one placement per size)."""
    return sum(r.busbw_gbs for r in rows) / len(rows) if rows else 0.0


def op_tables(case: CaseSummary) -> list[OpTable]:
    """One table per operation of the case's documented round (:func:`documented_round`), rows in numeric size
    order, in the order the record lists the operations; [] when the case has no size sweep."""
    r = documented_round(case)
    if r is None:
        return []
    tables = []
    for op, rows in list(round_rows(r.finished).items())[:MAX_TABLES]:
        ordered = tuple(sorted(rows, key=lambda row: row.size_bytes)[:MAX_ROWS])
        tables.append(OpTable(case.name, r.round, op, ordered, average_busbw(ordered), ordered[-1].busbw_gbs))
    return tables


# --------------------------------------------------------------------------- nccl-tests' number format

def float_text(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: ``value`` in at most ``width`` characters, right-aligned: 2 decimals, else 1,
    else none, else an exponent."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return (f"{{:{width}.1e}}" if width >= 7 else f"{{:{width}.0e}}").format(value)


def wrong_text(wrong: int | None) -> str:
    """The #wrong column: the count (nccl-tests' %g), or N/A where the run did not record it."""
    return "N/A" if wrong is None else f"{wrong:g}"


COLUMNS = ("size (B)", "count (elements)", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
           "#wrong")


def row_cells(row: SweepRow) -> list:
    """A row's nine cells as nccl-tests prints them (time in 7 characters, bandwidths in 6)."""
    return [str(row.size_bytes), str(row.count), row.dtype, row.redop, str(row.root),
            float_text(row.time_us, 7).strip(), float_text(row.algbw_gbs, 6).strip(),
            float_text(row.busbw_gbs, 6).strip(), wrong_text(row.wrong)]


def title(table: OpTable) -> str:
    """'<case>: <op>, round <n>'."""
    return f"{table.case}: {table.op}, round {table.round}"


def footer(table: OpTable) -> str:
    """nccl-tests' '# Avg bus bandwidth' line, beside the largest size's busbw."""
    largest = table.rows[-1].size_bytes
    return (f"Avg bus bandwidth: {table.avg_busbw_gbs:.4g} GB/s (mean busbw over {len(table.rows)} size(s)); "
            f"at the largest size ({largest} B): {table.largest_busbw_gbs:.4g} GB/s")
