"""The host-pair matrix of ``pairs`` cases (a 2-node job on every pair of hosts) and the bad links it points to.
Pure functions, no I/O.

Every 2-node job of a pairs case reports one headline figure between its two hosts (p2p's bandwidth, the
collectives' bus bandwidth). :func:`pair_matrix` gives every pair of hosts its median over the rounds its job
passed, scored with the robust rule of the slow-node rankings (``results.slownodes.robust_scores``: a robust
z-score from the median and the MAD, plus a relative floor). :func:`pair_findings` turns the matrix into
:class:`~flagperf.records.VerdictReason` records of source ``link``:

- a host whose every pair is slow (or failed) while pairs between other hosts are not: that host's network
  interface, ``host h (all its pairs)``. Hosts are first scored by the median over their pairs (a slow host
  makes n-1 of the n(n-1)/2 pairs slow, half of them for 4 hosts: too many for the pairs' own median), then
  each of its pairs must be worse than the median of the pairs between the other hosts by more than the floor;
- otherwise a slow pair (an outlier among the pairs of the hosts not named) is a link, ``host a <-> host b``;
- a pair whose job failed in every round while other pairs passed is a link that does not work (reject); one
  that failed in some rounds only, a flaky link (degraded).

A finding is ``reject`` when the link or host failed, or is more than 25% below the median; else ``degraded``.
docs/results.md ("Pair matrix") describes it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from flagperf.records import VerdictReason
from flagperf.results.interpret import Status
from flagperf.results.slownodes import robust_scores

RELATIVE_FLOOR = 0.05       # a pair of a slow host is worse than the other hosts' pairs by more than 5% (the floor
                            # of the slow-node rule)
REJECT_SHORTFALL = 0.25     # more than 25% below the median: reject (else degraded), as the p2p link findings
SOURCE = "link"
# the job statuses a link can explain (an error of the backend, an interrupt or a round not run cannot)
LINK_FAILURES = (Status.FAILED, Status.TIMEOUT)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class PairResult:
    """One pair of hosts of a pairs case: ``a`` is its job's node 0 (the first of the two in HOSTS), ``value``
    the median of the headline figure over the rounds its job passed (None: none passed), ``median`` the median
    it is compared to (the case's pairs, or the pairs between the other hosts when a host is named), ``score``
    its robust score (positive = worse; None for the pairs of a named host or without a value), ``slow`` whether
    it is flagged, and ``host`` the host that explains it (every pair of that host is slow)."""

    case: str
    a: str
    b: str
    metric: str | None
    unit: str | None
    higher_is_better: bool
    value: float | None
    values: tuple = ()          # every passed job's figure, in round order
    jobs: int = 0               # the rounds its job ran in
    failed: int = 0             # of them, the rounds it failed or timed out in
    failure: str | None = None  # the first failure's reason
    median: float | None = None
    score: float | None = None
    slow: bool = False
    host: str | None = None

    @property
    def ratio(self) -> float | None:
        """value / median (1.0: as the median; below 1 worse where higher is better)."""
        if self.value is None or not _is_number(self.median) or not self.median:
            return None
        return self.value / self.median

    def to_dict(self) -> dict:
        return {"case": self.case, "a": self.a, "b": self.b, "metric": self.metric, "unit": self.unit,
                "higher_is_better": self.higher_is_better, "value": self.value, "values": list(self.values),
                "jobs": self.jobs, "failed": self.failed, "failure": self.failure, "median": self.median,
                "score": self.score, "slow": self.slow, "host": self.host}


# -- reading a pairs case ------------------------------------------------------------------------------------------

def _jobs(nodes) -> list:
    """The 2-node jobs of a pairs round: [(node 0, node 1)], from its nodes in plan order (node 0, then node 1,
    of every job)."""
    jobs, lead = [], None
    for n in nodes:
        if n.node_rank == 0:
            lead = n
        elif n.node_rank == 1 and lead is not None:
            jobs.append((lead, n))
            lead = None
    return jobs


def _most(counts: dict):
    return min(counts, key=lambda k: (-counts[k], str(k))) if counts else None


def _case_pairs(case) -> list:
    """The unscored PairResults of one pairs case (a CaseSummary), in the order the pairs first ran."""
    metrics: dict = {}
    for r in case.rounds:
        for a, _ in _jobs(r.nodes):
            f = a.finished or {}
            if a.status == Status.PASSED and isinstance(f.get("metric"), str) and _is_number(f.get("value")):
                metrics[f["metric"]] = metrics.get(f["metric"], 0) + 1
    metric = _most(metrics)
    units: dict = {}
    directions: dict = {}
    seen: dict = {}
    for r in case.rounds:
        for a, b in _jobs(r.nodes):
            key = (a.host, b.host)
            entry = seen.setdefault(key, {"values": [], "jobs": 0, "failed": 0, "failure": None})
            if a.status is None:
                continue
            entry["jobs"] += 1
            f = a.finished or {}
            if a.status == Status.PASSED and f.get("metric") == metric and _is_number(f.get("value")):
                entry["values"].append(float(f["value"]))
                units[f.get("unit")] = units.get(f.get("unit"), 0) + 1
                directions[f.get("higher_is_better")] = directions.get(f.get("higher_is_better"), 0) + 1
            elif a.status in LINK_FAILURES:
                entry["failed"] += 1
                if entry["failure"] is None:
                    entry["failure"] = (a.failure.reason if a.failure else "") or a.status.value
    unit = _most({k: v for k, v in units.items() if isinstance(k, str)})
    hib = _most({k: v for k, v in directions.items() if isinstance(k, bool)})
    higher = hib is not False
    return [PairResult(case.name, a, b, metric, unit, higher,
                       statistics.median(e["values"]) if e["values"] else None, tuple(e["values"]), e["jobs"],
                       e["failed"], e["failure"])
            for (a, b), e in seen.items() if e["jobs"]]


# -- scoring ---------------------------------------------------------------------------------------------------------

def _worse_by(value: float, median: float, higher: bool) -> float:
    return (median - value) if higher else (value - median)


def _score_case(pairs: list) -> tuple:
    """(scored PairResults, [named hosts]) of one case's pairs."""
    if not pairs:
        return [], []
    higher = pairs[0].higher_is_better
    hosts = list(dict.fromkeys(h for p in pairs for h in (p.a, p.b)))
    of = {h: [p for p in pairs if h in (p.a, p.b)] for h in hosts}
    valued = [p for p in pairs if p.value is not None]
    # 1. hosts by the median over their pairs; a host whose every pair failed (others passed) is a candidate too
    medians = {h: statistics.median(p.value for p in of[h] if p.value is not None)
               for h in hosts if any(p.value is not None for p in of[h])}
    scored = robust_scores(list(medians.values()), higher)
    candidates = [h for h, (_, outlier) in zip(medians, scored) if outlier]
    if valued:
        candidates += [h for h in hosts if h not in medians and all(p.failed for p in of[h])]
    # 2. a candidate is named when each of its pairs failed or is worse than the other hosts' pairs by the floor
    reference = [p.value for p in valued if p.a not in candidates and p.b not in candidates] or \
        [p.value for p in valued]
    ref = statistics.median(reference) if reference else None

    def below(p) -> bool:
        if p.value is None:
            return p.failed > 0
        return ref is None or _worse_by(p.value, ref, higher) > RELATIVE_FLOOR * abs(ref)

    named = [h for h in candidates
             if len(of[h]) >= 2 and all(below(p) for p in of[h])
             and any(not below(p) for p in valued if h not in (p.a, p.b))]
    # 3. the pairs of the other hosts, scored among themselves
    rest = [p for p in valued if p.a not in named and p.b not in named]
    rest_median = statistics.median(p.value for p in rest) if rest else None
    rest_scores = dict(zip([(p.a, p.b) for p in rest], robust_scores([p.value for p in rest], higher)))
    out = []
    for p in pairs:
        host = next((h for h in named if h in (p.a, p.b)), None)
        if host is not None:
            out.append(replace(p, median=ref, slow=True, host=host))
        elif p.value is not None:
            score, outlier = rest_scores[(p.a, p.b)]
            out.append(replace(p, median=rest_median, score=score, slow=outlier))
        else:
            out.append(replace(p, median=rest_median))
    return out, named


def pair_matrix(summary) -> list:
    """Every pair of hosts of every pairs case of ``summary`` (a Summary), scored: [PairResult], case by case,
    the pairs in the order they first ran."""
    out: list = []
    for case in summary.cases:
        if getattr(case, "pairs", False):
            out += _score_case(_case_pairs(case))[0]
    return out


# -- findings --------------------------------------------------------------------------------------------------------

def _num(v) -> str:
    return f"{v:.4g}" if _is_number(v) else "-"


def _pct(value, median) -> str:
    return f"{100.0 * value / median:.0f}%" if _is_number(value) and _is_number(median) and median else "-"


def _severity(p: PairResult) -> str:
    if p.value is None or (p.failed and p.failed == p.jobs):
        return "reject"
    median = p.median
    if median is not None and _is_number(median) and \
            _worse_by(p.value, median, p.higher_is_better) > REJECT_SHORTFALL * abs(median):
        return "reject"
    return "degraded"


def _host_reason(h: str, mine: list) -> VerdictReason:
    p0 = mine[0]
    unit = f" {p0.unit}" if p0.unit else ""
    each = ", ".join(f"{p.b if p.a == h else p.a} " + (f"{_num(p.value)}{unit} ({_pct(p.value, p.median)})"
                                                       if p.value is not None else "failed") for p in mine)
    detail = (f"every pair with {h} is below the median of {_num(p0.median)}{unit} ({p0.metric or 'headline'}) "
              f"over the pairs between the other hosts: {each}")
    failed = [p for p in mine if p.value is None]
    if failed:
        detail += f"; {len(failed)} of its {len(mine)} pair job(s) failed ({failed[0].failure})"
    severity = "reject" if any(_severity(p) == "reject" for p in mine) else "degraded"
    remedy = (f"check host {h}'s network interface: its link state, speed and width (ethtool, ibstat), its error "
              f"counters, the cable and the switch port it is plugged into; reseat or replace the NIC or cable")
    return VerdictReason(SOURCE, severity, f"host {h} (all its pairs)", detail, remedy, case=p0.case)


def _link_reason(p: PairResult) -> VerdictReason:
    unit = f" {p.unit}" if p.unit else ""
    subject = f"host {p.a} <-> host {p.b}"
    if p.value is None:
        detail = f"the 2-node job failed in {p.failed} of {p.jobs} round(s) and passed in none: {p.failure}"
        remedy = (f"check that {p.a} and {p.b} reach each other on the network the job uses (routes, firewall, "
                  f"the switch ports of both NICs); both reach other hosts")
        return VerdictReason(SOURCE, "reject", subject, detail, remedy, case=p.case)
    if p.slow:
        detail = (f"{p.metric or 'headline'} {_num(p.value)}{unit} against a median of {_num(p.median)}{unit} over "
                  f"the pairs ({_pct(p.value, p.median)}), robust score {_num(p.score)}; the other pairs of both "
                  f"hosts are not flagged")
        remedy = (f"check the path between {p.a} and {p.b}: the cables and switch ports of both hosts' NICs and the "
                  f"switch route between them (both hosts reach the others at full speed)")
        if p.failed:
            detail += f"; the job failed in {p.failed} of {p.jobs} round(s) ({p.failure})"
        return VerdictReason(SOURCE, _severity(p), subject, detail, remedy, case=p.case)
    detail = f"the 2-node job failed in {p.failed} of {p.jobs} round(s): {p.failure}"
    remedy = (f"check the link between {p.a} and {p.b} for errors and flapping (NIC error counters, link down "
              f"events, the cables and switch ports of both hosts)")
    return VerdictReason(SOURCE, "degraded", subject, detail, remedy, case=p.case)


def _findings(summary) -> list:
    """[((hosts it concerns), VerdictReason)] of every pairs case, case by case: named hosts first, then links."""
    out: list = []
    for case in summary.cases:
        if not getattr(case, "pairs", False):
            continue
        pairs, named = _score_case(_case_pairs(case))
        for h in named:
            out.append(((h,), _host_reason(h, [p for p in pairs if h in (p.a, p.b)])))
        if not any(p.value is not None for p in pairs):
            continue        # no pair passed: the case failed, and nothing points to one link
        for p in pairs:
            if p.host is None and (p.slow or p.failed):
                out.append(((p.a, p.b), _link_reason(p)))
    return out


def pair_findings(summary) -> list:
    """The bad links and network interfaces the pairs cases of ``summary`` point to: [VerdictReason] of source
    ``link``, subject ``host a <-> host b`` or ``host h (all its pairs)``; [] when every pair is well."""
    return [reason for _, reason in _findings(summary)]


def pair_findings_by_host(summary) -> dict:
    """{host: [VerdictReason]}: a link's finding under both its hosts, a host's under that host."""
    out: dict = {}
    for hosts, reason in _findings(summary):
        for h in hosts:
            out.setdefault(h, []).append(reason)
    return out


def pair_lines(summary) -> list:
    """The pair matrix as text, one line per pair, and a line per finding: for the terminal and the run log."""
    out: list = []
    pairs = pair_matrix(summary)
    for case in dict.fromkeys(p.case for p in pairs):
        mine = [p for p in pairs if p.case == case]
        p0 = mine[0]
        better = "higher" if p0.higher_is_better else "lower"
        out.append(f"{case}: host pairs by {p0.metric or '-'} ({p0.unit or ''}, {better} is better)")
        for p in mine:
            unit = f" {p.unit}" if p.unit else ""
            what = (f"{_num(p.value)}{unit} ({_pct(p.value, p.median)} of the median {_num(p.median)})"
                    if p.value is not None else f"failed in {p.failed} of {p.jobs} round(s)" if p.failed else
                    f"no result in {p.jobs} round(s)")
            flag = f"; SLOW: host {p.host}" if p.host else "; SLOW link" if p.slow else ""
            score = f", score {_num(p.score)}" if p.score is not None else ""
            out.append(f"  {p.a} <-> {p.b}: {what}{score}{flag}")
    for reason in pair_findings(summary):
        out.append(f"LINK {reason.severity}: {reason.case}: {reason.subject}: {reason.detail}; {reason.remedy}")
    return out
