"""The run pipeline (flagperf/pipeline.py) end to end in process, on the in-memory FakeBackend: statuses, exit
codes, failure records, summary.json and report.md, host checks, nproc auto and the order of backend calls."""
import json
import math
import time

import pytest

from flagperf.backends import BackendError
from flagperf.errors import EXIT_CASE_FAILED, EXIT_HOSTS, EXIT_INTERRUPTED, EXIT_OK
from flagperf.pipeline import Run, check_hosts
from flagperf.plan import build_plan
from flagperf.results.summary import Summary
from flagperf_contract import LAUNCHER_SIGNALLED_EXIT, RANKS_FILE

from tests.unit.fakebackend import (FakeBackend, NodeScript, check_failed_record, finished_record, make_config,
                                    skipped_record)

RUN_ID = "run20250101000000"
GEMM = "gemm:pytorch:local:1:1:1"
GEMM_NAME = "gemm-pytorch-local-1x1"
GPT = "llm:pytorch:local:1:1:1"
GPT_NAME = "llm-pytorch-local-1x1"


def run(tmp_path, cases, backend=None, **config_kw):
    """(exit code, Summary loaded back from summary.json, said lines, backend, plan)."""
    cfg = make_config(tmp_path, cases, **config_kw)
    plan = build_plan(cfg, RUN_ID)
    backend = backend or FakeBackend()
    said = []
    code = Run(plan, say=said.append, backend=backend).execute()
    summary = Summary.load(plan.run_dir / "summary.json")
    return code, summary, said, backend, plan


def case(summary, name):
    (c,) = [c for c in summary.cases if c.name == name]
    return c


def only_round(summary, name=None):
    c = case(summary, name) if name else summary.cases[0]
    (r,) = c.rounds
    return r


# ---------------------------------------------------------------------------------------------------- passing
def test_passed_run_writes_summary_and_report(tmp_path):
    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT])
    assert code == EXIT_OK
    assert s.status == "passed" and not s.interrupted
    assert s.backend == "fake" and s.vendor == "cpu" and s.runtime == "bare" and s.hosts == ["localhost"]
    assert [c.name for c in s.cases] == [GEMM_NAME, GPT_NAME]
    for c in s.cases:
        assert c.status == "passed"
        (r,) = c.rounds
        assert r.status == "passed" and r.failure is None
        assert r.value == 12.5 and r.finished["metric"] == "tflops"
        (n,) = r.nodes
        assert n.node == "localhost_noderank0" and n.launcher_exit == 0
        assert [rk["rank"] for rk in n.ranks] == [0]
        assert n.monitors["cpu"]["samples"] == 1
        assert n.monitors["unavailable"] == {"pwr": "no RAPL in the fake"}
    assert s.host_checks == []
    run_dir = plan.run_dir
    assert (run_dir / "report.md").is_file()
    report = (run_dir / "report.md").read_text()
    assert f"# flagperf {RUN_ID}: passed" in report and GEMM_NAME in report and GPT_NAME in report
    for f in ("run.json", "effective_config.yaml", "flagperf_run.log"):
        assert (run_dir / f).is_file()
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["backend"] == "fake" and len(run_json["nodes"]) == 2
    # the node directory holds the files prepare_node wrote
    node_dir = plan.cases[0].rounds[0].nodes[0].local_dir
    assert json.loads((node_dir / "launch.json").read_text())["schema"] == "flagperf.launch/1"
    assert (node_dir / "case_config.json").is_file()
    assert any(line.startswith(f"{GEMM_NAME} round 1/1: passed in ") and "tflops = 12.5 TFLOPS" in line
               for line in said), said
    assert any(line.startswith("summary: ") for line in said)
    # a sensor that is unavailable is reported once, as a warning
    assert sum("sensor pwr unavailable: no RAPL in the fake" in line for line in said) == 1


def test_monitors_and_launchers_are_stopped(tmp_path):
    code, s, said, backend, plan = run(tmp_path, [GEMM])
    assert code == EXIT_OK
    (mon,) = backend.monitors.values()
    assert mon.exited and mon.signals and mon.signals[0] == 15          # SIGTERM
    status = json.loads((plan.cases[0].rounds[0].nodes[0].local_dir / "monitor_status.json").read_text())
    assert status["stop_reason"] == "SIGTERM"
    (launcher,) = backend.launchers.values()
    assert launcher.signals == []                                        # it exited by itself


