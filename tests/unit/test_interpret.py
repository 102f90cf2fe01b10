"""Round interpretation (flagperf/results/interpret.py): every Status and every branch, table-driven."""
import pytest

from flagperf.results.interpret import (NodeEvidence, RoundEvidence, Status, Verdict, Wait, WaitEnd, case_status,
                                        describe_exit, interpret_round, run_status)
from flagperf.records import Failure
from flagperf_contract import Finished, RankRecord, RankReport

from tests.unit.fakebackend import check_failed_record, finished_record, skipped_record

N0, N1 = "h0_noderank0", "h1_noderank1"


def failure_dict(v: Verdict) -> dict:
    return v.failure.to_dict()


def verdict(status, failure: dict) -> Verdict:
    return Verdict(status, Failure.from_dict(failure))


def rec(rank, code=0, stopped=False, local=None):
    return RankRecord(rank, rank if local is None else local, 1000 + rank, code, None, None, None, stopped)


def report(node_rank, *records, first=None):
    return RankReport(node_rank, list(records), first)


def node(label=N0, node_rank=0, ranks=(0,), report_=None, problem=None, exit_=0, output_tail=("out: bye",)):
    ev = NodeEvidence(label, label.split("_")[0], node_rank, tuple(ranks), exit_, report_, problem)
    ev.rank_logs = {r: f"/run/{label}/rank{r}.out.log" for r in ranks}
    ev.rank_tails = {r: [f"rank {r} line 1", f"rank {r} line 2"] for r in ranks}
    ev.output_log = f"/run/{label}/launcher.out.log"
    ev.output_tail = list(output_tail)
    return ev


def ok_node(label=N0, node_rank=0, ranks=(0,), **kw):
    return node(label, node_rank, ranks, report(node_rank, *(rec(r) for r in ranks)), **kw)


def evidence(wait=WaitEnd.COMPLETED, nodes=None, records=(), reason="", failed_node=None):
    return RoundEvidence(Wait(wait, reason, failed_node), list(nodes if nodes is not None else [ok_node()]),
                         list(records))


FIN = finished_record()


# ----------------------------------------------------------------------------------------------------- passed
def test_passed():
    v = interpret_round(evidence(records=[FIN]))
    assert v.status == Status.PASSED and v.failure is None
    assert isinstance(v.finished, Finished) and v.finished.value == 12.5 and v.finished.metric == "tflops"
    assert v.finished.to_dict() == FIN                   # the whole record is kept


def test_passed_uses_the_last_finished_line_and_ignores_other_events():
    recs = [{"event": "STARTED"}, finished_record(value=1.0), skipped_record(), finished_record(value=3.0)]
    v = interpret_round(evidence(records=recs))
    assert v.status == Status.PASSED and v.finished.value == 3.0


def test_passed_two_nodes():
    nodes = [ok_node(N0, 0, (0, 1)), ok_node(N1, 1, (2, 3))]
    assert interpret_round(evidence(nodes=nodes, records=[FIN])).status == Status.PASSED


def test_passed_when_ranks_expected_is_empty():
    n = node(report_=report(0, rec(5)), ranks=())
    assert interpret_round(evidence(nodes=[n], records=[FIN])).status == Status.PASSED


# ------------------------------------------------------------------------------------------- ended early: wait
WAIT_STATUS = [(WaitEnd.INTERRUPTED, Status.INTERRUPTED, "interrupted by the user"),
               (WaitEnd.TIMEOUT, Status.TIMEOUT, "round exceeded CASE_TIMEOUT (5 s)"),
               (WaitEnd.ERROR, Status.ERROR, "localhost_noderank0: cannot prepare the node: boom")]


@pytest.mark.parametrize("end, status, reason", WAIT_STATUS)
def test_wait_end_without_failed_rank(end, status, reason):
    # even with a valid FINISHED: the wait decides
    v = interpret_round(evidence(end, records=[FIN], reason=reason))
    assert v == verdict(status, {"reason": reason})


