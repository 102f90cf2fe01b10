"""Launch mode mpi end to end: the real CLI over two real sshd hosts (testbed/sshbed.py) with Debian's Open MPI
(testbed/openmpi.py, installed when missing): one mpirun on node 0 starts a test program compiled here with mpicc
(tests/e2e/fixtures/mpi/fake_flagcx_perf.c, printing FlagCX's perf-test lines) on both hosts; its lines become
per-size metrics. A run in which one rank exits non-zero fails naming that rank."""

import json
import shutil
from pathlib import Path

import pytest

from testbed import openmpi
from testbed.realparts import unavailable

from .conftest import only_run_dir, processes_matching, run_cli, write_conf

SOURCE = Path(__file__).resolve().parent / "fixtures" / "mpi" / "fake_flagcx_perf.c"


@pytest.fixture(scope="module")
def mpi_program(tmp_path_factory):
    """The test program, compiled with Open MPI's mpicc into a folder both loopback hosts see at the same path."""
    try:
        openmpi.ensure_openmpi()
        return openmpi.build(SOURCE, tmp_path_factory.mktemp("mpi") / "fake_flagcx_perf")
    except openmpi.OpenMPIError as exc:
        unavailable(f"Open MPI unavailable: {exc}")


def mpi_case(tmp_path, program, *extra, mpi_args=()):
    """A CASE_PATHS folder with the benchmark ``mpiperf``: launch: mpi over the test program."""
    folder = tmp_path / "cases" / "mpiperf"
    folder.mkdir(parents=True)
    command = [str(program), "-b", "1K", "-e", "64K", "-f", "4", *extra]
    # the bed's hosts are one machine in separate mount namespaces: shared-memory transport cannot cross them
    (folder / "benchmark.yaml").write_text(f"launch: mpi\ncommand: {json.dumps(command)}\n"
                                           f"mpi_args: {json.dumps(['--mca', 'btl', 'tcp,self', *mpi_args])}\n")
    return folder.parent


def run(tmp_path, ssh_bed, program, *extra, timeout=300, mpi_args=(), **keys):
    cluster = ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    conf = write_conf(tmp_path, {"mpiperf:pytorch:cpu:2:2:1": "null"}, CLUSTER=cluster,
                      CASE_PATHS=json.dumps([str(mpi_case(tmp_path, program, *extra, mpi_args=mpi_args))]),
                      **keys)
    code, out, err = run_cli(["run", "--config", conf], timeout=timeout)
    result = only_run_dir(tmp_path / "result")
    summary = json.loads((result / "summary.json").read_text())
    (case,) = summary["cases"]
    (rnd,) = case["rounds"]
    nodes = [result / rnd["dir"] / f"{h['address']}_noderank{i}" for i, h in enumerate(ssh_bed.hosts)]
    return code, out + err, rnd, nodes


def test_mpirun_on_node0_starts_every_rank_over_ssh(tmp_path, ssh_bed, mpi_program):
    code, out, rnd, (node0, node1) = run(tmp_path, ssh_bed, mpi_program)
    assert code == 0, out
    assert rnd["status"] == "passed", rnd
    # node 0 ran mpirun (its command line in node.out.log), with one app context per host
    launch0 = json.loads((node0 / "launch.json").read_text())
    assert launch0["mode"] == "mpi" and launch0["argv"][1].endswith("launcher/mpi_launch.py")
    job = json.loads(launch0["argv"][3])
    assert [(c["host"], c["slots"], c["node_rank"]) for c in job["contexts"]] == \
        [(ssh_bed.hosts[0]["address"], 2, 0), (ssh_bed.hosts[1]["address"], 2, 1)]
    assert job["contexts"][1]["cwd"] != job["contexts"][0]["cwd"]       # each host's own case folder
    started = (node0 / "node.out.log").read_text()
    line = next(x for x in started.splitlines() if x.startswith("flagperf mpi (openmpi): "))
    argv = json.loads(line.split(": ", 1)[1])
    assert "-F" in " ".join(argv) and argv.count(":") == 1 and "--allow-run-as-root" in argv
    config = (node0 / "mpi_ssh_config").read_text()
    assert "StrictHostKeyChecking yes" in config and f"Port {ssh_bed.port}" in config and \
        f"Host {ssh_bed.hosts[1]['address']}" in config
    # every rank's log in its own host's node directory, with the environment node 0 exported
    for node, ranks in ((node0, (0, 1)), (node1, (2, 3))):
        for r in ranks:
            text = (node / f"rank{r}.out.log").read_text()
            assert f"fake_flagcx_perf rank {r} of 4: RANK={r} LOCAL_RANK={r % 2} NODE_RANK={r // 2} " \
                   f"FLAGPERF_VENDOR=cpu MASTER_PORT=" in text, text
            assert (node / f"rank{r}.exit").read_text().split() == ["0", "0"]
        report = json.loads((node / "ranks.json").read_text())
        assert report["mode"] == "mpi" and [(x["rank"], x["exit_code"]) for x in report["ranks"]] == \
            [(r, 0) for r in ranks]
        assert report["reaped"] == []       # mpirun ended every rank itself
    # FlagCX's lines became per-size metrics, named like the collectives benchmark's
    m = rnd["metrics"]
    for label in ("1K", "4K", "16K", "64K"):
        assert m[f"busbw_all_reduce_{label}"]["unit"] == "GB/s" and m[f"busbw_all_reduce_{label}"]["value"] > 0
        assert m[f"algbw_all_reduce_{label}"]["value"] > 0 and m[f"time_us_all_reduce_{label}"]["unit"] == "us"
    assert rnd["finished"]["metric"] == "busbw_all_reduce_64K" and rnd["value"] == m["busbw_all_reduce_64K"]["value"]
    sweep = rnd["finished"]["checks"]["details"]["sweep"]
    assert [(e["op"], e["size_bytes"]) for e in sweep] == [("all_reduce", 1024 * 4 ** i) for i in range(4)]


