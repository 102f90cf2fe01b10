"""`flagperf compare` (flagperf/results/compare.py, flagperf/reporters/compare.py): the Mann-Whitney U test,
the direction rules, the verdicts, and the command on hand-built summaries."""
import io
import json
import math

import pytest
from rich.console import Console

from flagperf.reporters.compare import comparison_lines, comparison_table
from flagperf.results.compare import (BASIS_NONE, BASIS_P, COMPARE_SCHEMA, INSUFFICIENT, TEST_EXACT, TEST_NONE,
                                      TEST_NORMAL, compare_metric, compare_summaries, infer_higher_is_better,
                                      mann_whitney_u, rounds_needed)
from flagperf.results.summary import SUMMARY_SCHEMA, Summary


# ------------------------------------------------------------------------------------------------ builders
def rnd(i, value, metrics=None, status="passed", metric="tflops", unit="TFLOP/s", hib=True):
    finished = {"metric": metric, "unit": unit, "higher_is_better": hib, "value": value, "e2e_time": 1.0,
                "metrics": {k: {"value": v, "unit": u} for k, (v, u) in (metrics or {}).items()}}
    return {"round": i, "status": status, "finished": finished if status == "passed" else None}


def case(key, values, metrics=None, **kw):
    """A case whose round i has headline values[i] and, for every metric name, metrics[name] = ([values], unit)."""
    rounds = [rnd(i + 1, v, {k: (vals[i], u) for k, (vals, u) in (metrics or {}).items()}, **kw)
              for i, v in enumerate(values)]
    return {"name": key.replace(":", "-"), "key": key, "rounds": rounds}


def summary(run_id, *cases) -> Summary:
    return Summary.from_dict({"schema": SUMMARY_SCHEMA, "run_id": run_id, "cases": list(cases)})


def only_metric(cmp, name=None):
    (c,) = cmp.cases
    return c.metrics[0] if name is None else next(m for m in c.metrics if m.metric == name)


def text(renderable) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


# ------------------------------------------------------------------------------------------- Mann-Whitney U
def test_mann_whitney_exact_complete_separation():
    # 3 against 3: C(6,3) = 20 equally likely splits of the ranks; only {1,2,3} gives U = 0 (and only {4,5,6}
    # U = 9), so the two-sided p is 2 x 1/20 = 0.1.
    mw = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert (mw.u, mw.p_value, mw.method, mw.min_p_value) == (0.0, pytest.approx(0.1), TEST_EXACT, pytest.approx(0.1))
    mw = mann_whitney_u([6, 5, 4], [1, 2, 3])
    assert mw.u == 9.0 and mw.p_value == pytest.approx(0.1)


def test_mann_whitney_exact_middle():
    # [1,3,5] vs [2,4,6]: rank sum 9, U = 3. Of the 20 splits, rank sums <= 9: {1,2,3}=6, {1,2,4}=7,
    # {1,2,5}=8, {1,3,4}=8, {1,2,6}=9, {1,3,5}=9, {2,3,4}=9 -> 7; two-sided p = 2 x 7/20 = 0.7.
    mw = mann_whitney_u([1, 3, 5], [2, 4, 6])
    assert mw.u == 3.0 and mw.p_value == pytest.approx(0.7)


def test_mann_whitney_exact_with_ties():
    # [1,2,3] vs [3,4,5]: the two 3s share rank 3.5; a's rank sum is 1+2+3.5 = 6.5 (U = 0.5). Of the 20 ways to
    # pick 3 of the ranks {1,2,3.5,3.5,5,6}, two reach a sum <= 6.5 ({1,2,3.5} twice): p = 2 x 2/20 = 0.2.
    mw = mann_whitney_u([1, 2, 3], [3, 4, 5])
    assert (mw.u, mw.p_value, mw.method) == (0.5, pytest.approx(0.2), TEST_EXACT)
    assert mw.min_p_value == pytest.approx(0.2)


def test_mann_whitney_exact_up_to_20_values():
    mw = mann_whitney_u(range(1, 11), range(11, 21))       # the only split of its kind: 2 / C(20,10)
    assert mw.method == TEST_EXACT and mw.p_value == pytest.approx(2 / math.comb(20, 10))


def test_mann_whitney_all_equal():
    assert mann_whitney_u([7, 7, 7], [7, 7, 7]).p_value == 1.0
    assert mann_whitney_u([7] * 11, [7] * 11).p_value == 1.0


