"""The run, top to bottom.

    check hosts -> prepare run directory
    for each case, for each round:
        clear caches -> write node files -> runtime.prepare -> start monitors -> launch node launchers
        -> wait for exits (first failure stops the rest) -> stop launchers -> stop monitors
        -> runtime.cleanup -> collect -> read results
    summarise (summary.json + table)

Nothing here knows how a host is reached (hosts/) or where ranks run (runtimes/).
"""

from __future__ import annotations

import json
import logging
import queue
import shlex
import signal
import threading
import time
from datetime import datetime

import yaml

from flagperf import __version__
from flagperf.checks import connect_hosts, failed, needed_accelerators, probe_hosts, unique_hosts
from flagperf.deploy import deploy_host, local_manifest, needs_deploy
from flagperf.errors import EXIT_CASE_FAILED, EXIT_HOSTS, EXIT_INTERRUPTED, EXIT_OK, Interrupted
from flagperf.hosts import HostError
from flagperf.hosts.fanout import fan_out
from flagperf.plan import Plan
from flagperf.results import perflog
from flagperf.results.monitors import read_status, summarize_monitors
from flagperf.results.report import markdown
from flagperf.results.summary import CaseResult, NodeResult, RoundResult, build_summary, write_summary
from flagperf.runtimes import get_runtime

RUN_LOG = "flagperf_run.log"
STOP_GRACE_S = 15.0        # after SIGTERM to a node launcher (it gives its ranks 10 s), before SIGKILL
CONNECT_DEADLINE_S = 30.0


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


