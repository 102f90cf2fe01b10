"""Live progress of a run: what the pipeline is doing, per case, round and node.

The pipeline reports through a ``Progress`` object (``stage``, ``round``, ``node``, ``round_done``); the
default one does nothing, so the pipeline's own log lines are all a non-terminal output (CI, a pipe) gets.
On a terminal, ``LiveProgress`` keeps a rich Live panel under the scrolling log lines: the current stage, and
for the running round every node's state (connecting, deploying, building, starting, running, stopping,
collecting, done, failed) with the round's elapsed time against CASE_TIMEOUT.
"""
from __future__ import annotations

import threading
import time

NODE_STATES = ("waiting", "preparing", "building", "starting", "running", "stopping", "collecting", "done",
               "failed", "lost")


class Progress:
    """The no-op progress sink (non-terminal output: the log lines say everything)."""

    def stage(self, text: str) -> None:
        pass

    def round(self, label: str, nodes, timeout_s: float) -> None:
        pass

    def node(self, label: str, state: str, detail: str = "") -> None:
        pass

    def round_done(self, status: str) -> None:
        pass

    def close(self) -> None:
        pass


class LiveProgress(Progress):
    """A rich Live panel (refreshed 4 times a second) on the given console."""

    def __init__(self, console):
        from rich.live import Live
        self.lock = threading.Lock()
        self.text = "starting"
        self.label: str | None = None
        self.nodes: dict = {}
        self.timeout_s = 0.0
        self.t0 = time.monotonic()
        self.live = Live(console=console, refresh_per_second=4, transient=True, get_renderable=self._render)
        self.live.start()

    def stage(self, text):
        with self.lock:
            self.text = text

    def round(self, label, nodes, timeout_s):
        with self.lock:
            self.label, self.timeout_s, self.t0 = label, float(timeout_s), time.monotonic()
            self.nodes = {n: ["waiting", ""] for n in nodes}
            self.text = f"{label}: starting"

    def node(self, label, state, detail=""):
        with self.lock:
            self.nodes[label] = [state, detail]

    def round_done(self, status):
        with self.lock:
            self.text = f"{self.label}: {status}"
            self.label = None
            self.nodes = {}

    def _render(self):
        from rich.table import Table
        from rich.text import Text
        with self.lock:
            table = Table.grid(padding=(0, 2))
            table.add_row(Text("▶ ", style="bold cyan") + Text(self.text))
            if self.label:
                elapsed = time.monotonic() - self.t0
                table.add_row(Text(f"  elapsed {elapsed:5.0f} s of CASE_TIMEOUT {self.timeout_s:g} s",
                                   style="dim"))
                for name, (state, detail) in self.nodes.items():
                    style = {"running": "green", "failed": "red", "lost": "red", "done": "bold green",
                             "collecting": "yellow", "building": "magenta"}.get(state, "")
                    table.add_row(Text(f"  {name}  ") + Text(state, style=style) + Text(f"  {detail}", style="dim"))
            return table

    def close(self):
        try:
            self.live.stop()
        except Exception:  # noqa: BLE001 - a terminal that went away
            pass


def for_console(console) -> Progress:
    """LiveProgress on an interactive terminal, else the silent default."""
    if getattr(console, "is_terminal", False) and not getattr(console, "is_dumb_terminal", False):
        try:
            return LiveProgress(console)
        except Exception:  # noqa: BLE001 - no live display: the log lines remain
            return Progress()
    return Progress()
