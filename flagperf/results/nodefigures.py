"""Per-node figures of a multi-rank kernel benchmark (gemm, devmem, h2d, stream_nvcc): what every device of a node
measured in one barrier-aligned window, the node's aggregate (a sum, only when the devices' windows were
simultaneous) and the spread between its devices. Pure functions, no I/O.

The benchmarks put ``checks.details.node_figures`` into their FINISHED line (benchmarks/common/harness.py,
``node_figures``): {node index: {metric, unit, aggregate, reason, median, min, max, spread_pct, simultaneous,
overlap, window_s, per_device: [[local rank, value], ...]}}, every node of the job in rank 0's line. This module
reads it back from a case's **passed rounds** (every one of them; a round without it, or of another metric than
the case's headline, is left out) and gives one :class:`NodeFigure` per node:

- a device's value is its median over those rounds, and the node's median, min, max and spread are over these
  per-device medians;
- the aggregate is the median of the rounds' aggregates, and only when every round's windows were simultaneous
  (one round measured at different moments: no aggregate, and the reason names that round); ``overlap`` is the
  lowest round's;
- ``flagged``: the spread ((max - min) / median x 100) is above :data:`SPREAD_FLAG_PCT`.

For an ``each`` case (one job per host) the node is the host and its figures come from that host's own FINISHED
line in every passed round. A ``pairs`` case's figures are links' (results.pairs), not a node's: none here.

:func:`degraded_devices` is the conservative reading for the node verdicts: a spread is the node's fault only on
accelerators, with at least :data:`DEGRADED_MIN_ROUNDS` passed rounds, above the threshold in every one of them and
with the same slowest device each time (a spread in one round, or on CPU ranks that share cores, may be noise).

docs/results.md ("Node figures") describes the summary.json form and the threshold.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from flagperf.results.interpret import Status
from flagperf.untrusted import finite_number

# A throughput of identical devices running the same kernel at the same time agrees within a few percent (clock
# boost, temperature and power-limit differences between healthy cards: 2-5%); slownodes flags a GPU 5% below
# its population's median (SHORTFALL_FLOOR). A 10% spread between the fastest and the slowest device of one node
# is beyond that noise on accelerators and is what one throttled, mis-linked or mis-clocked card looks like.
SPREAD_FLAG_PCT = 10.0
DEGRADED_MIN_ROUNDS = 2         # a spread must repeat in this many passed rounds before the node is degraded
MAX_DEVICES = 4096              # per node, of a FINISHED line (untrusted): more is no node of one host
MAX_NODES = 4096


@dataclass(frozen=True)
class NodeFigure:
    node: str                   # the host (a second node of the same host: "<host> (node <i>)")
    metric: str
    unit: str
    aggregate: float | None     # the devices' sum, only when their windows were simultaneous in every round
    median: float
    min: float
    max: float
    spread_pct: float           # (max - min) / median x 100 over the devices' values
    simultaneous: bool
    overlap: float | None       # the lowest round's share of the longest window during which all devices ran
    per_device: tuple           # ((local rank, value), ...), by local rank
    flagged: bool               # spread_pct > SPREAD_FLAG_PCT
    reason: str                 # why flagged (naming the slowest device) and why not summed; "" when neither
    rounds: int = 0             # the passed rounds it was read from
    higher_is_better: bool = True

    @property
    def slowest(self) -> tuple | None:
        """(local rank, value) of the slowest device (lowest value when higher is better)."""
        if not self.per_device:
            return None
        pick = min if self.higher_is_better else max
        return pick(self.per_device, key=lambda d: d[1])

    def to_dict(self) -> dict:
        return {"node": self.node, "metric": self.metric, "unit": self.unit, "aggregate": self.aggregate,
                "median": self.median, "min": self.min, "max": self.max, "spread_pct": self.spread_pct,
                "simultaneous": self.simultaneous, "overlap": self.overlap,
                "per_device": [list(d) for d in self.per_device], "flagged": self.flagged, "reason": self.reason,
                "rounds": self.rounds}


def _index(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v:
        return v
    if isinstance(v, float) and v.is_integer() and 0 <= v < 2 ** 31:
        return int(v)
    if isinstance(v, str) and v.isdigit() and len(v) < 10:
        return int(v)
    return None


def _entry(raw, metric) -> dict | None:
    """One node's entry of a FINISHED line's node_figures, checked (untrusted): None when it is not one of
    ``metric`` with at least one device."""
    if not isinstance(raw, dict) or raw.get("metric") != metric:
        return None
    devices = raw.get("per_device")
    if not isinstance(devices, list) or not devices or len(devices) > MAX_DEVICES:
        return None
    per_device = {}
    for d in devices:
        if not (isinstance(d, list) and len(d) == 2 and _index(d[0]) is not None and finite_number(d[1])):
            return None
        per_device[_index(d[0])] = float(d[1])
    overlap, aggregate = raw.get("overlap"), raw.get("aggregate")
    return {"unit": raw.get("unit") if isinstance(raw.get("unit"), str) else "",
            "aggregate": float(aggregate) if isinstance(aggregate, (int, float)) and finite_number(aggregate) else None,
            "simultaneous": raw.get("simultaneous") is True,
            "overlap": float(overlap) if isinstance(overlap, (int, float)) and finite_number(overlap) else None,
            "reason": " ".join(str(raw.get("reason") or "").split())[:300], "per_device": per_device}


def _of_finished(finished, metric) -> dict:
    """{node index: entry} of a FINISHED payload's ``checks.details.node_figures`` for ``metric``; {} if none."""
    details = (((finished or {}).get("checks") or {}).get("details") or {}) if isinstance(finished, dict) else {}
    figures = details.get("node_figures") if isinstance(details, dict) else None
    if not isinstance(figures, dict) or len(figures) > MAX_NODES:
        return {}
    out = {}
    for key, raw in figures.items():
        i, entry = _index(key), _entry(raw, metric)
        if i is not None and entry is not None:
            out[i] = entry
    return out


