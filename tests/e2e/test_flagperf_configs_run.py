"""End-to-end, through the real CLI: FlagPerf's Python configs (test_conf.py + cluster_conf.py) run a real
flagperf benchmark on localhost with real ranks, and so do the files ``flagperf convert`` writes from them."""

import json

import yaml

from .conftest import only_run_dir, run_cli

PORT = 30110            # MASTER_PORT of these tests (30100-30199)


def flagperf_files(tmp_path, port):
    """A FlagPerf training checkout (an empty benchmarks/) and FlagPerf-format configs pointing at it."""
    training = tmp_path / "FlagPerf" / "training"
    (training / "benchmarks").mkdir(parents=True)
    conf = tmp_path / "test_conf.py"
    conf.write_text(f'''\
"""Test configs"""
import os
VENDOR = "cpu"
RUNTIME = "bare"
ACCE_CONTAINER_OPT = " --gpus all"
PIP_SOURCE = "https://mirror.baidu.com/pypi/simple"
FLAGPERF_PATH = "{training}"
FLAGPERF_LOG_PATH = FLAGPERF_PATH + "/result/"
FLAGPERF_LOG_LEVEL = 'debug'
SHM_SIZE = "32G"
CLEAR_CACHES = False
MONITOR_INTERVAL = 0.5
CASES = {{
    # a flagperf benchmark, written as FlagPerf writes its cases
    "gemm:pytorch_2.0:cpu:1:2:1": None,
}}
''')
    cluster = tmp_path / "cluster_conf.py"
    cluster.write_text(f'''\
"""Cluster configs"""
HOSTS = ["localhost"]
HOSTS_PORTS = ["2222"]
MASTER_PORT = "{port}"
SSH_PORT = "22"
''')
    return training, conf, cluster


def check_passed_run(result_dir, port):
    run = only_run_dir(result_dir)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "passed", summary
    [case] = summary["cases"]
    assert (case["name"], case["status"], case["framework"]) == ("gemm-pytorch_2.0-cpu-1x2", "passed", "pytorch")
    node = run / "gemm-pytorch_2.0-cpu-1x2" / "round1" / "localhost_noderank0"
    launch = json.loads((node / "launch.json").read_text())
    assert launch["env"]["FLAGPERF_FRAMEWORK"] == "pytorch_2.0"
    assert launch["env"]["MASTER_PORT"] == str(port)
    assert launch["framework"] == "pytorch"
    return run


def test_flagperf_python_configs_run_a_benchmark(tmp_path, flagperf_home):
    training, conf, cluster = flagperf_files(tmp_path, PORT)
    code, out, err = run_cli(["run", "--config", conf, "--cluster", cluster], home=flagperf_home)
    assert code == 0, out + err
    warnings = [line for line in err.splitlines() if line.startswith("flagperf: warning: ")]
    assert warnings == [
        f"flagperf: warning: {conf}:7: FLAGPERF_PATH: a FlagPerf training/ folder: its benchmarks/ "
        f"({training / 'benchmarks'}) is used as a CASE_PATHS folder; flagperf deploys its own tree to its default "
        f"FLAGPERF_PATH",
    ]
    run = check_passed_run(training / "result", PORT)
    log = (run / "flagperf_run.log").read_text()
    assert f"WARNING config: {conf}:7: FLAGPERF_PATH: a FlagPerf training/ folder" in log
    effective = yaml.safe_load((run / "effective_config.yaml").read_text())
    assert effective["CASE_PATHS"] == [str(training / "benchmarks")]
    assert effective["FLAGPERF_PATH"] == str(flagperf_home)         # not FlagPerf's folder
    assert effective["cluster"]["MASTER_PORT"] == PORT
    assert effective["cluster"]["HOSTS_PORTS"] == [2222]        # FlagPerf's "2222", for training launchers
    assert effective["CASES"] == {"gemm:pytorch_2.0:cpu:1:2:1": None}


def test_converted_files_run_the_same_benchmark(tmp_path, flagperf_home):
    training, conf, cluster = flagperf_files(tmp_path, PORT + 1)
    out_dir = tmp_path / "converted"
    code, out, err = run_cli(["convert", conf, cluster, "--out", out_dir], home=flagperf_home)
    assert code == 0, out + err
    code, out, err = run_cli(["run", "--config", out_dir / "test_conf.yaml", "--dry-run"], home=flagperf_home)
    assert code == 0 and err == "", out + err
    assert "case gemm-pytorch_2.0-cpu-1x2  [gemm:pytorch_2.0:cpu:1:2:1]" in out
    code, out, err = run_cli(["run", "--config", out_dir / "test_conf.yaml"], home=flagperf_home)
    assert code == 0, out + err
    assert "flagperf: warning" not in err
    check_passed_run(training / "result", PORT + 1)
