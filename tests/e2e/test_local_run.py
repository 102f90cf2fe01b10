"""End-to-end: real `flagperf` processes, real node launchers, real rank processes on localhost."""

import json
import re
import signal
import time

import pytest
import yaml

from flagperf.results.monitors import read_monitor_file
from flagperf.results.perflog import read_records
from flagperf_contract import validate_finished

from .conftest import (REPO, kill_all, only_run_dir, processes_matching, run_cli, start_cli, wait_for,
                       write_conf)


def test_embedded_default_config_runs(tmp_path):
    """The README's main job: configs/test_conf.yaml, with its results written to a temporary folder."""
    conf = yaml.safe_load((REPO / "configs" / "test_conf.yaml").read_text())
    conf.update(FLAGPERF_PATH=str(REPO), FLAGPERF_LOG_PATH=str(tmp_path / "result"),
                CLUSTER=str(REPO / "configs" / "cluster.yaml"))
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(conf))
    code, out, err = run_cli(["run", "--config", path], timeout=150)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    assert re.fullmatch(r"run\d{14}-[0-9a-f]{6}", run.name)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["schema"] == "flagperf.summary/1" and summary["status"] == "passed"
    assert [c["status"] for c in summary["cases"]] == ["passed"] * len(conf["CASES"])
    assert any(c["nproc"] >= 2 for c in summary["cases"])
    assert "passed" in out and "summary" in out


def test_two_rank_run_tree_summary_and_monitors(tmp_path):
    conf = write_conf(tmp_path, {"gemm:pytorch:test:1:2:2": "null"})
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 0, out + err
    assert "Traceback" not in out + err
    run = only_run_dir(tmp_path / "result")
    for name in ("flagperf_run.log", "effective_config.yaml", "summary.json", "run.json"):
        assert (run / name).is_file(), name
    runlog = (run / "flagperf_run.log").read_text()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d INFO .*\$ .*node_launcher\.py --spec",
                     runlog, re.M), runlog
    assert "monitor.py --out-dir" in runlog
    effective = yaml.safe_load((run / "effective_config.yaml").read_text())
    assert effective["VENDOR"] == "cpu" and effective["RUNTIME"] == "bare"

    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["name"] == "gemm-pytorch-test-1x2" and case["status"] == "passed"
    assert case["unit"] == "TFLOP/s" and case["metric"].startswith("tflops_")
    values = [r["value"] for r in case["rounds"]]
    assert len(values) == 2 and all(v > 0 for v in values)
    st = case["stats"]["value"]
    assert st["n"] == 2 and st["min"] == min(values) and st["max"] == max(values)
    assert abs(st["median"] - sum(values) / 2) < 1e-9

    for k in (1, 2):
        node = run / case["name"] / f"round{k}" / "localhost_noderank0"
        for name in ("rank0.out.log", "rank1.out.log", "launcher.log", "ranks.json", "launch.json",
                     "case_config.json", "cpu_monitor.log", "mem_monitor.log", "monitor_status.json"):
            assert (node / name).is_file(), f"{node}/{name}"
        ranks = json.loads((node / "ranks.json").read_text())
        assert [(r["rank"], r["exit_code"]) for r in ranks["ranks"]] == [(0, 0), (1, 0)]
        finished = [r for r in read_records(node / "rank0.out.log") if r["event"] == "FINISHED"]
        assert len(finished) == 1 and validate_finished(finished[0]) == []
        for sensor in ("cpu", "mem"):
            samples = read_monitor_file(node / f"{sensor}_monitor.log", strict=True)
            assert samples, sensor
            assert all(ts.tzinfo is not None for ts, _ in samples)
        assert not (node / "pwr_monitor.log").exists() or read_monitor_file(node / "pwr_monitor.log", strict=True)
    # A missing sensor is reported once in the run log, never per round.
    assert runlog.count("sensor pwr unavailable") <= 1