@pytest.mark.parametrize("a, b, u, p", [
    # reference values: scipy.stats.mannwhitneyu(a, b, method="asymptotic") (scipy 1.17.1; continuity
    # correction and the tie correction of the variance), checked once, not a dependency.
    ([1, 2, 2, 3, 3, 3, 4, 5, 5, 6, 7], [3, 4, 4, 5, 6, 6, 7, 8, 8, 9, 9, 10], 22.0, 0.0070472519787137975),
    (list(range(15)), [x + 3.5 for x in range(12)], 66.0, 0.25151283025221316),
])
def test_mann_whitney_normal_approximation_with_ties(a, b, u, p):
    mw = mann_whitney_u(a, b)
    assert mw.method == TEST_NORMAL and mw.u == u and mw.p_value == pytest.approx(p, rel=1e-12)


def test_mann_whitney_normal_by_hand():
    # 11 against 11, no ties, complete separation: U = 0, mean 60.5, variance 11*11*23/12;
    # z = (60.5 - 0.5) / sqrt(231.9166...) = 3.9399..., p = erfc(z / sqrt 2).
    mw = mann_whitney_u(range(11), range(11, 22))
    z = 60.0 / math.sqrt(11 * 11 * 23 / 12)
    assert mw.method == TEST_NORMAL and mw.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_mann_whitney_needs_values():
    with pytest.raises(ValueError):
        mann_whitney_u([], [1])


# --------------------------------------------------------------------------------------------- directions
@pytest.mark.parametrize("name, unit, expected", [
    ("tflops_bf16", "TFLOP/s", True), ("model_tflops", "TFLOP/s per device", True), ("busbw_8M", "GB/s", True),
    ("tokens_per_s", "tokens/s", True), ("images_per_s", "images/s", True), ("pct_of_peak_fp32", "%", True),
    ("time_ms", "ms", False), ("time_us_1M", "us", False), ("train_time", "s", False), ("energy", "J", False),
    ("peak_mem", "GiB", False), ("max_alloc_gib", "GiB", True), ("max_alloc_pct_of_total", "%", True),
    ("mem_total_gib", "GiB", None), ("accuracy", "fraction", True), ("final_loss", "nats/token", False),
    ("mfu", "", True), ("steps", "steps", None), ("params", "params", None), ("triad_vs_torch", "ratio", None),
    ("converged", "bool", None), ("x", None, None),
])
def test_direction_rules(name, unit, expected):
    assert infer_higher_is_better(name, unit)[0] is expected


# ------------------------------------------------------------------------------------------------ verdicts
def test_regression_beyond_threshold_and_significant():
    # 4 against 4, fully separated: the exact two-sided p is 2/C(8,4) = 0.0286 < 0.05.
    a = summary("ra", case("gemm:pytorch:x:1:1:4", [10.0, 10.2, 9.9, 10.1]))
    b = summary("rb", case("gemm:pytorch:x:1:1:4", [8.0, 8.1, 7.9, 8.2]))
    cmp = compare_summaries(a, b)
    m = only_metric(cmp)
    assert m.headline and m.metric == "tflops" and m.higher_is_better is True and m.direction_source == "finished"
    assert m.a.median == pytest.approx(10.05) and m.b.median == pytest.approx(8.05)
    assert m.change_pct == pytest.approx((8.05 - 10.05) / 10.05 * 100)
    assert (m.test, m.basis) == (TEST_EXACT, BASIS_P) and m.p_value == pytest.approx(2 / 70)
    assert m.verdict == "regression" and m.regression and cmp.regressed
    assert cmp.counts()["regression"] == 1 and cmp.counts()["cases_regressed"] == 1


def test_improvement_is_not_a_regression():
    a = summary("ra", case("k:f:h:1:1:4", [8.0, 8.1, 7.9, 8.2]))
    b = summary("rb", case("k:f:h:1:1:4", [10.0, 10.2, 9.9, 10.1]))
    cmp = compare_summaries(a, b)
    assert only_metric(cmp).verdict == "improvement" and not cmp.regressed


def test_lower_is_better_headline():
    a = summary("ra", case("k:f:h:1:1:4", [1.0, 1.1, 0.9, 1.05], metric="latency", unit="ms", hib=False))
    b = summary("rb", case("k:f:h:1:1:4", [1.5, 1.6, 1.4, 1.55], metric="latency", unit="ms", hib=False))
    assert only_metric(compare_summaries(a, b)).verdict == "regression"
    assert only_metric(compare_summaries(b, a)).verdict == "improvement"


