"""What the config knows of each backend without importing it: the registry (:mod:`flagperf.options.registry`),
what every backend's options have in common (:mod:`flagperf.options.base`), and one module per backend
(``hostlist.py`` for ``ssh``, ``slurm.py``) that reads the backend's own cluster keys into a frozen dataclass and
ends with the backend's ``register(...)`` line.

Importing this package imports every module in it, in name order, so a new backend is two files: its options
module here and its backend module under :mod:`flagperf.backends` (docs/architecture.md, "A new backend").
Nothing here imports a backend, a transport, a runtime or a client library: ``flagperf.config`` loads it at
every start.
"""

from __future__ import annotations

import importlib
import pkgutil

from flagperf.options.base import COLLECT_MAX_BYTES, LOCALHOST, BackendOptions, HostSpec
from flagperf.options.registry import (Registration, all_cluster_keys, backend_names, load_options, register,
                                       registration)

for _module in pkgutil.iter_modules(__path__):      # sorted by name: the registry's order
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["COLLECT_MAX_BYTES", "LOCALHOST", "BackendOptions", "HostSpec", "Registration", "all_cluster_keys",
           "backend_names", "load_options", "register", "registration"]
