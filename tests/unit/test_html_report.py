"""report.html (flagperf/reporters/html.py) on hand-built summaries and node directories, summarised into
series.json (flagperf/results/series.py) as a run does: contents, inline SVG charts, verdicts, rankings, what the
hardware delivered, escaping of everything a host wrote, size bounds, a damaged or missing series.json, and
`flagperf report --html`. (tests/e2e/test_html_report.py renders it in a real browser; tests/unit/test_svg.py
tests the charts themselves.)"""
import json
import os
import re
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from flagperf.records import Failure, Ranking, ReferenceVerdict
from flagperf.reporters import ReportOutcome, reporter, write_reports
from flagperf.reporters import svg
from flagperf.reporters.html import CSP, MAX_GPU_ROWS, HtmlReporter, ReportError, num, status_text, verdict_band
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


def no_script(text):
    """The page, after checking that it has no script at all and the CSP that admits none."""
    assert "<script" not in text.lower()
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in text
    return text


MONITOR_CHARTS = ["CPU util", "memory used", "host power", "nvidia power", "nvidia SM clock", "nvidia memory clock",
                  "nvidia util", "nvidia memory used", "nvidia temperature", "nvidia throttle reasons"]


def charts(rep, kind=None) -> list:
    """The charts of the last page (descriptions), of one kind (svg.LineChart, svg.BarChart, svg.Timeline)."""
    return [c for _, c in rep.figures if kind is None or isinstance(c, kind)]


def monitor_titles(rep, rnd=1) -> list:
    return [c.title.split(": ", 1)[1] for c in charts(rep) if f" round {rnd}, " in c.title]


# --------------------------------------------------------------------------------------------------- contents
def test_page_is_self_contained_with_every_plot(tmp_path):
    rep, text = render(make_summary(tmp_path), tmp_path)
    page = no_script(text)
    assert page.startswith("<!DOCTYPE html>") and "<title>flagperf run20260102100000-abcdef: failed</title>" in page
    assert "default-src 'none'" in page and "script-src" not in page
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    # header, case table, round tables
    for part in ("run20260102100000-abcdef", "2026-01-02T10:00:00.000+00:00", "60 s", "<code>localhost</code>",
                 "nvidia / bare / ssh", f'<a href="#case0">{CASE}</a>', ">2/2<", ">0/1<", "rank 0 failed on localhost",
                 "<pre>step 1\nboom</pre>", "no RAPL &lt;b&gt;counters&lt;/b&gt;"):
        assert part in page, part
    # charts: the passed case's metric per round, the monitor charts per round and node; none for the failed case
    assert [i for i, _ in rep.figures] == [f"chart{k}" for k in range(1, 2 + 2 * len(MONITOR_CHARTS))]
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg"') == len(rep.figures)
    assert monitor_titles(rep, 1) == monitor_titles(rep, 2) == MONITOR_CHARTS
    assert f"{len(rep.figures)} chart(s)" in page and "No round produced a value" in page
    head = rep.figures[0][1]
    assert head.series[0].points == [(1, 10.0), (2, 12.0)] and head.series[0].markers
    assert head.y_label == "tflops_fp32 (TFLOP/s)" and head.x_label == "round"
    assert any(r.label == "median 11" and r.dash for r in head.refs)
    svg_head = page.split('id="chart1"')[1].split("</svg>")[0]
    assert ">tflops_fp32 (TFLOP/s)</text>" in svg_head and ">round</text>" in svg_head
    assert "<circle" in svg_head and "<title>tflops_fp32: 2, 12</title>" in svg_head     # hover text


def test_monitor_figure_rows_phases_and_gpu_fields(tmp_path):
    rep, text = render(make_summary(tmp_path), tmp_path)
    mon = [c for c in charts(rep, svg.LineChart) if " round 1, " in c.title]
    by_title = {c.title.split(": ", 1)[1]: c for c in mon}
    cpu = by_title["CPU util"]
    assert cpu.y_label == "CPU util (%)" and cpu.y_range == (0, 100)        # utilisation: 0 to 100
    assert by_title["nvidia util"].y_range == (0, 100) and by_title["nvidia power"].y_range is None
    assert by_title["nvidia power"].y_label == "nvidia power (W)"
    assert by_title["nvidia temperature"].y_label == "nvidia temperature (°C)"
    assert [y for _, y in cpu.series[0].points] == [10 + i for i in range(8)]
    assert cpu.series[0].points[0][0] == pytest.approx(-0.05) and cpu.series[0].points[-1][0] == pytest.approx(3.45)
    # the GPUs of the node side by side in one chart per field
    assert [s.name for s in by_title["nvidia SM clock"].series] == ["gpu 0", "gpu 1"]
    assert not any("energy" in t for t in by_title)            # a rising counter is no chart
    assert [(b.label, b.x0, b.x1) for b in cpu.bands] == [("init", pytest.approx(0.05), pytest.approx(0.95)),
                                                          ("run", pytest.approx(0.95), pytest.approx(2.95))]
    assert cpu.vlines == [pytest.approx(0.0), pytest.approx(3.45)]
    assert "init (INIT_START to INIT_END)" in text and "s since the round&#x27;s ranks started" in text


