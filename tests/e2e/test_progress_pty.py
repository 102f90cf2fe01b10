"""The live panel and the result table in a real terminal: `flagperf run` in a pty of 80 and of 160 columns (a
tmux pane's widths) on a localhost CPU config. The panel shows the phases, the ranks and rank 0's STEP figures;
no line of the panel or the table is wider than the terminal, and every figure of the summary appears in full.
"""

import json
import os
import re
import sys

import pytest
from rich.cells import cell_len

from flagperf.reporters.terminal import _num

from testbed.ptyrun import ESCAPES, PtyTimeout, run_in_pty

from .conftest import only_run_dir, write_conf



def run_in_terminal(argv, env, columns: int, timeout: float = 240.0) -> tuple:
    """Run ``argv`` with a pty of ``columns`` x 40 as its terminal; (exit status, what it wrote, as text)."""
    try:
        return run_in_pty(argv, env, columns, 40, timeout)
    except PtyTimeout as exc:
        pytest.fail(f"{exc}:\n{exc.output[-3000:]}")


def screen_lines(text: str) -> list:
    """The lines a terminal would show, escape sequences removed (a carriage return starts a new piece)."""
    return [piece for line in ESCAPES.sub("", text).split("\n") for piece in line.split("\r")]


@pytest.mark.parametrize("columns", [80, 160])
def test_live_panel_and_table_fit_the_terminal(tmp_path, flagperf_home, columns):
    override = flagperf_home / "vendors" / "cpu" / "stepper"        # each case's config, by its hardware name
    override.mkdir()
    (override / "config_live.yaml").write_text("steps: 10\nstep_s: 0.6\n")
    (override / "config_fails.yaml").write_text("steps: 10\nstep_s: 0.6\nfail_rank: 1\nfail_after_steps: 6\n"
                                                "fail_code: 7\n")
    conf = write_conf(tmp_path, {"stepper:pytorch:live:1:2:2": "null", "stepper:pytorch:fails:1:2:1": "null"})
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm-256color",
           "COLUMNS": str(columns), "LINES": "40", "FLAGPERF_HOME": str(flagperf_home),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    code, out = run_in_terminal([sys.executable, "-m", "flagperf", "run", "--config", str(conf)], env, columns)
    lines = screen_lines(out)
    text = "\n".join(lines)
    assert code == 1, text[-4000:]            # the failing case fails the run
    wide = [line for line in lines if cell_len(line) > columns and not line.startswith("results: ")]
    assert not wide, "\n".join(wide)
    # the panel: the check's phases, every node phase of a round, the ranks, rank 0's STEP figures, the ETA
    # the panel (drawn on every change): the check's steps, every phase of a node, its ranks, rank 0's STEP
    # figures, the elapsed time and the ETA
    for step in ("connecting", "deploying", "probing"):
        assert f"check: {step} 1 host(s)" in text, step
    for phase in ("preparing", "running", "done", "failed", "collecting", "judging"):
        assert re.search(rf"^ +localhost_noderank0 +{phase} ", text, re.M), (phase, text[-4000:])
    assert re.search(r"localhost_noderank0 +running +ranks 0-1 running", text), text[-4000:]
    assert re.search(r"rank 0 STEP +step \d+ +loss [0-9.]+ +samples_per_s [0-9.]+", text), text[-4000:]
    assert re.search(r"elapsed \d+s of CASE_TIMEOUT 2h00m", text) and re.search(r"round 2 of 3, ETA \d", text)
    assert re.search(r"localhost_noderank0 +done +ranks 0-1 exited 0", text), text[-4000:]
    assert re.search(r"localhost_noderank0 +\w+ +ranks 0 exited -?\d+, 1 exited 7", text), text[-4000:]
    # the table: every figure of the summary in full
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    figures = [_num(case["stats"]["value"][k]) for case in summary["cases"] if case["stats"].get("value")
               for k in ("median", "mean", "min", "max")]
    assert figures and all(re.search(r"\d", f) for f in figures)
    for figure in figures:
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d.])", text), (figure, text[-3000:])
    assert "…" not in text.split("flagperf run")[-1]
