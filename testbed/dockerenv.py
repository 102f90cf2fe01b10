"""A real Docker engine and two test images for the docker-runtime tests, built offline on this machine.

* :func:`ensure_docker_installed` -- ``apt-get install docker.io debootstrap`` when ``dockerd``/``debootstrap``
  are missing (Debian's docker.io is a complete engine: dockerd, containerd, runc; no Docker Hub needed).
* :func:`ensure_dockerd` -- use the daemon answering on /var/run/docker.sock, or start
  ``dockerd --bridge=none --iptables=false`` detached (its own session, log to a file).  It is left running:
  the whole test session (and later ones) share it.  Containers use ``network_mode="host"``.
* :func:`ensure_base_image` -- ``flagperf-test/debian-python:bookworm``: a Debian rootfs made by
  ``debootstrap --variant=minbase`` (python3, pip, venv, ca-certificates, procps) and imported as an image.
* :func:`ensure_torch_image` -- ``flagperf-test/torch-cpu:2.13.0``: the base image plus the CPU torch wheel from
  /opt/wheels, numpy and psutil.  Their wheels are fetched on the host with the host's pip (its proxy and CA
  bundle) and installed in the build with ``--no-index`` and no network at all.
* :func:`cleanup_flagperf_containers` -- force-remove the containers labelled ``flagperf.run`` (all, one label
  value, or all but those that existed before a test: the ``docker_clean`` fixture).
* :func:`get_env` -- all of the above once per process (the pytest fixture ``docker_env`` and
  scripts/docker-testenv.py use it).

Each image is cached by its tag (``images.get``); delete it (``docker rmi``) to rebuild.  A file lock
(/tmp/flagperf-dockerenv.lock) keeps two processes from starting a daemon or building an image at once.
Progress lines with timings go to stderr.  Standard library plus the docker SDK.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    import docker
    import docker.errors
except ImportError:          # reported by the functions that need it
    docker = None

DOCKER_SOCK = "/var/run/docker.sock"
DOCKERD_ARGS = ("--bridge=none", "--iptables=false")
DOCKERD_LOG = "/tmp/flagperf-dockerd.log"
BASE_TAG = "flagperf-test/debian-python:bookworm"
TORCH_TAG = "flagperf-test/torch-cpu:2.13.0"
TORCH_VERSION = "2.13.0"
BASE_SUITE = "bookworm"                       # Python 3.11: the cp311 wheels below
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates", "procps")
WHEEL_DIR = os.environ.get("FLAGPERF_WHEEL_DIR", "/opt/wheels")
RUN_LABEL = "flagperf.run"                    # every container flagperf (and these tests) start carries it
BUILD_STAGE_LABEL = "flagperf-test.stage"     # the throw-away first stage of the torch image
LOCK_PATH = "/tmp/flagperf-dockerenv.lock"
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerEnvError(RuntimeError):
    """Docker, the daemon or a test image could not be set up; the message says why."""


def log(msg: str) -> None:
    print(f"[dockerenv] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _timed(what: str, timings: dict | None = None, key: str | None = None):
    log(f"{what} ...")
    t0 = time.monotonic()
    yield
    dt = time.monotonic() - t0
    log(f"{what}: done in {dt:.1f} s")
    if timings is not None and key:
        timings[key] = dt


@contextlib.contextmanager
def _lock():
    """Serialize daemon start and image builds across processes (two pytest runs, the script)."""
    with open(LOCK_PATH, "a+") as fh:
        try:
            os.chmod(LOCK_PATH, 0o666)
        except OSError:
            pass
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=SBIN_PATH)


def _need_sdk() -> None:
    if docker is None:
        raise DockerEnvError("the docker SDK is not installed in this Python (pip install 'docker>=6')")


def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _file_tail(path, n: int = 25) -> str:
    try:
        return _tail(Path(path).read_text(errors="replace"), n)
    except OSError:
        return f"(no {path})"


# --------------------------------------------------------------------------------------------------------------
# installation

def _apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        raise DockerEnvError(f"{', '.join(packages)} not installed and not root: "
                             f"run `sudo apt-get install -y {' '.join(packages)}`")
    if not _which("apt-get"):
        raise DockerEnvError(f"{', '.join(packages)} not installed and no apt-get on this machine")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # wait for a dpkg lock held by another apt (e.g. a provisioning step) rather than failing at once
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", *packages]
    proc = subprocess.run(install, check=False, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        log(f"apt-get install {' '.join(packages)} failed (rc {proc.returncode}); apt-get update and retry")
        upd = subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"], check=False, env=env,
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        proc = subprocess.run(install, check=False, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise DockerEnvError(f"apt-get install -y {' '.join(packages)} failed (rc {proc.returncode}):\n"
                                 f"{_tail(proc.stdout + proc.stderr)}\n(apt-get update rc {upd.returncode}: "
                                 f"{_tail(upd.stderr, 5)})")


def ensure_docker_installed() -> None:
    """``apt-get install -y docker.io`` if ``dockerd`` is missing, and ``debootstrap`` likewise."""
    missing = [pkg for binary, pkg in (("dockerd", "docker.io"), ("debootstrap", "debootstrap"))
               if not _which(binary)]
    if not missing:
        return
    with _timed(f"apt-get install -y {' '.join(missing)}"):
        _apt_install(missing)
    still = [b for b in ("dockerd", "debootstrap") if not _which(b)]
    if still:
        raise DockerEnvError(f"installed {' '.join(missing)} but {', '.join(still)} still not found")


# --------------------------------------------------------------------------------------------------------------
# the daemon

def _client(timeout: int = 300):
    return docker.DockerClient(base_url=f"unix://{DOCKER_SOCK}", timeout=timeout)


def _ping() -> docker.DockerClient | None:
    if not os.path.exists(DOCKER_SOCK):
        return None
    try:
        client = _client()
        client.ping()
        return client
    except Exception:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _read_pid(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def containerd_info() -> str:
    """Which containerd the running dockerd uses: its own child (docker.io's default) or a system one."""
    dpid = _read_pid("/var/run/docker.pid")
    if dpid and _pid_alive(dpid):
        for kid in _children(dpid):
            cmd = _cmdline(kid)
            if "containerd" in cmd.split(" ")[0]:
                return f"started by dockerd (pid {kid}: {cmd})"
    return "NOT a child of dockerd (a system containerd on /run/containerd/containerd.sock, or unknown)"


def _start_dockerd(log_path: str) -> int:
    dockerd = _which("dockerd")
    if not dockerd:
        raise DockerEnvError("dockerd not found (ensure_docker_installed() installs docker.io)")
    if os.geteuid() != 0:
        raise DockerEnvError(f"no Docker daemon answers on {DOCKER_SOCK} and starting dockerd needs root")
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    # The shell backgrounds dockerd and exits: dockerd is re-parented to init, in its own session, and is
    # neither our child (no zombie, no ResourceWarning) nor killed when the tests end.  It is meant to stay.
    script = 'exec 0</dev/null; "$0" "$@" >>"$LOG" 2>&1 & echo $!'
    env = dict(os.environ, LOG=str(log_path), PATH=os.environ.get("PATH", "") + ":" + SBIN_PATH)
    out = subprocess.run(["sh", "-c", script, dockerd, *DOCKERD_ARGS], env=env, capture_output=True, text=True,
                         start_new_session=True, check=True).stdout
    return int(out.strip())


def ensure_dockerd(log_path: str = DOCKERD_LOG, timeout: float = 60.0) -> docker.DockerClient:
    """A client of the daemon on /var/run/docker.sock, starting ``dockerd --bridge=none --iptables=false``
    (output appended to ``log_path``) when none answers.  A daemon started here is left running."""
    _need_sdk()
    client = _ping()
    if client is None:
        with _lock():
            client = _ping()                       # another process may have started it meanwhile
            if client is None:
                client = _start_and_wait(log_path, timeout)
    info = client.info()
    driver = info.get("Driver", "?")
    log(f"docker {info.get('ServerVersion', '?')}: storage driver {driver}, cgroup driver "
        f"{info.get('CgroupDriver', '?')} v{info.get('CgroupVersion', '?')}, root {info.get('DockerRootDir')}")
    log(f"containerd: {containerd_info()}")
    if driver == "vfs":
        log("storage driver vfs: every layer is a full copy (the torch image costs ~3x its size on disk)")
    return client


def _start_and_wait(log_path: str, timeout: float):
    old = _read_pid("/var/run/docker.pid")
    if old and _pid_alive(old) and "dockerd" in _cmdline(old):
        log(f"dockerd (pid {old}) is running but does not answer yet; waiting for it")
        pid = old
    else:
        if os.path.exists(DOCKER_SOCK):
            log(f"{DOCKER_SOCK} exists but nothing answers (stale socket of a dead daemon)")
        with _timed(f"start dockerd {' '.join(DOCKERD_ARGS)} (log {log_path})"):
            pid = _start_dockerd(log_path)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                client = _ping()
                if client is not None:
                    log(f"dockerd pid {pid} answers on {DOCKER_SOCK}")
                    return client
                if not _pid_alive(pid):
                    raise DockerEnvError(f"dockerd exited at start; the end of {log_path}:\n"
                                         f"{_file_tail(log_path)}")
                time.sleep(0.2)
            raise DockerEnvError(f"dockerd (pid {pid}) did not answer on {DOCKER_SOCK} within {timeout:.0f} s; "
                                 f"the end of {log_path}:\n{_file_tail(log_path)}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client = _ping()
        if client is not None:
            return client
        time.sleep(0.2)
    raise DockerEnvError(f"dockerd (pid {pid}) did not answer on {DOCKER_SOCK} within {timeout:.0f} s")


# --------------------------------------------------------------------------------------------------------------
# images

def _get_image(client, tag: str):
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def _mb(image) -> str:
    return f"{image.attrs.get('Size', 0) / 1e6:.0f} MB"


def ensure_base_image(client, tag: str = BASE_TAG, suite: str = BASE_SUITE, mirror: str | None = None):
    """The Debian + Python image ``tag``: cached, else debootstrap a minbase rootfs and import it."""
    return _cached_or_built(client, "base image", tag, lambda: _build_base_image(
        client, tag, suite, mirror or os.environ.get("FLAGPERF_DEBIAN_MIRROR")))


def _build_base_image(client, tag, suite, mirror):
    debootstrap = _which("debootstrap")
    if not debootstrap:
        raise DockerEnvError("debootstrap not found (ensure_docker_installed() installs it)")
    if os.geteuid() != 0:
        raise DockerEnvError(f"building {tag} with debootstrap needs root")
    repo, _, version = tag.rpartition(":")
    work = Path(tempfile.mkdtemp(prefix="flagperf-rootfs-", dir="/var/tmp"))
    rootfs, tarball, dlog = work / "rootfs", work / "rootfs.tar", work / "debootstrap.log"
    t0 = time.monotonic()
    try:
        cmd = [debootstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(rootfs)]
        if mirror:
            cmd.append(mirror)
        with _timed(f"debootstrap {suite} ({', '.join(BASE_PACKAGES)}) into {rootfs}"):
            with open(dlog, "w") as fh:
                rc = subprocess.run(cmd, check=False, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=dict(os.environ, PATH=os.environ.get("PATH", "") + ":" + SBIN_PATH)
                                    ).returncode
            if rc != 0:
                raise DockerEnvError(f"debootstrap failed (rc {rc}):\n{_file_tail(dlog)}\n"
                                     f"{_file_tail(rootfs / 'debootstrap' / 'debootstrap.log', 15)}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):     # keep the image small
            for entry in (rootfs / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        with _timed(f"tar the rootfs and import it as {tag}"):
            subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
            shutil.rmtree(rootfs)
            client.api.import_image(src=str(tarball), repository=repo, tag=version,
                                    changes=['CMD ["/bin/bash"]', "LABEL flagperf-test.image=base"])
    except subprocess.CalledProcessError as exc:
        raise DockerEnvError(f"building {tag}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    image = client.images.get(tag)
    log(f"base image {tag}: built in {time.monotonic() - t0:.1f} s ({image.short_id}, {_mb(image)})")
    return image


_TORCH_DOCKERFILE = """\
# stage 1: install the wheels (no network: --no-index, network_mode none); its layers are thrown away
FROM {base} AS build
LABEL {stage_label}=build
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY wheels /tmp/wheels
RUN python3 -m pip install -q --no-index --find-links /tmp/wheels "torch=={torch_spec}" numpy psutil

# stage 2: the base image plus what pip put in /usr/local (no copy of the wheels left in any layer)
FROM {base}
LABEL flagperf-test.image=torch-cpu flagperf-test.torch={torch_spec}
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /usr/local /usr/local
RUN python3 -c "import torch, numpy, psutil; print(torch.__version__)"
CMD ["/bin/bash"]
"""


def find_torch_wheel(version: str = TORCH_VERSION, wheel_dir: str = WHEEL_DIR, python_tag: str = "cp311") -> Path:
    found = sorted(glob.glob(os.path.join(wheel_dir, f"torch-{version}*-{python_tag}-*linux*x86_64.whl")))
    if not found:
        raise DockerEnvError(f"no torch {version} wheel for {python_tag} x86_64 in {wheel_dir} "
                             f"(set FLAGPERF_WHEEL_DIR to a folder holding one)")
    return Path(found[-1])


def ensure_torch_image(client, tag: str = TORCH_TAG, base: str = BASE_TAG, torch_version: str = TORCH_VERSION):
    """``base`` + the CPU torch wheel, numpy and psutil: cached by tag, else built with the SDK."""
    def build():
        if _get_image(client, base) is None:
            raise DockerEnvError(f"base image {base} missing (ensure_base_image() first)")
        return _build_torch_image(client, tag, base, torch_version)
    return _cached_or_built(client, "torch image", tag, build)


def _cached_or_built(client, what, tag, build):
    """The image ``tag`` if the daemon has it, else ``build()`` under the cross-process lock (checked again
    inside, since another process may have built it meanwhile)."""
    _need_sdk()
    image = _get_image(client, tag)
    if image is not None:
        log(f"{what} {tag}: cached ({image.short_id}, {_mb(image)})")
        return image
    with _lock():
        return _get_image(client, tag) or build()


def _download_wheels(wheel: Path, dest: Path) -> None:
    """The torch wheel's dependencies plus numpy and psutil, for CPython 3.11 x86_64, with the host's pip."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--dest", str(dest),
           "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
           "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
           "--platform", "manylinux2014_x86_64", "--find-links", str(wheel.parent),
           str(wheel), "numpy", "psutil"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        noise = "WARNING: Location"
        text = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith(noise))
        raise DockerEnvError(f"pip download of torch's dependencies, numpy and psutil failed "
                             f"(rc {proc.returncode}):\n{_tail(text)}")


def _build_torch_image(client, tag, base, torch_version):
    wheel = find_torch_wheel(torch_version)
    torch_spec = wheel.name.split("-")[1]                        # e.g. 2.13.0+cpu
    ctx = Path(tempfile.mkdtemp(prefix="flagperf-torchctx-", dir="/var/tmp"))
    t0 = time.monotonic()
    try:
        (ctx / "wheels").mkdir()
        with _timed(f"pip download (host) {wheel.name}'s dependencies, numpy, psutil"):
            _download_wheels(wheel, ctx / "wheels")
        size = sum(p.stat().st_size for p in (ctx / "wheels").iterdir()) / 1e6
        log(f"build context: {len(list((ctx / 'wheels').iterdir()))} wheels, {size:.0f} MB")
        (ctx / "Dockerfile").write_text(_TORCH_DOCKERFILE.format(base=base, torch_spec=torch_spec,
                                                                 stage_label=BUILD_STAGE_LABEL))
        with _timed(f"docker build {tag} (legacy builder)"):
            _build(client, ctx, tag, torch_spec)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    _remove_build_stage(client)
    image = client.images.get(tag)
    log(f"torch image {tag}: built in {time.monotonic() - t0:.1f} s ({image.short_id}, {_mb(image)})")
    return image


def _build(client, ctx: Path, tag: str, expect: str) -> None:
    """``images.build`` with the progress shown as it comes (the model API only returns at the end)."""
    lines, error = [], None
    stream = client.api.build(path=str(ctx), tag=tag, rm=True, forcerm=True, nocache=True, network_mode="none",
                              decode=True, timeout=None)
    for chunk in stream:
        if "error" in chunk:
            error = chunk.get("error")
        text = chunk.get("stream", "")
        if text.strip():
            lines.append(text.rstrip())
            if text.startswith("Step ") or text.strip() == expect:     # the steps, and the final check's output
                log(f"  {text.strip()}")
    if error or _get_image(client, tag) is None:
        raise DockerEnvError(f"docker build {tag} failed: {error}\n{_tail(chr(10).join(lines))}")
    if expect not in (line.strip() for line in lines):
        raise DockerEnvError(f"docker build {tag}: the check did not print torch {expect}\n"
                             f"{_tail(chr(10).join(lines))}")


def _remove_build_stage(client) -> None:
    """Delete the untagged first stage (the wheels, ~200 MB) the legacy builder keeps as a dangling image."""
    for image in client.images.list(filters={"dangling": True, "label": f"{BUILD_STAGE_LABEL}=build"}):
        try:
            client.images.remove(image.id, force=False)
        except docker.errors.APIError as exc:
            log(f"could not remove build stage {image.short_id}: {exc}")


# --------------------------------------------------------------------------------------------------------------
# containers

def flagperf_container_ids(client) -> set[str]:
    """Ids of every container (running or not) labelled ``flagperf.run``."""
    return {c.id for c in client.containers.list(all=True, filters={"label": RUN_LABEL})}


def cleanup_flagperf_containers(client, value: str | None = None, keep: set[str] | frozenset = frozenset()
                                ) -> list[str]:
    """Force-remove every container (running or not) labelled ``flagperf.run`` (``flagperf.run=value`` when
    ``value`` is given), except the ids in ``keep``; return the names removed.  A container that is gone or
    already being removed (by its own auto-remove, or a concurrent cleanup) is not an error."""
    label = RUN_LABEL if value is None else f"{RUN_LABEL}={value}"
    removed = []
    for container in client.containers.list(all=True, filters={"label": label}):
        if container.id in keep:
            continue
        try:
            container.remove(force=True)
            removed.append(container.name)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:              # 409: "removal of container ... is already in progress"
                raise
    if removed:
        log(f"removed {len(removed)} leftover {label} container(s): {', '.join(removed)}")
    return removed


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


GLOO_SCRIPT = (
    "import os, datetime, torch, torch.distributed as dist\n"
    "dist.init_process_group('gloo', rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE']), "
    "timeout=datetime.timedelta(seconds=60))\n"
    "t = torch.tensor([float(dist.get_rank() + 1)])\n"
    "dist.all_reduce(t)\n"
    "print('ALLREDUCE', dist.get_rank(), t.item(), flush=True); dist.destroy_process_group()\n"
)


def run_gloo_allreduce(client, image: str = TORCH_TAG, world_size: int = 2, timeout: float = 120,
                       label: str = "dockerenv-gloo") -> list[tuple[int, str]]:
    """One container per rank (network host, MASTER_ADDR=127.0.0.1, a free port) all-reducing rank+1 with
    gloo over loopback; returns [(exit code, output)] per rank.  The containers are removed afterwards."""
    port = free_port()
    containers = []
    try:
        for rank in range(world_size):
            containers.append(client.containers.run(
                image, ["python3", "-c", GLOO_SCRIPT], detach=True, network_mode="host",
                labels={RUN_LABEL: label}, name=f"flagperf-{label}-{port}-r{rank}",
                environment={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                             "WORLD_SIZE": str(world_size), "GLOO_SOCKET_IFNAME": "lo"}))
        results = []
        for c in containers:
            try:
                code = c.wait(timeout=timeout)["StatusCode"]
            except Exception as exc:       # requests' ReadTimeout: the rank hung
                code = f"no exit within {timeout:.0f} s ({type(exc).__name__})"
            results.append((code, c.logs().decode(errors="replace")))
        return results
    finally:
        for c in containers:
            with contextlib.suppress(Exception):
                c.remove(force=True)


# --------------------------------------------------------------------------------------------------------------
# everything, once per process

@dataclass
class DockerEnv:
    client: object
    base_image: str
    torch_image: str
    storage_driver: str = ""
    timings: dict = field(default_factory=dict)


_ENV: DockerEnv | None = None
_ERROR: str | None = None


def setup(log_path: str = DOCKERD_LOG, base_tag: str = BASE_TAG, torch_tag: str = TORCH_TAG) -> DockerEnv:
    """ensure_docker_installed, ensure_dockerd, ensure_base_image, ensure_torch_image; with timings."""
    timings: dict = {}
    t0 = time.monotonic()
    with _timed("ensure_docker_installed", timings, "install"):
        ensure_docker_installed()
    with _timed("ensure_dockerd", timings, "dockerd"):
        client = ensure_dockerd(log_path)
    with _timed("ensure_base_image", timings, "base_image"):
        ensure_base_image(client, base_tag)
    with _timed("ensure_torch_image", timings, "torch_image"):
        ensure_torch_image(client, torch_tag, base=base_tag)
    timings["total"] = time.monotonic() - t0
    return DockerEnv(client, base_tag, torch_tag, client.info().get("Driver", "?"), timings)


def get_env(log_path: str = DOCKERD_LOG) -> DockerEnv:
    """:func:`setup` once per process; a failure is remembered (and raised again) as DockerEnvError."""
    global _ENV, _ERROR
    if _ENV is None and _ERROR is None:
        try:
            _ENV = setup(log_path)
        except DockerEnvError as exc:
            _ERROR = str(exc)
        except Exception as exc:             # docker SDK / requests / OS errors: say what, fail or skip on it
            _ERROR = f"{type(exc).__name__}: {exc}"
    if _ERROR is not None:
        raise DockerEnvError(_ERROR)
    return _ENV
