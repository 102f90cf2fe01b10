#!/usr/bin/env python3
"""What the host monitor costs: run monitors/monitor.py for a while and read its CPU time from /proc.

    python3 bench/monitor_cost.py [--gpu nvml|none] [--interval 1] [--seconds 60]

Prints the monitor's user + system CPU seconds, the share of one core over the wall time, the samples written
and the CPU time per sample. Start-up (imports, NVML init) is counted apart from the steady state: the CPU time
is read once after the first sample and again at the end.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")     # utime + stime


def samples(folder):
    n = 0
    for name in os.listdir(folder):
        if name.endswith("_monitor.log") or name.endswith(".log") and name.startswith(("cpu", "mem")):
            with open(os.path.join(folder, name), errors="replace") as f:
                n = max(n, sum(1 for _ in f))
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="nvml")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="monitor-cost-")
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "monitors", "monitor.py"), "--out-dir", out,
                             "--interval", str(a.interval), "--gpu", a.gpu, "--vendor", "nvidia"])
    deadline = time.monotonic() + 30
    while samples(out) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    t0, c0, n0 = time.monotonic(), cpu_seconds(proc.pid), samples(out)
    time.sleep(a.seconds)
    t1, c1, n1 = time.monotonic(), cpu_seconds(proc.pid), samples(out)
    proc.terminate()
    proc.wait(timeout=10)
    wall, cpu, n = t1 - t0, c1 - c0, max(n1 - n0, 1)
    print(f"monitor --gpu {a.gpu} --interval {a.interval:g}: start-up {c0:.2f} s CPU; steady state {cpu:.3f} s CPU "
          f"in {wall:.1f} s wall = {100 * cpu / wall:.3f}% of one core; {n} samples, {1000 * cpu / n:.2f} ms CPU "
          f"per sample")
    print(f"files: {', '.join(sorted(os.listdir(out)))}")


if __name__ == "__main__":
    main()
