"""This machine, reached with plain subprocesses."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from flagperf.hosts.base import CommandResult, HostError, MissingPath, Process, Transport
from flagperf.hosts.treesync import (COLLECT_MAX_BYTES, FetchResult, TreeSnapshot, local_hashes, report_fetch,
                                     safe_copy_tree, snapshot_files)
from flagperf_contract import write_atomic


class LocalProcess(Process):
    def __init__(self, popen: subprocess.Popen):
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self, timeout=None):
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig):
        if self.popen.returncode is None:
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass


class LocalTransport(Transport):
    def run(self, argv, timeout=60.0):
        t0 = time.monotonic()
        try:
            cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL, errors="replace")
        except FileNotFoundError:
            raise HostError(f"{self.name}: command not found: {argv[0]}", "not_found") from None
        except subprocess.TimeoutExpired:
            raise HostError(f"{self.name}: command timed out after {timeout:g} s: {list(argv)}", "timeout") from None
        return CommandResult(tuple(argv), cp.returncode, cp.stdout, cp.stderr, time.monotonic() - t0)

    def spawn(self, argv, log_path=None):
        if self.closed:     # the run is over (interrupted while this spawn waited its turn): start nothing
            raise HostError(f"{self.name}: connection closed; not starting {argv[0]}")
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL
        try:
            # A session of its own: a Ctrl-C at the terminal reaches the driver only, which stops
            # launchers and monitors in order.
            popen = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        except OSError as exc:
            raise HostError(f"{self.name}: cannot start {argv[0]}: {exc}") from None
        finally:
            if log_path:
                out.close()
        return LocalProcess(popen)

    def write_file(self, path, data):
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, data)

    def read_file(self, path):
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise HostError(f"{self.name}: cannot read {path}: {exc}") from None

    def fetch_tree(self, remote_dir, local_dir, max_bytes: int | None = None) -> FetchResult:
        """Copy regular files only (never through a symlink, never opening a FIFO or device), at most max_bytes
        (COLLECT_MAX_BYTES); what is skipped or left is in the result and the run log."""
        src, dst = Path(remote_dir).resolve(), Path(local_dir).resolve()
        if src == dst:
            return FetchResult(0, 0)          # the host writes straight into the driver's tree
        if not src.is_dir():
            raise MissingPath(f"{self.name}: {src} does not exist")
        limit = COLLECT_MAX_BYTES if max_bytes is None else int(max_bytes)
        result = safe_copy_tree(src, dst, limit)
        report_fetch(result, f"{self.name}: {src}", dst)
        return result

    def file_hashes(self, root, subdirs=()):
        return local_hashes(root, subdirs)

    def put_files(self, local_root, relpaths, remote_root):
        """Write the files as ``local_root`` read them (a TreeSnapshot: the bytes hashed) or, given a folder, as
        read once now (snapshot_files)."""
        relpaths = list(relpaths)
        snap = local_root if isinstance(local_root, TreeSnapshot) else snapshot_files(local_root, relpaths)
        total = 0
        try:
            for rel in relpaths:
                if rel not in snap:
                    continue
                target = Path(remote_root) / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as out:
                    for chunk in snap.chunks(rel):
                        out.write(chunk)
                total += snap.size(rel)
        finally:
            if snap is not local_root:
                snap.close()
        return total

    def forward_unix_socket(self, remote_path):
        return remote_path          # this machine: the socket itself