def test_call_order(tmp_path):
    code, s, said, backend, plan = run(tmp_path, [GEMM])
    assert code == EXIT_OK
    assert backend.call_names() == ["connect", "deploy", "probe", "prepare_case", "prepare_node", "spawn_monitor",
                                    "spawn_launcher", "cleanup_node", "collect", "close"]
    assert backend.calls[0] == ("connect", ("localhost",))
    assert backend.calls[-1] == ("close",)


def test_call_order_two_cases_two_rounds_two_nodes(tmp_path):
    code, s, said, backend, plan = run(tmp_path, ["gemm:pytorch:local:2:1:2", GPT],
                                       hosts=("localhost", "localhost"))
    assert code == EXIT_OK
    names = [c[0] for c in backend.calls]
    assert names[:3] == ["connect", "deploy", "probe"] and names[-1] == "close"
    assert names.count("prepare_case") == 2
    assert names.count("spawn_launcher") == 2 * 2 + 1
    # per round: every node prepared, then monitors, then launchers, then cleanup, then collect
    rounds = [("gemm-pytorch-local-2x1", 1), ("gemm-pytorch-local-2x1", 2), (GPT_NAME, 1)]
    for cname, k in rounds:
        steps = [c[0] for c in backend.calls if c[1:3] == (cname, k)]
        nodes = 2 if cname.startswith("gemm") else 1
        assert steps == (["prepare_node"] * nodes + ["spawn_monitor"] * nodes + ["spawn_launcher"] * nodes
                         + ["cleanup_node"] * nodes + ["collect"] * nodes), steps
    # rounds run one after the other; prepare_case comes before a case's first round
    idx = {c: i for i, c in enumerate(backend.calls)}
    first_gpt = min(i for c, i in idx.items() if c[0] == "prepare_node" and c[1] == GPT_NAME)
    last_gemm = max(i for c, i in idx.items() if c[0] == "collect" and c[1] == "gemm-pytorch-local-2x1")
    assert idx[("prepare_case", GPT_NAME)] > last_gemm and idx[("prepare_case", GPT_NAME)] < first_gpt


def test_clear_caches_calls_drop_caches_and_goes_on(tmp_path):
    code, s, said, backend, plan = run(tmp_path, [GEMM], extra="CLEAR_CACHES: true\n")
    assert code == EXIT_OK
    assert backend.call_names()[3:5] == ["prepare_case", "drop_caches"]
    assert any("CLEAR_CACHES: cannot drop the page cache (not in the fake); going on" in line for line in said)


# ---------------------------------------------------------------------------------------------------- failures
def test_failing_rank_fails_the_round_and_the_next_case_runs(tmp_path):
    scripts = {"gemm": NodeScript(exit_code=1, rank_exit={1: 7})}
    code, s, said, backend, plan = run(tmp_path, ["gemm:pytorch:local:1:2:1", GPT],
                                       backend=FakeBackend(scripts=scripts))
    assert code == EXIT_CASE_FAILED
    assert s.status == "failed"
    r = only_round(s, "gemm-pytorch-local-1x2")
    assert r.status == "failed"
    f = r.failure.to_dict()
    assert f["reason"] == "rank 1 failed (exit code 7)"
    assert f["rank"] == 1 and f["exit_code"] == 7 and f["node"] == "localhost_noderank0"
    assert f["log"].endswith("localhost_noderank0/rank1.out.log")
    assert f["last_lines"][-1] == "rank 1: Traceback (most recent call last): boom 1"
    assert r.nodes[0].launcher_exit == 1
    assert case(s, GPT_NAME).status == "passed"
    assert ("prepare_case", GPT_NAME) in backend.calls
    assert any("FAILED after" in line and "rank 1" in line and "exit code 7" in line for line in said), said
    assert "    | rank 1: Traceback (most recent call last): boom 1" in said


def test_check_failed_rank(tmp_path):
    scripts = NodeScript(exit_code=1, rank_exit={0: 3}, records={0: [check_failed_record()]})
    code, s, *_ = run(tmp_path, [GEMM], backend=FakeBackend(scripts=scripts))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "failed" and r.failure.rank == 0 and r.failure.exit_code == 3
    assert any("CHECK_FAILED" in line for line in r.failure.last_lines)


