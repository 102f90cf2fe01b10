"""The Reporter interface."""

from __future__ import annotations

import os
from pathlib import Path


class Reporter:
    name = "?"
    file_name: str | None = None      # the file written into the run directory; None: prints only

    def render(self, summary):
        """The report as text (or a rich renderable for the terminal)."""
        raise NotImplementedError

    def write(self, summary, run_dir) -> Path:
        """Write the report into the run directory atomically; returns its path."""
        path = Path(run_dir) / str(self.file_name)
        tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
        tmp.write_text(self.render(summary), encoding="utf-8")
        os.replace(tmp, path)
        return path
