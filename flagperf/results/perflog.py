"""Parse ``[PerfLog] {json}`` lines from rank logs and validate the FINISHED payload (flagperf.perflog/1)."""

from __future__ import annotations

import json
import math
from pathlib import Path

PREFIX = "[PerfLog] "
PERFLOG_SCHEMA = "flagperf.perflog/1"
_FINISHED_TYPES = {
    "schema": str, "benchmark": str, "metric": str, "value": (int, float), "unit": str,
    "higher_is_better": bool, "e2e_time": (int, float), "metrics": dict, "checks": dict, "env": dict,
}


def parse_lines(lines):
    """Yield the PerfLog records (dicts) found in an iterable of text lines; other lines are skipped."""
    for line in lines:
        i = line.find(PREFIX)
        if i < 0:
            continue
        try:
            record = json.loads(line[i + len(PREFIX):])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            yield record


def read_records(path) -> list:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return list(parse_lines(f))
    except OSError:
        return []


def validate_finished(payload: dict) -> list:
    """Problems with a FINISHED payload against flagperf.perflog/1 (empty list when valid)."""
    problems = []
    for key, types in _FINISHED_TYPES.items():
        if key not in payload:
            problems.append(f"missing key {key!r}")
        elif not isinstance(payload[key], types) or (isinstance(payload[key], bool) and types is not bool):
            problems.append(f"{key!r} has type {type(payload[key]).__name__}")
    if payload.get("schema") not in (None, PERFLOG_SCHEMA) and isinstance(payload.get("schema"), str):
        problems.append(f"unsupported schema {payload['schema']!r}")
    for key in ("value", "e2e_time"):
        v = payload.get(key)
        if isinstance(v, (int, float)) and not math.isfinite(v):
            problems.append(f"{key!r} is not finite")
    metrics = payload.get("metrics")
    for name, m in metrics.items() if isinstance(metrics, dict) else ():
        if not (isinstance(m, dict) and isinstance(m.get("value"), (int, float)) and isinstance(m.get("unit"), str)):
            problems.append(f"metrics[{name!r}] must be {{'value': number, 'unit': string}}")
    checks = payload.get("checks")
    if isinstance(checks, dict) and checks.get("passed") is not True:
        problems.append("checks.passed is not true")
    return problems


def finished(records) -> dict | None:
    """The last FINISHED record, if any."""
    done = [r for r in records if r.get("event") == "FINISHED"]
    return done[-1] if done else None


def tail(path, n=10) -> list:
    """The last n lines of a text file (empty if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return data.splitlines()[-n:]


def rank_log(node_dir, rank) -> Path:
    return Path(node_dir) / f"rank{rank}.out.log"
