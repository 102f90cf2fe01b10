"""report.html (flagperf/reporters/html.py) on hand-built summaries and node directories, summarised into
series.json (flagperf/results/series.py) as a run does: contents, plots, verdicts, rankings, escaping of everything
a host wrote, bounds, a damaged or missing series.json, and `flagperf report --html`.
(tests/e2e/test_html_report.py renders it in a real browser.)"""
import json
import os
import re
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from flagperf.records import Failure, Ranking, ReferenceVerdict
from flagperf.reporters import ReportOutcome, reporter, write_reports
from flagperf.reporters.html import MAX_GPU_ROWS, HtmlReporter, ReportError, num, status_text, verdict_band
from flagperf.results.interpret import Status
from flagperf.results.series import MAX_TRACE_POINTS, SERIES_FILE, downsample, load_series, summarise_series
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary

T0 = datetime(2026, 1, 2, 10, 0, 0, tzinfo=timezone.utc)
EVIL = "<script>alert(1)</script>"
EVIL_IMG = '<img src=x onerror="alert(2)">'
CASE = "gemm-pytorch-local-1x2"
EXTERNAL = re.compile(r"<(script|link|img|iframe|embed|object|source|audio|video)\b[^>]*\b(src|href)\s*=", re.I)


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def finished(value, metric="tflops_fp32", unit="TFLOP/s", env=None):
    return {"event": "FINISHED", "schema": "flagperf.perflog/1", "benchmark": "gemm", "metric": metric,
            "value": value, "unit": unit, "higher_is_better": True, "e2e_time": 2.0,
            "metrics": {"tflops_bf16": {"value": value / 2, "unit": unit}}, "env": env or {"device": "cpu"}}


def write_node(run_dir, rnd_dir, node, samples=8, gpus=2, extra_gpu_fields=True, interval=0.5):
    """A node directory as a round leaves it: monitor files, monitor_status.json, rank 0's PerfLog lines."""
    d = run_dir / rnd_dir / node
    d.mkdir(parents=True, exist_ok=True)
    cpu, mem, pwr, gpu = [], [], [], []
    for i in range(samples):
        t = iso(i * interval)
        cpu.append(f"{t} util_pct={10 + i} load1=1.5")
        mem.append(f"{t} used_mib={1000 + i * 10}.5 available_mib=9000.0 total_mib=16000.0 used_pct=6.3")
        pwr.append(f"{t} power_w={100 + i}.25")
        for g in range(gpus):
            fields = f"gpu={g} temp_c={40 + i} power_w={200 + g * 10 + i}.5 mem_used_mib=1234.5 " \
                     f"mem_total_mib=81559.0 util_pct={90 + g}"
            if extra_gpu_fields:
                fields += f" sm_clock_mhz={1980 - i} mem_clock_mhz=2619 energy_j={1000 + i * 100} " \
                          f"throttle_power={i % 2} throttle_thermal=0"
            gpu.append(f"{t} {fields}")
    for name, lines in (("cpu", cpu), ("mem", mem), ("pwr", pwr), ("nvidia", gpu)):
        (d / f"{name}_monitor.log").write_text("\n".join(lines) + "\n")
    status = {"schema": "flagperf.monitor-status/1", "pid": 1, "interval_s": interval, "started": iso(0),
              "sensors": {"cpu": {"available": True, "source": "psutil", "file": "cpu_monitor.log"},
                          "mem": {"available": True, "source": "psutil", "file": "mem_monitor.log"},
                          "pwr": {"available": True, "source": "rapl", "file": "pwr_monitor.log"},
                          "gpu": {"available": True, "source": "nvml", "file": "nvidia_monitor.log", "count": gpus}}}
    (d / "monitor_status.json").write_text(json.dumps(status))
    start = T0.timestamp()
    perflog = [{"event": "INIT_START", "time": start + 0.1, "rank": 0},
               {"event": "INIT_END", "time": start + 1.0, "rank": 0},
               {"event": "RUN_START", "time": start + 1.0, "rank": 0},
               {"event": "RUN_END", "time": start + 3.0, "rank": 0}]
    (d / "rank0.out.log").write_text("".join(f"[PerfLog] {json.dumps(r)}\n" for r in perflog) + "other line\n")
    return d


