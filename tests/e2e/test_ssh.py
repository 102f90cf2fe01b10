"""End-to-end over SSH: real OpenSSH servers on 127.0.0.x (testbed/sshbed.py), real paramiko, real ranks."""

import json
import re
import signal
import time
import uuid
from pathlib import Path

import yaml

from flagperf.results.monitors import read_monitor_file

from .conftest import only_run_dir, processes_matching, run_cli, start_cli, wait_for, write_conf


def _cluster(bed, tmp_path, **kw):
    return bed.write_cluster_yaml(tmp_path / "cluster.yaml", **kw)


def test_two_node_run_over_ssh_collects_every_node(tmp_path, ssh_bed):
    _cluster(ssh_bed, tmp_path)
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], timeout=240)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    case = run / "gemm-pytorch-ssh-2x1" / "round1"
    for node_rank, rank in ((0, 0), (1, 1)):
        address = ssh_bed.addresses[node_rank]
        node = case / f"{address}_noderank{node_rank}"
        assert (node / f"rank{rank}.out.log").is_file(), sorted(p.name for p in node.iterdir())
        ranks = json.loads((node / "ranks.json").read_text())["ranks"]
        assert [(r["rank"], r["exit_code"]) for r in ranks] == [(rank, 0)]
        for sensor in ("cpu", "mem"):
            assert read_monitor_file(node / f"{sensor}_monitor.log", strict=True)
        # The host wrote under its own FLAGPERF_PATH/result; the driver holds a copy.
        remote = Path(ssh_bed.hosts[node_rank]["flagperf_path"]) / "result" / run.name / case.relative_to(run) / \
            node.name
        assert (remote / f"rank{rank}.out.log").read_bytes() == (node / f"rank{rank}.out.log").read_bytes()
        # The tree was deployed to the host.
        assert (Path(ssh_bed.hosts[node_rank]["flagperf_path"]) / "launcher" / "node_launcher.py").is_file()
    env0 = json.loads((case / f"{ssh_bed.addresses[0]}_noderank0" / "launch.json").read_text())["env"]
    assert env0["MASTER_ADDR"] == ssh_bed.addresses[0] and env0["WORLD_SIZE"] == "2"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "passed" and summary["hosts"] == ssh_bed.addresses
    runlog = (run / "flagperf_run.log").read_text()
    assert "deploy:" in runlog and "collected" in runlog

    # collect after deleting part of the local copy: the missing files come back, then nothing more.
    gone = case / f"{ssh_bed.addresses[1]}_noderank1"
    kept = (gone / "rank1.out.log").read_bytes()
    import shutil
    shutil.rmtree(gone)
    (case / f"{ssh_bed.addresses[0]}_noderank0" / "cpu_monitor.log").unlink()
    code, out, err = run_cli(["collect", run])
    assert code == 0, out + err
    assert (gone / "rank1.out.log").read_bytes() == kept
    assert (case / f"{ssh_bed.addresses[0]}_noderank0" / "cpu_monitor.log").is_file()
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 5}
    assert re.search(r"│ 1 +│", rows[ssh_bed.addresses[0]]), out      # one file for host 0
    code, out, err = run_cli(["collect", run])
    assert code == 0 and all(re.search(r"│ 0 +│ 0 +│", rows_line) for rows_line in
                             [line for line in out.splitlines() if line.count("│") >= 5][1:]), out