@pytest.mark.parametrize("end, status, reason", WAIT_STATUS)
def test_wait_end_with_no_nodes_read(end, status, reason):
    v = interpret_round(evidence(end, nodes=[node(report_=None, problem="host h0: /x/ranks.json: missing",
                                                  exit_=None)], reason=reason))
    assert v.status == status and v.failure.to_dict() == {"reason": reason}


@pytest.mark.parametrize("end, status, reason", WAIT_STATUS)
def test_wait_end_with_failed_rank(end, status, reason):
    n = node(ranks=(0, 1), report_=report(0, rec(0, 0), rec(1, 9), first=1), exit_=1)
    v = interpret_round(evidence(end, nodes=[n], reason=reason))
    assert v.status == status
    assert failure_dict(v) == {"reason": f"{reason}; rank 1 had failed (exit code 9)", "node": N0, "rank": 1,
                               "exit_code": 9, "log": f"/run/{N0}/rank1.out.log",
                               "last_lines": ["rank 1 line 1", "rank 1 line 2"]}


def test_timeout_ignores_ranks_stopped_by_the_launcher():
    n = node(ranks=(0, 1), report_=report(0, rec(0, -15, stopped=True), rec(1, -15, stopped=True)), exit_=143)
    v = interpret_round(evidence(WaitEnd.TIMEOUT, nodes=[n], reason="round exceeded CASE_TIMEOUT (1 s)"))
    assert v == verdict(Status.TIMEOUT, {"reason": "round exceeded CASE_TIMEOUT (1 s)"})


# ------------------------------------------------------------------------------------------------- failed rank
def test_failed_rank_flagged_first_by_the_launcher():
    n0 = node(N0, 0, (0, 1), report(0, rec(0, -15, stopped=True), rec(1, 4), first=1), exit_=1)
    n1 = node(N1, 1, (2, 3), report(1, rec(2, 6, local=0), rec(3, 0, local=1)), exit_=1)
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, nodes=[n0, n1], reason=f"node {N0} failed",
                                 failed_node=N0))
    assert v.status == Status.FAILED
    assert v.failure.reason == "rank 1 failed (exit code 4)"
    assert (v.failure.node, v.failure.rank, v.failure.exit_code) == (N0, 1, 4)


def test_first_failure_on_another_node_wins_over_an_unflagged_one():
    n0 = node(N0, 0, (0,), report(0, rec(0, 6)), exit_=1)                    # not flagged first
    n1 = node(N1, 1, (1,), report(1, rec(1, 2, local=0), first=1), exit_=1)
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, nodes=[n0, n1], failed_node=N1))
    assert (v.failure.node, v.failure.rank) == (N1, 1)


def test_first_failure_naming_an_unknown_rank_falls_back_to_any_failed_rank():
    n0 = node(N0, 0, (0, 1), report(0, rec(0, 0), rec(1, 3), first=7), exit_=1)
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, nodes=[n0], failed_node=N0))
    assert v.status == Status.FAILED and v.failure.rank == 1 and v.failure.exit_code == 3


def test_failed_rank_even_when_every_launcher_exited_0():
    n = node(ranks=(0,), report_=report(0, rec(0, 3)), exit_=0)
    v = interpret_round(evidence(nodes=[n], records=[check_failed_record()]))
    assert v.status == Status.FAILED and v.failure.reason == "rank 0 failed (exit code 3)"


def test_rank_killed_by_signal():
    n = node(report_=report(0, rec(0, -9), first=0), exit_=1)
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, nodes=[n], failed_node=N0))
    assert v.failure.reason == "rank 0 failed (killed by SIGKILL (exit code -9))"
    assert v.failure.exit_code == -9


def test_rank_without_exit_code_is_not_a_failure():
    n = node(report_=report(0, rec(0, None)), exit_=0)
    assert interpret_round(evidence(nodes=[n], records=[FIN])).status == Status.PASSED


