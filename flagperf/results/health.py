"""A node's passive health: read ``health.json`` (written by monitors/health.py, schema flagperf.health/1) and
judge it. Pure: reading the one file is the only I/O.

- :func:`gpu_identities`: ``{index: GpuIdentity}``, which card each GPU index of the node is;
- :func:`health_findings`: every health field outside what a healthy node shows, as
  :class:`~flagperf.records.HealthFinding` (severity, field, value, reason, remedy naming the card);
- :func:`health_unknowns`: the fields the device, driver or VM did not expose (no finding: unknown is never
  read as healthy, nor as broken).

What a host wrote is not trusted: the file is read bounded (a regular file, at most HEALTH_MAX_BYTES, through
``flagperf_contract.read_json_data``), every value is checked before use (a malformed one counts as unknown), and
the names that reach a text (UUID, serial, PCI bus id, GPU and NIC names) are kept only when they are made of
plain characters. docs/monitors.md ("Health") lists the fields and every rule below.
"""

from __future__ import annotations

import os
import re
from datetime import datetime

from flagperf.records import UNKNOWN, GpuIdentity, HealthFinding
from flagperf_contract import HEALTH_FILE, HEALTH_SCHEMA, ContractError, read_json_data

# Every number a rule compares against, in one place (docs/monitors.md, "Health"). An increase is the end value
# less the start value of a counter in one monitor's run (one round on one node).
THRESHOLDS = {
    # Xid codes that reject the node; every other Xid degrades it. Memory (48 double-bit ECC, 63/64 retirement or
    # row-remap event/failure, 92 high single-bit rate, 94/95 contained/uncontained ECC, 140 unrecovered ECC),
    # the bus (79), NVLink (74), the GPU's own processors (62 micro-controller halt, 119/120 GSP).
    "xid_reject": (48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140),
    "ecc_uncorrected_increase_reject": 1,       # uncorrected ECC errors during the run (volatile or aggregate)
    "ecc_uncorrected_history_degraded": 1,      # uncorrected errors counted before the run (aggregate/volatile)
    "retired_pages_reject": 60,                 # retired pages: DCGM's limit (DCGM_LIMIT_MAX_RETIRED_PAGES)
    "retired_pages_degraded": 15,               # and its soft limit (DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT)
    "retired_pages_increase_degraded": 1,       # pages retired during the run
    "pcie_replay_increase_degraded": 1,         # PCIe replays during the run
    "nvlink_error_increase_degraded": 1,        # NVLink replay or recovery errors during the run, per link (DCGM: 1)
    # NVLink CRC (flit, data) errors per second over the run, per link: DCGM's limit (RM: "CRC errors only matter at
    # rates of 100+ per second"). A healthy H100 counts a few data CRC errors a second on its links.
    "nvlink_crc_per_s_degraded": 100.0,
    "ib_link_downed_increase_reject": 1,        # an InfiniBand link went down during the run (flapped)
    "ib_symbol_error_increase_degraded": 1,     # symbol errors during the run
    "ib_error_increase_degraded": 1,            # any other port error counter during the run
    "ib_rate_min_fraction": 1.0,                # an active port slower than this x the fastest of its link layer
}
# Clock event reasons that degrade a GPU when seen during the run (sw_power_cap and gpu_idle are normal).
CLOCK_EVENTS_DEGRADED = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
CLOCK_EVENT_MEANINGS = {
    "hw_slowdown": "hardware slowdown (power brake, overheating or a bad power supply)",
    "hw_thermal_slowdown": "hardware thermal slowdown (the GPU or its memory is too hot)",
    "hw_power_brake_slowdown": "hardware power brake (the power supply asked the GPU to slow down)",
    "sw_thermal_slowdown": "software thermal slowdown (the driver cut clocks to stay under the temperature limit)",
}
XID_MEANINGS = {
    13: "graphics engine exception, often a program fault", 31: "GPU memory page fault, often a program fault",
    32: "invalid or corrupted push buffer stream", 38: "driver firmware error",
    43: "GPU stopped processing, often a program fault", 45: "preemptive cleanup after a fault",
    48: "double-bit ECC error", 56: "display engine error", 57: "error programming video memory interface",
    58: "unstable video memory interface", 61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt", 63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 65: "video processor exception",
    68: "video decoder exception", 69: "graphics engine class error", 74: "NVLink error",
    79: "GPU has fallen off the bus", 80: "corrupted data sent to the GPU", 81: "VGA subsystem error",
    92: "high single-bit ECC error rate", 94: "contained ECC error", 95: "uncontained ECC error",
    109: "context switch timeout", 119: "GSP RPC timeout", 120: "GSP error", 121: "C2C link corrected error",
    140: "unrecovered ECC error",
}
_XID_MEMORY = {48, 63, 64, 92, 94, 95, 140}
_XID_FIRMWARE = {38, 61, 62, 119, 120}
_XID_PROGRAM = {13, 31, 43, 45, 69, 109}