def test_check_names_each_broken_host(tmp_path, ssh_bed_factory):
    bed = ssh_bed_factory(5)
    # host 1 refuses, host 2 changed its key, host 3 rejects our key, host 4 is missing from KNOWN_HOSTS.
    wrong_key = bed.wrong_client_key(tmp_path / "wrong_key")
    known = bed.unknown_known_hosts(tmp_path / "known_hosts", 4)
    _cluster(bed, tmp_path, extra={"KNOWN_HOSTS": str(known)}, per_host={3: {"SSH_KEY": str(wrong_key)}})
    bed.stop_host(1)
    bed.rotate_host_key(2)
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:5:1:1": "null"}, CLUSTER="cluster.yaml")
    run_cli(["deploy", "--config", conf])                    # so that host 0 is complete
    code, out, err = run_cli(["check", "--config", conf])
    assert code == 3, out + err
    outcome = {m.group(1): m.group(2) for m in re.finditer(r"│ (127\.0\.0\.\d+) +│ (\w+) ", out)}
    assert outcome == {bed.addresses[0]: "ok", bed.addresses[1]: "connection_refused",
                       bed.addresses[2]: "changed_host_key", bed.addresses[3]: "auth_failed",
                       bed.addresses[4]: "unknown_host_key"}, out
    assert "Traceback" not in out + err

    # run refuses before touching any host.
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 3, out + err
    assert not list((tmp_path / "result").glob("run*/*/round1"))

    # --accept-new-host-keys records the unknown key, never the changed one.
    before = known.read_text()
    code, out, err = run_cli(["check", "--config", conf, "--accept-new-host-keys"])
    outcome = {m.group(1): m.group(2) for m in re.finditer(r"│ (127\.0\.0\.\d+) +│ (\w+) ", out)}
    assert outcome[bed.addresses[4]] == "deploy_path_missing", out     # reached: key accepted
    assert outcome[bed.addresses[2]] == "changed_host_key", out
    added = known.read_text()[len(before):]
    assert added.count("\n") == 1 and f"[{bed.addresses[4]}]:{bed.port}" in added


def test_failure_on_one_node_stops_every_node(tmp_path, ssh_bed, flagperf_home):
    _cluster(ssh_bed, tmp_path)
    override = flagperf_home / "vendors" / "cpu" / "sleeper"
    override.mkdir()
    (override / "config_fail.yaml").write_text("fail_rank: 1\nfail_code: 5\nsleep_s: 120\n")
    conf = write_conf(tmp_path, {"sleeper:pytorch:fail:2:1:1": "null"}, CLUSTER="cluster.yaml")
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=120)
    assert code == 1, out + err
    assert time.monotonic() - t0 < 90           # rank 0 would sleep 120 s
    assert "rank 1" in out and "exit code 5" in out
    run = only_run_dir(tmp_path / "result")
    node0 = next(run.glob(f"*/round1/{ssh_bed.addresses[0]}_noderank0"))
    ranks = json.loads((node0 / "ranks.json").read_text())
    assert ranks["signalled"] and ranks["ranks"][0]["exit_code"] == -signal.SIGTERM
    assert processes_matching("sleeper/main.py") == []


def test_odd_paths_and_data_arrive_intact_and_are_never_executed(tmp_path, ssh_bed, flagperf_home):
    marker = f"PWNED_{uuid.uuid4().hex[:8]}"
    odd = f"odd dir 'q' \"dq\" $(touch {marker}) `touch {marker}` ; touch {marker}"
    fp = Path(ssh_bed.hosts[0]["dir"]) / odd / "flagperf"
    data = tmp_path / f"data {odd}"
    data.mkdir()
    _cluster(ssh_bed, tmp_path, per_host={0: {"FLAGPERF_PATH": str(fp)}})
    conf = write_conf(tmp_path, {"sleeper:pytorch:odd:2:1:1": json.dumps(str(data))}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=180)
    assert code == 0, out + err
    assert (fp / "launcher" / "node_launcher.py").is_file()
    run = only_run_dir(tmp_path / "result")
    log = next(run.glob(f"*/round1/{ssh_bed.addresses[0]}_noderank0/rank0.out.log")).read_text()
    assert f"rank 0 data_dir {json.dumps(str(data))} exists=True" in log
    assert (fp / "result" / run.name).is_dir()
    for where in (Path.cwd(), tmp_path, Path(ssh_bed.hosts[0]["dir"]), Path(ssh_bed.root), Path("/root"),
                  Path("/tmp"), flagperf_home):
        assert not list(where.glob(f"**/{marker}" if where not in (Path("/root"), Path("/tmp")) else marker)), where


