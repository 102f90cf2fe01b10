"""Launch modes: how a benchmark folder starts (flagperf/catalog.py: benchmark.yaml, main.py, main.sh, FlagPerf
toolkits and base benchmarks), the node commands the plan writes (flagperf/caselaunch.py), benchmark.yaml errors
at config load, CASE_PATHS folders sent by deploy (no symlink followed out of them), the node launcher running
one command per node, and the verdict of a round from a node command or FlagPerf's result lines."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from flagperf.caselaunch import case_root_on_host, deploy_folders, node_command
from flagperf.catalog import (BASE_BENCHMARK_COMMAND, DEFAULT_RANK_COMMAND, SHELL_COMMAND, benchmark_names,
                              find_case, load_benchmark_yaml, placeholder_problems, substitute)
from flagperf.config import HostSpec, load_config
from flagperf.deploy import case_tree, deploy_host
from flagperf.errors import ConfigError
from flagperf.hosts.local import LocalTransport
from flagperf.plan import build_plan
from flagperf.results.flagperf_lines import parse_results
from flagperf.results.interpret import NodeEvidence, RoundEvidence, Status, Wait, WaitEnd, interpret_round
from flagperf_contract import NODE_COMMAND_LOG, LaunchSpec, RankRecord, RankReport, read_json_file

TORCHRUN = ["{python}", "-m", "torch.distributed.run", "--nnodes={nnodes}", "--nproc_per_node={nproc}",
            "--node_rank={node_rank}", "--master_addr={master_addr}", "--master_port={master_port}", "train.py",
            "--world={world_size}", "--out={result_dir}", "--cfg={config_file}", "--dir={case_dir}",
            "--hw={vendor}/{chip}", "--fw={framework}", "--data={data_dir}", "{{literal}}"]


@pytest.fixture
def tree(tmp_path, repo_root):
    """A flagperf tree of its own: the repo's launcher, monitors and vendors, and a benchmarks/ folder of its own
    holding the repo's gemm and the test folders."""
    root = tmp_path / "src"
    (root / "benchmarks").mkdir(parents=True)
    for name in ("launcher", "monitors", "vendors"):
        (root / name).symlink_to(repo_root / name, target_is_directory=True)
    (root / "benchmarks" / "gemm").symlink_to(repo_root / "benchmarks" / "gemm", target_is_directory=True)
    return root


def bench(root, model, files):
    for name, text in files.items():
        path = Path(root) / "benchmarks" / model / name if not str(name).startswith("/") else Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Path(root) / "benchmarks" / model


def yaml_list(items):
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


# ------------------------------------------------------------------------------------------------ find_case
def test_every_kind_of_folder(tree, tmp_path):
    bench(tree, "yamlnode", {"benchmark.yaml": f"launch: node\ncommand: {yaml_list(['bash', 'run.sh'])}\n"})
    bench(tree, "yamlranks", {"benchmark.yaml": "launch: ranks\n", "main.py": ""})
    bench(tree, "shonly", {"main.sh": "echo hi\n"})
    bench(tree, "kit", {"cpu/local/main.sh": "echo kit\n", "nvidia/H100/main.sh": "echo gpu\n"})
    ext = tmp_path / "ext"
    (ext / "basecase").mkdir(parents=True)
    (ext / "basecase" / "main.py").write_text("")
    (ext / "drivers").mkdir()
    (ext / "gemm").mkdir()          # flagperf's own gemm comes first

    src, problems = find_case(tree, [ext], "gemm", "cpu", "local")
    assert problems == [] and (src.mode, src.kind, src.command, src.external) == \
        ("ranks", "main.py", DEFAULT_RANK_COMMAND, False)
    assert src.root == tree / "benchmarks" / "gemm"
    src, _ = find_case(tree, [], "yamlnode", "cpu", "local")
    assert (src.mode, src.kind, src.command) == ("node", "benchmark.yaml", ("bash", "run.sh"))
    src, _ = find_case(tree, [], "yamlranks", "cpu", "local")
    assert (src.mode, src.command) == ("ranks", DEFAULT_RANK_COMMAND)
    src, _ = find_case(tree, [], "shonly", "cpu", "local")
    assert (src.mode, src.kind, src.command, src.subdir) == ("node", "main.sh", SHELL_COMMAND, "")
    src, _ = find_case(tree, [], "kit", "cpu", "local")
    assert (src.mode, src.kind, src.folder, src.subdir) == ("node", "toolkit", tree / "benchmarks/kit/cpu/local",
                                                            "cpu/local")
    src, _ = find_case(tree, [ext], "basecase", "cpu", "local")
    assert (src.mode, src.kind, src.external) == ("ranks", "main.py", True)      # not in base benchmark mode
    src, _ = find_case(tree, [ext], "basecase", "cpu", "local", base_mode="benchmark")
    assert (src.mode, src.kind, src.command, src.support, src.case_path) == \
        ("node", "base-benchmark", BASE_BENCHMARK_COMMAND, ("drivers",), ext)
    assert find_case(tree, [ext], "nothing", "cpu", "local") == (None, [])
    names = set(benchmark_names(tree, [ext]))
    assert {"yamlnode", "yamlranks", "shonly", "kit", "gemm", "basecase"} <= names
    assert "drivers" not in names               # a folder with nothing runnable is no model
    src, problems = find_case(tree, [ext], "drivers", "cpu", "local")
    assert src is None and problems == [f"model 'drivers': {ext / 'drivers'} has nothing runnable (looked for "
                                        f"benchmark.yaml, main.py, main.sh, cpu/local/main.sh)"]


