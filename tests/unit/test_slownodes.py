"""Slow-node and slow-GPU detection (flagperf/results/slownodes.py): the robust rule (MAD, the shortfall floor,
direction, ties), rankings of each cases, and their place in summary.json and the reports."""
import json

import pytest

from flagperf.reporters.markdown import MarkdownReporter
from flagperf.reporters.terminal import TerminalReporter
from flagperf.results.interpret import Status
from flagperf.results.slownodes import (RULE, SCORE_LIMIT, SHORTFALL_FLOOR, outliers, rank_case, rank_cases,
                                        robust_scores)
from flagperf.results.summary import SUMMARY_SCHEMA, CaseSummary, NodeSummary, RoundSummary, Summary

from tests.unit.fakebackend import finished_record


def flags(values, higher=True):
    return [o for _, o in robust_scores(values, higher)]


def scores(values, higher=True):
    return [s for s, _ in robust_scores(values, higher)]


# ---------------------------------------------------------------------------------------------------- the rule
def test_score_is_the_robust_z_score_positive_when_worse():
    # median 100, |deviations| 0, 2, 2, 4, 40 -> MAD 2, scale 1.4826 * 2
    values = [100, 102, 98, 104, 60]
    got = scores(values)
    scale = 1.4826 * 2
    assert got == pytest.approx([0.0, -2 / scale, 2 / scale, -4 / scale, 40 / scale])
    assert flags(values) == [False, False, False, False, True]
    assert SCORE_LIMIT == 3.5 and SHORTFALL_FLOOR == 0.05


def test_direction_lower_is_better():
    # a time: the long one is the slow host; the short one is not flagged (only the bad direction is)
    values = [1.00, 1.01, 0.99, 1.02, 2.0, 0.5]
    assert flags(values, higher=False) == [False, False, False, False, True, False]
    s = scores(values, higher=False)
    assert s[4] > SCORE_LIMIT and s[5] < -SCORE_LIMIT
    # the same values as a throughput: the small one is the slow host
    assert flags(values, higher=True) == [False, False, False, False, False, True]


def test_floor_keeps_nearly_identical_hosts_unflagged():
    # a tiny MAD makes a 1% gap a huge score, but 1% is below the 5% floor
    values = [100.0, 100.01, 99.99, 100.0, 99.0]
    assert scores(values)[4] > SCORE_LIMIT
    assert flags(values) == [False] * 5
    # 6% short of the median: past the floor, flagged
    assert flags([100.0, 100.01, 99.99, 100.0, 94.0]) == [False, False, False, False, True]


def test_score_limit_alone_does_not_flag():
    # 20% short but the hosts spread widely: score below 3.5
    values = [100, 80, 120, 90, 110, 80]
    assert all(s is not None and s < SCORE_LIMIT for s in scores(values))
    assert flags(values) == [False] * 6


def test_ties_and_identical_values():
    assert robust_scores([5.0, 5.0, 5.0]) == [(0.0, False)] * 3
    # MAD 0: the scale floor (0.1% of the median) still scores the one that differs, and it is flagged
    (a, fa), (b, fb), (c, fc) = robust_scores([100.0, 100.0, 50.0])
    assert (a, b) == (0.0, 0.0) and not fa and not fb
    assert c == pytest.approx(50 / 0.1) and fc
    # two hosts: the median is their mean, neither can be told apart
    assert flags([100.0, 50.0]) == [False, False]
    assert flags([42.0]) == [False]


def test_non_finite_and_zero_values():
    got = robust_scores([100.0, float("nan"), 101.0, 99.0, None])
    assert got[1] == (None, False) and got[4] == (None, False)
    assert robust_scores([]) == []
    assert robust_scores([0.0, 0.0, 0.0]) == [(0.0, False)] * 3          # no scale, nothing different
    assert robust_scores([0.0, 0.0, 1.0], False)[2] == (None, False)      # no scale: not scored, not flagged


