"""The wait of a round: for every node launcher to exit, the first failure stopping the others (an ``each``
round: independent jobs, none stopped; a ``pairs`` round: the other node of the failed node's job only), the
hosts' heartbeat, CASE_TIMEOUT; and the stop of processes that still run. With a live panel, every
STATUS_POLL_S the running nodes' ``node_status.json`` is read (their ranks running or exited, rank 0's latest
STEP) for it.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time

from flagperf.backends.base import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S
from flagperf.hosts.fanout import fan_out
from flagperf.results.interpret import Wait, WaitEnd
from flagperf.stages.context import RunContext
from flagperf_contract import NODE_STATUS_MAX_BYTES, ContractError, NodeStatus, loads_bounded

STOP_GRACE_S = 15.0        # after SIGTERM to a node launcher (it gives its ranks 10 s), before SIGKILL
STATUS_POLL_S = 2.0        # with a live panel: how often the running nodes' node_status.json is read


def stop_processes(ctx: RunContext, procs: dict, what: str, sig, grace: float, second=None) -> None:
    """Signal every process still running, wait up to grace, then SIGKILL (or, with ``second``, send that
    signal again). Processes on lost hosts are left: signalling them would only wait for a host that does not
    answer (the host's own watchdogs stop them when their parent connection goes)."""
    procs = {n: p for n, p in procs.items() if ctx.host_of.get(n) not in ctx.lost_hosts}
    running = {n: p for n, p in procs.items() if p.wait(0) is None}
    for name, proc in running.items():
        ctx.console.detail(f"{name}: stopping the {what} (pid {proc.pid}) with {signal.Signals(sig).name}")
        proc.signal(sig)
    deadline = time.monotonic() + grace
    for name, proc in running.items():
        if proc.wait(max(0.0, deadline - time.monotonic())) is None:
            if second is not None:      # ask again (a node launcher then SIGKILLs its ranks at once)
                ctx.console.detail(f"{name}: the {what} did not stop within {grace:g} s; "
                                   f"{signal.Signals(second).name} again")
                proc.signal(second)
                continue
            ctx.console.detail(f"{name}: the {what} did not stop within {grace:g} s; SIGKILL", logging.WARNING)
            proc.signal(signal.SIGKILL)
            proc.wait(5.0)


def heartbeat(ctx: RunContext, nodes) -> tuple | None:
    """(node, why) of the first node whose host does not answer, else None. A lost host is remembered: its
    processes are not signalled, cleaned up or collected any more (each call would wait for it)."""
    hosts = {n.host.address: n.host for n in nodes}
    try:
        answers = ctx.backend.heartbeat(list(hosts.values()))
    except Exception as exc:  # noqa: BLE001 - a heartbeat that cannot run proves nothing either way
        ctx.console.detail(f"heartbeat failed: {type(exc).__name__}: {exc}", logging.WARNING)
        return None
    for node in nodes:
        why = answers.get(node.host.address)
        if why:
            ctx.lost_hosts[node.host.address] = why
            return node, why
    return None


def read_node_status(text) -> NodeStatus | None:
    """A node_status.json's text as a NodeStatus, or None when it is not one (partly written, too large,
    foreign)."""
    if not text or len(text) > NODE_STATUS_MAX_BYTES:
        return None
    try:
        return NodeStatus.from_dict(loads_bounded(text))
    except (ContractError, ValueError, RecursionError):
        return None


def poll_node_status(ctx: RunContext, nodes) -> None:
    """The live panel: every node's node_status.json, read in parallel within HEARTBEAT_INTERVAL_S (a node that
    does not answer in time shows what it showed before)."""
    for o in fan_out(nodes, ctx.backend.node_status, deadline_s=HEARTBEAT_INTERVAL_S):
        status = read_node_status(o.value) if o.ok else None
        if status is not None:
            ctx.console.node_status(o.key.label, status)


class LauncherWait:
    """Wait for every node launcher of a round. Every HEARTBEAT_INTERVAL_S the hosts of the running nodes must
    answer (within HEARTBEAT_TIMEOUT_S), or the round fails naming the lost host. With ``node_waits`` (an each
    round: independent jobs) a failed or lost node stops nothing else: how each node ended goes into
    ``node_waits`` ({label: Wait}); ``peers`` (a pairs round: {label: the other nodes of its job}) are stopped
    with it."""

    def __init__(self, ctx: RunContext, label: str, nodes, launchers: dict, timeout: float,
                 node_waits: dict | None, peers: dict | None = None):
        self.ctx, self.label, self.launchers, self.timeout = ctx, label, launchers, timeout
        self.by_label = {n.label: n for n in nodes}
        self.node_waits = node_waits
        self.peers = peers or {}
        self.others = "the other pairs" if self.peers else "the other hosts"
        self.pending = set(launchers)
        self.failed_node: str | None = None
        self.scheduler_end: tuple | None = None
        self.exited: set = set()        # launchers that exited since the last poll of node_status.json

    def run(self) -> Wait:
        done: queue.Queue = queue.Queue()
        for name, proc in self.launchers.items():
            threading.Thread(target=lambda n=name, p=proc: done.put((n, p.wait())), daemon=True).start()
        deadline = time.monotonic() + self.timeout
        next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
        # the live panel's reads of node_status.json (none without one)
        next_poll = time.monotonic() + STATUS_POLL_S if self.ctx.console.live else float("inf")
        while self.pending:
            try:
                name, code = done.get(timeout=max(0.0, min(deadline, next_beat, next_poll) - time.monotonic()))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return self._timed_out()
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
                    lost = self._beat()
                    if lost is not None:
                        return lost
                if time.monotonic() >= next_poll:
                    self._poll()
                    next_poll = time.monotonic() + STATUS_POLL_S
                continue
            if name in self.pending:        # each: not the launcher of a host already counted as lost
                self._exited(name, code)
        self._poll()
        return self._ended()

    def _poll(self) -> None:
        """With a live panel: the running nodes' state (and, once more, that of the nodes that exited since)."""
        if not self.ctx.console.live:
            return
        names = [n for n in self.launchers if (n in self.pending or n in self.exited) and n in self.by_label
                 and self.ctx.host_of.get(n) not in self.ctx.lost_hosts]
        self.exited.clear()
        poll_node_status(self.ctx, [self.by_label[n] for n in names])

    def _stop_pending(self) -> None:
        stop_processes(self.ctx, {n: self.launchers[n] for n in self.pending}, "launcher", signal.SIGTERM,
                       STOP_GRACE_S)

    def _beat(self) -> Wait | None:
        """The heartbeat: a lost host fails the round (each: that host's job alone, the wait goes on)."""
        lost = heartbeat(self.ctx, [self.by_label[n] for n in self.pending if n in self.by_label])
        if lost is None:
            return None
        node, why = lost
        end = Wait(WaitEnd.HOST_LOST, f"host {node.host.address} stopped answering: {why} (no answer within "
                                      f"{HEARTBEAT_TIMEOUT_S:g} s)", node.label)
        if self.node_waits is not None:
            self.ctx.console.step(f"{self.label}: host {node.host.address} lost ({why}); {self.others} go on",
                                  logging.ERROR)
            self.pending.discard(node.label)
            self.node_waits[node.label] = end
            self._stop_peers(node.label)
            return None
        self.ctx.console.step(f"{self.label}: host {node.host.address} lost ({why}); stopping every node",
                              logging.ERROR)
        self._stop_pending()
        return end

    def _timed_out(self) -> Wait:
        why = f"round exceeded CASE_TIMEOUT ({self.timeout:g} s)"
        self.ctx.console.step(f"{self.label}: CASE_TIMEOUT of {self.timeout:g} s reached; stopping every node",
                              logging.ERROR)
        self._stop_pending()
        if self.node_waits is not None:
            self.node_waits.update((n, Wait(WaitEnd.TIMEOUT, why, n)) for n in self.pending)
        return Wait(WaitEnd.TIMEOUT, why)

    def _exited(self, name: str, code) -> None:
        out = self.ctx.console
        self.pending.discard(name)
        self.exited.add(name)
        out.detail(f"{name}: node launcher exited with {code}")
        out.node(name, "done" if code == 0 else "failed", f"node launcher exited {code}")
        self._end_mpi_peers(name)
        # (WaitEnd value, why) when a scheduler ended the node's job itself (its time limit, a lost node)
        ended = self.launchers[name].scheduler_end if code != 0 else None
        if ended:
            out.step(f"{self.label}: {name}: {ended[1]}", logging.ERROR)
        if self.node_waits is not None:      # each: independent jobs, nothing else is stopped
            self.node_waits[name] = Wait(WaitEnd.COMPLETED) if code == 0 else \
                Wait(WaitEnd(ended[0]), ended[1], name) if ended else \
                Wait(WaitEnd.NODE_FAILED, f"node {name} failed", name)
            if code != 0:
                out.step(f"{self.label}: {name} failed; {self.others} go on (independent jobs)", logging.WARNING)
                self._stop_peers(name)
            return
        if code != 0 and self.failed_node is None:
            self.failed_node, self.scheduler_end = name, ended
            if self.pending:
                out.step(f"{self.label}: {name} failed; stopping {', '.join(sorted(self.pending))}", logging.WARNING)
                for n in self.pending:
                    self.launchers[n].signal(signal.SIGTERM)

    def _end_mpi_peers(self, name: str) -> None:
        """Launch mode mpi: node 0's mpirun has ended, so have the ranks on its job's other nodes; their launchers,
        which started nothing, are told to finish (SIGTERM: they write ranks.json and exit)."""
        node = self.by_label.get(name)
        if node is None or node.launch.mode != "mpi" or node.node_rank != 0:
            return
        for peer in sorted(self.pending):
            other = self.by_label.get(peer)
            if other is not None and other.launch.mode == "mpi" and other.job == node.job:
                self.launchers[peer].signal(signal.SIGTERM)

    def _stop_peers(self, name: str) -> None:
        """A pairs round: the other node of ``name``'s job cannot go on without it; it is asked to stop."""
        for peer in self.peers.get(name, ()):
            if peer in self.pending:
                self.ctx.console.step(f"{self.label}: stopping {peer}, the other node of {name}'s pair job",
                                      logging.WARNING)
                self.launchers[peer].signal(signal.SIGTERM)

    def _ended(self) -> Wait:
        """How the wait ended once every launcher exited."""
        bad = [n for n, w in (self.node_waits or {}).items() if w.end != WaitEnd.COMPLETED]
        if bad:
            return Wait(WaitEnd.NODE_FAILED, f"{len(bad)} host(s) failed: {', '.join(bad)}", bad[0])
        if self.failed_node and self.scheduler_end:
            return Wait(WaitEnd(self.scheduler_end[0]), self.scheduler_end[1], self.failed_node)
        if self.failed_node:
            return Wait(WaitEnd.NODE_FAILED, f"node {self.failed_node} failed", self.failed_node)
        return Wait(WaitEnd.COMPLETED)
