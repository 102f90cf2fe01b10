"""The finish stages: a case's reference verdicts after its rounds, and the run's end (rankings of each cases,
the node verdicts, summary.json, the series file of the monitors, every file report)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from flagperf.references import describe, judge_case
from flagperf.reporters import write_reports
from flagperf.results import health
from flagperf.results.links import link_findings
from flagperf.results.pairs import pair_findings_by_host, pair_lines
from flagperf.results.series import summarise_series
from flagperf.results.slownodes import RULE, outliers, rank_cases
from flagperf.results.slownodes import describe as describe_outlier
from flagperf.results.summary import CaseSummary
from flagperf.results.tf32check import fp32_name, tf32_findings
from flagperf.results.verdict import local_gpus, node_verdicts
from flagperf.stages.context import RunContext, oserror_text
from flagperf.yamlio import load_yaml_file
from flagperf_contract import LAUNCH_FILE, ContractError, LaunchSpec, now_iso, read_json_file


def check_references(ctx: RunContext, case, cres: CaseSummary) -> None:
    """After a case's rounds: its referenced metrics (median over the passed rounds) against the reference
    file that fits rank 0's device (flagperf.references); the verdicts go into the case's summary."""
    files = ctx.config.references
    if not files or not cres.passed_rounds:
        return
    nodes = case.rounds[0].nodes if case.rounds else ()
    verdicts, ref, device = judge_case(cres, files, dict(nodes[0].case_config) if nodes else {})
    cres.verdicts = verdicts
    if ref is None:
        ctx.console.detail(f"{case.name}: no reference file fits device {device!r}")
        return
    if not verdicts:
        ctx.console.detail(f"{case.name}: {ref.path} (device {device!r}) has no reference for this case")
        return
    ctx.console.detail(f"{case.name}: references from {ref.path} (device {device!r})")
    for v in verdicts:
        ctx.console.step(f"{case.name}: {describe(v)}; source {v.source}", logging.INFO if v.ok else logging.ERROR)


def check_tf32(ctx: RunContext) -> None:
    """A TF32 case whose figure is its FP32 case's on a device with a much faster TF32 (flagperf.results.tf32check):
    flagged as a suspect verdict of the TF32 case, and said in the run log."""
    peaks = ctx.config.vendor.peaks
    if peaks is None or not any(fp32_name(c.model or "") for c in ctx.summary.cases):
        return
    table, _problems = load_yaml_file(peaks)      # a bad peak table is reported when the plan is made
    for case, v in tf32_findings(ctx.summary.cases, table, str(peaks), ctx.config.vendor.name):
        case.verdicts = [*case.verdicts, v]
        ctx.console.step(f"{case.name}: {describe(v)}", logging.WARNING)


def headline_metrics(cases) -> dict:
    """{case name: the headline metric its case config names (``headline_metric``)} for the cases that name one:
    an each case is ranked by it, whatever a host reports (results.slownodes.headline_metric)."""
    out = {}
    for case in cases:
        nodes = case.rounds[0].nodes if case.rounds else ()
        metric = dict(nodes[0].case_config).get("headline_metric") if nodes else None
        if isinstance(metric, str) and metric:
            out[case.name] = metric
    return out


def read_nodes(ctx: RunContext, run_dir) -> tuple:
    """What the node directories of the run say about the hosts' GPUs and health: ({host: {index: GpuIdentity}},
    {case name: {host: {local rank: GpuIdentity}}}, [HealthFinding]). A node directory that cannot be read gives
    nothing (said in the run log), never a failed run."""
    identities: dict = {}
    ranks: dict = {}
    findings: list = []
    nodes = [(c, n, d) for c in ctx.summary.cases for r in c.rounds for n in r.nodes
             if (d := _node_dir(run_dir, r.dir, n.node)) is not None]
    for _case, n, node_dir in nodes:
        try:
            found = health.gpu_identities(node_dir) or {}
            known = identities.setdefault(n.host, {})
            for index, gpu in found.items():
                old = known.get(index)
                known[index] = gpu if old is None else _merged(old, gpu)
            findings += health.health_findings(n.host, node_dir) or []
        except Exception as exc:  # noqa: BLE001 - a health file problem never fails the run
            ctx.console.detail(f"{n.node}: cannot read the node's health: {type(exc).__name__}: {exc}",
                               logging.WARNING)
    for case, n, node_dir in nodes:
        if not case.each or n.host in ranks.get(case.name, {}):
            continue
        try:
            spec = read_json_file(node_dir / LAUNCH_FILE, LaunchSpec)
            env, devices, nproc = spec.visible_devices_env, spec.visible_devices, spec.nproc
        except (ContractError, OSError):
            env, devices, nproc = None, "", case.nproc      # device i: what the plan starts when it names none
        ranks.setdefault(case.name, {})[n.host] = local_gpus(env, devices, nproc, identities.get(n.host))
    return identities, ranks, findings


def _node_dir(run_dir, *parts) -> Path | None:
    """``run_dir/parts...`` when it stays inside the run directory (a node directory is never read elsewhere)."""
    base = Path(run_dir).resolve()
    path = base.joinpath(*parts).resolve()
    return path if base in path.parents else None


def _merged(old, new):
    """One GPU's identity from two node directories: the newer one's fields, the older one's where it says unknown."""
    fields = {k: (v if v != "unknown" else old.to_dict()[k]) for k, v in new.to_dict().items()}
    return type(new).from_dict(fields)


