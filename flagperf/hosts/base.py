"""The Transport interface: run an argv, start a long-running process, move files."""

from __future__ import annotations

import abc
from dataclasses import dataclass


class HostError(Exception):
    """A host could not do what was asked; the message names the host and says why.

    ``kind`` types the failure for `flagperf check`: connection_refused, timeout, auth_failed,
    unknown_host_key, changed_host_key, unreachable, command_failed, error.
    """

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind


class MissingPath(HostError):
    """The folder or file asked for does not exist on the host (a node directory of a round that never started
    there)."""

    def __init__(self, message: str):
        super().__init__(message, "command_failed")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple
    returncode: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Process(abc.ABC):
    """A process started on a host with Transport.spawn (and a backend's NodeProcess)."""

    # (WaitEnd value, why) when a scheduler ended the node's job itself (its time limit, a lost node): the round
    # then ends that way. None for a process that ended by itself, and for every process of a transport.
    scheduler_end: tuple | None = None

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """Block until it exits (its exit code) or the timeout passes (None)."""

    @abc.abstractmethod
    def signal(self, sig: int) -> None:
        """Send a signal to the process (no error if it already exited)."""

    @property
    @abc.abstractmethod
    def pid(self) -> int:
        ...


class Transport(abc.ABC):
    """One way to reach one host. Commands are argv lists, never shell strings."""

    def __init__(self, host):
        self.host = host
        self.closed = False     # after close(): nothing more is started on the host

    @property
    def name(self) -> str:
        return self.host.address

    @abc.abstractmethod
    def run(self, argv, timeout: float = 60.0) -> CommandResult:
        """Run argv to completion; raise HostError when it cannot be started or exceeds the timeout."""

    @abc.abstractmethod
    def spawn(self, argv, log_path: str | None = None) -> Process:
        """Start argv in the background, stdout+stderr to log_path on the host (or discarded)."""

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes) -> None:
        """Write a file on the host, creating its folder."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes:
        ...

    @abc.abstractmethod
    def fetch_tree(self, remote_dir: str, local_dir, max_bytes: int | None = None) -> tuple:
        """Copy what is missing (or differs in size) from a folder on the host into a folder on the driver;
        returns (files, bytes) copied. Running it twice copies nothing the second time."""

    @abc.abstractmethod
    def file_hashes(self, root: str, subdirs=()) -> dict:
        """{relative path: sha256 hex} of every file under root (or its subdirs) on the host; {} if missing."""

    @abc.abstractmethod
    def put_files(self, local_root, relpaths, remote_root: str) -> int:
        """Copy the given files from local_root on the driver to remote_root on the host; returns bytes sent."""

    @abc.abstractmethod
    def forward_unix_socket(self, remote_path: str) -> str:
        """A local unix socket path that reaches the host's unix socket ``remote_path`` (e.g. the Docker daemon)."""

    def close(self) -> None:
        self.closed = True
