"""Accelerator plug-in ``cnmon``: Cambricon MLUs, read from the overview table that ``cnmon`` prints without
arguments (FlagPerf's own Cambricon monitor reads the same table).

Every card takes two rows (tests/unit/fixtures/accel/cnmon_*.txt):

    | Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |
    | Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | SR-IOV   Compute-Mode |
    |===============================+======================+=======================|
    | 0     /   MLU370-X8    v1.1.6 |         0000:39:00.0 | 0%                N/A |
    |  0%   32C        106 W/ 250 W |     0 MiB/ 23374 MiB | N/A           Default |

(cnmon 4.x prints ``Inited  Driver`` instead of the bus id). The device index (``gpu=``) is the card number;
``util_pct`` is the card's MLU utilisation, ``power_w`` its board power, ``temp_c`` its temperature. The
process table after the cards is ignored.
"""
import os
import re
import sys

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from monitors.accel import _cli  # noqa: E402

SOURCE = "cnmon"
ARGV = ("cnmon",)
VERSION_PATTERN = r"Driver\s+v(\S+)"   # the banner: driver version
EXTRA_DIRS = ("/usr/bin", "/usr/local/neuware/bin", "/usr/local/bin")

_NUM = r"(\d+(?:\.\d+)?|N/A|NA|-)"
_USAGE = re.compile(r"^\S+\s+" + _NUM + r"\s*C?\s+" + _NUM + r"\s*W\s*/\s*\S+\s*W")   # fan temp power/cap
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*MiB\s*/\s*(\d+(?:\.\d+)?)\s*MiB")


def _card_row(cells):
    """``| <card> <vf> <name> <firmware> | <bus id> | <util>% <ecc> |`` -> dict, or None."""
    tokens = cells[0].split()
    if not tokens or _cli.number(tokens[0], integer=True) is None:
        return None
    util = cells[-1].split()[0] if cells[-1].split() else ""
    return {"gpu": int(tokens[0]), "name": tokens[2] if len(tokens) > 2 else "",
            "bus_id": cells[1] if len(cells) > 2 and _cli.BUS_ID.match(cells[1]) else None,
            "util_pct": _cli.number(util[:-1] if util.endswith("%") else util, integer=True), "usage": False}


def _usage_row(cells, card):
    """``| <fan>% <temp>C <power> W/ <cap> W | <used> MiB/ <total> MiB | ... |`` into the card above it."""
    m = _USAGE.match(cells[0])
    if m:
        card["temp_c"] = _cli.number(m.group(1), integer=True)
        card["power_w"] = _cli.number(m.group(2))
    if len(cells) > 1:
        mem = _MEMORY.search(cells[1])
        if mem:
            card["mem_used_mib"], card["mem_total_mib"] = float(mem.group(1)), float(mem.group(2))
    card["usage"] = True


def parse(text):
    """The text of ``cnmon`` -> (devices, None), or ([], reason) when it holds no readable card table. A device
    is a dict: gpu, name, bus_id and the data fields (temp_c, power_w, mem_used_mib, mem_total_mib, util_pct;
    None when cnmon shows N/A). Never raises."""
    try:
        return _parse(text)
    except Exception as exc:  # noqa: BLE001 - a parser bug must read as unreadable output, not crash the monitor
        return [], "unreadable cnmon output (%s: %s)" % (type(exc).__name__, exc)


def _parse(text):
    if not isinstance(text, str) or not text.strip():
        return [], "cnmon printed nothing"
    header, card, cards = False, None, []
    for line in text.splitlines():
        cells = _cli.table_cells(line)
        if cells is None:
            continue                    # borders, the date, the version banner
        first = cells[0].split()
        if first and first[0] == "Processes:":
            break                       # the process table follows the cards
        if first and first[0] in ("Card", "Fan"):
            header = True
            continue
        if not header or len(cells) < 2:
            continue
        row = _card_row(cells)
        if row is not None:
            card = row
            cards.append(row)
        elif card is not None and not card["usage"] and "%" in cells[0]:
            _usage_row(cells, card)
    if not header:
        return [], "no card table in cnmon output (it begins: %r)" % _cli.head_of(text)
    lonely = [str(c["gpu"]) for c in cards if not c["usage"]]
    if lonely:
        return [], "malformed cnmon output: no usage row for card %s" % ", ".join(lonely)
    for c in cards:
        del c["usage"]
    return _cli.renumber_if_ambiguous(cards), None


def count():
    """(number of MLU cards, None), or (0, reason)."""
    return _cli.count_devices(ARGV, parse, EXTRA_DIRS)


def open(log):  # noqa: A001 - the plug-in interface's name
    """(sampler, None), or (None, reason)."""
    return _cli.open_sampler(SOURCE, ARGV, parse, log, "MLU", EXTRA_DIRS, VERSION_PATTERN)
