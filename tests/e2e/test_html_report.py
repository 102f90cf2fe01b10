"""report.html in a real headless browser (Debian's chromium, testbed/browser.py): a real `flagperf run` on
localhost, its report rendered with every chart as inline SVG (axes, units, legends), no script, no console or
CSP error, no network load, a screenshot (kept when a check fails), and `flagperf report --html`; and a summary
full of hostile strings that stay text in the browser, inside the charts too; and report-interactive.html, whose
plotly figures draw with every script admitted by the CSP."""

import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from testbed import browser
from tests.unit.test_html_report import hostile_summary

from .conftest import only_run_dir, run_cli, write_conf

PNG = b"\x89PNG\r\n\x1a\n"
# an element that would load something: <script src=...>, <link href=...>, <img src=...>, ... (none may exist)
EXTERNAL = re.compile(r"<(script|link|img|iframe|embed|object|source|audio|video|track)\b[^>]*\b(src|href)\s*=", re.I)


@contextmanager
def screenshot_kept_on_failure(shot: Path):
    """Run the checks; when one fails, copy the screenshot where it outlives the test ($FLAGPERF_SCREENSHOT_DIR,
    else the temporary directory) and name it in the failure."""
    try:
        yield
    except AssertionError as exc:
        keep_dir = Path(os.environ.get("FLAGPERF_SCREENSHOT_DIR") or tempfile.gettempdir())
        keep = keep_dir / f"flagperf-report-{os.getpid()}-{shot.name}"
        if shot.is_file():
            shutil.copyfile(shot, keep)
        raise AssertionError(f"{exc}\nscreenshot of the page: {keep if shot.is_file() else 'none taken'}") from exc


def charts_of(dom: str) -> dict:
    """{chart id: its serialized <svg> element} of a rendered DOM."""
    return {m.group(1): m.group(0) for m in re.finditer(r'<svg [^>]*id="(chart\d+)".*?</svg>', dom, re.S)}


def axis_labels(chart: str) -> tuple:
    """(x axis label, y axis label or None) of one chart's SVG."""
    x = re.search(r'<text class="xlabel"[^>]*>(.*?)</text>', chart, re.S)
    y = re.search(r'<text class="ylabel"[^>]*>(.*?)</text>', chart, re.S)
    return (x.group(1) if x else None), (y.group(1) if y else None)


