"""Readers of FlagPerf's monitor-file formats, written for these tests: they read a file the way FlagPerf's
summary step reads its monitor files, so that tests can check that the files flagperf writes in their place are
read as FlagPerf's own are.

Host files: every line holding a tab is ``<stamp>\\t<value>\\n``; the value is the text after the tab without its
last character (the newline), as a float. Accelerator files: lines are split on single spaces and read by
position; which lines count depends on the vendor, and consecutive data lines are accelerators 0, 1, ...
(modulo the number of accelerators).
"""
from datetime import datetime

STAMP = "%Y-%m-%d-%H:%M:%S"


def read_host_file(path):
    """[(datetime, float)] as FlagPerf reads cpu/mem/pwr_monitor.log; raises where FlagPerf's reader would."""
    out = []
    with open(path) as f:
        for line in f:
            if "\t" in line:
                stamp, value = line.split("\t")
                out.append((datetime.strptime(stamp, STAMP), float(value[:-1])))
    return out


def read_accel_file(path, vendor, devices):
    """{"temp": {i: [...]}, "power": {...}, "mem": {...}, "max_mem": x} as FlagPerf's reader for ``vendor``
    reads ``<vendor>_monitor.log`` with ``devices`` accelerators per sample."""
    result = {"temp": {}, "power": {}, "mem": {}}
    for key in ("temp", "power", "mem"):
        for i in range(devices):
            result[key][i] = []
    nxt = 0
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        if vendor == "ascend":
            if line == "\n" or ":" in line or "-" in line:
                continue
            cols = line.split(" ")
            power, temp = float(cols[0]), float(cols[1])
            mem = int(cols[3].replace("\n", "").replace("/", ""))
        elif "MiB" not in line:
            continue
        elif vendor == "cambricon":
            cols = line.split(" ")
            result.setdefault("max_mem", float(cols[5]))
            temp, power, mem = float(cols[0][:-1]), float(cols[1]), float(cols[3])
        else:                               # nvidia, and the readers that share its layout (kunlunxin, iluvatar)
            cols = line.split(" ")
            result.setdefault("max_mem", float(cols[3][:-3]))
            temp, power, mem = float(cols[0][:-1]), float(cols[1][:-1]), float(cols[2][:-3])
        result["temp"][nxt].append(temp)
        result["power"][nxt].append(power)
        result["mem"][nxt].append(mem)
        nxt = (nxt + 1) % devices
    return result


def accel_stamps(path):
    """The timestamp lines of an accelerator file (the lines FlagPerf's readers skip), as datetimes."""
    with open(path) as f:
        return [datetime.strptime(line.rstrip("\n"), STAMP) for line in f if line.count(":") == 2 and "-" in line]
