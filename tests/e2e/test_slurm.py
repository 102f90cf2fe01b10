"""SCHEDULER slurm end to end: a real Slurm cluster on this machine (munged, slurmctld and two slurmd started by
testbed/slurmbed.py), the real CLI, real sbatch jobs and srun steps, real node launchers and torch ranks.

Every test uses MASTER_PORT from 30400-30499; the daemons listen on 30510 (slurmctld) and 30521-30522 (slurmd).
"""

import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import materialize, only_run_dir, processes_matching, run_cli, start_cli, wait_for, write_conf


@pytest.fixture(scope="session")
def slurm_bed(tmp_path_factory):
    """A Slurm cluster of two nodes (fpnode1, fpnode2) for the whole session; stopped at the end, and then no
    daemon nor job step of it may be left in the process table."""
    from testbed import slurmbed
    from testbed.realparts import unavailable
    root = tmp_path_factory.mktemp("slurmbed")
    bed = slurmbed.SlurmBed(root)
    try:
        bed.start()
    except slurmbed.SlurmBedError as exc:
        unavailable(f"Slurm test bed unavailable: {exc}")
    yield bed
    bed.stop()
    left = processes_matching(str(bed.root)) + processes_matching("slurmstepd") + processes_matching("slurmd -D")
    assert left == [], f"processes of the Slurm bed left running: {left}"
    assert slurmbed.HOSTS_MARK not in Path(slurmbed.HOSTS_FILE).read_text()


@pytest.fixture
def bed(slurm_bed):
    """The session's bed, with no job in its queue before the test and none left after it."""
    slurm_bed.cancel_all()
    yield slurm_bed
    left = slurm_bed.active_jobs()
    slurm_bed.cancel_all()
    assert left == [], f"jobs left in the queue: {left}"


def _override(home, model, hw, text):
    folder = home / "vendors" / "cpu" / model
    folder.mkdir(exist_ok=True)
    (folder / f"config_{hw}.yaml").write_text(text)


def _conf(tmp_path, bed, cases, port, cluster_keys=None, **test_keys):
    bed.write_cluster_yaml(tmp_path / "cluster.yaml", MASTER_PORT=port, **(cluster_keys or {}))
    return write_conf(tmp_path, cases, CLUSTER="cluster.yaml", **test_keys)


def _summary(tmp_path):
    run = only_run_dir(tmp_path / "result")
    return run, json.loads((run / "summary.json").read_text())


def _table(out):
    """{first column: (outcome, detail, remedy)} of a rich table, wrapped cells joined."""
    rows: dict = {}
    last = None
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if len(cells) != 4:
            continue
        if cells[0]:
            last = cells[0]
            rows[last] = cells[1:]
        elif last is not None:
            rows[last] = [f"{a} {b}".strip() for a, b in zip(rows[last], cells[1:])]
    return {k: tuple(v) for k, v in rows.items()}


def _no_strays(tmp_path):
    """Nothing of this test runs any more: every process of it has its tmp_path (FLAGPERF_HOME, the run
    directory) on its command line (wrapper, node launcher, ranks, monitor)."""
    left = processes_matching(str(tmp_path))
    assert left == [], f"left running: {[Path(f'/proc/{p}/cmdline').read_bytes()[:200] for p in left]}"


