"""Passive health of a host and its GPUs: ``health.json`` in the node directory (schema flagperf.health/1).

The monitor (monitors/monitor.py) opens a :class:`Health` beside its sensors, takes a complete sample when it
starts (``start``) and when it stops (``end``), and calls :meth:`Health.tick` at every monitor tick, which takes a
``change`` sample whenever a sampled field differs from what the file last recorded. docs/monitors.md ("Health")
describes every field, the cadence and the file.

Per GPU (NVIDIA GPUs through NVML, the ``pynvml`` module the ``nvml`` plug-in already opened): identity (index,
UUID, serial, PCI bus id, name), Xid events, ECC counts, retired pages, row remapping, PCIe link and replays,
NVLink links and their error counters, clock event (throttle) reasons, persistence mode. Per host: InfiniBand /
RoCE ports from sysfs and the CPU frequency governors. A field the device, driver or VM does not expose is the
string ``unknown``: never 0, never healthy. GPUs of other plug-ins are listed with what the plug-in told (index,
name, bus id) and every field ``unknown``.

Cadence, so that a tick stays cheap (on an H100 most reads take microseconds; the ECC mode, the PCIe replay
counter and above all each NVLink error counter take 0.3 to 0.8 ms, as the driver asks the GPU's firmware):

- every tick: the clock event reasons (from the accelerator sensor's row of that tick: no extra NVML call),
  pending Xid events (one ``nvmlEventSetWait`` with a zero timeout, or a non-blocking read of ``/dev/kmsg``), and,
  on a tick where a GPU is busy and its link has not yet been seen at its maximum under load, that PCIe link's
  current generation and width (two calls);
- on even ticks (every tick without NVLink), steps of a rotation within ``SLOW_BUDGET_S`` (at least one step),
  one GPU or port per step: ECC counts, retired pages, row remapping, PCIe replay counter, persistence mode, the
  NVLink links' states (``NVLINK_STATES_PER_STEP`` links a step), an InfiniBand port;
- on odd ticks, ``NVLINK_COUNTERS_PER_TICK`` NVLink error counter of a second rotation (one link's one counter);
- at start and end only: everything above, the ECC mode, the PCIe maximum link, the CPU governors, and ``dmesg``
  (when it is the Xid source). Counter increases are therefore always seen between start and end; the rotations
  only decide how soon a change sample shows one during the run.

Runs on the hosts: standard library and flagperf_contract only; ``pynvml`` is the plug-in's, never imported here.
"""
from __future__ import annotations

import copy
import errno
import glob
import os
import re
import subprocess
import sys
import time

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from flagperf_contract import HEALTH_FILE, HEALTH_SCHEMA, now_iso, write_json_atomic  # noqa: E402

UNKNOWN = "unknown"
SLOW_BUDGET_S = 0.0005      # time per tick for the slow steps (at least one step runs every tick)
NVLINK_STATES_PER_STEP = 6  # NVLink link states read in one slow step (18 links of an H100: 3 steps)
NVLINK_COUNTERS_PER_TICK = 1    # NVLink error counters read per tick (about 0.8 ms each on an H100)
WRITE_EVERY_S = 10.0        # change samples are written out at most this often (start and end: at once)
MAX_CHANGE_SAMPLES = 200    # change samples kept; later changes are counted (changes_not_sampled)
MAX_XID_EVENTS = 64         # Xid events kept per GPU (and for the host); later ones are counted (dropped)
MAX_EVENTS_PER_TICK = 32    # NVML events taken from the event set per tick
KMSG_PATH = "/dev/kmsg"
KMSG_MAX_BYTES_PER_TICK = 256 * 1024
DMESG_ARGV = ("dmesg",)
DMESG_TIMEOUT_S = 5.0
TEXT_MAX = 160              # characters kept of a kernel log line

GPU_FIELDS = ("xid", "ecc", "retired_pages", "row_remap", "pcie", "nvlink", "clock_events", "clock_events_seen",
              "persistence_mode")

# NVML clock event (throttle) reason bits and their names (nvmlClocksEventReason*).
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)
# InfiniBand port error counters read from <port>/counters/ (the traffic counters are left out).
IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
               "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
               "excessive_buffer_overrun_errors", "VL15_dropped")

# NVML enum values (nvml.h), used where a pynvml lacks the constant.
_NVML = {"NVML_MEMORY_ERROR_TYPE_CORRECTED": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
         "NVML_VOLATILE_ECC": 0, "NVML_AGGREGATE_ECC": 1,
         "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS": 0,
         "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": 1,
         "NVML_NVLINK_ERROR_DL_REPLAY": 0, "NVML_NVLINK_ERROR_DL_RECOVERY": 1, "NVML_NVLINK_ERROR_DL_CRC_FLIT": 2,
         "NVML_NVLINK_ERROR_DL_CRC_DATA": 3, "NVML_NVLINK_MAX_LINKS": 18, "nvmlEventTypeXidCriticalError": 0x8,
         "NVML_ERROR_TIMEOUT": 10}
