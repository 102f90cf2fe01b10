"""A node's result is bounded and judged on its own: every PerfLog line, FINISHED record and per-rank list is capped
in size and nesting depth and type-checked when read, and what the judge keeps can always be saved; an each case's
ranking is robust to one host's extreme values and ranks by the case's own headline metric."""

import json
import random
import time

import pytest

from flagperf.records import Failure
from flagperf.results import perflog
from flagperf.results.interpret import NodeEvidence, RoundEvidence, Status, Wait, WaitEnd, interpret_round
from flagperf.results.slownodes import _ranks, headline_metric, rank_case
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf.stages.finish import headline_metrics
from flagperf_contract import (FINISHED_MAX_BYTES, FINISHED_MAX_DEPTH, PER_RANK_MAX, ContractError, RankRecord,
                               RankReport, parse_perflog_line, perflog_line, read_json_data, read_perflog_line,
                               validate_finished)

from tests.unit.fakebackend import finished_record


def nested(depth: int, leaf=0):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def payload(**overrides) -> dict:
    d = finished_record(**overrides)
    d.pop("event")
    return d


# ---------------------------------------------------------------------------------------------- the contract
def test_read_json_data_bounds_the_nesting(tmp_path):
    for depth in (100_000, 950, 65):
        p = tmp_path / f"deep{depth}.json"
        p.write_text("[" * depth + "]" * depth)
        with pytest.raises(ContractError, match=r"deep\d+\.json: unreadable: nested deeper than 64 levels"):
            read_json_data(p)
    p = tmp_path / "ok.json"
    p.write_text("[" * 64 + "]" * 64)
    assert read_json_data(p) == nested(63, [])


