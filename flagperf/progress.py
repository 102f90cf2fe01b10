"""What a run shows while it runs: its log lines on the terminal and in the run log, and the live panel.

The run's stages report through one :class:`Console`: ``step`` (a line for the terminal and the run log),
``detail`` (the run log only), ``cmd`` (a command a node runs, in the run log), ``lines`` (the last lines of a
log that explains a failure), and the live panel's ``stage``, ``round``, ``node`` and ``round_done``. The panel
is a :class:`Progress`: the default one does nothing, so the log lines are all a non-terminal output (CI, a
pipe) gets. On a terminal, ``LiveProgress`` keeps a rich Live panel under the scrolling log lines: the current
stage, and for the running round every node's state (waiting, preparing, running, collecting, ...) with the
round's elapsed time against CASE_TIMEOUT.

What a line or the panel shows may hold text from a host (node names, failure reasons, last lines): it reaches
``say`` and the panel through :func:`flagperf.untrusted.for_terminal`, its control characters shown escaped.
"""
from __future__ import annotations

import logging
import shlex
import threading
import time

from rich.table import Table
from rich.text import Text

from flagperf.untrusted import MAX_CHARS, for_terminal

SAY_MAX_CHARS = 4 * MAX_CHARS       # one terminal line of a run, which may quote several texts from hosts


class Console:
    """The one output of a run's stages. ``say`` prints a line on the terminal; ``log`` is the run log;
    ``progress`` the live panel."""

    def __init__(self, say=print, log: logging.Logger | None = None, progress: "Progress | None" = None):
        self._say = say
        self.log = log or logging.getLogger("flagperf.run")
        self.progress = progress or Progress()

    def say(self, message: str) -> None:
        """A line for the terminal alone, its control characters shown escaped (newlines kept)."""
        self._say(for_terminal(message, newlines=True, limit=SAY_MAX_CHARS))

    def step(self, message: str, level: int = logging.INFO) -> None:
        """A line for the terminal and the run log; WARNING and above are prefixed with their level."""
        self.log.log(level, message)
        self.say(message if level < logging.WARNING else f"{logging.getLevelName(level)}: {message}")

    def detail(self, message: str, level: int = logging.INFO) -> None:
        """A line for the run log only."""
        self.log.log(level, message)

    def cmd(self, label: str, argv) -> None:
        """A command a node runs, in the run log."""
        self.log.info(f"{label}: $ {shlex.join(argv)}")

    def lines(self, lines) -> None:
        """The last lines of a log that explains a failure, indented, on the terminal and in the run log."""
        for line in lines:
            self.say(f"    | {for_terminal(line)}")
            self.log.error(f"    | {line}")

    def stage(self, text: str) -> None:
        self.progress.stage(text)

    def round(self, label: str, nodes, timeout_s: float) -> None:
        self.progress.round(label, nodes, timeout_s)

    def node(self, label: str, state: str, detail: str = "") -> None:
        self.progress.node(label, state, detail)

    def round_done(self, status: str) -> None:
        self.progress.round_done(status)


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
            self.text = for_terminal(text)

    def round(self, label, nodes, timeout_s):
        with self.lock:
            self.label, self.timeout_s, self.t0 = for_terminal(label), float(timeout_s), time.monotonic()
            self.nodes = {for_terminal(n): ["waiting", ""] for n in nodes}
            self.text = f"{self.label}: starting"

    def node(self, label, state, detail=""):
        with self.lock:
            self.nodes[for_terminal(label)] = [for_terminal(state), for_terminal(detail)]

    def round_done(self, status):
        with self.lock:
            self.text = f"{self.label}: {for_terminal(status)}"
            self.label = None
            self.nodes = {}

    def _render(self):
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
    if console.is_terminal and not console.is_dumb_terminal:
        try:
            return LiveProgress(console)
        except Exception:  # noqa: BLE001 - no live display: the log lines remain
            return Progress()
    return Progress()
