"""report.html: one self-contained page per run, with plots (plotly, its plotly.js embedded once, inline).

Made from the summary and the monitor series it names (``series.json``, written once from the node directories by
:mod:`flagperf.results.series`), so ``flagperf report`` can make it again: the run's header, the case table with
statuses and verdicts, per case the headline metric per round (with the reference line and band of a verdict), per
round and node the monitor time series (CPU, memory, host power and every accelerator field) with the phases of the
round marked, and the slow-node rankings. A run without a readable series.json gets no monitor plots.
docs/results.md.

Nothing from a host is trusted: every text that came from a host (names, log lines, environment, reasons)
is HTML-escaped with its control characters made visible (:func:`flagperf.untrusted.for_html`), also where plotly
draws it (plotly reads a small HTML subset in its labels); plotly's JSON escapes ``<`` inside the scripts. The
page's Content-Security-Policy admits only the page's own scripts, each by the sha256 of its text (no
'unsafe-inline', so no injected script or event handler runs), and forbids every network load.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import statistics
from pathlib import Path
from typing import Any, NamedTuple

from flagperf.references import case_note, tolerance_text
from flagperf.reporters.base import Reporter, shown_cases
from flagperf.results.interpret import Status
from flagperf.results.series import NodeSeries, load_series
from flagperf.results.slownodes import gpu_text
from flagperf.untrusted import for_html
from flagperf_contract import write_atomic

MAX_CASE_SECTIONS = 200         # cases with a section of plots; the others are in the table only
MAX_GPU_ROWS = 10               # accelerator fields plotted per node (known ones first)
# Accelerator fields, in row order, with their labels; other numeric fields follow (throttle fields together).
GPU_FIELDS = (("power_w", "power W"), ("sm_clock_mhz", "SM clock MHz"), ("mem_clock_mhz", "memory clock MHz"),
              ("util_pct", "util %"), ("mem_used_mib", "memory used MiB"), ("temp_c", "temperature °C"),
              ("energy_j", "energy J"))
PHASES = (("INIT_START", "INIT_END", "#9ca3af"), ("RUN_START", "RUN_END", "#2ca02c"))   # shaded, in this color
STATUS_COLORS = {Status.PASSED: "#1a7f37", Status.FAILED: "#cf222e", Status.ERROR: "#cf222e",
                 Status.TIMEOUT: "#cf222e", Status.BELOW_REFERENCE: "#bc4c00", Status.SKIPPED: "#9a6700",
                 Status.INTERRUPTED: "#8250df", Status.NOT_RUN: "#6e7781"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showSendToCloud": False,
               "modeBarButtonsToRemove": ["sendDataToCloud", "select2d", "lasso2d"]}
# The page's Content-Security-Policy; {scripts} is the sha256 source of each of the page's own inline scripts.
CSP = ("default-src 'none'; script-src {scripts}; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")
PLOTLY_CONFIG_SCRIPT = 'window.PlotlyConfig = {MathJaxConfig: "local"};'
_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)
LAYOUT = dict(template="none", font=dict(family="DejaVu Sans, Liberation Sans, Arial, sans-serif", size=12),
              paper_bgcolor="white", plot_bgcolor="white", hovermode="x unified",
              margin=dict(l=70, r=20, t=50, b=45))
AXIS = dict(showgrid=True, gridcolor="#e5e7eb", zeroline=False, linecolor="#9ca3af", showline=True, ticks="outside")


class ReportError(OSError):
    """report.html could not be made (plotly missing, a figure that failed); write_reports reports it."""


class _Plotly(NamedTuple):
    go: Any                     # plotly.graph_objects
    pio: Any                    # plotly.io
    make_subplots: Any
    plotlyjs: str               # plotly.js itself, embedded once in the page


def _plotly() -> _Plotly:
    """plotly, an optional dependency only this reporter needs: imported when a page is made, so that a missing
    plotly is this report's ReportError, not an ImportError of every reporter."""
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.offline import get_plotlyjs
    from plotly.subplots import make_subplots
    return _Plotly(go, pio, make_subplots, get_plotlyjs())


def esc(value) -> str:
    """Any value as text safe inside HTML (and inside plotly's labels, which read a subset of HTML)."""
    return for_html(value)


