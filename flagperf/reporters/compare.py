"""The forms of a run comparison (``flagperf compare``): in the terminal a rich table, then one line per finding;
and a self-contained HTML page (``compare-<A>-<B>.html``), the two runs side by side.

Case names, metrics, units, notes and run ids come from summary.json files: they reach the terminal through
:mod:`flagperf.untrusted` (rich ``Text`` cells, lines with their control characters shown escaped) and the page
through :func:`flagperf.untrusted.for_html`. The page has no script and loads nothing: report.html's
Content-Security-Policy (``default-src 'none'``, no script-src: no script runs).
"""

from __future__ import annotations

import re

from rich.table import Table
from rich.text import Text

from flagperf.reporters.html import CSP
from flagperf.reporters.terminal import _num
from flagperf.results.interpret import Status
from flagperf.results.compare import (BASIS_P, CHANGED, IMPROVEMENT, INCOMPARABLE, INSUFFICIENT, NOISE, REGRESSION,
                                      TEST_NONE, UNCHANGED, Comparison, rounds_needed)
from flagperf.untrusted import for_html, for_rich, for_terminal

VERDICT_STYLES = {REGRESSION: "bold red", IMPROVEMENT: "green", UNCHANGED: "dim", NOISE: "dim",
                  INSUFFICIENT: "cyan", CHANGED: "yellow", INCOMPARABLE: "yellow"}


def _pct(v, signed=True) -> str:
    if v is None:
        return "-"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def _better(m) -> str:
    return "?" if m.higher_is_better is None else ("higher" if m.higher_is_better else "lower")


def _test(m) -> str:
    """The test and its p-value; a test that cannot reach alpha at these rounds says so; no test: ``n<3``."""
    if m.test == TEST_NONE:
        return TEST_NONE
    test = f"{m.test.replace('mann-whitney-u', 'MWU')} p={m.p_value:.3g}"
    return test if m.basis == BASIS_P else f"{test} (best p {m.min_p_value:.2g}: n too small)"


def _spreads(m) -> str:
    """Each side's spread, (max - min) / |median|: A's / B's."""
    return f"{_pct(m.a.spread_pct, signed=False)}/{_pct(m.b.spread_pct, signed=False)}"


def _evidence(m) -> str:
    """What the outcome rests on: rounds per side, each side's spread, the test."""
    return f"n {m.a.n}/{m.b.n}, spread {_spreads(m)}, {_test(m)}"


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
                      ("median A", "right"), ("median B", "right"), ("spread A/B", "right"), ("change", "right"),
                      ("test", "left"), ("verdict", "left")):
        table.add_column(col, justify=just, no_wrap=col == "case / metric")  # type: ignore[arg-type]
    cases, left_out = _shown(cmp)
    for i, case in enumerate(cases):
        if i:
            table.add_section()
        statuses = "" if case.status_a == case.status_b == Status.PASSED else f"A {case.status_a}, B {case.status_b}"
        table.add_row(for_rich(case.name, "bold"), "", "", f"{case.rounds_passed_a}/{case.rounds_passed_b}", "", "",
                      "", "", for_rich(statuses), for_rich(case.note, "yellow") if case.note else "")
        for m in case.metrics:
            style = VERDICT_STYLES.get(m.verdict, "")
            table.add_row(Text("  ") + for_rich(m.metric) + (" (headline)" if m.headline else ""), for_rich(m.unit),
                          _better(m), f"{m.a.n}/{m.b.n}", _num(m.a.median), _num(m.b.median), _spreads(m),
                          _pct(m.change_pct), _test(m), for_rich(m.verdict, style))
    if left_out:
        table.add_section()
        table.add_row(f"... {left_out} more case(s) without a regression or a note", "", "", "", "", "", "", "", "",
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
    insufficient = [(case, m) for case in cmp.cases for m in case.metrics if m.verdict == INSUFFICIENT]
    if insufficient:
        least = min(min(m.a.n, m.b.n) for _, m in insufficient)
        need = rounds_needed(cmp.alpha)
        out.append(f"{len(insufficient)} metric(s) changed beyond {cmp.threshold_pct:g}% with insufficient evidence: "
                   f"as few as {least} passed round(s) on a side, and the Mann-Whitney test needs {need} or more on "
                   f"each side to reach alpha {cmp.alpha:g}; run the cases with repeat >= {need} to decide")
    for case, m in cmp.regressions:
        out.append(f"REGRESSION {t(case.name)} {t(m.metric)}: {_num(m.a.median)} -> {_num(m.b.median)} {t(m.unit)} "
                   f"({_pct(m.change_pct)}, {_test(m)}; n {m.a.n}/{m.b.n}, spread {_spreads(m)})")
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
               f"{c[NOISE]} within noise, {c[INSUFFICIENT]} insufficient evidence, {c[CHANGED]} changed (direction "
               f"unknown), {c[INCOMPARABLE]} incomparable")
    return out


