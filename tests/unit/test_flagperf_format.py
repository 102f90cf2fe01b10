"""FlagPerf's monitor files (monitors/flagperf_format.py, MONITOR_FORMAT: flagperf) and sys_info.log from the
monitor, read back with FlagPerf's own reading rules (tests/unit/flagperf_format_readers.py).

The accelerator files are made from what the plug-ins read: a stand-in pynvml module, and stand-in npu-smi, cnmon
and ipmitool executables printing recorded outputs (tests/unit/fixtures/accel/), as in test_accel_plugins.py."""
import math
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from testbed.realparts import unavailable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from flagperf.results.monitors import read_monitor_file, read_status  # noqa: E402
from monitors import flagperf_format as ff  # noqa: E402
from monitors.accel import _cli, cnmon, npu_smi  # noqa: E402

from .flagperf_format_readers import accel_stamps, read_accel_file, read_host_file  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "accel"
MONITOR = ROOT / "monitors" / "monitor.py"
WHEN = datetime(2026, 11, 22, 10, 0, 5)

FAKE_PYNVML = '''
"""A stand-in for pynvml: two H200s with fixed readings; GPU 1 reports no power when NO_POWER_GPU1 is set."""
import os


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
MIB = 1024 * 1024


class _Mem:
    def __init__(self, h):
        self.used, self.total = (3 + 1000 * h) * MIB, 143771 * MIB


class _Util:
    def __init__(self, h):
        self.gpu = 7 * h


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 2


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return "NVIDIA H200"


def nvmlDeviceGetUUID(h):
    return "GPU-%d" % h


def nvmlSystemGetDriverVersion():
    return "560.35.03"


def nvmlSystemGetCudaDriverVersion():
    return 12060


def nvmlDeviceGetTemperature(h, sensor):
    return 34 + h


def nvmlDeviceGetPowerUsage(h):
    if h == 1 and os.environ.get("NO_POWER_GPU1"):
        raise NVMLError_NotSupported("Not Supported")
    return 62400 + 10000 * h


def nvmlDeviceGetMemoryInfo(h):
    return _Mem(h)


def nvmlDeviceGetUtilizationRates(h):
    return _Util(h)


def nvmlDeviceGetClockInfo(h, clock):
    return 1980


def nvmlDeviceGetTotalEnergyConsumption(h):
    raise NVMLError_NotSupported("Not Supported")


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return 0
'''

DCMI = """
    Instantaneous power reading:                   412 Watts
    Minimum during sampling period:                 98 Watts
    Maximum during sampling period:                655 Watts
    Average power reading over sample period:      401 Watts
    IPMI timestamp:                           Sat Nov 22 10:00:05 2026
    Sampling period:                          00000005 Seconds.
    Power reading state is:                   activated
"""
SDR = """Inlet Temp       | 24 degrees C      | ok
PSU1_PIN         | 220 Watts         | ok
PSU2_PIN         | 230 Watts         | ok
Total_Power      | 450 Watts         | ok
Fan1             | 6240 RPM          | ok
"""


class Log:
    def __init__(self):
        self.lines = []

    def __call__(self, msg):
        self.lines.append(msg)

    def once(self, msg):
        if msg not in self.lines:
            self.lines.append(msg)


def fake_tool(folder, name, script):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A PATH of tmp_path/bin plus the shell's folders; ipmitool's and the vendor tools' extra folders cleared,
    so that only the stand-ins can answer."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("ipmitool", "npu-smi", "cnmon"):
        if shutil.which(tool, path="/bin:/usr/bin"):
            unavailable(f"this machine has a real {tool} in /bin or /usr/bin, which the stand-ins cannot shadow")
    monkeypatch.setenv("PATH", f"{folder}:/bin:/usr/bin")
    monkeypatch.setattr(ff, "IPMI_DIRS", ())
    return folder


# ---------------------------------------------------------------- line formats, read by FlagPerf's rules

