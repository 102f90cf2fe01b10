"""The driver's reading of a training case's straggler view (flagperf.results.stragglers): the case row's note on
the terminal, summary.json's ``stragglers``, report.md's and report.html's lines, and hostile host or GPU text
made inert on the way."""

import json

import pytest
from rich.console import Console

from flagperf.reporters.html import HtmlReporter
from flagperf.reporters.markdown import MarkdownReporter
from flagperf.reporters.terminal import TerminalReporter
from flagperf.results.interpret import Status
from flagperf.results.stragglers import case_note, case_stragglers, of_finished
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf.results.verdict import node_verdicts

RULE = ("flagged: a rank whose best (minimum) probe time (one decoder block forward + backward, its compute alone) "
        "exceeds the median over the ranks of their best probe times by more than 5%")


def view(flagged=(3,), host="localhost", gpu=None, pct=16.7, judged_by="min"):
    """A straggler record as benchmarks/common/stragglers.py writes it (per_rank left short)."""
    slowest = {"rank": 3, "node": 0, "host": host, "local_rank": 3,
               "gpu": {"uuid": "GPU-d0", "pci_bus_id": "00000000:00:09.0", "name": "NVIDIA H100"} if gpu is None
               else gpu, "probe_min_s": 0.0029, "probe_median_s": 0.0031, "vs_median_pct": pct}
    out = {"margin_pct": 5.0, "rule": RULE, "per_rank": [], "slowest_rank": 3, "flagged": list(flagged),
           "median_probe_s": 0.0025, "limit_s": 0.002625, "slowest": slowest}
    if judged_by is not None:
        out["judged_by"] = judged_by
    return out


def finished(stragglers):
    return {"metric": "tokens_per_s", "value": 1000.0, "unit": "tokens/s", "higher_is_better": True,
            "checks": {"passed": True, "details": {"stragglers": stragglers}}, "env": {"device": "cuda"}}


def case_of(views, status=Status.PASSED):
    rounds = [RoundSummary(i + 1, f"r{i + 1}", status, 1.0, None, finished(v), [NodeSummary("node0", "localhost", 0)])
              for i, v in enumerate(views)]
    return CaseSummary("llm-quick", "llm:pytorch:quick:1:4:1", "llm", "pytorch", "quick", 1, 4, len(rounds),
                       rounds=rounds)


def summary_of(case):
    return Summary("run1", "/tmp/run1", "0", "2026-01-01T00:00:00", hosts=["localhost"], cases=[case])


NOTE = "straggler: rank 3 (localhost, local rank 3, GPU 00000000:00:09.0) +16.7% over the median probe"


def terminal_text(s) -> str:
    console = Console(width=400, record=True)
    console.print(TerminalReporter().render(s))
    return console.export_text()


def test_a_flagged_round_gives_the_note_and_the_summary_field(tmp_path):
    c = case_of([view()])
    (found,) = case_stragglers(c)
    assert found.note() == NOTE and case_note(c) == NOTE
    s = summary_of(c)
    s.save(tmp_path / "summary.json")
    saved = json.loads((tmp_path / "summary.json").read_text())["cases"][0]["stragglers"]
    assert saved == [{"round": 1, "slowest": {"rank": 3, "node": 0, "host": "localhost", "local_rank": 3,
                                              "gpu": "00000000:00:09.0", "vs_median_pct": 16.7},
                      "flagged": [3], "margin_pct": 5.0, "judged_by": "min", "rule": RULE, "check_failed": False}]
    assert Summary.load(tmp_path / "summary.json").cases[0].to_dict()["stragglers"] == saved

    assert NOTE in terminal_text(s)
    md = MarkdownReporter().render(s)
    assert "Stragglers (a finding, not a failed check):" in md
    assert ("- round 1: **straggler: rank 3 (localhost, local rank 3, GPU 00000000:00:09.0) +16.7% over the median "
            "probe** (judged by each rank's min probe time, margin 5%)") in md
    assert "Rule: flagged: a rank whose best (minimum) probe time" in md
    html = HtmlReporter().page(s, None)
    assert f"Round 1: {NOTE} (judged by each rank&rsquo;s min probe time" in html
    # a finding, not a verdict: the case passed and the node is accepted
    assert c.status == Status.PASSED and [v.verdict for v in node_verdicts(s)] == ["accept"]


def test_no_note_where_nothing_is_flagged_or_the_round_failed(tmp_path):
    for c in (case_of([view(flagged=())]), case_of([{"omitted": "no probe"}]), case_of([None]),
              case_of([view()], status=Status.FAILED)):
        assert case_stragglers(c) == [] and case_note(c) == ""
        s = summary_of(c)
        assert summary_of(c).cases[0].to_dict()["stragglers"] == []
        assert "straggler" not in terminal_text(s) and "Stragglers" not in MarkdownReporter().render(s)


def test_several_rounds_and_several_flagged_ranks():
    c = case_of([view(pct=6.0), view(flagged=(1, 3), pct=20.0), view(flagged=())])
    assert [s.round for s in case_stragglers(c)] == [1, 2]
    assert case_note(c) == ("stragglers: ranks 1, 3; slowest rank 3 (localhost, local rank 3, GPU 00000000:00:09.0) "
                            "+20.0% over the median probe (round 2; flagged in 2 of 3 rounds)")
    # a record written before judged_by: it was judged by the probe median; a CPU rank has no GPU
    (old,) = case_stragglers(case_of([view(judged_by=None, gpu={})]))
    assert old.judged_by == "median" and old.note() == "straggler: rank 3 (localhost, local rank 3) +16.7% over " \
                                                       "the median probe"


