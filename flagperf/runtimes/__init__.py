"""Where a node's ranks run on a host reached by the host-list backend: one Runtime per module, by name."""

from __future__ import annotations

import importlib

from flagperf.runtimes.base import Runtime

RUNTIMES = {
    "bare": "flagperf.runtimes.bare:BareRuntime",
    "docker": "flagperf.runtimes.docker:DockerRuntime",
}


def get_runtime(name: str, config=None) -> Runtime:
    try:
        module, _, cls = RUNTIMES[name].partition(":")
    except KeyError:
        raise ValueError(f"runtime {name!r} is not available; known: {', '.join(RUNTIMES)}") from None
    return getattr(importlib.import_module(module), cls)(config)


__all__ = ["RUNTIMES", "Runtime", "get_runtime"]