HEALTH_MAX_BYTES = 8 * 1024 * 1024
MAX_GPUS = 4096
_PLAIN = re.compile(r"[A-Za-z0-9 _.:()/+,#-]{1,96}\Z")      # what a name may be made of to reach a text
_WORD = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")


# -- reading -----------------------------------------------------------------------------------------------------

def read_health(node_dir) -> tuple:
    """(the health.json data, None); (None, None) when the node has none (a run before it existed, a monitor
    that never started); (None, what is wrong) when it is there but unreadable or not a health file."""
    path = os.path.join(node_dir, HEALTH_FILE)
    try:
        data = read_json_data(path, max_bytes=HEALTH_MAX_BYTES)
    except FileNotFoundError:
        return None, None
    except ContractError as exc:
        return None, str(exc)
    if not isinstance(data, dict) or data.get("schema") != HEALTH_SCHEMA:
        schema = _plain(data.get("schema") if isinstance(data, dict) else None)
        return None, f"{path}: not a {HEALTH_SCHEMA} file (schema {schema})"
    if not isinstance(data.get("samples"), list):
        return None, f"{path}: 'samples': expected a list"
    return data, None


def _plain(v, pattern=_PLAIN) -> str:
    return v.strip() if isinstance(v, str) and pattern.match(v.strip()) else UNKNOWN


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 63 else None


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


class _View:
    """The samples folded in order: each GPU's and the host's fields as first and last recorded, and the GPUs'
    identities as last told."""

    def __init__(self, data: dict):
        self.first: dict = {}       # index -> {field: value}
        self.last: dict = {}
        self.ident: dict = {}       # index -> {key: str}
        self.host_first: dict = {}
        self.host_last: dict = {}
        times = []
        for s in data["samples"]:
            if not isinstance(s, dict):
                continue
            times.append(_time(s.get("time")))
            gpus = s.get("gpus")
            for g in gpus if isinstance(gpus, list) else ():
                i = _int(g.get("index")) if isinstance(g, dict) else None
                if i is None or i >= MAX_GPUS:
                    continue
                ident = self.ident.setdefault(i, {})
                for key in ("uuid", "serial", "pci_bus_id", "name"):
                    v = _plain(g.get(key))
                    if v != UNKNOWN:
                        ident[key] = v
                for k, v in _dict(g.get("fields")).items():
                    self.first.setdefault(i, {}).setdefault(k, v)
                    self.last.setdefault(i, {})[k] = v
            for k, v in _dict(s.get("host")).items():
                self.host_first.setdefault(k, v)
                self.host_last[k] = v
        known = [t for t in times if t is not None]
        # the run's length: first to last sample (at least 1 s, so that a rate is never overstated)
        self.seconds = max(1.0, known[-1] - known[0]) if len(known) >= 2 else 1.0

    def identity(self, i: int) -> GpuIdentity:
        d = self.ident.get(i, {})
        return GpuIdentity(i, d.get("uuid", UNKNOWN), d.get("serial", UNKNOWN), d.get("pci_bus_id", UNKNOWN),
                           d.get("name", UNKNOWN))

    def indexes(self) -> list:
        return sorted(set(self.ident) | set(self.last))


