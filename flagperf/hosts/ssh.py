"""A host reached over SSH with paramiko: one connection per host, reused for the whole run.

Commands are argv lists; this module is the one place where they cross the remote shell, quoted with
``shlex.join``. Every remote command is started through ``sh -c 'echo $$; exec "$@"'`` so that its pid is
known: a command that outlives its deadline, or a process the driver stops, is signalled on the host
itself, not just abandoned by closing the channel.
"""

from __future__ import annotations

import getpass
import io
import json
import logging
import os
import shlex
import signal as signal_mod
import socket
import tarfile
import threading
import time
from pathlib import Path

from flagperf.options.hostlist import ssh_config_lookup
from flagperf.hosts.base import CommandResult, HostError, MissingPath, Process, Transport
from flagperf.hosts.treesync import (
    COLLECT_LISTING_MAX_BYTES,
    COLLECT_MAX_BYTES,
    HASH_SCRIPT,
    FetchResult,
    parse_listing,
    plan_fetch,
    report_fetch,
    safe_extract,
    write_tar,
)

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_S = 15
IDLE_TIMEOUT_S = 60.0      # collect: a host that sends nothing for this long fails the fetch
STREAM_SLACK_BYTES = 64 * 1024 ** 2     # collect: what files may grow between listing and tar (+ 1/4)
_PID_WRAPPER = 'echo $$; exec "$@"'
_SPAWN_WRAPPER = 'echo $$; log=$1; shift; exec "$@" </dev/null >>"$log" 2>&1'
_known_hosts_lock = threading.Lock()


class SSHProcess(Process):
    """A remote process started by SSHTransport.spawn; its channel stays open until it exits."""

    def __init__(self, transport: "SSHTransport", channel, pid: int):
        self.transport = transport
        self.channel = channel
        self._pid = pid

    @property
    def pid(self) -> int:
        return self._pid

    def wait(self, timeout=None):
        if not self.channel.status_event.wait(timeout):
            return None
        return self.channel.recv_exit_status()

    def signal(self, sig):
        if self.channel.exit_status_ready():
            return
        name = signal_mod.Signals(sig).name[3:]
        try:
            self.transport.run(["kill", f"-{name}", str(self._pid)], timeout=15)
        except HostError:
            pass