def test_within_threshold_is_unchanged():
    a = summary("ra", case("k:f:h:1:1:4", [10.0, 10.1, 10.2, 10.3]))
    b = summary("rb", case("k:f:h:1:1:4", [9.6, 9.7, 9.8, 9.9]))
    m = only_metric(compare_summaries(a, b))
    assert m.change_pct == pytest.approx(-3.9408867)
    assert m.significant and m.verdict == "unchanged"
    assert only_metric(compare_summaries(a, b, threshold_pct=3)).verdict == "regression"


def test_beyond_threshold_but_not_significant_is_noise():
    a = summary("ra", case("k:f:h:1:1:4", [10.0, 14.0, 9.0, 13.0]))
    b = summary("rb", case("k:f:h:1:1:4", [8.0, 13.5, 9.5, 9.0]))
    m = only_metric(compare_summaries(a, b))
    assert m.change_pct == pytest.approx((9.25 - 11.5) / 11.5 * 100) and m.p_value > 0.05
    assert (m.significant, m.verdict, m.regression) == (False, "noise", False)


def test_three_rounds_cannot_reach_alpha_insufficient_evidence():
    # 3 against 3 cannot reach p < 0.05 (min p = 0.1): the p-value is reported, but the rounds cannot tell a
    # change from noise, however clean the spreads look.
    a = summary("ra", case("k:f:h:1:1:3", [10.0, 10.2, 9.8]))         # spread 4 %
    b = summary("rb", case("k:f:h:1:1:3", [8.0, 8.1, 7.9]))           # spread 2.5 %, change -20 %
    cmp = compare_summaries(a, b)
    m = only_metric(cmp)
    assert (m.test, m.basis, m.p_value, m.min_p_value) == (TEST_EXACT, BASIS_NONE, pytest.approx(0.1),
                                                            pytest.approx(0.1))
    assert (m.a.spread_pct, m.b.spread_pct) == (pytest.approx(4.0), pytest.approx(2.5))
    assert (m.spread_pct, m.verdict, m.regression, m.significant) == (pytest.approx(4.0), INSUFFICIENT, False, False)
    assert not cmp.regressed and cmp.counts()[INSUFFICIENT] == 1
    # with alpha 0.2 the same 3 rounds can decide
    assert only_metric(compare_summaries(a, b, alpha=0.2)).verdict == "regression"


def test_rounds_needed():
    assert [rounds_needed(a) for a in (0.2, 0.1, 0.05, 0.01, 0.001)] == [3, 4, 4, 5, 7]


def test_alpha_is_used():
    a = summary("ra", case("k:f:h:1:1:4", [10.0, 10.2, 9.9, 10.1]))
    # a's ranks 4, 6, 7, 8 (sum 25): 2 of the 70 splits reach >= 25, p = 2 x 2/70 = 0.057
    b = summary("rb", case("k:f:h:1:1:4", [8.0, 8.1, 7.9, 9.95]))
    m = only_metric(compare_summaries(a, b))
    assert m.p_value == pytest.approx(4 / 70) and m.verdict == "noise"
    assert only_metric(compare_summaries(a, b, alpha=0.1)).verdict == "regression"


@pytest.mark.parametrize("values_a, values_b, spread, verdict", [
    ([10.0], [8.0], 0.0, INSUFFICIENT),                 # one round each: nothing to tell a change from noise
    ([10.0], [10.3], 0.0, "unchanged"),                 # within the threshold needs no test
    ([10.0, 10.4], [8.0, 8.2], 3.9215686, INSUFFICIENT),  # -20.6 % against a 3.9 % spread: still two rounds
    ([10.0, 13.0], [9.0, 10.0], 26.0869565, INSUFFICIENT),
])
def test_fewer_than_three_rounds_no_test(values_a, values_b, spread, verdict):
    m = only_metric(compare_summaries(summary("ra", case("k:f:h:1:1:2", values_a)),
                                      summary("rb", case("k:f:h:1:1:2", values_b))))
    assert (m.test, m.p_value, m.basis, m.min_p_value) == (TEST_NONE, None, BASIS_NONE, None)
    assert m.spread_pct == pytest.approx(spread) and m.verdict == verdict and not m.regression


