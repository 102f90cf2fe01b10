"""Ranks inside the vendor's container, through the Docker SDK.

Per case: the vendor image is made ready on every host in parallel (built when its tag is missing).
Per round and node: one container named ``flagperf-<run>-<case>-r<k>-n<i>``, labelled with run, case, round
and node, ``--network host``, the vendor's devices, shm, ulimits and mounts, plus the deploy path, the data
directory and the result directory, each at the same path inside as outside, and the host's process and hostname
namespaces when the vendor's profile or ACCE_CONTAINER_OPT asks for them (``--pid=host``, ``--uts=host``; a
privileged container only when asked: ``--privileged``). Its command prepares the
environment (the benchmark's requirements.txt and environment_variables.sh, logged to env_prepare.log) and
then execs the node launcher; the node's exit code is the container's, read from the API. Containers are
removed after every round, also after a failed or interrupted one; ``flagperf clean`` removes leftovers
by label.

Remote daemons are reached through the host's SSH connection (Transport.forward_unix_socket), so the same
identity and host-key policy apply. The daemon's socket is ``/var/run/docker.sock`` on every host, or
``$FLAGPERF_DOCKER_SOCKET`` of the driver's environment.

Failures are bounded: every control call (ping, create, start, inspect, kill, logs, remove, list) has an HTTP
timeout of CONTROL_TIMEOUT_S; only an image build (BUILD_TIMEOUT_S without output) and container.wait (a loop
that pings the daemon between waits) wait longer. Before a case each host's daemon is pinged; one that does not
answer fails the case with a DaemonError naming the host and the socket. After a call timed out the daemon is
marked as not answering and cleanup skips further calls to it (reported, never retried in a loop) until the
next case's ping succeeds.

Every container is labelled with its driver (``flagperf.driver=<hostname>:<pid>:<start time>``). Before a case,
the containers on each host whose driver ran on this machine and is gone (killed with -9, say) are removed.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

from flagperf.containers import LABEL_RUN, ContainerRun
from flagperf.hosts.base import Process
from flagperf.hosts.fanout import fan_out
from flagperf.images import ImageError, ensure_image, image_spec, is_timeout
from flagperf.runtimes.base import Runtime
from flagperf_contract import CONTAINER_OUTPUT

DOCKER_SOCKET = "/var/run/docker.sock"
SOCKET_ENV = "FLAGPERF_DOCKER_SOCKET"     # another socket path (on every host), e.g. for tests
CONTROL_TIMEOUT_S = 10                    # ping, create, start, inspect, kill, logs, remove, list
BUILD_TIMEOUT_S = 1800                    # an image build may go this long without a line of output
WAIT_POLL_S = 60                          # container.wait per HTTP request; the daemon is pinged in between
DAEMON_LOST_S = 60                        # container.wait gives up after the daemon failed pings this long
LABEL_DRIVER = "flagperf.driver"          # <driver hostname>:<pid>:<process start time>
_GLOB = re.compile(r"[*?\[]")


class DaemonError(Exception):
    """A host's Docker daemon did not answer, or could not be reached; the message names the socket."""


def docker_socket() -> str:
    return os.environ.get(SOCKET_ENV) or DOCKER_SOCKET


def _is_timeout(exc: BaseException) -> bool:
    return is_timeout(exc)


def _is_gone(exc: BaseException) -> bool:
    """The daemon answered that the container does not exist (it was removed meanwhile)."""
    import docker
    return isinstance(exc, docker.errors.NotFound)


def _is_unreachable(exc: BaseException) -> bool:
    """The daemon did not answer or the connection failed (as opposed to an answer: an API error)."""
    import docker
    import requests
    if isinstance(exc, docker.errors.APIError):
        return False
    return _is_timeout(exc) or isinstance(exc, (requests.exceptions.ConnectionError, ConnectionError,
                                                docker.errors.DockerException))


def daemon_error(exc: BaseException, timeout: float = CONTROL_TIMEOUT_S, what: str = "") -> DaemonError:
    where = f"Docker daemon at {docker_socket()}"
    doing = f" ({what})" if what else ""
    if _is_timeout(exc):
        return DaemonError(f"{where} did not answer within {timeout:g} s{doing}")
    reason = str(exc).replace("Error while fetching server API version: ", "")
    return DaemonError(f"{where} is not reachable{doing}: {reason}")


def client_for(transport, timeout: float = CONTROL_TIMEOUT_S):
    """A DockerClient for the daemon of the transport's host (local socket, or forwarded over SSH), with
    ``timeout`` per HTTP request. Creating it asks the daemon its API version: DaemonError if it does not answer."""
    import docker
    sock = transport.forward_unix_socket(docker_socket())
    try:
        return docker.DockerClient(base_url=f"unix://{sock}", timeout=timeout)
    except docker.errors.DockerException as exc:
        raise daemon_error(exc, timeout) from None


