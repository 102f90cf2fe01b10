"""report.html in a real headless browser (Debian's chromium, testbed/browser.py): a real `flagperf run` on
localhost, its report rendered with every plot and no console error, no network load, a screenshot, and
`flagperf report --html`; and a summary full of hostile strings that stay text in the browser."""

import os
import re
import shutil
import socket

import pytest

from testbed import browser
from tests.unit.test_html_report import hostile_summary

from .conftest import only_run_dir, run_cli, write_conf

PNG = b"\x89PNG\r\n\x1a\n"
# an element that would load something: <script src=...>, <link href=...>, <img src=...>, ... (none may exist)
EXTERNAL = re.compile(r"<(script|link|img|iframe|embed|object|source|audio|video|track)\b[^>]*\b(src|href)\s*=", re.I)


def page_without_plotlyjs(text):
    from plotly.offline import get_plotlyjs
    js = get_plotlyjs()
    assert text.count(js) == 1, "plotly.js must be embedded exactly once, inline"
    return text.replace(js, "")


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
    page = page_without_plotlyjs(text)
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "default-src 'none'" in page                        # the page may load nothing (CSP)
    # one plot of the headline metric per round, one monitor plot per round and node
    assert page.count("Plotly.newPlot(") == 3
    rendered = browser.render(html, chromium=chromium)
    assert rendered.console == [], "\n".join(rendered.console)
    assert rendered.dom.count('class="plot-container') == 3, rendered.stderr[-3000:]
    assert rendered.dom.count('class="main-svg"') >= 6
    assert "gemm-pytorch-h-1x2: tflops_" in rendered.dom and "CPU util %" in rendered.dom
    # nor did the scripts add any element that loads something
    assert not EXTERNAL.search(re.sub(r"<script\b[^>]*>.*?</script>", "", rendered.dom, flags=re.S))
    shot = tmp_path / "report.png"
    console = browser.screenshot(html, shot, chromium=chromium).console
    assert console == [], "\n".join(console)
    data = shot.read_bytes()
    assert data.startswith(PNG) and len(data) > 20_000
    if os.environ.get("FLAGPERF_SCREENSHOT"):       # keep it to look at
        shutil.copyfile(shot, os.environ["FLAGPERF_SCREENSHOT"])
    # flagperf report --html makes it again from summary.json and the series.json it names
    assert (run / "series.json").is_file()
    html.unlink()
    code, out, err = run_cli(["report", run, "--html"])
    assert code == 0, out + err
    assert out.strip() == str(html)
    again = html.read_text(encoding="utf-8")
    assert page_without_plotlyjs(again).count("Plotly.newPlot(") == 3
    assert len(again) == pytest.approx(len(text), abs=200)      # the same, but for the rounding in summary.json


def test_hostile_strings_stay_text_in_the_browser(tmp_path, chromium):
    from flagperf.reporters.html import HtmlReporter
    from flagperf.results.series import summarise_series

    evil = "<script>document.title='pwned-script'</script>"
    evil_img = "<img src=x onerror=\"document.title='pwned-img'\">"
    s = hostile_summary(tmp_path, evil=evil, evil_img=evil_img)
    s.series = summarise_series(s, tmp_path)        # the monitor plots too, with the hostile node names
    rep = HtmlReporter()
    path = rep.write(s, tmp_path)
    rendered = browser.render(path, chromium=chromium)
    assert rendered.console == [], "\n".join(rendered.console)
    title = re.search(r"<title>(.*?)</title>", rendered.dom, re.S).group(1)
    assert title == "flagperf run20260102100000-abcdef: failed"
    assert "pwned" not in title
    assert "&lt;script&gt;document.title='pwned-script'&lt;/script&gt;" in rendered.dom    # shown, as text
    assert rendered.dom.count('class="plot-container') == len(rep.figures) > 0
