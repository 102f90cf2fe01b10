"""One verdict per node (``accept``, ``degraded`` or ``reject``) with every reason. Pure functions, no I/O.

:func:`node_verdicts` reads a run's summary (its host checks, every round's failures, the cases' reference
verdicts and the ``each`` rankings) and what the caller read from the node directories (health findings, the GPUs'
identities) or measured between them (link findings), and gives one :class:`~flagperf.records.NodeVerdict` per host
of the run. Each reason says where it comes from (``source``), how bad it is (``severity``), what it concerns (the
node, a GPU by its :meth:`~flagperf.records.GpuIdentity.label`, or a link), the evidence and a remedy:

========== ============================================================== ==========================================
source     when                                                           severity
========== ============================================================== ==========================================
check      the host failed its check before any round                     reject
check      no round ran on the host (the run stopped first, or no case    degraded
           was planned there): it is untested, never accepted
failure    a round failed on the host: a rank or the node failed, the     reject (degraded: a round that failed
           host was lost, its own job ran past CASE_TIMEOUT               without naming a node, or a backend error)
reference  a referenced metric below its expected figure by more than     degraded; reject beyond the tolerance plus
           its tolerance (an each case: the host's own median, and each   ``reference_reject_margin``
           GPU's own figure of the headline metric, naming the card)
ranking    an each case's outlier host or GPU (results.slownodes)         degraded; reject when its score and its
                                                                          shortfall reach ``ranking_reject_score``
                                                                          and ``ranking_reject_shortfall``
ranking    the slowest GPU of a node whose devices' spread is above       degraded
           results.nodefigures.SPREAD_FLAG_PCT in every passed round
           (at least 2, accelerators only, the same GPU each time)
health     a health finding of the host or one of its GPUs                the finding's
link       a link finding that points to the host                         the finding's
========== ============================================================== ==========================================

A case of several nodes (not ``each``) cannot single out a node by its figure: its reference reasons are
``degraded`` at most, on every node of the case. The thresholds are data (:func:`flagperf.references.thresholds_for`,
docs/references.md "Node verdict thresholds"); every reason that used one names its value and source.
A ``pairs`` case's failed jobs and figures are judged as links by results.pairs (its findings come in as
``links``), not here. docs/results.md ("Node verdicts") describes the summary.json form.
"""

from __future__ import annotations

import math
import statistics

from flagperf.records import BELOW, GpuIdentity, HealthFinding, NodeVerdict, VerdictReason
from flagperf.references import DEFAULT_THRESHOLDS, thresholds_for
from flagperf.results.interpret import Status
from flagperf.results.nodefigures import DEGRADED_MIN_ROUNDS, SPREAD_FLAG_PCT, degraded_devices

SEVERITY_ORDER = {"reject": 0, "degraded": 1}
SOURCE_ORDER = ("check", "failure", "health", "reference", "ranking", "link")
EXCERPT_MAX_CHARS = 300         # of a failure's error line in a reason's detail

REMEDY_CHECK_UNTESTED = "run the cases on this host (fix what stopped the run first), then read its verdict"
REMEDY_FAILURE = ("read the log named here; rerun the case on this host alone: a failure that repeats there is the "
                  "node's (hardware, driver or software), one that does not may be the job's")
REMEDY_FAILURE_UNNAMED = "read the round's logs and the run log; rerun the case to see which node fails"
REMEDY_REFERENCE = ("compare the node's clocks, power limit, throttle reasons and link state (PCIe, NVLink, network) "
                    "with a healthy node's; rerun the case to confirm before sending the node back")
REMEDY_REFERENCE_MULTI = ("the figure is the whole job's: run the case on each node alone (an each case) or in "
                          "pairs to find the node or link that holds it back")
REMEDY_RANKING_GPU = ("check this GPU's clocks, throttle reasons, temperature, power and the processes on it; rerun "
                      "the case to confirm, then replace the card if it stays slow")
REMEDY_RANKING_HOST = ("check the host's GPUs, CPU frequency governor, load and memory; rerun the case to confirm "
                       "before sending the node back")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def _num(x) -> str:
    return f"{x:.4g}" if _number(x) else "-"


