"""The run, top to bottom.

    open the run directory
    check: connect -> deploy -> probe every host (a host that fails stops the run before any round)
    plan the cases (nproc auto resolved from the accelerators the hosts reported)
    for each case: prepare (images)
        for each round: clear caches -> prepare nodes -> start monitors -> start node launchers
                        -> wait (the first failing node stops the others; CASE_TIMEOUT)
                        -> stop launchers and monitors -> clean up nodes -> collect -> interpret
    summary.json, then every reporter (report.md)

Everything that touches a host goes through the backend the cluster config names (``flagperf.backends``);
this module knows none by name. Statuses are decided by ``flagperf.results.interpret`` alone.
"""

from __future__ import annotations

import logging
import queue
import shlex
import signal
import threading
import time
from datetime import datetime

import yaml

from flagperf import __version__
from flagperf.backends import Backend, BackendError, open_backend
from flagperf.backends.base import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S
from flagperf.checks import failed, needed_accelerators
from flagperf.errors import EXIT_CASE_FAILED, EXIT_HOSTS, EXIT_INTERRUPTED, EXIT_OK, Interrupted
from flagperf.hosts.fanout import CANCELLED, fan_out
from flagperf.progress import Progress
from flagperf.plan import Plan, build_plan
from flagperf.reporters import write_reports
from flagperf.results import perflog
from flagperf.results.flagperf_lines import is_flagperf_finished, node_logs, node_results
from flagperf.results.interpret import (NodeEvidence, RoundEvidence, Status, Wait, WaitEnd, describe_exit,
                                       hosts_verdict, interpret_round)
from flagperf.results.monitors import read_status, summarize_monitors
from flagperf.results.slownodes import RULE, outliers, rank_cases
from flagperf.results.slownodes import describe as describe_outlier
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf_contract import RANKS_FILE, ContractError, RankReport, now_iso, read_json_file, write_json_atomic

RUN_LOG = "flagperf_run.log"
STOP_GRACE_S = 15.0        # after SIGTERM to a node launcher (it gives its ranks 10 s), before SIGKILL
COLLECT_GRACE_S = 3.0      # interrupted while collecting: fetches still running after this are cut short
HURRY_GRACE_S = 2.0        # interrupted: after this, a second SIGTERM makes the launchers SIGKILL their ranks
TAIL_LINES = 12
RUN_SCHEMA = "flagperf.run/1"


def check_hosts(backend: Backend, hosts, need: dict, *, deploy: bool, say=None) -> list:
    """Connect to every host, deploy the tree (when asked), probe; one HostCheck per host, in the hosts' order."""
    order = []
    for h in hosts:
        if h.address not in order:
            order.append(h.address)
    results = {c.host: c for c in backend.connect(hosts)}
    connected = [h for h in hosts if h.address not in results]
    if deploy and connected:
        for o in backend.deploy(connected):
            if o.ok:
                d = o.value
                if say and not d.same_tree:
                    say(f"deploy: host {d.host}: {d.files_sent} of {d.files_total} file(s) differed, "
                        f"{d.bytes_sent} bytes sent to {d.path}{getattr(d, 'tree_note', '')}")
                for note in getattr(d, "notes", ()) if say else ():     # left out of a CASE_PATHS folder
                    say(f"deploy: host {d.host}: {note}")
            else:
                results[o.key.address] = failed(o.key.address, "deploy_failed",
                                                f"deploy to {o.key.flagperf_path} failed: {o.error}")
        connected = [h for h in connected if h.address not in results]
    for c in backend.probe(connected, need):
        results[c.host] = c
    # a scheduler's checks are not per host (its partition, nodes, account): they follow the hosts'
    return [results[a] for a in order if a in results] + [c for a, c in results.items() if a not in order]


def accelerators_of(checks) -> dict:
    return {c.host: c.accelerators for c in checks if c.ok and c.accelerators is not None}