def test_three_against_two_rounds_is_no_test():
    cmp = compare_summaries(summary("ra", case("k:f:h:1:1:3", [10.0, 10.1, 10.2])),
                            summary("rb", case("k:f:h:1:1:3", [5.0, 5.1])))
    m = only_metric(cmp)
    assert m.test == TEST_NONE and m.verdict == INSUFFICIENT and not cmp.regressed


@pytest.mark.parametrize("rounds, verdict", [(1, INSUFFICIENT), (3, INSUFFICIENT), (5, "regression")])
def test_a_rate_and_its_time_get_the_same_outcome(rounds, verdict):
    # One measurement, two metrics: tflops = work / time. The same rounds give the same evidence for both; the
    # threshold is crossed by both at once (B/A or A/B): -4.9 % in tflops is +5.2 % in time.
    base = [1.0 + 0.002 * i for i in range(rounds)]
    for factor in (0.951, 0.7):
        ta = [100 / x for x in base]
        tb = [100 / (x * factor) for x in base]
        a = summary("ra", case("gemm:pytorch:h:1:1:1", [1 / t for t in ta], {"time_ms": (ta, "ms")}))
        b = summary("rb", case("gemm:pytorch:h:1:1:1", [1 / t for t in tb], {"time_ms": (tb, "ms")}))
        cmp = compare_summaries(a, b)
        head, time_ms = only_metric(cmp, "tflops"), only_metric(cmp, "time_ms")
        assert head.verdict == time_ms.verdict == verdict, (factor, head.change_pct, time_ms.change_pct)
        assert head.p_value == time_ms.p_value and head.basis == time_ms.basis


def test_two_unchanged_default_runs_compare_clean(tmp_path, run_cli):
    # The embedded default's gemm and training cases, one round per side, their figures 5-10 % apart either way
    # (what two runs of an unchanged host give): no regression, exit 0; each metric says why.
    metrics_a = {"time_ms_fp32": ([2.0], "ms"), "tflops_bf16": ([0.30], "TFLOP/s"), "time_ms_bf16": ([6.6], "ms"),
                 "max_alloc_gib": ([1.5], "GiB"), "peak_mem": ([0.9], "GiB")}
    metrics_b = {"time_ms_fp32": ([2.17], "ms"), "tflops_bf16": ([0.276], "TFLOP/s"), "time_ms_bf16": ([7.2], "ms"),
                 "max_alloc_gib": ([1.39], "GiB"), "peak_mem": ([0.96], "GiB")}
    a = save(tmp_path, "a", summary("run-a", case("gemm:pytorch:local:1:1:1", [0.214], metrics_a, metric="tflops_fp32"),
                                    case("llm:pytorch:local:1:1:1", [1200.0], metric="tokens_per_s", unit="tokens/s")))
    b = save(tmp_path, "b", summary("run-b", case("gemm:pytorch:local:1:1:1", [0.197], metrics_b, metric="tflops_fp32"),
                                    case("llm:pytorch:local:1:1:1", [1090.0], metric="tokens_per_s", unit="tokens/s")))
    rc, out, err = run_cli("compare", a, b)
    assert rc == 0, out + err
    assert "REGRESSION" not in out and "regression " not in out.replace("0 regression(s)", "")
    assert "0 regression(s)" in out and "7 insufficient evidence" in out, out
    assert "the Mann-Whitney test needs 4 or more on each side to reach alpha 0.05" in out
    d = json.loads(run_cli("compare", a, b, "--json")[1])
    verdicts = {m["metric"]: m["verdict"] for c in d["cases"] for m in c["metrics"]}
    assert set(verdicts.values()) == {INSUFFICIENT}, verdicts
    assert d["regressed"] is False and d["counts"]["regression"] == 0


def test_five_rounds_and_a_real_drop_is_a_regression(tmp_path, run_cli):
    rounds_a = [0.214, 0.210, 0.216, 0.212, 0.215]
    rounds_b = [x * 0.7 for x in rounds_a]                  # a 30 % drop
    a = save(tmp_path, "a", summary("run-a", case("gemm:pytorch:local:1:1:5", rounds_a, {
        "time_ms_fp32": ([1 / x for x in rounds_a], "ms")}, metric="tflops_fp32")))
    b = save(tmp_path, "b", summary("run-b", case("gemm:pytorch:local:1:1:5", rounds_b, {
        "time_ms_fp32": ([1 / x for x in rounds_b], "ms")}, metric="tflops_fp32")))
    rc, out, err = run_cli("compare", a, b)
    assert rc == 1, out + err
    assert "REGRESSION gemm-pytorch-local-1-1-5 tflops_fp32: 0.214 -> 0.1498 TFLOP/s (-30.0%, MWU exact " \
           "p=0.00794; n 5/5, spread 2.8%/2.8%)" in out, out
    assert "REGRESSION gemm-pytorch-local-1-1-5 time_ms_fp32:" in out
    assert "2 regression(s)" in out and "0 insufficient evidence" in out