def node(name="localhost_noderank0", host="localhost", rank=0):
    return NodeSummary(name, host, rank, 0,
                       [{"rank": 0, "local_rank": 0, "pid": 11, "exit_code": 0, "started": iso(0.05),
                         "ended": iso(3.5), "duration_s": 3.45, "stopped_by_launcher": False}],
                       {"cpu": {"samples": 8}, "unavailable": {"pwr": "no RAPL <b>counters</b>"}})


def make_summary(run_dir, hostile=False, evil=EVIL, evil_img=EVIL_IMG) -> Summary:
    """Two rounds of a passed case with one node each (node directories written), and a failed case. hostile:
    the host name, its environment, the metric name and the log lines are ``evil`` and ``evil_img``."""
    host = evil if hostile else "localhost"
    nd = f"{host.replace('/', '_')}_noderank0" if hostile else "localhost_noderank0"
    env = {"device": "cpu", "hostname": evil} if hostile else None
    metric = evil_img if hostile else "tflops_fp32"
    rounds = []
    for k, v in ((1, 10.0), (2, 12.0)):
        rdir = f"{CASE}/round{k}"
        write_node(run_dir, rdir, nd)
        rounds.append(RoundSummary(k, rdir, Status.PASSED, 3.5, None, finished(v, metric=metric, env=env),
                                   [node(nd, host)]))
    passed = CaseSummary(CASE, "gemm:pytorch:local:1:2:2", "gemm", "pytorch", "local", 1, 2, 2, None, rounds)
    failed = CaseSummary("llm-pytorch-local-1x2", "llm:pytorch:local:1:2:1", "llm", "pytorch", "local", 1, 2, 1,
                         None, [RoundSummary(1, "llm-pytorch-local-1x2/round1", Status.FAILED, 4.0,
                                             Failure(f"rank 0 failed on {host}", nd, 0, 1, "/r/rank0.out.log",
                                                     ("step 1", f"</pre>{evil}" if hostile else "boom")))])
    return Summary("run20260102100000-abcdef", str(run_dir), "9.9", iso(0), iso(60), 60.0, vendor="nvidia",
                   runtime="bare", backend="ssh", hosts=[host], cases=[passed, failed])


def render(summary, run_dir):
    """report.html as a run leaves it: the node directories summarised into series.json, then the page."""
    assert summary.run_dir == str(run_dir)
    summary.series = summarise_series(summary, run_dir)
    rep = HtmlReporter()
    return rep, rep.render(summary)


def strip_plotlyjs(text):
    from plotly.offline import get_plotlyjs
    js = get_plotlyjs()
    assert text.count(js) == 1           # plotly.js embedded exactly once, inline
    return text.replace(js, "")


def titles(fig) -> list:
    return [a.text for a in fig.layout.annotations]


# --------------------------------------------------------------------------------------------------- contents
def test_page_is_self_contained_with_every_plot(tmp_path):
    rep, text = render(make_summary(tmp_path), tmp_path)
    page = strip_plotlyjs(text)
    assert page.startswith("<!DOCTYPE html>") and "<title>flagperf run20260102100000-abcdef: failed</title>" in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page and "connect-src 'none'" in page
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "cdn.plot.ly" not in page and "mathjax" not in page.lower().replace("mathjaxconfig", "")
    # header, case table, round tables
    for part in ("run20260102100000-abcdef", "2026-01-02T10:00:00.000+00:00", "60 s", "<code>localhost</code>",
                 "nvidia / bare / ssh", f'<a href="#case0">{CASE}</a>', ">2/2<", ">0/1<", "rank 0 failed on localhost",
                 "<pre>step 1\nboom</pre>", "no RAPL &lt;b&gt;counters&lt;/b&gt;"):
        assert part in page, part
    # plots: the passed case's metric per round, one monitor figure per round and node; none for the failed case
    ids = [i for i, _ in rep.figures]
    assert ids == ["plot1", "plot2", "plot3"]
    assert page.count('class="plotly-graph-div"') == 3 and page.count("Plotly.newPlot(") == 3
    assert "3 plot(s)" in page and "No round produced a value" in page
    head = rep.figures[0][1]
    assert list(head.data[0].x) == [1, 2] and list(head.data[0].y) == [10.0, 12.0]
    assert any("median 11" in t for t in titles(head))


