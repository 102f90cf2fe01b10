"""Link scoring: each node's link matrix from the p2p cases of a run, and the links, GPUs or nodes whose links are
slow against the others, as verdict reasons. Pure functions; the one I/O is optional: the GPUs' identities read
from the node directories' health files (:func:`run_identities`) when a run directory is given.

The p2p benchmark puts its matrix into its FINISHED details (``checks.details.matrix``, docs/benchmarks.md
"p2p"): per node, every measured ordered pair of GPUs (``src`` -> ``dst``, device indices) with its one-way
bandwidth (``uni_gbps``) and the bandwidth of both directions at once (``bi_gbps``, once per unordered pair).
:func:`link_matrix` reads it from every passed round of every p2p case (each host's own payload in an ``each``
case) and keeps, per case, host and link, the median over the rounds.

:func:`link_findings` scores them like nodes (results.slownodes :func:`~flagperf.results.slownodes.robust_scores`:
a robust median/MAD score plus a relative floor), each case on its own (a case with ``force_network`` measures the
network path, not NVLink), every population pooled over the case's hosts:

1. links: every host's ``uni`` links against each other, and the ``bi`` links against each other;
2. GPUs: a GPU's value is the median of the links that touch it (to or from it); GPUs of nodes with 3 or more
   GPUs are scored against each other. One slow link moves no GPU's median; a slow GPU moves every link it
   touches, which with 4 GPUs is half of them, too many for the link scores alone to see.

A finding is ``degraded`` when the score is over the limit and the value is more than :data:`SHORTFALL_FLOOR`
below the median, ``reject`` when it is more than :data:`REJECT_SHORTFALL` below. A flagged GPU is named as a GPU
(not as its separate links); when every GPU of a node is flagged, the node is named; the other flagged links are
named as links, one finding per GPU pair ("gpu 0 -> gpu 1", or "gpu 0 <-> gpu 1" when both directions or the
bidirectional figure are slow). With two GPUs per node a node's links can only be compared with other hosts'.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from flagperf.records import UNKNOWN, GpuIdentity, VerdictReason
from flagperf.results.health import gpu_identities
from flagperf.results.interpret import Status
from flagperf.results.slownodes import SCORE_LIMIT, SHORTFALL_FLOOR, robust_scores
from flagperf.untrusted import finite_number

BENCHMARK = "p2p"
MODES = ("uni", "bi")
REJECT_SHORTFALL = 0.25     # a flagged link, GPU or node more than 25% below the median: reject
MIN_GPUS_FOR_GPU_SCORE = 3  # with 2 GPUs a GPU's links are the node's only link: named as a link
MAX_GPU_INDEX = 4096        # a device index beyond this is no GPU of a node
IDENTITY_CHARS = 96         # a reported uuid / PCI bus id / name longer than this is not kept

RULE = (f"per p2p case, hosts pooled: links (uni, bi) against the links, GPUs (the median of the links that touch "
        f"them, nodes of {MIN_GPUS_FOR_GPU_SCORE}+ GPUs) against the GPUs; score = (median - value) / (1.4826 * "
        f"MAD); slow when score > {SCORE_LIMIT:g} and the value is more than {SHORTFALL_FLOOR:.0%} below the median "
        f"(degraded), more than {REJECT_SHORTFALL:.0%} below (reject)")

REMEDY_LINK = ("check the NVLink (or PCIe) path between {a} and {b}: `nvidia-smi nvlink --status -i {ia}` and "
               "`-i {ib}` (links down or at a lower speed), their error counters (`nvidia-smi nvlink -e`), "
               "`nvidia-smi topo -m` for the path and the NVSwitch it crosses; reseat or replace the card or "
               "baseboard whose links stay down")
REMEDY_GPU = ("check {g}: its NVLink links (`nvidia-smi nvlink --status -i {i}`, error counters `nvidia-smi nvlink "
              "-e -i {i}`), its PCIe link (generation and width, `nvidia-smi -q -i {i}`), its clocks and throttle "
              "reasons; replace the card if its links stay slow")
REMEDY_NODE = ("every GPU link of the node is slow against the other hosts: check the NVSwitches and the fabric "
               "manager (`nvidia-smi -q | grep -i -A2 fabric`, `systemctl status nvidia-fabricmanager`), the NVLink "
               "status of every GPU, and the GPUs' clocks")
REMEDY_NET_LINK = ("the ranks talked over the network (force_network): check the NICs that {a} and {b} use (port "
                   "state, rate and error counters, GPUDirect RDMA) and the PCIe path between each GPU and its NIC")
REMEDY_NET_GPU = ("the ranks talked over the network (force_network): check the NIC {g} reaches the network "
                  "through (port state, rate, error counters) and the PCIe switch between them")
REMEDY_NET_NODE = ("the ranks talked over the network (force_network): check the node's NICs (port state, rate, "
                   "error counters), their PCIe links and the switch ports they connect to")


def _index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_GPU_INDEX


def _text(v) -> str | None:
    """A reported identity string, kept only when it is short printable ASCII."""
    if not isinstance(v, str):
        return None
    v = v.strip()
    return v if v and len(v) <= IDENTITY_CHARS and v.isascii() and v.isprintable() else None


# -- the matrix --------------------------------------------------------------------------------------------------

@dataclass
class NodeLinks:
    """One host's link matrix in one p2p case: the median over the passed rounds of every link, in GB/s
    (``uni``: {(src, dst): value}; ``bi``: {(a, b): value} with a < b), the GPUs measured, what the benchmark
    reported of each GPU (``reported``: {index: {uuid, pci_bus_id, name}}), and how many rounds gave the figures."""

    case: str
    host: str
    size: str | None = None
    network_forced: bool = False
    gpus: tuple = ()
    uni: dict = field(default_factory=dict)
    bi: dict = field(default_factory=dict)
    reported: dict = field(default_factory=dict)
    rounds: int = 0

    def to_dict(self) -> dict:
        """The form a report shows: every ordered pair once, with both figures."""
        links = []
        for (a, b), uni in sorted(self.uni.items()):
            links.append({"src": a, "dst": b, "uni_gbps": uni, "bi_gbps": self.bi.get((min(a, b), max(a, b)))})
        for (a, b), bi in sorted(self.bi.items()):
            for s, d in ((a, b), (b, a)):
                if (s, d) not in self.uni:
                    links.append({"src": s, "dst": d, "uni_gbps": None, "bi_gbps": bi})
        return {"case": self.case, "host": self.host, "size": self.size, "unit": "GB/s",
                "network_forced": self.network_forced, "gpus": list(self.gpus), "rounds": self.rounds,
                "links": sorted(links, key=lambda x: (x["src"], x["dst"]))}


def _payloads(case) -> list:
    """[(host or None, node rank -> host, FINISHED payload)] of every passed round of a case; an each case: every
    passed host's own payload."""
    out = []
    for r in case.rounds:
        if case.each:
            for n in r.nodes:
                if n.status == Status.PASSED and isinstance(n.finished, dict):
                    out.append((n.host, {0: n.host}, n.finished))
        elif r.status == Status.PASSED and isinstance(r.finished, dict):
            out.append((None, {n.node_rank: n.host for n in r.nodes if n.host}, r.finished))
    return out


