#!/usr/bin/env python3
"""The bounds of docs/reliability.md, measured: runs the tests that prove them (real sshd, Docker and Slurm beds,
as the tests set them up) and prints the seconds each one took next to the documented bound.

The tests assert those bounds with slack for a loaded machine (three times the documented figure), so that they
catch a hang and never fail on a slow host; the figure itself is this script's. Each test records what it
measured as a pytest property (``record_property("seconds", ...)``), read back here from a JUnit XML file.

Usage: .venv/bin/python bench/bounds.py [--only docker|slurm|ssh|local|config] [--repeat 1]
A test that cannot run here (no Docker, no Slurm bed) is listed as skipped.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (group, test node id, what is measured, the documented bound)
BOUNDS = [
    ("local", "tests/e2e/test_disk_errors.py::test_sigterm_during_a_slow_check_is_an_interrupt_not_a_host_failure",
     "SIGTERM during a slow check to exit 130", "10 s"),
    ("ssh", "tests/e2e/test_ssh.py::test_ctrl_c_to_the_process_group_during_a_large_collect",
     "Ctrl-C during a large collect to exit 130", "10 s"),
    ("ssh", "tests/e2e/test_ssh.py::test_sigint_while_connecting_to_a_host_that_never_answers",
     "SIGINT while connecting to a silent host to exit 130", "10 s"),
    ("ssh", "tests/e2e/test_ssh.py::test_frozen_host_fails_the_case_naming_it_within_the_heartbeat_bound",
     "host frozen to the end of the run (detection, stop, next case)", "detected within 30 s"),
    ("docker", "tests/e2e/test_docker.py::test_signal_during_image_build_stops_within_10_s",
     "signal during an image build to exit 130", "10 s"),
    ("docker", "tests/e2e/test_docker.py::test_silent_daemon_fails_the_case_in_bounded_time",
     "whole run against a silent Docker daemon", "10 s per call"),
    ("slurm", "tests/e2e/test_slurm.py::test_an_interrupt_cancels_the_job",
     "interrupt of a running Slurm job to exit 130", "10 s"),
    ("config", "tests/unit/test_config_fuzz.py::test_fuzz_config_loading",
     "CPU time of 5000 fuzzed config loads", ""),
]


def run(nodeids: list[str], xml: Path) -> dict[str, tuple[str, dict]]:
    """{test id: (outcome, properties)} of one pytest run over ``nodeids``."""
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    "-o", "junit_family=xunit1", *nodeids], cwd=REPO, check=False)
    found: dict[str, tuple[str, dict]] = {}
    if not xml.exists():
        return found
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        found.setdefault(name.split("[")[0], (outcome, {}))
        found[name] = (outcome, props)
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=sorted({g for g, *_ in BOUNDS}))
    p.add_argument("--repeat", type=int, default=1)
    a = p.parse_args()
    chosen = [b for b in BOUNDS if a.only in (None, b[0])]
    figures: dict[str, list[float]] = {}
    outcomes: dict[str, set] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bounds-") as tmp:
        for i in range(a.repeat):
            found = run([nodeid for _, nodeid, *_ in chosen], Path(tmp) / f"run{i}.xml")
            for name, (outcome, props) in found.items():
                outcomes.setdefault(name, set()).add(outcome)
                value = props.get("seconds") or props.get("cpu_seconds")
                if value is not None:
                    figures.setdefault(name, []).append(float(value))
    print(f"\n{a.repeat} run(s); medians, with the largest in brackets:")
    for _group, nodeid, what, bound in chosen:
        test = nodeid.split("::")[1]
        rows = sorted(name for name in figures if name == test or name.startswith(test + "["))
        if not rows:
            said = ", ".join(sorted(outcomes.get(test, {"not run"})))
            print(f"  {what:<64} {said:>18}   documented: {bound or '-'}")
        for name in rows:
            values = figures[name]
            label = what + (" " + name[len(test):] if name != test else "")
            print(f"  {label:<64} {statistics.median(values):8.1f} s ({max(values):.1f})   "
                  f"documented: {bound or '-'}")


if __name__ == "__main__":
    main()
