"""Launch mode mpi without a network: benchmark.yaml's ``launch: mpi`` and ``mpi_args`` (flagperf/catalog.py), the
plan's node 0 starter and the other nodes' records (flagperf/plan.py, flagperf/mpilaunch.py), the ssh_config the
host list gives (flagperf/options/hostlist.py), the mpirun command lines of Open MPI and MPICH
(launcher/mpi_launch.py), the node launcher's records of an MPI job (launcher/node_launcher.py), and FlagCX's
perf-test lines as metrics (flagperf/results/flagcx_lines.py). The runs over real sshd hosts with Open MPI are in
tests/e2e/test_mpi_launch.py."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flagperf.catalog import load_benchmark_yaml
from flagperf.config import load_config
from flagperf.errors import ConfigError
from flagperf.plan import build_plan
from flagperf.results.flagcx_lines import FlagCXLines, headline, size_label, sweep
from flagperf.results.flagperf_lines import build_finished, read_log

REPO = Path(__file__).resolve().parents[2]


def _launcher_module(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "launcher" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mpi_launch = _launcher_module("mpi_launch")


@pytest.fixture
def tree(tmp_path, repo_root):
    root = tmp_path / "src"
    (root / "benchmarks" / "perf").mkdir(parents=True)
    for name in ("launcher", "monitors", "vendors"):
        (root / name).symlink_to(repo_root / name, target_is_directory=True)
    return root


def conf(tmp_path, write, hosts, extra="", runtime="bare"):
    hosts_yaml = "".join(f"  - {{HOST: {h}, SSH_PORT: 2022, SSH_USER: bench, SSH_KEY: /keys/id one}}\n" for h in hosts)
    write(tmp_path, "conf/cluster.yaml", f"HOSTS:\n{hosts_yaml}KNOWN_HOSTS: /keys/known\nMASTER_PORT: 30210\n")
    return write(tmp_path, "conf/test.yaml", f"VENDOR: cpu\nRUNTIME: {runtime}\nFLAGPERF_LOG_PATH: ../logs\n"
                                             f"FLAGPERF_PATH: /opt/fp\nCLUSTER: cluster.yaml\n{extra}CASES:\n"
                                             f'  "perf:pytorch:cpu:2:2:1": null\n')


# ------------------------------------------------------------------------------------------ benchmark.yaml
@pytest.mark.parametrize("text, expected", [
    ("launch: mpi\n", ":1: command: required with launch: mpi"),
    ("launch: node\ncommand: [bash]\nmpi_args: [-v]\n", ":3: mpi_args: only with launch: mpi"),
    ("launch: mpi\ncommand: [a]\nmpi_args: {x: 1}\n", ":3: mpi_args: expected a list of mpirun's argv strings"),
    ("launch: mpi\ncommand: [a]\nmpi_args: ['{nodes}']\n", ":3: mpi_args: '{nodes}': unknown placeholder"),
])
def test_benchmark_yaml_mpi_problems(tmp_path, text, expected):
    path = tmp_path / "benchmark.yaml"
    path.write_text(text)
    launch, problems = load_benchmark_yaml(path)
    assert launch is None and any(p.startswith(str(path)) and expected in p for p in problems), problems


def test_benchmark_yaml_mpi(tmp_path):
    path = tmp_path / "benchmark.yaml"
    path.write_text("launch: mpi\ncommand: ['{case_dir}/run.sh', -b, 128K]\nmpi_args: [--mca, btl, 'tcp,self']\n")
    assert load_benchmark_yaml(path) == (("mpi", ("{case_dir}/run.sh", "-b", "128K"), ("--mca", "btl", "tcp,self")),
                                         [])


# ---------------------------------------------------------------------------------------------------- plan
def test_plan_node0_starts_mpirun_over_every_node(tmp_path, write, tree):
    (tree / "benchmarks" / "perf" / "benchmark.yaml").write_text(
        "launch: mpi\ncommand: ['{case_dir}/run.sh', --nodes, '{nnodes}']\nmpi_args: [--mca, btl, 'tcp,self']\n")
    cfg = load_config(conf(tmp_path, write, ["10.0.0.1", "10.0.0.2"]), source_root=tree)
    n0, n1 = build_plan(cfg, run_id="run20250101000000").cases[0].rounds[0].nodes
    assert n0.launch.mode == n1.launch.mode == "mpi"
    assert n0.launch.argv[1:3] == ["/opt/fp/launcher/mpi_launch.py", "--job"]
    job = json.loads(n0.launch.argv[3])
    case_dir = "/opt/fp/benchmarks/perf"
    assert job["contexts"] == [
        {"host": "10.0.0.1", "node_rank": 0, "slots": 2, "cwd": case_dir, "node_dir": n0.node_dir,
         "argv": [f"{case_dir}/run.sh", "--nodes", "2"]},
        {"host": "10.0.0.2", "node_rank": 1, "slots": 2, "cwd": case_dir, "node_dir": n1.node_dir,
         "argv": [f"{case_dir}/run.sh", "--nodes", "2"]}]
    assert n1.launch.argv == [f"{case_dir}/run.sh", "--nodes", "2"]      # what node 0's mpirun starts there
    assert job["mpi_args"] == ["--mca", "btl", "tcp,self"]
    assert {"MASTER_ADDR", "WORLD_SIZE", "FLAGPERF_VENDOR"} <= set(job["env"]) and "NODE_RANK" not in job["env"]
    # the cluster's SSH settings for every host, host keys checked against KNOWN_HOSTS
    assert job["shell_config"].splitlines()[:10] == [
        "Host 10.0.0.1", "  HostName 10.0.0.1", "  Port 2022", "  User bench", '  IdentityFile "/keys/id one"',
        "  IdentitiesOnly yes", "  UserKnownHostsFile /keys/known", "  StrictHostKeyChecking yes", "  BatchMode yes",
        "  ConnectTimeout 30"]
    assert "Host 10.0.0.2" in job["shell_config"]


def test_vendor_rank_env_is_exported_by_name(tmp_path, write, tree):
    """A vendor's rank_env (nvidia's NCCL_NVLS_ENABLE) reaches every rank as -x NAME, not as a (name, value) pair
    that mpi_launch.py would refuse."""
    (tree / "benchmarks" / "perf" / "benchmark.yaml").write_text("launch: mpi\ncommand: [./perf]\n")
    (tree / "vendors").unlink()
    write(tree, "vendors/acme/vendor.yaml", "name: acme\ndevice: cuda\ndist_backend: nccl\n"
                                            "visible_devices_env: CUDA_VISIBLE_DEVICES\ngpu_monitor: none\n"
                                            'rank_env:\n  ACME_LINKS: "0"\nframeworks: [pytorch]\n')
    path = write(tmp_path, "conf/test.yaml", "VENDOR: acme\nRUNTIME: bare\nFLAGPERF_LOG_PATH: ../logs\n"
                                             'CASES:\n  "perf:pytorch:H100:1:4:1": null\n')
    n0, = build_plan(load_config(path, source_root=tree), run_id="run20250101000000").cases[0].rounds[0].nodes
    job = mpi_launch.read_job(n0.launch.argv[3])
    assert all(isinstance(n, str) for n in job["env"]), job["env"]
    assert {"ACME_LINKS", "CUDA_VISIBLE_DEVICES"} <= set(job["env"])
    argv = mpi_launch.mpirun_argv(job, "mpirun", "openmpi", "/r", {"ACME_LINKS": "0"}, False)
    assert argv[argv.index("ACME_LINKS") - 1] == "-x"


def test_mpi_under_docker_is_a_config_error(tmp_path, write, tree):
    (tree / "benchmarks" / "perf" / "benchmark.yaml").write_text("launch: mpi\ncommand: [./perf]\n")
    cfg = load_config(conf(tmp_path, write, ["10.0.0.1", "10.0.0.2"], runtime="docker"), source_root=tree)
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, run_id="run20250101000000")
    assert "launch: mpi runs mpirun on the hosts themselves: needs RUNTIME bare, got docker" in str(err.value)


def test_dry_run_shows_the_mpi_job(tmp_path, write, tree, run_cli):
    (tree / "benchmarks" / "perf" / "benchmark.yaml").write_text("launch: mpi\ncommand: [./perf, -b, 1K]\n")
    rc, out, err = run_cli("run", "--config", conf(tmp_path, write, ["10.0.0.1", "10.0.0.2"]), "--dry-run",
                           env={"FLAGPERF_HOME": tree})
    assert rc == 0, out + err
    assert "mpirun starter (node 0, log node.out.log)" in out and "rank command (started by node 0's mpirun)" in out
    assert "node 1 on 10.0.0.2: 2 rank(s) in /opt/fp/benchmarks/perf: ./perf -b 1K" in out


# ------------------------------------------------------------------------------------------ mpi_launch.py
JOB = {"contexts": [{"host": "a", "node_rank": 0, "slots": 2, "cwd": "/c/a", "node_dir": "/r/a",
                     "argv": ["./p", "x y"]},
                    {"host": "b", "node_rank": 1, "slots": 2, "cwd": "/c/b", "node_dir": "/r/b", "argv": ["./p"]}],
       "env": ["MASTER_ADDR", "UNSET_HERE"], "shell_config": "Host b\n", "mpi_args": ["--mca", "btl", "tcp,self"]}


def test_open_mpi_command_line():
    argv = mpi_launch.mpirun_argv(JOB, "/usr/bin/mpirun", "openmpi", "/r/a", {"MASTER_ADDR": "h"}, True)
    first = argv.index("-np")
    assert argv[:first] == ["/usr/bin/mpirun", "--allow-run-as-root", "--mca", "plm_rsh_agent", "ssh", "--mca",
                            "plm_rsh_args", "-F /r/a/mpi_ssh_config", "--mca", "plm_rsh_no_tree_spawn", "1",
                            "--mca", "btl", "tcp,self"]
    ctx0, ctx1 = " ".join(argv[first:]).split(" : ")
    wrapper = mpi_launch.RANK_WRAPPER
    assert argv[first:first + 8] == ["-np", "2", "--host", "a:2", "--wdir", "/c/a", "-x", "MASTER_ADDR"]
    assert argv[first + 8:first + 16] == ["sh", "-c", wrapper, "flagperf-rank", "/r/a", "0", "./p", "x y"]
    assert ctx1.startswith("-np 2 --host b:2 --wdir /c/b -x MASTER_ADDR sh -c") and ctx1.endswith("/r/b 1 ./p")
    assert "UNSET_HERE" not in argv
    assert "--allow-run-as-root" not in mpi_launch.mpirun_argv(JOB, "mpirun", "openmpi", "/r/a", {}, False)


def test_mpich_command_line():
    argv = mpi_launch.mpirun_argv(JOB, "/usr/bin/mpiexec", "mpich", "/r/a", {"MASTER_ADDR": "h"}, True)
    first = argv.index("-n")
    assert argv[:first] == ["/usr/bin/mpiexec", "-launcher", "ssh", "-launcher-exec", "/r/a/mpi_ssh",
                            "-genv", "MASTER_ADDR", "h", "--mca", "btl", "tcp,self"]
    assert argv[first:first + 6] == ["-n", "2", "-hosts", "a", "-wdir", "/c/a"]
    assert argv.count(":") == 1 and "--allow-run-as-root" not in argv


@pytest.mark.parametrize("text, expected", [
    ("nope", "--job is not JSON"), ("{}", "non-empty 'contexts' list"),
    ('{"contexts": [{"host": "a"}]}', "contexts[0]: expected host, slots, cwd, node_dir, node_rank and argv"),
    (json.dumps({**JOB, "env": [1]}), "env: expected a list of strings"),
])
def test_bad_job(text, expected):
    with pytest.raises(mpi_launch.JobError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        mpi_launch.read_job(text)


def test_rank_wrapper_records_the_rank(tmp_path):
    """The wrapper alone, with Open MPI's variables set by hand: output and exit code in the node directory."""
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="5", OMPI_COMM_WORLD_LOCAL_RANK="1")
    code = subprocess.run(["sh", "-c", mpi_launch.RANK_WRAPPER, "flagperf-rank", str(tmp_path), "2", "sh", "-c",
                           'echo "r=$RANK l=$LOCAL_RANK n=$NODE_RANK"; exit 7'], env=env, timeout=30).returncode
    assert code == 7
    assert (tmp_path / "rank5.out.log").read_text() == "r=5 l=1 n=2\n"
    assert (tmp_path / "rank5.exit").read_text().split() == ["7", "0"]
    env.pop("OMPI_COMM_WORLD_RANK")
    proc = subprocess.run(["sh", "-c", mpi_launch.RANK_WRAPPER, "flagperf-rank", str(tmp_path), "0", "true"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 97 and "no MPI rank in the environment" in proc.stderr


def test_peer_launcher_writes_rank_records_when_told_to_finish(tmp_path):
    """A node launcher of an MPI job other than node 0 starts nothing, and on SIGTERM writes ranks.json from the
    rank<R>.exit files (the first rank that failed on its own marked) and exits 1 for its failed rank."""
    from flagperf_contract import LaunchSpec, write_json_atomic
    spec = LaunchSpec(case="c", case_name="c", framework="pytorch", round=1, node_rank=1, nnodes=2, nproc=2,
                      ranks=[2, 3], argv=["./p"], cwd=str(tmp_path), env={}, out_dir=str(tmp_path), mode="mpi")
    write_json_atomic(tmp_path / "launch.json", spec.to_dict())
    (tmp_path / "rank2.exit").write_text("143 1\n")
    (tmp_path / "rank3.exit").write_text("3 0\n")
    # a rank process mpirun left behind on this host (it carries the node directory, as the wrapper exports it)
    left = subprocess.Popen(["sleep", "300"], env=dict(os.environ, FLAGPERF_MPI_NODE_DIR=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, str(REPO / "launcher" / "node_launcher.py"), "--spec",
                             str(tmp_path / "launch.json")])
    try:
        log = tmp_path / "launcher.log"
        for _ in range(200):
            if log.exists() and "waiting until the driver ends the round" in log.read_text():
                break
            subprocess.run(["sleep", "0.05"])
        assert proc.poll() is None          # it waits for the driver
        proc.terminate()
        assert proc.wait(30) == 1
        assert left.wait(30) == -15         # ended by the launcher
    finally:
        proc.kill()
        left.kill()
    report = json.loads((tmp_path / "ranks.json").read_text())
    assert report["mode"] == "mpi" and report["first_failure"] == 3 and not report["signalled"]
    assert [(r["rank"], r["exit_code"], r["stopped_by_launcher"]) for r in report["ranks"]] == \
        [(2, 143, True), (3, 3, False)]
    assert [(r["pid"], r["signal"]) for r in report["reaped"]] == [(left.pid, "SIGTERM")]


# ------------------------------------------------------------------------------------------- FlagCX lines
LINES = """FlagCX perf test: test_allgather -b 128K -e 256K -f 2
Comm size: 131072 bytes; Elapsed time: 0.000100 sec; Algo bandwidth: 1.310720 GB/s; Bus bandwidth: 0.982 GB/s
Comm size: 262144 bytes; Elapsed time: 0.000150 sec; Algo bandwidth: 1.747627 GB/s; Bus bandwidth: 1.31 GB/s
Comm size: 1000 bytes; Elapsed time: nan sec; Algo bandwidth: 1 GB/s; Bus bandwidth: 1 GB/s
Comm size: 1000 bytes; Elapsed time: 0.1 sec; Algo bandwidth: -1 GB/s; Bus bandwidth: 1 GB/s
"""


def test_flagcx_lines_become_per_size_metrics(tmp_path):
    log = tmp_path / "rank0.out.log"
    log.write_text(LINES)
    results, _ = read_log(log, rank=0)
    names = [r.name for r in results]
    assert names == ["busbw_all_gather_128K", "algbw_all_gather_128K", "time_us_all_gather_128K",
                     "busbw_all_gather_256K", "algbw_all_gather_256K", "time_us_all_gather_256K"]
    finished = build_finished("flagcx_perf", results)
    assert (finished["metric"], finished["value"], finished["unit"]) == ("busbw_all_gather_256K", 1.31, "GB/s")
    assert finished["metrics"]["time_us_all_gather_128K"] == {"value": pytest.approx(100.0), "unit": "us"}
    assert finished["origin"] == "FlagCX perf-test lines"
    assert finished["checks"]["details"]["sweep"][0] == {
        "op": "all_gather", "size_bytes": 131072, "count": 32768, "dtype": "float", "redop": "none", "root": -1,
        "time_us": pytest.approx(100.0), "algbw": 1.31072, "busbw": 0.982, "wrong": None}


def test_flagcx_without_an_op_line_and_labels():
    lines = FlagCXLines()
    assert lines.feed("Comm size: 1000 bytes; Elapsed time: 0.5 sec; Algo bandwidth: 0.000002 GB/s; "
                      "Bus bandwidth: 0.000002 GB/s")
    assert not lines.feed("some other line")
    assert [n for n, _v, _u in lines.results] == ["busbw_flagcx_1000B", "algbw_flagcx_1000B", "time_us_flagcx_1000B"]
    assert [size_label(n) for n in (1024, 4 << 30, 3 << 20, 1000)] == ["1K", "4G", "3M", "1000B"]
    assert sweep([("busbw_x_1K", 1.0)]) == [] and headline([]) is None
