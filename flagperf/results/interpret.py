"""Round interpretation: from what the hosts left behind to one status. Pure functions, no I/O.

A round's evidence is what the driver saw (how the wait ended) and what it read back from every node
(``ranks.json``, rank 0's PerfLog records, the tails of the logs, and FlagPerf's own result lines when rank 0
printed no FINISHED line). :func:`interpret_round` turns it into a
:class:`Status` and, unless the round passed, a :class:`~flagperf.records.Failure` saying why, where, and the
last lines of the log that shows it; :func:`interpret_each_round` judges an ``each`` round host by host.
:func:`preparation_failed` and :func:`not_run` give the verdicts of rounds that never started.
:func:`case_status` and :func:`run_status` fold rounds into cases and cases into a run, and
:func:`run_exit_code` turns a run into the exit code of ``flagperf run``. Nothing else decides a status.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field, replace

from flagperf.errors import EXIT_CASE_FAILED, EXIT_HOSTS, EXIT_INTERRUPTED, EXIT_OK
from flagperf.records import Failure
from flagperf.results.flagperf_lines import build_finished, is_flagperf_finished
from flagperf.results.perflog import UNREADABLE
from flagperf_contract import LAUNCHER_CANNOT_WRITE_EXIT, Finished, RankReport, validate_finished


class Status(str, enum.Enum):
    PASSED = "passed"
    SKIPPED = "skipped"             # every rank said SKIPPED: this host cannot run the case (no nvcc, no GPU)
    FAILED = "failed"               # a rank or node failed, or the result is missing or invalid
    TIMEOUT = "timeout"             # CASE_TIMEOUT reached
    INTERRUPTED = "interrupted"     # SIGINT / SIGTERM while it ran
    ERROR = "error"                 # the backend could not prepare, start or reach a node
    NOT_RUN = "not_run"             # never started (a host failed its check, or the run stopped before it)
    BELOW_REFERENCE = "below_reference"  # a case whose rounds passed, with a metric outside its reference

    def __str__(self) -> str:
        return self.value


class WaitEnd(str, enum.Enum):
    """How the driver's wait for the node launchers ended."""

    COMPLETED = "completed"         # every launcher exited 0
    NODE_FAILED = "node_failed"     # a launcher exited non-zero (the others were stopped)
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    ERROR = "error"                 # the backend failed before or while starting the nodes
    HOST_LOST = "host_lost"         # a host stopped answering its heartbeat (frozen, or its network is gone)


@dataclass
class Wait:
    end: WaitEnd
    reason: str = ""
    node: str | None = None         # the failed node's label (NODE_FAILED)


@dataclass
class NodeEvidence:
    label: str
    host: str
    node_rank: int
    ranks_expected: tuple = ()                      # the global ranks the plan put on this node
    launcher_exit: int | None = None
    ranks: RankReport | None = None                 # ranks.json, when present and valid
    ranks_problem: str | None = None                # why ranks.json could not be used (names the file)
    rank_logs: dict = field(default_factory=dict)   # {rank: path of rank<R>.out.log}
    rank_tails: dict = field(default_factory=dict)  # {rank: last lines}
    output_log: str = ""                            # the node launcher's (or container's) own output
    output_tail: list = field(default_factory=list)
    mode: str = "ranks"                             # launch mode: "node" = one node command stands for the ranks
    benchmark: str = ""                             # the model this node ran
    nproc: int = 0                                  # the ranks the plan put on this node (0: not known)
    flagperf_results: list = field(default_factory=list)  # flagperf_lines.FlagPerfResult of the node's logs
    flagperf_refused: list = field(default_factory=list)  # training summary lines that are no result, and why


@dataclass
class RoundEvidence:
    wait: Wait
    nodes: list                                     # [NodeEvidence], node 0 first
    rank0_records: list = field(default_factory=list)  # PerfLog records of global rank 0 (node 0's command)


@dataclass
class Verdict:
    status: Status
    failure: Failure | None = None
    finished: Finished | None = None


def describe_exit(code) -> str:
    """'exit code 7', or 'killed by SIGKILL (exit code -9)' for a process ended by a signal."""
    if isinstance(code, int) and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            pass
    return "no exit code recorded" if code is None else f"exit code {code}"


def _first_failed_rank(nodes) -> tuple:
    """(node, RankRecord) of the rank that failed first, as the node launchers recorded it; (None, None)."""
    for n in nodes:
        if n.ranks is not None and n.ranks.first_failure is not None:
            rec = n.ranks.rank(n.ranks.first_failure)
            if rec is not None:
                return n, rec
    for n in nodes:     # a failure the launcher did not flag as first (it was stopping already)
        for rec in (n.ranks.ranks if n.ranks else []):
            if rec.exit_code not in (0, None) and not rec.stopped_by_launcher:
                return n, rec
    return None, None


