"""The dry-run plan lines and the check table (flagperf/render.py), and fan_out (flagperf/hosts/fanout.py)."""
import logging
import shlex
import threading
import time

from rich.console import Console

from flagperf.backends.hostlist import HostListBackend
from flagperf.checks import HostCheck, failed
from flagperf.hosts.fanout import CANCELLED, Outcome, fan_out
from flagperf.images import image_spec
from flagperf.plan import build_plan
from flagperf.render import check_table, plan_lines

from tests.unit.fakebackend import FakeBackend, make_config

RUN_ID = "run20250101000000"


def text_of(renderable) -> str:
    console = Console(record=True, width=250, color_system=None)
    console.print(renderable)
    return console.export_text()


# ----------------------------------------------------------------------------------------------- plan lines
def test_plan_lines_bare_with_fake_backend_describe(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:2:1:2", "llm:pytorch:local:1:1:1"],
                      hosts=("localhost", "localhost"))
    plan = build_plan(cfg, RUN_ID)
    lines = plan_lines(plan, FakeBackend(describe_lines=["fake: would run here", "fake: second line"]))
    assert lines[0] == f"run directory: {plan.run_dir}   (nothing is created by --dry-run)"
    assert lines[1].startswith("vendor: cpu (set in the test config); device cpu, backend gloo")
    assert lines[1].endswith("; accelerator monitor none")
    assert lines[2] == ("scheduler: ssh; runtime: bare; monitor interval 0.5 s; case timeout 7200 s; "
                        "clear caches: no")
    assert lines[3] == "hosts: localhost"
    assert "case gemm-pytorch-local-2x1  [gemm:pytorch:local:2:1:2]  2 node(s) x 1 rank(s), 2 round(s), data: -" \
        in lines
    # every node gets the backend's lines, indented under it
    assert lines.count("      fake: would run here") == 2 * 2 + 1
    assert lines.count("      fake: second line") == 5
    i = lines.index("      fake: would run here")
    assert lines[i - 1].startswith("      rank:     (cd ")
    node_lines = [line for line in lines if line.startswith("    node ")]
    assert node_lines[1].startswith("    node 1 on localhost: global ranks 1; MASTER_ADDR=127.0.0.1 "
                                    "MASTER_PORT=29650 WORLD_SIZE=2")
    assert "VISIBLE_DEVICES" not in node_lines[0]          # cpu: no visible-devices variable
    assert not any(line.startswith("note:") for line in lines)
    assert not (tmp_path / "logs").exists()


def test_plan_lines_without_backend_and_with_notes(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:auto:1"], vendor="nvidia")
    plan = build_plan(cfg, RUN_ID)
    lines = plan_lines(plan)
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith("note: gemm:pytorch:local:1:auto:1: nproc auto: the accelerators "
                                                   "of localhost are not counted") and "1 rank per node" in notes[0]
    assert any("CUDA_VISIBLE_DEVICES=0" in line for line in lines if line.startswith("    node 0"))
    assert not any("fake" in line for line in lines)


def docker_config(tmp_path):
    (tmp_path / "data").mkdir()
    return make_config(tmp_path, {"gemm:pytorch:local:1:1:1": str(tmp_path / "data")}, runtime="docker",
                       extra='ACCE_CONTAINER_OPT: "-e FOO=bar -v /srv/models:/models:ro"\nSHM_SIZE: 8G\n')


def check_docker_line(line, cfg, plan):
    node = plan.cases[0].rounds[0].nodes[0]
    argv = shlex.split(line)
    assert argv[:3] == ["docker", "run", "-d"]
    assert argv[argv.index("--name") + 1] == node.container.name == f"flagperf-{RUN_ID}-gemm-pytorch-local-1x1-r1-n0"
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("--shm-size") + 1] == "8G"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    data = str(cfg.test.cases[0].data_dir)
    assert mounts == ["/srv/models:/models:ro", f"{cfg.source_root}:{cfg.source_root}:rw",
                      f"{plan.run_dir}:{plan.run_dir}:rw", f"{data}:{data}:rw"]
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert envs == ["FOO=bar"]
    labels = [argv[i + 1] for i, a in enumerate(argv) if a == "--label"]
    assert f"flagperf.run={RUN_ID}" in labels and "flagperf.node=0" in labels
    tag = image_spec(cfg, cfg.test.cases[0]).tag
    assert tag.startswith("flagperf/cpu-pytorch:") and node.container.image == tag
    i = argv.index(tag)
    assert argv[i - 2:i] == ["-w", node.launch.cwd]
    assert argv[i + 1:i + 3] == ["sh", "-c"]
    assert argv[-4:] == [node.launcher_argv[0], *node.launcher_argv[1:]][-4:]
    assert "--gpus" not in argv                     # the cpu vendor asks for no GPU


def test_plan_lines_docker_runtime_fake_backend(tmp_path):
    cfg = docker_config(tmp_path)
    plan = build_plan(cfg, RUN_ID)
    lines = plan_lines(plan, FakeBackend())
    assert "scheduler: ssh; runtime: docker;" in lines[2]
    (docker,) = [line for line in lines if line.lstrip().startswith("docker run ")]
    check_docker_line(docker, cfg, plan)
    node = plan.cases[0].rounds[0].nodes[0]
    assert docker.strip() == node.container.docker_run_line()
    # in a container the ranks and the launcher use the image's python3
    assert any(line.startswith("      launcher: python3 ") for line in lines)