def test_rank_killed_by_signal_is_described(tmp_path):
    scripts = NodeScript(exit_code=1, rank_exit={0: -9})
    code, s, *_ = run(tmp_path, [GEMM], backend=FakeBackend(scripts=scripts))
    assert code == EXIT_CASE_FAILED
    assert only_round(s).failure.reason == "rank 0 failed (killed by SIGKILL (exit code -9))"


def test_first_failing_node_stops_the_others(tmp_path):
    key, name = "gemm:pytorch:local:2:1:1", "gemm-pytorch-local-2x1"
    scripts = {(name, 1, 0): NodeScript(hang=True),
               (name, 1, 1): NodeScript(exit_code=1, rank_exit={1: 5})}
    code, s, said, backend, plan = run(tmp_path, [key], backend=FakeBackend(scripts=scripts),
                                       hosts=("localhost", "localhost"))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "failed"
    assert r.failure.rank == 1 and r.failure.exit_code == 5 and r.failure.node == "localhost_noderank1"
    node0 = backend.launchers[(name, 1, "localhost_noderank0")]
    assert node0.signals == [15]
    assert [n.launcher_exit for n in r.nodes] == [LAUNCHER_SIGNALLED_EXIT, 1]
    assert any("localhost_noderank1 failed; stopping localhost_noderank0" in line for line in said), said


def test_launcher_failing_without_ranks_json_names_host_and_file(tmp_path):
    scripts = NodeScript(exit_code=2, write_ranks=False, output=["node launcher: bad spec", "cannot read launch"])
    code, s, said, backend, plan = run(tmp_path, [GEMM], backend=FakeBackend(scripts=scripts))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "failed"
    f = r.failure.to_dict()
    node_dir = plan.cases[0].rounds[0].nodes[0].local_dir
    assert f["reason"].startswith("node localhost_noderank0 failed; host localhost: ")
    assert f"{node_dir / RANKS_FILE}: missing" in f["reason"]
    assert f["exit_code"] == 2 and f["node"] == "localhost_noderank0"
    assert f["log"] == str(node_dir / "launcher.out.log")
    assert f["last_lines"] == ["node launcher: bad spec", "cannot read launch"]


@pytest.mark.parametrize("script, words", [
    (NodeScript(write_ranks=False), ": missing"),
    (NodeScript(ranks_text="{not json"), ": unreadable: "),
    (NodeScript(ranks_text='{"schema": "flagperf.ranks/1", "node_rank": 0, "ranks": [{"rank": "zero"}]}'),
     "ranks[0]: "),
    (NodeScript(ranks_text='{"schema": "other/1"}'), "expected schema 'flagperf.ranks/1'"),
    (NodeScript(ranks_text="[1, 2]"), "expected a JSON object"),
], ids=["missing", "not-json", "bad-record", "wrong-schema", "not-object"])
def test_missing_or_corrupt_ranks_json_after_exit_0(tmp_path, script, words):
    code, s, said, backend, plan = run(tmp_path, [GEMM], backend=FakeBackend(scripts=script))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "failed"
    reason = r.failure.reason
    assert reason.startswith("node localhost_noderank0: host localhost: ") and RANKS_FILE in reason, reason
    assert words in reason, reason
    assert "Traceback" not in "\n".join(said)
    assert r.nodes[0].ranks == []


def test_ranks_json_listing_other_ranks_fails(tmp_path):
    code, s, *_ = run(tmp_path, ["gemm:pytorch:local:1:2:1"],
                      backend=FakeBackend(scripts=NodeScript(ranks_override=[0])))
    assert code == EXIT_CASE_FAILED
    assert only_round(s).failure.reason == ("node localhost_noderank0: ranks.json lists ranks [0], the plan "
                                               "started [0, 1]")


