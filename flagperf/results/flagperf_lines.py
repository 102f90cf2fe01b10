"""FlagPerf's own result formats, read from rank and node logs so that FlagPerf benchmarks, toolkits and training
cases run unchanged (docs/results.md, "FlagPerf results"). Parsing is pure; reading goes through perflog's
bounded readers.

- ``[FlagPerf Result]<name>=<value><unit>`` (base toolkits) and ``[FlagPerf Result]Rank <N>'s <name>=<value><unit>``
  (base benchmarks): one metric per line, with its unit (``TFLOPS``, ``GB/s``, ``us``, ``%``, ...).
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

import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
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
ORIGIN_TRAINING = "FlagPerf training summary lines"
KIND_RESULT, KIND_TRAINING = "result", "training"

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
    for line in read_lines(path, max_bytes, problems):
        if RESULT_MARK in line:
            results += line_results(line, node=node, rank=rank)[:MAX_RESULTS - len(results)]
        elif "[PerfLog]" in line:
            record = parse_perflog_line(line)
            if record is not None and is_flagperf_finished(record):
                finished = record
        else:
            training.feed(line)
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
    None when there is neither. Headline: the first [FlagPerf Result] line (a ranked name: rank 0's value, or
    the lowest rank's), else the training summary lines' (_training_head), else the PerfLog throughput key,
    else its ``e2e_time``. Training summary lines are no result when none of them is a measured figure, or when
    a summary line was ``refused`` (a measured figure that is not positive: the run did not measure it)."""
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
            "metrics": metrics, "checks": {"passed": True, "details": details}, "env": {},
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