def test_two_nodes_two_ranks_gloo_collectives(tmp_path, bed, flagperf_home):
    _override(flagperf_home, "collectives", "slurm", 'ops: [all_reduce, broadcast]\nsizes: ["64K"]\n'
                                                      'time_budget_s: 0.4\n')
    conf = _conf(tmp_path, bed, {"collectives:pytorch:slurm:2:2:1": "null"}, 30401)
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=240)
    assert code == 0, out + err
    run, summary = _summary(tmp_path)
    assert summary["backend"] == "slurm" and summary["status"] == "passed"
    assert summary["hosts"] == ["fpnode1", "fpnode2"]
    (case,) = summary["cases"]
    (rnd,) = case["rounds"]
    assert [n["node"] for n in rnd["nodes"]] == ["fpnode1_noderank0", "fpnode2_noderank1"]
    assert rnd["finished"]["metric"] == "busbw_all_reduce" and rnd["finished"]["value"] > 0
    round_dir = run / case["name"] / "round1"
    for node, ranks in (("fpnode1_noderank0", (0, 1)), ("fpnode2_noderank1", (2, 3))):
        d = round_dir / node
        report = json.loads((d / "ranks.json").read_text())
        assert [(r["rank"], r["exit_code"]) for r in report["ranks"]] == [(r, 0) for r in ranks]
        for r in ranks:
            assert "[PerfLog]" in (d / f"rank{r}.out.log").read_text()
        launch = json.loads((d / "launch.json").read_text())
        assert launch["env"]["MASTER_ADDR"] == "fpnode1" and launch["env"]["MASTER_PORT"] == "30401"
        assert launch["out_dir"] == str(d)
        assert (d / "cpu_monitor.log").stat().st_size > 0 and (d / "monitor_status.json").is_file()
        assert json.loads((d / "slurm_exit.json").read_text())["exit_code"] == 0
    # one job: its batch script, specs and output beside the node directories, and nowhere else
    script = (round_dir / "slurm" / "job.sh").read_text()
    assert "--job-name=flagperf-launcher" in script and "--overlap" in script
    # (detail_result.json: FlagPerf's per-round statistics, written by the driver from the node directories)
    assert sorted(p.name for p in round_dir.iterdir()) == ["detail_result.json", "fpnode1_noderank0",
                                                           "fpnode2_noderank1", "slurm"]
    log = (run / "flagperf_run.log").read_text()
    assert re.search(r"slurm: \$ sbatch --parsable .*--nodes=2 --ntasks-per-node=1 .*--partition=fpq --exclusive",
                     log), log
    assert re.search(r"slurm: job \d+ runs on fpnode1, fpnode2", log)
    assert not list(flagperf_home.glob("result"))       # shared results: nothing under FLAGPERF_PATH
    _no_strays(tmp_path)


def test_a_failing_rank_is_recorded_and_the_next_case_runs(tmp_path, bed, flagperf_home):
    _override(flagperf_home, "sleeper", "fail", "fail_rank: 3\nfail_code: 5\nfail_after_s: 1\nsleep_s: 120\n")
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:fail:2:2:1": "null", "sleeper:pytorch:next:1:1:1": "null"},
                 30405)
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=180)
    took = time.monotonic() - t0
    assert code == 1, out + err
    assert took < 100, took                     # not the 120 s the other ranks would sleep
    run, summary = _summary(tmp_path)
    first, second = summary["cases"]
    rnd = first["rounds"][0]
    assert first["status"] == "failed" and rnd["failure"]["rank"] == 3 and rnd["failure"]["exit_code"] == 5
    assert rnd["failure"]["node"] == "fpnode2_noderank1", rnd["failure"]
    assert "rank 3 failed (exit code 5)" in out
    d = run / first["name"] / "round1"
    failed = json.loads((d / "fpnode2_noderank1" / "ranks.json").read_text())
    assert failed["first_failure"] == 3
    assert {r["rank"]: r["exit_code"] for r in failed["ranks"]}[3] == 5     # the rank's own code, not srun's
    stopped = json.loads((d / "fpnode1_noderank0" / "ranks.json").read_text())
    assert stopped["first_failure"] is None and stopped["signalled"]
    assert [(r["exit_code"], r["stopped_by_launcher"]) for r in stopped["ranks"]] == [(-signal.SIGTERM, True)] * 2
    assert second["status"] == "passed" and second["rounds"][0]["nodes"][0]["node"].endswith("_noderank0")
    _no_strays(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_cancels_the_job(tmp_path, bed, flagperf_home, sig, record_property):
    _override(flagperf_home, "sleeper", "long", "sleep_s: 120\n")
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:long:2:2:1": "null"}, 30410 + int(sig))
    proc = start_cli(["run", "--config", conf], home=flagperf_home, start_new_session=True)
    try:
        # every node's ranks have started (a node launcher signalled before it started its ranks has none to record)
        wait_for(lambda: all(list((tmp_path / "result").glob(f"run*/*/round1/{n}/{r}.out.log"))
                             for n, r in (("fpnode1_noderank0", "rank1"), ("fpnode2_noderank1", "rank3"))), 60,
                 "the ranks of both nodes to start")
        assert bed.active_jobs(), "no job while the ranks run"
        t0 = time.monotonic()
        os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    record_property("seconds", took)            # bench/bounds.py prints it beside the documented 10 s
    assert proc.returncode == 130, out + err
    assert took < 3 * 10, took                  # the documented 10 s, with slack for a loaded machine
    assert "Traceback" not in out + err
    assert bed.active_jobs() == []
    run, summary = _summary(tmp_path)
    rnd = summary["cases"][0]["rounds"][0]
    assert summary["status"] == "interrupted" and rnd["status"] == "interrupted"
    ranks = json.loads((run / summary["cases"][0]["name"] / "round1" / "fpnode1_noderank0" / "ranks.json")
                       .read_text())
    assert ranks["signalled"] and all(r["exit_code"] is not None for r in ranks["ranks"])
    _no_strays(tmp_path)


def test_a_pending_job_times_out_with_its_reason_and_the_next_case_runs(tmp_path, bed, flagperf_home):
    # another user's job holds fpnode1 whole: a 2-node job waits (Resources), a 1-node job gets fpnode2
    blocker = bed.run(["sbatch", "--parsable", "-N1", "-w", "fpnode1", "--exclusive", "--time=5", "-o", "/dev/null",
                       "--wrap", "sleep 300"]).stdout.strip()
    wait_for(lambda: bed.run(["squeue", "-h", "-j", blocker, "-o", "%T"]).stdout.strip() == "RUNNING", 20,
             "the blocking job to run")
    try:
        conf = _conf(tmp_path, bed, {"sleeper:pytorch:x:2:1:2": "null", "sleeper:pytorch:y:1:1:1": "null"}, 30420,
                     {"SLURM_PENDING_TIMEOUT": 3})
        t0 = time.monotonic()
        code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=120)
        took = time.monotonic() - t0
        assert bed.active_jobs() == [int(blocker)]      # ours were cancelled
    finally:
        bed.cancel_all()
    assert code == 1, out + err
    assert took < 90, took                      # not the blocking job's 300 s
    run, summary = _summary(tmp_path)
    first, second = summary["cases"]
    r1, r2 = first["rounds"]
    assert first["status"] == "failed" and r1["status"] == "error"
    assert re.fullmatch(r"Slurm job \d+ was still pending after SLURM_PENDING_TIMEOUT 3 s \(squeue reason: "
                        r"Resources\); cancelled", r1["failure"]["reason"]), r1["failure"]
    assert r2["status"] == "error" and r2["failure"]["reason"].startswith("not submitted: an earlier round")
    assert second["status"] == "passed"
    assert [n["node"] for n in second["rounds"][0]["nodes"]] == ["fpnode2_noderank0"]