def test_a_model_in_both_trees_is_ambiguous_until_model_sources_says(tree, tmp_path):
    ext = tmp_path / "ext"
    (ext / "gemm").mkdir(parents=True)
    (ext / "gemm" / "main.sh").write_text("echo theirs\n")
    src, problems = find_case(tree, [ext], "gemm", "cpu", "local")
    assert src is None and len(problems) == 1 and "is both flagperf's benchmark" in problems[0] \
        and "MODEL_SOURCES ({gemm: flagperf} or {gemm: case_paths})" in problems[0]
    src, problems = find_case(tree, [ext], "gemm", "cpu", "local", prefer="flagperf")
    assert problems == [] and not src.external and src.kind == "main.py"
    src, problems = find_case(tree, [ext], "gemm", "cpu", "local", prefer="case_paths")
    assert problems == [] and src.external and src.kind == "main.sh" and src.root == ext / "gemm"


def test_a_toolkit_without_this_vendor_and_chip(tree):
    bench(tree, "kit", {"nvidia/H100/main.sh": "", "nvidia/A100/main.sh": ""})
    src, problems = find_case(tree, [], "kit", "cpu", "local")
    assert src is None
    assert problems == [f"model 'kit': {tree}/benchmarks/kit has no cpu/local/main.sh (toolkits there: "
                        f"nvidia/A100, nvidia/H100)"]


def test_a_toolkit_with_main_sh_at_the_vendor_level(tree):
    """FlagPerf's older layout: toolkits/<case>/<vendor>/main.sh, no chip folder; a chip folder wins."""
    bench(tree, "kit", {"nvidia/main.sh": "", "nvidia/gemm.cu": "", "nvidia/H100/main.sh": ""})
    src, problems = find_case(tree, [], "kit", "nvidia", "A100")
    assert problems == [] and (src.mode, src.kind, src.folder, src.subdir) == \
        ("node", "toolkit", tree / "benchmarks/kit/nvidia", "nvidia")
    src, _ = find_case(tree, [], "kit", "nvidia", "H100")
    assert src.folder == tree / "benchmarks/kit/nvidia/H100"


