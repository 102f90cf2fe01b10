"""The Transport interface: run an argv, start a long-running process, move files."""

from __future__ import annotations

import abc
from dataclasses import dataclass


class HostError(Exception):
    """A host could not do what was asked; the message names the host and says why."""


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
    """A process started on a host with Transport.spawn."""

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
    def fetch_tree(self, remote_dir: str, local_dir) -> tuple:
        """Copy a folder from the host to the driver; returns (files, bytes) copied."""

    def close(self) -> None:
        pass