class Run:
    """One execution of a Plan. ``say`` receives progress lines for the terminal. ``backend`` defaults to the
    one the cluster config names (tests pass their own)."""

    def __init__(self, plan: Plan, say=print, *, backend: Backend | None = None, accept_new_host_keys: bool = False,
                 progress: Progress | None = None):
        self.plan = plan
        self.progress = progress or Progress()      # the live display (a no-op off a terminal)
        self.config = plan.config
        self.say = say
        self.log = logging.getLogger(f"flagperf.run.{plan.run_id}")
        self.backend = backend or open_backend(self.config, self.log, accept_new_host_keys=accept_new_host_keys)
        self.reported_sensors: set = set()
        self.lost_hosts: dict = {}          # address -> why: hosts that stopped answering during a round
        self.host_of: dict = {}             # node label -> host address, for every node a round started
        self.summary_problem: str | None = None
        self.summary = self._empty_summary(plan)

    def _empty_summary(self, plan) -> Summary:
        cfg = self.config
        return Summary(run_id=plan.run_id, run_dir=str(plan.run_dir), flagperf_version=__version__, started=now_iso(),
                       vendor=cfg.vendor.name, runtime=cfg.test.runtime, backend=self.backend.name,
                       hosts=[h.address for h in plan.hosts], cases=[self._case_summary(c) for c in plan.cases])

    @staticmethod
    def _case_summary(c) -> CaseSummary:
        s = c.case
        return CaseSummary(c.name, s.key, s.model, s.framework, s.hw, s.nnodes, s.nproc, s.repeat, s.data_dir,
                           [RoundSummary(r.index, f"{c.name}/round{r.index}") for r in c.rounds],
                           each=getattr(s, "each", False))

    # -- the run ------------------------------------------------------------------------------------------------
    def execute(self) -> int:
        t0 = time.monotonic()
        try:
            self._open_run_dir()
        except OSError as exc:
            self._close_log()
            self.backend.close()
            self.say(f"ERROR: cannot create the run directory {self.plan.run_dir}: {_oserror(exc)}; nothing was run")
            return EXIT_HOSTS
        code = EXIT_OK
        old_term = signal.signal(signal.SIGTERM, _raise_interrupted)
        try:
            checks = self._check_hosts()
            bad = [c for c in checks if not c.ok]
            if bad:
                code = EXIT_HOSTS
                self.summary.host_checks = [{"host": c.host, "outcome": c.outcome, "detail": c.detail,
                                             "remedy": c.remedy} for c in bad]
                self._not_run(f"not run: {len(bad)} host(s) failed their check "
                              f"({', '.join(c.host + ': ' + c.outcome for c in bad)})")
            else:
                self._replan(accelerators_of(checks))
                for case, cres in zip(self.plan.cases, self.summary.cases):
                    if self._prepare_case(case, cres):
                        for rnd, rres in zip(case.rounds, cres.rounds):
                            self._run_round(case, rnd, rres)
                    self._check_references(case, cres)
                    self.step(f"case {case.name}: {cres.status.value.upper()}")
        except (KeyboardInterrupt, Interrupted):
            self.summary.interrupted = True
            self._not_run("not run: the run was interrupted before this round")
            self.step("run interrupted: stopped every process, writing the summary")
        finally:
            signal.signal(signal.SIGTERM, old_term)
            with _signals_deferred(raise_after=False):
                self.backend.close()
                self._finish(t0)
        if self.summary.interrupted:
            return EXIT_INTERRUPTED
        if code != EXIT_OK:
            return code
        if self.summary_problem:
            return EXIT_CASE_FAILED
        if outliers(self.summary.rankings):     # each cases: a slow host or GPU fails the run, not its case
            return EXIT_CASE_FAILED
        return EXIT_OK if self.summary.status == Status.PASSED else EXIT_CASE_FAILED

    def _finish(self, t0):
        s, plan = self.summary, self.plan
        s.finished = now_iso()
        s.duration_s = time.monotonic() - t0
        s.rankings = rank_cases(s.cases)
        units = {r["case"]: r.get("unit") for r in s.rankings}
        for case_name, entry in outliers(s.rankings):
            self.step(f"OUTLIER: {describe_outlier(case_name, entry, units.get(case_name))}", logging.ERROR)
        if outliers(s.rankings):
            self.log.info(f"outlier rule: {RULE}")
        try:
            s.save(plan.run_dir / "summary.json")
        except OSError as exc:      # a full disk, a read-only or vanished run directory: say so, keep going
            self.summary_problem = f"cannot write {plan.run_dir / 'summary.json'}: {_oserror(exc)}"
            self.step(self.summary_problem, logging.ERROR)
        written = []
        for name, where in write_reports(s, plan.run_dir):
            if isinstance(where, str):
                self.step(f"report {name}: {where}", logging.ERROR)
            else:
                written.append(str(where))
        self.step(f"summary: {plan.run_dir / 'summary.json'}" + (f", report: {', '.join(written)}" if written else ""))
        self._close_log()

    def _not_run(self, reason: str):
        for case in self.summary.cases:
            for r in case.rounds:
                if r.status == Status.NOT_RUN and r.failure is None:
                    r.failure = {"reason": reason}

    # -- steps --------------------------------------------------------------------------------------------------
    def _open_run_dir(self):
        plan, t = self.plan, self.config.test
        plan.run_dir.mkdir(parents=True, exist_ok=False)
        handler = logging.FileHandler(plan.run_dir / RUN_LOG, encoding="utf-8")
        handler.setFormatter(_IsoFormatter("%(asctime)s %(levelname)-7s %(message)s"))
        self.log.handlers[:] = [handler]
        self.log.setLevel(getattr(logging, t.log_level.upper()))
        self.log.propagate = False
        (plan.run_dir / "effective_config.yaml").write_text(
            yaml.safe_dump(self.config.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")
        write_json_atomic(plan.run_dir / "run.json", run_record(plan, self.backend.name))
        self.step(f"run {plan.run_id}: {len(plan.cases)} case(s), backend {self.backend.name}, runtime {t.runtime}, "
                  f"vendor {self.config.vendor.name} ({t.vendor_reason}); directory {plan.run_dir}")
        for warning in getattr(self.config, "warnings", ()):     # printed by the CLI too, before the run
            self.log.warning(f"config: {warning}")

    def _check_hosts(self) -> list:
        hosts = self.plan.hosts
        self.step(f"check: connecting to {len(hosts)} host(s)")
        self.progress.stage(f"check: connecting to {len(hosts)} host(s), probing and deploying")
        checks = check_hosts(self.backend, hosts, needed_accelerators(self.config), deploy=True,
                             say=self.log.info)
        for c in checks:
            if c.ok:
                self.log.info(f"host {c.host}: ok: {c.detail}")
            else:
                self.step(f"host {c.host}: {c.outcome}: {c.detail}; {c.remedy}", level=logging.ERROR)
        return checks

    def _replan(self, accelerators: dict):
        """Resolve nproc auto with the accelerators the hosts reported, and record the final plan (a scheduler's
        backend may put the nodes it found in place of the cluster's hosts: Backend.planning)."""
        config, accelerators = self.backend.planning(self.config, accelerators)
        if config is self.config and all(c.nproc is not None for c in self.config.test.cases):
            return
        self.config = config
        self.plan = build_plan(self.config, self.plan.run_id, accelerators)
        for note in self.plan.notes:
            self.step(f"note: {note}", logging.WARNING)
        self.summary.cases = [self._case_summary(c) for c in self.plan.cases]
        write_json_atomic(self.plan.run_dir / "run.json", run_record(self.plan, self.backend.name))
        for case in self.plan.cases:
            if case.case.nproc is not None:
                self.log.info(f"{case.name}: nproc auto -> {case.case.nproc}")

    def _prepare_case(self, case, cres: CaseSummary) -> bool:
        """Backend preparation for the case's hosts (images for containers); a failure fails the case only."""
        t0 = time.monotonic()
        self.progress.stage(f"{case.name}: preparing (container images are built where missing)")
        try:
            try:
                self.backend.prepare_case(case)
            except (KeyboardInterrupt, Interrupted, BackendError):
                raise
            except Exception as exc:  # noqa: BLE001 - fails this case only
                import traceback
                self.log.error(traceback.format_exc())
                raise BackendError(f"unexpected {type(exc).__name__}: {exc}") from exc
        except BackendError as exc:
            self.step(f"{case.name}: preparation failed: {exc}", logging.ERROR)
            self._lines(exc.last_lines)
            for r in cres.rounds:
                r.status = Status.ERROR
                r.failure = {"reason": f"preparation failed: {exc}", "last_lines": list(exc.last_lines)}
            return False
        if time.monotonic() - t0 > 1:
            self.step(f"{case.name}: prepared in {time.monotonic() - t0:.1f} s")
        return True

    def _run_round(self, case, rnd, res: RoundSummary):
        t = self.config.test
        label = f"{case.name} round {rnd.index}/{len(case.rounds)}"
        self.step(f"{label}: start on {', '.join(n.label for n in rnd.nodes)}")
        t0 = time.monotonic()
        nodes = list(rnd.nodes)
        self.host_of.update((n.label, n.host.address) for n in nodes)
        self.progress.round(label, [n.label for n in nodes], t.case_timeout)
        monitors: dict = {}
        launchers: dict = {}
        wait = Wait(WaitEnd.ERROR, "the round did not start")
        # each case: every host is its own job; a host that fails to start or run fails alone (its own Wait here)
        node_waits: dict | None = {} if getattr(case.case, "each", False) else None

        def live():
            return [n for n in nodes if node_waits is None or n.label not in node_waits]

        try:
            bound = list(self.backend.start_round(case, rnd))      # a scheduler allocates the nodes here
            if [n.label for n in bound] != [n.label for n in nodes]:
                planned = {n.host.address for n in nodes}
                self.summary.hosts = [h for h in self.summary.hosts if h not in planned]
                self.summary.hosts += [a for a in dict.fromkeys(n.host.address for n in bound)
                                       if a not in self.summary.hosts]
                nodes[:] = bound
                self.step(f"{label}: the scheduler gave {', '.join(n.label for n in nodes)}")
                self.host_of.update((n.label, n.host.address) for n in nodes)
                self.progress.round(label, [n.label for n in nodes], t.case_timeout)
            gone = [n.host.address for n in nodes if n.host.address in self.lost_hosts]
            if gone and node_waits is None:
                raise BackendError(f"host {gone[0]} was lost earlier in this run ({self.lost_hosts[gone[0]]})")
            if gone and node_waits is not None:
                for node in [n for n in nodes if n.host.address in self.lost_hosts]:
                    self._host_failed(node_waits, node, f"host {node.host.address} was lost earlier in this run "
                                                        f"({self.lost_hosts[node.host.address]})", label)
            if t.clear_caches:
                self._clear_caches(live())
            for node in nodes:
                self.progress.node(node.label, "preparing")
            for o in fan_out(live(), self.backend.prepare_node, deadline_s=600):
                if not o.ok:
                    error = o.error if o.key.label in o.error else f"{o.key.label}: {o.error}"
                    if node_waits is None:
                        raise BackendError(error)
                    self._host_failed(node_waits, o.key, error, label)
            for node in live():
                self.cmd(node, node.monitor_argv)
                try:
                    monitors[node.label] = self.backend.spawn_monitor(node)
                except BackendError as exc:
                    if node_waits is None:
                        raise
                    self._host_failed(node_waits, node, str(exc), label)
            for node in live():
                self.cmd(node, node.launcher_argv)
            problems = []
            for o in fan_out(live(), self.backend.spawn_launcher, deadline_s=60):
                if o.ok:
                    launchers[o.key.label] = o.value
                else:
                    problems.append(o.error if o.key.label in o.error else f"{o.key.label}: {o.error}")
                    if node_waits is not None:
                        self._host_failed(node_waits, o.key, f"the node launcher did not start: {problems[-1]}",
                                          label)
            if problems and node_waits is None:
                raise BackendError(f"the node launcher did not start: {'; '.join(problems)}")
            for node in nodes:
                self.progress.node(node.label, "running")
            wait = self._wait(nodes, launchers, t.case_timeout, label, node_waits)
        except KeyboardInterrupt:
            wait = Wait(WaitEnd.INTERRUPTED, "interrupted (SIGINT)")
            raise
        except Interrupted as exc:
            wait = Wait(WaitEnd.INTERRUPTED, f"interrupted ({exc})")
            raise
        except BackendError as exc:
            wait = Wait(WaitEnd.ERROR, str(exc))
            self.step(f"{label}: {exc}", level=logging.ERROR)
        except Exception as exc:  # noqa: BLE001 - an unexpected backend failure fails this round, not the run
            import traceback
            self.log.error(traceback.format_exc())
            wait = Wait(WaitEnd.ERROR, f"unexpected {type(exc).__name__}: {exc} (traceback in {RUN_LOG})")
            self.step(f"{label}: {wait.reason}", level=logging.ERROR)
        finally:
            with _signals_deferred() as held:
                hurry = wait.end == WaitEnd.INTERRUPTED
                if hurry:       # interrupted: exit within seconds; a second signal makes the launchers SIGKILL
                    self._stop(launchers, "launcher", signal.SIGTERM, HURRY_GRACE_S, second=signal.SIGTERM)
                self._stop(launchers, "launcher", signal.SIGTERM, STOP_GRACE_S)
                self._stop(monitors, "monitor", signal.SIGTERM, 2.0 if hurry else 5.0)
                for node in nodes:
                    if node.host.address in self.lost_hosts:
                        continue
                    try:
                        self.backend.cleanup_node(node)
                    except Exception as exc:  # noqa: BLE001 - cleanup goes on for every node
                        self.step(f"{node.label}: cleanup failed: {exc}", level=logging.ERROR)
                for node in nodes:
                    self.progress.node(node.label, "collecting")
                left = self._collect(nodes, stop=lambda: bool(held.pending))
                try:
                    self.backend.end_round(nodes)
                except Exception as exc:  # noqa: BLE001 - the round is judged on what it left either way
                    self.step(f"{label}: releasing the round's allocation failed: {exc}", level=logging.ERROR)
                if left and wait.end != WaitEnd.INTERRUPTED:
                    # a signal arrived while collecting: the round is not judged on half its files
                    wait = Wait(WaitEnd.INTERRUPTED, f"interrupted during collect; the logs of {', '.join(left)} "
                                                     f"stay on the host (`flagperf collect {self.plan.run_dir}` "
                                                     f"fetches them)")
                res.duration_s = time.monotonic() - t0
                self._judge(nodes, launchers, wait, res, node_waits)
                self.progress.round_done(res.status.value)
                self._report_round(label, res)

    def _wait(self, nodes, launchers: dict, timeout: float, label: str, node_waits: dict | None = None) -> Wait:
        """Wait for every node launcher to exit; the first failure stops the others. Every HEARTBEAT_INTERVAL_S
        the hosts of the running nodes must answer (within HEARTBEAT_TIMEOUT_S), or the round fails naming the
        lost host. With ``node_waits`` (an each case: independent jobs) a failed or lost node stops nothing else:
        how each node ended goes into ``node_waits`` ({label: Wait})."""
        done: queue.Queue = queue.Queue()
        for name, proc in launchers.items():
            threading.Thread(target=lambda n=name, p=proc: done.put((n, p.wait())), daemon=True).start()
        deadline = time.monotonic() + timeout
        pending, failed_node = set(launchers), None
        scheduler_end = None
        by_label = {n.label: n for n in nodes}
        next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
        while pending:
            try:
                wait_s = max(0.0, min(deadline, next_beat) - time.monotonic())
                name, code = done.get(timeout=wait_s)
            except queue.Empty:
                if time.monotonic() < deadline:
                    next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
                    lost = self._heartbeat([by_label[n] for n in pending if n in by_label])
                    if lost and node_waits is not None:     # each: that host's job alone
                        node, why = lost
                        self.step(f"{label}: host {node.host.address} lost ({why}); the other hosts go on",
                                  logging.ERROR)
                        pending.discard(node.label)
                        node_waits[node.label] = Wait(WaitEnd.HOST_LOST, f"host {node.host.address} stopped "
                                                      f"answering: {why} (no answer within "
                                                      f"{HEARTBEAT_TIMEOUT_S:g} s)", node.label)
                    elif lost:
                        node, why = lost
                        self.step(f"{label}: host {node.host.address} lost ({why}); stopping every node",
                                  logging.ERROR)
                        self._stop({n: launchers[n] for n in pending}, "launcher", signal.SIGTERM, STOP_GRACE_S)
                        return Wait(WaitEnd.HOST_LOST, f"host {node.host.address} stopped answering: {why} "
                                                       f"(no answer within {HEARTBEAT_TIMEOUT_S:g} s)", node.label)
                    continue
                self.step(f"{label}: CASE_TIMEOUT of {timeout:g} s reached; stopping every node", logging.ERROR)
                self._stop({n: launchers[n] for n in pending}, "launcher", signal.SIGTERM, STOP_GRACE_S)
                if node_waits is not None:
                    node_waits.update((n, Wait(WaitEnd.TIMEOUT, f"round exceeded CASE_TIMEOUT ({timeout:g} s)", n))
                                      for n in pending)
                return Wait(WaitEnd.TIMEOUT, f"round exceeded CASE_TIMEOUT ({timeout:g} s)")
            if name not in pending:
                continue            # each: the launcher of a host already counted as lost
            pending.discard(name)
            self.log.info(f"{name}: node launcher exited with {code}")
            # (WaitEnd value, why) when a scheduler ended the node's job itself (its time limit, a lost node)
            ended = getattr(launchers[name], "scheduler_end", None) if code != 0 else None
            if ended:
                self.step(f"{label}: {name}: {ended[1]}", logging.ERROR)
            if node_waits is not None:      # each: independent jobs, nothing else is stopped
                node_waits[name] = Wait(WaitEnd.COMPLETED) if code == 0 else \
                    Wait(WaitEnd(ended[0]), ended[1], name) if ended else \
                    Wait(WaitEnd.NODE_FAILED, f"node {name} failed", name)
                if code != 0:
                    self.step(f"{label}: {name} failed; the other hosts go on (independent jobs)", logging.WARNING)
                continue
            if code != 0 and failed_node is None:
                failed_node, scheduler_end = name, ended
                if pending:
                    self.step(f"{label}: {name} failed; stopping {', '.join(sorted(pending))}", logging.WARNING)
                    for n in pending:
                        launchers[n].signal(signal.SIGTERM)
        bad = [n for n, w in (node_waits or {}).items() if w.end != WaitEnd.COMPLETED]
        if bad:
            return Wait(WaitEnd.NODE_FAILED, f"{len(bad)} host(s) failed: {', '.join(bad)}", bad[0])
        if failed_node and scheduler_end:
            return Wait(WaitEnd(scheduler_end[0]), scheduler_end[1], failed_node)
        if failed_node:
            return Wait(WaitEnd.NODE_FAILED, f"node {failed_node} failed", failed_node)
        return Wait(WaitEnd.COMPLETED)

    def _heartbeat(self, nodes) -> tuple | None:
        """(node, why) of the first node whose host does not answer, else None. A lost host is remembered: its
        processes are not signalled, cleaned up or collected any more (each call would wait for it)."""
        hosts = {n.host.address: n.host for n in nodes}
        try:
            answers = self.backend.heartbeat(list(hosts.values()))
        except Exception as exc:  # noqa: BLE001 - a heartbeat that cannot run proves nothing either way
            self.log.warning(f"heartbeat failed: {type(exc).__name__}: {exc}")
            return None
        for node in nodes:
            why = answers.get(node.host.address)
            if why:
                self.lost_hosts[node.host.address] = why
                return node, why
        return None

    def _stop(self, procs: dict, what: str, sig, grace: float, second=None):
        """Signal every process still running, wait up to grace, then SIGKILL. Processes on lost hosts are left:
        signalling them would only wait for a host that does not answer (the host's own watchdogs stop them when
        their parent connection goes)."""
        procs = {n: p for n, p in procs.items() if self.host_of.get(n) not in self.lost_hosts}
        running = {n: p for n, p in procs.items() if p.wait(0) is None}
        for name, proc in running.items():
            self.log.info(f"{name}: stopping the {what} (pid {proc.pid}) with {signal.Signals(sig).name}")
            proc.signal(sig)
        deadline = time.monotonic() + grace
        for name, proc in running.items():
            if proc.wait(max(0.0, deadline - time.monotonic())) is None:
                if second is not None:      # ask again (a node launcher then SIGKILLs its ranks at once)
                    self.log.info(f"{name}: the {what} did not stop within {grace:g} s; "
                                  f"{signal.Signals(second).name} again")
                    proc.signal(second)
                    continue
                self.log.warning(f"{name}: the {what} did not stop within {grace:g} s; SIGKILL")
                proc.signal(signal.SIGKILL)
                proc.wait(5.0)

    def _clear_caches(self, nodes):
        for node in nodes:
            ok, why = self.backend.drop_caches(node)
            if ok:
                self.log.info(f"{node.label}: page cache dropped")
            else:
                self.step(f"{node.label}: CLEAR_CACHES: cannot drop the page cache ({why or 'not permitted'}); "
                          f"going on", logging.WARNING)

    def _collect(self, nodes, stop=None) -> list:
        """Fetch every node's directory; returns the labels of the nodes whose fetch a signal cut short."""
        for node in nodes:
            if node.host.address in self.lost_hosts:
                self.step(f"{node.label}: not collected: host {node.host.address} lost "
                          f"({self.lost_hosts[node.host.address]}); `flagperf collect` fetches it later",
                          logging.WARNING)
        nodes = [n for n in nodes if n.host.address not in self.lost_hosts]
        cut = []
        for o in fan_out(nodes, self.backend.collect, deadline_s=600, stop=stop, stop_grace_s=COLLECT_GRACE_S):
            if not o.ok and o.error == CANCELLED:
                cut.append(o.key.label)
                self.step(f"{o.key.label}: collect cut short by the interrupt; the files stay on "
                          f"{o.key.host.address}", logging.WARNING)
            elif o.ok:
                files, size = o.value
                self.log.info(f"{o.key.label}: collected {files} file(s), {size} bytes into {o.key.local_dir}")
                # what was left on the host or refused is logged by the transport (treesync.report_fetch)
            else:
                self.step(f"{o.key.label}: collect failed: {o.error}", logging.ERROR)
        return cut

    # -- results ------------------------------------------------------------------------------------------------
    def _judge(self, nodes, launchers, wait: Wait, res: RoundSummary, node_waits: dict | None = None):
        """Read back what every node left (each file checked against its schema), then interpret the round (an
        each case, ``node_waits`` given: every host on its own, see _judge_each)."""
        evidence = []
        own_records: dict = {}      # each: {label: that host's rank 0 PerfLog records}
        res.nodes = []
        rank0 = perflog.read_records(node_logs(nodes[0]).get(0, "")) if nodes else []
        window = measured_window(rank0)
        for node in nodes:
            proc = launchers.get(node.label)
            logs = node_logs(node)      # rank<R>.out.log, or node.out.log of a node command (launch mode node)
            ev = NodeEvidence(node.label, node.host.address, node.node_rank, tuple(logs),
                              launcher_exit=proc.wait(0) if proc else None, mode=node.launch.mode,
                              benchmark=str(node.case_config.get("model", "")))
            try:
                ev.ranks = read_json_file(node.local_dir / RANKS_FILE, RankReport)
            except ContractError as exc:
                ev.ranks_problem = f"host {node.host.address}: {exc}"
                if wait.end == WaitEnd.COMPLETED or proc is not None:
                    self.log.warning(f"{node.label}: {ev.ranks_problem}")
            for rank, path in logs.items():
                ev.rank_logs[rank] = str(path)
                ev.rank_tails[rank] = perflog.tail(path, TAIL_LINES)
            out = node.local_dir / self.backend.node_output
            ev.output_log, ev.output_tail = str(out), perflog.tail(out, TAIL_LINES)
            evidence.append(ev)
            reaped = getattr(ev.ranks, "reaped", None) or []
            if reaped:
                pids = ", ".join(str(r.get("pid")) for r in reaped[:8]) + (" ..." if len(reaped) > 8 else "")
                self.step(f"{node.label}: {len(reaped)} process(es) left behind by the ranks were killed "
                          f"(pids {pids}; see ranks.json)", logging.WARNING)
            summary = NodeSummary(node.label, node.host.address, node.node_rank, ev.launcher_exit,
                                  [r.to_dict() for r in ev.ranks.ranks] if ev.ranks else [])
            if node_waits is not None:      # each: the host's own rank 0 and measured window
                own = perflog.read_records(logs[node.ranks[0]]) if node.ranks else []
                own_records[node.label] = own
                window = measured_window(own)
            if not any(r.get("event") == "FINISHED" and not is_flagperf_finished(r)
                       for r in (own_records.get(node.label, rank0))):     # FlagPerf's formats instead?
                ev.flagperf_results = node_results(node)
            try:
                summary.monitors = summarize_monitors(node.local_dir, window)
            except Exception as exc:  # noqa: BLE001 - a monitor file problem never fails the round
                self.log.warning(f"{node.label}: cannot summarise monitor files: {exc}")
            self._report_sensors(node)
            res.nodes.append(summary)
        if node_waits is not None:
            self._judge_each(evidence, wait, node_waits, res, own_records)
            return
        verdict = interpret_round(RoundEvidence(wait, evidence, rank0))
        res.status, res.failure = verdict.status, verdict.failure
        res.finished = verdict.finished.to_dict() if verdict.finished else None

    def _judge_each(self, evidence, wait: Wait, node_waits: dict, res: RoundSummary, records: dict):
        """An each round: every host's job is judged on its own (its own Wait, its own rank 0), then the hosts'
        verdicts are folded into the round's (interpret.hosts_verdict). A signal stops the whole run, so an
        interrupted round interrupts every host."""
        verdicts = []
        for ev, summary in zip(evidence, res.nodes):
            own = node_waits.get(ev.label)
            if wait.end == WaitEnd.INTERRUPTED or own is None:
                own = wait if wait.end in (WaitEnd.INTERRUPTED, WaitEnd.TIMEOUT, WaitEnd.ERROR) else \
                    Wait(WaitEnd.COMPLETED)
            v = interpret_round(RoundEvidence(own, [ev], records.get(ev.label, [])))
            summary.status, summary.failure = v.status, v.failure
            summary.finished = v.finished.to_dict() if v.finished else None
            verdicts.append((ev.label, v))
            if v.status == Status.PASSED and v.finished:
                self.log.info(f"{res.dir}: {ev.label}: passed: {v.finished.metric} = {v.finished.value:.4g} "
                              f"{v.finished.unit}")
            elif v.status != Status.PASSED:
                self.log.warning(f"{res.dir}: {ev.label}: {v.status.value}: {(v.failure or {}).get('reason', '')}")
        verdict = hosts_verdict(verdicts)
        res.status, res.failure = verdict.status, verdict.failure
        res.finished = verdict.finished.to_dict() if verdict.finished else None

    def _host_failed(self, node_waits: dict, node, error: str, label: str):
        """Each case: this host's job could not start; the other hosts' jobs go on."""
        node_waits[node.label] = Wait(WaitEnd.ERROR, error, node.label)
        self.step(f"{label}: {error}; the other hosts go on (independent jobs)", logging.ERROR)

    def _report_sensors(self, node):
        status, problem = read_status(node.local_dir)
        if status is None:
            self.log.warning(f"{node.label}: host {node.host.address}: {problem}")
            return
        for sensor, info in status.sensors.items():
            key = (node.host.address, sensor)
            if sensor == "gpu" and self.config.vendor.gpu_monitor == "none":
                continue            # a vendor without accelerators has no GPU sensor to miss
            if not info.available and key not in self.reported_sensors:
                self.reported_sensors.add(key)
                self.step(f"{node.host.address}: sensor {sensor} unavailable: {info.reason or 'no reason given'}",
                          logging.WARNING)

    def _report_round(self, label, res: RoundSummary):
        f = res.failure or {}
        if res.status == Status.SKIPPED:
            self.step(f"{label}: {f.get('reason', 'skipped')}", logging.WARNING)
            return
        if res.status == Status.PASSED:
            fin = res.finished or {}
            self.step(f"{label}: passed in {res.duration_s:.1f} s: {fin.get('metric')} = {fin.get('value'):.4g} "
                      f"{fin.get('unit')}")
            return
        msg = f"{label}: {res.status.value.upper()} after {res.duration_s:.1f} s: {f.get('reason', '')}"
        if f.get("rank") is not None:
            msg += f" (node {f.get('node')}, rank {f['rank']}, {describe_exit(f.get('exit_code'))}, log {f.get('log')})"
        elif f.get("log"):
            msg += f" (log {f.get('log')})"
        self.step(msg, logging.ERROR)
        self._lines(f.get("last_lines") or [])

    def _check_references(self, case, cres: CaseSummary):
        """After a case's rounds: its referenced metrics (median over the passed rounds) against the reference
        file that fits rank 0's device (flagperf.references); the verdicts go into the case's summary."""
        files = getattr(self.config, "references", ())
        if not files or not cres.passed_rounds:
            return
        from flagperf.references import describe, judge_case
        nodes = case.rounds[0].nodes if case.rounds else ()
        verdicts, ref, device = judge_case(cres, files, dict(nodes[0].case_config) if nodes else {})
        cres.verdicts = verdicts
        if ref is None:
            self.log.info(f"{case.name}: no reference file fits device {device!r}")
            return
        if not verdicts:
            self.log.info(f"{case.name}: {ref.path} (device {device!r}) has no reference for this case")
            return
        self.log.info(f"{case.name}: references from {ref.path} (device {device!r})")
        for v in verdicts:
            self.step(f"{case.name}: {describe(v)}; source {v.get('source')}",
                      logging.INFO if v.get("ok", True) else logging.ERROR)

    # -- helpers ------------------------------------------------------------------------------------------------
    def _lines(self, lines):
        for line in lines:
            self.say(f"    | {line}")
            self.log.error(f"    | {line}")

    def step(self, message: str, level: int = logging.INFO):
        self.log.log(level, message)
        self.say(message if level < logging.WARNING else f"{logging.getLevelName(level)}: {message}")

    def cmd(self, node, argv):
        self.log.info(f"{node.label}: $ {shlex.join(argv)}")

    def _close_log(self):
        for h in self.log.handlers:
            h.close()
        self.log.handlers[:] = []


def run_record(plan, backend: str) -> dict:
    """run.json (flagperf.run/1): what `flagperf collect` needs to fetch this run again later."""
    c = plan.config.cluster
    return {
        "schema": RUN_SCHEMA,
        "run_id": plan.run_id,
        "flagperf_version": __version__,
        "backend": backend,
        "runtime": plan.config.test.runtime,
        "known_hosts": c.known_hosts,
        "hosts": [{"HOST": h.address, "SSH_PORT": h.ssh_port, "SSH_USER": h.ssh_user, "SSH_KEY": h.ssh_key,
                   "PYTHON": h.python, "FLAGPERF_PATH": h.flagperf_path} for h in plan.hosts],
        "nodes": [{"case": case.name, "round": rnd.index, "host": node.host.address, "node": node.label,
                   "node_dir": node.node_dir, "local_dir": str(node.local_dir.relative_to(plan.run_dir))}
                  for case in plan.cases for rnd in case.rounds for node in rnd.nodes],
    }


def measured_window(records) -> tuple | None:
    """(RUN_START, RUN_END) epoch seconds of rank 0's PerfLog records: the benchmark's measured window."""
    times: dict = {}
    for r in records:
        if r.get("event") in ("RUN_START", "RUN_END") and isinstance(r.get("time"), (int, float)):
            times.setdefault(r["event"], float(r["time"]))
    if "RUN_START" in times and "RUN_END" in times and times["RUN_END"] > times["RUN_START"]:
        return times["RUN_START"], times["RUN_END"]
    return None


def _oserror(exc: OSError) -> str:
    """'[Errno 28] No space left on device' without the file name the caller already gives."""
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"received {signal.Signals(signum).name}")


class _signals_deferred:
    """Cleanup must finish: hold SIGINT/SIGTERM while it runs, then act on them once it is done."""

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


class _IsoFormatter(logging.Formatter):
    def formatTime(self, record, datefmt=None):
        return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
