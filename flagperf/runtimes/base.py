"""The Runtime interface of the host-list backend: prepare a node for a round, launch its node launcher, clean
up after."""

from __future__ import annotations

import abc

from flagperf_contract import LAUNCHER_OUTPUT


class Runtime(abc.ABC):
    name = "?"
    node_output = LAUNCHER_OUTPUT     # file in the node directory with the node launcher's own stdout/stderr

    def __init__(self, config=None):
        self.config = config

    def prepare_case(self, transports, case, run_dir, log) -> None:
        """Once per case before its rounds, for every host of the case (for containers: the image). Raise on
        failure: the case fails with the message (and ``last_lines`` of the exception, if it has them)."""

    def prepare(self, transport, node, log) -> None:
        """Make the node ready for the round (for containers: the container created). Raise on failure."""

    @abc.abstractmethod
    def launch(self, transport, node):
        """Start the node launcher for this node; returns a hosts.Process whose exit is the node's result."""

    def cleanup(self, transport, node, log) -> None:
        """Undo prepare(); called after every round, also after a failed or interrupted one."""

    def clean(self, transports, run_id=None) -> dict:
        """Remove leftovers of earlier runs on every host: {address: [names] | error text}."""
        return {address: [] for address in transports}