def test_a_job_killed_by_its_time_limit_fails_with_that_reason(tmp_path, bed, flagperf_home):
    _override(flagperf_home, "sleeper", "forever", "sleep_s: 600\n")
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:forever:2:1:1": "null"}, 30430, {"SLURM_TIME": 1})
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=300)
    took = time.monotonic() - t0
    assert code == 1, out + err
    assert 55 < took < 200, took                # Slurm's limit is whole minutes, checked every 30 s or so
    run, summary = _summary(tmp_path)
    rnd = summary["cases"][0]["rounds"][0]
    assert rnd["status"] == "timeout", rnd
    assert re.fullmatch(r"Slurm job \d+ reached its time limit \(JobState \w+, reason TimeLimit\)",
                        rnd["failure"]["reason"]), rnd["failure"]
    comp = (bed.root / "jobcomp.txt").read_text()
    assert "JobState=TIMEOUT" in comp and "TimeLimit=1 " in comp
    assert "--time=1 " in (run / "flagperf_run.log").read_text()
    _no_strays(tmp_path)


def test_each_runs_one_pinned_job_per_node_and_ranks_them(tmp_path, bed, flagperf_home):
    _override(flagperf_home, "sleeper", "each", 'sleep_s: 0.3\nslow_hosts: {"fpnode2": 4}\n')
    tree = tmp_path / "shared" / "flagperf"         # FLAGPERF_PATH: synced there from the driver's tree
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:each:each:2:1": "null"}, 30440, FLAGPERF_PATH=tree)
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=180)
    assert code in (0, 1), out + err            # with two hosts the outlier rule has too little to go on
    run, summary = _summary(tmp_path)
    (case,) = summary["cases"]
    assert case["each"] is True and case["nnodes"] == 2 and case["status"] == "passed"
    (rnd,) = case["rounds"]
    assert [n["node"] for n in rnd["nodes"]] == ["fpnode1_noderank0", "fpnode2_noderank0"]
    for i, node in enumerate(("fpnode1", "fpnode2")):
        launch = json.loads((run / case["name"] / "round1" / f"{node}_noderank0" / "launch.json").read_text())
        assert (launch["env"]["MASTER_ADDR"], launch["env"]["MASTER_PORT"], launch["env"]["WORLD_SIZE"]) == \
            (node, str(30440 + i), "2")
        assert launch["cwd"] == str(tree / "benchmarks" / "sleeper")
    assert (tree / ".flagperf-tree").is_file() and (tree / "launcher" / "slurm_node.py").is_file()
    assert (tree / "vendors" / "cpu" / "sleeper" / "config_each.yaml").read_text().startswith("sleep_s: 0.3")
    log = (run / "flagperf_run.log").read_text()
    assert len(re.findall(r"slurm: \$ sbatch .*--nodes=1 .*--chdir=" + re.escape(str(tree)) +
                          r" .*--nodelist=fpnode[12] ", log)) == 2, log
    (ranking,) = summary["rankings"]
    assert [e["host"] for e in ranking["entries"] if e["gpu"] is None] == ["fpnode1", "fpnode2"]
    assert "hosts ranked by slept_s" in out