# --------------------------------------------------------------------------------------- benchmark.yaml rules
@pytest.mark.parametrize("text, expected", [
    ("launch: node\ncommand: [torchrun, '--nnodes={nodes}']\n",
     ":2: command: '--nnodes={nodes}': unknown placeholder {nodes}; did you mean {nnodes}?"),
    ("launch: node\ncommand: [bash, '{bogus}']\n", ":2: command: '{bogus}': unknown placeholder {bogus}; known: "),
    ("launch: node\ncommand: [bash, '{nproc:>3}']\n", ":2: command: '{nproc:>3}': placeholder {nproc} takes no "
                                                      "format or conversion"),
    ("launch: node\ncommand: [bash, 'a}b']\n", ":2: command: 'a}b': Single '}' encountered in format string"),
    ("launch: node\n", ":1: command: required with launch: node; expected a list of argv strings"),
    ("launch: node\ncommand: bash main.sh\n", ":2: command: expected a non-empty list of argv strings (no shell"),
    ("launch: node\ncommand: []\n", ":2: command: expected a non-empty list of argv strings"),
    ("launch: node\ncommand: [bash, {a: 1}]\n", ":2: command: expected a non-empty list of argv strings"),
    ("launch: nodes\ncommand: [bash]\n", ":1: launch: expected one of ranks, node, mpi, got 'nodes'"),
    ("lanch: node\ncommand: [bash]\n", ":1: lanch: unknown key; did you mean launch?"),
    ("- launch\n", ": expected a mapping with launch: ranks or node"),
    ("launch: [node\n", ": YAML syntax error"),
])
def test_benchmark_yaml_problems(tmp_path, text, expected):
    path = tmp_path / "benchmark.yaml"
    path.write_text(text)
    launch, problems = load_benchmark_yaml(path)
    assert launch is None
    assert any(p.startswith(str(path)) and expected in p for p in problems), problems


def test_placeholders_and_substitution():
    assert placeholder_problems("--x={{not a placeholder}}") == []
    assert substitute(["{python}", "--n={nnodes}", "{{x}}", "plain"], {"python": "py", "nnodes": "2"}) == \
        ["py", "--n=2", "{x}", "plain"]


def conf(tmp_path, write, cases, hosts=("localhost",), fp=None):
    write(tmp_path, "conf/cluster.yaml", f"HOSTS: {list(hosts)}\nMASTER_PORT: 30210\n")
    lines = "".join(f'  "{c}": null\n' for c in cases)
    return write(tmp_path, "conf/test.yaml", "VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: ../logs\n"
                                             + (f"FLAGPERF_PATH: {fp}\n" if fp else "")
                                             + f"CLUSTER: cluster.yaml\nCASES:\n{lines}")


def test_bad_benchmark_yaml_is_a_config_error_at_load(tmp_path, write, tree):
    bench(tree, "bad", {"benchmark.yaml": "launch: node\ncommand: [bash, '{rank}']\n"})
    bench(tree, "kit", {"nvidia/H100/main.sh": ""})
    with pytest.raises(ConfigError) as err:
        load_config(conf(tmp_path, write, ["bad:pytorch:local:1:1:1", "kit:pytorch:local:1:1:1"]), source_root=tree)
    yaml_path = tree / "benchmarks" / "bad" / "benchmark.yaml"
    test_path = (tmp_path / "conf" / "test.yaml").resolve()
    assert err.value.problems == [
        f"{yaml_path}:2: command: '{{rank}}': unknown placeholder {{rank}}; known: {{master_addr}}, {{master_port}}, "
        f"{{node_rank}}, {{nnodes}}, {{nproc}}, {{world_size}}, {{data_dir}}, {{result_dir}}, {{vendor}}, {{chip}}, "
        f"{{config_file}}, {{case_dir}}, {{python}}, {{framework}}, {{hosts}}, {{host_addr}}, {{hosts_ports}}, "
        f"{{round}}, {{case_key}}",
        f"{test_path}: CASES['kit:pytorch:local:1:1:1']: model 'kit': {tree}/benchmarks/kit has no cpu/local/main.sh "
        f"(toolkits there: nvidia/H100)"]


def test_bad_benchmark_yaml_through_the_cli(tmp_path, write, tree, run_cli):
    bench(tree, "bad", {"benchmark.yaml": "launch: node\ncommand: [bash, '--n={nodes}']\n"})
    rc, out, err = run_cli("run", "--config", conf(tmp_path, write, ["bad:pytorch:local:1:1:1"]), "--dry-run",
                           env={"FLAGPERF_HOME": tree})
    assert rc == 2, (out, err)
    assert err.strip().splitlines() == [f"flagperf: config error: {tree}/benchmarks/bad/benchmark.yaml:2: command: "
                                        f"'--n={{nodes}}': unknown placeholder {{nodes}}; did you mean {{nnodes}}?"]
    assert "Traceback" not in out + err


