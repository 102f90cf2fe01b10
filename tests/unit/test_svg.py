"""flagperf/reporters/svg.py: the inline SVG charts of report.html: tick values, number labels, the log2 axis,
decimation of long series, NaN and infinities, empty charts, bands and reference lines, bar colours, hover text,
and escaping of every label (a hostile host name stays text; an ESC sequence is shown, not passed)."""

import re
import xml.etree.ElementTree as ET

import pytest

from flagperf.reporters import svg

NS = "{http://www.w3.org/2000/svg}"
EVIL = '<script>alert(1)</script><img src=x onerror="alert(2)">\x1b[31mRED\x1b[0m\u202e'
ALLOWED_TAGS = {"svg", "title", "text", "g", "rect", "line", "path", "polyline", "circle", "clipPath"}


def parse(text: str) -> ET.Element:
    """The chart as XML (it must be well-formed), after checking it holds nothing but drawing elements."""
    root = ET.fromstring(text)
    for el in root.iter():
        assert el.tag.removeprefix(NS) in ALLOWED_TAGS, el.tag
        for name in el.attrib:
            assert not name.lower().startswith("on") and "href" not in name.lower(), name
    return root


def texts(root) -> list:
    return ["".join(el.itertext()) for el in root.iter(f"{NS}text")]


def polylines(root) -> list:
    return [[tuple(map(float, p.split(","))) for p in el.get("points").split()] for el in root.iter(f"{NS}polyline")]


# ------------------------------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("lo, hi, ticks", [
    (0, 12.3, [0, 2.5, 5, 7.5, 10, 12.5]),
    (0, 100, [0, 20, 40, 60, 80, 100]),
    (0, 1980, [0, 500, 1000, 1500, 2000]),
    (0.1, 0.35, [0.1, 0.15, 0.2, 0.25, 0.3, 0.35]),
    (-7, 3, [-8, -6, -4, -2, 0, 2, 4]),
    (0, 7e11, [0, 2e11, 4e11, 6e11, 8e11]),
])
def test_nice_ticks_cover_the_range_at_a_nice_step(lo, hi, ticks):
    got = svg.nice_ticks(lo, hi)
    assert got == pytest.approx(ticks)
    assert got[0] <= lo and got[-1] >= hi


def test_nice_ticks_of_a_point_and_of_nonsense():
    assert svg.nice_ticks(3, 3)[0] <= 3 <= svg.nice_ticks(3, 3)[-1] and len(svg.nice_ticks(3, 3)) >= 2
    assert svg.nice_ticks(0, 0) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert svg.nice_ticks(float("nan"), 1) == [0.0, 1.0] and svg.nice_ticks(0, float("inf")) == [0.0, 1.0]
    assert svg.nice_ticks(10, 0) == svg.nice_ticks(0, 10)


def test_number_labels():
    assert svg.fmt(0.1 + 0.2) == "0.3" and svg.fmt(1234.5678) == "1235" and svg.fmt(12.5) == "12.5"
    assert svg.fmt(0.000123) == "1.230e-04" and svg.fmt(7e11) == "7.000e+11" and svg.fmt(42) == "42"
    assert svg.fmt(float("nan")) == "-" and svg.fmt(float("inf")) == "-" and svg.fmt(None) == "-"
    assert svg.fmt(True) == "-" and svg.fmt(0.0) == "0" and svg.fmt(-2.5) == "-2.5"
    assert [svg.fmt_bytes(v) for v in (8, 1024, 1536, 64 << 20, 1 << 30, 2 << 40)] == [
        "8", "1K", "1.5K", "64M", "1G", "2T"]


def test_log2_ticks_are_powers_of_two_and_few():
    ticks = svg.log2_ticks(8, 8 << 30)
    assert [svg.fmt_bytes(t) for t in ticks] == ["32", "1K", "32K", "1M", "32M", "1G"]     # every 5th exponent
    assert svg.log2_ticks(4, 64) == [4, 8, 16, 32, 64]
    assert svg.log2_ticks(1024, 1024) == [1024, 2048]
    assert len(svg.log2_ticks(1e-30, 1e30)) <= 9


