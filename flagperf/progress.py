"""What a run shows while it runs: its log lines on the terminal and in the run log, and the live panel.

The run's stages report through one :class:`Console`: ``step`` (a line for the terminal and the run log),
``detail`` (the run log only), ``cmd`` (a command a node runs, in the run log), ``lines`` (the last lines of a
log that explains a failure), and the live panel's ``plan``, ``stage``, ``round``, ``node``, ``node_status`` and
``round_done``. The panel is a :class:`Progress`: the default one does nothing, so the log lines are all a
non-terminal output (CI, a pipe) gets. On a terminal, ``LiveProgress`` keeps a rich Live panel under the
scrolling log lines: the current stage, and for the running round its phase, every node's phase (preparing,
running, collecting, judging), its ranks running or exited (with their exit codes) and the latest STEP event
of rank 0 (from the node launchers' ``node_status.json``), the round's elapsed time against CASE_TIMEOUT, and an
ETA for the whole run (the rounds left times the round time measured so far). Every panel line is cut to the
terminal's width (never wrapped), so it redraws cleanly at any width.

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

PANEL_NODES_MAX = 12        # nodes with a line of their own in the panel; the others are counted by phase
STATE_STYLES = {"running": "green", "failed": "red", "lost": "red", "done": "bold green", "collecting": "yellow",
                "judging": "yellow", "preparing": "magenta", "building": "magenta"}

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

    def round(self, label: str, nodes, timeout_s: float, case: str = "") -> None:
        self.progress.round(label, nodes, timeout_s, case)

    def node(self, label: str, state: str, detail: str = "") -> None:
        self.progress.node(label, state, detail)

    def round_done(self, status: str) -> None:
        self.progress.round_done(status)

    def plan(self, rounds: dict) -> None:
        """The rounds the run will go through: {case name: number of rounds} (the ETA counts them)."""
        self.progress.plan(rounds)

    def node_status(self, label: str, status) -> None:
        """A node's flagperf_contract.NodeStatus, read while its round runs."""
        self.progress.node_status(label, status)

    @property
    def live(self) -> bool:
        """True when a live panel shows what ``node_status`` gives (then it is worth reading)."""
        return self.progress.live


class Progress:
    """The no-op progress sink (non-terminal output: the log lines say everything)."""

    live = False

    def plan(self, rounds: dict) -> None:
        pass

    def stage(self, text: str) -> None:
        pass

    def round(self, label: str, nodes, timeout_s: float, case: str = "") -> None:
        pass

    def node(self, label: str, state: str, detail: str = "") -> None:
        pass

    def node_status(self, label: str, status) -> None:
        pass

    def round_done(self, status: str) -> None:
        pass

    def close(self) -> None:
        pass


def num(v) -> str:
    """A figure with 4 significant digits (an integer as is, up to 7 digits)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return for_terminal(v, limit=40)
    if isinstance(v, int) and abs(v) < 10 ** 7:
        return str(v)
    return f"{v:.4g}"


def clock(seconds: float) -> str:
    """'42s', '3m05s', '2h07m'."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _ranges(ranks) -> str:
    """'0-3,6' for [0, 1, 2, 3, 6]."""
    out: list = []
    for r in sorted(ranks):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def rank_text(ranks) -> str:
    """A node's ranks in a few words: 'ranks 0-7 running', 'ranks 0-6 running, 7 exited 1', 'rank 0 exited 0'
    (``ranks``: flagperf_contract.RankState)."""
    groups: dict = {}
    for r in ranks:
        key = "running" if r.state == "running" else f"exited {r.exit_code if r.exit_code is not None else '?'}"
        groups.setdefault(key, []).append(r.rank)
    order = sorted(groups, key=lambda k: (k != "running", k != "exited 0", k))
    parts = [f"{_ranges(groups[k])} {k}" for k in order]
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {', '.join(parts)}" if parts else ""


def step_text(step: dict) -> str:
    """'step 120  loss 2.31  lr 0.0001' from a STEP event's fields."""
    return "  ".join(f"{for_terminal(k, limit=40)} {num(v)}" for k, v in step.items())


