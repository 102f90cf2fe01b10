"""A real Slurm cluster on this machine: munged, slurmctld and one slurmd per virtual node (Debian's slurm-wlm).

Everything lives under one folder of the caller's (``root``): the munge key and socket, ``slurm.conf``,
``gres.conf``, the state and spool folders, pid files and logs. Nothing under /etc/slurm or /run/munge is read
or written: every Slurm command must be given ``SLURM_CONF`` (:attr:`SlurmBed.env`). The daemons listen on
127.0.0.1 only, on the ports given (slurmctld ``ctld_port``, node k ``node_port + k``).

Every node is ``NodeAddr=127.0.0.1`` with its own port and runs its slurmd in a UTS namespace of its own whose
host name is the node's name (``unshare --uts``), so jobs see their node name. The node names must resolve for
the ranks' rendezvous: :meth:`SlurmBed.start` adds one line to /etc/hosts (``127.0.0.1 <names>`` with a marker
comment) when they do not, and :meth:`SlurmBed.stop` removes the line it added.

Partitions: ``fpq`` (default, UP, every node), ``fpdown`` (State=DOWN) and ``fpacct`` (DenyAccounts=fpdenied,
with EnforcePartLimits=ALL so that sbatch refuses that account). Each node has ``gpus`` fake GPUs for gres
(character devices like /dev/null, listed in gres.conf), so that ``sinfo`` reports ``gpu:<n>``.

:func:`ensure_charliecloud_image` builds (once, then reuses) a Charliecloud image directory with Debian's Python
and CPU torch for ``RUNTIME: charliecloud``.

Usable as a pytest fixture (tests/e2e/test_slurm.py) and by hand::

    python -m testbed.slurmbed /tmp/bed        # start, print the environment, wait for Ctrl-C, stop

Standard library only.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
HOSTS_FILE = "/etc/hosts"
HOSTS_MARK = "# flagperf-slurmbed"
START_TIMEOUT = 30.0
PARTITION, DOWN_PARTITION, ACCOUNT_PARTITION, DENIED_ACCOUNT = "fpq", "fpdown", "fpacct", "fpdenied"


class SlurmBedError(RuntimeError):
    """The bed could not be installed or started; the message says why."""


def ensure_slurm() -> None:
    """Install Debian's Slurm daemons, client and munge with apt-get when one of them is missing."""
    needed = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/sbin/munged")
    if all(os.path.exists(p) for p in needed):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SlurmBedError(f"Slurm is missing ({', '.join(p for p in needed if not os.path.exists(p))}) and "
                            f"cannot be installed here (needs root and apt-get): apt-get install {' '.join(PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if proc.returncode != 0:        # stale package lists: refresh once and retry
        subprocess.run(["apt-get", "update", "-q"], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                       check=False)
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not all(os.path.exists(p) for p in needed):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SlurmBedError(f"apt-get install {' '.join(PACKAGES)} failed (exit {proc.returncode}):\n{tail}")


class SlurmBed:
    def __init__(self, root, nodes=("fpnode1", "fpnode2"), *, ctld_port: int = 30510, node_port: int = 30521,
                 cpus: int | None = None, gpus: int = 2):
        self.root = Path(root).resolve()
        self.nodes = tuple(nodes)
        self.ctld_port, self.node_port = ctld_port, node_port
        self.cpus = cpus or max(1, os.cpu_count() or 1)
        self.gpus = gpus
        self.conf = self.root / "slurm.conf"
        self.procs: dict = {}           # name -> Popen of a daemon in the foreground
        self.added_hosts_line: str | None = None

    @property
    def env(self) -> dict:
        """The environment every Slurm command of this bed needs (SLURM_CONF)."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    # -- set-up -------------------------------------------------------------------------------------------------
    def _write_files(self):
        r = self.root
        for sub in ("munge", "state", "spool", "log", "gpus"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
            os.chmod(key, 0o600)
        for i in range(self.gpus):
            dev = r / "gpus" / f"gpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))     # a character device like /dev/null
        names = ",".join(self.nodes)
        lines = [
            "ClusterName=flagperftest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge", f"AuthInfo=socket={r}/munge/munge.sock", "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid", f"SlurmdPidFile={r}/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log", f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SchedulerType=sched/backfill", "SchedulerParameters=bf_interval=1",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={r}/jobcomp.txt",
            "JobAcctGatherType=jobacct_gather/none",
            "KillWait=2", "SlurmdParameters=config_overrides", "ReturnToService=2",
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
            "MpiDefault=none", "SlurmdTimeout=60", "InactiveLimit=0", "MinJobAge=300",
            "EnforcePartLimits=ALL", "GresTypes=gpu",
        ]
        for k, name in enumerate(self.nodes):
            gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
            lines.append(f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={self.node_port + k} "
                         f"CPUs={self.cpus}{gres} State=UNKNOWN")
        lines += [
            f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName={DOWN_PARTITION} Nodes={names} MaxTime=INFINITE State=DOWN",
            f"PartitionName={ACCOUNT_PARTITION} Nodes={names} MaxTime=INFINITE State=UP "
            f"DenyAccounts={DENIED_ACCOUNT}",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        gres_lines = [f"NodeName={names} Name=gpu File={r}/gpus/gpu[0-{self.gpus - 1}]"] if self.gpus else []
        (r / "gres.conf").write_text("\n".join(gres_lines) + "\n")

    def _hosts_line(self):
        try:
            text = Path(HOSTS_FILE).read_text()
        except OSError as exc:
            raise SlurmBedError(f"cannot read {HOSTS_FILE}: {exc}") from None
        known = set()
        for line in text.splitlines():
            fields = line.split("#", 1)[0].split()
            if fields and fields[0] == "127.0.0.1":
                known.update(fields[1:])
        missing = [n for n in self.nodes if n not in known]
        if not missing:
            return
        line = f"127.0.0.1 {' '.join(missing)} {HOSTS_MARK}"
        try:
            with open(HOSTS_FILE, "a") as f:
                f.write(("" if text.endswith("\n") or not text else "\n") + line + "\n")
        except OSError as exc:
            raise SlurmBedError(f"cannot add the node names to {HOSTS_FILE}: {exc}") from None
        self.added_hosts_line = line

    def _spawn(self, name, argv):
        log = open(self.root / "log" / f"{name}.out", "ab")
        try:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def start(self) -> "SlurmBed":
        ensure_slurm()
        self._write_files()
        self._hosts_line()
        r = self.root
        self._spawn("munged", ["/usr/sbin/munged", "-F", "-f", f"--socket={r}/munge/munge.sock",
                               f"--key-file={r}/munge/munge.key", f"--log-file={r}/log/munged.log",
                               f"--pid-file={r}/munge/munged.pid", f"--seed-file={r}/munge/seed"])
        self._wait_for(lambda: (r / "munge" / "munge.sock").exists(), "munged's socket")
        self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)])
        for name in self.nodes:
            self._spawn(f"slurmd-{name}", ["unshare", "--uts", "sh", "-c", 'hostname "$1" && exec /usr/sbin/slurmd '
                                           '-D -N "$1" -f "$2"', "slurmd", name, str(self.conf)])
        self._wait_for(self._all_idle, "every node idle in sinfo")
        return self

    def _all_idle(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise SlurmBedError(f"{name} exited with {proc.returncode}; see {self.root / 'log'}")
        cp = self.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %T"], check=False)
        states = dict(line.split() for line in cp.stdout.splitlines() if len(line.split()) == 2)
        return cp.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)

    def _wait_for(self, predicate, what):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        self.stop()
        raise SlurmBedError(f"timed out after {START_TIMEOUT:g} s waiting for {what}; logs in {self.root / 'log'}")

    # -- use ----------------------------------------------------------------------------------------------------
    def run(self, argv, check=True, timeout=30) -> subprocess.CompletedProcess:
        cp = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
                            stdin=subprocess.DEVNULL)
        if check and cp.returncode != 0:
            raise SlurmBedError(f"{' '.join(argv)} exited {cp.returncode}: {cp.stderr.strip()}")
        return cp

    def active_jobs(self) -> list:
        """Ids of the jobs squeue lists as pending, running or completing."""
        cp = self.run(["squeue", "-h", "-o", "%i"])
        return [int(x) for x in cp.stdout.split()]

    def cancel_all(self, wait_s: float = 15.0) -> None:
        ids = self.active_jobs()
        if ids:
            self.run(["scancel", *map(str, ids)], check=False)
        deadline = time.monotonic() + wait_s
        while self.active_jobs() and time.monotonic() < deadline:
            time.sleep(0.2)

    def write_cluster_yaml(self, path, **keys) -> Path:
        """A cluster config for this bed: SCHEDULER slurm, SLURM_CONF, PYTHON this interpreter (keys override)."""
        values = {"SCHEDULER": "slurm", "SLURM_CONF": str(self.conf), "SLURM_PARTITION": PARTITION,
                  "PYTHON": sys.executable}
        values.update(keys)
        import json
        path = Path(path)
        path.write_text("".join(f"{k}: {json.dumps(v) if not isinstance(v, str) else json.dumps(v)}\n"
                                for k, v in values.items()))
        return path

    # -- tear-down ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, stop the daemons (SIGTERM, SIGKILL after 10 s) and remove the /etc/hosts line."""
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            try:
                self.cancel_all()
            except (SlurmBedError, subprocess.TimeoutExpired, OSError):
                pass
        for name in sorted(self.procs, key=lambda n: (n == "munged", n == "slurmctld")):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
        self.procs.clear()
        if self.added_hosts_line:
            try:
                lines = Path(HOSTS_FILE).read_text().splitlines(keepends=True)
                with open(HOSTS_FILE, "w") as f:
                    f.writelines(line for line in lines if line.rstrip("\n") != self.added_hosts_line)
            except OSError:
                pass
            self.added_hosts_line = None


CH_IMAGE_ROOT = "/var/tmp/flagperf-charliecloud"
TORCH_VERSION = "2.13.0"


def ensure_charliecloud_image(root: str = CH_IMAGE_ROOT, torch_version: str = TORCH_VERSION) -> Path:
    """A Charliecloud image directory with Debian's Python, CPU torch, numpy and psutil, built once on this machine
    and reused: ``debootstrap --variant=minbase`` (Debian's packages) plus ``pip install --target`` into the
    image's site-packages with this interpreter (same Python minor version; the torch wheel from PIP_FIND_LINKS).
    Installs charliecloud-runtime (ch-run) and debootstrap with apt-get when missing. About 75 s the first time."""
    import fcntl
    import json
    image = Path(root) / f"torch-cpu-{torch_version}"
    marker = image / "flagperf-image.json"
    _apt_install({"ch-run": "charliecloud-runtime", "debootstrap": "debootstrap"})
    Path(root).mkdir(parents=True, exist_ok=True)
    with open(Path(root) / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return image
        work = Path(root) / f"build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        cp = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,ca-certificates,procps",
                             "bookworm", str(work)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if cp.returncode != 0:
            raise SlurmBedError(f"debootstrap failed (exit {cp.returncode}): {cp.stdout[-2000:]}{cp.stderr[-2000:]}")
        minor = f"python3.{sys.version_info.minor}"
        site = work / "usr" / "local" / "lib" / minor / "dist-packages"
        if not (work / "usr" / "lib" / minor).is_dir():
            raise SlurmBedError(f"the image's Python is not {minor} (this interpreter's): cannot install for it")
        cp = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(site),
                             f"torch=={torch_version}", "numpy", "psutil"], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL)
        if cp.returncode != 0:
            raise SlurmBedError(f"pip install into the image failed (exit {cp.returncode}): {cp.stderr[-3000:]}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(work / junk, ignore_errors=True)
        for name in ("hosts", "resolv.conf"):       # ch-run binds the host's files over these: node names resolve
            (work / "etc" / name).touch()
        (work / "flagperf-image.json").write_text(json.dumps({"torch": torch_version, "python": minor}))
        shutil.rmtree(image, ignore_errors=True)
        os.replace(work, image)
    return image


def _apt_install(binaries: dict) -> None:
    missing = [pkg for binary, pkg in binaries.items() if not shutil.which(binary)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SlurmBedError(f"{', '.join(missing)} missing and cannot be installed here (needs root and apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    cp = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if cp.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, stdin=subprocess.DEVNULL)
        cp = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if cp.returncode != 0:
        raise SlurmBedError(f"apt-get install {' '.join(missing)} failed: {cp.stderr[-1500:]}")


def main(argv=None):
    root = Path((argv or sys.argv[1:] or ["/tmp/flagperf-slurmbed"])[0])
    bed = SlurmBed(root).start()
    print(f"export SLURM_CONF={bed.conf}")
    print(f"nodes {', '.join(bed.nodes)}; partitions {PARTITION}, {DOWN_PARTITION}, {ACCOUNT_PARTITION}; "
          f"Ctrl-C stops the bed")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        bed.stop()


if __name__ == "__main__":
    main()
