"""Node figures: the harness's barrier-aligned windows and their per-node summary (benchmarks/common/harness.py,
with a fake process group), and the driver's reading of them (flagperf.results.nodefigures), the notes on the
terminal and in report.md, and the conservative degraded reason of the node verdicts."""

import importlib.util
import json

import pytest
from rich.console import Console

from flagperf.config import SOURCE_ROOT
from flagperf.records import GpuIdentity
from flagperf.reporters.markdown import MarkdownReporter
from flagperf.reporters.terminal import TerminalReporter, node_figure_lines
from flagperf.results.interpret import Status
from flagperf.results.nodefigures import SPREAD_FLAG_PCT, NodeFigure, degraded_devices, node_figures
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf.results.verdict import node_verdicts


def load_harness():
    spec = importlib.util.spec_from_file_location("flagperf_harness_node_figures",
                                                  SOURCE_ROOT / "benchmarks" / "common" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = load_harness()


class FakeCtx:
    """A rank of a process group: all_reduce returns the next of ``reduced`` (what the whole group's reduction
    would give; the tests compute it), else this rank's own values; ``given`` keeps what the rank contributed."""

    def __init__(self, rank, world_size, local_rank, reduced):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.reduced, self.given = reduced, []
        self.initialized = world_size > 1

    def all_reduce(self, values, op="sum"):
        self.given.append(list(values))
        return list(self.reduced.pop(0)) if self.reduced else list(values)


def gather(monkeypatch, ranks, metric="tflops_fp32", unit="TFLOP/s"):
    """harness.node_figures as every rank of ``ranks`` ([(node, local rank, value, window)]) sees it: each rank's
    row is computed by the harness, then summed as the all-reduce would. Returns rank 0's result."""
    rows = []
    for rank, (node, local, value, window) in enumerate(ranks):
        monkeypatch.setenv("NODE_RANK", str(node))
        monkeypatch.delenv("GROUP_RANK", raising=False)
        ctx = FakeCtx(rank, len(ranks), local, [])
        harness.node_figures(ctx, metric, value, unit, window)
        rows.append(ctx.given[0])
    total = [sum(col) for col in zip(*rows)]
    monkeypatch.setenv("NODE_RANK", str(ranks[0][0]))
    ctx = FakeCtx(0, len(ranks), ranks[0][1], [total])
    return harness.node_figures(ctx, metric, ranks[0][2], unit, ranks[0][3])


# -- harness: overlap and the per-node summary -------------------------------------------------------------------

@pytest.mark.parametrize("windows, expected", [
    ([(0.0, 10.0), (0.0, 10.0)], 1.0),
    ([(0.0, 10.0), (0.5, 10.0)], 0.95),
    ([(0.0, 10.0), (0.0, 5.0)], 0.5),            # one rank finished early: the rest ran alone
    ([(0.0, 1.0), (2.0, 3.0)], 0.0),             # measured at different moments: no overlap at all
    ([(5.0, 6.0)], 1.0),
    ([], None),
    ([(1.0, 1.0), (1.0, 1.0)], None),            # no longest window
])
def test_window_overlap(windows, expected):
    got = harness.window_overlap(windows)
    assert got == (None if expected is None else pytest.approx(expected))


def test_simultaneous_windows_are_summed_per_node(monkeypatch):
    t = 1.8e9       # wall-clock seconds: the float64 all-gather keeps them exact to the microsecond
    figs = gather(monkeypatch, [(0, 0, 100.0, {"start": t, "end": t + 10}),
                                (0, 1, 80.0, {"start": t + 0.2, "end": t + 10.1}),
                                (1, 0, 50.0, {"start": t, "end": t + 1}),
                                (1, 1, 50.0, {"start": t, "end": t + 1})])
    assert list(figs) == ["0", "1"]
    n0 = figs["0"]
    assert n0["simultaneous"] is True and n0["aggregate"] == pytest.approx(180.0) and n0["reason"] is None
    assert n0["overlap"] == pytest.approx(9.8 / 10, abs=1e-6)     # the span all ran / the longest window
    assert (n0["median"], n0["min"], n0["max"]) == (pytest.approx(90.0), 80.0, 100.0)
    assert n0["spread_pct"] == pytest.approx(20 / 90 * 100)
    assert n0["per_device"] == [[0, 100.0], [1, 80.0]] and n0["metric"] == "tflops_fp32"
    assert figs["1"]["aggregate"] == pytest.approx(100.0) and figs["1"]["spread_pct"] == 0.0


def test_windows_at_different_moments_are_not_summed(monkeypatch):
    t = 1.8e9
    figs = gather(monkeypatch, [(0, 0, 100.0, {"start": t, "end": t + 1}),
                                (0, 1, 100.0, {"start": t + 2, "end": t + 3})])
    n0 = figs["0"]
    assert n0["simultaneous"] is False and n0["aggregate"] is None and n0["overlap"] == 0.0
    assert "overlap 0% of the longest, below 90%: measured at different moments, not summed" in n0["reason"]
    # just below the documented share: still not summed
    figs = gather(monkeypatch, [(0, 0, 1.0, {"start": t, "end": t + 1}),
                                (0, 1, 1.0, {"start": t + 0.11, "end": t + 1})])
    assert figs["0"]["overlap"] == pytest.approx(0.89, abs=1e-6) and figs["0"]["aggregate"] is None


def test_a_rank_without_an_aligned_window_is_not_summed(monkeypatch):
    figs = gather(monkeypatch, [(0, 0, 3.0, {"start": 10.0, "end": 11.0}), (0, 1, 3.0, None)])
    assert figs["0"]["aggregate"] is None and figs["0"]["overlap"] is None
    assert "not every device measured in an aligned window" in figs["0"]["reason"]


def test_node_metrics_names_the_node_aggregate_only_when_summed(monkeypatch):
    monkeypatch.setenv("NODE_RANK", "0")
    row = lambda v, a, b, node, lr: [v, a, b, 1.0, node, lr]      # noqa: E731
    together = row(2.0, 1.0, 2.0, 0, 0) + row(3.0, 1.0, 2.0, 0, 1)
    apart = row(2.0, 1.0, 2.0, 0, 0) + row(3.0, 5.0, 6.0, 0, 1)
    ctx = FakeCtx(0, 2, 0, [together, apart])
    metrics, figs = harness.node_metrics(ctx, [("a_gbs", 2.0, "GB/s", {"start": 1.0, "end": 2.0}),
                                               ("b_gbs", 2.0, "GB/s", {"start": 1.0, "end": 2.0})])
    assert metrics == {"a_gbs_node": {"value": 5.0, "unit": "GB/s"}}
    assert figs["b_gbs"]["0"]["aggregate"] is None
    # one device on the node: its figure, but no "_node" metric (nothing was summed)
    ctx = FakeCtx(0, 1, 0, [row(2.0, 1.0, 2.0, 0, 0)])
    metrics, figs = harness.node_metrics(ctx, [("a_gbs", 2.0, "GB/s", {"start": 1.0, "end": 2.0})])
    assert metrics == {} and figs["a_gbs"]["0"]["aggregate"] == 2.0


def test_rank_aggregates_keep_only_the_slowest_rank():
    ctx = FakeCtx(0, 2, 0, [[1.0]])
    assert harness.rank_aggregates(ctx, [("x_gbs", 4.0, "GB/s")]) == {"x_gbs_min_rank": {"value": 1.0,
                                                                                         "unit": "GB/s"}}


def test_node_index_from_the_launchers_environment(monkeypatch):
    for name in ("GROUP_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    ctx = FakeCtx(5, 8, 1, [])
    assert harness.node_index(ctx) == 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert harness.node_index(ctx) == 1
    monkeypatch.setenv("NODE_RANK", "3")
    assert harness.node_index(ctx) == 3
    monkeypatch.setenv("GROUP_RANK", "2")
    assert harness.node_index(ctx) == 2


# -- the driver's reading -----------------------------------------------------------------------------------------

def entry(values, *, simultaneous=True, overlap=0.97, metric="tflops_fp32", unit="TFLOP/s"):
    vs = list(values)
    med = sorted(vs)[len(vs) // 2] if len(vs) % 2 else sum(sorted(vs)[len(vs) // 2 - 1:len(vs) // 2 + 1]) / 2
    return {"metric": metric, "unit": unit, "aggregate": sum(vs) if simultaneous else None,
            "reason": None if simultaneous else "the windows overlap 40% of the longest, below 90%: measured at "
                                                 "different moments, not summed",
            "median": med, "min": min(vs), "max": max(vs), "spread_pct": 100 * (max(vs) - min(vs)) / med,
            "simultaneous": simultaneous, "overlap": overlap, "window_s": 1.0,
            "per_device": [[i, v] for i, v in enumerate(vs)]}


def finished(figs, device="cuda", metric="tflops_fp32"):
    return {"metric": metric, "value": 1.0, "unit": "TFLOP/s", "higher_is_better": True,
            "checks": {"passed": True, "details": {"node_figures": figs}}, "env": {"device": device}}


def case_of(rounds_figs, device="cuda", hosts=("h1",), status=Status.PASSED):
    rounds = [RoundSummary(i + 1, f"r{i + 1}", status, 1.0, None, finished(figs, device),
                           [NodeSummary(f"node{k}", h, k) for k, h in enumerate(hosts)])
              for i, figs in enumerate(rounds_figs)]
    return CaseSummary("gemm-x", "gemm:pytorch:x:1:4:1", "gemm", "pytorch", "x", len(hosts), 4, len(rounds),
                       rounds=rounds)


def test_a_node_figure_from_two_rounds_with_a_flagged_spread():
    c = case_of([{"0": entry([100, 101, 70, 99])}, {"0": entry([102, 100, 72, 98])}])
    (f,) = node_figures(c)
    assert isinstance(f, NodeFigure) and f.node == "h1" and f.metric == "tflops_fp32" and f.unit == "TFLOP/s"
    assert f.per_device == ((0, 101.0), (1, 100.5), (2, 71.0), (3, 98.5)) and f.rounds == 2
    assert (f.min, f.max, f.median) == (71.0, 101.0, pytest.approx(99.5))
    assert f.spread_pct == pytest.approx(30 / 99.5 * 100) and f.flagged
    assert f.simultaneous and f.aggregate == pytest.approx((370 + 372) / 2) and f.overlap == 0.97
    assert "slowest local rank 2 (71 TFLOP/s)" in f.reason and "fastest local rank 0" in f.reason
    assert f.slowest == (2, 71.0)


def test_one_round_not_simultaneous_means_no_aggregate_and_says_which():
    c = case_of([{"0": entry([10, 10.2])}, {"0": entry([10, 10.1], simultaneous=False, overlap=0.4)}])
    (f,) = node_figures(c)
    assert f.aggregate is None and not f.simultaneous and f.overlap == 0.4 and not f.flagged
    assert f.reason.startswith("no node aggregate: round 2: the windows overlap 40%")


def test_below_the_threshold_is_not_flagged_and_failed_rounds_are_left_out():
    c = case_of([{"0": entry([100, 100 - SPREAD_FLAG_PCT + 0.5])}])
    assert not node_figures(c)[0].flagged and node_figures(c)[0].reason == ""
    assert node_figures(case_of([{"0": entry([100, 50])}], status=Status.FAILED)) == []
    assert node_figures(case_of([{}])) == []


def test_nodes_are_named_by_their_hosts():
    c = case_of([{"0": entry([1, 1]), "1": entry([1, 2])}], hosts=("a", "b"))
    assert [f.node for f in node_figures(c)] == ["a", "b"]
    c = case_of([{"0": entry([1, 1]), "1": entry([1, 2])}], hosts=("localhost", "localhost"))
    assert [f.node for f in node_figures(c)] == ["localhost (node 0)", "localhost (node 1)"]


@pytest.mark.parametrize("bad", [
    "x", [], {"0": "x"}, {"0": {**entry([1, 2]), "metric": "other"}}, {"0": {**entry([1, 2]), "per_device": []}},
    {"0": {**entry([1, 2]), "per_device": [[0, "1e9"]]}}, {"0": {**entry([1, 2]), "per_device": [["a", 1.0]]}},
    {"x": entry([1, 2])}, {"0": {**entry([1, 2]), "per_device": [[0, float("nan")], [1, 1.0]]}},
])
def test_hostile_node_figures_are_left_out(bad):
    assert node_figures(case_of([bad])) == []


def test_a_hostile_reason_and_unit_are_bounded_and_one_line():
    e = {**entry([1, 2], simultaneous=False), "reason": "a\n" * 1000}
    (f,) = node_figures(case_of([{"0": e}]))
    assert "\n" not in f.reason and len(f.reason) < 700


def test_an_each_case_reads_every_hosts_own_line():
    rounds = [RoundSummary(i, f"r{i}", Status.PASSED, 1.0, None, None, [
        NodeSummary("node0", "a", 0, status=Status.PASSED, finished=finished({"0": entry([10, 10])})),
        NodeSummary("node1", "b", 0, status=Status.PASSED, finished=finished({"0": entry([10, 5])}))])
        for i in (1, 2)]
    c = CaseSummary("gemm-each", "k", "gemm", "pytorch", "x", 2, 2, 2, rounds=rounds, each=True)
    c.rounds[0].finished = rounds[0].nodes[0].finished     # the case's headline metric: the first host's
    figs = node_figures(c)
    assert [(f.node, f.flagged, f.rounds) for f in figs] == [("a", False, 2), ("b", True, 2)]
    assert degraded_devices(c) == [("b", 1, pytest.approx(degraded_devices(c)[0][2]))]


# -- degraded: conservative --------------------------------------------------------------------------------------

def test_degraded_only_on_accelerators_with_a_repeated_spread_and_the_same_slowest_device():
    slow2 = [{"0": entry([100, 100, 70, 100])}, {"0": entry([100, 101, 72, 99])}]
    ((host, lr, text),) = degraded_devices(case_of(slow2))
    assert (host, lr) == ("h1", 2) and "local rank 2 is the slowest device in all 2 passed rounds" in text
    assert degraded_devices(case_of(slow2, device="cpu")) == []             # CPU ranks share cores: noise
    assert degraded_devices(case_of(slow2[:1])) == []                       # one round: maybe noise
    moved = [{"0": entry([100, 100, 70, 100])}, {"0": entry([70, 100, 100, 100])}]
    assert degraded_devices(case_of(moved)) == []                           # not the same device
    once = [{"0": entry([100, 100, 70, 100])}, {"0": entry([100, 100, 99, 100])}]
    assert degraded_devices(case_of(once)) == []                            # not in every round


def summary_of(case):
    return Summary("run1", "/tmp/run1", "0", "2026-01-01T00:00:00", hosts=["h1"], cases=[case])


def test_the_node_verdict_names_the_slowest_gpu_as_degraded():
    c = case_of([{"0": entry([100, 100, 70, 100])}, {"0": entry([100, 101, 72, 99])}])
    card = GpuIdentity(2, uuid="GPU-abc")
    (v,) = node_verdicts(summary_of(c), identities={"h1": {2: card}})
    assert v.verdict == "degraded"
    (r,) = v.reasons
    assert (r.source, r.severity, r.case, r.gpu) == ("ranking", "degraded", "gemm-x", card)
    assert "local rank 2 is the slowest device" in r.detail and "spread" in r.detail
    (v,) = node_verdicts(summary_of(case_of([{"0": entry([100, 100, 70, 100])}])))
    assert v.verdict == "accept"


# -- summary.json and the reports --------------------------------------------------------------------------------

def test_summary_json_terminal_and_report_md_carry_the_flag(tmp_path):
    c = case_of([{"0": entry([100, 100, 70, 100], simultaneous=False, overlap=0.5)}], device="cpu")
    s = summary_of(c)
    s.save(tmp_path / "summary.json")
    saved = json.loads((tmp_path / "summary.json").read_text())["cases"][0]["node_figures"]
    assert saved == [node_figures(c)[0].to_dict()] and saved[0]["flagged"] is True
    assert saved[0]["aggregate"] is None and "not summed" in saved[0]["reason"]
    assert Summary.load(tmp_path / "summary.json").cases[0].to_dict()["node_figures"] == saved

    lines = node_figure_lines(s)
    assert lines[0] == ("gemm-x: node h1: not summed; per device median 100, min 70, max 100 TFLOP/s (spread "
                        "30.0%, 4 devices)", "")
    assert lines[1][0].startswith("SPREAD: gemm-x: node h1: spread 30.0% > 10% between its devices: slowest local "
                                  "rank 2") and lines[1][1] == "bold yellow"
    md = MarkdownReporter().render(s)
    assert "## Node figures (per device, headline metric)" in md
    assert "- **SPREAD: gemm-x: node h1: spread 30.0% &gt; 10% between its devices: slowest local rank 2" in md
    assert "| gemm-x | h1 | tflops_fp32 | not summed | 100 | 70 | 100 | TFLOP/s | 30 | 0.5 |" in md


def test_the_terminal_case_row_notes_a_flagged_spread():
    s = summary_of(case_of([{"0": entry([100, 100, 70, 100])}]))
    console = Console(width=400, record=True)
    console.print(TerminalReporter().render(s))
    assert "spread > 10% on h1" in console.export_text()