class Run:
    """One execution of a Plan. ``say`` receives progress lines for the terminal."""

    def __init__(self, plan: Plan, say=print, *, accept_new_host_keys: bool = False):
        self.plan = plan
        self.accept_new_host_keys = accept_new_host_keys
        self.config = plan.config
        self.say = say
        self.runtime = get_runtime(self.config.test.runtime, self.config)
        self.transports = {}
        self.reported_sensors = set()
        self.log = logging.getLogger(f"flagperf.run.{plan.run_id}")

    # -- the run ------------------------------------------------------------------------------------------------
    def execute(self) -> int:
        plan = self.plan
        started, t0 = now_iso(), time.monotonic()
        self._open_run_dir()
        results = [CaseResult(c.name, c.case.key, c.case,
                              [RoundResult(r.index, f"{c.name}/round{r.index}") for r in c.rounds])
                   for c in plan.cases]
        interrupted = False
        code = EXIT_OK
        old_term = signal.signal(signal.SIGTERM, _raise_interrupted)
        try:
            if not self._check_hosts():
                code = EXIT_HOSTS
            else:
                for case, result in zip(plan.cases, results):
                    if self._prepare_case(case, result):
                        for rnd, rres in zip(case.rounds, result.rounds):
                            self._run_round(case, rnd, rres)
                    self.step(f"case {case.name}: {result.status.upper()}")
        except (KeyboardInterrupt, Interrupted):
            interrupted = True
            self.step("run interrupted: stopped every process, writing the summary")
        finally:
            signal.signal(signal.SIGTERM, old_term)
            for t in self.transports.values():
                t.close()
            summary = build_summary(
                run_id=plan.run_id, run_dir=plan.run_dir, version=__version__, started=started,
                finished=now_iso(), interrupted=interrupted, vendor=self.config.vendor.name,
                runtime=self.runtime.name, hosts=[h.address for h in plan.hosts], case_results=results)
            summary["duration_s"] = round(time.monotonic() - t0, 3)
            write_summary(plan.run_dir / "summary.json", summary)
            (plan.run_dir / "report.md").write_text(markdown(summary), encoding="utf-8")
            self.step(f"summary: {plan.run_dir / 'summary.json'}, report: {plan.run_dir / 'report.md'}")
            self._close_log()
        self.summary = summary
        if interrupted:
            return EXIT_INTERRUPTED
        if code != EXIT_OK:
            return code
        return EXIT_OK if summary["status"] == "passed" else EXIT_CASE_FAILED

    # -- steps --------------------------------------------------------------------------------------------------
    def _open_run_dir(self):
        plan, t = self.plan, self.config.test
        plan.run_dir.mkdir(parents=True, exist_ok=False)
        handler = logging.FileHandler(plan.run_dir / RUN_LOG, encoding="utf-8")
        handler.setFormatter(_IsoFormatter("%(asctime)s %(levelname)-7s %(message)s"))
        self.log.handlers[:] = [handler]
        self.log.setLevel(getattr(logging, t.log_level.upper()))
        self.log.propagate = False
        effective = self.config.to_dict()
        (plan.run_dir / "effective_config.yaml").write_text(
            yaml.safe_dump(effective, sort_keys=False, allow_unicode=True), encoding="utf-8")
        (plan.run_dir / "run.json").write_text(json.dumps(run_record(plan), indent=1), encoding="utf-8")
        self.step(f"run {plan.run_id}: {len(plan.cases)} case(s), runtime {self.runtime.name}, "
                  f"vendor {self.config.vendor.name} ({t.vendor_reason}); directory {plan.run_dir}")

    def _check_hosts(self) -> bool:
        """Connect to every host, deploy the tree where needed, probe them; False when a host is not fit."""
        config, hosts = self.config, self.plan.hosts
        self.step(f"check: connecting to {len(unique_hosts(hosts))} host(s)")
        self.transports, bad = connect_hosts(config, hosts, accept_new_host_keys=self.accept_new_host_keys)
        if not bad:
            bad = self._deploy()
        if not bad:
            bad = [c for c in probe_hosts(config, self.transports, hosts, needed_accelerators(config)) if not c.ok]
        for c in bad:
            self.step(f"host {c.host}: {c.outcome}: {c.detail}; {c.remedy}", level=logging.ERROR)
        if not bad:
            self.log.info(f"check: {len(self.transports)} host(s) ok")
        return not bad

    def _deploy(self) -> list:
        todo = [h for h in unique_hosts(self.plan.hosts) if needs_deploy(h, self.config.source_root)]
        if not todo:
            return []
        manifest = local_manifest(self.config.source_root)
        self.step(f"deploy: syncing {len(manifest)} file(s) to {len(todo)} host(s)")
        bad = []
        for o in fan_out(todo, lambda h: deploy_host(self.transports[h.address], self.config.source_root, manifest),
                         deadline_s=600):
            if o.ok:
                d = o.value
                self.log.info(f"host {d.host}: deploy to {d.path}: {d.files_sent} of {d.files_total} file(s) "
                              f"differed, {d.bytes_sent} bytes sent")
            else:
                bad.append(failed(o.key.address, "deploy_path_missing", f"deploy failed: {o.error}"))
        return bad

    def _prepare_case(self, case, result) -> bool:
        """Runtime preparation for the case's hosts (images for containers); a failure fails the case."""
        t0 = time.monotonic()
        try:
            self.runtime.prepare_case(self.transports, case, self.plan.run_dir, self.log)
        except (KeyboardInterrupt, Interrupted):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure here fails this case, the next one still runs
            lines = list(getattr(exc, "last_lines", []))
            self.step(f"{case.name}: preparation failed: {exc}", logging.ERROR)
            for line in lines:
                self.say(f"    | {line}")
                self.log.error(f"    | {line}")
            for rres in result.rounds:
                rres.status = "error"
                rres.failure = {"reason": f"preparation failed: {exc}", "last_lines": lines}
            return False
        if time.monotonic() - t0 > 1:
            self.step(f"{case.name}: prepared in {time.monotonic() - t0:.1f} s")
        return True

    def _run_round(self, case, rnd, res: RoundResult):
        t = self.config.test
        label = f"{case.name} round {rnd.index}/{len(case.rounds)}"
        self.step(f"{label}: start on {', '.join(n.label for n in rnd.nodes)}")
        t0 = time.monotonic()
        nodes = list(rnd.nodes)
        monitors, launchers, prepared = {}, {}, []
        res.status = "error"
        try:
            if t.clear_caches:
                self._clear_caches(nodes)
            self._fan(nodes, self._write_node_files, "write node files")
            for node in nodes:
                self.runtime.prepare(self.transports[node.host.address], node, self.log)
                prepared.append(node)
            for node in nodes:
                tr = self.transports[node.host.address]
                self.cmd(node, node.monitor_argv)
                monitors[node.label] = tr.spawn(node.monitor_argv, log_path=f"{node.node_dir}/monitor.out.log")
            for node in nodes:
                self.cmd(node, node.launcher_argv)
            for o in fan_out(nodes, lambda n: self.runtime.launch(self.transports[n.host.address], n),
                             deadline_s=60):
                if not o.ok:
                    raise HostError(f"{o.key.label}: cannot start the node launcher: {o.error}")
                launchers[o.key.label] = o.value
            res.status, res.failure = self._wait(nodes, launchers, t.case_timeout, label)
        except (KeyboardInterrupt, Interrupted):
            res.status = "interrupted"
            res.failure = {"reason": "interrupted by the user"}
            raise
        except HostError as exc:
            res.status, res.failure = "error", {"reason": str(exc)}
            self.step(f"{label}: {exc}", level=logging.ERROR)
        finally:
            with _signals_deferred():
                self._stop(launchers, "launcher", signal.SIGTERM, STOP_GRACE_S)
                self._stop(monitors, "monitor", signal.SIGTERM, 5.0)
                for node in prepared:
                    try:
                        self.runtime.cleanup(self.transports[node.host.address], node, self.log)
                    except Exception as exc:  # noqa: BLE001 - cleanup goes on for every node
                        self.step(f"{node.label}: cleanup failed: {exc}", level=logging.ERROR)
                self._collect(nodes)
                res.duration_s = time.monotonic() - t0
                self._read_round(nodes, res, launchers)
                self._report_round(label, res)

    def _wait(self, nodes, launchers, timeout, label):
        """Wait for every node launcher to exit; the first failure stops the others. Returns (status, failure)."""
        done: queue.Queue = queue.Queue()
        for name, proc in launchers.items():
            threading.Thread(target=lambda n=name, p=proc: done.put((n, p.wait())), daemon=True).start()
        deadline = time.monotonic() + timeout
        pending, failed = set(launchers), None
        while pending:
            try:
                name, code = done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.step(f"{label}: CASE_TIMEOUT of {timeout:g} s reached; stopping every node", logging.ERROR)
                self._stop({n: launchers[n] for n in pending}, "launcher", signal.SIGTERM, STOP_GRACE_S)
                return "timeout", {"reason": f"round exceeded CASE_TIMEOUT ({timeout:g} s)"}
            pending.discard(name)
            self.log.info(f"{name}: node launcher exited with {code}")
            if code != 0 and failed is None:
                failed = name
                if pending:
                    self.step(f"{label}: {name} failed; stopping {', '.join(sorted(pending))}", logging.WARNING)
                    for n in pending:
                        launchers[n].signal(signal.SIGTERM)
        return ("failed", {"reason": f"node {failed} failed", "node": failed}) if failed else ("passed", None)

    def _stop(self, procs: dict, what: str, sig, grace: float):
        """Signal every process still running, wait up to grace, then SIGKILL."""
        running = {n: p for n, p in procs.items() if p.wait(0) is None}
        for name, proc in running.items():
            self.log.info(f"{name}: stopping the {what} (pid {proc.pid}) with {signal.Signals(sig).name}")
            proc.signal(sig)
        deadline = time.monotonic() + grace
        for name, proc in running.items():
            if proc.wait(max(0.0, deadline - time.monotonic())) is None:
                self.log.warning(f"{name}: the {what} did not stop within {grace:g} s; SIGKILL")
                proc.signal(signal.SIGKILL)
                proc.wait(5.0)

    def _write_node_files(self, node):
        tr = self.transports[node.host.address]
        tr.write_file(f"{node.node_dir}/launch.json", json.dumps(node.launch_spec, indent=1).encode())
        tr.write_file(f"{node.node_dir}/case_config.json", json.dumps(node.case_config, indent=1).encode())

    def _clear_caches(self, nodes):
        for node in nodes:
            argv = ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"]
            self.cmd(node, argv)
            try:
                r = self.transports[node.host.address].run(argv, timeout=120)
                ok, why = r.ok, r.stderr.strip()
            except HostError as exc:
                ok, why = False, str(exc)
            if ok:
                self.log.info(f"{node.label}: page cache dropped")
            else:
                self.step(f"{node.label}: CLEAR_CACHES: cannot drop the page cache ({why or 'not permitted'}); "
                          f"going on", logging.WARNING)

    def _collect(self, nodes):
        outcomes = fan_out(nodes, lambda n: self.transports[n.host.address].fetch_tree(n.node_dir, n.local_dir),
                           deadline_s=600)
        for o in outcomes:
            if o.ok:
                files, size = o.value
                self.log.info(f"{o.key.label}: collected {files} file(s), {size} bytes into {o.key.local_dir}")
            else:
                self.step(f"{o.key.label}: collect failed: {o.error}", logging.ERROR)

    def _read_round(self, nodes, res: RoundResult, launchers):
        """Fill the round's results from the files on the driver: ranks.json, rank logs, monitor files."""
        first_fail = None
        for node in nodes:
            nres = NodeResult(node.label, node.host.address, node.node_rank)
            proc = launchers.get(node.label)
            nres.launcher_exit = proc.wait(0) if proc else None
            try:
                doc = json.loads((node.local_dir / "ranks.json").read_text())
                nres.ranks = doc.get("ranks", [])
                if doc.get("first_failure") is not None and first_fail is None:
                    first_fail = (node, doc["first_failure"])
            except (OSError, ValueError):
                pass
            try:
                nres.monitors = summarize_monitors(node.local_dir)
            except Exception as exc:  # noqa: BLE001 - a monitor file problem never fails the round
                self.log.warning(f"{node.label}: cannot summarise monitor files: {exc}")
            self._report_sensors(node)
            res.nodes.append(nres)
        if res.status in ("failed", "timeout", "interrupted") or first_fail:
            if not first_fail and res.failure and res.failure.get("node"):
                # The node failed without a failing rank: the launcher itself broke; show its own output.
                node = next(n for n in nodes if n.label == res.failure["node"])
                out = node.local_dir / self.runtime.node_output
                res.failure.update(log=str(out), last_lines=perflog.tail(out, 12))
            if first_fail:
                node, rank = first_fail
                rec = next((r for r in _node_ranks(res, node.label) if r.get("rank") == rank), {})
                log = perflog.rank_log(node.local_dir, rank)
                res.failure = dict(res.failure or {}, reason=f"rank {rank} failed", node=node.label, rank=rank,
                                   exit_code=rec.get("exit_code"), log=str(log), last_lines=perflog.tail(log, 12))
                if res.status == "passed":
                    res.status = "failed"
            return
        if res.status != "passed":
            return
        rank0 = perflog.rank_log(nodes[0].local_dir, 0)
        records = perflog.read_records(rank0)
        payload = perflog.finished(records)
        skipped = [r for r in records if r.get("event") == "SKIPPED"]
        if payload is None and skipped:
            res.status = "skipped"
            res.failure = {"reason": f"skipped: {skipped[-1].get('reason', 'no reason given')}"}
            return
        problems = ["rank 0 printed no FINISHED line"] if payload is None else perflog.validate_finished(payload)
        if problems:
            res.status = "failed"
            res.failure = {"reason": f"invalid result: {'; '.join(problems)}", "node": nodes[0].label, "rank": 0,
                           "log": str(rank0), "last_lines": perflog.tail(rank0, 12)}
        else:
            res.finished = payload

    def _report_sensors(self, node):
        status = read_status(node.local_dir)
        if status is None:
            self.log.warning(f"{node.label}: the monitor wrote no monitor_status.json")
            return
        for sensor, info in (status.get("sensors") or {}).items():
            key = (node.host.address, sensor)
            if sensor == "gpu" and self.config.vendor.gpu_monitor == "none":
                continue            # a vendor without accelerators has no GPU sensor to miss
            if not info.get("available", False) and key not in self.reported_sensors:
                self.reported_sensors.add(key)
                self.step(f"{node.host.address}: sensor {sensor} unavailable: {info.get('reason', 'no reason given')}",
                          logging.WARNING)

    def _report_round(self, label, res: RoundResult):
        if res.status == "skipped":
            self.step(f"{label}: {res.failure['reason']}", logging.WARNING)
            return
        if res.status == "passed":
            f = res.finished
            self.step(f"{label}: passed in {res.duration_s:.1f} s: {f['metric']} = {f['value']:.4g} {f['unit']}")
            return
        f = res.failure or {}
        msg = f"{label}: {res.status.upper()} after {res.duration_s:.1f} s: {f.get('reason', '')}"
        if f.get("rank") is not None:
            msg += f" (node {f.get('node')}, rank {f['rank']}, {describe_exit(f.get('exit_code'))}, log {f.get('log')})"
        self.step(msg, logging.ERROR)
        for line in f.get("last_lines") or []:
            self.say(f"    | {line}")
            self.log.error(f"    | {line}")

    # -- helpers ------------------------------------------------------------------------------------------------
    def _fan(self, nodes, fn, what):
        for o in fan_out(nodes, fn, deadline_s=120):
            if not o.ok:
                raise HostError(f"{o.key.label}: {what}: {o.error}")

    def step(self, message: str, level: int = logging.INFO):
        self.log.log(level, message)
        self.say(message if level < logging.WARNING else f"{logging.getLevelName(level)}: {message}")

    def cmd(self, node, argv):
        self.log.info(f"{node.label}: $ {shlex.join(argv)}")

    def _close_log(self):
        for h in self.log.handlers:
            h.close()
        self.log.handlers[:] = []