def _one_line(text, limit: int = EXCERPT_MAX_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


# -- which GPU a rank used -----------------------------------------------------------------------------------------

def local_gpus(visible_devices_env, visible_devices, nproc: int, identities: dict | None = None) -> dict:
    """{local rank: GpuIdentity} of a node: local rank i used device i of the devices the node launcher made
    visible (``launch.json``'s ``visible_devices`` under ``visible_devices_env``: "0,1,2,3", or UUIDs); without a
    visible-devices list, device i itself. ``identities``: {index: GpuIdentity} of the host (the monitor's); a
    device the host did not describe is named by its index alone (the rest "unknown"). A UUID in the list is
    looked up among the identities. {} when neither a list nor identities are known."""
    identities = identities or {}
    by_uuid = {g.uuid: g for g in identities.values() if g.uuid}
    listed = [d.strip() for d in str(visible_devices or "").split(",") if d.strip()] if visible_devices_env else []
    out: dict = {}
    if not listed and not identities:
        return out              # neither the devices nor the cards are known (a CPU host): nothing to name
    for local in range(max(int(nproc or 0), 0)):
        if not listed:
            index = local
        elif local < len(listed) and listed[local].isdigit():
            index = int(listed[local])
        elif local < len(listed) and listed[local] in by_uuid:
            out[local] = by_uuid[listed[local]]
            continue
        else:
            continue            # a device the list does not name as an index or a known UUID: not guessed
        out[local] = identities.get(index) or GpuIdentity(index)
    return out


# -- the sources ---------------------------------------------------------------------------------------------------

def _check_reasons(summary, hosts) -> dict:
    """{host: [reason]} of the failed host checks; checks that name no host of the run (a scheduler's partition,
    its nodes) are returned under None."""
    out: dict = {}
    for c in summary.host_checks or []:
        if not isinstance(c, dict):
            continue
        host = str(c.get("host") or "")
        outcome, detail, remedy = c.get("outcome") or "failed", c.get("detail") or "", c.get("remedy") or ""
        reason = VerdictReason("check", "reject", "node", f"host check {outcome}: {_one_line(detail, 1000)}",
                               str(remedy) or "see the detail")
        out.setdefault(host if host in hosts else None, []).append(reason)
    return out


def _failure_detail(case, rounds: list) -> tuple:
    """(detail, log) of the failed rounds [(round, status, failure)] of one case on one host."""
    rnd, status, f = rounds[0]
    total = len(case.rounds)
    which = f"round {rnd}" if len(rounds) == 1 else \
        f"rounds {', '.join(str(r) for r, _, _ in rounds)} (of {total})"
    text = f"{case.name} {which}: {status.value}: {_one_line(f.reason if f else '', 1000) or status.value}"
    if f is not None and f.last_lines:
        last = _one_line(f.last_lines[-1])
        if last and last not in text:
            text += f"; last line: {last}"
    if f is not None and f.rank is not None:
        text += f" (rank {f.rank})"
    return text, (f.log if f is not None else "") or ""


def _failure_reasons(summary) -> dict:
    """{host: [reason]}: one reason per case and host on which rounds failed."""
    found: dict = {}        # (host, case index) -> [(round, status, failure, severity)]
    bad = (Status.FAILED, Status.TIMEOUT, Status.ERROR)
    for ci, case in enumerate(summary.cases):
        pairs = bool(getattr(case, "pairs", False))
        for r in case.rounds:
            if (case.each or pairs) and r.nodes:
                for n in r.nodes:
                    if pairs and n.status in (Status.FAILED, Status.TIMEOUT):
                        continue        # a pair's job that failed is a link finding (results.pairs), not a node's
                    if n.status in bad:
                        sev = "degraded" if n.status == Status.ERROR and (n.failure is None or n.failure.rank is None) \
                            else "reject"
                        found.setdefault((n.host, ci), []).append((r.round, n.status, n.failure, sev))
                continue
            if r.status not in bad:
                continue
            f = r.failure
            host_of = {n.node: n.host for n in r.nodes}
            named = host_of.get(f.node) if f is not None and f.node else None
            if named is not None and (f.rank is not None or r.status != Status.ERROR):
                found.setdefault((named, ci), []).append((r.round, r.status, f, "reject"))
                continue
            for host in dict.fromkeys(n.host for n in r.nodes):     # no node named: every node of the round
                found.setdefault((host, ci), []).append((r.round, r.status, f, "degraded"))
    out: dict = {}
    for (host, ci), items in found.items():
        case = summary.cases[ci]
        sev = "reject" if any(i[3] == "reject" for i in items) else "degraded"
        items = [i for i in items if i[3] == sev]
        detail, log = _failure_detail(case, [(i[0], i[1], i[2]) for i in items])
        named = sev == "reject"
        if not named:
            detail += "; no node was named, so every node of the round gets this reason"
        remedy = (REMEDY_FAILURE if named else REMEDY_FAILURE_UNNAMED) + (f" (log: {log})" if log else "")
        out.setdefault(host, []).append(VerdictReason("failure", sev, "node", detail, remedy, None, case.name))
    return out


def _value_of(finished: dict, metric: str) -> tuple:
    """(value, unit) of a metric in a FINISHED payload: its headline, or one of its ``metrics``."""
    if finished.get("metric") == metric:
        return finished.get("value"), finished.get("unit")
    m = (finished.get("metrics") or {}).get(metric)
    if isinstance(m, dict):
        return m.get("value"), m.get("unit")
    return None, None


def _shortfall(value: float, expected: float, higher_is_better: bool) -> float:
    """How much worse than ``expected`` (relative, > 0 = worse)."""
    dev = value / expected - 1.0
    return -dev if higher_is_better else dev


def _reference_reason(case, v, value, rounds: int, thr, *, multi: bool, whose: str) -> VerdictReason | None:
    short = _shortfall(value, v.expected, v.higher_is_better)
    tol = v.tolerance or 0.0
    if short <= tol:
        return None
    margin = thr.reference_reject_margin
    reject_at = tol + margin.value
    sev = "reject" if short > reject_at and not multi else "degraded"
    unit = v.unit
    detail = (f"{case.name}: {v.metric} = {_num(value)} {unit} ({whose}, median of {rounds} round(s)), "
              f"{_pct(short)} {'below' if v.higher_is_better else 'above'} the expected {_num(v.expected)} {unit} "
              f"(source {v.source}); degraded beyond the tolerance {_pct(tol)}, reject beyond {_pct(reject_at)} "
              f"(margin {margin.value:g}: {margin.cite()})")
    if multi and short > reject_at:
        detail += "; a job of several nodes cannot name the node, so degraded at most"
    return VerdictReason("reference", sev, "node", detail, REMEDY_REFERENCE_MULTI if multi else REMEDY_REFERENCE,
                         None, case.name)


def _reference_reasons(summary, thresholds: dict) -> dict:
    """{host: [reason]} of the cases' reference verdicts below their figure: an each case per host (each host's
    own median over its passed rounds, against the case's figures), any other case on every node of its passed
    rounds."""
    out: dict = {}
    for ci, case in enumerate(summary.cases):
        refs = [v for v in case.verdicts or [] if _number(v.expected) and v.expected > 0]
        if not refs or getattr(case, "pairs", False):   # pairs: the pair matrix judges the links (results.pairs)
            continue
        thr = thresholds.get(ci, DEFAULT_THRESHOLDS)
        if case.each:
            per_host: dict = {}
            for r in case.rounds:
                for n in r.nodes:
                    if n.status == Status.PASSED and n.finished:
                        per_host.setdefault(n.host, []).append(n.finished)
            for host, results in per_host.items():
                for v in refs:
                    values = []
                    for f in results:
                        value, unit = _value_of(f, v.metric)
                        if _number(value) and (unit is None or unit == v.unit):
                            values.append(float(value))
                    if not values:
                        continue
                    reason = _reference_reason(case, v, statistics.median(values), len(values), thr, multi=False,
                                               whose="this host's own")
                    if reason is not None:
                        out.setdefault(host, []).append(reason)
            continue
        below = [v for v in refs if v.result == BELOW and _number(v.measured)]
        if not below:
            continue
        hosts = list(dict.fromkeys(n.host for r in case.passed_rounds for n in r.nodes))
        multi = len(hosts) > 1 or (isinstance(case.nnodes, int) and case.nnodes > 1)
        whose = "the job's" if multi else "this node's"
        for v in below:
            reason = _reference_reason(case, v, float(v.measured), v.rounds, thr, multi=multi, whose=whose)
            for host in hosts if reason is not None else ():
                out.setdefault(host, []).append(reason)
    return out


def _merge(*parts: dict) -> dict:
    out: dict = {}
    for part in parts:
        for host, reasons in part.items():
            out.setdefault(host, []).extend(reasons)
    return out


def _gpu_of(entry, identities: dict) -> tuple:
    """(GpuIdentity, note) of a ranking's GPU entry: its own identity, else the host's card of that index (device
    i is visible to local rank i), else the local rank alone, said so."""
    gpu = getattr(entry, "identity", None) or (identities.get(entry.host) or {}).get(entry.gpu)
    if gpu is None:
        return GpuIdentity(entry.gpu), f" (local rank {entry.gpu}; which card it used is not known)"
    return gpu, "" if gpu.index == entry.gpu else f" (local rank {entry.gpu})"


def _gpu_reference_reasons(summary, thresholds: dict, identities: dict) -> dict:
    """{host: [reason]} of single GPUs below the reference of their case's headline metric: an each case ranks
    every GPU by its own figure (measured at the same time as the others), so a card below its figure is named
    by its identity even where the GPUs are too few for a ranking to call it an outlier (two GPUs)."""
    out: dict = {}
    index_of = {c.name: i for i, c in enumerate(summary.cases)}
    for rk in summary.rankings or []:
        ci = index_of.get(rk.case)
        if ci is None:
            continue
        case = summary.cases[ci]
        refs = [v for v in case.verdicts or [] if v.metric == rk.metric and _number(v.expected) and v.expected > 0
                and (v.unit is None or rk.unit is None or v.unit == rk.unit)]
        if not refs:
            continue
        thr = thresholds.get(ci, DEFAULT_THRESHOLDS)
        for e in rk.entries:
            if e.gpu is None or not _number(e.value):
                continue
            reason = _reference_reason(case, refs[0], float(e.value), e.rounds or 1, thr, multi=False,
                                       whose="this GPU's own")
            if reason is None:
                continue
            gpu, where = _gpu_of(e, identities)
            detail = reason.detail.replace(f"{case.name}: ", f"{case.name}{where}: ", 1)
            out.setdefault(e.host, []).append(VerdictReason("reference", reason.severity, gpu.label(), detail,
                                                            REMEDY_RANKING_GPU, gpu, case.name))
    return out


def _ranking_reasons(summary, thresholds: dict, identities: dict) -> dict:
    """{host: [reason]} of the rankings' outliers: a host, or one of its GPUs named by its identity."""
    out: dict = {}
    index_of = {c.name: i for i, c in enumerate(summary.cases)}
    for rk in summary.rankings or []:
        thr = thresholds.get(index_of.get(rk.case), DEFAULT_THRESHOLDS)
        hib = rk.higher_is_better is not False
        gpu_values = [e.value for e in rk.entries if e.gpu is not None and _number(e.value)]
        gpu_median = statistics.median(gpu_values) if gpu_values else None
        for e in rk.entries:
            if not e.outlier:
                continue
            median = rk.median if e.gpu is None else gpu_median
            short = _shortfall(e.value, median, hib) if _number(e.value) and _number(median) and median else None
            score_t, short_t = thr.ranking_reject_score, thr.ranking_reject_shortfall
            reject = (_number(e.score) and e.score >= score_t.value and short is not None
                      and short >= short_t.value)
            gpu, where = None, ""
            if e.gpu is None:
                subject, remedy = "node", REMEDY_RANKING_HOST
            else:
                # the card the ranking names; else the host's card of that index (the plan makes device i
                # visible to local rank i); else the local rank alone, said so
                gpu = getattr(e, "identity", None) or (identities.get(e.host) or {}).get(e.gpu)
                where = "" if gpu is None or gpu.index == e.gpu else f" (local rank {e.gpu})"
                if gpu is None:
                    gpu, where = GpuIdentity(e.gpu), f" (local rank {e.gpu}; which card it used is not known)"
                subject, remedy = gpu.label(), REMEDY_RANKING_GPU
            among = "the hosts" if e.gpu is None else "every GPU of the case"
            detail = (f"{rk.case}{where}: {rk.metric} = {_num(e.value)} {rk.unit or ''}".rstrip()
                      + (f", {_pct(short)} worse than the median {_num(median)} of {among}" if short is not None
                         else "")
                      + (f", score {e.score:.1f}" if _number(e.score) else "")
                      + f"; reject at score >= {score_t.value:g} and {_pct(short_t.value)} worse "
                        f"({score_t.cite()}), else degraded")
            out.setdefault(e.host, []).append(VerdictReason("ranking", "reject" if reject else "degraded", subject,
                                                            detail, remedy, gpu, rk.case))
    return out


REMEDY_SPREAD_GPU = ("check this GPU's clocks, throttle reasons, temperature, power, PCIe link and the processes on "
                     "it against its neighbours'; rerun the case to confirm, then replace the card if it stays slow")


def _spread_reasons(summary, identities: dict, ranked: dict) -> dict:
    """{host: [reason]}: the slowest GPU of a node whose devices' spread is consistent (results.nodefigures
    .degraded_devices), degraded; left out where the rankings (``ranked``) already name that GPU for that case."""
    out: dict = {}
    for case in summary.cases:
        for host, lr, text in degraded_devices(case):
            gpu = (identities.get(host) or {}).get(lr)
            where = "" if gpu is None or gpu.index == lr else f" (local rank {lr})"
            if gpu is None:
                gpu, where = GpuIdentity(lr), f" (local rank {lr}; which card it used is not known)"
            if any(r.case == case.name and r.gpu is not None and r.gpu.index == gpu.index
                   for r in ranked.get(host, [])):
                continue
            out.setdefault(host, []).append(VerdictReason(
                "ranking", "degraded", gpu.label(),
                f"{text}{where}; degraded when the spread exceeds {SPREAD_FLAG_PCT:g}% in every passed round (at "
                f"least {DEGRADED_MIN_ROUNDS}) with the same slowest GPU", REMEDY_SPREAD_GPU, gpu, case.name))
    return out


def health_reason(f: HealthFinding) -> VerdictReason:
    """A health finding as a verdict reason (its severity, its GPU's label or "node")."""
    value = f.value if isinstance(f.value, str) else repr(f.value) if not isinstance(f.value, (int, float)) else \
        f"{f.value:g}" if isinstance(f.value, float) else str(f.value)
    return VerdictReason("health", f.severity, f.gpu.label() if f.gpu is not None else "node",
                         f"{f.field} = {_one_line(value, 200)}: {f.reason}", f.remedy, f.gpu)


def _health_reasons(findings) -> dict:
    """{host: [reason]}: one reason per host, field and GPU (the same finding in several node directories once:
    the worst severity, the last value seen)."""
    kept: dict = {}
    for f in findings or ():
        if not isinstance(f, HealthFinding):
            continue
        key = (f.host, f.field, f.gpu.index if f.gpu is not None else None)
        old = kept.get(key)
        if old is not None and SEVERITY_ORDER[old.severity] < SEVERITY_ORDER[f.severity]:
            continue            # keep the worse one
        kept[key] = f
    out: dict = {}
    for (host, _field, _gpu), f in kept.items():
        out.setdefault(host, []).append(health_reason(f))
    return out


def _link_reasons(links) -> dict:
    """{host: [reason]} from a mapping {host: [VerdictReason]} or an iterable of (host, VerdictReason)."""
    out: dict = {}
    items = links.items() if isinstance(links, dict) else links or ()
    for host, reasons in items:
        for r in [reasons] if isinstance(reasons, VerdictReason) else reasons or ():
            if isinstance(r, VerdictReason):
                out.setdefault(host, []).append(r)
    return out


def _is_placeholder(name: str) -> bool:
    """A planned node the backend had not bound to a host yet ("{...}": never a host address)."""
    return name.startswith("{") and name.endswith("}")


def run_hosts(summary) -> list:
    """The hosts of the run, in order: the planned ones, then every host a round ran a node on."""
    hosts = [h for h in summary.hosts or [] if isinstance(h, str) and h and not _is_placeholder(h)]
    for case in summary.cases:
        for r in case.rounds:
            hosts += [n.host for n in r.nodes if n.host]
    return list(dict.fromkeys(hosts))


def case_thresholds(summary, reference_files) -> dict:
    """{case index: VerdictThresholds} of every case of the summary (flagperf.references.thresholds_for)."""
    return {i: thresholds_for(reference_files, c) for i, c in enumerate(summary.cases)}


def node_verdicts(summary, *, reference_files=(), health=(), identities=None, links=None,
                  thresholds: dict | None = None) -> list:
    """One NodeVerdict per host of the run (:func:`run_hosts`), every reason sorted reject first, then by source.

    ``reference_files``: the reference files in use (the run's config), for the thresholds of each case
    (``thresholds``: {case index: VerdictThresholds} computed already, instead); ``health``: HealthFinding of every
    host (the same finding from several node directories counts once); ``identities``: {host: {index:
    GpuIdentity}} (the verdict's ``gpus``, and the GPUs of rankings that have no identity of their own);
    ``links``: link findings, {host: [VerdictReason]} or [(host, VerdictReason)]."""
    identities = identities or {}
    hosts = run_hosts(summary)
    if thresholds is None:
        thresholds = case_thresholds(summary, reference_files)
    checks = _check_reasons(summary, set(hosts))
    health_by_host = _health_reasons(health)
    links_by_host = _link_reasons(links)
    hosts += [h for h in list(health_by_host) + list(links_by_host) if h not in hosts]
    sources = {"check": checks, "failure": _failure_reasons(summary), "health": health_by_host,
               "reference": _merge(_reference_reasons(summary, thresholds),
                                   _gpu_reference_reasons(summary, thresholds, identities)),
               "ranking": _ranking_reasons(summary, thresholds, identities), "link": links_by_host}
    sources["ranking"] = _merge(sources["ranking"], _spread_reasons(summary, identities, sources["ranking"]))
    tested = {n.host for c in summary.cases for r in c.rounds for n in r.nodes}
    stopped = [r.detail for r in checks.get(None, [])]
    out = []
    for host in hosts:
        reasons = [r for src in SOURCE_ORDER for r in sources[src].get(host, [])]
        if host not in tested and not checks.get(host):
            why = "no round ran on this host"
            if summary.host_checks:
                why += " (the run stopped after the host checks: " + "; ".join(
                    _one_line(f"{c.get('host')}: {c.get('outcome')}", 200) for c in summary.host_checks
                    if isinstance(c, dict)) + ")"
            elif summary.interrupted:
                why += " (the run was interrupted)"
            elif stopped:
                why += f" ({'; '.join(stopped)})"
            reasons.insert(0, VerdictReason("check", "degraded", "node", f"not tested: {why}",
                                            REMEDY_CHECK_UNTESTED))
        reasons.sort(key=lambda r: SEVERITY_ORDER.get(r.severity, 2))      # stable: sources keep their order
        gpus = [g for _, g in sorted((identities.get(host) or {}).items())]
        out.append(NodeVerdict.of(host, reasons, gpus))
    return out


def rejected(verdicts) -> list:
    """The hosts whose verdict is reject."""
    return [v.host for v in verdicts or [] if v.verdict == "reject"]


__all__ = ["health_reason", "local_gpus", "node_verdicts", "rejected", "run_hosts"]
