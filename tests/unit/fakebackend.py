"""An in-memory backend for pipeline tests: no subprocess, no SSH, no container.

The fake "host" is the local filesystem: every node directory the backend writes is the node's driver-side
directory (``NodePlan.local_dir``). Node launchers and monitors are :class:`FakeProcess` objects, scripted per
node and round with :class:`NodeScript`; every backend call is recorded in ``FakeBackend.calls`` so that tests
can assert the order.

Also: :func:`make_config`, which writes a test config (and a cluster config) into a folder and loads it.
"""

from __future__ import annotations

import itertools
import json
import logging
import signal as _signal
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from flagperf.backends.base import Backend, BackendError, NodeProcess
from flagperf.checks import HostCheck, failed, unique_hosts
from flagperf.deploy import DeployResult
from flagperf.hosts.fanout import Outcome
from flagperf_contract import (LAUNCHER_OUTPUT, LAUNCHER_SIGNALLED_EXIT, MONITOR_STATUS_FILE,
                               PERFLOG_SCHEMA, RANKS_FILE, MonitorStatus, RankRecord, RankReport, SensorStatus,
                               now_iso, perflog_line, rank_log_name, write_json_atomic)

REPO_ROOT = Path(__file__).resolve().parents[2]
_pids = itertools.count(40000)


# ------------------------------------------------------------------------------------------------ records
def finished_record(value=12.5, **overrides) -> dict:
    """A valid FINISHED PerfLog record (event + payload)."""
    rec = {"event": "FINISHED", "schema": PERFLOG_SCHEMA, "benchmark": "gemm", "metric": "tflops",
           "value": value, "unit": "TFLOPS", "higher_is_better": True, "e2e_time": 3.25,
           "metrics": {"latency": {"value": 0.5, "unit": "ms"}},
           "checks": {"passed": True, "details": {"max_error": 0.0}},
           "env": {"torch": "2.3.0", "device": "cpu"}}
    rec.update(overrides)
    return rec


def skipped_record(reason="no nvcc on this host") -> dict:
    return {"event": "SKIPPED", "schema": PERFLOG_SCHEMA, "reason": reason}


def check_failed_record(reason="max error 0.5 > 0.01") -> dict:
    return {"event": "CHECK_FAILED", "schema": PERFLOG_SCHEMA, "reason": reason}


# ------------------------------------------------------------------------------------------------ scripts
@dataclass
class NodeScript:
    """What one node's launcher "does" in a round.

    - ``exit_code``: the launcher's exit code (when it does not hang).
    - ``rank_exit``: {global rank: exit code}; ranks not named exit 0.
    - ``first_failure``: the rank ranks.json flags as failing first (default: the first non-zero rank).
    - ``records``: {global rank: [PerfLog records]} for the rank logs; by default rank 0 prints a valid
      FINISHED line and the others nothing but text. Records go through ``perflog_line`` (strict JSON).
    - ``raw_lines``: {global rank: [text lines]} appended to the rank log as they are (NaN, garbage).
    - ``write_ranks``: False leaves no ranks.json; ``ranks_text``: written instead of a valid ranks.json.
    - ``ranks_override``: the global ranks to list in ranks.json (default: the plan's).
    - ``output``: lines of the launcher's own output file (launcher.out.log).
    - ``hang``: never exits by itself; a signal ends it with ``LAUNCHER_SIGNALLED_EXIT`` and a ranks.json whose
      ranks were stopped by the launcher.
    - ``delay_s``: exits that many seconds after it was started (the files are written at the start).
    """

    exit_code: int = 0
    rank_exit: dict = field(default_factory=dict)
    first_failure: Optional[int] = None
    records: Optional[dict] = None
    raw_lines: dict = field(default_factory=dict)
    write_ranks: bool = True
    ranks_text: Optional[str] = None
    ranks_override: Optional[list] = None
    output: list = field(default_factory=lambda: ["node launcher: started", "node launcher: done"])
    hang: bool = False
    delay_s: float = 0.0


