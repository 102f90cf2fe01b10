"""Run directories read defensively: `flagperf report`, `compare` and `collect` on a summary.json or run.json
that is a FIFO, a link to /dev/zero, a 2 GiB sparse file, nested 10^5 deep, holds NaN/Infinity or values of the
wrong type give exit 2 and one line naming the file and what is wrong (never a hang or a traceback); 20,000 cases
load and compare in bounded time."""

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flagperf.results.compare import compare_summaries
from flagperf.results.summary import SUMMARY_SCHEMA, Summary, SummaryError

ROOT = Path(__file__).resolve().parents[2]


def flagperf(*args, timeout=120):
    """(exit code, stderr lines) of ``python -m flagperf args``; a hang fails the test."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    try:
        r = subprocess.run([sys.executable, "-m", "flagperf", *map(str, args)], capture_output=True, text=True,
                           timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"flagperf {' '.join(map(str, args))} did not end within {timeout} s", pytrace=False)
    return r.returncode, r.stderr.strip().splitlines()


def a_case(i=0) -> dict:
    fin = {"metric": "tflops", "value": 100.0, "unit": "TFLOPS", "higher_is_better": True, "e2e_time": 2.0,
           "metrics": {"latency": {"value": 0.5, "unit": "ms"}}, "checks": {"passed": True, "details": {}},
           "env": {"device": "cpu"}}
    return {"name": f"c{i}", "key": f"k{i}", "model": "gemm", "framework": "pytorch", "hw": "H100", "nnodes": 1,
            "nproc": 1, "repeat": 1, "verdicts": [],
            "rounds": [{"round": 1, "dir": f"c{i}/round1", "status": "passed", "duration_s": 1.0, "value": 100.0,
                        "e2e_time": 2.0, "metrics": dict(fin["metrics"]), "finished": fin,
                        "nodes": [{"node": "n0", "host": "h", "node_rank": 0, "ranks": [], "monitors": {}}]}]}


def a_summary(cases=1) -> dict:
    one = a_case()
    many = []
    for i in range(cases):
        c = copy.deepcopy(one)
        c["name"], c["key"] = f"c{i}", f"k{i}"
        many.append(c)
    return {"schema": SUMMARY_SCHEMA, "run_id": "r", "run_dir": "/run", "flagperf_version": "1", "started": "now",
            "finished": None, "duration_s": 1.0, "vendor": "nvidia", "runtime": "bare", "hosts": ["h"],
            "host_checks": [], "cases": many, "rankings": [], "series": None}


def run_dir(tmp_path, name="run") -> Path:
    d = tmp_path / name
    d.mkdir()
    return d


def write(d: Path, data) -> Path:
    (d / "summary.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return d


def make_hostile(d: Path, kind: str) -> Path:
    p = d / "summary.json"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        os.symlink("/dev/zero", p)
    elif kind == "sparse":
        with open(p, "wb") as f:
            f.truncate(2 * 1024 ** 3)       # 2 GiB of NULs, no disk used
    elif kind == "nested":
        p.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "nested-in-object":
        p.write_text('{"schema": "flagperf.summary/1", "run_id": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif kind == "nested-950":
        s = a_summary()
        s["cases"][0]["rounds"][0]["finished"]["env"] = {"x": "PLACEHOLDER"}
        p.write_text(json.dumps(s).replace('"PLACEHOLDER"', "[" * 950 + "]" * 950))
    return d


HOSTILE = {"fifo": "not a regular file (a FIFO)", "zero": "not a regular file (a symlink",
           "sparse": "larger than", "nested": "nested deeper than", "nested-in-object": "nested deeper than",
           "nested-950": "nested deeper than"}


def assert_one_line(rc, err, path, words):
    assert rc == 2, (rc, err)
    assert len(err) == 1 and not any("Traceback" in e for e in err), err
    assert str(path) in err[0] and words in err[0], err[0]


@pytest.mark.parametrize("kind", HOSTILE)
def test_report_and_compare_refuse_a_hostile_summary_file(tmp_path, kind):
    good = write(run_dir(tmp_path, "good"), a_summary())
    bad = make_hostile(run_dir(tmp_path, "bad"), kind)
    for args in (("report", bad), ("compare", bad, good), ("compare", good, bad), ("compare", "--json", bad, bad)):
        rc, err = flagperf(*args, timeout=60)
        assert_one_line(rc, err, bad / "summary.json", HOSTILE[kind])


WRONG = {   # (where, value, what the message names)
    "metrics": (("cases", 0, "rounds", 0, "metrics"), [1, 2], "cases[0].rounds[0].metrics: expected"),
    "metric entry": (("cases", 0, "rounds", 0, "finished", "metrics"), {"x": "y"},
                     "cases[0].rounds[0].finished.metrics.x: expected dict"),
    "metric value": (("cases", 0, "rounds", 0, "finished", "metrics"), {"x": {"value": [1], "unit": "s"}},
                     "finished.metrics.x.value: expected"),
    "headline value": (("cases", 0, "rounds", 0, "finished", "value"), "fast", "finished.value: expected"),
    "nodes": (("cases", 0, "rounds", 0, "nodes"), "abc", "cases[0].rounds[0].nodes: expected list"),
    "node": (("cases", 0, "rounds", 0, "nodes", 0), 5, "cases[0].rounds[0].nodes[0]: expected dict"),
    "node monitors": (("cases", 0, "rounds", 0, "nodes", 0, "monitors"), {"gpu": 5},
                      "nodes[0].monitors.gpu: expected dict"),
    "gpu devices": (("cases", 0, "rounds", 0, "nodes", 0, "monitors"), {"gpu": {"devices": [5]}},
                    "monitors.gpu.devices[0]: expected dict"),
    "node status": (("cases", 0, "rounds", 0, "nodes", 0, "status"), "bogus", "nodes[0].status: expected one of"),
    "node finished": (("cases", 0, "rounds", 0, "nodes", 0, "finished"), {"value": "x"},
                      "nodes[0].finished.value: expected"),
    "rankings": (("rankings",), [{"entries": [{"host": "h", "value": "v"}]}], "rankings[0].entries[0].value"),
    "ranking entries": (("rankings",), [{"entries": 5}], "rankings[0].entries: expected list"),
    "ranking median": (("rankings",), [{"median": "m", "entries": []}], "rankings[0].median: expected"),
    "verdicts": (("cases", 0, "verdicts"), [{"metric": "x", "ok": False, "expected": 1, "deviation": "d"}],
                 "cases[0].verdicts[0].deviation: expected"),
    "verdict": (("cases", 0, "verdicts"), [5], "cases[0].verdicts[0]: expected dict"),
    "last lines": (("cases", 0, "rounds", 0, "failure"), {"reason": "r", "last_lines": [1, {"a": 2}]},
                   "cases[0].rounds[0].failure.last_lines[0]: expected str"),
    "last lines string": (("cases", 0, "rounds", 0, "failure"), {"reason": "r", "last_lines": "abc"},
                          "failure.last_lines: expected list"),
    "failure rank": (("cases", 0, "rounds", 0, "failure"), {"reason": "r", "rank": "x"},
                     "failure.rank: expected"),
    "host checks": (("host_checks",), [{"host": ["h"]}], "host_checks[0].host: expected"),
    "env": (("cases", 0, "rounds", 0, "finished", "env"), 5, "finished.env: expected dict"),
    "device window": (("cases", 0, "rounds", 0, "finished", "checks"), {"details": {"device_window": 5}},
                      "checks.details.device_window: expected dict"),
}


def wrong_summary(name) -> tuple:
    """(a summary with WRONG[name]'s value put in place, the words its error must contain)."""
    where, value, words = WRONG[name]
    data = a_summary()
    obj = data
    for key in where[:-1]:
        obj = obj[key]
    obj[where[-1]] = value
    return data, words


@pytest.mark.parametrize("name", WRONG)
def test_wrong_types_are_one_line_naming_the_field(tmp_path, name):
    data, words = wrong_summary(name)
    d = write(run_dir(tmp_path), data)
    with pytest.raises(SummaryError, match=str(d / "summary.json")) as exc:
        Summary.load(d / "summary.json")
    assert words in str(exc.value), str(exc.value)


@pytest.mark.parametrize("name", ["metrics", "node monitors", "rankings", "verdicts", "last lines"])
def test_wrong_types_through_the_cli(tmp_path, name):
    data, words = wrong_summary(name)
    bad = write(run_dir(tmp_path, "bad"), data)
    good = write(run_dir(tmp_path, "good"), a_summary())
    for args in (("report", bad), ("compare", good, bad)):
        rc, err = flagperf(*args)
        assert_one_line(rc, err, bad / "summary.json", words)


def test_nan_and_infinity_are_read_as_absent_with_a_note(tmp_path):
    text = json.dumps(a_summary())
    text = text.replace("100.0", "NaN").replace("2.0", "Infinity").replace('"latency": {"value": 0.5',
                                                                            '"latency": {"value": -Infinity')
    d = write(run_dir(tmp_path), text)
    s = Summary.load(d / "summary.json")
    r = s.cases[0].rounds[0]
    assert r.finished["value"] is None and r.finished["e2e_time"] is None
    assert any(n.startswith(f"{d / 'summary.json'}: cases[0].rounds[0].finished.value: nan") for n in s.notes)
    assert s.cases[0].passed_rounds     # the round is still there: only its numbers are absent
    good = write(run_dir(tmp_path, "good"), a_summary())
    rc, _ = flagperf("compare", "--json", good, d)
    assert rc == 0


def test_integers_no_float_can_hold_are_read_as_absent(tmp_path):
    text = json.dumps(a_summary()).replace("100.0", "1" + "0" * 4000).replace('"round": 1', '"round": ' + "9" * 400)
    d = write(run_dir(tmp_path), text)
    with pytest.raises(SummaryError, match=r"cases\[0\]\.rounds\[0\]\.round: expected int, got None"):
        Summary.load(d / "summary.json")
    d = write(run_dir(tmp_path, "ok"), json.dumps(a_summary()).replace("100.0", "1" + "0" * 4000))
    s = Summary.load(d / "summary.json")
    assert s.cases[0].rounds[0].finished["value"] is None and len(s.notes) == 2
    rc, err = flagperf("compare", d, d)
    assert rc == 0, err


def test_20000_cases_load_and_compare_in_bounded_time(tmp_path):
    d = write(run_dir(tmp_path), a_summary(20_000))
    t = time.monotonic()
    s = Summary.load(d / "summary.json")
    cmp = compare_summaries(s, s)
    assert len(cmp.cases) == 20_000 and not cmp.regressed
    cmp.to_dict()
    assert time.monotonic() - t < 120       # a few seconds here; the quadratic type check took minutes
    rc, err = flagperf("compare", "--json", d, d, timeout=300)
    assert rc == 0, err


def test_report_and_the_compare_table_of_20000_cases_are_bounded(tmp_path):
    """The terminal table, the failure lines, the compare table and report.html's case sections are bounded (the
    rest counted), so a run of 20,000 cases is shown in seconds, not minutes; report.md keeps every case."""
    d = write(run_dir(tmp_path), a_summary(20_000))
    r = subprocess.run([sys.executable, "-m", "flagperf", "report", str(d)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "19800 more passed case(s)" in r.stdout and len(r.stdout.splitlines()) < 1000
    assert (d / "report.md").read_text().count("| case") >= 1 and (d / "report.html").is_file()
    assert "more passed case(s) are in the table above" in (d / "report.html").read_text()
    r = subprocess.run([sys.executable, "-m", "flagperf", "compare", str(d), str(d)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "19800 more case(s) without a regression or a note" in r.stdout and len(r.stdout.splitlines()) < 3000


def collect_dir(tmp_path, record=None, kind=None) -> Path:
    d = run_dir(tmp_path, "collect")
    p = d / "run.json"
    if kind:
        make_hostile(d, kind)
        (d / "summary.json").rename(p)
    else:
        p.write_text(json.dumps(record))
    return d


def a_run_record(**kw) -> dict:
    rec = {"schema": "flagperf.run/1", "run_id": "r", "flagperf_version": "1", "backend": "ssh", "runtime": "bare",
           "hosts": [{"HOST": "192.0.2.1"}],
           "nodes": [{"case": "c", "round": 1, "host": "192.0.2.1", "node": "n0", "node_dir": "/tmp/x",
                      "local_dir": "c/round1/n0"}]}
    rec.update(kw)
    return rec


@pytest.mark.parametrize("kind", ["fifo", "zero", "nested"])
def test_collect_refuses_a_hostile_run_json(tmp_path, kind):
    if kind == "fifo":
        d = run_dir(tmp_path, "collect")
        os.mkfifo(d / "run.json")
    elif kind == "zero":
        d = run_dir(tmp_path, "collect")
        os.symlink("/dev/zero", d / "run.json")
    else:
        d = run_dir(tmp_path, "collect")
        (d / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    rc, err = flagperf("collect", d, timeout=60)
    assert_one_line(rc, err, d / "run.json", HOSTILE[kind])


@pytest.mark.parametrize("nodes, words", [
    ([{"host": ["x"], "node_dir": "/x", "local_dir": "a"}], "nodes[0].host: expected a non-empty string"),
    ([{"host": "192.0.2.1", "node_dir": 1, "local_dir": "a"}], "nodes[0].node_dir: expected a non-empty string"),
    ([{"host": "192.0.2.1", "node_dir": "/x", "local_dir": {"a": 1}}], "nodes[0].local_dir: expected"),
    ([{"host": "192.0.2.1", "node_dir": "/x", "local_dir": "a", "node": 7}], "nodes[0].node: expected"),
])
def test_collect_refuses_node_entries_of_the_wrong_type(tmp_path, nodes, words):
    d = collect_dir(tmp_path, a_run_record(nodes=nodes))
    rc, err = flagperf("collect", d, timeout=60)
    assert_one_line(rc, err, d / "run.json", words)


def test_collect_refuses_a_host_address_of_the_wrong_type(tmp_path):
    d = collect_dir(tmp_path, a_run_record(hosts=[{"HOST": 5}]))
    rc, err = flagperf("collect", d, timeout=60)
    assert_one_line(rc, err, d / "run.json", "host address is int")