# ------------------------------------------------------------------------------------------------- node failed
def test_node_failed_without_ranks_json():
    bad = node(N1, 1, (1,), None, problem="host h1: /run/h1_noderank1/ranks.json: missing", exit_=2,
               output_tail=("Traceback", "SyntaxError: bad"))
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, nodes=[ok_node(), bad], reason=f"node {N1} failed",
                                 failed_node=N1))
    assert v.status == Status.FAILED
    assert failure_dict(v) == {"reason": f"node {N1} failed; host h1: /run/h1_noderank1/ranks.json: missing",
                               "node": N1, "exit_code": 2, "log": f"/run/{N1}/launcher.out.log",
                               "last_lines": ["Traceback", "SyntaxError: bad"]}


def test_node_failed_with_ranks_that_all_exited_0():
    n = node(report_=report(0, rec(0, 0)), exit_=137, output_tail=("killed",))
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, nodes=[n], reason=f"node {N0} failed", failed_node=N0))
    assert failure_dict(v) == {"reason": f"node {N0} failed", "node": N0, "exit_code": 137,
                               "log": f"/run/{N0}/launcher.out.log", "last_lines": ["killed"]}


def test_node_failed_naming_an_unknown_node():
    v = interpret_round(evidence(WaitEnd.NODE_FAILED, reason="", failed_node="ghost_noderank9"))
    assert v == verdict(Status.FAILED, {"reason": "node ghost_noderank9 failed", "node": "ghost_noderank9"})


# ------------------------------------------------------------------------------------- completed: ranks.json
def test_completed_but_ranks_json_problem():
    bad = node(N1, 1, (1,), None, problem="host h1: /r/ranks.json: unreadable: Expecting value", exit_=0)
    v = interpret_round(evidence(nodes=[ok_node(), bad], records=[FIN]))
    assert v == verdict(Status.FAILED, {"reason": f"node {N1}: host h1: /r/ranks.json: unreadable: Expecting value",
                                        "node": N1, "log": f"/run/{N1}/launcher.out.log",
                                        "last_lines": ["out: bye"]})


@pytest.mark.parametrize("listed, expected, words", [
    ((0,), (0, 1), "lists ranks [0], the plan started [0, 1]"),
    ((), (0,), "lists ranks [], the plan started [0]"),
    ((0, 2), (0, 1), "lists ranks [0, 2], the plan started [0, 1]"),
])
def test_completed_but_ranks_mismatch_the_plan(listed, expected, words):
    n = node(ranks=expected, report_=report(0, *(rec(r) for r in listed)))
    v = interpret_round(evidence(nodes=[n], records=[FIN]))
    assert v == verdict(Status.FAILED, {"reason": f"node {N0}: ranks.json {words}", "node": N0})


def test_ranks_in_another_order_match():
    n = node(ranks=(0, 1), report_=report(0, rec(1), rec(0)))
    assert interpret_round(evidence(nodes=[n], records=[FIN])).status == Status.PASSED


# ----------------------------------------------------------------------------------------- rank 0's records
def test_skipped():
    v = interpret_round(evidence(records=[skipped_record("no nvcc")]))
    assert v == verdict(Status.SKIPPED, {"reason": "skipped: no nvcc"})


def test_skipped_without_reason():
    v = interpret_round(evidence(records=[{"event": "SKIPPED"}]))
    assert v == verdict(Status.SKIPPED, {"reason": "skipped: no reason given"})


def test_no_finished_line_carries_rank0s_exit_code():
    v = interpret_round(evidence(records=[{"event": "STARTED"}]))
    assert v.status == Status.FAILED
    assert failure_dict(v) == {"reason": "rank 0 printed no FINISHED line and no [FlagPerf Result] lines", "node": N0,
                               "rank": 0, "exit_code": 0, "log": f"/run/{N0}/rank0.out.log",
                               "last_lines": ["rank 0 line 1", "rank 0 line 2"]}


