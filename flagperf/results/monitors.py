"""Parse the files written by monitors/monitor.py (pure stdlib). Formats: docs/monitors.md.

Data line: `<ISO-8601 timestamp with offset> key=value key=value ...`, values plain ints or floats. The data files
are in the node directory, or in its ``flagperf/`` folder when the monitor wrote FlagPerf's files in their place
(MONITOR_FORMAT: flagperf; :func:`native_monitor_dir`); monitor_status.json is always at the top.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime

from flagperf.results.perflog import NotRegularFile, lines_of, open_regular
from flagperf_contract import (HOST_SENSORS, MONITOR_STATUS_FILE, NATIVE_MONITOR_DIR, ContractError, MonitorStatus,
                               read_json_file)

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


THROTTLE_REASONS = (  # NVML clocks-event (throttle) reason bits, as the nvml plug-in writes them (throttle_mask)
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)


def throttle_names(mask: int) -> list:
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


def energy_of(samples, t0: float | None = None, t1: float | None = None) -> dict:
    """Energy (J) of one device's samples, over [t0, t1] (epoch seconds) or the whole file.

    With the device's energy counter (``energy_j``, cumulative): the counter's rise, linearly interpolated at
    t0 and t1 between the bracketing samples. Without one: the sampled ``power_w`` integrated over time
    (trapezoids), which misses what happens between samples; ``source`` says which."""
    pts = [(ts.timestamp(), v) for ts, v in samples]
    if not pts:
        return {}
    lo = pts[0][0] if t0 is None else t0
    hi = pts[-1][0] if t1 is None else t1
    if hi <= lo:
        return {}
    gaps = sorted(b[0] - a[0] for a, b in zip(pts, pts[1:]))
    slack = max(1.5, 1.5 * gaps[len(gaps) // 2]) if gaps else 1.5     # the ends may fall between samples
    counter = [(t, v["energy_j"]) for t, v in pts if "energy_j" in v]

    def at(series, t):
        if t <= series[0][0]:
            return series[0][1]
        for (ta, va), (tb, vb) in zip(series, series[1:]):
            if ta <= t <= tb:
                return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else vb
        return series[-1][1]

    if len(counter) >= 2 and counter[0][0] <= lo + slack and counter[-1][0] >= hi - slack:
        return {"energy_j": round(at(counter, hi) - at(counter, lo), 3), "energy_source": "counter",
                "seconds": round(hi - lo, 3)}
    power = [(t, v["power_w"]) for t, v in pts if "power_w" in v and lo - slack <= t <= hi + slack]
    if len(power) < 2:
        return {}
    joules = 0.0
    for (ta, pa), (tb, pb) in zip(power, power[1:]):
        a, b = max(ta, lo), min(tb, hi)
        if b > a:
            joules += (b - a) * (pa + pb) / 2
    return {"energy_j": round(joules, 3), "energy_source": "integrated power samples", "seconds": round(hi - lo, 3)}


def _window_stats(samples, t0, t1) -> dict:
    """Median SM clock, mean power and the throttle reasons of the samples inside [t0, t1] (epoch seconds)."""
    inside = [(ts, v) for ts, v in samples if t0 <= ts.timestamp() <= t1]
    out: dict = {}
    clocks = sorted(v["sm_clock_mhz"] for _, v in inside if "sm_clock_mhz" in v)
    if clocks:
        out["sm_clock_mhz_median"] = clocks[len(clocks) // 2]
    power = [v["power_w"] for _, v in inside if "power_w" in v]
    if power:
        out["power_w_mean"] = round(sum(power) / len(power), 1)
    mask = 0
    for _, v in inside:
        mask |= int(v.get("throttle_mask", 0))
    if any("throttle_mask" in v for _, v in inside):
        out["throttle_reasons"] = throttle_names(mask)
    return out


def _stats(samples, key, *kinds, ndigits=1):
    vals = [v[key] for _, v in samples if key in v]
    out = {}
    if not vals:
        return out
    for kind in kinds:
        x = {"mean": lambda: sum(vals) / len(vals), "max": lambda: max(vals), "min": lambda: min(vals),
             "last": lambda: vals[-1], "median": lambda: sorted(vals)[len(vals) // 2]}[kind]()
        out[f"{key}_{kind}"] = round(x, ndigits)
    return out


@dataclass
class NodeSamples:
    """A node directory's monitor files, read once: the host sensors' samples, the accelerator file's samples
    (every device's, in file order), monitor_status.json's sensors, and the files that are there but were not read."""

    host: dict = field(default_factory=dict)        # {"cpu" | "mem" | "pwr": [(timestamp, {key: value})]}
    gpu_file: str | None = None                     # [flagperf/]<vendor>_monitor.log, relative to the node directory
    gpu: list = field(default_factory=list)
    sensors: dict = field(default_factory=dict)     # {name: SensorStatus}; {} without a status
    unreadable: dict = field(default_factory=dict)  # {file name relative to the node directory: why it was not read}

    @property
    def gpu_vendor(self) -> str | None:
        return self.gpu_file.rpartition("/")[2][:-len("_monitor.log")] if self.gpu_file else None


def native_monitor_dir(node_dir, status: MonitorStatus | None = None) -> str:
    """The folder of a node directory that holds the monitor's own data files, relative to it: NATIVE_MONITOR_DIR
    when the monitor wrote FlagPerf's files in their place (MONITOR_FORMAT: flagperf), else "" (the directory
    itself). Decided by what monitor_status.json names (a data file in that folder); without a status, or one
    that names no data file, by whether that folder is there (a real folder, never a link)."""
    files = [s.file for s in (status.sensors if status else {}).values() if s.file]
    if files:
        return NATIVE_MONITOR_DIR if any(f.startswith(NATIVE_MONITOR_DIR + "/") for f in files) else ""
    path = os.path.join(node_dir, NATIVE_MONITOR_DIR)
    return NATIVE_MONITOR_DIR if os.path.isdir(path) and not os.path.islink(path) else ""


def gpu_monitor_file(node_dir, status: MonitorStatus | None) -> str | None:
    """The accelerator's monitor file of a node directory, relative to it (inside native_monitor_dir): the one
    its status names, else (no status, or none named) the first <vendor>_monitor.log there that is not a host
    sensor's. A name that could lead elsewhere is never followed."""
    sub = native_monitor_dir(node_dir, status)
    sensors = status.sensors if status else {}
    name = sensors["gpu"].file if "gpu" in sensors else None
    if name:
        head, _, base = name.rpartition("/")
        if head == sub and _MONITOR_FILE.match(base):
            return name
    try:
        names = sorted(f for f in os.listdir(os.path.join(node_dir, sub)) if _MONITOR_FILE.match(f)
                       and f[:-len("_monitor.log")] not in HOST_SENSORS)
    except OSError:
        return None
    return "/".join(filter(None, (sub, names[0]))) if names else None


