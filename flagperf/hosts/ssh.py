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
import os
import shlex
import signal as signal_mod
import socket
import subprocess
import threading
import time
from pathlib import Path

from flagperf.hosts.base import CommandResult, HostError, Process, Transport
from flagperf.hosts.treesync import HASH_SCRIPT, missing_locally, write_tar
from flagperf.sshconfig import resolved_address, ssh_config_lookup  # noqa: F401 (resolved_address re-exported)

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_S = 15
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
        if Path(self.known_hosts).is_file():
            try:
                client.load_host_keys(self.known_hosts)
            except OSError as exc:
                raise HostError(f"{where}: cannot read KNOWN_HOSTS {self.known_hosts}: {exc}", "error") from None
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

    def _run(self, argv, timeout, input, binary):
        t0 = time.monotonic()
        chan, pid = self._open(argv)
        out, err = bytearray(), bytearray()
        readers = [threading.Thread(target=_drain, args=(chan.recv, out), daemon=True),
                   threading.Thread(target=_drain, args=(chan.recv_stderr, err), daemon=True)]
        for r in readers:
            r.start()
        if input is not None:
            chan.sendall(input)
        chan.shutdown_write()
        if not chan.status_event.wait(timeout):
            self._kill_remote(pid)
            chan.close()
            raise HostError(f"{self.where}: command timed out after {timeout:g} s and was killed on the host: "
                            f"{shlex.join(map(str, argv))}", "timeout")
        code = chan.recv_exit_status()
        for r in readers:
            r.join(timeout=30)
        chan.close()
        dt = time.monotonic() - t0
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

    def fetch_tree(self, remote_dir, local_dir):
        r = self._run(["sh", "-c", '[ -d "$1" ] || { echo "$1 does not exist" >&2; exit 3; }; '
                       'cd "$1" && find . -type f -printf "%s %P\\0"', "list", remote_dir], 120, None, binary=True)
        if not r.ok:
            raise HostError(f"{self.where}: cannot list {remote_dir}: {r.stderr.strip()}", "command_failed")
        listing = {}
        for entry in r.stdout.split(b"\0"):
            if entry:
                size, _, name = entry.decode(errors="surrogateescape").partition(" ")
                listing[name] = int(size)
        want = missing_locally(listing, local_dir)
        if not want:
            return 0, 0
        # Streamed as one tar over the channel, unpacked by the local tar (GNU tar strips leading '/' and
        # refuses '..' members): 2x the throughput of parsing the stream with Python's tarfile.
        local = Path(local_dir)
        local.mkdir(parents=True, exist_ok=True)
        chan, pid = self._open(["tar", "-C", remote_dir, "--null", "-T", "-", "-cf", "-"])
        err = bytearray()
        reader = threading.Thread(target=_drain, args=(chan.recv_stderr, err), daemon=True)
        reader.start()
        chan.sendall("\0".join(want).encode(errors="surrogateescape") + b"\0")
        chan.shutdown_write()
        untar = subprocess.Popen(["tar", "-x", "-f", "-", "-C", str(local), "--no-same-owner"],
                                 stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            while True:
                data = chan.recv(1 << 20)
                if not data:
                    break
                untar.stdin.write(data)
            untar.stdin.close()
        except (OSError, EOFError) as exc:
            untar.kill()
            chan.close()
            raise HostError(f"{self.where}: fetching {remote_dir} failed: {exc}", "command_failed") from None
        local_err = untar.stderr.read().decode(errors="replace")
        untar.wait()
        chan.status_event.wait(60)
        code = chan.recv_exit_status()
        reader.join(timeout=10)
        chan.close()
        if code != 0 or untar.returncode != 0:
            raise HostError(f"{self.where}: copying {remote_dir} failed: {err.decode(errors='replace').strip()} "
                            f"{local_err.strip()}", "command_failed")
        return len(want), sum(listing[w] for w in want)

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


def _drain(recv, buf):
    try:
        while True:
            data = recv(65536)
            if not data:
                return
            buf.extend(data)
    except (OSError, EOFError):
        return


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
