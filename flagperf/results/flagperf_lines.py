"""FlagPerf's own result formats, read from rank and node logs so that FlagPerf benchmarks and toolkits run
unchanged (docs/results.md, "FlagPerf results"). Parsing is pure; reading goes through perflog's bounded
readers.

- ``[FlagPerf Result]<name>=<value><unit>`` (base toolkits) and ``[FlagPerf Result]Rank <N>'s <name>=<value><unit>``
  (base benchmarks): one metric per line, with its unit (``TFLOPS``, ``GB/s``, ``us``, ``%``, ...).
- FlagPerf's PerfLog, ``[PerfLog] {"event": "FINISHED", "value": {...}, "metadata": {...}}`` (training cases):
  its value holds ``e2e_time``, a throughput key that depends on the model, ``converged`` and final loss or
  accuracy.

:func:`build_finished` turns them into a FINISHED payload of flagperf's own schema (``flagperf.perflog/1``),
marked with ``origin``, so that the summary, the reporters and ``flagperf compare`` show them like any other.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from flagperf.results.perflog import RECORDS_MAX_BYTES, read_lines
from flagperf_contract import NODE_COMMAND_LOG, PERFLOG_SCHEMA, parse_perflog_line, rank_log_name

RESULT_MARK = "[FlagPerf Result]"
_RESULT = re.compile(
    r"\[FlagPerf Result\]\s*(?:Rank\s+(?P<rank>\d{1,7})'s\s+)?(?P<name>[^=]*?)\s*=\s*"
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?P<unit>.*?)\s*$")
TIME_UNITS = ("s", "ms", "us", "µs", "ns", "sec", "second", "seconds", "min", "h")
MAX_RESULTS = 10_000        # lines kept per round: a log that prints more is not a result report
ORIGIN_RESULTS = "[FlagPerf Result] lines"
ORIGIN_PERFLOG = "FlagPerf [PerfLog] FINISHED"


@dataclass(frozen=True)
class FlagPerfResult:
    name: str
    value: float
    unit: str
    rank: int | None = None     # "Rank N's" in the line (or the rank whose own log it is)
    node: int = 0               # the node rank whose log held it


def parse_result_line(line: str, *, node: int = 0, rank: int | None = None) -> FlagPerfResult | None:
    """The result of one ``[FlagPerf Result]`` line, or None (another line, no number, a non-finite value)."""
    if RESULT_MARK not in line:
        return None
    m = _RESULT.search(line.rstrip("\r\n"))
    if m is None or not m.group("name"):
        return None
    value = float(m.group("value"))
    if not math.isfinite(value):
        return None
    prefixed = m.group("rank")
    return FlagPerfResult(m.group("name"), value, m.group("unit"), int(prefixed) if prefixed else rank, node)


def line_results(line: str, *, node: int = 0, rank: int | None = None) -> list:
    """Every result of one line: ranks sharing a log may print at once, so that two results end up on one line
    (``...=41.0TFLOPS[FlagPerf Result]Rank 1's ...``); each marker starts a result of its own."""
    if RESULT_MARK not in line:
        return []
    chunks = line.split(RESULT_MARK)[1:]
    out = [parse_result_line(RESULT_MARK + c, node=node, rank=rank) for c in chunks]
    return [r for r in out if r is not None]


def parse_results(lines, *, node: int = 0, rank: int | None = None) -> list:
    out: list = []
    for line in lines:
        out += line_results(line, node=node, rank=rank)
        if len(out) >= MAX_RESULTS:
            return out[:MAX_RESULTS]
    return out


def read_log(path, *, node: int = 0, rank: int | None = None, problems: list | None = None) -> tuple:
    """(FlagPerf results, FlagPerf PerfLog FINISHED record or None) of one log, from at most its last
    RECORDS_MAX_BYTES (perflog.read_lines: regular files only)."""
    results: list = []
    finished = None
    for line in read_lines(path, RECORDS_MAX_BYTES, problems):
        if RESULT_MARK in line:
            results += line_results(line, node=node, rank=rank)[:MAX_RESULTS - len(results)]
        elif "[PerfLog]" in line:
            record = parse_perflog_line(line)
            if record is not None and is_flagperf_finished(record):
                finished = record
    return results, finished


def is_flagperf_finished(record) -> bool:
    """A FlagPerf-format PerfLog FINISHED record: its figures under ``value`` (a mapping), no flagperf schema."""
    return isinstance(record, dict) and record.get("event") == "FINISHED" and "schema" not in record \
        and isinstance(record.get("value"), dict)


def higher_is_better(unit: str) -> bool:
    """Times are lower-is-better; everything FlagPerf reports otherwise (FLOPS, bandwidth, %) is higher."""
    return unit.strip().lower() not in TIME_UNITS


def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def perflog_unit(key: str) -> str:
    """The unit of a key of FlagPerf's FINISHED value: ``*_time`` s, ``<x>_per_second`` <x>/s, else none."""
    k = key.lower()
    if k.endswith("time") or k.endswith("_time_s"):
        return "s"
    m = re.search(r"([a-z]+)_per_second", k)
    if m:
        return f"{m.group(1)}/s"
    if k.endswith("_per_s"):
        return f"{k[:-6].rsplit('_', 1)[-1]}/s"
    return ""


def _throughput_key(value: dict) -> str | None:
    for key in value:
        k = str(key).lower()
        if _number(value[key]) is not None and ("per_second" in k or k.endswith("_per_s") or "throughput" in k
                                                or k.endswith("tps") or k.endswith("_fps")):
            return str(key)
    return None


def _metric_keys(results) -> dict:
    """{key: result}: ``name`` for node 0's lines without a rank, ``name@rank<N>`` for ranked ones,
    ``name@node<K>`` for other nodes' lines without a rank, ``#2``, ``#3`` for repeats."""
    out: dict = {}
    for r in results:
        key = r.name if r.rank is None and r.node == 0 else \
            f"{r.name}@rank{r.rank}" if r.rank is not None else f"{r.name}@node{r.node}"
        base, n = key, 1
        while key in out:
            n += 1
            key = f"{base}#{n}"
        out[key] = r
    return out


def build_finished(benchmark: str, results, perflog_finished: dict | None = None,
                   e2e_time: float | None = None) -> dict | None:
    """A flagperf.perflog/1 FINISHED payload from FlagPerf results and/or a FlagPerf PerfLog FINISHED record;
    None when there is neither. Headline: the first result line (a ranked name: rank 0's value, or the lowest
    rank's), else the PerfLog throughput key, else its ``e2e_time``."""
    results = list(results or ())
    value = perflog_finished.get("value") if isinstance(perflog_finished, dict) else None
    value = value if isinstance(value, dict) else None
    if not results and value is None:
        return None
    metrics: dict = {}
    details: dict = {}
    origins = []
    head = None
    if results:
        origins.append(ORIGIN_RESULTS)
        for key, r in _metric_keys(results).items():
            metrics[key] = {"value": r.value, "unit": r.unit, **({"rank": r.rank} if r.rank is not None else {}),
                            **({"node": r.node} if r.node else {})}
        first = results[0]
        if first.rank is None:
            head = (first.name, first.value, first.unit)
        else:
            ranked = sorted((r for r in results if r.name == first.name and r.rank is not None),
                            key=lambda r: r.rank)
            head = (first.name, ranked[0].value, ranked[0].unit)
            by_rank: dict = {}
            for r in ranked:
                by_rank.setdefault(r.rank, r.value)
            if sorted(by_rank) == list(range(len(by_rank))):
                details["per_rank"] = {"metric": first.name, "values": [by_rank[i] for i in range(len(by_rank))]}
    if value is not None:
        origins.append(ORIGIN_PERFLOG)
        for key, v in value.items():
            if isinstance(v, bool):
                metrics.setdefault(str(key), {"value": int(v), "unit": "bool"})
                details[str(key)] = v
            elif _number(v) is not None:
                metrics.setdefault(str(key), {"value": float(v), "unit": perflog_unit(str(key))})
            else:
                details[str(key)] = v
        if head is None:
            key = _throughput_key(value)
            if key is not None:
                head = (key, float(value[key]), perflog_unit(key))
            elif _number(value.get("e2e_time")) is not None:
                head = ("e2e_time", float(value["e2e_time"]), "s")
        if _number(value.get("e2e_time")) is not None:
            e2e_time = float(value["e2e_time"])
        meta = perflog_finished.get("metadata") if isinstance(perflog_finished, dict) else None
        if isinstance(meta, dict):
            details["metadata"] = meta
    if head is None:
        return None     # a PerfLog FINISHED without a single number
    name, v, unit = head
    details["lines"] = len(results)
    return {"event": "FINISHED", "schema": PERFLOG_SCHEMA, "benchmark": benchmark, "metric": name, "value": v,
            "unit": unit, "higher_is_better": higher_is_better(unit), "e2e_time": _number(e2e_time) or 0.0,
            "metrics": metrics, "checks": {"passed": True, "details": details}, "env": {},
            "origin": " + ".join(origins)}


def node_logs(node) -> dict:
    """{global rank: log path on the driver} of a planned node (flagperf.plan.NodePlan): every rank's
    ``rank<R>.out.log``, or in launch mode "node" the node command's ``node.out.log`` under the node's first
    rank."""
    if node.launch.mode == "node":
        return {node.ranks[0]: Path(node.local_dir) / NODE_COMMAND_LOG} if node.ranks else {}
    return {rank: Path(node.local_dir) / rank_log_name(rank) for rank in node.ranks}


def node_results(node, problems: list | None = None) -> list:
    """The FlagPerf results of every log of a planned node, in rank order. A ranks-mode rank's lines without
    ``Rank N's`` are that rank's; a node command's are the node's."""
    node_mode = node.launch.mode == "node"
    out: list = []
    for rank, path in sorted(node_logs(node).items()):
        found, _ = read_log(path, node=node.node_rank, rank=None if node_mode else rank, problems=problems)
        out += found[:MAX_RESULTS - len(out)]
    return out
