"""MONITOR_FORMAT: flagperf puts FlagPerf's monitor files where FlagPerf has them, the top of the node directory,
and flagperf's own in its ``flagperf/`` folder (flagperf_contract.NATIVE_MONITOR_DIR).

The real monitor process writes a node directory with ``--format flagperf``; every FlagPerf-format file in it is
then read by the readers below, which do what FlagPerf's summary step does with these files (its summary_logs:
the host files and the vendor's analysis_log; then its analysis_log: numpy's mean, max and std of every series)
expression for expression, written for these tests. flagperf's own readers (flagperf/results/monitors.py) find
the native files in either layout."""
import math
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from flagperf.results.monitors import (native_monitor_dir, read_monitor_file, read_node_samples,  # noqa: E402
                                       read_status, summarize_monitors)
from flagperf_contract import (MONITOR_STATUS_FILE, NATIVE_MONITOR_DIR, MonitorStatus, SensorStatus,  # noqa: E402
                               write_json_atomic)

from .test_flagperf_format import DCMI, FAKE_PYNVML, FIXTURES, fake_tool, start_monitor  # noqa: E402

HOST_FILES = ("cpu_monitor.log", "mem_monitor.log", "pwr_monitor.log")


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A folder first on PATH, for the stand-in tools: the monitor finds them before any real one."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '/bin:/usr/bin')}")
    return folder


# ------------------------------------------------------------------ FlagPerf's reading, written for these tests

def flagperf_host_series(path):
    """cpu/mem/pwr_monitor.log as FlagPerf's summary reads them: every line holding a tab gives one float, the
    text between its first tab and the next (or the line's end) less its last character. Whatever float() cannot
    read raises, as it does there; a file that is not there raises FileNotFoundError, as it does there."""
    series = []
    with open(path, "r") as f:
        for line in f:
            if "\t" not in line:
                continue
            after = line.partition("\t")[2]
            field = after.split("\t", 1)[0]
            series.append(float(field[:-1]))
    return series


def _new_result(devices):
    return {key: {i: [] for i in range(devices)} for key in ("temp", "power", "mem")}


def flagperf_smi_layout(path, nproc):
    """<vendor>_monitor.log as FlagPerf's nvidia reader (and kunlunxin's, mthreads', dcu's) reads it: the lines
    holding "MiB", split on single spaces; temperature column 0 less one character, power column 1 less one,
    memory used column 2 less three; memory total (column 3 less three) from the first such line only; line k
    belongs to accelerator k modulo NPROC_PER_NODE."""
    result, device = _new_result(nproc), 0
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        if "MiB" not in line:
            continue
        cols = line.split(" ")
        if "max_mem" not in result:
            result["max_mem"] = float(cols[3][:-3])
        result["temp"][device].append(float(cols[0][:-1]))
        result["power"][device].append(float(cols[1][:-1]))
        result["mem"][device].append(float(cols[2][:-3]))
        device = (device + 1) % nproc
    return result


def flagperf_cnmon_layout(path, nproc):
    """cambricon_monitor.log as FlagPerf's cambricon reader reads it: the "MiB" lines; temperature column 0 less
    one character, power column 1, memory used column 3, memory total column 5 (first line only)."""
    result, device = _new_result(nproc), 0
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        if "MiB" not in line:
            continue
        cols = line.split(" ")
        if "max_mem" not in result:
            result["max_mem"] = float(cols[5])
        result["temp"][device].append(float(cols[0][:-1]))
        result["power"][device].append(float(cols[1]))
        result["mem"][device].append(float(cols[3]))
        device = (device + 1) % nproc
    return result


def flagperf_npu_smi_layout(path):
    """ascend_monitor.log as FlagPerf's ascend reader reads it: eight accelerators whatever NPROC_PER_NODE says;
    every line that is not a bare newline and holds neither ":" nor "-" is one: power column 0, temperature
    column 1, memory used int(column 3 without newline and "/"); it sets max_mem to None."""
    result, device = _new_result(8), 0
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        if line == "\n" or ":" in line or "-" in line:
            continue
        result["max_mem"] = None
        cols = line.split(" ")
        result["power"][device].append(float(cols[0]))
        result["temp"][device].append(float(cols[1]))
        result["mem"][device].append(int(cols[3].replace("\n", "").replace("/", "")))
        device = (device + 1) % 8
    return result