def test_two_runs_on_one_host_keep_their_own_monitors(tmp_path, ssh_bed, flagperf_home):
    (flagperf_home / "vendors" / "cpu" / "sleeper").mkdir()
    (flagperf_home / "vendors" / "cpu" / "sleeper" / "config_long.yaml").write_text("sleep_s: 8\n")
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    _cluster(ssh_bed, a_dir, master_port=29561)
    _cluster(ssh_bed, b_dir, master_port=29562)
    conf_a = write_conf(a_dir, {"sleeper:pytorch:long:1:1:1": "null"}, CLUSTER="cluster.yaml")
    conf_b = write_conf(b_dir, {"sleeper:pytorch:short:1:1:1": "null"}, CLUSTER="cluster.yaml")
    proc_a = start_cli(["run", "--config", conf_a], home=flagperf_home)
    wait_for(lambda: list((a_dir / "result").glob("run*/*/round1")), 60, "run A to start its round")
    time.sleep(1.0)
    code, out, err = run_cli(["run", "--config", conf_b], home=flagperf_home)
    assert code == 0, out + err
    out_a, err_a = proc_a.communicate(timeout=120)
    assert proc_a.returncode == 0, out_a + err_a
    run_a = only_run_dir(a_dir / "result")
    node = next(run_a.glob("*/round1/*_noderank0"))
    samples = read_monitor_file(node / "cpu_monitor.log", strict=True)
    span = (samples[-1][0] - samples[0][0]).total_seconds()
    assert span >= 6.5, f"run A's monitor stopped early ({span:.1f} s of samples)"
    status = json.loads((node / "monitor_status.json").read_text())
    assert status["run_id"] == run_a.name


def test_remote_command_timeout_kills_it_on_the_host(tmp_path, ssh_bed):
    from flagperf.config import load_config
    from flagperf.errors import ConfigError  # noqa: F401
    from flagperf.hosts import HostError, open_transport
    _cluster(ssh_bed, tmp_path)
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:1:1:1": "null"}, CLUSTER="cluster.yaml")
    cfg = load_config(conf)
    tr = open_transport(cfg.cluster.hosts[0], cfg.cluster)
    tag = uuid.uuid4().hex[:8]
    try:
        t0 = time.monotonic()
        try:
            tr.run(["sh", "-c", f"sleep 60 # {tag}"], timeout=1.0)
            raise AssertionError("no timeout")
        except HostError as exc:
            assert exc.kind == "timeout" and "killed on the host" in str(exc)
        assert time.monotonic() - t0 < 30       # the 1 s timeout, not the command's 60 s
        wait_for(lambda: not processes_matching(tag), 10, "the remote command to be gone")
        r = tr.run(["printf", "%s|", "a b", "'q'", "$(x)", ";"])
        assert r.stdout == "a b|'q'|$(x)|;|"
    finally:
        tr.close()
    yaml.safe_load(conf.read_text())


def test_deploy_sends_only_what_differs(tmp_path, ssh_bed, flagperf_home):
    _cluster(ssh_bed, tmp_path)
    conf = write_conf(tmp_path, {"sleeper:pytorch:x:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    total = int(re.search(r"deploy \((\d+) files\)", out).group(1))
    assert out.count(f"{total} of {total} file(s) sent") == 2, out
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert out.count(f"0 of {total} file(s) sent, 0 bytes") == 2, out
    main_py = flagperf_home / "benchmarks" / "sleeper" / "main.py"
    main_py.write_text(main_py.read_text() + "\n# edited\n")
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert code == 0 and out.count(f"1 of {total} file(s) sent") == 2, out
    remote = Path(ssh_bed.hosts[1]["flagperf_path"]) / "benchmarks" / "sleeper" / "main.py"
    assert remote.read_text().endswith("# edited\n")


def test_collect_names_the_host_that_cannot_deliver(tmp_path, ssh_bed):
    import shutil
    _cluster(ssh_bed, tmp_path)
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], timeout=240)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    for node in run.glob("*/round1/*_noderank*"):
        shutil.rmtree(node)
    ssh_bed.stop_host(1)
    code, out, err = run_cli(["collect", "--config", conf])          # default: the latest run
    assert code == 3, out + err
    assert next(run.glob(f"*/round1/{ssh_bed.addresses[0]}_noderank0/rank0.out.log")).is_file()
    assert not list(run.glob(f"*/round1/{ssh_bed.addresses[1]}_noderank1"))
    assert re.search(rf"{re.escape(ssh_bed.addresses[1])}.*connection_refused", out), out


