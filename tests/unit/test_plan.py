"""Config -> Plan (flagperf/plan.py): ranks, rendezvous, paths, commands, case-config merging; and the
dry run through the real CLI, which prints the plan and creates nothing."""
import re
import shlex
from pathlib import Path

import pytest

from flagperf.config import load_config
from flagperf.errors import ConfigError
from flagperf.plan import build_plan, new_run_id

RUN_ID = "run20250101000000"
CASE = "gemm:pytorch:local:2:2:2"
NAME = "gemm-pytorch-local-2x2"


@pytest.fixture
def source_root(tmp_path, repo_root):
    """A flagperf tree of its own: the repo's benchmarks, launcher and monitors (symlinked) and vendors
    (real folders holding symlinked vendor.yaml files), so that tests can add vendor override files."""
    root = tmp_path / "src"
    root.mkdir()
    for name in ("benchmarks", "launcher", "monitors"):
        (root / name).symlink_to(repo_root / name, target_is_directory=True)
    for vendor in (repo_root / "vendors").iterdir():
        if (vendor / "vendor.yaml").is_file():
            (root / "vendors" / vendor.name).mkdir(parents=True)
            for f in vendor.glob("*.yaml"):          # vendor.yaml and the peak table it names
                (root / "vendors" / vendor.name / f.name).symlink_to(f)
    return root


def two_host_config(tmp_path, write, cases=(CASE,), vendor="nvidia", master_port=29600):
    write(tmp_path, "conf/cluster.yaml", f"HOSTS:\n  - localhost\n  - localhost\nMASTER_PORT: {master_port}\n")
    case_lines = "".join(f'  "{c}": null\n' for c in cases)
    return write(tmp_path, "conf/test.yaml",
                 f"VENDOR: {vendor}\nRUNTIME: bare\nFLAGPERF_PATH: /opt/flagperf\nFLAGPERF_LOG_PATH: ../logs\n"
                 f"MONITOR_INTERVAL: 0.5\nCLUSTER: cluster.yaml\nCASES:\n{case_lines}")


def fail_detect():
    raise AssertionError("VENDOR is set: no detection")


def test_two_nodes_two_ranks_two_rounds(tmp_path, write, source_root):
    cfg = load_config(two_host_config(tmp_path, write), source_root=source_root, detect=fail_detect)
    log = (tmp_path / "logs").resolve()
    assert cfg.test.log_path == log
    plan = build_plan(cfg, run_id=RUN_ID)

    assert plan.run_id == RUN_ID and plan.run_dir == log / RUN_ID
    assert [h.address for h in plan.hosts] == ["localhost"]          # each host once
    (case,) = plan.cases
    assert case.name == NAME and case.case.key == CASE
    assert [r.index for r in case.rounds] == [1, 2]
    fp = "/opt/flagperf"
    for rnd in case.rounds:
        round_dir = log / RUN_ID / NAME / f"round{rnd.index}"
        assert rnd.local_dir == round_dir
        assert [n.node_rank for n in rnd.nodes] == [0, 1]
        assert [n.ranks for n in rnd.nodes] == [(0, 1), (2, 3)]
        assert [n.label for n in rnd.nodes] == ["localhost_noderank0", "localhost_noderank1"]
        for node in rnd.nodes:
            node_dir = f"{round_dir}/localhost_noderank{node.node_rank}"
            assert node.node_dir == node_dir
            assert node.local_dir == Path(node_dir)
            assert node.host.address == "localhost" and node.host.flagperf_path == fp
            py = node.host.python
            spec = node.launch.to_dict()
            assert spec["schema"] == "flagperf.launch/1"
            assert spec["case"] == CASE
            assert (spec["node_rank"], spec["nnodes"], spec["nproc"], spec["ranks"]) == \
                (node.node_rank, 2, 2, list(node.ranks))
            assert spec["env"] == {
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29600", "NNODES": "2",
                "NODE_RANK": str(node.node_rank), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                "FLAGPERF_VENDOR": "nvidia", "FLAGPERF_DEVICE": "cuda", "FLAGPERF_DIST_BACKEND": "nccl",
                "FLAGPERF_TORCH_PLUGIN": "", "FLAGPERF_RUN_ID": RUN_ID, "FLAGPERF_FRAMEWORK": "pytorch",
            }
            assert spec["env_defaults"] == {"NCCL_NVLS_ENABLE": "0"}
            assert spec["visible_devices_env"] == "CUDA_VISIBLE_DEVICES"
            assert spec["visible_devices"] == "0,1"
            assert spec["argv"] == [py, "-u", f"{fp}/benchmarks/gemm/main.py",
                                    "--case-config", f"{node_dir}/case_config.json",
                                    "--data-dir", "", "--result-dir", node_dir]
            assert spec["cwd"] == f"{fp}/benchmarks/gemm"
            assert spec["out_dir"] == node_dir
            assert node.launcher_argv == (py, f"{fp}/launcher/node_launcher.py", "--spec", f"{node_dir}/launch.json")
            assert node.monitor_argv == (py, f"{fp}/monitors/monitor.py", "--out-dir", node_dir, "--interval", "0.5",
                                         "--gpu", "nvml", "--vendor", "nvidia", "--run-id", RUN_ID)
            cc = node.case_config
            assert (cc["model"], cc["framework"], cc["hw"], cc["nnodes"], cc["nproc"], cc["data_dir"]) == \
                ("gemm", "pytorch", "local", 2, 2, None)
    assert not (tmp_path / "logs").exists()          # building a plan creates nothing