# -------------------------------------------------------------------------------------------------- the plan
def test_node_command_in_the_plan(tmp_path, write, tree):
    bench(tree, "tr", {"benchmark.yaml": f"launch: node\ncommand: {yaml_list(TORCHRUN)}\n"})
    cfg = load_config(conf(tmp_path, write, ["tr:pytorch:local:2:3:1"], hosts=("localhost", "localhost"),
                           fp="/opt/fp"), source_root=tree)
    plan = build_plan(cfg, run_id="run20250101000000")
    n0, n1 = plan.cases[0].rounds[0].nodes
    for n in (n0, n1):
        spec = n.launch
        assert spec.mode == "node" and spec.cwd == "/opt/fp/benchmarks/tr"
        assert spec.argv == [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=3",
                             f"--node_rank={n.node_rank}", "--master_addr=127.0.0.1", "--master_port=30210",
                             "train.py", "--world=6", f"--out={n.node_dir}", f"--cfg={n.node_dir}/case_config.json",
                             "--dir=/opt/fp/benchmarks/tr", "--hw=cpu/local", "--fw=pytorch", "--data=", "{literal}"]
        assert spec.env["NODERANK"] == spec.env["NODE_RANK"] == str(n.node_rank)
        assert spec.env["NPROC_PER_NODE"] == spec.env["LOCAL_WORLD_SIZE"] == "3"
        assert spec.env["NNODES"] == "2" and spec.env["MASTER_PORT"] == "30210"
        assert spec.ranks == [3 * n.node_rank + i for i in range(3)]
        assert LaunchSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_toolkit_and_main_sh_in_the_plan(tmp_path, write, tree, run_cli):
    bench(tree, "kit", {"cpu/local/main.sh": "echo\n"})
    bench(tree, "sh", {"main.sh": "echo\n"})
    cfg = load_config(conf(tmp_path, write, ["kit:pytorch:local:1:2:1", "sh:pytorch:local:1:1:1"], fp="/opt/fp"),
                      source_root=tree)
    kit, sh = (c.rounds[0].nodes[0].launch for c in build_plan(cfg, run_id="run20250101000000").cases)
    assert (kit.mode, kit.argv, kit.cwd) == ("node", ["bash", "main.sh"], "/opt/fp/benchmarks/kit/cpu/local")
    assert (sh.mode, sh.argv, sh.cwd) == ("node", ["bash", "main.sh"], "/opt/fp/benchmarks/sh")
    rc, out, err = run_cli("run", "--config", tmp_path / "conf/test.yaml", "--dry-run", env={"FLAGPERF_HOME": tree})
    assert rc == 0, err
    assert "node command (once per node, log node.out.log): (cd /opt/fp/benchmarks/kit/cpu/local && " in out
    assert out.count("RANK=<r>") == 0


def fake_config(tmp_path, cases, case_paths, base_mode=None):
    """A stand-in for a Config with CASE_PATHS (the keys caselaunch reads through getattr)."""
    return SimpleNamespace(source_root=tmp_path / "src", vendor=SimpleNamespace(name="cpu"),
                           test=SimpleNamespace(case_paths=tuple(str(p) for p in case_paths), base_mode=base_mode,
                                                cases=tuple(cases), model_sources=()),
                           cluster=SimpleNamespace(hosts_ports=()))


def test_case_paths_placement(tmp_path):
    (tmp_path / "src" / "benchmarks").mkdir(parents=True)
    ext = tmp_path / "ext"
    (ext / "computation-FP32").mkdir(parents=True)
    (ext / "computation-FP32" / "main.py").write_text("")
    (ext / "drivers").mkdir()
    case = SimpleNamespace(key="computation-FP32:pytorch_2.3:local:2:4:1", model="computation-FP32", hw="local",
                           each=False, nnodes=2, nproc=4, data_dir=None,
                           framework="pytorch", framework_full="pytorch_2.3")
    cfg = fake_config(tmp_path, [case], [ext], base_mode="benchmark")
    remote = HostSpec("10.0.0.2", None, None, None, "python3", "/opt/fp")
    local_same = HostSpec("localhost", None, None, None, "python3", str(tmp_path / "src"))
    local_other = HostSpec("localhost", None, None, None, "python3", str(tmp_path / "elsewhere"))
    from flagperf.caselaunch import case_source
    src = case_source(cfg, case)
    assert str(case_root_on_host(src, remote, cfg)) == "/opt/fp/cases/computation-FP32"
    assert str(case_root_on_host(src, local_other, cfg)) == f"{tmp_path}/elsewhere/cases/computation-FP32"
    assert str(case_root_on_host(src, local_same, cfg)) == str(ext / "computation-FP32")   # in place
    assert deploy_folders(cfg) == ((ext / "computation-FP32", "cases/computation-FP32"),
                                   (ext / "drivers", "cases/drivers"))
    cmd = node_command(cfg, case, remote, python="python3", node_rank=1, node_dir="/r/n1", master_addr="10.0.0.1",
                       master_port=30211, base_env={"A": "1"})
    assert cmd.mode == "node" and cmd.cwd == "/opt/fp/cases/computation-FP32"
    assert cmd.argv == ["python3", "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=4", "--node_rank=1",
                        "--master_addr=10.0.0.1", "--master_port=30211", "main.py", "--vendor=cpu/local",
                        "--node_size=4"]
    assert cmd.env == {"A": "1", "NODERANK": "1", "NPROC_PER_NODE": "4",
                       "FLAGPERF_CASE_DIR": "/opt/fp/cases/computation-FP32"}


