"""FlagPerf's own result formats, read from rank and node logs so that FlagPerf benchmarks, toolkits and training
cases run unchanged (docs/results.md, "FlagPerf results"). Parsing is pure; reading goes through perflog's
bounded readers.

- ``[FlagPerf Result]<name>=<value><unit>`` (base toolkits) and ``[FlagPerf Result]Rank <N>'s <name>=<value><unit>``
  (base benchmarks): one metric per line, with its unit (``TFLOPS``, ``GB/s``, ``us``, ``%``, ...). A line of
  several ``<name>=<value><unit>`` items after a label (``FLOPS utilization: cputime=80.12%, kerneltime=85.3%``) is
  one metric per item, named ``<label> <name>``; FlagPerf's operation benchmarks' time lines (``cputime=<t> us,
  throughput=<n> op/s, equals to <x> TFLOPS``) are three (``cputime``, ``cputime throughput``, ``cputime TFLOPS``)
  and their correctness line (``Correctness with CPU golden Reference: True``) is ``correctness``, unit ``bool``.
- FlagPerf's inference ``Finish Info`` line (its logger's ``... | Finish Info | ... - {'vendor': ..., 'flops': ...,
  '*p_inference_core(qps)': ..., ...}``): one metric per number of the dict, the unit from the key's parentheses
  (``(qps)``, ``(second)``: s), the starred key (else ``p_validation_core``) first.
- FlagPerf's PerfLog, ``[PerfLog] {"event": "FINISHED", "value": {...}, "metadata": {...}}`` (training cases):
  its value holds ``e2e_time``, a throughput key that depends on the model, ``converged`` and final loss or
  accuracy.
- The summary lines of FlagPerf's LLM training cases (:data:`TRAINING_LABELS`): ``MFU: 0.393``,
  ``System tokens per second: ...``, ``Tokens/p/s: ...``, FlagScale's ``<step time> <tokens/s>`` pair before its
  MFU, stage headers (``Pretrain stage``), ``Key: <k>, Value: <v>``; one metric each, never a rank's.

:func:`build_finished` turns them into a FINISHED payload of flagperf's own schema (``flagperf.perflog/1``),
marked with ``origin``, so that the summary, the reporters and ``flagperf compare`` show them like any other.
A node started by one command (launch mode node) is read from ``node.out.log`` and from the files FlagPerf's
training launchers write beside it (:func:`flagperf_node_files`).
"""

from __future__ import annotations

import ast
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from flagperf.results.flagcx_lines import KIND_FLAGCX, FlagCXLines
from flagperf.results.flagcx_lines import headline as flagcx_headline
from flagperf.results.flagcx_lines import sweep as flagcx_sweep
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
ORIGIN_TRAINING = "FlagPerf training summary lines"
ORIGIN_FLAGCX = "FlagCX perf-test lines"
ORIGIN_INFERENCE = "FlagPerf inference Finish Info"
KIND_RESULT, KIND_TRAINING, KIND_INFERENCE = "result", "training", "inference"
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_RANK_PREFIX = re.compile(r"^\s*Rank\s+(?P<rank>\d{1,7})'s\s+")
_ITEM = re.compile(rf"^\s*(?P<name>[^=,]*?)\s*=\s*(?P<value>{_NUM})\s*(?P<unit>[^=,]*?)\s*$")
_NEXT_ITEM = re.compile(r",\s*(?=[^,=]*=)")       # a comma that starts another <name>=<value> item
# FlagPerf's operation benchmarks: "cputime=4177.02 us, throughput=239.41 op/s, equals to 263.23 TFLOPS"
_ANY_NUM = rf"(?:{_NUM}|[-+]?(?:inf|nan))"         # FlagPerf prints what Python's float gives, nan and inf too
_OPERATION_TIME = re.compile(rf"^\s*(?P<which>[A-Za-z_]\w{{0,31}})\s*=\s*(?P<t>{_ANY_NUM})\s*(?P<tu>us|ms|s|ns),\s*"
                             rf"throughput\s*=\s*(?P<ops>{_ANY_NUM})\s*op/s,\s*equals to\s*(?P<tf>{_ANY_NUM})\s*"
                             rf"TFLOPS\s*$")
