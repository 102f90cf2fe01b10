"""Slow-node and slow-GPU detection for ``each`` cases (one independent single-node job per host). Pure
functions, no I/O.

A ranking ranks the hosts of an ``each`` case by the case's headline metric (each host's median over its
passed rounds), and the GPUs within every host where the benchmark reported a per-rank list of that metric
(``checks.details.per_rank``; gpu = the local rank, i.e. device i of the visible devices). Outliers are
flagged by a robust rule (:data:`RULE`): a score from the median and the MAD (median absolute deviation) of
the population, oriented so that a positive score is worse, plus a floor on the relative shortfall so that
nearly identical hosts (a tiny MAD) are never flagged. Hosts are scored against the hosts, GPUs against every
GPU of the case (all hosts pooled). Only the bad direction is flagged: a host faster than the rest is not a
slow node. Where the caller knows which card a local rank used (``gpus``), a GPU's entry carries its
:class:`~flagperf.records.GpuIdentity` (index, UUID, serial, PCI bus id), and every text names the card by it.

docs/results.md ("rankings") describes the summary.json form.
"""

from __future__ import annotations

import math
import statistics

from flagperf.records import RankEntry, Ranking
from flagperf.results.interpret import Status

MAD_TO_SIGMA = 1.4826       # MAD x 1.4826 estimates the standard deviation of normally distributed values
SCORE_LIMIT = 3.5           # Iglewicz & Hoaglin's cut-off for the robust ("modified") z-score
SHORTFALL_FLOOR = 0.05      # and at least 5% worse than the median
SCALE_FLOOR = 0.001         # the scale is at least 0.1% of |median|: identical values never divide by zero

RULE = ("score = (median - value) / (1.4826 * MAD) (value - median when lower is better: a positive score is "
        "worse), median and MAD over the case's hosts (GPUs: over every GPU of the case), the scale at least 0.1% "
        "of |median|; outlier when score > 3.5 and the value is worse than the median by more than 5%")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def robust_scores(values, higher_is_better: bool = True, *, limit: float = SCORE_LIMIT,
                  floor: float = SHORTFALL_FLOOR) -> list:
    """[(score, outlier)] for ``values``, in their order. score: the robust z-score, positive = worse (None when
    the population has no scale: median and MAD both 0); outlier: score > ``limit`` and the value is worse than
    the median by more than ``floor`` x |median|. Non-finite values get (None, False) and are left out of the
    median and the MAD."""
    good = [float(v) for v in values if _is_number(v)]
    if not good:
        return [(None, False) for _ in values]
    median = statistics.median(good)
    mad = statistics.median(abs(v - median) for v in good)
    scale = max(MAD_TO_SIGMA * mad, SCALE_FLOOR * abs(median))
    out: list = []
    for v in values:
        if not _is_number(v):
            out.append((None, False))
            continue
        worse_by = (median - v) if higher_is_better else (v - median)
        if scale == 0:
            out.append((0.0 if worse_by == 0 else None, False))
            continue
        score = worse_by / scale
        out.append((score, score > limit and worse_by > floor * abs(median)))
    return out


def _ranks(values, higher_is_better: bool) -> list:
    """Competition ranks (1, 2, 2, 4), best first; equal values share a rank. One sort: O(n log n)."""
    key = [(-v if higher_is_better else v) for v in values]
    order = sorted(range(len(key)), key=key.__getitem__)
    ranks = [0] * len(key)
    for pos, i in enumerate(order):
        ranks[i] = ranks[order[pos - 1]] if pos and key[order[pos - 1]] == key[i] else pos + 1
    return ranks


def _per_rank(finished: dict, metric, nproc: int = 0) -> list | None:
    """The per-rank list of the headline metric in a FINISHED payload (``checks.details.per_rank``), or None;
    a list longer than the host's ``nproc`` ranks (when known) is no GPU list of that host: None."""
    details = ((finished or {}).get("checks") or {}).get("details") or {}
    pr = details.get("per_rank") if isinstance(details, dict) else None
    if not isinstance(pr, dict) or pr.get("metric") != metric or not isinstance(pr.get("values"), list):
        return None
    values = pr["values"]
    if nproc > 0 and len(values) > nproc:
        return None
    return values if values and all(_is_number(v) for v in values) else None


def headline_metric(case, metric=None):
    """The metric an ``each`` case is ranked by: ``metric`` (the one the case's configuration names) when given,
    else the one most hosts report in their passed rounds (a tie: the one more rounds report, then the first
    by name). Never simply the first host's: one host reporting another metric cannot decide for the rest."""
    if isinstance(metric, str) and metric:
        return metric
    hosts: dict = {}
    rounds: dict = {}
    for r in case.rounds:
        for n in r.nodes:
            f = n.finished or {}
            name = f.get("metric")
            if n.status != Status.PASSED or not isinstance(name, str) or not _is_number(f.get("value")):
                continue
            hosts.setdefault(name, set()).add(n.host)
            rounds[name] = rounds.get(name, 0) + 1
    if not hosts:
        return None
    return min(hosts, key=lambda name: (-len(hosts[name]), -rounds[name], name))


