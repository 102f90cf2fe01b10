"""The monitor time series of a run, summarised once into ``series.json`` for the plots of report.html.

:func:`summarise_series` reads every node directory of the summary once (its monitor files through
:mod:`flagperf.results.monitors`, the phases from the PerfLog records of its lowest rank's log), keeps per round,
node, sensor field and accelerator one trace, bounds every trace to the page's point budget (the minimum and
maximum of each bucket, so spikes stay), and writes ``series.json`` (schema ``flagperf.series/1``) into the run
directory. Times are seconds since the round's ranks started (the earliest ``started`` of its nodes' ranks), so
that every node of a round shares one time axis. :func:`load_series` reads it back for a reporter and validates it:
a missing or damaged file is ``None`` (a report without monitor plots), never an exception.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from flagperf.results.monitors import read_node_samples
from flagperf.results.perflog import open_regular, read_records
from flagperf_contract import rank_log_name, write_atomic

SERIES_FILE = "series.json"
SERIES_SCHEMA = "flagperf.series/1"
SERIES_MAX_BYTES = 256 * 1024 ** 2     # a larger series.json is not one of ours
TOTAL_POINTS = 250_000          # monitor points of a whole run, over all traces (keeps report.html small)
MAX_TRACE_POINTS = 2_000        # at most this many points per monitor trace
MIN_TRACE_POINTS = 200          # ... and at least this many when the run has many traces
HOST_TRACES = (("cpu", "util_pct"), ("mem", "used_mib"), ("pwr", "power_w"))   # the host sensors' plotted fields
GPU_SKIP = ("gpu", "mem_total_mib")     # accelerator fields that are no time series worth a plot
PHASE_EVENTS = ("INIT_START", "INIT_END", "RUN_START", "RUN_END")
SENSORS = ("cpu", "mem", "pwr", "gpu")
_RANK_LOG = re.compile(r"rank(\d+)\.out\.log\Z")
_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.json\Z")


def _number(v):
    """v when it is a finite int or float (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def _epoch(iso) -> float | None:
    """Seconds since the epoch of an ISO-8601 time with an offset; None for anything else."""
    if not isinstance(iso, str):
        return None
    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def _round_value(v):
    return round(v, 3) if isinstance(v, float) else v


def downsample(xs: list, ys: list, limit: int) -> tuple[list, list]:
    """At most ``limit`` points: the minimum and the maximum of each bucket, in time order (spikes stay)."""
    n = len(xs)
    if n <= limit or limit < 4:
        return xs, ys
    size = math.ceil(n / (limit // 2))
    ox, oy = [], []
    for start in range(0, n, size):
        idx = range(start, min(n, start + size))
        lo = min(idx, key=lambda i: ys[i])
        hi = max(idx, key=lambda i: ys[i])
        for i in sorted({lo, hi}):
            ox.append(xs[i])
            oy.append(ys[i])
    return ox, oy


def phases(records) -> dict:
    """{event: epoch seconds} of the first INIT_START, INIT_END, RUN_START and RUN_END of PerfLog records."""
    out: dict = {}
    for rec in records:
        ev, t = rec.get("event"), _number(rec.get("time"))
        if ev in PHASE_EVENTS and t is not None and ev not in out:
            out[ev] = float(t)
    return out


# ------------------------------------------------------------------------------------------- the records
@dataclass(frozen=True)
class Trace:
    """One plotted field of one sensor (and accelerator): x in seconds since the round's ranks started."""

    sensor: str                 # cpu, mem, pwr or gpu
    key: str                    # the monitor file's field (util_pct, power_w, ...)
    gpu: int | None             # the accelerator's index; None for a host sensor
    x: tuple
    y: tuple

    def to_dict(self) -> dict:
        return {"sensor": self.sensor, "key": self.key, "gpu": self.gpu, "x": list(self.x), "y": list(self.y)}


@dataclass(frozen=True)
class NodeSeries:
    """A node's traces of one round, its phases and its ranks' start and end (seconds since the round's start)."""

    case: str                   # the case's key
    round: int
    node: str
    gpu_vendor: str | None = None
    start: float | None = None
    end: float | None = None
    phases: dict = field(default_factory=dict)      # {INIT_START | INIT_END | RUN_START | RUN_END: seconds}
    traces: tuple = ()                              # (Trace, ...)

    def to_dict(self) -> dict:
        return {"case": self.case, "round": self.round, "node": self.node, "gpu_vendor": self.gpu_vendor,
                "start": self.start, "end": self.end, "phases": dict(self.phases),
                "traces": [t.to_dict() for t in self.traces]}


class SeriesError(ValueError):
    """series.json does not follow its schema."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SeriesError(what)


def _opt_number(v, what: str):
    _check(v is None or _number(v) is not None, f"{what}: expected a finite number or null")
    return v


def _trace_from(d, where: str) -> Trace:
    _check(isinstance(d, dict), f"{where}: expected an object")
    sensor, key, gpu, xs, ys = (d.get(k) for k in ("sensor", "key", "gpu", "x", "y"))
    _check(sensor in SENSORS, f"{where}.sensor: expected one of {', '.join(SENSORS)}")
    _check(isinstance(key, str) and bool(_KEY.match(key)) and (sensor == "gpu" or (sensor, key) in HOST_TRACES),
           f"{where}.key: expected a field name ({', '.join(f'{s} {k}' for s, k in HOST_TRACES)} of host sensors)")
    _check(gpu is None if sensor != "gpu" else (isinstance(gpu, int) and not isinstance(gpu, bool) and gpu >= 0),
           f"{where}.gpu: expected an accelerator index for gpu traces, null for host sensors")
    _check(isinstance(xs, list) and isinstance(ys, list) and len(xs) == len(ys) <= MAX_TRACE_POINTS,
           f"{where}: expected x and y of the same length, at most {MAX_TRACE_POINTS}")
    _check(all(_number(v) is not None for v in xs) and all(_number(v) is not None for v in ys),
           f"{where}: expected finite numbers in x and y")
    return Trace(sensor, key, gpu, tuple(xs), tuple(ys))


def node_series_from(d, where: str = "nodes[?]") -> NodeSeries:
    """A NodeSeries from its series.json form; SeriesError names what is wrong."""
    _check(isinstance(d, dict), f"{where}: expected an object")
    _check(isinstance(d.get("case"), str), f"{where}.case: expected a string")
    rnd = d.get("round")
    _check(isinstance(rnd, int) and not isinstance(rnd, bool), f"{where}.round: expected an integer")
    _check(isinstance(d.get("node"), str), f"{where}.node: expected a string")
    _check(d.get("gpu_vendor") is None or isinstance(d["gpu_vendor"], str), f"{where}.gpu_vendor: expected a string")
    ph = d.get("phases", {})
    _check(isinstance(ph, dict) and all(k in PHASE_EVENTS and _number(v) is not None for k, v in ph.items()),
           f"{where}.phases: expected {{event: seconds}} of {', '.join(PHASE_EVENTS)}")
    traces = d.get("traces")
    _check(isinstance(traces, list), f"{where}.traces: expected a list")
    return NodeSeries(d["case"], rnd, d["node"], d.get("gpu_vendor"), _opt_number(d.get("start"), f"{where}.start"),
                      _opt_number(d.get("end"), f"{where}.end"), dict(ph),
                      tuple(_trace_from(t, f"{where}.traces[{i}]") for i, t in enumerate(traces)))


# ------------------------------------------------------------------------------------------- summarising
def node_dir_of(run_dir, rnd, node) -> Path | None:
    """The node's directory inside the run directory; None for a name that would lead outside it."""
    rel = Path(str(rnd.dir or "")) / str(node.node or "")
    if rel.is_absolute() or ".." in rel.parts or not str(node.node or "").strip() or "/" in str(node.node):
        return None
    return Path(run_dir) / rel


def _lowest_rank_log(node_dir: Path, node) -> Path | None:
    """The log of the node's lowest rank (rank 0's on node 0): from the summary's ranks, else the files."""
    ranks: list[int] = sorted(r["rank"] for r in node.ranks or [] if isinstance(r, dict)
                              and isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool))
    if not ranks:
        try:
            ranks = sorted(int(m.group(1)) for m in map(_RANK_LOG.match, [p.name for p in node_dir.iterdir()]) if m)
        except OSError:
            ranks = []
    return node_dir / rank_log_name(ranks[0]) if ranks else None


def _node_raw(run_dir, rnd, node) -> dict:
    """One node's monitor samples as {(sensor, key, gpu): ([epoch], [value])} (each at most MAX_TRACE_POINTS),
    its phases, its ranks' start and end (epoch seconds) and the accelerator file's vendor."""
    data: dict = {"series": {}, "phases": {}, "gpu_vendor": None,
                  "start": min((t for t in (_epoch(r.get("started")) for r in node.ranks or [] if isinstance(r, dict))
                                if t is not None), default=None),
                  "end": max((t for t in (_epoch(r.get("ended")) for r in node.ranks or [] if isinstance(r, dict))
                              if t is not None), default=None)}
    nd = node_dir_of(run_dir, rnd, node)
    if nd is None or not nd.is_dir():
        return data
    series = data["series"]

    def add(sensor, samples, keys, gpu=None):
        for ts, values in samples:
            t = ts.timestamp()
            for key in keys:
                v = _number(values.get(key))
                if v is not None:
                    xs, ys = series.setdefault((sensor, key, gpu), ([], []))
                    xs.append(t)
                    ys.append(v)

    samples = read_node_samples(nd)
    for sensor, key in HOST_TRACES:
        add(sensor, samples.host.get(sensor) or [], (key,))
    if samples.gpu_file:
        data["gpu_vendor"] = samples.gpu_vendor
        for ts, values in samples.gpu:
            g = _number(values.get("gpu"))
            if g is not None:
                add("gpu", [(ts, values)], [k for k in values if k not in GPU_SKIP], int(g))
    for key, (xs, ys) in series.items():       # bounded at once: a long run's samples are not all kept
        series[key] = downsample(xs, ys, MAX_TRACE_POINTS)
    log = _lowest_rank_log(nd, node)
    if log is not None:
        data["phases"] = phases(read_records(log))
    return data


def _relative(t, t0) -> float | None:
    return None if t is None else round(t - t0, 3)


def collect_series(summary, run_dir) -> list:
    """[NodeSeries] of every round and node of the summary that has monitor data, each trace within the run's
    point budget (TOTAL_POINTS over all traces, between MIN_TRACE_POINTS and MAX_TRACE_POINTS a trace)."""
    rounds = []
    for c in summary.cases:
        for r in c.rounds:
            rounds.append((c, r, [(n, _node_raw(run_dir, r, n)) for n in r.nodes]))
    traces = sum(len(d["series"]) for _, _, nodes in rounds for _, d in nodes)
    limit = max(MIN_TRACE_POINTS, min(MAX_TRACE_POINTS, TOTAL_POINTS // max(1, traces)))
    out = []
    for c, r, nodes in rounds:
        t0 = min((d["start"] for _, d in nodes if d["start"] is not None), default=None)
        if t0 is None:
            t0 = min((xs[0] for _, d in nodes for xs, _ in d["series"].values() if xs), default=None)
        for n, d in nodes:
            if not d["series"] or t0 is None:
                continue
            kept = []
            for (sensor, key, gpu), (xs, ys) in d["series"].items():
                px, py = downsample([round(x - t0, 3) for x in xs], [_round_value(y) for y in ys], limit)
                kept.append(Trace(sensor, key, gpu, tuple(px), tuple(py)))
            out.append(NodeSeries(c.key, r.round, str(n.node), d["gpu_vendor"], _relative(d["start"], t0),
                                  _relative(d["end"], t0), {k: round(v - t0, 3) for k, v in d["phases"].items()},
                                  tuple(kept)))
    return out


def summarise_series(summary, run_dir) -> str | None:
    """Read the summary's node directories once and write their monitor time series into ``series.json`` in
    the run directory (atomically); its name relative to the run directory, or None when no node has monitor
    data. A node directory that cannot be read has no data; OSError when series.json cannot be written."""
    nodes = collect_series(summary, run_dir)
    if not nodes:
        return None
    text = json.dumps({"schema": SERIES_SCHEMA, "run_id": summary.run_id, "nodes": [n.to_dict() for n in nodes]},
                      separators=(",", ":"), allow_nan=False)
    write_atomic(Path(run_dir) / SERIES_FILE, text + "\n")
    return SERIES_FILE


# ------------------------------------------------------------------------------------------- reading back
def load_series(summary, run_dir) -> dict | None:
    """{(case key, round, node): NodeSeries} from the file ``summary.series`` names in the run directory; None
    when the summary names none, or the file is missing, no regular file, too large, another run's or not
    flagperf.series/1."""
    name = summary.series
    if not isinstance(name, str) or not _FILE_NAME.match(name):
        return None
    try:
        f, size = open_regular(Path(run_dir) / name)
        with f:
            raw = f.read(SERIES_MAX_BYTES + 1)
        if len(raw) > SERIES_MAX_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
        _check(isinstance(data, dict) and data.get("schema") == SERIES_SCHEMA, f"expected schema {SERIES_SCHEMA}")
        _check(data.get("run_id") == summary.run_id, "run_id: not the summary's run")
        nodes = data.get("nodes")
        _check(isinstance(nodes, list), "nodes: expected a list")
        return {(n.case, n.round, n.node): n
                for n in (node_series_from(d, f"nodes[{i}]") for i, d in enumerate(nodes))}
    except (OSError, ValueError):      # SeriesError, a JSON or UTF-8 error
        return None