def test_monitor_figure_rows_phases_and_gpu_fields(tmp_path):
    rep, _ = render(make_summary(tmp_path), tmp_path)
    mon = rep.figures[1][1]
    rows = titles(mon)
    assert rows == ["CPU util %", "memory used MiB", "host power W", "nvidia power W", "nvidia SM clock MHz",
                    "nvidia memory clock MHz", "nvidia util %", "nvidia memory used MiB", "nvidia temperature °C",
                    "nvidia energy J", "nvidia throttle"]
    names = [t.name for t in mon.data]
    assert names.count("gpu 0") == 7 and names.count("gpu 1") == 7      # one per accelerator row and GPU
    assert [t.name for t in mon.data if t.showlegend] == [           # each once in the legend
        "gpu 0", "gpu 1", "gpu 0 throttle_power", "gpu 1 throttle_power", "gpu 0 throttle_thermal",
        "gpu 1 throttle_thermal"]
    cpu = mon.data[0]
    assert list(cpu.y) == [10 + i for i in range(8)]
    assert cpu.x[0] == pytest.approx(-0.05) and cpu.x[-1] == pytest.approx(3.45)   # seconds since ranks started
    rects = [s for s in mon.layout.shapes if s.type == "rect"]
    lines = [s for s in mon.layout.shapes if s.type == "line"]
    assert [(r.x0, r.x1) for r in rects] == [pytest.approx((0.05, 0.95)), pytest.approx((0.95, 2.95))]
    assert [s.x0 for s in lines] == [pytest.approx(0.0), pytest.approx(3.45)]


def test_throttle_fields_share_one_row_and_rows_are_capped(tmp_path):
    s = make_summary(tmp_path)
    rep, _ = render(s, tmp_path)
    mon = rep.figures[1][1]
    assert titles(mon)[-1] == "nvidia throttle"
    assert {t.name for t in mon.data if t.yaxis == f"y{len(titles(mon))}"} == {
        "gpu 0 throttle_power", "gpu 0 throttle_thermal", "gpu 1 throttle_power", "gpu 1 throttle_thermal"}
    d = tmp_path / CASE / "round2" / "localhost_noderank0"
    extra = " ".join(f"vendor_field_{i}={i}" for i in range(20))
    (d / "nvidia_monitor.log").write_text(f"{iso(0)} gpu=0 power_w=1 {extra}\n{iso(1)} gpu=0 power_w=2 {extra}\n")
    rep, _ = render(s, tmp_path)
    rows = titles(rep.figures[2][1])
    assert len(rows) == 3 + MAX_GPU_ROWS and rows[3:6] == ["nvidia power W", "nvidia vendor_field_0",
                                                           "nvidia vendor_field_1"]


def test_node_without_files_and_a_gpu_file_found_without_status(tmp_path):
    s = make_summary(tmp_path)
    r1 = tmp_path / CASE / "round1" / "localhost_noderank0"
    (r1 / "monitor_status.json").unlink()           # the accelerator file is still found by its name
    for name in ("cpu", "mem", "pwr"):
        (r1 / f"{name}_monitor.log").unlink()
    (r1 / "nvidia_monitor.log").write_text(f"{iso(0)} gpu=0 util_pct=50\ngarbage line\n{iso(1)} gpu=0 util_pct=60\n")
    r2 = tmp_path / CASE / "round2" / "localhost_noderank0"
    for f in r2.iterdir():
        f.unlink()
    rep, text = render(s, tmp_path)
    assert len(rep.figures) == 2                    # headline + round 1; round 2 has no data
    assert titles(rep.figures[1][1]) == ["nvidia util %"]
    assert list(rep.figures[1][1].data[0].y) == [50, 60]
    assert "No monitor data in its node directory." in text


def test_fifo_and_symlink_monitor_files_are_not_read(tmp_path):
    s = make_summary(tmp_path)
    d = tmp_path / CASE / "round1" / "localhost_noderank0"
    (d / "cpu_monitor.log").unlink()
    os.mkfifo(d / "cpu_monitor.log")                # opening it for reading would block: never opened
    (d / "mem_monitor.log").unlink()
    (d / "mem_monitor.log").symlink_to("/etc/passwd")
    rep, _ = render(s, tmp_path)
    assert titles(rep.figures[1][1])[0] == "host power W"


