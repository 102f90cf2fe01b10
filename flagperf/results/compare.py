"""Compare two runs: per case and metric, the medians of the passed rounds, the change, and whether it is a
regression. Pure functions on :class:`~flagperf.results.summary.Summary` objects; no I/O.

The rules (docs/compare.md):

- Cases are matched by their key (``CaseSummary.key``; the name when an older summary has no key). Cases on
  one side only are listed, not compared.
- Metrics: the headline ``value`` and every entry of the FINISHED ``metrics`` that both sides report with a
  number in at least one passed round. Each side's number is the median over its passed rounds.
- ``change_pct`` = (median B - median A) / |median A| x 100.
- Direction: the headline's ``higher_is_better`` from the FINISHED record; for the other metrics it is inferred
  from the name, then the unit (:func:`infer_higher_is_better`); unknown means the metric is shown but never
  counts as a regression.
- Beyond the threshold: B/A or A/B beyond 1 + ``threshold_pct`` / 100 when both medians are positive (so a rate
  and its time, x and 1/x, cross the threshold together), else |change| > ``threshold_pct``.
- Evidence, one rule for every metric: with >= 3 passed rounds on each side, the two-sided Mann-Whitney U test
  (:func:`mann_whitney_u`) at ``alpha``, when its most extreme outcome can reach ``alpha`` at these sample sizes
  (3 rounds against 3 cannot: the smallest possible p is 0.1; 4 against 4 can). Otherwise (fewer rounds, one
  round per side, a test that cannot reach ``alpha``) the rounds cannot tell a change from noise: a change beyond
  the threshold is ``insufficient evidence``, never a regression. Each side's rounds and spread,
  (max - min) / |median| x 100, are reported as the evidence; the spread never decides.
- A regression is a change in the bad direction beyond ``threshold_pct`` that the test finds significant.
- Setup: each side's case environment (its case config's ``env``) and the NCCL version its ranks loaded
  (``CaseSummary.nccl``); what differs is listed (``setup_differences``), never a verdict by itself.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from flagperf.results.summary import _finite
from flagperf.untrusted import finite_number

COMPARE_SCHEMA = "flagperf.compare/2"
DEFAULT_THRESHOLD_PCT = 5.0
DEFAULT_ALPHA = 0.05
MIN_ROUNDS_FOR_TEST = 3
EXACT_MAX_N = 20            # exact Mann-Whitney distribution up to this many rounds in all, normal approximation above

TEST_EXACT = "mann-whitney-u exact"
TEST_NORMAL = "mann-whitney-u normal"
TEST_NONE = "n<3: no test"
# What decided "beyond noise": the test's p-value, or nothing (no test, or a test that cannot reach alpha).
BASIS_P = "p_value"
BASIS_NONE = "none"

# Verdicts of one metric.
REGRESSION = "regression"       # worse beyond the threshold, the test significant
IMPROVEMENT = "improvement"     # better beyond the threshold, the test significant
UNCHANGED = "unchanged"         # within the threshold
NOISE = "noise"                 # beyond the threshold, but the test finds it within the run-to-run noise
INSUFFICIENT = "insufficient evidence"  # beyond the threshold, but too few rounds for the test to reach alpha
CHANGED = "changed"             # beyond the threshold and significant, but the direction is unknown
INCOMPARABLE = "incomparable"   # no change can be computed (median A is 0, the unit or headline metric differs)
VERDICTS = (REGRESSION, IMPROVEMENT, UNCHANGED, NOISE, INSUFFICIENT, CHANGED, INCOMPARABLE)

# Direction from the metric's name, checked first (the unit alone would mislead): (regex on the lower-case
# name, higher_is_better). None: no direction (a fact about the host, not a performance number).
NAME_RULES = (
    (r"(^|_)max_alloc", True),          # the largest single allocation (GiB, %): more is better
    (r"(^|_)mem_(total|free)", None),   # the device's memory size: not a result
    (r"(^|_)accuracy", True),
    (r"(^|_)mfu($|_)", True),
    (r"(^|_)loss($|_)", False),
)
# Direction from the unit's first word: any rate (".../s") and "%" are higher-is-better; time, energy and
# memory amounts are lower-is-better.
LOWER_UNITS = frozenset({"s", "sec", "ms", "us", "µs", "ns", "min", "h",
                         "J", "kJ", "MJ", "Wh", "kWh",
                         "B", "KB", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"})


def infer_higher_is_better(name: str, unit) -> tuple:
    """(higher_is_better or None, source: "name" | "unit" | None) of a metric other than the headline."""
    lname = (name or "").lower()
    for pattern, higher in NAME_RULES:
        if re.search(pattern, lname):
            return higher, "name"
    words = str(unit or "").split()
    first = words[0] if words else ""
    if first.endswith("/s") or first == "%":
        return True, "unit"
    if first in LOWER_UNITS:
        return False, "unit"
    return None, None


# ------------------------------------------------------------------------------------------ Mann-Whitney U
@dataclass(frozen=True)
class MannWhitney:
    u: float            # U of the first sample: the number of pairs (a, b) with a > b, ties counting 1/2
    p_value: float      # two-sided
    method: str         # TEST_EXACT or TEST_NORMAL
    min_p_value: float  # the smallest p-value these sample sizes (and ties) can give: complete separation


def _midranks(values: list) -> list:
    """The rank of every value (1-based), tied values sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@lru_cache(maxsize=256)
