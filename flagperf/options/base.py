"""What every backend's options have in common, and the host record the config, the plan and the backends share.

A backend's own cluster keys (``SSH_PORT``, ``SLURM_PARTITION``, ...) are read by its options module
(:mod:`flagperf.options`, which registers the backend too) into a frozen dataclass derived from
:class:`BackendOptions`. The config keeps that object as ``ClusterConfig.options``; the plan asks it only what this
base class declares.
An options module imports no backend, transport or runtime: ``flagperf.config`` loads it at every start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

LOCALHOST = "localhost"
COLLECT_MAX_BYTES = 2 * 1024 ** 3       # COLLECT_MAX_BYTES unset: at most this much of a node directory is copied


@dataclass(frozen=True)
class HostSpec:
    """A node the plan places ranks on: its address, interpreter and FLAGPERF_PATH, and how the host-list
    backend reaches it (the ``ssh_*`` fields; None: from ~/.ssh/config, else the defaults)."""

    address: str
    ssh_port: int | None
    ssh_user: str | None
    ssh_key: str | None
    python: str
    flagperf_path: str

    @property
    def is_local(self) -> bool:
        return self.address == LOCALHOST


@dataclass(frozen=True)
class BackendOptions:
    """A backend's own cluster keys, validated by its options module; the part the config and the plan read."""

    # The nodes write their node directories straight into the driver's FLAGPERF_LOG_PATH (a shared file system):
    # nothing is collected after a round.
    results_on_driver: bool = False

    # RUNTIME values whose ranks run in the vendor's container, planned as a ``containers.ContainerRun``.
    container_runtimes: ClassVar[tuple] = ()

    def runtime_problem(self, runtime: str) -> str | None:
        """Why RUNTIME cannot be used with these keys (None: it can)."""
        return None

    def plan_hosts(self, cases, flagperf_path: str) -> tuple:
        """The hosts the plan places nodes on (HostSpec, FLAGPERF_PATH filled in): the listed hosts, or a
        scheduler's placeholders until it allocates nodes."""
        return ()

    def plan_master_port(self, port: int) -> int:
        """MASTER_PORT as the plan writes it, from the cluster config's (a scheduler may put a placeholder that
        each job replaces)."""
        return port

    def master_address(self, host: HostSpec) -> str:
        """The address the other nodes reach rank 0 on, when ``host`` is node 0."""
        return "127.0.0.1" if host.is_local else host.address

    def mpi_shell_config(self, hosts) -> str | None:
        """Launch mode mpi: the ssh_config text with which node 0's mpirun reaches ``hosts`` (HostSpec) as this
        backend does; None where this backend cannot run an mpirun over its nodes. ValueError says why a value
        cannot be written there."""
        return None

    def to_dict(self) -> dict:
        """The keys as the effective configuration shows them (config.yaml of a run)."""
        return {}