class SSHTransport(Transport):
    def __init__(self, host, known_hosts: str, *, accept_new_host_keys: bool = False,
                 connect_timeout: float = CONNECT_TIMEOUT_S):
        super().__init__(host)
        import paramiko
        cfg = ssh_config_lookup(host.address)
        self.hostname = cfg.get("hostname", host.address)
        self.port = int(host.ssh_port or cfg.get("port") or 22)
        self.user = host.ssh_user or cfg.get("user") or getpass.getuser()
        key_files = [host.ssh_key] if host.ssh_key else [str(Path(p).expanduser()) for p in
                                                          cfg.get("identityfile", [])]
        key_files = [k for k in key_files if Path(k).is_file()] if not host.ssh_key else key_files
        self.known_hosts = str(Path(known_hosts).expanduser())
        where = f"{host.address} ({self.user}@{self.hostname}:{self.port})"
        client = paramiko.SSHClient()
        _load_known_hosts(client, self.known_hosts, where)
        client.set_missing_host_key_policy(
            _AcceptNewPolicy(self.known_hosts) if accept_new_host_keys else paramiko.RejectPolicy())
        sock = None
        try:
            sock = socket.create_connection((self.hostname, self.port), timeout=connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.connect(self.hostname, port=self.port, username=self.user, sock=sock,
                           transport_factory=_fast_transport,
                           key_filename=key_files or None, look_for_keys=not key_files, allow_agent=True,
                           timeout=connect_timeout, banner_timeout=connect_timeout, auth_timeout=connect_timeout)
        except Exception as exc:
            client.close()
            if sock is not None:
                sock.close()
            raise _classify(exc, where, self) from None
        self.client = client
        self.ssh = client.get_transport()
        self.ssh.set_keepalive(KEEPALIVE_S)
        self.where = where
        self._forwards: list = []

    # -- commands -----------------------------------------------------------------------------------------------
    def _open(self, argv, wrapper=_PID_WRAPPER, extra=()):
        """Start argv through the pid wrapper; returns (channel, pid)."""
        command = shlex.join(["sh", "-c", wrapper, "flagperf", *extra, *map(str, argv)])
        try:
            chan = self.ssh.open_session(timeout=CONNECT_TIMEOUT_S)
            chan.exec_command(command)
        except Exception as exc:  # noqa: BLE001 - paramiko raises several types for a dead connection
            raise HostError(f"{self.where}: cannot start {argv[0]}: {exc}", "unreachable") from None
        chan.settimeout(CONNECT_TIMEOUT_S * 3)
        line = b""
        try:
            while not line.endswith(b"\n"):
                c = chan.recv(1)
                if not c:
                    break
                line += c
        except socket.timeout:
            pass
        try:
            pid = int(line)
        except ValueError:
            chan.close()
            raise HostError(f"{self.where}: could not start {argv[0]} (no pid from the remote shell)",
                            "command_failed") from None
        chan.settimeout(None)
        return chan, pid

    def run(self, argv, timeout=60.0, input: bytes | None = None):
        return self._run(argv, timeout, input, binary=False)

    def _run(self, argv, timeout, input, binary, max_stdout=None):
        t0 = time.monotonic()
        chan, pid = self._open(argv)
        out, err = bytearray(), bytearray()
        readers = [threading.Thread(target=_drain, args=(chan.recv, out, max_stdout), daemon=True),
                   threading.Thread(target=_drain, args=(chan.recv_stderr, err, max_stdout), daemon=True)]
        for r in readers:
            r.start()
        if input is not None:
            chan.sendall(input)
        chan.shutdown_write()
        deadline = time.monotonic() + timeout
        while max_stdout is not None and not chan.status_event.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
            if len(out) > max_stdout or time.monotonic() >= deadline:
                break                       # too much output (the check below says so) or the timeout
        if max_stdout is not None and len(out) > max_stdout and not chan.status_event.is_set():
            self._kill_remote(pid)
            chan.close()
            raise HostError(f"{self.where}: {argv[0]} printed more than {max_stdout} bytes; killed on the host",
                            "command_failed")
        if not chan.status_event.wait(max(0.0, deadline - time.monotonic())):
            self._kill_remote(pid)
            chan.close()
            raise HostError(f"{self.where}: command timed out after {timeout:g} s and was killed on the host: "
                            f"{shlex.join(map(str, argv))}", "timeout")
        code = chan.recv_exit_status()
        for r in readers:
            r.join(timeout=30)
        chan.close()
        dt = time.monotonic() - t0
        if max_stdout is not None and len(out) > max_stdout:
            raise HostError(f"{self.where}: {argv[0]} printed more than {max_stdout} bytes", "command_failed")
        if binary:
            return CommandResult(tuple(argv), code, bytes(out), err.decode(errors="replace"), dt)
        return CommandResult(tuple(argv), code, out.decode(errors="replace"), err.decode(errors="replace"), dt)

    def _kill_remote(self, pid):
        try:
            chan, _ = self._open(["sh", "-c", 'kill -TERM "$1" 2>/dev/null; sleep 2; kill -KILL "$1" 2>/dev/null; '
                                  'true', "kill", str(pid)])
            chan.status_event.wait(10)
            chan.close()
        except HostError:
            pass

    def spawn(self, argv, log_path=None):
        if self.closed:     # the run is over (interrupted while this spawn waited its turn): start nothing
            raise HostError(f"{self.where}: connection closed; not starting {argv[0]}")
        chan, pid = self._open(argv, _SPAWN_WRAPPER, extra=(log_path or "/dev/null",))
        chan.shutdown_write()
        return SSHProcess(self, chan, pid)

    # -- files --------------------------------------------------------------------------------------------------
    def write_file(self, path, data):
        r = self.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat >"$1.tmp" && mv -f "$1.tmp" "$1"', "write",
                      path], timeout=60, input=data)
        if not r.ok:
            raise HostError(f"{self.where}: cannot write {path}: {r.stderr.strip()}", "command_failed")

    def read_file(self, path):
        r = self._run(["cat", path], 60, None, binary=True)
        if not r.ok:
            raise HostError(f"{self.where}: cannot read {path}: {r.stderr.strip()}", "command_failed")
        return r.stdout

    def file_hashes(self, root, subdirs=()):
        r = self.run([self.host.python, "-c", HASH_SCRIPT, root, *subdirs], timeout=120)
        if not r.ok:
            raise HostError(f"{self.where}: cannot hash {root}: {r.stderr.strip()[-300:]}", "command_failed")
        return json.loads(r.stdout)

    def put_files(self, local_root, relpaths, remote_root):
        relpaths = list(relpaths)
        if not relpaths:
            return 0
        chan, pid = self._open(["sh", "-c", 'mkdir -p "$1" && exec tar -C "$1" -xf -', "untar", remote_root])
        err = bytearray()
        reader = threading.Thread(target=_drain, args=(chan.recv_stderr, err), daemon=True)
        reader.start()
        try:
            sent = write_tar(_ChannelWriter(chan), local_root, relpaths)
        except OSError as exc:
            chan.close()
            raise HostError(f"{self.where}: sending files to {remote_root} failed: {exc}", "command_failed") from None
        chan.shutdown_write()
        chan.status_event.wait(600)
        code = chan.recv_exit_status()
        reader.join(timeout=10)
        chan.close()
        if code != 0:
            raise HostError(f"{self.where}: unpacking into {remote_root} failed: {err.decode(errors='replace')}",
                            "command_failed")
        return sent

    def fetch_tree(self, remote_dir, local_dir, max_bytes: int | None = None) -> FetchResult:
        """Copy what is missing of remote_dir into local_dir, at most max_bytes (COLLECT_MAX_BYTES) in all.

        The host's listing and tar stream are not trusted: the stream is unpacked here by safe_extract, which
        writes only regular files and directories inside local_dir, never through a symlink, and skips and
        reports every other member. The listing, the tar stream and the host's error output are bounded, and a
        host that stops sending for IDLE_TIMEOUT_S fails the fetch instead of hanging it."""
        limit = COLLECT_MAX_BYTES if max_bytes is None else int(max_bytes)
        r = self._run(["sh", "-c", '[ -d "$1" ] || { echo "$1 does not exist" >&2; exit 3; }; '
                       'cd "$1" && find . -type f -printf "%s %P\\0"', "list", remote_dir], 120, None, binary=True,
                      max_stdout=COLLECT_LISTING_MAX_BYTES)
        if r.returncode == 3:       # the test above: no such folder
            raise MissingPath(f"{self.where}: cannot list {remote_dir}: {r.stderr.strip()}")
        if not r.ok:
            raise HostError(f"{self.where}: cannot list {remote_dir}: {r.stderr.strip()}", "command_failed")
        listing, skipped = parse_listing(r.stdout)
        want, left, budget = plan_fetch(listing, local_dir, limit)
        if not want:
            return self._fetched(FetchResult(0, 0, left, skipped), remote_dir, local_dir)
        # One tar over the channel, unpacked here with tarfile in stream mode (safe_extract): only regular files
        # and folders, inside local_dir. The stream may be at most what was asked for (with some room for files
        # that grew since the listing, never more than the cap) plus the tar headers.
        chan, pid = self._open(["tar", "-C", remote_dir, "--null", "-T", "-", "-cf", "-"])
        err = bytearray()
        reader = threading.Thread(target=_drain, args=(chan.recv_stderr, err, 64 * 1024), daemon=True)
        reader.start()
        wanted = sum(listing[w] for w in want)
        stream = _ChannelReader(chan, min(budget, wanted + wanted // 4 + STREAM_SLACK_BYTES) +
                                4096 * (len(want) + 16) + (1 << 20))
        names = "\0".join(want).encode(errors="surrogateescape") + b"\0"
        threading.Thread(target=_send_and_close, args=(chan, names), daemon=True).start()
        try:
            chan.settimeout(IDLE_TIMEOUT_S)
            result = safe_extract(stream, local_dir, {w: listing[w] for w in want}, budget)
            stream.drain()
        except Exception as exc:  # noqa: BLE001 - a broken stream, a stalled host, a dead connection
            self._kill_remote(pid)
            chan.close()
            if isinstance(exc, socket.timeout):
                why = f"the host sent nothing for {IDLE_TIMEOUT_S:g} s"
            elif isinstance(exc, tarfile.TarError):
                why = f"the host did not send a valid tar stream ({exc})"
            else:
                why = str(exc) or type(exc).__name__
            raise HostError(f"{self.where}: fetching {remote_dir} failed: {why}", "command_failed") from None
        chan.status_event.wait(60)
        code = chan.recv_exit_status() if chan.status_event.is_set() else -1
        reader.join(timeout=10)
        chan.close()
        result.left.update(left)
        if code != 0:
            raise HostError(f"{self.where}: copying {remote_dir} failed (tar exit {code}): "
                            f"{err.decode(errors='replace').strip()}", "command_failed")
        result.skipped.update(skipped)
        return self._fetched(result, remote_dir, local_dir)

    def _fetched(self, result: FetchResult, remote_dir, local_dir) -> FetchResult:
        report_fetch(result, f"{self.name}: {remote_dir}", local_dir)
        return result

    def forward_unix_socket(self, remote_path: str) -> str:
        """A local unix socket whose every connection is relayed to ``remote_path`` on the host, over this SSH
        connection (one exec channel per connection, relayed by a few lines of Python there). Used for the
        Docker daemon: the same identity and host-key policy as everything else, no second SSH client."""
        import tempfile
        folder = tempfile.mkdtemp(prefix="flagperf-fwd-")
        local = os.path.join(folder, "sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(local)
        server.listen(32)
        self._forwards.append((server, folder))
        threading.Thread(target=self._accept_loop, args=(server, remote_path), daemon=True,
                         name=f"fwd-{self.name}").start()
        return local

    def _accept_loop(self, server, remote_path):
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return                      # server closed
            try:
                chan, _pid = self._open([self.host.python, "-c", _RELAY_SCRIPT, remote_path])
            except HostError:
                conn.close()
                continue
            threading.Thread(target=_pump_to_channel, args=(conn, chan), daemon=True).start()
            threading.Thread(target=_pump_from_channel, args=(chan, conn), daemon=True).start()

    def close(self):
        import shutil
        self.closed = True
        for server, folder in self._forwards:
            server.close()
            shutil.rmtree(folder, ignore_errors=True)
        self._forwards.clear()
        self.client.close()


# AES-GCM first: with AES-NI it moves bulk data (collect, deploy) faster than paramiko's default aes-ctr + hmac.
_PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr")


def _fast_transport(sock, disabled_algorithms=None):
    import paramiko
    t = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
    opts = t.get_security_options()
    known = [c for c in _PREFERRED_CIPHERS if c in opts.ciphers]
    opts.ciphers = tuple(known + [c for c in opts.ciphers if c not in known])
    t.default_window_size = 8 * 1024 * 1024
    return t


class _ChannelWriter(io.RawIOBase):
    def __init__(self, chan):
        self.chan = chan

    def writable(self):
        return True

    def write(self, b):
        self.chan.sendall(bytes(b))
        return len(b)


# Runs on the host: relays stdin/stdout to a unix socket (the Docker daemon's).
_RELAY_SCRIPT = r"""
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
def up():
    while True:
        d = os.read(0, 65536)
        if not d:
            break
        s.sendall(d)
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
out = sys.stdout.buffer
while True:
    d = s.recv(65536)
    if not d:
        break
    out.write(d)
    out.flush()
"""


def _pump_to_channel(conn, chan):
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            chan.sendall(data)
    except (OSError, EOFError):
        pass
    finally:
        try:
            chan.shutdown_write()
        except (OSError, EOFError):
            pass


def _pump_from_channel(chan, conn):
    try:
        while True:
            data = chan.recv(65536)
            if not data:
                break
            conn.sendall(data)
    except (OSError, EOFError):
        pass
    finally:
        conn.close()
        chan.close()


def _drain(recv, buf, limit=None):
    """Read until EOF into buf; past limit bytes (+1, to tell), the rest is read and dropped."""
    try:
        while True:
            data = recv(65536)
            if not data:
                return
            if limit is None or len(buf) <= limit:
                buf.extend(data if limit is None else data[:limit + 1 - len(buf)])
    except (OSError, EOFError):
        return


def _send_and_close(chan, data):
    """Send data as the command's stdin, then EOF (in a thread: the command's output is read meanwhile)."""
    try:
        chan.sendall(data)
        chan.shutdown_write()
    except (OSError, EOFError):
        pass


class _ChannelReader(io.RawIOBase):
    """A channel's stdout as a read-only file for tarfile; more than ``limit`` bytes in all is an error.

    The channel is read in large pieces (all that paramiko holds, up to 4 MiB: taking part of its buffer moves
    the rest) and handed out in the small reads tarfile makes."""

    def __init__(self, chan, limit: int):
        self.chan = chan
        self.limit = limit
        self.count = 0
        self._buf = memoryview(b"")
        self._pos = 0

    def readable(self):
        return True

    def read(self, n=-1):
        n = 1 << 20 if n is None or n < 0 else n
        parts, got = [], 0
        while got < n:
            if self._pos >= len(self._buf):
                data = self.chan.recv(4 << 20)
                if not data:
                    break
                self.count += len(data)
                if self.count > self.limit:
                    raise OSError(f"the host sent more than {self.limit} bytes (more than it listed)")
                self._buf, self._pos = memoryview(data), 0
            take = min(n - got, len(self._buf) - self._pos)
            parts.append(self._buf[self._pos:self._pos + take])
            self._pos += take
            got += take
        return b"".join(parts)

    def drain(self):
        """Read what follows the end of the archive (padding), within the limit."""
        while self.read(1 << 20):
            pass


_warned_lines: set = set()


def _load_known_hosts(client, path: str, where: str) -> None:
    """Load KNOWN_HOSTS into the client's host keys line by line. A line that cannot be parsed (a corrupt entry,
    for this host or another) is skipped with a warning naming the file and line, as OpenSSH does; paramiko's
    own loader would fail on it. A path that is a directory or another non-file is an error."""
    import stat as stat_mod

    from paramiko.hostkeys import HostKeyEntry
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return                  # no keys recorded yet: every host is unknown (or accepted with --accept-new)
    except OSError as exc:
        raise HostError(f"{where}: cannot read KNOWN_HOSTS {path}: {exc.strerror}", "error") from None
    if stat_mod.S_ISDIR(st.st_mode):
        raise HostError(f"{where}: KNOWN_HOSTS {path} is a directory; expected a known_hosts file", "error")
    if not stat_mod.S_ISREG(st.st_mode):
        raise HostError(f"{where}: KNOWN_HOSTS {path} is not a regular file; expected a known_hosts file", "error")
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise HostError(f"{where}: cannot read KNOWN_HOSTS {path}: {exc.strerror}", "error") from None
    keys = client.get_host_keys()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line, lineno)
        except Exception as exc:  # noqa: BLE001 - paramiko raises several types for a bad line
            key = (path, lineno, st.st_mtime_ns)
            with _known_hosts_lock:
                new = key not in _warned_lines
                _warned_lines.add(key)
            if new:
                logging.getLogger("flagperf.hosts.ssh").warning(
                    "%s:%d: not a valid known_hosts line, skipped (%s)", path, lineno, type(exc).__name__)
            continue
        if entry is None:       # a key type paramiko does not know, or too few fields: not usable here
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)


