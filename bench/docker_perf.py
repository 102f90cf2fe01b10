#!/usr/bin/env python3
"""Performance of the docker runtime on real parts: 2 OpenSSH hosts on loopback (testbed/sshbed.py), a real
Docker engine reached through each host's SSH connection, the cpu vendor image. Prints its figures.

  1. image preparation on 2 hosts: cold (a tag no daemon has) and warm (the tag is there)
  2. shipping instead of building: `save` from host 0 and `load` into host 1, both through the SSH tunnels
  3. container start to first rank start, from the run log and the node launcher's log, next to the same
     figure for the bare runtime

Usage: .venv/bin/python bench/docker_perf.py [--repeat 3]
The loopback hosts share this machine's single Docker engine, so "2 hosts" means two builds side by side on
one daemon, and shipping measures the bytes through SSH twice (out and back in).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed import dockerenv, sshbed  # noqa: E402


def prep_images(bed, env, root, repeat):
    from flagperf.config import load_config
    from flagperf.hosts import open_transport
    from flagperf.hosts.fanout import fan_out
    from flagperf.images import ensure_image, image_spec
    from flagperf.runtimes.docker import client_for
    cluster = bed.write_cluster_yaml(root / "cluster.yaml")
    colds, warms, ships = [], [], []
    for i in range(repeat):
        nonce = f"{time.time_ns()}"
        conf = root / f"test{i}.yaml"
        conf.write_text(f"VENDOR: cpu\nRUNTIME: docker\nFLAGPERF_LOG_PATH: {root / 'result'}\nCLUSTER: {cluster}\n"
                        f"DOCKER_BUILD_ARGS: {{BASE_IMAGE: {env.torch_image}, BENCH_NONCE: '{nonce}'}}\n"
                        f"CASES:\n  \"gemm:pytorch:x:2:1:1\": null\n")
        cfg = load_config(conf)
        spec = image_spec(cfg, "pytorch")
        transports = [open_transport(h, cfg.cluster) for h in cfg.cluster.hosts]
        clients = [client_for(t) for t in transports]
        try:
            for label, store in (("cold", colds), ("warm", warms)):
                t0 = time.monotonic()
                outs = fan_out(list(range(2)), lambda k: ensure_image(clients[k], spec, root / f"build{k}.log",
                                                                      nocache=True), deadline_s=1800)
                dt = time.monotonic() - t0
                assert all(o.ok for o in outs), [o.error for o in outs]
                store.append(dt)
                print(f"  image preparation on 2 hosts, {label}: {dt:.2f} s "
                      f"(built: {[o.value[1] for o in outs]})")
            # Ship: save through host 0's tunnel, load through host 1's (after removing the tag there).
            image = clients[0].images.get(spec.tag)
            size = image.attrs["Size"]
            t0 = time.monotonic()
            data = b"".join(image.save(chunk_size=1 << 20, named=True))
            clients[0].images.remove(spec.tag, force=True)
            clients[1].images.load(data)
            dt = time.monotonic() - t0
            ships.append(dt)
            print(f"  ship instead: save + load of {size / 1e6:.0f} MB through the SSH tunnels: {dt:.2f} s")
            clients[1].images.remove(spec.tag, force=True)
        finally:
            for t in transports:
                t.close()
    print(f"  median: cold {statistics.median(colds):.2f} s, warm {statistics.median(warms):.2f} s, "
          f"ship {statistics.median(ships):.2f} s")


def start_to_rank(bed, env, root, repeat):
    cluster = bed.write_cluster_yaml(root / "cluster2.yaml")
    home = root / "home"
    (home / "benchmarks").mkdir(parents=True)
    for name in ("launcher", "monitors", "vendors"):
        shutil.copytree(REPO / name, home / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "flagperf_contract.py", home / "flagperf_contract.py")
    shutil.copytree(REPO / "benchmarks" / "common", home / "benchmarks" / "common")
    shutil.copytree(REPO / "tests" / "e2e" / "benchmarks" / "sleeper", home / "benchmarks" / "sleeper")
    import os
    import subprocess
    for runtime in ("docker", "bare"):
        figures = []
        for i in range(repeat):
            d = root / f"{runtime}{i}"
            d.mkdir()
            conf = d / "test.yaml"
            conf.write_text(f"VENDOR: cpu\nRUNTIME: {runtime}\nFLAGPERF_LOG_PATH: {d / 'result'}\nCLUSTER: {cluster}\n"
                            f"DOCKER_BUILD_ARGS: {{BASE_IMAGE: {env.torch_image}}}\n"
                            f"CASES:\n  \"sleeper:pytorch:x:1:1:1\": null\n")
            p = subprocess.run([sys.executable, "-m", "flagperf", "run", "--config", str(conf)], capture_output=True,
                               text=True, env={**os.environ, "FLAGPERF_HOME": str(home)})
            assert p.returncode == 0, p.stdout + p.stderr
            run = next((d / "result").glob("run*"))
            runlog = (run / "flagperf_run.log").read_text().splitlines()
            # the "$ <launcher argv>" line, logged as the launcher is started (not the `docker run` line of the
            # container's creation, which also names the launcher)
            launched = next(line for line in runlog if ": $ " in line and "node_launcher.py --spec" in line)
            node = next(run.glob("*/round1/*_noderank0"))
            started = next(line for line in (node / "launcher.log").read_text().splitlines()
                           if "rank 0 (local 0) started" in line)
            dt = (datetime.fromisoformat(started.split()[0]) - datetime.fromisoformat(launched.split()[0]))
            figures.append(dt.total_seconds())
        print(f"  {runtime}: launch to first rank start, median {statistics.median(figures):.2f} s "
              f"(runs: {', '.join(f'{x:.2f}' for x in figures)})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = dockerenv.get_env(log_path="/tmp/flagperf-dockerd.log")
    sshbed.ensure_openssh()
    root = Path(tempfile.mkdtemp(prefix="flagperf-dockerperf-", dir="/tmp"))
    bed = sshbed.SSHBed(root / "bed", 2, port=sshbed.find_free_port(sshbed.bed_addresses(2)))
    try:
        bed.start()
        print("1-2. image preparation on 2 hosts (one shared engine), and shipping instead of building")
        prep_images(bed, env, root, args.repeat)
        print("3. container start to first rank start (2 SSH hosts)")
        start_to_rank(bed, env, root, args.repeat)
    finally:
        bed.stop()
        dockerenv.cleanup_flagperf_containers(env.client)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
