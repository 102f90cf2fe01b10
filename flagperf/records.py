"""The typed records that cross the driver's modules and are stored in the run directory.

- :class:`Failure`: why a round (or, in an ``each`` case, one host's job) did not pass, and where;
- :class:`ReferenceVerdict`: one metric of a case against its reference figure (flagperf.references);
- :class:`Ranking` and :class:`RankEntry`: an ``each`` case's hosts and GPUs ranked (flagperf.results.slownodes);
- :class:`GpuIdentity`: which physical card a GPU index of a host is (UUID, serial, PCI bus id);
- :class:`HealthFinding`: one health field of a GPU or host that is outside what a healthy node shows;
- :class:`VerdictReason` and :class:`NodeVerdict`: one verdict per node (accept, degraded, reject) with every reason;
- :class:`RunRecord`: ``run.json``, what `flagperf collect` needs to fetch a run again later.

Each has ``to_dict()`` (the form summary.json or run.json stores, docs/results.md) and ``from_dict()``, which
reads files written by earlier versions too. Plain data only: no I/O but :meth:`RunRecord.load`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from flagperf_contract import ContractError, read_json_data

RUN_SCHEMA = "flagperf.run/1"


class RecordError(ValueError):
    """A stored record does not follow its schema; the message says what is wrong (and names the file)."""


def _opt_tuple(value) -> tuple | None:
    return None if value is None else tuple(value)


# -- a round's failure ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Failure:
    """Why a round did not pass: ``reason`` always; where a rank failed, ``node``, ``rank``, ``exit_code``,
    ``log`` (its path on the driver) and ``last_lines`` (the end of that log); ``nodes``: every node that did not
    pass (an ``each`` round)."""

    reason: str
    node: str | None = None
    rank: int | None = None
    exit_code: int | None = None
    log: str | None = None
    last_lines: tuple | None = None
    nodes: tuple | None = None

    def to_dict(self) -> dict:
        d: dict = {"reason": self.reason}
        if self.rank is not None:       # a rank's failure names all of where it happened, null or not
            d.update(node=self.node, rank=self.rank, exit_code=self.exit_code, log=self.log,
                     last_lines=list(self.last_lines or ()))
        else:
            where = {"node": self.node, "exit_code": self.exit_code, "log": self.log,
                     "last_lines": None if self.last_lines is None else list(self.last_lines)}
            d.update((k, v) for k, v in where.items() if v is not None)
        if self.nodes is not None:
            d["nodes"] = list(self.nodes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Failure":
        if not isinstance(d, dict):
            raise RecordError(f"failure: expected a mapping, got {d!r:.60}")
        return cls(str(d.get("reason", "")), d.get("node"), d.get("rank"), d.get("exit_code"), d.get("log"),
                   _opt_tuple(d.get("last_lines")), _opt_tuple(d.get("nodes")))


# -- a reference verdict ----------------------------------------------------------------------------------------

# Verdict results: the metric's median over the passed rounds against the reference.
WITHIN = "within"               # inside the tolerance
BELOW = "below"                 # worse than the reference by more than ``tolerance``: fails the case
ABOVE = "above"                 # better by more than ``tolerance``: flagged; fails only past ``better_tolerance``
NOT_MEASURED = "not_measured"   # the passed rounds did not report the metric
UNIT_MISMATCH = "unit_mismatch"  # measured in another unit than the reference's: fails the case
SUSPECT = "suspect"             # the figure cannot be what the case claims to measure (``note`` says why): flagged


@dataclass(frozen=True)
class ReferenceVerdict:
    """One metric's median over a case's passed rounds against its reference figure (docs/references.md)."""

    metric: str
    measured: float | None
    rounds: int
    unit: str
    expected: float
    tolerance: float
    better_tolerance: float | None = None
    higher_is_better: bool = True
    source: str = ""
    reference: str = ""             # the reference file used
    deviation: float | None = None  # measured / expected - 1
    result: str = WITHIN
    ok: bool = True                 # False fails the case (below_reference)
    note: str = ""
    measured_unit: str | None = None    # the unit the rounds reported (a unit mismatch)

    def to_dict(self) -> dict:
        d = {"metric": self.metric, "measured": self.measured, "rounds": self.rounds, "unit": self.unit,
             "expected": self.expected, "tolerance": self.tolerance, "better_tolerance": self.better_tolerance,
             "higher_is_better": self.higher_is_better, "source": self.source, "reference": self.reference,
             "deviation": self.deviation, "result": self.result, "ok": self.ok}
        if self.note:
            d["note"] = self.note
        if self.measured_unit is not None:
            d["measured_unit"] = self.measured_unit
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ReferenceVerdict":
        if not isinstance(d, dict):
            raise RecordError(f"verdict: expected a mapping, got {d!r:.60}")
        expected = d.get("expected")
        if isinstance(expected, bool) or not isinstance(expected, (int, float)):
            raise RecordError(f"verdict {d.get('metric')!r}: expected: expected a number, got {expected!r:.60}")
        return cls(str(d.get("metric", "")), d.get("measured"), int(d.get("rounds") or 0), str(d.get("unit") or ""),
                   expected, d.get("tolerance") or 0.0, d.get("better_tolerance"),
                   d.get("higher_is_better", True) is not False, str(d.get("source") or ""),
                   str(d.get("reference") or ""), d.get("deviation"), str(d.get("result") or WITHIN),
                   bool(d.get("ok", True)), str(d.get("note") or ""), d.get("measured_unit"))


# -- rankings of an each case ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankEntry:
    """A host (``gpu`` None) or one GPU of a host, with its value (median over its passed rounds), its robust
    score (positive = worse), whether it is an outlier, its rank (hosts among the hosts, a GPU among its host's
    GPUs) and the passed rounds counted; a GPU (``gpu``: its local rank) with the card it was (``identity``) where
    the run knew it."""

    host: str
    gpu: int | None
    value: float | None
    score: float | None
    outlier: bool
    rank: int | None = None
    rounds: int = 0
    identity: GpuIdentity | None = None

    def to_dict(self) -> dict:
        d: dict = {"host": self.host, "gpu": self.gpu, "value": self.value, "score": self.score,
                   "outlier": self.outlier, "rank": self.rank, "rounds": self.rounds}
        if self.identity is not None:
            d["identity"] = self.identity.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RankEntry":
        if not isinstance(d, dict):
            raise RecordError(f"ranking entry: expected a mapping, got {d!r:.60}")
        identity = GpuIdentity.from_dict(d["identity"]) if d.get("identity") is not None else None
        return cls(str(d.get("host", "")), d.get("gpu"), d.get("value"), d.get("score"), bool(d.get("outlier")),
                   d.get("rank"), int(d.get("rounds") or 0), identity)


@dataclass(frozen=True)
class Ranking:
    """One ``each`` case's ranking: hosts first (best first), then every GPU grouped by host; ``failed_hosts``:
    hosts without a passed round (not ranked)."""

    case: str
    metric: str | None
    unit: str | None
    higher_is_better: bool | None
    rule: str
    median: float | None
    entries: tuple = ()             # (RankEntry, ...)
    failed_hosts: tuple = ()

    @property
    def outliers(self) -> list:
        return [e for e in self.entries if e.outlier]

    def to_dict(self) -> dict:
        return {"case": self.case, "metric": self.metric, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "rule": self.rule, "median": self.median, "entries": [e.to_dict() for e in self.entries],
                "failed_hosts": list(self.failed_hosts)}

    @classmethod
    def from_dict(cls, d: dict) -> "Ranking":
        if not isinstance(d, dict):
            raise RecordError(f"ranking: expected a mapping, got {d!r:.60}")
        return cls(str(d.get("case", "")), d.get("metric"), d.get("unit"), d.get("higher_is_better"),
                   str(d.get("rule") or ""), d.get("median"),
                   tuple(RankEntry.from_dict(e) for e in d.get("entries") or []), tuple(d.get("failed_hosts") or []))


# -- GPU identity, health, node verdicts --------------------------------------------------------------------------

UNKNOWN = "unknown"     # a field a device, driver or VM does not expose: never read as healthy
VERDICTS = ("accept", "degraded", "reject")     # best first
SEVERITIES = ("degraded", "reject")
REASON_SOURCES = ("check", "health", "failure", "reference", "ranking", "link")


@dataclass(frozen=True)
class GpuIdentity:
    """Which card a GPU of a host is: its index on the host (as the driver numbers it), UUID, serial and PCI bus
    id ("unknown" where the device does not say), so that a person can pull the right one."""

    index: int
    uuid: str = UNKNOWN
    serial: str = UNKNOWN
    pci_bus_id: str = UNKNOWN
    name: str = UNKNOWN

    def label(self) -> str:
        """``gpu 2 (GPU-5c1..., serial 1654922001234, pci 00000000:19:00.0)``."""
        return f"gpu {self.index} ({self.uuid}, serial {self.serial}, pci {self.pci_bus_id})"

    def to_dict(self) -> dict:
        return {"index": self.index, "uuid": self.uuid, "serial": self.serial, "pci_bus_id": self.pci_bus_id,
                "name": self.name}

    @classmethod
    def from_dict(cls, d: dict) -> "GpuIdentity":
        if not isinstance(d, dict) or not isinstance(d.get("index"), int) or isinstance(d.get("index"), bool):
            raise RecordError(f"gpu identity: expected a mapping with an integer index, got {d!r:.60}")
        return cls(d["index"], *(str(d.get(k) or UNKNOWN) for k in ("uuid", "serial", "pci_bus_id", "name")))


@dataclass(frozen=True)
class HealthFinding:
    """A health field outside what a healthy node shows: ``severity`` reject or degraded, the GPU it concerns
    (None: the host), the field, the value seen, why it matters and what to do."""

    host: str
    severity: str
    field: str
    value: object
    reason: str
    remedy: str
    gpu: GpuIdentity | None = None

    def to_dict(self) -> dict:
        return {"host": self.host, "severity": self.severity, "field": self.field, "value": self.value,
                "reason": self.reason, "remedy": self.remedy, "gpu": self.gpu.to_dict() if self.gpu else None}

    @classmethod
    def from_dict(cls, d: dict) -> "HealthFinding":
        if not isinstance(d, dict) or d.get("severity") not in SEVERITIES:
            raise RecordError(f"health finding: expected a mapping with severity {' or '.join(SEVERITIES)}, "
                              f"got {d!r:.60}")
        gpu = GpuIdentity.from_dict(d["gpu"]) if d.get("gpu") is not None else None
        return cls(str(d.get("host", "")), d["severity"], str(d.get("field", "")), d.get("value"),
                   str(d.get("reason", "")), str(d.get("remedy", "")), gpu)


@dataclass(frozen=True)
class VerdictReason:
    """One reason of a node's verdict: where it comes from (``source``: check, health, failure, reference,
    ranking, link), how bad (degraded or reject), what it concerns (``subject``: "node", a GPU's label, or a link
    "gpu 0 -> gpu 1" / "host a <-> host b"), the evidence and a remedy line."""

    source: str
    severity: str
    subject: str
    detail: str
    remedy: str
    gpu: GpuIdentity | None = None
    case: str | None = None

    def to_dict(self) -> dict:
        return {"source": self.source, "severity": self.severity, "subject": self.subject, "detail": self.detail,
                "remedy": self.remedy, "gpu": self.gpu.to_dict() if self.gpu else None, "case": self.case}

    @classmethod
    def from_dict(cls, d: dict) -> "VerdictReason":
        if not isinstance(d, dict) or d.get("source") not in REASON_SOURCES or d.get("severity") not in SEVERITIES:
            raise RecordError(f"verdict reason: expected source one of {', '.join(REASON_SOURCES)} and severity "
                              f"{' or '.join(SEVERITIES)}, got {d!r:.80}")
        gpu = GpuIdentity.from_dict(d["gpu"]) if d.get("gpu") is not None else None
        return cls(d["source"], d["severity"], str(d.get("subject", "")), str(d.get("detail", "")),
                   str(d.get("remedy", "")), gpu, d.get("case"))


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict: ``accept`` (no reason), ``degraded`` (only degraded reasons) or ``reject`` (a reject
    reason), with every reason."""

    host: str
    verdict: str
    reasons: tuple = ()         # (VerdictReason, ...)
    gpus: tuple = ()            # (GpuIdentity, ...): the node's GPUs as the run saw them

    @classmethod
    def of(cls, host: str, reasons, gpus=()) -> "NodeVerdict":
        severities = {r.severity for r in reasons}
        verdict = "reject" if "reject" in severities else "degraded" if severities else "accept"
        return cls(host, verdict, tuple(reasons), tuple(gpus))

    def to_dict(self) -> dict:
        return {"host": self.host, "verdict": self.verdict, "reasons": [r.to_dict() for r in self.reasons],
                "gpus": [g.to_dict() for g in self.gpus]}

    @classmethod
    def from_dict(cls, d: dict) -> "NodeVerdict":
        if not isinstance(d, dict) or d.get("verdict") not in VERDICTS:
            raise RecordError(f"node verdict: expected a mapping with verdict one of {', '.join(VERDICTS)}, "
                              f"got {d!r:.60}")
        return cls(str(d.get("host", "")), d["verdict"],
                   tuple(VerdictReason.from_dict(r) for r in d.get("reasons") or []),
                   tuple(GpuIdentity.from_dict(g) for g in d.get("gpus") or []))