def _max(xs):
    """numpy's max: an empty series raises, a nan wins."""
    if not xs:
        raise ValueError("zero-size array to reduction operation maximum which has no identity")
    return math.nan if any(math.isnan(x) for x in xs) else max(xs)


def _mean(xs):
    """numpy's mean: nan for an empty series (numpy warns), nan when one value is."""
    return sum(xs) / len(xs) if xs else math.nan


def _std(xs):
    """numpy's (population) standard deviation."""
    if not xs:
        return math.nan
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def flagperf_summary(host):
    """What FlagPerf's analysis step computes of one host's series (raising where it raises): system power,
    accelerator power and temperature per rank, CPU and memory in %, accelerator memory in % of max_mem."""
    out = {"pwr": [round(f(host["pwr"]), 2) for f in (_mean, _max, _std)],
           "cpu": [round(f(host["cpu"]) * 100, 3) for f in (_mean, _max, _std)],
           "mem": [round(f(host["mem"]) * 100, 3) for f in (_mean, _max, _std)]}
    vendor = host["vendor"]
    for key in ("power", "temp"):
        out[key] = {i: [round(f(s), 2) for f in (_mean, _max, _std)] for i, s in vendor[key].items()}
    out["accel_mem"] = {i: [round(f(s) * 100 / vendor["max_mem"], 3) for f in (_mean, _max, _std)]
                        for i, s in vendor["mem"].items()}
    return out


def flagperf_reads(node, vendor, reader):
    """One host as FlagPerf's summary step reads ``node`` (its <host>_noderank<i> directory)."""
    host = {name[:3]: flagperf_host_series(node / name) for name in HOST_FILES}
    host["vendor"] = reader(node / f"{vendor}_monitor.log")
    return host


# ------------------------------------------------------------------ the monitor's files, read as FlagPerf reads them

def run_flagperf_monitor(out, *args, env=None, seconds="1.5"):
    p = start_monitor(out, "--interval", "0.2", "--format", "flagperf", "--max-seconds", seconds, *args, env=env)
    assert p.wait(20) == 0, p.communicate()
    return out


def nvml_env(tmp_path):
    (tmp_path / "py").mkdir(exist_ok=True)
    (tmp_path / "py" / "pynvml.py").write_text(FAKE_PYNVML)
    return dict(os.environ, PYTHONPATH=str(tmp_path / "py"))


