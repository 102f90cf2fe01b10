"""report-interactive.html: report.html's page with every chart as a plotly figure (zoom, pan, hover for values),
written only on request (``flagperf report --html --interactive``), never with every run.

The same page as report.html (:class:`~flagperf.reporters.html.HtmlReporter` builds it: the same sections, the
same chart descriptions of :mod:`flagperf.reporters.svg`), each chart drawn by plotly instead of inline SVG.
plotly.js (about 4.6 MB) is embedded once, inline, so the file opens offline, but it is large, and it draws
nothing where scripts do not run (mail clients, previewers): report.html is the form to send. Its
Content-Security-Policy admits only the page's own inline scripts, each by the sha256 of its text (no
'unsafe-inline': no injected script or event handler runs), and forbids every network load. Every label from a
host is HTML-escaped (:func:`flagperf.untrusted.for_html`), also where plotly draws it (plotly reads a small
HTML subset in its labels); plotly's JSON escapes ``<`` inside the scripts.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any, NamedTuple

from flagperf.reporters import svg
from flagperf.reporters.html import CSP, HtmlReporter, ReportError, esc

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showSendToCloud": False,
               "modeBarButtonsToRemove": ["sendDataToCloud", "select2d", "lasso2d"]}
SCRIPT_CSP = ("default-src 'none'; script-src {scripts}; style-src 'unsafe-inline'; img-src data: blob:; "
              "font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")
PLOTLY_CONFIG_SCRIPT = 'window.PlotlyConfig = {MathJaxConfig: "local"};'
_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)
LAYOUT = dict(template="none", font=dict(family=svg.FONT, size=12), paper_bgcolor="white", plot_bgcolor="white",
              margin=dict(l=70, r=20, t=50, b=45), hovermode="closest")
AXIS = dict(showgrid=True, gridcolor="#e5e7eb", zeroline=False, linecolor="#9ca3af", showline=True, ticks="outside")
EXTRA_STYLE = ".charts { display: block; } .plot { border: 1px solid #eaeef2; margin: 6px 0 14px; }"


class _Plotly(NamedTuple):
    go: Any                     # plotly.graph_objects
    pio: Any                    # plotly.io
    plotlyjs: str               # plotly.js itself, embedded once in the page


def _plotly() -> _Plotly:
    """plotly, imported when a page is made (only this form needs it)."""
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.offline import get_plotlyjs
    return _Plotly(go, pio, get_plotlyjs())


def script_hash(text: str) -> str:
    """The CSP source that admits an inline script of exactly this text: 'sha256-<base64 digest>'."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _dash(d: bool):
    return "dash" if d else None


def _line_figure(go, c: svg.LineChart):
    fig = go.Figure(layout=LAYOUT)
    for b in c.bands:
        if svg.finite(b.x0) and svg.finite(b.x1) and b.x1 >= b.x0:
            fig.add_vrect(x0=b.x0, x1=b.x1, fillcolor=b.color, opacity=0.13, line_width=0, layer="below",
                          annotation_text=esc(b.label), annotation_position="top left")
    ys = []
    for i, s in enumerate(c.series):
        pts = svg.clean(s.points, c.x_log2)
        ys += [y for _, y in pts]
        color = s.color or svg.PALETTE[i % len(svg.PALETTE)]
        fig.add_trace(go.Scatter(x=[x for x, _ in pts], y=[y for _, y in pts], name=esc(s.name),
                                 mode="lines+markers" if s.markers else "lines",
                                 line=dict(color=color, width=1.5, dash=_dash(s.dash)),
                                 hovertemplate=f"{esc(s.name)}: %{{x}}, %{{y}}<extra></extra>"))
    for r in c.refs:
        if not svg.finite(r.y):
            continue
        if svg.finite(r.low) and svg.finite(r.high):
            fig.add_hrect(y0=r.low, y1=r.high, fillcolor=r.color, opacity=0.12, line_width=0, layer="below")
        fig.add_hline(y=r.y, line_color=r.color, line_dash=_dash(r.dash), annotation_text=esc(r.label),
                      annotation_position="top left")
    for v in c.vlines:
        if svg.finite(v):
            fig.add_vline(x=v, line_dash="dash", line_color="#6e7781", line_width=1)
    xaxis: dict = dict(title_text=esc(c.x_label))
    if c.x_log2:
        xs = [x for s in c.series for x, _ in svg.clean(s.points, True)]
        if xs:
            ticks = svg.log2_ticks(min(xs), max(xs))
            xaxis.update(type="log", tickmode="array", tickvals=ticks,
                         ticktext=[svg.fmt_bytes(t) if c.x_bytes else svg.fmt(t) for t in ticks])
    elif c.x_ticks is not None:
        xaxis.update(tickmode="array", tickvals=[v for v, _ in c.x_ticks], ticktext=[esc(t) for _, t in c.x_ticks])
    if c.x_range is not None and not c.x_log2:
        xaxis.update(range=list(c.x_range))
    yaxis: dict = dict(title_text=esc(c.y_label))
    if c.y_range is not None:
        yaxis.update(range=[min([c.y_range[0], *ys]), max([c.y_range[1], *ys])])
    elif c.y_zero:
        yaxis.update(rangemode="tozero")
    fig.update_xaxes(**xaxis)
    fig.update_yaxes(**yaxis)
    fig.update_layout(title=dict(text=esc(c.title), x=0), showlegend=c.legend and len(c.series) > 1)
    return fig, c.height + 130


