"""``nccl_tests/<case>.<op>.json``: nccl-tests' ``-J`` JSON output (its file version 3) of every op of the
collectives and p2p cases, one file per case and op as one ``<op>_perf -J`` run writes one, so that a tool that
reads nccl-tests' JSON reads these. Made from the summary alone (flagperf.results.ncclview); the field by field
mapping is in docs/results.md, "nccl-tests' view".
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from pathlib import Path

from flagperf.reporters.base import Reporter
from flagperf.results import ncclview
from flagperf_contract import write_atomic

FOLDER = "nccl_tests"               # in the run directory
JSON_FILE_VERSION = 3               # nccl-tests' JSON_FILE_VERSION (src/util.cu) whose fields these files mirror
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"   # its TIME_STRING_FORMAT (local time)
MAX_DEVICES = 4096                  # config.devices entries at most
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _bool(value: bool) -> str:
    """nccl-tests' jsonBool writes a string: "true" or "false"."""
    return "true" if value else "false"


def _double(value):
    """nccl-tests' jsonDouble: a number (printed with %lf: 6 decimals), the string "nan" for NaN."""
    if value is None:
        return None
    if not math.isfinite(value):
        return "nan"
    return round(float(value), 6)


def _time(iso) -> str:
    """An ISO time of the summary in nccl-tests' format, local time; "" when there is none."""
    if not isinstance(iso, str) or not iso:
        return ""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime(TIME_FORMAT)
    except ValueError:
        return ""


def nccl_version_code(text) -> int:
    """NCCL's version code (ncclGetVersion) of a version string: '2.21.5' -> 22105 (2.8.4 -> 2804); 0 if none."""
    m = re.match(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})", text or "")
    if m is None:
        return 0
    major, minor, patch = (int(x) for x in m.groups())
    if (major, minor) >= (2, 9):
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def _steps(sizes) -> dict:
    """config's step_factor (a geometric sweep) or step_bytes (an arithmetic one; 0 when the sizes are neither)."""
    ratios = {b // a for a, b in zip(sizes, sizes[1:]) if a and b % a == 0}
    if len(sizes) > 1 and all(a and b % a == 0 for a, b in zip(sizes, sizes[1:])) and len(ratios) == 1 \
            and min(ratios) > 1:
        return {"step_factor": min(ratios)}
    diffs = {b - a for a, b in zip(sizes, sizes[1:])}
    return {"step_bytes": min(diffs) if len(diffs) == 1 else 0}


def _counts(finished) -> dict:
    """{(op, size_bytes): (warmup, iters)} of the record's details.sweep entries (what a row does not carry)."""
    checks = (finished or {}).get("checks")
    details = checks.get("details") if isinstance(checks, dict) else None
    sweep = details.get("sweep") if isinstance(details, dict) else None
    out: dict = {}
    for e in sweep if isinstance(sweep, list) else []:
        if isinstance(e, dict) and isinstance(e.get("op"), str) and ncclview.as_int(e.get("size_bytes")) is not None:
            out.setdefault((e["op"], e["size_bytes"]), (ncclview.as_int(e.get("warmup")) or 0,
                                                         ncclview.as_int(e.get("iters")) or 0))
    return out


def _devices(rnd) -> list:
    """config.devices: one entry per rank of the round (ranks.json), as nccl-tests' '#  Rank ...' lines."""
    out: list = []
    for node in rnd.nodes:
        for r in node.ranks or []:
            rank = ncclview.as_int(r.get("rank")) if isinstance(r, dict) else None
            if rank is None or len(out) >= MAX_DEVICES:
                continue
            out.append({"rank": rank, "group": 0, "pid": ncclview.as_int(r.get("pid")) or 0,
                        "hostname": str(node.host or node.node), "device": ncclview.as_int(r.get("local_rank")) or 0,
                        "device_hex": "", "device_info": ""})
    return sorted(out, key=lambda d: d["rank"])


def _body(row, placement_measured: bool):
    """A result's out_of_place / in_place object (null for the placement flagperf does not run)."""
    if not placement_measured:
        return None
    return {"time": _double(row.time_us), "alg_bw": _double(row.algbw_gbs), "bus_bw": _double(row.busbw_gbs),
            "nwrong": None if row.wrong is None else float(row.wrong)}


def document(summary, case, table) -> dict:
    """One nccl-tests JSON document: ``table`` (an ncclview.OpTable of ``case``) as ``<op>_perf -J`` writes its
    run, keys in its order."""
    rnd = next(r for r in case.rounds if r.round == table.round)
    counts = _counts(rnd.finished)
    in_place = ncclview.placement(table.op) == "in_place"
    sizes = [row.size_bytes for row in table.rows]
    warmup, iters = counts.get((table.op, sizes[-1]), (0, 0))
    results = [{"size": row.size_bytes, "count": row.count, "type": row.dtype, "redop": row.redop,
                "root": f"{row.root:6d}", "out_of_place": _body(row, not in_place), "in_place": _body(row, in_place),
                "actual_iterations": counts.get((table.op, row.size_bytes), (0, 0))[1], "experiment_name": ""}
               for row in table.rows]
    wrong_rows = sum(1 for row in table.rows if row.wrong)
    return {
        "version": JSON_FILE_VERSION,
        "start_time": _time(summary.started),
        "args": ["flagperf", case.key, table.op],
        "env": [f"{k}={v}" for k, v in sorted((case.env or {}).items())],
        "nccl_version": nccl_version_code((case.nccl or "").split(",")[0]),
        "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": sizes[0], "maximum_bytes": sizes[-1],
                   **_steps(sizes), "warmup_iters": warmup, "iterations": iters, "aggregated_iterations": 1,
                   "validation": 1, "graph": 0, "blocking_collectives": _bool(False),
                   "per_iter_timing": _bool(False), "per_iter_skip": 0, "parallel_init": _bool(False),
                   "devices": _devices(rnd)},
        "results": results,
        "out_of_bounds": {"count": wrong_rows, "okay": _bool(wrong_rows == 0)},
        "average_bus_bandwidth": {"bandwidth": _double(table.avg_busbw_gbs), "okay": "unchecked"},
        "errors": [],
        "end_time": _time(summary.finished),
    }