def test_distributed_environment_two_nodes(tmp_path, flagperf_home):
    """localhost twice: two node launchers, global ranks 0..3, NODE_RANK and LOCAL_RANK per rank."""
    (tmp_path / "cluster.yaml").write_text("HOSTS: [localhost, localhost]\nMASTER_PORT: 29633\n")
    conf = write_conf(tmp_path, {"sleeper:pytorch:test:2:2:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    seen = {}
    for node_rank in (0, 1):
        node = run / "sleeper-pytorch-test-2x2" / "round1" / f"localhost_noderank{node_rank}"
        for local_rank in (0, 1):
            rank = node_rank * 2 + local_rank
            text = (node / f"rank{rank}.out.log").read_text()
            env = json.loads(re.search(r"rank \d+ env (.*)", text).group(1))
            seen[rank] = env
            assert env["RANK"] == str(rank) and env["LOCAL_RANK"] == str(local_rank)
            assert env["NODE_RANK"] == str(node_rank) and env["WORLD_SIZE"] == "4"
            assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29633"
            assert env["LOCAL_WORLD_SIZE"] == "2" and env["FLAGPERF_DEVICE"] == "cpu"
    assert sorted(seen) == [0, 1, 2, 3]


def test_failing_rank_stops_its_sibling_and_next_case_runs(tmp_path, flagperf_home):
    cases = {"sleeper:pytorch:fail:1:2:1": "null", "sleeper:pytorch:ok:1:1:1": "null"}
    conf = write_conf(tmp_path, cases)
    # The failing case gets its config from a vendor override file for hw "fail" (FlagPerf's lookup).
    override = flagperf_home / "vendors" / "cpu" / "sleeper"
    override.mkdir()
    (override / "config_fail.yaml").write_text("fail_rank: 1\nfail_code: 7\nsleep_s: 120\n")
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=120)
    elapsed = time.monotonic() - t0
    assert code == 1, out + err
    assert elapsed < 90, f"the sibling was not stopped promptly ({elapsed:.0f} s)"     # it would sleep 120 s
    assert "Traceback" not in out + err
    assert "rank 1" in out and "exit code 7" in out and "failing on purpose" in out
    run = only_run_dir(tmp_path / "result")
    node = run / "sleeper-pytorch-fail-1x2" / "round1" / "localhost_noderank0"
    ranks = {r["rank"]: r for r in json.loads((node / "ranks.json").read_text())["ranks"]}
    assert ranks[1]["exit_code"] == 7 and not ranks[1]["stopped_by_launcher"]
    assert ranks[0]["exit_code"] == -signal.SIGTERM and ranks[0]["stopped_by_launcher"]
    assert (node / "rank0.out.log").is_file() and (node / "rank1.out.log").is_file()
    summary = json.loads((run / "summary.json").read_text())
    failed, ok = summary["cases"]
    assert failed["status"] == "failed" and ok["status"] == "passed"
    failure = failed["rounds"][0]["failure"]
    assert failure["rank"] == 1 and failure["exit_code"] == 7
    assert any("failing on purpose" in line for line in failure["last_lines"])
    assert summary["status"] == "failed"
    assert processes_matching(str(flagperf_home / "benchmarks" / "sleeper")) == []


def _start_sleepers(tmp_path, home, **extra):
    conf = write_conf(tmp_path, {"sleeper:pytorch:long:1:2:1": "null"}, **extra)
    (home / "benchmarks" / "sleeper" / "case_config.yaml").write_text("sleep_s: 120\n")
    proc = start_cli(["run", "--config", conf], home=home)
    launcher_log = lambda: list((tmp_path / "result").glob("run*/*/round1/*/launcher.log"))  # noqa: E731

    def pids():
        logs = launcher_log()
        text = logs[0].read_text() if logs else ""
        found = [int(p) for p in re.findall(r"rank \d \(local \d\) started pid=(\d+)", text)]
        return found if len(found) == 2 else None
    rank_pids = wait_for(pids, 60, "both ranks to start")
    return proc, rank_pids


def test_rank_killed_from_outside_fails_the_run_promptly(tmp_path, flagperf_home):
    proc, rank_pids = _start_sleepers(tmp_path, flagperf_home)
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        kill_all([rank_pids[1]], signal.SIGKILL)
        out, err = proc.communicate(timeout=100)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out + err
    assert elapsed < 90, elapsed                # rank 0 would sleep 120 s
    assert "rank 1" in out and "SIGKILL" in out
    assert processes_matching(str(flagperf_home / "benchmarks" / "sleeper")) == []
    assert processes_matching(str(tmp_path / "result")) == []          # no launcher or monitor left
    run = only_run_dir(tmp_path / "result")
    ranks = json.loads(next(run.glob("*/round1/*/ranks.json")).read_text())["ranks"]
    assert ranks[1]["exit_code"] == -signal.SIGKILL


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_everything_and_keeps_logs(tmp_path, flagperf_home, sig):
    proc, _ = _start_sleepers(tmp_path, flagperf_home)
    try:
        time.sleep(0.5)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err
    assert processes_matching(str(flagperf_home / "benchmarks" / "sleeper")) == []
    assert processes_matching(str(tmp_path / "result")) == []
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["cases"][0]["rounds"][0]["status"] == "interrupted"
    assert list(run.glob("*/round1/*/rank0.out.log")), "logs of the interrupted round are kept"


def test_check_localhost(tmp_path):
    conf = write_conf(tmp_path, {"gemm:pytorch:test:1:1:1": "null"})
    code, out, err = run_cli(["check", "--config", conf])
    assert code == 0, out + err
    assert "localhost" in out and "ok" in out
    (tmp_path / "cluster.yaml").write_text("HOSTS:\n  - HOST: localhost\n    PYTHON: /nonexistent/python3\n")
    conf = write_conf(tmp_path, {"gemm:pytorch:test:1:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["check", "--config", conf])
    assert code == 3, out + err
    assert "python_missing" in out
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 3, out + err
    assert not list((tmp_path / "result").glob("run*/*/round1")), "no round may start when a host check fails"


def test_clear_caches_drops_or_warns(tmp_path, flagperf_home):
    conf = write_conf(tmp_path, {"sleeper:pytorch:cc:1:1:2": "null"}, CLEAR_CACHES="true")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    runlog = (only_run_dir(tmp_path / "result") / "flagperf_run.log").read_text()
    dropped = runlog.count("page cache dropped")
    warned = runlog.count("CLEAR_CACHES: cannot drop the page cache")
    assert dropped + warned == 2, runlog      # once per round, one way or the other
    assert "drop_caches" in runlog            # the exact command is logged


def test_report_of_a_run(tmp_path, flagperf_home):
    override = flagperf_home / "vendors" / "cpu" / "sleeper"
    override.mkdir()
    (override / "config_fail.yaml").write_text("fail_rank: 0\nfail_code: 9\n")
    conf = write_conf(tmp_path, {"sleeper:pytorch:ok:1:1:2": "null", "sleeper:pytorch:fail:1:1:1": "null"})
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 1, out + err
    run = only_run_dir(tmp_path / "result")
    report = (run / "report.md").read_text()
    assert report.startswith(f"# flagperf {run.name}: failed")
    assert "| sleeper-pytorch-ok-1x1 | passed | 2/2 | slept_s |" in report
    assert "failing on purpose with exit code 9" in report             # the failed rank's last lines
    (run / "report.md").unlink()
    code, out, err = run_cli(["report", "--config", conf], home=flagperf_home)   # default: the latest run
    assert code == 0, out + err
    assert "sleeper-pytorch-fail-1x1 round 1: failed: rank 0 failed" in out and (run / "report.md").is_file()
    code, out, err = run_cli(["report", str(tmp_path / "nothing-here")])
    assert code == 2 and "summary.json" in err and "Traceback" not in err


# ---- processes that escape their rank (double fork + setsid): the node launcher ends them after the round ----

def _daemon_pids(node):
    """{rank: pid} of the daemons the escaper benchmark's ranks reported in their logs."""
    found = {}
    for log in node.glob("rank*.out.log"):
        m = re.search(r"rank (\d+) daemon pid=(\d+)", log.read_text())
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


def _assert_daemons_reaped(node, marker, nproc, signal_name):
    daemons = _daemon_pids(node)
    assert sorted(daemons) == list(range(nproc)), daemons
    try:
        assert processes_matching(marker) == [], "a process left behind by a rank outlived its round"
    finally:
        kill_all(processes_matching(marker))       # never leak a 600 s daemon, even when failing
    report = json.loads((node / "ranks.json").read_text())
    reaped = {r["pid"]: r for r in report["reaped"]}
    for pid in daemons.values():
        assert pid in reaped, (pid, report["reaped"])
        assert "escaper-daemon" in reaped[pid]["cmdline"] and reaped[pid]["signal"] == signal_name
        assert not reaped[pid].get("survived")
    text = (node / "launcher.log").read_text()
    assert "FLAGPERF_NODE_TOKEN=" in text
    assert all(f"reaping pid={pid}" in text for pid in daemons.values()), text


def test_daemon_left_by_a_passing_rank_is_reaped(tmp_path, flagperf_home):
    conf = write_conf(tmp_path, {"escaper:pytorch:test:1:2:1": "null"})
    marker = str(flagperf_home / "benchmarks" / "escaper")
    try:
        code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=120)
    finally:
        leftovers = processes_matching(marker)
    kill_all(leftovers)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cases"][0]["status"] == "passed"
    assert leftovers == []
    _assert_daemons_reaped(run / "escaper-pytorch-test-1x2" / "round1" / "localhost_noderank0", marker, 2,
                           "SIGTERM")


def test_daemon_left_by_a_failing_rank_is_reaped(tmp_path, flagperf_home):
    """Rank 1 fails, rank 0 is stopped by the launcher; both daemons ignore SIGTERM, so SIGKILL ends them."""
    override = flagperf_home / "vendors" / "cpu" / "escaper"
    override.mkdir()
    (override / "config_fail.yaml").write_text("fail_rank: 1\nfail_code: 5\nsleep_s: 120\n"
                                               "daemon_ignores_term: true\n")
    conf = write_conf(tmp_path, {"escaper:pytorch:fail:1:2:1": "null"})
    marker = str(flagperf_home / "benchmarks" / "escaper")
    t0 = time.monotonic()
    try:
        code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=120)
    finally:
        leftovers = processes_matching(marker)
    kill_all(leftovers)
    elapsed = time.monotonic() - t0
    assert code == 1, out + err
    assert leftovers == []
    assert elapsed < 90, f"reaping took too long ({elapsed:.0f} s)"       # rank 0 would sleep 120 s
    run = only_run_dir(tmp_path / "result")
    node = run / "escaper-pytorch-fail-1x2" / "round1" / "localhost_noderank0"
    ranks = {r["rank"]: r for r in json.loads((node / "ranks.json").read_text())["ranks"]}
    assert ranks[1]["exit_code"] == 5 and ranks[0]["exit_code"] == -signal.SIGTERM
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cases"][0]["status"] == "failed"
    _assert_daemons_reaped(node, marker, 2, "SIGKILL")


def test_interrupted_run_reaps_the_daemons(tmp_path, flagperf_home):
    """SIGINT to flagperf: the launcher, stopped by SIGTERM, still ends what its ranks left behind."""
    (flagperf_home / "benchmarks" / "escaper" / "case_config.yaml").write_text("sleep_s: 120\n")
    conf = write_conf(tmp_path, {"escaper:pytorch:long:1:2:1": "null"})
    marker = str(flagperf_home / "benchmarks" / "escaper")
    proc = start_cli(["run", "--config", conf], home=flagperf_home)
    try:
        node_dir = lambda: list((tmp_path / "result").glob("run*/*/round1/localhost_noderank0"))  # noqa: E731
        node = wait_for(lambda: node_dir() and len(_daemon_pids(node_dir()[0])) == 2 and node_dir()[0], 60,
                        "both daemons to start")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        leftovers = processes_matching(marker)
        kill_all(leftovers)
    assert proc.returncode == 130, out + err
    assert leftovers == []
    _assert_daemons_reaped(node, marker, 2, "SIGTERM")
    assert json.loads((node / "ranks.json").read_text())["signalled"] is True


def test_busy_master_port_is_moved_on_a_single_host_run(tmp_path):
    """A port already listened on by something else is caught by the check on node 0 (before any round), instead
    of every case failing with EADDRINUSE inside the ranks; on a single-host run the probe's free port is used,
    with a note, and recorded in effective_config.yaml (a multi-host run fails the check: tests/unit/
    test_cli_overrides.py)."""
    import socket
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {port}\n")
        conf = write_conf(tmp_path, {"gemm:pytorch:port:1:1:1": "null"}, CLUSTER="cluster.yaml")
        code, out, err = run_cli(["check", "--config", conf])
        assert code == 0 and f"MASTER_PORT {port} is taken on localhost" in " ".join(out.split()), out + err
        code, out, err = run_cli(["run", "--config", conf])
        assert code == 0, out + err
        assert f"note: MASTER_PORT {port} is taken on localhost" in out, out
        (run_dir,) = (tmp_path / "result").glob("run*")
        moved = yaml.safe_load((run_dir / "effective_config.yaml").read_text())["cluster"]["MASTER_PORT"]
        assert port < moved <= port + 100
        (launch,) = run_dir.glob("*/round1/*/launch.json")
        assert re.search(rf'"MASTER_PORT": "?{moved}\b', launch.read_text()), launch.read_text()[:2000]
    finally:
        busy.close()


def test_live_progress_on_a_terminal_and_plain_lines_off_it(tmp_path):
    """On a terminal (a real pty through util-linux `script`) a live panel shows the stage and each node's state
    with the round's elapsed time against CASE_TIMEOUT; piped output (CI) gets only the log lines."""
    import os
    import shutil
    import subprocess
    import sys
    if shutil.which("script") is None:
        from testbed.realparts import unavailable
        unavailable("util-linux `script` (a pty) is missing")
    (tmp_path / "cluster.yaml").write_text("HOSTS: [localhost]\nMASTER_PORT: 29563\n")
    conf = write_conf(tmp_path, {"gemm:pytorch:live:1:1:1": "null"}, CLUSTER="cluster.yaml")
    typescript = tmp_path / "typescript"
    cmd = f"{sys.executable} -m flagperf run --config {conf}"
    proc = subprocess.run(["script", "-qec", cmd, str(typescript)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TERM="xterm-256color", COLUMNS="160"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    screen = typescript.read_text(errors="replace")
    assert "check: connecting to 1 host(s)" in screen
    assert "of CASE_TIMEOUT" in screen and "localhost_noderank0" in screen and "running" in screen
    code, out, err = run_cli(["run", "--config", conf])            # a pipe: no live panel
    assert code == 0 and "of CASE_TIMEOUT" not in out + err and "▶" not in out