def test_cpu_vendor_has_no_visible_devices_env(tmp_path, write, source_root):
    cfg = load_config(two_host_config(tmp_path, write, cases=("gemm:pytorch:local:1:3:1",), vendor="cpu"),
                      source_root=source_root, detect=fail_detect)
    (node,) = build_plan(cfg, run_id=RUN_ID).cases[0].rounds[0].nodes
    assert node.launch.visible_devices_env is None
    assert node.launch.visible_devices == "0,1,2"
    assert node.launch.env["FLAGPERF_DIST_BACKEND"] == "gloo"
    assert node.launch.env["WORLD_SIZE"] == "3"
    assert node.launch.env_defaults == {}
    assert "--gpu" in node.monitor_argv and node.monitor_argv[node.monitor_argv.index("--gpu") + 1] == "none"


def test_remote_master_and_per_host_paths(tmp_path, write, source_root):
    write(tmp_path, "cluster.yaml", """\
        HOSTS:
          - 10.0.0.1
          - HOST: 10.0.0.2
            PYTHON: /opt/py/bin/python
            FLAGPERF_PATH: /data/fp
        MASTER_PORT: 29700
        """)
    test = write(tmp_path, "test.yaml", 'VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_PATH: /opt/flagperf\n'
                                        'FLAGPERF_LOG_PATH: /logs\nCLUSTER: cluster.yaml\n'
                                        'CASES:\n  "gemm:pytorch:local:2:1:1": /data/gemm\n')
    plan = build_plan(load_config(test, source_root=source_root, detect=fail_detect), run_id=RUN_ID)
    n0, n1 = plan.cases[0].rounds[0].nodes
    assert n0.launch.env["MASTER_ADDR"] == n1.launch.env["MASTER_ADDR"] == "10.0.0.1"
    assert n0.launch.env["MASTER_PORT"] == "29700"
    assert n0.launch.argv[:3] == ["python3", "-u", "/opt/flagperf/benchmarks/gemm/main.py"]
    assert n1.launch.argv[:3] == ["/opt/py/bin/python", "-u", "/data/fp/benchmarks/gemm/main.py"]
    assert n1.launcher_argv[:2] == ("/opt/py/bin/python", "/data/fp/launcher/node_launcher.py")
    assert n0.launch.argv[n0.launch.argv.index("--data-dir") + 1] == "/data/gemm"
    # SSH hosts write under <their FLAGPERF_PATH>/result; the driver collects into FLAGPERF_LOG_PATH.
    assert n1.node_dir == f"/data/fp/result/{RUN_ID}/gemm-pytorch-local-2x1/round1/10.0.0.2_noderank1"
    assert n0.node_dir == f"/opt/flagperf/result/{RUN_ID}/gemm-pytorch-local-2x1/round1/10.0.0.1_noderank0"
    assert str(n1.local_dir) == f"/logs/{RUN_ID}/gemm-pytorch-local-2x1/round1/10.0.0.2_noderank1"
    assert [n.ranks for n in (n0, n1)] == [(0,), (1,)]


def test_case_config_overrides_merge_in_order(tmp_path, write, source_root, repo_root):
    import yaml
    base = yaml.safe_load((repo_root / "benchmarks" / "gemm" / "case_config.yaml").read_text())
    vdir = source_root / "vendors" / "nvidia" / "gemm"
    write(vdir, "case_config.yaml", "m: 1024\nn: 1024\nk: 1024\nvendor_only: 1\n")
    write(vdir, "config_local.yaml", "n: 2048\nk: 2048\nhw_only: 2\n")
    write(vdir, "config_localx2x2.yaml", "k: 4096\nscale_only: 3\nnnodes: 99\n")
    write(vdir, "config_localx1x2.yaml", "k: 1\nwrong_scale: true\n")         # another scale: not used
    write(vdir, "config_other.yaml", "k: 2\nwrong_hw: true\n")                # another hw: not used
    write(source_root / "vendors" / "cpu" / "gemm", "config_localx2x2.yaml", "wrong_vendor: true\n")
    cfg = load_config(two_host_config(tmp_path, write), source_root=source_root, detect=fail_detect)
    plan = build_plan(cfg, run_id=RUN_ID)
    (case,) = plan.cases
    assert case.config_files == (source_root / "benchmarks" / "gemm" / "case_config.yaml",
                                 vdir / "case_config.yaml", vdir / "config_local.yaml",
                                 vdir / "config_localx2x2.yaml")
    for rnd in case.rounds:
        for node in rnd.nodes:
            cc = node.case_config
            assert (cc["m"], cc["n"], cc["k"]) == (1024, 2048, 4096)
            assert (cc["vendor_only"], cc["hw_only"], cc["scale_only"]) == (1, 2, 3)
            assert cc["nnodes"] == 2                       # the case key wins over any file
            assert cc["dtypes"] == base["dtypes"] and cc["warmup"] == base["warmup"]
            assert not {"wrong_scale", "wrong_hw", "wrong_vendor"} & set(cc)


