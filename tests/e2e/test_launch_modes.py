"""End-to-end launch modes through the real CLI on localhost (RUNTIME bare, VENDOR cpu): a FlagPerf toolkit
(main.sh compiling a C measurement with cc), a torchrun node command declared in benchmark.yaml (gloo, 2 ranks),
a FlagPerf base benchmark started by torchrun, a failing node command and a silent main.sh; cases in flagperf's
own tree and in CASE_PATHS folders (run in place, and deployed to <FLAGPERF_PATH>/cases/). Fixtures in
FlagPerf's formats: tests/e2e/fixtures/."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from testbed.realparts import in_ci, unavailable

from .conftest import only_run_dir, run_cli, write_conf

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOOLKIT = FIXTURES / "toolkits" / "computation"
RESULT_LINE = "[FlagPerf Result]"


@pytest.fixture(scope="module")
def cc():
    """A C compiler for the toolkit; under CI it is installed (build-essential) when missing."""
    if shutil.which("cc") is None and in_ci():
        subprocess.run(["apt-get", "update", "-qq"], check=False, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "build-essential"], check=False, timeout=1200,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if shutil.which("cc") is None:
        unavailable("no C compiler (cc): apt-get install build-essential")
    return shutil.which("cc")


def conf(tmp_path, cases, port, hosts=("localhost",), **extra):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"HOSTS: {json.dumps(list(hosts))}\nMASTER_PORT: {port}\n")
    return write_conf(tmp_path, {k: "null" for k in cases}, CLUSTER=cluster, **extra)


def the_case(run):
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    return summary, case


def results_in(path):
    return [line for line in Path(path).read_text().splitlines() if line.startswith(RESULT_LINE)]


def check_toolkit_run(run, case, out, rounds):
    assert case["status"] == "passed" and case["metric"] == "computation-FP32" and case["unit"] == "TFLOPS"
    assert case["rounds_passed"] == rounds
    for r in case["rounds"]:
        node = run / r["dir"] / "localhost_noderank0"
        lines = results_in(node / "node.out.log")
        assert lines[0].startswith("[FlagPerf Result]computation-FP32=") and lines[0].endswith("TFLOPS")
        assert r["value"] == float(lines[0].split("=")[1][:-len("TFLOPS")]) and r["value"] > 0   # measured
        bw = r["metrics"]["main_memory-bandwidth"]
        assert bw["unit"] == "GB/s" and bw["value"] > 0
        assert r["finished"]["origin"] == "[FlagPerf Result] lines"
        assert r["e2e_time"] > 0            # the node command's duration
        ranks = json.loads((node / "ranks.json").read_text())
        assert ranks["mode"] == "node" and [(x["rank"], x["exit_code"]) for x in ranks["ranks"]] == [(0, 0)]
        assert "noderank 0 of 1, 1 per node, master 127.0.0.1:" in (node / "node.out.log").read_text()
        assert not list(node.glob("rank*.out.log"))
    assert case["stats"]["main_memory-bandwidth"]["n"] == rounds
    # the terminal table, report.md and report.html show the figures with their units
    assert "computation-FP32" in out and "TFLOPS" in out and "main_memory-bandwidth" in out and "GB/s" in out
    md = (run / "report.md").read_text()
    assert "Metrics over the passed rounds (from \\[FlagPerf Result\\] lines):" in md
    assert any(line.startswith("| main_memory-bandwidth |") and line.rstrip().endswith("| GB/s |")
               for line in md.splitlines()), md
    html = (run / "report.html").read_text()
    assert "<td>main_memory-bandwidth</td>" in html and "<td>GB/s</td>" in html


def test_toolkit_in_the_tree(tmp_path, flagperf_home, cc):
    shutil.copytree(TOOLKIT, flagperf_home / "benchmarks" / "computation")
    code, out, err = run_cli(["run", "--config", conf(tmp_path, ["computation:pytorch:local:1:1:2"], 30220)],
                             home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    check_toolkit_run(run, case, out, 2)
    launch = json.loads((run / case["rounds"][0]["dir"] / "localhost_noderank0" / "launch.json").read_text())
    assert launch["mode"] == "node" and launch["argv"] == ["bash", "main.sh"]
    assert launch["cwd"] == str(flagperf_home / "benchmarks" / "computation" / "cpu" / "local")
    assert launch["env"]["NODERANK"] == "0" and launch["env"]["NPROC_PER_NODE"] == "1"


def test_torchrun_node_command_from_benchmark_yaml(tmp_path, flagperf_home):
    shutil.copytree(FIXTURES / "benchmarks" / "allreduce_node", flagperf_home / "benchmarks" / "allreduce_node")
    code, out, err = run_cli(["run", "--config", conf(tmp_path, ["allreduce_node:pytorch:local:1:2:1"], 30222)],
                             home=flagperf_home, timeout=240)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    (r,) = case["rounds"]
    assert r["status"] == "passed" and case["metric"] == "allreduce-busbw" and case["unit"] == "GB/s"
    node = run / r["dir"] / "localhost_noderank0"
    lines = results_in(node / "node.out.log")
    assert sorted(lines)[0].startswith("[FlagPerf Result]Rank 0's allreduce-busbw=")
    assert {k: (m["unit"], m["rank"]) for k, m in r["metrics"].items()} == \
        {"allreduce-busbw@rank0": ("GB/s", 0), "allreduce-busbw@rank1": ("GB/s", 1)}
    assert r["value"] == r["metrics"]["allreduce-busbw@rank0"]["value"] > 0
    assert r["checks"]["details"]["per_rank"]["values"] == [r["metrics"][f"allreduce-busbw@rank{i}"]["value"]
                                                             for i in (0, 1)]
    launch = json.loads((node / "launch.json").read_text())
    assert launch["argv"][1:9] == ["-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                                   "--node_rank=0", "--master_addr=127.0.0.1", "--master_port=30222", "allreduce.py"]
    assert launch["argv"][9:] == ["--world-size=2", f"--result-dir={node}", "--chip=cpu/local"]
    ranks = json.loads((node / "ranks.json").read_text())
    assert ranks["mode"] == "node" and len(ranks["ranks"]) == 1 and ranks["ranks"][0]["exit_code"] == 0


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_failing_node_command_stops_the_other_node(tmp_path, flagperf_home):
    shutil.copytree(FIXTURES / "benchmarks" / "node_fail", flagperf_home / "benchmarks" / "node_fail")
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf(tmp_path, ["node_fail:pytorch:local:2:1:1"], 30224,
                                                      hosts=("localhost", "localhost"))], home=flagperf_home)
    assert code == 1, out + err
    assert time.monotonic() - t0 < 90          # node 0 would have slept 300 s
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    (r,) = case["rounds"]
    f = r["failure"]
    assert r["status"] == "failed" and f["reason"] == "the node command failed (exit code 3)"
    assert f["exit_code"] == 3 and f["node"] == "localhost_noderank1" and f["log"].endswith("node.out.log")
    assert "node 1: giving up" in f["last_lines"]
    assert "the node command failed (exit code 3)" in out and "exit code 3" in out
    node0 = run / r["dir"] / "localhost_noderank0"
    ranks0 = json.loads((node0 / "ranks.json").read_text())
    assert ranks0["mode"] == "node" and ranks0["ranks"][0]["stopped_by_launcher"] is True
    assert ranks0["ranks"][0]["exit_code"] < 0                      # ended by a signal
    pids = [int(p) for p in (node0 / "busy.pids").read_text().split()]
    assert len(pids) == 2 and not any(_alive(p) for p in pids)      # the script and its sleep


def test_a_silent_main_sh_fails_with_the_reason(tmp_path, flagperf_home):
    (flagperf_home / "benchmarks" / "silent").mkdir()
    shutil.copy(FIXTURES / "benchmarks" / "silent" / "main.sh", flagperf_home / "benchmarks" / "silent")
    code, out, err = run_cli(["run", "--config", conf(tmp_path, ["silent:pytorch:local:1:1:1"], 30226)],
                             home=flagperf_home)
    assert code == 1, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    f = case["rounds"][0]["failure"]
    assert f["reason"] == "the node command printed no FINISHED line and no [FlagPerf Result] lines"
    assert f["exit_code"] == 0 and f["last_lines"] == ["done, nothing to report"]
    assert "printed no FINISHED line and no [FlagPerf Result] lines" in out and "exit code 0" in out


def test_toolkit_from_case_paths_in_place_and_deployed(tmp_path, flagperf_home, cc):
    """CASE_PATHS: on a localhost whose FLAGPERF_PATH is the driver's tree the toolkit runs from its own folder;
    with another FLAGPERF_PATH it is deployed to <FLAGPERF_PATH>/cases/computation/ and runs there. A symlink
    out of the case folder is not sent."""
    cases = tmp_path / "toolkits"
    shutil.copytree(TOOLKIT, cases / "computation")
    (tmp_path / "secret.txt").write_text("not for the hosts\n")
    (cases / "computation" / "secret.txt").symlink_to(tmp_path / "secret.txt")
    key = "computation:pytorch:local:1:1:1"

    in_place = tmp_path / "in-place"
    in_place.mkdir()
    code, out, err = run_cli(["run", "--config", conf(in_place, [key], 30228, CASE_PATHS=json.dumps([str(cases)]))],
                             home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(in_place / "result")
    _summary, case = the_case(run)
    check_toolkit_run(run, case, out, 1)
    launch = json.loads((run / case["rounds"][0]["dir"] / "localhost_noderank0" / "launch.json").read_text())
    assert launch["cwd"] == str(cases / "computation" / "cpu" / "local")

    deployed = tmp_path / "deployed"
    deployed.mkdir()
    fp = tmp_path / "fp"
    code, out, err = run_cli(["run", "--config", conf(deployed, [key], 30230, CASE_PATHS=json.dumps([str(cases)]),
                                                      FLAGPERF_PATH=fp)], home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(deployed / "result")
    _summary, case = the_case(run)
    check_toolkit_run(run, case, out, 1)
    launch = json.loads((run / case["rounds"][0]["dir"] / "localhost_noderank0" / "launch.json").read_text())
    assert launch["cwd"] == str(fp / "cases" / "computation" / "cpu" / "local")
    assert (fp / "cases" / "computation" / "cpu" / "local" / "gemm.c").read_bytes() == \
        (TOOLKIT / "cpu" / "local" / "gemm.c").read_bytes()
    assert not (fp / "cases" / "computation" / "secret.txt").exists()
    runlog = (run / "flagperf_run.log").read_text()
    assert "secret.txt: a symlink to" in runlog and "outside the case folder: not sent" in runlog


def flagperf_base_checkout(tmp_path):
    """A FlagPerf base/ folder: benchmarks/ (a case and drivers/) and toolkits/ from the fixtures."""
    base = tmp_path / "FlagPerf" / "base"
    shutil.copytree(FIXTURES / "base" / "benchmarks", base / "benchmarks")
    shutil.copytree(TOOLKIT, base / "toolkits" / "computation")
    return base


def base_config(tmp_path, base, mode, case, nproc, port):
    path = tmp_path / "host.yaml"
    path.write_text(f"FLAGPERF_PATH: {base}\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\nVENDOR: cpu\nRUNTIME: bare\n"
                    f"BENCHMARKS_OR_TOOLKITS: {mode}\nHOSTS: [localhost]\nNPROC_PER_NODE: {nproc}\n"
                    f'MASTER_PORT: "{port}"\nMONITOR_INTERVAL: 0.5\nCASES:\n  "{case}": "pytorch_2.3"\n')
    return path


def test_flagperf_base_benchmark_under_torchrun(tmp_path, flagperf_home):
    """A FlagPerf base config in BENCHMARK mode: main.py under torchrun with --vendor=<vendor>/<chip> and
    --node_size, importing drivers/ from the folder above; every rank's [FlagPerf Result] line is a metric."""
    base = flagperf_base_checkout(tmp_path)
    code, out, err = run_cli(["run", "--config", base_config(tmp_path, base, "BENCHMARK", "computation-FP32:local",
                                                             2, 30238)], home=flagperf_home, timeout=240)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    (r,) = case["rounds"]
    assert r["status"] == "passed" and case["metric"] == "computation-FP32" and case["unit"] == "TFLOPS"
    node = run / r["dir"] / "localhost_noderank0"
    lines = sorted(results_in(node / "node.out.log"))
    assert [line.split("=")[0] for line in lines] == ["[FlagPerf Result]Rank 0's computation-FP32",
                                                      "[FlagPerf Result]Rank 1's computation-FP32"]
    values = [float(line.split("=")[1][:-len("TFLOPS")]) for line in lines]
    assert [r["metrics"][f"computation-FP32@rank{i}"]["value"] for i in (0, 1)] == values and r["value"] == values[0]
    launch = json.loads((node / "launch.json").read_text())
    assert launch["mode"] == "node" and launch["cwd"] == str(base / "benchmarks" / "computation-FP32")
    assert launch["argv"][1:] == ["-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2", "--node_rank=0",
                                  "--master_addr=127.0.0.1", "--master_port=30238", "main.py",
                                  "--vendor=cpu/local", "--node_size=2"]
    assert "computation-FP32@rank1" in out and "TFLOPS" in out


