"""What every stage of a run shares: the plan, the backend, the output, the summary being built, and what the
run learnt about its hosts on the way."""

from __future__ import annotations

from dataclasses import dataclass, field

from flagperf.backends import Backend
from flagperf.plan import Plan
from flagperf.progress import Console
from flagperf.results.interpret import Status, not_run
from flagperf.results.summary import Summary

RUN_LOG = "flagperf_run.log"


@dataclass
class RunContext:
    plan: Plan                  # replaced once the hosts were checked (nproc auto, a scheduler's nodes)
    backend: Backend
    console: Console
    summary: Summary
    lost_hosts: dict = field(default_factory=dict)      # address -> why: hosts that stopped answering in a round
    host_of: dict = field(default_factory=dict)         # node label -> host address, every node a round started
    reported_sensors: set = field(default_factory=set)  # (address, sensor) said unavailable once already

    @property
    def config(self):
        return self.plan.config

    @property
    def log(self):
        return self.console.log

    def mark_not_run(self, reason: str) -> None:
        """Every round that has not started gets ``reason`` (a host failed its check, the run was stopped)."""
        for case in self.summary.cases:
            for r in case.rounds:
                if r.status == Status.NOT_RUN and r.failure is None:
                    v = not_run(reason)
                    r.status, r.failure = v.status, v.failure


def oserror_text(exc: OSError) -> str:
    """'[Errno 28] No space left on device' without the file name the caller already gives."""
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)
