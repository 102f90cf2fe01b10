"""A case's ``env`` (its case configuration's environment variables for every rank, flagperf/plan.py): validated
when the plan is built, merged name by name over the override files, carried in every node's launch spec (ranks
and node launch modes, bare and docker runtimes), shown by --dry-run; recorded per case in summary.json with the
NCCL version the ranks reported, and compared by `flagperf compare`."""
import importlib.util
import json
from pathlib import Path

import pytest

from flagperf.backends.slurm import _node_spec
from flagperf.backends.slurm_script import specs_document
from flagperf.config import load_config
from flagperf.errors import ConfigError
from flagperf.options.slurm import PLACEHOLDER_PORT
from flagperf.plan import OWNED_ENV, build_plan, case_env
from flagperf.reporters.compare import comparison_lines
from flagperf.results.compare import compare_summaries, setup_differences
from flagperf.results.summary import SUMMARY_SCHEMA, CaseSummary, RoundSummary, Summary, SummaryError
from flagperf.results.interpret import Status
from flagperf.yamlio import load_yaml_file
from flagperf_contract import CASE_CONFIG_FILE, LAUNCH_FILE, LaunchSpec

from tests.unit.fakebackend import make_config

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "run20250101000000"
PROBE_MAIN = "print('probe')\n"


def tree(tmp_path, base_env, vendor_files=None, launch=None):
    """A flagperf tree (the repository's, linked) with the benchmark ``probe`` whose case_config.yaml has
    ``base_env`` (YAML text under ``env:``), and override files under vendors/cpu/probe/ ({name: text})."""
    root = tmp_path / "root"
    root.mkdir()
    for name in ("launcher", "monitors", "flagperf_contract.py"):
        (root / name).symlink_to(REPO / name)
    (root / "benchmarks").mkdir()
    for bench in (REPO / "benchmarks").iterdir():
        (root / "benchmarks" / bench.name).symlink_to(bench)
    probe = root / "benchmarks" / "probe"
    probe.mkdir()
    (probe / "main.py").write_text(PROBE_MAIN)
    (probe / "case_config.yaml").write_text("# probe\nsize: 4\n" + (f"env:\n{base_env}" if base_env else ""))
    if launch:
        (probe / "benchmark.yaml").write_text(launch)
    for vendor in (REPO / "vendors").iterdir():
        (root / "vendors" / vendor.name).mkdir(parents=True)
        for entry in vendor.iterdir():
            (root / "vendors" / vendor.name / entry.name).symlink_to(entry)
    for name, text in (vendor_files or {}).items():
        (root / "vendors" / "cpu" / "probe").mkdir(exist_ok=True)
        (root / "vendors" / "cpu" / "probe" / name).write_text(text)
    return root


# --- validation of one file's env ---

def test_case_env_accepts_names_and_strings(tmp_path):
    path = tmp_path / "case_config.yaml"
    path.write_text('env:\n  NCCL_ALGO: Ring\n  NCCL_IB_HCA: "mlx5_0,mlx5_1"\n  LD_LIBRARY_PATH: /opt/nccl/lib\n'
                    '  _X1: ""\n  NCCL_IB_DISABLE: "1"\n')
    data, problems = load_yaml_file(path)
    assert problems == []
    assert case_env(path, data) == ({"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
                                     "LD_LIBRARY_PATH": "/opt/nccl/lib", "_X1": "", "NCCL_IB_DISABLE": "1"}, [])
    path.write_text("env: null\n")
    assert case_env(path, load_yaml_file(path)[0]) == ({}, [])