# ------------------------------------------------------------------------------------------------- data
def test_clean_skips_nan_inf_and_nonpositive_x_on_a_log_axis():
    pts = [(1, 1.0), (2, float("nan")), (3, float("inf")), (float("-inf"), 2.0), (0, 5.0), (-1, 5.0), (4, None),
           (5, True), (6, 6)]
    assert svg.clean(pts) == [(-1, 5.0), (0, 5.0), (1, 1.0), (6, 6)]
    assert svg.clean(pts, log_x=True) == [(1, 1.0), (6, 6)]
    assert svg.clean([(3, 1), (1, 2), (2, 3)]) == [(1, 2), (2, 3), (3, 1)]      # sorted by x


def test_decimate_keeps_min_and_max_per_column_in_order():
    n = 100_000
    pts = [(i / 100, (i * 7919) % 1000 / 10) for i in range(n)]
    pts[54321] = (543.21, 5000.0)                   # a spike
    pts[12345] = (123.45, -300.0)                   # a dip
    out = svg.decimate(pts, 0, n / 100, 100)
    assert len(out) <= 2 * 100 + 2 and [x for x, _ in out] == sorted(x for x, _ in out)
    assert (543.21, 5000.0) in out and (123.45, -300.0) in out
    assert out[0] in pts and set(out) <= set(pts)


def test_decimate_reduces_flat_runs_and_leaves_short_series():
    flat = [(i, 7.0) for i in range(10_000)]
    assert svg.decimate(flat, 0, 10_000, 500) == [(0, 7.0), (9_999, 7.0)]
    short = [(0, 1.0), (1, 2.0), (2, 1.0)]
    assert svg.decimate(short, 0, 2, 500) == short
    assert svg.decimate([], 0, 1, 10) == [] and svg.decimate([(1, 1)], 0, 1, 10) == [(1, 1)]


def test_merge_spans():
    assert svg.merge_spans([(5, 6), (0, 1), (1.05, 2)], 0.1) == [(0, 2), (5, 6)]
    assert svg.merge_spans([(0, 1), (3, 4)], 0.0) == [(0, 1), (3, 4)]


# ------------------------------------------------------------------------------------------------- line charts
def line(**kw) -> svg.LineChart:
    base = dict(title="gemm: tflops per round", x_label="round", y_label="tflops (TFLOP/s)",
                series=[svg.Series("h1", [(1, 10.0), (2, 12.0), (3, 11.0)], markers=True)])
    base.update(kw)
    return svg.LineChart(**base)


def test_line_chart_has_axes_with_units_legend_and_hover_text():
    root = parse(svg.render(line(series=[svg.Series("h1", [(1, 10.0), (2, 12.0)], markers=True),
                                         svg.Series("h2", [(1, 9.0), (2, 9.5)])]), ident="chart7"))
    assert root.get("id") == "chart7" and root.get("class") == "chart line"
    words = texts(root)
    assert "gemm: tflops per round" in words and "round" in words and "tflops (TFLOP/s)" in words
    assert "h1" in words and "h2" in words                      # the legend
    assert words.count("0") >= 1                                # y from zero by default
    hovers = ["".join(t.itertext()) for c in root.iter(f"{NS}circle") for t in c.iter(f"{NS}title")]
    assert hovers == ["h1: 1, 10", "h1: 2, 12"]
    assert len(polylines(root)) == 2


def test_y_axis_from_zero_or_fixed_and_not_from_zero_when_asked():
    def y_labels(chart):
        root = parse(svg.render(chart))
        g = [el for el in root.iter(f"{NS}g") if el.get("class") == "yaxis"][0]
        return texts(g)
    assert y_labels(line(series=[svg.Series("a", [(0, 50), (1, 60)])]))[0] == "0"
    assert y_labels(line(series=[svg.Series("a", [(0, 50), (1, 60)])], y_zero=False))[0] == "50"
    util = y_labels(line(series=[svg.Series("util", [(0, 5), (1, 30)])], y_range=(0, 100)))
    assert util[0] == "0" and util[-1] == "100"
    assert y_labels(line(series=[svg.Series("a", [(0, 5), (1, 130)])], y_range=(0, 100)))[-1] == "150"


