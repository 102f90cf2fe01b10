"""Host monitor (monitors/monitor.py) and its parser (flagperf/results/monitors.py)."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from flagperf.results.monitors import (parse_monitor_line, read_monitor_file, read_status,  # noqa: E402
                                       summarize_monitors)
from flagperf_contract import MonitorStatus, SensorStatus  # noqa: E402

MONITOR = ROOT / "monitors" / "monitor.py"
_spec = importlib.util.spec_from_file_location("flagperf_host_monitor", MONITOR)
monitor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(monitor)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "accel"
TS_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$")
ERROR_WORDS = re.compile(r"error|traceback|exception|not found|unavailable", re.I)


def start_monitor(out, *extra, env=None):
    cmd = [sys.executable, str(MONITOR), "--out-dir", str(out), *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def lines_of(path):
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # an orphan whose reaper does not reap stays a zombie: that counts as gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---------------------------------------------------------------- parser

def test_parse_good_lines():
    ts, v = parse_monitor_line("2026-11-22T10:00:00.123+01:00 util_pct=12.5 load1=0.53\n")
    assert ts == datetime.fromisoformat("2026-11-22T09:00:00.123+00:00")
    assert v == {"util_pct": 12.5, "load1": 0.53}
    ts, v = parse_monitor_line("2026-11-22T10:00:00.000-05:00 gpu=3 temp_c=45 power_w=120.5 mem_used_mib=1e3")
    assert v == {"gpu": 3, "temp_c": 45, "power_w": 120.5, "mem_used_mib": 1000.0}
    assert isinstance(v["gpu"], int) and isinstance(v["power_w"], float)


@pytest.mark.parametrize("line", [
    "",
    "2026-11-22T10:00:00.123+01:00",                      # no fields
    "util_pct=1.0 load1=2",                                # no timestamp
    "2026-11-22 util=1",                                   # timestamp without offset
    "2026-11-22T10:00:00.123 util_pct=1",                  # naive timestamp
    "2026-13-22T10:00:00.123+01:00 util_pct=1",            # bad month
    "2026-11-22T10:00:00.123+01:00 util_pct=12%",          # unit in value
    "2026-11-22T10:00:00.123+01:00 util_pct=",             # empty value
    "2026-11-22T10:00:00.123+01:00 util_pct",              # no '='
    "2026-11-22T10:00:00.123+01:00 Util=1",                # bad key
    "2026-11-22T10:00:00.123+01:00 a=1 a=2",               # duplicate key
    "2026-11-22T10:00:00.123+01:00 power_w=nan",           # not a plain number
    "2026-11-22T10:00:00.123+01:00 power_w=1_000",
    "2026-11-22T10:00:00.123+01:00 error=NVMLError: Not Supported",
])
def test_parse_malformed_lines(line):
    with pytest.raises(ValueError):
        parse_monitor_line(line)


def test_read_file_skips_cut_line_unless_strict(tmp_path):
    p = tmp_path / "cpu_monitor.log"
    p.write_text("2026-11-22T10:00:00.123+01:00 util_pct=1.0\n\n2026-11-22T10:00:01.123+01:00 util_pct=2.0\n"
                 "2026-11-22T10:00:02.1")
    assert [v["util_pct"] for _, v in read_monitor_file(p)] == [1.0, 2.0]
    with pytest.raises(ValueError, match=":4:"):
        read_monitor_file(p, strict=True)


def test_summarize(tmp_path):
    (tmp_path / "cpu_monitor.log").write_text("2026-11-22T10:00:00.000+00:00 util_pct=10.0 load1=1.0\n"
                                              "2026-11-22T10:00:01.000+00:00 util_pct=30.0 load1=2.5\n")
    (tmp_path / "nvidia_monitor.log").write_text(
        "2026-11-22T10:00:00.000+00:00 gpu=0 temp_c=40 power_w=100.0 mem_used_mib=10.0 util_pct=50\n"
        "2026-11-22T10:00:00.000+00:00 gpu=1 temp_c=41 mem_used_mib=20.0 util_pct=0\n"
        "2026-11-22T10:00:01.000+00:00 gpu=0 temp_c=44 power_w=200.0 mem_used_mib=30.0 util_pct=100\n")
    monitor.write_json_atomic(str(tmp_path / "monitor_status.json"), MonitorStatus(
        pid=1, interval_s=1.0, started="2026-11-22T10:00:00.000+00:00", sensors={
            "cpu": SensorStatus(True, source="psutil", file="cpu_monitor.log"),
            "pwr": SensorStatus(False, reason="no RAPL"),
            "gpu": SensorStatus(True, source="nvml", file="nvidia_monitor.log", extra={"vendor": "nvidia"})}).to_dict())
    s = summarize_monitors(tmp_path)
    assert s["cpu"] == {"samples": 2, "util_pct_mean": 20.0, "util_pct_max": 30.0, "load1_max": 2.5}
    assert "mem" not in s and "pwr" not in s
    assert s["unavailable"] == {"pwr": "no RAPL"}
    g0, g1 = s["gpu"]["devices"]
    assert s["gpu"]["vendor"] == "nvidia"
    assert (g0["temp_c_max"], g0["power_w_max"], g0["mem_used_mib_max"], g0["util_pct_mean"]) == (44, 200.0, 30.0, 75)
    assert g1["index"] == 1 and "power_w_max" not in g1
    assert read_status(tmp_path / "nowhere")[0] is None
    assert summarize_monitors(tmp_path / "nowhere") == {}


# ---------------------------------------------------------------- power sources (fake sysfs)

def write_zone(root, name, label, energy, max_range=1_000_000_000):
    d = root / "class" / "powercap" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")


def test_rapl_power_with_counter_wrap(tmp_path):
    write_zone(tmp_path, "intel-rapl:0", "package-0", 500_000_000)
    write_zone(tmp_path, "intel-rapl:1", "package-1", 999_000_000)
    write_zone(tmp_path, "intel-rapl:0:0", "core", 7)           # sub-zone: inside package-0
    write_zone(tmp_path, "intel-rapl:2", "psys", 7)             # platform: overlaps the packages
    rapl, problem = monitor.RaplPower.discover(str(tmp_path))
    assert problem is None and rapl.status["zones"] == ["package-0", "package-1"]
    assert rapl.read(100.0) is None                             # first read only primes
    write_zone(tmp_path, "intel-rapl:0", "package-0", 600_000_000)   # +100 J
    write_zone(tmp_path, "intel-rapl:1", "package-1", 49_000_000)    # wrapped: +1 J +49 J
    assert rapl.read(101.0) == {"power_w": 150.0}
    write_zone(tmp_path, "intel-rapl:0", "package-0", 625_000_000)   # +25 J in 0.5 s
    write_zone(tmp_path, "intel-rapl:1", "package-1", 49_000_000)
    assert rapl.read(101.5) == {"power_w": 50.0}


def test_power_discovery_fallbacks(tmp_path, monkeypatch):
    assert monitor.RaplPower.discover(str(tmp_path)) == (None, None)
    assert monitor.HwmonPower.discover(str(tmp_path)) is None
    h = tmp_path / "class" / "hwmon" / "hwmon3"
    h.mkdir(parents=True)
    (h / "power1_input").write_text("120500000\n")
    (h / "power1_average").write_text("999000000\n")            # same channel: _input wins
    (h / "power2_average").write_text("4500000\n")
    hw = monitor.HwmonPower.discover(str(tmp_path))
    assert hw.read(0.0) == {"power_w": 125.0}
    monkeypatch.setenv("FLAGPERF_SYSFS_ROOT", str(tmp_path))    # the env var selects the same root
    assert monitor.HwmonPower.discover().files == hw.files


def test_monitor_writes_rapl_power_from_env_root(tmp_path):
    write_zone(tmp_path / "sys", "intel-rapl:0", "package-0", 123)
    env = dict(os.environ, FLAGPERF_SYSFS_ROOT=str(tmp_path / "sys"))
    p = start_monitor(tmp_path / "out", "--interval", "0.1", "--gpu", "none", "--max-seconds", "0.5", env=env)
    assert p.wait(60) == 0
    st, problem = read_status(tmp_path / "out")
    assert problem is None
    assert st.sensors["pwr"].to_dict() == {"available": True, "source": "rapl", "zones": ["package-0"],
                                           "file": "pwr_monitor.log"}
    assert st.stop_reason == "max-seconds reached"
    lines = read_monitor_file(tmp_path / "out" / "pwr_monitor.log", strict=True)
    assert lines and all(v == {"power_w": 0.0} for _, v in lines)


# ---------------------------------------------------------------- NVML (fake pynvml)

def fake_pynvml():
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def not_supported(*a):
        raise NVMLError_NotSupported("Not Supported")

    nv.NVMLError, nv.NVMLError_NotSupported, nv.NVML_TEMPERATURE_GPU = NVMLError, NVMLError_NotSupported, 0
    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"Fake GPU"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nv.nvmlDeviceGetTemperature = lambda h, sensor: 40 + h
    nv.nvmlDeviceGetPowerUsage = lambda h: not_supported() if h == 1 else 120500
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1536 * 2**20, total=80 * 2**30, free=0)
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87, memory=10)
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 1, 2
    nv.nvmlDeviceGetClockInfo = lambda h, which: 1980 if which == 1 else 3201
    energy = {0: 1_000_000, 1: 2_000_000}

    def total_energy(h):        # mJ, counting up 700 J per call
        energy[h] += 700_000
        return energy[h]
    nv.nvmlDeviceGetTotalEnergyConsumption = total_energy
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4 if h == 0 else 0
    return nv


def test_nvml_gpu_lines_omit_unsupported_fields(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    log = monitor.Log(str(tmp_path / "monitor.log"))
    files, status = monitor.setup_sensors("nvml", "nvidia", log, root=str(tmp_path))
    gpu = status["gpu"].to_dict()
    assert (gpu["available"], gpu["source"], gpu["plugin"], gpu["vendor"]) == (True, "nvml", "nvml", "nvidia")
    assert gpu["count"] == 2 and gpu["devices"][0] == {"index": 0, "name": "Fake GPU", "uuid": "GPU-0"}
    assert files["gpu"][1] == "nvidia_monitor.log"
    mon = monitor.Monitor(str(tmp_path), {"gpu": files["gpu"]}, log)
    mon.tick()
    mon.tick()
    mon.close()
    lines = read_monitor_file(tmp_path / "nvidia_monitor.log", strict=True)
    more = {"sm_clock_mhz": 1980, "mem_clock_mhz": 3201}
    assert [v for _, v in lines[:2]] == [
        {"gpu": 0, "temp_c": 40, "power_w": 120.5, "mem_used_mib": 1536.0, "mem_total_mib": 81920.0, "util_pct": 87,
         **more, "energy_j": 1700.0, "throttle_mask": 4},
        {"gpu": 1, "temp_c": 41, "mem_used_mib": 1536.0, "mem_total_mib": 81920.0, "util_pct": 87,
         **more, "energy_j": 2700.0, "throttle_mask": 0}]
    assert len(lines) == 4
    assert "error" not in (tmp_path / "nvidia_monitor.log").read_text().lower()
    assert (tmp_path / "monitor.log").read_text().count("power not supported") == 1


# ---------------------------------------------------------------- the real monitor process

def nvml_usable():
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return False
    try:
        return pynvml.nvmlDeviceGetCount() > 0
    finally:
        pynvml.nvmlShutdown()


def host_power_expected():
    return bool(monitor.RaplPower.discover()[0] or monitor.HwmonPower.discover())


def test_monitor_process_sigterm(tmp_path):
    out = tmp_path / "node0"
    p = start_monitor(out, "--interval", "0.2", "--gpu", "nvml", "--run-id", "r42")
    assert wait_for(lambda: (out / "monitor_status.json").exists(), timeout=60), p.communicate(timeout=5)
    assert wait_for(lambda: lines_of(out / "cpu_monitor.log") >= 5, timeout=60), p.communicate(timeout=5)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(30)             # a hang catcher: how fast it stops is measured by bench/latency.py
    assert rc == 0, (rc, p.stderr.read())
    assert p.stdout.read() == b"" and p.stderr.read() == b""

    assert json.loads((out / "monitor_status.json").read_text())["schema"] == "flagperf.monitor-status/1"
    st, problem = read_status(out)
    assert problem is None and st.run_id == "r42" and st.pid == p.pid
    assert st.interval_s == 0.2 and TS_MS.match(st.started)
    sensors = st.sensors
    assert list(sensors) == ["cpu", "mem", "pwr", "gpu"]
    assert sensors["cpu"].available and sensors["mem"].available
    expected = {"pwr": host_power_expected(), "gpu": nvml_usable()}  # both False on the dev box
    for name, avail in expected.items():
        if avail:
            assert sensors[name].available is True, sensors[name]
        else:
            assert sensors[name].available is False and sensors[name].reason, sensors[name]
    assert sensors["gpu"].extra["vendor"] == "nvidia" and sensors["gpu"].extra.get("plugin") == "nvml"
    assert st.stop_reason == "signal SIGTERM" and st.samples >= 5

    data = sorted(out.glob("*_monitor.log"))
    assert [f.name for f in data] == sorted(["cpu_monitor.log", "mem_monitor.log"]
                                            + ["pwr_monitor.log"] * expected["pwr"]
                                            + ["nvidia_monitor.log"] * expected["gpu"])
    for f in data:
        text = f.read_text()
        assert not ERROR_WORDS.search(text), f
        lines = text.splitlines()
        assert len(lines) >= (4 if f.name == "pwr_monitor.log" else 5), f
        assert all(TS_MS.match(line.split()[0]) for line in lines)
        stamps = [ts for ts, _ in read_monitor_file(f, strict=True)]
        assert all(a < b for a, b in zip(stamps, stamps[1:]))
    cpu = read_monitor_file(out / "cpu_monitor.log")
    assert all(set(v) == {"util_pct", "load1"} and 0 <= v["util_pct"] <= 100 for _, v in cpu)
    mem = read_monitor_file(out / "mem_monitor.log")
    assert all(set(v) == {"used_mib", "available_mib", "total_mib", "used_pct"} for _, v in mem)
    assert all(isinstance(v["total_mib"], float) and 0 < v["used_mib"] < v["total_mib"] for _, v in mem)
    log = (out / "monitor.log").read_text()
    assert "started" in log and "stopped (signal SIGTERM)" in log
    s = summarize_monitors(out)
    assert {"cpu", "mem"} <= set(s) and set(s.get("unavailable", {})) == {k for k, v in expected.items() if not v}


def test_monitor_exits_when_parent_dies(tmp_path):
    out = tmp_path / "node0"
    parent = (
        "import subprocess, sys, os, time\n"
        f"p = subprocess.Popen([sys.executable, {str(MONITOR)!r}, '--out-dir', {str(out)!r},"
        " '--interval', '0.2', '--gpu', 'none'])\n"
        f"while not os.path.exists({str(out / 'monitor_status.json')!r}): time.sleep(0.01)\n"
        "print(p.pid, flush=True)\n")
    r = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60)
    pid = int(r.stdout)
    assert wait_for(lambda: pid_gone(pid), timeout=30), "monitor outlived its parent"
    assert "stopped (parent exited)" in (out / "monitor.log").read_text()
    assert read_status(out)[0].stop_reason == "parent exited"


def test_monitor_never_imports_flagperf():
    """The monitor and its plug-ins run on the hosts: flagperf_contract yes, the flagperf package never."""
    for path in [MONITOR, *sorted((ROOT / "monitors" / "accel").glob("*.py"))]:
        src = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+flagperf\b", src, re.M), path
    assert re.search(r"^from flagperf_contract import", MONITOR.read_text(), re.M)


# ---------------------------------------------------------------- accelerator plug-ins in the monitor

def test_gpu_takes_any_plugin_of_monitors_accel(tmp_path):
    assert monitor.accel_plugins() == ["cnmon", "npu_smi", "nvml"]
    r = subprocess.run([sys.executable, str(MONITOR), "--out-dir", str(tmp_path / "o"), "--gpu", "dcgm"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--gpu 'dcgm': expected none or an accelerator plug-in of" in r.stderr
    assert "(cnmon, npu_smi, nvml)" in r.stderr and not (tmp_path / "o").exists()
    r = subprocess.run([sys.executable, str(MONITOR), "--out-dir", str(tmp_path / "o"), "--gpu", "npu_smi",
                        "--vendor", "cpu"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--vendor 'cpu' cannot name a GPU file" in r.stderr


def test_fmt_keeps_plain_numbers_only():
    assert monitor.fmt({"temp_c": 40, "gpu": 3, "power_w": float("nan"), "util_pct": "87%", "ok": True,
                        "Bad": 1, "mem_used_mib": 1.5, "power2_w": float("inf")}) == "gpu=3 temp_c=40 mem_used_mib=1.5"


def test_a_failing_plugin_is_an_unavailable_sensor(tmp_path, monkeypatch):
    log = monitor.Log(str(tmp_path / "monitor.log"))
    _, status = monitor.setup_sensors("nvml_v2", "acme", log, root=str(tmp_path))
    assert status["gpu"].available is False and "no accelerator plug-in 'nvml_v2'" in status["gpu"].reason

    def broken_open(log):
        raise OSError("device handle lost")

    monkeypatch.setattr(monitor, "load_plugin", lambda name: (types.SimpleNamespace(open=broken_open), None))
    files, status = monitor.setup_sensors("cnmon", "cambricon", log, root=str(tmp_path))
    assert "gpu" not in files and status["gpu"].to_dict() == {
        "available": False, "reason": "plug-in cnmon failed to open: OSError: device handle lost",
        "plugin": "cnmon", "vendor": "cambricon"}


def test_monitor_samples_npus_through_npu_smi(tmp_path):
    """The real monitor process with --gpu npu_smi and a stand-in npu-smi that prints a recorded 910B output,
    then fails: the data file holds the NPU lines only, the failure goes to monitor.log."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    tool = bin_dir / "npu-smi"
    tool.write_text(f"#!/bin/sh\necho x >> '{calls}'\n"
                    f"[ $(wc -l < '{calls}') -le 4 ] && exec cat '{FIXTURES / 'npu_smi_910b.txt'}'\n"
                    "echo 'dcmi module initialize failed. ret is -8020' >&2; exit 1\n")
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/bin:/usr/bin")
    out = tmp_path / "node0"
    p = start_monitor(out, "--interval", "0.2", "--gpu", "npu_smi", "--vendor", "ascend", "--max-seconds", "3",
                      env=env)
    assert p.wait(60) == 0, p.stderr.read()
    st, problem = read_status(out)
    gpu = st.sensors["gpu"]
    assert problem is None and (gpu.available, gpu.source, gpu.file) == (True, "npu-smi", "ascend_monitor.log")
    assert gpu.extra["count"] == 8 and gpu.extra["plugin"] == "npu_smi" and gpu.extra["vendor"] == "ascend"
    assert gpu.extra["devices"][0] == {"index": 0, "name": "910B3", "health": "OK", "bus_id": "0000:C1:00.0"}
    text = (out / "ascend_monitor.log").read_text()
    assert not ERROR_WORDS.search(text)
    lines = read_monitor_file(out / "ascend_monitor.log", strict=True)
    assert len(lines) == 3 * 8                      # open() ran the tool once, then three samples
    assert [v["gpu"] for _, v in lines[:8]] == list(range(8))
    assert lines[0][1] == {"gpu": 0, "temp_c": 56, "power_w": 358.2, "mem_used_mib": 58321.0,
                           "mem_total_mib": 65536.0, "util_pct": 99}
    log = (out / "monitor.log").read_text()
    assert log.count("npu-smi: npu-smi info exited with status 1: dcmi module initialize failed") == 1
    s = summarize_monitors(out)
    assert s["gpu"]["vendor"] == "ascend" and len(s["gpu"]["devices"]) == 8