def _rank_sum_counts(doubled_ranks: tuple, n1: int) -> tuple:
    """For every way to pick n1 of the (doubled, so integer) ranks: how many ways give each sum.
    (counts indexed by the doubled sum, total ways)."""
    total_sum = sum(doubled_ranks)
    counts = [[0] * (total_sum + 1) for _ in range(n1 + 1)]  # counts[k][s]: subsets of size k with sum s
    counts[0][0] = 1
    for seen, r in enumerate(doubled_ranks):
        for k in range(min(seen + 1, n1), 0, -1):
            row, prev = counts[k], counts[k - 1]
            for s in range(total_sum, r - 1, -1):
                if prev[s - r]:
                    row[s] += prev[s - r]
    return tuple(counts[n1]), math.comb(len(doubled_ranks), n1)


def mann_whitney_u(a, b) -> MannWhitney:
    """The two-sided Mann-Whitney U test of samples ``a`` and ``b`` (each at least one number).

    Up to EXACT_MAX_N values in all: the exact permutation distribution of a's rank sum, tied values taking
    their mid-rank (with no ties this is the classic exact U distribution); p = 2 x the smaller tail, at most 1.
    Above: the normal approximation with the tie correction of the variance and a continuity correction of 0.5.
    ``min_p_value``: the p-value of the most extreme outcome; with 3 values on each side it is 0.1, so such a
    test can never be significant at alpha 0.05.
    """
    a, b = [float(x) for x in a], [float(x) for x in b]
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        raise ValueError("mann_whitney_u needs at least one value on each side")
    n = n1 + n2
    ranks = _midranks(a + b)
    rank_sum = sum(ranks[:n1])
    u = rank_sum - n1 * (n1 + 1) / 2
    if n <= EXACT_MAX_N:
        doubled = [round(2 * r) for r in ranks]
        counts, total = _rank_sum_counts(tuple(sorted(doubled)), n1)
        observed = sum(doubled[:n1])
        lower = sum(counts[:observed + 1])
        upper = sum(counts[observed:])
        support = [i for i, c in enumerate(counts) if c]
        min_p = min(1.0, 2 * min(counts[support[0]], counts[support[-1]]) / total)
        return MannWhitney(u, min(1.0, 2 * min(lower, upper) / total), TEST_EXACT, min_p)
    ties: dict = {}
    for r in ranks:
        ties[r] = ties.get(r, 0) + 1
    tie_term = sum(t ** 3 - t for t in ties.values())
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:                   # every value the same
        return MannWhitney(u, 1.0, TEST_NORMAL, 1.0)

    def p(distance):
        z = max(0.0, distance - 0.5) / math.sqrt(variance)
        return min(1.0, math.erfc(z / math.sqrt(2)))

    return MannWhitney(u, p(abs(u - n1 * n2 / 2)), TEST_NORMAL, p(n1 * n2 / 2))


