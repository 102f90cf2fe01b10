"""A test bed of N real OpenSSH servers on loopback addresses 127.0.0.2, 127.0.0.3, ...

Every simulated host is its own ``/usr/sbin/sshd -D`` child process with its own config, ed25519 host key,
pid file and log, listening on ``127.0.0.<k>:<port>``.  One client key pair (no passphrase) is authorized on
all of them, and ``known_hosts`` lists every host key in OpenSSH's ``[addr]:port`` form, so a client can
verify host keys strictly (paramiko ``RejectPolicy``, ``ssh -o StrictHostKeyChecking=yes``).

Shell start-up files: root's ``~/.bashrc`` on this machine runs ``pyenv init`` on every non-interactive ssh
exec (~85 ms a command).  Each sshd is therefore started inside its own mount namespace (``unshare -m``) in
which the login shell's start-up files are hidden; the rest of the machine is untouched.  ``mask_home``:

* ``"rc"`` (default): an empty file is bind-mounted over each of ``~/.bashrc``, ``~/.profile``,
  ``~/.bash_profile``, ``~/.bash_login``, ``~/.bash_logout`` that exists.  The rest of HOME stays visible,
  which matters here: the venv's python (``sys.executable``) is a symlink into ``/root/.pyenv``.
* ``"all"``: an empty directory is bind-mounted over the whole HOME (hides ``/root/.pyenv`` too, so the
  venv's python does not run in the bed's sessions on a machine laid out like this one).
* ``"none"``: plain sshd, no namespace.

If ``unshare``/``mount`` are not permitted, the bed falls back to plain sshd and says so in ``bed.isolation``.

Usable as a pytest fixture (tests/e2e/conftest.py: ``ssh_bed``) and by hand (scripts/ssh-testbed.py).
Standard library only; paramiko is imported only by :meth:`SSHBed.self_check`.
"""

from __future__ import annotations

import getpass
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"
MAX_HOSTS = 64
START_TIMEOUT = 20.0
RC_FILES = (".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout")


class SSHBedError(RuntimeError):
    """The bed could not be set up or a host did not come up; the message says why."""


class PortInUse(SSHBedError):
    """The chosen port is taken on at least one bed address (pick another and start again)."""


# --------------------------------------------------------------------------------------------------------------
# installation and ports

def ensure_openssh() -> None:
    """Make sure ``/usr/sbin/sshd`` and ``ssh-keygen`` exist (apt-get install openssh-server if not)."""
    if not (os.path.exists(SSHD) and shutil.which(SSH_KEYGEN)):
        if os.geteuid() != 0:
            raise SSHBedError(f"{SSHD} is missing and this is not root: install openssh-server "
                              f"(apt-get install -y openssh-server)")
        if not shutil.which("apt-get"):
            raise SSHBedError(f"{SSHD} is missing and apt-get is not available: install openssh-server")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "openssh-server"]
        proc = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:        # stale package lists are the usual cause: refresh once and retry
            subprocess.run(["apt-get", "update", "-q"], check=False, env=env, stdin=subprocess.DEVNULL,
                           capture_output=True)
            proc = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(SSHD):
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SSHBedError(f"could not install openssh-server with apt-get (exit {proc.returncode}):\n{tail}")
    try:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege separation directory
    except OSError as exc:
        if not os.path.isdir("/run/sshd"):
            raise SSHBedError(f"cannot create /run/sshd (sshd needs it): {exc}") from None


def bed_addresses(n: int, first_octet: int = 2) -> list[str]:
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"n must be 1..{MAX_HOSTS}, got {n}")
    if not 1 <= first_octet or first_octet + n - 1 > 254:
        raise ValueError(f"addresses 127.0.0.{first_octet}..127.0.0.{first_octet + n - 1} are out of range")
    return [f"127.0.0.{first_octet + i}" for i in range(n)]