def test_node_names_leading_outside_the_run_directory_are_not_followed(tmp_path):
    run = tmp_path / "run"
    s = make_summary(run)
    outside = write_node(tmp_path, "elsewhere", "x")
    assert outside.is_dir()
    s.cases[0].rounds[0].nodes[0].node = "../../elsewhere/x"
    s.cases[0].rounds[1].dir = str(tmp_path / "elsewhere")
    s.cases[0].rounds[1].nodes[0].node = "x"
    rep, text = render(s, run)
    assert len(rep.figures) == 1 and text.count("No monitor data in its node directory.") == 2


def test_long_series_are_downsampled(tmp_path):
    s = make_summary(tmp_path)
    d = tmp_path / CASE / "round1" / "localhost_noderank0"
    n = 50_000
    lines = [f"{iso(i * 0.01)} util_pct={(i * 7) % 100} load1=1" for i in range(n)]
    lines[12345] = f"{iso(123.45)} util_pct=1000 load1=1"         # a spike survives
    (d / "cpu_monitor.log").write_text("\n".join(lines) + "\n")
    rep, text = render(s, tmp_path)
    cpu = rep.figures[1][1].data[0]
    assert len(cpu.y) <= MAX_TRACE_POINTS and max(cpu.y) == 1000 and min(cpu.y) == 0
    assert list(cpu.x) == sorted(cpu.x)
    assert len(strip_plotlyjs(text)) < 400_000


def test_downsample_keeps_extremes_in_order():
    xs = list(range(1000))
    ys = [(i * 37) % 101 for i in xs]
    ys[500] = -5
    ox, oy = downsample(xs, ys, 100)
    assert len(ox) <= 100 and ox == sorted(ox) and -5 in oy and 100 in oy
    assert downsample([1, 2], [3, 4], 100) == ([1, 2], [3, 4])


# ------------------------------------------------------------------------------------- verdicts and rankings
def verdict(metric, measured, expected, tolerance=0.1, result="within", ok=True, **kw):
    """A reference verdict as flagperf.references.verdict stores it in summary.json."""
    v = {"metric": metric, "measured": measured, "rounds": 2, "unit": "TFLOP/s", "expected": expected,
         "tolerance": tolerance, "better_tolerance": None, "higher_is_better": True,
         "source": "docs/results/h200.md", "reference": "vendors/nvidia/references/h200.yaml",
         "deviation": None if measured is None else measured / expected - 1, "result": result, "ok": ok}
    v.update(kw)
    return ReferenceVerdict.from_dict(v)


def test_verdicts_table_and_reference_band(tmp_path):
    s = make_summary(tmp_path)
    s.cases[0].verdicts = [verdict("tflops_fp32", 11.0, 11.0),
                           verdict("tflops_bf16", 5.5, 20.0, 0.05, "below", False, note="bf16 <b>dense</b>")]
    assert status_text(s.cases[0].status) == "below_reference"
    rep, text = render(s, tmp_path)
    page = strip_plotlyjs(text)
    assert "<h3>Reference verdicts</h3>" in page and "below_reference</span>" in page
    assert ('<td>tflops_fp32</td><td class="num">11</td><td class="num">-10%</td><td>9.9 … 12.1</td>'
            '<td class="num">11</td><td class="num">+0%</td><td>TFLOP/s</td>') in page
    assert '<td class="num">-72.5%</td>' in page and "bf16 &lt;b&gt;dense&lt;/b&gt;" in page
    assert "below reference: tflops_bf16 5.5 vs 20 TFLOP/s (-5%)" in page          # the case table's note
    head = rep.figures[0][1]
    assert "reference 11" in titles(head)
    (band,) = [sh for sh in head.layout.shapes if sh.type == "rect"]
    assert (band.y0, band.y1) == (pytest.approx(9.9), pytest.approx(12.1))
    # the verdict on another metric gets its own plot of that metric per round, with its band
    other = rep.figures[1][1]
    assert list(other.data[0].y) == [5.0, 6.0] and "reference 20" in titles(other)
    (band,) = [sh for sh in other.layout.shapes if sh.type == "rect"]
    assert (band.y0, band.y1) == (pytest.approx(19.0), pytest.approx(21.0))
    assert len(rep.figures) == 4


