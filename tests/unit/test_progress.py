"""The live panel (flagperf/progress.py): what the stages tell it during a run (phases, the check's steps, the
nodes' rank states read from node_status.json), what it draws (within the width, nothing from a host obeyed),
the ETA; and node_status.json as the node launcher writes it and the driver reads it back."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from rich.cells import cell_len
from rich.console import Console as RichConsole

from flagperf.pipeline import Run
from flagperf.plan import build_plan
from flagperf.progress import LiveProgress, Progress, clock, num, rank_text, step_text
from flagperf.stages.wait import read_node_status
from flagperf_contract import (LAUNCH_FILE, NODE_STATUS_FILE, NODE_STATUS_MAX_BYTES, NODE_STATUS_SCHEMA,
                               STEP_FIELDS_MAX, ContractError, LaunchSpec, NodeStatus, RankState, perflog_line,
                               step_fields, write_json_atomic)

from tests.unit.fakebackend import FakeBackend, NodeScript, make_config
from tests.unit.test_untrusted import PAYLOADS, TERMINAL_FORBIDDEN

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMM = "gemm:pytorch:local:1:2:2"


class Recorder(Progress):
    """A live panel that records what it is told."""

    live = True

    def __init__(self):
        self.events: list = []

    def plan(self, rounds):
        self.events.append(("plan", dict(rounds)))

    def stage(self, text):
        self.events.append(("stage", text))

    def round(self, label, nodes, timeout_s, case=""):
        self.events.append(("round", label, tuple(nodes), case))

    def node(self, label, state, detail=""):
        self.events.append(("node", label, state))

    def node_status(self, label, status):
        self.events.append(("status", label, status))

    def round_done(self, status):
        self.events.append(("done", status))


class StatusBackend(FakeBackend):
    """The fake backend, its nodes answering node_status.json with ``text`` (or their ranks as exited 0)."""

    def __init__(self, text=None, **kw):
        super().__init__(**kw)
        self.text = text

    def node_status(self, node):
        if self.text is not None:
            return self.text
        return json.dumps(NodeStatus(0, [RankState(r, "exited", 0) for r in node.ranks], {"step": 9, "loss": 0.5},
                                     node.ranks[0]).to_dict())


def run_recorded(tmp_path, backend, cases=(GEMM,), **kw):
    plan = build_plan(make_config(tmp_path, list(cases), **kw), "run20250101000000")
    rec = Recorder()
    code = Run(plan, say=lambda _m: None, backend=backend, progress=rec).execute()
    return code, rec


def test_the_stages_tell_the_panel_every_phase(tmp_path):
    code, rec = run_recorded(tmp_path, StatusBackend())
    assert code == 0
    stages = [e[1] for e in rec.events if e[0] == "stage"]
    assert stages[:3] == ["check: connecting 1 host(s)", "check: deploying 1 host(s)", "check: probing 1 host(s)"]
    assert ("plan", {"gemm-pytorch-local-1x2": 2}) in rec.events
    rounds = [e for e in rec.events if e[0] == "round"]
    assert [r[1] for r in rounds] == ["gemm-pytorch-local-1x2 round 1/2", "gemm-pytorch-local-1x2 round 2/2"]
    assert all(r[2] == ("localhost_noderank0",) and r[3] == "gemm-pytorch-local-1x2" for r in rounds)
    first = rec.events[rec.events.index(rounds[0]):rec.events.index(rounds[1])]
    phases = [e[2] for e in first if e[0] == "node"]
    assert phases == ["preparing", "running", "done", "collecting", "judging"]
    (status,) = [e[2] for e in first if e[0] == "status"]     # read once more after its launcher exited
    assert [(r.rank, r.state, r.exit_code) for r in status.ranks] == [(0, "exited", 0), (1, "exited", 0)]
    assert first[-1] == ("done", "passed")


def test_a_failed_node_is_shown_failed(tmp_path):
    backend = StatusBackend(scripts=NodeScript(exit_code=1, rank_exit={1: 7}))
    code, rec = run_recorded(tmp_path, backend)
    assert code != 0
    assert ("node", "localhost_noderank0", "failed") in rec.events


def test_without_a_live_panel_no_node_status_is_read(tmp_path):
    class Counting(StatusBackend):
        reads = 0

        def node_status(self, node):
            Counting.reads += 1
            return super().node_status(node)

    plan = build_plan(make_config(tmp_path, [GEMM]), "run20250101000000")
    assert Run(plan, say=lambda _m: None, backend=Counting()).execute() == 0
    assert Counting.reads == 0


@pytest.mark.parametrize("text", [
    "", "not json", "{", json.dumps({"schema": "flagperf.ranks/1", "node_rank": 0, "ranks": []}),
    json.dumps({"schema": NODE_STATUS_SCHEMA, "node_rank": 0, "ranks": [{"rank": 0, "state": "dancing"}]}),
    json.dumps({"schema": NODE_STATUS_SCHEMA, "node_rank": "0", "ranks": []}),
    "[" * 100_000, " " * (NODE_STATUS_MAX_BYTES + 1)])
def test_a_node_status_that_is_not_one_is_left_out(tmp_path, text):
    assert read_node_status(text) is None
    code, rec = run_recorded(tmp_path, StatusBackend(text))
    assert code == 0 and not [e for e in rec.events if e[0] == "status"]


def test_node_status_round_trip_and_step_fields():
    s = NodeStatus(1, [RankState(8, "running"), RankState(9, "exited", -15)], {"step": 3}, 8, "now")
    assert NodeStatus.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    with pytest.raises(ContractError, match="'state'"):
        NodeStatus.from_dict({**s.to_dict(), "ranks": [{"rank": 0, "state": "x"}]})
    fields = step_fields({"event": "STEP", "time": 1.0, "rank": 0, "step": 3, "loss": 0.25, "ok": True,
                          "nested": {"a": 1}, "nan": float("nan"), "name": "x" * 500,
                          **{f"k{i}": i for i in range(40)}})
    assert fields["step"] == 3 and fields["loss"] == 0.25 and len(fields["name"]) == 64
    assert not {"event", "time", "rank", "ok", "nested", "nan"} & set(fields)
    assert len(fields) == STEP_FIELDS_MAX


def test_texts():
    assert num(3) == "3" and num(0.000123456) == "0.0001235" and num(12345678.9) == "1.235e+07"
    assert num(2.5) == "2.5" and num(123456789) == "1.235e+08" and num("a\x1bb") == "a\\x1bb"
    assert clock(5) == "5s" and clock(185) == "3m05s" and clock(7260) == "2h01m"
    ranks = [RankState(r, "running") for r in (0, 1, 2, 3, 6)] + [RankState(4, "exited", 0),
                                                                   RankState(5, "exited", 7)]
    assert rank_text(ranks) == "ranks 0-3,6 running, 4 exited 0, 5 exited 7"
    assert rank_text([RankState(0, "exited", -9)]) == "rank 0 exited -9"
    assert step_text({"step": 120, "loss": 2.3456789}) == "step 120  loss 2.346"


def panel(width=80):
    """A LiveProgress drawn on a recording console of ``width`` (never started: no terminal needed)."""
    live = LiveProgress.__new__(LiveProgress)
    live.lock, live.text, live.label, live.nodes, live.timeout_s, live.t0 = (threading.Lock(), "starting", None,
                                                                               {}, 0.0, time.monotonic())
    return live


def draw(live, width) -> list:
    console = RichConsole(record=True, width=width, color_system=None, force_terminal=False)
    console.print(live._render())
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [40, 80, 160])
def test_the_panel_fits_any_width(width):
    live = panel()
    live.plan({"a-very-long-case-name-with-many-parts-pytorch-A100-4x8": 3, "b": 2})
    live.round("a-very-long-case-name-with-many-parts-pytorch-A100-4x8 round 1/3", [
        f"host-{i:03d}.a-long-domain.example.com_noderank{i}" for i in range(20)], 7200,
        "a-very-long-case-name-with-many-parts-pytorch-A100-4x8")
    for i in range(20):
        live.node(f"host-{i:03d}.a-long-domain.example.com_noderank{i}", "running" if i else "collecting")
    live.node_status("host-000.a-long-domain.example.com_noderank0", NodeStatus(
        0, [RankState(r, "running") for r in range(7)] + [RankState(7, "exited", 1)],
        {f"metric_{i}": 1234.5678 * i for i in range(12)}, 0))
    lines = draw(live, width)
    assert all(cell_len(line) <= width for line in lines), lines
    text = "\n".join(lines)
    assert text.startswith("▶ 1 collecting, 19 running  a-very-long") or width < 40
    assert "... 8 more node(s): 8 running" in text or width < 60
    if width >= 160:
        assert "ranks 0-6 running, 7 exited 1" in text and "rank 0 STEP  metric_0 0  metric_1 1235" in text
        assert "round 1 of 5" in text


def test_the_eta_counts_the_rounds_left():
    live = panel()
    live.plan({"a": 2, "b": 3})
    assert live.eta() == "0 of 5 rounds done"
    live.round("a round 1/2", ["n"], 100, "a")
    assert live.eta() == "round 1 of 5"           # nothing measured yet
    live.t0 -= 60
    live.round_done("passed")
    assert live.measured["a"][0] >= 60
    live.measured = {"a": (60.0,)}
    live.round("a round 2/2", ["n"], 100, "a")
    live.t0 -= 20
    eta = live.eta()           # this round: ~40 s left, then b: 3 x 60 s (a's time: b has none measured yet)
    assert eta.startswith("round 2 of 5, ETA 3m") and 215 <= _seconds(eta) <= 220, eta
    live.t0 -= 70              # 90 s into a round estimated at 60 s: a lower bound, said so
    assert live.eta() == "round 2 of 5, ETA 3m00s+ (this round is past its 1m00s estimate)", live.eta()


def _seconds(eta: str) -> int:
    m, s = eta.rsplit(" ", 1)[1].rstrip("s").split("m")
    return int(m) * 60 + int(s)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_the_panel_shows_host_text_as_text(name):
    p = PAYLOADS[name]
    live = panel()
    live.round(p, [p, "n2"], 10, p)
    live.node(p, p, p)
    live.node_status(p, NodeStatus(0, [RankState(0, "running")], {p[:60]: p, "step": 1}, 0))
    read_back = read_node_status(json.dumps(NodeStatus(0, [RankState(1, "exited", 3)], {"x": p}, 1).to_dict()))
    assert read_back is not None or len(p) > NODE_STATUS_MAX_BYTES
    if read_back is not None:
        live.node_status("n2", read_back)
    text = "\n".join(draw(live, 300))
    assert not TERMINAL_FORBIDDEN.search(text)
    live.round_done(p)
    assert not TERMINAL_FORBIDDEN.search("\n".join(draw(live, 300)))


# ---------------------------------------------------------------------------------------- the node launcher
def test_the_node_launcher_keeps_node_status_json(tmp_path):
    """Real node launcher, two ranks: rank 0 logs STEP events (one a hostile string), rank 1 exits 5 first."""
    script = ("import json, os, sys, time\n"
              "rank = int(os.environ['RANK'])\n"
              "if rank == 1:\n"
              "    time.sleep(3.0); sys.exit(5)\n"
              "for i in range(1, 20):\n"
              f"    print({perflog_line({'event': 'STEP', 'time': 0, 'rank': 0})!r}[:-1] + "
              "', \"step\": %d, \"loss\": %g, \"tag\": \"a\\\\u001b[2Jb\"}' % (i, 1 / i), flush=True)\n"
              "    time.sleep(0.3)\n")
    node = tmp_path / "node"
    node.mkdir()
    spec = LaunchSpec("c", "c", "pytorch", 1, 0, 1, 2, [0, 1], [sys.executable, "-c", script], str(tmp_path), {},
                      str(node), grace_s=5.0)
    write_json_atomic(node / LAUNCH_FILE, spec.to_dict())
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "launcher", "node_launcher.py"), "--spec",
                             str(node / LAUNCH_FILE)])
    seen = []
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if (node / NODE_STATUS_FILE).exists():
            seen.append(read_node_status((node / NODE_STATUS_FILE).read_text()))
        time.sleep(0.1)
    assert proc.wait(timeout=30) == 1
    final = read_node_status((node / NODE_STATUS_FILE).read_text())
    assert [(r.rank, r.state, r.exit_code) for r in final.ranks][1] == (1, "exited", 5)
    assert final.ranks[0].state == "exited" and final.ranks[0].exit_code != 0      # stopped after rank 1 failed
    assert any(s is not None and [r.state for r in s.ranks] == ["running", "running"] for s in seen)
    assert any(s is not None and s.step.get("step") for s in seen), seen
    steps = [s.step for s in seen if s is not None and s.step]
    assert steps[-1]["tag"] == "a\x1b[2Jb" and final.step_rank == 0     # stored as logged; shown escaped
    assert step_text(steps[-1]).endswith("tag a\\x1b[2Jb")
