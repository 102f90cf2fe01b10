"""The judge stage of a round: read back what every node left (each file checked against its schema) as the
round's evidence, let ``flagperf.results.interpret`` decide, and say what it decided."""

from __future__ import annotations

import logging

from flagperf.results import perflog
from flagperf.results.excerpt import verdict_with_excerpt
from flagperf.results.flagperf_lines import is_flagperf_finished, node_logs, node_results
from flagperf.results.interpret import (NodeEvidence, RoundEvidence, Status, Wait, WaitEnd, describe_exit,
                                        failed_checks, interpret_each_round, interpret_round)
from flagperf.results.monitors import read_status, summarize_monitors
from flagperf.results.summary import NodeSummary, RoundSummary
from flagperf.stages.context import RunContext
from flagperf_contract import RANKS_FILE, ContractError, RankReport, read_json_file

TAIL_LINES = 12


def measured_window(records) -> tuple | None:
    """(RUN_START, RUN_END) epoch seconds of rank 0's PerfLog records: the benchmark's measured window."""
    times: dict = {}
    for r in records:
        if r.get("event") in ("RUN_START", "RUN_END") and isinstance(r.get("time"), (int, float)):
            times.setdefault(r["event"], float(r["time"]))
    if "RUN_START" in times and "RUN_END" in times and times["RUN_END"] > times["RUN_START"]:
        return times["RUN_START"], times["RUN_END"]
    return None


def node_evidence(ctx: RunContext, node, proc, wait: Wait, records) -> NodeEvidence:
    """What one node left: ranks.json, its logs and their tails, the launcher's own output; FlagPerf's result
    lines when ``records`` (the PerfLog records of the rank 0 that judges it) hold no FINISHED of flagperf's."""
    logs = node_logs(node)      # rank<R>.out.log, or node.out.log of a node command (launch mode node)
    ev = NodeEvidence(node.label, node.host.address, node.node_rank, tuple(logs),
                      launcher_exit=proc.wait(0) if proc else None, mode=node.launch.mode,
                      benchmark=str(node.case_config.get("model", "")), nproc=len(node.ranks or ()))
    try:
        ev.ranks = read_json_file(node.local_dir / RANKS_FILE, RankReport)
    except ContractError as exc:
        ev.ranks_problem = f"host {node.host.address}: {exc}"
        if wait.end == WaitEnd.COMPLETED or proc is not None:
            ctx.console.detail(f"{node.label}: {ev.ranks_problem}", logging.WARNING)
    for rank, path in logs.items():
        ev.rank_logs[rank] = str(path)
        ev.rank_tails[rank] = perflog.tail(path, TAIL_LINES)
    out = node.local_dir / ctx.backend.node_output
    ev.output_log, ev.output_tail = str(out), perflog.tail(out, TAIL_LINES)
    reaped = ev.ranks.reaped if ev.ranks else []
    if reaped:
        pids = ", ".join(str(r.get("pid")) for r in reaped[:8]) + (" ..." if len(reaped) > 8 else "")
        ctx.console.step(f"{node.label}: {len(reaped)} process(es) left behind by the ranks were killed "
                         f"(pids {pids}; see ranks.json)", logging.WARNING)
    if not any(r.get("event") == "FINISHED" and not is_flagperf_finished(r) for r in records):
        ev.flagperf_results = node_results(node, refused=ev.flagperf_refused)     # FlagPerf's formats instead?
    return ev