_CORRECTNESS = re.compile(r"^\s*Correctness with (?P<what>.{0,64}?)\s*:\s*(?P<ok>True|False)\s*$")
FINISH_MARK = "Finish Info"     # FlagPerf inference's logger level of its result line
FINISH_MAX_CHARS = 16384        # a longer Finish Info line is not read
_FINISH = re.compile(r"\|\s*Finish Info\s*\|[^{]*?-\s*(?P<dict>\{.*\})\s*$")
_FINISH_UNITS = {"second": "s", "seconds": "s", "s": "s", "ms": "ms", "qps": "qps", "gib": "GiB", "gb": "GB"}
FINISH_HEADS = ("p_inference_core", "p_validation_core")    # FlagPerf's own headline: the starred key, else

# The summary lines of FlagPerf's training cases, as printed (``print("MFU: ", x)``, ``print(f"MFU: {mfu}")``,
# ``logger.info("MFU: " + str(MFU))``): (label, metric name, unit, measured). The label starts the line or its
# message (after a logger's prefix); the number ends it. A measured figure must be positive (Megatron's launchers
# print negative rates when they found no step time); the others only describe the run.
TRAINING_LABELS = (
    ("MFU:", "mfu", "fraction", True),
    ("System tokens per second:", "tokens_per_s", "tokens/s", True),
    ("Tokens/p/s:", "tokens_per_s_per_chip", "tokens/s/chip", True),
    ("Throughput(token per chip per second):", "tokens_per_s_per_chip", "tokens/s/chip", True),
    ("Throughput(token per TFLOPS):", "tokens_per_s_per_tflops", "tokens/s/TFLOPS", True),
    ("Tokens/TFLOPS:", "tokens_per_s_per_tflops", "tokens/s/TFLOPS", True),
    ("Actual computing power:", "actual_tflops", "TFLOPS", True),
    ("avg_iter_time(s):", "avg_iter_time", "s", True),
    ("pretrain time is", "pretrain_time", "s", True),
    ("finetune time is", "finetune_time", "s", True),
    ("Theory TFLOPS:", "theory_tflops", "TFLOPS", False),
    ("tokens_pretrain is", "tokens_pretrain", "tokens/sample", False),
    ("tokens_finetune is", "tokens_finetune", "tokens/sample", False),
)
TRAINING_LINE_MAX_CHARS = 4096      # a longer line is no summary line (and is not searched)
MAX_REFUSED = 20                    # refused summary lines kept per round
_NUMBER = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan)"
_BEFORE_LABEL = r"(?:^|(?<=[\s\]|>:-]))"     # the label starts the line, or follows a logger's prefix
_TRAINING = tuple((re.compile(_BEFORE_LABEL + re.escape(label) + rf"\s*(?P<value>{_NUMBER})\s*(?P<pct>%)?\s*$",
                              re.IGNORECASE if label.endswith(" is") else 0), name, unit, measured)
                  for label, name, unit, measured in TRAINING_LABELS)
_KEY_VALUE = re.compile(_BEFORE_LABEL + r"Key: (?P<key>[A-Za-z_][\w.-]{0,63}), Value: (?:tensor\()?"
                        rf"(?P<value>{_NUMBER})(?:,\s*device=[^)]*)?\)?\s*$")
_PAIR = re.compile(rf"^\s*(?P<a>{_NUMBER})\s+(?P<b>{_NUMBER})\s*$")         # FlagScale: print(ave_steptime, tps)
_STAGE = re.compile(r"^\s*(?:(?P<stage>[A-Za-z][\w-]{0,31}) stage|two-stage (?P<avg>average))\s*$", re.IGNORECASE)
_MFU = _TRAINING[0][0]
_HINT = re.compile(r"MFU|okens|Throughput|TFLOPS|computing power|avg_iter_time|time is|Key: ")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_STREAM_PREFIX = re.compile(r"^\[[A-Za-z_]{0,16}\d{1,7}\]:\s?")    # torchrun --tee: [default1]:, [rank1]:


