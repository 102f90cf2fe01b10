"""The container a node's ranks run in, as plain data: what the plan states and ``--dry-run`` prints.

:class:`ContainerRun` is everything needed to start one node's container: image, command, mounts, devices,
GPUs, shm, ulimits, environment, labels. A container backend turns it into API calls; ``docker_run_line``
turns it into the equivalent ``docker run`` command line, so that a user can start the same container by hand.
Nothing here imports docker.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from flagperf.vendors import split_volume
from flagperf_contract import ENV_PREPARE_LOG

LABEL_RUN, LABEL_CASE, LABEL_ROUND, LABEL_NODE = "flagperf.run", "flagperf.case", "flagperf.round", "flagperf.node"

ENV_PREPARE_FAILED_EXIT = 90       # the container's exit status when the environment preparation failed

# Runs inside the container: $1 benchmark dir, $2 node dir, then the node launcher's argv. One line, so that the
# `docker run` line of --dry-run stays one line: install the benchmark's requirements.txt and source its
# environment_variables.sh (both logged to ENV_PREPARE_LOG), then exec the node launcher.
PREPARE_AND_LAUNCH = " ".join([
    'bench=$1; node=$2; shift 2;',
    '{ echo "# environment preparation in $bench (package index: ${PIP_INDEX_URL:-the default})";',
    'if [ -f "$bench/requirements.txt" ]; then',
    'echo "\\$ python3 -m pip install -r $bench/requirements.txt ${PIP_INDEX_URL:+--index-url $PIP_INDEX_URL}";',
    'python3 -m pip install --disable-pip-version-check -r "$bench/requirements.txt"',
    f'${{PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"}} || exit {ENV_PREPARE_FAILED_EXIT}; fi;',
    'if [ -f "$bench/environment_variables.sh" ]; then echo "\\$ . $bench/environment_variables.sh"; fi;',
    f'}} >>"$node/{ENV_PREPARE_LOG}" 2>&1',
    f'|| {{ echo "environment preparation failed: see $node/{ENV_PREPARE_LOG}" >&2; '
    f'exit {ENV_PREPARE_FAILED_EXIT}; }};',
    'if [ -f "$bench/environment_variables.sh" ]; then . "$bench/environment_variables.sh"; fi;',
    'exec "$@"',
])


def container_name(run_id: str, case: str, round_index: int, node_rank: int) -> str:
    raw = f"flagperf-{run_id}-{case}-r{round_index}-n{node_rank}"
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", raw)


@dataclass(frozen=True)
class ContainerRun:
    """One node's container. Device paths may hold globs (/dev/davinci[0-9]*): they are expanded on the host
    that runs the container, when it is created."""

    name: str
    image: str                  # the vendor image tag (content-hashed, built per host when missing)
    image_folder: str           # what it is built from: vendors/<vendor>/<framework>
    command: tuple              # argv run in the container
    workdir: str
    mounts: tuple               # ((host path, container path, "rw"|"ro"), ...)
    env: tuple                  # ((name, value), ...)
    labels: tuple               # ((name, value), ...)
    gpus: object = "none"       # "all", "none", a count, or a tuple of device ids
    devices: tuple = ()
    shm_size: str = "32G"
    ulimits: tuple = ()         # ((name, soft, hard), ...)
    ipc_mode: str = "host"
    network_mode: str = "host"
    pid_mode: str | None = None     # "host": the host's process namespace; None: the container's own
    uts_mode: str | None = None     # "host": the host's hostname namespace; None: the container's own
    privileged: bool = False
    cap_add: tuple = ()
    group_add: tuple = ()
    security_opt: tuple = ()
    runtime: str | None = None
    init: bool = True

    def docker_run_line(self) -> str:
        """The equivalent ``docker run`` command (detached; flagperf removes the container after the round)."""
        argv = ["docker", "run", "-d", "--name", self.name, "--init" if self.init else "",
                "--network", self.network_mode, "--ipc", self.ipc_mode, "--shm-size", self.shm_size]
        if self.pid_mode:
            argv += ["--pid", self.pid_mode]
        if self.uts_mode:
            argv += ["--uts", self.uts_mode]
        if self.runtime:
            argv += ["--runtime", self.runtime]
        if self.privileged:
            argv.append("--privileged")
        if self.gpus not in ("none", 0, None):
            ids = self.gpus if isinstance(self.gpus, (str, int)) else ",".join(str(g) for g in self.gpus)  # type: ignore[attr-defined]
            argv += ["--gpus", str(ids) if isinstance(self.gpus, (str, int)) else f'"device={ids}"']
        for dev in self.devices:
            argv += ["--device", dev]
        for flag, values in (("--cap-add", self.cap_add), ("--group-add", self.group_add),
                             ("--security-opt", self.security_opt)):
            for v in values:
                argv += [flag, str(v)]
        for name, soft, hard in self.ulimits:
            argv += ["--ulimit", f"{name}={soft}:{hard}"]
        for host, inside, mode in self.mounts:
            argv += ["-v", f"{host}:{inside}:{mode}"]
        for key, value in self.env:
            argv += ["-e", f"{key}={value}"]
        for key, value in self.labels:
            argv += ["--label", f"{key}={value}"]
        argv += ["-w", self.workdir, self.image, *self.command]
        return shlex.join([a for a in argv if a != ""])


def container_run(spec, *, name: str, image: str, image_folder: str = "", command=(), workdir: str = "/",
                  extra_mounts=(), labels=(), shm_size_default: str = "32G", extra_env=()) -> ContainerRun:
    """One node's ContainerRun from the vendor's ContainerSpec (vendors.py): its volumes, then ``extra_mounts``
    ((host, container, mode), ...) for paths the vendor did not mount itself; its env, then ``extra_env``
    ((name, value), ...) for the names it does not set itself (PIP_INDEX_URL from PIP_SOURCE)."""
    mounts = [split_volume(v) for v in spec.volumes]
    for m in extra_mounts:
        if m[0] and all(have[0] != m[0] for have in mounts):
            mounts.append(tuple(m))
    env = list(spec.env)
    env += [(k, v) for k, v in extra_env if all(have[0] != k for have in env)]
    return ContainerRun(
        name=name, image=image, image_folder=image_folder, command=tuple(command), workdir=workdir,
        mounts=tuple(mounts), env=tuple(env), labels=tuple(labels), gpus=spec.gpus, devices=tuple(spec.devices),
        shm_size=spec.shm_size or shm_size_default, ulimits=tuple(spec.ulimits), ipc_mode=spec.ipc_mode,
        network_mode=spec.network_mode, pid_mode=spec.pid_mode, uts_mode=spec.uts_mode, privileged=spec.privileged,
        cap_add=tuple(spec.cap_add), group_add=tuple(spec.group_add), security_opt=tuple(spec.security_opt),
        runtime=spec.runtime)