def test_node_local_results_are_copied_back_by_a_step(tmp_path, bed, flagperf_home):
    _override(flagperf_home, "sleeper", "local", "sleep_s: 0.5\n")
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:local:2:1:1": "null"}, 30450, {"SLURM_SHARED_FS": False})
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=180)
    assert code == 0, out + err
    run, summary = _summary(tmp_path)
    name = summary["cases"][0]["name"]
    for i, node in enumerate(("fpnode1_noderank0", "fpnode2_noderank1")):
        here = run / name / "round1" / node
        there = flagperf_home / "result" / run.name / name / "round1" / node
        assert (there / f"rank{i}.out.log").read_bytes() == (here / f"rank{i}.out.log").read_bytes()
        assert json.loads((here / "ranks.json").read_text())["ranks"][0]["exit_code"] == 0
    log = (run / "flagperf_run.log").read_text()
    assert "--job-name=flagperf-collect" in log and re.search(r"collected \d+ file\(s\)", log)
    assert "sbcast --force" in (run / name / "round1" / "slurm" / "job.sh").read_text()


def test_check_reports_partition_nodes_gpus_account_and_qos(tmp_path, bed, flagperf_home):
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:x:2:1:1": "null"}, 30460)
    code, out, err = run_cli(["check", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    rows = _table(out)
    assert list(rows) == ["partition", "nodes", "gpus", "account", "qos"], out
    assert all(outcome == "ok" for outcome, _, _ in rows.values()), out
    assert rows["partition"][1].startswith("fpq: State=UP, 2 node(s) fpnode[1-2]"), rows
    assert rows["nodes"][1].startswith("2 of 2 node(s) usable (2 idle"), rows
    assert rows["gpus"][1] == "VENDOR cpu needs no GPU; gres per node: gpu:2", rows
    assert rows["account"][1] == "SLURM_ACCOUNT not set: jobs use the default account"

    # an account the partition denies, a QOS with it, more GPUs than the nodes have: one line each, exit 3
    (tmp_path / "bad.yaml").write_text(
        f"SCHEDULER: slurm\nSLURM_CONF: {bed.conf}\nSLURM_PARTITION: fpacct\nSLURM_ACCOUNT: fpdenied\n"
        f"SLURM_QOS: normal\nSLURM_GPUS_PER_NODE: 4\nMASTER_PORT: 30461\n")
    code, out, err = run_cli(["check", "--config", conf, "--cluster", tmp_path / "bad.yaml"], home=flagperf_home)
    assert code == 3, out + err
    rows = _table(out)
    assert rows["partition"][0] == "ok" and rows["nodes"][0] == "ok", rows
    outcome, detail, remedy = rows["account"]
    assert outcome == "account_refused", rows
    assert detail.startswith("account fpdenied on partition fpacct: sbatch refused a test job: ") and \
        "Requested partition configuration not available" in detail, detail
    assert "sacctmgr show assoc" in remedy
    assert rows["qos"][0] == "qos_refused" and rows["qos"][1].startswith("qos normal (with SLURM_ACCOUNT fpdenied)")
    assert rows["gpus"][:2] == ("too_few_accelerators", "2 GPU(s) per node (gres: gpu:2); the cases need 4"), rows
    assert bed.active_jobs() == []          # the held test jobs of an accepted account are cancelled at once

    # a DOWN partition; a partition that does not exist
    for partition, name, outcome in (("fpdown", "partition", "partition_down"), ("nosuch", "slurm",
                                                                                 "partition_missing")):
        (tmp_path / "p.yaml").write_text(f"SCHEDULER: slurm\nSLURM_CONF: {bed.conf}\nSLURM_PARTITION: {partition}\n"
                                         f"MASTER_PORT: 30462\n")
        code, out, err = run_cli(["check", "--config", conf, "--cluster", tmp_path / "p.yaml"], home=flagperf_home)
        assert code == 3 and _table(out)[name][0] == outcome, out
    assert "Partition nosuch not found" in _table(out)["slurm"][1]
    # a controller that does not answer (nothing listens on its port): slurm_unavailable, within the deadline
    dead = tmp_path / "dead.conf"
    dead.write_text(bed.conf.read_text().replace(f"SlurmctldPort={bed.ctld_port}", "SlurmctldPort=30599"))
    (tmp_path / "d.yaml").write_text(f"SCHEDULER: slurm\nSLURM_CONF: {dead}\nMASTER_PORT: 30463\n")
    t0 = time.monotonic()
    code, out, err = run_cli(["check", "--config", conf, "--cluster", tmp_path / "d.yaml"], home=flagperf_home)
    assert code == 3 and _table(out)["slurm"][0] == "slurm_unavailable", out + err
    assert time.monotonic() - t0 < 3 * 30     # a Slurm command's 30 s deadline, with slack for a loaded machine
    # and a run stops before submitting anything
    code, out, err = run_cli(["run", "--config", conf, "--cluster", tmp_path / "p.yaml"], home=flagperf_home)
    assert code == 3, out + err
    assert "partition_missing" in out and bed.active_jobs() == []


def test_dry_run_prints_the_sbatch_line_and_the_batch_script_and_submits_nothing(tmp_path, bed, flagperf_home):
    before = (bed.root / "jobcomp.txt").read_text() if (bed.root / "jobcomp.txt").exists() else ""
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:x:2:2:1": "null"}, 30470)
    code, out, err = run_cli(["run", "--config", conf, "--dry-run"], home=flagperf_home)
    assert code == 0, out + err
    assert "node 0 on {slurm-node0}" in out and "MASTER_ADDR={slurm-node0}" in out
    assert re.search(r"\$ sbatch --parsable --job-name=flagperf-run\S+-sleeper-pytorch-x-2x2-r1 --nodes=2 "
                     r"--ntasks-per-node=1 --time=\d+ --output=\S+/round1/slurm/job-%j.out", out), out
    assert "| srun --overlap" in out and "slurm_node.py launch" in out and "slurm_node.py monitor" in out
    assert "a task of the round's job" in out
    assert not (tmp_path / "result").exists() or not list((tmp_path / "result").iterdir())
    after = (bed.root / "jobcomp.txt").read_text() if (bed.root / "jobcomp.txt").exists() else ""
    assert after == before and bed.active_jobs() == []


def test_charliecloud_runs_the_node_launcher_and_ranks_in_the_image(tmp_path, bed, flagperf_home):
    from testbed.slurmbed import SlurmBedError, ensure_charliecloud_image
    from testbed.realparts import unavailable
    try:
        image = ensure_charliecloud_image()
    except SlurmBedError as exc:
        unavailable(f"Charliecloud image unavailable: {exc}")
    inside = subprocess.run(["ch-run", str(image), "--", "python3", "-c", "import platform; "
                             "print(platform.python_version())"], capture_output=True, text=True,
                            env=dict(os.environ, USER=os.environ.get("USER") or "root"), check=True).stdout.strip()
    home = materialize(flagperf_home)           # the image sees FLAGPERF_PATH itself, not links out of it
    _override(home, "collectives", "ch", 'ops: [all_reduce]\nsizes: ["64K"]\ntime_budget_s: 0.3\n')
    conf = _conf(tmp_path, bed, {"collectives:pytorch:ch:2:2:1": "null"}, 30480,
                 {"SLURM_CONTAINER_IMAGE": str(image)}, RUNTIME="charliecloud")
    code, out, err = run_cli(["check", "--config", conf], home=home)
    assert code == 0 and _table(out)["container"][0] == "ok", out + err
    code, out, err = run_cli(["run", "--config", conf], home=home, timeout=240)
    assert code == 0, out + err
    run, summary = _summary(tmp_path)
    (rnd,) = summary["cases"][0]["rounds"]
    assert rnd["status"] == "passed" and [n["node"] for n in rnd["nodes"]] == ["fpnode1_noderank0",
                                                                               "fpnode2_noderank1"]
    env = rnd["finished"]["env"]
    assert env["python"] == inside and env["world_size"] == 4 and env["hostname"] == "fpnode1"
    assert platform.python_version() != inside          # so the ranks did not run on this machine's Python
    d = run / summary["cases"][0]["name"] / "round1"
    spec = json.loads((d / "slurm" / "nodes.json").read_text())["nodes"][0]
    assert spec["launcher_argv"][:2] == ["ch-run", "-b"] and spec["launcher_argv"][-4] == "python3"
    assert str(image) in spec["launcher_argv"]
    assert json.loads((d / "fpnode1_noderank0" / "launch.json").read_text())["argv"][0] == "python3"
    _no_strays(tmp_path)


def test_pyxis_puts_the_launcher_step_in_the_image(tmp_path, bed, flagperf_home):
    image = "docker://nvcr.io#nvidia/pytorch:24.05-py3"
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:x:2:1:1": "null"}, 30485,
                 {"SLURM_CONTAINER_IMAGE": image, "SLURM_CONTAINER_MOUNTS": ["/datasets:/data"]}, RUNTIME="pyxis")
    code, out, err = run_cli(["run", "--config", conf, "--dry-run"], home=flagperf_home)
    assert code == 0, out + err
    fp, root = str(flagperf_home), str(tmp_path / "result")
    line = next(x for x in out.splitlines() if "--job-name=flagperf-launcher" in x)
    assert line.split("| ", 1)[1] == (
        f'srun --overlap "--nodes=${{SLURM_JOB_NUM_NODES}}" --ntasks-per-node=1 --job-name=flagperf-launcher '
        f"--kill-on-bad-exit=0 '--container-image={image}' --container-mounts={fp}:{fp},{root}:{root},"
        f"/datasets:/data --container-workdir={fp} python3 {fp}/launcher/slurm_node.py launch "
        f"{root}/" + line.rsplit(f"{root}/", 1)[1]), line
    monitor = next(x for x in out.splitlines() if "--job-name=flagperf-monitor" in x)
    assert "--container" not in monitor                  # the monitor samples the node itself
    # this cluster's srun has no pyxis: check says so, and a run stops before it submits anything
    code, out, err = run_cli(["check", "--config", conf], home=flagperf_home)
    assert code == 3, out + err
    outcome, detail, _ = _table(out)["container"]
    assert outcome == "container_unusable" and "the pyxis plug-in is not loaded" in detail
    # RUNTIME pyxis without an image, docker under Slurm: config errors
    bed.write_cluster_yaml(tmp_path / "cluster.yaml", MASTER_PORT=30486)
    code, out, err = run_cli(["run", "--config", conf, "--dry-run"], home=flagperf_home)
    assert code == 2 and "RUNTIME: pyxis runs the node launcher in a container image: set SLURM_CONTAINER_IMAGE" \
        in err, err


def test_clean_cancels_only_flagperf_jobs(tmp_path, bed, flagperf_home):
    def submit(name):
        return bed.run(["sbatch", "--parsable", "-N1", "--time=5", "-o", "/dev/null", f"--job-name={name}",
                        "--wrap", "sleep 300"]).stdout.strip()
    ours = [submit("flagperf-run20990101000000-aaaaaa-sleeper-pytorch-x-1x1-r1"),
            submit("flagperf-run20990101000001-bbbbbb-gemm-pytorch-x-1x1-r1")]
    other = submit("someone-elses-job")
    try:
        conf = _conf(tmp_path, bed, {"sleeper:pytorch:x:1:1:1": "null"}, 30465)
        code, out, err = run_cli(["clean", "--config", conf, "--run", "run20990101000000-aaaaaa"],
                                 home=flagperf_home)
        assert code == 0 and f"job {ours[0]} flagperf-run20990101000000-aaaaaa" in out, out + err
        wait_for(lambda: int(ours[0]) not in bed.active_jobs(), 15, "the job to be cancelled")
        assert {int(ours[1]), int(other)} <= set(bed.active_jobs())
        code, out, err = run_cli(["clean", "--config", conf], home=flagperf_home)
        assert code == 0 and f"job {ours[1]} " in out and "someone-elses-job" not in out, out + err
        wait_for(lambda: bed.active_jobs() == [int(other)], 15, "only the other job to remain")
    finally:
        bed.cancel_all()


def test_a_node_launcher_step_that_cannot_start_names_the_job_output(tmp_path, bed, flagperf_home):
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:x:2:1:1": "null", "sleeper:pytorch:y:1:1:1": "null"}, 30475,
                 {"PYTHON": str(tmp_path / "no-such-python")})
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=120)
    assert code == 1, out + err
    run, summary = _summary(tmp_path)
    for case in summary["cases"]:
        rnd = case["rounds"][0]
        assert rnd["status"] == "error", rnd
        reason = rnd["failure"]["reason"]
        assert re.search(r"_noderank\d: its node launcher step ended without recording an exit status \(Slurm job "
                         r"\d+: \S+/slurm/job-\d+\.out: .*no-such-python", reason), reason