def _hosts_of(round_) -> dict:
    """{node index: host} of a round's nodes."""
    return {n.node_rank: (n.host or n.node) for n in round_.nodes if isinstance(n.node_rank, int)}


def _samples(case) -> dict:
    """{node name: [(round number, entry), ...]} over the case's passed rounds, nodes in the order they appear."""
    return {name: samples for name, (_, samples) in _host_samples(case).items()}


def _host_samples(case) -> dict:
    """{node name: (host, [(round number, entry), ...])}: :func:`_samples` with every node's host."""
    metric = case.metric
    out: dict = {}
    if not isinstance(metric, str) or case.pairs:
        return out
    if case.each:
        for r in case.rounds:
            for n in r.nodes:
                f = n.finished or {}
                if n.status != Status.PASSED or f.get("metric") != metric:
                    continue
                entries = _of_finished(f, metric)
                if len(entries) == 1:                   # one job per host: its one node
                    host = n.host or n.node
                    out.setdefault(host, (host, []))[1].append((r.round, next(iter(entries.values()))))
        return out
    for r in case.passed_rounds:
        if r.finished.get("metric") != metric:
            continue
        hosts = _hosts_of(r)
        names = list(hosts.values())
        for i, entry in sorted(_of_finished(r.finished, metric).items()):
            host = hosts.get(i, f"node {i}")
            name = host if names.count(host) <= 1 else f"{host} (node {i})"
            out.setdefault(name, (host, []))[1].append((r.round, entry))
    return out


def _fmt(v) -> str:
    return f"{v:.4g}" if finite_number(v) else "-"


