"""A test bed of N real sshd hosts, each in its own network namespace, with a link that can be made slow.

Layout (slot ``s``, prefix ``fpnb<s>``)::

    root namespace:   bridge fpnb<s>br 10.231.<s>.1/24
                        |-- veth fpnb<s>v0 ==== eth0 10.231.<s>.2/24  in namespace fpnb<s>h0  (sshd :22)
                        |-- veth fpnb<s>v1 ==== eth0 10.231.<s>.3/24  in namespace fpnb<s>h1  (sshd :22)
                        ...

Every host is an ``/usr/sbin/sshd -D`` started with ``ip netns exec`` in its namespace (loopback up), inside its
own mount and UTS namespaces: its hostname is the namespace's name and its ``/etc/hosts`` (bind-mounted from the
host's folder) maps every bed host's name to its address; its ``/etc/resolv.conf`` names no reachable server, so a
lookup of an unknown name fails at once instead of waiting for a DNS server the namespace cannot reach.  The
sessions get ``GLOO_SOCKET_IFNAME=eth0`` (sshd ``SetEnv``), so gloo ranks talk over the bed's link and do not
depend on the name lookup: the kernel detaches a bind mount from a file that is renamed over or unlinked, in
every namespace, so when something on the machine replaces ``/etc/hosts`` (this happens here during test runs)
the hosts see the machine's file again, in which their names are missing, and gloo would fall back to
127.0.0.1.  The namespaces have no default route: nothing leaves the bed.  The login shell's start-up files are
hidden as in :mod:`testbed.sshbed` (``mask_home``).  Keys, ``known_hosts``, the cluster yaml, ``self_check``
and the stopping of sessions are :class:`testbed.sshbed.SSHBed`'s: the same user and client key pair, port 22 on
every host (each namespace has its own ports), ``PYTHON`` the driver's interpreter (the namespaces share the file
system).  The driver reaches the hosts from the root namespace through the bridge; host-to-host traffic crosses
the bridge too.

``limit(i, rate)`` makes host i's link slow: a ``tc`` ``tbf`` (default) or ``htb`` qdisc on the egress of both
ends of its veth pair (the root-side end carries traffic to the host, ``eth0`` in the namespace traffic from
it), so every transfer to or from host i, and nothing else, is held to ``rate``.  ``netem`` is not needed (and
not in this machine's kernel).  ``line_rate`` shapes every link the same way at start, as a NIC's speed;
``unlimit(i)`` puts host i back to it.

Slots and clean-up: a bed takes the first free slot ``s`` (0..63) by an exclusive ``flock`` on
``/run/flagperf-netbed/slot<s>.lock``, held while the bed lives and released by the kernel when its process
dies; the slot gives the bed its names (``fpnb<s>...``) and its subnet ``10.231.<s>.0/24`` (a slot whose subnet
another interface already uses is skipped).  Holding the lock means no live bed uses the prefix, so a start
first removes whatever a killed earlier bed of the same slot left behind (its processes, namespaces, veths and
bridge) and touches nothing of any other prefix.  ``stop()`` removes the bed's processes, namespaces, veths and
bridge, also after a failed start.  Each sshd gets SIGTERM when the thread that started it dies
(``setpriv --pdeathsig``), as in :mod:`testbed.sshbed`.

Needs root, ``ip`` and ``tc`` (iproute2), and a kernel with network namespaces, veth, bridge and sch_tbf or
sch_htb; :func:`unavailable_reason` says what is missing.

Measured on the 2-core Debian 12 VM (kernel 6.18 with veth, bridge, sch_tbf and sch_htb built in, no sch_netem;
iproute2 6.1), shared with other work (load average 1 to 4); ``python -m testbed.netbed measure`` streams 64 MiB
over TCP (plain Python sockets) between two hosts, every pair of 4 hosts, 2 to 3 times each:

* start of a 4-host bed: 0.4 to 1.0 s.
* unshaped veths are CPU-bound and noisy: 1.4 to 6.2 GB/s a pair across sweeps (medians 2.0 to 4.8 GB/s), and
  flagperf's p2p between two hosts (gloo, 4 MiB messages) gave 0.55 to 2.8 GB/s.  A ``tbf`` of 16 Gbit on one
  host left its pairs at 44% of the others in one sweep while the unshaped host's pairs had been at 206% of the
  others in the sweep before: a 50-70% link cannot be told from that noise.
* so the tests shape every link to ``line_rate`` 2 Gbit: 230 to 242 MB/s a pair (TCP payload of 250 MB/s), p2p
  4 MiB 0.21 to 0.24 GB/s; the bad link at 1200 Mbit: 140 to 145 MB/s, 60% of the others (``tbf`` and ``htb``
  alike), p2p 0.141 to 0.147 GB/s, 60 to 62%.  At these rates the CPU is far from busy and the figures hold
  within a few percent under load.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed import sshbed
from testbed.sshbed import SSHD, SSHBed, SSHBedError, _has_pdeathsig, _keygen, _proc_table, _signal, _wait_keygen

LOCK_DIR = Path("/run/flagperf-netbed")
NAME_STEM = "fpnb"
MAX_SLOTS = 64
SUBNET_BASE = "10.231"          # slot s: 10.231.<s>.0/24, bridge .1, hosts .2 ...
NETBED_MAX_HOSTS = 64
IP = "ip"
IFNAME = "eth0"                 # every host's end of its veth pair, in its namespace
TC = "tc"


class NetBedError(SSHBedError):
    """The network bed could not be set up, limited or removed; the message says why."""


# --------------------------------------------------------------------------------------------------------------
# commands

def _run(argv, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run([str(a) for a in argv], check=False, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NetBedError(f"{' '.join(map(str, argv))}: {exc}") from None
    if check and proc.returncode != 0:
        raise NetBedError(f"{' '.join(map(str, argv))} failed (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def unavailable_reason() -> str:
    """'' when this machine can run the bed; otherwise why not (not root, no ``ip``/``tc``, no netns, ...)."""
    if os.geteuid() != 0:
        return "the network bed needs root (network namespaces, veth, bridge, tc)"
    for tool in (IP, TC):
        if not _which(tool):
            return f"'{tool}' (iproute2) is not installed"
    if not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces (/proc/self/ns/net is missing)"
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing"
    probe = f"{NAME_STEM}probe{os.getpid() % 100000}"
    try:
        proc = _run([IP, "netns", "add", probe], check=False)
        if proc.returncode != 0:
            return f"ip netns add failed: {(proc.stderr or proc.stdout).strip()}"
        proc = _run([IP, "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"], check=False)
        if proc.returncode != 0:
            return f"veth pairs are not available: {(proc.stderr or proc.stdout).strip()}"
        proc = _run([IP, "-n", probe, "link", "add", "pbr", "type", "bridge"], check=False)
        if proc.returncode != 0:
            return f"bridges are not available: {(proc.stderr or proc.stdout).strip()}"
        kinds = [kind for kind in ("tbf", "htb")
                 if _run([TC, "-n", probe, "qdisc", "replace", "dev", "pa", "root", kind]
                         + (["rate", "1mbit", "burst", "10kb", "latency", "10ms"] if kind == "tbf" else []),
                         check=False).returncode == 0]
        if not kinds:
            return "neither sch_tbf nor sch_htb is available to tc"
    except NetBedError as exc:
        return str(exc)
    finally:
        _run([IP, "netns", "del", probe], check=False)
    return ""


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)),
                                      None)


def _netns_names() -> list[str]:
    out = _run([IP, "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def _link_names() -> list[str]:
    out = _run([IP, "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        m = re.match(r"\d+:\s+([^:@\s]+)", line)
        if m:
            names.append(m.group(1))
    return names


def _net_ns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _netns_inode(name: str) -> str | None:
    """``net:[<inode>]`` of the named namespace (as /proc/<pid>/ns/net reads), None when it does not exist."""
    try:
        return f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
    except OSError:
        return None


def _pids_in_netns(names) -> set[int]:
    wanted = {ino for ino in (_netns_inode(n) for n in names) if ino}
    if not wanted:
        return set()
    return {pid for pid in _proc_table() if _net_ns_of(pid) in wanted}


def subnet_in_use(network: ipaddress.IPv4Network, skip_links=()) -> bool:
    """True when an address of ``network`` is configured on a root-namespace interface not in ``skip_links``."""
    out = _run([IP, "-o", "-4", "addr", "show"], check=False).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "inet" and parts[1].split("@")[0] not in skip_links:
            try:
                if ipaddress.ip_interface(parts[3]).network.overlaps(network):
                    return True
            except ValueError:
                continue
    return False


def remove_prefix(prefix: str) -> list[str]:
    """Remove everything named ``<prefix>...`` the bed creates: processes in its namespaces (SIGKILL), the
    namespaces, its veths and bridge.  Returns what was removed (for the caller's log)."""
    if not re.fullmatch(rf"{NAME_STEM}\d+", prefix):
        raise ValueError(f"not a bed prefix: {prefix!r}")
    own = re.compile(rf"{re.escape(prefix)}(br|[hv]\d+)")
    removed = []
    spaces = [n for n in _netns_names() if own.fullmatch(n)]
    for _round in range(50):
        pids = _pids_in_netns(spaces)
        if not pids:
            break
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.05)
    for name in spaces:
        _run([IP, "netns", "del", name], check=False)
        removed.append(f"netns {name}")
    for name in _link_names():
        if own.fullmatch(name):
            _run([IP, "link", "del", name], check=False)
            removed.append(f"link {name}")
    return removed