@pytest.mark.parametrize("shared, backslash", [(True, False), (True, True), (False, True)])
def test_hostile_paths_reach_the_nodes_as_they_are(tmp_path, bed, flagperf_home, shared, backslash):
    """FLAGPERF_PATH, the result folder and PYTHON hold a space, quotes, $, ${SLURM_JOB_ID}, $(...), backticks, %
    (and a backslash): the job runs with them as they are, and nothing in them runs."""
    marks = tmp_path / "marks"
    marks.mkdir()
    odd = f"a b'c\"$d ${{SLURM_JOB_ID}} $(touch {marks}/1) `touch {marks}/2` ;touch {marks}/3 100%j%%u" \
        + ("\\n" if backslash else "")
    tree = tmp_path / f"fp {odd}"
    results = tmp_path / f"result {odd}"
    python = tmp_path / f"py {odd}" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    _override(flagperf_home, "sleeper", "odd", "sleep_s: 0.3\n")
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:odd:2:1:1": "null"}, 30490 + 2 * shared + backslash,
                 {"SLURM_SHARED_FS": shared, "PYTHON": str(python)}, FLAGPERF_PATH=json.dumps(str(tree)),
                 FLAGPERF_LOG_PATH=json.dumps(str(results)))
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=240)
    assert code == 0, out + err
    run = only_run_dir(results)
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["status"] == "passed" and [n["node"] for n in case["rounds"][0]["nodes"]] == \
        ["fpnode1_noderank0", "fpnode2_noderank1"]
    round_dir = run / case["name"] / "round1"
    for i, node in enumerate(("fpnode1_noderank0", "fpnode2_noderank1")):
        launch = json.loads((round_dir / node / "launch.json").read_text())
        assert launch["cwd"] == str(tree / "benchmarks" / "sleeper") and launch["out_dir"] == \
            (str(round_dir / node) if shared else str(tree / "result" / run.name / case["name"] / "round1" / node))
        assert (round_dir / node / f"rank{i}.out.log").stat().st_size > 0
        assert json.loads((round_dir / node / "ranks.json").read_text())["ranks"][0]["exit_code"] == 0
    script = (round_dir / "slurm" / "job.sh").read_text()
    assert f"{shlex.quote(str(python))} {shlex.quote(str(tree / 'launcher' / 'slurm_node.py'))} launch" in script
    if shared:      # sbatch wrote the job's output where flagperf looks for it
        names = [p.name for p in (round_dir / "slurm").glob("job*.out")]
        assert names == ["job.out"] if backslash else re.fullmatch(r"job-\d+\.out", "".join(names)), names
    assert list(marks.iterdir()) == []
    _no_strays(tmp_path)