def test_a_failing_rank_fails_the_case_and_is_named(tmp_path, ssh_bed, mpi_program):
    code, out, rnd, (node0, node1) = run(tmp_path, ssh_bed, mpi_program, "--fail-rank", "3")
    assert code != 0
    assert rnd["status"] == "failed", rnd
    failure = rnd["failure"]
    assert failure["rank"] == 3 and failure["exit_code"] == 3 and "rank 3 failed (exit code 3)" in failure["reason"]
    assert failure["node"] == node1.name and failure["log"].endswith("rank3.out.log")
    assert "failing on purpose" in (node1 / "rank3.out.log").read_text()
    report = json.loads((node1 / "ranks.json").read_text())
    assert report["first_failure"] == 3
    # the other ranks were stopped by mpirun, not failures of their own
    report0 = json.loads((node0 / "ranks.json").read_text())
    assert report0["first_failure"] is None and all(x["stopped_by_launcher"] for x in report0["ranks"])
    assert "rank 3" in out


def test_case_timeout_stops_mpirun_and_every_rank(tmp_path, ssh_bed, mpi_program):
    code, out, rnd, (node0, node1) = run(tmp_path, ssh_bed, mpi_program, "--sleep", "600", CASE_TIMEOUT=8)
    assert code != 0 and rnd["status"] == "timeout", rnd
    assert "CASE_TIMEOUT" in rnd["failure"]["reason"]
    assert processes_matching(str(mpi_program)) == []       # no rank left on either host
    for node in (node0, node1):
        report = json.loads((node / "ranks.json").read_text())
        assert report["mode"] == "mpi" and report["first_failure"] is None


def test_mpirun_failing_before_any_rank_fails_node0_with_its_words(tmp_path, ssh_bed, mpi_program):
    code, out, rnd, (node0, node1) = run(tmp_path, ssh_bed, mpi_program, mpi_args=["--no-such-mpirun-option"])
    assert code != 0 and rnd["status"] == "failed", rnd
    failure = rnd["failure"]
    assert failure["node"] == node0.name and failure["log"].endswith("launcher.out.log")
    assert failure["last_lines"][0].startswith("mpirun failed (") and \
        any("no-such-mpirun-option" in line for line in failure["last_lines"]), failure
    assert not list(node1.glob("rank*.out.log"))


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flagcx_perf"


def example_case(tmp_path, program, test_name):
    """examples/flagcx_perf in a CASE_PATHS folder, its case config pointing FLAGCX_HOME at a stand-in FlagCX
    checkout whose test/perf/test_allreduce is the test program."""
    cases = tmp_path / "cases"
    shutil.copytree(EXAMPLE, cases / "flagcx_perf")
    home = tmp_path / "FlagCX"
    (home / "test" / "perf").mkdir(parents=True)
    (home / "build" / "lib").mkdir(parents=True)
    shutil.copy(program, home / "test" / "perf" / "test_allreduce")
    # OMPI_MCA_btl: the bed's hosts are one machine in separate mount namespaces (no shared-memory transport)
    (cases / "flagcx_perf" / "case_config.yaml").write_text(
        f"env:\n  FLAGCX_HOME: {json.dumps(str(home))}\n  FLAGCX_TEST: {test_name}\n"
        f"  FLAGCX_ARGS: '-b 1K -e 16K -f 4'\n  OMPI_MCA_btl: 'tcp,self'\n")
    return cases


def run_example(tmp_path, ssh_bed, program, test_name):
    cluster = ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    conf = write_conf(tmp_path, {"flagcx_perf:pytorch:cpu:2:1:1": "null"}, CLUSTER=cluster,
                      CASE_PATHS=json.dumps([str(example_case(tmp_path, program, test_name))]))
    code, out, err = run_cli(["run", "--config", conf], timeout=300)
    result = only_run_dir(tmp_path / "result")
    (case,) = json.loads((result / "summary.json").read_text())["cases"]
    return code, out + err, case


def test_the_flagcx_example_runs_flagcx_perf_tests(tmp_path, ssh_bed, mpi_program):
    code, out, case = run_example(tmp_path, ssh_bed, mpi_program, "allreduce")
    assert code == 0, out
    (rnd,) = case["rounds"]
    assert case["metric"] == "busbw_all_reduce_16K" and case["unit"] == "GB/s"
    assert sorted(k for k in rnd["metrics"] if k.startswith("busbw_")) == \
        ["busbw_all_reduce_16K", "busbw_all_reduce_1K", "busbw_all_reduce_4K"]
    # nccl-tests' view of FlagCX's lines: the JSON export, sizes in numeric order
    (doc,) = (tmp_path / "result").glob("run*/nccl_tests/*.all_reduce.json")
    sizes = [r["size"] for r in json.loads(doc.read_text())["results"]]
    assert sizes == sorted(sizes) and len(sizes) == 3


def test_the_flagcx_example_names_a_missing_binary(tmp_path, ssh_bed, mpi_program):
    code, out, case = run_example(tmp_path, ssh_bed, mpi_program, "sendrecv")
    assert code != 0
    (rnd,) = case["rounds"]
    assert rnd["status"] == "failed" and "failed (exit code 2)" in rnd["failure"]["reason"]
    log = Path(rnd["failure"]["log"]).read_text()
    assert log.count("\n") == 1 and log.startswith("flagcx_perf: ") and "test/perf/test_sendrecv is missing on" in log
