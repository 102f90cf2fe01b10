"""The Runtime interface: prepare a node for a round, launch its node launcher, clean up after."""

from __future__ import annotations

import abc


class Runtime(abc.ABC):
    name = "?"

    def prepare(self, transport, node, log) -> None:
        """Make the node ready for the round (for containers: image and container up). Raise on failure."""

    @abc.abstractmethod
    def launch(self, transport, node):
        """Start the node launcher for this node; returns a hosts.Process whose exit is the node's result."""

    def cleanup(self, transport, node, log) -> None:
        """Undo prepare(); called after every round, also after a failed or interrupted one."""
