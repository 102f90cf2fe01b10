"""Ranks as plain processes on the host, with the host's own Python."""

from __future__ import annotations

from flagperf.runtimes.base import Runtime


class BareRuntime(Runtime):
    name = "bare"

    def launch(self, transport, node):
        return transport.spawn(node.launcher_argv, log_path=f"{node.node_dir}/{self.node_output}")