def test_secondary_metrics_directions_and_units():
    def four(x):
        return [x, x * 1.01, x * 0.99, x * 1.005]
    a = summary("ra", case("k:f:h:1:1:4", four(10.0), {"time_ms": (four(1.0), "ms"), "steps": (four(100), "steps"),
                                                       "bw": (four(50.0), "GB/s"), "only_a": (four(1.0), "s"),
                                                       "flag": ([True] * 4, "bool"), "moved": (four(2.0), "ms")}))
    b = summary("rb", case("k:f:h:1:1:4", four(10.0), {"time_ms": (four(2.0), "ms"), "steps": (four(200), "steps"),
                                                       "bw": (four(60.0), "GB/s"), "only_b": (four(1.0), "s"),
                                                       "flag": ([False] * 4, "bool"), "moved": (four(2.0), "s")}))
    cmp = compare_summaries(a, b)
    (c,) = cmp.cases
    assert [m.metric for m in c.metrics] == ["tflops", "bw", "moved", "steps", "time_ms"]  # headline, then sorted
    assert only_metric(cmp, "tflops").verdict == "unchanged"
    time_ms = only_metric(cmp, "time_ms")
    assert (time_ms.higher_is_better, time_ms.direction_source, time_ms.verdict) == (False, "unit", "regression")
    assert only_metric(cmp, "bw").verdict == "improvement"
    steps = only_metric(cmp, "steps")
    assert (steps.higher_is_better, steps.verdict, steps.regression) == (None, "changed", False)
    moved = only_metric(cmp, "moved")
    assert moved.verdict == "incomparable" and moved.change_pct is None and "unit differs" in moved.note
    assert [(cc.name, m.metric) for cc, m in cmp.regressions] == [("k-f-h-1-1-4", "time_ms")]


def test_headline_metric_differs_is_incomparable():
    a = summary("ra", case("k:f:h:1:1:1", [10.0], metric="tflops_fp32"))
    b = summary("rb", case("k:f:h:1:1:1", [1.0], metric="tflops_bf16"))
    m = only_metric(compare_summaries(a, b))
    assert m.verdict == "incomparable" and "headline differs" in m.note and not m.regression


def test_zero_median_is_incomparable():
    m = compare_metric("x", [0.0], [1.0], unit="s", higher_is_better=False)
    assert m.change_pct is None and m.verdict == "incomparable" and "median A is 0" in m.note


def test_headline_direction_missing_is_inferred():
    a = summary("ra", case("k:f:h:1:1:4", [10.0, 10.1, 9.9, 10.2], unit="GB/s", hib=None))
    b = summary("rb", case("k:f:h:1:1:4", [5.0, 5.1, 4.9, 5.2], unit="GB/s", hib=None))
    m = only_metric(compare_summaries(a, b))
    assert (m.higher_is_better, m.direction_source, m.verdict) == (True, "unit", "regression")


def test_cases_on_one_side_and_without_passed_rounds():
    a = summary("ra", case("both:f:h:1:1:1", [10.0]), case("gone:f:h:1:1:1", [1.0]),
                case("broken:f:h:1:1:1", [1.0]))
    b = summary("rb", case("new:f:h:1:1:1", [1.0]), case("both:f:h:1:1:1", [10.0]),
                case("broken:f:h:1:1:1", [1.0], status="failed"))
    cmp = compare_summaries(a, b)
    assert [c.key for c in cmp.cases] == ["both:f:h:1:1:1", "broken:f:h:1:1:1"]
    assert cmp.only_in_a == [{"key": "gone:f:h:1:1:1", "name": "gone-f-h-1-1-1"}]
    assert cmp.only_in_b == [{"key": "new:f:h:1:1:1", "name": "new-f-h-1-1-1"}]
    broken = cmp.cases[1]
    assert broken.metrics == [] and broken.note == "no passed round in B: not compared"
    assert (broken.status_a, broken.status_b, broken.rounds_passed_b) == ("passed", "failed", 0)
    assert not cmp.regressed
    lines = comparison_lines(cmp)
    assert "only in A (ra): gone-f-h-1-1-1 (gone:f:h:1:1:1)" in lines
    assert "only in B (rb): new-f-h-1-1-1 (new:f:h:1:1:1)" in lines
    assert "broken-f-h-1-1-1: no passed round in B: not compared" in lines