def test_ssh_config_supplies_hostname_port_user_and_key(tmp_path, ssh_bed):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host node-a\n  HostName {ssh_bed.addresses[0]}\n  Port {ssh_bed.port}\n  User {ssh_bed.user}\n"
        f"  IdentityFile {ssh_bed.client_key}\n")
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [node-a]\nKNOWN_HOSTS: {ssh_bed.known_hosts}\n"
                                           f"PYTHON: {ssh_bed.hosts and __import__('sys').executable}\n"
                                           f"MASTER_PORT: 29571\n")
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:1:1:1": "null"}, CLUSTER="cluster.yaml")
    env = {"HOME": str(home), "SSH_AUTH_SOCK": ""}
    import os
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "flagperf", "run", "--config", str(conf)], capture_output=True,
                       text=True, env={**os.environ, **env}, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    run = only_run_dir(tmp_path / "result")
    spec = json.loads(next(run.glob("*/round1/node-a_noderank0/launch.json")).read_text())
    assert spec["env"]["MASTER_ADDR"] == ssh_bed.addresses[0]        # HostName, not the alias


def test_deploy_failure_is_named_as_such_and_no_case_runs(tmp_path, ssh_bed):
    """A host whose FLAGPERF_PATH cannot be written fails as deploy_failed with the host's own error (not as
    deploy_path_missing with "run flagperf deploy"); every case is listed as not_run, never as interrupted."""
    _cluster(ssh_bed, tmp_path, per_host={1: {"FLAGPERF_PATH": "/proc/flagperf-cannot-write-here"}})
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], timeout=120)
    assert code == 3, out + err
    assert f"host {ssh_bed.addresses[1]}: deploy_failed" in out, out
    assert "deploy_path_missing" not in out and "Traceback" not in out + err
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert [h["outcome"] for h in summary["host_checks"]] == ["deploy_failed"]
    assert [c["status"] for c in summary["cases"]] == ["not_run"]
    assert "failed their check" in summary["cases"][0]["rounds"][0]["failure"]["reason"]


def test_frozen_host_fails_the_case_naming_it_within_the_heartbeat_bound(tmp_path, ssh_bed, flagperf_home,
                                                                        record_property):
    """Host 1's sshd and every process of it are stopped (SIGSTOP) mid-round: the case fails naming that host
    within the heartbeat bound (30 s), not at CASE_TIMEOUT, and the run goes on to the next case."""
    import os
    _cluster(ssh_bed, tmp_path)
    override = flagperf_home / "vendors" / "cpu" / "sleeper"
    override.mkdir()
    (override / "config_long.yaml").write_text("sleep_s: 300\n")
    conf = write_conf(tmp_path, {"sleeper:pytorch:long:2:1:1": "null", "gemm:pytorch:after:1:1:1": "null"},
                      CLUSTER="cluster.yaml", CASE_TIMEOUT=600)
    proc = start_cli(["run", "--config", conf], home=flagperf_home)
    frozen = []
    try:
        host1 = Path(ssh_bed.hosts[1]["flagperf_path"]) / "result"
        wait_for(lambda: list(host1.glob("run*/*/round1/*_noderank1/rank1.out.log")), 120, "the ranks to start")
        time.sleep(2.0)
        frozen = ssh_bed.pids(1)
        t0 = time.monotonic()
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        out, err = proc.communicate(timeout=240)
        took = time.monotonic() - t0
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out + err
    assert f"host {ssh_bed.addresses[1]} lost" in out, out
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    first, after = summary["cases"]
    assert first["status"] == "failed"
    assert f"host {ssh_bed.addresses[1]} stopped answering" in first["rounds"][0]["failure"]["reason"]
    assert after["status"] == "passed"          # node 0 only: the run went on
    # the failure came from the heartbeat (interval 5 s + timeout 25 s), plus stopping node 0 (its ranks get
    # SIGTERM, then SIGKILL after 10 s) and the next case; far below CASE_TIMEOUT. bench/bounds.py prints it.
    record_property("seconds", took)
    assert took < 180, took
    assert "Traceback" not in out + err


