#!/usr/bin/env python3
"""How fast the small stop and timeout paths answer, on this machine. Prints its figures; the unit tests check
only that each one happens, with bounds that catch a hang.

  1. the host monitor (monitors/monitor.py) from SIGTERM to its exit, after 5 samples at 0.2 s
  2. the IPMI power reader's stop() while ipmitool hangs: the call, and until its thread has ended
  3. fan_out: how long after its deadline it returns while one call still runs, and how long after a stop
     request plus its grace it returns while one call still runs
  4. the node launcher's reaping of a process that ignores SIGTERM (grace 0.3 s, then SIGKILL)

Usage: .venv/bin/python bench/latency.py [--repeat 5]
Each figure: the median of the runs, with the smallest and largest.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MONITOR = REPO / "monitors" / "monitor.py"


def wait_until(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def lines_of(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def monitor_stop() -> float:
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        out = Path(tmp) / "node0"
        proc = subprocess.Popen([sys.executable, str(MONITOR), "--out-dir", str(out), "--interval", "0.2",
                                 "--gpu", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not wait_until(lambda: lines_of(out / "cpu_monitor.log") >= 5, 60):
                raise SystemExit("the monitor wrote no samples within 60 s")
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            return time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()


class _Log:
    def __call__(self, msg):
        pass

    def once(self, msg):
        pass


def ipmi_stop() -> tuple[float, float]:
    from monitors import flagperf_format as ff
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        tool = Path(tmp) / "ipmitool"
        tool.write_text("#!/bin/sh\nexec sleep 30\n")
        tool.chmod(0o755)
        old_path = os.environ.get("PATH", "")
        os.environ["PATH"] = f"{tmp}:{old_path}"
        try:
            ipmi = ff.IpmiPower(str(Path(tmp) / "pwr_monitor.log"), 0.05, _Log(), extra_dirs=()).start()
            wait_until(lambda: ipmi.proc is not None, 10)
            t0 = time.monotonic()
            ipmi.stop()
            call = time.monotonic() - t0
            ipmi.thread.join(60)
            return call, time.monotonic() - t0
        finally:
            os.environ["PATH"] = old_path


def fan_out_deadline() -> float:
    from flagperf.hosts.fanout import fan_out
    release = threading.Event()
    t0 = time.monotonic()
    try:
        fan_out(["fast", "slow"], lambda x: x if x == "fast" else release.wait(60), deadline_s=0.5)
    finally:
        release.set()
    return time.monotonic() - t0 - 0.5


def fan_out_stop() -> float:
    from flagperf.hosts.fanout import fan_out
    asked, release = threading.Event(), threading.Event()
    t0 = time.monotonic()
    threading.Timer(0.3, asked.set).start()
    try:
        fan_out(["quick", "long"], lambda x: x if x == "quick" else release.wait(60), deadline_s=60,
                stop=asked.is_set, stop_grace_s=0.5)
    finally:
        release.set()
    return time.monotonic() - t0 - (0.3 + 0.5)


def reap() -> float:
    from launcher.node_launcher import NODE_TOKEN_ENV, reap_marked
    token = "bench/%d/%s" % (os.getpid(), secrets.token_hex(8))
    child = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('ready', flush=True); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", child], env=dict(os.environ, **{NODE_TOKEN_ENV: token}),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        t0 = time.monotonic()
        reap_marked(token, term_grace_s=0.3, kill_wait_s=2.0, log=lambda line: None)
        return time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def show(label: str, values: list[float]) -> None:
    print(f"{label:<66} {statistics.median(values):7.3f} s   ({min(values):.3f} - {max(values):.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    runs: dict[str, list[float]] = {}

    def add(label, value):
        runs.setdefault(label, []).append(value)

    for _ in range(a.repeat):
        add("monitor: SIGTERM to exit", monitor_stop())
        call, thread = ipmi_stop()
        add("ipmi: stop() with ipmitool hanging", call)
        add("ipmi: stop() until its thread has ended", thread)
        add("fan_out: return after the deadline (0.5 s)", fan_out_deadline())
        add("fan_out: return after the stop request + grace (0.3 + 0.5 s)", fan_out_stop())
        add("node launcher: reap a process that ignores SIGTERM (grace 0.3 s)", reap())
    print(f"{a.repeat} runs each, medians (smallest - largest):")
    for label, values in runs.items():
        show(label, values)


if __name__ == "__main__":
    main()