def run_record(plan) -> dict:
    """run.json (flagperf.run/1): what `flagperf collect` needs to fetch this run again later."""
    c = plan.config.cluster
    return {
        "schema": "flagperf.run/1",
        "run_id": plan.run_id,
        "flagperf_version": __version__,
        "known_hosts": c.known_hosts,
        "hosts": [{"HOST": h.address, "SSH_PORT": h.ssh_port, "SSH_USER": h.ssh_user, "SSH_KEY": h.ssh_key,
                   "PYTHON": h.python, "FLAGPERF_PATH": h.flagperf_path} for h in unique_hosts(plan.hosts)],
        "nodes": [{"case": case.name, "round": rnd.index, "host": node.host.address, "node": node.label,
                   "node_dir": node.node_dir, "local_dir": str(node.local_dir.relative_to(plan.run_dir))}
                  for case in plan.cases for rnd in case.rounds for node in rnd.nodes],
    }


def describe_exit(code) -> str:
    """'exit code 7', or 'killed by SIGKILL (exit code -9)' for a rank ended by a signal."""
    if isinstance(code, int) and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            pass
    return f"exit code {code}"


def _node_ranks(res, label):
    for n in res.nodes:
        if n.label == label:
            return n.ranks
    return []


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"received {signal.Signals(signum).name}")


class _signals_deferred:
    """Cleanup must finish: hold SIGINT/SIGTERM while it runs, then act on them once it is done."""

    def __enter__(self):
        self.pending = []
        if threading.current_thread() is not threading.main_thread():
            self.old = None
            return self
        self.old = {s: signal.signal(s, lambda n, _f: self.pending.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        if self.old is None:
            return False
        for s, h in self.old.items():
            signal.signal(s, h)
        if self.pending and exc[0] is None:
            raise Interrupted(f"received {signal.Signals(self.pending[0]).name}")
        return False


class _IsoFormatter(logging.Formatter):
    def formatTime(self, record, datefmt=None):
        return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
