"""End-to-end: a real local run leaves health.json in every node directory, with the host's fields."""

import json

import yaml

from flagperf.results.health import health_findings, read_health
from flagperf_contract import HEALTH_FILE, HEALTH_SCHEMA

from .conftest import REPO, only_run_dir, run_cli


def test_local_run_leaves_health_json(tmp_path):
    """The embedded default config's smallest case (gemm), once: it passes, and each round's node directory has a
    health.json with a start and an end sample and the host fields (the CPU governors, the RDMA ports)."""
    conf = yaml.safe_load((REPO / "configs" / "test_conf.yaml").read_text())
    gemm = [k for k in conf["CASES"] if k.startswith("gemm:")][0]
    conf.update(FLAGPERF_PATH=str(REPO), FLAGPERF_LOG_PATH=str(tmp_path / "result"),
                CLUSTER=str(REPO / "configs" / "cluster.yaml"), CASES={gemm.rsplit(":", 1)[0] + ":1": None})
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(conf))
    code, out, err = run_cli(["run", "--config", path], timeout=150)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "passed"
    nodes = sorted(run.glob(f"*/round*/*_noderank*/{HEALTH_FILE}"))
    assert nodes, sorted(p.relative_to(run) for p in run.rglob("*"))
    for health in nodes:
        data, problem = read_health(health.parent)
        assert problem is None and data["schema"] == HEALTH_SCHEMA
        whys = [s["why"] for s in data["samples"]]
        assert whys[0] == "start" and whys[-1] == "end", whys
        host = data["samples"][-1]["host"]
        assert isinstance(host["ib_ports"], list)
        assert host["cpu_governor"] == "unknown" or isinstance(host["cpu_governor"], dict)
        found = health_findings("localhost", health.parent)   # this machine's own state, whatever it is
        assert all(f.field != HEALTH_FILE for f in found), found