def test_host_lines_are_tab_separated_fractions(tmp_path):
    assert ff.cpu_line(WHEN, {"util_pct": 37.5, "load1": 1.0}) == "2026-11-22-10:00:05\t0.375\n"
    assert ff.cpu_line(WHEN, {"util_pct": 0.0}) == "2026-11-22-10:00:05\t0\n"
    assert ff.cpu_line(WHEN, {"util_pct": 100.0}) == "2026-11-22-10:00:05\t1\n"
    assert ff.cpu_line(WHEN, {"load1": 1.0}) is None
    assert ff.mem_line(WHEN, {"used_mib": 10240.0, "total_mib": 40960.0}) == "2026-11-22-10:00:05\t0.25\n"
    assert ff.mem_line(WHEN, {"used_mib": 1.0, "total_mib": 0.0}) is None
    path = tmp_path / "cpu_monitor.log"
    path.write_text("".join(ff.cpu_line(WHEN, {"util_pct": p}) for p in (0.01, 12.345, 99.99)))
    assert [v for _, v in read_host_file(path)] == [0.0001, 0.1235, 0.9999]


def nvidia_rows():
    return [{"gpu": 1, "temp_c": 35, "power_w": 72.4, "mem_used_mib": 1003.0, "mem_total_mib": 143771.0,
             "util_pct": 7, "sm_clock_mhz": 1980},
            {"gpu": 0, "temp_c": 34, "power_w": 62.4, "mem_used_mib": 3.0, "mem_total_mib": 143771.0,
             "util_pct": 0, "energy_j": 1.5}]


def test_nvidia_smi_layout(tmp_path):
    text, why = ff.accel_block("nvidia-smi", WHEN, nvidia_rows())
    assert why is None
    assert text == ("2026-11-22-10:00:05\n34C 62W 3MiB 143771MiB 0%\n35C 72W 1003MiB 143771MiB 7%\n\n")
    path = tmp_path / "nvidia_monitor.log"
    path.write_text(text * 3)
    got = read_accel_file(path, "nvidia", 2)
    assert got["temp"] == {0: [34.0] * 3, 1: [35.0] * 3} and got["power"] == {0: [62.0] * 3, 1: [72.0] * 3}
    assert got["mem"] == {0: [3.0] * 3, 1: [1003.0] * 3} and got["max_mem"] == 143771.0
    assert accel_stamps(path) == [WHEN] * 3


def test_missing_utilisation_is_na_and_a_missing_reading_skips_the_sample():
    rows = nvidia_rows()
    del rows[0]["util_pct"]
    text, why = ff.accel_block("nvidia-smi", WHEN, rows)
    assert why is None and "35C 72W 1003MiB 143771MiB N/A\n" in text
    del rows[0]["power_w"]
    assert ff.accel_block("nvidia-smi", WHEN, rows) == (None, "accelerator 1 has no power_w")
    assert ff.accel_block("nvidia-smi", WHEN, []) == (None, None)


def rows_of(plugin, fixture):
    devices, error = plugin.parse((FIXTURES / fixture).read_text())
    assert error is None
    return [_cli.data_row(d) for d in devices]


def test_ascend_layout_from_a_recorded_npu_smi(tmp_path):
    rows = rows_of(npu_smi, "npu_smi_910b.txt")
    text, why = ff.accel_block("npu-smi", WHEN, rows)
    assert why is None
    lines = text.splitlines()
    assert lines[0] == "2026-11-22-10:00:05" and lines[1] == "358.2 56 99 58321" and lines[-1] == ""
    path = tmp_path / "ascend_monitor.log"
    path.write_text(text * 2)
    got = read_accel_file(path, "ascend", 8)
    assert got["power"][0] == [358.2, 358.2] and got["temp"][4] == [39.0, 39.0]
    assert got["mem"][7] == [3427, 3427]
    assert [len(v) for v in got["mem"].values()] == [2] * 8


def test_cambricon_layout_from_a_recorded_cnmon(tmp_path):
    rows = rows_of(cnmon, "cnmon_mlu370.txt")
    text, why = ff.accel_block("cnmon", WHEN, rows)
    assert why is None
    assert text.splitlines()[1:3] == ["46C 187 W/ 18214 MiB/ 20638 87%", "49C 191 W/ 18198 MiB/ 20638 85%"]
    path = tmp_path / "cambricon_monitor.log"
    path.write_text(text)
    got = read_accel_file(path, "cambricon", 2)
    assert got["temp"] == {0: [46.0], 1: [49.0]} and got["power"] == {0: [187.0], 1: [191.0]}
    assert got["mem"] == {0: [18214.0], 1: [18198.0]} and got["max_mem"] == 20638.0