def test_no_finished_line_when_rank0_is_not_in_ranks_json():
    n = node(ranks=(), report_=report(0, rec(4)))
    v = interpret_round(evidence(nodes=[n]))
    assert v.failure.reason == "rank 0 printed no FINISHED line and no [FlagPerf Result] lines"
    assert v.failure.exit_code is None


def test_no_nodes_at_all():
    v = interpret_round(RoundEvidence(Wait(WaitEnd.COMPLETED), [], []))
    assert v.status == Status.FAILED
    assert failure_dict(v) == {"reason": "rank 0 printed no FINISHED line and no [FlagPerf Result] lines", "node": None,
                               "rank": 0, "exit_code": None, "log": "", "last_lines": []}


@pytest.mark.parametrize("payload, words", [
    (finished_record(checks={"passed": False, "details": {}}), "checks.passed is not true"),
    (finished_record(value=float("nan")), "'value': expected a number, got nan"),
    (finished_record(e2e_time=float("inf")), "'e2e_time': expected a number"),
    ({k: v for k, v in FIN.items() if k != "metric"}, "missing key 'metric'"),
    (finished_record(value="12"), "'value': expected a number"),
    (finished_record(higher_is_better=1), "'higher_is_better': expected true or false"),
    (finished_record(benchmark=""), "'benchmark': expected a non-empty string"),
])
def test_invalid_finished(payload, words):
    v = interpret_round(evidence(records=[payload]))
    assert v.status == Status.FAILED and v.finished is None
    assert v.failure.reason.startswith("invalid result: ") and words in v.failure.reason, v.failure
    assert v.failure.exit_code == 0 and v.failure.rank == 0 and v.failure.node == N0


def test_invalid_last_finished_wins_over_a_valid_earlier_one():
    v = interpret_round(evidence(records=[FIN, finished_record(value=None)]))
    assert v.status == Status.FAILED and "invalid result" in v.failure.reason


# ------------------------------------------------------------------------------------------- case and run
P, S, F, T, I, E, N = (  # noqa: E741 - one letter per Status keeps the table readable
    Status.PASSED, Status.SKIPPED, Status.FAILED, Status.TIMEOUT, Status.INTERRUPTED, Status.ERROR, Status.NOT_RUN)


@pytest.mark.parametrize("rounds, expected", [
    ([], N), ([N], N), ([N, N], N),
    ([P], P), ([P, P], P), ([P, S], P),
    ([S], S), ([S, S], S),
    ([F], F), ([P, F], F), ([T], F), ([E], F), ([P, E, N], F), ([F, I], F), ([S, T], F),
    ([I], I), ([P, I], I), ([P, N], I), ([I, N], I), ([S, N], I),
    (["passed", "skipped"], P),             # plain strings, as read back from summary.json
])
def test_case_status(rounds, expected):
    assert case_status(rounds) == expected


def test_case_status_takes_a_generator():
    assert case_status(s for s in [P, P]) == P


@pytest.mark.parametrize("cases, interrupted, expected", [
    ([P, P], False, P), ([P, S], False, P), ([S], False, P), ([], False, P),
    ([P, F], False, F), ([N], False, F), ([I], False, F),
    ([P, P], True, I), ([], True, I), ([F], True, I),
])
def test_run_status(cases, interrupted, expected):
    assert run_status(cases, interrupted=interrupted) == expected


def test_status_str_is_its_value():
    assert [str(s) for s in Status] == ["passed", "skipped", "failed", "timeout", "interrupted", "error", "not_run",
                                        "below_reference"]
    assert f"{Status.NOT_RUN}" == "not_run"


@pytest.mark.parametrize("code, text", [
    (0, "exit code 0"), (7, "exit code 7"), (143, "exit code 143"), (None, "no exit code recorded"),
    (-9, "killed by SIGKILL (exit code -9)"), (-15, "killed by SIGTERM (exit code -15)"),
    (-200, "exit code -200"),
])
def test_describe_exit(code, text):
    assert describe_exit(code) == text
