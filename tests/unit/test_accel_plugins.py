"""Accelerator plug-ins (monitors/accel/) and the host probe's use of them (launcher/probe.py).

The CLI parsers are tested on recorded outputs of the vendors' tools (tests/unit/fixtures/accel/, written from
the outputs their documentation and public READMEs show); the plug-ins' count()/open()/read() run a stand-in
executable of the same name that prints such an output, found on PATH as the real tool would be.
"""
import ast
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from testbed.realparts import unavailable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from monitors.accel import _cli, cnmon, npu_smi, nvml  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "accel"
PROBE = ROOT / "launcher" / "probe.py"
DATA_KEYS = set(_cli.ROW_KEYS)


def fixture(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


class Log:
    """monitor.Log's interface: __call__ and once()."""

    def __init__(self):
        self.lines = []

    def __call__(self, msg):
        self.lines.append(msg)

    def once(self, msg):
        if msg not in self.lines:
            self.lines.append(msg)


def fake_tool(folder, name, script):
    """An executable ``name`` in ``folder`` running the sh ``script``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return folder


def printing(folder, name, fixture_name, argv1=None):
    """A stand-in for the vendor tool that prints a recorded output (only for ``argv1`` when given)."""
    guard = f'[ "$1" = "{argv1}" ] || {{ echo "usage: {name} {argv1}" >&2; exit 2; }}\n' if argv1 else ""
    return fake_tool(folder, name, guard + f"cat '{FIXTURES / fixture_name}'\n")


@pytest.fixture
def tool_path(tmp_path, monkeypatch):
    """PATH holds only tmp_path/bin (plus the shell's folders), and the plug-ins' extra folders are cleared, so
    that a real npu-smi/cnmon on this machine cannot answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/bin:/usr/bin")     # the stand-ins need sh, cat, sleep, wc
    for tool in ("npu-smi", "cnmon"):
        if shutil.which(tool):
            unavailable(f"this machine has a real {tool} in /bin or /usr/bin, which the stand-ins cannot shadow")
    monkeypatch.setattr(npu_smi, "EXTRA_DIRS", ())
    monkeypatch.setattr(cnmon, "EXTRA_DIRS", ())
    return bin_dir


# ---------------------------------------------------------------- npu-smi parser

def test_npu_smi_910b_eight_npus():
    devices, error = npu_smi.parse(fixture("npu_smi_910b.txt"))
    assert error is None and [d["gpu"] for d in devices] == list(range(8))
    assert devices[0] == {"gpu": 0, "name": "910B3", "health": "OK", "bus_id": "0000:C1:00.0", "util_pct": 99,
                          "mem_used_mib": 58321.0, "mem_total_mib": 65536.0, "power_w": 358.2, "temp_c": 56}
    idle = devices[4]       # Memory-Usage is 0 / 0 on a 910B: the device memory is HBM-Usage
    assert (idle["util_pct"], idle["mem_used_mib"], idle["mem_total_mib"], idle["power_w"]) == (0, 3406.0, 65536.0,
                                                                                              95.3)


def test_npu_smi_a3_chips_by_phy_id():
    devices, error = npu_smi.parse(fixture("npu_smi_a3.txt"))
    assert error is None and [d["gpu"] for d in devices] == [0, 1, 2, 3]   # Phy-ID, not NPU 0/1 twice
    assert [d["power_w"] for d in devices] == [211.3, None, 210.6, None]   # the second chip shows "-"
    assert [d["temp_c"] for d in devices] == [43, 44, 45, 46]
    assert devices[3]["health"] == "Warning" and devices[3]["mem_used_mib"] == 61590.0
    assert _cli.data_row(devices[1]) == {"gpu": 1, "temp_c": 44, "mem_used_mib": 61625.0, "mem_total_mib": 65536.0,
                                         "util_pct": 7}


def test_npu_smi_310p_without_hbm():
    devices, error = npu_smi.parse(fixture("npu_smi_310p.txt"))
    assert error is None and [d["gpu"] for d in devices] == [0, 1]          # the Device column
    assert (devices[0]["mem_used_mib"], devices[0]["mem_total_mib"], devices[0]["power_w"]) == (1074.0, 21534.0, 15.8)
    assert devices[1]["power_w"] is None and devices[1]["util_pct"] == 23   # Power NA: left out of its row
    assert "power_w" not in _cli.data_row(devices[1])


# ---------------------------------------------------------------- cnmon parser

def test_cnmon_mlu370():
    devices, error = cnmon.parse(fixture("cnmon_mlu370.txt"))
    assert error is None
    assert devices == [
        {"gpu": 0, "name": "MLU370-X8", "bus_id": "0000:13:00.0", "util_pct": 87, "temp_c": 46, "power_w": 187,
         "mem_used_mib": 18214.0, "mem_total_mib": 20638.0},
        {"gpu": 1, "name": "MLU370-X8", "bus_id": "0000:16:00.0", "util_pct": 85, "temp_c": 49, "power_w": 191,
         "mem_used_mib": 18198.0, "mem_total_mib": 20638.0}]


def test_cnmon_mlu590_and_old_layout():
    devices, error = cnmon.parse(fixture("cnmon_mlu590.txt"))
    assert error is None and [d["gpu"] for d in devices] == [0, 1, 2, 3]
    assert {d["mem_total_mib"] for d in devices} == {81920.0} and devices[2]["power_w"] == 104
    devices, error = cnmon.parse(fixture("cnmon_v4.txt"))      # cnmon 4.x: "Inited Driver" instead of a bus id
    assert error is None and [d["bus_id"] for d in devices] == [None, None]
    assert _cli.data_row(devices[1]) == {"gpu": 1, "mem_used_mib": 0.0, "mem_total_mib": 23308.0}   # N/A: left out


# ---------------------------------------------------------------- unreadable output: a clean reason, never a raise

BAD = [
    pytest.param(npu_smi, "", "printed nothing", id="npu-empty"),
    pytest.param(npu_smi, "  \n\n", "printed nothing", id="npu-blank"),
    pytest.param(npu_smi, None, "printed nothing", id="npu-none"),
    pytest.param(npu_smi, fixture("npu_smi_no_driver.txt"), "dcmi module initialize failed", id="npu-no-driver"),
    pytest.param(npu_smi, fixture("npu_smi_truncated.txt"), "no chip row for NPU 3", id="npu-truncated"),
    pytest.param(npu_smi, fixture("cnmon_mlu370.txt"), "no NPU table", id="npu-given-cnmon"),
    pytest.param(cnmon, "", "printed nothing", id="cnmon-empty"),
    pytest.param(cnmon, fixture("cnmon_no_driver.txt"), "cndevInit failed", id="cnmon-no-driver"),
    pytest.param(cnmon, fixture("cnmon_truncated.txt"), "no usage row for card 2", id="cnmon-truncated"),
    pytest.param(cnmon, fixture("npu_smi_910b.txt"), "no card table", id="cnmon-given-npu-smi"),
]


@pytest.mark.parametrize("plugin, text, words", BAD)
def test_unreadable_output_is_a_one_line_reason(plugin, text, words):
    devices, error = plugin.parse(text)
    assert devices == [] and words in error and "\n" not in error


def test_header_without_devices_is_no_device_not_an_error():
    head = "\n".join(fixture("npu_smi_910b.txt").splitlines()[:6])
    assert npu_smi.parse(head) == ([], None)
    head = "\n".join(fixture("cnmon_mlu590.txt").splitlines()[:7])
    assert cnmon.parse(head) == ([], None)


@pytest.mark.parametrize("plugin, name", [(npu_smi, "npu_smi_910b.txt"), (npu_smi, "npu_smi_a3.txt"),
                                          (npu_smi, "npu_smi_310p.txt"), (cnmon, "cnmon_mlu370.txt"),
                                          (cnmon, "cnmon_v4.txt")])
def test_garbled_output_never_raises(plugin, name):
    """Every cut of a recorded output, and every line of it garbled, gives a result or a reason, no exception;
    whatever parses holds only plain numbers in its data fields."""
    text = fixture(name)
    lines = text.splitlines()
    variants = [text[:i] for i in range(0, len(text), 7)]
    for i in range(len(lines)):
        for junk in ("| x | y |", "|", "| 0 | NA | NA / NA |", lines[i].replace("0", "\x00").replace("/", "||"),
                     lines[i][: len(lines[i]) // 2]):
            variants.append("\n".join(lines[:i] + [junk] + lines[i + 1:]))
    for variant in variants:
        devices, error = plugin.parse(variant)
        assert isinstance(devices, list) and (error is None or (isinstance(error, str) and devices == []))
        for d in devices:
            row = _cli.data_row(d)
            assert set(row) <= DATA_KEYS and all(isinstance(v, (int, float)) for v in row.values())


# ---------------------------------------------------------------- the tools run for real (stand-ins on PATH)

def test_count_and_sample_through_the_tool(tool_path):
    printing(tool_path, "npu-smi", "npu_smi_a3.txt", argv1="info")
    printing(tool_path, "cnmon", "cnmon_mlu370.txt")
    assert npu_smi.count() == (4, None) and cnmon.count() == (2, None)
    log = Log()
    sampler, reason = npu_smi.open(log)
    assert reason is None and sampler.status["source"] == "npu-smi" and sampler.status["count"] == 4
    assert sampler.status["devices"][1] == {"index": 1, "name": "Ascend910", "health": "OK", "bus_id": "0000:9F:00.0"}
    rows = sampler.read(0.0)
    assert [r["gpu"] for r in rows] == [0, 1, 2, 3] and all(list(r)[0] == "gpu" for r in rows)
    assert rows[0] == {"gpu": 0, "temp_c": 43, "power_w": 211.3, "mem_used_mib": 61609.0, "mem_total_mib": 65536.0,
                       "util_pct": 7}
    sampler.close()
    assert log.lines == []


def test_tool_missing_failing_or_garbled(tool_path, tmp_path):
    assert npu_smi.count() == (0, "npu-smi not found (looked on PATH)")
    assert npu_smi.open(Log())[0] is None
    fake_tool(tool_path, "npu-smi", "echo 'dcmi module initialize failed. ret is -8005' >&2\nexit 255\n")
    count, error = npu_smi.count()
    assert count == 0 and error == "npu-smi info exited with status 255: dcmi module initialize failed. ret is -8005"
    fake_tool(tool_path, "cnmon", "echo 'Error: cndevInit failed'\n")     # exit 0, no table
    assert cnmon.count() == (0, "no card table in cnmon output (it begins: 'Error: cndevInit failed')")
    printing(tool_path, "cnmon", "cnmon_mlu590.txt")
    head = tmp_path / "head.txt"
    head.write_text("\n".join(fixture("cnmon_mlu590.txt").splitlines()[:7]) + "\n")
    fake_tool(tool_path, "cnmon", f"cat '{head}'\n")
    assert cnmon.open(Log()) == (None, "cnmon lists no MLU")


def test_sampler_logs_a_failing_tool_once_and_writes_no_row(tool_path, tmp_path):
    state = tmp_path / "calls"
    fake_tool(tool_path, "cnmon", f"echo x >> '{state}'\n"
                                  f"[ $(wc -l < '{state}') -le 2 ] && exec cat '{FIXTURES / 'cnmon_mlu370.txt'}'\n"
                                  "echo 'cnmon: device busy' >&2; exit 3\n")
    log = Log()
    sampler, reason = cnmon.open(log)             # call 1
    assert reason is None
    assert len(sampler.read(1.0)) == 2            # call 2
    assert sampler.read(2.0) == [] and sampler.read(3.0) == []
    assert log.lines == ["cnmon: cnmon exited with status 3: cnmon: device busy"]


def test_run_tool_timeout_and_argv_without_shell(tool_path, tmp_path):
    fake_tool(tool_path, "slowtool", "sleep 5\n")
    text, error = _cli.run_tool(["slowtool"], timeout=0.3)
    assert text is None and error == "slowtool did not finish within 0.3 s"
    fake_tool(tool_path, "echoargs", 'for a in "$@"; do echo "[$a]"; done\n')
    assert _cli.run_tool(["echoargs", "a b", "$(id)", ";x"]) == ("[a b]\n[$(id)]\n[;x]\n", None)
    extra = tmp_path / "vendor_tools"
    fake_tool(extra, "hidden-tool", "echo found\n")
    assert _cli.run_tool(["hidden-tool"]) == (None, "hidden-tool not found (looked on PATH)")
    assert _cli.run_tool(["hidden-tool"], extra_dirs=(str(extra),)) == ("found\n", None)


# ---------------------------------------------------------------- nvml

def fake_pynvml(count=2, init_error=False):
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init():
        if init_error:
            raise NVMLError("Driver Not Loaded")

    nv.NVMLError = NVMLError
    nv.nvmlInit, nv.nvmlShutdown = init, lambda: None
    nv.nvmlDeviceGetCount = lambda: count
    return nv


def test_nvml_count(tmp_path, monkeypatch):
    pattern = str(tmp_path / "nvidia[0-9]*")
    monkeypatch.setitem(sys.modules, "pynvml", None)            # importing it would fail: not needed
    assert nvml.count(pattern) == (0, None)                      # no device files: NVML is not loaded
    for i in range(3):
        (tmp_path / f"nvidia{i}").write_text("")
    (tmp_path / "nvidiactl").write_text("")
    assert nvml.count(pattern) == (3, None)                      # no pynvml: the device files
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=2))
    assert nvml.count(pattern) == (2, None)                      # NVML's count wins
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=True))
    assert nvml.count(pattern) == (3, None)


