"""report.html: one light, self-contained page per run, its charts inline SVG drawn in Python, with no script.

Why no script: a report is mailed, attached to a ticket or opened in a file previewer alone, and mail clients
and previewers strip scripts; charts that are SVG elements of the page still draw there. Without a script the
page's Content-Security-Policy needs no script-src at all (``default-src 'none'`` forbids every script, every
load and every connection; only inline styles and data: images are admitted), and the page stays small: a run
with several cases and monitor series is well under 1 MB, where plotly.js alone is 4.6 MB (its smallest
cartesian bundle is over 1 MB). The charts (:mod:`flagperf.reporters.svg`) have axes with units, legends, bands,
reference lines and hover text (``<title>``). ``flagperf report --html --interactive`` writes the same figures
as plotly charts into ``report-interactive.html`` (:mod:`flagperf.reporters.interactive`) for zooming.

Made from the summary and the monitor series it names (``series.json``, written once from the node directories by
:mod:`flagperf.results.series`), so ``flagperf report`` can make it again. Top first: the run's header; what the
hardware delivered (every referenced figure against its reference, per node and per GPU where the run measured
them, coloured within / below / above, and the node verdicts); the case table; per case the headline metric per
round with the reference line and band, nccl-tests' tables with a bus bandwidth curve for collectives and p2p
(:mod:`flagperf.results.ncclview`), the node figures (:mod:`flagperf.results.nodefigures`) and per round and node
the monitor charts (host sensors; per accelerator field one chart with every GPU of the node; utilisation from 0
to 100 %; throttle reasons decoded into named bands; energy per measured window as joules and average power); then
the slow-node rankings. A run without a readable series.json gets no monitor charts. docs/results.md.

Nothing from a host is trusted: every text that came from a host (names, log lines, environment, reasons) is
HTML-escaped with its control characters made visible (:func:`flagperf.untrusted.for_html`), in the tables and
inside the charts alike.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from flagperf.references import case_note, tolerance_text
from flagperf.reporters import svg
from flagperf.reporters.base import Reporter, shown_cases
from flagperf.results.interpret import Status
from flagperf.results.monitors import THROTTLE_REASONS
from flagperf.results.ncclview import op_tables
from flagperf.results.nodefigures import node_figures
from flagperf.results.series import NodeSeries, load_series
from flagperf.results.slownodes import gpu_text
from flagperf.results.stragglers import case_stragglers
from flagperf.untrusted import for_html
from flagperf_contract import write_atomic

MAX_CASE_SECTIONS = 200         # cases with a section of charts; the others are in the table only
MAX_GPU_ROWS = 10               # accelerator fields charted per node (known ones first)
# Accelerator fields, in chart order, with their labels (unit last); other numeric fields follow. energy_j (a
# rising counter) is shown as energy per measured window instead, throttle fields as named bands.
GPU_FIELDS = (("power_w", "power W"), ("sm_clock_mhz", "SM clock MHz"), ("mem_clock_mhz", "memory clock MHz"),
              ("util_pct", "util %"), ("mem_used_mib", "memory used MiB"), ("temp_c", "temperature °C"))
NOT_CHARTED = ("energy_j",)
PHASES = (("INIT_START", "INIT_END", "#9ca3af", "init"), ("RUN_START", "RUN_END", "#2ca02c", "run"))
STATUS_COLORS = {Status.PASSED: "#1a7f37", Status.FAILED: "#cf222e", Status.ERROR: "#cf222e",
                 Status.TIMEOUT: "#cf222e", Status.BELOW_REFERENCE: "#bc4c00", Status.SKIPPED: "#9a6700",
                 Status.INTERRUPTED: "#8250df", Status.NOT_RUN: "#6e7781"}
PALETTE = svg.PALETTE
# Colours of a figure against its reference.
WITHIN_COLOR, BELOW_COLOR, ABOVE_COLOR, PLAIN_COLOR = "#1a7f37", "#cf222e", "#bc4c00", "#1f77b4"
# The page's Content-Security-Policy: nothing but its own inline styles and data: images (no script-src: every
# script is refused by default-src); form-action and base-uri do not fall back to default-src.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"
PAGE_POINTS = 48_000            # line points of all monitor charts of a page together (keeps it small)
MIN_COLUMNS = 20                # ... and at least this many x columns per monitor chart
MONITOR_WIDTH = 640             # width of a monitor chart (two side by side on a wide screen)


class ReportError(OSError):
    """report.html could not be made (a chart that failed); write_reports reports it."""


def esc(value) -> str:
    """Any value as text safe inside HTML (and inside plotly's labels, which read a subset of HTML)."""
    return for_html(value)


def num(v, digits=4) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        return f"{v:.{digits}g}"
    return esc(v)


def _number(v):
    """v when it is a finite int or float (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def field_of(obj, *names, default=None):
    """The first of ``names`` that ``obj`` (a dict or an object) has and that is not None."""
    for name in names:
        v = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if v is not None:
            return v
    return default


def status_text(status: Status) -> str:
    return status.value


def badge(status: Status) -> str:
    return f'<span class="badge" style="background:{STATUS_COLORS.get(status, "#6e7781")}">{esc(status.value)}</span>'


# ----------------------------------------------------------------------------------------------- verdicts
def verdicts_of(case) -> list:
    return list(case.verdicts or [])


NODE_VERDICT_COLORS = {"accept": "#1a7f37", "degraded": "#9a6700", "reject": "#cf222e"}


def verdict_badge_of(verdict: str) -> str:
    """A node verdict or a reason's severity as a badge."""
    return f'<span class="badge" style="background:{NODE_VERDICT_COLORS.get(verdict, "#6e7781")}">{esc(verdict)}</span>'


def verdict_band(v) -> tuple:
    """(expected, low, high) of a reference verdict (flagperf.references.verdict): the range in which its result
    is ``within``. ``tolerance`` is the shortfall allowed, ``better_tolerance`` (when set) the excess allowed;
    without it the range ends at ``tolerance`` on the better side too (beyond it: ``above``, flagged only)."""
    expected = _number(v.expected)
    tol = _number(v.tolerance)
    if expected is None or tol is None:
        return expected, None, None
    better = _number(v.better_tolerance)
    better = tol if better is None else better
    worse_side, better_side = abs(expected) * tol, abs(expected) * better
    if v.higher_is_better is False:
        return expected, expected - better_side, expected + worse_side
    return expected, expected - worse_side, expected + better_side


def verdict_result(v) -> str:
    """The verdict's result (within, below, above, not_measured, unit_mismatch) for its badge."""
    return str(v.result or "-")


def verdict_badge(v) -> str:
    result, ok = verdict_result(v), v.ok
    color = {"within": "#1a7f37", "above": "#bc4c00", "not_measured": "#6e7781"}.get(result, "#cf222e")
    if ok is False:
        color = "#cf222e"
    return f'<span class="badge" style="background:{color}">{esc(result)}</span>'


def _tolerance_text(v) -> str:
    try:
        return esc(tolerance_text(v))
    except (TypeError, ValueError):
        return num(v.tolerance)


def _case_note(verdicts) -> str:
    try:
        return esc(case_note(verdicts))
    except (TypeError, ValueError, AttributeError):
        return ", ".join(esc(verdict_result(v)) for v in verdicts)


# ----------------------------------------------------------------------------------------------- the page
def _against(value, v) -> str:
    """The colour of ``value`` against a reference verdict's range: within, below (worse), above (better)."""
    expected, low, high = verdict_band(v)
    value = _number(value)
    if value is None or low is None or high is None:
        return PLAIN_COLOR
    if low <= value <= high:
        return WITHIN_COLOR
    worse = value < low if v.higher_is_better is not False else value > high
    return BELOW_COLOR if worse else ABOVE_COLOR


AGAINST_LEGEND = [(WITHIN_COLOR, "within tolerance"), (BELOW_COLOR, "below (worse than) the reference"),
                  (ABOVE_COLOR, "above the reference")]


def _ref_line(v) -> svg.RefLine | None:
    expected, low, high = verdict_band(v)
    if expected is None:
        return None
    return svg.RefLine(expected, f"reference {num(expected)}", WITHIN_COLOR, low, high)


def _unit_label(name, unit) -> str:
    return f"{name} ({unit})" if unit else str(name)


def _throttle_spans(xs, ys, field: str) -> dict:
    """{reason name: [(x0, x1)]} of a throttle field's samples: ``throttle_mask`` decoded bit by bit into NVML's
    reason names, any other ``throttle_<name>`` field as the reason <name> where it is not zero. A span runs from
    the sample that shows the reason to the next sample."""
    names: list = []
    if field == "throttle_mask":
        names = [(bit, name) for bit, name in THROTTLE_REASONS]
    else:
        names = [(None, field.removeprefix("throttle_").removeprefix("throttled_") or field)]
    out: dict = {}
    for i, (x, y) in enumerate(zip(xs, ys)):
        nxt = xs[i + 1] if i + 1 < len(xs) else x
        for bit, name in names:
            on = (int(y) & bit) != 0 if bit is not None else y != 0
            if not on:
                continue
            spans = out.setdefault(name, [])
            if spans and spans[-1][1] >= x:
                spans[-1] = (spans[-1][0], max(spans[-1][1], nxt))
            else:
                spans.append((x, nxt))
    return out


class HtmlReporter(Reporter):
    name = "html"
    file_name = "report.html"

    def render(self, summary) -> str:
        """The page of the summary, with the monitor series it names in its own run directory
        (``summary.run_dir``)."""
        return self.page(summary, load_series(summary, summary.run_dir or "."))

    def write(self, summary, run_dir) -> Path:
        """Write report.html into ``run_dir`` atomically, with the monitor series the summary names there (a run
        directory that was moved keeps its charts)."""
        try:
            text = self.page(summary, load_series(summary, run_dir))
        except OSError:
            raise
        except Exception as exc:    # a report never fails a run: the error goes to the run log instead
            raise ReportError(f"cannot render: {type(exc).__name__}: {exc}") from exc
        path = Path(run_dir) / str(self.file_name)
        write_atomic(path, text)
        return path

    def page(self, summary, series: dict | None) -> str:
        """report.html of the summary; ``series`` ({(case key, round, node): NodeSeries}, from
        :func:`~flagperf.results.series.load_series`) gives the monitor charts, None: a page without them."""
        self.figures: list = []         # (element id, chart description) of the last page, in page order
        shown = {id(c) for c in shown_cases(summary, MAX_CASE_SECTIONS)[0]}
        traces = sum(1 for ns in (series or {}).values() for t in ns.traces
                     if t.key not in NOT_CHARTED and "throttl" not in t.key)
        self._columns = max(MIN_COLUMNS, min(MONITOR_WIDTH, PAGE_POINTS // max(1, 2 * traces)))
        body = self._header(summary) + self._delivered(summary) + self._cases_table(summary)
        for ci, case in enumerate(summary.cases):
            if id(case) in shown:
                body += self._case(ci, case, series or {})
        if len(shown) < len(summary.cases):
            body += (f'<section><p class="note">{len(summary.cases) - len(shown)} more passed case(s) are in the '
                     f'table above but have no section here (report.md and summary.json list every one).</p>'
                     f'</section>\n')
        body += self._rankings(summary)
        title = f"flagperf {summary.run_id}: {status_text(summary.status)}"
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f'<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}'
                f'<footer>flagperf {esc(summary.flagperf_version)} &middot; {esc(summary.run_id)} &middot; '
                f'{len(self.figures)} chart(s)</footer>\n</body>\n</html>\n')

    # --- pieces ------------------------------------------------------------------------------------------
    def _figure(self, chart, monitor: bool = False) -> str:
        ident = f"chart{len(self.figures) + 1}"
        self.figures.append((ident, chart))
        return svg.render(chart, self._columns if monitor else None, ident) + "\n"

    def _header(self, s) -> str:
        rows = [("status", badge(s.status) + (" <strong>interrupted</strong> (SIGINT or SIGTERM)"
                                              if s.interrupted else "")),
                ("started", esc(s.started)), ("finished", esc(s.finished or "-")),
                ("duration", f"{num(s.duration_s)} s"),
                ("hosts", f"{len(s.hosts)}: " + ", ".join(f"<code>{esc(h)}</code>" for h in s.hosts)),
                ("vendor / runtime / backend", f"{esc(s.vendor)} / {esc(s.runtime)} / {esc(s.backend or '-')}"),
                ("flagperf", esc(s.flagperf_version)), ("run directory", f"<code>{esc(s.run_dir)}</code>")]
        out = f"<header>\n<h1>flagperf {esc(s.run_id)}</h1>\n<table class=\"kv\">\n"
        out += "".join(f"<tr><th>{k}</th><td>{v}</td></tr>\n" for k, v in rows) + "</table>\n</header>\n"
        if s.host_checks:
            out += "<section>\n<h2>Hosts that failed their check</h2>\n" + _table(
                ["host", "outcome", "detail", "remedy"],
                [[esc(field_of(h, "host")), esc(field_of(h, "outcome")), esc(field_of(h, "detail")),
                  esc(field_of(h, "remedy"))] for h in s.host_checks]) + "</section>\n"
        return out

    # --- what the hardware delivered ------------------------------------------------------------------------
    def _delivered(self, s) -> str:
        """Every referenced figure against its reference (per case; per host and per GPU where the run ranked
        them; per device from the node figures), coloured, then the node verdicts."""
        rows, charts = [], ""
        for ci, c in enumerate(s.cases):
            for v in verdicts_of(c):
                expected, low, high = verdict_band(v)
                dev = _number(v.deviation)
                color = _against(v.measured, v) if v.result != "not_measured" else "#6e7781"
                measured = num(v.measured) + (f" {esc(v.measured_unit)}" if v.measured_unit is not None else "")
                rows.append([f'<a href="#case{ci}">{esc(c.name)}</a>', esc(v.metric or "-"),
                             f'<span style="color:{color};font-weight:bold">{measured}</span>', num(expected),
                             f"{num(low)} … {num(high)}" if low is not None else "-",
                             "-" if dev is None else f"{dev * 100:+.3g}%", esc(v.unit), verdict_badge(v)])
            charts += self._node_figures(c)
        rk_charts = "".join(self._delivered_ranking(s, rk) for rk in (s.rankings or []))
        verdicts = self._node_verdicts(s)
        if not rows and not charts and not rk_charts and not verdicts:
            return ""
        out = '<section id="delivered">\n<h2>What the hardware delivered</h2>\n'
        if rows:
            out += ('<p class="muted">Each referenced metric: the median of the passed rounds against its reference '
                    'figure and the range its tolerance allows.</p>\n' + _table(
                        ["case", "metric", "measured (median)", "reference", "within", "deviation", "unit",
                         "result"], rows, num_cols=(2, 3, 5)))
        elif not charts and not rk_charts:
            out += '<p class="muted">No reference figure applies to this run\'s cases: see the cases below.</p>\n'
        out += f'<div class="charts">{rk_charts}{charts}</div>\n' if rk_charts or charts else ""
        return out + verdicts + "</section>\n"

    def _delivered_ranking(self, s, rk) -> str:
        """An each case's hosts and GPUs side by side, coloured against the case's reference for the metric."""
        case = next((c for c in s.cases if c.name == rk.case or c.key == rk.case), None)
        ref = next((v for v in verdicts_of(case) if v.metric == rk.metric), None) if case else None
        out = ""
        for what, entries in (("host", [e for e in rk.entries if e.gpu is None]),
                              ("GPU", [e for e in rk.entries if e.gpu is not None])):
            bars = []
            for e in entries:
                if _number(e.value) is None:
                    continue
                label = str(e.host) if e.gpu is None else f"{e.host} gpu {e.gpu}"
                # a host's figure is the case's own (against the reference); a GPU's is its share of it
                against = ref if e.gpu is None else None
                color = BELOW_COLOR if e.outlier else _against(e.value, against) if against else PLAIN_COLOR
                bars.append(svg.Bar(label, e.value, color, f"{label}: {num(e.value)} {rk.unit or ''}"
                                    + (" (outlier)" if e.outlier else "")))
            if not bars:
                continue
            line = _ref_line(ref) if ref is not None and what == "host" else None
            refs = [line] if line is not None else []
            if _number(rk.median) is not None and what == "host":
                refs.append(svg.RefLine(rk.median, f"median {num(rk.median)}", "#7f7f7f", dash=True))
            legend = AGAINST_LEGEND if line is not None else [(PLAIN_COLOR, "measured"), (BELOW_COLOR, "outlier")]
            out += self._figure(svg.BarChart(f"{rk.case}: {rk.metric} per {what}", _unit_label(rk.metric, rk.unit),
                                             bars, refs, legend=legend))
        return out

    def _node_figures(self, c) -> str:
        """The case's node figures (flagperf.results.nodefigures): per node its devices side by side, against the
        case's reference for that metric, and a table of the node's aggregate and spread."""
        figures = node_figures(c)
        if not figures:
            return ""
        out, rows = "", []
        for f in figures:
            ref = next((v for v in verdicts_of(c) if v.metric == f.metric), None)
            bars = [svg.Bar(f"{f.node} gpu {rank}", value, _against(value, ref) if ref is not None else PLAIN_COLOR,
                            f"{f.node} local rank {rank}: {num(value)} {f.unit}")
                    for rank, value in f.per_device if _number(value) is not None]
            line = _ref_line(ref) if ref is not None else None
            if bars:
                out += self._figure(svg.BarChart(f"{c.name}: {f.metric} per device of {f.node}",
                                                 _unit_label(f.metric, f.unit), bars, [line] if line else [],
                                                 legend=AGAINST_LEGEND if ref is not None else []))
            rows.append([esc(f.node), esc(f.metric), num(f.aggregate) if f.simultaneous else "- (not simultaneous)",
                         num(f.median), num(f.min), num(f.max), f"{num(f.spread_pct, 3)}%", esc(f.unit),
                         '<span class="bad">flagged</span>' if f.flagged else "no"])
        return out + (f'<div class="wide"><p>{esc(c.name)}: node figures (aggregate: the devices\' sum over one '
                      f'simultaneous window)</p>\n' + _table(
                          ["node", "metric", "aggregate", "median", "min", "max", "spread", "unit", "flagged"], rows,
                          num_cols=(2, 3, 4, 5, 6),
                          row_class=lambda r: "outlier" if "flagged<" in r[8] else "") + "</div>")

    def _node_verdicts(self, s) -> str:
        """The node verdicts (results.verdict): a badge per node, then every reason, reject first."""
        verdicts = list(getattr(s, "verdicts", None) or [])
        if not verdicts:
            return ""
        out = '<div id="verdicts">\n<h2>Node verdicts</h2>\n<p>' + " ".join(
            f'<span class="verdict">{esc(v.host)} {verdict_badge_of(v.verdict)}</span>' for v in verdicts) + "</p>\n"
        rows = [[esc(v.host), verdict_badge_of(r.severity), esc(r.source), esc(r.case or ""), esc(r.subject),
                 esc(r.detail), esc(r.remedy)] for v in verdicts for r in v.reasons]
        if rows:
            out += _table(["node", "severity", "source", "case", "subject", "detail", "remedy"], rows,
                          row_class=lambda r: "outlier" if "reject" in r[1] else "")
        else:
            out += "<p>Every node accepted: no reason against any.</p>\n"
        return out + ('<p class="muted">reject: send back or drain; degraded: usable, with these reasons; the run '
                      'exits 1 when a node is rejected.</p>\n</div>\n')

    def _cases_table(self, s) -> str:
        rows = []
        for ci, c in enumerate(s.cases):
            st, e2e = c.stats.get("value") or {}, c.stats.get("e2e_time") or {}
            verdict = _case_note(verdicts_of(c)) or "-"
            note = next((esc(f"round {r.round}: {r.failure.reason or status_text(r.status)}")
                         for r in c.rounds if r.failure), "")
            rows.append([f'<a href="#case{ci}">{esc(c.name)}</a>', badge(c.status),
                         f"{len(c.passed_rounds)}/{len(c.rounds)}", esc(c.metric or "-"), num(st.get("median")),
                         num(st.get("min")), num(st.get("max")), esc(c.unit or ""), num(e2e.get("median")),
                         verdict, note])
        return ("<section>\n<h2>Cases</h2>\n"
                + _table(["case", "status", "rounds", "metric", "median", "min", "max", "unit", "e2e s",
                          "verdict", "note"], rows, num_cols=(2, 4, 5, 6, 8)) + "</section>\n")

    def _verdicts(self, c) -> str:
        vs = verdicts_of(c)
        if not vs:
            return ""
        rows = []
        for v in vs:
            expected, low, high = verdict_band(v)
            dev = _number(v.deviation)
            measured = num(v.measured)
            if v.measured_unit is not None:
                measured += f" {esc(v.measured_unit)}"
            source = v.source
            note = v.note
            rows.append([esc(v.metric or "-"), num(expected), _tolerance_text(v),
                         f"{num(low)} … {num(high)}" if low is not None else "-", measured,
                         "-" if dev is None else f"{dev * 100:+.3g}%", esc(v.unit),
                         verdict_badge(v), esc(source) + (f"<br>{esc(note)}" if note else "")])
        return "<h3>Reference verdicts</h3>\n" + _table(
            ["metric", "expected", "tolerance", "within", "measured (median)", "deviation", "unit", "result",
             "source"], rows, num_cols=(1, 2, 4, 5))

    def _metrics(self, c) -> str:
        """Every metric of the passed rounds with its unit (also those read from FlagPerf's own lines)."""
        stats = c.stats
        names = [n for n in stats if n not in ("value", "e2e_time") and isinstance(stats.get(n), dict)]
        if not names:
            return ""
        units = c.metric_units()
        origin = (c.head or {}).get("origin")
        caption = f" (from {esc(origin)})" if origin else ""
        rows = [[esc(n), num(stats[n].get("median")), num(stats[n].get("min")), num(stats[n].get("max")),
                 esc(units.get(n, ""))] for n in names]
        return (f"<p>Metrics over the passed rounds{caption}:</p>\n"
                + _table(["metric", "median", "min", "max", "unit"], rows, num_cols=(1, 2, 3)))

    def _rankings(self, s) -> str:
        """each cases (results.slownodes): hosts, then GPUs, ranked by the headline metric; outliers in red."""
        rankings = list(s.rankings or [])
        if not rankings:
            return ""
        out = "<section>\n<h2>Slow-node rankings</h2>\n"
        for rk in rankings:
            entries = list(rk.entries)
            unit = rk.unit or ""
            better = "lower" if rk.higher_is_better is False else "higher"
            out += (f"<h3>{esc(rk.case)}: hosts ranked by {esc(rk.metric)}"
                    f"{' (' + esc(unit) + ')' if unit else ''}, {better} is better</h3>\n")
            if rk.rule:
                out += f"<p class=\"muted\">outlier: {esc(rk.rule)}</p>\n"
            rows = []
            for e in entries:
                outlier = e.outlier
                gpu = "-" if e.gpu is None else num(e.gpu) if e.identity is None else esc(gpu_text(e))
                rows.append([num(e.rank), esc(e.host), gpu,
                             num(e.value), num(e.score, 3),
                             '<span class="bad">OUTLIER</span>' if outlier else "no"])
            for h in rk.failed_hosts:
                rows.append(["-", esc(h), "-", "-", "-", '<span class="bad">no result (failed)</span>'])
            out += _table(["rank", "host", "gpu", "value", "score", "outlier"], rows, num_cols=(0, 2, 3, 4),
                          row_class=lambda r: "outlier" if "OUTLIER" in r[5] else "")
            hosts = [e for e in entries if e.gpu is None]
            gpus = [e for e in entries if e.gpu is not None]
            charts = "".join(self._ranking_bars(rk, group, what) for group, what in ((hosts, "host"), (gpus, "GPU")))
            out += f'<div class="charts">{charts}</div>\n' if charts else ""
        return out + "</section>\n"

    def _ranking_bars(self, rk, entries, what) -> str:
        bars = []
        for e in entries:
            if _number(e.value) is None:
                continue
            where = str(e.host) + ("" if e.gpu is None else f" gpu {num(e.gpu)}" if e.identity is None else
                                   " " + gpu_text(e))
            label = f"{num(e.rank)}. {where}" if e.gpu is None else where
            bars.append(svg.Bar(label, e.value, BELOW_COLOR if e.outlier else PLAIN_COLOR,
                                f"{label}: {num(e.value)}" + (" (outlier)" if e.outlier else "")))
        if not bars:
            return ""
        refs = []
        if _number(rk.median) is not None and what == "host":
            refs.append(svg.RefLine(rk.median, f"median {num(rk.median)}", "#7f7f7f", dash=True))
        return self._figure(svg.BarChart(f"{rk.case}: {rk.metric} per {what} (red: outlier)",
                                         _unit_label(rk.metric, rk.unit), bars, refs))

    def _case(self, ci, c, series: dict) -> str:
        out = (f'<section class="case" id="case{ci}">\n<h2>{esc(c.name)} {badge(c.status)}</h2>\n'
               f"<p><code>{esc(c.key)}</code>: {num(c.nnodes)} node(s) x {num(c.nproc)} rank(s), "
               f"{num(c.repeat)} round(s), data: {esc(c.data_dir or '-')}</p>\n")
        out += self._verdicts(c)
        out += _table(["round", "status", "value", "e2e s", "duration s", "note"],
                      [[num(r.round), badge(r.status), num(r.value), num(r.e2e_time), num(r.duration_s),
                        esc(r.failure.reason if r.failure else "")] for r in c.rounds], num_cols=(0, 2, 3, 4))
        for r in c.rounds:
            f = r.failure
            lines = f.last_lines if f is not None else None
            if lines:
                where = ""
                if f.rank is not None:
                    where = f" (node {esc(f.node)}, rank {esc(f.rank)})"
                elif f.node:
                    where = f" (node {esc(f.node)})"
                out += (f"<p>Round {num(r.round)}{where}, last lines of <code>{esc(f.log or '')}</code>:</p>\n"
                        f"<pre>{chr(10).join(for_html(x, newlines=False) for x in lines)}</pre>\n")
        out += _stragglers(c)
        out += self._metrics(c)
        first = next((r for r in c.rounds if isinstance((r.finished or {}).get("env"), dict)), None)
        if first:
            env = ", ".join(f"{esc(k)} {esc(v)}" for k, v in first.finished["env"].items()
                            if not isinstance(v, (dict, list)))
            out += f"<p class=\"muted\">Environment (round {num(first.round)}, rank 0): {env}</p>\n"
        out += self._headline(c)
        out += self._nccl_sections(c)
        for r in c.rounds:
            if not r.nodes:
                continue
            out += f"<h3>Round {num(r.round)} {badge(r.status)}: monitors</h3>\n"
            for n in r.nodes:
                out += self._node(c, r, n, series.get((c.key, r.round, n.node)))
        return out + "</section>\n"

    def _nccl_sections(self, c) -> str:
        """nccl-tests' view of a collectives or p2p case (flagperf.results.ncclview): bus bandwidth against the
        message size (log2 axis), one line per operation, then one nccl-tests table per operation."""
        tables = op_tables(c)
        if not tables:
            return ""
        series = [svg.Series(t.op, [(row.size_bytes, row.busbw_gbs) for row in t.rows], markers=len(t.rows) <= 40)
                  for t in tables]
        out = f"<h3>nccl-tests' view (round {num(tables[0].round)})</h3>\n"
        out += self._figure(svg.LineChart(f"{c.name}: bus bandwidth per message size", "message size (bytes)",
                                          "busbw (GB/s)", series, x_log2=True, x_bytes=True))
        for t in tables:
            rows = [[num(row.size_bytes), num(row.count), esc(row.dtype), esc(row.redop), num(row.root),
                     num(row.time_us), num(row.algbw_gbs), num(row.busbw_gbs),
                     "N/A" if row.wrong is None else num(row.wrong)] for row in t.rows]
            out += (f"<p><strong>{esc(t.op)}</strong>: avg busbw {num(t.avg_busbw_gbs)} GB/s, at the largest size "
                    f"{num(t.largest_busbw_gbs)} GB/s</p>\n" + _table(
                        ["size (B)", "count (elements)", "type", "redop", "root", "time (us)", "algbw (GB/s)",
                         "busbw (GB/s)", "#wrong"], rows, num_cols=(0, 1, 4, 5, 6, 7, 8)))
        return out

    def _headline(self, c) -> str:
        """The headline metric per round (each cases: one line per host, from every host's own result), with
        the band of its reference verdict; a chart per other metric that has a verdict."""
        series: dict = {}   # name: [(round, value)]
        if c.each:
            for r in c.rounds:
                for n in r.nodes:
                    f = n.finished or {}
                    v = _number(f.get("value")) if n.status == Status.PASSED else None
                    if v is not None and f.get("metric") == c.metric:
                        series.setdefault(str(n.host), []).append((r.round, v))
        if not series:
            pts = [(r.round, _number(r.value)) for r in c.passed_rounds]
            series = {str(c.metric or "value"): [(k, v) for k, v in pts if v is not None]}
        if not any(series.values()):
            return '<p class="muted">No round produced a value: no metric chart.</p>\n'
        vs = [v for v in verdicts_of(c) if v.metric == c.metric]
        median = _number(((c.stats.get("value") or {}).get("median")))
        out = self._metric_plot(c.metric or "value", c.unit, series, vs, c, median)
        for v in verdicts_of(c):
            m = v.metric
            if m in (None, c.metric):
                continue
            pts = [(r.round, _number((r.metrics.get(m) or {}).get("value")) if isinstance(r.metrics.get(m), dict)
                    else None) for r in c.passed_rounds]
            pts = [(k, x) for k, x in pts if x is not None]
            if pts:
                unit = v.unit or next((r.metrics[m].get("unit") for r in c.passed_rounds
                                       if isinstance(r.metrics.get(m), dict)), "")
                out += self._metric_plot(m, unit, {str(m): pts}, [v], c,
                                         statistics.median(x for _, x in pts) if len(pts) > 1 else None)
        return out

    def _metric_plot(self, metric, unit, series, verdicts, c, median) -> str:
        refs = [line for line in (_ref_line(v) for v in verdicts) if line is not None]
        if median is not None and sum(len(p) for p in series.values()) > 1:
            refs.append(svg.RefLine(median, f"median {num(median)}", "#7f7f7f", dash=True))
        rounds = [r.round for r in c.rounds] or [1]
        lines = [svg.Series(name, points, PALETTE[i % len(PALETTE)], markers=True)
                 for i, (name, points) in enumerate(sorted(series.items()))]
        return self._figure(svg.LineChart(
            f"{c.name}: {metric} per round", "round", _unit_label(metric, unit), lines, refs=refs,
            x_ticks=[(k, str(k)) for k in rounds], x_range=(min(rounds) - 0.5, max(rounds) + 0.5),
            legend=len(series) > 1 or bool(refs), height=180))

    def _node(self, c, r, n, ns: NodeSeries | None) -> str:
        """One node's monitor charts of a round: one per host sensor and accelerator field (every GPU of the node
        in it), the phases shaded, throttle reasons as named bands, and the energy of the measured window."""
        title = f"{esc(n.node)} (host <code>{esc(n.host)}</code>, node rank {num(n.node_rank)})"
        mon = n.monitors or {}
        notes = []
        for sensor, reason in sorted((mon.get("unavailable") or {}).items()):
            notes.append(f"{esc(sensor)}: {esc(reason)}")
        for name, reason in sorted((mon.get("unreadable") or {}).items()):
            notes.append(f"{esc(name)}: {esc(reason)}")
        note = f'<p class="muted">{"; ".join(notes)}</p>\n' if notes else ""
        energy = _energy_table(mon)
        if ns is None or not ns.traces:
            return f"<h4>{title}</h4>\n<p class=\"muted\">No monitor data in its node directory.</p>\n{note}{energy}"
        series = {(t.sensor, t.key, t.gpu): (t.x, t.y) for t in ns.traces}
        charts = []       # (label, unit, [(series name, gpu or None, xs, ys)], y range)
        for sensor, key, label, unit in (("cpu", "util_pct", "CPU util", "%"), ("mem", "used_mib", "memory used",
                                                                                 "MiB"),
                                         ("pwr", "power_w", "host power", "W")):
            if (sensor, key, None) in series:
                charts.append((label, unit, [(label, None, *series[(sensor, key, None)])],
                               (0, 100) if key == "util_pct" else None))
        gpu_keys = sorted({k for (s, k, _g) in series if s == "gpu"})
        known = [k for k, _ in GPU_FIELDS if k in gpu_keys]
        throttle = [k for k in gpu_keys if "throttl" in k and k not in known]
        other = [k for k in gpu_keys if k not in known and k not in throttle and k not in NOT_CHARTED]
        labels = dict(GPU_FIELDS)
        vendor = ns.gpu_vendor or "gpu"
        for k in (known + other)[:MAX_GPU_ROWS]:
            label, _, unit = labels[k].rpartition(" ") if k in labels else (k, "", "")
            traces = [(f"gpu {g}", g, *series[("gpu", k, g)])
                      for g in sorted(g for (s, kk, g) in series if s == "gpu" and kk == k)]
            charts.append((f"{vendor} {label}", unit, traces, (0, 100) if k == "util_pct" else None))
        bands = [svg.Band(ns.phases[start], ns.phases.get(end, ns.end) or 0.0, name, color)
                 for start, end, color, name in PHASES
                 if ns.phases.get(start) is not None and ns.phases.get(end, ns.end) is not None]
        vlines = [t for t in (ns.start, ns.end) if t is not None]
        xs = [x for t in ns.traces for x in t.x] + vlines
        x_range = (min(xs), max(xs)) if xs else None
        x_label = "s since the round's ranks started"
        out = ""
        for label, unit, traces, y_range in charts:
            lines = [svg.Series(name, list(zip(xs_, ys_)), "#444444" if g is None else PALETTE[g % len(PALETTE)])
                     for name, g, xs_, ys_ in traces]
            out += self._figure(svg.LineChart(
                f"{c.name} round {r.round}, {n.node}: {label}", x_label, _unit_label(label, unit), lines,
                bands=bands, vlines=vlines, x_range=x_range, y_range=y_range, width=MONITOR_WIDTH, height=150,
                legend=any(g is not None for _, g, _, _ in traces)), monitor=True)
        lanes = []
        for k in throttle:
            for g in sorted(g for (s, kk, g) in series if s == "gpu" and kk == k):
                xs_, ys_ = series[("gpu", k, g)]
                for reason, spans in sorted(_throttle_spans(xs_, ys_, k).items()):
                    lanes.append((f"gpu {g}: {reason}", PALETTE[g % len(PALETTE)], spans))
        if throttle:
            if lanes:
                out += self._figure(svg.Timeline(f"{c.name} round {r.round}, {n.node}: {vendor} throttle reasons",
                                                 x_label, lanes, x_range, width=MONITOR_WIDTH), monitor=True)
            else:
                out += '<p class="muted">No throttle reason was active in any sample.</p>\n'
        return (f"<h4>{title}</h4>\n{note}<div class=\"charts\">{out}</div>\n" + _phase_caption(ns) + energy)


def _stragglers(c) -> str:
    """A training case's flagged stragglers (flagperf.results.stragglers): one line per round that flagged a rank
    (passed, or failed its own check: said so), with the rule as its title; '' where none was flagged."""
    lines = [f'<p class="bad" title="{esc(s.rule)}">Round {num(s.round)}: {esc(s.note())} (judged by each '
             f"rank&rsquo;s {esc(s.judged_by)} probe time; "
             f"{'the round failed its own check' if s.check_failed else 'a finding, not a failed check'})</p>\n"
             for s in case_stragglers(c)]
    return "".join(lines)


def _energy_table(mon: dict) -> str:
    """Each accelerator's energy over the measured window (RUN_START to RUN_END) as joules and average power,
    beside the whole round's, from the node's monitor summary."""
    rows = []
    for d in (mon.get("gpu") or {}).get("devices") or []:
        if not isinstance(d, dict):
            continue
        win: dict = d["window"] if isinstance(d.get("window"), dict) else {}
        wj, ws = _number(win.get("energy_j")), _number(win.get("seconds"))
        rj, rs = _number(d.get("energy_j")), _number(d.get("seconds"))
        if wj is None and rj is None:
            continue
        rows.append([num(d.get("index")), num(wj), num(ws), num(wj / ws) if wj is not None and ws else "-",
                     num(rj), num(rs), num(rj / rs) if rj is not None and rs else "-",
                     esc(d.get("energy_source") or "")])
    if not rows:
        return ""
    return ('<p>Accelerator energy: the measured window (RUN_START to RUN_END) and the whole round, each as joules '
            'and average power.</p>\n' + _table(
                ["gpu", "window J", "window s", "window avg W", "round J", "round s", "round avg W", "source"], rows,
                num_cols=(0, 1, 2, 3, 4, 5, 6)))


def _phase_caption(ns: NodeSeries) -> str:
    ph = ns.phases
    parts = []
    if "INIT_START" in ph:
        parts.append(f'<span class="swatch" style="background:{PHASES[0][2]}"></span> init (INIT_START to INIT_END)')
    if "RUN_START" in ph:
        parts.append(f'<span class="swatch" style="background:{PHASES[1][2]}"></span> run (RUN_START to RUN_END)')
    parts.append("dashed lines: the ranks' start and end (ranks.json)")
    return f'<p class="caption">{"; ".join(parts)}.</p>\n'


def _table(header, rows, num_cols=(), row_class=None) -> str:
    """An HTML table; the cells are HTML already (escaped by the caller)."""
    def cell(tag, i, text):
        return f'<{tag} class="num">{text}</{tag}>' if i in num_cols else f"<{tag}>{text}</{tag}>"

    out = "<table>\n<thead><tr>" + "".join(cell("th", i, esc(h)) for i, h in enumerate(header))
    out += "</tr></thead>\n<tbody>\n"
    for row in rows:
        cls = row_class(row) if row_class else ""
        out += (f'<tr class="{cls}">' if cls else "<tr>") + "".join(cell("td", i, c) for i, c in enumerate(row))
        out += "</tr>\n"
    return out + "</tbody>\n</table>\n"


STYLE = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 0 auto; max-width: 1360px;
       padding: 16px 24px; color: #1f2328; font-size: 14px; }
h1 { font-size: 22px; margin: 8px 0 12px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #d0d7de;
padding-bottom: 4px; } h3 { font-size: 15px; margin-top: 20px; } h4 { font-size: 13px; margin: 14px 0 4px; }
table { border-collapse: collapse; margin: 8px 0; } th, td { border: 1px solid #d0d7de; padding: 3px 8px;
text-align: left; vertical-align: top; } th { background: #f6f8fa; } td.num, th.num { text-align: right;
font-variant-numeric: tabular-nums; } table.kv th { width: 190px; }
.badge { color: white; border-radius: 10px; padding: 1px 8px; font-size: 12px; white-space: nowrap; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; padding: 8px; overflow-x: auto; max-height: 300px;
white-space: pre-wrap; word-break: break-all; }
code { background: #f6f8fa; padding: 0 3px; } .muted { color: #59636e; } .bad { color: #cf222e; font-weight: bold; }
tr.outlier td { background: #ffebe9; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: flex-start; margin: 6px 0 12px; }
.charts > .wide { flex-basis: 100%; }
svg.chart { max-width: 100%; height: auto; border: 1px solid #eaeef2; background: white; margin: 4px 0; }
.swatch { display: inline-block; width: 14px; height: 10px; opacity: 0.35; border: 1px solid #9ca3af; }
.caption { color: #59636e; font-size: 12px; margin: -10px 0 14px; }
.verdict { margin-right: 14px; white-space: nowrap; }
footer { margin-top: 30px; color: #59636e; font-size: 12px; }
"""
