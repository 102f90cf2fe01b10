"""The run summary: ``summary.json`` (schema flagperf.summary/1) as a model that the pipeline builds and the
``report`` command, the reporters and the CLI read back with :meth:`Summary.load`.

docs/results.md describes every field.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from flagperf.records import Failure, Ranking, RecordError, ReferenceVerdict
from flagperf.results.interpret import Status, case_status, run_status
from flagperf_contract import ContractError, read_json_data, write_json_atomic

SUMMARY_SCHEMA = "flagperf.summary/1"
SUMMARY_MAX_BYTES = 256 * 1024 * 1024     # a summary.json larger than this is not one flagperf wrote


class SummaryError(ValueError):
    """summary.json is missing or does not follow its schema; the message names the file."""


_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
# The types summary.json must have where reporters read it: {path: types}; "*" is every item of a list.
_TYPES = {
    "run_id": str, "run_dir": str, "started": str, "finished": _OPT_STR, "duration_s": _OPT_NUM,
    "vendor": str, "runtime": str, "hosts": list, "host_checks": list, "cases": list,
    "hosts.*": str, "host_checks.*": dict,
    "cases.*": dict, "cases.*.name": str, "cases.*.key": str, "cases.*.nnodes": int, "cases.*.nproc": int,
    "cases.*.repeat": int, "cases.*.data_dir": _OPT_STR, "cases.*.rounds": list,
    "cases.*.rounds.*": dict, "cases.*.rounds.*.round": int, "cases.*.rounds.*.dir": str,
    "cases.*.rounds.*.status": str, "cases.*.rounds.*.duration_s": _OPT_NUM, "cases.*.rounds.*.value": _OPT_NUM,
    "cases.*.rounds.*.e2e_time": _OPT_NUM, "cases.*.rounds.*.failure": _OPT_DICT,
    "cases.*.rounds.*.finished": _OPT_DICT, "cases.*.rounds.*.metrics": _OPT_DICT,
    "cases.*.rounds.*.env": _OPT_DICT, "cases.*.rounds.*.nodes": list,
    "cases.*.rounds.*.failure.last_lines": list, "cases.*.rounds.*.failure.reason": str,
    "cases.*.rounds.*.nodes.*": dict, "cases.*.rounds.*.nodes.*.node": str,
    "cases.*.rounds.*.nodes.*.ranks": list, "cases.*.rounds.*.nodes.*.monitors": _OPT_DICT,
    "cases.*.rounds.*.nodes.*.status": _OPT_STR, "cases.*.rounds.*.nodes.*.finished": _OPT_DICT,
    "cases.*.rounds.*.nodes.*.failure": _OPT_DICT, "cases.*.each": bool,
    "rankings": list, "rankings.*": dict, "rankings.*.entries": list, "rankings.*.entries.*": dict,
    "cases.*.verdicts": list, "cases.*.verdicts.*": dict, "cases.*.verdicts.*.metric": str,
    "cases.*.verdicts.*.ok": bool, "series": _OPT_STR,
}


def _type_problems(data) -> list:
    """Where summary.json has a value of the wrong type, as 'cases[0].rounds[1].duration_s: expected ...'."""
    problems: list = []

    def check(value, types, where):
        types = types if isinstance(types, tuple) else (types,)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            problems.append(f"{where}: expected {' or '.join(t.__name__ for t in types)}, got {value!r:.60}")
            return False
        return True

    def visit(value, pattern: str, where: str):
        prefix = pattern + "." if pattern else ""
        for key, types in _TYPES.items():
            name = key[len(prefix):] if key.startswith(prefix) else "."
            if "." in name:
                continue
            if name == "*":
                for i, item in enumerate(value if isinstance(value, list) else []):
                    if check(item, types, f"{where}[{i}]"):
                        visit(item, prefix + "*", f"{where}[{i}]")
            elif isinstance(value, dict) and name in value:
                w = f"{where}.{name}" if where else name
                if check(value[name], types, w):
                    visit(value[name], prefix + name, w)

    visit(data, "", "")
    return problems


def _finite(x):
    """JSON-safe copy: non-finite floats become null (summary.json is strict JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def stats(values) -> dict | None:
    values = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not values:
        return None
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


@dataclass
class NodeSummary:
    node: str
    host: str
    node_rank: int
    launcher_exit: int | None = None
    ranks: list = field(default_factory=list)      # ranks.json's rank records
    monitors: dict = field(default_factory=dict)   # results.monitors.summarize_monitors
    # each cases only (every host its own job, judged on its own): its status, failure and rank 0's FINISHED
    status: Status | None = None
    failure: Failure | None = None
    finished: dict | None = None

    def to_dict(self) -> dict:
        d = {"node": self.node, "host": self.host, "node_rank": self.node_rank,
             "launcher_exit": self.launcher_exit, "ranks": self.ranks, "monitors": self.monitors}
        if self.status is not None:
            d.update(status=self.status.value, failure=_failure_dict(self.failure), finished=self.finished)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "NodeSummary":
        return cls(d["node"], d.get("host", ""), d.get("node_rank", 0), d.get("launcher_exit"),
                   list(d.get("ranks") or []), dict(d.get("monitors") or {}),
                   Status(d["status"]) if d.get("status") else None, _failure(d.get("failure")), d.get("finished"))


def _failure(d) -> Failure | None:
    return None if d is None else Failure.from_dict(d)


def _failure_dict(f: Failure | None) -> dict | None:
    return None if f is None else f.to_dict()


EFFICIENCY_UNITS = {"tokens/s": "tokens/J", "images/s": "images/J", "samples/s": "samples/J"}


def round_energy(nodes, finished: dict | None) -> dict | None:
    """Accelerator energy of a round from its nodes' monitor summaries: per device and in total, over the whole
    round and over the benchmark's window (rank 0's RUN_START..RUN_END), plus host energy (RAPL/hwmon, the
    host's own sensors, never wall power) and, for a job-wide rate (tokens/s, images/s), its efficiency per joule
    of accelerator energy in the window. None when no node measured any."""
    devices, host_j, host_window_j, sources = [], 0.0, 0.0, set()
    for n in nodes:
        mon = n.monitors or {}
        for d in (mon.get("gpu") or {}).get("devices") or []:
            if "energy_j" not in d:
                continue
            win = d.get("window") or {}
            devices.append({"node": n.node, "index": d.get("index"), "round_j": d["energy_j"],
                            "window_j": win.get("energy_j"), "window_s": win.get("seconds")})
            sources.add(d.get("energy_source"))
        pwr = mon.get("pwr") or {}
        host_j += pwr.get("energy_j") or 0.0
        host_window_j += (pwr.get("window") or {}).get("energy_j") or 0.0
    if not devices and not host_j:
        return None
    out: dict = {"devices": devices, "round_j_total": round(sum(d["round_j"] for d in devices), 3),
                 "source": ", ".join(sorted(s for s in sources if s))}
    window = [d["window_j"] for d in devices if d["window_j"] is not None]
    if window and len(window) == len(devices):
        out["window_j_total"] = round(sum(window), 3)
        seconds = max(d["window_s"] or 0.0 for d in devices)
        f = finished or {}
        unit = EFFICIENCY_UNITS.get(f.get("unit") or "")
        dw = ((f.get("checks") or {}).get("details") or {}).get("device_window") or {}
        world = (f.get("env") or {}).get("world_size") or 1
        if unit and isinstance(f.get("value"), (int, float)) and dw.get("energy_j") and dw.get("window_s"):
            # exact: the measured window's work over its energy, read by the benchmark on rank 0's device
            # (times the world size: every device runs the same step)
            out["efficiency"] = {"value": f["value"] * dw["window_s"] / (dw["energy_j"] * world), "unit": unit,
                                 "basis": "the measured window (FINISHED device_window, rank 0 x world size)"}
        elif unit and isinstance(f.get("value"), (int, float)) and out["window_j_total"] > 0 and seconds > 0:
            # approximate: the rate is the measured part's, the RUN_START..RUN_END window includes warm-up
            out["efficiency"] = {"value": f["value"] * seconds / out["window_j_total"], "unit": unit,
                                 "basis": "RUN_START..RUN_END from the monitors (includes warm-up)"}
    if host_j:
        out["host_round_j"] = round(host_j, 3)
        out["host_window_j"] = round(host_window_j, 3)
        out["host_note"] = "host sensors (RAPL/hwmon): the host's own draw, not wall power"
    return out


@dataclass
class RoundSummary:
    round: int
    dir: str                            # relative to the run directory
    status: Status = Status.NOT_RUN
    duration_s: float = 0.0
    failure: Failure | None = None
    finished: dict | None = None        # rank 0's FINISHED payload
    nodes: list = field(default_factory=list)

    @property
    def value(self):
        return self.finished.get("value") if self.finished else None

    @property
    def e2e_time(self):
        return self.finished.get("e2e_time") if self.finished else None

    @property
    def metrics(self) -> dict:
        return dict((self.finished or {}).get("metrics") or {})

    def to_dict(self) -> dict:
        f = self.finished or {}
        return {"round": self.round, "dir": self.dir, "status": self.status.value,
                "duration_s": round(self.duration_s, 3), "value": self.value, "e2e_time": self.e2e_time,
                "metrics": self.metrics, "checks": f.get("checks"), "env": f.get("env"),
                "failure": _failure_dict(self.failure), "finished": self.finished,
                "nodes": [n.to_dict() for n in self.nodes], "energy": round_energy(self.nodes, f)}

    @classmethod
    def from_dict(cls, d: dict) -> "RoundSummary":
        finished = d.get("finished")
        if finished is None and d.get("value") is not None:     # written before "finished" was kept whole
            finished = {"value": d.get("value"), "e2e_time": d.get("e2e_time"), "metrics": d.get("metrics") or {},
                        "checks": d.get("checks"), "env": d.get("env")}
        return cls(d["round"], d.get("dir", ""), Status(d["status"]), d.get("duration_s") or 0.0,
                   _failure(d.get("failure")), finished, [NodeSummary.from_dict(n) for n in d.get("nodes") or []])


@dataclass
class CaseSummary:
    name: str
    key: str
    model: str
    framework: str
    hw: str
    nnodes: int
    nproc: int
    repeat: int
    data_dir: str | None = None
    rounds: list = field(default_factory=list)
    each: bool = False          # nnodes "each": one independent job per host (nnodes: the number of hosts)
    verdicts: list = field(default_factory=list)   # [ReferenceVerdict] (flagperf.references), [] if none

    @property
    def status(self) -> Status:
        return case_status((r.status for r in self.rounds), self.verdicts)

    @property
    def passed_rounds(self) -> list:
        return [r for r in self.rounds if r.status == Status.PASSED and r.finished]

    @property
    def head(self) -> dict:
        p = self.passed_rounds
        return p[0].finished if p else {}

    @property
    def metric(self):
        return self.head.get("metric")

    @property
    def unit(self):
        return self.head.get("unit")

    @property
    def stats(self) -> dict:
        passed = self.passed_rounds
        out = {"value": stats(r.value for r in passed), "e2e_time": stats(r.e2e_time for r in passed)}
        for name in sorted({n for r in passed for n in r.metrics}):
            out[name] = stats((r.metrics.get(name) or {}).get("value") for r in passed)
        return out

    def metric_units(self) -> dict:
        units = {}
        for r in self.passed_rounds:
            for name, m in r.metrics.items():
                units[name] = m.get("unit", "") if isinstance(m, dict) else ""
        return units

    def to_dict(self) -> dict:
        return {"name": self.name, "key": self.key, "model": self.model, "framework": self.framework,
                "hw": self.hw, "nnodes": self.nnodes, "nproc": self.nproc, "repeat": self.repeat,
                "data_dir": self.data_dir, "status": self.status.value, "metric": self.metric, "unit": self.unit,
                "higher_is_better": self.head.get("higher_is_better"), "rounds_passed": len(self.passed_rounds),
                "rounds": [r.to_dict() for r in self.rounds], "stats": self.stats,
                **({"each": True} if self.each else {}), "verdicts": [v.to_dict() for v in self.verdicts]}

    @classmethod
    def from_dict(cls, d: dict) -> "CaseSummary":
        return cls(d["name"], d.get("key", ""), d.get("model", ""), d.get("framework", ""), d.get("hw", ""),
                   d.get("nnodes", 0), d.get("nproc", 0), d.get("repeat", 0), d.get("data_dir"),
                   [RoundSummary.from_dict(r) for r in d.get("rounds") or []], each=bool(d.get("each", False)),
                   verdicts=[ReferenceVerdict.from_dict(v) for v in d.get("verdicts") or []])


@dataclass
class Summary:
    run_id: str
    run_dir: str
    flagperf_version: str
    started: str
    finished: str | None = None
    duration_s: float = 0.0
    interrupted: bool = False
    vendor: str = ""
    runtime: str = ""
    backend: str = ""
    hosts: list = field(default_factory=list)
    host_checks: list = field(default_factory=list)    # hosts that failed their check: {host, outcome, detail, remedy}
    cases: list = field(default_factory=list)
    rankings: list = field(default_factory=list)       # [Ranking]: each cases' hosts and GPUs (results.slownodes)
    series: str | None = None       # the monitors' time series file in the run directory (results.series)

    @property
    def status(self) -> Status:
        return run_status((c.status for c in self.cases), interrupted=self.interrupted)

    def to_dict(self) -> dict:
        return {"schema": SUMMARY_SCHEMA, "run_id": self.run_id, "run_dir": self.run_dir,
                "flagperf_version": self.flagperf_version, "started": self.started, "finished": self.finished,
                "duration_s": round(self.duration_s, 3), "status": self.status.value,
                "interrupted": self.interrupted, "vendor": self.vendor, "runtime": self.runtime,
                "backend": self.backend, "hosts": list(self.hosts), "host_checks": list(self.host_checks),
                "cases": [c.to_dict() for c in self.cases], "rankings": [r.to_dict() for r in self.rankings],
                "series": self.series}

    @classmethod
    def from_dict(cls, d) -> "Summary":
        if not isinstance(d, dict) or d.get("schema") != SUMMARY_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise SummaryError(f"expected schema {SUMMARY_SCHEMA!r}, got {got!r}")
        problems = _type_problems(d)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise SummaryError(f"does not follow {SUMMARY_SCHEMA}: {problems[0]}{more}")
        try:
            return cls(d["run_id"], d.get("run_dir", ""), d.get("flagperf_version", ""), d.get("started", ""),
                       d.get("finished"), d.get("duration_s") or 0.0,
                       bool(d.get("interrupted", d.get("status") == "interrupted")), d.get("vendor", ""),
                       d.get("runtime", ""), d.get("backend", ""), list(d.get("hosts") or []),
                       list(d.get("host_checks") or []), [CaseSummary.from_dict(c) for c in d.get("cases") or []],
                       rankings=[Ranking.from_dict(r) for r in d.get("rankings") or []], series=d.get("series"))
        except (KeyError, TypeError, ValueError, AttributeError, RecordError) as exc:
            raise SummaryError(f"does not follow {SUMMARY_SCHEMA}: {type(exc).__name__}: {exc}") from None

    def save(self, path) -> None:
        write_json_atomic(path, _finite(self.to_dict()), indent=2)

    @classmethod
    def load(cls, path) -> "Summary":
        path = Path(path)
        try:
            data = read_json_data(path, SUMMARY_MAX_BYTES)
        except FileNotFoundError:
            raise SummaryError(f"{path}: not found; is {path.parent} a flagperf run directory?") from None
        except ContractError as exc:
            raise SummaryError(str(exc)) from None
        try:
            return cls.from_dict(data)
        except SummaryError as exc:
            raise SummaryError(f"{path}: {exc}") from None
