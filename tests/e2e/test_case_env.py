"""End-to-end: a case's ``env`` (case configuration) reaches every rank of a real local run (RUNTIME bare,
VENDOR cpu), in both launch modes, is recorded in summary.json, and `flagperf compare` of two runs with two
settings (and two NCCL versions reported by the ranks) shows both."""

import json

from .conftest import only_run_dir, run_cli, write_conf

# A test benchmark: every rank prints the variables its case config names under ``show``; rank 0's FINISHED
# record reports them, and as its NCCL version what PROBE_NCCL says (a CPU run loads no NCCL: the variable
# stands in for two NCCL builds, so that the summary and the comparison are tested with two versions).
PROBE = '''
import json
import os
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
from common import harness  # noqa: E402

log = harness.PerfLog()
log.event("INIT_START")
args, cfg = harness.parse_args()
rank = int(os.environ["RANK"])
log.event("RUN_START")
seen = {name: os.environ.get(name) for name in cfg["show"]}
print(f"rank {rank} sees " + json.dumps(seen, sort_keys=True), flush=True)
log.event("RUN_END")
if rank == 0:
    log.finished(benchmark="envprobe", metric="probe", value=1.0, unit="runs", higher_is_better=True, metrics={},
                 checks={"passed": True, "details": {}},
                 env={"device": "cpu", "nccl": os.environ.get("PROBE_NCCL"), "probe_algo": seen.get("NCCL_ALGO")})
'''
SHOW = ["NCCL_ALGO", "NCCL_IB_HCA", "LD_LIBRARY_PATH", "PROBE_NCCL"]
NODE_SH = '''#!/bin/bash
echo "node command sees NCCL_ALGO=${NCCL_ALGO-unset} LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}"
echo "[FlagPerf Result]vars_seen=1.0vars"
'''


def _probe(home, env_yaml):
    folder = home / "benchmarks" / "envprobe"
    folder.mkdir(exist_ok=True)
    (folder / "main.py").write_text(PROBE)
    (folder / "case_config.yaml").write_text(f"# env probe\nshow: {json.dumps(SHOW)}\nenv:\n{env_yaml}")


def _cluster(tmp_path, port):
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {port}\n")
    return tmp_path / "cluster.yaml"


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_case_env_reaches_every_rank_and_the_summary(tmp_path, flagperf_home):
    env = {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "LD_LIBRARY_PATH": "/opt/nccl-src/build/lib",
           "PROBE_NCCL": "2.21.5"}
    _probe(flagperf_home, "".join(f"  {k}: {json.dumps(v)}\n" for k, v in env.items()))
    conf = write_conf(tmp_path, {"envprobe:pytorch:local:1:2:1": "null"}, CLUSTER=_cluster(tmp_path, _free_port()))
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    node = run / "envprobe-pytorch-local-1x2" / "round1" / "localhost_noderank0"
    for rank in (0, 1):
        log = (node / f"rank{rank}.out.log").read_text()
        assert f"rank {rank} sees {json.dumps(env, sort_keys=True)}" in log, log
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["status"] == "passed" and case["env"] == env and case["nccl"] == "2.21.5"
    assert case["rounds"][0]["env"]["probe_algo"] == "Ring"
    assert json.loads((node / "case_config.json").read_text())["env"] == env

    # a second run: another NCCL (another library path), another algorithm; compare shows both settings
    env2 = dict(env, NCCL_ALGO="Tree", LD_LIBRARY_PATH="/opt/nccl-2.23/lib", PROBE_NCCL="2.23.4")
    del env2["NCCL_IB_HCA"]
    _probe(flagperf_home, "".join(f"  {k}: {json.dumps(v)}\n" for k, v in env2.items()))
    first = run
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    second = next(p for p in (tmp_path / "result").iterdir() if p.name.startswith("run") and p != first)
    code, out, err = run_cli(["compare", first, second])
    assert code == 0, out + err
    line = ("envprobe-pytorch-local-1x2: setup differs: NCCL 2.21.5 -> 2.23.4; env LD_LIBRARY_PATH="
            "/opt/nccl-src/build/lib -> LD_LIBRARY_PATH=/opt/nccl-2.23/lib; env NCCL_ALGO=Ring -> NCCL_ALGO=Tree; "
            "env NCCL_IB_HCA=mlx5_0,mlx5_1 -> NCCL_IB_HCA unset; env PROBE_NCCL=2.21.5 -> PROBE_NCCL=2.23.4")
    assert line in out, out


def test_case_env_reaches_a_node_command(tmp_path):
    """Launch mode node (a main.sh in a CASE_PATHS folder): the node command, and so whatever it starts, has it."""
    cases = tmp_path / "cases"
    (cases / "envsh").mkdir(parents=True)
    (cases / "envsh" / "main.sh").write_text(NODE_SH)
    (cases / "envsh" / "case_config.yaml").write_text("env:\n  NCCL_ALGO: Tree\n  LD_LIBRARY_PATH: /opt/nccl/lib\n")
    conf = write_conf(tmp_path, {"envsh:pytorch:local:1:1:1": "null"}, CASE_PATHS=json.dumps([str(cases)]),
                      CLUSTER=_cluster(tmp_path, _free_port()))
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    log = next(run.glob("*/round1/localhost_noderank0/node.out.log")).read_text()
    assert "node command sees NCCL_ALGO=Tree LD_LIBRARY_PATH=/opt/nccl/lib" in log, log
    (case,) = json.loads((run / "summary.json").read_text())["cases"]
    assert case["env"] == {"NCCL_ALGO": "Tree", "LD_LIBRARY_PATH": "/opt/nccl/lib"} and case["nccl"] is None
