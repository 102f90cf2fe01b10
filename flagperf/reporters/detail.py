"""``detail_result.json``: FlagPerf base's per-host monitor series and their statistics (flagperf.results.basedetail).

Written for every run: into the run directory for the run's last case (its last round), as FlagPerf's base run.py
writes it for the case it ran last, and into every round's directory for that round. Unlike the other reporters
it reads the node directories (their monitor files and logs, through flagperf.results.monitors and perflog:
regular files only, never a link), as FlagPerf's summary step reads its monitors' logs.
"""

from __future__ import annotations

import json
from pathlib import Path

from flagperf.reporters.base import Reporter
from flagperf.results.basedetail import DETAIL_FILE, detail_result, last_round
from flagperf.results.series import node_dir_of
from flagperf_contract import write_atomic


def _text(detail: dict) -> str:
    return json.dumps(detail, allow_nan=False) + "\n"


class DetailReporter(Reporter):
    name = "detail"
    file_name = DETAIL_FILE

    def render(self, summary) -> str:
        """The run directory's detail_result.json: the last round of the run's last case ({} when none ran)."""
        found = last_round(summary)
        return _text(detail_result(summary.run_dir or ".", *found) if found else {})

    def write(self, summary, run_dir) -> Path:
        run_dir = Path(run_dir)
        last = last_round(summary)
        for case in summary.cases:
            for rnd in case.rounds:
                if not rnd.nodes:
                    continue
                detail = detail_result(run_dir, case, rnd)
                folder = node_dir_of(run_dir, rnd, rnd.nodes[0])
                if folder is not None and folder.parent.is_dir() and not folder.parent.is_symlink():
                    write_atomic(folder.parent / DETAIL_FILE, _text(detail))
                if last is not None and last[0] is case and last[1] is rnd:
                    write_atomic(run_dir / DETAIL_FILE, _text(detail))
        if last is None:
            write_atomic(run_dir / DETAIL_FILE, _text({}))
        return run_dir / DETAIL_FILE