def test_nvidia_node_without_a_power_sensor_reads_as_flagperfs_own(tmp_path, bin_dir):
    """Two GPUs through a stand-in pynvml; an ipmitool that reaches no BMC (no whole-machine power sensor)."""
    fake_tool(bin_dir, "ipmitool", "echo 'Could not open device at /dev/ipmi0: No such file or directory' >&2\n"
                                   "exit 1\n")
    node = run_flagperf_monitor(tmp_path / "localhost_noderank0", "--gpu", "nvml", "--vendor", "nvidia",
                                env=nvml_env(tmp_path))
    own = node / NATIVE_MONITOR_DIR
    assert sorted(p.name for p in node.glob("*_monitor.log")) == ["cpu_monitor.log", "mem_monitor.log",
                                                                  "nvidia_monitor.log", "pwr_monitor.log"]
    assert sorted(p.name for p in own.iterdir()) == ["cpu_monitor.log", "mem_monitor.log", "nvidia_monitor.log"]

    host = flagperf_reads(node, "nvidia", lambda p: flagperf_smi_layout(p, 2))
    native = {s: read_monitor_file(own / f"{s}_monitor.log", strict=True) for s in ("cpu", "mem", "nvidia")}
    assert len(host["cpu"]) == len(native["cpu"]) >= 4 and all(0 <= v <= 1 for v in host["cpu"])
    assert len(host["mem"]) == len(native["mem"]) and all(0 < v < 1 for v in host["mem"])
    assert len(host["pwr"]) == 1 and math.isnan(host["pwr"][0])        # FlagPerf's empty value: no number
    samples = len(native["nvidia"]) // 2
    assert host["vendor"]["temp"] == {0: [34.0] * samples, 1: [35.0] * samples}
    assert host["vendor"]["power"] == {0: [62.0] * samples, 1: [72.0] * samples}
    assert host["vendor"]["mem"] == {0: [3.0] * samples, 1: [1003.0] * samples}
    assert host["vendor"]["max_mem"] == 143771.0

    summary = flagperf_summary(host)                   # FlagPerf's analysis step runs through
    assert all(math.isnan(v) for v in summary["pwr"])
    assert summary["power"][1][:2] == [72.0, 72.0] and summary["temp"][0][:2] == [34.0, 34.0]
    assert 0 <= summary["cpu"][1] <= 100 and summary["accel_mem"][1][1] == round(1003 * 100 / 143771, 3)

    st, problem = read_status(node)
    assert problem is None and st.sensors["pwr"].extra["flagperf_file"] == "pwr_monitor.log"
    assert "Could not open device" in st.sensors["pwr"].extra["flagperf_reason"]


def test_empty_power_is_what_flagperfs_reader_and_summary_take(tmp_path):
    """Why the empty value is ``nan``: FlagPerf's own writer, when ipmitool prints nothing, leaves the stamp and a
    tab with nothing after it (no newline), which its reader cannot read; an empty file reads, but its summary
    then fails on an empty series. A ``nan`` line does neither."""
    path = tmp_path / "pwr_monitor.log"
    path.write_text("2026-11-22-10:00:05\t")
    with pytest.raises(ValueError):
        flagperf_host_series(path)
    path.write_text("")
    assert flagperf_host_series(path) == []
    with pytest.raises(ValueError):
        _max(flagperf_host_series(path))
    path.write_text("2026-11-22-10:00:05\tnan\n")
    assert all(math.isnan(f(flagperf_host_series(path))) for f in (_mean, _max, _std))


def test_nvidia_node_with_ipmitool_power(tmp_path, bin_dir):
    (tmp_path / "dcmi.txt").write_text(DCMI)
    fake_tool(bin_dir, "ipmitool", f'[ "$1" = dcmi ] && exec cat "{tmp_path}/dcmi.txt"\nexit 1\n')
    node = run_flagperf_monitor(tmp_path / "localhost_noderank0", "--gpu", "nvml", env=nvml_env(tmp_path))
    host = flagperf_reads(node, "nvidia", lambda p: flagperf_smi_layout(p, 2))
    assert host["pwr"] and set(host["pwr"]) == {412.0}
    assert flagperf_summary(host)["pwr"] == [412.0, 412.0, 0.0]
    st, _ = read_status(node)
    assert st.sensors["pwr"].extra == {"flagperf_file": "pwr_monitor.log",
                                       "flagperf_source": "ipmitool dcmi power reading"}


def test_ascend_node_reads_as_flagperfs_own(tmp_path, bin_dir):
    fake_tool(bin_dir, "npu-smi", f"exec cat '{FIXTURES / 'npu_smi_910b.txt'}'\n")
    fake_tool(bin_dir, "ipmitool", "exit 1\n")
    node = run_flagperf_monitor(tmp_path / "n0", "--gpu", "npu_smi", "--vendor", "ascend")
    host = flagperf_reads(node, "ascend", flagperf_npu_smi_layout)
    samples = len(read_monitor_file(node / NATIVE_MONITOR_DIR / "ascend_monitor.log")) // 8
    assert samples >= 3 and host["vendor"]["power"][0] == [358.2] * samples
    assert host["vendor"]["mem"][1] == [58290] * samples and host["vendor"]["max_mem"] is None
    assert len(host["pwr"]) == 1 and math.isnan(host["pwr"][0]) and host["cpu"] and host["mem"]


