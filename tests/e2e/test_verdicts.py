"""End-to-end: the node verdicts of real local runs (CPU, localhost) in summary.json, on the terminal, in
`flagperf report`, report.md and report.html, and the exit code."""

import json

from .conftest import only_run_dir, run_cli, write_conf
from .test_benchmarks_cpu import free_port


def conf_with_port(tmp_path, cases):
    """A localhost config on a free MASTER_PORT (other runs on this machine may hold the default one)."""
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {free_port()}\n")
    return write_conf(tmp_path, cases, CLUSTER="cluster.yaml")


def test_a_passing_run_accepts_localhost_and_exits_0(tmp_path, flagperf_home):
    conf = conf_with_port(tmp_path, {"sleeper:pytorch:ok:1:2:1": "null"})
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdicts"] == [{"host": "localhost", "verdict": "accept", "reasons": [], "gpus": []}]
    assert "node verdicts: 1 accept" in out
    assert "node localhost: ACCEPT" in (run / "flagperf_run.log").read_text()


def test_a_case_that_fails_on_the_node_rejects_it_and_exits_1(tmp_path, flagperf_home):
    override = flagperf_home / "vendors" / "cpu" / "sleeper"
    override.mkdir()
    (override / "config_fail.yaml").write_text("fail_rank: 1\nfail_code: 7\n")
    conf = conf_with_port(tmp_path, {"sleeper:pytorch:ok:1:1:1": "null", "sleeper:pytorch:fail:1:2:1": "null"})
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 1, out + err
    assert "Traceback" not in out + err
    run = only_run_dir(tmp_path / "result")
    (v,) = json.loads((run / "summary.json").read_text())["verdicts"]
    assert v["host"] == "localhost" and v["verdict"] == "reject"
    (r,) = v["reasons"]
    assert (r["source"], r["severity"], r["subject"], r["case"]) == ("failure", "reject", "node",
                                                                    "sleeper-pytorch-fail-1x2")
    assert "round 1: failed: rank 1 failed (exit code 7)" in r["detail"] and "failing on purpose" in r["detail"]
    assert "rank1.out.log" in r["remedy"]
    assert "node verdicts: 1 reject" in out and "ERROR: node localhost: REJECT (1 reason(s))" in out

    report = (run / "report.md").read_text()
    assert report.index("## Node verdicts") < report.index("## Cases")
    assert "- localhost: **REJECT** (1 reason(s))" in report

    code, out, err = run_cli(["report", str(run)], home=flagperf_home)
    assert code == 0, out + err
    assert "node verdicts: 1 reject" in out and "failing on purpose" in out
    html = run / "report.html"
    page = html.read_text()
    assert page.index("<h2>Node verdicts</h2>") < page.index("<h2>Cases</h2>")