def test_log2_x_axis_places_powers_of_two_evenly_with_size_labels():
    sizes = [1 << k for k in range(3, 31)]
    chart = line(x_label="message size (bytes)", y_label="busbw (GB/s)", x_log2=True, x_bytes=True,
                 series=[svg.Series("all_reduce", [(s, k * 1.5) for k, s in enumerate(sizes)], markers=True),
                         svg.Series("bad", [(0, 1.0), (-4, 2.0)])])        # no point on a log axis: skipped
    root = parse(svg.render(chart))
    xs = [float(c.get("cx")) for c in root.iter(f"{NS}circle")]
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    assert len(xs) == len(sizes) and max(gaps) - min(gaps) < 0.3          # equal steps per doubling
    xaxis = [el for el in root.iter(f"{NS}g") if el.get("class") == "xaxis"][0]
    labels = texts(xaxis)
    assert labels == ["32", "1K", "32K", "1M", "32M", "1G"]


def test_bands_reference_lines_and_vertical_marks():
    chart = line(bands=[svg.Band(0.5, 1.5, "init"), svg.Band(1.5, 2.5, "run", "#2ca02c"),
                        svg.Band(3, 2, "backwards"), svg.Band(float("nan"), 2, "nan")],
                 refs=[svg.RefLine(11.0, "reference 11", low=9.9, high=12.1),
                       svg.RefLine(float("nan"), "never"), svg.RefLine(10.5, "median 10.5", "#7f7f7f", dash=True)],
                 vlines=[0.75, float("inf")])
    text = svg.render(chart)
    root = parse(text)
    bands = [el for el in root.iter(f"{NS}g") if el.get("class") == "band"]
    assert [texts(b) for b in bands] == [["init"], ["run"]]
    assert ["".join(t.itertext()) for b in bands for t in b.iter(f"{NS}title")] == ["init: 0.5 to 1.5",
                                                                                     "run: 1.5 to 2.5"]
    refs = [el for el in root.iter(f"{NS}line") if el.get("class") == "ref"]
    assert len(refs) == 2 and refs[1].get("stroke-dasharray")
    (band,) = [el for el in root.iter(f"{NS}rect") if el.get("class") == "refband"]
    assert "".join(band.find(f"{NS}title").itertext()) == "reference 11: 9.9 to 12.1"
    assert "reference 11" in texts(root) and "never" not in text
    assert len([el for el in root.iter(f"{NS}line") if el.get("stroke") == "#6e7781"]) == 1    # the finite mark


def test_nan_points_are_skipped_and_an_empty_chart_says_no_data():
    root = parse(svg.render(line(series=[svg.Series("a", [(1, 1.0), (2, float("nan")), (3, 3.0)])])))
    assert len(polylines(root)[0]) == 2
    for empty in (line(series=[]), line(series=[svg.Series("a", [])]),
                  line(series=[svg.Series("a", [(1, float("nan"))])]), line(x_log2=True, series=[])):
        root = parse(svg.render(empty))
        assert polylines(root) == [] and "no data" in texts(root)


def test_a_long_series_is_decimated_to_the_pixel_columns():
    pts = [(i * 0.01, (i * 7919) % 997) for i in range(200_000)]
    text = svg.render(line(series=[svg.Series("power", pts)], width=640))
    (drawn,) = polylines(parse(text))
    assert len(drawn) <= 2 * (640 - 66 - 16) + 2 and len(text) < 40_000
    fewer = svg.render(line(series=[svg.Series("power", pts)], width=640), columns=50)
    assert len(polylines(parse(fewer))[0]) <= 102