def test_report_html_of_a_real_run(tmp_path, chromium):
    with socket.socket() as sock:               # another test session may hold the default MASTER_PORT
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {port}\n")
    conf = write_conf(tmp_path, {"gemm:pytorch:h:1:2:2": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    html = run / "report.html"
    assert html.is_file() and f"{html}" in (run / "flagperf_run.log").read_text()
    text = html.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) < 1_000_000                 # light: no plotly.js, charts drawn as SVG
    assert "<script" not in text and not EXTERNAL.search(text)
    assert "default-src 'none'" in text and "script-src" not in text    # the page may run and load nothing
    shot = tmp_path / "report.png"
    console = browser.screenshot(html, shot, chromium=chromium).console
    with screenshot_kept_on_failure(shot):
        assert console == [], "\n".join(console)                  # no script or CSP error, nothing refused
        data = shot.read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000
        rendered = browser.render(html, chromium=chromium)
        assert rendered.console == [], "\n".join(rendered.console)
        charts = charts_of(rendered.dom)
        # the headline metric per round, then per round the node's monitor charts (CPU, memory, ...)
        assert len(charts) >= 3, rendered.stderr[-3000:]
        (head,) = [c for c in charts.values() if re.search(r">gemm-pytorch-h-1x2: tflops_\w+ per round</text>", c)]
        assert 'class="xaxis"' in head and 'class="yaxis"' in head
        x, y = axis_labels(head)
        assert x == "round" and re.fullmatch(r"tflops_\w+ \(TFLOP/s\)", y), (x, y)
        assert "<polyline" in head and "<circle" in head             # the values, with their hover text
        monitors = [c for c in charts.values() if "s since the round's ranks started" in c]
        assert len(monitors) >= 2
        labels = [axis_labels(c)[1] for c in monitors]
        assert "CPU util (%)" in labels and "memory used (MiB)" in labels, labels
        for c in monitors:
            assert 'class="xaxis"' in c and 'class="yaxis"' in c and re.search(r">\d+</text>", c)
        cpu = next(c for c in monitors if axis_labels(c)[1] == "CPU util (%)")
        yticks = re.findall(r"<text [^>]*>([^<]*)</text>", cpu.split('class="yaxis"')[1].split("</g></g>")[0])
        assert yticks[0] == "0" and yticks[-1] == "100", yticks           # utilisation: 0 to 100
        assert "<script" not in rendered.dom and not EXTERNAL.search(rendered.dom)
    if os.environ.get("FLAGPERF_SCREENSHOT"):       # keep it to look at
        shutil.copyfile(shot, os.environ["FLAGPERF_SCREENSHOT"])
    # flagperf report --html makes it again from summary.json and the series.json it names
    assert (run / "series.json").is_file()
    html.unlink()
    code, out, err = run_cli(["report", run, "--html"])
    assert code == 0, out + err
    assert out.strip() == str(html)
    again = html.read_text(encoding="utf-8")
    assert again.count("</svg>") == text.count("</svg>")
    assert len(again) == pytest.approx(len(text), abs=2000)     # the same, but for the rounding in summary.json


def test_hostile_strings_stay_text_in_the_browser(tmp_path, chromium):
    from flagperf.reporters.html import HtmlReporter
    from flagperf.results.series import summarise_series

    evil = "<script>document.title='pwned-script'</script>"
    evil_img = "<img src=x onerror=\"document.title='pwned-img'\">"
    s = hostile_summary(tmp_path, evil=evil, evil_img=evil_img)
    s.series = summarise_series(s, tmp_path)        # the monitor charts too, with the hostile node names
    rep = HtmlReporter()
    path = rep.write(s, tmp_path)
    shot = tmp_path / "hostile.png"
    console = browser.screenshot(path, shot, chromium=chromium).console
    with screenshot_kept_on_failure(shot):
        assert console == [], "\n".join(console)
        rendered = browser.render(path, chromium=chromium)
        assert rendered.console == [], "\n".join(rendered.console)
        title = re.search(r"<title>(.*?)</title>", rendered.dom, re.S).group(1)
        assert title == "flagperf run20260102100000-abcdef: failed"
        assert "pwned" not in title and "<script" not in rendered.dom and "<img" not in rendered.dom
        assert "&lt;script&gt;document.title='pwned-script'&lt;/script&gt;" in rendered.dom    # shown, as text
        charts = charts_of(rendered.dom)
        assert len(charts) == len(rep.figures) > 0
        drawn = "".join(charts.values())
        assert "&lt;img src=x onerror=\"document.title='pwned-img'\"&gt;" in drawn      # inside the charts too


def test_report_interactive_html_draws_every_chart_with_plotly(tmp_path, chromium):
    from flagperf.reporters.interactive import InteractiveReporter
    from flagperf.results.series import summarise_series
    from tests.unit.test_html_report import make_summary

    s = make_summary(tmp_path)
    s.series = summarise_series(s, tmp_path)
    rep = InteractiveReporter()
    path = rep.write(s, tmp_path)
    shot = tmp_path / "interactive.png"
    console = browser.screenshot(path, shot, chromium=chromium).console
    with screenshot_kept_on_failure(shot):
        assert console == [], "\n".join(console)            # every script admitted by its hash, none refused
        rendered = browser.render(path, chromium=chromium)
        assert rendered.console == [], "\n".join(rendered.console)
        assert rendered.dom.count('class="plot-container') == len(rep.figures) > 10, rendered.stderr[-3000:]
        assert "CPU util (%)" in rendered.dom and "nvidia power (W)" in rendered.dom
        assert not EXTERNAL.search(re.sub(r"<script\b[^>]*>.*?</script>", "", rendered.dom, flags=re.S))