def test_throttle_reasons_are_named_bands_and_rows_are_capped(tmp_path):
    s = make_summary(tmp_path)
    rep, text = render(s, tmp_path)
    (tl, _) = charts(rep, svg.Timeline)
    # throttle_power alternates 0, 1 every sample (0.5 s apart): a band from each sample that shows it to the next
    assert [label for label, _, _ in tl.lanes] == ["gpu 0: power", "gpu 1: power"]
    assert tl.lanes[0][2][0] == (pytest.approx(0.45), pytest.approx(0.95))
    assert ">gpu 0: power</text>" in text
    d = tmp_path / CASE / "round2" / "localhost_noderank0"
    extra = " ".join(f"vendor_field_{i}={i}" for i in range(20))
    # NVML's mask: 0x4 sw_power_cap, then 0x44 sw_power_cap and hw_thermal_slowdown, then nothing
    (d / "nvidia_monitor.log").write_text(f"{iso(0)} gpu=0 power_w=1 throttle_mask=4 {extra}\n"
                                          f"{iso(1)} gpu=0 power_w=2 throttle_mask=68 {extra}\n"
                                          f"{iso(2)} gpu=0 power_w=2 throttle_mask=0 {extra}\n")
    rep, text = render(s, tmp_path)
    rows = [t for t in monitor_titles(rep, 2) if t.startswith("nvidia") and "throttle" not in t]
    assert len(rows) == MAX_GPU_ROWS and rows[:3] == ["nvidia power", "nvidia vendor_field_0", "nvidia vendor_field_1"]
    (_, tl) = charts(rep, svg.Timeline)
    assert [(label, spans) for label, _, spans in tl.lanes] == [
        ("gpu 0: hw_thermal_slowdown", [(pytest.approx(0.95), pytest.approx(1.95))]),
        ("gpu 0: sw_power_cap", [(pytest.approx(-0.05), pytest.approx(1.95))])]
    assert "throttle_mask" not in text.split(">Round 2 ")[1]          # no bitmask number on the page


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
    assert monitor_titles(rep, 1) == ["nvidia util"]
    assert [y for _, y in rep.figures[1][1].series[0].points] == [50, 60]
    assert "No monitor data in its node directory." in text


def test_fifo_and_symlink_monitor_files_are_not_read(tmp_path):
    s = make_summary(tmp_path)
    d = tmp_path / CASE / "round1" / "localhost_noderank0"
    (d / "cpu_monitor.log").unlink()
    os.mkfifo(d / "cpu_monitor.log")                # opening it for reading would block: never opened
    (d / "mem_monitor.log").unlink()
    (d / "mem_monitor.log").symlink_to("/etc/passwd")
    rep, _ = render(s, tmp_path)
    assert monitor_titles(rep, 1)[0] == "host power"


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
    cpu = rep.figures[1][1]
    ys = [y for _, y in cpu.series[0].points]
    assert len(ys) <= MAX_TRACE_POINTS and max(ys) == 1000 and min(ys) == 0
    drawn = text.split('id="chart2"')[1].split("</svg>")[0]
    (points,) = re.findall(r'<polyline points="([^"]*)"', drawn)
    assert len(points.split()) <= 2 * 640                       # at most min and max per pixel column
    assert len(text) < 400_000


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
    page = no_script(text)
    assert "<h3>Reference verdicts</h3>" in page and "below_reference</span>" in page
    assert ('<td>tflops_fp32</td><td class="num">11</td><td class="num">-10%</td><td>9.9 … 12.1</td>'
            '<td class="num">11</td><td class="num">+0%</td><td>TFLOP/s</td>') in page
    assert '<td class="num">-72.5%</td>' in page and "bf16 &lt;b&gt;dense&lt;/b&gt;" in page
    assert "below reference: tflops_bf16 5.5 vs 20 TFLOP/s (-5%)" in page          # the case table's note
    head = rep.figures[0][1]
    (ref, median) = head.refs
    assert ref.label == "reference 11" and (ref.low, ref.high) == (pytest.approx(9.9), pytest.approx(12.1))
    # the verdict on another metric gets its own chart of that metric per round, with its band
    other = rep.figures[1][1]
    assert [y for _, y in other.series[0].points] == [5.0, 6.0]
    (ref, _) = other.refs
    assert ref.label == "reference 20" and (ref.low, ref.high) == (pytest.approx(19.0), pytest.approx(21.0))
    assert len(rep.figures) == 2 + 2 * len(MONITOR_CHARTS)
    assert '<rect class="refband"' in page.split('id="chart1"')[1].split("</svg>")[0]


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
    assert len(rep.figures) == 1 + 2 * len(MONITOR_CHARTS) and "not_measured</span>" in text
    assert "no referenced metric measured" in text and not rep.figures[0][1].refs[:-1]