def judge_nodes(ctx: RunContext, run_dir, links=None) -> None:
    """The each cases' rankings (GPUs named by their cards), the link findings (results.links, and ``links``:
    more of them, {host: [VerdictReason]} or [(host, VerdictReason)]) and one verdict per node, into the summary;
    every outlier and every node's verdict said on the terminal and in the run log."""
    s, out = ctx.summary, ctx.console
    identities, ranks, findings = read_nodes(ctx, run_dir)
    links = list(link_findings(s, run_dir, identities)) + list(links.items() if isinstance(links, dict) else
                                                                links or ())
    s.rankings = rank_cases(s.cases, headline_metrics(ctx.plan.cases), ranks)
    units = {r.case: r.unit for r in s.rankings}
    flagged = outliers(s.rankings)
    for case_name, entry in flagged:
        out.step(f"OUTLIER: {describe_outlier(case_name, entry, units.get(case_name))}", logging.ERROR)
    if flagged:
        out.detail(f"outlier rule: {RULE}")
    s.verdicts = node_verdicts(s, reference_files=ctx.config.references, health=findings, identities=identities,
                               links=links)
    for v in s.verdicts:
        level = {"accept": logging.INFO, "degraded": logging.WARNING}.get(v.verdict, logging.ERROR)
        out.step(f"node {v.host}: {v.verdict.upper()}" + (f" ({len(v.reasons)} reason(s))" if v.reasons else ""),
                 level)
        for r in v.reasons:
            out.detail(f"node {v.host}: {r.severity}: {r.source}: {r.subject}: {r.detail}; remedy: {r.remedy}",
                       level)


def finish(ctx: RunContext, t0: float) -> str | None:
    """Rank the each cases, judge every node, save summary.json and write every report; returns why summary.json
    could not be written, or None."""
    s, run_dir, out = ctx.summary, ctx.plan.run_dir, ctx.console
    s.finished = now_iso()
    s.duration_s = time.monotonic() - t0
    problem = None
    try:
        for line in pair_lines(s):      # pairs cases: the host-pair matrix and the links it points to
            out.step(line, logging.ERROR if line.startswith("LINK reject") else
                     logging.WARNING if line.startswith("LINK") else logging.INFO)
        judge_nodes(ctx, run_dir, pair_findings_by_host(s))
    except Exception as exc:  # noqa: BLE001 - the summary is written whatever went wrong; the run exits 1
        problem = f"cannot judge the nodes: {type(exc).__name__}: {str(exc)[:200]}"
        out.step(problem, logging.ERROR)
    for ok, line in ctx.backend.act_on_verdicts(s.verdicts, s.run_id):    # e.g. a scheduler drains rejected nodes
        out.step(line, logging.INFO if ok else logging.ERROR)
    check_tf32(ctx)
    try:
        s.series = summarise_series(s, run_dir)
    except OSError as exc:      # the plots of report.html go without their time series
        out.step(f"cannot write the monitors' time series: {oserror_text(exc)}", logging.WARNING)
    try:
        s.save(run_dir / "summary.json")
    except OSError as exc:      # a full disk, a read-only or vanished run directory: say so, keep going
        problem = f"cannot write {run_dir / 'summary.json'}: {oserror_text(exc)}"
        out.step(problem, logging.ERROR)
    except (ValueError, TypeError, RecursionError) as exc:     # a record the judge should have refused
        problem = f"cannot write {run_dir / 'summary.json'}: {type(exc).__name__}: {str(exc)[:200]}"
        out.step(problem, logging.ERROR)
    written = []
    for report in write_reports(s, run_dir):
        if report.error is not None:
            out.step(f"report {report.name}: {report.error}", logging.ERROR)
        elif report.path is not None:
            written.append(str(report.path))
    out.step(f"summary: {run_dir / 'summary.json'}" + (f", report: {', '.join(written)}" if written else ""))
    return problem