def test_missing_finished_carries_rank0_exit_code(tmp_path):
    code, s, said, backend, plan = run(tmp_path, [GEMM], backend=FakeBackend(scripts=NodeScript(records={})))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "failed"
    f = r.failure.to_dict()
    assert f["reason"] == "rank 0 printed no FINISHED line and no [FlagPerf Result] lines"
    assert f["rank"] == 0 and f["exit_code"] == 0 and f["exit_code"] is not None
    assert f["node"] == "localhost_noderank0" and f["log"].endswith("rank0.out.log")
    assert f["last_lines"] == ["rank 0: starting", "rank 0: working"]
    assert any("exit code 0" in line for line in said), said
    report = (plan.run_dir / "report.md").read_text()
    assert "rank 0, exit code 0)" in report and "exit code None" not in report


@pytest.mark.parametrize("records, raw, words", [
    ([finished_record(checks={"passed": False, "details": {}})], [], "checks.passed is not true"),
    ([], ['[PerfLog] ' + json.dumps(finished_record(value=math.nan))], "'value': expected a number, got nan"),
    ([{k: v for k, v in finished_record().items() if k != "unit"}], [], "missing key 'unit'"),
    ([finished_record(schema="flagperf.perflog/0")], [], "unsupported schema"),
    ([finished_record(metrics={"lat": {"value": "x", "unit": "ms"}})], [], "metrics['lat']"),
], ids=["checks-failed", "nan", "missing-key", "schema", "metric"])
def test_invalid_finished(tmp_path, records, raw, words):
    script = NodeScript(records={0: records}, raw_lines={0: raw})
    code, s, *_ = run(tmp_path, [GEMM], backend=FakeBackend(scripts=script))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "failed"
    assert r.failure.reason.startswith("invalid result: ") and words in r.failure.reason, r.failure
    assert r.failure.exit_code == 0 and r.finished is None


def test_last_finished_line_counts(tmp_path):
    script = NodeScript(records={0: [finished_record(value=1.0), finished_record(value=2.0)]})
    code, s, *_ = run(tmp_path, [GEMM], backend=FakeBackend(scripts=script))
    assert code == EXIT_OK and only_round(s).value == 2.0


def test_skipped_case_and_run_still_passes(tmp_path):
    scripts = {"gemm": NodeScript(records={0: [skipped_record("no nvcc here")]})}
    code, s, said, *_ = run(tmp_path, [GEMM, GPT], backend=FakeBackend(scripts=scripts))
    assert code == EXIT_OK
    assert s.status == "passed"
    r = only_round(s, GEMM_NAME)
    assert r.status == "skipped" and r.failure.to_dict() == {"reason": "skipped: no nvcc here"}
    assert case(s, GEMM_NAME).status == "skipped"
    assert case(s, GPT_NAME).status == "passed"
    assert any(line.startswith("WARNING: ") and "skipped: no nvcc here" in line for line in said)


def test_case_timeout(tmp_path):
    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], case_timeout=0.3,
                                       backend=FakeBackend(scripts={"gemm": NodeScript(hang=True)}))
    assert code == EXIT_CASE_FAILED
    r = only_round(s, GEMM_NAME)
    assert r.status == "timeout"
    assert r.failure.reason == "round exceeded CASE_TIMEOUT (0.3 s)"
    assert 0.3 <= r.duration_s < 0.3 + 15      # CASE_TIMEOUT + 15 s, the bound docs/reliability.md gives
    (launcher,) = [p for k, p in backend.launchers.items() if k[0] == GEMM_NAME]
    assert launcher.signals and launcher.signals[0] == 15
    assert r.nodes[0].launcher_exit == LAUNCHER_SIGNALLED_EXIT
    assert case(s, GEMM_NAME).status == "failed"
    assert case(s, GPT_NAME).status == "passed"
    assert any("CASE_TIMEOUT of 0.3 s reached" in line for line in said)


def test_prepare_case_error_fails_that_case_only(tmp_path):
    err = BackendError("image flagperf/cpu-pytorch:abc: build failed", ["Step 3/7 : RUN pip install", "ERROR: no net"])
    backend = FakeBackend(prepare_case_fail={GEMM_NAME: err})
    code, s, said, backend, plan = run(tmp_path, ["gemm:pytorch:local:1:1:2", GPT], backend=backend)
    gemm = "gemm-pytorch-local-1x1"
    assert code == EXIT_CASE_FAILED
    c = case(s, gemm)
    assert c.status == "failed" and len(c.rounds) == 2
    for r in c.rounds:
        assert r.status == "error"
        assert r.failure.to_dict() == {"reason": "preparation failed: image flagperf/cpu-pytorch:abc: build failed",
                             "last_lines": ["Step 3/7 : RUN pip install", "ERROR: no net"]}
    assert not any(c[0] == "prepare_node" and c[1] == gemm for c in backend.calls)
    assert case(s, GPT_NAME).status == "passed"
    assert "    | ERROR: no net" in said
    report = (plan.run_dir / "report.md").read_text()
    assert "preparation failed" in report and "ERROR: no net" in report