def test_delivered_section_first_coloured_against_references(tmp_path):
    s = make_summary(tmp_path)
    s.cases[0].verdicts = [verdict("tflops_fp32", 11.0, 11.0),
                           verdict("tflops_bf16", 5.5, 20.0, 0.05, "below", False)]
    s.rankings = [ranking()]
    rep, text = render(s, tmp_path)
    page = no_script(text)
    delivered = page.split('<section id="delivered">')[1].split("</section>")[0]
    assert page.index("What the hardware delivered") < page.index("<h2>Cases</h2>")
    assert '<span style="color:#1a7f37;font-weight:bold">11</span>' in delivered        # within: green
    assert '<span style="color:#cf222e;font-weight:bold">5.5</span>' in delivered       # below: red
    hosts, gpus = charts(rep, svg.BarChart)[:2]
    assert [(b.label, b.value, b.color) for b in hosts.bars] == [("h1", 12.0, "#1a7f37"), ("h2", 3.0, "#cf222e")]
    assert hosts.refs[0].label == "reference 11" and hosts.value_label == "tflops_fp32 (TFLOP/s)"
    assert [b.label for b in gpus.bars] == ["h1 gpu 0", "h1 gpu 1", "h2 gpu 0"]
    assert 'id="chart1"' in delivered and ">tflops_fp32 (TFLOP/s)</text>" in delivered


def test_a_run_without_references_says_so(tmp_path):
    s = make_summary(tmp_path)
    s.verdicts = []
    rep, text = render(s, tmp_path)
    assert '<section id="delivered">' not in text          # nothing delivered to compare: no empty section


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
    page = no_script(text)
    assert "<h2>Slow-node rankings</h2>" in page and "outlier: score &gt; 3.5" in page
    assert ('<tr class="outlier"><td class="num">2</td><td>&lt;script&gt;alert(1)&lt;/script&gt;</td>'
            '<td class="num">-</td><td class="num">3</td><td class="num">9.1</td>') in page
    assert page.count('<tr class="outlier">') == 2 and "<td>h9</td>" in page and "no result (failed)" in page
    hosts, gpus = [c for c in charts(rep, svg.BarChart) if "(red: outlier)" in c.title]
    assert [(b.label, b.value, b.color) for b in hosts.bars] == [("1. h1", 12.0, "#1f77b4"),
                                                                 ("2. " + EVIL, 3.0, "#cf222e")]
    assert hosts.refs[0].label == "median 11"
    assert [b.label for b in gpus.bars] == ["h1 gpu 0", "h1 gpu 1", f"{EVIL} gpu 0"]
    assert ">2. &lt;script&gt;alert(1)&lt;/script&gt;</text>" in page          # the label drawn, escaped


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
    assert [(t.name, [y for _, y in t.points]) for t in head.series] == [("h2", [21.0, 22.0]),
                                                                         ("localhost", [11.0, 12.0])]
    assert head.legend is True


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
    page = no_script(text)
    assert "alert(" in page                      # the strings are there...
    for raw in ("<script>alert", "<img src=x", "</pre><script>", 'onerror="'):
        assert raw not in page, raw              # ...but never as markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # inside the charts too: titles, labels, legends and hover texts
    drawn = "".join(re.findall(r"<svg .*?</svg>", page, re.S))
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in drawn and "<img" not in drawn
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
    assert 20_000 < (tmp_path / "report.html").stat().st_size < 300_000


def test_a_chart_that_fails_is_a_report_error(tmp_path, monkeypatch):
    from flagperf.reporters import html as html_mod

    def broken(*a, **kw):
        raise ValueError("broken chart")
    monkeypatch.setattr(html_mod.svg, "render", broken)
    with pytest.raises(ReportError, match="cannot render: ValueError: broken chart"):
        HtmlReporter().write(make_summary(tmp_path), tmp_path)
    (html,) = [o for o in write_reports(make_summary(tmp_path), tmp_path) if o.name == "html"]
    assert html.path is None and html.error.startswith("cannot write report.html: cannot render")
    assert not (tmp_path / "report.html").exists()


