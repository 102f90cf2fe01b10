"""The registry of backends, by the name a cluster config's ``SCHEDULER`` gives: what the config must know of each
without importing it (the class that runs it, its runtimes, its own cluster keys and the function that reads
them into its typed options). Each options module of :mod:`flagperf.options` registers its backend here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from flagperf.options.base import BackendOptions


@dataclass(frozen=True)
class Registration:
    name: str
    target: str             # "module:Class" of the backend, imported only when a run opens it
    runtimes: tuple         # RUNTIME values it can run ranks with
    description: str
    cluster_keys: tuple = ()        # cluster-config keys of its own (SLURM_PARTITION, ...)
    options: Callable | None = None     # (checker, mapping) -> its BackendOptions, or None when unreadable
    host_list: bool = True          # False: no HOSTS, the backend's scheduler picks the nodes
    refused: tuple = ()             # ((RUNTIME, why it cannot be used here), ...) for the error message


_REGISTRY: dict = {}


def register(name: str, target: str, *, runtimes: tuple, description: str, cluster_keys: tuple = (),
             options: Callable | None = None, host_list: bool = True, refused: tuple = ()) -> None:
    _REGISTRY[name] = Registration(name, target, tuple(runtimes), description, tuple(cluster_keys), options,
                                   host_list, tuple(refused))


def load_options(reg: Registration, checker, mapping) -> BackendOptions | None:
    """The backend's own cluster keys, validated by its options module. ``BackendOptions()`` when it has none;
    None when they could not be read (the checker says why)."""
    return BackendOptions() if reg.options is None else reg.options(checker, mapping)


def all_cluster_keys() -> tuple:
    """Every registered backend's own cluster keys, each once, in registry order."""
    return tuple(dict.fromkeys(k for reg in _REGISTRY.values() for k in reg.cluster_keys))


def registration(name: str) -> Registration | None:
    return _REGISTRY.get(name)


def backend_names() -> tuple:
    return tuple(_REGISTRY)
