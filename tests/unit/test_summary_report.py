"""The run summary (flagperf/results/summary.py), the reporters (markdown, terminal) and `flagperf report`."""
import json
from dataclasses import replace

import pytest
from rich.console import Console

from flagperf.records import Failure
from flagperf.reporters import ReportOutcome, file_reporters, reporter, write_reports
from flagperf.reporters.markdown import MarkdownReporter
from flagperf.reporters.terminal import TerminalReporter
from flagperf.results.interpret import Status
from flagperf.results.summary import (SUMMARY_SCHEMA, CaseSummary, NodeSummary, RoundSummary, Summary, SummaryError,
                                      stats)

from tests.unit.fakebackend import finished_record

PASS_NAME = "gemm-pytorch-local-1x1"
FAIL_NAME = "llm-pytorch-local-1x2"


def fin(value, e2e=2.0, latency=0.5):
    d = finished_record(value=value, e2e_time=e2e, metrics={"latency": {"value": latency, "unit": "ms"}})
    d.pop("event")
    return d


def sample_summary(**kw) -> Summary:
    node = NodeSummary("localhost_noderank0", "localhost", 0, 0,
                       [{"rank": 0, "local_rank": 0, "pid": 11, "exit_code": 0, "started": None, "ended": None,
                         "duration_s": 1.5, "stopped_by_launcher": False}],
                       {"cpu": {"samples": 3, "util_pct_mean": 20.5}, "mem": {"samples": 3, "used_mib_max": 1024},
                        "gpu": {"vendor": "nvidia", "devices": [{"index": 0, "temp_c_max": 61.0,
                                                                  "power_w_max": 250.5, "util_pct_mean": 97.0}]}})
    passed = CaseSummary(PASS_NAME, "gemm:pytorch:local:1:1:3", "gemm", "pytorch", "local", 1, 1, 3, "/data/g",
                         [RoundSummary(1, f"{PASS_NAME}/round1", Status.PASSED, 1.25, None, fin(10.0, 2.0, 0.4),
                                       [node]),
                          RoundSummary(2, f"{PASS_NAME}/round2", Status.PASSED, 1.5, None, fin(12.0, 3.0, 0.6)),
                          RoundSummary(3, f"{PASS_NAME}/round3", Status.SKIPPED, 0.25,
                                       Failure("skipped: no nvcc"))])
    failed = CaseSummary(FAIL_NAME, "llm:pytorch:local:1:2:2", "llm", "pytorch", "local", 1, 2, 2, None,
                         [RoundSummary(1, f"{FAIL_NAME}/round1", Status.FAILED, 4.0,
                                       Failure("rank 0 printed no FINISHED line", "localhost_noderank0", 0, 0,
                                               "/r/rank0.out.log", ("step 10 loss 3.2", "done | really"))),
                          RoundSummary(2, f"{FAIL_NAME}/round2", Status.ERROR, 0.0,
                                       Failure("localhost_noderank0: cannot prepare the node: 500",
                                               "localhost_noderank0", last_lines=("docker: 500 Server Error",)))])
    args = dict(run_id="run20250101000000", run_dir="/logs/run20250101000000", flagperf_version="9.9",
                started="2025-01-01T00:00:00.000+00:00", finished="2025-01-01T00:01:00.000+00:00",
                duration_s=60.1234, vendor="cpu", runtime="bare", backend="fake", hosts=["localhost"],
                cases=[passed, failed])
    args.update(kw)
    return Summary(**args)


# ------------------------------------------------------------------------------------------------- the model
def test_round_trip(tmp_path):
    s = sample_summary(host_checks=[{"host": "h1", "outcome": "timeout", "detail": "no answer", "remedy": "r"}])
    d = s.to_dict()
    assert d["schema"] == SUMMARY_SCHEMA and d["status"] == "failed" and d["duration_s"] == 60.123
    s.save(tmp_path / "summary.json")
    assert not [p for p in tmp_path.iterdir() if p.name != "summary.json"]       # no temp file left
    loaded = Summary.load(tmp_path / "summary.json")
    assert loaded.to_dict() == d
    assert json.loads((tmp_path / "summary.json").read_text()) == d
    assert loaded.cases[0].rounds[0].nodes[0].monitors == s.cases[0].rounds[0].nodes[0].monitors
    assert loaded.cases[1].rounds[0].failure.exit_code == 0