def test_hostile_labels_are_text_everywhere():
    chart = line(title=EVIL, x_label=EVIL, y_label=EVIL, note=EVIL,
                 series=[svg.Series(EVIL, [(1, 1.0), (2, 2.0)], color='red" onload="alert(3)', markers=True)],
                 bands=[svg.Band(1, 2, EVIL, color="url(javascript:alert(4))")], refs=[svg.RefLine(1.5, EVIL)],
                 x_ticks=[(1, EVIL), (2, "2")])
    for text in (svg.render(chart, ident='x" onload="alert(5)'),
                 svg.render(svg.BarChart(EVIL, EVIL, [svg.Bar(EVIL, 3.0, hover=EVIL)], [svg.RefLine(2, EVIL)],
                                         legend=[("#1a7f37", EVIL)])),
                 svg.render(svg.Timeline(EVIL, EVIL, [(EVIL, "#000", [(0, 1)])]))):
        root = parse(text)                          # well-formed, drawing elements only, no handler attribute
        assert "<script" not in text and "<img" not in text and "\x1b" not in text and "\u202e" not in text
        assert "alert(3)" not in text and "javascript" not in text and "alert(5)" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "\\x1b[31mRED" in text and "\\u202e" in text
        shown = texts(root) + ["".join(t.itertext()) for t in root.iter(f"{NS}title")]
        assert any(EVIL.split("\x1b")[0] in s for s in shown)           # shown as the text it is


# ------------------------------------------------------------------------------------------------- bars, lanes
def test_bar_chart_colours_values_reference_and_hover():
    chart = svg.BarChart("gemm per GPU", "tflops (TFLOP/s)",
                         [svg.Bar("h1 gpu 0", 700.0, "#1a7f37"), svg.Bar("h1 gpu 1", 420.0, "#cf222e", "slow"),
                          svg.Bar("h1 gpu 2", float("nan"))],
                         [svg.RefLine(690.0, "reference 690", low=655.5, high=724.5)],
                         legend=[("#1a7f37", "within tolerance"), ("#cf222e", "below the reference")])
    root = parse(svg.render(chart))
    bars = [el for el in root.iter(f"{NS}g") if el.get("class") == "bar"]
    assert [b.find(f"{NS}rect").get("fill") for b in bars] == ["#1a7f37", "#cf222e"]     # NaN: no bar
    assert ["".join(b.find(f"{NS}title").itertext()) for b in bars] == ["h1 gpu 0: 700", "slow"]
    words = texts(root)
    assert {"h1 gpu 0", "700", "420", "tflops (TFLOP/s)", "within tolerance", "reference 690"} <= set(words)
    widths = [float(b.find(f"{NS}rect").get("width")) for b in bars]
    assert widths[0] / widths[1] == pytest.approx(700 / 420, rel=0.01)          # from zero
    assert parse(svg.render(svg.BarChart("none", "x", []))) is not None


def test_timeline_lanes_merge_spans_closer_than_a_column():
    spans = [(i, i + 0.5) for i in range(0, 100)]          # on half of every second, for 100 s
    chart = svg.Timeline("throttle reasons", "s", [("gpu 0: sw_power_cap", "#1f77b4", spans),
                                                   ("gpu 1: hw_slowdown", "#ff7f0e", [(10, 20)])])
    root = parse(svg.render(chart, columns=20))              # 5 s per column: one span
    lanes = [el for el in root.iter(f"{NS}g") if el.get("class") == "lane"]
    assert [len(lane.findall(f"{NS}rect")) for lane in lanes] == [1, 1]
    assert "".join(lanes[0].find(f"{NS}title").itertext()) == "gpu 0: sw_power_cap: 50 s in all"
    assert len(parse(svg.render(chart)).findall(f".//{NS}g[@class='lane']")[0].findall(f"{NS}rect")) == 100
    assert texts(root)[-1] == "s" and re.search(r">gpu 1: hw_slowdown<", svg.render(chart))