def test_read_json_data_reads_nan_and_infinity_as_absent_with_a_note(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": [1, NaN], "b": {"c": Infinity, "d": -Infinity, "e": 1e999}, "f": 2.5}')
    notes: list = []
    assert read_json_data(p, notes=notes) == {"a": [1, None], "b": {"c": None, "d": None, "e": None}, "f": 2.5}
    assert sorted(notes) == ["a[1]: nan read as absent", "b.c: inf read as absent", "b.d: -inf read as absent",
                             "b.e: inf read as absent"]


def test_read_json_data_refuses_a_sparse_file_without_reading_it(tmp_path):
    p = tmp_path / "big.json"
    with open(p, "wb") as f:
        f.truncate(2 * 1024 ** 3)           # 2 GiB of NULs, no disk used
    with pytest.raises(ContractError, match="larger than"):
        read_json_data(p)


def test_finished_nested_deeper_than_the_bound_is_refused():
    deep = payload(env={"x": nested(950)})
    assert validate_finished(deep) == [f"nested deeper than {FINISHED_MAX_DEPTH} levels"]
    assert validate_finished(payload(env={"x": nested(20)})) == []


def test_finished_larger_than_the_bound_is_refused():
    big = payload(env={"blob": "x" * (FINISHED_MAX_BYTES + 10)})
    (problem,) = validate_finished(big)
    assert problem.startswith(f"larger than {FINISHED_MAX_BYTES} bytes")


@pytest.mark.parametrize("per_rank, words", [
    ([1.0], "per_rank: expected an object"),
    ({"metric": 5, "values": [1.0]}, "per_rank.metric: expected a string"),
    ({"metric": "tflops", "values": "1,2"}, "per_rank.values: expected a list"),
    ({"metric": "tflops", "values": [1.0, "fast"]}, "per_rank.values[1]: expected a finite number"),
    ({"metric": "tflops", "values": [1.0, None]}, "per_rank.values[1]: expected a finite number"),
    ({"metric": "tflops", "values": [1.0] * (PER_RANK_MAX + 1)}, f"at most {PER_RANK_MAX}"),
])
def test_per_rank_list_is_type_checked(per_rank, words):
    problems = validate_finished(payload(checks={"passed": True, "details": {"per_rank": per_rank}}))
    assert len(problems) == 1 and words in problems[0], problems


def test_numbers_no_float_can_hold_are_refused():
    assert validate_finished(payload(value=10 ** 400)) == [f"'value': expected a number, got {10 ** 400!r:.80}..."]
    assert "metrics['m']" in validate_finished(payload(metrics={"m": {"value": -10 ** 400, "unit": "s"}}))[0]
    per_rank = {"metric": "tflops", "values": [1.0, 10 ** 400]}
    assert "per_rank.values[1]" in validate_finished(payload(checks={"passed": True,
                                                                     "details": {"per_rank": per_rank}}))[0]


def test_problem_texts_are_short_for_huge_values():
    problems = validate_finished(payload(metrics={"m": {"value": "v" * 500_000, "unit": "s"}}, value=["x"] * 10_000))
    assert problems and all(len(p) < 300 for p in problems), [len(p) for p in problems]


def test_perflog_line_nested_deeper_than_the_bound_is_refused_not_raised():
    line = '[PerfLog] {"event": "FINISHED", "env": ' + "[" * 5000 + "]" * 5000 + "}"
    assert parse_perflog_line(line) is None
    record, problem = read_perflog_line(line)
    assert record is None and "nested deeper than" in problem
    line = '[PerfLog] {"event": "FINISHED", "env": ' + "[" * 950 + "]" * 950 + "}"
    assert parse_perflog_line(line) is None and "nested deeper than" in read_perflog_line(line)[1]
    assert read_perflog_line("plain output") == (None, None)
    assert read_perflog_line("[PerfLog] {cut") == (None, None)


def test_read_records_marks_a_refused_line(tmp_path):
    log = tmp_path / "rank0.out.log"
    log.write_text('[PerfLog] {"event": "RUN_START", "time": 1}\n'
                   '[PerfLog] {"event": "FINISHED", "env": ' + "[" * 2000 + "]" * 2000 + "}\n")
    records = perflog.read_records(log)
    assert [r["event"] for r in records] == ["RUN_START", perflog.UNREADABLE]
    assert "nested deeper than" in records[1]["reason"]


# -------------------------------------------------------------------------------------------------- the judge
def evidence(records, nproc=1, nodes=1):
    evs = []
    for k in range(nodes):
        ranks = RankReport(k, [RankRecord(k * nproc + i, i, 100 + i, 0) for i in range(nproc)])
        evs.append(NodeEvidence(f"n{k}", f"h{k}", k, launcher_exit=0, ranks=ranks,
                                rank_logs={0: "/run/rank0.out.log"}, rank_tails={0: ["bye"]}, nproc=nproc))
    return RoundEvidence(Wait(WaitEnd.COMPLETED), evs, list(records))


def judged_summary(verdict) -> Summary:
    """A summary holding what the judge keeps of a verdict (as judge_round stores it)."""
    fin = verdict.finished.to_dict() if verdict.finished else None
    node = NodeSummary("n0", "h0", 0, 0, [], {}, verdict.status, verdict.failure, fin)
    rnd = RoundSummary(1, "c/round1", verdict.status, 1.0, verdict.failure, fin, [node])
    return Summary("r", "/run", "1", "now", cases=[CaseSummary("c", "k", "m", "f", "h", 1, 1, 1, None, [rnd])])


def test_a_finished_nested_950_deep_fails_its_node_and_the_summary_saves(tmp_path):
    line = perflog_line({"event": "FINISHED", **payload(env={"x": nested(950)})})
    v = interpret_round(evidence(perflog.parse_lines([line])))
    assert v.status == Status.FAILED and "nested deeper than" in v.failure.reason
    s = judged_summary(v)
    s.save(tmp_path / "summary.json")
    assert Summary.load(tmp_path / "summary.json").cases[0].rounds[0].status == Status.FAILED


def test_a_finished_dict_deep_from_the_records_fails_its_node(tmp_path):
    rec = {"event": "FINISHED", **payload(checks={"passed": True, "details": {"x": nested(950)}})}
    v = interpret_round(evidence([rec]))
    assert v.status == Status.FAILED and "invalid result: nested deeper than" in v.failure.reason
    judged_summary(v).save(tmp_path / "summary.json")


def test_an_oversized_finished_fails_its_node_with_the_reason(tmp_path):
    rec = {"event": "FINISHED", **payload(env={"blob": "x" * (FINISHED_MAX_BYTES + 1)})}
    v = interpret_round(evidence([rec]))
    assert v.status == Status.FAILED and "larger than" in v.failure.reason
    judged_summary(v).save(tmp_path / "summary.json")


def test_a_per_rank_list_longer_than_the_ranks_fails_the_node():
    rec = {"event": "FINISHED", **payload(checks={"passed": True, "details": {
        "per_rank": {"metric": "tflops", "values": [1.0] * 3}}})}
    v = interpret_round(evidence([rec], nproc=2))
    assert v.status == Status.FAILED and "per_rank.values: 3 values, but 2 rank(s) ran" in v.failure.reason
    assert interpret_round(evidence([rec], nproc=4)).status == Status.PASSED
    assert interpret_round(evidence([rec], nproc=2, nodes=2)).status == Status.PASSED     # 4 ranks in all


def test_a_refused_perflog_line_names_why_rank_0_has_no_result():
    v = interpret_round(evidence([{"event": perflog.UNREADABLE, "reason": "a PerfLog line nested deeper than 34"}]))
    assert v.status == Status.FAILED
    assert v.failure.reason == "invalid result: rank 0 printed a PerfLog line nested deeper than 34"


def test_a_million_element_per_rank_list_is_refused_quickly():
    rec = {"event": "FINISHED", **payload(checks={"passed": True, "details": {
        "per_rank": {"metric": "tflops", "values": [1.0] * 1_000_000}}})}
    t = time.monotonic()
    v = interpret_round(evidence([rec], nproc=8))
    assert v.status == Status.FAILED and "invalid result: larger than" in v.failure.reason
    assert time.monotonic() - t < 60


# ----------------------------------------------------------------------------------------------- the rankings
def fin(value, metric="tflops", per_rank=None, higher=True):
    d = payload(value=value, metric=metric, higher_is_better=higher)
    if per_rank is not None:
        d["checks"] = {"passed": True, "details": {"per_rank": {"metric": metric, "values": per_rank}}}
    return d


def host(name, value, **kw):
    return NodeSummary(f"{name}_noderank0", name, 0, 0, [], {}, Status.PASSED, None, fin(value, **kw))


def each(nodes, nproc=2) -> CaseSummary:
    rnd = RoundSummary(1, "c/round1", Status.PASSED, 1.0, None, nodes[0].finished, nodes)
    return CaseSummary("c", "k", "gemm", "pytorch", "H100", len(nodes), nproc, 1, None, [rnd], each=True)


@pytest.mark.parametrize("extreme", [1e300, -1e300, 1e-300, 0.0, 1.7e308])
def test_an_extreme_host_never_flags_the_honest_ones(extreme):
    case = each([host("h1", 100.0, per_rank=[100.0, 99.0]), host("h2", 98.0, per_rank=[98.0, 97.5]),
                 host("h3", extreme, per_rank=[extreme, extreme])])
    r = rank_case(case)
    flagged = {(e.host, e.gpu) for e in r.outliers}
    assert not {h for h, _ in flagged} & {"h1", "h2"}, flagged
    if extreme < 50:            # the extreme is worse: it is the outlier, reported as such
        assert ("h3", None) in flagged


def test_a_per_rank_list_longer_than_nproc_is_not_pooled():
    case = each([host("h1", 100.0, per_rank=[100.0, 99.0]), host("h2", 99.0, per_rank=[99.0, 98.5]),
                 host("h3", 100.0, per_rank=[1e9] * 1000)])
    r = rank_case(case)
    assert not r.outliers
    assert [e.host for e in r.entries if e.gpu is not None] == ["h1", "h1", "h2", "h2"]


def test_ranking_by_the_headline_most_hosts_report_not_the_first_hosts():
    case = each([host("h0", 1.0, metric="other"), host("h1", 100.0), host("h2", 99.0), host("h3", 60.0)])
    assert headline_metric(case) == "tflops"
    r = rank_case(case)
    assert r.metric == "tflops" and r.failed_hosts == ("h0",)
    assert [e.host for e in r.outliers] == ["h3"]       # the slow honest host is still found


def test_ranking_by_the_metric_the_case_config_names():
    case = each([host("h0", 1.0, metric="other"), host("h1", 2.0, metric="other"), host("h2", 99.0)])
    assert rank_case(case).metric == "other"
    r = rank_case(case, "tflops")
    assert r.metric == "tflops" and r.failed_hosts == ("h0", "h1")


def test_headline_metrics_from_the_plan():
    class Node:
        def __init__(self, cfg):
            self.case_config = cfg

    class Round:
        def __init__(self, cfg):
            self.nodes = (Node(cfg),)

    class Case:
        def __init__(self, name, cfg):
            self.name, self.rounds = name, (Round(cfg),)

    cases = [Case("a", {"headline_metric": "tflops_fp32"}), Case("b", {}), Case("c", {"headline_metric": 5})]
    assert headline_metrics(cases) == {"a": "tflops_fp32"}


def test_ranks_match_the_competition_rule():
    rnd = random.Random(7)
    for _ in range(50):
        values = [rnd.choice([1.0, 2.0, 3.0, rnd.random()]) for _ in range(rnd.randint(0, 30))]
        for higher in (True, False):
            key = [(-v if higher else v) for v in values]
            assert _ranks(values, higher) == [1 + sum(1 for o in key if o < m) for m in key]


def test_ranking_20000_per_rank_entries_is_not_quadratic():
    values = [100.0 + (i % 7) for i in range(20_000)]
    case = each([host("h1", 100.0, per_rank=values), host("h2", 101.0, per_rank=values)], nproc=20_000)
    t = time.monotonic()
    r = rank_case(case)
    assert len(r.entries) == 2 + 40_000
    assert time.monotonic() - t < 30         # quadratic work took minutes


def test_summary_load_and_save_round_trip_a_failure_with_nodes(tmp_path):
    f = Failure("2 of 3 hosts did not pass", "n1", nodes=("n1", "n2"), last_lines=("a", "b"))
    node = NodeSummary("n1", "h1", 0, 0, [], {}, Status.FAILED, f, None)
    rnd = RoundSummary(1, "c/round1", Status.FAILED, 1.0, f, None, [node])
    s = Summary("r", "/run", "1", "now", cases=[CaseSummary("c", "k", "m", "f", "h", 1, 1, 1, None, [rnd])])
    s.save(tmp_path / "summary.json")
    back = Summary.load(tmp_path / "summary.json")
    assert back.cases[0].rounds[0].failure == f and json.loads((tmp_path / "summary.json").read_text())
