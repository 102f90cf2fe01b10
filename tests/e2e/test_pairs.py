"""nnodes ``pairs`` end to end: a 2-node job on every pair of four real OpenSSH hosts (testbed/sshbed.py), two
disjoint pairs at a time, each job a real collectives benchmark over gloo with one rank per node; the rounds
are the round-robin stages, every pair runs once, and the pair matrix has every pair."""

import itertools
import json

from testbed.sshbed import find_free_port, port_is_free

from flagperf.results.pairs import pair_matrix
from flagperf.results.summary import Summary

from .conftest import only_run_dir, processes_matching, run_cli, write_conf


def test_four_hosts_run_six_pair_jobs_in_three_stages(tmp_path, ssh_bed_factory, flagperf_home):
    bed = ssh_bed_factory(4)
    # job j of a stage listens on MASTER_PORT + j: both ports free on every address of the bed
    base = next(p for p in (find_free_port(bed.addresses) for _ in range(50))
                if port_is_free(p + 1, bed.addresses))
    bed.write_cluster_yaml(tmp_path / "cluster.yaml", master_port=base)
    override = flagperf_home / "vendors" / "cpu" / "collectives"
    override.mkdir(exist_ok=True)
    (override / "config_net.yaml").write_text('ops: [all_reduce]\nsizes: ["64K", "256K"]\ntime_budget_s: 0.3\n'
                                              'warmup: 1\ndist_timeout_s: 60\n')
    conf = write_conf(tmp_path, {"collectives:pytorch:net:pairs:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=600)
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["name"] == "collectives-pytorch-net-pairsx1" and case["pairs"] is True, out + err
    assert case["nnodes"] == 4 and case["status"] == "passed", out + err
    assert [r["dir"] for r in case["rounds"]] == [f"{case['name']}/round1-stage{s}" for s in (1, 2, 3)]
    jobs = []
    for rnd in case["rounds"]:
        assert rnd["status"] == "passed", rnd
        nodes = rnd["nodes"]
        assert [n["node_rank"] for n in nodes] == [0, 1, 0, 1]
        assert len({n["host"] for n in nodes}) == 4                 # no host twice in a stage
        for j, (a, b) in enumerate(zip(nodes[::2], nodes[1::2])):
            assert a["status"] == b["status"] == "passed"
            assert a["finished"]["metric"] == "busbw_all_reduce" and a["finished"]["value"] > 0
            assert a["finished"]["env"]["world_size"] == 2
            assert (a["node"], b["node"]) == (f"{a['host']}_noderank0", f"{b['host']}_noderank1")
            jobs.append((a["host"], b["host"]))
            for n in (a, b):        # every node of job j: its own world of 2, node 0 of the pair its master
                launch = json.loads((run / rnd["dir"] / n["node"] / "launch.json").read_text())
                env = launch["env"]
                assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["NNODES"],
                        env["NODE_RANK"]) == (a["host"], str(base + j), "2", "2", str(n["node_rank"]))
    assert sorted(jobs) == sorted(itertools.combinations(bed.addresses, 2))     # every pair once: 6 jobs
    matrix = pair_matrix(Summary.load(run / "summary.json"))
    assert len(matrix) == 6 and {(p.a, p.b) for p in matrix} == set(jobs)
    assert all(p.value > 0 and p.jobs == 1 and p.failed == 0 and p.unit == "GB/s" for p in matrix)
    assert "collectives-pytorch-net-pairsx1: host pairs by busbw_all_reduce (GB/s, higher is better)" in out
    assert processes_matching(run.name) == []      # no rank, launcher or monitor of the run is left