# ------------------------------------------------------------------------------------------------ the page
HTML_VERDICT_CLASSES = {REGRESSION: "regression", IMPROVEMENT: "improvement", UNCHANGED: "quiet", NOISE: "quiet",
                        INSUFFICIENT: "insufficient", CHANGED: "changed", INCOMPARABLE: "changed"}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+|\.{2,}")


def _name_part(run_id) -> str:
    """A run id as part of a file name: letters, digits, ``_ . -`` only (anything else, and ``..``, as ``_``), no
    leading dot, at most 80 characters; ``run`` when nothing is left."""
    part = _UNSAFE_NAME.sub("_", str(run_id or "")).lstrip(".")[:80]
    return part or "run"


def html_file_name(cmp: Comparison) -> str:
    """``compare-<A>-<B>.html``, the run ids made safe for a file name."""
    return f"compare-{_name_part(cmp.a.get('run_id'))}-{_name_part(cmp.b.get('run_id'))}.html"


def _h(value) -> str:
    return for_html(value, newlines=False)


def _h_num(v) -> str:
    return _h(_num(v))


def _h_side(side) -> list:
    """A side's cells: rounds, median, min-max, spread."""
    if not side.values:
        return ["0", "-", "-", "-"]
    return [str(side.n), _h_num(side.median), f"{_h_num(min(side.values))} &ndash; {_h_num(max(side.values))}",
            _h(_pct(side.spread_pct, signed=False))]


def _h_case(case) -> str:
    statuses = "" if case.status_a == case.status_b == Status.PASSED else \
        f' <span class="muted">A {_h(case.status_a)}, B {_h(case.status_b)}</span>'
    out = (f'<h2>{_h(case.name)}{statuses}</h2>\n<p class="muted">key <code>{_h(case.key)}</code>; passed rounds '
           f"A {case.rounds_passed_a}, B {case.rounds_passed_b}</p>\n")
    if case.note:
        out += f'<p class="note">{_h(case.note)}</p>\n'
    if case.setup_differences:
        out += "<p class=\"note\">setup differs: " + "; ".join(_h(d) for d in case.setup_differences) + "</p>\n"
    if not case.metrics:
        return out
    out += ('<table>\n<thead><tr><th rowspan="2">metric</th><th rowspan="2">unit</th><th rowspan="2">better</th>'
            '<th colspan="4" class="side">A</th><th colspan="4" class="side">B</th><th rowspan="2" class="num">change'
            '</th><th rowspan="2">test</th><th rowspan="2">outcome</th></tr>\n<tr>'
            + '<th class="num">rounds</th><th class="num">median</th><th class="num">min &ndash; max</th>'
              '<th class="num">spread</th>' * 2 + "</tr></thead>\n<tbody>\n")
    for m in case.metrics:
        cls = HTML_VERDICT_CLASSES.get(m.verdict, "")
        cells = [_h(m.metric) + (' <span class="muted">(headline)</span>' if m.headline else ""), _h(m.unit),
                 _h(_better(m))]
        cells = [f"<td>{c}</td>" for c in cells]
        cells += [f'<td class="num">{c}</td>' for c in _h_side(m.a) + _h_side(m.b) + [_h(_pct(m.change_pct))]]
        note = f'<br><span class="muted">{_h(m.note)}</span>' if m.note else ""
        cells += [f"<td>{_h(_test(m))}</td>", f'<td class="outcome {cls}">{_h(m.verdict)}{note}</td>']
        out += f'<tr class="{cls}">' + "".join(cells) + "</tr>\n"
    return out + "</tbody>\n</table>\n"