def test_verdict_band_forms():
    assert verdict_band(verdict("m", 1, 100, 0.05)) == (100, 95, 105)
    assert verdict_band(verdict("m", 1, 100, 0.05, better_tolerance=0.2)) == (100, 95, pytest.approx(120))
    assert verdict_band(verdict("m", 1, 100, 0.05, higher_is_better=False)) == (100, 95, 105)
    assert verdict_band(verdict("m", 1, 100, 0.05, better_tolerance=0.2, higher_is_better=False)) == (
        100, pytest.approx(80), 105)
    assert verdict_band(replace(verdict("m", 1, 100, 0.05), tolerance=float("nan"))) == (100, None, None)
    assert verdict_band(replace(verdict("m", 1, 100, 0.1), expected=float("inf"))) == (None, None, None)


def test_verdict_not_measured_draws_no_band(tmp_path):
    s = make_summary(tmp_path)
    s.cases[0].verdicts = [verdict("tflops_int8", None, 50.0, result="not_measured")]
    rep, text = render(s, tmp_path)
    assert len(rep.figures) == 3 and "not_measured</span>" in text and "no referenced metric measured" in text


def ranking(evil=False):
    host = EVIL if evil else "h2"
    return Ranking.from_dict({"case": CASE, "metric": "tflops_fp32", "unit": "TFLOP/s", "higher_is_better": True,
            "rule": "score > 3.5", "median": 11.0, "failed_hosts": ["h9"],
            "entries": [{"host": "h1", "gpu": None, "value": 12.0, "score": -0.4, "outlier": False, "rank": 1},
                        {"host": host, "gpu": None, "value": 3.0, "score": 9.1, "outlier": True, "rank": 2},
                        {"host": "h1", "gpu": 0, "value": 6.0, "score": 0.0, "outlier": False, "rank": 1},
                        {"host": "h1", "gpu": 1, "value": 6.0, "score": 0.0, "outlier": False, "rank": 1},
                        {"host": host, "gpu": 0, "value": 1.5, "score": 8.0, "outlier": True, "rank": 1}]})


def test_rankings_table_and_bars(tmp_path):
    s = make_summary(tmp_path)
    s.rankings = [ranking(evil=True)]
    rep, text = render(s, tmp_path)
    page = strip_plotlyjs(text)
    assert "<h2>Slow-node rankings</h2>" in page and "outlier: score &gt; 3.5" in page
    assert ('<tr class="outlier"><td class="num">2</td><td>&lt;script&gt;alert(1)&lt;/script&gt;</td>'
            '<td class="num">-</td><td class="num">3</td><td class="num">9.1</td>') in page
    assert page.count('<tr class="outlier">') == 2 and "<td>h9</td>" in page and "no result (failed)" in page
    hosts, gpus = rep.figures[0][1], rep.figures[1][1]
    assert list(hosts.data[0].x) == [12.0, 3.0] and list(hosts.data[0].marker.color) == ["#1f77b4", "#cf222e"]
    assert list(hosts.data[0].y) == ["1. h1", "2. &lt;script&gt;alert(1)&lt;/script&gt;"]
    assert "median 11" in titles(hosts)
    assert list(gpus.data[0].y) == ["h1 gpu 0", "h1 gpu 1", "&lt;script&gt;alert(1)&lt;/script&gt; gpu 0"]
    assert len(rep.figures) == 5


def test_each_case_plots_one_line_per_host(tmp_path):
    s = make_summary(tmp_path)
    c = s.cases[0]
    c.each = True
    for r in c.rounds:
        r.nodes.append(node("h2_noderank0", "h2"))
        for i, n in enumerate(r.nodes):
            n.status, n.finished = Status.PASSED, finished(10.0 * (i + 1) + r.round)
    rep, _ = render(s, tmp_path)
    head = rep.figures[0][1]
    assert [(t.name, list(t.y)) for t in head.data] == [("h2", [21.0, 22.0]), ("localhost", [11.0, 12.0])]
    assert head.layout.showlegend is True