# -- SLURM_DRAIN_REJECTED: a rejected node drained with its reason, read back with sinfo -R ------------------------

def _drain_reasons(bed) -> dict:
    """{node: reason} of every node `sinfo -R` lists (drained or down, with the reason it was given)."""
    cp = bed.run(["sinfo", "-R", "-h", "-o", "%n|%E"])
    return dict(line.split("|", 1) for line in cp.stdout.splitlines() if "|" in line)


def _node_states(bed) -> dict:
    cp = bed.run(["sinfo", "-h", "-N", "-p", "fpq", "-o", "%N %T"])
    return dict(line.split() for line in cp.stdout.splitlines() if len(line.split()) == 2)


def _resume_all(bed):
    """The test's cleanup: every node of the bed back in service (idle), also when the test failed."""
    bed.run(["scontrol", "update", f"NodeName={','.join(bed.nodes)}", "State=RESUME"], check=False)
    wait_for(lambda: all(s == "idle" for s in _node_states(bed).values()) and not _drain_reasons(bed), 30,
             "every node idle again")


def test_drain_rejected_hook_drains_only_rejected_nodes_of_the_partition(tmp_path, bed):
    """act_on_verdicts called with NodeVerdict records: the rejected node is drained with the run id and its first
    reason (controls and quotes removed, bounded); a degraded node, a name that is not a node of the partition and
    a host-list expression are not touched."""
    import logging

    from flagperf.backends.slurm import DRAIN_REASON_MAX_CHARS, SlurmBackend
    from flagperf.config import load_config
    from flagperf.records import GpuIdentity, NodeVerdict, VerdictReason
    conf = _conf(tmp_path, bed, {"gemm:pytorch:x:1:1:1": "null"}, 30448, {"SLURM_DRAIN_REJECTED": True})
    backend = SlurmBackend(load_config(conf), logging.getLogger("test.drain"))
    assert backend.connect([]) == []
    gpu = GpuIdentity(3, "GPU-0badc0de", "1320", "00000000:9A:00.0")
    ecc = VerdictReason("health", "reject", gpu.label(), 'ECC uncorrectable: 2\n"quoted"\x1b[2J\ttab ' + "x" * 400,
                        "replace the GPU", gpu)
    verdicts = [NodeVerdict.of("fpnode1", [ecc, VerdictReason("link", "reject", "l", "second reason", "r")]),
                NodeVerdict.of("fpnode2", [VerdictReason("health", "degraded", "node", "governor", "r")]),
                NodeVerdict.of("nosuchnode", [ecc]), NodeVerdict.of("fpnode[1-2]", [ecc])]
    try:
        lines = backend.act_on_verdicts(verdicts, "run20261201-abc")
        reasons = _drain_reasons(bed)
        assert list(reasons) == ["fpnode1"], (lines, reasons)
        reason = reasons["fpnode1"]
        assert reason.startswith("flagperf run20261201-abc: gpu 3 (GPU-0badc0de, serial 1320, pci 00000000:9A:00.0)"
                                 ": ECC uncorrectable: 2 'quoted' [2J tab xxx")
        assert reason.endswith("...") and len(reason) == DRAIN_REASON_MAX_CHARS and "second reason" not in reason
        assert _node_states(bed)["fpnode1"] in ("drained", "draining", "drain") and \
            _node_states(bed)["fpnode2"] == "idle"
        oks = [ok for ok, _ in lines]
        assert oks == [True, False, False], lines
        assert lines[0][1].startswith("slurm: drained fpnode1 (Reason=flagperf run20261201-abc: gpu 3")
        assert "scontrol update NodeName=fpnode1 State=RESUME" in lines[0][1]
        assert lines[1][1] == "slurm: not draining nosuchnode: not a node of partition fpq (sinfo)"
        assert lines[2][1] == "slurm: not draining fpnode[1-2]: not a node of partition fpq (sinfo)"
        # off by default: the same verdicts drain nothing
        _resume_all(bed)
        conf = _conf(tmp_path, bed, {"gemm:pytorch:x:1:1:1": "null"}, 30449)
        quiet = SlurmBackend(load_config(conf), logging.getLogger("test.drain"))
        assert quiet.connect([]) == [] and quiet.act_on_verdicts(verdicts, "r") == [] and _drain_reasons(bed) == {}
    finally:
        _resume_all(bed)