@pytest.mark.parametrize("text, line, words", [
    ("env: [NCCL_ALGO=Ring]\n", 1, "env: expected a mapping of environment variable names to strings"),
    ("env: NCCL_ALGO=Ring\n", 1, "env: expected a mapping"),
    ("x: 1\nenv:\n  1NCCL: a\n", 3, "env: '1NCCL': expected an environment variable name"),
    ("env:\n  NCCL-ALGO: a\n", 2, "env: 'NCCL-ALGO': expected an environment variable name"),
    ("env:\n  RANK: '3'\n", 2, "env.RANK: flagperf sets this variable itself"),
    ("env:\n  WORLD_SIZE: '3'\n", 2, "env.WORLD_SIZE: flagperf sets this variable itself"),
    ("env:\n  MASTER_ADDR: 10.0.0.1\n", 2, "env.MASTER_ADDR: flagperf sets this variable itself"),
    ("env:\n  FLAGPERF_TEST_INJECT: gemm:result\n", 2, "env.FLAGPERF_TEST_INJECT: flagperf sets this variable"),
    ("env:\n  CUDA_VISIBLE_DEVICES: '0'\n", 2, "env.CUDA_VISIBLE_DEVICES: flagperf sets this variable itself"),
    ("env:\n  NCCL_IB_DISABLE: 1\n", 2, "env.NCCL_IB_DISABLE: expected a string, got int 1 (write numbers"),
    ("env:\n  NCCL_DEBUG: yes\n", 2, "env.NCCL_DEBUG: expected a string, got bool True"),
    ("env:\n  NCCL_DEBUG:\n", 2, "env.NCCL_DEBUG: expected a string, got null"),
    ("env:\n  NCCL_DEBUG: [INFO]\n", 2, "env.NCCL_DEBUG: expected a string, got list"),
    ('env:\n  NCCL_DEBUG: "INFO\\nWARN"\n', 2, "env.NCCL_DEBUG: expected a string of at most 32768 printable"),
    ('env:\n  NCCL_DEBUG: "\\e[31m"\n', 2, "env.NCCL_DEBUG: expected a string of at most 32768 printable"),
])
def test_case_env_problems_name_file_line_and_key(tmp_path, text, line, words):
    path = tmp_path / "case_config.yaml"
    path.write_text(text)
    data, problems = load_yaml_file(path)
    assert problems == []
    env, problems = case_env(path, data, "CUDA_VISIBLE_DEVICES")
    assert len(problems) == 1 and env == {}, problems
    assert problems[0].startswith(f"{path}:{line}: {words}"), problems
    assert "\n" not in problems[0] and "\x1b" not in problems[0]


def test_owned_names_are_those_the_plan_sets(tmp_path):
    """Every variable the plan gives the ranks is refused in a case's env (FLAGPERF_* by its prefix)."""
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:2:1"])
    env = build_plan(cfg, RUN_ID).cases[0].rounds[0].nodes[0].launch.env
    assert {k for k in env if not k.startswith("FLAGPERF_")} <= set(OWNED_ENV)
    assert {"RANK", "LOCAL_RANK", "NODERANK", "NPROC_PER_NODE", "PYTHONUNBUFFERED"} <= set(OWNED_ENV)


# --- through the plan ---

def _plan(tmp_path, root, runtime="bare", key="probe:pytorch:local:1:2:1"):
    cfg = make_config(tmp_path / "cfg", [key], runtime=runtime, source_root=root)
    return build_plan(cfg, RUN_ID)