def ping(client, timeout: float = CONTROL_TIMEOUT_S) -> None:
    """Raise DaemonError unless the daemon answers a ping within its client's timeout."""
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001 - requests, docker and socket errors alike
        raise daemon_error(exc, timeout, "ping") from None


# -- the driver's identity, for containers left behind by a driver that was killed --------------------------

def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22); None if it is gone
    (or a zombie); "" where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        if not os.path.isdir("/proc/self"):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None
            except PermissionError:
                pass
            return ""
        return None
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def driver_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or ''}"


def driver_gone(identity: str) -> bool:
    """True when ``identity`` (a flagperf.driver label) names a driver process on THIS machine that has exited
    (its pid is gone, or now belongs to a process started at another time). Other machines' drivers: False."""
    try:
        host, pid_text, started = identity.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False
    now = _start_time(pid)
    return now is None or bool(started and now and now != started)


def _globber(transport):
    """Expands a device glob (/dev/xpu[0-9]*) on the host that runs the container, not on the driver."""
    if transport.host.is_local:
        return glob.glob

    def remote(pattern):
        r = transport.run([transport.host.python, "-c",
                           "import glob, json, sys; print(json.dumps(sorted(glob.glob(sys.argv[1]))))", pattern])
        return json.loads(r.stdout) if r.ok else []
    return remote


def expand_devices(devices, expand=glob.glob) -> list:
    """Device specs with globs expanded by ``expand(pattern) -> paths`` (a glob that matches nothing adds
    nothing); /dev/x:rwm becomes /dev/x:/dev/x:rwm, as the SDK reads a second field as the container path."""
    out = []
    for spec in devices:
        host, _, rest = spec.partition(":")
        for path in sorted(expand(host)) if _GLOB.search(host) else [host]:
            out.append(f"{path}:{path}:{rest}" if re.fullmatch(r"[rwm]+", rest) else
                       f"{path}:{rest}" if rest else path)
    return out


def sdk_kwargs(run: ContainerRun, expand=glob.glob) -> dict:
    """Keyword arguments of the SDK's ``containers.create`` for a planned container (image and command apart)."""
    from docker.types import DeviceRequest, Ulimit
    requests = []
    if run.gpus == "all":
        requests = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    elif isinstance(run.gpus, int) and run.gpus > 0:
        requests = [DeviceRequest(count=run.gpus, capabilities=[["gpu"]])]
    elif isinstance(run.gpus, (tuple, list)):
        requests = [DeviceRequest(device_ids=[str(g) for g in run.gpus], capabilities=[["gpu"]])]
    kwargs = dict(
        name=run.name, detach=True, init=run.init, working_dir=run.workdir,
        volumes={h: {"bind": c, "mode": m} for h, c, m in run.mounts}, environment=dict(run.env),
        labels=dict(run.labels), device_requests=requests, devices=expand_devices(run.devices, expand),
        group_add=list(run.group_add), cap_add=list(run.cap_add), security_opt=list(run.security_opt),
        shm_size=run.shm_size, ulimits=[Ulimit(name=n, soft=s, hard=h) for n, s, h in run.ulimits],
        privileged=run.privileged, ipc_mode=run.ipc_mode, network_mode=run.network_mode)
    if run.runtime:
        kwargs["runtime"] = run.runtime
    if run.pid_mode:
        kwargs["pid_mode"] = run.pid_mode
    if run.uts_mode:
        kwargs["uts_mode"] = run.uts_mode
    return kwargs


_FINISH_LOCK = threading.Lock()


