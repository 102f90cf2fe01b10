"""The prepare stages: the run directory (run log, effective config, run.json), the final plan once the hosts
reported their accelerators, and a case's preparation by the backend (container images)."""

from __future__ import annotations

import logging
import time
import traceback
from datetime import datetime

import yaml

from flagperf import __version__
from flagperf.backends import BackendError
from flagperf.errors import Interrupted
from flagperf.plan import Plan, build_plan
from flagperf.records import RunRecord
from flagperf.results.interpret import preparation_failed
from flagperf.results.summary import CaseSummary, RoundSummary, Summary
from flagperf.stages.context import RUN_LOG, RunContext
from flagperf.untrusted import for_terminal
from flagperf_contract import now_iso, write_json_atomic


LOG_LINE_MAX_CHARS = 1_000_000     # one run-log record (a traceback, a long line of a host) is cut here


def new_summary(plan: Plan, backend_name: str) -> Summary:
    """The summary of a run that has not started: every round not run yet."""
    cfg = plan.config
    return Summary(run_id=plan.run_id, run_dir=str(plan.run_dir), flagperf_version=__version__, started=now_iso(),
                   vendor=cfg.vendor.name, runtime=cfg.test.runtime, backend=backend_name,
                   hosts=[h.address for h in plan.hosts], cases=[case_summary(c) for c in plan.cases])


def case_summary(c) -> CaseSummary:
    s = c.case
    return CaseSummary(c.name, s.key, s.model, s.framework, s.hw, s.nnodes, s.nproc, s.repeat, s.data_dir,
                       [RoundSummary(r.index, f"{c.name}/{r.local_dir.name}") for r in c.rounds], each=s.each,
                       env=c.env, pairs=s.pairs)


def run_record(plan: Plan, backend) -> RunRecord:
    """run.json: what `flagperf collect` needs to fetch this run again later."""
    nodes = [{"case": case.name, "round": rnd.index, "host": node.host.address, "node": node.label,
              "node_dir": node.node_dir, "local_dir": str(node.local_dir.relative_to(plan.run_dir))}
             for case in plan.cases for rnd in case.rounds for node in rnd.nodes]
    return RunRecord(plan.run_id, __version__, backend.name, plan.config.test.runtime, nodes,
                     backend.run_record_fields(plan.hosts))


def open_run_dir(ctx: RunContext) -> None:
    """Create the run directory (raises OSError) with its run log, effective_config.yaml and run.json."""
    plan, t = ctx.plan, ctx.config.test
    plan.run_dir.mkdir(parents=True, exist_ok=False)
    handler = logging.FileHandler(plan.run_dir / RUN_LOG, encoding="utf-8")
    handler.setFormatter(_IsoFormatter("%(asctime)s %(levelname)-7s %(message)s"))
    ctx.log.handlers[:] = [handler]
    ctx.log.setLevel(getattr(logging, t.log_level.upper()))
    ctx.log.propagate = False
    (plan.run_dir / "effective_config.yaml").write_text(
        yaml.safe_dump(ctx.config.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")
    write_json_atomic(plan.run_dir / "run.json", run_record(plan, ctx.backend).to_dict())
    ctx.console.step(f"run {plan.run_id}: {len(plan.cases)} case(s), backend {ctx.backend.name}, runtime "
                     f"{t.runtime}, vendor {ctx.config.vendor.name} ({t.vendor_reason}); directory {plan.run_dir}")
    for warning in ctx.config.warnings:     # printed by the CLI too, before the run
        ctx.console.detail(f"config: {warning}", logging.WARNING)


def close_run_log(ctx: RunContext) -> None:
    """Close the run log's handlers. A disk that filled up loses the log's last buffered lines (the terminal
    has them), never the exit code: closing is not the run's failure."""
    for h in ctx.log.handlers:
        try:
            h.close()
        except OSError:
            pass
    ctx.log.handlers[:] = []


def replan(ctx: RunContext, accelerators: dict) -> None:
    """Resolve nproc auto with the accelerators the hosts reported, and record the final plan (a scheduler's
    backend may put the nodes it found in place of the cluster's hosts: Backend.planning)."""
    config, accelerators = ctx.backend.planning(ctx.config, accelerators)
    if config is ctx.config and all(c.nproc is not None for c in config.test.cases):
        return
    ctx.plan = build_plan(config, ctx.plan.run_id, accelerators)
    for note in ctx.plan.notes:
        ctx.console.step(f"note: {note}", logging.WARNING)
    ctx.summary.cases = [case_summary(c) for c in ctx.plan.cases]
    write_json_atomic(ctx.plan.run_dir / "run.json", run_record(ctx.plan, ctx.backend).to_dict())
    for case in ctx.plan.cases:
        if case.case.nproc is not None:
            ctx.console.detail(f"{case.name}: nproc auto -> {case.case.nproc}")


def prepare_case(ctx: RunContext, case, cres: CaseSummary) -> bool:
    """Backend preparation for the case's hosts (images for containers); a failure fails the case only."""
    t0 = time.monotonic()
    out = ctx.console
    out.stage(f"{case.name}: preparing (container images are built where missing)")
    try:
        try:
            ctx.backend.prepare_case(case)
        except (KeyboardInterrupt, Interrupted, BackendError):
            raise
        except Exception as exc:  # noqa: BLE001 - fails this case only
            out.detail(traceback.format_exc(), logging.ERROR)
            raise BackendError(f"unexpected {type(exc).__name__}: {exc}") from exc
    except BackendError as exc:
        out.step(f"{case.name}: preparation failed: {exc}", logging.ERROR)
        out.lines(exc.last_lines)
        v = preparation_failed(str(exc), exc.last_lines)
        for r in cres.rounds:
            r.status, r.failure = v.status, v.failure
        return False
    if time.monotonic() - t0 > 1:
        out.step(f"{case.name}: prepared in {time.monotonic() - t0:.1f} s")
    return True


class _IsoFormatter(logging.Formatter):
    """The run log's lines: local time with its offset, and every text made inert for a terminal that shows the
    file (``cat``, ``tail -f``): host and benchmark text in it never reaches a terminal as control codes."""

    def format(self, record):
        return for_terminal(super().format(record), newlines=True, limit=LOG_LINE_MAX_CHARS)

    def formatTime(self, record, datefmt=None):
        return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
