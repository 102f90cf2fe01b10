"""The result table in a real terminal: `flagperf report RUN_DIR` in a pty of 40, 80 and 160 columns. Every
figure of the summary appears in full (4 significant digits, never cut to `0.1…`), no line is wider than the
terminal, and the notes are all there (a column at 160, lines under the table at 80)."""
import os
import re
import sys

import pytest
from rich.cells import cell_len

from flagperf.reporters.terminal import _num
from flagperf.results.summary import Summary
from testbed.ptyrun import ESCAPES, PtyTimeout, run_in_pty

from tests.unit.test_summary_report import PASS_NAME, fin, sample_summary



def in_terminal(argv, columns: int, env: dict, timeout: float = 60.0) -> tuple:
    """(exit status, the lines a terminal of ``columns`` x 50 shows, escape sequences removed)."""
    try:
        code, out = run_in_pty(argv, env, columns, 50, timeout)
    except PtyTimeout as exc:
        pytest.fail(str(exc))
    return code, ESCAPES.sub("", out).replace("\r", "").split("\n")


def awkward_summary(run_dir) -> Summary:
    """Figures as wide as 4 significant digits make them: small, negative, huge."""
    s = sample_summary(run_dir=str(run_dir))
    passed = s.cases[0]
    passed.rounds[0].finished = fin(0.000123456789, e2e=1234.5678)
    passed.rounds[1].finished = fin(-0.001234567, e2e=98765432.1)
    return s


@pytest.mark.parametrize("columns", [40, 80, 160])
def test_every_figure_in_full_at_any_width(tmp_path, columns):
    run = tmp_path / "run20250101000000"
    run.mkdir()
    s = awkward_summary(run)
    s.save(run / "summary.json")
    s = Summary.load(run / "summary.json")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm-256color",
           "COLUMNS": str(columns), "LINES": "50", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    code, lines = in_terminal([sys.executable, "-m", "flagperf", "report", str(run)], columns, env)
    text = "\n".join(lines)
    assert code in (0, 1), text
    start = next(i for i, line in enumerate(lines) if "flagperf run20250101000000" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith(f"{PASS_NAME} round 3: "))    # failures
    wide = [line for line in lines[start:end] if cell_len(line) > columns]
    assert not wide, "\n".join(wide)
    case = next(c for c in s.cases if c.name == PASS_NAME)
    figures = [_num(case.stats["value"][k]) for k in ("median", "mean", "min", "max")]
    figures.append(_num(case.stats["e2e_time"]["median"]))
    assert "-0.001235" in figures and "0.0001235" in figures and "4.938e+07" in figures, figures
    table = "\n".join(lines[start:end])
    for figure in figures:
        assert re.search(rf"(?<![\d.e+-]){re.escape(figure)}(?![\d.])", table), (figure, table)
    assert "…" not in table
    for note in ("round 3: skipped: no nvcc", "round 1: rank 0 printed no FINISHED line"):
        assert note in " ".join(" ".join(lines).split()) or columns < 80, note


@pytest.mark.parametrize("columns", [80, 160])
def test_the_verdict_table_fits_without_folding_words(columns):
    """Below 120 columns the node verdicts are blocks of lines (wrapped between words); from 120 on a table."""
    from rich.console import Console

    from flagperf.reporters.terminal import TerminalReporter
    from tests.unit.test_verdict import hostile_summary
    s = hostile_summary()
    console = Console(width=columns, soft_wrap=True, record=True, color_system=None)    # as the run's console
    console.print(TerminalReporter().verdicts(s))
    lines = console.export_text().splitlines()
    assert all(cell_len(line) <= columns for line in lines), lines
    words = " ".join(" ".join(lines).split())
    if columns < 120:
        assert not any("│" in line for line in lines)
        for v in s.verdicts:
            for r in v.reasons:
                assert " ".join(r.remedy.split()) in words       # whole: wrapped between words, never folded
        assert "reject: send back or drain; degraded: usable" in words
    else:
        assert any(line.startswith("┃ node") for line in lines)