# ------------------------------------------------------------------------------------------------- escaping
def hostile_summary(run_dir, evil=EVIL, evil_img=EVIL_IMG) -> Summary:
    """Every string a host can put into a summary (host names, environment, metric names and units, log lines,
    check details, verdict texts, ranking entries) set to ``evil`` or ``evil_img``."""
    s = make_summary(run_dir, hostile=True, evil=evil, evil_img=evil_img)
    s.cases[0].verdicts = [verdict(evil_img, 1.0, 2.0, result=evil, source=evil, note=evil_img, unit=evil)]
    s.rankings = [Ranking.from_dict({"case": evil, "metric": evil_img, "unit": evil, "rule": evil,
                                     "failed_hosts": [evil],
                                     "entries": [{"host": evil, "gpu": evil, "value": 1.0, "score": evil,
                                                  "outlier": True, "rank": evil},
                                                 {"host": evil, "gpu": 0, "value": 2.0, "outlier": False}]})]
    s.host_checks = [{"host": evil, "outcome": "timeout", "detail": evil_img, "remedy": evil}]
    return s


def test_everything_from_hosts_is_escaped(tmp_path):
    rep, text = render(hostile_summary(tmp_path), tmp_path)
    page = strip_plotlyjs(text)
    assert "alert(" in page                      # the strings are there...
    for raw in ("<script>alert", "<img src=x", "</pre><script>", 'onerror="'):
        assert raw not in page, raw              # ...but never as markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # inside the plots' JSON, plotly's own escaping leaves no "<" at all, and labels are HTML-escaped too
    for _, fig in rep.figures:
        blob = fig.to_json()
        assert "<script" not in blob and "<img" not in blob
    # every <script> tag is one of ours: plotly.js, its config, one per figure
    assert page.count("<script") == 2 + len(rep.figures)
    assert not EXTERNAL.search(page)


def test_num_escapes_strings():
    assert num(EVIL) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert num(None) == "-" and num(float("nan")) == "-" and num(3) == "3" and num(1.23456) == "1.235"


# ------------------------------------------------------------------------------------------------- writing
def test_written_with_every_run_atomically(tmp_path):
    s = make_summary(tmp_path)
    s.series = summarise_series(s, tmp_path)
    out = {o.name: o for o in write_reports(s, tmp_path)}
    assert out["html"] == ReportOutcome("html", tmp_path / "report.html", None)
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]           # no temporary file left
    assert (tmp_path / "report.html").read_text(encoding="utf-8") == reporter("html").render(s)
    assert 1_000_000 < (tmp_path / "report.html").stat().st_size < 8_000_000


def test_missing_plotly_is_a_report_error(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "plotly.offline", None)       # import plotly.offline raises ImportError
    with pytest.raises(ReportError, match="plotly is not installed"):
        HtmlReporter().write(make_summary(tmp_path), tmp_path)
    (html,) = [o for o in write_reports(make_summary(tmp_path), tmp_path) if o.name == "html"]
    assert html.path is None and html.error.startswith("cannot write report.html: plotly is not installed")
    assert not (tmp_path / "report.html").exists()


def test_empty_summary(tmp_path):
    rep, text = render(Summary("r1", str(tmp_path), "1", iso(0)), tmp_path)
    assert rep.figures == [] and "<h1>flagperf r1</h1>" in text and "0 plot(s)" in text


def test_cli_report_html(tmp_path, run_cli):
    run_dir = tmp_path / "run20260102100000-abcdef"
    s = make_summary(run_dir)
    s.save(run_dir / "summary.json")
    rc, out, err = run_cli("report", run_dir, "--html", cwd=tmp_path)
    assert rc == 0, err
    assert out.strip() == str(run_dir / "report.html")
    assert (run_dir / SERIES_FILE).is_file()       # summary.json named no series: the node directories read now
    s.series = summarise_series(s, run_dir)
    assert (run_dir / "report.html").read_text(encoding="utf-8") == HtmlReporter().render(s)
    assert (run_dir / "report.md").is_file()
    (run_dir / "report.html").unlink()
    (run_dir / "report.html").mkdir()              # cannot be replaced: the reason on stderr, exit 1
    rc, out, err = run_cli("report", run_dir, "--html", cwd=tmp_path)
    assert rc == 1 and out == "" and err.startswith("flagperf: cannot write report.html: "), (out, err)
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(".")] == []     # the temporary file removed


