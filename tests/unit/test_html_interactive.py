"""report-interactive.html (flagperf/reporters/interactive.py): report.html's page with plotly charts, written only
by `flagperf report --html --interactive`: the same charts, plotly.js once, every script admitted by its hash and
nothing else, hostile labels escaped inside the figures too, and never written with a run."""

import base64
import hashlib
import re

import pytest

from flagperf.reporters import svg, write_reports
from flagperf.reporters.html import HtmlReporter
from flagperf.reporters.interactive import InteractiveReporter, to_plotly
from flagperf.results.series import summarise_series
from tests.unit.test_html_report import EVIL, hostile_summary, make_summary, ranking, verdict


def scripts_of(page: str) -> list:
    return re.findall(r"<script\b[^>]*>(.*?)</script>", page, re.S)


def test_same_charts_as_report_html_drawn_by_plotly(tmp_path):
    from plotly.offline import get_plotlyjs
    s = make_summary(tmp_path)
    s.cases[0].verdicts = [verdict("tflops_fp32", 11.0, 11.0)]
    s.rankings = [ranking()]
    s.series = summarise_series(s, tmp_path)
    light, rich = HtmlReporter(), InteractiveReporter()
    light.render(s)
    path = rich.write(s, tmp_path)
    assert path.name == "report-interactive.html"
    page = path.read_text(encoding="utf-8")
    assert rich.figures == light.figures and len(rich.plotly_figures) == len(light.figures) > 10
    assert page.count(get_plotlyjs()) == 1 and page.count("Plotly.newPlot(") == len(light.figures)
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="chart' not in page and "What the hardware delivered" in page
    # every script is the page's own, admitted by its sha256; nothing else (no 'unsafe-inline')
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    hashes = {"'sha256-" + base64.b64encode(hashlib.sha256(t.encode()).digest()).decode() + "'"
              for t in scripts_of(page)}
    assert set(re.search(r"script-src ([^;]*);", csp).group(1).split()) == hashes
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp.split("style-src")[0]
    head = rich.plotly_figures[0][1]            # the hosts against their reference, coloured
    assert list(head.data[0].x) == [12.0, 3.0] and list(head.data[0].marker.color) == ["#1a7f37", "#cf222e"]


def test_chart_forms():
    import plotly.graph_objects as go
    fig, _ = to_plotly(go, svg.LineChart("t", "message size (bytes)", "busbw (GB/s)",
                                         [svg.Series("all_reduce", [(8, 1.0), (1 << 20, 5.0), (0, 9.0)])],
                                         x_log2=True, x_bytes=True))
    assert fig.layout.xaxis.type == "log" and list(fig.data[0].x) == [8, 1 << 20]     # no x <= 0 on a log axis
    assert fig.layout.yaxis.title.text == "busbw (GB/s)" and fig.layout.yaxis.rangemode == "tozero"
    fig, _ = to_plotly(go, svg.LineChart("u", "s", "util (%)", [svg.Series("gpu 0", [(0, 5), (1, 7)])],
                                         y_range=(0, 100)))
    assert tuple(fig.layout.yaxis.range) == (0, 100)
    fig, _ = to_plotly(go, svg.Timeline("throttle", "s", [("gpu 0: sw_power_cap", "#1f77b4", [(1, 3), (5, 6)])]))
    assert list(fig.data[0].base) == [1, 5] and list(fig.data[0].x) == [2, 1]


def test_hostile_labels_are_escaped_inside_the_figures(tmp_path):
    s = hostile_summary(tmp_path)
    s.series = summarise_series(s, tmp_path)
    rep = InteractiveReporter()
    page = rep.write(s, tmp_path).read_text(encoding="utf-8")
    from plotly.offline import get_plotlyjs
    page = page.replace(get_plotlyjs(), "")
    assert page.count("<script") == 2 + len(rep.plotly_figures)         # plotly.js, its config, one per figure
    for _, fig in rep.plotly_figures:
        blob = fig.to_json()
        assert "<script" not in blob and "<img" not in blob
    assert EVIL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_written_on_request_only(tmp_path, run_cli):
    run_dir = tmp_path / "run20260102100000-abcdef"
    s = make_summary(run_dir)
    s.save(run_dir / "summary.json")
    s.series = summarise_series(s, run_dir)
    names = [o.path.name for o in write_reports(s, run_dir) if o.path]
    assert "report.html" in names and "report-interactive.html" not in names
    rc, out, err = run_cli("report", run_dir, "--html", "--interactive", cwd=tmp_path)
    assert rc == 0, err
    assert out.split() == [str(run_dir / "report.html"), str(run_dir / "report-interactive.html")]
    assert (run_dir / "report-interactive.html").stat().st_size > 1_000_000          # plotly.js inside
    assert (run_dir / "report.html").stat().st_size < 300_000
    (run_dir / "report-interactive.html").unlink()
    (run_dir / "report-interactive.html").mkdir()           # cannot be replaced: the reason on stderr, exit 1
    rc, out, err = run_cli("report", run_dir, "--interactive", cwd=tmp_path)
    assert rc == 1 and out.strip() == str(run_dir / "report.html")
    assert err.startswith("flagperf: cannot write report-interactive.html: "), err


def test_missing_plotly_is_a_report_error(tmp_path, monkeypatch):
    import sys

    from flagperf.reporters.html import ReportError
    monkeypatch.setitem(sys.modules, "plotly.offline", None)       # import plotly.offline raises ImportError
    with pytest.raises(ReportError, match="plotly is not installed"):
        InteractiveReporter().write(make_summary(tmp_path), tmp_path)
    assert not (tmp_path / "report-interactive.html").exists()
    assert HtmlReporter().write(make_summary(tmp_path), tmp_path).is_file()       # report.html needs no plotly