def test_cambricon_node_reads_as_flagperfs_own(tmp_path, bin_dir):
    fake_tool(bin_dir, "cnmon", f"exec cat '{FIXTURES / 'cnmon_mlu370.txt'}'\n")
    fake_tool(bin_dir, "ipmitool", "exit 1\n")
    node = run_flagperf_monitor(tmp_path / "n0", "--gpu", "cnmon", "--vendor", "cambricon")
    host = flagperf_reads(node, "cambricon", lambda p: flagperf_cnmon_layout(p, 2))
    samples = len(host["vendor"]["temp"][0])
    assert samples >= 3 and host["vendor"]["temp"][0] == [46.0] * samples
    assert host["vendor"]["power"][1] == [191.0] * samples and host["vendor"]["max_mem"] == 20638.0
    summary = flagperf_summary(host)
    assert summary["accel_mem"][0][1] == round(18214 * 100 / 20638, 3) and math.isnan(summary["pwr"][1])


# ------------------------------------------------------------------ flagperf's own readers, either layout

def test_flagperfs_readers_find_the_native_files_in_either_layout(tmp_path, bin_dir):
    fake_tool(bin_dir, "ipmitool", "exit 1\n")
    env = nvml_env(tmp_path)
    moved = run_flagperf_monitor(tmp_path / "moved", "--gpu", "nvml", env=env, seconds="1")
    p = start_monitor(tmp_path / "top", "--interval", "0.2", "--gpu", "nvml", "--max-seconds", "1", env=env)
    assert p.wait(20) == 0, p.communicate()
    top = tmp_path / "top"
    assert not (top / NATIVE_MONITOR_DIR).exists()
    assert native_monitor_dir(moved, read_status(moved)[0]) == NATIVE_MONITOR_DIR
    assert native_monitor_dir(top, read_status(top)[0]) == ""

    for node in (moved, top):
        samples = read_node_samples(node)
        assert samples.gpu_vendor == "nvidia" and len(samples.gpu) >= 6 and not samples.unreadable, node
        assert all(len(samples.host[s]) >= 3 for s in ("cpu", "mem")), node
        summary = summarize_monitors(node)
        assert summary["cpu"]["samples"] == len(samples.host["cpu"]) and "util_pct_mean" in summary["cpu"]
        assert [d["index"] for d in summary["gpu"]["devices"]] == [0, 1]
        assert summary["gpu"]["vendor"] == "nvidia" and summary["gpu"]["devices"][1]["temp_c_max"] == 35
    assert read_node_samples(moved).gpu_file == "flagperf/nvidia_monitor.log"

    # Without monitor_status.json (a monitor killed before it wrote one) the folder tells.
    (moved / MONITOR_STATUS_FILE).unlink()
    samples = read_node_samples(moved)
    assert samples.gpu_file == "flagperf/nvidia_monitor.log" and samples.host["cpu"] and len(samples.gpu) >= 6


def test_a_linked_native_folder_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cpu_monitor.log").write_text("2026-11-22T10:00:00.000+00:00 util_pct=5\n")
    node = tmp_path / "node"
    node.mkdir()
    (node / NATIVE_MONITOR_DIR).symlink_to(elsewhere)
    assert native_monitor_dir(node) == "" and read_node_samples(node).host["cpu"] == []     # no status: no folder
    status = MonitorStatus(pid=1, interval_s=1.0, started="2026-11-22T10:00:00.000+00:00", sensors={
        "cpu": SensorStatus(True, source="psutil", file="flagperf/cpu_monitor.log"),
        "gpu": SensorStatus(True, source="nvml", file="flagperf/../../elsewhere/x_monitor.log")})
    write_json_atomic(node / MONITOR_STATUS_FILE, status.to_dict())
    samples = read_node_samples(node)           # the status names the folder: reported, still not followed
    assert samples.host["cpu"] == [] and "symlink" in samples.unreadable[NATIVE_MONITOR_DIR]
    assert samples.gpu == []