def test_flagperf_base_toolkit(tmp_path, flagperf_home, cc):
    base = flagperf_base_checkout(tmp_path)
    code, out, err = run_cli(["run", "--config", base_config(tmp_path, base, "TOOLKIT", "computation:local", 1,
                                                             30240)], home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    check_toolkit_run(run, case, out, 1)


def test_torchrun_across_two_ssh_hosts_from_case_paths(tmp_path, ssh_bed):
    """A CASE_PATHS benchmark on two real SSH hosts: deployed to each host's <FLAGPERF_PATH>/cases/ (a symlink
    out of the folder is not sent), torchrun once per node, rendezvous across the hosts."""
    cases = tmp_path / "cases"
    shutil.copytree(FIXTURES / "benchmarks" / "allreduce_node", cases / "allreduce_node")
    (tmp_path / "secret.txt").write_text("not for the hosts\n")
    (cases / "allreduce_node" / "secret.txt").symlink_to(tmp_path / "secret.txt")
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml", master_port=30242)
    test = write_conf(tmp_path, {"allreduce_node:pytorch:ssh:2:1:1": "null"}, CLUSTER="cluster.yaml",
                      CASE_PATHS=json.dumps([str(cases)]))
    code, out, err = run_cli(["run", "--config", test], timeout=300)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    (r,) = case["rounds"]
    assert r["status"] == "passed" and case["metric"] == "allreduce-busbw"
    assert {k: m["rank"] for k, m in r["metrics"].items()} == {"allreduce-busbw@rank0": 0, "allreduce-busbw@rank1": 1}
    for node_rank, host in enumerate(ssh_bed.hosts):
        fp = Path(host["flagperf_path"])
        assert (fp / "cases" / "allreduce_node" / "allreduce.py").read_bytes() == \
            (FIXTURES / "benchmarks" / "allreduce_node" / "allreduce.py").read_bytes()
        assert not (fp / "cases" / "allreduce_node" / "secret.txt").exists()
        node = run / r["dir"] / f"{ssh_bed.addresses[node_rank]}_noderank{node_rank}"
        launch = json.loads((node / "launch.json").read_text())
        assert launch["cwd"] == str(fp / "cases" / "allreduce_node")
        assert f"--node_rank={node_rank}" in launch["argv"]
        assert f"--master_addr={ssh_bed.addresses[0]}" in launch["argv"]
        assert results_in(node / "node.out.log")[0].startswith(f"[FlagPerf Result]Rank {node_rank}'s allreduce-busbw=")
    assert "secret.txt: a symlink to" in (run / "flagperf_run.log").read_text()


def test_node_command_in_a_container_from_case_paths(tmp_path, flagperf_home, docker_clean):
    """RUNTIME docker: the torchrun node command runs inside the vendor's container; a CASE_PATHS case on a
    localhost that deploys nothing runs in place, its folder mounted at the same path."""
    from .conftest import materialize

    env = docker_clean
    cases = tmp_path / "cases"
    shutil.copytree(FIXTURES / "benchmarks" / "allreduce_node", cases / "allreduce_node")
    test = conf(tmp_path, ["allreduce_node:pytorch:local:1:2:1"], 30244, RUNTIME="docker",
                DOCKER_BUILD_ARGS=json.dumps({"BASE_IMAGE": env.torch_image}), CASE_PATHS=json.dumps([str(cases)]))
    code, out, err = run_cli(["run", "--config", test], home=materialize(flagperf_home), timeout=600)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    _summary, case = the_case(run)
    (r,) = case["rounds"]
    assert r["status"] == "passed" and set(r["metrics"]) == {"allreduce-busbw@rank0", "allreduce-busbw@rank1"}
    node = run / r["dir"] / "localhost_noderank0"
    launch = json.loads((node / "launch.json").read_text())
    assert launch["cwd"] == str(cases / "allreduce_node") and launch["argv"][0] == "python3"
    assert launch["container_name"] and (node / "env_prepare.log").is_file()      # written inside the container
    assert env.client.containers.list(all=True, filters={"label": f"flagperf.run={run.name}"}) == []
