"""Charts as inline SVG, drawn in Python: no script, nothing loaded, so a page with them draws wherever it is
opened (a browser, a mail client, a file previewer) and keeps a Content-Security-Policy without any script-src.

Three kinds, each a plain description rendered by :func:`render`:

- :class:`LineChart`: several :class:`Series` over a linear or log2 x axis (``x_log2``), the y axis from zero by
  default (``y_zero``) or over a fixed range (``y_range``: utilisation from 0 to 100), shaded x ranges with a label
  (:class:`Band`: the phases of a round), horizontal reference lines with their band (:class:`RefLine`), a legend,
  axis labels with their units, and markers with hover text (``<title>``) where a series asks for them;
- :class:`BarChart`: one horizontal bar per :class:`Bar` (per-GPU or per-host figures side by side), each in its
  own colour (against a reference: within, below, above), a value axis from zero and reference lines;
- :class:`Timeline`: labelled lanes of x ranges (throttle reasons of each GPU over a round).

Every text (titles, labels, names, hover text) passes :func:`flagperf.untrusted.for_html`: text from hosts is
shown, never read as markup. Numbers are formatted (:func:`fmt`); a NaN or infinite value is skipped. A series
with more points than the plot has pixel columns is decimated (:func:`decimate`: the minimum and the maximum of
each column, in order, and runs of one value reduced to their ends), so a long monitor trace stays small.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from flagperf.untrusted import for_html

FONT = "DejaVu Sans, Liberation Sans, Arial, sans-serif"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
CHAR_W = 6.4                    # estimated width of a character at the charts' 11 px font
LEGEND_ROW = 16
TITLE_H = 22
_COLOR = re.compile(r"#[0-9a-fA-F]{3,8}\Z")
NICE_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


# ------------------------------------------------------------------------------------------------ descriptions
@dataclass
class Series:
    """A line of (x, y) points; ``markers``: a dot with its hover text on every point (few points only)."""

    name: str
    points: list
    color: str | None = None
    markers: bool = False
    dash: bool = False


@dataclass
class Band:
    """An x range shaded over the whole plot height, with its label at the top."""

    x0: float
    x1: float
    label: str
    color: str = "#9ca3af"


@dataclass
class RefLine:
    """A horizontal line at ``y`` (a reference, a median), with an optional band ``low``..``high`` around it."""

    y: float
    label: str
    color: str = "#2ca02c"
    low: float | None = None
    high: float | None = None
    dash: bool = False


@dataclass
class LineChart:
    title: str
    x_label: str
    y_label: str
    series: list = field(default_factory=list)
    bands: list = field(default_factory=list)
    refs: list = field(default_factory=list)
    x_log2: bool = False
    x_bytes: bool = False           # x tick labels as sizes (1K, 4M) on a log2 axis
    x_ticks: list | None = None     # [(value, label)] instead of computed ticks
    x_range: tuple | None = None
    y_zero: bool = True
    y_range: tuple | None = None    # a fixed y range (utilisation: 0, 100); data beyond it widens it
    vlines: list = field(default_factory=list)    # x values of dashed vertical marks
    width: int = 640
    height: int = 200               # the plot area's height
    legend: bool = True
    note: str = ""                  # a line under the title


@dataclass
class Bar:
    label: str
    value: float
    color: str = "#1f77b4"
    hover: str = ""


@dataclass
class BarChart:
    title: str
    value_label: str
    bars: list = field(default_factory=list)
    refs: list = field(default_factory=list)    # RefLine, drawn vertically (y is the value)
    width: int = 640
    legend: list = field(default_factory=list)  # [(colour, text)] explaining the colours


@dataclass
class Timeline:
    title: str
    x_label: str
    lanes: list = field(default_factory=list)   # [(label, colour, [(x0, x1)])]
    x_range: tuple | None = None
    width: int = 640
    unit: str = "s"                             # of x: a lane's hover text says how long it was active


# ------------------------------------------------------------------------------------------------ numbers
def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt(v, digits: int = 4) -> str:
    """A number for a label: up to ``digits`` significant digits, no exponent below 1e9; '-' for NaN/inf."""
    if not finite(v):
        return "-"
    if isinstance(v, int) and abs(v) < 10 ** 15:
        return str(v)
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e9:
        exp = math.floor(math.log10(abs(v)))
        decimals = max(0, digits - 1 - exp)
        text = f"{v:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{v:.{digits - 1}e}"


def fmt_bytes(v) -> str:
    """A size as nccl-tests' sweeps name them: 512, 1K, 64M, 2G."""
    if not finite(v):
        return "-"
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(v) >= scale:
            q = v / scale
            return f"{fmt(q, 3)}{unit}"
    return fmt(v, 3)