def test_layout_follows_the_vendor():
    assert [ff.layout_of(v) for v in ("nvidia", "ascend", "cambricon", "kunlunxin", "acme")] == \
        ["nvidia-smi", "npu-smi", "cnmon", "nvidia-smi", "nvidia-smi"]


# ---------------------------------------------------------------- ipmitool

def test_ipmitool_outputs():
    assert ff.parse_ipmi_dcmi(DCMI) == 412.0
    assert ff.parse_ipmi_dcmi("Error: no DCMI support\n") is None
    assert ff.parse_ipmi_sdr(SDR) == 450.0                   # the largest Watts sensor, as FlagPerf takes it
    assert ff.parse_ipmi_sdr("Fan1 | 6240 RPM | ok\n") is None


def no_reading(path):
    """Whether the FlagPerf power file holds just FlagPerf's empty value (one line, read as nan)."""
    values = read_host_file(path)
    return len(values) == 1 and math.isnan(values[0][1]) and path.read_text().endswith("\tnan\n")


def run_ipmi(tmp_path, seconds=0.3):
    path = tmp_path / "pwr_monitor.log"
    log = Log()
    ipmi = ff.IpmiPower(str(path), 0.05, log).start()
    ipmi.interval = 0.05                   # the real floor is IPMI_MIN_INTERVAL_S; a test cannot wait 5 s a line
    time.sleep(seconds)
    t = time.monotonic()
    ipmi.stop()
    return ipmi, path, log, time.monotonic() - t


def test_ipmi_power_dcmi_then_sdr_then_none(tmp_path, bin_dir):
    (tmp_path / "dcmi.txt").write_text(DCMI)
    (tmp_path / "sdr.txt").write_text(SDR)
    tool = fake_tool(bin_dir, "ipmitool", f'[ "$1" = dcmi ] && exec cat "{tmp_path}/dcmi.txt"\n'
                                          f'[ "$1" = sdr ] && exec cat "{tmp_path}/sdr.txt"\nexit 1\n')
    ipmi, path, log, stop_s = run_ipmi(tmp_path)
    assert ipmi.source == "ipmitool dcmi power reading" and ipmi.reason is None and stop_s < 30     # no hang
    values = read_host_file(path)
    assert len(values) >= 2 and {v for _, v in values} == {412.0}
    assert ipmi.status() == {"flagperf_file": "pwr_monitor.log", "flagperf_source": "ipmitool dcmi power reading"}

    (tmp_path / "dcmi.txt").write_text("")                     # no DCMI answer: the SDR's largest Watts sensor
    ipmi, path, log, _ = run_ipmi(tmp_path)
    assert ipmi.source == "ipmitool sdr list" and {v for _, v in read_host_file(path)} == {450.0}

    tool.write_text("#!/bin/sh\necho 'Could not open device at /dev/ipmi0: No such file or directory' >&2\nexit 1\n")
    path.unlink()
    ipmi, path, log, _ = run_ipmi(tmp_path)
    assert ipmi.source is None and no_reading(path)            # FlagPerf's empty value, once, never a number
    assert ipmi.reason == ("ipmitool dcmi power reading exited with status 1: Could not open device at /dev/ipmi0: "
                           "No such file or directory; ipmitool sdr list exited with status 1: Could not open device "
                           "at /dev/ipmi0: No such file or directory")
    tool.unlink()
    ipmi, path, log, _ = run_ipmi(tmp_path, 0.1)
    assert ipmi.reason == "ipmitool not found (looked on PATH)" and no_reading(path)
    assert ipmi.status() == {"flagperf_file": "pwr_monitor.log", "flagperf_reason": ipmi.reason}


