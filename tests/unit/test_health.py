"""Passive health: monitors/health.py (the host side, health.json) against a fake pynvml module and a fake sysfs
tree, and flagperf/results/health.py (the driver side: identities, findings, unknowns)."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from flagperf.records import GpuIdentity  # noqa: E402
from flagperf.results.health import (THRESHOLDS, gpu_identities, health_findings, health_unknowns,  # noqa: E402
                                     read_health)
from flagperf_contract import HEALTH_FILE, HEALTH_SCHEMA  # noqa: E402
from monitors import health as hm  # noqa: E402

MONITOR = ROOT / "monitors" / "monitor.py"
_spec = importlib.util.spec_from_file_location("flagperf_host_monitor_h", MONITOR)
monitor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(monitor)

# A fake pynvml: the calls the nvml plug-in and monitors/health.py make, answering from STATE (a dict of GPUs). A
# value "NS" makes its call raise NVMLError_NotSupported. With FAKE_NVML_STATE set (the monitor process), STATE is
# read from that JSON file, again whenever the file is replaced.
FAKE_PYNVML = r'''
import json, os


class NVMLError(Exception):
    def __init__(self, value=999):
        Exception.__init__(self, value)
        self.value = value

    def __str__(self):
        return "NVML error %s" % self.value


class NVMLError_NotSupported(NVMLError):
    def __init__(self, *a):
        NVMLError.__init__(self, 3)


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self, *a):
        NVMLError.__init__(self, 2)


class NVMLError_Timeout(NVMLError):
    def __init__(self, *a):
        NVMLError.__init__(self, 10)


NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
NVML_NVLINK_MAX_LINKS = 18
STATE = {"gpus": [], "events": []}
CALLS = [0]
_PATH, _MTIME = os.environ.get("FAKE_NVML_STATE"), [None]


def _state():
    global STATE
    if _PATH:
        m = os.stat(_PATH).st_mtime_ns
        if m != _MTIME[0]:
            with open(_PATH) as f:
                STATE = json.load(f)
            _MTIME[0] = m
    CALLS[0] += 1
    return STATE


def _v(h, *keys):
    v = _state()["gpus"][h]
    for k in keys:
        if v == "NS":
            break
        v = v[k]
    if v == "NS":
        raise NVMLError_NotSupported()
    return v


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "999.1"


def nvmlDeviceGetCount():
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetIndex(h):
    return h


nvmlDeviceGetName = lambda h: _v(h, "name").encode()
nvmlDeviceGetUUID = lambda h: _v(h, "uuid")
nvmlDeviceGetSerial = lambda h: _v(h, "serial")
nvmlDeviceGetPciInfo = lambda h: _Obj(busId=_v(h, "bus_id").encode())
nvmlDeviceGetTemperature = lambda h, s: 40
nvmlDeviceGetPowerUsage = lambda h: 300000
nvmlDeviceGetMemoryInfo = lambda h: _Obj(used=2 ** 30, total=80 * 2 ** 30, free=0)
nvmlDeviceGetUtilizationRates = lambda h: _Obj(gpu=_v(h, "util"), memory=0)
nvmlDeviceGetClockInfo = lambda h, c: 1980
nvmlDeviceGetTotalEnergyConsumption = lambda h: 1000
nvmlDeviceGetCurrentClocksEventReasons = lambda h: _v(h, "clock_mask")
nvmlDeviceGetEccMode = lambda h: [_v(h, "ecc_mode"), _v(h, "ecc_mode")]
nvmlDeviceGetTotalEccErrors = lambda h, etype, counter: _v(h, "ecc", ("volatile", "aggregate")[counter],
                                                           ("corrected", "uncorrected")[etype])
nvmlDeviceGetRetiredPagesPendingStatus = lambda h: _v(h, "retired", "pending")
nvmlDeviceGetRetiredPages = lambda h, cause: [4096 * k for k in range(_v(h, "retired", ("sbe", "dbe")[cause]))]
nvmlDeviceGetRemappedRows = lambda h: tuple(_v(h, "remap"))
nvmlDeviceGetCurrPcieLinkGeneration = lambda h: _v(h, "pcie", "gen")
nvmlDeviceGetMaxPcieLinkGeneration = lambda h: _v(h, "pcie", "max_gen")
nvmlDeviceGetCurrPcieLinkWidth = lambda h: _v(h, "pcie", "width")
nvmlDeviceGetMaxPcieLinkWidth = lambda h: _v(h, "pcie", "max_width")
nvmlDeviceGetPcieReplayCounter = lambda h: _v(h, "pcie", "replay")
nvmlDeviceGetPersistenceMode = lambda h: _v(h, "persistence")


def nvmlDeviceGetNvLinkState(h, link):
    try:
        return _v(h, "nvlink", link, "state")
    except IndexError:
        raise NVMLError_InvalidArgument()


def nvmlDeviceGetNvLinkErrorCounter(h, link, counter):
    return _v(h, "nvlink", link, ("replay", "recovery", "crc_flit", "crc_data")[counter])


def nvmlEventSetCreate():
    return "event-set"


def nvmlDeviceGetSupportedEventTypes(h):
    return 0x8 | 0x1 if _v(h, "xid_events") else 0x1


def nvmlDeviceRegisterEvents(h, kinds, es):
    pass


def nvmlEventSetWait(es, timeout_ms):
    events = _state()["events"]
    if not events:
        raise NVMLError_Timeout()
    gpu, xid = events.pop(0)
    return _Obj(device=gpu, eventType=0x8, eventData=xid)


def nvmlEventSetFree(es):
    pass
'''


def gpu_state(i, links=4):
    return {"name": "Fake H100", "uuid": f"GPU-fake-{i}", "serial": f"16549220{i:05d}",
            "bus_id": f"00000000:{0x19 + i:02X}:00.0", "util": 0, "clock_mask": 0x1, "ecc_mode": 1,
            "ecc": {"volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {"corrected": 3, "uncorrected": 0}},
            "retired": {"sbe": 0, "dbe": 0, "pending": 0}, "remap": [0, 0, 0, 0],
            "pcie": {"gen": 1, "max_gen": 5, "width": 16, "max_width": 16, "replay": 0},
            "nvlink": [{"state": 1, "crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0} for _ in range(links)],
            "persistence": 1, "xid_events": True}


def fake_pynvml(gpus=2, links=4):
    nv = types.ModuleType("pynvml")
    exec(compile(FAKE_PYNVML, "fake_pynvml", "exec"), nv.__dict__)
    nv.STATE = {"gpus": [gpu_state(i, links) for i in range(gpus)], "events": []}
    return nv


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def ib_port(sysfs, dev="mlx5_0", port=1, state="4: ACTIVE", phys="5: LinkUp", rate="400 Gb/sec (4X NDR)",
            layer="InfiniBand", **counters):
    d = sysfs / "class" / "infiniband" / dev / "ports" / str(port)
    write(d / "state", state + "\n")
    write(d / "phys_state", phys + "\n")
    write(d / "rate", rate + "\n")
    write(d / "link_layer", layer + "\n")
    for name in hm.IB_COUNTERS:
        write(d / "counters" / name, f"{counters.get(name, 0)}\n")


def governors(sysfs, *names):
    for k, name in enumerate(names):
        write(sysfs / "devices" / "system" / "cpu" / "cpufreq" / f"policy{k}" / "scaling_governor", name + "\n")


def healthy_sysfs(tmp_path):
    sysfs = tmp_path / "sys"
    ib_port(sysfs, "mlx5_0")
    ib_port(sysfs, "mlx5_1")
    governors(sysfs, "performance", "performance")
    return sysfs


class Log:
    def __init__(self):
        self.lines = []

    def __call__(self, msg):
        self.lines.append(msg)

    def once(self, msg):
        if msg not in self.lines:
            self.lines.append(msg)


def open_health(tmp_path, nv, sysfs=None, kmsg=None, dmesg=("false",)):
    """A Health over the nvml plug-in opened on ``nv`` (the way the monitor does it), writing to tmp_path/node."""
    out = tmp_path / "node"
    out.mkdir(exist_ok=True)
    log = Log()
    sys.modules["pynvml"] = nv
    try:
        from monitors.accel import nvml
        sampler, problem = nvml.open(log)
    finally:
        del sys.modules["pynvml"]
    assert problem is None
    h = hm.Health(str(out), sampler, "nvml", log, sysfs=str(sysfs or tmp_path / "nosys"),
                  kmsg_path=str(kmsg or tmp_path / "no-kmsg"), dmesg=dmesg, interval_s=1.0)
    return h, sampler, out


def run_health(tmp_path, nv, during=None, before=None, sysfs=None, ticks=3, busy=False, **kw):
    """start sample, ``during(nv)`` between ticks (the load, a fault), end sample -> (node dir, health.json)."""
    if before:
        before(nv)
    h, sampler, out = open_health(tmp_path, nv, sysfs=sysfs, **kw)
    h.sample("start")
    for g in nv.STATE["gpus"]:
        if busy:
            p = g["pcie"]           # under load the link trains up to what it can reach
            g.update(util=95, clock_mask=0x4, pcie=dict(p, gen=p.get("can_gen", p["max_gen"]),
                                                        width=p.get("can_width", p["max_width"])))
    for k in range(ticks):
        if k == 1 and during:
            during(nv)
        h.tick(sampler.read(0.0))
    for g in nv.STATE["gpus"]:
        g.update(util=0, clock_mask=0x1, pcie=dict(g["pcie"], gen=1))
    h.finish()
    return out, json.loads((out / HEALTH_FILE).read_text())


def findings(out, host="h1"):
    return [(f.severity, f.field) for f in health_findings(host, out)]


# ---------------------------------------------------------------- healthy, identity, file

def test_healthy_node_has_no_finding_and_identities_are_read(tmp_path):
    nv = fake_pynvml(gpus=2)
    out, data = run_health(tmp_path, nv, sysfs=healthy_sysfs(tmp_path), busy=True)
    assert data["schema"] == HEALTH_SCHEMA == "flagperf.health/1"
    assert [s["why"] for s in data["samples"]][0] == "start" and data["samples"][-1]["why"] == "end"
    assert health_findings("h1", out) == []
    ids = gpu_identities(out)
    assert ids == {0: GpuIdentity(0, "GPU-fake-0", "1654922000000", "00000000:19:00.0", "Fake H100"),
                   1: GpuIdentity(1, "GPU-fake-1", "1654922000001", "00000000:1A:00.0", "Fake H100")}
    end = data["samples"][-1]
    g0 = end["gpus"][0]
    assert {k: g0[k] for k in ("index", "uuid", "serial", "pci_bus_id", "name")} == ids[0].to_dict()
    f = g0["fields"]
    assert set(f) == set(hm.GPU_FIELDS)
    assert f["ecc"] == {"mode": "enabled", "volatile": {"corrected": 0, "uncorrected": 0},
                        "aggregate": {"corrected": 3, "uncorrected": 0}}
    assert f["row_remap"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert f["retired_pages"] == {"pending": False, "single_bit_ecc": 0, "double_bit_ecc": 0}
    assert f["pcie"] == {"gen": 1, "max_gen": 5, "width": 16, "max_width": 16, "replay_counter": 0,
                         "busy_max_gen": 5, "busy_max_width": 16}
    assert f["nvlink"]["3"] == {"state": "up", "crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}
    assert sorted(f["nvlink"]) == ["0", "1", "2", "3"]
    assert f["clock_events"] == ["gpu_idle"] and f["clock_events_seen"] == ["gpu_idle", "sw_power_cap"]
    assert f["persistence_mode"] == "enabled"
    assert f["xid"] == {"source": "nvml", "events": [], "dropped": 0}
    host = end["host"]
    assert host["cpu_governor"] == {"performance": 2}
    assert host["ib_ports"][0] == {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp",
                                   "rate_gbps": 400.0, "link_layer": "InfiniBand",
                                   "counters": {name: 0 for name in hm.IB_COUNTERS}}
    assert data["xid_sources"] == ["nvml"] and data["source"] == "nvml"
    assert health_unknowns(out) == []


def test_clock_event_names_decode_every_bit():
    assert hm.clock_event_names(0x1FF) == ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                                           "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                                           "hw_power_brake_slowdown", "display_clock_setting"]
    assert hm.clock_event_names(0x8 | 0x400) == ["hw_slowdown", "bit_0x400"]


# ---------------------------------------------------------------- one fault per field


def _set(path, value):
    def apply(nv, gpu=1):
        d = nv.STATE["gpus"][gpu]
        *keys, last = path
        for k in keys:
            d = d[k]
        d[last] = value(d[last]) if callable(value) else value
    return apply


def _xid(code):
    return lambda nv: nv.STATE["events"].append([1, code])


# (name, fault before start, fault during the run, busy, severity, field, reason part, remedy part)
GPU_FAULTS = [
    ("xid_critical", None, _xid(79), False, "reject", "xid", "Xid 79 (GPU has fallen off the bus)", "power-cycle h1"),
    ("xid_memory", None, _xid(48), False, "reject", "xid", "Xid 48 (double-bit ECC error)", "nvidia-smi -r -i 1"),
    ("xid_program", None, _xid(13), False, "degraded", "xid", "Xid 13 (graphics engine exception",
     "look at the program"),
    ("ecc_volatile_uncorrected", None, _set(("ecc", "volatile", "uncorrected"), 2), False, "reject",
     "ecc.uncorrected", "uncorrected ECC errors on gpu 1", "drain h1"),
    ("ecc_aggregate_uncorrected", None, _set(("ecc", "aggregate", "uncorrected"), 1), False, "reject",
     "ecc.uncorrected", "aggregate +1", "replace the card"),
    ("ecc_aggregate_history", _set(("ecc", "aggregate", "uncorrected"), 4), None, False, "degraded",
     "ecc.uncorrected", "before this run (volatile 0, aggregate 4), none during it", "ROW_REMAPPER"),
    ("row_remap_failure", None, _set(("remap",), [0, 3, 0, 1]), False, "reject", "row_remap.failure",
     "no spare row", "replace gpu 1"),
    ("row_remap_pending", None, _set(("remap",), [1, 0, 1, 0]), False, "degraded", "row_remap.pending",
     "row remap is pending", "to apply the pending row remap"),
    ("retired_pages_pending", None, _set(("retired", "pending"), 1), False, "degraded", "retired_pages.pending",
     "pending retirement", "retire the pending pages"),
    ("retired_pages_many", _set(("retired", "sbe"), 61), None, False, "reject", "retired_pages.count",
     "61 retired pages", "replace gpu 1"),
    ("retired_pages_some", _set(("retired", "sbe"), 15), None, False, "degraded", "retired_pages.count",
     "15 retired pages (at least 15; 60 call for a replacement)", "plan to replace gpu 1"),
    ("retired_pages_new", None, _set(("retired", "dbe"), 1), False, "degraded", "retired_pages.count",
     "retired 1 memory page(s) during the run", "watch it"),
    ("pcie_gen_low_under_load", _set(("pcie", "can_gen"), 4), None, True, "degraded", "pcie.link",
     "gen 4 of 5", "reseat gpu 1"),
    ("pcie_width_low_under_load", _set(("pcie", "can_width"), 8), None, True, "degraded", "pcie.link", "x8 of x16",
     "BIOS PCIe settings"),
    ("pcie_replays", None, _set(("pcie", "replay"), 17), False, "degraded", "pcie.replay_counter",
     "17 PCIe replays", "riser"),
    ("nvlink_link_down", None, _set(("nvlink", 2, "state"), 0), False, "reject", "nvlink.state",
     "NVLink link 2 of gpu 1", "nvidia-fabricmanager"),
    ("nvlink_all_down", lambda nv: [link.update(state=0) for link in nv.STATE["gpus"][1]["nvlink"]], None, False,
     "degraded", "nvlink.state", "all 4 NVLink links", "fabric manager"),
    ("nvlink_crc", None, _set(("nvlink", 1, "crc_flit"), 500), False, "degraded", "nvlink.errors",
     "link 1: crc_flit +500", "nvidia-smi nvlink -e -i 1"),
    ("nvlink_replay", None, _set(("nvlink", 3, "replay"), 2), False, "degraded", "nvlink.errors",
     "link 3: replay +2", "reset the GPU"),
    ("nvlink_recovery", None, _set(("nvlink", 0, "recovery"), 1), False, "degraded", "nvlink.errors",
     "link 0: recovery +1", "replace the board"),
    ("hw_slowdown", None, _set(("clock_mask",), 0x8), False, "degraded", "clock_events", "hardware slowdown",
     "cooling and power"),
    ("hw_thermal", None, _set(("clock_mask",), 0x40), False, "degraded", "clock_events", "thermal", "airflow"),
    ("hw_power_brake", None, _set(("clock_mask",), 0x80), False, "degraded", "clock_events", "power brake",
     "power supplies"),
    ("sw_thermal", None, _set(("clock_mask",), 0x20), False, "degraded", "clock_events", "software thermal",
     "inlet temperature"),
    ("persistence_off", _set(("persistence",), 0), None, False, "degraded", "persistence_mode",
     "persistence mode is off on gpu 1", "nvidia-smi -pm 1 -i 1"),
]


@pytest.mark.parametrize("name,before,during,busy,severity,field,reason,remedy", GPU_FAULTS,
                         ids=[f[0] for f in GPU_FAULTS])
def test_one_gpu_fault_gives_its_finding(tmp_path, name, before, during, busy, severity, field, reason, remedy):
    nv = fake_pynvml(gpus=2)
    out, _ = run_health(tmp_path, nv, before=before, during=during, busy=busy)
    found = health_findings("h1", out)
    assert [(f.severity, f.field) for f in found] == [(severity, field)], [f.reason for f in found]
    f = found[0]
    label = gpu_identities(out)[1].label()
    assert label == "gpu 1 (GPU-fake-1, serial 1654922000001, pci 00000000:1A:00.0)"
    assert f.gpu == gpu_identities(out)[1] and f.host == "h1"
    assert reason in f.reason, f.reason
    assert remedy in f.remedy and label in f.remedy, f.remedy


def test_normal_clock_events_and_an_idle_link_are_not_findings(tmp_path):
    """sw power cap and idle are normal, and an idle GPU lowers its PCIe link: no finding, and the link under load
    stays unknown when the GPU was never busy."""
    nv = fake_pynvml(gpus=1)
    out, data = run_health(tmp_path, nv, during=lambda nv: _set(("clock_mask",), 0x5)(nv, gpu=0), busy=False)
    assert data["samples"][-1]["gpus"][0]["fields"]["clock_events_seen"] == ["gpu_idle", "sw_power_cap"]
    assert health_findings("h1", out) == []
    assert [p for _, p in health_unknowns(out)] == ["pcie.busy_max_gen", "pcie.busy_max_width", "cpu_governor"]


def test_nvlink_crc_errors_count_by_their_rate(tmp_path):
    """A healthy H100 counts a few data CRC errors a second on its links: below 100/s over the run, no finding."""
    nv = fake_pynvml(gpus=1)
    out, _ = run_health(tmp_path, nv, during=lambda nv: _set(("nvlink", 0, "crc_data"), 90)(nv, gpu=0))
    assert health_findings("h1", out) == []
    data = json.loads((out / HEALTH_FILE).read_text())
    for s in data["samples"]:                   # the same errors over 10 ms: 9000/s
        s["time"] = "2026-01-01T00:00:00.000+00:00" if s["why"] == "start" else "2026-01-01T00:00:00.010+00:00"
    (out / HEALTH_FILE).write_text(json.dumps(data))
    assert findings(out) == []                  # a rate over less than a second counts as over 1 s
    data["samples"][0]["time"] = "2026-01-01T00:00:00.000+00:00"
    data["samples"][-1]["time"] = "2026-01-01T00:00:00.500+00:00"
    data["samples"][-1]["gpus"][0]["fields"]["nvlink"]["0"]["crc_data"] = 101
    (out / HEALTH_FILE).write_text(json.dumps(data))
    [f] = health_findings("h1", out)
    assert (f.field, f.value) == ("nvlink.errors", {"0": {"crc_data": 101}}) and "above 100/s" in f.reason


def test_xid_from_the_kernel_log_when_nvml_has_no_events(tmp_path):
    nv = fake_pynvml(gpus=2)
    for g in nv.STATE["gpus"]:
        g["xid_events"] = False
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1,-;NVRM: Xid (PCI:0000:1a:00): 48, before the monitor started\n")

    def xid_lines(nv):
        with open(kmsg, "a") as f:
            f.write("4,2,2,-;NVRM: Xid (PCI:0000:1a:00): 94, pid=77, name=python, Contained: SM\n"
                    "4,3,3,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
                    "4,4,4,-;usb 1-1: not an Xid\n")
    out, data = run_health(tmp_path, nv, during=xid_lines, kmsg=kmsg)
    assert data["xid_sources"] == ["kmsg"]
    end = data["samples"][-1]
    events = end["gpus"][1]["fields"]["xid"]["events"]
    assert [(e["xid"], e["source"], e["pci"]) for e in events] == [(94, "kmsg", "0000:1a:00")]
    assert end["host"]["xid_other"][0]["xid"] == 79
    found = health_findings("h1", out)
    assert [(f.severity, f.field, f.gpu.index if f.gpu else None) for f in found] == [
        ("reject", "xid", 1), ("reject", "xid", None)]
    assert "Xid 94 (contained ECC error) on gpu 1 (GPU-fake-1" in found[0].reason
    assert "the GPU at PCI 0000:3b:00 (not monitored by this run)" in found[1].reason


def test_xid_unknown_without_events_kmsg_or_dmesg(tmp_path):
    nv = fake_pynvml(gpus=1)
    nv.STATE["gpus"][0]["xid_events"] = False
    out, data = run_health(tmp_path, nv, dmesg=("false",))
    assert data["samples"][-1]["gpus"][0]["fields"]["xid"] == "unknown"
    assert (gpu_identities(out)[0], "xid") in health_unknowns(out)
    assert health_findings("h1", out) == []


def test_xid_from_dmesg_at_the_end(tmp_path):
    nv = fake_pynvml(gpus=1)
    nv.STATE["gpus"][0]["xid_events"] = False
    lines = tmp_path / "dmesg.txt"
    lines.write_text("[  1.0] NVRM: Xid (PCI:0000:19:00): 13, old\n")
    dmesg = (sys.executable, "-c", f"print(open({str(lines)!r}).read(), end='')")

    def more(nv):
        with open(lines, "a") as f:
            f.write("[  9.0] NVRM: Xid (PCI:0000:19:00): 119, Timeout waiting for RPC from GSP!\n")
    out, data = run_health(tmp_path, nv, during=more, dmesg=dmesg)
    assert data["xid_sources"] == ["dmesg"]
    assert [(f.severity, f.field, f.value) for f in health_findings("h1", out)] == [
        ("reject", "xid", {"xid": 119, "count": 1})]


# ---------------------------------------------------------------- host faults (fake sysfs)

HOST_FAULTS = [
    ("ib_port_down", lambda s: ib_port(s, "mlx5_1", state="1: DOWN", phys="3: Disabled"), None, "degraded",
     "ib.state", "InfiniBand port mlx5_1 port 1 is DOWN (physical Disabled)", "ibstat mlx5_1 1"),
    ("ib_port_went_down", None, lambda s: ib_port(s, "mlx5_1", state="1: DOWN", phys="2: Polling"), "reject",
     "ib.state", "it went down during the run", "switch port of mlx5_1 port 1 on h1"),
    ("ib_rate_low", lambda s: ib_port(s, "mlx5_1", rate="200 Gb/sec (4X HDR)"), None, "degraded", "ib.rate",
     "runs at 200 Gb/s, below the 400 Gb/s", "transceiver"),
    ("ib_symbol_errors", None, lambda s: ib_port(s, "mlx5_0", symbol_error=12), "degraded", "ib.symbol_error",
     "12 symbol errors on InfiniBand port mlx5_0 port 1", "ibv_devinfo -d mlx5_0"),
    ("ib_link_downed", None, lambda s: ib_port(s, "mlx5_0", link_downed=2), "reject", "ib.link_downed",
     "went down 2 time(s) during the run (link flapping)", "cable"),
    ("ib_rcv_errors", None, lambda s: ib_port(s, "mlx5_0", port_rcv_errors=5, port_xmit_discards=1), "degraded",
     "ib.errors", "port_rcv_errors +5, port_xmit_discards +1", "cable"),
    ("cpu_governor", lambda s: governors(s, "performance", "powersave"), None, "degraded", "cpu_governor",
     "powersave on 1 CPU(s), not performance", "cpupower frequency-set -g performance"),
]


@pytest.mark.parametrize("name,before,during,severity,field,reason,remedy", HOST_FAULTS,
                         ids=[f[0] for f in HOST_FAULTS])
def test_one_host_fault_gives_its_finding(tmp_path, name, before, during, severity, field, reason, remedy):
    sysfs = healthy_sysfs(tmp_path)
    if before:
        before(sysfs)
    nv = fake_pynvml(gpus=1)
    out, _ = run_health(tmp_path, nv, sysfs=sysfs, during=(lambda nv: during(sysfs)) if during else None)
    found = health_findings("h1", out)
    assert [(f.severity, f.field) for f in found] == [(severity, field)], [f.reason for f in found]
    assert found[0].gpu is None and reason in found[0].reason and remedy in found[0].remedy, found[0]


def test_roce_ports_are_compared_with_their_own_link_layer(tmp_path):
    sysfs = healthy_sysfs(tmp_path)
    ib_port(sysfs, "mlx5_2", rate="100 Gb/sec (4X EDR)", layer="Ethernet")
    nv = fake_pynvml(gpus=1)
    out, data = run_health(tmp_path, nv, sysfs=sysfs)
    assert [p["link_layer"] for p in data["samples"][-1]["host"]["ib_ports"]] == ["InfiniBand", "InfiniBand",
                                                                                 "Ethernet"]
    assert health_findings("h1", out) == []


# ---------------------------------------------------------------- unknown stays unknown

def test_unsupported_fields_are_unknown_never_healthy(tmp_path):
    nv = fake_pynvml(gpus=1)
    g = nv.STATE["gpus"][0]
    g.update(serial="NS", retired="NS", remap="NS", persistence="NS", nvlink=[], xid_events=False)
    g["ecc"]["aggregate"] = "NS"
    g["pcie"]["replay"] = "NS"
    out, data = run_health(tmp_path, nv, dmesg=("false",), busy=True)
    f = data["samples"][-1]["gpus"][0]["fields"]
    assert f["retired_pages"] == f["row_remap"] == f["persistence_mode"] == f["nvlink"] == f["xid"] == "unknown"
    assert f["ecc"] == {"mode": "enabled", "volatile": {"corrected": 0, "uncorrected": 0},
                        "aggregate": {"corrected": "unknown", "uncorrected": "unknown"}}
    assert f["pcie"]["replay_counter"] == "unknown"
    assert data["samples"][-1]["gpus"][0]["serial"] == "unknown"
    assert data["samples"][-1]["host"] == {"ib_ports": [], "cpu_governor": "unknown"}
    assert health_findings("h1", out) == []
    gid = gpu_identities(out)[0]
    assert gid.serial == "unknown" and gid.label() == "gpu 0 (GPU-fake-0, serial unknown, pci 00000000:19:00.0)"
    assert health_unknowns(out) == [
        (gid, "serial"), (gid, "xid"), (gid, "ecc.aggregate.corrected"), (gid, "ecc.aggregate.uncorrected"),
        (gid, "retired_pages"), (gid, "row_remap"), (gid, "pcie.replay_counter"), (gid, "nvlink"),
        (gid, "persistence_mode"), (None, "cpu_governor")]


def test_a_vendor_without_nvml_lists_its_devices_with_unknown_fields(tmp_path):
    sampler = types.SimpleNamespace(status={"devices": [{"index": 0, "name": "910B3", "bus_id": "0000:C1:00.0"},
                                                        {"index": 1, "name": "910B3\x1b[2J", "bus_id": 7}]})
    h = hm.Health(str(tmp_path), sampler, "npu_smi", Log(), sysfs=str(healthy_sysfs(tmp_path)))
    h.sample("start")
    h.tick([{"gpu": 0, "temp_c": 50}])
    h.finish()
    data = json.loads((tmp_path / HEALTH_FILE).read_text())
    g = data["samples"][-1]["gpus"]
    assert [(d["index"], d["name"], d["pci_bus_id"], d["uuid"]) for d in g] == [
        (0, "910B3", "0000:C1:00.0", "unknown"), (1, "unknown", "unknown", "unknown")]
    assert all(v == "unknown" for d in g for v in d["fields"].values())
    assert data["source"] == "npu_smi" and data["samples"][-1]["host"]["cpu_governor"] == {"performance": 2}
    assert health_findings("h1", tmp_path) == []
    assert (gpu_identities(tmp_path)[0], "ecc") in health_unknowns(tmp_path)


# ---------------------------------------------------------------- change samples, cadence, cost

def test_a_changed_field_takes_a_change_sample(tmp_path):
    nv = fake_pynvml(gpus=2)
    h, sampler, out = open_health(tmp_path, nv)
    h.sample("start")
    h.tick(sampler.read(0.0))
    assert [s["why"] for s in h.samples] == ["start"]           # nothing changed
    nv.STATE["gpus"][0].update(clock_mask=0x4, util=50)          # busy: sw_power_cap is a new reason
    nv.STATE["gpus"][0]["pcie"]["gen"] = 5
    h.tick(sampler.read(0.0))
    change = h.samples[-1]
    assert change["why"] == "change" and [g["index"] for g in change["gpus"]] == [0]
    assert change["gpus"][0]["uuid"] == "GPU-fake-0"
    assert change["gpus"][0]["fields"]["clock_events_seen"] == ["gpu_idle", "sw_power_cap"]
    nv.STATE["gpus"][0].update(clock_mask=0x1, util=0)           # back to idle: nothing new, no sample
    nv.STATE["gpus"][0]["pcie"]["gen"] = 1
    for _ in range(2 * len(h.steps) + 2):                        # a whole slow rotation (on every other tick)
        h.tick(sampler.read(0.0))
    assert len(h.samples) == 2
    nv.STATE["gpus"][1]["ecc"]["volatile"]["uncorrected"] = 1     # a slow field: seen within one rotation
    for _ in range(2 * len(h.steps)):
        h.tick(sampler.read(0.0))
    change = h.samples[-1]
    assert change["why"] == "change" and [g["index"] for g in change["gpus"]] == [1]
    assert list(change["gpus"][0]["fields"]) == ["ecc"]
    assert change["gpus"][0]["fields"]["ecc"]["volatile"]["uncorrected"] == 1
    h.finish()
    data = json.loads((out / HEALTH_FILE).read_text())
    assert [s["why"] for s in data["samples"]] == ["start", "change", "change", "end"]
    assert data["ticks"] == len(h.steps) * 4 + 4 and data["cadence"]["slow_steps"] == len(h.steps)
    assert data["cadence"]["nvlink_counters"] == 2 * 4 * 4 and data["cadence"]["nvlink_cycle_ticks"] == 2 * 2 * 4 * 4
    assert [(f.severity, f.field) for f in health_findings("h", out)] == [("reject", "ecc.uncorrected")]


def test_change_samples_are_capped_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(hm, "MAX_CHANGE_SAMPLES", 2)
    nv = fake_pynvml(gpus=1)
    h, sampler, out = open_health(tmp_path, nv)
    h.sample("start")
    for n in range(1, 6):
        nv.STATE["gpus"][0]["pcie"]["replay"] = n
        for _ in range(2 * len(h.steps)):
            h.tick(sampler.read(0.0))
    h.finish()
    data = json.loads((out / HEALTH_FILE).read_text())
    assert [s["why"] for s in data["samples"]] == ["start", "change", "change", "end"]
    assert data["changes_not_sampled"] == 3
    assert data["samples"][-1]["gpus"][0]["fields"]["pcie"]["replay_counter"] == 5


def test_a_tick_makes_few_nvml_calls_on_eight_gpus(tmp_path, monkeypatch):
    """A tick reads the clock reasons from the accelerator rows (no call), polls the event set once, reads the PCIe
    link of a busy GPU only until it was seen at its maximum, and then either one step of the rotation (within its
    time budget, at least one) or one NVLink error counter. Counted in calls, not timed."""
    nv = fake_pynvml(gpus=8, links=18)
    h, sampler, out = open_health(tmp_path, nv)
    h.sample("start")
    monkeypatch.setattr(hm, "SLOW_BUDGET_S", 0.0)                # one slow step per tick
    assert len(h.steps) == 8 * (5 + 3) and len(h.counter_steps) == 8 * 18 * 4

    def ticks(n):
        rows, calls = sampler.read(0.0), []
        for _ in range(n):
            before = nv.CALLS[0]
            h.tick(rows)
            calls.append(nv.CALLS[0] - before)
        return calls
    idle = ticks(2 * len(h.steps))
    assert max(idle) <= 1 + 6, idle                              # the event poll + the biggest step (6 link states)
    assert min(idle) <= 1 + 1, idle                              # odd ticks: the poll + one NVLink error counter
    assert h.cycle_ticks in (2 * len(h.steps) - 1, 2 * len(h.steps))   # the first rotation starts at tick 0
    for g in nv.STATE["gpus"]:                                   # busy, with the link trained up: read once
        g.update(util=90, clock_mask=0x4, pcie=dict(g["pcie"], gen=5))
    busy = ticks(4)
    assert busy[0] <= 1 + 8 * 2 + 6 and max(busy[1:]) <= 1 + 6, busy
    assert all(g["pcie"]["busy_max_gen"] == 5 for g in h.gpus)
    h.finish()


# ---------------------------------------------------------------- the driver side: hostile or broken files

def test_reading_refuses_what_is_not_a_health_file(tmp_path):
    assert read_health(tmp_path) == (None, None) and health_findings("h", tmp_path) == []
    assert gpu_identities(tmp_path) == {} and health_unknowns(tmp_path) == []
    (tmp_path / HEALTH_FILE).write_text(json.dumps({"schema": "flagperf.health/9", "samples": []}))
    [f] = health_findings("h", tmp_path)
    assert (f.severity, f.field, f.gpu) == ("degraded", "health.json", None)
    assert "not a flagperf.health/1 file (schema flagperf.health/9)" in f.reason and "monitor.log" in f.remedy
    (tmp_path / HEALTH_FILE).unlink()
    os.mkfifo(tmp_path / HEALTH_FILE)
    [f] = health_findings("h", tmp_path)
    assert "not a regular file" in f.reason
    (tmp_path / HEALTH_FILE).unlink()
    (tmp_path / "elsewhere.json").write_text("{}")
    (tmp_path / HEALTH_FILE).symlink_to(tmp_path / "elsewhere.json")
    assert "not a regular file" in health_findings("h", tmp_path)[0].reason


def test_malformed_values_are_unknown_and_names_are_kept_plain(tmp_path):
    bad = {"schema": HEALTH_SCHEMA, "samples": [
        "junk", {"gpus": "x"},
        {"why": "start", "gpus": [{"index": True}, {"index": -1}, {"index": 0, "uuid": "GPU-1\x1b]8;;x\x07",
                                                                   "serial": "[b]9[/b]", "pci_bus_id": 5,
                                                                   "fields": {"ecc": {"volatile": {"uncorrected": "2"}},
                                                                              "pcie": [1], "nvlink": {"0": 3},
                                                                              "xid": {"events": [{"xid": "79"}]},
                                                                              "clock_events_seen": "hw_slowdown"}}],
         "host": {"ib_ports": [{"device": "../x", "port": "1", "state": 4}], "cpu_governor": {"powersave": "all"}}},
    ]}
    (tmp_path / HEALTH_FILE).write_text(json.dumps(bad))
    gid = gpu_identities(tmp_path)[0]
    assert (gid.uuid, gid.serial, gid.pci_bus_id) == ("unknown", "unknown", "unknown")
    found = health_findings("h", tmp_path)
    assert [(f.severity, f.field, f.value) for f in found] == [("degraded", "cpu_governor", {"powersave": None})]
    assert all("\x1b" not in f.reason + f.remedy for f in found)


def test_thresholds_are_data_and_can_be_overridden(tmp_path):
    assert 79 in THRESHOLDS["xid_reject"] and THRESHOLDS["retired_pages_reject"] == 60
    nv = fake_pynvml(gpus=2)
    out, _ = run_health(tmp_path, nv, during=_set(("pcie", "replay"), 3))
    assert findings(out) == [("degraded", "pcie.replay_counter")]
    assert health_findings("h1", out, {"pcie_replay_increase_degraded": 4}) == []


def test_host_module_never_imports_the_driver():
    src = (ROOT / "monitors" / "health.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+(flagperf|pynvml)\b", src, re.M)
    assert re.search(r"^from flagperf_contract import", src, re.M)


# ---------------------------------------------------------------- the real monitor process

def test_monitor_process_writes_health_json_with_fake_nvml_and_sysfs(tmp_path):
    """python monitors/monitor.py with the fake pynvml on PYTHONPATH and a fake sysfs root: health.json has the
    start sample, a change sample when a GPU counts an uncorrected ECC error mid-run, and the end sample."""
    fake_dir = tmp_path / "fake"
    write(fake_dir / "pynvml.py", FAKE_PYNVML)
    state = tmp_path / "state.json"

    def put(s):
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps(s))
        os.replace(tmp, state)
    s = {"gpus": [gpu_state(i) for i in range(2)], "events": []}
    put(s)
    sysfs = healthy_sysfs(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(fake_dir), FAKE_NVML_STATE=str(state), FLAGPERF_SYSFS_ROOT=str(sysfs))
    out = tmp_path / "node0"
    p = subprocess.Popen([sys.executable, str(MONITOR), "--out-dir", str(out), "--interval", "0.1", "--gpu", "nvml",
                          "--max-seconds", "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _wait(lambda: (out / "nvidia_monitor.log").exists() and (out / HEALTH_FILE).exists()), \
            p.communicate(timeout=5)
        time.sleep(0.3)
        s["gpus"][1]["ecc"]["volatile"]["uncorrected"] = 1
        s["events"] = [[0, 31]]
        time.sleep(0.01)
        put(s)
        seen = _lines(out / "nvidia_monitor.log")
        # 30 more ticks (2 GPUs each): more than a whole slow rotation of 12 steps (on even ticks) after the change
        assert _wait(lambda: _lines(out / "nvidia_monitor.log") >= seen + 60)
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(30)
    assert rc == 0, p.stderr.read()
    data = json.loads((out / HEALTH_FILE).read_text())
    whys = [x["why"] for x in data["samples"]]
    assert whys[0] == "start" and whys[-1] == "end" and "change" in whys, whys
    assert data["ticks"] >= 1 and data["tick_ms_mean"] is not None
    assert gpu_identities(out)[1].uuid == "GPU-fake-1"
    assert [(f.severity, f.field, f.gpu.index) for f in health_findings("node0", out)] == [
        ("degraded", "xid", 0), ("reject", "ecc.uncorrected", 1)]
    assert data["samples"][-1]["host"]["ib_ports"][1]["device"] == "mlx5_1"
    assert "Traceback" not in (out / "monitor.log").read_text()


def _lines(path):
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def _wait(cond, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False
