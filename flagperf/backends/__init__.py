"""Backends: the ways to run a round on a set of nodes, registered by name.

A backend owns everything that touches hosts: connect, deploy, probe, spawn (node launcher and monitor),
stop, collect and clean (:class:`~flagperf.backends.base.Backend`). The cluster config's ``SCHEDULER``
picks one; ``config.py`` validates the name (and the test config's ``RUNTIME``) against this registry
without importing the backend's module. Adding a backend is one module plus one ``register`` line below (and,
when it has cluster keys of its own, the options module that validates them; docs/architecture.md, "A new backend").

This module and the options modules it names are what the config reads: they import no backend, transport or
runtime (the backends are imported by name, by :func:`backend_class`, when a run opens one).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from flagperf.backends.base import Backend, BackendError, NodeProcess
from flagperf.backends.hostlist_options import HOSTLIST_KEYS
from flagperf.backends.options import BackendOptions
from flagperf.backends.slurm_config import CONTAINER_RUNTIMES, SLURM_KEYS


@dataclass(frozen=True)
class Registration:
    name: str
    target: str             # "module:Class"
    runtimes: tuple         # RUNTIME values it can run ranks with
    description: str
    cluster_keys: tuple = ()        # cluster-config keys of its own (SLURM_PARTITION, ...)
    options: str | None = None      # "module:function" validating them: (checker, mapping) -> a BackendOptions
    host_list: bool = True          # False: no HOSTS, the backend's scheduler picks the nodes
    refused: tuple = ()             # ((RUNTIME, why it cannot be used here), ...) for the error message


_REGISTRY: dict = {}


def register(name: str, target: str, *, runtimes: tuple, description: str, cluster_keys: tuple = (),
             options: str | None = None, host_list: bool = True, refused: tuple = ()) -> None:
    _REGISTRY[name] = Registration(name, target, tuple(runtimes), description, tuple(cluster_keys), options,
                                   host_list, tuple(refused))


def load_options(reg: Registration, checker, mapping) -> BackendOptions | None:
    """The backend's own cluster keys, validated by its ``options`` function (an options module, never the
    backend's). ``BackendOptions()`` when it has none; None when they could not be read (the checker says why)."""
    if reg.options is None:
        return BackendOptions()
    module, _, func = reg.options.partition(":")
    return getattr(importlib.import_module(module), func)(checker, mapping)


def all_cluster_keys() -> tuple:
    """Every registered backend's own cluster keys, each once, in registry order."""
    return tuple(dict.fromkeys(k for reg in _REGISTRY.values() for k in reg.cluster_keys))


def registration(name: str) -> Registration | None:
    return _REGISTRY.get(name)


def backend_names() -> tuple:
    return tuple(_REGISTRY)


def backend_class(name: str) -> type[Backend]:
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
                     "processes (bare) or in the vendor's container (docker)",
         cluster_keys=HOSTLIST_KEYS, options="flagperf.backends.hostlist_options:load_options")
register("slurm", "flagperf.backends.slurm:SlurmBackend", runtimes=("bare",) + CONTAINER_RUNTIMES,
         description="a Slurm cluster: one sbatch job per case round; the node launcher runs once per node as an "
                     "srun step (bare, or in an image: charliecloud's ch-run, pyxis), the monitor as an overlapping "
                     "step (docs/slurm.md)",
         cluster_keys=SLURM_KEYS,
         options="flagperf.backends.slurm_config:load_options", host_list=False,
         refused=(("docker", "Docker's containers are started by dockerd, not as children of the job step, so "
                             "Slurm could neither confine nor stop them"),))

__all__ = ["Backend", "BackendError", "BackendOptions", "NodeProcess", "Registration", "all_cluster_keys",
           "backend_class", "backend_names", "load_options", "open_backend", "register", "registration"]
