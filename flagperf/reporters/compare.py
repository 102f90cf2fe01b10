"""The terminal form of a run comparison (``flagperf compare``): a rich table, then one line per finding.

Case names, metrics, units, notes and run ids come from summary.json files: they reach the terminal through
:mod:`flagperf.untrusted` (rich ``Text`` cells, lines with their control characters shown escaped).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from flagperf.reporters.terminal import _num
from flagperf.results.interpret import Status
from flagperf.results.compare import (BASIS_P, CHANGED, IMPROVEMENT, INCOMPARABLE, NOISE, REGRESSION, TEST_NONE,
                                      UNCHANGED, Comparison)
from flagperf.untrusted import for_rich, for_terminal

VERDICT_STYLES = {REGRESSION: "bold red", IMPROVEMENT: "green", UNCHANGED: "dim", NOISE: "dim",
                  CHANGED: "yellow", INCOMPARABLE: "yellow"}


def _pct(v, signed=True) -> str:
    if v is None:
        return "-"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def _better(m) -> str:
    return "?" if m.higher_is_better is None else ("higher" if m.higher_is_better else "lower")


def _evidence(m) -> str:
    """The test and its p-value, or (n<3) the spread the change was held against."""
    spread = f"spread {_pct(m.spread_pct, signed=False)}"
    if m.test == TEST_NONE:
        return f"{TEST_NONE}; {spread}"
    test = f"{m.test.replace('mann-whitney-u', 'MWU')} p={m.p_value:.3g}"
    return test if m.basis == BASIS_P else f"{test} (n too small); {spread}"


MAX_COMPARED_CASES = 200        # cases in the table: those with a regression or a note first; the rest are counted
MAX_LINES = 400                 # lines after the table; the rest are counted (--json lists everything)


def _shown(cmp: Comparison) -> tuple:
    """(the cases the table shows, in order, and how many it leaves out): cases with a regression, a changed
    status or a note first."""
    regressed = {id(c) for c, _ in cmp.regressions}

    def remarkable(case) -> bool:
        return id(case) in regressed or bool(case.note) or case.status_a != case.status_b or \
            any(m.note for m in case.metrics) or bool(case.setup_differences)
    ordered = [c for c in cmp.cases if remarkable(c)] + [c for c in cmp.cases if not remarkable(c)]
    if len(ordered) <= MAX_COMPARED_CASES:
        return list(cmp.cases), 0
    keep = {id(c) for c in ordered[:MAX_COMPARED_CASES]}
    return [c for c in cmp.cases if id(c) in keep], len(ordered) - MAX_COMPARED_CASES


def comparison_table(cmp: Comparison) -> Table:
    """One row per case (its name, and the statuses when not both passed), then one row per metric; at most
    MAX_COMPARED_CASES cases, those with a regression, a changed status or a note first."""
    n = len(cmp.regressions)
    table = Table(title=for_rich(f"flagperf compare A {cmp.a['run_id']} vs B {cmp.b['run_id']}: "
                                 f"{n} regression{'' if n == 1 else 's'} (threshold {cmp.threshold_pct:g}%, "
                                 f"alpha {cmp.alpha:g})"))
    for col, just in (("case / metric", "left"), ("unit", "left"), ("better", "left"), ("n A/B", "right"),
                      ("median A", "right"), ("median B", "right"), ("change", "right"), ("test", "left"),
                      ("verdict", "left")):
        table.add_column(col, justify=just, no_wrap=col == "case / metric")  # type: ignore[arg-type]
    cases, left_out = _shown(cmp)
    for i, case in enumerate(cases):
        if i:
            table.add_section()
        statuses = "" if case.status_a == case.status_b == Status.PASSED else f"A {case.status_a}, B {case.status_b}"
        table.add_row(for_rich(case.name, "bold"), "", "", f"{case.rounds_passed_a}/{case.rounds_passed_b}", "", "",
                      "", for_rich(statuses), for_rich(case.note, "yellow") if case.note else "")
        for m in case.metrics:
            style = VERDICT_STYLES.get(m.verdict, "")
            table.add_row(Text("  ") + for_rich(m.metric) + (" (headline)" if m.headline else ""), for_rich(m.unit),
                          _better(m), f"{m.a.n}/{m.b.n}", _num(m.a.median), _num(m.b.median), _pct(m.change_pct),
                          _evidence(m), for_rich(m.verdict, style))
    if left_out:
        table.add_section()
        table.add_row(f"... {left_out} more case(s) without a regression or a note", "", "", "", "", "", "", "",
                      "--json lists every one")
    return table


def comparison_lines(cmp: Comparison) -> list:
    """Cases on one side only, cases not compared, every regression, and the counts, one line each."""
    t = for_terminal
    out = []
    for side, cases in (("A", cmp.only_in_a), ("B", cmp.only_in_b)):
        if cases:
            out.append(f"only in {side} ({t(cmp.a['run_id'] if side == 'A' else cmp.b['run_id'])}): "
                       + ", ".join(f"{t(c['name'])} ({t(c['key'])})" for c in cases))
    for case in cmp.cases:
        if case.note:
            out.append(f"{t(case.name)}: {t(case.note)}")
        if case.setup_differences:      # another NCCL, another case env: the numbers may differ for that reason
            out.append(f"{t(case.name)}: setup differs: {t('; '.join(case.setup_differences))}")
        out += [f"{t(case.name)} {t(m.metric)}: {m.verdict}: {t(m.note)}" for m in case.metrics if m.note]
    for case, m in cmp.regressions:
        out.append(f"REGRESSION {t(case.name)} {t(m.metric)}: {_num(m.a.median)} -> {_num(m.b.median)} {t(m.unit)} "
                   f"({_pct(m.change_pct)}, {_evidence(m)})")
    if len(out) > MAX_LINES:      # the regressions stay at the end, before the counts
        regressions = [line for line in out if line.startswith("REGRESSION ")]
        rest = [line for line in out if not line.startswith("REGRESSION ")]
        keep_r = regressions[:MAX_LINES // 2]
        keep = rest[:MAX_LINES - len(keep_r)]
        dropped = len(out) - len(keep) - len(keep_r)
        out = keep + keep_r + [f"... {dropped} more line(s) left out (flagperf compare --json lists everything)"]
    c = cmp.counts()
    out.append(f"{c['cases_compared']} case(s) compared, {c['metrics_compared']} metric(s): "
               f"{c[REGRESSION]} regression(s), {c[IMPROVEMENT]} improvement(s), {c[UNCHANGED]} unchanged, "
               f"{c[NOISE]} within noise, {c[CHANGED]} changed (direction unknown), {c[INCOMPARABLE]} incomparable")
    return out