def _bar_figure(go, c: svg.BarChart):
    bars = [b for b in c.bars if svg.finite(b.value)]
    fig = go.Figure(go.Bar(x=[b.value for b in bars], y=[esc(b.label) for b in bars], orientation="h",
                           marker_color=[b.color for b in bars], hoverinfo="text",
                           hovertext=[esc(b.hover or f"{b.label}: {svg.fmt(b.value)}") for b in bars]),
                    layout=LAYOUT)
    for r in c.refs:
        if not svg.finite(r.y):
            continue
        if svg.finite(r.low) and svg.finite(r.high):
            fig.add_vrect(x0=r.low, x1=r.high, fillcolor=r.color, opacity=0.12, line_width=0, layer="below")
        fig.add_vline(x=r.y, line_color=r.color, line_dash=_dash(r.dash), annotation_text=esc(r.label),
                      annotation_position="top")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text=esc(c.value_label), rangemode="tozero")
    fig.update_layout(title=dict(text=esc(c.title), x=0), margin=dict(l=220, r=20, t=50, b=45))
    return fig, max(220, 90 + 24 * len(bars))


def _timeline_figure(go, c: svg.Timeline):
    fig = go.Figure(layout=LAYOUT)
    for label, color, spans in c.lanes:
        spans = [(a, b) for a, b in spans if svg.finite(a) and svg.finite(b) and b >= a]
        fig.add_trace(go.Bar(x=[b - a for a, b in spans], base=[a for a, _ in spans], y=[esc(label)] * len(spans),
                             orientation="h", marker_color=color, name=esc(label), showlegend=False,
                             hovertemplate=f"{esc(label)}: %{{base}} to %{{x}} long<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text=esc(c.x_label), range=list(c.x_range) if c.x_range else None)
    fig.update_layout(title=dict(text=esc(c.title), x=0), margin=dict(l=220, r=20, t=50, b=45), barmode="overlay")
    return fig, max(200, 90 + 24 * len(c.lanes))


def to_plotly(go, chart) -> tuple:
    """(plotly figure, height in pixels) of a chart description of :mod:`flagperf.reporters.svg`."""
    if isinstance(chart, svg.BarChart):
        return _bar_figure(go, chart)
    if isinstance(chart, svg.Timeline):
        return _timeline_figure(go, chart)
    return _line_figure(go, chart)


class InteractiveReporter(HtmlReporter):
    """report.html's page with plotly charts: ``report-interactive.html``. Not registered as a file reporter:
    ``flagperf report --html --interactive`` writes it."""

    name = "interactive"
    file_name = "report-interactive.html"

    def write(self, summary, run_dir):
        try:
            _plotly()
        except ImportError as exc:
            raise ReportError(f"plotly is not installed ({exc}); pip install plotly") from None
        return super().write(summary, run_dir)

    def page(self, summary, series: dict | None) -> str:
        self._plt = _plotly()
        self.plotly_figures: list = []      # (div id, plotly figure) of the last page, in page order
        self._scripts = [PLOTLY_CONFIG_SCRIPT, self._plt.plotlyjs]
        text = super().page(summary, series)
        csp = SCRIPT_CSP.format(scripts=" ".join(dict.fromkeys(script_hash(s) for s in self._scripts)))
        head = (f"<style>{EXTRA_STYLE}</style>\n<script>{PLOTLY_CONFIG_SCRIPT}</script>\n"
                f'<script charset="utf-8">{self._plt.plotlyjs}</script>\n')
        # the page's head is flagperf's own text: its first </head> and its CSP are the ones replaced
        return text.replace(f'content="{CSP}"', f'content="{csp}"', 1).replace("</head>", head + "</head>", 1)

    def _figure(self, chart, monitor: bool = False) -> str:
        ident = f"chart{len(self.figures) + 1}"
        self.figures.append((ident, chart))
        fig, height = to_plotly(self._plt.go, chart)
        fig.update_layout(height=height)
        fig.update_xaxes(**AXIS)
        fig.update_yaxes(**AXIS)
        self.plotly_figures.append((ident, fig))
        div = self._plt.pio.to_html(fig, include_plotlyjs=False, full_html=False, config=PLOT_CONFIG, div_id=ident,
                                    default_width="100%", default_height=f"{height}px", validate=False)
        self._scripts += _SCRIPT.findall(div)      # plotly's own script of this figure (its JSON escapes "<")
        return f'<div class="plot">{div}</div>\n'