def test_plan_lines_docker_runtime_real_backend_describe(tmp_path):
    cfg = docker_config(tmp_path)
    plan = build_plan(cfg, RUN_ID)
    backend = HostListBackend(cfg, logging.getLogger("test"))       # constructing it contacts nothing
    lines = plan_lines(plan, backend)
    i = lines.index(f"      container (image built from {cfg.source_root / 'vendors/cpu/pytorch'} when the tag "
                    f"is missing):")
    check_docker_line(lines[i + 1], cfg, plan)
    assert not any("reached over SSH" in line for line in lines)


def test_describe_names_ssh_hosts(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:1:1"], hosts=("10.0.0.7",))
    plan = build_plan(cfg, RUN_ID)
    node = plan.cases[0].rounds[0].nodes[0]
    assert HostListBackend(cfg, logging.getLogger("test")).describe(node) == [
        f"reached over SSH; node directory collected to {node.local_dir}"]


# ----------------------------------------------------------------------------------------------- check table
def test_check_table_rows():
    checks = [HostCheck("localhost", "ok", "python 3.11, torch 2.3, 8 CPU(s), 100 GiB free"),
              failed("node-b", "auth_failed", "Authentication failed for root"),
              HostCheck("node-c", "error", "odd", remedy="")]
    table = check_table(checks)
    assert table.title == "host check"
    assert [c.header for c in table.columns] == ["host", "outcome", "detail", "remedy"]
    assert table.row_count == 3
    cells = [list(c._cells) for c in table.columns]
    assert cells[0] == ["localhost", "node-b", "node-c"]
    assert cells[1] == ["[green]ok[/]", "[red]auth_failed[/]", "[red]error[/]"]
    assert cells[3] == ["", "fix SSH_USER / SSH_KEY, or add the key to the host's authorized_keys", ""]
    text = text_of(table)
    assert "Authentication failed for root" in text and "auth_failed" in text and "[red]" not in text


def test_check_table_empty():
    assert check_table([]).row_count == 0


# ----------------------------------------------------------------------------------------------- fan_out
def test_fan_out_keeps_the_order_and_runs_in_parallel():
    barrier = threading.Barrier(5, timeout=5)

    def fn(i):
        barrier.wait()                  # every call must be running at once
        time.sleep(0.01 * (5 - i))      # the first items finish last
        return i * i

    outcomes = fan_out(range(5), fn, deadline_s=5)
    assert [o.key for o in outcomes] == [0, 1, 2, 3, 4]
    assert [o.value for o in outcomes] == [0, 1, 4, 9, 16]
    assert all(o.ok and o.error == "" and o.exc is None and o.duration_s >= 0 for o in outcomes)


def test_fan_out_empty():
    assert fan_out([], lambda x: x, deadline_s=1) == []


def test_fan_out_exceptions_become_failed_outcomes():
    class Boom(Exception):
        pass

    def fn(x):
        if x == "b":
            raise ValueError("host b: refused")
        if x == "c":
            raise Boom()
        return x.upper()

    a, b, c = fan_out(["a", "b", "c"], fn, deadline_s=5)
    assert a == Outcome("a", True, "A", "", a.duration_s)
    assert (b.ok, b.value, b.error, type(b.exc)) == (False, None, "host b: refused", ValueError)
    assert (c.ok, c.error, type(c.exc)) == (False, "Boom", Boom)     # no message: the exception's name


def test_fan_out_deadline():
    release = threading.Event()

    def fn(x):
        if x == "slow":
            release.wait(120)
        return x

    t0 = time.monotonic()
    try:
        fast, slow, fast2 = fan_out(["fast", "slow", "fast2"], fn, deadline_s=0.5)
    finally:
        release.set()
    assert time.monotonic() - t0 < 60           # at the deadline, not when the slow call ends (120 s)
    assert fast.ok and fast.value == "fast"
    assert (slow.ok, slow.error, slow.value, slow.exc, slow.duration_s) == (False, "no answer within 0.5 s",
                                                                            None, None, 0.5)
    assert fast2.ok and fast2.value == "fast2"


def test_fan_out_max_workers_limits_parallelism():
    running, peak = [0], [0]
    lock = threading.Lock()

    def fn(x):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return x

    outcomes = fan_out(range(6), fn, deadline_s=5, max_workers=2)
    assert [o.value for o in outcomes] == list(range(6)) and peak[0] <= 2


def test_fan_out_deadline_is_for_the_whole_fan_out():
    # one worker: "a" answers at once, "b" is still running at the 0.5 s deadline, "c" never starts
    started, release = [], threading.Event()

    def fn(x):
        started.append(x)
        if x != "a":
            release.wait(60)
        return x

    try:
        outcomes = fan_out(["a", "b", "c"], fn, deadline_s=0.5, max_workers=1)
    finally:
        release.set()
    assert [(o.key, o.ok) for o in outcomes] == [("a", True), ("b", False), ("c", False)]
    assert [o.error for o in outcomes[1:]] == ["no answer within 0.5 s"] * 2
    time.sleep(0.3)                             # the worker is free again: "c" would start now if it were queued
    assert started == ["a", "b"]                # the queued item was cancelled


def test_fan_out_stop_gives_a_grace_then_cancels_what_still_runs():
    asked = threading.Event()
    t0 = time.monotonic()
    threading.Timer(0.3, asked.set).start()
    out = fan_out([0.1, 30.0], lambda s: time.sleep(s) or s, deadline_s=60, stop=asked.is_set, stop_grace_s=0.5)
    took = time.monotonic() - t0
    assert out[0].ok and out[0].value == 0.1
    assert not out[1].ok and out[1].error == CANCELLED
    assert took < 15, took                      # the grace after the stop, not the 30 s call
    # without a stop request nothing is cancelled
    out = fan_out([0.05], lambda s: s, deadline_s=5, stop=lambda: False)
    assert out[0].ok