def _matrix_of(payload) -> dict | None:
    if payload.get("benchmark") not in (None, BENCHMARK):
        return None
    details = (payload.get("checks") or {}).get("details") if isinstance(payload.get("checks"), dict) else None
    matrix = details.get("matrix") if isinstance(details, dict) else None
    return matrix if isinstance(matrix, dict) and isinstance(matrix.get("nodes"), list) else None


def _read_node(node, host_of, fixed_host) -> tuple | None:
    """(host, {(src, dst, mode): value}, {index: reported identity}) of one node of a matrix, or None."""
    if not isinstance(node, dict) or not isinstance(node.get("links"), list):
        return None
    if fixed_host is not None:
        host = fixed_host
    elif _index(node.get("node")) and node["node"] in host_of:
        host = host_of[node["node"]]
    elif len(set(host_of.values())) == 1 and host_of:
        host = next(iter(host_of.values()))
    else:
        return None             # a node the round's nodes do not name: not guessed
    values = {}
    for link in node["links"]:
        if not isinstance(link, dict) or not _index(link.get("src")) or not _index(link.get("dst")):
            continue
        a, b = link["src"], link["dst"]
        if a == b:
            continue
        if finite_number(link.get("uni_gbps")) and link["uni_gbps"] > 0:
            values[(a, b, "uni")] = float(link["uni_gbps"])
        if finite_number(link.get("bi_gbps")) and link["bi_gbps"] > 0:
            values[(min(a, b), max(a, b), "bi")] = float(link["bi_gbps"])
    reported = {}
    for g in node.get("gpus") or []:
        if isinstance(g, dict) and _index(g.get("gpu")):
            reported[g["gpu"]] = {k: _text(g.get(k)) for k in ("uuid", "pci_bus_id", "name") if _text(g.get(k))}
    return host, values, reported