def file_name(case_name: str, op: str) -> str:
    """'<case>.<op>.json' with every character but letters, digits, '.', '_' and '-' replaced by '_'."""
    name = _UNSAFE.sub("_", f"{case_name}.{op}")
    return ("_" + name[1:] if name.startswith(".") else name)[:200] + ".json"


def documents(summary) -> dict:
    """{file name: document} of every op of every collectives and p2p case of the run ({} when none)."""
    out: dict = {}
    for case in summary.cases:
        for table in ncclview.op_tables(case):
            name = file_name(case.name, table.op)
            k = 2
            while name in out:
                name = file_name(f"{case.name}-{k}", table.op)
                k += 1
            out[name] = document(summary, case, table)
    return out


class NcclTestsReporter(Reporter):
    name = "nccl_tests"
    file_name = FOLDER

    def render(self, summary) -> str:
        """Every document as one JSON object keyed by file name (the files themselves: ``write``)."""
        return json.dumps(documents(summary), indent=1, allow_nan=False) + "\n"

    def write(self, summary, run_dir) -> Path | None:       # type: ignore[override]
        """Write nccl_tests/<case>.<op>.json into the run directory; None (nothing written) when the run has no
        collectives or p2p sweep."""
        docs = documents(summary)
        if not docs:
            return None
        folder = Path(run_dir) / FOLDER
        if folder.is_symlink():
            raise OSError(f"{folder} is a link")
        folder.mkdir(exist_ok=True)
        for name, doc in docs.items():
            write_atomic(folder / name, json.dumps(doc, indent=1, allow_nan=False) + "\n")
        return folder