@lru_cache(maxsize=64)
def rounds_needed(alpha: float) -> int:
    """The fewest passed rounds on each side (at least MIN_ROUNDS_FOR_TEST) with which the Mann-Whitney test can
    reach ``alpha`` at all: its most extreme outcome, 2 / C(2n, n), below ``alpha`` (4 for 0.05, 5 for 0.01)."""
    n = MIN_ROUNDS_FOR_TEST
    while 2 / math.comb(2 * n, n) >= alpha and n < 1000:
        n += 1
    return n


def beyond_threshold(median_a, median_b, change_pct, threshold_pct) -> bool:
    """Whether a change crosses the threshold: B/A or A/B above 1 + threshold / 100 when both medians are positive
    (x and 1/x, a rate and its time, cross it together), else |change| above the threshold."""
    if median_a is not None and median_b is not None and median_a > 0 and median_b > 0:
        return max(median_b / median_a, median_a / median_b) - 1 > threshold_pct / 100 * (1 + 1e-12)
    return change_pct is not None and abs(change_pct) > threshold_pct


# ------------------------------------------------------------------------------------------ the comparison
@dataclass
class Side:
    """One run's numbers of one metric: the values of its passed rounds."""
    values: list

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self):
        return statistics.median(self.values) if self.values else None

    @property
    def spread_pct(self):
        """(max - min) / |median| x 100; None when the median is 0."""
        med = self.median
        if med is None or med == 0:
            return None
        return (max(self.values) - min(self.values)) / abs(med) * 100

    def to_dict(self) -> dict:
        return {"n": self.n, "median": self.median, "min": min(self.values) if self.values else None,
                "max": max(self.values) if self.values else None, "spread_pct": self.spread_pct,
                "values": list(self.values)}


@dataclass
class MetricComparison:
    metric: str
    headline: bool
    unit: str
    higher_is_better: bool | None
    direction_source: str | None        # "finished" | "name" | "unit" | None
    a: Side
    b: Side
    change_pct: float | None
    test: str                           # TEST_EXACT, TEST_NORMAL or TEST_NONE
    p_value: float | None
    basis: str                          # BASIS_P (the test decides) or BASIS_NONE (too few rounds to decide)
    spread_pct: float | None            # the larger of the two sides' spreads
    significant: bool                   # beyond noise: the test can reach alpha and p < alpha
    verdict: str
    note: str = ""
    min_p_value: float | None = None    # the smallest p the test could give at these sample sizes; None: no test
    rounds_needed: int = 0              # passed rounds per side with which the test can reach alpha

    @property
    def regression(self) -> bool:
        return self.verdict == REGRESSION

    def to_dict(self) -> dict:
        return {"metric": self.metric, "headline": self.headline, "unit": self.unit,
                "higher_is_better": self.higher_is_better, "direction_source": self.direction_source,
                "a": self.a.to_dict(), "b": self.b.to_dict(), "change_pct": self.change_pct, "test": self.test,
                "p_value": self.p_value, "basis": self.basis, "spread_pct": self.spread_pct,
                "significant": self.significant, "verdict": self.verdict, "regression": self.regression,
                "note": self.note, "min_p_value": self.min_p_value, "rounds_needed": self.rounds_needed}


@dataclass
class CaseComparison:
    key: str
    name: str
    status_a: str
    status_b: str
    rounds_passed_a: int
    rounds_passed_b: int
    metrics: list = field(default_factory=list)     # MetricComparison, the headline first
    note: str = ""
    setup_a: dict = field(default_factory=dict)     # {"env": {name: value}, "nccl": version or None}
    setup_b: dict = field(default_factory=dict)
    setup_differences: list = field(default_factory=list)   # one line each: "NCCL 2.21.5 -> 2.23.4", ...

    @property
    def regression(self) -> bool:
        return any(m.regression for m in self.metrics)

    def to_dict(self) -> dict:
        return {"key": self.key, "name": self.name, "status_a": self.status_a, "status_b": self.status_b,
                "rounds_passed_a": self.rounds_passed_a, "rounds_passed_b": self.rounds_passed_b,
                "regression": self.regression, "note": self.note, "metrics": [m.to_dict() for m in self.metrics],
                "setup_a": dict(self.setup_a), "setup_b": dict(self.setup_b),
                "setup_differences": list(self.setup_differences)}