def link_matrix(summary) -> list:
    """Every host's :class:`NodeLinks` of every p2p case of ``summary`` (a Summary), cases in order, hosts in the
    order they first appear; hosts whose rounds held no link figure are left out."""
    out = []
    for case in summary.cases:
        per_host: dict = {}
        for fixed_host, host_of, payload in _payloads(case):
            matrix = _matrix_of(payload)
            if matrix is None:
                continue
            for node in matrix["nodes"]:
                read = _read_node(node, host_of, fixed_host)
                if read is None or not read[1]:
                    continue
                host, values, reported = read
                entry = per_host.setdefault(host, {"values": {}, "reported": {}, "rounds": 0, "size": None,
                                                   "forced": False})
                for key, v in values.items():
                    entry["values"].setdefault(key, []).append(v)
                entry["reported"].update(reported)
                entry["rounds"] += 1
                entry["size"] = _text(matrix.get("size")) or entry["size"]
                entry["forced"] = entry["forced"] or matrix.get("network_forced") is True
        for host, e in per_host.items():
            med = {k: statistics.median(v) for k, v in e["values"].items()}
            gpus = sorted({x for (a, b, _) in med for x in (a, b)})
            out.append(NodeLinks(case.name, host, e["size"], e["forced"], tuple(gpus),
                                 {(a, b): v for (a, b, m), v in med.items() if m == "uni"},
                                 {(a, b): v for (a, b, m), v in med.items() if m == "bi"},
                                 e["reported"], e["rounds"]))
    return out


# -- identities --------------------------------------------------------------------------------------------------

def _identity(host, index, identities, reported) -> GpuIdentity:
    """The card of device ``index`` of ``host``: the one among ``identities`` ({host: {index: GpuIdentity}}) with
    the UUID the benchmark reported, else the one at that index, else what the benchmark reported."""
    known = (identities or {}).get(host) or {}
    rep = reported.get(index) or {}
    uuid = rep.get("uuid")
    if uuid:
        for g in known.values():
            if isinstance(g, GpuIdentity) and g.uuid == uuid:
                return g
    g = known.get(index)
    if isinstance(g, GpuIdentity) and (not uuid or g.uuid in (UNKNOWN, uuid)):
        return g                # (a known card with another UUID is not this one: the reported identity is kept)
    fields = {k: rep[k] for k in ("uuid", "pci_bus_id", "name") if rep.get(k)}
    return GpuIdentity(index, **fields)


# -- scoring -----------------------------------------------------------------------------------------------------

def _flags(values) -> list:
    """[(score, severity or None)] of ``values`` (higher is better), by robust_scores with the two floors."""
    soft = robust_scores(values, True)
    hard = robust_scores(values, True, floor=REJECT_SHORTFALL)
    return [(s, "reject" if h else "degraded" if o else None) for (s, o), (_, h) in zip(soft, hard)]