@dataclass(frozen=True)
class FlagPerfResult:
    name: str
    value: float
    unit: str
    rank: int | None = None     # "Rank N's" in the line (or the rank whose own log it is)
    node: int = 0               # the node rank whose log held it
    kind: str = KIND_RESULT     # KIND_TRAINING: a training case's summary line
    measured: bool = True       # False: a summary line that describes the run (theory TFLOPS, a loss)
    source: int = field(default=0, compare=False)   # which of the node's logs, in reading order (rank order)


def parse_result_line(line: str, *, node: int = 0, rank: int | None = None) -> FlagPerfResult | None:
    """The (first) result of one ``[FlagPerf Result]`` line, or None (another line, no number, a non-finite
    value)."""
    found = parse_result_items(line, node=node, rank=rank)
    return found[0] if found else None


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def parse_result_items(line: str, *, node: int = 0, rank: int | None = None) -> list:
    """Every result of one ``[FlagPerf Result]`` line: one ``<name>=<value><unit>``; several after a label
    (``FLOPS utilization: cputime=80.12%, kerneltime=85.3%``: ``FLOPS utilization cputime`` and ``... kerneltime``);
    an operation time line (three); an operation correctness line (``correctness``, 1 or 0, unit ``bool``). A
    non-finite value is left out."""
    if RESULT_MARK not in line:
        return []
    body = line.rstrip("\r\n").split(RESULT_MARK, 1)[1]
    m = _RANK_PREFIX.match(body)
    if m is not None:
        rank, body = int(m.group("rank")), body[m.end():]
    made = lambda name, value, unit: FlagPerfResult(name, value, unit, rank, node)  # noqa: E731
    m = _OPERATION_TIME.match(body)
    if m is not None:
        which = m.group("which")
        figures = [(which, m.group("t"), m.group("tu")), (f"{which} throughput", m.group("ops"), "op/s"),
                   (f"{which} TFLOPS", m.group("tf"), "TFLOPS")]
        return [made(n, v, u) for n, t, u in figures for v in [_finite(t)] if v is not None]
    m = _CORRECTNESS.match(body)
    if m is not None:
        return [made("correctness", 1.0 if m.group("ok") == "True" else 0.0, "bool")]
    items = _NEXT_ITEM.split(body)
    if len(items) > 1:
        first = items[0].split("=", 1)[0]
        label = first.rsplit(":", 1)[0].strip() if ":" in first else ""
        out: list = []
        for i, item in enumerate(items):
            m = _ITEM.match(item)
            if m is None:
                continue
            name = m.group("name").rsplit(":", 1)[-1].strip() if i == 0 and label else m.group("name")
            value = _finite(m.group("value"))
            if name and value is not None:
                out.append(made(f"{label} {name}" if label else name, value, m.group("unit")))
        if out:
            return out
    m = _RESULT.search(RESULT_MARK + body)
    if m is None or not m.group("name"):
        return []
    value = float(m.group("value"))
    if not math.isfinite(value):
        return []
    prefixed = m.group("rank")
    return [FlagPerfResult(m.group("name"), value, m.group("unit"), int(prefixed) if prefixed else rank, node)]


def _finish_unit(key: str) -> tuple:
    """(name, unit) of a key of FlagPerf inference's Finish Info: ``*p_inference_core(qps)`` -> (p_inference_core,
    qps), ``e2e_time(second)`` -> (e2e_time, s), ``flops`` -> FLOPS, anything else without a unit."""
    key = key.lstrip("*").strip()
    m = re.fullmatch(r"(?P<name>.*?)\s*\((?P<unit>[^()]{1,16})\)", key)
    if m is not None:
        unit = m.group("unit")
        return m.group("name"), _FINISH_UNITS.get(unit.lower(), unit)
    return key, "FLOPS" if key.lower() == "flops" else ""