# ------------------------------------------------------------------------------------------------- rank_case
def fin(value, per_rank=None, metric="tflops", higher=True):
    d = finished_record(value=value, metric=metric, higher_is_better=higher)
    d.pop("event")
    if per_rank is not None:
        d["checks"] = {"passed": True, "details": {"per_rank": {"metric": metric, "values": per_rank}}}
    return d


def node(host, value=None, per_rank=None, status=Status.PASSED, **kw):
    return NodeSummary(f"{host}_noderank0", host, 0, 0, [], {}, status,
                       None if status == Status.PASSED else {"reason": "rank 0 failed"},
                       fin(value, per_rank, **kw) if value is not None else None)


def each_case(rounds, name="gemm-pytorch-H100-eachx2", nproc=2):
    rs = []
    for i, nodes in enumerate(rounds, 1):
        st = Status.PASSED if all(n.status == Status.PASSED for n in nodes) else Status.FAILED
        first = next((n.finished for n in nodes if n.finished), None)
        rs.append(RoundSummary(i, f"{name}/round{i}", st, 1.0, None if st == Status.PASSED else {"reason": "x"},
                               first if st == Status.PASSED else None, nodes))
    return CaseSummary(name, "gemm:pytorch:H100:each:2:2", "gemm", "pytorch", "H100", len(rounds[0]), nproc,
                       len(rounds), None, rs, each=True)


def test_rank_case_hosts_median_over_rounds_and_gpus_within_hosts():
    case = each_case([
        [node("h1", 100.0, [100.0, 99.0]), node("h2", 101.0, [101.0, 100.5]), node("h3", 60.0, [60.0, 100.0]),
         node("h4", 99.5, [99.5, 62.0])],
        [node("h1", 102.0, [102.0, 99.0]), node("h2", 99.0, [99.0, 100.5]), node("h3", 62.0, [62.0, 100.0]),
         node("h4", 100.5, [100.5, 60.0])],
    ])
    r = rank_case(case)
    assert r.case == case.name and r.metric == "tflops" and r.unit == "TFLOPS"
    assert r.higher_is_better is True and r.rule == RULE and r.failed_hosts == ()
    hosts = [e for e in r.entries if e.gpu is None]
    assert [(e.host, e.value, e.rank, e.outlier, e.rounds) for e in hosts] == [
        ("h1", 101.0, 1, False, 2), ("h2", 100.0, 2, False, 2), ("h4", 100.0, 2, False, 2),
        ("h3", 61.0, 4, True, 2)]
    assert hosts[-1].score > SCORE_LIMIT
    gpus = [e for e in r.entries if e.gpu is not None]
    # grouped by host in the hosts' rank order, best first within the host; scored against every GPU
    assert [(e.host, e.gpu, e.rank, e.outlier) for e in gpus] == [
        ("h1", 0, 1, False), ("h1", 1, 2, False), ("h2", 1, 1, False), ("h2", 0, 2, False),
        ("h4", 0, 1, False), ("h4", 1, 2, True), ("h3", 1, 1, False), ("h3", 0, 2, True)]
    assert [o[1].host + str(o[1].gpu) for o in outliers([r])] == ["h3None", "h41", "h30"]


def test_rank_case_failed_hosts_and_hosts_without_per_rank():
    case = each_case([[node("a", 10.0), node("b", status=Status.FAILED), node("c", 11.0), node("d", 10.5)]],
                     nproc=1)
    r = rank_case(case)
    assert r.failed_hosts == ("b",)
    assert [e.host for e in r.entries] == ["c", "d", "a"]         # no per-rank lists: hosts only
    assert not outliers([r])


def test_rank_case_lower_is_better_and_ties_keep_host_order():
    case = each_case([[node(h, v, metric="slept_s", higher=False) for h, v in
                       (("x", 0.5), ("y", 0.3), ("z", 0.3), ("w", 1.5))]], nproc=1)
    r = rank_case(case)
    assert r.higher_is_better is False
    assert [(e.host, e.rank, e.outlier) for e in r.entries] == [
        ("y", 1, False), ("z", 1, False), ("x", 3, False), ("w", 4, True)]