def test_env_reaches_every_node_merged_name_by_name(tmp_path):
    root = tree(tmp_path, "  NCCL_ALGO: Ring\n  NCCL_DEBUG: WARN\n",
                {"config_local.yaml": "env:\n  NCCL_DEBUG: INFO\n  NCCL_IB_HCA: mlx5_0\n",
                 "config_localx1x2.yaml": "size: 8\n"})
    plan = _plan(tmp_path, root)
    (case,) = plan.cases
    expected = {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0"}
    assert case.env == expected
    for rnd in case.rounds:
        for node in rnd.nodes:
            assert {k: node.launch.env[k] for k in expected} == expected
            assert node.launch.env["WORLD_SIZE"] == "2"             # flagperf's own names are still there
            files = json.loads(json.dumps(node.files))              # what the node directory receives
            assert LaunchSpec.from_dict(files[LAUNCH_FILE]).env == node.launch.env
            assert files[CASE_CONFIG_FILE]["env"] == expected and files[CASE_CONFIG_FILE]["size"] == 8


def test_env_in_node_launch_mode_and_in_a_container(tmp_path):
    launch = 'launch: node\ncommand: ["{python}", "main.py", "--nproc={nproc}"]\n'
    root = tree(tmp_path, "  NCCL_ALGO: Tree\n", launch=launch)
    for runtime in ("bare", "docker"):
        plan = _plan(tmp_path / runtime, root, runtime=runtime)
        node = plan.cases[0].rounds[0].nodes[0]
        assert node.launch.mode == "node" and node.launch.env["NCCL_ALGO"] == "Tree"
        if runtime == "docker":
            # the ranks get it from the node launcher inside the container (after environment_variables.sh)
            assert node.container is not None and node.launcher_argv[1].endswith("node_launcher.py")


def test_env_reaches_the_nodes_of_a_slurm_job(tmp_path):
    """Under SCHEDULER slurm the node launcher reads the same launch.json, which the job's node specs carry (the
    placeholders filled in on the node by launcher/slurm_node.py)."""
    root = tree(tmp_path, '  NCCL_ALGO: Ring\n  NCCL_SOCKET_IFNAME: "ib0"\n')
    (tmp_path / "cluster.yaml").write_text("SCHEDULER: slurm\n")
    (tmp_path / "test.yaml").write_text("VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: result\nCLUSTER: cluster.yaml\n"
                                        "CASES:\n  \"probe:pytorch:x:2:1:1\": null\n")
    nodes = build_plan(load_config(tmp_path / "test.yaml", source_root=root), RUN_ID).cases[0].rounds[0].nodes
    tokens = {n.host.address: i for i, n in enumerate(nodes)}
    doc = specs_document([_node_spec(n) for n in nodes], tokens, port_placeholder=PLACEHOLDER_PORT,
                         exit_file="slurm_exit.json", out_file="launcher.out.log", monitor_out_file="monitor.out.log")
    module = importlib.util.spec_from_file_location("slurm_node", REPO / "launcher" / "slurm_node.py")
    wrapper = importlib.util.module_from_spec(module)
    module.loader.exec_module(wrapper)
    for i in range(len(nodes)):
        on_node = wrapper.node_spec(json.loads(json.dumps(doc)), i, ["gpu-a1", "gpu-a2"], 4242)
        env = LaunchSpec.from_dict(on_node["files"][LAUNCH_FILE]).env
        assert (env["NCCL_ALGO"], env["NCCL_SOCKET_IFNAME"], env["MASTER_ADDR"]) == ("Ring", "ib0", "gpu-a1")


def test_no_env_key_no_env(tmp_path):
    plan = _plan(tmp_path, tree(tmp_path, ""))
    assert plan.cases[0].env == {}
    assert "env" not in plan.cases[0].rounds[0].nodes[0].case_config


def test_bad_env_fails_the_plan_naming_the_override_file(tmp_path):
    root = tree(tmp_path, "  NCCL_ALGO: Ring\n", {"config_local.yaml": "size: 2\nenv:\n  LOCAL_RANK: '0'\n"})
    with pytest.raises(ConfigError) as info:
        _plan(tmp_path, root)
    path = root / "vendors" / "cpu" / "probe" / "config_local.yaml"
    assert info.value.problems == [f"{path}:3: env.LOCAL_RANK: flagperf sets this variable itself "
                                   f"({', '.join(OWNED_ENV)} and every FLAGPERF_* name); expected another name"]


def test_dry_run_shows_the_env_and_a_bad_one_is_a_config_error(tmp_path, write, run_cli):
    root = tree(tmp_path, '  NCCL_ALGO: Ring\n  NCCL_SOCKET_IFNAME: "=eth0"\n')
    write(tmp_path, "cluster.yaml", "HOSTS: [localhost]\nMASTER_PORT: 29650\n")
    conf = write(tmp_path, "test.yaml", "VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: result\n"
                                        "CLUSTER: cluster.yaml\nCASES:\n  \"probe:pytorch:local:1:1:1\": null\n")
    rc, out, err = run_cli("run", "--dry-run", "--config", conf, cwd=tmp_path, env={"FLAGPERF_HOME": root})
    assert rc == 0, out + err
    (rank,) = [line for line in out.splitlines() if line.strip().startswith("rank:")]
    assert " NCCL_ALGO=Ring " in rank and " NCCL_SOCKET_IFNAME==eth0 " in rank, rank
    (root / "benchmarks" / "probe" / "case_config.yaml").write_text("size: 1\nenv:\n  NODE_RANK: '1'\n")
    rc, out, err = run_cli("run", "--dry-run", "--config", conf, cwd=tmp_path, env={"FLAGPERF_HOME": root})
    assert rc == 2 and out == "" and "Traceback" not in err, out + err
    (line,) = err.splitlines()
    assert line.startswith(f"flagperf: config error: {root / 'benchmarks/probe/case_config.yaml'}:3: env.NODE_RANK: "
                           f"flagperf sets this variable itself"), line
    assert not (tmp_path / "result").exists()


# --- summary.json and compare ---

def _case(env=None, versions=("2.21.5",), status=Status.PASSED, value=100.0):
    rounds = []
    for i, version in enumerate(versions, 1):
        finished = {"metric": "busbw", "unit": "GB/s", "higher_is_better": True, "value": value,
                    "env": {"device": "cuda", **({"nccl": version} if version else {})}}
        rounds.append(RoundSummary(i, f"c/round{i}", status, 1.0, None, finished))
    return CaseSummary("c", "collectives:pytorch:H100:1:8:1", "collectives", "pytorch", "H100", 1, 8,
                       len(rounds), None, rounds, env=dict(env or {}))


def _summary(run_id, case):
    return Summary(run_id, f"/runs/{run_id}", "1", "now", cases=[case])


def test_summary_records_the_env_and_the_nccl_version(tmp_path):
    s = _summary("a", _case({"NCCL_ALGO": "Ring"}, versions=("2.21.5", "2.21.5", None)))
    d = s.to_dict()
    assert d["cases"][0]["env"] == {"NCCL_ALGO": "Ring"} and d["cases"][0]["nccl"] == "2.21.5"
    s.save(tmp_path / "summary.json")
    back = Summary.load(tmp_path / "summary.json")
    assert back.cases[0].env == {"NCCL_ALGO": "Ring"} and back.cases[0].nccl == "2.21.5"
    assert _case(versions=("2.23.4", "2.21.5")).nccl == "2.21.5, 2.23.4"     # rounds that loaded another one
    assert _case(versions=(None,)).nccl is None


@pytest.mark.parametrize("bad, where", [({"NCCL_ALGO": 1}, "cases[0].env.NCCL_ALGO"), (["x"], "cases[0].env")])
def test_summary_with_a_bad_env_is_refused(bad, where):
    d = _summary("a", _case()).to_dict()
    d["cases"][0]["env"] = bad
    with pytest.raises(SummaryError) as info:
        Summary.from_dict(d)
    assert where in str(info.value)
    assert Summary.from_dict({"schema": SUMMARY_SCHEMA, "run_id": "old", "cases": [
        {"name": "c", "key": "k", "rounds": []}]}).cases[0].env == {}       # a summary written before: none


def test_compare_shows_two_nccl_builds_and_their_envs():
    a = _summary("a", _case({"NCCL_ALGO": "Ring", "LD_LIBRARY_PATH": "/opt/nccl-2.21/lib"}, versions=("2.21.5",)))
    b = _summary("b", _case({"NCCL_ALGO": "Tree", "NCCL_IB_HCA": "mlx5_0", "LD_LIBRARY_PATH": "/opt/nccl-2.21/lib"},
                            versions=("2.23.4",), value=120.0))
    cmp = compare_summaries(a, b)
    (c,) = cmp.cases
    assert c.setup_a == {"env": {"NCCL_ALGO": "Ring", "LD_LIBRARY_PATH": "/opt/nccl-2.21/lib"}, "nccl": "2.21.5"}
    assert c.setup_b["nccl"] == "2.23.4"
    assert c.setup_differences == ["NCCL 2.21.5 -> 2.23.4", "env NCCL_ALGO=Ring -> NCCL_ALGO=Tree",
                                   "env NCCL_IB_HCA unset -> NCCL_IB_HCA=mlx5_0"]
    assert "c: setup differs: NCCL 2.21.5 -> 2.23.4; env NCCL_ALGO=Ring -> NCCL_ALGO=Tree; env NCCL_IB_HCA " \
           "unset -> NCCL_IB_HCA=mlx5_0" in comparison_lines(cmp)
    d = cmp.to_dict()["cases"][0]
    assert d["setup_a"]["nccl"] == "2.21.5" and d["setup_b"]["env"]["NCCL_ALGO"] == "Tree"
    assert d["setup_differences"] == c.setup_differences
    same = compare_summaries(a, a)
    assert same.cases[0].setup_differences == []
    assert not any("setup differs" in line for line in comparison_lines(same))


def test_setup_differences_with_one_side_unreported():
    assert setup_differences({"env": {}, "nccl": None}, {"env": {}, "nccl": "2.23.4"}) == [
        "NCCL not reported -> 2.23.4"]
    assert setup_differences({"env": {}, "nccl": None}, {"env": {}, "nccl": None}) == []


def test_compare_command_prints_the_setup_difference(tmp_path, run_cli):
    for run_id, version, algo in (("a", "2.21.5", "Ring"), ("b", "2.23.4", "Tree")):
        (tmp_path / run_id).mkdir()
        _summary(run_id, _case({"NCCL_ALGO": algo}, versions=(version,))).save(tmp_path / run_id / "summary.json")
    rc, out, err = run_cli("compare", tmp_path / "a", tmp_path / "b")
    assert rc == 0, out + err
    assert "c: setup differs: NCCL 2.21.5 -> 2.23.4; env NCCL_ALGO=Ring -> NCCL_ALGO=Tree" in out, out
    rc, out, err = run_cli("compare", "--json", tmp_path / "a", tmp_path / "b")
    assert json.loads(out)["cases"][0]["setup_differences"][0] == "NCCL 2.21.5 -> 2.23.4"