def parse_finish_info(line: str, *, node: int = 0) -> list:
    """The results of FlagPerf inference's ``Finish Info`` line (its logger's ``<time> | Finish Info | <where> -
    {dict}``): a result per finite number of the dict (an int or float; booleans, None and strings are left
    out), KIND_INFERENCE, FlagPerf's headline first (the starred key, else p_inference_core, else
    p_validation_core). [] for another line or a dict that does not read as a Python literal."""
    line = plain_line(line)
    if FINISH_MARK not in line or len(line) > FINISH_MAX_CHARS:
        return []
    m = _FINISH.search(line)
    if m is None:
        return []
    try:
        info = ast.literal_eval(m.group("dict"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return []
    if not isinstance(info, dict):
        return []
    out, head = [], None
    for key, v in info.items():
        if not isinstance(key, str) or isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not math.isfinite(v) or len(key) > 64 or not key.isprintable():
            continue
        name, unit = _finish_unit(key)
        r = FlagPerfResult(name, float(v), unit, None, node, KIND_INFERENCE, name.lower() != "batchsize")
        if key.startswith("*") and head is None:
            head = r
        out.append(r)
    for name in FINISH_HEADS:
        if head is None:
            head = next((r for r in out if r.name == name), None)
    return ([head] + [r for r in out if r is not head]) if head is not None else out


def line_results(line: str, *, node: int = 0, rank: int | None = None) -> list:
    """Every result of one line: ranks sharing a log may print at once, so that two results end up on one line
    (``...=41.0TFLOPS[FlagPerf Result]Rank 1's ...``); each marker starts a result of its own."""
    if RESULT_MARK not in line:
        return []
    chunks = line.split(RESULT_MARK)[1:]
    return [r for c in chunks for r in parse_result_items(RESULT_MARK + c, node=node, rank=rank)]


def parse_results(lines, *, node: int = 0, rank: int | None = None) -> list:
    out: list = []
    for line in lines:
        out += line_results(line, node=node, rank=rank)
        if len(out) >= MAX_RESULTS:
            return out[:MAX_RESULTS]
    return out


def plain_line(line: str) -> str:
    """A log line without its line end and terminal colour codes (FlagPerf's logger colours its lines)."""
    line = line.rstrip("\r\n")
    return _ANSI.sub("", line) if "\x1b" in line else line


def clean_line(line: str) -> str:
    """A plain_line without torchrun's ``[default1]:`` stream prefix."""
    line = plain_line(line)
    return _STREAM_PREFIX.sub("", line, count=1) if line.startswith("[") else line


class TrainingLines:
    """The summary lines of FlagPerf's training cases in one log, fed line by line: ``results`` (KIND_TRAINING,
    never a rank's) and ``refused`` (why a summary line is no result: a measured figure that is not positive,
    a value that is not finite). A stage header (``Pretrain stage``, ``two-stage average``) prefixes the names of
    the lines after it; FlagScale's ``<step time> <tokens/s>`` line counts when an MFU line follows it."""

    def __init__(self, node: int = 0, where: str = "", source: int = 0):
        self.node, self.where, self.source = node, where, source
        self.results: list = []
        self.refused: list = []
        self._stage = ""
        self._pair: tuple | None = None

    def feed(self, raw: str) -> None:
        if len(raw) > TRAINING_LINE_MAX_CHARS or len(self.results) >= MAX_RESULTS:
            self._pair = None
            return
        line = clean_line(raw)
        pair, self._pair = self._pair, None
        m = _STAGE.match(line)
        if m:
            self._stage = "average" if m.group("avg") else m.group("stage").lower()
            return
        m = _PAIR.match(line)
        if m:
            self._pair = (line, m.group("a"), m.group("b"))
            return
        if not _HINT.search(line):
            return
        for rx, name, unit, measured in _TRAINING:
            m = rx.search(line)
            if m is None:
                continue
            if rx is _MFU and pair is not None:     # FlagScale: the step time and tokens/s/chip printed before
                self._add(pair[0], "step_time", pair[1], "s", True)
                self._add(pair[0], "tokens_per_s_per_chip", pair[2], "tokens/s/chip", True)
            self._add(line, name, m.group("value"), "%" if m.group("pct") else unit, measured)
            return
        m = _KEY_VALUE.search(line) if "Key: " in line else None
        if m:
            self._add(line, m.group("key"), m.group("value"), perflog_unit(m.group("key")), False, prefix=False)

    def _add(self, line: str, name: str, text: str, unit: str, measured: bool, prefix: bool = True) -> None:
        value = float(text)
        why = "not a finite number" if not math.isfinite(value) else \
            "not a positive number" if measured and value <= 0 else ""
        if why:
            if len(self.refused) < MAX_REFUSED:
                self.refused.append(f"{self.where + ': ' if self.where else ''}{line.strip()[:200]!r}: {why}")
            return
        if self._stage and prefix:
            name = f"{self._stage}_{name}"
        self.results.append(FlagPerfResult(name, value, unit, None, self.node, KIND_TRAINING, measured, self.source))


def parse_training_lines(lines, *, node: int = 0, where: str = "") -> tuple:
    """(results, refused) of the training summary lines among ``lines`` (TrainingLines)."""
    t = TrainingLines(node, where)
    for line in lines:
        t.feed(line)
    return t.results, t.refused


def read_log(path, *, node: int = 0, rank: int | None = None, problems: list | None = None,
             refused: list | None = None, max_bytes: int = RECORDS_MAX_BYTES, source: int = 0) -> tuple:
    """(FlagPerf results, FlagPerf PerfLog FINISHED record or None) of one log, from at most its last
    ``max_bytes`` (perflog.read_lines: regular files only): its [FlagPerf Result] lines, then its training
    summary lines; the summary lines refused go to ``refused``."""
    results: list = []
    finished = None
    training = TrainingLines(node, Path(path).name, source)
    flagcx = FlagCXLines()          # FlagCX's perf-test lines (flagcx_lines)
    for line in read_lines(path, max_bytes, problems):
        if RESULT_MARK in line:
            results += line_results(line, node=node, rank=rank)[:MAX_RESULTS - len(results)]
        elif "[PerfLog]" in line:
            record = parse_perflog_line(line)
            if record is not None and is_flagperf_finished(record):
                finished = record
        elif FINISH_MARK in line and _FINISH.search(plain_line(line)[:FINISH_MAX_CHARS + 1]):
            results += parse_finish_info(line, node=node)[:MAX_RESULTS - len(results)]
        elif flagcx.feed(line):
            continue
        else:
            training.feed(line)
    results += [FlagPerfResult(n, v, u, None, node, KIND_FLAGCX, source=source)
                for n, v, u in flagcx.results][:MAX_RESULTS - len(results)]
    if refused is not None:
        refused += training.refused[:MAX_REFUSED - len(refused)]
    return results + training.results[:MAX_RESULTS - len(results)], finished


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


_THROUGHPUT_UNITS = {"ips": "samples/s", "sps": "sequences/s", "tps": "tokens/s"}


def perflog_unit(key: str) -> str:
    """The unit of a key of FlagPerf's FINISHED value: ``*_time`` s, ``<x>_per_second`` (``_per_sec``,
    ``_per_s``) <x>/s, ``throughput(ips)*`` samples/s, ``throughput(sps)*`` sequences/s, else none."""
    k = key.lower()
    if k.endswith("time") or k.endswith("_time_s"):
        return "s"
    m = re.search(r"([a-z]+)_per_sec(?:ond)?(?![a-z])", k)
    if m:
        return f"{m.group(1)}/s"
    if k.endswith("_per_s"):
        return f"{k[:-6].rsplit('_', 1)[-1]}/s"
    m = re.search(r"\((ips|sps|tps)\)", k)
    if m:
        return _THROUGHPUT_UNITS[m.group(1)]
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


def _training_head(training) -> tuple | None:
    """The headline of a case's summary lines: the lowest node's last MFU (a staged case prints the stages'
    own before the average) in the first of its logs that has one (rank 0's, where every rank prints them), else
    its last tokens/s per chip, system tokens/s, step time, else its first measured line."""
    keyed = [(k, r) for k, r in _metric_keys(training).items() if r.node == min(t.node for t in training)]
    for suffix in ("mfu", "tokens_per_s_per_chip", "tokens_per_s", "step_time", "avg_iter_time"):
        found = [(k, r) for k, r in keyed if r.name == suffix or r.name.endswith("_" + suffix)]
        if found:
            first = min(r.source for _, r in found)
            k, r = [(k, r) for k, r in found if r.source == first][-1]
            return k, r.value, r.unit
    k, r = next(((k, r) for k, r in keyed if r.measured), keyed[0])
    return k, r.value, r.unit


def build_finished(benchmark: str, results, perflog_finished: dict | None = None,
                   e2e_time: float | None = None, refused=()) -> dict | None:
    """A flagperf.perflog/1 FINISHED payload from FlagPerf results and/or a FlagPerf PerfLog FINISHED record;
    None when there is neither. Headline: the first [FlagPerf Result] line or inference Finish Info result (a
    ranked name: rank 0's value, or the lowest rank's), else the training summary lines' (_training_head), else
    the PerfLog throughput key, else its ``e2e_time``. Training summary lines are no result when none of them is
    a measured figure, or when a summary line was ``refused`` (a measured figure that is not positive: the run did
    not measure it). An operation's correctness line that says False makes ``checks.passed`` false."""
    results = list(results or ())
    training = [r for r in results if r.kind == KIND_TRAINING]
    results = [r for r in results if r.kind != KIND_TRAINING]
    if refused or not any(r.measured for r in training):
        training = []
    value = perflog_finished.get("value") if isinstance(perflog_finished, dict) else None
    value = value if isinstance(value, dict) else None
    if not results and not training and value is None:
        return None
    metrics: dict = {}
    details: dict = {}
    origins = []
    head = None
    if results:
        kinds = {r.kind for r in results}
        origins += [o for k, o in ((KIND_RESULT, ORIGIN_RESULTS), (KIND_INFERENCE, ORIGIN_INFERENCE)) if k in kinds]
        correct = [r.value == 1.0 for r in results if r.name == "correctness" and r.unit == "bool"]
        if correct:     # FlagPerf operation's correctness against its CPU reference: the checks' verdict
            details["correctness"] = all(correct)
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
        fcx = [(r.name, r.value) for r in results if r.kind == KIND_FLAGCX]
        if fcx:         # FlagCX's perf tests: the size sweep, and the first op's busbw at its largest size
            origins.append(ORIGIN_FLAGCX)
            details["sweep"] = flagcx_sweep(fcx)
            head = flagcx_headline(fcx) or head
    if training:
        origins.append(ORIGIN_TRAINING)
        for key, r in _metric_keys(training).items():
            metrics.setdefault(key, {"value": r.value, "unit": r.unit, **({"node": r.node} if r.node else {})})
        if head is None:
            head = _training_head(training)
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
    details["lines"] = len(results) + len(training)
    return {"event": "FINISHED", "schema": PERFLOG_SCHEMA, "benchmark": benchmark, "metric": name, "value": v,
            "unit": unit, "higher_is_better": higher_is_better(unit), "e2e_time": _number(e2e_time) or 0.0,
            "metrics": metrics, "checks": {"passed": details.get("correctness", True) is True, "details": details},
            "env": {},
            "origin": " + ".join(origins)}


def node_logs(node) -> dict:
    """{global rank: log path on the driver} of a planned node (flagperf.plan.NodePlan): every rank's
    ``rank<R>.out.log``, or in launch mode "node" the node command's ``node.out.log`` under the node's first
    rank."""
    if node.launch.mode == "node":
        return {node.ranks[0]: Path(node.local_dir) / NODE_COMMAND_LOG} if node.ranks else {}
    return {rank: Path(node.local_dir) / rank_log_name(rank) for rank in node.ranks}


FLAGPERF_FILE_MAX_BYTES = 16 * 1024 ** 2   # read from the end of each file of FlagPerf's launchers
MAX_TASK_LOGS = 4                       # start_<framework>_task.log files read per node
DIR_SCAN_MAX = 10_000                   # node-directory entries looked at for them
_TASK_LOG = re.compile(r"start_[A-Za-z0-9][A-Za-z0-9_.-]{0,63}_task\.log")


def task_logs(folder) -> list:
    """The names of the ``start_<framework>_task.log`` files (FlagPerf's launchers' own logs) in a folder:
    regular files only, sorted, at most MAX_TASK_LOGS of the first DIR_SCAN_MAX entries."""
    names = []
    try:
        with os.scandir(folder) as it:
            for n, entry in enumerate(it):
                if n >= DIR_SCAN_MAX:
                    break
                if _TASK_LOG.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    names.append(entry.name)
    except OSError:
        return []
    return sorted(names)[:MAX_TASK_LOGS]


def flagperf_node_files(node) -> list:
    """[(path on the driver, rank or None)] of the files FlagPerf's training launchers write into the directory
    of a node started by one command (launch mode node; [] otherwise): every rank's ``rank<R>.out.log``
    (pytorch, paddle, flagscale) and ``rank<R>.log.txt`` (megatron, deepspeed), ``noderank<K>.out.log``
    (tensorflow2) and the launcher's own ``start_<framework>_task.log``. Missing ones are read as empty."""
    if node.launch.mode != "node":
        return []
    folder = Path(node.local_dir)
    out = [(folder / name, rank) for rank in node.ranks for name in (rank_log_name(rank), f"rank{rank}.log.txt")]
    out.append((folder / f"noderank{node.node_rank}.out.log", None))
    return out + [(folder / name, None) for name in task_logs(folder)]


def _identity(r: FlagPerfResult) -> tuple:
    return r.kind, r.name, r.value, r.unit


def node_results(node, problems: list | None = None, refused: list | None = None) -> list:
    """The FlagPerf results of every log of a planned node, in rank order. A ranks-mode rank's lines without
    ``Rank N's`` are that rank's; a node command's are the node's. A node command's node also has the files of
    FlagPerf's launchers (flagperf_node_files; their lines first, a rank file's lines that rank's); a line of
    ``node.out.log`` that one of them holds too (a rank's output that its launcher tees to both) counts once.
    Training summary lines that are no result go to ``refused``."""
    node_mode = node.launch.mode == "node"
    out: list = []
    theirs: Counter = Counter()
    source = 0
    for source, (path, rank) in enumerate(flagperf_node_files(node)):
        found, _ = read_log(path, node=node.node_rank, rank=rank, problems=problems, refused=refused,
                            max_bytes=FLAGPERF_FILE_MAX_BYTES, source=source)
        found = found[:MAX_RESULTS - len(out)]
        theirs.update(_identity(r) for r in found)
        out += found
    for n, (rank, path) in enumerate(sorted(node_logs(node).items()), source + 1):
        found, _ = read_log(path, node=node.node_rank, rank=None if node_mode else rank, problems=problems,
                            refused=refused, source=n)
        for r in found:
            if theirs[_identity(r)] > 0:
                theirs[_identity(r)] -= 1
            elif len(out) < MAX_RESULTS:
                out.append(r)
    return out
