"""Backends: the ways to run a round on a set of nodes, registered by name.

A backend owns everything that touches hosts: connect, deploy, probe, spawn (node launcher and monitor),
stop, collect and clean (:class:`~flagperf.backends.base.Backend`). The cluster config's ``SCHEDULER``
picks one; ``config.py`` validates the name (and the test config's ``RUNTIME``) against this registry
without importing the backend's module. Adding a backend is one module plus one ``register`` line below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from flagperf.backends.base import Backend, BackendError, NodeProcess


@dataclass(frozen=True)
class Registration:
    name: str
    target: str             # "module:Class"
    runtimes: tuple         # RUNTIME values it can run ranks with
    description: str


_REGISTRY: dict = {}


def register(name: str, target: str, *, runtimes: tuple, description: str) -> None:
    _REGISTRY[name] = Registration(name, target, tuple(runtimes), description)


def registration(name: str) -> Registration | None:
    return _REGISTRY.get(name)


def backend_names() -> tuple:
    return tuple(_REGISTRY)


def backend_class(name: str) -> type:
    reg = _REGISTRY.get(name)
    if reg is None:
        raise KeyError(f"no backend {name!r}; known: {', '.join(_REGISTRY)}")
    module, _, cls = reg.target.partition(":")
    return getattr(importlib.import_module(module), cls)


def open_backend(config, log, *, accept_new_host_keys: bool = False) -> Backend:
    """The backend the config names (cluster SCHEDULER), ready to connect."""
    return backend_class(config.cluster.scheduler)(config, log, accept_new_host_keys=accept_new_host_keys)


# -- the registry ----------------------------------------------------------------------------------------------
register("ssh", "flagperf.backends.hostlist:HostListBackend", runtimes=("bare", "docker"),
         description="a list of hosts: localhost without SSH, every other host over SSH; ranks as plain "
                     "processes (bare) or in the vendor's container (docker)")

__all__ = ["Backend", "BackendError", "NodeProcess", "Registration", "backend_class", "backend_names",
           "open_backend", "register", "registration"]