def test_round_trip_interrupted_and_empty(tmp_path):
    s = Summary("r", "/d", "1", "now", interrupted=True)
    s.save(tmp_path / "s.json")
    loaded = Summary.load(tmp_path / "s.json")
    assert loaded.interrupted and loaded.status == Status.INTERRUPTED and loaded.to_dict() == s.to_dict()


def test_case_statistics():
    s = sample_summary()
    c = s.cases[0]
    assert c.status == Status.PASSED and len(c.passed_rounds) == 2
    assert c.metric == "tflops" and c.unit == "TFLOPS"
    assert c.stats["value"] == {"n": 2, "mean": 11.0, "median": 11.0, "min": 10.0, "max": 12.0,
                                "stdev": pytest.approx(1.41421356)}
    assert c.stats["e2e_time"]["median"] == 2.5
    assert c.stats["latency"]["min"] == 0.4 and c.metric_units() == {"latency": "ms"}
    d = c.to_dict()
    assert d["rounds_passed"] == 2 and d["higher_is_better"] is True and d["status"] == "passed"
    f = s.cases[1]
    assert f.status == Status.FAILED and f.metric is None and f.stats == {"value": None, "e2e_time": None}
    assert s.status == Status.FAILED


def test_stats_ignores_non_numbers():
    assert stats([]) is None and stats([None, True, "x"]) is None
    assert stats([2, None, 4.0]) == {"n": 2, "mean": 3.0, "median": 3.0, "min": 2, "max": 4.0,
                                     "stdev": pytest.approx(1.41421356)}
    assert stats([5])["stdev"] == 0.0


def test_round_from_an_older_summary_without_finished():
    r = RoundSummary.from_dict({"round": 1, "status": "passed", "value": 3.0, "e2e_time": 1.0,
                                "metrics": {"a": {"value": 1, "unit": "x"}}, "checks": {"passed": True},
                                "env": {"torch": "2"}})
    assert r.value == 3.0 and r.e2e_time == 1.0 and r.metrics == {"a": {"value": 1, "unit": "x"}}
    assert r.to_dict()["env"] == {"torch": "2"}


def test_load_missing_file(tmp_path):
    path = tmp_path / "run1" / "summary.json"
    with pytest.raises(SummaryError) as exc:
        Summary.load(path)
    assert str(exc.value) == f"{path}: not found; is {path.parent} a flagperf run directory?"


@pytest.mark.parametrize("text, words", [
    ("{not json", ": unreadable: "),
    ("", ": unreadable: "),
    (b"\xff\xfe\x00garbage", ": unreadable: "),
    ('{"schema": "flagperf.summary/0", "run_id": "r"}',
     "expected schema 'flagperf.summary/1', got 'flagperf.summary/0'"),
    ('{"run_id": "r"}', "expected schema 'flagperf.summary/1', got None"),
    ("[1, 2]", "expected schema 'flagperf.summary/1', got 'list'"),
    ('{"schema": "flagperf.summary/1"}', "does not follow flagperf.summary/1: KeyError"),
    ('{"schema": "flagperf.summary/1", "run_id": "r", "cases": [{"key": "x"}]}', "KeyError"),
    ('{"schema": "flagperf.summary/1", "run_id": "r", "cases": [{"name": "c", "rounds": [{"round": 1, '
     '"status": "bogus"}]}]}', "cases[0].rounds[0].status: expected one of passed"),
    ('{"schema": "flagperf.summary/1", "run_id": "r", "cases": "abc"}', "cases: expected list"),
], ids=["bad-json", "empty", "not-utf8", "old-schema", "no-schema", "list", "no-run-id", "case-no-name",
        "bad-status", "cases-string"])