def _figure(case, node: str, samples: list, higher: bool) -> NodeFigure:
    values: dict = {}
    for _, e in samples:
        for lr, v in e["per_device"].items():
            values.setdefault(lr, []).append(v)
    per_device = tuple((lr, statistics.median(values[lr])) for lr in sorted(values))
    vs = [v for _, v in per_device]
    median = statistics.median(vs)
    spread = 100.0 * (max(vs) - min(vs)) / median if median > 0 else 0.0
    unit = next((e["unit"] for _, e in samples if e["unit"]), "") or (case.unit or "")
    simultaneous = all(e["simultaneous"] and e["aggregate"] is not None for _, e in samples)
    overlaps = [e["overlap"] for _, e in samples if e["overlap"] is not None]
    overlap = min(overlaps) if len(overlaps) == len(samples) else None
    aggregate = statistics.median(e["aggregate"] for _, e in samples) if simultaneous else None
    flagged = len(per_device) > 1 and spread > SPREAD_FLAG_PCT
    reasons = []
    if flagged:
        pick = min if higher else max
        slow, fast = pick(per_device, key=lambda d: d[1]), (max if higher else min)(per_device, key=lambda d: d[1])
        reasons.append(f"spread {spread:.1f}% > {SPREAD_FLAG_PCT:g}% between its devices: slowest local rank "
                       f"{slow[0]} ({_fmt(slow[1])} {unit}), fastest local rank {fast[0]} ({_fmt(fast[1])} {unit})")
    if not simultaneous:
        first = next((rnd, e) for rnd, e in samples if not (e["simultaneous"] and e["aggregate"] is not None))
        why = first[1]["reason"] or "the windows were not simultaneous: not summed"
        reasons.append(f"no node aggregate: round {first[0]}: {why}")
    return NodeFigure(node, case.metric, unit, aggregate, median, min(vs), max(vs), spread, simultaneous, overlap,
                      per_device, flagged, "; ".join(reasons), len(samples), higher)


def node_figures(case) -> list[NodeFigure]:
    """One :class:`NodeFigure` per node of ``case`` (a CaseSummary) for its headline metric, from every passed
    round's FINISHED ``node_figures`` (see the module's text), nodes in the order they appear; [] when no passed
    round carries them (a benchmark without per-device figures, a summary written before them, a pairs case)."""
    higher = case.head.get("higher_is_better") is not False
    return [_figure(case, node, samples, higher) for node, samples in _samples(case).items() if samples]


def flagged_figures(cases) -> list:
    """[(case name, NodeFigure)] of every flagged node figure of ``cases``, in order."""
    return [(c.name, f) for c in cases for f in node_figures(c) if f.flagged]


def figure_line(fig: NodeFigure) -> str:
    """'node h1: 412 TFLOP/s node aggregate; per device median 103, min 99.1, max 108 (spread 8.7%)' (the
    aggregate: 'not summed' when the windows were not simultaneous)."""
    agg = f"{_fmt(fig.aggregate)} {fig.unit} node aggregate" if fig.aggregate is not None else "not summed"
    return (f"node {fig.node}: {agg}; per device median {_fmt(fig.median)}, min {_fmt(fig.min)}, max "
            f"{_fmt(fig.max)} {fig.unit} (spread {fig.spread_pct:.1f}%, {len(fig.per_device)} devices)")


def degraded_devices(case, device_types=None) -> list:
    """[(host, local rank, text)] of the nodes of ``case`` whose spread is the node's own (the conservative rule
    of the module's text): accelerators only (``device_types``: the FINISHED ``env.device`` of the passed rounds;
    read from them when None), at least DEGRADED_MIN_ROUNDS passed rounds, above SPREAD_FLAG_PCT in every one and
    the same slowest device in every one."""
    rounds = case.passed_rounds if not case.each else []
    finishes = [r.finished for r in rounds] + [n.finished for r in case.rounds for n in r.nodes
                                                if case.each and n.status == Status.PASSED and n.finished]
    devices = set(device_types) if device_types is not None else {
        ((f or {}).get("env") or {}).get("device") for f in finishes}
    if not devices or devices & {"cpu", None}:
        return []
    higher = case.head.get("higher_is_better") is not False
    out = []
    for node, (host, samples) in _host_samples(case).items():
        if len(samples) < DEGRADED_MIN_ROUNDS:
            continue
        slowest, spreads = set(), []
        for _, e in samples:
            pd = sorted(e["per_device"].items())
            vs = [v for _, v in pd]
            med = statistics.median(vs)
            spreads.append(100.0 * (max(vs) - min(vs)) / med if len(vs) > 1 and med > 0 else 0.0)
            slowest.add((min if higher else max)(pd, key=lambda d: d[1])[0])
        if len(slowest) == 1 and all(s > SPREAD_FLAG_PCT for s in spreads):
            fig = _figure(case, node, samples, higher)
            lr = next(iter(slowest))
            out.append((host, lr, f"{case.name}: node {node}: {fig.metric}: local rank {lr} is the slowest device in "
                                  f"all {len(samples)} passed rounds, spread {min(spreads):.1f}% to "
                                  f"{max(spreads):.1f}% > {SPREAD_FLAG_PCT:g}% ({fig.reason.split('; ')[0]})"))
    return out