def script_for(scripts, node) -> NodeScript:
    """The NodeScript of a node: ``scripts`` is None, a NodeScript, a callable(node) -> NodeScript, or a dict
    keyed (most specific first) by (case_name, round, node_rank), (case_name, round), case_name, the model
    name, or "*"; a node no key matches gets the default (passing) script."""
    if scripts is None:
        return NodeScript()
    if isinstance(scripts, NodeScript):
        return scripts
    if callable(scripts):
        return scripts(node) or NodeScript()
    spec = node.launch
    model = spec.case.split(":")[0]
    for key in ((spec.case_name, spec.round, node.node_rank), (spec.case_name, spec.round), spec.case_name,
                model, "*"):
        if key in scripts:
            return scripts[key]
    return NodeScript()


# ---------------------------------------------------------------------------------------------- processes
class FakeProcess(NodeProcess):
    """A process that has exited (``code``) or hangs until signalled. ``on_signal(sig)`` runs once, at the
    first signal of a hanging process, before it "exits" with the code it returns."""

    def __init__(self, code: int = 0, *, hang: bool = False, delay_s: float = 0.0,
                 on_signal: Callable | None = None, name: str = "fake"):
        self.name = name
        self._pid = next(_pids)
        self._code = code
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.on_signal = on_signal
        self.signals: list = []
        self._timer = None
        if not hang:
            if delay_s > 0:
                self._timer = threading.Timer(delay_s, self._done.set)
                self._timer.daemon = True
                self._timer.start()
            else:
                self._done.set()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def exited(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None):
        return self._code if self._done.wait(timeout) else None

    def signal(self, sig: int) -> None:
        with self._lock:
            self.signals.append(sig)
            if self._done.is_set():
                return
            if self._timer is not None:
                self._timer.cancel()
            code = -sig
            if self.on_signal is not None:
                code = self.on_signal(sig)
            self._code = code
            self._done.set()