def several_cases(run_dir, cases=6, rounds=3, gpus=8, samples=600):
    """A run of several passed cases, each with rounds of one node with ``gpus`` accelerators sampled
    ``samples`` times (noisy values: nothing collapses), references and rankings."""
    import random
    rnd = random.Random(7)
    out = []
    for k in range(cases):
        name = f"case{k}-pytorch-local-1x{gpus}"
        rs = []
        for r in range(1, rounds + 1):
            rdir = f"{name}/round{r}"
            d = write_node(run_dir, rdir, "localhost_noderank0", samples=2, gpus=1)
            lines = []
            for i in range(samples):
                for g in range(gpus):
                    lines.append(f"{iso(i * 0.5)} gpu={g} power_w={rnd.uniform(100, 700):.2f} "
                                 f"sm_clock_mhz={rnd.randint(1500, 1980)} mem_clock_mhz=2619 "
                                 f"util_pct={rnd.uniform(0, 100):.1f} mem_used_mib={rnd.uniform(1e3, 8e4):.1f} "
                                 f"temp_c={rnd.randint(40, 80)} energy_j={i * 300.5:.1f} "
                                 f"throttle_mask={rnd.choice([0, 0, 4, 68])}")
            (d / "nvidia_monitor.log").write_text("\n".join(lines) + "\n")
            (d / "cpu_monitor.log").write_text("".join(f"{iso(i * 0.5)} util_pct={rnd.uniform(0, 100):.1f}\n"
                                                       for i in range(samples)))
            rs.append(RoundSummary(r, rdir, Status.PASSED, 300.0, None, finished(10.0 + r), [node()]))
        c = CaseSummary(name, f"c{k}:pytorch:local:1:{gpus}:{rounds}", f"c{k}", "pytorch", "local", 1, gpus,
                        rounds, None, rs)
        c.verdicts = [verdict("tflops_fp32", 11.0, 11.0)]
        out.append(c)
    return Summary("run20260102100000-abcdef", str(run_dir), "9.9", iso(0), iso(600), 600.0, vendor="nvidia",
                   runtime="bare", backend="ssh", hosts=["localhost"], cases=out)


def test_a_typical_run_is_under_a_megabyte(tmp_path):
    s = several_cases(tmp_path)
    s.series = summarise_series(s, tmp_path)
    path = HtmlReporter().write(s, tmp_path)
    size = path.stat().st_size
    text = path.read_text(encoding="utf-8")
    # 6 headlines; 6 cases x 3 rounds x (3 host charts + 6 accelerator fields of 8 GPUs + throttle reasons)
    assert text.count("</svg>") == 6 + 6 * 3 * (3 + 6 + 1)
    print(f"report.html of 6 cases x 3 rounds x 8 GPUs: {size} bytes")
    assert size < 1_000_000, size
    assert "<script" not in text


def test_a_run_that_stopped_at_the_check_is_small(tmp_path):
    s = Summary("run20260102100000-abcdef", str(tmp_path), "9.9", iso(0), iso(5), 5.0, vendor="nvidia",
                runtime="bare", backend="ssh", hosts=["h1", "h2"],
                cases=[CaseSummary("gemm-pytorch-local-1x8", "gemm:pytorch:local:1:8:3", "gemm", "pytorch", "local",
                                   1, 8, 3, None, [])])
    s.host_checks = [{"host": "h2", "outcome": "unreachable", "detail": "ssh: connect refused", "remedy": "start sshd"}]
    path = HtmlReporter().write(s, tmp_path)
    assert path.stat().st_size < 100_000
    assert "Hosts that failed their check" in path.read_text(encoding="utf-8")


def test_empty_summary(tmp_path):
    rep, text = render(Summary("r1", str(tmp_path), "1", iso(0)), tmp_path)
    assert rep.figures == [] and "<h1>flagperf r1</h1>" in text and "0 chart(s)" in text


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
    assert s.series == SERIES_FILE and len(rep.figures) == 1 + 2 * len(MONITOR_CHARTS)
    shutil.rmtree(tmp_path / CASE)                  # the node directories are gone: series.json holds the charts
    after = HtmlReporter()
    path = after.write(s, tmp_path)
    assert path.read_text(encoding="utf-8") == before
    assert after.figures == rep.figures


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
    assert text.count("No monitor data in its node directory.") == 2 and "1 chart(s)" in text


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