class ContainerProcess(Process):
    """A started container; its exit is the node's result (container.wait through the API).

    ``call(what, fn)`` runs a control call through the runtime's guard (bounded, skipped once the host's daemon
    stopped answering). The wait is a loop of WAIT_POLL_S waits; between them the daemon is pinged, and after
    DAEMON_LOST_S of failed pings the wait gives up with -1. A signal the daemon does not take (it does not answer)
    also ends the wait with -1: the container's exit cannot be read, and the round's stop must not hang on it."""

    def __init__(self, container, call=None, pid: int = -1):
        self.container = container
        self._call = call or (lambda what, fn: fn())
        self._pid = pid
        self._code = None
        self.error = ""
        self._done = threading.Event()
        threading.Thread(target=self._wait, daemon=True, name=f"wait-{container.name}").start()

    def _finish(self, code, error=""):
        with _FINISH_LOCK:
            if not self._done.is_set():
                self._code, self.error = code, error
                self._done.set()

    def _wait(self):
        import docker
        import requests
        lost_since = None
        while not self._done.is_set():
            try:
                self._finish(self.container.wait(timeout=WAIT_POLL_S)["StatusCode"])
                break
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
                try:                        # a long round outlived one HTTP wait, or the daemon is gone
                    self.container.client.ping()
                    lost_since = None
                    continue
                except Exception:  # noqa: BLE001
                    lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > DAEMON_LOST_S:
                    self._finish(-1, f"{daemon_error(exc, WAIT_POLL_S, 'wait')}; gave up after {DAEMON_LOST_S} s")
                    break
                time.sleep(1.0)
            except docker.errors.APIError:  # gone (NotFound) or the daemon refused: no exit code to read
                self._finish(-1)
                break

    @property
    def pid(self) -> int:
        return self._pid

    def wait(self, timeout=None):
        if not self._done.wait(timeout):
            return None
        return self._code

    def signal(self, sig):
        import docker
        if self._done.is_set():
            return
        try:
            self._call("kill", lambda: self.container.kill(signal=int(sig)))
        except docker.errors.APIError:
            pass          # already stopped
        except DaemonError as exc:
            self._finish(-1, str(exc))      # cannot be stopped nor waited for; cleanup reports the container


