"""The Reporter interface, and what became of one report file (:class:`ReportOutcome`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flagperf.results.interpret import Status
from flagperf_contract import write_atomic


@dataclass(frozen=True)
class ReportOutcome:
    """One file report of a run: the path it was written to, or (``path`` None) why it could not be."""

    name: str                   # the reporter's registered name
    path: Path | None
    error: str | None


class Reporter:
    """One form of a :class:`~flagperf.results.summary.Summary`. A reporter reads the summary and the files it
    names in the run directory, never the node directories."""

    name = "?"
    file_name: str | None = None      # the file written into the run directory; None: prints only

    def render(self, summary):
        """The report as text (or a rich renderable for the terminal)."""
        raise NotImplementedError

    def write(self, summary, run_dir) -> Path:
        """Write the report into the run directory atomically; returns its path."""
        path = Path(run_dir) / str(self.file_name)
        write_atomic(path, self.render(summary))
        return path


def shown_cases(summary, limit: int) -> tuple:
    """(the cases a bounded view shows, how many it leaves out): every case not passed first, in order, then the
    passed ones, up to ``limit``."""
    ordered = [c for c in summary.cases if c.status != Status.PASSED] + \
        [c for c in summary.cases if c.status == Status.PASSED]
    if len(ordered) <= limit:
        return list(summary.cases), 0
    keep = {id(c) for c in ordered[:limit]}
    return [c for c in summary.cases if id(c) in keep], len(ordered) - limit
