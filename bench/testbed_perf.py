#!/usr/bin/env python3
"""How long the real test beds take to come up and do their first work (testbed/). Prints its figures; the tests
of the beds (tests/e2e/test_sshbed.py, test_dockerenv.py) check only that each works.

  1. the SSH bed: 3 OpenSSH servers on 127.0.0.2..4, from start() to every server answering
  2. Docker (skipped without it): `import torch` in a host-network container of the test torch image, and
     a 2-rank gloo all_reduce in two containers

Usage: .venv/bin/python bench/testbed_perf.py [--repeat 3] [--only ssh|docker]
The first Docker run builds the test images (minutes); that set-up is not timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed import sshbed  # noqa: E402


def ssh_bed_start() -> float:
    with tempfile.TemporaryDirectory(prefix="bench-testbed-") as tmp:
        for _attempt in range(4):
            bed = sshbed.SSHBed(Path(tmp) / "bed", 3, port=sshbed.find_free_port(sshbed.bed_addresses(3)))
            try:
                bed.start()
            except sshbed.PortInUse:
                continue
            try:
                return bed.start_seconds
            finally:
                bed.stop()
    raise SystemExit("no free port for the SSH test bed")


def docker_figures(repeat: int) -> dict[str, list[float]]:
    from testbed import dockerenv
    try:
        env = dockerenv.get_env(log_path="/tmp/flagperf-dockerd.log")
    except dockerenv.DockerEnvError as exc:
        print(f"docker: skipped ({exc})")
        return {}
    runs: dict[str, list[float]] = {"docker: import torch in a host-network container": [],
                                    "docker: 2-rank gloo all_reduce in 2 containers": []}
    for _ in range(repeat):
        t0 = time.monotonic()
        env.client.containers.run(env.torch_image, ["python3", "-c", "import torch"], network_mode="host",
                                  remove=True, labels={dockerenv.RUN_LABEL: "bench-testbed"})
        runs["docker: import torch in a host-network container"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        results = dockerenv.run_gloo_allreduce(env.client, env.torch_image, world_size=2, timeout=300,
                                               label="bench-testbed-gloo")
        if any(code != 0 for code, _ in results):
            raise SystemExit(f"the gloo all_reduce failed: {results}")
        runs["docker: 2-rank gloo all_reduce in 2 containers"].append(time.monotonic() - t0)
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", choices=["ssh", "docker"])
    a = p.parse_args()
    runs: dict[str, list[float]] = {}
    if a.only in (None, "ssh"):
        sshbed.ensure_openssh()
        runs["ssh bed: start 3 OpenSSH servers"] = [ssh_bed_start() for _ in range(a.repeat)]
    if a.only in (None, "docker"):
        runs.update(docker_figures(a.repeat))
    print(f"{a.repeat} runs each, medians (smallest - largest):")
    for label, values in runs.items():
        print(f"  {label:<52} {statistics.median(values):6.2f} s   ({min(values):.2f} - {max(values):.2f})")


if __name__ == "__main__":
    main()