def _who(node, rec) -> str:
    return "the node command" if node.mode == "node" else f"rank {rec.rank}"


def _rank_failure(node, rec, reason=None) -> Failure:
    return Failure(reason or f"{_who(node, rec)} failed ({describe_exit(rec.exit_code)})", node.label, rec.rank,
                   rec.exit_code, node.rank_logs.get(rec.rank, ""), tuple(node.rank_tails.get(rec.rank, [])))


def interpret_round(ev: RoundEvidence) -> Verdict:
    """The one place a round's status is decided."""
    node, rec = _first_failed_rank(ev.nodes)
    w = ev.wait
    if w.end in (WaitEnd.INTERRUPTED, WaitEnd.TIMEOUT, WaitEnd.ERROR):
        status = {WaitEnd.INTERRUPTED: Status.INTERRUPTED, WaitEnd.TIMEOUT: Status.TIMEOUT,
                  WaitEnd.ERROR: Status.ERROR}[w.end]
        failure = Failure(w.reason)
        if node is not None:
            failure = replace(_rank_failure(node, rec), reason=f"{w.reason}; {_who(node, rec)} had failed "
                                                               f"({describe_exit(rec.exit_code)})")
        return Verdict(status, failure)
    if w.end == WaitEnd.HOST_LOST:
        return Verdict(Status.FAILED, Failure(w.reason, node=w.node))
    if node is not None:
        return Verdict(Status.FAILED, _rank_failure(node, rec))
    if w.end == WaitEnd.NODE_FAILED:
        return Verdict(Status.FAILED, _node_failure(ev, w))
    # Every launcher exited 0: trust the launchers' own records, then rank 0's result.
    for n in ev.nodes:
        if n.ranks_problem:
            return Verdict(Status.FAILED, Failure(f"node {n.label}: {n.ranks_problem}", n.label, log=n.output_log,
                                                  last_lines=tuple(n.output_tail)))
        got = sorted(r.rank for r in n.ranks.ranks) if n.ranks else []
        if n.ranks_expected and got != sorted(n.ranks_expected):
            return Verdict(Status.FAILED, Failure(f"node {n.label}: ranks.json lists ranks {got}, the plan "
                                                  f"started {sorted(n.ranks_expected)}", n.label))
    return _rank0_result(ev)


def _node_failure(ev: RoundEvidence, w: Wait) -> Failure:
    """A node launcher exited non-zero without a rank to blame: the launcher's own exit and output."""
    reason = w.reason or f"node {w.node} failed"
    bad = next((n for n in ev.nodes if n.label == w.node), None)
    if bad is None:
        return Failure(reason, w.node)
    if bad.launcher_exit == LAUNCHER_CANNOT_WRITE_EXIT:
        reason += (f"; its launcher could not write the node directory on host {bad.host} "
                   f"(disk full, out of inodes or read-only: see the host's free space)")
    elif bad.ranks_problem:
        reason += f"; {bad.ranks_problem}"
    return Failure(reason, w.node, exit_code=bad.launcher_exit, log=bad.output_log,
                   last_lines=tuple(bad.output_tail))


def _rank0_result(ev: RoundEvidence) -> Verdict:
    """Every node ended well: rank 0's FINISHED line (or SKIPPED, or FlagPerf's own result lines) decides."""
    records = ev.rank0_records
    finished = [r for r in records if r.get("event") == "FINISHED" and not is_flagperf_finished(r)]
    skipped = [r for r in records if r.get("event") == "SKIPPED"]
    node0 = ev.nodes[0] if ev.nodes else None
    rec0 = node0.ranks.rank(0) if node0 and node0.ranks else None

    def where(reason: str) -> Failure:
        return Failure(reason, node0.label if node0 else None, 0, rec0.exit_code if rec0 else None,
                       node0.rank_logs.get(0, "") if node0 else "",
                       tuple(node0.rank_tails.get(0, [])) if node0 else ())

    if not finished and skipped:
        return Verdict(Status.SKIPPED, Failure(f"skipped: {skipped[-1].get('reason') or 'no reason given'}"))
    if not finished:
        # FlagPerf's formats: [FlagPerf Result] lines of any log, or a FlagPerf PerfLog FINISHED of rank 0
        theirs = next((r for r in reversed(records) if is_flagperf_finished(r)), None)
        results = [r for n in ev.nodes for r in n.flagperf_results]
        not_results = [why for n in ev.nodes for why in n.flagperf_refused]
        payload = build_finished(node0.benchmark if node0 else "", results, theirs,
                                 rec0.duration_s if rec0 else None, not_results)
        who = "the node command" if node0 is not None and node0.mode == "node" else "rank 0"
        if payload is not None and payload["checks"]["passed"] is not True:     # FlagPerf operation's correctness
            return Verdict(Status.FAILED, where(f"invalid result: {who} printed its correctness against the "
                                                f"reference: False"))
        if payload is not None:
            return Verdict(Status.PASSED, None, Finished.from_dict(payload))
        refused = next((r for r in reversed(records) if r.get("event") == UNREADABLE), None)
        if refused is not None:
            return Verdict(Status.FAILED, where(f"invalid result: {who} printed {refused.get('reason')}"))
        if not_results:
            return Verdict(Status.FAILED, where(f"invalid result: {who} printed no FINISHED line, and its training "
                                                f"summary is no result: {not_results[0]}"))
        return Verdict(Status.FAILED, where(f"{who} printed no FINISHED line and no [FlagPerf Result] lines"))
    problems = validate_finished(finished[-1])
    world = sum(n.nproc for n in ev.nodes)
    if not problems and world and all(n.nproc for n in ev.nodes):
        problems = _per_rank_length(finished[-1], world)
    if problems:
        return Verdict(Status.FAILED, where(f"invalid result: {'; '.join(problems)}"))
    return Verdict(Status.PASSED, None, Finished.from_dict(finished[-1]))