def test_only_each_cases_are_ranked():
    plain = CaseSummary("gemm-pytorch-local-1x1", "gemm:pytorch:local:1:1:1", "gemm", "pytorch", "local", 1, 1, 1)
    case = each_case([[node("a", 1.0)]], nproc=1)
    assert rank_case(plain) is None
    assert [r.case for r in rank_cases([plain, case])] == [case.name]


def test_per_rank_of_another_metric_or_length_is_ignored():
    case = each_case([[node("a", 10.0, [10.0, 9.0]), node("b", 10.0, [10.0])],
                      [node("a", 10.0, [10.0, 9.0]), node("b", 10.0, [10.0, 1.0])]])
    r = rank_case(case)
    gpus = [(e.host, e.gpu, e.rounds) for e in r.entries if e.gpu is not None]
    assert gpus == [("a", 0, 2), ("a", 1, 2), ("b", 0, 1)]


# ------------------------------------------------------------------------------------- summary.json, reports
def summary_with(case) -> Summary:
    return Summary("run1", "/d", "1", "now", cases=[case], rankings=rank_cases([case]))


def test_rankings_round_trip_and_old_summaries_load(tmp_path):
    case = each_case([[node("h1", 100.0, [100.0, 99.0]), node("h2", 101.0, [101.0, 100.0]),
                       node("h3", 50.0, [50.0, 99.0])]])
    s = summary_with(case)
    s.save(tmp_path / "summary.json")
    d = json.loads((tmp_path / "summary.json").read_text())
    assert d["rankings"][0]["entries"][-1]["outlier"] is True and d["cases"][0]["each"] is True
    assert d["cases"][0]["rounds"][0]["nodes"][2]["status"] == "passed"
    loaded = Summary.load(tmp_path / "summary.json")
    assert loaded.to_dict() == s.to_dict() and loaded.cases[0].each
    assert loaded.cases[0].rounds[0].nodes[2].finished["value"] == 50.0
    # written before rankings, each and per-node results existed
    for c in d["cases"]:
        c.pop("each")
        for r in c["rounds"]:
            for n in r["nodes"]:
                for key in ("status", "failure", "finished"):
                    n.pop(key)
    d.pop("rankings")
    old = Summary.from_dict(d)
    assert old.rankings == [] and not old.cases[0].each and old.cases[0].rounds[0].nodes[0].status is None
    assert "status" not in old.cases[0].rounds[0].nodes[0].to_dict()


def test_rankings_of_the_wrong_type_are_refused():
    d = Summary("r", "/d", "1", "now").to_dict()
    d["rankings"] = {"not": "a list"}
    with pytest.raises(ValueError, match="rankings: expected list"):
        Summary.from_dict(d)
    assert d["schema"] == SUMMARY_SCHEMA


def test_reports_list_the_outliers():
    case = each_case([[node("h1", 100.0), node("h2", 101.0), node("h3", 50.0)]], nproc=1)
    s = summary_with(case)
    md = MarkdownReporter().render(s)
    assert "## Slow hosts and GPUs (each cases)" in md
    assert f"- **OUTLIER: {case.name}: host h3: 50 TFLOPS, score" in md
    assert "| 3 | h3 | - | 50 |" in md and "**yes** |" in md
    term = TerminalReporter()
    assert [line.split(", score")[0] for line in term.outlier_lines(s)] == [f"OUTLIER: {case.name}: host h3: 50 TFLOPS"]
    (table,) = term.rankings(s)
    assert table.row_count == 3
    healthy = summary_with(each_case([[node("h1", 100.0), node("h2", 101.0), node("h3", 99.0)]], nproc=1))
    assert "No outlier" in MarkdownReporter().render(healthy) and term.outlier_lines(healthy) == []
    plain = Summary("r", "/d", "1", "now")
    assert "Slow hosts" not in MarkdownReporter().render(plain) and term.rankings(plain) == []
