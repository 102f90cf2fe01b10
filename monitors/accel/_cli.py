"""Shared by the accelerator plug-ins that read a vendor's command-line tool (npu_smi, cnmon): find and run the
tool, parse its table rows, and a sampler that runs it once per sample. Standard library only; nothing here
raises on a missing, failing or garbled tool: every problem is a one-line reason.
"""
import math
import os
import re
import shutil
import subprocess

TIMEOUT_S = 10.0
ROW_KEYS = ("gpu", "temp_c", "power_w", "mem_used_mib", "mem_total_mib", "util_pct")   # data-line keys, in order
INFO_KEYS = ("name", "bus_id", "health")                                                # monitor_status.json only
BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]+\Z")
_INT = re.compile(r"-?\d+\Z")
_FLOAT = re.compile(r"-?(\d+\.\d*|\.\d+|\d+)\Z")


def find_tool(name, extra_dirs=()):
    """The executable ``name`` on PATH, else in one of ``extra_dirs`` (vendors install their tools in folders a
    non-login ssh shell does not have on its PATH); None when it is nowhere."""
    found = shutil.which(name)
    if found:
        return found
    for folder in extra_dirs:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def run_tool(argv, extra_dirs=(), timeout=TIMEOUT_S):
    """Run ``argv`` (a list; argv[0] is looked up with find_tool), no shell, stdin closed, C locale.
    -> (stdout, None), or (None, one-line reason) when the tool is missing, cannot start, times out or exits
    non-zero."""
    command = " ".join(argv)
    exe = find_tool(argv[0], extra_dirs)
    if exe is None:
        return None, "%s not found (looked on PATH%s)" % (
            argv[0], " and in " + ", ".join(extra_dirs) if extra_dirs else "")
    try:
        proc = subprocess.run([exe] + list(argv[1:]), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout,
                              env=dict(os.environ, LC_ALL="C", LANG="C"))
    except subprocess.TimeoutExpired:
        return None, "%s did not finish within %g s" % (command, timeout)
    except (OSError, ValueError) as exc:
        return None, "%s could not be started: %s" % (command, exc)
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        detail = _last_line(proc.stderr.decode("utf-8", "replace")) or _last_line(out)
        return None, "%s exited with status %d%s" % (command, proc.returncode, ": " + detail if detail else "")
    return out, None


def table_cells(line):
    """The cells of a ``| a | b |`` table row, stripped; None for any other line (borders, banners)."""
    s = line.strip()
    if len(s) < 2 or s[0] != "|" or s[-1] != "|":
        return None
    return [c.strip() for c in s[1:-1].split("|")]


def number(token, integer=False):
    """``token`` as an int (or a float unless ``integer``) when it is a plain finite number, else None
    (``NA``, ``N/A``, ``-``, ...)."""
    token = (token or "").strip()
    if _INT.match(token):
        return int(token)
    if not integer and _FLOAT.match(token):
        value = float(token)
        return value if math.isfinite(value) else None
    return None


def head_of(text, limit=100):
    """The first non-blank line of ``text``, shortened: to quote unreadable output in a reason."""
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit] + "..."
    return ""


def renumber_if_ambiguous(devices):
    """Give the devices indices 0..n-1 in output order when their own indices are missing or repeat."""
    indices = [d.get("gpu") for d in devices]
    if None in indices or len(set(indices)) != len(indices):
        for i, d in enumerate(devices):
            d["gpu"] = i
    return devices


def data_row(device):
    """The data-line fields of a parsed device: plain finite numbers of ROW_KEYS, ``gpu`` first."""
    row = {}
    for key in ROW_KEYS:
        value = device.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            row[key] = value
    return row


def device_info(device):
    """The monitor_status.json entry of a parsed device: its index and what the tool says it is."""
    info = {"index": device.get("gpu")}
    for key in INFO_KEYS:
        if device.get(key) not in (None, ""):
            info[key] = device[key]
    return info


def count_devices(argv, parse, extra_dirs=()):
    """``count()`` of a tool-based plug-in: (number of devices, None) or (0, reason)."""
    text, error = run_tool(argv, extra_dirs)
    if error is None:
        devices, error = parse(text)
        if error is None:
            return len(devices), None
    return 0, error


class ToolSampler:
    """Runs the tool once per sample and turns its output into one row per device. A failing run or an
    unreadable output is logged once per distinct message and gives no rows for that sample."""

    def __init__(self, source, argv, parse, devices, log, extra_dirs=(), timeout=TIMEOUT_S):
        self.source, self.argv, self.parse, self.log = source, list(argv), parse, log
        self.extra_dirs, self.timeout = extra_dirs, timeout
        self.status = {"available": True, "source": source, "command": " ".join(argv), "count": len(devices),
                       "devices": [device_info(d) for d in devices]}

    def read(self, now):
        text, error = run_tool(self.argv, self.extra_dirs, self.timeout)
        devices = []
        if error is None:
            devices, error = self.parse(text)
        if error is not None:
            self.log.once("%s: %s" % (self.source, error))
            return []
        return [row for row in (data_row(d) for d in devices) if len(row) > 1]

    def close(self):
        pass


def tool_version(text, pattern):
    """The first group of ``pattern`` in the tool's output (its banner's driver version), or None."""
    m = re.search(pattern, text or "") if pattern else None
    return m.group(1) if m else None


def open_sampler(source, argv, parse, log, what, extra_dirs=(), version_pattern=None):
    """``open(log)`` of a tool-based plug-in: (ToolSampler, None), or (None, reason) when the tool fails or
    lists no device (``what`` names the devices in that reason: NPU, MLU). ``version_pattern`` finds the
    driver version in the tool's banner (``driver_version`` in the status, for sys_info.log)."""
    text, error = run_tool(argv, extra_dirs)
    if error is not None:
        return None, error
    devices, error = parse(text)
    if error is not None:
        return None, error
    if not devices:
        return None, "%s lists no %s" % (" ".join(argv), what)
    sampler = ToolSampler(source, argv, parse, devices, log, extra_dirs)
    version = tool_version(text, version_pattern)
    if version:
        sampler.status["driver_version"] = version
    return sampler, None