@pytest.mark.parametrize("exc", [BackendError("localhost_noderank0: cannot prepare the node: 500 Server Error "
                                              "for docker API: no space left"),
                                 RuntimeError("docker API: 500 Server Error: no space left")])
def test_prepare_node_error_is_a_round_error_and_the_run_goes_on(tmp_path, exc):
    gemm = "gemm-pytorch-local-1x1"
    backend = FakeBackend(prepare_node_fail={(gemm, 1, 0): exc})
    code, s, said, backend, plan = run(tmp_path, ["gemm:pytorch:local:1:1:2", GPT], backend=backend)
    assert code == EXIT_CASE_FAILED
    r1, r2 = case(s, gemm).rounds
    assert r1.status == "error"
    assert "no space left" in r1.failure.reason and "localhost_noderank0" in r1.failure.reason
    assert r1.failure.reason.count("localhost_noderank0") == 1
    assert r2.status == "passed"
    assert case(s, GPT_NAME).status == "passed"
    # the node was cleaned up even though it never started; no launcher or monitor was spawned
    steps = [c[0] for c in backend.calls if c[1:3] == (gemm, 1)]
    assert steps == ["prepare_node", "cleanup_node", "collect"]


def test_interrupted_run(tmp_path):
    class Interrupting(FakeBackend):
        def spawn_launcher(self, node):
            if node.launch.case_name == GEMM_NAME:
                raise KeyboardInterrupt
            return super().spawn_launcher(node)

    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], backend=Interrupting())
    assert code == EXIT_INTERRUPTED
    assert s.interrupted and s.status == "interrupted"
    r = only_round(s, GEMM_NAME)
    assert r.status == "interrupted"
    assert only_round(s, GPT_NAME).status == "not_run"
    assert only_round(s, GPT_NAME).failure.to_dict() == {"reason": "not run: the run was interrupted before this round"}
    assert backend.calls[-1] == ("close",)
    # the monitor of the interrupted round was stopped
    assert all(m.exited for m in backend.monitors.values())
    assert "**interrupted**" in (plan.run_dir / "report.md").read_text()


# ---------------------------------------------------------------------------------------------------- hosts
@pytest.mark.parametrize("where", ["connect", "probe"])
def test_host_failing_check_stops_before_any_round(tmp_path, where):
    fail = {"localhost": ("connection_refused" if where == "connect" else "torch_missing",
                          "the fake says no")}
    backend = FakeBackend(**{f"{where}_fail": fail})
    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], backend=backend)
    assert code == EXIT_HOSTS
    assert not s.interrupted and s.status == "failed"
    outcome = fail["localhost"][0]
    assert s.host_checks == [{"host": "localhost", "outcome": outcome, "detail": "the fake says no",
                              "remedy": s.host_checks[0]["remedy"]}]
    assert s.host_checks[0]["remedy"]
    for c in s.cases:
        assert c.status == "not_run"
        for r in c.rounds:
            assert r.status == "not_run"
            assert r.status != "interrupted"
            reason = r.failure.reason
            assert reason.startswith("not run: 1 host(s) failed their check") and f"localhost: {outcome}" in reason
    names = backend.call_names()
    assert "prepare_case" not in names and "spawn_launcher" not in names
    assert names[-1] == "close"
    if where == "connect":
        assert "deploy" not in names and backend.calls[names.index("probe")] == ("probe", ())
    report = (plan.run_dir / "report.md").read_text()
    assert "## Hosts that failed their check" in report and "the fake says no" in report
    assert any(line.startswith(f"ERROR: host localhost: {outcome}: the fake says no") for line in said)


