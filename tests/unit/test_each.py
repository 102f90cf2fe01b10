"""nnodes ``each``: one independent single-node job per host. The case key, the config checks, the plan (every
host its own node 0, world and MASTER_ADDR/PORT), the dry run, and the pipeline on the FakeBackend (a host that
fails stops no other host; each host judged on its own; rankings and the exit code of an outlier)."""
import json

import pytest

from flagperf.config import CaseSpec
from flagperf.errors import EXIT_CASE_FAILED, EXIT_OK, ConfigError
from flagperf.pipeline import Run
from flagperf.plan import build_plan
from flagperf.render import plan_lines
from flagperf.results.summary import Summary

from tests.unit.fakebackend import FakeBackend, NodeScript, finished_record, make_config

RUN_ID = "run20250101000000"
HOSTS = ("localhost", "h2", "h3")
KEY = "gemm:pytorch:H100:each:2:1"
NAME = "gemm-pytorch-H100-eachx2"


# ---------------------------------------------------------------------------------------------- case key
@pytest.mark.parametrize("field", ["each", "Each", "EACH", " each "])
def test_each_is_parsed_case_insensitively(field):
    case = CaseSpec.parse(f"gemm:pytorch:H100:{field}:8:1")
    assert case.each and case.nproc == 8 and case.name == "gemm-pytorch-H100-eachx8"
    assert CaseSpec.parse("gemm:pytorch:H100:each:auto:1").name == "gemm-pytorch-H100-eachxauto"
    assert not CaseSpec.parse("gemm:pytorch:H100:2:8:1").each


@pytest.mark.parametrize("key, message", [
    ("gemm:pytorch:H100:all:8:1", "nnodes must be a positive integer, each or pairs, got 'all'"),
    ("gemm:pytorch:H100:eachx:8:1", "nnodes must be a positive integer, each or pairs, got 'eachx'"),
    ("gemm:pytorch:H100:1:each:1", "nproc must be a positive integer or auto, got 'each'"),
    ("gemm:pytorch:H100:each:8:each", "repeat must be a positive integer, got 'each'"),
])
def test_each_only_in_nnodes(key, message):
    with pytest.raises(ValueError) as exc:
        CaseSpec.parse(key)
    assert str(exc.value) == message


# ---------------------------------------------------------------------------------------------- config
def test_config_counts_every_host_and_allows_localhost_beside_ssh_hosts(tmp_path):
    cfg = make_config(tmp_path, [KEY, "gemm:pytorch:H100:EACH:auto:1"], hosts=HOSTS, vendor="nvidia")
    a, b = cfg.test.cases
    assert a.each and a.nnodes == 3 and a.nproc == 2 and a.key == KEY
    assert b.each and b.nproc is None
    # a plain multi-node case with node 0 on localhost and SSH hosts beside it is refused; each is not
    with pytest.raises(ConfigError, match="node 0 is 'localhost'"):
        make_config(tmp_path / "plain", ["gemm:pytorch:H100:3:2:1"], hosts=HOSTS, vendor="nvidia")


def test_config_master_port_per_host_must_fit(tmp_path):
    folder = tmp_path / "c"
    make_config(folder, [KEY], hosts=HOSTS)
    (folder / "cluster.yaml").write_text("HOSTS: [a, b, c]\nMASTER_PORT: 65534\n")
    from flagperf.config import load_config
    with pytest.raises(ConfigError) as exc:
        load_config(folder / "test.yaml", detect=lambda: ("cpu", "test"))
    assert "nnodes each: the 3 hosts listen on MASTER_PORT 65534 to 65536, past 65535" in str(exc.value)
    (folder / "cluster.yaml").write_text("HOSTS: [a, b, c]\nMASTER_PORT: 65533\n")
    load_config(folder / "test.yaml", detect=lambda: ("cpu", "test"))


# ---------------------------------------------------------------------------------------------- plan
def test_plan_every_host_is_its_own_node_0(tmp_path):
    cfg = make_config(tmp_path, [KEY], hosts=HOSTS + ("h2",), vendor="nvidia")      # h2 twice: one job
    plan = build_plan(cfg, RUN_ID)
    (case,) = plan.cases
    assert case.name == NAME and case.case.nnodes == 3 and case.case.each
    assert [h.address for h in plan.hosts] == list(HOSTS)
    (rnd,) = case.rounds
    assert [n.label for n in rnd.nodes] == ["localhost_noderank0", "h2_noderank0", "h3_noderank0"]
    for i, (n, addr) in enumerate(zip(rnd.nodes, ("127.0.0.1", "h2", "h3"))):
        env = n.launch.env
        assert n.node_rank == 0 and n.ranks == (0, 1) and n.master_addr == addr
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["NNODES"], env["NODE_RANK"], env["WORLD_SIZE"],
                env["LOCAL_WORLD_SIZE"]) == (addr, str(29650 + i), "1", "0", "2", "2")
        assert n.launch.nnodes == 1 and n.launch.ranks == [0, 1] and n.launch.visible_devices == "0,1"
        assert n.case_config["nnodes"] == 1 and n.case_config["each"] is True and n.case_config["nproc"] == 2
        assert str(n.local_dir).endswith(f"{RUN_ID}/{NAME}/round1/{n.host.address}_noderank0")
    plain = build_plan(make_config(tmp_path / "p", ["gemm:pytorch:H100:1:2:1"], vendor="nvidia"), RUN_ID)
    assert "each" not in plain.cases[0].rounds[0].nodes[0].case_config