class _AcceptNewPolicy:
    """--accept-new-host-keys: record an unknown host key in KNOWN_HOSTS (a changed key is still refused)."""

    def __init__(self, path):
        self.path = path

    def missing_host_key(self, client, hostname, key):
        client.get_host_keys().add(hostname, key.get_name(), key)
        with _known_hosts_lock:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            os.chmod(self.path, 0o600)


def _classify(exc, where, t) -> HostError:
    import paramiko
    kh = t.known_hosts
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostError(f"{where}: the host key CHANGED since it was recorded in {kh}; if the host was "
                         f"reinstalled, remove its old entry (ssh-keygen -R '[{t.hostname}]:{t.port}' -f {kh}) "
                         f"and check again; otherwise do not connect", "changed_host_key")
    if isinstance(exc, paramiko.AuthenticationException):
        return HostError(f"{where}: authentication failed for user {t.user}; check SSH_USER and SSH_KEY "
                         f"(or the ssh-agent) and the host's authorized_keys", "auth_failed")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) or isinstance(exc, ConnectionRefusedError):
        return HostError(f"{where}: connection refused; is sshd running on port {t.port}?", "connection_refused")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return HostError(f"{where}: no answer within {CONNECT_TIMEOUT_S:g} s (connection timed out)", "timeout")
    text = str(exc)
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in text:
        return HostError(f"{where}: unknown host key (not in {kh}); verify the host's fingerprint and add it "
                         f"(ssh-keyscan -p {t.port} {t.hostname} >> {kh}), or pass --accept-new-host-keys",
                         "unknown_host_key")
    if isinstance(exc, paramiko.SSHException) and ("No existing session" in text or "banner" in text.lower()):
        return HostError(f"{where}: the host accepted the connection but sent no SSH banner within "
                         f"{CONNECT_TIMEOUT_S:g} s", "timeout")
    if isinstance(exc, socket.gaierror):
        return HostError(f"{where}: cannot resolve {t.hostname}: {exc}", "unreachable")
    if isinstance(exc, OSError):
        return HostError(f"{where}: cannot connect: {exc}", "unreachable")
    return HostError(f"{where}: SSH error: {type(exc).__name__}: {exc}", "error")
