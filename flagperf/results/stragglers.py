"""The straggler view of a training case, read back from its rounds. Pure functions, no I/O.

The training benchmarks (llm, resnet50) put ``checks.details.stragglers`` into rank 0's FINISHED line, or into
its CHECK_FAILED line when the run's own check failed (benchmarks/common/stragglers.py): every rank's probe of
its compute alone, gathered, and judged by one rule (``judged_by``: each rank's best probe pass against the median
over the ranks; ``margin_pct``; ``rule`` in words),
with the ``slowest`` rank (rank, node, host, local rank, GPU, ``vs_median_pct``) and the ``flagged`` ranks. This
module reads that record from every passed round, and every round whose benchmark's own check failed (a slow
GPU can be why: the job ran fewer steps in its time budget and missed its convergence target), whose ``flagged``
list is not empty, and gives one :class:`RoundStragglers` per such round, and a short note for the case's row.

Everything in the record came from a rank: it is checked here (types, numbers finite, lists and texts capped, one
line) and escaped by the reporters for their destination (flagperf.untrusted). A straggler is a finding, not a
failed check: the case's status and the node verdicts are not changed by it.

docs/results.md ("Stragglers") describes the summary.json form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flagperf.untrusted import finite_number

MAX_FLAGGED = 4096          # ranks of one flagged list that are kept (a FINISHED line is untrusted)
MAX_TEXT = 120              # characters kept of a host, GPU id or judged_by text
MAX_RULE = 400              # characters kept of the rule's text


def _float(v) -> float | None:
    return float(v) if finite_number(v) else None


def _index(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 31 else None


def _text(v, limit: int = MAX_TEXT) -> str:
    """A text of the record, one line (whitespace collapsed) and capped; '' for anything but a string. Control
    characters stay: the reporters make them visible (flagperf.untrusted)."""
    return " ".join(v.split())[:limit] if isinstance(v, str) else ""


def _reported_gpu(gpu) -> str:
    """A rank's GPU as the benchmark wrote it ({"uuid", "pci_bus_id", "name"}): its PCI bus id, else its uuid, else
    its name; '' when none (CPU ranks)."""
    if not isinstance(gpu, dict):
        return ""
    return next((t for t in (_text(gpu.get(k)) for k in ("pci_bus_id", "uuid", "name")) if t), "")


@dataclass(frozen=True)
class RoundStragglers:
    round: int
    slowest: dict               # {rank, node, host, local_rank, gpu (text), vs_median_pct}
    flagged: tuple              # global ranks
    margin_pct: float | None
    judged_by: str              # "min" (each rank's best probe pass); "median" in records written before it
    rule: str
    check_failed: bool = False  # read from a round whose benchmark's own check failed (its CHECK_FAILED line)

    def where(self) -> str:
        """'localhost, local rank 3, GPU 00000000:00:09.0' of the slowest rank (what is known of it)."""
        s = self.slowest
        parts = [s["host"] or (f"node {s['node']}" if s["node"] is not None else ""),
                 f"local rank {s['local_rank']}" if s["local_rank"] is not None else "",
                 f"GPU {s['gpu']}" if s["gpu"] else ""]
        return ", ".join(p for p in parts if p)

    def note(self) -> str:
        """'straggler: rank 3 (localhost, local rank 3, GPU ...) +16.7% over the median probe' (several flagged:
        'stragglers: ranks 1, 3; slowest rank 3 (...) ...')."""
        s, where = self.slowest, self.where()
        pct = f" {s['vs_median_pct']:+.1f}% over the median probe" if s["vs_median_pct"] is not None else ""
        slow = f"rank {s['rank']}{f' ({where})' if where else ''}{pct}"
        if len(self.flagged) == 1 and self.flagged[0] == s["rank"]:
            return f"straggler: {slow}"
        return f"stragglers: ranks {', '.join(str(r) for r in self.flagged)}; slowest {slow}"

    def to_dict(self) -> dict:
        return {"round": self.round, "slowest": dict(self.slowest), "flagged": list(self.flagged),
                "margin_pct": self.margin_pct, "judged_by": self.judged_by, "rule": self.rule,
                "check_failed": self.check_failed}


def of_finished(round_no: int, finished) -> RoundStragglers | None:
    """The straggler record of a FINISHED payload's ``checks.details.stragglers``, checked; None when it has none,
    flags no rank or is not one the benchmarks write."""
    return of_checks(round_no, finished.get("checks") if isinstance(finished, dict) else None)


def of_checks(round_no: int, checks, check_failed: bool = False) -> RoundStragglers | None:
    """The straggler record of a ``checks`` mapping (a FINISHED payload's, or a CHECK_FAILED line's:
    ``check_failed``), checked as of_finished() does."""
    details = checks.get("details") if isinstance(checks, dict) else None
    raw = details.get("stragglers") if isinstance(details, dict) else None
    if not isinstance(raw, dict):
        return None
    flagged = raw.get("flagged")
    if not isinstance(flagged, list) or not flagged:
        return None
    ranks = tuple(r for r in (_index(x) for x in flagged[:MAX_FLAGGED]) if r is not None)
    slowest = raw.get("slowest")
    if not ranks or not isinstance(slowest, dict) or _index(slowest.get("rank")) is None:
        return None
    s = {"rank": _index(slowest.get("rank")), "node": _index(slowest.get("node")), "host": _text(slowest.get("host")),
         "local_rank": _index(slowest.get("local_rank")), "gpu": _reported_gpu(slowest.get("gpu")),
         "vs_median_pct": _float(slowest.get("vs_median_pct"))}
    return RoundStragglers(round_no, s, ranks, _float(raw.get("margin_pct")),
                           _text(raw.get("judged_by")) or "median", _text(raw.get("rule"), MAX_RULE), check_failed)


def _reporting(case) -> list:
    """(round, its checks, failed its check?) of every round of ``case`` that can report a straggler view: a passed
    round (its FINISHED line's checks) and a round whose benchmark's own check failed (its CHECK_FAILED line's)."""
    passed = {id(r) for r in case.passed_rounds}
    return [(r, r.finished.get("checks"), False) if id(r) in passed else (r, r.check_failed, True)
            for r in case.rounds if id(r) in passed or isinstance(r.check_failed, dict)]


def case_stragglers(case) -> list[RoundStragglers]:
    """One :class:`RoundStragglers` per round of ``case`` whose record flags a rank (a passed round's FINISHED
    line, a failed round's CHECK_FAILED line), by round."""
    found = (of_checks(r.round, checks, failed) for r, checks, failed in _reporting(case))
    return [s for s in found if s is not None]


def case_note(case) -> str:
    """The case row's note: the flagged round with the largest excess, and in how many of the rounds that report
    a straggler view (passed, or failed their own check) a rank was flagged when there were several ('... in 2 of
    3 rounds'); a round that failed its check says so; '' when none was flagged."""
    found = case_stragglers(case)
    if not found:
        return ""
    worst = max(found, key=lambda s: s.slowest["vs_median_pct"] if s.slowest["vs_median_pct"] is not None
                else -math.inf)
    judged = len(_reporting(case))
    failed = "; that round failed its check" if worst.check_failed else ""
    if judged > 1:
        return worst.note() + f" (round {worst.round}{failed}; flagged in {len(found)} of {judged} rounds)"
    return worst.note() + (f" (round {worst.round} failed its check)" if worst.check_failed else "")
