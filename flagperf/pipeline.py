"""The run, top to bottom.

    open the run directory (run log, effective_config.yaml, run.json)          stages.prepare.open_run_dir
    check: connect -> deploy -> probe every host                               stages.check.check
           (a host that fails stops the run before any round)
    plan the cases (nproc auto resolved from the accelerators the hosts reported)   stages.prepare.replan
    for each case: prepare (images)                                            stages.prepare.prepare_case
        for each round:                                                        stages.round.RoundStage
            start: clear caches -> prepare nodes -> start monitors -> start node launchers
            wait (the first failing node stops the others; CASE_TIMEOUT)      stages.wait
            stop launchers and monitors -> clean up nodes -> collect
            judge: read back every node, results.interpret decides             stages.judge
        reference verdicts                                                     stages.finish.check_references
    rankings, node verdicts, summary.json, every reporter (report.md, .html)   stages.finish.finish
    the exit code                                                              results.interpret.run_exit_code

Everything that touches a host goes through the backend the cluster config names (``flagperf.backends``);
no stage knows one by name. Every line for the terminal, the run log and the live panel goes through one
:class:`~flagperf.progress.Console`. Statuses and the exit code are decided by ``flagperf.results.interpret``
alone.
"""

from __future__ import annotations

import logging
import signal
import time

from flagperf.backends import Backend, open_backend
from flagperf.errors import EXIT_HOSTS, Interrupted
from flagperf.plan import Plan
from flagperf.progress import Console, Progress
from flagperf.results.interpret import run_exit_code
from flagperf.stages.check import accelerators_of, check, check_hosts
from flagperf.stages.context import RUN_LOG, RunContext, oserror_text
from flagperf.stages.finish import check_references, finish
from flagperf.stages.prepare import close_run_log, new_summary, open_run_dir, prepare_case, replan
from flagperf.stages.round import RoundStage, signals_deferred

__all__ = ["RUN_LOG", "Run", "accelerators_of", "check_hosts"]


class Run:
    """One execution of a Plan. ``say`` receives the lines for the terminal, ``progress`` is the live panel.
    ``backend`` defaults to the one the cluster config names (tests pass their own)."""

    def __init__(self, plan: Plan, say=print, *, backend: Backend | None = None, accept_new_host_keys: bool = False,
                 progress: Progress | None = None):
        log = logging.getLogger(f"flagperf.run.{plan.run_id}")
        backend = backend or open_backend(plan.config, log, accept_new_host_keys=accept_new_host_keys)
        self.ctx = RunContext(plan, backend, Console(say, log, progress), new_summary(plan, backend.name))

    @property
    def summary(self):
        return self.ctx.summary

    def execute(self) -> int:
        ctx, t0 = self.ctx, time.monotonic()
        try:
            open_run_dir(ctx)
        except OSError as exc:
            close_run_log(ctx)
            ctx.backend.close()
            ctx.console.say(f"ERROR: cannot create the run directory {ctx.plan.run_dir}: {oserror_text(exc)}; "
                            f"nothing was run")
            return EXIT_HOSTS
        hosts_ok, summary_problem = False, None
        old_term = signal.signal(signal.SIGTERM, _raise_interrupted)
        try:
            hosts_ok, accelerators = check(ctx)
            if hosts_ok:
                replan(ctx, accelerators)
                ctx.console.plan({case.name: len(case.rounds) for case in ctx.plan.cases})
                for case, cres in zip(ctx.plan.cases, ctx.summary.cases):
                    if prepare_case(ctx, case, cres):
                        for rnd, rres in zip(case.rounds, cres.rounds):
                            RoundStage(ctx, case, rnd, rres).run()
                    check_references(ctx, case, cres)
                    ctx.console.step(f"case {case.name}: {cres.status.value.upper()}")
        except (KeyboardInterrupt, Interrupted):
            ctx.summary.interrupted = True
            ctx.mark_not_run("not run: the run was interrupted before this round")
            ctx.console.step("run interrupted: stopped every process, writing the summary")
        finally:
            signal.signal(signal.SIGTERM, old_term)
            with signals_deferred(raise_after=False):
                ctx.backend.close()
                summary_problem = finish(ctx, t0)
                close_run_log(ctx)
        return run_exit_code(ctx.summary, host_check_failed=not hosts_ok,
                             summary_problem=summary_problem is not None)


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"received {signal.Signals(signum).name}")