def _host_results(case, metric=None) -> tuple:
    """({host: [(value, per-rank list or None) per passed round of the headline metric]}, [hosts without such a
    round], metric, unit, higher_is_better), hosts in the order they first appear. Unit and direction: those
    most of the ranked rounds report."""
    per_host: dict = {}
    seen: dict = {}
    metric = headline_metric(case, metric)
    nproc = case.nproc if isinstance(case.nproc, int) and not isinstance(case.nproc, bool) else 0
    units: dict = {}
    directions: dict = {}
    for r in case.rounds:
        for n in r.nodes:
            seen.setdefault(n.host, None)
            per_host.setdefault(n.host, [])
            f = n.finished or {}
            if n.status != Status.PASSED or not _is_number(f.get("value")) or f.get("metric") != metric:
                continue            # no result, or another metric than the case's headline: not comparable
            per_host[n.host].append((float(f["value"]), _per_rank(f, metric, nproc)))
            unit, hib = f.get("unit"), f.get("higher_is_better")
            units[unit] = units.get(unit, 0) + 1
            directions[hib] = directions.get(hib, 0) + 1
    failed = [h for h in seen if not per_host.get(h)]
    unit = max(units, key=units.__getitem__) if units else None
    hib = max(directions, key=directions.__getitem__) if directions else None
    return per_host, failed, metric if units else None, unit, hib if isinstance(hib, bool) else None


def rank_case(case, metric=None, gpus: dict | None = None) -> Ranking | None:
    """The :class:`~flagperf.records.Ranking` of one ``each`` case (a CaseSummary with ``each`` set), or None
    for any other case, by the case's headline metric (:func:`headline_metric`; ``metric``: the one its
    configuration names). Its entries: first every host with a result, best first, then every GPU grouped by
    host in the hosts' order, best first within the host (a GPU's rank: among its host's GPUs). ``gpus``:
    {host: {local rank: GpuIdentity}}, the card each local rank used (results.verdict.local_gpus)."""
    if not case.each:
        return None
    cards_of = gpus or {}
    per_host, failed, metric, unit, hib = _host_results(case, metric)
    higher = hib is not False       # a result without the flag: higher is better, as for most throughputs
    hosts = [h for h in per_host if per_host[h]]
    values = [statistics.median(v for v, _ in per_host[h]) for h in hosts]
    scores = robust_scores(values, higher)
    ranks = _ranks(values, higher)
    host_entries = [RankEntry(h, None, v, s, o, k, len(per_host[h]))
                    for h, v, (s, o), k in zip(hosts, values, scores, ranks)]
    host_entries.sort(key=lambda e: e.rank or 0)    # stable: ties keep the hosts' order
    # GPUs: the median per (host, local rank) over the rounds that reported a per-rank list of the right length.
    rows: list = []
    for h in hosts:
        lists = [pr for _, pr in per_host[h] if pr is not None]
        width = len(lists[0]) if lists else 0
        lists = [pr for pr in lists if len(pr) == width]
        for i in range(width):
            rows.append((h, i, statistics.median(float(pr[i]) for pr in lists), len(lists)))
    gpu_entries: list = []
    if rows:
        gscores = robust_scores([g[2] for g in rows], higher)
        by_host: dict = {}
        for (h, i, v, n), (s, o) in zip(rows, gscores):
            by_host.setdefault(h, []).append((i, v, s, o, n))
        for e in host_entries:
            group = by_host.get(e.host, [])
            cards = cards_of.get(e.host) or {}
            ranked = [RankEntry(e.host, i, v, s, o, k, n, cards.get(i))
                      for (i, v, s, o, n), k in zip(group, _ranks([g[1] for g in group], higher))]
            gpu_entries += sorted(ranked, key=lambda g: g.rank or 0)
    return Ranking(case.name, metric, unit, hib, RULE, statistics.median(values) if values else None,
                   tuple(host_entries + gpu_entries), tuple(failed))


def rank_cases(cases, metrics=None, gpus: dict | None = None) -> list:
    """One ranking per ``each`` case, in the cases' order; ``metrics``: {case name: the headline metric its
    configuration names} where it names one; ``gpus``: {case name: {host: {local rank: GpuIdentity}}}."""
    metrics, gpus = metrics or {}, gpus or {}
    return [r for r in (rank_case(c, metrics.get(c.name), gpus.get(c.name)) for c in cases) if r is not None]


def outliers(rankings) -> list:
    """Every flagged entry of ``rankings`` as (case name, RankEntry), in order."""
    return [(r.case, e) for r in rankings or [] for e in r.outliers]


def gpu_text(entry: RankEntry) -> str:
    """A GPU entry's GPU: 'gpu 1 (GPU-5c1..., serial 1654922001234, pci 00000000:19:00.0)' where its card is known
    (with '(local rank 1)' after it when the card's index is another), else 'gpu 1' (its local rank); '' for a
    host's entry."""
    if entry.gpu is None:
        return ""
    if entry.identity is None:
        return f"gpu {entry.gpu}"
    text = entry.identity.label()
    return text if entry.identity.index == entry.gpu else f"{text} (local rank {entry.gpu})"


def describe(case_name, entry: RankEntry, unit=None) -> str:
    """'<case>: host h3 gpu 1 (GPU-5c1..., serial ..., pci ...): 41.2 TFLOP/s, score 12.3' for a report line."""
    what = f"host {entry.host}" + (f" {gpu_text(entry)}" if entry.gpu is not None else "")
    value = entry.value
    score = entry.score
    text = f"{case_name}: {what}: {value:.4g}" if _is_number(value) else f"{case_name}: {what}: -"
    if unit:
        text += f" {unit}"
    return text + (f", score {score:.1f}" if _is_number(score) else "")