@dataclass
class Comparison:
    a: dict                 # {run_id, run_dir, status}
    b: dict
    threshold_pct: float
    alpha: float
    cases: list             # CaseComparison, in run A's order
    only_in_a: list         # [{key, name}]
    only_in_b: list

    @property
    def regressions(self) -> list:
        return [(c, m) for c in self.cases for m in c.metrics if m.regression]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def counts(self) -> dict:
        metrics = [m for c in self.cases for m in c.metrics]
        out = {"cases_compared": len(self.cases), "cases_only_in_a": len(self.only_in_a),
               "cases_only_in_b": len(self.only_in_b),
               "cases_regressed": sum(c.regression for c in self.cases), "metrics_compared": len(metrics),
               **{verdict: 0 for verdict in VERDICTS}}
        for m in metrics:
            out[m.verdict] += 1
        return out

    def to_dict(self) -> dict:
        return _finite({
            "schema": COMPARE_SCHEMA, "a": dict(self.a), "b": dict(self.b), "threshold_pct": self.threshold_pct,
            "alpha": self.alpha, "regressed": self.regressed, "counts": self.counts(),
            "regressions": [{"key": c.key, "name": c.name, "metric": m.metric, "change_pct": m.change_pct,
                             "p_value": m.p_value, "test": m.test} for c, m in self.regressions],
            "only_in_a": list(self.only_in_a), "only_in_b": list(self.only_in_b),
            "cases": [c.to_dict() for c in self.cases]})


def _headline_values(case) -> list:
    return [r.value for r in case.passed_rounds if finite_number(r.value)]


def _metric_values(case, name) -> list:
    out = []
    for r in case.passed_rounds:
        m = r.metrics.get(name)
        value = m.get("value") if isinstance(m, dict) else None
        if finite_number(value):
            out.append(value)
    return out


def _metric_unit(case, name) -> str:
    for r in case.passed_rounds:
        m = r.metrics.get(name)
        if isinstance(m, dict) and m.get("value") is not None:
            return str(m.get("unit") or "")
    return ""


def compare_metric(name, values_a, values_b, *, unit="", higher_is_better=None, direction_source=None,
                   headline=False, threshold_pct=DEFAULT_THRESHOLD_PCT, alpha=DEFAULT_ALPHA,
                   incomparable: str = "") -> MetricComparison:
    """One metric of one case: medians, change, test or spread, verdict. ``incomparable``: why no change can
    be computed although both sides have numbers (a different unit or headline metric)."""
    a, b = Side(list(values_a)), Side(list(values_b))
    change = None
    note = incomparable
    if not incomparable:
        if a.median == 0:
            note = "median A is 0: no relative change"
        else:
            change = (b.median - a.median) / abs(a.median) * 100
    spreads = [s for s in (a.spread_pct, b.spread_pct) if s is not None]
    spread = max(spreads) if spreads else None
    p_value = min_p = None
    test, basis = TEST_NONE, BASIS_NONE
    if a.n >= MIN_ROUNDS_FOR_TEST and b.n >= MIN_ROUNDS_FOR_TEST:
        mw = mann_whitney_u(a.values, b.values)
        test, p_value, min_p = mw.method, mw.p_value, mw.min_p_value
        if mw.min_p_value < alpha:
            basis = BASIS_P
    significant = basis == BASIS_P and change is not None and p_value is not None and p_value < alpha
    if change is None:
        verdict = INCOMPARABLE
    elif not beyond_threshold(a.median, b.median, change, threshold_pct):
        verdict = UNCHANGED
    elif basis != BASIS_P:
        verdict = INSUFFICIENT
    elif not significant:
        verdict = NOISE
    elif higher_is_better is None:
        verdict = CHANGED
    else:
        verdict = IMPROVEMENT if (change > 0) == bool(higher_is_better) else REGRESSION
    return MetricComparison(name, headline, unit, higher_is_better, direction_source, a, b, change, test, p_value,
                            basis, spread, significant, verdict, note, min_p, rounds_needed(alpha))


def _setup(case) -> dict:
    return {"env": dict(case.env), "nccl": case.nccl}