def test_a_run_drains_the_node_it_rejects(tmp_path, bed, flagperf_home):
    """flagperf run under SLURM_DRAIN_REJECTED: the each case fails on fpnode2 only, so fpnode2 is rejected and
    drained (sinfo -R shows the run id and the failure), fpnode1 is accepted and stays idle; the verdicts also go
    to --junit and --prometheus."""
    _override(flagperf_home, "sleeper", "drain", "sleep_s: 0.3\nfail_rank: 0\nfail_code: 9\nfail_hosts: [fpnode2]\n")
    conf = _conf(tmp_path, bed, {"sleeper:pytorch:drain:each:1:1": "null"}, 30446, {"SLURM_DRAIN_REJECTED": True})
    junit, prom = tmp_path / "verdicts.xml", tmp_path / "flagperf.prom"
    try:
        code, out, err = run_cli(["run", "--config", conf, "--junit", junit, "--prometheus", prom],
                                 home=flagperf_home, timeout=240)
        assert code == 1, out + err
        run, summary = _summary(tmp_path)
        verdicts = {v["host"]: v for v in summary["verdicts"]}
        assert (verdicts["fpnode1"]["verdict"], verdicts["fpnode2"]["verdict"]) == ("accept", "reject"), verdicts
        reasons = _drain_reasons(bed)
        assert list(reasons) == ["fpnode2"], (reasons, out)
        assert reasons["fpnode2"].startswith(f"flagperf {run.name}: ") and "exit" in reasons["fpnode2"]
        assert _node_states(bed)["fpnode1"] == "idle"
        assert "slurm: drained fpnode2 (Reason=flagperf " in out
        assert f"slurm: $ scontrol update NodeName=fpnode2 State=DRAIN 'Reason=flagperf {run.name}: " in \
            (run / "flagperf_run.log").read_text()
        assert f"report junit: {junit}" in out and f"report prometheus: {prom}" in out
        xml = junit.read_text()
        assert '<testcase name="fpnode2.failure"' in xml and "<failure " in xml and \
            '<testcase name="fpnode1.failure" classname="flagperf.verdicts"/>' in xml
        assert 'flagperf_node_verdict{host="fpnode2",verdict="reject"} 1.0' in prom.read_text()
    finally:
        _resume_all(bed)
    _no_strays(tmp_path)