# -- run.json ---------------------------------------------------------------------------------------------------

_RUN_KEYS = ("schema", "run_id", "flagperf_version", "backend", "runtime", "nodes")


@dataclass(frozen=True)
class RunRecord:
    """``run.json`` (schema flagperf.run/1): the run's identity and every planned node with its directories;
    ``backend_fields``: the backend's own keys (how to reach its hosts again, Backend.run_record_fields), stored
    at the top level."""

    run_id: str
    flagperf_version: str
    backend: str
    runtime: str
    nodes: list = field(default_factory=list)    # {case, round, host, node, node_dir, local_dir}
    backend_fields: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"schema": RUN_SCHEMA, "run_id": self.run_id, "flagperf_version": self.flagperf_version,
                "backend": self.backend, "runtime": self.runtime, **self.backend_fields,
                "nodes": [dict(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, d) -> "RunRecord":
        if not isinstance(d, dict) or d.get("schema") != RUN_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise RecordError(f"expected schema {RUN_SCHEMA!r}, got {got!r}")
        if not isinstance(d.get("run_id"), str) or not d["run_id"]:
            raise RecordError("run_id: expected a non-empty string")
        nodes = d.get("nodes", [])
        if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
            raise RecordError("nodes: expected a list of mappings")
        return cls(d["run_id"], str(d.get("flagperf_version", "")), str(d.get("backend") or ""),
                   str(d.get("runtime") or ""), [dict(n) for n in nodes],
                   {k: v for k, v in d.items() if k not in _RUN_KEYS})

    @classmethod
    def load(cls, path) -> "RunRecord":
        path = Path(path)
        try:
            data = read_json_data(path)
        except FileNotFoundError:
            raise RecordError(f"{path}: not found; is {path.parent} a flagperf run directory?") from None
        except ContractError as exc:
            raise RecordError(str(exc)) from None
        try:
            return cls.from_dict(data)
        except RecordError as exc:
            raise RecordError(f"{path}: {exc}") from None