def setup_differences(setup_a: dict, setup_b: dict) -> list:
    """What differs between two sides' setups (:func:`_setup`), one line each: the NCCL version first, then every
    environment variable set on one side only or to another value, by name."""
    out = []
    if setup_a.get("nccl") != setup_b.get("nccl"):
        out.append(f"NCCL {setup_a.get('nccl') or 'not reported'} -> {setup_b.get('nccl') or 'not reported'}")
    env_a, env_b = setup_a.get("env") or {}, setup_b.get("env") or {}
    for name in sorted(set(env_a) | set(env_b)):
        if env_a.get(name) != env_b.get(name):
            a, b = (f"{name}={e[name]}" if name in e else f"{name} unset" for e in (env_a, env_b))
            out.append(f"env {a} -> {b}")
    return out


def compare_case(case_a, case_b, *, threshold_pct=DEFAULT_THRESHOLD_PCT, alpha=DEFAULT_ALPHA) -> CaseComparison:
    out = CaseComparison(case_a.key or case_a.name, case_a.name, case_a.status.value, case_b.status.value,
                         len(case_a.passed_rounds), len(case_b.passed_rounds))
    out.setup_a, out.setup_b = _setup(case_a), _setup(case_b)
    out.setup_differences = setup_differences(out.setup_a, out.setup_b)
    missing = [side for side, c in (("A", case_a), ("B", case_b)) if not c.passed_rounds]
    if missing:
        out.note = f"no passed round in {' and '.join(missing)}: not compared"
        return out
    kw = dict(threshold_pct=threshold_pct, alpha=alpha)
    head_a, head_b = _headline_values(case_a), _headline_values(case_b)
    if head_a and head_b:
        hib = case_a.head.get("higher_is_better")
        if not isinstance(hib, bool):
            hib = case_b.head.get("higher_is_better")
        source = "finished" if isinstance(hib, bool) else None
        if source is None:
            hib, source = infer_higher_is_better(case_a.metric or "", case_a.unit)
        why = ""
        if (case_a.metric, case_a.unit) != (case_b.metric, case_b.unit):
            why = f"headline differs: A {case_a.metric} [{case_a.unit}], B {case_b.metric} [{case_b.unit}]"
        out.metrics.append(compare_metric(case_a.metric or "value", head_a, head_b, unit=case_a.unit or "",
                                          higher_is_better=hib, direction_source=source, headline=True,
                                          incomparable=why, **kw))
    names_a = {n for r in case_a.passed_rounds for n in r.metrics}
    names_b = {n for r in case_b.passed_rounds for n in r.metrics}
    for name in sorted(names_a & names_b):
        values_a, values_b = _metric_values(case_a, name), _metric_values(case_b, name)
        if not values_a or not values_b:
            continue            # not a number (a flag, a string) or missing on one side
        unit_a, unit_b = _metric_unit(case_a, name), _metric_unit(case_b, name)
        hib, source = infer_higher_is_better(name, unit_a)
        why = f"unit differs: A {unit_a!r}, B {unit_b!r}" if unit_a != unit_b else ""
        out.metrics.append(compare_metric(name, values_a, values_b, unit=unit_a, higher_is_better=hib,
                                          direction_source=source, incomparable=why, **kw))
    return out


def _side(summary) -> dict:
    return {"run_id": summary.run_id, "run_dir": summary.run_dir, "status": summary.status.value}


def compare_summaries(a, b, *, threshold_pct=DEFAULT_THRESHOLD_PCT, alpha=DEFAULT_ALPHA) -> Comparison:
    """Compare run ``b`` against run ``a`` (the baseline)."""
    if not (threshold_pct >= 0 and math.isfinite(threshold_pct)):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold_pct}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")

    def by_key(summary) -> dict:
        out: dict = {}
        for c in summary.cases:
            out.setdefault(c.key or c.name, c)     # a key twice in one run: the first counts
        return out

    cases_a, cases_b = by_key(a), by_key(b)
    return Comparison(
        _side(a), _side(b), float(threshold_pct), float(alpha),
        [compare_case(c, cases_b[k], threshold_pct=threshold_pct, alpha=alpha)
         for k, c in cases_a.items() if k in cases_b],
        [{"key": k, "name": c.name} for k, c in cases_a.items() if k not in cases_b],
        [{"key": k, "name": c.name} for k, c in cases_b.items() if k not in cases_a])
