"""The run summary: ``summary.json`` (schema flagperf.summary/1) as a model that the pipeline builds and the
``report`` command, the reporters and the CLI read back with :meth:`Summary.load`.

docs/results.md describes every field.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from flagperf.records import REASON_SOURCES, SEVERITIES, VERDICTS, Failure, NodeVerdict, Ranking, RecordError, \
    ReferenceVerdict
from flagperf.results.interpret import Status, case_status, run_status
from flagperf.results.nodefigures import node_figures
from flagperf.results.stragglers import case_stragglers
from flagperf_contract import ContractError, read_json_data, write_json_atomic

SUMMARY_SCHEMA = "flagperf.summary/1"
SUMMARY_MAX_BYTES = 256 * 1024 * 1024     # a summary.json larger than this is not one flagperf wrote
SUMMARY_MAX_DEPTH = 64                    # nor one nested deeper (FINISHED payloads inside: at most 32)
MAX_NOTES = 20                            # notes kept of the non-finite numbers read as absent


class SummaryError(ValueError):
    """summary.json is missing or does not follow its schema; the message names the file."""


_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
_OPT_LIST = (list, type(None))
_OPT_BOOL = (bool, type(None))
_SCALAR = (str, int, float, bool, type(None))

# A FINISHED payload as summary.json keeps it (a round's, or an each host's): what the reporters, the
# comparison and the rankings read of it. Old summaries lack most keys; a key present has its type.
_FINISHED = {
    "": _OPT_DICT, "metric": _OPT_STR, "value": _OPT_NUM, "unit": _OPT_STR, "higher_is_better": _OPT_BOOL,
    "e2e_time": _OPT_NUM, "benchmark": _OPT_STR, "metrics": _OPT_DICT, "metrics.*": dict,
    "metrics.*.value": _SCALAR, "metrics.*.unit": _OPT_STR, "checks": _OPT_DICT, "checks.details": _OPT_DICT,
    "checks.details.per_rank": _OPT_DICT, "checks.details.per_rank.metric": _OPT_STR,
    "checks.details.per_rank.values": _OPT_LIST, "checks.details.per_rank.values.*": _OPT_NUM,
    "checks.details.device_window": _OPT_DICT, "checks.details.device_window.energy_j": _OPT_NUM,
    "checks.details.device_window.window_s": _OPT_NUM, "env": _OPT_DICT, "env.world_size": _OPT_NUM,
}
_FAILURE = {
    "": _OPT_DICT, "reason": str, "node": _OPT_STR, "rank": _OPT_INT, "exit_code": _OPT_INT, "log": _OPT_STR,
    "last_lines": _OPT_LIST, "last_lines.*": str, "nodes": _OPT_LIST, "nodes.*": str,
}
_MONITORS = {
    "": _OPT_DICT, "*": _OPT_DICT, "cpu": _OPT_DICT, "mem": _OPT_DICT, "pwr": _OPT_DICT, "gpu": _OPT_DICT,
    "unavailable": _OPT_DICT, "unreadable": _OPT_DICT, "cpu.*": _SCALAR, "mem.*": _SCALAR, "pwr.energy_j": _OPT_NUM,
    "pwr.power_w_mean": _OPT_NUM, "pwr.window": _OPT_DICT, "pwr.window.*": _SCALAR, "gpu.devices": _OPT_LIST,
    "gpu.devices.*": dict, "gpu.devices.*.index": _OPT_INT, "gpu.devices.*.energy_j": _OPT_NUM,
    "gpu.devices.*.energy_source": _OPT_STR, "gpu.devices.*.window": _OPT_DICT,
    "gpu.devices.*.window.energy_j": _OPT_NUM, "gpu.devices.*.window.seconds": _OPT_NUM,
    "gpu.devices.*.temp_c_max": _OPT_NUM, "gpu.devices.*.power_w_max": _OPT_NUM,
    "gpu.devices.*.util_pct_mean": _OPT_NUM, "unavailable.*": _SCALAR, "unreadable.*": _SCALAR,
}
_STATUSES = tuple(s.value for s in Status)
_GPU = {"": _OPT_DICT, "index": int, "uuid": _OPT_STR, "serial": _OPT_STR, "pci_bus_id": _OPT_STR, "name": _OPT_STR}


def _under(prefix: str, table: dict) -> dict:
    return {(f"{prefix}.{k}" if k else prefix): v for k, v in table.items()}


# What a round and each of its nodes both keep: the FINISHED payload and the failure.
_OUTCOME = {**_under("finished", _FINISHED), **_under("failure", _FAILURE)}


# The types summary.json must have where it is read back: {path: types}; "*" is every item of a list or every
# value of an object (a named key of the same object takes precedence).
_TYPES = {
    "run_id": str, "run_dir": str, "flagperf_version": _OPT_STR, "started": str, "finished": _OPT_STR,
    "duration_s": _OPT_NUM, "interrupted": _OPT_BOOL, "vendor": str, "runtime": str, "backend": _OPT_STR,
    "hosts": list, "host_checks": list, "cases": list, "hosts.*": str, "host_checks.*": dict,
    "host_checks.*.*": _SCALAR,
    "cases.*": dict, "cases.*.name": str, "cases.*.key": str, "cases.*.model": _OPT_STR,
    "cases.*.framework": _OPT_STR, "cases.*.hw": _OPT_STR, "cases.*.nnodes": int, "cases.*.nproc": int,
    "cases.*.repeat": int, "cases.*.data_dir": _OPT_STR, "cases.*.rounds": list, "cases.*.each": bool,
    "cases.*.pairs": bool, "cases.*.node_figures": _OPT_LIST, "cases.*.stragglers": _OPT_LIST,
    "cases.*.env": _OPT_DICT, "cases.*.env.*": str, "cases.*.nccl": _OPT_STR,
    "cases.*.rounds.*": dict, "cases.*.rounds.*.round": int, "cases.*.rounds.*.dir": str,
    "cases.*.rounds.*.status": str, "cases.*.rounds.*.duration_s": _OPT_NUM, "cases.*.rounds.*.value": _OPT_NUM,
    "cases.*.rounds.*.e2e_time": _OPT_NUM, "cases.*.rounds.*.metrics": _OPT_DICT,
    "cases.*.rounds.*.metrics.*": dict, "cases.*.rounds.*.metrics.*.value": _SCALAR,
    "cases.*.rounds.*.metrics.*.unit": _OPT_STR, "cases.*.rounds.*.checks": _OPT_DICT,
    "cases.*.rounds.*.check_failed": _OPT_DICT,
    "cases.*.rounds.*.env": _OPT_DICT, "cases.*.rounds.*.nodes": list,
    **_under("cases.*.rounds.*", _OUTCOME),
    "cases.*.rounds.*.nodes.*": dict, "cases.*.rounds.*.nodes.*.node": str,
    "cases.*.rounds.*.nodes.*.host": _OPT_STR, "cases.*.rounds.*.nodes.*.node_rank": _OPT_INT,
    "cases.*.rounds.*.nodes.*.launcher_exit": _OPT_INT, "cases.*.rounds.*.nodes.*.ranks": list,
    "cases.*.rounds.*.nodes.*.ranks.*": dict, "cases.*.rounds.*.nodes.*.status": _OPT_STR,
    **_under("cases.*.rounds.*.nodes.*.monitors", _MONITORS),
    **_under("cases.*.rounds.*.nodes.*", _OUTCOME),
    "cases.*.verdicts": list, "cases.*.verdicts.*": dict, "cases.*.verdicts.*.metric": str,
    "cases.*.verdicts.*.measured": _OPT_NUM, "cases.*.verdicts.*.rounds": _OPT_INT,
    "cases.*.verdicts.*.unit": _OPT_STR, "cases.*.verdicts.*.expected": _NUM,
    "cases.*.verdicts.*.tolerance": _OPT_NUM, "cases.*.verdicts.*.better_tolerance": _OPT_NUM,
    "cases.*.verdicts.*.higher_is_better": _OPT_BOOL, "cases.*.verdicts.*.source": _OPT_STR,
    "cases.*.verdicts.*.reference": _OPT_STR, "cases.*.verdicts.*.deviation": _OPT_NUM,
    "cases.*.verdicts.*.result": _OPT_STR, "cases.*.verdicts.*.ok": bool, "cases.*.verdicts.*.note": _OPT_STR,
    "cases.*.verdicts.*.measured_unit": _OPT_STR,
    "rankings": list, "rankings.*": dict, "rankings.*.case": _OPT_STR, "rankings.*.metric": _OPT_STR,
    "rankings.*.unit": _OPT_STR, "rankings.*.higher_is_better": _OPT_BOOL, "rankings.*.rule": _OPT_STR,
    "rankings.*.median": _OPT_NUM, "rankings.*.entries": list, "rankings.*.entries.*": dict,
    "rankings.*.entries.*.host": _OPT_STR, "rankings.*.entries.*.gpu": _OPT_INT,
    "rankings.*.entries.*.value": _OPT_NUM, "rankings.*.entries.*.score": _OPT_NUM,
    "rankings.*.entries.*.outlier": _OPT_BOOL, "rankings.*.entries.*.rank": _OPT_INT,
    "rankings.*.entries.*.rounds": _OPT_INT, "rankings.*.failed_hosts": _OPT_LIST,
    "rankings.*.failed_hosts.*": str, "series": _OPT_STR,
    **_under("rankings.*.entries.*.identity", _GPU),
    # node verdicts (results.verdict): one per host, with every reason
    "verdicts": _OPT_LIST, "verdicts.*": dict, "verdicts.*.host": str, "verdicts.*.verdict": str,
    "verdicts.*.reasons": _OPT_LIST, "verdicts.*.reasons.*": dict, "verdicts.*.reasons.*.source": str,
    "verdicts.*.reasons.*.severity": str, "verdicts.*.reasons.*.subject": _OPT_STR,
    "verdicts.*.reasons.*.detail": _OPT_STR, "verdicts.*.reasons.*.remedy": _OPT_STR,
    "verdicts.*.reasons.*.case": _OPT_STR, **_under("verdicts.*.reasons.*.gpu", _GPU),
    "verdicts.*.gpus": _OPT_LIST, "verdicts.*.gpus.*": dict, **_under("verdicts.*.gpus.*", {k: v for k, v in
                                                                                          _GPU.items() if k}),
}
# Fields whose string must be one of these.
_CHOICES = {"cases.*.rounds.*.status": _STATUSES, "cases.*.rounds.*.nodes.*.status": _STATUSES + (None,),
            "verdicts.*.verdict": VERDICTS, "verdicts.*.reasons.*.source": REASON_SOURCES,
            "verdicts.*.reasons.*.severity": SEVERITIES}


def _schema_tree(types: dict) -> dict:
    """{name: [types, subtree, path]} from the flat {path: types}: one look-up per key while walking."""
    root: dict = {}
    for path, t in types.items():
        node, parts = root, path.split(".")
        for i, name in enumerate(parts):
            entry = node.setdefault(name, [None, {}, ".".join(parts[:i + 1])])
            if i == len(parts) - 1:
                entry[0] = t if isinstance(t, tuple) else (t,)
            node = entry[1]
    return root


_TREE = _schema_tree(_TYPES)
MAX_PROBLEMS = 20       # the type check stops after this many problems


def _type_problems(data) -> list:
    """Where summary.json has a value of the wrong type, as 'cases[0].rounds[1].duration_s: expected ...'.
    One walk over the data, without recursion (the file's depth is bounded when it is read)."""
    problems: list = []
    stack = [(data, _TREE, "")]
    while stack and len(problems) < MAX_PROBLEMS:
        value, tree, where = stack.pop()
        if isinstance(value, list):
            children = (("*", f"{where}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, dict):
            children = ((k if k in tree else "*", f"{where}.{k}" if where else str(k), item)
                        for k, item in value.items())
        else:
            continue
        for name, w, item in children:
            entry = tree.get(name)
            if entry is None:
                continue
            types, sub, path = entry
            if types is not None and not _of_type(item, types):
                problems.append(f"{w}: expected {' or '.join(t.__name__ for t in types)}, "
                                f"got {_brief(item)}")
                continue
            if path in _CHOICES and item not in _CHOICES[path]:
                problems.append(f"{w}: expected one of {', '.join(str(c) for c in _CHOICES[path])}, "
                                f"got {_brief(item)}")
                continue
            if sub and isinstance(item, (dict, list)):
                stack.append((item, sub, w))
    return problems


def _of_type(value, types: tuple) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


def _brief(value) -> str:
    """A value in a message: its repr cut to 60 characters (a list or object: its kind and length)."""
    if isinstance(value, (dict, list)):
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


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
    check_failed: dict | None = None    # a failed round: the checks of rank 0's CHECK_FAILED line (untrusted)

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
                "check_failed": self.check_failed,
                "nodes": [n.to_dict() for n in self.nodes], "energy": round_energy(self.nodes, f)}

    @classmethod
    def from_dict(cls, d: dict) -> "RoundSummary":
        finished = d.get("finished")
        if finished is None and d.get("value") is not None:     # written before "finished" was kept whole
            finished = {"value": d.get("value"), "e2e_time": d.get("e2e_time"), "metrics": d.get("metrics") or {},
                        "checks": d.get("checks"), "env": d.get("env")}
        return cls(d["round"], d.get("dir", ""), Status(d["status"]), d.get("duration_s") or 0.0,
                   _failure(d.get("failure")), finished, [NodeSummary.from_dict(n) for n in d.get("nodes") or []],
                   d.get("check_failed") if isinstance(d.get("check_failed"), dict) else None)


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
    env: dict = field(default_factory=dict)        # what its case config set in every rank's environment (env)
    pairs: bool = False         # nnodes "pairs": a 2-node job on every pair of hosts (nnodes: the number of hosts)

    @property
    def nccl(self) -> str | None:
        """The NCCL version(s) the ranks loaded, as their FINISHED records report it (``env.nccl``: rank 0 of
        every round, every host's of an each case), distinct values sorted and joined by ", "; None if none did."""
        found = set()
        for r in self.rounds:
            for f in [r.finished] + [n.finished for n in r.nodes]:
                env = (f or {}).get("env")
                version = env.get("nccl") if isinstance(env, dict) else None
                if isinstance(version, str) and version:
                    found.add(version)
        return ", ".join(sorted(found)) or None

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
                **({"each": True} if self.each else {}), **({"pairs": True} if self.pairs else {}),
                "verdicts": [v.to_dict() for v in self.verdicts],
                "env": dict(self.env), "nccl": self.nccl,
                "node_figures": [f.to_dict() for f in node_figures(self)],   # derived: read back from the rounds
                "stragglers": [s.to_dict() for s in case_stragglers(self)]}  # derived, as node_figures

    @classmethod
    def from_dict(cls, d: dict) -> "CaseSummary":
        return cls(d["name"], d.get("key", ""), d.get("model", ""), d.get("framework", ""), d.get("hw", ""),
                   d.get("nnodes", 0), d.get("nproc", 0), d.get("repeat", 0), d.get("data_dir"),
                   [RoundSummary.from_dict(r) for r in d.get("rounds") or []], each=bool(d.get("each", False)),
                   verdicts=[ReferenceVerdict.from_dict(v) for v in d.get("verdicts") or []],
                   env=dict(d.get("env") or {}), pairs=bool(d.get("pairs", False)))


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
    verdicts: list = field(default_factory=list)       # [NodeVerdict]: one per host (results.verdict)
    # what Summary.load read as absent (NaN or Infinity where summary.json must hold a number), one line each;
    # never saved
    notes: list = field(default_factory=list, compare=False)

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
                "series": self.series, "verdicts": [v.to_dict() for v in self.verdicts]}

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
                       rankings=[Ranking.from_dict(r) for r in d.get("rankings") or []], series=d.get("series"),
                       verdicts=[NodeVerdict.from_dict(v) for v in d.get("verdicts") or []])
        except (KeyError, TypeError, ValueError, AttributeError, RecordError) as exc:
            raise SummaryError(f"does not follow {SUMMARY_SCHEMA}: {type(exc).__name__}: {exc}") from None

    def save(self, path) -> None:
        write_json_atomic(path, _finite(self.to_dict()), indent=2)

    @classmethod
    def load(cls, path) -> "Summary":
        path = Path(path)
        notes: list = []
        try:
            data = read_json_data(path, SUMMARY_MAX_BYTES, notes=notes, max_depth=SUMMARY_MAX_DEPTH)
        except FileNotFoundError:
            raise SummaryError(f"{path}: not found; is {path.parent} a flagperf run directory?") from None
        except ContractError as exc:
            raise SummaryError(str(exc)) from None
        try:
            summary = cls.from_dict(data)
        except SummaryError as exc:
            raise SummaryError(f"{path}: {exc}") from None
        summary.notes = [f"{path}: {n}" for n in notes[:MAX_NOTES]]
        if len(notes) > MAX_NOTES:
            summary.notes.append(f"{path}: and {len(notes) - MAX_NOTES} more non-finite numbers read as absent")
        return summary