def judge_round(ctx: RunContext, nodes, launchers: dict, wait: Wait, res: RoundSummary,
                node_waits: dict | None = None, jobs=None) -> None:
    """Read back every node and record the round's verdict in ``res`` (an each round, ``node_waits`` given:
    every host judged on its own, with its own rank 0 and measured window; a pairs round, ``jobs`` given too:
    every 2-node job judged on its own, with its node 0's rank 0)."""
    evidence: list = []
    own_records: dict = {}
    res.nodes = []
    rank0 = perflog.read_records(node_logs(nodes[0]).get(0, "")) if nodes else []
    lead = {label: job[0] for job in jobs or () for label in job}      # pairs: the job's node 0
    for node in nodes:
        records = rank0
        if node_waits is not None and lead.get(node.label) in own_records:      # pairs: its job's rank 0
            records = own_records[node.label] = own_records[lead[node.label]]
        elif node_waits is not None:      # each: the host's own rank 0
            records = own_records[node.label] = \
                perflog.read_records(node_logs(node)[node.ranks[0]]) if node.ranks else []
        proc = launchers.get(node.label)
        ev = node_evidence(ctx, node, proc, wait, records)
        evidence.append(ev)
        summary = NodeSummary(node.label, node.host.address, node.node_rank, ev.launcher_exit,
                              [r.to_dict() for r in ev.ranks.ranks] if ev.ranks else [])
        try:
            summary.monitors = summarize_monitors(node.local_dir, measured_window(records))
        except Exception as exc:  # noqa: BLE001 - a monitor file problem never fails the round
            ctx.console.detail(f"{node.label}: cannot summarise monitor files: {exc}", logging.WARNING)
        report_sensors(ctx, node)
        res.nodes.append(summary)
    if node_waits is None:
        verdict = verdict_with_excerpt(interpret_round(RoundEvidence(wait, evidence, rank0)), nodes)
    else:
        verdict, per_host = interpret_each_round(wait, node_waits, evidence, own_records, jobs)
        verdict = verdict_with_excerpt(verdict, nodes)
        for summary, (label, v) in zip(res.nodes, per_host):
            v = verdict_with_excerpt(v, nodes)
            summary.status, summary.failure = v.status, v.failure
            summary.finished = v.finished.to_dict() if v.finished else None
            _log_host(ctx, res.dir, label, v)
    res.status, res.failure = verdict.status, verdict.failure
    res.finished = verdict.finished.to_dict() if verdict.finished else None
    res.check_failed = failed_checks(rank0) if res.finished is None and node_waits is None else None


def _log_host(ctx: RunContext, where: str, label: str, v) -> None:
    if v.status == Status.PASSED and v.finished:
        ctx.console.detail(f"{where}: {label}: passed: {v.finished.metric} = {v.finished.value:.4g} "
                           f"{v.finished.unit}")
    elif v.status != Status.PASSED:
        ctx.console.detail(f"{where}: {label}: {v.status.value}: {v.failure.reason if v.failure else ''}",
                           logging.WARNING)


def report_sensors(ctx: RunContext, node) -> None:
    """A sensor the node's monitor could not read, said once per host and sensor."""
    status, problem = read_status(node.local_dir)
    if status is None:
        ctx.console.detail(f"{node.label}: host {node.host.address}: {problem}", logging.WARNING)
        return
    for sensor, info in status.sensors.items():
        key = (node.host.address, sensor)
        if sensor == "gpu" and ctx.config.vendor.gpu_monitor == "none":
            continue            # a vendor without accelerators has no GPU sensor to miss
        if not info.available and key not in ctx.reported_sensors:
            ctx.reported_sensors.add(key)
            ctx.console.step(f"{node.host.address}: sensor {sensor} unavailable: {info.reason or 'no reason given'}",
                             logging.WARNING)


def report_round(ctx: RunContext, label: str, res: RoundSummary) -> None:
    """The round's outcome on the terminal: its figure, or why it did not pass with the last lines that show it."""
    f = res.failure
    if res.status == Status.SKIPPED:
        ctx.console.step(f"{label}: {f.reason if f else 'skipped'}", logging.WARNING)
        return
    if res.status == Status.PASSED:
        fin = res.finished or {}
        ctx.console.step(f"{label}: passed in {res.duration_s:.1f} s: {fin.get('metric')} = {fin.get('value'):.4g} "
                         f"{fin.get('unit')}")
        return
    msg = f"{label}: {res.status.value.upper()} after {res.duration_s:.1f} s: {f.reason if f else ''}"
    if f is not None and f.rank is not None:
        msg += f" (node {f.node}, rank {f.rank}, {describe_exit(f.exit_code)}, log {f.log})"
    elif f is not None and f.log:
        msg += f" (log {f.log})"
    ctx.console.step(msg, logging.ERROR)
    ctx.console.lines((f.last_lines or ()) if f else ())
