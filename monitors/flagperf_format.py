"""FlagPerf's monitor files, written in their places when the monitor runs with ``--format flagperf``
(test-config key MONITOR_FORMAT). Standard library only; runs on the hosts.

The files go where FlagPerf puts them, the node directory itself, under FlagPerf's names (flagperf's own files
then go to its ``flagperf/`` folder, NATIVE_MONITOR_DIR), one sample per monitor tick (the same samples as the
native files, FlagPerf's second-resolution timestamps):

    cpu_monitor.log, mem_monitor.log   <%Y-%m-%d-%H:%M:%S>\\t<fraction 0..1>
    pwr_monitor.log                    <%Y-%m-%d-%H:%M:%S>\\t<whole-machine watts from ipmitool>, or one line
                                       <%Y-%m-%d-%H:%M:%S>\\tnan when ipmitool gives no reading (EMPTY_POWER)
    <vendor>_monitor.log               a timestamp line, one line per accelerator, a blank line

The accelerator lines follow the layout FlagPerf's reader for that vendor expects (``LAYOUTS``); every other
vendor gets nvidia-smi's ``34C 62W 3MiB 40960MiB 0%``. docs/monitors.md describes every format.
"""
import math
import os
import re
import subprocess
import sys
import threading
from datetime import datetime

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from monitors.accel import _cli  # noqa: E402

STAMP = "%Y-%m-%d-%H:%M:%S"
IPMI_MIN_INTERVAL_S = 5.0       # ipmitool asks the BMC, which answers in 0.1-2 s: never more often than this
IPMI_TIMEOUT_S = 10.0
IPMI_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")  # a non-login ssh PATH lacks sbin
# pwr_monitor.log's value when no reading ever came. FlagPerf's own writer then writes the stamp and a tab with
# nothing after it, which its reader (float of the text after the tab, less its last character) cannot parse,
# and an empty file gives its summary an empty series, on which its numpy max fails; float("nan") parses and
# numpy's mean, max and std give nan: no number, said as one, and no crash.
EMPTY_POWER = "nan"

# FlagPerf reads each vendor's file with its own parser (base/vendors/<vendor>/<vendor>_analysis.py); these
# vendors' parsers expect another column layout than nvidia-smi's.
LAYOUTS = {"ascend": "npu-smi", "cambricon": "cnmon"}
# The readings each layout's reader parses as numbers: a line without one of them would stop that reader.
REQUIRED = {
    "nvidia-smi": ("temp_c", "power_w", "mem_used_mib", "mem_total_mib"),
    "npu-smi": ("power_w", "temp_c", "mem_used_mib"),
    "cnmon": ("temp_c", "power_w", "mem_used_mib", "mem_total_mib"),
}


def layout_of(vendor):
    return LAYOUTS.get(vendor, "nvidia-smi")


def stamp(when):
    """FlagPerf's timestamp: local time to the second."""
    return when.strftime(STAMP)


def fraction(pct):
    """A percentage as FlagPerf's fraction: awk's ``%.6g`` of the value / 100 (``0.375``, ``0``, ``1``)."""
    return "%.6g" % round(pct / 100.0, 4)


def _finite(row, key):
    v = row.get(key)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def cpu_line(when, row):
    """``<stamp>\\t<busy fraction>``, or None when the sample has no utilisation."""
    return "%s\t%s\n" % (stamp(when), fraction(row["util_pct"])) if _finite(row, "util_pct") else None


def mem_line(when, row):
    """``<stamp>\\t<used / total>`` (FlagPerf: ``free``'s used over total), or None."""
    if not (_finite(row, "used_mib") and _finite(row, "total_mib")) or row["total_mib"] <= 0:
        return None
    return "%s\t%s\n" % (stamp(when), fraction(100.0 * row["used_mib"] / row["total_mib"]))


