"""A vendor whose dist_backend is a composite spec with a backend of no torch build (``cpu:testcx,cuda:gloo``),
registered by its dist_backend_module: the collectives and p2p benchmarks run unchanged through ``flagperf run``
(2 ranks, CPU), the module imported by every rank and its backend carrying their process groups
(tests/e2e/fixtures/testcx/testcx.py: gloo under another name, registered with Backend.register_backend as
FlagCX's torch plug-in registers flagcx)."""

import json
import os
import socket
from pathlib import Path

import pytest

from .conftest import only_run_dir, run_cli, write_conf

PLUGIN_DIR = Path(__file__).resolve().parent / "fixtures" / "testcx"
QUICK = {"collectives": "sizes: ['64K', '256K']\nwarmup: 1\ntime_budget_s: 0.4\n",
         "p2p": "pairs: [[0, 1]]\nsizes: ['64K']\nwarmup: 1\ntime_budget_s: 0.4\n"}


def make_vendor(home, marks):
    folder = home / "vendors" / "testcx"
    folder.mkdir(parents=True)
    (folder / "vendor.yaml").write_text(
        "name: testcx\ndescription: CPU ranks over a backend registered by a plug-in module\ndevice: cpu\n"
        "dist_backend: 'cpu:testcx,cuda:gloo'\ndist_backend_module: testcx\nvisible_devices_env: null\n"
        "gpu_monitor: none\nframeworks: [pytorch]\ntested: true\ncontainer:\n  gpus: none\nrank_env:\n"
        f"  PYTHONPATH: {json.dumps(str(PLUGIN_DIR))}\n  TESTCX_MARK_DIR: {json.dumps(str(marks))}\n")
    for model, text in QUICK.items():
        (folder / model).mkdir()
        (folder / model / "case_config.yaml").write_text(text)


@pytest.mark.parametrize("model", ["collectives", "p2p"])
def test_benchmark_over_a_registered_backend(tmp_path, flagperf_home, model, monkeypatch):
    # the vendor's rank_env is a default that an inherited PYTHONPATH (CI sets one) wins over: the plug-in's
    # folder goes first in the driver's own as well, as a user's site path would carry an installed plug-in
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PLUGIN_DIR), *inherited]))
    marks = tmp_path / "marks"
    marks.mkdir()
    make_vendor(flagperf_home, marks)
    with socket.socket() as s:          # a port of its own: other runs may hold the default one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"HOSTS: [localhost]\nMASTER_PORT: {port}\n")
    conf = write_conf(tmp_path, {f"{model}:pytorch:cpu:1:2:1": "null"}, VENDOR="testcx", CLUSTER=cluster)
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=300)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    (case,) = json.loads((run / "summary.json").read_text())["cases"]
    (rnd,) = case["rounds"]
    assert rnd["status"] == "passed", rnd
    launch = json.loads((run / rnd["dir"] / "localhost_noderank0" / "launch.json").read_text())
    assert launch["env"]["FLAGPERF_DIST_BACKEND"] == "cpu:testcx,cuda:gloo"
    assert launch["env"]["FLAGPERF_TORCH_PLUGIN"] == "testcx"
    assert rnd["finished"]["checks"]["details"]["backend"] == "cpu:testcx,cuda:gloo"
    # the plug-in's backend made the process group of both ranks
    assert sorted(p.name.split("-pid")[0] for p in marks.iterdir()) == ["testcx-rank0-of-2", "testcx-rank1-of-2"]