def _worst(severities) -> str:
    return "reject" if "reject" in severities else "degraded"


def _pct(value, median) -> str:
    return f"{(value / median - 1) * 100:+.0f}%" if median else "-"


def _gbps(v) -> str:
    return f"{v:.1f} GB/s"


@dataclass
class _Scored:
    """One scored figure: a link (key (src, dst) or (a, b)) or a GPU (key its index) of a host, in a mode."""

    node: NodeLinks
    mode: str
    key: Any
    value: float
    score: float | None = None
    severity: str | None = None


def _score(items) -> None:
    for item, (score, severity) in zip(items, _flags([i.value for i in items])):
        item.score, item.severity = score, severity


def _gpu_items(nodes, mode) -> list:
    items = []
    for node in nodes:
        links = node.uni if mode == "uni" else node.bi
        if len(node.gpus) < MIN_GPUS_FOR_GPU_SCORE:
            continue
        for g in node.gpus:
            touching = [v for (a, b), v in links.items() if g in (a, b)]
            if len(touching) >= 2:
                items.append(_Scored(node, mode, g, statistics.median(touching)))
    return items


def _median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def _score_text(item) -> str:
    return f"score {item.score:.1f}" if finite_number(item.score) else "score -"


def _case_findings(nodes, identities) -> list:
    """[(host, VerdictReason)] of one case's hosts (``nodes``: its NodeLinks)."""
    links = {m: [_Scored(n, m, k, v) for n in nodes for k, v in (n.uni if m == "uni" else n.bi).items()]
             for m in MODES}
    gpus = {m: _gpu_items(nodes, m) for m in MODES}
    for m in MODES:
        _score(links[m])
        _score(gpus[m])
    pool = {m: _median(i.value for i in links[m]) for m in MODES}
    gpu_pool = {m: _median(i.value for i in gpus[m]) for m in MODES}
    out = []
    for node in nodes:
        host = node.host
        forced = node.network_forced

        def ident(i, node=node):
            return _identity(node.host, i, identities, node.reported)

        node_median = {m: _median((node.uni if m == "uni" else node.bi).values()) for m in MODES}
        slow_gpus: dict = {}
        for m in MODES:
            for item in gpus[m]:
                if item.node is node and item.severity:
                    slow_gpus.setdefault(item.key, []).append(item)
        flagged_links = [i for m in MODES for i in links[m] if i.node is node and i.severity]
        if len(node.gpus) >= MIN_GPUS_FOR_GPU_SCORE and slow_gpus and set(slow_gpus) == set(node.gpus):
            items = [i for g in slow_gpus.values() for i in g]
            parts = [f"{m}: median {_gbps(node_median[m])} vs {_gbps(pool[m])} over the case's "
                     f"{len(links[m])} links ({_pct(node_median[m], pool[m])})"
                     for m in MODES if node_median[m] is not None and pool[m]]
            out.append((host, VerdictReason(
                "link", _worst([i.severity for i in items]), "node",
                f"every GPU link of the node is slow ({node.size or '?'} transfers): " + "; ".join(parts),
                REMEDY_NET_NODE if forced else REMEDY_NODE, None, node.case)))
            continue
        for g, items in sorted(slow_gpus.items()):
            gi = ident(g)
            parts = []
            for item in items:
                links_of = node.uni if item.mode == "uni" else node.bi
                arrow = "->" if item.mode == "uni" else "<->"
                each = ", ".join(f"{a}{arrow}{b} {v:.1f}" for (a, b), v in sorted(links_of.items()) if g in (a, b))
                parts.append(f"{item.mode}: median of its links {_gbps(item.value)} vs {_gbps(gpu_pool[item.mode])} "
                             f"for the case's GPUs ({_pct(item.value, gpu_pool[item.mode])}, {_score_text(item)}); "
                             f"node median {_gbps(node_median[item.mode])}; links {each}")
            out.append((host, VerdictReason(
                "link", _worst([i.severity for i in items]), gi.label(),
                f"the links of {gi.label()} are slow ({node.size or '?'} transfers): " + "; ".join(parts),
                (REMEDY_NET_GPU if forced else REMEDY_GPU).format(g=gi.label(), i=g), gi, node.case)))
        by_pair: dict = {}
        for item in flagged_links:
            a, b = item.key
            if a in slow_gpus or b in slow_gpus:
                continue            # named with its GPU
            by_pair.setdefault((min(a, b), max(a, b)), []).append(item)
        for (a, b), items in sorted(by_pair.items()):
            uni = [i for i in items if i.mode == "uni"]
            if len(uni) == 1 and not any(i.mode == "bi" for i in items):
                (src, dst), arrow = uni[0].key, "->"
            else:
                src, dst, arrow = a, b, "<->"
            subject = f"gpu {src} {arrow} gpu {dst}"
            ga, gb = ident(src), ident(dst)
            parts = []
            for item in sorted(items, key=lambda i: (MODES.index(i.mode), i.key)):
                s, d = item.key
                what = f"{s} -> {d}" if item.mode == "uni" else f"{s} <-> {d}"
                parts.append(f"{item.mode} {what}: {_gbps(item.value)} vs the node's median "
                             f"{_gbps(node_median[item.mode])} ({_pct(item.value, node_median[item.mode])}; "
                             f"{_score_text(item)} over the case's {len(links[item.mode])} {item.mode} links, "
                             f"median {_gbps(pool[item.mode])})")
            remedy = (REMEDY_NET_LINK if forced else REMEDY_LINK).format(a=ga.label(), b=gb.label(), ia=src, ib=dst)
            out.append((host, VerdictReason(
                "link", _worst([i.severity for i in items]), subject,
                f"{ga.label()} {arrow} {gb.label()} is slow "
                f"({node.size or '?'} transfers): " + "; ".join(parts), remedy, ga, node.case)))
    return out


