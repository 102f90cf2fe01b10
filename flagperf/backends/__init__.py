"""Backends: the ways to run a round on a set of nodes, one module each.

A backend owns everything that touches hosts: connect, deploy, probe, spawn (node launcher and monitor),
stop, collect and clean (:class:`~flagperf.backends.base.Backend`). The cluster config's ``SCHEDULER``
picks one from the registry of :mod:`flagperf.options`, where each backend's options module registers it
(the config reads that registry without importing any backend). A backend's module is imported only here,
by :func:`backend_class`, when a run or a command opens it.
"""

from __future__ import annotations

import importlib

from flagperf.backends.base import Backend, BackendError, NodeProcess
from flagperf.options import backend_names, registration


def backend_class(name: str) -> type[Backend]:
    reg = registration(name)
    if reg is None:
        raise KeyError(f"no backend {name!r}; known: {', '.join(backend_names())}")
    module, _, cls = reg.target.partition(":")
    return getattr(importlib.import_module(module), cls)


def open_backend(config, log, *, accept_new_host_keys: bool = False) -> Backend:
    """The backend the config names (cluster SCHEDULER), ready to connect."""
    return backend_class(config.cluster.scheduler)(config, log, accept_new_host_keys=accept_new_host_keys)


__all__ = ["Backend", "BackendError", "NodeProcess", "backend_class", "open_backend"]
