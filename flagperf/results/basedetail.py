"""FlagPerf base's ``detail_result.json``, from flagperf's own monitor files, and its summary statistics.

FlagPerf's base run.py ends with a summary of the case it ran last: for every host of HOSTS, its accelerator
monitor's series per device (temperature, power, memory used and the device's memory size), the host's CPU and
memory use (fractions, 0-1) and system power series, and the ``[FlagPerf Result]`` lines of its log, written as
``detail_result.json``; then it logs the mean, maximum and standard deviation (numpy's, the population's) of each
series. :func:`detail_result` builds that mapping for one round of a case, from the node directories' native
monitor files (:func:`flagperf.results.monitors.read_node_samples`, every sample, never the bounded series of
report.html) and node logs, and adds to each host FlagPerf's logged statistics under ``statistics``
(docs/results.md, "detail_result.json").

Where flagperf's data differs from FlagPerf's: ``cpu`` is ``util_pct`` / 100 (FlagPerf: mpstat), ``mem``
``used_mib`` / ``total_mib`` (FlagPerf: free -g), ``pwr`` the host power the monitor read (RAPL or hwmon, the
host's own draw; FlagPerf: the BMC through ipmitool), the devices are keyed by the monitor's index (FlagPerf:
the line's position modulo NPROC_PER_NODE). A series with no sample is empty and its statistics null.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from flagperf.results.flagperf_lines import RESULT_MARK, clean_line
from flagperf.results.monitors import NodeSamples, read_node_samples
from flagperf.results.perflog import read_lines
from flagperf.results.series import node_dir_of
from flagperf_contract import NODE_COMMAND_LOG, rank_log_name

DETAIL_FILE = "detail_result.json"
LOG_MAX_BYTES = 16 * 1024 ** 2      # read from the end of each node log for its [FlagPerf Result] lines
MAX_RESULT_LINES = 4096             # kept per host
CHIP_KEYS = (("temp", "temp_c"), ("power", "power_w"), ("mem", "mem_used_mib"))   # FlagPerf's name, flagperf's


def _stat(values, scale: float = 1.0, ndigits: int = 2) -> dict:
    """FlagPerf's three figures of a series (round(np.mean / np.max / np.std, ndigits), times ``scale``); null
    when the series is empty."""
    if not values:
        return {"mean": None, "max": None, "std": None}
    return {"mean": round(statistics.fmean(values) * scale, ndigits), "max": round(max(values) * scale, ndigits),
            "std": round(statistics.pstdev(values) * scale, ndigits)}


def _host_series(samples: list, key: str, total: str | None = None) -> list:
    """One field of a host sensor's samples; with ``total``, as a fraction of that field of the same sample."""
    out = []
    for _ts, v in samples:
        if key not in v:
            continue
        if total is None:
            out.append(v[key])
        elif v.get(total):
            out.append(round(v[key] / v[total], 6))
    return out


def vendor_section(gpu_samples: list, nproc: int | None) -> dict:
    """FlagPerf's ``vendor`` mapping: {"temp" | "power" | "mem": {device: [values]}, "max_mem": MiB}, devices
    0..nproc-1 always listed (FlagPerf lists NPROC_PER_NODE of them) and every other one the monitor saw."""
    indexes = set(range(nproc or 0))
    indexes.update(int(v["gpu"]) for _ts, v in gpu_samples if isinstance(v.get("gpu"), int))
    out: dict = {name: {i: [] for i in sorted(indexes)} for name, _key in CHIP_KEYS}
    for _ts, v in gpu_samples:
        if not isinstance(v.get("gpu"), int):
            continue
        for name, key in CHIP_KEYS:
            if key in v:
                out[name][int(v["gpu"])].append(v[key])
        if "max_mem" not in out and v.get("mem_total_mib"):
            out["max_mem"] = float(v["mem_total_mib"])     # FlagPerf: the first line's memory size
    return out


def result_lines(node_dir: Path | None, ranks) -> list:
    """The ``[FlagPerf Result]`` lines of a node's logs (the node command's, else every rank's), stripped of line
    ends, colour codes and torchrun's stream prefix, in file order."""
    if node_dir is None:
        return []
    names = [NODE_COMMAND_LOG] + [rank_log_name(r) for r in ranks]
    out: list = []
    for name in names:
        for line in read_lines(node_dir / name, LOG_MAX_BYTES):
            if RESULT_MARK in line and len(out) < MAX_RESULT_LINES:
                out.append(clean_line(line).strip())
        if out:
            break
    return out


def statistics_of(entry: dict) -> dict:
    """What FlagPerf's analysis_log logs of one host's entry: power and temperature in W and degrees C (2
    decimals), CPU, memory and per-device memory in percent (3 decimals; device memory of ``max_mem``)."""
    vendor = entry["vendor"]
    max_mem = vendor.get("max_mem")
    chip_mem = {str(i): (_stat(s, 100 / max_mem, 3) if max_mem else _stat([]))
                for i, s in vendor["mem"].items()}
    return {
        "system_power_w": _stat(entry["pwr"]),
        "chip_power_w": {str(i): _stat(s) for i, s in vendor["power"].items()},
        "chip_temperature_c": {str(i): _stat(s) for i, s in vendor["temp"].items()},
        "system_cpu_pct": _stat(entry["cpu"], 100, 3),
        "system_memory_pct": _stat(entry["mem"], 100, 3),
        "chip_memory_pct": chip_mem,
    }


def _ranks_of(node) -> list:
    return sorted(r["rank"] for r in node.ranks or [] if isinstance(r, dict) and isinstance(r.get("rank"), int)
                  and not isinstance(r.get("rank"), bool))


def detail_result(run_dir, case, rnd) -> dict:
    """{host: {"vendor", "cpu", "mem", "pwr", "flagperf", "statistics"}} of one round of a case (a CaseSummary's
    RoundSummary), hosts in node order; a host listed twice keys its later nodes by their directory's name."""
    out: dict = {}
    for node in rnd.nodes:
        nd = node_dir_of(run_dir, rnd, node)
        samples = read_node_samples(nd) if nd is not None and nd.is_dir() else NodeSamples()
        entry = {"vendor": vendor_section(samples.gpu, case.nproc),
                 "cpu": [round(x / 100, 6) for x in _host_series(samples.host.get("cpu") or [], "util_pct")],
                 "mem": _host_series(samples.host.get("mem") or [], "used_mib", "total_mib"),
                 "pwr": _host_series(samples.host.get("pwr") or [], "power_w"),
                 "flagperf": result_lines(nd if nd is not None and nd.is_dir() else None, _ranks_of(node))}
        entry["statistics"] = statistics_of(entry)
        key = str(node.host or node.node)
        out[key if key not in out else str(node.node)] = entry
    return out


def last_round(summary):
    """(case, round) whose detail FlagPerf's run.py writes: the last round with nodes of the run's last case that
    has one; None when no round has nodes."""
    for case in reversed(summary.cases):
        for rnd in reversed(case.rounds):
            if rnd.nodes:
                return case, rnd
    return None
