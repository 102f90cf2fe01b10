"""nnodes ``each`` end to end: one independent job per host on real OpenSSH hosts (testbed/sshbed.py), real
node launchers and ranks. A host made slow on purpose is ranked last and flagged; a host that fails stops no
other host; and on localhost a real gemm reports per-rank figures that rank the "GPUs" (CPU ranks)."""

import json
import re
import time

from .conftest import only_run_dir, processes_matching, run_cli, write_conf
from .test_benchmarks_cpu import free_port


def _sleeper_case(home, hw, text):
    override = home / "vendors" / "cpu" / "sleeper"
    override.mkdir(exist_ok=True)
    (override / f"config_{hw}.yaml").write_text(text)


def test_slow_host_is_ranked_last_and_flagged(tmp_path, ssh_bed_factory, flagperf_home):
    bed = ssh_bed_factory(3)
    bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    slow = bed.addresses[2]
    # every host sleeps 0.4 s per round; the slow one 3 x as long (sleeper's test-only slow_hosts)
    _sleeper_case(flagperf_home, "slow", f'sleep_s: 0.4\nslow_hosts: {{"{slow}": 3}}\n')
    conf = write_conf(tmp_path, {"sleeper:pytorch:slow:each:1:2": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=240)
    assert code == 1, out + err                     # an outlier fails the run ...
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["name"] == "sleeper-pytorch-slow-eachx1" and case["each"] is True and case["nnodes"] == 3
    assert case["status"] == "passed" and summary["status"] == "passed"       # ... but not its case
    for rnd in case["rounds"]:
        assert [n["node"] for n in rnd["nodes"]] == [f"{a}_noderank0" for a in bed.addresses]
        assert all(n["status"] == "passed" and n["finished"]["metric"] == "slept_s" for n in rnd["nodes"])
    (ranking,) = summary["rankings"]
    assert ranking["metric"] == "slept_s" and ranking["higher_is_better"] is False
    assert "3.5" in ranking["rule"] and "5%" in ranking["rule"] and ranking["failed_hosts"] == []
    entries = ranking["entries"]
    assert [e["gpu"] for e in entries] == [None, None, None]         # the sleeper reports no per-rank list
    assert entries[-1]["host"] == slow and entries[-1]["outlier"] is True and entries[-1]["rank"] == 3
    assert entries[-1]["value"] > 1.1 and entries[-1]["rounds"] == 2
    assert sorted(e["host"] for e in entries[:2]) == sorted(bed.addresses[:2])
    assert not any(e["outlier"] for e in entries[:2])
    assert re.search(rf"OUTLIER: sleeper-pytorch-slow-eachx1: host {re.escape(slow)}: 1\.\d+ s, score", out), out
    report = (run / "report.md").read_text()
    assert f"**OUTLIER: sleeper-pytorch-slow-eachx1: host {slow}:" in report
    # every host was its own node 0, with its own address and port, a world of its own
    for i, address in enumerate(bed.addresses):
        launch = json.loads((run / case["name"] / "round1" / f"{address}_noderank0" / "launch.json").read_text())
        env = launch["env"]
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["NODE_RANK"], env["NNODES"]) == \
            (address, str(29555 + i), "1", "0", "1")
    # `flagperf report` shows the ranking again from summary.json
    code, out, err = run_cli(["report", run])
    assert code == 0 and f"OUTLIER: sleeper-pytorch-slow-eachx1: host {slow}" in out, out + err


def test_a_failing_host_stops_no_other_host(tmp_path, ssh_bed_factory, flagperf_home):
    bed = ssh_bed_factory(3)
    bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    bad = bed.addresses[1]
    _sleeper_case(flagperf_home, "fail", f'sleep_s: 4\nfail_rank: 0\nfail_code: 5\nfail_after_s: 0.2\n'
                                         f'fail_hosts: ["{bad}"]\n')
    conf = write_conf(tmp_path, {"sleeper:pytorch:fail:each:1:1": "null"}, CLUSTER="cluster.yaml")
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=240)
    assert code == 1, out + err
    assert f"{bad}_noderank0 failed; the other hosts go on" in out, out
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    (rnd,) = case["rounds"]
    assert case["status"] == "failed" and rnd["status"] == "failed"
    assert rnd["failure"]["reason"] == f"{bad}_noderank0: rank 0 failed (exit code 5)"
    assert rnd["duration_s"] >= 4.0 and time.monotonic() - t0 >= 4.0          # the others slept to the end
    nodes = {n["host"]: n for n in rnd["nodes"]}
    assert nodes[bad]["status"] == "failed" and nodes[bad]["ranks"][0]["exit_code"] == 5
    for address in (bed.addresses[0], bed.addresses[2]):
        n = nodes[address]
        assert n["status"] == "passed" and n["launcher_exit"] == 0, n
        assert [(r["exit_code"], r["stopped_by_launcher"]) for r in n["ranks"]] == [(0, False)]
        assert n["finished"]["value"] >= 4.0
    (ranking,) = summary["rankings"]
    assert ranking["failed_hosts"] == [bad]
    assert sorted(e["host"] for e in ranking["entries"]) == sorted([bed.addresses[0], bed.addresses[2]])
    assert processes_matching("sleeper/main.py") == []


def test_gemm_each_on_localhost_ranks_its_ranks(tmp_path):
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {free_port()}\n")
    conf = write_conf(tmp_path, {"gemm:pytorch:local:each:2:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], timeout=240)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["name"] == "gemm-pytorch-local-eachx2" and case["status"] == "passed"
    node = case["rounds"][0]["nodes"][0]
    per_rank = node["finished"]["checks"]["details"]["per_rank"]
    assert per_rank["metric"] == node["finished"]["metric"] == "tflops_fp32" and len(per_rank["values"]) == 2
    assert per_rank["values"][0] == node["finished"]["value"]
    (ranking,) = summary["rankings"]
    assert [(e["host"], e["gpu"]) for e in ranking["entries"]][0] == ("localhost", None)
    assert sorted(e["gpu"] for e in ranking["entries"][1:]) == [0, 1]
    assert not any(e["outlier"] for e in ranking["entries"])       # one host, two ranks: nothing to flag
    assert "gemm-pytorch-local-eachx2: hosts ranked by tflops_fp32" in out