# ------------------------------------------------------------------------------------------------- series.json
def test_plots_come_from_series_json_alone(tmp_path):
    s = make_summary(tmp_path)
    rep, before = render(s, tmp_path)
    assert s.series == SERIES_FILE and len(rep.figures) == 3
    shutil.rmtree(tmp_path / CASE)                  # the node directories are gone: series.json holds the plots
    after = HtmlReporter()
    path = after.write(s, tmp_path)
    assert path.read_text(encoding="utf-8") == before
    assert [fig.to_json() for _, fig in after.figures] == [fig.to_json() for _, fig in rep.figures]


def test_series_json_is_small_and_bounded(tmp_path):
    s = make_summary(tmp_path)
    d = tmp_path / CASE / "round1" / "localhost_noderank0"
    (d / "cpu_monitor.log").write_text("".join(f"{iso(i * 0.01)} util_pct={i % 100}\n" for i in range(50_000)))
    render(s, tmp_path)
    data = json.loads((tmp_path / SERIES_FILE).read_text())
    assert data["schema"] == "flagperf.series/1" and data["run_id"] == s.run_id
    assert [(n["case"], n["round"], n["node"]) for n in data["nodes"]] == [
        ("gemm:pytorch:local:1:2:2", 1, "localhost_noderank0"), ("gemm:pytorch:local:1:2:2", 2, "localhost_noderank0")]
    assert all(len(t["x"]) <= MAX_TRACE_POINTS for n in data["nodes"] for t in n["traces"])
    assert (tmp_path / SERIES_FILE).stat().st_size < 200_000


def test_a_run_without_monitor_data_has_no_series(tmp_path):
    s = make_summary(tmp_path)
    shutil.rmtree(tmp_path / CASE)
    assert summarise_series(s, tmp_path) is None and not (tmp_path / SERIES_FILE).exists()
    assert summarise_series(Summary("r1", str(tmp_path), "1", iso(0)), tmp_path) is None


def _damage_truncated(path):
    path.write_text(path.read_text()[:1000])


def _damage_schema(path):
    path.write_text(path.read_text().replace("flagperf.series/1", "flagperf.series/9"))


def _damage_lengths(path):
    data = json.loads(path.read_text())
    data["nodes"][0]["traces"][0]["x"].append(99.0)
    path.write_text(json.dumps(data))


def _damage_value(path):
    data = json.loads(path.read_text())
    data["nodes"][1]["traces"][2]["y"][0] = "<script>alert(1)</script>"
    path.write_text(json.dumps(data))


def _damage_other_run(path):
    data = json.loads(path.read_text())
    data["run_id"] = "run20990101000000-000000"
    path.write_text(json.dumps(data))


def _damage_fifo(path):
    path.unlink()
    os.mkfifo(path)                                 # opening it for reading would block: never opened


def _damage_binary(path):
    path.write_bytes(b"\xff\xfe\x00garbage")


def _damage_gone(path):
    path.unlink()


@pytest.mark.parametrize("damage", [_damage_truncated, _damage_schema, _damage_lengths, _damage_value,
                                    _damage_other_run, _damage_fifo, _damage_binary, _damage_gone])
def test_a_damaged_series_json_is_a_page_without_monitor_plots(tmp_path, damage):
    s = make_summary(tmp_path)
    s.series = summarise_series(s, tmp_path)
    damage(tmp_path / SERIES_FILE)
    assert load_series(s, tmp_path) is None
    rep = HtmlReporter()
    text = rep.write(s, tmp_path).read_text(encoding="utf-8")
    assert len(rep.figures) == 1                    # the headline metric per round only
    assert text.count("No monitor data in its node directory.") == 2 and "1 plot(s)" in text


@pytest.mark.parametrize("name", ["../series.json", "/etc/passwd", "sub/series.json", ".series.json", "summary.md"])
def test_a_series_name_outside_the_run_directory_is_not_read(tmp_path, name):
    s = make_summary(tmp_path)
    summarise_series(s, tmp_path)
    s.series = name
    assert load_series(s, tmp_path) is None


def test_series_json_that_cannot_be_written_is_an_oserror(tmp_path):
    s = make_summary(tmp_path)
    (tmp_path / SERIES_FILE).mkdir()                # cannot be replaced
    with pytest.raises(OSError):
        summarise_series(s, tmp_path)
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