def test_failed_rounds_are_left_out_of_the_medians():
    a = summary("ra", {"name": "c", "key": "c", "rounds": [rnd(1, 10.0), rnd(2, 1.0, status="failed"),
                                                           rnd(3, 10.2)]})
    b = summary("rb", case("c", [10.1]))
    m = only_metric(compare_summaries(a, b))
    assert m.a.n == 2 and m.a.median == pytest.approx(10.1)


def test_bad_threshold_or_alpha():
    s = summary("r", case("k", [1.0]))
    with pytest.raises(ValueError):
        compare_summaries(s, s, threshold_pct=-1)
    with pytest.raises(ValueError):
        compare_summaries(s, s, alpha=1.5)


def test_json_form():
    a = summary("ra", case("k:f:h:1:1:4", [10.0, 10.2, 9.9, 10.1], {"time_ms": ([1, 1, 1, 1], "ms")}),
                case("gone", [1.0]))
    b = summary("rb", case("k:f:h:1:1:4", [8.0, 8.1, 7.9, 8.2], {"time_ms": ([1, 1, 1, 1], "ms")}))
    d = json.loads(json.dumps(compare_summaries(a, b).to_dict(), allow_nan=False))
    assert d["schema"] == COMPARE_SCHEMA and d["regressed"] is True
    assert (d["threshold_pct"], d["alpha"]) == (5.0, 0.05)
    assert d["a"]["run_id"] == "ra" and d["b"]["run_id"] == "rb"
    assert d["counts"] == {"cases_compared": 1, "cases_only_in_a": 1, "cases_only_in_b": 0, "cases_regressed": 1,
                           "metrics_compared": 2, "regression": 1, "improvement": 0, "unchanged": 1, "noise": 0,
                           "insufficient evidence": 0, "changed": 0, "incomparable": 0}
    assert d["regressions"] == [{"key": "k:f:h:1:1:4", "name": "k-f-h-1-1-4", "metric": "tflops",
                                 "change_pct": pytest.approx(-19.900497512), "p_value": pytest.approx(2 / 70),
                                 "test": TEST_EXACT}]
    head, time_ms = d["cases"][0]["metrics"]
    assert set(head) == {"metric", "headline", "unit", "higher_is_better", "direction_source", "a", "b",
                         "change_pct", "test", "p_value", "basis", "spread_pct", "significant", "verdict",
                         "regression", "note", "min_p_value", "rounds_needed"}
    assert set(head["a"]) == {"n", "median", "min", "max", "spread_pct", "values"}
    assert head["headline"] is True and head["regression"] is True and head["a"]["values"] == [10.0, 10.2, 9.9, 10.1]
    assert (head["min_p_value"], head["rounds_needed"]) == (pytest.approx(2 / 70), 4)
    # all values equal: the test cannot reach alpha (p = 1 at best); the change, 0 %, is within the threshold
    assert time_ms["headline"] is False and time_ms["verdict"] == "unchanged" and time_ms["p_value"] == 1.0
    assert time_ms["basis"] == BASIS_NONE
    assert d["cases"][0]["regression"] is True and d["only_in_a"] == [{"key": "gone", "name": "gone"}]