# ------------------------------------------------------------------------------------------------------ deploy
def test_case_tree_never_follows_a_symlink_out(tmp_path):
    case = tmp_path / "ext" / "kit"
    (case / "cpu" / "local").mkdir(parents=True)
    (case / "cpu" / "local" / "main.sh").write_text("echo\n")
    (case / "common.h").write_text("#define N 1\n")
    (case / "cpu" / "local" / "inside.h").symlink_to("../../common.h")
    (tmp_path / "secret").write_text("do not send\n")
    (case / "cpu" / "local" / "leak").symlink_to(tmp_path / "secret")
    (case / "cpu" / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(case / "pipe")
    (case / "__pycache__").mkdir()
    (case / "__pycache__" / "x.pyc").write_text("")
    tree = case_tree(case, "cases/kit")
    assert sorted(tree.files) == ["common.h", "cpu/local/inside.h", "cpu/local/main.sh"]
    assert set(tree.skipped) == {"cpu/local/leak", "cpu/dirlink", "pipe"}
    assert "outside the case folder" in tree.skipped["cpu/local/leak"]

    fp = tmp_path / "host-fp"
    host = HostSpec("localhost", None, None, None, sys.executable, str(fp))
    tr = LocalTransport(host)
    src_root = tmp_path / "src"
    (src_root / "launcher").mkdir(parents=True)
    (src_root / "launcher" / "x.py").write_text("")
    first = deploy_host(tr, src_root, {"launcher/x.py": __import__("hashlib").sha256(b"").hexdigest()}, (tree,))
    assert (fp / "cases/kit/cpu/local/main.sh").read_text() == "echo\n"
    assert (fp / "cases/kit/cpu/local/inside.h").read_text() == "#define N 1\n"
    assert not (fp / "cases/kit/cpu/local/leak").exists() and not (fp / "cases/kit/cpu/dirlink").exists()
    assert first.files_total == 4 and first.files_sent == 4
    assert any("leak" in n and "outside the case folder" in n for n in first.notes)
    again = deploy_host(tr, src_root, {"launcher/x.py": __import__("hashlib").sha256(b"").hexdigest()}, (tree,))
    assert again.files_sent == 0 and again.bytes_sent == 0


# ------------------------------------------------------------------------------------- the node launcher, real
def test_node_launcher_runs_one_command_per_node(tmp_path):
    """launch mode node: one process, its output in node.out.log, its real exit code in ranks.json (mode node),
    and what it started in the background is stopped with it."""
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    script = ("sleep 300 & echo $! > child.pid; echo NODERANK=$NODERANK NPROC=$NPROC_PER_NODE RANK=${RANK-unset} "
              "LOCAL_RANK=${LOCAL_RANK-unset}; exit 3")
    spec = LaunchSpec(case="k", case_name="k", framework="pytorch", round=1, node_rank=1, nnodes=2, nproc=2,
                      ranks=[2, 3], argv=["sh", "-c", script], cwd=str(node_dir), mode="node",
                      env={"NODERANK": "1", "NPROC_PER_NODE": "2", "FLAGPERF_RUN_ID": "r"}, out_dir=str(node_dir),
                      grace_s=2.0)
    (node_dir / "launch.json").write_text(json.dumps(spec.to_dict()))
    env = dict(os.environ, RANK="99", LOCAL_RANK="98")
    launcher = Path(__file__).resolve().parents[2] / "launcher" / "node_launcher.py"
    proc = subprocess.run([sys.executable, str(launcher), "--spec", str(node_dir / "launch.json")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert (node_dir / NODE_COMMAND_LOG).read_text() == "NODERANK=1 NPROC=2 RANK=unset LOCAL_RANK=unset\n"
    assert not list(node_dir.glob("rank*.out.log"))
    report = read_json_file(node_dir / "ranks.json", RankReport)
    assert report.mode == "node" and report.first_failure == 2
    assert [(r.rank, r.local_rank, r.exit_code) for r in report.ranks] == [(2, 0, 3)]
    assert report.stopped == "the node command failed with exit code 3"
    child = int((node_dir / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}") and \
            "Z" not in open(f"/proc/{child}/stat").read().split()[2]:
        time.sleep(0.05)
    alive = os.path.exists(f"/proc/{child}") and "Z" not in open(f"/proc/{child}/stat").read().split()[2]
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the node command's background child outlived it"
    assert "node command (for ranks 2-3) started" in (node_dir / "launcher.log").read_text()


# ------------------------------------------------------------------------------------------------- verdicts
def node_ev(code, mode="node", results=(), tail=("hello",), benchmark="kit"):
    report = RankReport(0, [RankRecord(0, 0, 1234, code, None, None, 2.5, False)], 0 if code else None,
                        mode=mode)
    ev = NodeEvidence("localhost_noderank0", "localhost", 0, (0,), 0 if code == 0 else 1, report, mode=mode,
                      benchmark=benchmark, flagperf_results=list(results))
    ev.rank_logs = {0: "/run/localhost_noderank0/node.out.log"}
    ev.rank_tails = {0: list(tail)}
    return ev


def test_a_failed_node_command_fails_the_round_with_its_exit_code():
    v = interpret_round(RoundEvidence(Wait(WaitEnd.NODE_FAILED, "", "localhost_noderank0"), [node_ev(3)], []))
    assert v.status == Status.FAILED
    assert v.failure.reason == "the node command failed (exit code 3)"
    assert v.failure.exit_code == 3 and v.failure.log.endswith("node.out.log")


def test_a_silent_node_command_fails_with_the_reason():
    v = interpret_round(RoundEvidence(Wait(WaitEnd.COMPLETED), [node_ev(0)], []))
    assert v.status == Status.FAILED
    assert v.failure.reason == "the node command printed no FINISHED line and no [FlagPerf Result] lines"
    assert v.failure.exit_code == 0 and v.failure.last_lines == ("hello",)


def test_flagperf_result_lines_pass_the_round():
    results = parse_results(["[FlagPerf Result]computation-FP32=0.42TFLOPS", "[FlagPerf Result]lat=3us"])
    v = interpret_round(RoundEvidence(Wait(WaitEnd.COMPLETED), [node_ev(0, results=results)], []))
    assert v.status == Status.PASSED and v.failure is None
    f = v.finished
    assert (f.benchmark, f.metric, f.value, f.unit, f.e2e_time) == ("kit", "computation-FP32", 0.42, "TFLOPS", 2.5)
    assert f.metrics["lat"] == {"value": 3.0, "unit": "us"}


def test_a_flagperf_perflog_finished_passes_and_a_flagperf_finished_wins():
    theirs = {"event": "FINISHED", "value": {"e2e_time": 30.0, "training_images_per_second": 812.5,
                                             "converged": True}, "metadata": {"rank": 0}}
    v = interpret_round(RoundEvidence(Wait(WaitEnd.COMPLETED), [node_ev(0, mode="ranks")], [theirs]))
    assert v.status == Status.PASSED
    assert (v.finished.metric, v.finished.value, v.finished.unit) == ("training_images_per_second", 812.5,
                                                                       "images/s")
    from tests.unit.fakebackend import finished_record
    ours = finished_record()
    results = parse_results(["[FlagPerf Result]x=1GB/s"])
    v = interpret_round(RoundEvidence(Wait(WaitEnd.COMPLETED), [node_ev(0, results=results)], [theirs, ours]))
    assert v.finished.to_dict() == ours