def accel_line(layout, row):
    """One accelerator's line in ``layout``; None when a reading that layout's reader needs is missing."""
    if not all(_finite(row, k) for k in REQUIRED[layout]):
        return None
    util = ("%d%%" % round(row["util_pct"])) if _finite(row, "util_pct") else "N/A"
    if layout == "npu-smi":         # npu-smi's columns: power, temperature, AICore %, HBM used (MB)
        return "%.1f %d %s %d" % (row["power_w"], round(row["temp_c"]),
                                  util.rstrip("%"), round(row["mem_used_mib"]))
    if layout == "cnmon":           # cnmon's: temperature, power W/, used MiB/, total, Util
        return "%dC %d W/ %d MiB/ %d %s" % (round(row["temp_c"]), round(row["power_w"]),
                                            round(row["mem_used_mib"]), round(row["mem_total_mib"]), util)
    return "%dC %dW %dMiB %dMiB %s" % (round(row["temp_c"]), round(row["power_w"]), round(row["mem_used_mib"]),
                                      round(row["mem_total_mib"]), util)


def accel_block(layout, when, rows):
    """(text, None) of one sample: the timestamp line, one line per accelerator in index order, a blank line;
    or (None, why) when an accelerator lacks a reading the reader needs (FlagPerf's readers count lines to
    tell accelerators apart, so a sample is written whole or not at all)."""
    lines = []
    for row in sorted(rows, key=lambda r: r.get("gpu", 0)):
        line = accel_line(layout, row)
        if line is None:
            missing = [k for k in REQUIRED[layout] if not _finite(row, k)]
            return None, "accelerator %s has no %s" % (row.get("gpu"), ", ".join(missing))
        lines.append(line + "\n")
    if not lines:
        return None, None
    return "%s\n%s\n" % (stamp(when), "".join(lines)), None


def parse_ipmi_dcmi(text):
    """Watts from ``ipmitool dcmi power reading`` (``Instantaneous power reading: 312 Watts``), or None."""
    m = re.search(r"Instantaneous power reading\s*:\s*(\d+(?:\.\d+)?)\s*Watts", text or "", re.I)
    return float(m.group(1)) if m else None


def parse_ipmi_sdr(text):
    """The largest Watts reading of ``ipmitool sdr list`` (FlagPerf's whole-machine figure), or None."""
    values = [float(v) for v in re.findall(r"\|\s*(\d+(?:\.\d+)?)\s+Watts\s*\|", text or "", re.I)]
    return max(values) if values else None


IPMI_QUERIES = ((("dcmi", "power", "reading"), parse_ipmi_dcmi), (("sdr", "list"), parse_ipmi_sdr))