def script_hash(text: str) -> str:
    """The CSP source that admits an inline script of exactly this text: 'sha256-<base64 digest>'."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


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
class HtmlReporter(Reporter):
    name = "html"
    file_name = "report.html"

    def render(self, summary) -> str:
        """The page of the summary, with the monitor series it names in its own run directory
        (``summary.run_dir``)."""
        return self.page(summary, load_series(summary, summary.run_dir or "."))

    def write(self, summary, run_dir) -> Path:
        """Write report.html into ``run_dir`` atomically, with the monitor series the summary names there (a run
        directory that was moved keeps its plots)."""
        try:
            text = self.page(summary, load_series(summary, run_dir))
        except ImportError as exc:
            raise ReportError(f"plotly is not installed ({exc}); pip install plotly") from None
        except OSError:
            raise
        except Exception as exc:    # a report never fails a run: the error goes to the run log instead
            raise ReportError(f"cannot render: {type(exc).__name__}: {exc}") from exc
        path = Path(run_dir) / str(self.file_name)
        write_atomic(path, text)
        return path

    def page(self, summary, series: dict | None) -> str:
        """report.html of the summary; ``series`` ({(case key, round, node): NodeSeries}, from
        :func:`~flagperf.results.series.load_series`) gives the monitor plots, None: a page without them."""
        self._plt = _plotly()
        self._figures = 0
        self.figures: list = []         # (div id, plotly figure) of the last page, in page order
        self._scripts = [PLOTLY_CONFIG_SCRIPT, self._plt.plotlyjs]     # the page's own scripts, by text
        body = self._header(summary) + self._node_verdicts(summary) + self._cases_table(summary) + \
            self._rankings(summary)
        shown = {id(c) for c in shown_cases(summary, MAX_CASE_SECTIONS)[0]}
        for ci, case in enumerate(summary.cases):
            if id(case) in shown:
                body += self._case(ci, case, series or {})
        if len(shown) < len(summary.cases):
            body += (f'<section><p class="note">{len(summary.cases) - len(shown)} more passed case(s) are in the '
                     f'table above but have no section here (report.md and summary.json list every one).</p>'
                     f'</section>\n')
        title = f"flagperf {summary.run_id}: {status_text(summary.status)}"
        csp = CSP.format(scripts=" ".join(dict.fromkeys(script_hash(s) for s in self._scripts)))
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f'<title>{esc(title)}</title>\n<style>{STYLE}</style>\n'
                f'<script>{PLOTLY_CONFIG_SCRIPT}</script>\n'
                f'<script charset="utf-8">{self._plt.plotlyjs}</script>\n</head>\n<body>\n{body}'
                f'<footer>flagperf {esc(summary.flagperf_version)} &middot; {esc(summary.run_id)} &middot; '
                f'{self._figures} plot(s)</footer>\n</body>\n</html>\n')

    # --- pieces ------------------------------------------------------------------------------------------
    def _figure(self, fig, height: int) -> str:
        pio = self._plt.pio
        self._figures += 1
        fig.update_layout(height=height)
        fig.update_xaxes(**AXIS)
        fig.update_yaxes(**AXIS)
        self.figures.append((f"plot{self._figures}", fig))
        div = pio.to_html(fig, include_plotlyjs=False, full_html=False, config=PLOT_CONFIG,
                          div_id=f"plot{self._figures}", default_width="100%", default_height=f"{height}px",
                          validate=False)
        self._scripts += _SCRIPT.findall(div)      # plotly's own script of this figure (its JSON escapes "<")
        return f'<div class="plot">{div}</div>\n'

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

    def _node_verdicts(self, s) -> str:
        """The node verdicts (results.verdict): a badge per node, then every reason, reject first."""
        verdicts = list(getattr(s, "verdicts", None) or [])
        if not verdicts:
            return ""
        out = '<section id="verdicts">\n<h2>Node verdicts</h2>\n<p>' + " ".join(
            f'<span class="verdict">{esc(v.host)} {verdict_badge_of(v.verdict)}</span>' for v in verdicts) + "</p>\n"
        rows = [[esc(v.host), verdict_badge_of(r.severity), esc(r.source), esc(r.case or ""), esc(r.subject),
                 esc(r.detail), esc(r.remedy)] for v in verdicts for r in v.reasons]
        if rows:
            out += _table(["node", "severity", "source", "case", "subject", "detail", "remedy"], rows,
                          row_class=lambda r: "outlier" if "reject" in r[1] else "")
        else:
            out += "<p>Every node accepted: no reason against any.</p>\n"
        return out + ('<p class="muted">reject: send back or drain; degraded: usable, with these reasons; the run '
                      'exits 1 when a node is rejected.</p>\n</section>\n')

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
            for group, what in ((hosts, "host"), (gpus, "GPU")):
                out += self._ranking_bars(rk, group, what)
        return out + "</section>\n"

    def _ranking_bars(self, rk, entries, what) -> str:
        go = self._plt.go
        labels, values, colors = [], [], []
        for e in entries:
            if _number(e.value) is None:
                continue
            where = esc(e.host) + ("" if e.gpu is None else f" gpu {num(e.gpu)}" if e.identity is None else
                                   " " + esc(gpu_text(e)))
            labels.append(f"{num(e.rank)}. {where}" if e.gpu is None else where)
            values.append(e.value)
            colors.append("#cf222e" if e.outlier else "#1f77b4")
        if not values:
            return ""
        unit = rk.unit or ""
        fig = go.Figure(go.Bar(x=values, y=labels, orientation="h", marker_color=colors,
                               hovertemplate="%{y}: %{x}<extra></extra>"), layout=LAYOUT)
        if _number(rk.median) is not None and what == "host":
            fig.add_vline(x=rk.median, line_dash="dash", line_color="#7f7f7f",
                          annotation_text=f"median {num(rk.median)}", annotation_position="top")
        fig.update_yaxes(autorange="reversed", type="category")
        fig.update_xaxes(title_text=esc(unit or rk.metric))
        fig.update_layout(title=dict(text=f"{esc(rk.case)}: {esc(rk.metric)} per {what} "
                                          f"(red: outlier)", x=0),
                          margin=dict(l=220, r=20, t=50, b=45), hovermode="closest")
        return self._figure(fig, max(220, 90 + 24 * len(values)))

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
        out += self._metrics(c)
        first = next((r for r in c.rounds if isinstance((r.finished or {}).get("env"), dict)), None)
        if first:
            env = ", ".join(f"{esc(k)} {esc(v)}" for k, v in first.finished["env"].items()
                            if not isinstance(v, (dict, list)))
            out += f"<p class=\"muted\">Environment (round {num(first.round)}, rank 0): {env}</p>\n"
        out += self._headline(c)
        for r in c.rounds:
            if not r.nodes:
                continue
            out += f"<h3>Round {num(r.round)} {badge(r.status)}: monitors</h3>\n"
            for n in r.nodes:
                out += self._node(c, r, n, series.get((c.key, r.round, n.node)))
        return out + "</section>\n"

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

    def _headline(self, c) -> str:
        """The headline metric per round (each cases: one line per host, from every host's own result), with
        the band of its reference verdict; a plot per other metric that has a verdict."""
        go = self._plt.go
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
            return '<p class="muted">No round produced a value: no metric plot.</p>\n'
        vs = [v for v in verdicts_of(c) if v.metric == c.metric]
        median = _number(((c.stats.get("value") or {}).get("median")))
        out = self._metric_plot(go, c.metric or "value", c.unit, series, vs, c, median)
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
                out += self._metric_plot(go, m, unit, {str(m): pts}, [v], c,
                                         statistics.median(x for _, x in pts) if len(pts) > 1 else None)
        return out

    def _metric_plot(self, go, metric, unit, series, verdicts, c, median) -> str:
        fig = go.Figure(layout=LAYOUT)
        for v in verdicts:
            expected, low, high = verdict_band(v)
            if low is not None and high is not None:
                fig.add_hrect(y0=low, y1=high, fillcolor="#2ca02c", opacity=0.12, line_width=0, layer="below")
            if expected is not None:
                fig.add_hline(y=expected, line_color="#2ca02c", line_width=2,
                              annotation_text=f"reference {num(expected)}", annotation_position="top left")
        for i, (name, points) in enumerate(sorted(series.items())):
            color = PALETTE[i % len(PALETTE)]
            fig.add_trace(go.Scatter(x=[k for k, _ in points], y=[v for _, v in points], mode="lines+markers",
                                     name=esc(name), marker=dict(size=9, color=color), line=dict(color=color),
                                     hovertemplate=f"{esc(name)}, round %{{x}}: %{{y}}<extra></extra>"))
        if median is not None and sum(len(p) for p in series.values()) > 1:
            fig.add_hline(y=median, line_dash="dash", line_color="#7f7f7f",
                          annotation_text=f"median {num(median)}", annotation_position="bottom right")
        rounds = [r.round for r in c.rounds] or [1]
        fig.update_xaxes(title_text="round", tickmode="array", tickvals=rounds,
                         range=[min(rounds) - 0.5, max(rounds) + 0.5])
        fig.update_yaxes(title_text=esc(unit or metric), rangemode="tozero")
        fig.update_layout(title=dict(text=f"{esc(c.name)}: {esc(metric)} per round", x=0),
                          showlegend=len(series) > 1, hovermode="closest")
        return self._figure(fig, 340)

    def _node(self, c, r, n, ns: NodeSeries | None) -> str:
        """One node's monitor figure of a round: a row per host sensor and accelerator field, phases shaded."""
        go, make_subplots = self._plt.go, self._plt.make_subplots
        title = f"{esc(n.node)} (host <code>{esc(n.host)}</code>, node rank {num(n.node_rank)})"
        mon = n.monitors or {}
        notes = []
        for sensor, reason in sorted((mon.get("unavailable") or {}).items()):
            notes.append(f"{esc(sensor)}: {esc(reason)}")
        for name, reason in sorted((mon.get("unreadable") or {}).items()):
            notes.append(f"{esc(name)}: {esc(reason)}")
        note = f'<p class="muted">{"; ".join(notes)}</p>\n' if notes else ""
        if ns is None or not ns.traces:
            return f"<h4>{title}</h4>\n<p class=\"muted\">No monitor data in its node directory.</p>\n{note}"
        series = {(t.sensor, t.key, t.gpu): (t.x, t.y) for t in ns.traces}
        rows = []       # (label, [(trace name, gpu or None, xs, ys)])
        for sensor, key, label in (("cpu", "util_pct", "CPU util %"), ("mem", "used_mib", "memory used MiB"),
                                   ("pwr", "power_w", "host power W")):
            if (sensor, key, None) in series:
                rows.append((label, [(label, None, *series[(sensor, key, None)])]))
        gpu_keys = sorted({k for (s, k, _g) in series if s == "gpu"})
        known = [k for k, _ in GPU_FIELDS if k in gpu_keys]
        throttle = [k for k in gpu_keys if "throttl" in k and k not in known]
        other = [k for k in gpu_keys if k not in known and k not in throttle]
        labels = dict(GPU_FIELDS)
        vendor = ns.gpu_vendor or "gpu"
        gpu_rows = [(f"{vendor} {labels[k]}", [k]) for k in known] + [(f"{vendor} {k}", [k]) for k in other]
        if throttle:
            gpu_rows.append((f"{vendor} throttle", throttle))
        for label, keys in gpu_rows[:MAX_GPU_ROWS]:
            traces = []
            for k in keys:
                for g in sorted(g for (s, kk, g) in series if s == "gpu" and kk == k):
                    name = f"gpu {g}" + (f" {k}" if len(keys) > 1 else "")
                    traces.append((name, g, *series[("gpu", k, g)]))
            rows.append((esc(label), traces))
        fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=min(0.08, 0.3 / len(rows)),
                            subplot_titles=[label for label, _ in rows])
        fig.update_layout(**LAYOUT)
        seen_gpu = set()
        for i, (label, traces) in enumerate(rows, 1):
            for name, g, xs, ys in traces:
                color = PALETTE[g % len(PALETTE)] if g is not None else "#444444"
                show = g is not None and name not in seen_gpu
                seen_gpu.add(name)
                fig.add_trace(go.Scatter(x=list(xs), y=list(ys), mode="lines", name=esc(name), legendgroup=esc(name),
                                         showlegend=show, line=dict(color=color, width=1.5)), row=i, col=1)
        self._phases(fig, ns)
        fig.update_xaxes(title_text="s since the round's ranks started", row=len(rows), col=1)
        fig.update_layout(title=dict(text=f"{esc(c.name)} round {num(r.round)}: {esc(n.node)}", x=0),
                          legend=dict(orientation="h", y=-0.12 if len(rows) < 3 else -0.05))
        return f"<h4>{title}</h4>\n{note}" + self._figure(fig, 90 + 170 * len(rows)) + _phase_caption(ns)

    def _phases(self, fig, ns: NodeSeries) -> None:
        """Shade the phases (init, run) from the PerfLog events, and mark the ranks' start and end."""
        for start, end, color in PHASES:
            x0 = ns.phases.get(start)
            x1 = ns.phases.get(end, ns.end)
            if x0 is None or x1 is None or x1 < x0:
                continue
            fig.add_shape(type="rect", xref="x", yref="paper", x0=x0, x1=x1,
                          y0=0, y1=1, fillcolor=color, opacity=0.13, line_width=0, layer="below")
        for t in (ns.start, ns.end):
            if t is not None:
                fig.add_shape(type="line", xref="x", yref="paper", x0=t, x1=t, y0=0,
                              y1=1, line=dict(color="#6e7781", width=1, dash="dash"))


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
tr.outlier td { background: #ffebe9; } .plot { border: 1px solid #eaeef2; margin: 6px 0 14px; }
.swatch { display: inline-block; width: 14px; height: 10px; opacity: 0.35; border: 1px solid #9ca3af; }
.caption { color: #59636e; font-size: 12px; margin: -10px 0 14px; }
.verdict { margin-right: 14px; white-space: nowrap; }
footer { margin-top: 30px; color: #59636e; font-size: 12px; }
"""