def test_every_plugin_has_the_interface():
    plugins = sorted(p.stem for p in (ROOT / "monitors" / "accel").glob("*.py") if not p.stem.startswith("_"))
    assert plugins == ["cnmon", "npu_smi", "nvml"]
    for module in (cnmon, npu_smi, nvml):
        assert isinstance(module.SOURCE, str) and callable(module.count) and callable(module.open)
    for module in (cnmon, npu_smi):
        assert callable(module.parse) and isinstance(module.ARGV, tuple)


# ---------------------------------------------------------------- the probe

def run_probe(*args, env=None):
    """launcher/probe.py as the driver runs it: ``python -c <source> ...`` (no __file__)."""
    r = subprocess.run([sys.executable, "-c", PROBE.read_text(), *args], capture_output=True, text=True,
                       timeout=60, env=env, cwd="/")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return json.loads(r.stdout)


def test_probe_counts_with_the_plugin_and_finds_the_torch_plugin(tool_path):
    printing(tool_path, "npu-smi", "npu_smi_910b.txt", argv1="info")
    env = dict(os.environ)
    info = run_probe("--flagperf-path", str(ROOT), "--accel", "npu_smi", "--torch-plugin", "json", env=env)
    assert info["accelerators"] == {"source": "npu_smi", "count": 8, "error": None}
    assert (info["gpus"], info["gpus_from"]) == (8, "npu_smi")
    assert info["torch_plugin"] == {"module": "json", "found": True, "error": None}
    info = run_probe("--flagperf-path", str(ROOT), "--accel", "none", "--torch-plugin", "torch_no_such_plugin")
    assert info["accelerators"] == {"source": "none", "count": 0, "error": None} and info["gpus"] == 0
    assert info["torch_plugin"] == {"module": "torch_no_such_plugin", "found": False,
                                    "error": "No module named 'torch_no_such_plugin'"}