class IpmiPower:
    """Whole-machine power through ipmitool, read in a thread of its own (the BMC can take seconds): DCMI's
    instantaneous reading, else the largest Watts sensor of the SDR. The file is created at once (FlagPerf's
    summary opens it whatever happened); when ipmitool is missing or neither query gives watts, ``reason`` says
    why and the file gets one line with EMPTY_POWER, as it does when the monitor stops before any reading."""

    def __init__(self, path, interval, log, extra_dirs=None):
        self.path, self.log = path, log
        self.f = open(path, "w")    # OSError: the caller's to report
        self.write_lock = threading.Lock()
        self.empty_written = False
        self.extra_dirs = IPMI_DIRS if extra_dirs is None else extra_dirs
        self.interval = max(float(interval), IPMI_MIN_INTERVAL_S)
        self.stop_event = threading.Event()
        self.proc = None
        self.lock = threading.Lock()
        self.source = None      # the query that worked, e.g. "ipmitool dcmi power reading"
        self.reason = None
        self.samples = 0
        self.thread = threading.Thread(target=self._run, name="ipmi", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _query(self, exe, args, parse):
        """(watts, None) or (None, why)."""
        with self.lock:
            if self.stop_event.is_set():
                return None, "stopped"
            try:
                self.proc = subprocess.Popen([exe, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C", LANG="C"))
            except OSError as e:
                return None, "ipmitool could not be started: %s" % e
        try:
            out, err = self.proc.communicate(timeout=IPMI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None, "ipmitool %s did not finish within %g s" % (" ".join(args), IPMI_TIMEOUT_S)
        code = self.proc.returncode
        if code != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()
            return None, "ipmitool %s exited with status %d%s" % (" ".join(args), code,
                                                                  ": " + detail[-1][:200] if detail else "")
        watts = parse(out.decode("utf-8", "replace"))
        return (watts, None) if watts is not None else (None, "ipmitool %s printed no Watts reading" % " ".join(args))

    def _run(self):
        exe = _cli.find_tool("ipmitool", self.extra_dirs)
        if exe is None:
            self.reason = "ipmitool not found (looked on PATH%s)" % (
                " and in " + ", ".join(self.extra_dirs) if self.extra_dirs else "")
            self._write_empty()
            return
        query, problems = None, []
        for args, parse in IPMI_QUERIES:
            watts, why = self._query(exe, args, parse)
            if watts is not None:
                query = (args, parse)
                break
            problems.append(why)
        if query is None:
            stopped = self.stop_event.is_set()
            self.reason = "the monitor stopped before ipmitool answered" if stopped else "; ".join(problems)
            self._write_empty()
            return
        self.source = "ipmitool " + " ".join(query[0])
        while True:
            if watts is not None and not self._write("%g" % watts):
                return
            if self.stop_event.wait(self.interval):
                return
            watts, why = self._query(exe, *query)
            if why is not None and why != "stopped":
                self.log.once("flagperf format: pwr: %s" % why)

    def _write(self, value, empty=False):
        """Append ``<stamp>\\t<value>``; False when the file is closed or cannot be written (a full disk: logged
        once, the other files go on). A reading never follows the empty value, nor the empty value a reading."""
        with self.write_lock:
            if self.f.closed or self.empty_written or (empty and self.samples):
                return False
            try:
                self.f.write("%s\t%s\n" % (stamp(datetime.now()), value))
                self.f.flush()
            except OSError as e:
                self.reason = self.reason or "cannot write %s: %s" % (self.path, e)
                self.log.once("flagperf format: pwr: cannot write %s: %s" % (self.path, e))
                return False
            if empty:
                self.empty_written = True
            else:
                self.samples += 1
            return True

    def _write_empty(self):
        """EMPTY_POWER, once, when no reading was written."""
        self._write(EMPTY_POWER, empty=True)

    def stop(self):
        """Stop the thread (ipmitool killed), write EMPTY_POWER if no reading came, close the file."""
        self.stop_event.set()
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
        self.thread.join(1.0)
        self._write_empty()
        with self.write_lock:
            self.f.close()

    def status(self):
        """What monitor_status.json says of this file, under the pwr sensor: the file (relative to the node
        directory), with the ipmitool query that gave its readings or why it holds no reading."""
        out = {"flagperf_file": os.path.basename(self.path)}
        if self.source is not None and self.samples:
            out["flagperf_source"] = self.source
        else:
            out["flagperf_reason"] = self.reason or "the monitor stopped before ipmitool answered"
        return out


class FlagPerfFiles:
    """FlagPerf's files of one monitor, at the top of its node directory ``out_dir``: cpu, mem and the
    accelerator file from the monitor's own samples (for the sensors it has), pwr from ipmitool (IpmiPower;
    always there)."""

    def __init__(self, out_dir, vendor, sensors, interval, log):
        self.dir = out_dir
        os.makedirs(self.dir, exist_ok=True)
        self.layout, self.log = layout_of(vendor), log
        names = {"cpu": "cpu_monitor.log", "mem": "mem_monitor.log", "gpu": "%s_monitor.log" % vendor}
        self.files = {name: open(os.path.join(self.dir, names[name]), "w") for name in names if name in sensors}
        self.names = {name: names[name] for name in self.files}
        self.ipmi = IpmiPower(os.path.join(self.dir, "pwr_monitor.log"), interval, log).start()

    def write(self, sensor, when, rows):
        """Add one sample of ``sensor`` (the rows the native file got) to its FlagPerf file."""
        f = self.files.get(sensor)
        if f is None or not rows:
            return
        if sensor == "gpu":
            text, why = accel_block(self.layout, when, rows)
            if why:
                self.log.once("flagperf format: %s left out of %s (samples with it are skipped)"
                              % (why, os.path.basename(f.name)))
        else:
            text = (cpu_line if sensor == "cpu" else mem_line)(when, rows[0])
        if text:
            f.write(text)
            f.flush()

    def status(self, sensor):
        """The keys monitor_status.json gets under ``sensor`` (merged into the sensor's entry)."""
        if sensor == "pwr":
            return self.ipmi.status()
        return {"flagperf_file": self.names[sensor]} if sensor in self.names else {}

    def close(self):
        self.ipmi.stop()
        for f in self.files.values():
            f.close()