def read_node_samples(node_dir) -> NodeSamples:
    """Every monitor file of one node directory (host sensors, then the accelerator's), from the folder
    native_monitor_dir names. A missing file has no samples; one that is there but is no readable regular file
    (a FIFO, a symlink, a device) is never read and goes to ``unreadable``."""
    out = NodeSamples()
    status, _ = read_status(node_dir)
    sub = native_monitor_dir(node_dir, status)
    folder = os.path.join(node_dir, sub) if sub else None
    if folder and os.path.islink(folder):       # a link planted by a host is never followed
        out.unreadable[sub] = f"{folder}: not a folder (a symlink); not read"

    def samples_from(file_name):
        path = os.path.join(node_dir, file_name)
        if sub in out.unreadable:
            return []
        try:
            return read_monitor_file(path)
        except FileNotFoundError:
            return []
        except OSError as exc:      # a FIFO, a symlink, a device: never read, reported
            out.unreadable[file_name] = str(exc) if isinstance(exc, NotRegularFile) else f"{path}: unreadable: {exc}"
            return []

    for name in ("cpu", "mem", "pwr"):
        out.host[name] = samples_from("/".join(filter(None, (sub, f"{name}_monitor.log"))))
    out.sensors = dict(status.sensors) if status else {}
    out.gpu_file = gpu_monitor_file(node_dir, status)
    out.gpu = samples_from(out.gpu_file) if out.gpu_file else []
    return out


def summarize_monitors(node_dir, window: tuple | None = None) -> dict:
    """Simple per-sensor stats of one node's monitor files, for the run summary. ``window`` (t0, t1), epoch
    seconds of the benchmark's measured window (rank 0's RUN_START and RUN_END), adds each device's energy,
    median SM clock, mean power and throttle reasons inside it (``window``), beside the whole round's.

    -> {"cpu": {...}, "mem": {...}, "pwr": {...}, "gpu": {"vendor": ..., "devices": [{"index": 0, ...}]},
        "unavailable": {sensor: reason}}. A sensor without data is left out; "unavailable" (from
    monitor_status.json) is present only when the status names unavailable sensors."""
    result: dict = {}
    node = read_node_samples(node_dir)
    cpu = node.host["cpu"]
    if cpu:
        result["cpu"] = {"samples": len(cpu), **_stats(cpu, "util_pct", "mean", "max"),
                         **_stats(cpu, "load1", "max", ndigits=2)}
    mem = node.host["mem"]
    if mem:
        result["mem"] = {"samples": len(mem), **_stats(mem, "used_mib", "max", "mean"),
                         **_stats(mem, "total_mib", "max"), **_stats(mem, "used_pct", "max")}
    pwr = node.host["pwr"]
    if pwr:
        # host power (RAPL package/DRAM or hwmon sensors): the host's own, never wall power
        result["pwr"] = {"samples": len(pwr), **_stats(pwr, "power_w", "mean", "max"), **energy_of(pwr)}
        if window:
            result["pwr"]["window"] = energy_of(pwr, *window)

    by_index: dict[int, list] = {}
    for ts, v in node.gpu:
        if "gpu" in v:
            by_index.setdefault(int(v["gpu"]), []).append((ts, v))
    if by_index:
        devices = []
        for idx in sorted(by_index):
            s = by_index[idx]
            dev = {"index": idx, "samples": len(s), **_stats(s, "temp_c", "max"),
                   **_stats(s, "power_w", "max", "mean"), **_stats(s, "mem_used_mib", "max"),
                   **_stats(s, "mem_total_mib", "max"), **_stats(s, "util_pct", "mean", "max"),
                   **_stats(s, "sm_clock_mhz", "median", "min", "max", ndigits=0), **energy_of(s)}
            mask = 0
            for _, v in s:
                mask |= int(v.get("throttle_mask", 0))
            if any("throttle_mask" in v for _, v in s):
                dev["throttle_reasons"] = throttle_names(mask)
            if window:
                dev["window"] = {**energy_of(s, *window), **_window_stats(s, *window)}
            devices.append(dev)
        result["gpu"] = {"vendor": node.gpu_vendor, "devices": devices}

    unavailable = {name: st.reason or "" for name, st in node.sensors.items() if not st.available}
    if unavailable:
        result["unavailable"] = unavailable
    if node.unreadable:
        result["unreadable"] = dict(node.unreadable)
    return result