def test_a_round_that_failed_its_own_check_still_names_its_straggler(tmp_path):
    """A slow GPU slows the whole job: it ran fewer steps in its budget and missed its convergence target. The
    round failed, and its CHECK_FAILED line's straggler view is still read and shown, saying the round failed."""
    r = RoundSummary(1, "r1", Status.FAILED, 1.0, None, None, [NodeSummary("node0", "localhost", 0)],
                     check_failed={"passed": False, "details": {"converged": False, "stragglers": view(pct=136.7)}})
    c = CaseSummary("llm-1b", "llm:pytorch:1b:1:4:1", "llm", "pytorch", "1b", 1, 4, 1, rounds=[r])
    (found,) = case_stragglers(c)
    assert found.check_failed is True
    note = NOTE.replace("+16.7%", "+136.7%")
    assert case_note(c) == note + " (round 1 failed its check)"
    s = summary_of(c)
    s.save(tmp_path / "summary.json")
    loaded = Summary.load(tmp_path / "summary.json")
    assert loaded.cases[0].rounds[0].check_failed["details"]["converged"] is False
    assert loaded.cases[0].to_dict()["stragglers"][0]["check_failed"] is True
    assert case_note(loaded.cases[0]) == case_note(c)
    assert "(round 1 failed its check)" in terminal_text(s)
    assert (f"- round 1: **{note}** (judged by each rank's min probe time, margin 5%; the round failed its own "
            f"check)") in MarkdownReporter().render(s)
    assert "the round failed its own check)</p>" in HtmlReporter().page(s, None)
    # beside a passed round that flagged nothing: counted among the rounds that report a view
    ok = case_of([view(flagged=())]).rounds[0]
    ok.round = 2
    c2 = CaseSummary("llm-1b", "llm:pytorch:1b:1:4:1", "llm", "pytorch", "1b", 1, 4, 2, rounds=[r, ok])
    assert case_note(c2) == note + " (round 1; that round failed its check; flagged in 1 of 2 rounds)"


@pytest.mark.parametrize("bad", [
    {"flagged": "3", "slowest": {"rank": 3}}, {"flagged": [True], "slowest": {"rank": 3}},
    {"flagged": [3], "slowest": "rank 3"}, {"flagged": [3], "slowest": {"rank": -1}}, [3], "x",
])
def test_malformed_records_are_left_out(bad):
    assert of_finished(1, finished(bad)) is None


def test_hostile_host_and_gpu_text_is_inert_everywhere(tmp_path):
    host = "evil\x1b]8;;http://x\x07[bold red]<script>alert(1)</script>*x*|\nrow"
    gpu = {"pci_bus_id": "\x1b[2J<img src=x onerror=1>`code`[link](http://x)"}
    s = summary_of(case_of([view(host=host, gpu=gpu, pct=float("nan"))]))
    (found,) = case_stragglers(s.cases[0])
    assert "\n" not in found.slowest["host"] and found.slowest["vs_median_pct"] is None
    term = terminal_text(s)
    assert "\x1b" not in term and "\x07" not in term and "\\x1b]8;;http://x\\x07[bold red]" in term
    md = MarkdownReporter().render(s)
    assert "<script>" not in md and "<img" not in md and "\x1b" not in md and "[link](" not in md
    assert "&lt;script&gt;" in md and "\\x1b\\[2J" in md
    html = HtmlReporter().page(s, None)
    assert "<script>alert" not in html and "<img src=x" not in html and "\x1b" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "\\x1b[2J" in html
    # and a long text is capped
    (long,) = case_stragglers(case_of([view(host="h" * 10_000)]))
    assert len(long.slowest["host"]) <= 120


def test_a_hostile_check_failed_record_is_kept_safely(tmp_path):
    """rank 0's CHECK_FAILED line is untrusted: only a mapping is kept; NaN and deep nesting (within the PerfLog
    record's depth limit) still give a summary.json that loads; a malformed straggler record in it is left out."""
    from flagperf.results.interpret import failed_checks
    assert failed_checks([{"event": "CHECK_FAILED", "checks": "x"}]) is None
    assert failed_checks([{"event": "STEP"}]) is None
    assert failed_checks([{"event": "CHECK_FAILED", "checks": {"a": 1}},
                          {"event": "CHECK_FAILED", "checks": {"b": 2}}]) == {"b": 2}
    deep: dict = {"x": 1}
    for _ in range(31):
        deep = {"d": deep}
    checks = {"passed": False, "details": {"final_loss": float("nan"), "deep": deep,
                                           "stragglers": {"flagged": "all", "slowest": {"rank": 1}}}}
    r = RoundSummary(1, "r1", Status.FAILED, 1.0, None, None, [], check_failed=checks)
    c = CaseSummary("llm-1b", "llm:pytorch:1b:1:4:1", "llm", "pytorch", "1b", 1, 4, 1, rounds=[r])
    s = summary_of(c)
    s.save(tmp_path / "summary.json")
    loaded = Summary.load(tmp_path / "summary.json").cases[0]
    assert loaded.rounds[0].check_failed["details"]["final_loss"] is None       # NaN written as null
    assert case_stragglers(loaded) == [] and case_note(loaded) == ""
