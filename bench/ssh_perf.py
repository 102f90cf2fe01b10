#!/usr/bin/env python3
"""Performance of the SSH paths, on real OpenSSH servers on loopback (testbed/sshbed.py). Prints its figures.

  1. `flagperf check` on 1, 16 and 32 hosts (target: 32 hosts within 1.5x of 1 host)
  2. orchestration overhead of one round on 4 hosts: round wall time minus the ranks' own run time
     (target <= 2 s)
  3. collect throughput for 200 MB of logs from one host (target >= 200 MB/s)

Usage: .venv/bin/python bench/ssh_perf.py [--repeat 3] [--collect-mb 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAST_CPU = 0.0
sys.path.insert(0, str(REPO))

from testbed import sshbed  # noqa: E402


def children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def flagperf(*args, env=None, check=True):
    global LAST_CPU
    c0 = children_cpu()
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "flagperf", *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    dt = time.monotonic() - t0
    LAST_CPU = children_cpu() - c0          # CPU time of the flagperf driver process itself
    if check and p.returncode != 0:
        raise SystemExit(f"flagperf {' '.join(map(str, args))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return dt, p


def make_home(root: Path) -> Path:
    """A FLAGPERF_HOME with the repo's tree plus the test-only sleeper benchmark."""
    home = root / "home"
    (home / "benchmarks").mkdir(parents=True)
    for name in ("launcher", "monitors", "vendors"):
        (home / name).symlink_to(REPO / name)
    for bench in (REPO / "benchmarks").iterdir():
        (home / "benchmarks" / bench.name).symlink_to(bench)
    shutil.copytree(REPO / "tests" / "e2e" / "benchmarks" / "sleeper", home / "benchmarks" / "sleeper")
    return home


def conf(path: Path, cluster: Path, cases: dict) -> Path:
    lines = ["VENDOR: cpu", "RUNTIME: bare", f"FLAGPERF_LOG_PATH: {path.parent / 'result'}", f"CLUSTER: {cluster}",
             "CASES:"] + [f'  "{k}": null' for k in cases]
    path.write_text("\n".join(lines) + "\n")
    return path


def bench_check(bed, root, repeat):
    rows = {}
    for n in (1, 16, 32):
        d = root / f"check{n}"
        d.mkdir()
        cluster = bed.write_cluster_yaml(d / "cluster.yaml")
        data = json.loads(json.dumps(__import__("yaml").safe_load(cluster.read_text())))
        data["HOSTS"] = data["HOSTS"][:n]
        cluster.write_text(__import__("yaml").safe_dump(data))
        c = conf(d / "test.yaml", cluster, {f"gemm:pytorch:x:{n}:1:1": None})
        flagperf("deploy", "--config", c)
        times, cpus = [], []
        for _ in range(repeat):
            times.append(flagperf("check", "--config", c)[0])
            cpus.append(LAST_CPU)
        rows[n] = statistics.median(times)
        print(f"  check on {n:2d} host(s): median {rows[n]:.2f} s, driver CPU {statistics.median(cpus):.2f} s  "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)})")
    print(f"  ratio 32 hosts / 1 host: {rows[32] / rows[1]:.2f}x (target <= 1.5x)")
    return rows


def bench_round(bed, root, repeat, home):
    d = root / "round4"
    d.mkdir()
    cluster = bed.write_cluster_yaml(d / "cluster.yaml")
    data = __import__("yaml").safe_load(cluster.read_text())
    data["HOSTS"] = data["HOSTS"][:4]
    cluster.write_text(__import__("yaml").safe_dump(data))
    c = conf(d / "test.yaml", cluster, {"sleeper:pytorch:x:4:1:1": None})
    env = {"FLAGPERF_HOME": str(home)}
    flagperf("deploy", "--config", c, env=env)
    overheads = []
    for _ in range(repeat):
        wall, _ = flagperf("run", "--config", c, env=env)
        run = sorted((d / "result").glob("run*"))[-1]
        summary = json.loads((run / "summary.json").read_text())
        rnd = summary["cases"][0]["rounds"][0]
        ranks = [r for n in rnd["nodes"] for r in n["ranks"]]
        rank_time = max(r["duration_s"] for r in ranks)
        overhead = rnd["duration_s"] - rank_time
        overheads.append(overhead)
        print(f"  round on 4 hosts: round {rnd['duration_s']:.2f} s, ranks {rank_time:.2f} s, overhead "
              f"{overhead:.2f} s; whole `flagperf run` {wall:.2f} s")
    print(f"  orchestration overhead, median: {statistics.median(overheads):.2f} s (target <= 2 s)")
    return overheads


def bench_collect(bed, root, megabytes, repeat):
    from flagperf.config import HostSpec
    from flagperf.hosts.ssh import SSHTransport
    h = bed.hosts[0]
    src = Path(h["result_path"]) / "bench" / "node"
    src.mkdir(parents=True, exist_ok=True)
    n_files = 50
    size = megabytes * 1_000_000 // n_files
    block = os.urandom(1 << 20)
    for i in range(n_files):
        with open(src / f"rank{i}.out.log", "wb") as f:
            left = size
            while left:
                f.write(block[:min(left, len(block))])
                left -= min(left, len(block))
    host = HostSpec(h["address"], bed.port, h["user"], h["key"], sys.executable, h["flagperf_path"])
    rates = []
    for _ in range(repeat):
        dst = root / "collected"
        shutil.rmtree(dst, ignore_errors=True)
        tr = SSHTransport(host, str(bed.known_hosts))
        try:
            t0 = time.monotonic()
            files, nbytes = tr.fetch_tree(str(src), dst)
            dt = time.monotonic() - t0
        finally:
            tr.close()
        rate = nbytes / dt / 1e6
        rates.append(rate)
        print(f"  collect {files} files, {nbytes / 1e6:.0f} MB in {dt:.2f} s: {rate:.0f} MB/s "
              f"(cipher {tr.ssh.remote_cipher})")
    print(f"  collect throughput, median: {statistics.median(rates):.0f} MB/s (target >= 200 MB/s)")
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--collect-mb", type=int, default=200)
    ap.add_argument("--only", choices=("check", "round", "collect"), help="run one of the three measurements")
    args = ap.parse_args()
    sshbed.ensure_openssh()
    root = Path(tempfile.mkdtemp(prefix="flagperf-sshperf-", dir="/tmp"))
    addresses = sshbed.bed_addresses(32)
    bed = sshbed.SSHBed(root / "bed", 32, port=sshbed.find_free_port(addresses))
    print(f"machine: {os.cpu_count()} CPU(s); {bed.n} sshd on 127.0.0.2..; python {sys.version.split()[0]}")
    try:
        t0 = time.monotonic()
        bed.start()
        print(f"test bed of 32 hosts up in {time.monotonic() - t0:.2f} s")
        if args.only in (None, "check"):
            print("1. flagperf check")
            bench_check(bed, root, args.repeat)
        if args.only in (None, "round"):
            print("2. orchestration overhead of one round on 4 hosts")
            bench_round(bed, root, args.repeat, make_home(root))
        if args.only in (None, "collect"):
            print(f"3. collect throughput ({args.collect_mb} MB of logs)")
            bench_collect(bed, root, args.collect_mb, args.repeat)
    finally:
        bed.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