def test_case_config_without_overrides_is_the_benchmark_default(tmp_path, write, source_root, repo_root):
    import yaml
    base = yaml.safe_load((repo_root / "benchmarks" / "gemm" / "case_config.yaml").read_text())
    cfg = load_config(two_host_config(tmp_path, write), source_root=source_root, detect=fail_detect)
    case = build_plan(cfg, run_id=RUN_ID).cases[0]
    assert case.config_files == (source_root / "benchmarks" / "gemm" / "case_config.yaml",)
    cc = case.rounds[0].nodes[0].case_config
    assert {k: cc[k] for k in base} == base


def test_empty_override_file_is_used_and_changes_nothing(tmp_path, write, source_root):
    vdir = source_root / "vendors" / "nvidia" / "gemm"
    write(vdir, "config_local.yaml", "# nothing yet\n")
    cfg = load_config(two_host_config(tmp_path, write), source_root=source_root, detect=fail_detect)
    case = build_plan(cfg, run_id=RUN_ID).cases[0]
    assert case.config_files[-1] == vdir / "config_local.yaml"
    assert case.rounds[0].nodes[0].case_config["m"] == 512


@pytest.mark.parametrize("text, words", [
    ("m: 1\n bad: x\n", [":2: YAML syntax error"]),
    ("- 1\n- 2\n", [": expected a mapping of case-config keys"]),
])
def test_bad_override_file_is_a_config_error(tmp_path, write, source_root, text, words):
    bad = write(source_root / "vendors" / "nvidia" / "gemm", "config_localx2x2.yaml", text)
    cfg = load_config(two_host_config(tmp_path, write), source_root=source_root, detect=fail_detect)
    with pytest.raises(ConfigError) as exc:
        build_plan(cfg, run_id=RUN_ID)
    (problem,) = exc.value.problems
    assert problem.startswith(str(bad))
    assert all(w in problem for w in words)


def test_cases_with_same_name_get_distinct_directories(tmp_path, write, source_root):
    cfg = load_config(two_host_config(tmp_path, write, cases=("gemm:pytorch:local:1:1:1", "gemm:pytorch:local:1:1:2")),
                      source_root=source_root, detect=fail_detect)
    plan = build_plan(cfg, run_id=RUN_ID)
    assert [c.name for c in plan.cases] == ["gemm-pytorch-local-1x1", "gemm-pytorch-local-1x1-2"]
    dirs = [n.node_dir for c in plan.cases for r in c.rounds for n in r.nodes]
    assert len(dirs) == 3 and len(set(dirs)) == 3
    assert [h.address for h in plan.hosts] == ["localhost"]     # no case needs the second host


def test_new_run_id_is_unique_within_one_second(tmp_path):
    now = 1_700_000_000.0
    first = new_run_id(tmp_path, now)
    assert re.fullmatch(r"run\d{14}-[0-9a-f]{6}", first)
    assert list(tmp_path.iterdir()) == []                        # it only looks
    ids = {new_run_id(tmp_path, now) for _ in range(200)}        # same second, as two drivers would be
    assert len(ids) == 200 and all(i[:17] == first[:17] for i in ids)


def test_build_plan_without_run_id_picks_a_fresh_one(tmp_path, write, source_root):
    cfg = load_config(two_host_config(tmp_path, write), source_root=source_root, detect=fail_detect)
    plan = build_plan(cfg)
    assert re.fullmatch(r"run\d{14}-[0-9a-f]{6}", plan.run_id)
    assert plan.run_dir == cfg.test.log_path / plan.run_id
    assert not cfg.test.log_path.exists()


# ---------------------------------------------------------------------------------------------------------
# flagperf run --dry-run, through the real CLI