def comparison_html(cmp: Comparison) -> str:
    """The comparison as one self-contained page: the two runs, the rule, the findings (the text form's lines),
    then per case a table with A and B side by side (rounds, median, min-max, spread), the change, the test and
    the outcome, coloured. The same cases as the terminal table (at most MAX_COMPARED_CASES)."""
    n = len(cmp.regressions)
    head = f"{n} regression{'' if n == 1 else 's'}" if n else "no regression"
    need = rounds_needed(cmp.alpha)
    runs = "".join(f"<tr><th>{side}</th><td>{_h(d.get('run_id'))}</td><td>{_h(d.get('status'))}</td>"
                   f"<td><code>{_h(d.get('run_dir'))}</code></td></tr>\n" for side, d in (("A", cmp.a), ("B", cmp.b)))
    body = (f'<h1>flagperf compare: <span class="{"regression" if n else "improvement"} badge">{_h(head)}</span></h1>'
            f'\n<table class="kv">\n<thead><tr><th>run</th><th>id</th><th>status</th><th>directory</th></tr></thead>'
            f"\n<tbody>\n{runs}</tbody>\n</table>\n"
            f'<p class="muted">B against A. A change counts beyond {cmp.threshold_pct:g}% (B/A or A/B). The outcome '
            f"rests on the rounds of each side: with {need} or more passed rounds on each side the two-sided "
            f"Mann-Whitney U test decides at alpha {cmp.alpha:g}; with fewer it cannot reach alpha, and a change "
            f"beyond the threshold is <em>insufficient evidence</em>, never a regression. Spread: (max &minus; min) / "
            f"median of a side's passed rounds.</p>\n")
    lines = comparison_lines(cmp)
    body += "<ul class=\"lines\">\n" + "".join(f"<li>{_h(line)}</li>\n" for line in lines) + "</ul>\n"
    cases, left_out = _shown(cmp)
    body += "".join(_h_case(case) for case in cases)
    if left_out:
        body += (f'<p class="note">... {left_out} more case(s) without a regression or a note '
                 f"(flagperf compare --json lists every one)</p>\n")
    title = f"flagperf compare {cmp.a.get('run_id')} vs {cmp.b.get('run_id')}: {head}"
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_h(title)}</title>\n<style>{COMPARE_STYLE}</style>\n</head>\n<body>\n{body}"
            f"<footer>flagperf compare &middot; {_h(cmp.a.get('run_id'))} vs {_h(cmp.b.get('run_id'))}</footer>\n"
            f"</body>\n</html>\n")


COMPARE_STYLE = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 0 auto; max-width: 1360px;
       padding: 16px 24px; color: #1f2328; font-size: 14px; }
h1 { font-size: 22px; margin: 8px 0 12px; } h2 { font-size: 17px; margin-top: 26px; border-bottom: 1px solid #d0d7de;
padding-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0; } th, td { border: 1px solid #d0d7de; padding: 3px 8px;
text-align: left; vertical-align: top; } th { background: #f6f8fa; } th.side { text-align: center; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { background: #f6f8fa; padding: 0 3px; } .muted { color: #59636e; } .note { color: #9a6700; }
.badge { color: white; border-radius: 10px; padding: 1px 10px; font-size: 15px; }
.badge.regression { background: #cf222e; } .badge.improvement { background: #1a7f37; }
td.outcome { font-weight: bold; white-space: nowrap; }
td.regression { color: #cf222e; } tr.regression td { background: #ffebe9; }
td.improvement { color: #1a7f37; } td.insufficient { color: #0969da; } td.changed { color: #9a6700; }
td.quiet { color: #59636e; font-weight: normal; }
ul.lines li { margin: 2px 0; }
footer { margin-top: 30px; color: #59636e; font-size: 12px; }
"""