def test_ipmi_stop_kills_a_hanging_ipmitool(tmp_path, bin_dir):
    fake_tool(bin_dir, "ipmitool", "exec sleep 30\n")
    ipmi, path, log, stop_s = run_ipmi(tmp_path, 0.2)
    # stop() kills ipmitool: the thread ends long before IPMI_TIMEOUT_S (and the tool's 30 s); how fast is
    # measured by bench/latency.py
    ipmi.thread.join(ff.IPMI_TIMEOUT_S / 2)
    assert not ipmi.thread.is_alive() and stop_s < ff.IPMI_TIMEOUT_S and no_reading(path)
    assert ipmi.status() == {"flagperf_file": "pwr_monitor.log",
                             "flagperf_reason": "the monitor stopped before ipmitool answered"}


# ---------------------------------------------------------------- the monitor process

def start_monitor(out, *extra, env=None):
    return subprocess.Popen([sys.executable, str(MONITOR), "--out-dir", str(out), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_monitor_writes_flagperf_files_from_nvml_and_ipmitool(tmp_path, bin_dir):
    """The real monitor process, --format flagperf, a stand-in pynvml with two GPUs and a stand-in ipmitool."""
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "pynvml.py").write_text(FAKE_PYNVML)
    (tmp_path / "dcmi.txt").write_text(DCMI)
    fake_tool(bin_dir, "ipmitool", f'[ "$1" = dcmi ] && exec cat "{tmp_path}/dcmi.txt"\nexit 1\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "py"))
    out = tmp_path / "node0"
    p = start_monitor(out, "--interval", "0.2", "--gpu", "nvml", "--vendor", "nvidia", "--format", "flagperf",
                      "--max-seconds", "2", env=env)
    assert p.wait(15) == 0, p.communicate()
    fp, own = out, out / "flagperf"            # FlagPerf's files where FlagPerf has them; flagperf's aside
    assert sorted(f.name for f in fp.glob("*_monitor.log")) == ["cpu_monitor.log", "mem_monitor.log",
                                                                "nvidia_monitor.log", "pwr_monitor.log"]
    assert sorted(f.name for f in own.iterdir()) == ["cpu_monitor.log", "mem_monitor.log", "nvidia_monitor.log"]
    # The same samples as the native files, FlagPerf's timestamps to the second.
    for sensor in ("cpu", "mem"):
        native = read_monitor_file(own / f"{sensor}_monitor.log", strict=True)
        theirs = read_host_file(fp / f"{sensor}_monitor.log")
        assert len(theirs) == len(native) >= 8, sensor
        assert all(0 <= v <= 1 for _, v in theirs)
        assert [t for t, _ in theirs] == [ts.astimezone().replace(tzinfo=None, microsecond=0) for ts, _ in native]
    native_mem = read_monitor_file(own / "mem_monitor.log")
    assert abs(read_host_file(fp / "mem_monitor.log")[0][1]
               - native_mem[0][1]["used_mib"] / native_mem[0][1]["total_mib"]) <= 0.0001
    gpu = read_accel_file(fp / "nvidia_monitor.log", "nvidia", 2)
    samples = len(read_monitor_file(own / "nvidia_monitor.log")) // 2
    assert samples >= 8 and gpu["temp"] == {0: [34.0] * samples, 1: [35.0] * samples}
    assert gpu["power"] == {0: [62.0] * samples, 1: [72.0] * samples} and gpu["max_mem"] == 143771.0
    assert len(accel_stamps(fp / "nvidia_monitor.log")) == samples
    assert "\n\n" in (fp / "nvidia_monitor.log").read_text()        # a blank line after each sample, as FlagPerf
    pwr = read_host_file(fp / "pwr_monitor.log")
    assert pwr and {v for _, v in pwr} == {412.0}

    st, problem = read_status(out)
    assert problem is None
    assert st.sensors["cpu"].extra["flagperf_file"] == "cpu_monitor.log"
    assert st.sensors["gpu"].extra["flagperf_file"] == "nvidia_monitor.log"
    assert st.sensors["cpu"].file == "flagperf/cpu_monitor.log"
    assert st.sensors["gpu"].file == "flagperf/nvidia_monitor.log"
    assert st.sensors["gpu"].extra["driver_version"] == "560.35.03"
    assert st.sensors["pwr"].extra["flagperf_source"] == "ipmitool dcmi power reading"
    info = dict(line.split(": ", 1) for line in (out / "sys_info.log").read_text().splitlines())
    assert info["accelerators"] == "2 x NVIDIA H200" and info["accelerator_count"] == "2"
    assert info["accelerator_driver"] == "560.35.03" and info["accelerator_runtime"] == "CUDA 12.6"


def test_a_gpu_without_power_leaves_flagperfs_gpu_file_without_samples_and_says_so(tmp_path, bin_dir):
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "pynvml.py").write_text(FAKE_PYNVML)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "py"), NO_POWER_GPU1="1")
    out = tmp_path / "node0"
    p = start_monitor(out, "--interval", "0.2", "--gpu", "nvml", "--format", "flagperf", "--max-seconds", "1",
                      env=env)
    assert p.wait(15) == 0, p.communicate()
    assert read_monitor_file(out / "flagperf" / "nvidia_monitor.log", strict=True)   # the native file has its lines
    assert (out / "nvidia_monitor.log").read_text() == ""
    log = (out / "monitor.log").read_text()
    assert log.count("flagperf format: accelerator 1 has no power_w left out of nvidia_monitor.log") == 1
    assert "flagperf format: no power reading in pwr_monitor.log (nan): ipmitool not found" in log
    st, _ = read_status(out)
    assert st.sensors["pwr"].extra["flagperf_reason"].startswith("ipmitool not found")
    assert st.sensors["pwr"].extra["flagperf_file"] == "pwr_monitor.log" and no_reading(out / "pwr_monitor.log")


