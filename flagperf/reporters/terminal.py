"""The terminal table of a run (rich), and its failures with their last lines.

Every text that came from a host, a result file or a config reaches the terminal through
:mod:`flagperf.untrusted`: table cells as rich ``Text`` (never markup), lines with their control characters shown
escaped.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from flagperf.references import case_note, describe
from flagperf.reporters.base import Reporter, shown_cases
from flagperf.results.interpret import Status
from flagperf.results.slownodes import RULE, outliers
from flagperf.results.slownodes import describe as describe_outlier
from flagperf.results.slownodes import gpu_text
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
        rows.append(["", "", "", Text("  ") + for_rich(name), _num(st.get("median")), _num(st.get("mean")),
                     _num(st.get("min")), _num(st.get("max")), for_rich(units.get(name) or ""), "", ""])
    if len(names) > FLAGPERF_ROWS_MAX:
        rows.append(["", "", "", f"  ... {len(names) - FLAGPERF_ROWS_MAX} more (report.md)", "", "", "", "", "",
                     "", ""])
    return rows


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

    def render(self, summary) -> Table:
        table = Table(title=for_rich(f"flagperf {summary.run_id}: {summary.status}"))
        for col, just in (("case", "left"), ("status", "left"), ("rounds", "right"), ("metric", "left"),
                          ("median", "right"), ("mean", "right"), ("min", "right"), ("max", "right"),
                          ("unit", "left"), ("e2e s", "right"), ("note", "left")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        cases, left_out = shown_cases(summary, MAX_CASE_ROWS)
        for case in cases:
            st, e2e = case.stats.get("value") or {}, case.stats.get("e2e_time") or {}
            table.add_row(
                for_rich(case.name), for_rich(case.status.value, STYLES.get(case.status, "yellow")),
                f"{len(case.passed_rounds)}/{len(case.rounds)}", for_rich(case.metric or "-"),
                _num(st.get("median")), _num(st.get("mean")), _num(st.get("min")), _num(st.get("max")),
                for_rich(case.unit or ""), _num(e2e.get("median")), for_rich(_note(case) or _reference_note(case)))
            for row in _flagperf_rows(case):
                table.add_row(*row)
        if left_out:
            table.add_row(f"... {left_out} more passed case(s)", "", "", "", "", "", "", "", "", "",
                          "report.md and summary.json list every case")
        return table

    def rankings(self, summary) -> list:
        """each cases: one table per ranking (hosts, then GPUs), outliers in red; [] when there is none."""
        tables = []
        for r in summary.rankings or []:
            better = "higher" if r.higher_is_better is not False else "lower"
            title = f"{r.case}: hosts ranked by {r.metric} ({r.unit or ''}, {better} is better)" \
                if r.metric else f"{r.case}: no host has a result to rank"
            table = Table(title=for_rich(title), caption=for_rich(f"outlier: {r.rule or RULE}"))
            for col, just in (("rank", "right"), ("host", "left"), ("gpu", "right"), ("value", "right"),
                              ("score", "right"), ("outlier", "left")):
                table.add_column(col, justify=just)  # type: ignore[arg-type]
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
        table = Table(title=for_rich("node verdicts: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n)),
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