def test_terminal_table_and_lines():
    a = summary("ra", case("k:f:h:1:1:4", [10.0, 10.2, 9.9, 10.1], {"time_ms": ([1.0] * 4, "ms")}))
    b = summary("rb", case("k:f:h:1:1:4", [8.0, 8.1, 7.9, 8.2], {"time_ms": ([1.0] * 4, "ms")}))
    cmp = compare_summaries(a, b)
    out = text(comparison_table(cmp))
    assert "flagperf compare A ra vs B rb: 1 regression (threshold 5%, alpha 0.05)" in out
    assert "k-f-h-1-1-4" in out and "tflops (headline)" in out and "-19.9%" in out and "MWU exact p=0.0286" in out
    assert "regression" in out and "time_ms" in out and "unchanged" in out
    lines = comparison_lines(cmp)
    assert "REGRESSION k-f-h-1-1-4 tflops: 10.05 -> 8.05 TFLOP/s (-19.9%, MWU exact p=0.0286; n 4/4, " \
           "spread 3.0%/3.7%)" in lines
    assert lines[-1].startswith("1 case(s) compared, 2 metric(s): 1 regression(s), 0 improvement(s), 1 unchanged")
    one = compare_summaries(summary("ra", case("k", [10.0])), summary("rb", case("k", [5.0])))
    out = text(comparison_table(one))
    assert "n<3: no test" in out and "0.0%/0.0%" in out and "insufficient evidence" in out
    assert "0 regressions" in out
    three = compare_summaries(summary("ra", case("k", [10.0, 10.2, 9.8])), summary("rb", case("k", [5.0, 5.1, 4.9])))
    assert "MWU exact p=0.1 (best p 0.1: n too small)" in text(comparison_table(three))
    assert "1 metric(s) changed beyond 5% with insufficient evidence: as few as 3 passed round(s) on a side" \
        in "\n".join(comparison_lines(three))


# ------------------------------------------------------------------------------------------------- the CLI
def save(tmp_path, name, s: Summary):
    run = tmp_path / name
    run.mkdir()
    s.save(run / "summary.json")
    return run


def test_cli_regression_exit_1(tmp_path, run_cli):
    a = save(tmp_path, "a", summary("ra", case("gemm:pytorch:x:1:1:4", [10.0, 10.2, 9.9, 10.1])))
    b = save(tmp_path, "b", summary("rb", case("gemm:pytorch:x:1:1:4", [8.0, 8.1, 7.9, 8.2])))
    rc, out, err = run_cli("compare", a, b, cwd=tmp_path)
    assert rc == 1, (out, err)
    assert "REGRESSION gemm-pytorch-x-1-1-4 tflops: 10.05 -> 8.05 TFLOP/s" in out and err == ""
    assert f"comparison page: {b / 'compare-ra-rb.html'}" in out and (b / "compare-ra-rb.html").is_file()
    assert list(tmp_path.glob("*.html")) == []          # not in the current directory
    rc, out, err = run_cli("compare", a, b, "--json")
    assert rc == 1 and json.loads(out)["regressions"][0]["metric"] == "tflops"
    assert err.strip() == f"flagperf: comparison page: {b / 'compare-ra-rb.html'}"
    rc, out, _ = run_cli("compare", a, b, "--threshold", "25")        # -19.9 % is within 25 %
    assert rc == 0, out


def test_cli_improvement_exit_0(tmp_path, run_cli):
    a = save(tmp_path, "a", summary("ra", case("k", [8.0, 8.1, 7.9, 8.2])))
    b = save(tmp_path, "b", summary("rb", case("k", [10.0, 10.2, 9.9, 10.1])))
    rc, out, err = run_cli("compare", a / "summary.json", b, "--json")   # a summary.json path works too
    assert rc == 0, (out, err)
    d = json.loads(out)
    assert d["regressed"] is False and d["counts"]["improvement"] == 1


@pytest.mark.parametrize("text_, args, words", [
    (None, [], "summary.json: not found; is"),
    ("{corrupt", [], "summary.json: unreadable"),
    ('{"schema": "nope"}', [], "expected schema"),
    ("ok", ["--threshold", "-1"], "--threshold must be a number >= 0"),
    ("ok", ["--alpha", "0"], "--alpha must be between 0 and 1"),
])
def test_cli_errors_exit_2(tmp_path, run_cli, text_, args, words):
    good = save(tmp_path, "good", summary("r", case("k", [1.0])))
    bad = tmp_path / "bad"
    bad.mkdir()
    if text_ == "ok":
        bad = good
    elif text_ is not None:
        (bad / "summary.json").write_text(text_)
    rc, out, err = run_cli("compare", good, bad, *args)
    assert rc == 2, (out, err)
    assert "Traceback" not in err and out == ""
    (line,) = err.splitlines()
    assert line.startswith("flagperf: ") and words in line


def test_cli_bad_option_value_exit_2(run_cli, tmp_path):
    rc, out, err = run_cli("compare", tmp_path, tmp_path, "--threshold", "five")
    assert rc == 2 and "Traceback" not in err
