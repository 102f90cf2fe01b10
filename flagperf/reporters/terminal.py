"""The terminal table of a run (rich), and its failures with their last lines.

Every text that came from a host, a result file or a config reaches the terminal through
:mod:`flagperf.untrusted`: table cells as rich ``Text`` (never markup), lines with their control characters shown
escaped.

The case table fits the terminal without cutting a figure: every figure column is ``no_wrap`` and as wide as its
widest figure (4 significant digits). Where the full table (with its note and unit columns) does not fit, the
unit joins the metric's cell, the status and the case name wrap, and the notes go on lines of their own under
the table.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from flagperf.references import case_note, describe
from flagperf.reporters.base import Reporter, shown_cases
from flagperf.results import ncclview
from flagperf.results.interpret import Status
from flagperf.results.nodefigures import SPREAD_FLAG_PCT, figure_line, node_figures
from flagperf.results.slownodes import RULE, outliers
from flagperf.results.slownodes import describe as describe_outlier
from flagperf.results.slownodes import gpu_text
from flagperf.results.stragglers import case_note as straggler_note
from flagperf.untrusted import for_rich, for_terminal

STYLES = {Status.PASSED: "green", Status.FAILED: "red", Status.SKIPPED: "yellow", Status.BELOW_REFERENCE: "red"}
VERDICT_STYLES = {"accept": "green", "degraded": "yellow", "reject": "bold red"}


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"


def _note(case) -> str:
    """The first failure of a case, short."""
    for r in case.rounds:
        if r.failure:
            return f"round {r.round}: {r.failure.reason or r.status}"
    return ""


FLAGPERF_ROWS_MAX = 16


def _flagperf_rows(case) -> list:
    """A case whose figures came from FlagPerf's own lines ([FlagPerf Result], FlagPerf's PerfLog): one row per
    further metric under the case's row, with its unit (flagperf's own benchmarks keep theirs in report.md)."""
    if not (case.head or {}).get("origin"):
        return []
    units = case.metric_units()
    names = [n for n in units if n != case.metric and case.stats.get(n)]
    rows = []
    for name in names[:FLAGPERF_ROWS_MAX]:
        st = case.stats[name]
        rows.append(_Row("", "", "", Text("  ") + for_rich(name), [_num(st.get(k)) for k in FIGURES],
                         for_rich(units.get(name) or ""), "", ""))
    if len(names) > FLAGPERF_ROWS_MAX:
        rows.append(_Row("", "", "", Text(f"  ... {len(names) - FLAGPERF_ROWS_MAX} more (report.md)"),
                         ["", "", "", ""], Text(""), "", ""))
    return rows


FIGURES = ("median", "mean", "min", "max")
UNBOUNDED = 100_000         # the width the full table is measured at (what it needs, unwrapped)
NARROW_GAP = 2              # between two columns of the narrow table
VERDICT_TABLE_MIN = 120     # the verdict table as a table from this width on (folding its cells); below, blocks
NARROW_TEXT_MIN = 10        # the case and the metric columns of the narrow table at least (else: stacked lines)


class WrappingTable(Table):
    """A Table whose title and caption wrap to its width also on a console that soft-wraps its lines (the run's
    console does: its log lines are left to the terminal); the cells wrap as their columns say."""

    def __rich_console__(self, console, options):
        yield from super().__rich_console__(console, options.update(no_wrap=False, overflow="fold"))


class VerdictTable(WrappingTable):
    """The node verdict table; on a terminal narrower than VERDICT_TABLE_MIN columns where it does not fit whole,
    one block of lines per reason instead (node and verdict; source/severity, case and subject; the detail; the
    remedy), which wrap between words."""

    def __rich_console__(self, console, options):
        if options.max_width >= VERDICT_TABLE_MIN or Measurement.get(
                console, options.update_width(UNBOUNDED), Table(*self.columns)).maximum + len(self.columns) * 3 + 1 \
                <= options.max_width:
            yield from super().__rich_console__(console, options)
            return
        yield from console.render(Group(*self.blocks()), options.update(no_wrap=False, overflow="fold"))

    def blocks(self) -> list:
        def text(cell) -> Text:
            return cell.copy() if isinstance(cell, Text) else Text(str(cell))
        out: list = [text(self.title)] if self.title else []
        for row in zip(*(c._cells for c in self.columns)):
            node, verdict, source, severity, case, subject, detail, remedy = map(text, row)
            if node.plain:
                out.append(node + Text("  ") + verdict)
            what = source + Text("/") + severity if severity.plain and severity.plain != "-" else source
            if case.plain:
                what += Text(" ") + case
            if subject.plain:
                what += Text(": ") + subject
            if what.plain and what.plain != "-":
                out.append(Text("  ") + what)
            if detail.plain:
                out.append(Text("    ") + detail)
            if remedy.plain:
                out.append(Text("    remedy: ", style="dim") + remedy)
        if self.caption:
            out.append(Text(str(self.caption), style="dim"))
        return out


class _Row:
    """One row of the case table, before it is laid out: text cells, and the figures as strings."""

    def __init__(self, case, status, rounds, metric, figures, unit, e2e, note):
        self.case, self.status, self.rounds, self.metric = case, status, rounds, metric
        self.figures, self.unit, self.e2e, self.note = figures, unit, e2e, note


class CaseTable:
    """The case table of a run, laid out for the width it is printed at (see the module's docstring)."""

    def __init__(self, title: Text, rows: list, notes_below: list):
        self.title, self.rows, self.extra = title, rows, notes_below

    def wide(self) -> Table:
        table = WrappingTable(title=self.title)
        for col, just in (("case", "left"), ("status", "left"), ("rounds", "right"), ("metric", "left"),
                          ("median", "right"), ("mean", "right"), ("min", "right"), ("max", "right"),
                          ("unit", "left"), ("e2e s", "right"), ("note", "left")):
            number = just == "right"
            table.add_column(col, justify=just, no_wrap=number,  # type: ignore[arg-type]
                             overflow="fold" if not number else "ellipsis")
        for r in self.rows:
            table.add_row(r.case, r.status, r.rounds, r.metric, *r.figures, r.unit, r.e2e, r.note)
        for text in self.extra:
            table.add_row(text[0], "", "", "", "", "", "", "", "", "", text[1])
        return table

    def _notes(self) -> list:
        notes = [Text("note: ", style="dim") + r.case + Text(": ") + r.note for r in self.rows
                 if isinstance(r.note, Text) and r.note.plain]
        return notes + [Text(f"{a}: {b}", style="dim") for a, b in self.extra]

    @staticmethod
    def _metric(r) -> Text:
        metric = r.metric.copy() if isinstance(r.metric, Text) else Text(r.metric)
        return metric + Text(f" ({r.unit.plain})") if r.unit.plain else metric

    @staticmethod
    def _status(r) -> Text:
        """'passed 2/3' (a flagperf row: nothing), under the case's name."""
        if not r.rounds:
            return Text("")
        status = r.status.copy() if isinstance(r.status, Text) else Text(r.status)
        return status + Text(f" {r.rounds}", style="dim")

    def figures_width(self) -> int:
        """What the figure columns of the narrow table take, headers and gaps included."""
        cols = list(zip(*[[*r.figures, r.e2e] for r in self.rows])) or [()] * 5
        heads = (*FIGURES, "e2e s")
        return sum(max([len(h), *map(len, c)]) + NARROW_GAP for h, c in zip(heads, cols))

    def narrow(self) -> Group:
        """Status and rounds under the case's name, the unit in the metric's cell, no note column (the notes
        follow the table), no outer border."""
        table = WrappingTable(title=self.title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                      collapse_padding=True)
        table.add_column("case", overflow="fold", ratio=3)
        table.add_column("metric", overflow="fold", ratio=2)
        for col in (*FIGURES, "e2e s"):
            table.add_column(col, justify="right", no_wrap=True)
        for r in self.rows:
            case = r.case.copy() if isinstance(r.case, Text) else Text(r.case)
            status = self._status(r)
            table.add_row(case + Text("\n") + status if status.plain else case, self._metric(r), *r.figures, r.e2e)
        return Group(table, *self._notes())

    def stacked(self) -> Group:
        """Narrower still: one block of lines per case, every figure with its name (lines wrap between them)."""
        out: list = [self.title]
        for r in self.rows:
            if r.rounds:
                out.append(Text("") + r.case + Text("  ") + self._status(r))
            figures = [f"{name}={value}" for name, value in zip((*FIGURES, "e2e s"), (*r.figures, r.e2e))
                       if value and value != "-"]
            out.append(Text("  ") + self._metric(r) + Text(": " + "  ".join(figures) if figures else ""))
        return Group(*out, *self._notes())

    def __rich_console__(self, console, options):
        wide = self.wide()
        if Measurement.get(console, options.update_width(UNBOUNDED), wide).maximum <= options.max_width:
            yield wide
            return
        # the notes' and the stacked layout's lines wrap also on a console that soft-wraps its lines
        layout = self.narrow() if self.figures_width() + 2 * NARROW_TEXT_MIN <= options.max_width else self.stacked()
        yield from console.render(layout, options.update(no_wrap=False, overflow="fold"))

    def __rich_measure__(self, console, options):
        return Measurement.get(console, options, self.wide())


def _with_spread(case, note: str) -> str:
    """``note``, and after it 'spread > 10% on <node>' for every node whose devices' spread is flagged
    (results.nodefigures), then 'straggler: rank 3 (...) +16.7% over the median probe' where a training case's
    straggler view flagged a rank (results.stragglers)."""
    flagged = [f.node for f in node_figures(case) if f.flagged]
    spread = f"spread > {SPREAD_FLAG_PCT:g}% on {', '.join(flagged)}" if flagged else ""
    return "; ".join(t for t in (note, spread, straggler_note(case)) if t)


def node_figure_lines(summary) -> list:
    """Per node of every case with per-device figures, its headline metric: '<case>: node h1: 412 TFLOP/s node
    aggregate; per device median 103, min 99.1, max 108 TFLOP/s (spread 8.7%, 4 devices)', then 'SPREAD: ...'
    naming the slowest device where the spread is flagged. As (text, style) pairs, control characters escaped."""
    out = []
    for case in summary.cases:
        for f in node_figures(case):
            out.append((for_terminal(f"{case.name}: {figure_line(f)}"), ""))
            if f.reason:
                out.append((for_terminal(f"{'SPREAD' if f.flagged else 'note'}: {case.name}: node {f.node}: "
                                         f"{f.reason}"), "bold yellow" if f.flagged else ""))
    return out


def _reference_note(case) -> str:
    """What the case's reference verdicts say, short: the metrics below reference, or 'passed (within
    reference)'."""
    return case_note(case.verdicts or [])


MAX_CASE_ROWS = 200         # cases in the terminal table; the rest are counted (report.md and summary.json list all)
MAX_FAILURE_LINES = 400     # lines of failures printed by `flagperf report`; the rest are counted
MAX_VERDICT_ROWS = 200      # reasons in the verdict table; the rest are counted (summary.json and report.md list all)


class TerminalReporter(Reporter):
    name = "terminal"
    file_name = None

    def render(self, summary) -> CaseTable:
        rows = []
        cases, left_out = shown_cases(summary, MAX_CASE_ROWS)
        for case in cases:
            st, e2e = case.stats.get("value") or {}, case.stats.get("e2e_time") or {}
            rows.append(_Row(
                for_rich(case.name), for_rich(case.status.value, STYLES.get(case.status, "yellow")),
                f"{len(case.passed_rounds)}/{len(case.rounds)}", for_rich(case.metric or "-"),
                [_num(st.get(k)) for k in FIGURES], for_rich(case.unit or ""), _num(e2e.get("median")),
                for_rich(_with_spread(case, _note(case) or _reference_note(case)))))
            rows += _flagperf_rows(case)
        extra = [(f"... {left_out} more passed case(s)", "report.md and summary.json list every case")] \
            if left_out else []
        return CaseTable(for_rich(f"flagperf {summary.run_id}: {summary.status}"), rows, extra)

    def rankings(self, summary) -> list:
        """each cases: one table per ranking (hosts, then GPUs), outliers in red; [] when there is none."""
        tables = []
        for r in summary.rankings or []:
            better = "higher" if r.higher_is_better is not False else "lower"
            title = f"{r.case}: hosts ranked by {r.metric} ({r.unit or ''}, {better} is better)" \
                if r.metric else f"{r.case}: no host has a result to rank"
            table = WrappingTable(title=for_rich(title), caption=for_rich(f"outlier: {r.rule or RULE}"))
            for col, just in (("rank", "right"), ("host", "left"), ("gpu", "right"), ("value", "right"),
                              ("score", "right"), ("outlier", "left")):
                number = col in ("rank", "value", "score")       # figures are never cut; text folds
                table.add_column(col, justify=just, no_wrap=number,  # type: ignore[arg-type]
                                 overflow="ellipsis" if number else "fold")
            for e in r.entries:
                gpu = "-" if e.gpu is None else str(e.gpu) if e.identity is None else gpu_text(e)
                table.add_row("-" if e.rank is None else str(e.rank), for_rich(e.host), for_rich(gpu), _num(e.value),
                              _num(e.score), "[bold red]OUTLIER[/]" if e.outlier else "no")
            for h in r.failed_hosts:
                table.add_row("-", for_rich(h), "-", "-", "-", "[red]no result (failed)[/]")
            tables.append(table)
        return tables

    def verdicts(self, summary) -> Table | None:
        """The node verdicts: one row per reason (a node without one: one row), reject first; None when the
        summary has none (a run from before verdicts)."""
        verdicts = list(getattr(summary, "verdicts", None) or [])
        if not verdicts:
            return None
        counts = {k: sum(1 for v in verdicts if v.verdict == k) for k in VERDICT_STYLES}
        table = VerdictTable(title=for_rich("node verdicts: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n)),
                      caption="reject: send back or drain; degraded: usable, with the reasons shown; the run exits 1 "
                              "when a node is rejected")
        for col in ("node", "verdict", "source", "severity", "case", "subject", "detail", "remedy"):
            table.add_column(col, overflow="fold")
        rows = left = 0
        order = {"reject": 0, "degraded": 1, "accept": 2}
        for v in sorted(verdicts, key=lambda v: order.get(v.verdict, 3)):      # stable: the hosts' order within
            style = VERDICT_STYLES.get(v.verdict, "")
            for i, r in enumerate(v.reasons or [None]):
                if rows >= MAX_VERDICT_ROWS:
                    left += 1
                    continue
                rows += 1
                head = [for_rich(v.host), for_rich(v.verdict, style)] if i == 0 else ["", ""]
                if r is None:
                    table.add_row(*head, "-", "-", "", "", "no reason: every check it went through passed", "")
                    continue
                table.add_row(*head, for_rich(r.source), for_rich(r.severity, VERDICT_STYLES.get(r.severity, "")),
                              for_rich(r.case or ""), for_rich(r.subject), for_rich(r.detail), for_rich(r.remedy))
        if left:
            table.add_row(f"... {left} more reason(s)", "", "", "", "", "", "summary.json and report.md list every one",
                          "")
        return table

    def node_figure_lines(self, summary) -> list:
        """The nodes' figures and flagged spreads (module function node_figure_lines)."""
        return node_figure_lines(summary)

    def nccl_tables(self, summary) -> list:
        """nccl-tests' tables of the collectives and p2p cases (the module's nccl_tables)."""
        return nccl_tables(summary)

    def outlier_lines(self, summary) -> list:
        """'OUTLIER: <case>: host h3: 41.2 TFLOP/s, score 12.3' for every flagged host or GPU."""
        rankings = summary.rankings or []
        units = {r.case: r.unit for r in rankings}
        return [for_terminal(f"OUTLIER: {describe_outlier(case, e, units.get(case))}")
                for case, e in outliers(rankings)]

    def failure_lines(self, summary) -> list:
        """Every failed round with its reason and last lines, for ``flagperf report``."""
        out = []
        for h in summary.host_checks:
            out.append(for_terminal(f"host {h.get('host')}: {h.get('outcome')}: {h.get('detail')}; {h.get('remedy')}"))
        for case in summary.cases:
            for r in case.rounds:
                if r.failure:
                    out.append(for_terminal(f"{case.name} round {r.round}: {r.status}: {r.failure.reason}"))
                    out += [f"    | {for_terminal(line)}" for line in r.failure.last_lines or ()]
            out += _reference_lines(case)
            if len(out) > MAX_FAILURE_LINES:
                break
        if len(out) > MAX_FAILURE_LINES:
            return out[:MAX_FAILURE_LINES] + [f"... more failures left out (the first {MAX_FAILURE_LINES} lines are "
                                              f"shown; report.md lists every one)"]
        return out


def _reference_lines(case) -> list:
    """A line for every verdict of the case that is not ok: metric, measured, expected, tolerance, source."""
    return [for_terminal(f"{case.name}: {case.status}: {describe(v)}; source {v.source}")
            for v in case.verdicts or [] if not v.ok]


MAX_NCCL_TABLES = 16        # nccl-tests' tables printed; the rest are counted (report.md shows every one)
NCCL_HEADERS = (("size", "(B)"), ("count", "(elements)"), ("type", ""), ("redop", ""), ("root", ""),
                ("time", "(us)"), ("algbw", "(GB/s)"), ("busbw", "(GB/s)"), ("#wrong", ""))


def nccl_tables(summary) -> list:
    """nccl-tests' view of the collectives and p2p cases (flagperf.results.ncclview): per op a table with its
    columns, sizes ascending, its average bus bandwidth in the caption; within 80 columns."""
    tables = [t for case in summary.cases for t in ncclview.op_tables(case)]
    out: list = []
    for t in tables[:MAX_NCCL_TABLES]:
        table = Table(title=for_rich(ncclview.title(t)), caption=for_rich(ncclview.footer(t)), box=None,
                      pad_edge=False, padding=(0, 1))
        for head, unit in NCCL_HEADERS:
            table.add_column(f"{head}\n{unit}" if unit else head, justify="left" if head == "type" else "right",
                             no_wrap=True)
        for row in t.rows:
            table.add_row(*(for_rich(c) for c in ncclview.row_cells(row)))
        out.append(table)
    if len(tables) > MAX_NCCL_TABLES:
        out.append(Text(f"... {len(tables) - MAX_NCCL_TABLES} more nccl-tests table(s) in report.md"))
    return out

