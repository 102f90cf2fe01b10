"""Accelerator plug-in ``npu_smi``: Huawei Ascend NPUs, read from the table of ``npu-smi info``.

One row per chip (the unit torch_npu calls a device). ``npu-smi info`` prints, per NPU, a row with its power,
temperature and health, followed by one row per chip with its bus id, AICore utilisation and memory. The
layouts this parser reads (tests/unit/fixtures/accel/npu_smi_*.txt):

- Atlas 800T A2 (910B): ``| 0  910B3 | OK | 93.6  40  0 / 0 |`` then ``| 0 | 0000:C1:00.0 | 0  0 / 0  3161 / 65536 |``
  (Memory-Usage is 0 / 0, the device memory is HBM-Usage);
- Atlas A3 (910_93): the same, but every chip has its own NPU row (the second chip's power is ``-``) and its
  chip row reads ``| <chip>  <Phy-ID> | ...``;
- Atlas 300I / 310P (and the older 310 cards): ``| <chip>  <Device> | bus | AICore  used / total |``, no HBM.

The device index (``gpu=``) is the chip's Device/Phy-ID where the table has one, else the NPU id; when those
repeat, the chips are numbered 0..n-1 in table order. Power and temperature come from the NPU row and go to the
first chip below it. Device memory is HBM-Usage when the chip has HBM, else Memory-Usage (npu-smi's MB).
"""
import os
import re
import sys

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from monitors.accel import _cli  # noqa: E402

SOURCE = "npu-smi"
ARGV = ("npu-smi", "info")
VERSION_PATTERN = r"Version:\s*(\S+)"   # the banner: driver version
# npu-smi is installed as /usr/local/bin/npu-smi (or sbin); the driver package also keeps a copy in its tools.
EXTRA_DIRS = ("/usr/local/bin", "/usr/local/sbin", "/usr/local/Ascend/driver/tools")

_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")


def _pairs(text):
    return [(int(a), int(b)) for a, b in _PAIR.findall(text)]


def _npu_row(cells):
    """``| <npu id> <name> | <health> | <power> <temp> [<hugepages used> / <total>] |`` (or the 950 layout
    ``| <npu id> | <name> | <health> | ... |``) -> dict, or None when the row is not one."""
    ids = cells[0].split()
    if not ids or _cli.number(ids[0], integer=True) is None or len(cells) < 3:
        return None
    values = cells[-1].split()
    name = " ".join(ids[1:]) or (cells[1] if len(cells) >= 4 else "")
    return {"npu": int(ids[0]), "name": name, "health": cells[-2],
            "power_w": _cli.number(values[0]) if values else None,
            "temp_c": _cli.number(values[1], integer=True) if len(values) > 1 else None, "chips": 0}


def _chip_row(cells, npu):
    """``| <chip> [<device or phy-id>] | <bus id> | <aicore %> [<used> / <total>] [<hbm used> / <total>] |``."""
    ids = [_cli.number(t, integer=True) for t in cells[0].split()]
    values = cells[-1]
    pairs = _pairs(values)
    first = values.split()[0] if values.split() else ""
    util = None
    if len(_pairs(values[values.find(first) + len(first):])) == len(pairs):  # the first token is no memory figure
        util = _cli.number(first, integer=True)
    device = {"gpu": ids[1] if len(ids) > 1 and ids[1] is not None else npu["npu"],
              "name": npu["name"], "health": npu["health"],
              "bus_id": cells[-2] if _cli.BUS_ID.match(cells[-2]) else None, "util_pct": util}
    memory = [p for p in pairs[1:2] if p[1] > 0] or [p for p in pairs[:1] if p[1] > 0]  # HBM, else memory
    if memory:
        device["mem_used_mib"], device["mem_total_mib"] = float(memory[0][0]), float(memory[0][1])
    if npu["chips"] == 0:               # the NPU row's power and temperature belong to its first chip
        device["power_w"], device["temp_c"] = npu["power_w"], npu["temp_c"]
    npu["chips"] += 1
    return device


def parse(text):
    """The text of ``npu-smi info`` -> (devices, None), or ([], reason) when it holds no readable NPU table.
    A device is a dict: gpu, name, health, bus_id and the data fields (temp_c, power_w, mem_used_mib,
    mem_total_mib, util_pct; None when npu-smi shows NA or -). Never raises."""
    try:
        return _parse(text)
    except Exception as exc:  # noqa: BLE001 - a parser bug must read as unreadable output, not crash the monitor
        return [], "unreadable npu-smi info output (%s: %s)" % (type(exc).__name__, exc)


def _parse(text):
    if not isinstance(text, str) or not text.strip():
        return [], "npu-smi info printed nothing"
    header, npu, npus, devices = False, None, [], []
    for line in text.splitlines():
        cells = _cli.table_cells(line)
        if cells is None:
            continue                    # borders, the version banner, warnings
        if any("Process id" in c or "Process name" in c for c in cells):
            break                       # the process table follows the devices
        if "Health" in cells or "Bus-Id" in cells:
            header = header or "Health" in cells       # the NPU header row; Bus-Id is on the chip header row
            continue
        if not header or len(cells) < 3:
            continue
        chip_ids = all(_cli.number(t, integer=True) is not None for t in cells[0].split())
        if npu is not None and chip_ids and (_cli.BUS_ID.match(cells[-2]) or cells[-2] in ("NA", "-")):
            devices.append(_chip_row(cells, npu))
            continue
        row = _npu_row(cells)
        if row is not None:
            npu = row
            npus.append(row)
    if not header:
        return [], "no NPU table in npu-smi info output (it begins: %r)" % _cli.head_of(text)
    lonely = [str(n["npu"]) for n in npus if n["chips"] == 0]
    if lonely:
        return [], "malformed npu-smi info output: no chip row for NPU %s" % ", ".join(lonely)
    return _cli.renumber_if_ambiguous(devices), None


def count():
    """(number of NPU chips, None), or (0, reason)."""
    return _cli.count_devices(ARGV, parse, EXTRA_DIRS)


def open(log):  # noqa: A001 - the plug-in interface's name
    """(sampler, None), or (None, reason)."""
    return _cli.open_sampler(SOURCE, ARGV, parse, log, "NPU", EXTRA_DIRS, VERSION_PATTERN)