def failed_checks(records) -> dict | None:
    """The ``checks`` of rank 0's last CHECK_FAILED line (a benchmark whose own check failed: its details, such as
    a training run's straggler view, are still findings), or None. Untrusted: its readers check what they use."""
    for r in reversed(records):
        if r.get("event") == "CHECK_FAILED":
            return r["checks"] if isinstance(r.get("checks"), dict) else None
    return None


def _per_rank_length(payload: dict, world: int) -> list:
    """A per-rank list (checks.details.per_rank) longer than the ranks the round's nodes ran, as a problem;
    [] otherwise."""
    per_rank = ((payload.get("checks") or {}).get("details") or {}).get("per_rank")
    values = per_rank.get("values") if isinstance(per_rank, dict) else None
    if isinstance(values, list) and len(values) > world:
        return [f"checks.details.per_rank.values: {len(values)} values, but {world} rank(s) ran"]
    return []


def interpret_each_round(wait: Wait, node_waits: dict, evidence, records: dict, jobs=None) -> tuple:
    """An ``each`` round (one independent job per host) or a ``pairs`` round (``jobs``: the node labels of every
    2-node job, node 0 first): (the round's Verdict, [(node label, Verdict)] in the nodes' order). Every job is
    judged on its own wait (``node_waits``: {label: Wait}; of a job's nodes, the first that did not complete, in
    the order they ended) and its own rank 0's PerfLog ``records`` ({label: records}, of its node 0); a job
    without a wait of its own ended with the round (interrupted, timed out, errored) or completed. Every node of
    a job gets the job's verdict. A signal stops the whole run, so an interrupted round interrupts every job.
    The jobs' verdicts fold into the round's by :func:`hosts_verdict`."""
    by_label = {ev.label: ev for ev in evidence}
    groups = [list(j) for j in jobs] if jobs else [[ev.label] for ev in evidence]
    job_verdicts: list = []
    per_node: dict = {}
    for job in groups:
        evs = [by_label[label] for label in job if label in by_label]
        if not evs:
            continue
        ended = [w for label, w in node_waits.items() if label in job]
        own = next((w for w in ended if w.end != WaitEnd.COMPLETED), None)
        if own is None and len(ended) == len(job):
            own = Wait(WaitEnd.COMPLETED)
        if wait.end == WaitEnd.INTERRUPTED or own is None:
            own = wait if wait.end in (WaitEnd.INTERRUPTED, WaitEnd.TIMEOUT, WaitEnd.ERROR) else \
                Wait(WaitEnd.COMPLETED)
        verdict = interpret_round(RoundEvidence(own, evs, records.get(evs[0].label, [])))
        job_verdicts.append((" <-> ".join(ev.host for ev in evs) if jobs else evs[0].label, verdict, job))
        per_node.update((label, verdict) for label in job)
    verdict = hosts_verdict([(label, v) for label, v, _ in job_verdicts], "pair jobs" if jobs else "hosts")
    if jobs and verdict.failure is not None and verdict.failure.nodes is not None:     # the nodes, not the jobs
        bad = set(verdict.failure.nodes)
        verdict = replace(verdict, failure=replace(verdict.failure, nodes=tuple(
            n for label, _, job in job_verdicts if label in bad for n in job)))
    return verdict, [(ev.label, per_node[ev.label]) for ev in evidence if ev.label in per_node]


def preparation_failed(reason: str, last_lines=()) -> Verdict:
    """Every round of a case whose preparation (images, the backend's prepare_case) failed."""
    return Verdict(Status.ERROR, Failure(f"preparation failed: {reason}", last_lines=tuple(last_lines)))