def test_load_errors_name_the_file(tmp_path, text, words):
    path = tmp_path / "summary.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(SummaryError) as exc:
        Summary.load(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and words in msg, msg
    assert "\n" not in msg


def test_load_a_directory(tmp_path):
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(SummaryError) as exc:
        Summary.load(tmp_path / "summary.json")
    assert str(exc.value).startswith(f"{tmp_path / 'summary.json'}: unreadable")


# ------------------------------------------------------------------------------------------------- markdown
def test_markdown_report():
    md = MarkdownReporter().render(sample_summary())
    lines = md.splitlines()
    assert lines[0] == "# flagperf run20250101000000: failed"
    assert "- vendor `cpu`, runtime `bare`, backend `fake`, hosts: localhost" in lines
    assert "interrupted" not in md and "Hosts that failed" not in md
    assert "| case | status | rounds | metric | median | min | max | unit | e2e s |" in lines
    assert f"| {PASS_NAME} | passed | 2/3 | tflops | 11 | 10 | 12 | TFLOPS | 2.5 |" in lines
    assert f"| {FAIL_NAME} | failed | 0/2 | - | - | - | - |  | - |" in lines
    assert f"## {PASS_NAME}" in lines and f"## {FAIL_NAME}" in lines
    assert "| 3 | skipped | - | - | 0.25 | skipped: no nvcc |" in lines
    # failures with their last lines and where
    assert "Round 1 (node localhost_noderank0, rank 0, exit code 0), last lines of `/r/rank0.out.log`:" in lines
    assert "exit code None" not in md
    i = lines.index("Round 1 (node localhost_noderank0, rank 0, exit code 0), last lines of `/r/rank0.out.log`:")
    assert lines[i + 2:i + 6] == ["```", "step 10 loss 3.2", "done | really", "```"]
    assert "Round 2 (node localhost_noderank0), last lines of ``:" in lines
    assert "docker: 500 Server Error" in lines
    # the "|" of a reason is escaped in tables, not in code blocks
    assert "| 1 | failed | - | - | 4 | rank 0 printed no FINISHED line |" in lines
    # metrics, environment, monitors
    assert "| latency | 0.5 | 0.4 | 0.6 | ms |" in lines
    assert any(line.startswith("Environment (round 1, rank 0): torch 2.3.0, device cpu") for line in lines)
    assert "| 1 | localhost_noderank0 | 20.5 | 1024 | - | 61 | 250.5 | 97 |" in lines


def test_markdown_report_interrupted_and_host_checks():
    s = sample_summary(interrupted=True, host_checks=[
        {"host": "node-b", "outcome": "auth_failed", "detail": "denied | publickey", "remedy": "fix SSH_KEY"}])
    md = MarkdownReporter().render(s)
    lines = md.splitlines()
    assert lines[0] == "# flagperf run20250101000000: interrupted"
    assert "- **interrupted** (SIGINT or SIGTERM): rounds that did not finish are marked so" in lines
    i = lines.index("## Hosts that failed their check")
    assert lines[i + 2] == "| host | outcome | detail | remedy |"
    assert lines[i + 4] == "| node-b | auth_failed | denied \\| publickey | fix SSH_KEY |"


def test_markdown_failure_of_a_killed_rank():
    s = sample_summary()
    s.cases[1].rounds[0].failure = replace(s.cases[1].rounds[0].failure, exit_code=-9)
    assert "rank 0, killed by SIGKILL (exit code -9))" in MarkdownReporter().render(s)


def test_write_reports(tmp_path):
    assert [r.name for r in file_reporters()] == ["markdown", "html", "detail", "nccl_tests"]
    out = write_reports(sample_summary(), tmp_path)         # nccl_tests: nothing to write (no collectives case)
    assert out == [ReportOutcome("markdown", tmp_path / "report.md", None),
                   ReportOutcome("html", tmp_path / "report.html", None),
                   ReportOutcome("detail", tmp_path / "detail_result.json", None)]
    assert (tmp_path / "report.md").read_text().startswith("# flagperf run20250101000000: failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detail_result.json", "report.html", "report.md"]


def test_write_reports_error_is_text(tmp_path):
    out = write_reports(sample_summary(), tmp_path / "missing")
    assert [o.name for o in out] == ["markdown", "html", "detail"]
    for o, file_name in zip(out, ("report.md", "report.html", "detail_result.json")):
        assert o.path is None and o.error.startswith(f"cannot write {file_name}: ")


# ------------------------------------------------------------------------------------------------- terminal
def render_text(renderable) -> str:
    console = Console(record=True, width=250, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_terminal_table():
    rep = reporter("terminal")
    assert isinstance(rep, TerminalReporter) and rep.file_name is None
    text = render_text(rep.render(sample_summary()))
    assert "flagperf run20250101000000: failed" in text
    for col in ("case", "status", "rounds", "metric", "median", "mean", "min", "max", "unit", "e2e s", "note"):
        assert col in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line and "-local-" in line}
    assert set(rows) == {PASS_NAME, FAIL_NAME}
    cells = [c.strip() for c in rows[PASS_NAME].split("│")[1:-1]]
    assert cells == [PASS_NAME, "passed", "2/3", "tflops", "11", "11", "10", "12", "TFLOPS", "2.5",
                     "round 3: skipped: no nvcc"]
    cells = [c.strip() for c in rows[FAIL_NAME].split("│")[1:-1]]
    assert cells[:4] == [FAIL_NAME, "failed", "0/2", "-"]
    assert cells[-1] == "round 1: rank 0 printed no FINISHED line"


def test_terminal_large_numbers():
    s = sample_summary()
    s.cases[0].rounds[0].finished["value"] = 2.5e7
    s.cases[0].rounds[1].finished["value"] = 2.5e7
    assert "2.500e+07" in render_text(TerminalReporter().render(s))


def test_terminal_failure_lines():
    s = sample_summary(host_checks=[{"host": "node-b", "outcome": "timeout", "detail": "no answer",
                                     "remedy": "check the host"}])
    assert TerminalReporter().failure_lines(s) == [
        "host node-b: timeout: no answer; check the host",
        f"{PASS_NAME} round 3: skipped: skipped: no nvcc",
        f"{FAIL_NAME} round 1: failed: rank 0 printed no FINISHED line",
        "    | step 10 loss 3.2",
        "    | done | really",
        f"{FAIL_NAME} round 2: error: localhost_noderank0: cannot prepare the node: 500",
        "    | docker: 500 Server Error",
    ]


def test_terminal_failure_lines_of_a_passed_run():
    s = sample_summary()
    s.cases = s.cases[:1]
    s.cases[0].rounds = s.cases[0].rounds[:2]
    assert TerminalReporter().failure_lines(s) == []
    assert s.status == Status.PASSED


# ------------------------------------------------------------------------------------------------- the CLI
def test_cli_report_rewrites_report_md(tmp_path, run_cli):
    run_dir = tmp_path / "run20250101000000"
    run_dir.mkdir()
    sample_summary().save(run_dir / "summary.json")
    (run_dir / "report.md").write_text("stale\n")
    rc, out, err = run_cli("report", run_dir, cwd=tmp_path)
    assert rc == 0, err
    assert "Traceback" not in err
    assert (run_dir / "report.md").read_text() == MarkdownReporter().render(sample_summary())
    assert "flagperf run20250101000000: failed" in out
    assert f"{FAIL_NAME} round 1: failed: rank 0 printed no FINISHED line" in out
    assert "    | step 10 loss 3.2" in out
    assert f"report markdown: {run_dir / 'report.md'}" in out


def test_cli_report_markdown(tmp_path, run_cli):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    sample_summary().save(run_dir / "summary.json")
    rc, out, err = run_cli("report", run_dir, "--markdown", cwd=tmp_path)
    assert rc == 0, err
    assert out.startswith("# flagperf run20250101000000: failed")


@pytest.mark.parametrize("text", ["{corrupt", '{"schema": "nope"}', None], ids=["bad-json", "schema", "missing"])
def test_cli_report_on_a_corrupt_summary(tmp_path, run_cli, text):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    if text is not None:
        (run_dir / "summary.json").write_text(text)
    rc, out, err = run_cli("report", run_dir, cwd=tmp_path)
    assert rc == 2, (out, err)
    assert "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith(f"flagperf: {run_dir / 'summary.json'}: ")
    assert not (run_dir / "report.md").exists()


def test_cli_report_on_a_summary_with_wrong_types(tmp_path, run_cli):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps(
        {"schema": SUMMARY_SCHEMA, "run_id": "r1",
         "cases": [{"name": "c", "rounds": [{"round": 1, "status": "failed", "duration_s": "slow"}]}]}))
    rc, out, err = run_cli("report", run_dir, cwd=tmp_path)
    assert "Traceback" not in err
    assert rc == 2, (out, err)