def test_plan_nproc_auto_is_the_fewest_accelerators_of_any_host(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:H100:each:auto:1"], hosts=HOSTS, vendor="nvidia")
    plan = build_plan(cfg, RUN_ID, {"localhost": 8, "h2": 4, "h3": 8})
    (case,) = plan.cases
    assert case.name == "gemm-pytorch-H100-eachx4"
    assert all(n.launch.env["WORLD_SIZE"] == "4" for n in case.rounds[0].nodes)


def test_plan_uses_the_single_node_override_file(tmp_path, repo_root):
    root = tmp_path / "src"
    for name in ("benchmarks", "launcher", "monitors"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(repo_root / name, target_is_directory=True)
    vdir = root / "vendors" / "cpu"
    vdir.mkdir(parents=True)
    for f in (repo_root / "vendors" / "cpu").glob("*.yaml"):
        (vdir / f.name).symlink_to(f)
    (vdir / "gemm").mkdir()
    (vdir / "gemm" / "config_H100x1x2.yaml").write_text("m: 64\n")
    (vdir / "gemm" / "config_H100x3x2.yaml").write_text("m: 999\n")
    cfg = make_config(tmp_path / "c", [KEY], hosts=("h1", "h2", "h3"), source_root=root)
    (case,) = build_plan(cfg, RUN_ID).cases
    assert [p.name for p in case.config_files] == ["case_config.yaml", "config_H100x1x2.yaml"]
    assert case.rounds[0].nodes[0].case_config["m"] == 64


def test_dry_run_shows_each(tmp_path):
    cfg = make_config(tmp_path, [KEY], hosts=HOSTS)
    lines = plan_lines(build_plan(cfg, RUN_ID), FakeBackend())
    text = "\n".join(lines)
    assert f"case {NAME}  [{KEY}]  each: 3 independent job(s), one per host, each 1 node x 2 rank(s)" in text
    assert "node 0 on h3: global ranks 0, 1; MASTER_ADDR=h3 MASTER_PORT=29652 WORLD_SIZE=2" in text
    assert "node 0 on localhost: global ranks 0, 1; MASTER_ADDR=127.0.0.1 MASTER_PORT=29650 WORLD_SIZE=2" in text


def test_dry_run_through_the_cli(tmp_path, write, run_cli):
    write(tmp_path, "cluster.yaml", "HOSTS: [localhost, 10.0.0.2]\nMASTER_PORT: 29700\n")
    conf = write(tmp_path, "test.yaml", """\
        VENDOR: cpu
        RUNTIME: bare
        CLUSTER: cluster.yaml
        FLAGPERF_LOG_PATH: logs
        CASES:
          "gemm:pytorch:local:each:2:1": null
        """)
    code, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert code == 0, out + err
    assert "case gemm-pytorch-local-eachx2" in out and "each: 2 independent job(s)" in out
    assert "node 0 on 10.0.0.2: global ranks 0, 1; MASTER_ADDR=10.0.0.2 MASTER_PORT=29701 WORLD_SIZE=2" in out
    assert not (tmp_path / "logs").exists()


# ---------------------------------------------------------------------------------------------- pipeline
def run(tmp_path, cases, backend, hosts=HOSTS):
    cfg = make_config(tmp_path, cases, hosts=hosts)
    plan = build_plan(cfg, RUN_ID)
    said: list = []
    code = Run(plan, say=said.append, backend=backend).execute()
    return code, Summary.load(plan.run_dir / "summary.json"), said, plan


def by_host(scripts):
    return lambda node: scripts.get(node.host.address)


def value_script(value, **kw):
    return NodeScript(records={0: [finished_record(value=value)]}, **kw)


def test_one_host_failing_stops_no_other_host(tmp_path):
    scripts = {"localhost": value_script(100.0, delay_s=0.5), "h2": NodeScript(exit_code=1, rank_exit={1: 5}),
               "h3": value_script(101.0, delay_s=0.5)}
    backend = FakeBackend(scripts=by_host(scripts))
    code, s, said, plan = run(tmp_path, [KEY], backend)
    assert code == EXIT_CASE_FAILED
    (c,) = s.cases
    assert c.each and c.nnodes == 3 and c.status == "failed"
    (r,) = c.rounds
    assert r.status == "failed"
    assert r.failure.reason == "h2_noderank0: rank 1 failed (exit code 5)"
    assert r.failure.node == "h2_noderank0" and r.failure.nodes == ("h2_noderank0",)
    for label in ("localhost_noderank0", "h3_noderank0"):
        assert backend.launchers[(NAME, 1, label)].signals == []          # never stopped
    st = {n.host: (n.status, n.launcher_exit, (n.finished or {}).get("value")) for n in r.nodes}
    assert st == {"localhost": ("passed", 0, 100.0), "h2": ("failed", 1, None), "h3": ("passed", 0, 101.0)}
    assert any("h2_noderank0 failed; the other hosts go on" in line for line in said), said
    (ranking,) = s.rankings
    assert [e.host for e in ranking.entries] == ["h3", "localhost"] and ranking.failed_hosts == ("h2",)


def test_a_host_that_cannot_start_stops_no_other_host(tmp_path):
    from flagperf.backends import BackendError
    backend = FakeBackend(scripts=by_host({"h3": value_script(7.0)}))
    original = backend.prepare_node

    def prepare(node):
        if node.host.address == "h2":
            raise BackendError("h2_noderank0: cannot prepare the node: disk full")
        original(node)
    backend.prepare_node = prepare
    code, s, said, plan = run(tmp_path, [KEY], backend)
    (r,) = s.cases[0].rounds
    assert code == EXIT_CASE_FAILED and r.status == "error"
    st = {n.host: n.status for n in r.nodes}
    assert st == {"localhost": "passed", "h2": "error", "h3": "passed"}
    assert r.failure.reason == "h2_noderank0: h2_noderank0: cannot prepare the node: disk full"
    assert ("spawn_launcher", NAME, 1, "h3_noderank0") in backend.calls
    assert ("spawn_launcher", NAME, 1, "h2_noderank0") not in backend.calls
    assert ("cleanup_node", NAME, 1, "h2_noderank0") in backend.calls


def test_timeout_of_one_host_keeps_the_others_results(tmp_path):
    scripts = {"localhost": value_script(100.0), "h2": NodeScript(hang=True), "h3": value_script(100.0)}
    cfg = make_config(tmp_path, [KEY], hosts=HOSTS, case_timeout=1)
    plan = build_plan(cfg, RUN_ID)
    Run(plan, say=lambda _: None, backend=FakeBackend(scripts=by_host(scripts))).execute()
    s = Summary.load(plan.run_dir / "summary.json")
    (r,) = s.cases[0].rounds
    assert r.status == "timeout"
    assert {n.host: n.status for n in r.nodes} == {"localhost": "passed", "h2": "timeout", "h3": "passed"}


def test_outlier_host_passes_the_case_and_fails_the_run(tmp_path):
    scripts = {"localhost": value_script(100.0), "h2": value_script(101.0), "h3": value_script(50.0)}
    code, s, said, plan = run(tmp_path, [KEY], FakeBackend(scripts=by_host(scripts)))
    assert code == EXIT_CASE_FAILED
    assert s.status == "passed" and s.cases[0].status == "passed"
    (ranking,) = s.rankings
    assert [(e.host, e.outlier) for e in ranking.entries] == [
        ("h2", False), ("localhost", False), ("h3", True)]
    assert any(line.startswith(f"ERROR: OUTLIER: {NAME}: host h3: 50 TFLOPS") for line in said), said
    report = (plan.run_dir / "report.md").read_text()
    assert f"**OUTLIER: {NAME}: host h3: 50 TFLOPS" in report
    data = json.loads((plan.run_dir / "summary.json").read_text())
    assert data["rankings"][0]["entries"][2]["outlier"] is True
    # the same hosts, all healthy: exit 0
    scripts["h3"] = value_script(99.0)
    code, s, *_ = run(tmp_path / "ok", [KEY], FakeBackend(scripts=by_host(scripts)))
    assert code == EXIT_OK and not any(e.outlier for e in s.rankings[0].entries)


def test_plain_cases_have_no_rankings_and_no_per_node_status(tmp_path):
    code, s, *_ = run(tmp_path, ["gemm:pytorch:local:1:1:1"], FakeBackend(), hosts=("localhost",))
    assert code == EXIT_OK and s.rankings == []
    assert s.cases[0].rounds[0].nodes[0].status is None and not s.cases[0].each
