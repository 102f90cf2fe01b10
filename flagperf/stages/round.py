"""The round stage: one round of a case on its nodes, in four pieces.

    start            the scheduler binds the nodes -> clear caches -> prepare nodes -> monitors -> node launchers
    wait             every launcher exits; the first failing node stops the others (stages.wait)
    stop + collect   whatever still runs is stopped, the nodes cleaned up, their directories fetched
    judge            the nodes' files read back and judged by results.interpret (stages.judge)

A failure of the backend fails the round, not the run. An ``each`` case runs one independent job per host: a
host that cannot start, fails or is lost fails alone (its own Wait in ``node_waits``) and stops nothing else. A
``pairs`` round runs independent 2-node jobs: a node that cannot start, fails or is lost fails its job (the other
node of the job is not started, or is stopped) and stops no other job.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import traceback

from flagperf.backends import BackendError
from flagperf.errors import Interrupted
from flagperf.hosts.fanout import fan_out
from flagperf.results.interpret import Wait, WaitEnd
from flagperf.results.summary import RoundSummary
from flagperf.stages.context import RUN_LOG, RunContext
from flagperf.stages.judge import judge_round, report_round
from flagperf.stages.wait import STOP_GRACE_S, LauncherWait, stop_processes

COLLECT_GRACE_S = 3.0      # interrupted while collecting: fetches still running after this are cut short
HURRY_GRACE_S = 2.0        # interrupted: after this, a second SIGTERM makes the launchers SIGKILL their ranks


class RoundStage:
    """One round of a case; :meth:`run` leaves its verdict in ``res``."""

    def __init__(self, ctx: RunContext, case, rnd, res: RoundSummary):
        self.ctx, self.case, self.rnd, self.res = ctx, case, rnd, res
        self.out = ctx.console
        self.label = f"{case.name} round {rnd.index}/{len(case.rounds)}" + \
            (f" ({rnd.local_dir.name})" if rnd.stage is not None else "")      # pairs: round<k>-stage<s>
        self.timeout = case.timeout_s      # CASE_TIMEOUT, from the plan
        self.nodes = list(rnd.nodes)
        self.monitors: dict = {}
        self.launchers: dict = {}
        # each case: every host is its own job; a host that fails to start or run fails alone (its own Wait here);
        # pairs: every 2-node job, a node failing fails its job (``peers``: the other node of its job)
        self.node_waits: dict | None = {} if case.case.each or case.case.pairs else None
        self.jobs = rnd.jobs if case.case.pairs else None
        self.peers = {label: [p for p in job if p != label] for job in self.jobs or () for label in job}
        self.others = "the other pairs" if self.jobs else "the other hosts"

    def run(self) -> None:
        self.out.step(f"{self.label}: start on {', '.join(n.label for n in self.nodes)}")
        t0 = time.monotonic()
        wait = Wait(WaitEnd.ERROR, "the round did not start")
        try:
            self.start()
            wait = LauncherWait(self.ctx, self.label, self.nodes, self.launchers, self.timeout,
                                self.node_waits, self.peers).run()
        except KeyboardInterrupt:
            wait = Wait(WaitEnd.INTERRUPTED, "interrupted (SIGINT)")
            raise
        except Interrupted as exc:
            wait = Wait(WaitEnd.INTERRUPTED, f"interrupted ({exc})")
            raise
        except BackendError as exc:
            wait = Wait(WaitEnd.ERROR, str(exc))
            self.out.step(f"{self.label}: {exc}", logging.ERROR)
        except Exception as exc:  # noqa: BLE001 - an unexpected backend failure fails this round, not the run
            self.out.detail(traceback.format_exc(), logging.ERROR)
            wait = Wait(WaitEnd.ERROR, f"unexpected {type(exc).__name__}: {exc} (traceback in {RUN_LOG})")
            self.out.step(f"{self.label}: {wait.reason}", logging.ERROR)
        finally:
            with signals_deferred() as held:
                wait = self.stop_and_collect(wait, held)
                self.res.duration_s = time.monotonic() - t0
                for node in self.nodes:
                    self.out.node(node.label, "judging")
                judge_round(self.ctx, self.nodes, self.launchers, wait, self.res, self.node_waits, self.jobs)
                self.out.round_done(self.res.status.value)
                report_round(self.ctx, self.label, self.res)

    # -- start ----------------------------------------------------------------------------------------------------
    def _live(self) -> list:
        return [n for n in self.nodes if self.node_waits is None or n.label not in self.node_waits]

    def _host_failed(self, node, error: str) -> None:
        """Each case: this host's job could not start; the other hosts' jobs go on. Pairs: nor can the other
        node of its job (not started, or stopped when already running)."""
        assert self.node_waits is not None
        self.node_waits[node.label] = Wait(WaitEnd.ERROR, error, node.label)
        self.out.step(f"{self.label}: {error}; {self.others} go on (independent jobs)", logging.ERROR)
        for peer in self.peers.get(node.label, ()):
            if peer not in self.node_waits:
                self.node_waits[peer] = Wait(WaitEnd.ERROR, f"not run: {node.label} of its pair job could not "
                                                            f"start ({error})", peer)
            if peer in self.launchers:
                self.launchers[peer].signal(signal.SIGTERM)

    def _fail(self, node, error: str) -> None:
        """A node could not be prepared or started: the round fails (each: that host's job alone)."""
        if self.node_waits is None:
            raise BackendError(error)
        self._host_failed(node, error)

    def start(self) -> None:
        self.ctx.host_of.update((n.label, n.host.address) for n in self.nodes)
        self.out.round(self.label, [n.label for n in self.nodes], self.timeout, self.case.name)
        self._bind()
        if self.ctx.config.test.clear_caches:
            self._clear_caches()
        for node in self.nodes:
            self.out.node(node.label, "preparing")
        for o in fan_out(self._live(), self.ctx.backend.prepare_node, deadline_s=600):
            if not o.ok:
                self._fail(o.key, o.error if o.key.label in o.error else f"{o.key.label}: {o.error}")
        for node in self._live():
            self.out.cmd(node.label, node.monitor_argv)
            try:
                self.monitors[node.label] = self.ctx.backend.spawn_monitor(node)
            except BackendError as exc:
                if self.node_waits is None:
                    raise
                self._host_failed(node, str(exc))
        self._spawn_launchers()
        for node in self.nodes:
            self.out.node(node.label, "running")

    def _bind(self) -> None:
        """The nodes the backend gives the round (a scheduler allocates them here); hosts lost earlier fail it."""
        ctx = self.ctx
        bound = list(ctx.backend.start_round(self.case, self.rnd))
        if [n.label for n in bound] != [n.label for n in self.nodes]:
            planned = {n.host.address for n in self.nodes}
            ctx.summary.hosts = [h for h in ctx.summary.hosts if h not in planned]
            ctx.summary.hosts += [a for a in dict.fromkeys(n.host.address for n in bound)
                                  if a not in ctx.summary.hosts]
            self.nodes[:] = bound
            self.out.step(f"{self.label}: the scheduler gave {', '.join(n.label for n in self.nodes)}")
            ctx.host_of.update((n.label, n.host.address) for n in self.nodes)
            self.out.round(self.label, [n.label for n in self.nodes], self.timeout, self.case.name)
        for node in [n for n in self.nodes if n.host.address in ctx.lost_hosts]:
            self._fail(node, f"host {node.host.address} was lost earlier in this run "
                             f"({ctx.lost_hosts[node.host.address]})")

    def _clear_caches(self) -> None:
        for node in self._live():
            ok, why = self.ctx.backend.drop_caches(node)
            if ok:
                self.out.detail(f"{node.label}: page cache dropped")
            else:
                self.out.step(f"{node.label}: CLEAR_CACHES: cannot drop the page cache ({why or 'not permitted'}); "
                              f"going on", logging.WARNING)

    def _spawn_launchers(self) -> None:
        for node in self._live():
            self.out.cmd(node.label, node.launcher_argv)
        problems = []
        for o in fan_out(self._live(), self.ctx.backend.spawn_launcher, deadline_s=60):
            if o.ok:
                self.launchers[o.key.label] = o.value
                if self.node_waits is not None and o.key.label in self.node_waits:    # its pair job failed
                    o.value.signal(signal.SIGTERM)
                continue
            problems.append(o.error if o.key.label in o.error else f"{o.key.label}: {o.error}")
            if self.node_waits is not None:
                self._host_failed(o.key, f"the node launcher did not start: {problems[-1]}")
        if problems and self.node_waits is None:
            raise BackendError(f"the node launcher did not start: {'; '.join(problems)}")

    # -- stop + collect -------------------------------------------------------------------------------------------
    def stop_and_collect(self, wait: Wait, held: "signals_deferred") -> Wait:
        """Stop what still runs, clean up and collect every node, release the round; how the round ended (a
        signal while collecting makes it interrupted: it is not judged on half its files)."""
        ctx = self.ctx
        hurry = wait.end == WaitEnd.INTERRUPTED
        if hurry:       # interrupted: exit within seconds; a second signal makes the launchers SIGKILL
            stop_processes(ctx, self.launchers, "launcher", signal.SIGTERM, HURRY_GRACE_S, second=signal.SIGTERM)
        stop_processes(ctx, self.launchers, "launcher", signal.SIGTERM, STOP_GRACE_S)
        stop_processes(ctx, self.monitors, "monitor", signal.SIGTERM, 2.0 if hurry else 5.0)
        for node in self.nodes:
            if node.host.address in ctx.lost_hosts:
                continue
            try:
                ctx.backend.cleanup_node(node)
            except Exception as exc:  # noqa: BLE001 - cleanup goes on for every node
                self.out.step(f"{node.label}: cleanup failed: {exc}", logging.ERROR)
        for node in self.nodes:
            self.out.node(node.label, "collecting")
        left = self._collect(stop=lambda: bool(held.pending))
        try:
            ctx.backend.end_round(self.nodes)
        except Exception as exc:  # noqa: BLE001 - the round is judged on what it left either way
            self.out.step(f"{self.label}: releasing the round's allocation failed: {exc}", logging.ERROR)
        if left and wait.end != WaitEnd.INTERRUPTED:
            return Wait(WaitEnd.INTERRUPTED, f"interrupted during collect; the logs of {', '.join(left)} stay on "
                                             f"the host (`flagperf collect {ctx.plan.run_dir}` fetches them)")
        return wait

    def _collect(self, stop=None) -> list:
        """Fetch every node's directory; returns the labels of the nodes whose fetch a signal cut short."""
        lost = self.ctx.lost_hosts
        for node in self.nodes:
            if node.host.address in lost:
                self.out.step(f"{node.label}: not collected: host {node.host.address} lost "
                              f"({lost[node.host.address]}); `flagperf collect` fetches it later", logging.WARNING)
        nodes = [n for n in self.nodes if n.host.address not in lost]
        cut = []
        for o in fan_out(nodes, self.ctx.backend.collect, deadline_s=600, stop=stop, stop_grace_s=COLLECT_GRACE_S):
            if o.cancelled:
                cut.append(o.key.label)
                self.out.step(f"{o.key.label}: collect cut short by the interrupt; the files stay on "
                              f"{o.key.host.address}", logging.WARNING)
            elif o.ok:
                files, size = o.value
                self.out.detail(f"{o.key.label}: collected {files} file(s), {size} bytes into {o.key.local_dir}")
                # what was left on the host or refused is logged by the transport (treesync.report_fetch)
            else:
                self.out.step(f"{o.key.label}: collect failed: {o.error}", logging.ERROR)
        return cut


class signals_deferred:
    """Cleanup must finish: hold SIGINT/SIGTERM while it runs, then act on them once it is done (raise
    Interrupted, unless ``raise_after`` is off)."""

    def __init__(self, raise_after: bool = True):
        self.raise_after = raise_after
        self.pending: list = []
        self.old: dict | None = None

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        self.old = {s: signal.signal(s, lambda n, _f: self.pending.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        if self.old is None:
            return False
        for s, h in self.old.items():
            signal.signal(s, h)
        if self.pending and exc[0] is None and self.raise_after:
            raise Interrupted(f"received {signal.Signals(self.pending[0]).name}")
        return False