# ------------------------------------------------------------------------------------------------ backend
class FakeBackend(Backend):
    """Every step in memory. Constructor arguments:

    - ``accelerators``: {address: count} (or one int for every host) the probe reports.
    - ``connect_fail`` / ``probe_fail``: {address: (outcome, detail)}; ``deploy_fail``: {address: error text}.
    - ``prepare_case_fail``: {case name: BackendError}; ``prepare_node_fail``: {(case name, round, node_rank)
      or case name: BackendError or Exception}.
    - ``scripts``: see :func:`script_for`.
    - ``sensors``: the monitor's {sensor: SensorStatus}.
    """

    name = "fake"

    def __init__(self, config=None, log=None, *, accept_new_host_keys: bool = False, accelerators=0,
                 connect_fail=None, deploy_fail=None, probe_fail=None, prepare_case_fail=None,
                 prepare_node_fail=None, scripts=None, sensors=None, describe_lines=None):
        super().__init__(config, log or logging.getLogger("fakebackend"), accept_new_host_keys=accept_new_host_keys)
        self.accelerators = accelerators
        self.connect_fail = dict(connect_fail or {})
        self.deploy_fail = dict(deploy_fail or {})
        self.probe_fail = dict(probe_fail or {})
        self.prepare_case_fail = dict(prepare_case_fail or {})
        self.prepare_node_fail = dict(prepare_node_fail or {})
        self.scripts = scripts
        self.sensors = sensors if sensors is not None else {
            "cpu": SensorStatus(True, source="psutil", file="cpu_monitor.log"),
            "mem": SensorStatus(True, source="psutil", file="mem_monitor.log"),
            "pwr": SensorStatus(False, reason="no RAPL in the fake"),
        }
        self.describe_lines = describe_lines
        self.calls: list = []
        self.launchers: dict = {}      # (case name, round, node label) -> FakeProcess
        self.monitors: dict = {}
        self.need = None
        self._lock = threading.Lock()

    def _record(self, *call):
        with self._lock:
            self.calls.append(call)

    def call_names(self) -> list:
        """The method names called, consecutive repeats folded into one."""
        out = []
        for c in self.calls:
            if not out or out[-1] != c[0]:
                out.append(c[0])
        return out

    # -- hosts --------------------------------------------------------------------------------------------
    def _count(self, address):
        if isinstance(self.accelerators, dict):
            return self.accelerators.get(address, 0)
        return self.accelerators

    def connect(self, hosts) -> list:
        hosts = unique_hosts(hosts)
        self._record("connect", tuple(h.address for h in hosts))
        return [failed(h.address, *self.connect_fail[h.address]) for h in hosts if h.address in self.connect_fail]

    def deploy(self, hosts) -> list:
        hosts = unique_hosts(hosts)
        self._record("deploy", tuple(h.address for h in hosts))
        out = []
        for h in hosts:
            if h.address in self.deploy_fail:
                out.append(Outcome(h, False, None, self.deploy_fail[h.address]))
            else:
                out.append(Outcome(h, True, DeployResult(h.address, h.flagperf_path, 10, 2, 1234)))
        return out

    def probe(self, hosts, need: dict) -> list:
        hosts = unique_hosts(hosts)
        self._record("probe", tuple(h.address for h in hosts))
        self.need = dict(need)
        out = []
        for h in hosts:
            if h.address in self.probe_fail:
                out.append(failed(h.address, *self.probe_fail[h.address]))
            else:
                n = self._count(h.address)
                info = {"accelerators": {"source": "nvml", "count": n, "error": None}, "python": [3, 11, 0]}
                out.append(HostCheck(h.address, "ok", f"fake host, {n} accelerator(s)", "", info))
        return out

    # -- a case -------------------------------------------------------------------------------------------
    def prepare_case(self, case) -> None:
        self._record("prepare_case", case.name)
        exc = self.prepare_case_fail.get(case.name)
        if exc is not None:
            raise exc

    # -- a round ------------------------------------------------------------------------------------------
    def prepare_node(self, node) -> None:
        spec = node.launch
        self._record("prepare_node", spec.case_name, spec.round, node.label)
        exc = self.prepare_node_fail.get((spec.case_name, spec.round, node.node_rank),
                                         self.prepare_node_fail.get(spec.case_name))
        if exc is not None:
            raise exc
        d = Path(node.local_dir)
        d.mkdir(parents=True, exist_ok=True)
        for name, content in node.files.items():
            (d / name).write_text(json.dumps(content, indent=1), encoding="utf-8")

    def spawn_monitor(self, node) -> NodeProcess:
        spec = node.launch
        self._record("spawn_monitor", spec.case_name, spec.round, node.label)
        d = Path(node.local_dir)
        d.mkdir(parents=True, exist_ok=True)
        started = now_iso()
        pid = next(_pids)

        def status(stopped=None, reason=None):
            return MonitorStatus(pid=pid, interval_s=0.5, started=started, sensors=dict(self.sensors),
                                 run_id=None, stopped=stopped, stop_reason=reason, samples=1 if stopped else 0)

        write_json_atomic(d / MONITOR_STATUS_FILE, status().to_dict())
        (d / "cpu_monitor.log").write_text(f"{started} util_pct=12.5 load1=0.25\n", encoding="utf-8")

        def on_signal(sig):
            write_json_atomic(d / MONITOR_STATUS_FILE,
                              status(now_iso(), _signal.Signals(sig).name).to_dict())
            return 0

        proc = FakeProcess(hang=True, on_signal=on_signal, name=f"monitor {node.label}")
        self.monitors[(spec.case_name, spec.round, node.label)] = proc
        return proc

    def spawn_launcher(self, node) -> NodeProcess:
        spec = node.launch
        self._record("spawn_launcher", spec.case_name, spec.round, node.label)
        script = script_for(self.scripts, node)
        d = Path(node.local_dir)
        d.mkdir(parents=True, exist_ok=True)
        ranks = list(script.ranks_override if script.ranks_override is not None else node.ranks)
        started = now_iso()
        # rank logs
        records = script.records if script.records is not None else {0: [finished_record()]}
        for i, rank in enumerate(node.ranks):
            lines = [f"rank {rank}: starting", f"rank {rank}: working"]
            lines += [perflog_line(r) for r in records.get(rank, [])]
            lines += list(script.raw_lines.get(rank, []))
            if script.rank_exit.get(rank, 0) != 0:
                lines.append(f"rank {rank}: Traceback (most recent call last): boom {rank}")
            (d / rank_log_name(rank)).write_text("\n".join(lines) + "\n", encoding="utf-8")
        (d / LAUNCHER_OUTPUT).write_text("\n".join(script.output) + "\n", encoding="utf-8")

        def rank_report(stopped_by_signal=None):
            recs = []
            for i, rank in enumerate(ranks):
                if stopped_by_signal:
                    code, stopped = -_signal.SIGTERM, True
                else:
                    code, stopped = script.rank_exit.get(rank, 0), False
                recs.append(RankRecord(rank, i % max(1, len(ranks)), 50000 + rank, code, started, now_iso(), 0.1,
                                       stopped))
            first = script.first_failure
            if first is None and not stopped_by_signal:
                first = next((r.rank for r in recs if r.exit_code != 0), None)
            return RankReport(node.node_rank, recs, first,
                              f"received {stopped_by_signal}" if stopped_by_signal else None,
                              bool(stopped_by_signal))

        def write_ranks(report):
            if script.ranks_text is not None:
                (d / RANKS_FILE).write_text(script.ranks_text, encoding="utf-8")
            elif script.write_ranks:
                write_json_atomic(d / RANKS_FILE, report.to_dict())

        if script.hang:
            def on_signal(sig):
                write_ranks(rank_report(_signal.Signals(sig).name))
                return LAUNCHER_SIGNALLED_EXIT
            proc = FakeProcess(hang=True, on_signal=on_signal, name=f"launcher {node.label}")
        else:
            write_ranks(rank_report())
            proc = FakeProcess(script.exit_code, delay_s=script.delay_s, name=f"launcher {node.label}",
                               on_signal=lambda sig: LAUNCHER_SIGNALLED_EXIT)
        self.launchers[(spec.case_name, spec.round, node.label)] = proc
        return proc

    def drop_caches(self, node) -> tuple:
        self._record("drop_caches", node.launch.case_name, node.launch.round, node.label)
        return False, "not in the fake"

    def cleanup_node(self, node) -> None:
        self._record("cleanup_node", node.launch.case_name, node.launch.round, node.label)

    def collect(self, node) -> tuple:
        self._record("collect", node.launch.case_name, node.launch.round, node.label)
        return 0, 0

    # -- housekeeping -------------------------------------------------------------------------------------
    def describe(self, node) -> list:
        if self.describe_lines is not None:
            return list(self.describe_lines)
        lines = [f"fake backend: node {node.label} runs in memory"]
        if node.container is not None:
            lines.append(f"  {node.container.docker_run_line()}")
        return lines

    def close(self) -> None:
        self._record("close")