def _time(v):
    """Epoch seconds of an ISO-8601 time with its offset, or None."""
    try:
        t = datetime.fromisoformat(v) if isinstance(v, str) and len(v) <= 40 else None
    except ValueError:
        return None
    return t.timestamp() if t is not None and t.tzinfo is not None else None


def _view(node_dir):
    data, problem = read_health(node_dir)
    return (_View(data) if data is not None else None), problem


def gpu_identities(node_dir) -> dict:
    """{index: GpuIdentity} of the GPUs in a node directory's health.json ({} when it has none or cannot be
    read); a key the device did not tell is "unknown"."""
    view, _ = _view(node_dir)
    return {i: view.identity(i) for i in view.indexes()} if view else {}


# -- judging -----------------------------------------------------------------------------------------------------

def _increase(first, last):
    a, b = _int(first), _int(last)
    return None if a is None or b is None else max(0, b - a)


def _at(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _xid_remedy(xid: int, label: str, index: int, host: str) -> str:
    if xid == 79:
        return f"power-cycle {host}; if {label} falls off the bus again, reseat it or replace it"
    if xid == 74:
        return (f"check the NVLink of {label} (nvidia-smi nvlink -s -i {index}; nvidia-smi nvlink -e) and the "
                f"fabric manager; reset the GPU, and replace the board if the error comes back")
    if xid in _XID_MEMORY:
        return (f"reset {label} (nvidia-smi -r -i {index}, or reboot {host}) so that the bad memory is retired or "
                f"remapped; replace the card if the error comes back")
    if xid in _XID_FIRMWARE:
        return f"reset {label} (nvidia-smi -r -i {index}) or reboot {host}; update the driver if it comes back"
    if xid in _XID_PROGRAM:
        return (f"look at the program that ran on {label} at that time (this Xid is often a program fault); "
                f"if it comes back under healthy programs, reset the GPU")
    return f"look Xid {xid} up in NVIDIA's Xid catalog and check {label} (dmesg | grep Xid)"


def _xid_findings(host, gid, xid_field, t, on=None) -> list:
    events = _at(xid_field, "events")
    counts: dict = {}
    for e in events if isinstance(events, list) else ():
        x = _int(_at(e, "xid"))
        if x is not None:
            counts[x] = counts.get(x, 0) + 1
    dropped = _int(_at(xid_field, "dropped")) or 0
    out = []
    where = gid.label() if gid else (on or "a GPU of the host")
    for x in sorted(counts):
        sev = "reject" if x in t["xid_reject"] else "degraded"
        n = counts[x]
        meaning = XID_MEANINGS.get(x, "see NVIDIA's Xid catalog")
        more = f" (and {dropped} more events not kept)" if dropped else ""
        remedy = _xid_remedy(x, where, gid.index if gid else 0, host) if gid else \
            f"find the GPU at {on} (nvidia-smi -q) and reset it; replace it if Xid {x} comes back"
        out.append(HealthFinding(host, sev, "xid", {"xid": x, "count": n},
                                 f"Xid {x} ({meaning}) on {where}: {n} event{'s' * (n != 1)} during the run{more}",
                                 remedy, gid))
    return out


def _gpu_findings(host, gid, first, last, t, seconds) -> list:
    out = []
    label, i = gid.label(), gid.index

    def add(sev, field, value, reason, remedy):
        out.append(HealthFinding(host, sev, field, value, reason, remedy, gid))

    out += _xid_findings(host, gid, last.get("xid"), t)

    # ECC
    inc = {c: _increase(_at(first, "ecc", c, "uncorrected"), _at(last, "ecc", c, "uncorrected"))
           for c in ("volatile", "aggregate")}
    now = {c: _int(_at(last, "ecc", c, "uncorrected")) for c in ("volatile", "aggregate")}
    if any(v is not None and v >= t["ecc_uncorrected_increase_reject"] for v in inc.values()):
        add("reject", "ecc.uncorrected", {"increase": inc, "count": now},
            f"uncorrected ECC errors on {label} during the run (volatile +{inc['volatile'] or 0}, aggregate "
            f"+{inc['aggregate'] or 0}): results computed on it may be wrong",
            f"drain {host}; reset {label} (nvidia-smi -r -i {i}) so that the bad rows are remapped, and replace the "
            f"card if uncorrected errors come back")
    elif any(v is not None and v >= t["ecc_uncorrected_history_degraded"] for v in now.values()):
        add("degraded", "ecc.uncorrected", {"count": now},
            f"{label} has counted uncorrected ECC errors before this run (volatile {now['volatile']}, aggregate "
            f"{now['aggregate']}), none during it",
            f"watch {label}: check its row remapping (nvidia-smi -q -d ROW_REMAPPER -i {i}) and replace it if "
            f"uncorrected errors keep coming")

    # row remapping
    if _at(last, "row_remap", "failure") is True:
        add("reject", "row_remap.failure", True,
            f"row remapping failed on {label}: its memory has no spare row left for a failing one",
            f"replace {label}: a row remap failure cannot be repaired by a reset")
    elif _at(last, "row_remap", "pending") is True:
        add("degraded", "row_remap.pending", True,
            f"a row remap is pending on {label}: the bad memory row stays in use until the GPU is reset",
            f"reset {label} (nvidia-smi -r -i {i}, or reboot {host}) to apply the pending row remap")

    # retired pages
    rp_last = _dict(last.get("retired_pages"))
    total = [_int(rp_last.get(k)) for k in ("single_bit_ecc", "double_bit_ecc")]
    if rp_last.get("pending") is True:
        add("degraded", "retired_pages.pending", True,
            f"pages are pending retirement on {label}: the bad memory stays in use until the GPU is reset",
            f"reset {label} (nvidia-smi -r -i {i}, or reboot {host}) to retire the pending pages")
    if all(v is not None for v in total) and sum(total) >= t["retired_pages_reject"]:
        add("reject", "retired_pages.count", sum(total),
            f"{label} has {sum(total)} retired pages (at least {t['retired_pages_reject']}: its memory is wearing out)",
            f"replace {label}")
    elif all(v is not None for v in total) and sum(total) >= t["retired_pages_degraded"]:
        add("degraded", "retired_pages.count", sum(total),
            f"{label} has {sum(total)} retired pages (at least {t['retired_pages_degraded']}; "
            f"{t['retired_pages_reject']} call for a replacement)",
            f"plan to replace {label}; watch its retired pages (nvidia-smi -q -d PAGE_RETIREMENT -i {i})")
    else:
        rinc = [_increase(_at(first, "retired_pages", k), rp_last.get(k)) for k in ("single_bit_ecc", "double_bit_ecc")]
        if sum(v or 0 for v in rinc) >= t["retired_pages_increase_degraded"]:
            add("degraded", "retired_pages.count", {"single_bit_ecc": total[0], "double_bit_ecc": total[1]},
                f"{label} retired {sum(v or 0 for v in rinc)} memory page(s) during the run",
                f"reset {label} (nvidia-smi -r -i {i}) to retire them, and watch it for more")

    # PCIe
    pcie = _dict(last.get("pcie"))
    gen, mgen, width, mwidth = (_int(pcie.get(k)) for k in ("busy_max_gen", "max_gen", "busy_max_width", "max_width"))
    low = [f"gen {gen} of {mgen}"] if gen is not None and mgen is not None and gen < mgen else []
    low += [f"x{width} of x{mwidth}"] if width is not None and mwidth is not None and width < mwidth else []
    if low:
        add("degraded", "pcie.link", {"busy_max_gen": gen, "max_gen": mgen, "busy_max_width": width,
                                      "max_width": mwidth},
            f"the PCIe link of {label} stayed below its maximum while the GPU was busy ({', '.join(low)}; an idle "
            f"GPU lowers its link, this was seen under load): host-device copies are slower",
            f"reseat {label}, check its slot, riser and cable, and the BIOS PCIe settings (nvidia-smi -q -d PCIE "
            f"-i {i} under load shows the link)")
    replay = _increase(_at(first, "pcie", "replay_counter"), pcie.get("replay_counter"))
    if replay is not None and replay >= t["pcie_replay_increase_degraded"]:
        add("degraded", "pcie.replay_counter", {"increase": replay, "count": _int(pcie.get("replay_counter"))},
            f"{replay} PCIe replays on {label} during the run: the link retransmits, it is marginal",
            f"reseat {label} and check its slot, riser and cable; replace the riser or the card if replays go on")

    # NVLink
    links_last, links_first = _dict(last.get("nvlink")), _dict(first.get("nvlink"))
    states = {k: _at(v, "state") for k, v in links_last.items()}
    down = sorted((k for k, s in states.items() if s == "down"), key=_link_order)
    up = [k for k, s in states.items() if s == "up"]
    if down and up:
        add("reject", "nvlink.state", {"down": down, "links": len(states)},
            f"NVLink link{'s' * (len(down) != 1)} {', '.join(down)} of {label} down ({len(up)} of {len(states)} up): "
            f"GPU-to-GPU traffic falls back to slower paths or fails",
            f"check the NVLink of {label} (nvidia-smi nvlink -s -i {i}), the NVSwitch fabric manager "
            f"(systemctl status nvidia-fabricmanager), then reset the GPU or reboot {host}; replace the board if "
            f"the link stays down")
    elif down:
        add("degraded", "nvlink.state", {"down": down, "links": len(states)},
            f"all {len(down)} NVLink links of {label} are down: no NVLink bridge or switch is attached, or the "
            f"fabric is down",
            f"if {label} should have NVLink, start the fabric manager on {host} (systemctl start "
            f"nvidia-fabricmanager) or reboot it, and check the bridge or baseboard")
    errors: dict = {}
    for k, v in links_last.items():
        for c in ("crc_flit", "crc_data", "replay", "recovery"):
            d = _increase(_at(links_first, k, c), _at(v, c))
            if d is None:
                continue
            if (d / seconds > t["nvlink_crc_per_s_degraded"]) if c.startswith("crc") \
                    else d >= t["nvlink_error_increase_degraded"]:
                errors.setdefault(k, {})[c] = d
    if errors:
        worst = ", ".join(f"link {k}: " + " ".join(f"{c} +{n}" for c, n in errors[k].items())
                          for k in sorted(errors, key=_link_order))
        add("degraded", "nvlink.errors", errors,
            f"NVLink errors on {label} during the run of {seconds:.0f} s ({worst}; CRC errors count above "
            f"{t['nvlink_crc_per_s_degraded']:g}/s, replays and recoveries from "
            f"{t['nvlink_error_increase_degraded']}): the link retries, it is marginal",
            f"check the NVLink of {label} (nvidia-smi nvlink -e -i {i}); reset the GPU, and replace the board if the "
            f"counters keep rising")

    # clock event reasons
    seen = last.get("clock_events_seen")
    bad = [r for r in CLOCK_EVENTS_DEGRADED if isinstance(seen, list) and r in seen]
    if bad:
        add("degraded", "clock_events", bad,
            f"{label} slowed its clocks during the run: " + "; ".join(CLOCK_EVENT_MEANINGS[r] for r in bad),
            f"check the cooling and power of {label} (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {i}): "
            f"fans, airflow, inlet temperature, power supplies")

    # persistence mode
    if last.get("persistence_mode") == "disabled":
        add("degraded", "persistence_mode", "disabled",
            f"persistence mode is off on {label}: the driver tears down and re-initialises the GPU around "
            f"every program, which costs start-up time and loses state between jobs",
            f"enable persistence mode for {label}: run nvidia-persistenced on {host}, or nvidia-smi -pm 1 -i {i}")
    return out


def _link_order(k):
    return (0, int(k)) if isinstance(k, str) and k.isdigit() else (1, str(k))


def _host_findings(host, first, last, t) -> list:
    out = []

    def add(sev, field, value, reason, remedy):
        out.append(HealthFinding(host, sev, field, value, reason, remedy, None))

    # Xid lines of GPUs the monitor did not see (a GPU not given to this run)
    events = last.get("xid_other")
    by_pci: dict = {}
    for e in events if isinstance(events, list) else ():
        pci = _plain(_at(e, "pci"), _WORD)
        by_pci.setdefault(pci, []).append(e)
    for pci, evs in sorted(by_pci.items()):
        out += _xid_findings(host, None, {"events": evs}, t, on=f"the GPU at PCI {pci} (not monitored by this run)")

    # InfiniBand / RoCE ports
    ports_first = {(_plain(_at(p, "device"), _WORD), _int(_at(p, "port"))): p
                   for p in first.get("ib_ports") or [] if isinstance(p, dict)} \
        if isinstance(first.get("ib_ports"), list) else {}
    ports = [p for p in last.get("ib_ports") or [] if isinstance(p, dict)] \
        if isinstance(last.get("ib_ports"), list) else []
    fastest: dict = {}
    for p in ports:
        rate = p.get("rate_gbps")
        if _plain(p.get("state"), _WORD) == "ACTIVE" and isinstance(rate, (int, float)) and not isinstance(rate, bool):
            layer = _plain(p.get("link_layer"), _WORD)
            fastest[layer] = max(fastest.get(layer, 0.0), float(rate))
    for p in ports:
        dev, num = _plain(p.get("device"), _WORD), _int(p.get("port"))
        name = f"{dev} port {num}"
        state = _plain(p.get("state"), _WORD)
        phys = _plain(p.get("phys_state"), _WORD)
        layer = _plain(p.get("link_layer"), _WORD)
        was = _plain(_at(ports_first.get((dev, num)), "state"), _WORD)
        check = (f"check the cable, transceiver and switch port of {name} on {host} (ibstat {dev} {num}; "
                 f"ibv_devinfo -d {dev})")
        if state not in ("ACTIVE", UNKNOWN):
            went = was == "ACTIVE"
            add("reject" if went else "degraded", "ib.state", {"port": name, "state": state, "phys_state": phys},
                f"{layer} port {name} is {state} (physical {phys})" +
                (": it went down during the run" if went else ": a port the job may need is not up"), check)
        rate = p.get("rate_gbps")
        top = fastest.get(layer)
        if state == "ACTIVE" and top and isinstance(rate, (int, float)) and not isinstance(rate, bool) \
                and rate < top * t["ib_rate_min_fraction"]:
            add("degraded", "ib.rate", {"port": name, "rate_gbps": rate, "host_max_gbps": top},
                f"{layer} port {name} runs at {rate:g} Gb/s, below the {top:g} Gb/s of the host's fastest "
                f"{layer} port: it trained at a lower speed or width", check)
        c_first, c_last = _dict(_at(ports_first.get((dev, num)), "counters")), _dict(p.get("counters"))
        inc = {k: _increase(c_first.get(k), c_last.get(k)) for k in c_last}
        downed = inc.get("link_downed")
        if downed is not None and downed >= t["ib_link_downed_increase_reject"]:
            add("reject", "ib.link_downed", {"port": name, "increase": downed},
                f"{layer} port {name} went down {downed} time(s) during the run (link flapping)", check)
        sym = inc.get("symbol_error")
        if sym is not None and sym >= t["ib_symbol_error_increase_degraded"]:
            add("degraded", "ib.symbol_error", {"port": name, "increase": sym},
                f"{sym} symbol errors on {layer} port {name} during the run: the physical link is marginal", check)
        other = {k: v for k, v in inc.items() if k not in ("link_downed", "symbol_error") and _WORD.match(str(k))
                 and v is not None and v >= t["ib_error_increase_degraded"]}
        if other:
            add("degraded", "ib.errors", {"port": name, "increase": other},
                f"error counters rose on {layer} port {name} during the run: " +
                ", ".join(f"{k} +{v}" for k, v in sorted(other.items())), check)

    # CPU frequency governor
    gov = last.get("cpu_governor")
    if isinstance(gov, dict):
        others = {_plain(k, _WORD): _int(v) for k, v in gov.items() if k != "performance"}
        if others:
            add("degraded", "cpu_governor", dict(sorted(others.items())),
                "CPU frequency governor " + ", ".join(f"{k} on {v} CPU(s)" for k, v in sorted(others.items())) +
                ", not performance: the CPUs that feed the GPUs and the network clock down between bursts",
                f"set the governor to performance on {host} (cpupower frequency-set -g performance)")
    return out


def health_findings(host: str, node_dir, thresholds: dict | None = None) -> list:
    """Every health finding of a node directory's health.json, GPUs in index order then the host; [] when the node
    has no health.json. A health.json that is there but unreadable is one degraded finding (field
    ``health.json``): a host that hides its health is not healthy. ``thresholds`` overrides entries of THRESHOLDS."""
    t = {**THRESHOLDS, **(thresholds or {})}
    view, problem = _view(node_dir)
    if view is None:
        if problem is None:
            return []
        return [HealthFinding(host, "degraded", HEALTH_FILE, None, f"the health of {host} cannot be read: {problem}",
                              f"look at monitor.log in the node directory of {host} and rerun")]
    out = []
    for i in view.indexes():
        out += _gpu_findings(host, view.identity(i), view.first.get(i, {}), view.last.get(i, {}), t, view.seconds)
    out += _host_findings(host, view.host_first, view.host_last, t)
    return out


def health_unknowns(node_dir) -> list:
    """[(GpuIdentity or None for the host, field)] of what the device, driver or VM did not expose: whole fields
    (``retired_pages``), parts (``ecc.aggregate.uncorrected``; NVLink as ``nvlink.*.crc_data``) and identity keys
    (``serial``). ``pcie.busy_max_gen`` unknown means the GPU was never seen busy: the link under load is not known.
    [] when there is no readable health.json."""
    view, _ = _view(node_dir)
    if view is None:
        return []
    out = []
    for i in view.indexes():
        gid = view.identity(i)
        out += [(gid, k) for k in ("uuid", "serial", "pci_bus_id") if getattr(gid, k) == UNKNOWN]
        fields = view.last.get(i, {})
        for name in ("xid", "ecc", "retired_pages", "row_remap", "pcie", "nvlink", "clock_events",
                     "persistence_mode"):
            for path in _unknown_leaves(fields.get(name, UNKNOWN), name):
                if path not in [p for g, p in out if g is gid]:
                    out.append((gid, path))
    for name in ("cpu_governor", "ib_ports"):
        value = view.host_last.get(name, UNKNOWN)
        if name == "ib_ports" and isinstance(value, list):
            paths = []
            for p in value:
                for path in _unknown_leaves(p, f"ib.{_plain(_at(p, 'device'), _WORD)}.{_int(_at(p, 'port'))}"):
                    paths.append(path)
            out += [(None, p) for p in paths]
        else:
            out += [(None, p) for p in _unknown_leaves(value, name)]
    return out


def _unknown_leaves(value, path: str) -> list:
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            sub = "*" if path == "nvlink" else str(k)
            for p in _unknown_leaves(v, f"{path}.{sub}"):
                if p not in out:
                    out.append(p)
        return out
    if isinstance(value, list):
        return []
    return [path] if value == UNKNOWN or value is None else []