NVLINK_COUNTERS = (("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"), ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
                   ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"), ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"))

# "NVRM: Xid (PCI:0000:19:00): 79, pid=..., GPU has fallen off the bus."
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?\): "
                      r"(\d{1,6})")
_PCI_ID = re.compile(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?\Z")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")


def clock_event_names(mask) -> list:
    """The names of the reason bits set in ``mask``; a bit without a name as ``bit_0x200``."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    rest, bit = mask & ~0x1FF, 0x200
    while rest and bit <= rest:
        if rest & bit:
            names.append("bit_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def pci_key(bus_id):
    """(domain, bus, device) of ``00000000:19:00.0`` or ``0000:19:00``; None for anything else."""
    m = _PCI_ID.match(bus_id.strip()) if isinstance(bus_id, str) else None
    return tuple(int(g, 16) for g in m.groups()) if m else None


def xid_of_line(line):
    """(pci key, Xid) of a kernel log line ``NVRM: Xid (PCI:0000:19:00): 79, ...``, or None."""
    m = XID_LINE.search(line)
    if not m:
        return None
    return tuple(int(g, 16) for g in m.groups()[:3]), int(m.group(4))


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _count(v):
    """A counter as a non-negative int, else unknown."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else UNKNOWN


def _collapse(value):
    """A dict whose every leaf is unknown is the one word unknown."""
    def leaves(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from leaves(x)
        else:
            yield v
    return UNKNOWN if isinstance(value, dict) and all(x == UNKNOWN for x in leaves(value)) else value


# ---------------------------------------------------------------- host: sysfs

def _read_text(path, limit=4096):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def parse_rate(text):
    """Gb/s of an InfiniBand rate file (``400 Gb/sec (4X NDR)``), else unknown."""
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else UNKNOWN


def _enum(text):
    """``4: ACTIVE`` -> ``ACTIVE``; ``LinkUp`` stays; missing -> unknown."""
    if not text:
        return UNKNOWN
    word = text.split(":", 1)[-1].strip()
    return word if re.fullmatch(r"[A-Za-z0-9_ -]{1,32}", word) else UNKNOWN


def ib_port_dirs(sysfs):
    """[(device, port, path)] of every InfiniBand/RoCE port under <sysfs>/class/infiniband, sorted."""
    out = []
    for path in glob.glob(os.path.join(sysfs, "class", "infiniband", "*", "ports", "*")):
        port = os.path.basename(path)
        dev = os.path.basename(os.path.dirname(os.path.dirname(path)))
        if port.isdigit() and _NAME.match(dev):
            out.append((dev, int(port), path))
    return sorted(out)


def read_ib_port(dev, port, path):
    """One port: state, physical state, rate, link layer and the error counters (unknown where unreadable)."""
    rate = _read_text(os.path.join(path, "rate"))
    counters = {}
    for name in IB_COUNTERS:
        raw = _read_text(os.path.join(path, "counters", name))
        counters[name] = int(raw) if raw is not None and raw.isdigit() else UNKNOWN
    layer = _read_text(os.path.join(path, "link_layer"))
    return {"device": dev, "port": port, "state": _enum(_read_text(os.path.join(path, "state"))),
            "phys_state": _enum(_read_text(os.path.join(path, "phys_state"))),
            "rate_gbps": parse_rate(rate), "link_layer": layer if layer and _NAME.match(layer) else UNKNOWN,
            "counters": counters}


def read_cpu_governors(sysfs):
    """{governor: number of CPUs (or cpufreq policies)} from sysfs, or unknown without cpufreq (many VMs)."""
    base = os.path.join(sysfs, "devices", "system", "cpu")
    files = glob.glob(os.path.join(base, "cpufreq", "policy*", "scaling_governor")) or \
        glob.glob(os.path.join(base, "cpu[0-9]*", "cpufreq", "scaling_governor"))
    out = {}
    for f in files:
        g = _read_text(f, 64)
        if g and _NAME.match(g):
            out[g] = out.get(g, 0) + 1
    return dict(sorted(out.items())) or UNKNOWN


# ---------------------------------------------------------------- kernel log (Xid lines)

class KernelLog:
    """The kernel log from now on: ``/dev/kmsg`` read without blocking from its end (any file appended to works
    the same way). :meth:`lines` returns the lines written since the last call."""

    def __init__(self, path=KMSG_PATH):
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            os.close(self.fd)
            raise
        self.rest = b""

    def lines(self):
        out, got = [], 0
        while got < KMSG_MAX_BYTES_PER_TICK:
            try:
                chunk = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:      # /dev/kmsg: records were overwritten before we read them
                    continue
                raise
            if not chunk:
                break
            got += len(chunk)
            data = self.rest + chunk
            *full, self.rest = data.split(b"\n")
            out.extend(x.decode("utf-8", "replace") for x in full)
        return out

    def close(self):
        try:
            os.close(self.fd)
        except OSError:
            pass


def dmesg_xid_lines(argv=DMESG_ARGV):
    """The Xid lines ``dmesg`` prints, or None when it cannot be run or read (kernel.dmesg_restrict)."""
    try:
        r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=DMESG_TIMEOUT_S,
                           env=dict(os.environ, LC_ALL="C"), check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    return [ln for ln in r.stdout.decode("utf-8", "replace").splitlines() if xid_of_line(ln)]


# ---------------------------------------------------------------- NVML

class NvmlReader:
    """Health reads of the GPUs the ``nvml`` plug-in opened (its ``nv`` module and ``handles``)."""

    def __init__(self, nv, handles, log):
        self.nv, self.handles, self.log = nv, handles, log
        self.unsupported = set()        # (gpu, key): not supported by this device/driver/pynvml: unknown for good
        self.not_supported = tuple(c for c in (getattr(nv, "NVMLError_NotSupported", None),
                                               getattr(nv, "NVMLError_FunctionNotFound", None)) if c)
        self.invalid = getattr(nv, "NVMLError_InvalidArgument", None) or ()
        self.timeout = getattr(nv, "NVMLError_Timeout", None) or ()
        self.identities = [self._identity(i, h) for i, h in enumerate(handles)]
        self.links = [self._probe_links(i, h) for i, h in enumerate(handles)]
        self.events, self.event_gpus = self._register_events()

    def const(self, name):
        return getattr(self.nv, name, _NVML[name])

    def call(self, i, key, fn, *args):
        """fn(*args), or unknown: for good when the device, driver or pynvml does not support it; for this read on
        any other error (logged once per message)."""
        if (i, key) in self.unsupported:
            return UNKNOWN
        try:
            return fn(*args)
        except self.not_supported:
            self.unsupported.add((i, key))
            self.log.once("health: gpu %d: %s not supported: unknown" % (i, key))
        except self.nv.NVMLError as e:
            self.log.once("health: gpu %d: %s: %s" % (i, key, e))
        except Exception as e:  # noqa: BLE001 - a pynvml without the call, a malformed answer: unknown for good
            self.unsupported.add((i, key))
            self.log.once("health: gpu %d: %s unavailable (%s: %s): unknown" % (i, key, type(e).__name__, e))
        return UNKNOWN

    def _identity(self, i, h):
        nv = self.nv
        ident = {"index": i}
        for key, fn in (("uuid", getattr(nv, "nvmlDeviceGetUUID", None)),
                        ("serial", getattr(nv, "nvmlDeviceGetSerial", None)),
                        ("pci_bus_id", lambda h: nv.nvmlDeviceGetPciInfo(h).busId),
                        ("name", getattr(nv, "nvmlDeviceGetName", None))):
            v = self.call(i, "identity." + key, fn, h) if fn else UNKNOWN
            v = _text(v).strip() if v != UNKNOWN else UNKNOWN
            ident[key] = v if v and v.isprintable() and len(v) <= 96 else UNKNOWN
        return ident

    def _probe_links(self, i, h):
        """The NVLink links the device has ([] none answered: unknown), probed once at start."""
        fn = getattr(self.nv, "nvmlDeviceGetNvLinkState", None)
        if fn is None:
            return []
        links = []
        for link in range(int(self.const("NVML_NVLINK_MAX_LINKS"))):
            try:
                fn(h, link)
            except self.invalid:
                continue                                # no such link
            except self.not_supported:
                if not links:
                    break                               # no NVLink on this device (or not told)
                continue
            except Exception:  # noqa: BLE001 - any other answer: not counted as a link
                continue
            links.append(link)
        return links

    def _register_events(self):
        """An NVML event set for Xid critical errors, and the GPUs registered in it."""
        nv, kind = self.nv, self.const("nvmlEventTypeXidCriticalError")
        try:
            es = nv.nvmlEventSetCreate()
        except Exception as e:  # noqa: BLE001 - NVMLError, or a pynvml without events
            self.log.once("health: NVML event set not available (%s): Xid events from the kernel log" % e)
            return None, set()
        gpus = set()
        for i, h in enumerate(self.handles):
            try:
                if not int(nv.nvmlDeviceGetSupportedEventTypes(h)) & kind:
                    self.log.once("health: gpu %d: Xid events not supported by NVML" % i)
                    continue
                nv.nvmlDeviceRegisterEvents(h, kind, es)
                gpus.add(i)
            except Exception as e:  # noqa: BLE001
                self.log.once("health: gpu %d: Xid events cannot be registered (%s)" % (i, e))
        if not gpus:
            self._free(es)
            return None, set()
        return es, gpus

    def _free(self, es):
        try:
            self.nv.nvmlEventSetFree(es)
        except Exception:  # noqa: BLE001
            pass

    def poll_events(self):
        """[(gpu index or None, xid)] of the Xid events pending now (zero timeout)."""
        out = []
        if self.events is None:
            return out
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data = self.nv.nvmlEventSetWait(self.events, 0)
            except self.timeout:
                break
            except self.nv.NVMLError as e:
                if getattr(e, "value", None) != self.const("NVML_ERROR_TIMEOUT"):
                    self.log.once("health: Xid event wait: %s" % e)
                break
            except Exception as e:  # noqa: BLE001
                self.log.once("health: Xid event wait: %s: %s" % (type(e).__name__, e))
                break
            if int(data.eventType) & self.const("nvmlEventTypeXidCriticalError"):
                out.append((self._index_of(data.device), int(data.eventData)))
        return out

    def _index_of(self, device):
        try:
            i = int(self.nv.nvmlDeviceGetIndex(device))
            return i if 0 <= i < len(self.handles) else None
        except Exception:  # noqa: BLE001
            pass
        try:
            uuid = _text(self.nv.nvmlDeviceGetUUID(device))
        except Exception:  # noqa: BLE001
            return None
        return next((d["index"] for d in self.identities if d["uuid"] == uuid), None)

    # -- fields (each returns its value; unknown leaves where a read fails)

    def ecc_mode(self, i):
        mode = self.call(i, "ecc.mode", getattr(self.nv, "nvmlDeviceGetEccMode", None) or _missing, self.handles[i])
        return UNKNOWN if not isinstance(mode, (list, tuple)) or not mode else ("enabled" if mode[0] else "disabled")

    def ecc(self, i, mode=UNKNOWN):
        nv, h = self.nv, self.handles[i]
        out = {"mode": mode}
        for cname, counter in (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC")):
            out[cname] = {ename: _count(self.call(i, "ecc.%s.%s" % (cname, ename), nv.nvmlDeviceGetTotalEccErrors, h,
                                                  self.const(etype), self.const(counter)))
                          for ename, etype in (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                                               ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"))}
        return _collapse(out)

    def retired_pages(self, i):
        nv, h = self.nv, self.handles[i]
        pending = self.call(i, "retired_pages.pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        out = {"pending": pending if pending == UNKNOWN else bool(pending)}
        for name, cause in (("single_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                            ("double_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR")):
            pages = self.call(i, "retired_pages." + name, nv.nvmlDeviceGetRetiredPages, h, self.const(cause))
            out[name] = len(pages) if isinstance(pages, (list, tuple)) else UNKNOWN
        return _collapse(out)

    def row_remap(self, i):
        rows = self.call(i, "row_remap", self.nv.nvmlDeviceGetRemappedRows, self.handles[i])
        if not (isinstance(rows, (list, tuple)) and len(rows) == 4):
            return UNKNOWN
        corr, unc, pending, failure = rows
        return {"correctable": _count(corr), "uncorrectable": _count(unc), "pending": bool(pending),
                "failure": bool(failure)}

    def pcie_link(self, i):
        nv, h = self.nv, self.handles[i]
        return {"gen": _count(self.call(i, "pcie.gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)),
                "width": _count(self.call(i, "pcie.width", nv.nvmlDeviceGetCurrPcieLinkWidth, h))}

    def pcie_max(self, i):
        nv, h = self.nv, self.handles[i]
        return {"max_gen": _count(self.call(i, "pcie.max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration, h)),
                "max_width": _count(self.call(i, "pcie.max_width", nv.nvmlDeviceGetMaxPcieLinkWidth, h))}

    def pcie_replay(self, i):
        return _count(self.call(i, "pcie.replay_counter", self.nv.nvmlDeviceGetPcieReplayCounter, self.handles[i]))

    def nvlink_state(self, i, link):
        state = self.call(i, "nvlink%d.state" % link, self.nv.nvmlDeviceGetNvLinkState, self.handles[i], link)
        return UNKNOWN if state == UNKNOWN else ("up" if state else "down")

    def nvlink_counter(self, i, link, name):
        const = dict(NVLINK_COUNTERS)[name]
        return _count(self.call(i, "nvlink%d.%s" % (link, name), self.nv.nvmlDeviceGetNvLinkErrorCounter,
                                self.handles[i], link, self.const(const)))

    def clock_events(self, i):
        nv = self.nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None) or _missing
        mask = self.call(i, "clock_events", fn, self.handles[i])
        return _count(mask)

    def util(self, i):
        u = self.call(i, "util", self.nv.nvmlDeviceGetUtilizationRates, self.handles[i])
        return UNKNOWN if u == UNKNOWN else _count(getattr(u, "gpu", None))

    def persistence_mode(self, i):
        v = self.call(i, "persistence_mode", self.nv.nvmlDeviceGetPersistenceMode, self.handles[i])
        return UNKNOWN if v == UNKNOWN else ("enabled" if v else "disabled")

    def close(self):
        if self.events is not None:
            self._free(self.events)
            self.events = None


def _missing(*args):
    raise AttributeError("not in this pynvml")


# ---------------------------------------------------------------- the health file

class Health:
    """Samples the health of the host and its GPUs into ``<out_dir>/health.json``.

    ``sampler``: the accelerator sensor the monitor opened (or None), ``plugin`` its name; with the ``nvml``
    plug-in its ``nv`` and ``handles`` are used. ``sysfs``: the sysfs root (monitor.sysfs_root()).
    ``kmsg_path``/``dmesg``: where Xid lines come from when NVML events cannot be had."""

    def __init__(self, out_dir, sampler, plugin, log, sysfs="/sys", kmsg_path=KMSG_PATH, dmesg=DMESG_ARGV,
                 interval_s=None):
        self.path = os.path.join(out_dir, HEALTH_FILE)
        self.log, self.sysfs, self.dmesg = log, sysfs, dmesg
        self.nvml = None
        nv, handles = getattr(sampler, "nv", None), getattr(sampler, "handles", None)
        if plugin == "nvml" and nv is not None and handles:
            try:
                self.nvml = NvmlReader(nv, handles, log)
            except Exception as e:  # noqa: BLE001 - health must never stop the monitor
                log("health: NVML health reads not available: %s: %s" % (type(e).__name__, e))
        if self.nvml is not None:
            self.identities = self.nvml.identities
        else:
            self.identities = [self._plugin_identity(d) for d in self._devices(sampler)]
        n = len(self.identities)
        self.gpus = [{f: UNKNOWN for f in GPU_FIELDS} for _ in range(n)]
        self.busy_max = [{"gen": UNKNOWN, "width": UNKNOWN} for _ in range(n)]
        self.seen = [set() for _ in range(n)]
        self.xid = [[] for _ in range(n)]
        self.xid_dropped = [0] * n
        self.host = {"ib_ports": [], "cpu_governor": UNKNOWN}     # + xid_other when the kernel log is read
        self.ports = ib_port_dirs(sysfs)
        self.recorded_gpus = [dict(g) for g in self.gpus]
        self.recorded_host = copy.deepcopy(self.host)
        self.samples, self.change_samples, self.changes_not_sampled = [], 0, 0
        self.ticks, self.cost_s, self.last_write, self.dirty = 0, 0.0, 0.0, False
        self.started = now_iso()
        self.interval_s = interval_s
        self.xid_source = self._xid_sources(kmsg_path)
        self.steps, self.cursor, self.cycle_ticks, self._cycle_start = self._slow_steps(), 0, None, 0
        self.counter_steps, self.counter_cursor = self._counter_steps(), 0
        self.source = "nvml" if self.nvml is not None else (plugin or "none")

    # -- set-up

    @staticmethod
    def _devices(sampler):
        devices = (getattr(sampler, "status", None) or {}).get("devices") if sampler is not None else None
        return [d for d in devices or [] if isinstance(d, dict) and isinstance(d.get("index"), int)]

    @staticmethod
    def _plugin_identity(d):
        """What a plug-in other than nvml tells of a device: its index, name and bus id; the rest unknown."""
        def clean(v):
            return v.strip() if isinstance(v, str) and v.strip().isprintable() and 0 < len(v.strip()) <= 96 \
                else UNKNOWN
        return {"index": d["index"], "uuid": UNKNOWN, "serial": UNKNOWN, "pci_bus_id": clean(d.get("bus_id")),
                "name": clean(d.get("name"))}

    def _xid_sources(self, kmsg_path):
        """Where each GPU's Xid events come from: nvml (events), kmsg, dmesg, or unknown."""
        self.kmsg, self.dmesg_base = None, None
        if self.nvml is None:
            return [UNKNOWN] * len(self.identities)         # Xid is NVIDIA's: other plug-ins have none to read
        need = [i for i in range(len(self.identities)) if i not in self.nvml.event_gpus]
        source = "nvml"
        if need:
            try:
                self.kmsg = KernelLog(kmsg_path)
                source = "kmsg"
            except OSError as e:
                lines = dmesg_xid_lines(self.dmesg)
                if lines is None:
                    self.log.once("health: Xid events: NVML events not available, %s not readable (%s), dmesg "
                                  "not readable: Xid unknown" % (kmsg_path, e.strerror or e))
                    source = UNKNOWN
                else:
                    self.dmesg_base = _counts(lines)
                    source = "dmesg"
            if source != UNKNOWN:
                self.host["xid_other"] = []     # Xid lines of GPUs this monitor does not see
        return ["nvml" if i in self.nvml.event_gpus else source for i in range(len(self.identities))]

    def _slow_steps(self):
        steps = []
        if self.nvml is not None:
            for i in range(len(self.identities)):
                steps += [(self._read_ecc, i), (self._read_retired, i), (self._read_remap, i),
                          (self._read_pcie_replay, i), (self._read_persistence, i)]
                links = self.nvml.links[i]
                steps += [(self._read_nvlink_states, (i, links[k:k + NVLINK_STATES_PER_STEP]))
                          for k in range(0, len(links), NVLINK_STATES_PER_STEP)]
        steps += [(self._read_ib_port, p) for p in self.ports]
        return steps

    def _counter_steps(self):
        if self.nvml is None:
            return []
        return [(self._read_nvlink_counter, (i, link, name)) for i in range(len(self.identities))
                for link in self.nvml.links[i] for name, _ in NVLINK_COUNTERS]

    # -- reads

    def _read_ecc(self, i, mode=None):
        if mode is None:
            mode = self.gpus[i]["ecc"]["mode"] if isinstance(self.gpus[i]["ecc"], dict) else UNKNOWN
        self.gpus[i]["ecc"] = self.nvml.ecc(i, mode)

    def _read_retired(self, i):
        self.gpus[i]["retired_pages"] = self.nvml.retired_pages(i)

    def _read_remap(self, i):
        self.gpus[i]["row_remap"] = self.nvml.row_remap(i)

    def _pcie(self, i):
        p = self.gpus[i]["pcie"]
        if p == UNKNOWN:
            p = self.gpus[i]["pcie"] = {"gen": UNKNOWN, "max_gen": UNKNOWN, "width": UNKNOWN, "max_width": UNKNOWN,
                                        "replay_counter": UNKNOWN, "busy_max_gen": UNKNOWN,
                                        "busy_max_width": UNKNOWN}
        return p

    def _read_pcie_replay(self, i):
        self._pcie(i)["replay_counter"] = self.nvml.pcie_replay(i)

    def _read_persistence(self, i):
        self.gpus[i]["persistence_mode"] = self.nvml.persistence_mode(i)

    def _nvlink(self, i):
        """This GPU's NVLink field, a new dict (the recorded one is never changed in place)."""
        cur = self.gpus[i]["nvlink"]
        if not isinstance(cur, dict):
            cur = {str(link): {"state": UNKNOWN, **{name: UNKNOWN for name, _ in NVLINK_COUNTERS}}
                   for link in self.nvml.links[i]}
        return {k: dict(v) for k, v in cur.items()}

    def _read_nvlink_states(self, arg):
        i, links = arg
        cur = self._nvlink(i)
        for link in links:
            cur[str(link)]["state"] = self.nvml.nvlink_state(i, link)
        self.gpus[i]["nvlink"] = cur

    def _read_nvlink_counter(self, arg):
        i, link, name = arg
        value = self.nvml.nvlink_counter(i, link, name)
        if _at(self.gpus[i]["nvlink"], str(link), name) != value:
            cur = self._nvlink(i)
            cur[str(link)][name] = value
            self.gpus[i]["nvlink"] = cur

    def _read_ib_port(self, p):
        port = read_ib_port(*p)
        ports = [q for q in self.host["ib_ports"] if (q["device"], q["port"]) != (p[0], p[1])] + [port]
        self.host["ib_ports"] = sorted(ports, key=lambda q: (q["device"], q["port"]))

    def _fast(self, rows):
        """Clock event reasons (from the accelerator rows where given), Xid events, and the PCIe link: in a complete
        sample (``rows`` None), and on a busy tick until the link has been seen at its maximum under load."""
        by_gpu = {r.get("gpu"): r for r in rows or [] if isinstance(r, dict)}
        for i in range(len(self.identities)):
            if self.nvml is None:
                break
            if rows is None:
                mask, util = self.nvml.clock_events(i), self.nvml.util(i)
            else:
                row = by_gpu.get(i, {})
                # a row without a mask (not supported, a failed read): the reasons stay as last known
                mask, util = _count(row.get("throttle_mask")), _count(row.get("util_pct"))
            if mask != UNKNOWN:
                names = clock_event_names(mask)
                self.gpus[i]["clock_events"] = names
                self.seen[i].update(names)
                self.gpus[i]["clock_events_seen"] = sorted(self.seen[i])
            p = self._pcie(i)
            busy = mask != UNKNOWN and not mask & 0x1 and (util == UNKNOWN or util > 0)
            reached = all(isinstance(self.busy_max[i][k], int) and isinstance(p[m], int) and self.busy_max[i][k] >= p[m]
                          for k, m in (("gen", "max_gen"), ("width", "max_width")))
            if rows is None or (busy and not reached):
                p.update(self.nvml.pcie_link(i))
            if busy:
                for k in ("gen", "width"):
                    if p[k] != UNKNOWN:
                        b = self.busy_max[i][k]
                        self.busy_max[i][k] = p[k] if b == UNKNOWN else max(b, p[k])
                p["busy_max_gen"], p["busy_max_width"] = self.busy_max[i]["gen"], self.busy_max[i]["width"]
        self._poll_xid()

    def _poll_xid(self, end=False):
        if self.nvml is None:
            return
        when = now_iso()
        for i, xid in self.nvml.poll_events():
            self._add_xid(i, {"time": when, "xid": xid, "source": "nvml"})
        lines = []
        if self.kmsg is not None:
            try:
                lines = self.kmsg.lines()
            except OSError as e:
                self.log.once("health: kernel log read failed: %s" % e)
        elif self.dmesg_base is not None and end:
            now = dmesg_xid_lines(self.dmesg)
            if now is not None:
                seen = dict(self.dmesg_base)
                for ln in now:
                    if seen.get(ln):
                        seen[ln] -= 1
                    else:
                        lines.append(ln)
        by_pci = {pci_key(d["pci_bus_id"]): d["index"] for d in self.identities}
        for ln in lines:
            hit = xid_of_line(ln)
            if not hit:
                continue
            pci, xid = hit
            i = by_pci.get(pci)
            if i is not None and self.xid_source[i] == "nvml":
                continue            # that GPU's events come from NVML
            self._add_xid(i, {"time": when, "xid": xid, "source": "kmsg" if self.kmsg else "dmesg",
                              "pci": "%04x:%02x:%02x" % pci, "text": ln[ln.find("NVRM"):][:TEXT_MAX]})

    def _add_xid(self, i, event):
        if i is None:
            other = self.host.get("xid_other") or []
            if len(other) < MAX_XID_EVENTS:
                self.host["xid_other"] = other + [event]
            return
        if len(self.xid[i]) < MAX_XID_EVENTS:
            self.xid[i].append(event)
        else:
            self.xid_dropped[i] += 1
        self._set_xid(i)

    def _set_xid(self, i):
        if self.xid_source[i] == UNKNOWN:
            self.gpus[i]["xid"] = UNKNOWN
        else:
            self.gpus[i]["xid"] = {"source": self.xid_source[i], "events": list(self.xid[i]),
                                   "dropped": self.xid_dropped[i]}

    def _read_all(self, end=False):
        if self.nvml is not None:
            for i in range(len(self.identities)):
                self._safe(lambda i: self._read_ecc(i, self.nvml.ecc_mode(i)), i)
                self._safe(lambda i: self._pcie(i).update(self.nvml.pcie_max(i)), i)
        for fn, arg in self.steps + self.counter_steps:
            self._safe(fn, arg)
        self._safe(lambda _: self._fast(None), None)
        if end:
            self._safe(lambda _: self._poll_xid(end=True), None)
        for i in range(len(self.identities)):
            self._set_xid(i)
        self.host["cpu_governor"] = read_cpu_governors(self.sysfs)

    def _safe(self, fn, arg):
        try:
            fn(arg)
        except Exception as e:  # noqa: BLE001 - one failing read must not stop the others, nor the monitor
            self.log.once("health: %s failed: %s: %s" % (getattr(fn, "__name__", "read"), type(e).__name__, e))

    # -- samples

    def _gpu_entry(self, i, fields):
        return {**self.identities[i], "fields": copy.deepcopy(fields)}

    def _record(self, why, gpus, host):
        self.samples.append({"time": now_iso(), "why": why, "gpus": gpus, "host": copy.deepcopy(host)})

    def sample(self, why):
        """A complete sample (``start``, ``end``): every field read now; written out at once."""
        self._read_all(end=why == "end")
        self._record(why, [self._gpu_entry(i, g) for i, g in enumerate(self.gpus)], self.host)
        self.recorded_gpus = [copy.deepcopy(g) for g in self.gpus]
        self.recorded_host = copy.deepcopy(self.host)
        self.write()

    def tick(self, rows=None):
        """One monitor tick: the fast reads, slow steps within SLOW_BUDGET_S, and a change sample when a field
        differs from what was last recorded. ``rows``: the accelerator sensor's rows of this tick."""
        t0 = time.perf_counter()
        self._safe(self._fast, rows)
        t1 = time.perf_counter()
        if self.counter_steps and self.ticks % 2:         # odd ticks: NVLink error counters
            for _ in range(min(NVLINK_COUNTERS_PER_TICK, len(self.counter_steps))):
                fn, arg = self.counter_steps[self.counter_cursor]
                self._safe(fn, arg)
                self.counter_cursor = (self.counter_cursor + 1) % len(self.counter_steps)
        elif self.steps:                                    # even ticks (every tick without NVLink): the rotation
            done = 0
            while done < len(self.steps) and (done == 0 or time.perf_counter() - t1 < SLOW_BUDGET_S):
                fn, arg = self.steps[self.cursor]
                self._safe(fn, arg)
                self.cursor, done = (self.cursor + 1) % len(self.steps), done + 1
                if self.cursor == 0:
                    self.cycle_ticks, self._cycle_start = self.ticks + 1 - self._cycle_start, self.ticks + 1
        self._changes()
        if self.dirty and time.monotonic() - self.last_write >= WRITE_EVERY_S:
            self.write()
        self.ticks += 1
        self.cost_s += time.perf_counter() - t0

    def _changes(self):
        gpus = []
        for i, (cur, rec) in enumerate(zip(self.gpus, self.recorded_gpus)):
            changed = {k: v for k, v in cur.items() if _trigger(k, v) != _trigger(k, rec.get(k))}
            if changed:
                gpus.append((i, changed))
        host = {k: v for k, v in self.host.items() if v != self.recorded_host.get(k)}
        if not gpus and not host:
            return
        if self.change_samples >= MAX_CHANGE_SAMPLES:
            self.changes_not_sampled += 1
        else:
            self._record("change", [self._gpu_entry(i, c) for i, c in gpus], host)
            self.change_samples += 1
            self.dirty = True
        for i, c in gpus:
            self.recorded_gpus[i].update(copy.deepcopy(c))
        self.recorded_host.update(copy.deepcopy(host))

    def to_dict(self):
        return {"schema": HEALTH_SCHEMA, "started": self.started, "updated": now_iso(), "source": self.source,
                "xid_sources": sorted(set(self.xid_source)),
                "cadence": {"interval_s": self.interval_s, "slow_budget_ms": SLOW_BUDGET_S * 1000,
                            "slow_steps": len(self.steps), "slow_cycle_ticks": self.cycle_ticks,
                            "nvlink_counters": len(self.counter_steps),
                            "nvlink_cycle_ticks": 2 * -(-len(self.counter_steps) // NVLINK_COUNTERS_PER_TICK)},
                "ticks": self.ticks,
                "tick_ms_mean": round(self.cost_s / self.ticks * 1000, 3) if self.ticks else None,
                "changes_not_sampled": self.changes_not_sampled, "samples": self.samples}

    def write(self):
        try:
            write_json_atomic(self.path, self.to_dict(), indent=None)
        except (OSError, ValueError, TypeError) as e:
            self.log.once("health: %s not written: %s" % (HEALTH_FILE, e))
        self.last_write, self.dirty = time.monotonic(), False

    def finish(self):
        """The end sample, then release the event set and the kernel log (before NVML is shut down)."""
        try:
            self.sample("end")
        finally:
            self.close()

    def close(self):
        if self.nvml is not None:
            self.nvml.close()
        if self.kmsg is not None:
            self.kmsg.close()
            self.kmsg = None


def _trigger(field, value):
    """What of a field takes a change sample: not the current clock event reasons nor the current PCIe link (both
    follow the load every second; clock_events_seen and the PCIe link under load do take one)."""
    if field == "clock_events":
        return None
    if field == "pcie" and isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in ("gen", "width")}
    return value


def _at(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _counts(lines):
    out = {}
    for ln in lines:
        out[ln] = out.get(ln, 0) + 1
    return out


def open_health(out_dir, sampler, plugin, log, sysfs="/sys", interval_s=None):
    """A Health, or None (logged) when it cannot be set up: health never stops the monitor."""
    try:
        return Health(out_dir, sampler, plugin, log, sysfs=sysfs, interval_s=interval_s)
    except Exception as e:  # noqa: BLE001
        log("health: not sampled: %s: %s" % (type(e).__name__, e))
        return None