def test_deploy_failure(tmp_path):
    backend = FakeBackend(deploy_fail={"localhost": "rsync: No space left on device"})
    code, s, said, backend, plan = run(tmp_path, [GEMM], backend=backend)
    assert code == EXIT_HOSTS
    (hc,) = s.host_checks
    assert hc["outcome"] == "deploy_failed" and hc["outcome"] != "deploy_path_missing"
    assert "rsync: No space left on device" in hc["detail"]
    assert hc["detail"].startswith(f"deploy to {plan.config.cluster.hosts[0].flagperf_path} failed: ")
    assert only_round(s).status == "not_run"
    assert ("probe", ()) in backend.calls          # the host that failed to deploy is not probed


def test_check_hosts_keeps_host_order_and_reports_deploys(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:3:1:1"], hosts=("node-a", "node-b", "node-c"))
    backend = FakeBackend(connect_fail={"node-b": ("auth_failed", "denied")},
                          deploy_fail={"node-c": "disk full"})
    said = []
    checks = check_hosts(backend, cfg.cluster.hosts, {"node-a": 0}, deploy=True, say=said.append)
    assert [(c.host, c.outcome) for c in checks] == [("node-a", "ok"), ("node-b", "auth_failed"),
                                                     ("node-c", "deploy_failed")]
    assert ("deploy", ("node-a", "node-c")) in backend.calls and ("probe", ("node-a",)) in backend.calls
    assert said == [f"deploy: host node-a: 2 of 10 file(s) differed, 1234 bytes sent to "
                    f"{cfg.cluster.hosts[0].flagperf_path}"]
    checks = check_hosts(FakeBackend(), cfg.cluster.hosts, {}, deploy=False)
    assert [c.host for c in checks] == ["node-a", "node-b", "node-c"]


# ---------------------------------------------------------------------------------------------------- nproc auto
def test_nproc_auto_resolved_from_probed_accelerators(tmp_path):
    backend = FakeBackend(accelerators={"localhost": 3})
    code, s, said, backend, plan = run(tmp_path, ["gemm:pytorch:local:1:auto:1"], vendor="nvidia",
                                       backend=backend)
    assert code == EXIT_OK, said
    assert backend.need == {"localhost": 1}
    (c,) = s.cases
    assert c.name == "gemm-pytorch-local-1x3" and c.nproc == 3
    (n,) = c.rounds[0].nodes
    assert [r["rank"] for r in n.ranks] == [0, 1, 2]
    assert any(call[0] == "spawn_launcher" and call[1] == "gemm-pytorch-local-1x3" for call in backend.calls)
    run_json = json.loads((plan.run_dir / "run.json").read_text())
    assert run_json["nodes"][0]["case"] == "gemm-pytorch-local-1x3"
    launch = json.loads((plan.run_dir / "gemm-pytorch-local-1x3" / "round1" / "localhost_noderank0" /
                         "launch.json").read_text())
    assert launch["nproc"] == 3 and launch["ranks"] == [0, 1, 2] and launch["visible_devices"] == "0,1,2"
    # the dry-run plan assumed 1 and said so
    assert plan.cases[0].name == "gemm-pytorch-local-1x1" and plan.notes


def test_nproc_auto_on_cpu_is_two(tmp_path):
    backend = FakeBackend(accelerators={"localhost": 7})
    code, s, said, backend, plan = run(tmp_path, ["gemm:pytorch:local:1:auto:1"], backend=backend)
    assert code == EXIT_OK
    assert backend.need == {"localhost": 0}
    assert [c.name for c in s.cases] == ["gemm-pytorch-local-1x2"] and s.cases[0].nproc == 2


def test_sigterm_while_waiting_interrupts_the_run(tmp_path):
    import os
    import signal
    import threading

    class Terminating(FakeBackend):
        def spawn_launcher(self, node):
            proc = super().spawn_launcher(node)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            return proc

    before = signal.getsignal(signal.SIGTERM)
    backend = Terminating(scripts={"gemm": NodeScript(hang=True)})
    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], backend=backend)
    assert signal.getsignal(signal.SIGTERM) is before            # the handler is restored
    assert code == EXIT_INTERRUPTED
    assert s.interrupted
    r = only_round(s, GEMM_NAME)
    assert r.status == "interrupted" and r.failure.to_dict() == {"reason": "interrupted (received SIGTERM)"}
    (launcher,) = backend.launchers.values()
    assert launcher.signals[:1] == [15] and r.nodes[0].launcher_exit == LAUNCHER_SIGNALLED_EXIT
    assert only_round(s, GPT_NAME).status == "not_run"
    assert ("prepare_case", GPT_NAME) not in backend.calls
    assert any("run interrupted" in line for line in said)