def nice_step(span: float, count: int = 5) -> float:
    """A step of 1, 2, 2.5 or 5 times a power of ten that cuts ``span`` into about ``count`` parts."""
    if not finite(span) or span <= 0:
        return 1.0
    raw = span / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    for s in NICE_STEPS:
        if s * power >= raw * (1 - 1e-9):
            return s * power
    return 10.0 * power


def nice_ticks(lo: float, hi: float, count: int = 5) -> list:
    """Tick values at a nice step (:func:`nice_step`) that cover ``lo``..``hi``: the first at or below ``lo``, the
    last at or above ``hi``."""
    if not (finite(lo) and finite(hi)):
        return [0.0, 1.0]
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad if lo != 0 else 0.0, hi + pad
    step = nice_step(hi - lo, count)
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    k = 0
    while True:
        t = first + k * step
        ticks.append(round(t, 12))
        if t >= hi - step * 1e-9 or k > 1000:
            break
        k += 1
    return ticks


def log2_ticks(lo: float, hi: float, most: int = 9) -> list:
    """Powers of two from ``lo`` to ``hi`` (both > 0, the ends rounded out to powers of two): each one, or every
    2nd, 5th, 10th, ... exponent (multiples of it: 1K, 32K, 1M, ...) so that at most ``most`` remain."""
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    if b == a:
        b = a + 1
    every = next((k for k in (1, 2, 5, 10, 20, 50, 100) if (b // k - math.ceil(a / k) + 1) <= most), 200)
    return [2.0 ** e for e in range(a, b + 1) if e % every == 0] or [2.0 ** a]


# ------------------------------------------------------------------------------------------------ decimation
def clean(points, log_x: bool = False) -> list:
    """The finite (x, y) points, sorted by x (a point with a NaN, an infinity, or x <= 0 on a log axis dropped)."""
    out = [(float(x), float(y)) for x, y in points if finite(x) and finite(y) and (not log_x or x > 0)]
    if any(b[0] < a[0] for a, b in zip(out, out[1:])):
        out.sort(key=lambda p: p[0])
    return out


def decimate(points: list, x0: float, x1: float, columns: int) -> list:
    """At most about ``2 * columns`` of ``points`` (sorted by x): in each of ``columns`` equal slices of
    ``x0``..``x1`` the first, the lowest, the highest and the last point's y kept as min and max (in x order), then
    every run of equal y reduced to its first and last point. Spikes stay; flat stretches cost two points."""
    if columns < 1:
        columns = 1
    if len(points) > 2 * columns and x1 > x0:
        kept: list = []
        width = (x1 - x0) / columns
        current = None
        lo = hi = points[0]
        for p in points:
            col = min(columns - 1, max(0, int((p[0] - x0) / width)))
            if col != current:
                if current is not None:
                    kept.extend(sorted({lo, hi}, key=lambda q: q[0]))
                current, lo, hi = col, p, p
            else:
                if p[1] < lo[1]:
                    lo = p
                if p[1] > hi[1]:
                    hi = p
        kept.extend(sorted({lo, hi}, key=lambda q: q[0]))
        if kept[-1] != points[-1]:
            kept.append(points[-1])             # the series ends where it ends
        if kept[0] != points[0]:
            kept.insert(0, points[0])
        points = kept
    if len(points) <= 2:
        return list(points)
    out = [points[0]]
    for i in range(1, len(points) - 1):
        if not (points[i][1] == points[i - 1][1] == points[i + 1][1]):
            out.append(points[i])
    out.append(points[-1])
    return out


# ------------------------------------------------------------------------------------------------ pieces
def _t(text) -> str:
    return for_html(text, newlines=False)


def _color(c, default: str = "#444444") -> str:
    return c if isinstance(c, str) and _COLOR.match(c) else default


def _n(v: float) -> str:
    """A coordinate: one decimal, no trailing zero."""
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _text_w(text: str) -> float:
    return CHAR_W * len(text)


def _legend(items: list, x0: float, y0: float, width: float) -> tuple:
    """(svg, rows) of a legend: [(colour, text, dashed)] in rows that wrap at ``width``."""
    out, x, y, rows = [], x0, y0, 1 if items else 0
    for color, text, dashed in items:
        shown = _t(text)
        w = 22 + _text_w(text[:60]) + 14
        if x > x0 and x + w > x0 + width:
            x, y, rows = x0, y + LEGEND_ROW, rows + 1
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        out.append(f'<line x1="{_n(x)}" y1="{_n(y - 4)}" x2="{_n(x + 16)}" y2="{_n(y - 4)}" '
                   f'stroke="{_color(color)}" stroke-width="2.5"{dash}/>'
                   f'<text x="{_n(x + 20)}" y="{_n(y)}">{shown}</text>')
        x += w
    return "".join(out), rows


def _legend_rows(items: list, width: float) -> int:
    return _legend(items, 0, 0, width)[1]


def _open(width: float, height: float, title: str, kind: str, ident: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" id="{ident}" class="chart {kind}" '
            f'viewBox="0 0 {_n(width)} {_n(height)}" '
            f'width="{_n(width)}" height="{_n(height)}" role="img" '
            f'font-family="{FONT}" font-size="11" fill="#1f2328">'
            f'<title>{_t(title)}</title>'
            f'<text class="title" x="4" y="15" font-size="13" font-weight="bold">{_t(title)}</text>')


class _Scale:
    """Data to pixels along one axis (linear or log2)."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log2: bool = False):
        self.log2 = log2
        self.lo, self.hi = (math.log2(lo), math.log2(hi)) if log2 else (lo, hi)
        if self.hi == self.lo:
            self.hi = self.lo + 1
        self.p0, self.p1 = p0, p1

    def __call__(self, v: float) -> float:
        u = math.log2(v) if self.log2 else v
        return self.p0 + (u - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _y_domain(values: list, zero: bool, fixed: tuple | None) -> tuple:
    lo = min(values, default=0.0)
    hi = max(values, default=1.0)
    if fixed is not None:
        lo, hi = min(lo, fixed[0]), max(hi, fixed[1])
        return lo, hi, nice_ticks(lo, hi)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    ticks = nice_ticks(lo, hi)
    return ticks[0], ticks[-1], ticks


def _x_axis(chart: LineChart, xs: list) -> tuple:
    """(lo, hi, [(value, label)]) of a line chart's x axis."""
    if chart.x_range is not None:
        lo, hi = chart.x_range
    elif xs:
        lo, hi = min(xs), max(xs)
    else:
        lo, hi = (1.0, 2.0) if chart.x_log2 else (0.0, 1.0)
    if chart.x_log2:
        lo, hi = max(lo, 1e-300), max(hi, 1e-300)
        if hi <= lo:
            hi = lo * 2
    elif hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    if chart.x_ticks is not None:
        ticks = [(v, str(label)) for v, label in chart.x_ticks if finite(v) and lo <= v <= hi]
    elif chart.x_log2:
        ticks = [(v, fmt_bytes(v) if chart.x_bytes else fmt(v)) for v in log2_ticks(lo, hi) if lo <= v <= hi]
        if not ticks:
            ticks = [(lo, fmt_bytes(lo) if chart.x_bytes else fmt(lo))]
    else:
        ticks = [(v, fmt(v)) for v in nice_ticks(lo, hi) if lo - 1e-9 <= v <= hi + 1e-9]
    return lo, hi, ticks


def _frame(left, top, pw, ph) -> str:
    return (f'<rect x="{_n(left)}" y="{_n(top)}" width="{_n(pw)}" height="{_n(ph)}" fill="white" '
            f'stroke="#9ca3af"/>')


def _y_ticks(yscale, ticks, left, pw) -> str:
    """The y axis: a grid line and a label per tick."""
    grid = "".join(f"M{_n(left)} {_n(yscale(t))}h{_n(pw)}" for t in ticks)
    labels = "".join(f'<text x="{_n(left - 5)}" y="{_n(yscale(t) + 4)}">{_t(fmt(t))}</text>' for t in ticks)
    return (f'<g class="yaxis"><path d="{grid}" stroke="#e5e7eb"/>'
            f'<g text-anchor="end">{labels}</g></g>')


def _x_tick_marks(xscale, ticks, top, ph, grid: bool = True) -> str:
    """The x axis: a grid line, a tick mark and a label per tick."""
    xs = [(xscale(v), label) for v, label in ticks]
    lines = "".join(f"M{_n(x)} {_n(top)}v{_n(ph)}" for x, _ in xs) if grid else ""
    marks = "".join(f"M{_n(x)} {_n(top + ph)}v4" for x, _ in xs)
    labels = "".join(f'<text x="{_n(x)}" y="{_n(top + ph + 15)}">{_t(label)}</text>' for x, label in xs)
    return ('<g class="xaxis">' + (f'<path d="{lines}" stroke="#f0f2f4"/>' if lines else "")
            + f'<path d="{marks}" stroke="#9ca3af"/><g text-anchor="middle">{labels}</g></g>')


def _axis_labels(x_label, y_label, left, top, pw, ph) -> str:
    out = (f'<text class="xlabel" x="{_n(left + pw / 2)}" y="{_n(top + ph + 31)}" '
           f'text-anchor="middle">{_t(x_label)}</text>')
    if y_label is not None:
        cy = top + ph / 2
        out += (f'<text class="ylabel" x="12" y="{_n(cy)}" text-anchor="middle" '
                f'transform="rotate(-90 12 {_n(cy)})">{_t(y_label)}</text>')
    return out


# ------------------------------------------------------------------------------------------------ rendering
def render(chart, columns: int | None = None, ident: str = "chart") -> str:
    """The chart as one ``<svg>`` element. ``columns``: the most x columns a line chart's series keep
    (:func:`decimate`); the plot's width in pixels when None (min/max per pixel column). ``ident``: the element
    id, unique in the page (a line chart's clip path is named after it)."""
    ident = re.sub(r"[^A-Za-z0-9_-]", "_", ident)[:40] or "chart"
    if isinstance(chart, BarChart):
        return _bar_chart(chart, ident)
    if isinstance(chart, Timeline):
        return _timeline(chart, columns, ident)
    return _line_chart(chart, columns, ident)


def _line_chart(c: LineChart, columns: int | None, ident: str) -> str:
    left, right = 66, 16
    pw = c.width - left - right
    items = [(_color(s.color, PALETTE[i % len(PALETTE)]), s.name, s.dash) for i, s in enumerate(c.series)] \
        if c.legend else []
    items += [(r.color, r.label, r.dash) for r in c.refs if finite(r.y) and r.label]
    rows = _legend_rows(items, pw + left - 8)
    top = TITLE_H + (14 if c.note else 0) + rows * LEGEND_ROW + 8
    ph = c.height
    total_h = top + ph + 40
    series = [(s, clean(s.points, c.x_log2)) for s in c.series]
    xs = [p[0] for _, pts in series for p in pts]
    xs += [x for b in c.bands for x in (b.x0, b.x1) if finite(x) and (not c.x_log2 or x > 0)]
    lo, hi, xticks = _x_axis(c, xs)
    ys = [p[1] for _, pts in series for p in pts]
    for r in c.refs:
        ys += [v for v in (r.y, r.low, r.high) if finite(v)]
    ylo, yhi, yticks = _y_domain(ys, c.y_zero, c.y_range)
    xscale = _Scale(lo, hi, left, left + pw, c.x_log2)
    yscale = _Scale(ylo, yhi, top + ph, top)
    out = [_open(c.width, total_h, c.title, "line", ident)]
    if c.note:
        out.append(f'<text class="note" x="4" y="{TITLE_H + 10}" fill="#59636e">{_t(c.note)}</text>')
    legend, _ = _legend(items, 8, TITLE_H + (14 if c.note else 0) + 12, pw + left - 8)
    out.append(f'<g class="legend">{legend}</g>')
    out.append(_frame(left, top, pw, ph))
    clip = f"{ident}-clip"
    out.append(f'<clipPath id="{clip}"><rect x="{_n(left)}" y="{_n(top)}" width="{_n(pw)}" height="{_n(ph)}"/>'
               f'</clipPath>')
    out.append(_y_ticks(yscale, yticks, left, pw))
    out.append(_x_tick_marks(xscale, xticks, top, ph))
    for b in c.bands:
        if not (finite(b.x0) and finite(b.x1)) or b.x1 < b.x0 or (c.x_log2 and b.x0 <= 0):
            continue
        x0, x1 = max(left, xscale(b.x0)), min(left + pw, xscale(b.x1))
        if x1 < x0:
            continue
        out.append(f'<g class="band"><title>{_t(b.label)}: {_t(fmt(b.x0))} to {_t(fmt(b.x1))}</title>'
                   f'<rect x="{_n(x0)}" y="{_n(top)}" width="{_n(max(1.0, x1 - x0))}" height="{_n(ph)}" '
                   f'fill="{_color(b.color)}" fill-opacity="0.15"/>'
                   f'<text x="{_n(x0 + 3)}" y="{_n(top + 11)}" fill="#59636e" font-size="10">{_t(b.label)}</text>'
                   f'</g>')
    for r in c.refs:
        if not finite(r.y):
            continue
        if finite(r.low) and finite(r.high):
            y0, y1 = yscale(max(r.low, r.high)), yscale(min(r.low, r.high))
            out.append(f'<rect class="refband" x="{_n(left)}" y="{_n(y0)}" width="{_n(pw)}" '
                       f'height="{_n(max(1.0, y1 - y0))}" fill="{_color(r.color)}" fill-opacity="0.12">'
                       f'<title>{_t(r.label)}: {_t(fmt(r.low))} to {_t(fmt(r.high))}</title></rect>')
        y = yscale(r.y)
        dash = ' stroke-dasharray="5 4"' if r.dash else ""
        out.append(f'<line class="ref" x1="{_n(left)}" y1="{_n(y)}" x2="{_n(left + pw)}" y2="{_n(y)}" '
                   f'stroke="{_color(r.color)}" stroke-width="1.5"{dash}><title>{_t(r.label)}</title></line>')
    for v in c.vlines:
        if finite(v) and lo <= v <= hi:
            x = xscale(v)
            out.append(f'<line x1="{_n(x)}" y1="{_n(top)}" x2="{_n(x)}" y2="{_n(top + ph)}" stroke="#6e7781" '
                       f'stroke-dasharray="4 3"/>')
    cols = max(1, int(columns if columns is not None else pw))
    out.append(f'<g class="lines" clip-path="url(#{clip})" fill="none" stroke-width="1.5" stroke-linejoin="round">')
    for i, (s, pts) in enumerate(series):
        if not pts:
            continue
        color = _color(s.color, PALETTE[i % len(PALETTE)])
        pts = decimate(pts, lo, hi, cols)
        coords = " ".join(f"{round(xscale(x))},{round(yscale(y))}" for x, y in pts)    # whole pixels
        dash = ' stroke-dasharray="5 4"' if s.dash else ""
        out.append(f'<g class="series"><title>{_t(s.name)}</title>'
                   f'<polyline points="{coords}" stroke="{color}"{dash}/>')
        if s.markers:
            for x, y in pts:
                out.append(f'<circle cx="{_n(xscale(x))}" cy="{_n(yscale(y))}" r="4" fill="{color}">'
                           f'<title>{_t(s.name)}: {_t(fmt(x))}, {_t(fmt(y))}</title></circle>')
        out.append("</g>")
    out.append("</g>")
    if not any(pts for _, pts in series):
        out.append(f'<text x="{_n(left + pw / 2)}" y="{_n(top + ph / 2)}" text-anchor="middle" '
                   f'fill="#59636e">no data</text>')
    out.append(_axis_labels(c.x_label, c.y_label, left, top, pw, ph))
    out.append("</svg>")
    return "".join(out)


def _bar_chart(c: BarChart, ident: str) -> str:
    bars = [b for b in c.bars if finite(b.value)]
    label_w = min(260.0, max([_text_w(b.label[:40]) for b in bars] + [40.0]) + 10)
    left, right = label_w, 60
    pw = c.width - left - right
    items = [(color, text, False) for color, text in c.legend]
    items += [(r.color, r.label, r.dash) for r in c.refs if finite(r.y) and r.label]
    rows = _legend_rows(items, c.width - 16)
    top = TITLE_H + rows * LEGEND_ROW + 8
    bar_h = 18
    ph = max(bar_h, len(bars) * (bar_h + 6))
    total_h = top + ph + 40
    values = [b.value for b in bars]
    for r in c.refs:
        values += [v for v in (r.y, r.low, r.high) if finite(v)]
    lo, hi, ticks = _y_domain(values, True, None)
    xscale = _Scale(lo, hi, left, left + pw)
    out = [_open(c.width, total_h, c.title, "bar", ident)]
    legend, _ = _legend(items, 8, TITLE_H + 12, c.width - 16)
    out.append(f'<g class="legend">{legend}</g>')
    out.append(_frame(left, top, pw, ph))
    out.append(_x_tick_marks(xscale, [(t, fmt(t)) for t in ticks], top, ph))
    for r in c.refs:
        if not finite(r.y):
            continue
        if finite(r.low) and finite(r.high):
            x0, x1 = xscale(min(r.low, r.high)), xscale(max(r.low, r.high))
            out.append(f'<rect class="refband" x="{_n(x0)}" y="{_n(top)}" width="{_n(max(1.0, x1 - x0))}" '
                       f'height="{_n(ph)}" fill="{_color(r.color)}" fill-opacity="0.12">'
                       f'<title>{_t(r.label)}: {_t(fmt(r.low))} to {_t(fmt(r.high))}</title></rect>')
    x_zero = xscale(max(lo, 0.0))
    for i, b in enumerate(bars):
        y = top + 3 + i * (bar_h + 6)
        x = xscale(b.value)
        x0, x1 = min(x, x_zero), max(x, x_zero)
        hover = b.hover or f"{b.label}: {fmt(b.value)}"
        out.append(f'<g class="bar"><title>{_t(hover)}</title>'
                   f'<rect x="{_n(x0)}" y="{_n(y)}" width="{_n(max(1.0, x1 - x0))}" height="{bar_h}" '
                   f'fill="{_color(b.color, "#1f77b4")}"/>'
                   f'<text x="{_n(left - 5)}" y="{_n(y + 13)}" text-anchor="end">{_t(b.label[:40])}</text>'
                   f'<text x="{_n(x1 + 4)}" y="{_n(y + 13)}">{_t(fmt(b.value))}</text></g>')
    for r in c.refs:
        if finite(r.y):
            x = xscale(r.y)
            dash = ' stroke-dasharray="5 4"' if r.dash else ""
            out.append(f'<line class="ref" x1="{_n(x)}" y1="{_n(top)}" x2="{_n(x)}" y2="{_n(top + ph)}" '
                       f'stroke="{_color(r.color)}" stroke-width="1.5"{dash}><title>{_t(r.label)}</title></line>')
    if not bars:
        out.append(f'<text x="{_n(left + pw / 2)}" y="{_n(top + ph / 2 + 4)}" text-anchor="middle" '
                   f'fill="#59636e">no data</text>')
    out.append(_axis_labels(c.value_label, None, left, top, pw, ph))
    out.append("</svg>")
    return "".join(out)


def merge_spans(spans: list, gap: float) -> list:
    """The (x0, x1) spans sorted, those less than ``gap`` apart (or overlapping) merged into one."""
    out: list = []
    for a, b in sorted(spans):
        if out and a - out[-1][1] < gap:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _timeline(c: Timeline, columns: int | None, ident: str) -> str:
    lanes = [(label, color, [(a, b) for a, b in spans if finite(a) and finite(b) and b >= a])
             for label, color, spans in c.lanes]
    label_w = min(260.0, max([_text_w(label[:40]) for label, _, _ in lanes] + [40.0]) + 10)
    left, right = label_w, 16
    pw = c.width - left - right
    top = TITLE_H + 8
    lane_h = 16
    ph = max(lane_h, len(lanes) * (lane_h + 4))
    total_h = top + ph + 40
    xs = [x for _, _, spans in lanes for span in spans for x in span]
    if c.x_range is not None:
        lo, hi = c.x_range
    else:
        lo, hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if hi <= lo:
        hi = lo + 1.0
    xscale = _Scale(lo, hi, left, left + pw)
    gap = (hi - lo) / max(1, int(columns if columns is not None else pw))     # spans closer than a column: one
    out = [_open(c.width, total_h, c.title, "timeline", ident), _frame(left, top, pw, ph)]
    out.append(_x_tick_marks(xscale, [(t, fmt(t)) for t in nice_ticks(lo, hi) if lo <= t <= hi], top, ph))
    for i, (label, color, spans) in enumerate(lanes):
        y = top + 2 + i * (lane_h + 4)
        active = sum(b - a for a, b in merge_spans(spans, 0.0))
        out.append(f'<g class="lane"><title>{_t(label)}: {_t(fmt(active, 3))} {_t(c.unit)} in all</title>'
                   f'<text x="{_n(left - 5)}" y="{_n(y + 12)}" text-anchor="end">{_t(label[:40])}</text>')
        for a, b in merge_spans(spans, gap):
            x0, x1 = xscale(max(a, lo)), xscale(min(b, hi))
            out.append(f'<rect x="{_n(x0)}" y="{_n(y)}" width="{_n(max(1.5, x1 - x0))}" height="{lane_h}" '
                       f'fill="{_color(color)}" fill-opacity="0.6"/>')
        out.append("</g>")
    if not lanes:
        out.append(f'<text x="{_n(left + pw / 2)}" y="{_n(top + 12)}" text-anchor="middle" '
                   f'fill="#59636e">no data</text>')
    out.append(_axis_labels(c.x_label, None, left, top, pw, ph))
    out.append("</svg>")
    return "".join(out)