def test_monitor_writes_ascend_files_from_npu_smi(tmp_path, bin_dir):
    fake_tool(bin_dir, "npu-smi", f"exec cat '{FIXTURES / 'npu_smi_910b.txt'}'\n")
    out = tmp_path / "node0"
    p = start_monitor(out, "--interval", "0.2", "--gpu", "npu_smi", "--vendor", "ascend", "--format", "flagperf",
                      "--max-seconds", "1.5")
    assert p.wait(15) == 0, p.communicate()
    got = read_accel_file(out / "ascend_monitor.log", "ascend", 8)
    samples = len(accel_stamps(out / "ascend_monitor.log"))
    assert samples >= 3 and got["power"][0] == [358.2] * samples and got["mem"][1] == [58290] * samples
    info = dict(line.split(": ", 1) for line in (out / "sys_info.log").read_text().splitlines())
    assert info["accelerators"] == "8 x 910B3" and info["accelerator_driver"] == "24.1.rc2"
    assert info["accelerator_runtime"] == "unknown" and info["accelerator_plugin"] == "npu_smi"


def test_native_format_writes_no_flagperf_files_but_sys_info(tmp_path):
    out = tmp_path / "node0"
    p = start_monitor(out, "--interval", "0.2", "--gpu", "none", "--vendor", "cpu", "--max-seconds", "0.5")
    assert p.wait(15) == 0, p.communicate()
    assert not (out / "flagperf").exists()
    assert read_monitor_file(out / "cpu_monitor.log", strict=True)     # native: flagperf's files where they were
    st, _ = read_status(out)
    assert st.sensors["cpu"].file == "cpu_monitor.log"
    assert all(not any(k.startswith("flagperf_") for k in s.extra) for s in st.sensors.values())
    info = dict(line.split(": ", 1) for line in (out / "sys_info.log").read_text().splitlines())
    assert info["accelerator_plugin"] == "none" and info["accelerators"] == "none"


def test_format_is_checked(tmp_path):
    r = subprocess.run([sys.executable, str(MONITOR), "--out-dir", str(tmp_path / "o"), "--format", "csv"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "invalid choice: 'csv'" in r.stderr and "Traceback" not in r.stderr


def test_host_side_modules_never_import_flagperf():
    for path in (ROOT / "monitors" / "flagperf_format.py", ROOT / "monitors" / "sysinfo.py"):
        assert not re.search(r"^\s*(import|from)\s+flagperf\b", path.read_text(), re.M), path