# ------------------------------------------------------------------------------------------------ configs
def make_config(folder, cases, *, vendor="cpu", runtime="bare", hosts=("localhost",), case_timeout=None,
                extra="", detect=None, source_root=REPO_ROOT):
    """Write test.yaml (and cluster.yaml) into ``folder`` and load them. ``cases``: keys, or {key: data_dir}."""
    from flagperf.config import load_config
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cluster.yaml").write_text(
        "HOSTS:\n" + "".join(f"  - {h}\n" for h in hosts) + "MASTER_PORT: 29650\n", encoding="utf-8")
    if not isinstance(cases, dict):
        cases = {c: None for c in cases}
    case_lines = "".join(f'  "{k}": {json.dumps(v)}\n' for k, v in cases.items())
    text = (f"VENDOR: {vendor}\nRUNTIME: {runtime}\nFLAGPERF_PATH: {source_root}\nFLAGPERF_LOG_PATH: logs\n"
            f"MONITOR_INTERVAL: 0.5\nCLUSTER: cluster.yaml\n")
    if case_timeout is not None:
        text += f"CASE_TIMEOUT: {case_timeout}\n"
    text += textwrap.dedent(extra)
    text += f"CASES:\n{case_lines}"
    (folder / "test.yaml").write_text(text, encoding="utf-8")

    def no_detect():
        raise AssertionError("VENDOR is set: no detection")

    return load_config(folder / "test.yaml", source_root=source_root, detect=detect or no_detect)


__all__ = ["BackendError", "FakeBackend", "FakeProcess", "NodeScript", "check_failed_record", "finished_record",
           "make_config", "script_for", "skipped_record"]