def _inside(base: str, *parts) -> str | None:
    """``base/parts...`` when every part is a plain relative path that stays inside ``base``, else None."""
    if not all(isinstance(p, str) and p and not os.path.isabs(p) for p in parts):
        return None
    path = os.path.normpath(os.path.join(base, *parts))
    return path if path.startswith(os.path.normpath(base) + os.sep) else None


def run_identities(cases, run_dir) -> dict:
    """{host: {index: GpuIdentity}} from the health files (results.health.gpu_identities) of the node directories
    of ``cases``' rounds (CaseSummary) under ``run_dir``: the first node directory of a host that names its GPUs."""
    out: dict = {}
    for case in cases:
        for r in case.rounds:
            for n in r.nodes:
                if n.host in out or not n.host:
                    continue
                node_dir = _inside(str(run_dir), r.dir, n.node)
                ids = gpu_identities(node_dir) if node_dir and os.path.isdir(node_dir) else {}
                if ids:
                    out[n.host] = ids
    return out


def link_findings(summary, run_dir=None, identities=None) -> list:
    """The link findings of a run: [(host, VerdictReason)] (source ``link``), what results.verdict.node_verdicts
    takes as ``links``. ``summary``: the run's Summary; ``identities``: {host: {index: GpuIdentity}}, the cards of
    every host; for a host it does not name, the health files of its node directories under ``run_dir`` (when
    given: the only I/O). A GPU the benchmark reported a UUID for is matched by it; a GPU nobody described is named
    by its index and what the benchmark reported."""
    identities = dict(identities or {})
    nodes = link_matrix(summary)
    if run_dir is not None and any(n.host not in identities for n in nodes):
        found = run_identities([c for c in summary.cases if c.name in {n.case for n in nodes}], run_dir)
        identities.update({h: ids for h, ids in found.items() if h not in identities})
    by_case: dict = {}
    for node in nodes:
        by_case.setdefault(node.case, []).append(node)
    out = []
    for case_nodes in by_case.values():
        out += _case_findings(case_nodes, identities)
    return out