def snapshot(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_dry_run_prints_the_plan_and_creates_nothing(tmp_path, write, run_cli):
    test = two_host_config(tmp_path, write, cases=(CASE, "llm:pytorch:local:1:1:1"))
    before = snapshot(tmp_path)
    rc, out, err = run_cli("run", "--config", test, "--dry-run", cwd=tmp_path)
    assert rc == 0, err
    assert "Traceback" not in err
    assert snapshot(tmp_path) == before
    log = (tmp_path / "logs").resolve()
    assert not log.exists()

    m = re.search(r"^run directory: (\S+)", out, re.M)
    assert m, out
    run_dir = Path(m.group(1))
    assert run_dir.parent == log and re.fullmatch(r"run\d{14}-[0-9a-f]{6}", run_dir.name)
    run_id = run_dir.name
    assert "runtime: bare" in out
    assert "vendor: nvidia" in out
    assert re.search(r"^hosts: localhost$", out, re.M), out

    lines = out.splitlines()
    assert any(line.startswith(f"case {NAME}  [{CASE}]") and "2 node(s) x 2 rank(s), 2 round(s)" in line
               for line in lines), out
    assert any(line.startswith("case llm-pytorch-local-1x1  [llm:pytorch:local:1:1:1]")
               for line in lines), out
    for rnd in (1, 2):
        round_dir = run_dir / NAME / f"round{rnd}"
        assert f"  round {rnd}: {round_dir}" in lines
        for node, ranks in ((0, "0, 1"), (1, "2, 3")):
            node_dir = f"{round_dir}/localhost_noderank{node}"
            assert any(line.startswith(f"    node {node} on localhost: global ranks {ranks};") and
                       "MASTER_ADDR=127.0.0.1" in line and "MASTER_PORT=29600" in line and
                       "WORLD_SIZE=4" in line and "CUDA_VISIBLE_DEVICES=0,1" in line for line in lines), out
            assert f"      node dir: {node_dir}" in lines
            launcher = [line for line in lines if line.startswith("      launcher: ") and node_dir in line]
            assert launcher and shlex.split(launcher[0].split(": ", 1)[1])[1:] == \
                ["/opt/flagperf/launcher/node_launcher.py", "--spec", f"{node_dir}/launch.json"]
            monitor = [line for line in lines if line.startswith("      monitor:  ") and node_dir in line]
            assert monitor and f"--run-id {run_id}" in monitor[0] and "/opt/flagperf/monitors/monitor.py" in monitor[0]
            rank = [line for line in lines if line.startswith("      rank:     ") and node_dir in line]
            assert rank and "(cd /opt/flagperf/benchmarks/gemm && " in rank[0]
            assert f"--case-config {node_dir}/case_config.json" in rank[0]
    train_round = run_dir / "llm-pytorch-local-1x1" / "round1"
    assert f"  round 1: {train_round}" in lines
    assert any(line.startswith("    node 0 on localhost: global ranks 0;") and "WORLD_SIZE=1" in line
               for line in lines)
    assert f"      node dir: {train_round}/localhost_noderank0" in lines
    # 2 rounds x 2 nodes + 1 round x 1 node
    assert sum(line.startswith("      node dir: ") for line in lines) == 5


def test_dry_run_with_cluster_option(tmp_path, write, run_cli):
    test = write(tmp_path, "test.yaml", 'VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: logs\n'
                                        'CLUSTER: missing.yaml\nCASES:\n  "gemm:pytorch:local:2:1:1": null\n')
    write(tmp_path, "two.yaml", "HOSTS: [localhost, localhost]\nMASTER_PORT: 29777\n")
    rc, out, err = run_cli("run", "--config", test, "--cluster", "two.yaml", "--dry-run", cwd=tmp_path)
    assert rc == 0, err
    assert "MASTER_PORT=29777" in out and "hosts: localhost\n" in out
    assert "node 1 on localhost: global ranks 1;" in out
    assert not (tmp_path / "logs").exists()


def test_dry_run_lists_override_files_and_reports_a_bad_one(tmp_path, write, run_cli, source_root):
    vdir = source_root / "vendors" / "nvidia" / "gemm"
    good = write(vdir, "config_local.yaml", "m: 64\n")
    test = two_host_config(tmp_path, write)
    env = {"FLAGPERF_HOME": source_root}
    rc, out, err = run_cli("run", "--config", test, "--dry-run", cwd=tmp_path, env=env)
    assert rc == 0, err
    assert f"  case config: {source_root}/benchmarks/gemm/case_config.yaml, {good}" in out.splitlines()

    bad = write(vdir, "config_localx2x2.yaml", "m: 1\n bad: x\n")
    for extra in (["--dry-run"], []):
        rc, out, err = run_cli("run", "--config", test, *extra, cwd=tmp_path, env=env)
        assert rc == 2, (out, err)
        assert "Traceback" not in err
        (line,) = err.splitlines()
        assert line.startswith(f"flagperf: config error: {bad}:2: YAML syntax error")
        assert not (tmp_path / "logs").exists()