# --------------------------------------------------------------------------------------------------------------

class NetBed(SSHBed):
    """N sshd hosts in network namespaces on a bridge; ``limit(i, rate)`` slows host i's link.

    ``slot``: None picks the first free one at start; a number asks for that slot (NetBedError if a live bed
    holds it).  All files live under ``root``."""

    def __init__(self, root, n: int, slot: int | None = None, line_rate: str | None = None, kind: str = "tbf",
                 mask_home: str = "rc", start_timeout: float = sshbed.START_TIMEOUT):
        if not 2 <= n <= NETBED_MAX_HOSTS:
            raise ValueError(f"n must be 2..{NETBED_MAX_HOSTS}, got {n}")
        if slot is not None and not 0 <= slot < MAX_SLOTS:
            raise ValueError(f"slot must be 0..{MAX_SLOTS - 1}, got {slot}")
        super().__init__(root, n, port=22, mask_home=mask_home, start_timeout=start_timeout)
        if line_rate is not None:
            _rate_bits(line_rate)
        if kind not in ("tbf", "htb"):
            raise ValueError(f"kind must be 'tbf' or 'htb', got {kind!r}")
        self.requested_slot = slot
        self.line_rate = line_rate
        self.kind = kind
        self.slot: int | None = None
        self.addresses = []
        self.limits: dict[int, dict] = {}
        self.leftovers_removed: list[str] = []
        self._lock_fd: int | None = None

    # ---- names -----------------------------------------------------------------------------------------------
    @property
    def prefix(self) -> str:
        return f"{NAME_STEM}{self.slot}"

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"{SUBNET_BASE}.{self.slot}.0/24")

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def bridge_address(self) -> str:
        return f"{SUBNET_BASE}.{self.slot}.1"

    def netns(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def veth(self, i: int) -> str:
        """The root-namespace end of host i's veth pair (the other end is ``eth0`` in its namespace)."""
        return f"{self.prefix}v{i}"

    def hostname(self, i: int) -> str:
        return self.netns(i)

    def known_hosts_line(self, i: int) -> str:
        return f"{self.addresses[i]} {self.host_public_key(i)}"      # port 22: OpenSSH's plain form

    def ns_exec(self, i: int) -> list[str]:
        """argv prefix that runs a command in host i's network namespace."""
        return [IP, "netns", "exec", self.netns(i)]

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> NetBed:
        """Claim a slot, remove that slot's leftovers, build bridge, namespaces and veths, start every sshd,
        wait until each answers and every host reaches every other.  On failure everything is removed."""
        if self._started:
            return self
        t0 = time.monotonic()
        why = unavailable_reason()
        if why:
            raise NetBedError(why)
        os.makedirs("/run/sshd", exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        self._claim_slot()
        self._started = True
        try:
            self.leftovers_removed = remove_prefix(self.prefix)
            self.addresses = [str(self.network.network_address + 2 + i) for i in range(self.n)]
            ok, why = sshbed._isolation_works(self.root)
            if not ok:
                raise NetBedError(f"unshare -m / mount --bind not permitted ({why}): the hosts need their own "
                                  f"/etc/hosts and hostname")
            self._setup_isolation()         # the start-up files to hide, by mask_home
            self.isolation = "netns"
            self._net_up()
            if self.line_rate:
                for i in range(self.n):
                    self.limit(i, self.line_rate)
            self._keys()
            for i in range(self.n):
                self._launch(i)
            self._wait_up(range(self.n))
            self.check_mesh()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every sshd and session, remove the namespaces, veths and bridge, release the slot.  Idempotent."""
        try:
            if self._procs:
                super().stop()
        finally:
            self._started = False
            if self.slot is not None:
                try:
                    remove_prefix(self.prefix)
                finally:
                    self.limits.clear()
                    self._release_slot()

    def start_host(self, i: int) -> None:
        if i in self._procs:
            return
        self._launch(i)
        try:
            self._wait_up([i])
        except BaseException:
            self._kill_host(i)
            raise

    # ---- link limits -----------------------------------------------------------------------------------------
    def limit(self, i: int, rate: str, kind: str | None = None, burst: str | None = None) -> None:
        """Hold host i's link to ``rate`` (tc units: ``400mbit``, ``1gbit``, ``50mbps`` = 50 MB/s) in both
        directions: ``kind`` (default: the bed's) ``tbf`` (token bucket) or ``htb`` (one class, rate = ceil), on
        the egress of both ends of its veth, replacing what was there.  ``burst`` defaults to 1 ms of the rate
        (at least 16 KiB)."""
        kind = kind or self.kind
        if kind not in ("tbf", "htb"):
            raise ValueError(f"kind must be 'tbf' or 'htb', got {kind!r}")
        bits = _rate_bits(rate)
        burst = burst or f"{max(16 * 1024, bits // 8 // 1000)}b"
        for tc in ([TC, "qdisc", "del", "dev", self.veth(i), "root"],
                   [TC, "-n", self.netns(i), "qdisc", "del", "dev", IFNAME, "root"]):
            _run(tc, check=False)
        for tc, dev in (([TC], self.veth(i)), ([TC, "-n", self.netns(i)], IFNAME)):
            if kind == "tbf":
                _run(tc + ["qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
                           "latency", "100ms"])
            else:
                _run(tc + ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"])
                _run(tc + ["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
                           "ceil", rate, "burst", burst, "cburst", burst])
        self.limits[i] = {"rate": rate, "kind": kind, "burst": burst}

    def unlimit(self, i: int) -> None:
        """Host i's link back to the bed's ``line_rate`` (or to no limit)."""
        if self.line_rate:
            self.limit(i, self.line_rate)
            return
        _run([TC, "qdisc", "del", "dev", self.veth(i), "root"], check=False)
        _run([TC, "-n", self.netns(i), "qdisc", "del", "dev", IFNAME, "root"], check=False)
        self.limits.pop(i, None)

    def qdiscs(self, i: int) -> str:
        """``tc qdisc show`` of both ends of host i's link (for test output)."""
        a = _run([TC, "qdisc", "show", "dev", self.veth(i)], check=False).stdout.strip()
        b = _run([TC, "-n", self.netns(i), "qdisc", "show", "dev", IFNAME], check=False).stdout.strip()
        return f"{self.veth(i)}: {a}\n{self.netns(i)}/eth0: {b}"

    # ---- measurements ----------------------------------------------------------------------------------------
    def check_mesh(self, timeout: float = 5.0) -> None:
        """Every host reaches every other host's sshd through the bridge (a TCP connect from its namespace).
        NetBedError names the pairs that do not (a firewall on bridged traffic is the usual cause)."""
        code = ("import socket, sys\nbad = []\n"
                "for a in sys.argv[2:]:\n"
                "    try:\n"
                "        socket.create_connection((a, int(sys.argv[1])), timeout=%r).close()\n"
                "    except OSError as exc:\n"
                "        bad.append(a + ': ' + str(exc))\n"
                "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n" % timeout)
        procs = [(i, subprocess.Popen(self.ns_exec(i) + [sys.executable, "-c", code, str(self.port),
                                                         *[a for j, a in enumerate(self.addresses) if j != i]],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
                 for i in range(self.n)]
        bad = []
        for i, proc in procs:
            out, _ = proc.communicate(timeout=timeout * self.n + 30)
            if proc.returncode != 0:
                bad.append(f"from {self.addresses[i]}: {out.strip()}")
        if bad:
            raise NetBedError("bed hosts cannot reach each other through bridge " + self.bridge + " (is bridged "
                              "traffic filtered? net.bridge.bridge-nf-call-iptables and the FORWARD chain):\n"
                              + "\n".join(bad))

    def measure(self, src: int, dst: int, nbytes: int = 64 << 20, chunk: int = 1 << 20,
                timeout: float = 120.0) -> dict:
        """Stream ``nbytes`` over TCP from host ``src`` to host ``dst`` (plain Python sockets, one process in
        each namespace); returns {"src", "dst", "bytes", "seconds", "mb_s"} as the receiver timed it (first
        byte to last)."""
        server = subprocess.Popen(self.ns_exec(dst) + [sys.executable, "-c", _STREAM_SERVER,
                                                       self.addresses[dst], str(nbytes)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            port = server.stdout.readline().strip()
            if not port.isdigit():
                raise NetBedError(f"stream server on {self.addresses[dst]} did not start: {server.stderr.read()}")
            _run(self.ns_exec(src) + [sys.executable, "-c", _STREAM_CLIENT, self.addresses[dst], port, str(nbytes),
                                      str(chunk)], timeout=timeout)
            out, err = server.communicate(timeout=timeout)
            if server.returncode != 0:
                raise NetBedError(f"stream server on {self.addresses[dst]} failed: {err.strip()}")
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        result = json.loads(out)
        result.update(src=self.addresses[src], dst=self.addresses[dst])
        return result

    # ---- internals -------------------------------------------------------------------------------------------
    def _claim_slot(self) -> None:
        LOCK_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        slots = [self.requested_slot] if self.requested_slot is not None else list(range(MAX_SLOTS))
        for slot in slots:
            fd = os.open(LOCK_DIR / f"slot{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise NetBedError(f"cannot lock {LOCK_DIR}/slot{slot}.lock: {exc}") from None
            prefix = f"{NAME_STEM}{slot}"
            own = {f"{prefix}br"} | {f"{prefix}v{i}" for i in range(NETBED_MAX_HOSTS)}
            if subnet_in_use(ipaddress.ip_network(f"{SUBNET_BASE}.{slot}.0/24"), skip_links=own):
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {self.root}\n".encode())
            self.slot, self._lock_fd = slot, fd
            return
        which = f"slot {self.requested_slot}" if self.requested_slot is not None else f"slots 0..{MAX_SLOTS - 1}"
        raise NetBedError(f"no free network bed slot ({which}: held by a live bed, or its subnet "
                          f"{SUBNET_BASE}.<slot>.0/24 in use by another interface)")

    def _release_slot(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)          # closes the flock
            self._lock_fd = None
        self.slot = None

    def _net_up(self) -> None:
        _run([IP, "link", "add", "name", self.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
        _run([IP, "addr", "add", f"{self.bridge_address}/24", "dev", self.bridge])
        _run([IP, "link", "set", self.bridge, "up"])
        for i in range(self.n):
            ns = self.netns(i)
            _run([IP, "netns", "add", ns])
            _run([IP, "link", "add", self.veth(i), "type", "veth", "peer", "name", IFNAME, "netns", ns])
            _run([IP, "link", "set", self.veth(i), "master", self.bridge])
            _run([IP, "link", "set", self.veth(i), "up"])
            _run([IP, "-n", ns, "link", "set", "lo", "up"])
            _run([IP, "-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", IFNAME])
            _run([IP, "-n", ns, "link", "set", IFNAME, "up"])
        hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{a} {self.hostname(i)}\n" for i, a in enumerate(self.addresses))
        for i in range(self.n):
            d = self.host_dir(i)
            for sub in ("flagperf", "result"):
                (d / sub).mkdir(parents=True, exist_ok=True)
            (d / "etc_hosts").write_text(hosts)
            (d / "resolv.conf").write_text("# no name server: lookups of unknown names fail at once\n"
                                           "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def _keys(self) -> None:
        jobs = []
        if not self.client_key.exists():
            jobs.append(_keygen(self.client_key, "netbed-client"))
        for i in range(self.n):
            if not (self.host_dir(i) / "ssh_host_ed25519_key").exists():
                jobs.append(_keygen(self.host_dir(i) / "ssh_host_ed25519_key", f"netbed-{self.addresses[i]}"))
        _wait_keygen(jobs)
        self.authorized_keys.write_text(Path(str(self.client_key) + ".pub").read_text())
        self.known_hosts.write_text("".join(self.known_hosts_line(i) + "\n" for i in range(self.n)))

    def _launch(self, i: int) -> None:
        d = self.host_dir(i)
        cfg, log = d / "sshd_config", d / "sshd.log"
        cfg.write_text(self.sshd_config(i, [f"SetEnv GLOO_SOCKET_IFNAME={IFNAME}"]))
        log.write_text("")
        mounts = [(d / "etc_hosts", Path("/etc/hosts")), (d / "resolv.conf", Path("/etc/resolv.conf")),
                  *self._mounts]
        script = " && ".join([f"hostname {self.hostname(i)}", *(f"mount --bind {s} {t}" for s, t in mounts),
                              f"exec {SSHD} -D -f {cfg} -E {log}"])
        argv = [*self.ns_exec(i), "unshare", "-m", "-u", "--propagation", "private", "sh", "-c", script]
        if _has_pdeathsig():
            argv = ["setpriv", "--pdeathsig", "TERM", *argv]      # ip netns exec and unshare exec: same pid
        with open(log, "ab") as logf:
            self._procs[i] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                              start_new_session=True, close_fds=True)

    def _host_pids(self, i: int, table, nsmap=None) -> set[int]:
        """Host i's sshd, its descendants and everything else in its network namespace."""
        found = super()._host_pids(i, table, None)
        ino = _netns_inode(self.netns(i)) if self.slot is not None else None
        if ino:
            found |= {pid for pid in table if _net_ns_of(pid) == ino and table[pid][1] != "Z"}
        return found


def _rate_bits(rate: str) -> int:
    """bits/s of a tc rate (``400mbit``, ``1gbit``, ``50mbps``, ``1000000bit``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)", rate.strip().lower())
    if not m:
        raise ValueError(f"not a tc rate: {rate!r} (e.g. 400mbit, 1gbit, 50mbps)")
    value, unit = float(m.group(1)), m.group(2)
    scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}[unit]
    return int(value * scale)


_STREAM_SERVER = r"""
import json, socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); want = int(sys.argv[2]); got = 0; buf = bytearray(1 << 20); t0 = None
while got < want:
    n = c.recv_into(buf)
    if not n:
        break
    if t0 is None:
        t0 = time.perf_counter()
    got += n
dt = time.perf_counter() - t0
c.sendall(b"k"); c.close()
print(json.dumps({"bytes": got, "seconds": dt, "mb_s": got / dt / 1e6}))
"""

_STREAM_CLIENT = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
left = int(sys.argv[3]); block = bytes(int(sys.argv[4]))
while left > 0:
    n = c.send(block[:left]); left -= n
c.recv(1); c.close()
"""


# --------------------------------------------------------------------------------------------------------------
# python -m testbed.netbed measure [--n 4] [--bytes 64M] [--rates 1gbit,2gbit]

def _main(argv=None) -> int:
    import argparse
    import statistics
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m testbed.netbed")
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="stream throughput over every pair, unlimited and with host n-1 limited")
    m.add_argument("--n", type=int, default=4)
    m.add_argument("--mib", type=int, default=64)
    m.add_argument("--repeat", type=int, default=3)
    m.add_argument("--rates", default="")
    m.add_argument("--kind", default="tbf")
    m.add_argument("--line-rate", default="", help="shape every link to this rate first (e.g. 2gbit)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="netbed-", dir="/tmp"))
    with NetBed(root, args.n, line_rate=args.line_rate or None, kind=args.kind) as bed:
        print(f"bed slot {bed.slot}: {bed.addresses}, line rate {bed.line_rate or 'none'}, started in "
              f"{bed.start_seconds:.2f} s")
        last = bed.n - 1

        def sweep(label):
            rows = {}
            for a in range(bed.n):
                for b in range(a + 1, bed.n):
                    vals = [bed.measure(a, b, args.mib << 20)["mb_s"] for _ in range(args.repeat)]
                    rows[(a, b)] = statistics.median(vals)
                    print(f"  {label}: {bed.addresses[a]} -> {bed.addresses[b]}: "
                          f"{' '.join(f'{v:.0f}' for v in vals)} MB/s (median {rows[(a, b)]:.0f})", flush=True)
            slow = [v for (a, b), v in rows.items() if last in (a, b)]
            fast = [v for (a, b), v in rows.items() if last not in (a, b)]
            print(f"{label}: pairs of host {last}: median {statistics.median(slow):.0f} MB/s; other pairs: median "
                  f"{statistics.median(fast):.0f} (min {min(fast):.0f}, max {max(fast):.0f}); ratio "
                  f"{statistics.median(slow) / statistics.median(fast):.0%}", flush=True)

        sweep("as started")
        for rate in [r for r in args.rates.split(",") if r]:
            bed.limit(last, rate)
            sweep(f"{args.kind} {rate} on host {last}")
            bed.unlimit(last)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
