"""The run summary: ``summary.json`` (schema flagperf.summary/1) built from the rounds' results."""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field

SUMMARY_SCHEMA = "flagperf.summary/1"


@dataclass
class NodeResult:
    label: str
    host: str
    node_rank: int
    launcher_exit: int | None = None
    ranks: list = field(default_factory=list)      # from ranks.json
    monitors: dict = field(default_factory=dict)   # from results.monitors.summarize_monitors


@dataclass
class RoundResult:
    index: int
    dir: str                      # relative to the run directory
    status: str = "not_run"       # passed | skipped | failed | timeout | interrupted | error | not_run
    duration_s: float = 0.0
    finished: dict | None = None  # rank 0's FINISHED payload
    failure: dict | None = None   # {reason, node, rank, exit_code, log, last_lines}
    nodes: list = field(default_factory=list)


@dataclass
class CaseResult:
    name: str
    key: str
    spec: object
    rounds: list = field(default_factory=list)

    @property
    def status(self) -> str:
        states = {r.status for r in self.rounds}
        if states == {"passed"}:
            return "passed"
        if states == {"skipped"}:
            return "skipped"
        if states == {"passed", "skipped"}:
            return "passed"
        if "interrupted" in states or ("not_run" in states and "failed" not in states and "timeout" not in states
                                       and "error" not in states):
            return "interrupted"
        return "failed"


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


def case_summary(result: CaseResult) -> dict:
    spec = result.spec
    passed = [r for r in result.rounds if r.status == "passed" and r.finished]
    head = passed[0].finished if passed else {}
    metric_names = sorted({name for r in passed for name in (r.finished.get("metrics") or {})})
    case_stats = {
        "value": stats(r.finished["value"] for r in passed),
        "e2e_time": stats(r.finished["e2e_time"] for r in passed),
    }
    for name in metric_names:
        case_stats[name] = stats((r.finished["metrics"].get(name) or {}).get("value") for r in passed)
    return {
        "name": result.name,
        "key": result.key,
        "model": spec.model, "framework": spec.framework, "hw": spec.hw,
        "nnodes": spec.nnodes, "nproc": spec.nproc, "repeat": spec.repeat, "data_dir": spec.data_dir,
        "status": result.status,
        "metric": head.get("metric"),
        "unit": head.get("unit"),
        "higher_is_better": head.get("higher_is_better"),
        "rounds_passed": len(passed),
        "rounds": [
            {
                "round": r.index,
                "dir": r.dir,
                "status": r.status,
                "duration_s": round(r.duration_s, 3),
                "value": r.finished.get("value") if r.finished else None,
                "e2e_time": r.finished.get("e2e_time") if r.finished else None,
                "metrics": {k: v for k, v in (r.finished or {}).get("metrics", {}).items()},
                "checks": (r.finished or {}).get("checks"),
                "env": (r.finished or {}).get("env"),
                "failure": r.failure,
                "nodes": [
                    {"node": n.label, "host": n.host, "node_rank": n.node_rank, "launcher_exit": n.launcher_exit,
                     "ranks": n.ranks, "monitors": n.monitors}
                    for n in r.nodes
                ],
            }
            for r in result.rounds
        ],
        "stats": case_stats,
    }


def build_summary(*, run_id, run_dir, version, started, finished, interrupted, vendor, runtime, hosts,
                  case_results) -> dict:
    cases = [case_summary(c) for c in case_results]
    if interrupted:
        status = "interrupted"
    elif all(c["status"] in ("passed", "skipped") for c in cases):
        status = "passed"
    else:
        status = "failed"
    return {
        "schema": SUMMARY_SCHEMA,
        "run_id": run_id,
        "run_dir": str(run_dir),
        "flagperf_version": version,
        "started": started,
        "finished": finished,
        "status": status,
        "vendor": vendor,
        "runtime": runtime,
        "hosts": list(hosts),
        "cases": cases,
    }


def write_summary(path, summary: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, path)