class LiveProgress(Progress):
    """A rich Live panel (refreshed 4 times a second) on the given console."""

    live = True
    # (class defaults: state replaced, never changed in place, so an instance made without __init__ renders too)
    case = ""
    ranks: dict = {}            # node label -> flagperf_contract.NodeStatus, this round
    planned: dict = {}          # case -> rounds
    measured: dict = {}         # case -> (round seconds, ...)

    def __init__(self, console) -> None:
        from rich.live import Live
        self.lock = threading.Lock()
        self.text = "starting"
        self.label: str | None = None
        self.case = ""
        self.nodes: dict = {}           # label -> [phase, detail]
        self.timeout_s = 0.0
        self.t0 = time.monotonic()
        self.live_obj = Live(console=console, refresh_per_second=4, transient=True, get_renderable=self._render)
        self.live_obj.start()

    def plan(self, rounds):
        with self.lock:
            self.planned = {str(k): int(v) for k, v in rounds.items()}

    def _shown(self) -> None:
        """Redraw now: every phase a node goes through is drawn at least once, however short (called without
        the lock, which the drawing takes)."""
        live = getattr(self, "live_obj", None)
        if live is not None:
            try:
                live.refresh()
            except Exception:  # noqa: BLE001 - a terminal that went away
                pass

    def stage(self, text):
        with self.lock:
            self.text = for_terminal(text)
            if self.label is None:      # the last round's nodes go with the stage after it
                self.nodes, self.ranks = {}, {}
        self._shown()

    def round(self, label, nodes, timeout_s, case=""):
        with self.lock:
            self.label, self.timeout_s, self.t0 = for_terminal(label), float(timeout_s), time.monotonic()
            self.case = str(case)
            self.nodes = {for_terminal(n): ["waiting", ""] for n in nodes}
            self.ranks = {}
            self.text = f"{self.label}: starting"
        self._shown()

    def node(self, label, state, detail=""):
        with self.lock:
            self.nodes[for_terminal(label)] = [for_terminal(state), for_terminal(detail)]
        self._shown()

    def node_status(self, label, status):
        with self.lock:
            self.ranks = {**self.ranks, for_terminal(label): status}
        self._shown()

    def round_done(self, status):
        with self.lock:
            if self.label is not None:
                self.measured = {**self.measured,
                                 self.case: (*self.measured.get(self.case, ()), time.monotonic() - self.t0)}
            self.text = f"{self.label}: {for_terminal(status)}"
            self.label = None       # the nodes and their ranks stay shown as they ended, until the next stage
            self.nodes = {n: ["ended", d] for n, (_s, d) in self.nodes.items()}
        self._shown()

    # -- what the panel shows -------------------------------------------------------------------------------
    def phase(self) -> str:
        """The round's phase: its nodes' phase when they share one, else each phase with its count."""
        counts: dict = {}
        for state, _detail in self.nodes.values():
            counts[state] = counts.get(state, 0) + 1
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{n} {s}" for s, n in counts.items()) or "starting"

    def eta(self) -> str:
        """'round 3 of 12, ETA 4m10s': the rounds left (this one's remaining time included) times the round time
        measured so far (the case's own rounds where it has some)."""
        total = sum(self.planned.values())
        if not total:
            return ""
        done = sum(len(v) for v in self.measured.values())
        where = f"round {min(done + 1, total)} of {total}" if self.label else f"{done} of {total} rounds done"
        every = [t for v in self.measured.values() for t in v]
        if not every:
            return where
        left, over = 0.0, None
        for case, n in self.planned.items():
            times = self.measured.get(case) or every
            per = sum(times) / len(times)
            todo = n - len(self.measured.get(case, ()))
            if self.label and case == self.case and todo > 0:
                todo -= 1
                rest = per - (time.monotonic() - self.t0)
                if rest < 0:
                    over = per      # this round runs past its estimate: the ETA is a lower bound
                left += max(0.0, rest)
            left += max(0, todo) * per
        if over is not None:
            return f"{where}, ETA {clock(left)}+ (this round is past its {clock(over)} estimate)"
        return f"{where}, ETA {clock(left)}"

    def lines(self) -> list:
        """The panel's lines (rich Text); each is cut to the terminal's width, never wrapped."""
        head = Text("▶ ", style="bold cyan")     # the phase first: a narrow terminal cuts the end of the line
        out = [head + Text(self.phase(), style="bold") + Text(f"  {self.label}") if self.label else head + self.text]
        eta = self.eta()
        if self.label:
            elapsed = time.monotonic() - self.t0
            out.append(Text(f"  elapsed {clock(elapsed)} of CASE_TIMEOUT {clock(self.timeout_s)}"
                            + (f" · {eta}" if eta else ""), style="dim"))
        elif eta:
            out.append(Text(f"  {eta}", style="dim"))
        shown = list(self.nodes.items())[:PANEL_NODES_MAX]
        width = max((len(n) for n, _ in shown), default=0)
        for name, (state, detail) in shown:
            line = Text(f"  {name:<{width}}  ") + Text(f"{state:<10}", style=STATE_STYLES.get(state, ""))
            status = self.ranks.get(name)
            more = rank_text(status.ranks) if status is not None and status.ranks else detail
            if more:
                line += Text(f"  {more}", style="dim")
            out.append(line)
        rest = list(self.nodes.values())[PANEL_NODES_MAX:]
        if rest:
            counts: dict = {}
            for state, _d in rest:
                counts[state] = counts.get(state, 0) + 1
            out.append(Text(f"  ... {len(rest)} more node(s): " + ", ".join(f"{n} {s}" for s, n in counts.items()),
                            style="dim"))
        first = min((s for s in self.ranks.values() if s.step and s.step_rank is not None),
                    key=lambda s: s.step_rank, default=None)
        if first is not None:
            out.append(Text(f"  rank {first.step_rank} STEP  ", style="cyan") + Text(step_text(first.step)))
        for line in out:
            line.no_wrap, line.overflow = True, "ellipsis"
        return out

    def _render(self):
        with self.lock:
            table = Table.grid()
            table.add_column(no_wrap=True, overflow="ellipsis")
            for line in self.lines():
                table.add_row(line)
            return table

    def close(self):
        try:
            self.live_obj.stop()
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