def test_probe_reports_what_cannot_count(tool_path, tmp_path):
    env = dict(os.environ)
    info = run_probe("--flagperf-path", str(ROOT), "--accel", "cnmon", env=env)
    assert info["accelerators"]["count"] == 0 and "cnmon not found" in info["accelerators"]["error"]
    assert info["torch_plugin"] == {"module": None, "found": False, "error": None}
    info = run_probe("--flagperf-path", str(tmp_path), "--accel", "cnmon")
    assert info["accelerators"]["error"] == f"no accelerator plug-in {tmp_path}/monitors/accel/cnmon.py"
    assert run_probe("--accel", "../nvml")["accelerators"]["error"] == "'../nvml' is not an accelerator plug-in name"
    broken = tmp_path / "tree" / "monitors" / "accel"
    broken.mkdir(parents=True)
    (broken / "bad.py").write_text("def count():\n    raise RuntimeError('no device handle')\n")
    info = run_probe("--flagperf-path", str(tmp_path / "tree"), "--accel", "bad")
    assert info["accelerators"] == {"source": "bad", "count": 0,
                                    "error": "plug-in bad failed: RuntimeError: no device handle"}


def test_probe_without_arguments_still_counts_nvidia_gpus():
    info = run_probe()          # an older driver: no --accel, the nvml count as before
    assert info["accelerators"]["source"] == "nvml" and info["gpus"] == info["accelerators"]["count"]
    assert info["accelerators"]["count"] == nvml.count()[0]


def test_probe_stays_old_python_friendly():
    """No f-strings (an old interpreter must report its version, not a SyntaxError) and no torch import."""
    tree = ast.parse(PROBE.read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in getattr(n, "names", [])} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "torch" not in imported and "torch_npu" not in imported
