"""The finish stages: a case's reference verdicts after its rounds, and the run's end (rankings of each cases,
summary.json, the series file of the monitors, every file report)."""

from __future__ import annotations

import logging
import time

from flagperf.references import describe, judge_case
from flagperf.reporters import write_reports
from flagperf.results.series import summarise_series
from flagperf.results.slownodes import RULE, outliers, rank_cases
from flagperf.results.slownodes import describe as describe_outlier
from flagperf.results.summary import CaseSummary
from flagperf.stages.context import RunContext, oserror_text
from flagperf_contract import now_iso


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


def finish(ctx: RunContext, t0: float) -> str | None:
    """Rank the each cases, save summary.json and write every report; returns why summary.json could not be
    written, or None."""
    s, run_dir, out = ctx.summary, ctx.plan.run_dir, ctx.console
    s.finished = now_iso()
    s.duration_s = time.monotonic() - t0
    s.rankings = rank_cases(s.cases, headline_metrics(ctx.plan.cases))
    units = {r.case: r.unit for r in s.rankings}
    flagged = outliers(s.rankings)
    for case_name, entry in flagged:
        out.step(f"OUTLIER: {describe_outlier(case_name, entry, units.get(case_name))}", logging.ERROR)
    if flagged:
        out.detail(f"outlier rule: {RULE}")
    problem = None
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