def port_is_free(port: int, addresses) -> bool:
    """True if ``port`` can be bound (TCP) on every one of ``addresses`` right now."""
    for address in addresses:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # SO_REUSEADDR as sshd uses it: TIME_WAIT leftovers do not count as busy, a listener does.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError:
                return False
    return True


def find_free_port(addresses, low: int = 20000, high: int = 32000, tries: int = 200) -> int:
    """A TCP port, below the ephemeral range, that is free on all ``addresses`` (random, so that parallel
    beds rarely collide; a race is still possible, which :class:`PortInUse` reports)."""
    rng = random.Random()
    for _ in range(tries):
        port = rng.randrange(low, high)
        if port_is_free(port, addresses):
            return port
    raise SSHBedError(f"no free port in {low}..{high} on {addresses[0]}..{addresses[-1]} after {tries} tries")


# --------------------------------------------------------------------------------------------------------------
# processes

def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every live process."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            table[int(d)] = (int(rest[1]), rest[0])
        except (OSError, IndexError, ValueError):
            continue
    return table


def _mnt_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _keygen(path: Path, comment: str) -> subprocess.Popen:
    for p in (path, path.with_name(path.name + ".pub")):
        if p.exists():
            p.unlink()
    return subprocess.Popen([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_keygen(procs) -> None:
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SSHBedError(f"ssh-keygen failed ({' '.join(proc.args)}): {out.decode(errors='replace')}")


_ISOLATION_CACHE: dict[str, str] = {}


def _isolation_works(scratch: Path) -> tuple[bool, str]:
    """Can this process run ``unshare -m`` and bind-mount inside it?  (cached per process)"""
    if "unshare" not in _ISOLATION_CACHE:
        a, b = scratch / ".probe_a", scratch / ".probe_b"
        a.write_text("")
        b.write_text("")
        try:
            proc = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {a} {b}"], check=False,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
            why = "" if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")
            _ISOLATION_CACHE["unshare"] = why
        except (OSError, subprocess.SubprocessError) as exc:
            _ISOLATION_CACHE["unshare"] = str(exc)
        finally:
            a.unlink(missing_ok=True)
            b.unlink(missing_ok=True)
    why = _ISOLATION_CACHE["unshare"]
    return why == "", why


def _has_pdeathsig() -> bool:
    """Does util-linux ``setpriv --pdeathsig`` work here?  (cached per process)"""
    if "pdeathsig" not in _ISOLATION_CACHE:
        ok = bool(shutil.which("setpriv")) and subprocess.run(
            ["setpriv", "--pdeathsig", "TERM", "true"], check=False, capture_output=True).returncode == 0
        _ISOLATION_CACHE["pdeathsig"] = "yes" if ok else ""
    return bool(_ISOLATION_CACHE["pdeathsig"])


# --------------------------------------------------------------------------------------------------------------

class SSHBed:
    """N sshd servers on 127.0.0.<first_octet>.. :``port``, all files under ``root`` (no spaces in paths)."""

    def __init__(self, root, n: int, port: int = 2222, first_octet: int = 2, mask_home: str = "rc",
                 start_timeout: float = START_TIMEOUT):
        self.root = Path(root).resolve()
        if any(c.isspace() for c in str(self.root)):
            raise ValueError(f"the bed root may not contain whitespace: {self.root}")
        if mask_home not in ("rc", "all", "none"):
            raise ValueError(f"mask_home must be 'rc', 'all' or 'none', got {mask_home!r}")
        self.n = n
        self.port = int(port)
        self.first_octet = first_octet
        self.addresses = bed_addresses(n, first_octet)
        self.mask_home = mask_home
        self.start_timeout = start_timeout
        self.user = getpass.getuser()
        self.isolation = "none"          # "unshare" once started inside mount namespaces
        self.isolation_note = ""
        self.start_seconds = None        # wall time of the last start()
        self._procs: dict[int, subprocess.Popen] = {}
        self._ns: dict[int, str] = {}
        self._mounts: list[tuple[Path, Path]] = []
        self._started = False

    # ---- paths -----------------------------------------------------------------------------------------------
    @property
    def client_key(self) -> Path:
        return self.root / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def authorized_keys(self) -> Path:
        return self.root / "authorized_keys"

    def host_dir(self, i: int) -> Path:
        return self.root / "hosts" / self.addresses[i]

    @property
    def hosts(self) -> list[dict]:
        return [{"address": a, "port": self.port, "user": self.user, "key": str(self.client_key),
                 "flagperf_path": str(self.host_dir(i) / "flagperf"), "result_path": str(self.host_dir(i) / "result"),
                 "dir": str(self.host_dir(i))}
                for i, a in enumerate(self.addresses)]

    def host_public_key(self, i: int) -> str:
        """``ssh-ed25519 AAAA...`` of host i's current key."""
        return " ".join((self.host_dir(i) / "ssh_host_ed25519_key.pub").read_text().split()[:2])

    def known_hosts_line(self, i: int) -> str:
        return f"[{self.addresses[i]}]:{self.port} {self.host_public_key(i)}"

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self) -> SSHBed:
        """Create keys and configs, start every sshd, wait until each answers with an SSH banner."""
        if self._started:
            return self
        t0 = time.monotonic()
        if not os.path.exists(SSHD):
            raise SSHBedError(f"{SSHD} not found; call ensure_openssh() first")
        busy = [a for a in self.addresses if not port_is_free(self.port, [a])]
        if busy:
            raise PortInUse(f"port {self.port} is already in use on {', '.join(busy)}")
        os.makedirs("/run/sshd", exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        self._setup_isolation()

        jobs = []
        if not self.client_key.exists():
            jobs.append(_keygen(self.client_key, "sshbed-client"))
        for i in range(self.n):
            d = self.host_dir(i)
            for sub in ("flagperf", "result"):
                (d / sub).mkdir(parents=True, exist_ok=True)
            if not (d / "ssh_host_ed25519_key").exists():
                jobs.append(_keygen(d / "ssh_host_ed25519_key", f"sshbed-{self.addresses[i]}"))
        _wait_keygen(jobs)
        self.authorized_keys.write_text(Path(str(self.client_key) + ".pub").read_text())
        self.known_hosts.write_text("".join(self.known_hosts_line(i) + "\n" for i in range(self.n)))

        self._started = True
        try:
            for i in range(self.n):
                self._launch(i)
            self._wait_up(range(self.n))
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every sshd of the bed and everything running in its sessions; wait for them.  Idempotent."""
        try:
            self._kill_hosts(list(self._procs))
        finally:
            self._started = False

    def stop_host(self, i: int) -> None:
        """Take host i down (its sshd and sessions end); connections to it are then refused."""
        self._kill_host(i)

    def start_host(self, i: int) -> None:
        """Start host i's sshd again (after stop_host or with a new key)."""
        if i in self._procs:
            return
        busy = not port_is_free(self.port, [self.addresses[i]])
        if busy:
            raise PortInUse(f"port {self.port} is already in use on {self.addresses[i]}")
        self._launch(i)
        try:
            self._wait_up([i])
        except BaseException:
            self._kill_host(i)
            raise

    def rotate_host_key(self, i: int) -> None:
        """Give host i a new host key and restart it; the bed's known_hosts is left as it was, so clients
        that verify against it see a *changed* host key."""
        self._kill_host(i)
        _wait_keygen([_keygen(self.host_dir(i) / "ssh_host_ed25519_key", f"sshbed-{self.addresses[i]}-rotated")])
        self.start_host(i)

    def unknown_known_hosts(self, path, i: int = 0) -> Path:
        """Write a known_hosts with every host but host i (so host i's key is *unknown*); return its path."""
        path = Path(path)
        path.write_text("".join(self.known_hosts_line(j) + "\n" for j in range(self.n) if j != i))
        return path

    def wrong_client_key(self, path) -> Path:
        """Generate a key pair at ``path`` that no host authorizes (authentication fails); return its path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _wait_keygen([_keygen(path, "sshbed-wrong-client")])
        return path

    def pids(self, i: int | None = None) -> list[int]:
        """Live pids that belong to host i (or to every host): its sshd, its session processes and, when
        namespaced, anything left running in its mount namespace."""
        table = _proc_table()
        nsmap = {pid: _mnt_ns(pid) for pid in table}
        found = set()
        for j in ([i] if i is not None else list(self._procs)):
            found |= self._host_pids(j, table, nsmap)
        return sorted(found)

    # ---- cluster config --------------------------------------------------------------------------------------
    def write_cluster_yaml(self, path, python: str | None = None, extra: dict | None = None,
                           per_host: dict | None = None, master_port: int = 29555) -> Path:
        """Write a flagperf cluster config for the bed; ``per_host = {i: {KEY: value}}`` overrides or adds keys
        for host i (a value of None removes the key); ``extra`` adds/overrides top-level keys."""
        hosts = []
        for i, h in enumerate(self.hosts):
            entry = {"HOST": h["address"], "FLAGPERF_PATH": h["flagperf_path"]}
            for key, value in ((per_host or {}).get(i) or {}).items():
                if value is None:
                    entry.pop(key, None)
                else:
                    entry[key] = value
            hosts.append(entry)
        data = {"HOSTS": hosts, "SSH_PORT": self.port, "SSH_USER": self.user, "SSH_KEY": str(self.client_key),
                "KNOWN_HOSTS": str(self.known_hosts), "PYTHON": python or sys.executable,
                "MASTER_PORT": master_port}
        for key, value in (extra or {}).items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            import yaml
            text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        except ImportError:
            text = _dump_yaml(data)
        path.write_text(text)
        return path

    # ---- self check ------------------------------------------------------------------------------------------
    def self_check(self, repeat: int = 5, timeout: float = 10.0, nodelay: bool = True) -> list[dict]:
        """Connect to every host with paramiko (RejectPolicy + the bed's known_hosts + client key), run
        ``echo ok`` ``repeat`` times and ``cat /root/.bashrc | wc -c``; return per-host timings (seconds).
        Raises SSHBedError naming the hosts that failed.

        ``nodelay``: set TCP_NODELAY on the client socket.  paramiko sets no socket options itself, and with
        Nagle on, each exec waits ~40 ms for a delayed ACK (measured here: ~47 ms a command without,
        ~3 ms with)."""
        import paramiko
        results, failures = [], []
        for h in self.hosts:
            client = paramiko.SSHClient()
            client.load_host_keys(str(self.known_hosts))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            try:
                t0 = time.monotonic()
                sock = socket.create_connection((h["address"], h["port"]), timeout=timeout)
                if nodelay:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                client.connect(h["address"], port=h["port"], username=h["user"], key_filename=h["key"],
                               allow_agent=False, look_for_keys=False, timeout=timeout, banner_timeout=timeout,
                               auth_timeout=timeout, sock=sock)
                connect_s = time.monotonic() - t0
                echo_times = []
                for _ in range(max(1, repeat)):
                    t1 = time.monotonic()
                    out, code = _exec(client, "echo ok", timeout)
                    echo_times.append(time.monotonic() - t1)
                    if code != 0 or out.strip() != "ok":
                        raise SSHBedError(f"'echo ok' gave exit {code}, output {out!r}")
                out, code = _exec(client, "cat /root/.bashrc 2>/dev/null | wc -c", timeout)
                echo_times.sort()
                results.append({"address": h["address"], "connect_s": connect_s, "nodelay": nodelay,
                                "exec_s": echo_times,
                                "exec_median_s": echo_times[len(echo_times) // 2],
                                "bashrc_bytes": int(out.strip() or -1)})
            except Exception as exc:            # noqa: BLE001 - collected and reported per host
                failures.append(f"{h['address']}:{h['port']}: {type(exc).__name__}: {exc}\n"
                                f"{self.log_tail(self.addresses.index(h['address']))}")
            finally:
                client.close()
        if failures:
            joined = "\n".join(failures)
            raise SSHBedError(f"self-check failed on {len(failures)} of {self.n} hosts:\n{joined}")
        return results

    def log_tail(self, i: int, lines: int = 20) -> str:
        try:
            text = (self.host_dir(i) / "sshd.log").read_text(errors="replace")
        except OSError:
            return "(no sshd.log)"
        tail = text.strip().splitlines()[-lines:]
        return "  sshd.log: " + ("\n  sshd.log: ".join(tail) if tail else "(empty)")

    # ---- internals -------------------------------------------------------------------------------------------
    def _setup_isolation(self) -> None:
        self.isolation, self.isolation_note = "none", ""
        if self.mask_home == "none":
            return
        ok, why = _isolation_works(self.root)
        if not ok:
            self.isolation_note = (f"unshare -m / mount --bind not permitted ({why}); running plain sshd, so the "
                                   f"login shell's start-up files run on every command")
            return
        home = Path(pwd.getpwnam(self.user).pw_dir)
        masks = self.root / "home"
        masks.mkdir(exist_ok=True)
        (masks / "empty_rc").write_text("")
        (masks / "empty_home").mkdir(exist_ok=True)
        if self.mask_home == "all":
            self._mounts = [(masks / "empty_home", home)]
        else:
            self._mounts = [(masks / "empty_rc", home / name) for name in RC_FILES if (home / name).is_file()]
        self.isolation = "unshare"

    def sshd_config(self, i: int, extra=()) -> str:
        """Host i's sshd_config: key-only login on its address and port, its own host key and pid file, and
        ``extra`` lines (a bed's own settings)."""
        d = self.host_dir(i)
        return "\n".join([
            f"ListenAddress {self.addresses[i]}",
            f"Port {self.port}",
            f"HostKey {d / 'ssh_host_ed25519_key'}",
            f"PidFile {d / 'sshd.pid'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "MaxStartups 100:30:200",
            "MaxSessions 100",
            "Subsystem sftp internal-sftp",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "LogLevel VERBOSE",
            *extra,
            "",
        ])

    def _launch(self, i: int) -> None:
        d = self.host_dir(i)
        cfg, log = d / "sshd_config", d / "sshd.log"
        cfg.write_text(self.sshd_config(i))
        log.write_text("")
        sshd = [SSHD, "-D", "-f", str(cfg), "-E", str(log)]
        if self.isolation == "unshare":
            mounts = " && ".join(f"mount --bind {src} {dst}" for src, dst in self._mounts)
            script = (mounts + " && " if mounts else "") + "exec " + " ".join(sshd)
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]   # unshare execs: same pid
        else:
            argv = sshd
        if _has_pdeathsig():
            # SIGTERM the sshd when the thread that started it dies, so a killed pytest or script leaves no
            # listener behind (PR_SET_PDEATHSIG survives exec).  Start beds from a thread that outlives them.
            argv = ["setpriv", "--pdeathsig", "TERM", *argv]
        with open(log, "ab") as logf:
            self._procs[i] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                              start_new_session=True, close_fds=True)

    def _wait_up(self, indices) -> None:
        pending = set(indices)
        deadline = time.monotonic() + self.start_timeout
        while pending:
            for i in sorted(pending):
                proc = self._procs[i]
                if proc.poll() is not None:
                    tail = self.log_tail(i)
                    cls = PortInUse if "Address already in use" in tail else SSHBedError
                    raise cls(f"sshd for {self.addresses[i]}:{self.port} exited with {proc.returncode} "
                              f"while starting\n{tail}")
                if self._answers(i):
                    if self.isolation == "unshare":
                        self._ns[i] = _mnt_ns(proc.pid)
                    pending.discard(i)
            if not pending:
                break
            if time.monotonic() > deadline:
                i = min(pending)
                raise SSHBedError(f"{len(pending)} host(s) did not come up within {self.start_timeout:.0f} s; "
                                  f"e.g. {self.addresses[i]}:{self.port}\n{self.log_tail(i)}")
            time.sleep(0.02)

    def _answers(self, i: int) -> bool:
        """Our sshd logged that it listens, and the address answers with an SSH-2.0 banner."""
        try:
            if f"Server listening on {self.addresses[i]} port {self.port}" not in \
                    (self.host_dir(i) / "sshd.log").read_text(errors="replace"):
                return False
            with socket.create_connection((self.addresses[i], self.port), timeout=1.0) as s:
                s.sendall(b"SSH-2.0-sshbed-probe\r\n")
                data = b""
                while not data.endswith(b"\n") and len(data) < 256:
                    chunk = s.recv(256)
                    if not chunk:
                        break
                    data += chunk
                return data.startswith(b"SSH-2.0-")
        except OSError:
            return False

    def _host_pids(self, i: int, table, nsmap=None) -> set[int]:
        proc = self._procs.get(i)
        found = set()
        if proc is not None and proc.pid in table:
            found.add(proc.pid)
        children: dict[int, list[int]] = {}
        for pid, (ppid, _state) in table.items():
            children.setdefault(ppid, []).append(pid)
        stack = list(found)
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        ns = self._ns.get(i)
        if ns:
            if nsmap is None:
                nsmap = {pid: _mnt_ns(pid) for pid in table}
            found |= {pid for pid, pid_ns in nsmap.items() if pid_ns == ns and pid in table}
        return {pid for pid in found if table[pid][1] != "Z"}

    def _kill_host(self, i: int) -> None:
        self._kill_hosts([i])

    def _kill_hosts(self, indices) -> None:
        indices = [i for i in indices if i in self._procs]
        if not indices:
            return
        # The listeners first (no new connections), then their sessions: each connection's sshd runs setsid(),
        # so sessions are found by parentage and by mount namespace rather than by process group.
        def current():
            table = _proc_table()
            nsmap = {pid: _mnt_ns(pid) for pid in table} if any(i in self._ns for i in indices) else {}
            return set().union(*(self._host_pids(i, table, nsmap) for i in indices))
        victims = current()
        for i in indices:
            _signal(self._procs[i].pid, signal.SIGTERM)
        for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
            for pid in victims:
                _signal(pid, sig)
            deadline = time.monotonic() + grace
            while True:
                for i in indices:
                    self._procs[i].poll()           # reap our own children
                victims = current() | {p for p in victims if _alive(p)}
                if not victims or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            if not victims:
                break
        for i in indices:
            try:
                self._procs[i].wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            del self._procs[i]
            self._ns.pop(i, None)
        if victims:
            raise SSHBedError(f"bed processes survived SIGKILL: {sorted(victims)}")


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exec(client, command: str, timeout: float):
    _stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode(errors="replace")
    stderr.read()
    return out, stdout.channel.recv_exit_status()


def _dump_yaml(data: dict) -> str:
    """Tiny YAML writer for the cluster config shape (used only when pyyaml is missing)."""
    def scalar(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
    lines = []
    for key, value in data.items():
        if isinstance(value, list):
            lines.append(f"{key}:")
            for item in value:
                if isinstance(item, dict):
                    first = True
                    for k, v in item.items():
                        lines.append(f"{'  - ' if first else '    '}{k}: {scalar(v)}")
                        first = False
                else:
                    lines.append(f"  - {scalar(item)}")
        elif isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {scalar(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {scalar(value)}")
    return "\n".join(lines) + "\n"
