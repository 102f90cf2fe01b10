"""sys_info.log (monitors/sysinfo.py): each fact from its source, on this machine and on recorded files."""
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from monitors import sysinfo  # noqa: E402


def test_os_release(tmp_path):
    p = tmp_path / "os-release"
    p.write_text('NAME="Ubuntu"\nVERSION="22.04.4 LTS (Jammy Jellyfish)"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    assert sysinfo.os_name(str(p)) == "Ubuntu 22.04.4 LTS"
    p.write_text("NAME='Rocky Linux'\nVERSION=9.3\n")
    assert sysinfo.os_name(str(p)) == "Rocky Linux 9.3"
    assert sysinfo.os_name(str(tmp_path / "missing")) == "unknown"


def test_cpu_and_memory(tmp_path):
    x86 = tmp_path / "cpuinfo"
    x86.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\n"
                   "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert sysinfo.cpu_model(str(x86)) == "Intel(R) Xeon(R) Platinum 8480+"
    arm = tmp_path / "cpuinfo-arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x48\n\nModel\t: Kunpeng 920\n")
    assert sysinfo.cpu_model(str(arm)) == "Kunpeng 920"
    assert sysinfo.cpu_model(str(tmp_path / "missing")) == "unknown"
    mem = tmp_path / "meminfo"
    mem.write_text("MemTotal:       2113536000 kB\nMemFree:        100 kB\n")
    assert sysinfo.memory_mib(str(mem)) == "2064000.0"
    assert sysinfo.memory_mib(str(tmp_path / "missing")) == "unknown"


def test_server_model_from_dmi_or_unknown(tmp_path):
    dmi = tmp_path / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Inspur\n")
    (dmi / "product_name").write_text("NF5688M7\n")
    assert (sysinfo.dmi("sys_vendor", str(tmp_path)), sysinfo.dmi("product_name", str(tmp_path))) == \
        ("Inspur", "NF5688M7")
    (dmi / "product_name").write_text("   \n")
    assert sysinfo.dmi("product_name", str(tmp_path)) == "unknown"
    assert sysinfo.dmi("sys_vendor", str(tmp_path / "none")) == "unknown"


def test_torch_versions_are_what_torch_reports():
    import torch
    assert sysinfo.torch_versions() == (torch.__version__, torch.version.cuda, torch.version.hip)


def test_torch_versions_without_torch(tmp_path, monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert sysinfo.torch_versions() == (None, None, None)


def test_accelerators():
    gpu = {"available": True, "count": 3, "driver_version": "560.35.03", "cuda_driver_version": "12.6",
           "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}, {"index": 1, "name": "NVIDIA H200"},
                       {"index": 2, "name": "NVIDIA H200"}]}
    assert sysinfo.accelerator_facts("nvml", gpu) == {
        "accelerator_plugin": "nvml", "accelerator_count": "3",
        "accelerators": "NVIDIA H100 80GB HBM3, 2 x NVIDIA H200", "accelerator_driver": "560.35.03",
        "accelerator_runtime": "CUDA 12.6"}
    assert sysinfo.accelerator_facts("cnmon", {"available": True, "count": 1, "devices": [{"index": 0}]}) == {
        "accelerator_plugin": "cnmon", "accelerator_count": "1", "accelerators": "unknown",
        "accelerator_driver": "unknown", "accelerator_runtime": "unknown"}
    assert sysinfo.accelerator_facts("nvml", {"available": False, "reason": "NVML found no GPU"}) == {
        "accelerator_plugin": "nvml", "accelerator_count": "0", "accelerators": "none",
        "accelerator_driver": "none", "accelerator_runtime": "none"}


def test_collect_on_this_machine_and_the_file(tmp_path):
    facts = sysinfo.collect("none", {"available": False}, str(tmp_path))
    assert tuple(facts) == sysinfo.KEYS
    assert facts["kernel"] == platform.release() and facts["arch"] == platform.machine()
    assert facts["hostname"] == platform.node() and facts["cpu_count"] == str(os.cpu_count())
    assert facts["python"] == f"{platform.python_version()} ({sys.executable})"
    assert facts["server_model"] == "unknown"                         # tmp_path has no DMI
    if Path("/etc/os-release").is_file():
        pretty = [line.split("=", 1)[1].strip().strip('"') for line in Path("/etc/os-release").read_text().splitlines()
                  if line.startswith("PRETTY_NAME=")]
        assert facts["os"] == (pretty[0] if pretty else facts["os"])
    total_kib = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemTotal:")))
    assert facts["memory_mib"] == "%.1f" % (total_kib / 1024)
    path = tmp_path / "sys_info.log"
    sysinfo.write(str(path), dict(facts, cpu_model="Evil\nkernel: 0.0\x1b[31m"))
    lines = path.read_text().splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == list(sysinfo.KEYS)       # one line per key, in order
    assert "cpu_model: Evil kernel: 0.0 [31m" in lines
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