class DockerRuntime(Runtime):
    name = "docker"
    node_output = CONTAINER_OUTPUT    # the container's own stdout/stderr (the node launcher's included)

    def __init__(self, config=None):
        super().__init__(config)
        self.clients = {}
        self.images = {}          # (host address, framework) -> tag
        self.containers = {}      # node label -> container
        self.unanswered = {}      # host address -> why its daemon counts as not answering (until the next ping)
        self.driver = driver_identity()
        self._lock = threading.Lock()

    def client(self, transport):
        with self._lock:
            client = self.clients.get(transport.name)
        if client is None:
            client = client_for(transport)          # asks the daemon its version: bounded, outside the lock
            with self._lock:
                client = self.clients.setdefault(transport.name, client)
        return client

    def _call(self, transport, what, fn):
        """A control call to the host's daemon. One that does not answer (timeout, connection failure) raises
        DaemonError and marks the daemon: later calls to it are skipped, not waited for, until a ping succeeds."""
        address = transport.name
        with self._lock:
            why = self.unanswered.get(address)
        if why:
            raise DaemonError(f"{why}; {what} skipped")
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - sorted below: an answer (APIError) is raised as it is
            if not _is_unreachable(exc):
                raise
            err = daemon_error(exc, CONTROL_TIMEOUT_S, what)
            with self._lock:
                self.unanswered[address] = str(err).split(" (")[0]
            raise err from None

    def check_daemon(self, transport):
        """Ping the host's daemon (CONTROL_TIMEOUT_S); DaemonError names the socket. Returns the client."""
        try:
            client = self.client(transport)
            ping(client)
        except DaemonError:
            with self._lock:
                self.clients.pop(transport.name, None)     # built again next case: the daemon may be back
            raise
        with self._lock:
            self.unanswered.pop(transport.name, None)
        return client

    def prepare_case(self, transports, case, run_dir, log):
        """Ping every host's daemon, remove containers of dead drivers of this machine, and make the vendor
        image ready on every host of the case, in parallel. Raise naming every host that failed."""
        spec = image_spec(self.config, case.case)
        hosts = {h.address: transports[h.address] for h in case.hosts}

        def one(address):
            client = self.check_daemon(hosts[address])
            self.remove_orphans(hosts[address], client, log)
            log_path = Path(run_dir) / "images" / f"{address}_{spec.tag.replace('/', '_').replace(':', '_')}.log"
            tag, built = ensure_image(client, spec, log_path, build_timeout=BUILD_TIMEOUT_S)
            log.info(f"{address}: image {tag} {'built' if built else 'already there'}"
                     + (f" (log {log_path})" if built else ""))
            return tag

        failed = [o for o in fan_out(list(hosts), one, deadline_s=BUILD_TIMEOUT_S * 2) if not o.ok]
        if failed:
            message = "; ".join(f"{o.key}: {o.error}" for o in failed)
            if all(isinstance(o.exc, DaemonError) for o in failed):
                raise DaemonError(message)
            raise ImageError(message, next((o.exc.last_lines for o in failed if isinstance(o.exc, ImageError)), []))

    def remove_orphans(self, transport, client, log) -> list:
        """Remove the flagperf containers on this host whose driver ran on this machine and is gone (a run
        killed with -9). A failure is logged, never raised: it does not fail the case."""
        removed: list = []
        try:
            found = self._call(transport, "list", lambda: client.containers.list(
                all=True, filters={"label": LABEL_DRIVER}))
        except Exception as exc:  # noqa: BLE001
            log.warning(f"{transport.name}: cannot look for containers of killed runs: {exc}")
            return removed
        for c in found:
            driver = c.labels.get(LABEL_DRIVER, "")
            if driver == self.driver or not driver_gone(driver):
                continue
            try:
                self._call(transport, "remove", lambda c=c: c.remove(force=True))
                removed.append(c.name)
                log.warning(f"{transport.name}: removed container {c.name} of run {c.labels.get(LABEL_RUN, '?')}, "
                            f"left behind by driver {driver} (no longer running)")
            except Exception as exc:  # noqa: BLE001
                if not _is_gone(exc):
                    log.warning(f"{transport.name}: cannot remove container {c.name} of a killed run: {exc}")
        return removed

    def prepare(self, transport, node, log):
        """Create the node's container from the plan (not started yet: launch() starts it)."""
        run: ContainerRun = dataclasses.replace(node.container, labels=(*node.container.labels,
                                                                        (LABEL_DRIVER, self.driver)))
        client = self.client(transport)
        self._remove_stale(transport, client, run.name, log)
        log.info(f"{node.label}: {run.docker_run_line()}")
        kwargs = sdk_kwargs(run, _globber(transport))
        container = self._call(transport, "create", lambda: client.containers.create(
            run.image, list(run.command), **kwargs))
        with self._lock:
            self.containers[node.label] = container

    def launch(self, transport, node):
        container = self.containers[node.label]
        self._call(transport, "start", container.start)
        try:
            self._call(transport, "inspect", container.reload)
            pid = int(container.attrs["State"]["Pid"])
        except Exception:  # noqa: BLE001 - the pid is only shown in the log
            pid = -1
        return ContainerProcess(container, lambda what, fn: self._call(transport, what, fn), pid)

    def cleanup(self, transport, node, log):
        """Save the container's output and remove it: one bounded call each, skipped when the daemon stopped
        answering. A container that cannot be removed is reported (``flagperf clean`` removes it), not retried."""
        import docker
        with self._lock:
            container = self.containers.pop(node.label, None)
        if container is None:
            return
        try:
            output = self._call(transport, "logs", lambda: container.logs(stdout=True, stderr=True))
            if output:
                transport.write_file(f"{node.node_dir}/{self.node_output}", output)
        except (docker.errors.APIError, DaemonError, OSError) as exc:
            log.warning(f"{node.label}: cannot save the container's output: {exc}")
        try:
            self._call(transport, "remove", lambda: container.remove(force=True))
            log.info(f"{node.label}: container {container.name} removed")
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, DaemonError) as exc:
            raise DaemonError(f"container {container.name} not removed: {exc}; "
                              f"`flagperf clean --run {dict(node.container.labels).get(LABEL_RUN, 'RUN')}` "
                              f"removes it") from None

    def _remove_stale(self, transport, client, name, log):
        import docker
        try:
            old = self._call(transport, "inspect", lambda: client.containers.get(name))
        except docker.errors.NotFound:
            return
        log.warning(f"removing a stale container {name}")
        self._call(transport, "remove", lambda: old.remove(force=True))

    def clean(self, transports, run_id=None) -> dict:
        return clean(transports, run_id)


def clean(transports, run_id=None) -> dict:
    """Remove every flagperf container (of one run, or all) on every host; returns {host: [names]} (or the
    error text for a host). Every call is bounded by CONTROL_TIMEOUT_S."""

    def one(address):
        client = client_for(transports[address])
        flt = {"label": f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN}
        try:
            found = client.containers.list(all=True, filters=flt)
        except Exception as exc:  # noqa: BLE001
            if _is_unreachable(exc):
                raise daemon_error(exc, CONTROL_TIMEOUT_S, "list") from None
            raise
        removed: list = []
        errors: list = []
        for c in found:
            try:
                c.remove(force=True)
                removed.append(c.name)
            except Exception as exc:  # noqa: BLE001 - the others are still removed; this one is reported
                if _is_gone(exc):
                    continue
                errors.append(f"{c.name}: {daemon_error(exc) if _is_unreachable(exc) else exc}")
                if _is_unreachable(exc):
                    break                   # the daemon stopped answering: do not wait once per container
        if errors:
            raise DaemonError(f"removed {', '.join(removed) or 'nothing'}; not removed: {'; '.join(errors)}")
        return removed

    out = {}
    for o in fan_out(list(transports), one, deadline_s=300):
        out[o.key] = o.value if o.ok else o.error
    return out