def not_run(reason: str) -> Verdict:
    """A round that never started: a host failed its check, or the run stopped before it."""
    return Verdict(Status.NOT_RUN, Failure(reason))


def case_status(round_statuses, verdicts=()) -> Status:
    """A case from its rounds: passed when every round that ran passed (skipped rounds allowed), skipped when
    all were skipped, failed when any failed, timed out or errored, interrupted when the run stopped in it,
    not_run when none started. A case that would pass is below_reference when one of its reference
    ``verdicts`` (flagperf.references) is not ok; run_status counts that as a failure."""
    status = _rounds_status(round_statuses)
    if status == Status.PASSED and any(not v.ok for v in verdicts or ()):
        return Status.BELOW_REFERENCE
    return status


def _rounds_status(round_statuses) -> Status:
    states = {Status(s) for s in round_statuses}
    if not states or states == {Status.NOT_RUN}:
        return Status.NOT_RUN
    if states & {Status.FAILED, Status.TIMEOUT, Status.ERROR}:
        return Status.FAILED
    if Status.INTERRUPTED in states or Status.NOT_RUN in states:
        return Status.INTERRUPTED
    if states == {Status.SKIPPED}:
        return Status.SKIPPED
    return Status.PASSED


def run_status(case_statuses, *, interrupted: bool) -> Status:
    """A run: interrupted when a signal stopped it; passed when every case passed or was skipped; else failed."""
    if interrupted:
        return Status.INTERRUPTED
    states = {Status(s) for s in case_statuses}
    return Status.PASSED if states <= {Status.PASSED, Status.SKIPPED} else Status.FAILED


# the worst first: the status an each round takes when its hosts disagree
_HOST_ORDER = (Status.INTERRUPTED, Status.TIMEOUT, Status.FAILED, Status.ERROR, Status.NOT_RUN)


def hosts_verdict(verdicts, what: str = "hosts") -> Verdict:
    """An ``each`` round (one independent job per host) from its hosts' own verdicts, ``[(node label, Verdict)]``
    in host order: passed when every host passed or was skipped (skipped when all were), otherwise the worst
    status any host got (interrupted, timeout, failed, error, not_run, in that order) with the first such host's
    failure, its reason naming the host, and ``nodes``: every node that did not pass. ``finished`` (of a passed
    round): the first passed host's result; every host's own is in its node's verdict. ``what``: the jobs'
    name in the reason (a pairs round: "pair jobs", each labelled "host a <-> host b")."""
    verdicts = list(verdicts)
    statuses = {v.status for _, v in verdicts}
    finished = next((v.finished for _, v in verdicts if v.status == Status.PASSED and v.finished), None)
    bad = [(label, v) for label, v in verdicts if v.status not in (Status.PASSED, Status.SKIPPED)]
    if not verdicts:
        return Verdict(Status.ERROR, Failure("no host ran"))
    if not bad:
        if statuses == {Status.SKIPPED}:
            return Verdict(Status.SKIPPED, verdicts[0][1].failure or Failure("skipped"))
        return Verdict(Status.PASSED, None, finished)
    status = next(s for s in _HOST_ORDER if s in statuses)
    label, first = next((lv for lv in bad if lv[1].status == status))
    failure = first.failure or Failure("")
    reason = failure.reason or status.value
    reason = (f"{label}: {reason}" if len(bad) == 1 else
              f"{len(bad)} of {len(verdicts)} {what} did not pass ({', '.join(lb for lb, _ in bad)}); "
              f"{label}: {reason}")
    return Verdict(status, replace(failure, reason=reason, node=failure.node if failure.node is not None else label,
                                   nodes=tuple(lb for lb, _ in bad)))


def run_exit_code(summary, *, host_check_failed: bool, summary_problem: bool) -> int:
    """The exit code of ``flagperf run`` (README, "Exit codes"): 130 when a signal stopped it, 3 when a host failed its
    check, 1 when summary.json could not be written, when an ``each`` case flagged a slow host or GPU (which
    changes no case's status), when a node's verdict is reject (``summary.verdicts``, results.verdict), or when a
    case did not pass; else 0."""
    if summary.interrupted:
        return EXIT_INTERRUPTED
    if host_check_failed:
        return EXIT_HOSTS
    if summary_problem:
        return EXIT_CASE_FAILED
    if any(ranking.outliers for ranking in summary.rankings):
        return EXIT_CASE_FAILED
    if any(getattr(v, "verdict", None) == "reject" for v in getattr(summary, "verdicts", None) or ()):
        return EXIT_CASE_FAILED
    return EXIT_OK if summary.status == Status.PASSED else EXIT_CASE_FAILED
