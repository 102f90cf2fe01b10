"""Parse the files written by monitors/monitor.py (pure stdlib). Formats: docs/monitors.md.

Data line: `<ISO-8601 timestamp with offset> key=value key=value ...`, values plain ints or floats.
"""
from __future__ import annotations

import math
import os
import re
from datetime import datetime

from flagperf.results.perflog import NotRegularFile, lines_of, open_regular
from flagperf_contract import HOST_SENSORS, MONITOR_STATUS_FILE, ContractError, MonitorStatus, read_json_file

_MONITOR_FILE = re.compile(r"[A-Za-z0-9_.-]+_monitor\.log\Z")   # a data file name a host may name

_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")
_INT = re.compile(r"-?\d+\Z")
_FLOAT = re.compile(r"-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?\Z")


def parse_monitor_line(line: str) -> tuple[datetime, dict[str, float | int]]:
    """-> (timezone-aware timestamp, {key: number}); ValueError on anything else."""
    tokens = line.split()
    if len(tokens) < 2:
        raise ValueError(f"monitor line needs a timestamp and at least one key=value: {line!r}")
    try:
        ts = datetime.fromisoformat(tokens[0])
    except ValueError:
        raise ValueError(f"bad timestamp {tokens[0]!r} in monitor line {line!r}") from None
    if ts.tzinfo is None:
        raise ValueError(f"timestamp without UTC offset in monitor line {line!r}")
    values: dict[str, float | int] = {}
    for tok in tokens[1:]:
        key, sep, raw = tok.partition("=")
        if not sep or not _KEY.match(key):
            raise ValueError(f"bad field {tok!r} in monitor line {line!r}")
        if key in values:
            raise ValueError(f"duplicate key {key!r} in monitor line {line!r}")
        if _INT.match(raw):
            values[key] = int(raw)
        elif _FLOAT.match(raw):
            values[key] = float(raw)
            if not math.isfinite(values[key]):
                raise ValueError(f"non-finite value {tok!r} in monitor line {line!r}")
        else:
            raise ValueError(f"non-numeric value {tok!r} in monitor line {line!r}")
    return ts, values


MONITOR_FILE_MAX_BYTES = 32 * 1024 ** 2    # samples are read from at most the last 32 MiB of a monitor file


def read_monitor_file(path, strict: bool = False) -> list[tuple[datetime, dict]]:
    """All samples of one monitor file (of its last MONITOR_FILE_MAX_BYTES), in file order. Blank lines are
    ignored; a malformed line (e.g. a last line cut off by a kill -9) is skipped unless strict=True, which
    raises ValueError naming the line. Only a regular file is read (never a FIFO, device or symlink): anything
    else raises OSError naming the file (FileNotFoundError when it is missing)."""
    samples = []
    f, size = open_regular(path)
    with f:
        for n, line in enumerate(lines_of(f, size, MONITOR_FILE_MAX_BYTES), 1):
            if not line.strip():
                continue
            try:
                samples.append(parse_monitor_line(line))
            except ValueError as e:
                if strict:
                    raise ValueError(f"{path}:{n}: {e}") from None
    return samples


def read_status(dir) -> tuple:
    """(MonitorStatus, None) from a node directory's monitor_status.json, or (None, what is wrong with it)."""
    try:
        return read_json_file(os.path.join(dir, MONITOR_STATUS_FILE), MonitorStatus), None
    except ContractError as exc:
        return None, str(exc)


def _stats(samples, key, *kinds, ndigits=1):
    vals = [v[key] for _, v in samples if key in v]
    out = {}
    if not vals:
        return out
    for kind in kinds:
        x = {"mean": lambda: sum(vals) / len(vals), "max": lambda: max(vals), "min": lambda: min(vals),
             "last": lambda: vals[-1]}[kind]()
        out[f"{key}_{kind}"] = round(x, ndigits)
    return out


def summarize_monitors(node_dir) -> dict:
    """Simple per-sensor stats of one node's monitor files, for the run summary.

    -> {"cpu": {...}, "mem": {...}, "pwr": {...}, "gpu": {"vendor": ..., "devices": [{"index": 0, ...}]},
        "unavailable": {sensor: reason}}. A sensor without data is left out; "unavailable" (from
    monitor_status.json) is present only when the status names unavailable sensors."""
    result: dict = {}
    unreadable: dict = {}

    def samples_from(file_name):
        path = os.path.join(node_dir, file_name)
        try:
            return read_monitor_file(path)
        except FileNotFoundError:
            return []
        except OSError as exc:      # a FIFO, a symlink, a device: never read, reported
            unreadable[file_name] = str(exc) if isinstance(exc, NotRegularFile) else f"{path}: unreadable: {exc}"
            return []

    def samples_of(name):
        return samples_from(f"{name}_monitor.log")

    cpu = samples_of("cpu")
    if cpu:
        result["cpu"] = {"samples": len(cpu), **_stats(cpu, "util_pct", "mean", "max"),
                         **_stats(cpu, "load1", "max", ndigits=2)}
    mem = samples_of("mem")
    if mem:
        result["mem"] = {"samples": len(mem), **_stats(mem, "used_mib", "max", "mean"),
                         **_stats(mem, "total_mib", "max"), **_stats(mem, "used_pct", "max")}
    pwr = samples_of("pwr")
    if pwr:
        result["pwr"] = {"samples": len(pwr), **_stats(pwr, "power_w", "mean", "max")}

    status, _ = read_status(node_dir)
    sensors = status.sensors if status else {}
    gpu_file = sensors["gpu"].file if "gpu" in sensors else None
    if gpu_file and not _MONITOR_FILE.match(gpu_file):
        gpu_file = None     # a status naming a file outside the node directory is not followed
    if not gpu_file:  # no status: any <vendor>_monitor.log that is not a host sensor
        names = sorted(f for f in os.listdir(node_dir) if f.endswith("_monitor.log")
                       and f[:-len("_monitor.log")] not in HOST_SENSORS) if os.path.isdir(node_dir) else []
        gpu_file = names[0] if names else None
    gpu = samples_from(gpu_file) if gpu_file else []
    by_index: dict[int, list] = {}
    for ts, v in gpu:
        if "gpu" in v:
            by_index.setdefault(int(v["gpu"]), []).append((ts, v))
    if by_index:
        devices = []
        for idx in sorted(by_index):
            s = by_index[idx]
            devices.append({"index": idx, "samples": len(s), **_stats(s, "temp_c", "max"),
                            **_stats(s, "power_w", "max", "mean"), **_stats(s, "mem_used_mib", "max"),
                            **_stats(s, "mem_total_mib", "max"), **_stats(s, "util_pct", "mean", "max")})
        result["gpu"] = {"vendor": str(gpu_file)[:-len("_monitor.log")], "devices": devices}

    unavailable = {name: st.reason or "" for name, st in sensors.items() if not st.available}
    if unavailable:
        result["unavailable"] = unavailable
    if unreadable:
        result["unreadable"] = unreadable
    return result
