"""The backend protocol: one small interface for "a way to run a round on a set of nodes".

The pipeline calls, in this order:

    connect(hosts) -> deploy(hosts) -> probe(hosts, need)            once per run (``flagperf check``: no deploy)
    planning(config, accelerators)                                    once, after the checks (a scheduler's nodes)
    prepare_case(case)                                                once per case (images)
    per round:  start_round(case, round) (allocations) -> prepare_node(node) -> spawn_monitor(node)
                -> spawn_launcher(node) ... NodeProcess.wait / signal ...
                cleanup_node(node) -> collect(node) -> end_round(nodes)
    close()
    act_on_verdicts(verdicts, run_id)                                 once, when the node verdicts are known

Everything a backend needs is in the plan (:mod:`flagperf.plan`): node directory on the host, argv, environment,
master address, container. A backend never decides a round's status: it returns processes and files, and
:mod:`flagperf.results.interpret` judges them.
"""

from __future__ import annotations

import abc
import logging
from typing import ClassVar

from flagperf.options.base import HostSpec
from flagperf.hosts.base import Process


HEARTBEAT_INTERVAL_S = 5.0      # how often a running round asks its hosts whether they still answer
HEARTBEAT_TIMEOUT_S = 25.0      # a host that does not answer within this is lost: detected within 30 s


class BackendError(Exception):
    """A backend could not do what was asked; the message names the host (or node) and says why.

    ``last_lines`` carries the tail of a log that explains it (an image build), if any.
    """

    def __init__(self, message: str, last_lines=()):
        super().__init__(message)
        self.last_lines = list(last_lines)


# A node launcher or monitor started by a backend: wait(timeout) -> exit code | None, signal(sig), pid, and
# ``scheduler_end`` (None, or (WaitEnd value, why) when a scheduler ended the node's job). The transports' Process
# is that interface; a backend of another kind (a scheduler's job step) implements it too.
NodeProcess = Process


class Backend(abc.ABC):
    """One way to reach nodes and run rounds on them. Registered in :mod:`flagperf.backends`."""

    name: ClassVar[str] = "?"
    node_output: ClassVar[str] = "launcher.out.log"   # node-directory file with the node launcher's own output

    def __init__(self, config, log: logging.Logger, *, accept_new_host_keys: bool = False):
        self.config = config
        self.log = log
        self.accept_new_host_keys = accept_new_host_keys

    # -- hosts ----------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def connect(self, hosts) -> list:
        """Open a connection to every host in parallel; returns the failures as checks.HostCheck."""

    @abc.abstractmethod
    def deploy(self, hosts) -> list:
        """Make every host's FLAGPERF_PATH hold the tree (only what differs); returns fanout.Outcome per host
        whose value is a deploy.DeployResult."""

    @abc.abstractmethod
    def probe(self, hosts, need: dict) -> list:
        """Check every connected host (Python, tree, torch, disk, accelerators); one checks.HostCheck per host.
        ``need`` maps addresses to the accelerators the cases need there."""

    def planning(self, config, accelerators: dict) -> tuple:
        """(config, accelerators) to plan the cases with, once the hosts were checked: a scheduler puts the nodes
        it found in place of the cluster's hosts and says how many accelerators each has. Default: unchanged."""
        return config, accelerators

    # -- a case ---------------------------------------------------------------------------------------------
    def prepare_case(self, case) -> None:
        """Once per case, before its rounds (images for containers). Raise BackendError: the case fails."""

    def start_round(self, case, rnd) -> tuple:
        """The round's nodes, ready to be prepared: a scheduler allocates them here (waiting while the job is
        pending) and returns them on the hosts it got. Raise BackendError: the round fails. Default: as planned."""
        return tuple(rnd.nodes)

    def end_round(self, nodes) -> None:
        """After the round's collect, also of a failed or interrupted round: release what start_round took."""

    # -- a round --------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def prepare_node(self, node) -> None:
        """Write the node's files (NodePlan.files) and make it ready (a container created). Raise BackendError."""

    @abc.abstractmethod
    def spawn_monitor(self, node) -> NodeProcess:
        """Start the node's monitor (NodePlan.monitor_argv) on its host."""

    @abc.abstractmethod
    def spawn_launcher(self, node) -> NodeProcess:
        """Start the node launcher; the returned process's exit is the node's result."""

    def heartbeat(self, hosts) -> dict:
        """{address: None when the host answered, else why not}, each within HEARTBEAT_TIMEOUT_S: called every
        HEARTBEAT_INTERVAL_S while a round runs, so that a frozen host fails its case instead of hanging it."""
        return {h.address: None for h in hosts}

    def node_status(self, node) -> str | None:
        """The text of the node's node_status.json (its ranks' live state, written by the node launcher; at most
        NODE_STATUS_MAX_BYTES) while its round runs, for the live panel; None where it cannot be read now."""
        return None

    def drop_caches(self, node) -> tuple:
        """CLEAR_CACHES: (ok, why not) after asking the node's host to drop its page cache."""
        return False, "not supported by this backend"

    def cleanup_node(self, node) -> None:
        """Undo prepare_node (save the container's output, remove it); after every round, also a failed one."""

    @abc.abstractmethod
    def collect(self, node) -> tuple:
        """Copy what is missing of the node directory to NodePlan.local_dir; (files, bytes)."""

    # -- after the run --------------------------------------------------------------------------------------
    def act_on_verdicts(self, verdicts, run_id: str) -> list:
        """Once the run's node verdicts (records.NodeVerdict) are known, after close(): what this backend does
        about them (a scheduler drains the rejected nodes where its options ask for it). Returns one
        ``(ok, line)`` per action taken or refused, for the terminal and the run log; never raises for a node
        it could not act on. Default: nothing."""
        return []

    # -- housekeeping ---------------------------------------------------------------------------------------
    def clean(self, hosts, run_id: str | None = None) -> dict:
        """Remove what earlier runs left behind (containers); {host: [names] | error text}."""
        return {h.address: [] for h in hosts}

    def describe(self, node) -> list:
        """Lines for ``--dry-run``: what this backend will do for the node, beyond the plan itself."""
        return []

    def run_record_fields(self, hosts) -> dict:
        """This backend's keys of run.json (merged at its top level): what :meth:`hosts_from_record` needs to
        reach the hosts again for `flagperf collect`."""
        return {"hosts": [{"HOST": h.address, "PYTHON": h.python, "FLAGPERF_PATH": h.flagperf_path} for h in hosts]}

    @classmethod
    def collector(cls, record: dict, log: logging.Logger, *, accept_new_host_keys: bool = False) -> "Backend":
        """A backend that connects to the hosts of an earlier run's run.json and collects from them (`flagperf
        collect`); BackendError says why this backend cannot."""
        raise BackendError(f"a SCHEDULER {cls.name} run: flagperf collect cannot reach its hosts after the run")

    @classmethod
    def hosts_from_record(cls, record: dict) -> list:
        """The hosts of a run.json this backend wrote (:meth:`run_record_fields`); KeyError, TypeError when an
        entry is incomplete."""
        return [HostSpec(h["HOST"], None, None, None, h.get("PYTHON") or "python3", h.get("FLAGPERF_PATH") or "")
                for h in record["hosts"]]

    def close(self) -> None:
        """Close every connection."""