def test_ctrl_c_to_the_process_group_during_a_large_collect(tmp_path, ssh_bed, flagperf_home, record_property):
    """Ctrl-C from a terminal reaches the driver's whole process group while a large node directory is being
    collected: the driver stops within 10 s (exit 130), the round is `interrupted` (never a false FAILED), what
    was fetched is kept, the rest stays on the host, and summary.json and report.md are complete."""
    import os
    _cluster(ssh_bed, tmp_path)
    override = flagperf_home / "vendors" / "cpu" / "sleeper"
    override.mkdir()
    (override / "config_big.yaml").write_text("sleep_s: 0.5\nballast_mb: 40000\n")     # sparse on the host
    conf = write_conf(tmp_path, {"sleeper:pytorch:big:2:1:1": "null", "sleeper:pytorch:next:1:1:1": "null"},
                      CLUSTER="cluster.yaml", COLLECT_MAX_BYTES=100 * 1024 ** 3)
    proc = start_cli(["run", "--config", conf], home=flagperf_home, start_new_session=True)
    try:
        result = tmp_path / "result"
        node0 = f"{ssh_bed.addresses[0]}_noderank0"
        wait_for(lambda: [p for p in result.glob(f"run*/*/round1/{node0}/ballast0.bin") if p.stat().st_size > 0],
                 120, "collect to start writing the ballast")
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)            # what a terminal's Ctrl-C does
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    record_property("seconds", took)                  # bench/bounds.py prints it beside the documented 10 s
    assert proc.returncode == 130, out + err
    assert took < 3 * 10, took                        # the documented 10 s, with slack for a loaded machine
    assert "Traceback" not in out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    first, second = summary["cases"]
    rnd = first["rounds"][0]
    assert rnd["status"] == "interrupted", rnd
    assert "interrupted during collect" in rnd["failure"]["reason"] and "flagperf collect" in rnd["failure"]["reason"]
    assert second["rounds"][0]["status"] == "not_run"
    assert "interrupted" in (run / "report.md").read_text()
    assert not list(run.glob("*.tmp")) and not list(run.glob("summary.json.*"))
    # the logs are kept here, and the whole node directory is still on the host
    assert list(run.glob(f"*/round1/{node0}/rank0.out.log")) or \
        list((Path(ssh_bed.hosts[0]["flagperf_path"]) / "result").glob(f"{run.name}/*/round1/*/rank0.out.log"))
    for i in (0, 1):
        on_host = Path(ssh_bed.hosts[i]["flagperf_path"]) / "result" / run.name
        assert list(on_host.glob(f"*/round1/*_noderank{i}/ballast{i}.bin")), f"host {i} lost its files"
    assert processes_matching("sleeper/main.py") == []


def test_sigint_while_connecting_to_a_host_that_never_answers(tmp_path, ssh_bed, record_property):
    """A host whose port accepts the connection but never sends the SSH banner (a hung sshd): SIGINT during the
    connect exits 130 within 10 s and is not reported as a host failure."""
    import os
    import socket
    silent = socket.socket()
    silent.bind((ssh_bed.addresses[1], 0))
    silent.listen(8)          # the kernel completes the handshake; nobody ever speaks
    try:
        _cluster(ssh_bed, tmp_path, per_host={1: {"SSH_PORT": silent.getsockname()[1]}})
        conf = write_conf(tmp_path, {"gemm:pytorch:x:2:1:1": "null"}, CLUSTER="cluster.yaml")
        proc = start_cli(["run", "--config", conf], start_new_session=True)
        try:
            wait_for(lambda: list((tmp_path / "result").glob("run*/flagperf_run.log")), 30, "the run to start")
            time.sleep(1.5)
            t0 = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    finally:
        silent.close()
    record_property("seconds", took)            # bench/bounds.py prints it beside the documented 10 s
    assert proc.returncode == 130, out + err
    assert took < 3 * 10, took                  # the documented 10 s, with slack for a loaded machine
    assert "Traceback" not in out + err
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["host_checks"] == []


def test_llm_trains_across_two_ssh_hosts(tmp_path, ssh_bed, flagperf_home):
    """The llm benchmark over 2 real sshd hosts, one rank each: FSDP2 over gloo across nodes, one FINISHED."""
    _cluster(ssh_bed, tmp_path)
    override = flagperf_home / "vendors" / "cpu" / "llm"
    override.mkdir(exist_ok=True)
    (override / "config_x.yaml").write_text("time_budget_s: 4\n")
    conf = write_conf(tmp_path, {"llm:pytorch:x:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=300)
    assert code == 0, out + err
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    rnd = summary["cases"][0]["rounds"][0]
    assert rnd["status"] == "passed", rnd
    details = rnd["checks"]["details"]
    assert details["parallel"] == "fsdp" and details["converged"] is True
    assert rnd["env"]["world_size"] == 2 and [n["node_rank"] for n in rnd["nodes"]] == [0, 1]