def test_spawn_monitor_backend_error_is_a_round_error(tmp_path):
    class NoMonitor(FakeBackend):
        def spawn_monitor(self, node):
            self._record("spawn_monitor", node.launch.case_name, node.launch.round, node.label)
            raise BackendError(f"{node.label}: cannot start the monitor: no such file")

    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], backend=NoMonitor())
    assert code == EXIT_CASE_FAILED
    for c in s.cases:
        r = only_round(s, c.name)
        assert r.status == "error"
        assert r.failure.to_dict() == {"reason": "localhost_noderank0: cannot start the monitor: no such file"}
    assert "spawn_launcher" not in backend.call_names()
    assert [c[0] for c in backend.calls if c[1:3] == (GEMM_NAME, 1)] == ["prepare_node", "spawn_monitor",
                                                                         "cleanup_node", "collect"]


def test_spawn_launcher_error_reason_is_kept(tmp_path):
    class NoLauncher(FakeBackend):
        def spawn_launcher(self, node):
            raise BackendError(f"{node.label}: cannot start the node launcher: permission denied")

    code, s, said, backend, plan = run(tmp_path, [GEMM], backend=NoLauncher())
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "error"
    assert "permission denied" in r.failure.reason, r.failure


def test_spawn_launcher_error_stops_the_started_nodes(tmp_path):
    key = "gemm:pytorch:local:2:1:1"

    class HalfStarts(FakeBackend):
        def spawn_launcher(self, node):
            if node.node_rank == 1:
                raise BackendError(f"{node.label}: cannot start the node launcher: boom")
            return super().spawn_launcher(node)

    code, s, said, backend, plan = run(tmp_path, [key], hosts=("localhost", "localhost"),
                                       backend=HalfStarts(scripts=NodeScript(hang=True)))
    assert code == EXIT_CASE_FAILED
    r = only_round(s)
    assert r.status == "error" and "localhost_noderank1" in r.failure.reason
    (started,) = backend.launchers.values()
    assert started.signals[:1] == [15]                                # stopped, not left running
    assert all(m.exited for m in backend.monitors.values())


def test_unexpected_backend_exception_fails_the_round_not_the_run(tmp_path):
    class Broken(FakeBackend):
        def spawn_monitor(self, node):
            if node.launch.case_name == GEMM_NAME:
                raise OSError("Too many open files")
            return super().spawn_monitor(node)

    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], backend=Broken())
    assert code == EXIT_CASE_FAILED
    r = only_round(s, GEMM_NAME)
    assert r.status == "error" and "Too many open files" in r.failure.reason
    assert only_round(s, GPT_NAME).status == "passed"


def test_frozen_host_fails_the_round_naming_it_and_later_rounds_skip_it(tmp_path, monkeypatch):
    """A host that stops answering its heartbeat fails the running round within the heartbeat bound, naming the
    host; its processes are not waited for, and later rounds on it fail at once."""
    import flagperf.stages.wait as wait_mod
    monkeypatch.setattr(wait_mod, "HEARTBEAT_INTERVAL_S", 0.2)

    class Freezing(FakeBackend):
        def heartbeat(self, hosts):
            return {h.address: "no answer (frozen)" for h in hosts}

    backend = Freezing(scripts={"gemm": NodeScript(hang=True)})
    t0 = time.monotonic()
    code, s, said, backend, plan = run(tmp_path, [GEMM, GPT], backend=backend)
    assert time.monotonic() - t0 < 30           # "detected within 30 s" (docs/reliability.md); the node hangs
    assert code == EXIT_CASE_FAILED
    r = only_round(s, GEMM_NAME)
    assert r.status == "failed" and "host localhost stopped answering" in r.failure.reason
    later = only_round(s, GPT_NAME)
    assert later.status == "error" and "lost earlier in this run" in later.failure.reason
