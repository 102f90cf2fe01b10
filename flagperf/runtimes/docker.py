"""Ranks inside the vendor's container, through the Docker SDK.

Per case: the vendor image is made ready on every host in parallel (built when its tag is missing).
Per round and node: one container named ``flagperf-<run>-<case>-r<k>-n<i>``, labelled with run, case, round
and node, ``--network host``, the vendor's devices, shm, ulimits and mounts, plus the deploy path, the data
directory and the result directory, each at the same path inside as outside. Its command prepares the
environment (the benchmark's requirements.txt and environment_variables.sh, logged to env_prepare.log) and
then execs the node launcher; the node's exit code is the container's, read from the API. Containers are
removed after every round, also after a failed or interrupted one; ``flagperf clean`` removes leftovers
by label.

Remote daemons are reached through the host's SSH connection (Transport.forward_unix_socket), so the same
identity and host-key policy apply.
"""

from __future__ import annotations

import glob
import json
import re
import threading
from pathlib import Path

from flagperf.containers import LABEL_RUN, ContainerRun
from flagperf.hosts.base import Process
from flagperf.runtimes.base import Runtime
from flagperf_contract import CONTAINER_OUTPUT

DOCKER_SOCKET = "/var/run/docker.sock"
_GLOB = re.compile(r"[*?\[]")


def client_for(transport):
    """A DockerClient for the daemon of the transport's host (local socket, or forwarded over SSH)."""
    import docker
    sock = transport.forward_unix_socket(DOCKER_SOCKET)
    return docker.DockerClient(base_url=f"unix://{sock}", timeout=120)


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
    return kwargs


class ContainerProcess(Process):
    """A started container; its exit is the node's result (container.wait through the API)."""

    def __init__(self, container):
        self.container = container
        self._code = None
        self._done = threading.Event()
        threading.Thread(target=self._wait, daemon=True, name=f"wait-{container.name}").start()

    def _wait(self):
        import docker
        import requests
        while True:
            try:
                self._code = self.container.wait(timeout=3600)["StatusCode"]
                break
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                continue                    # a long round outlived one HTTP wait: wait again
            except docker.errors.APIError:  # gone (NotFound) or the daemon refused: no exit code to read
                self._code = -1
                break
        self._done.set()

    @property
    def pid(self) -> int:
        try:
            self.container.reload()
            return int(self.container.attrs["State"]["Pid"])
        except Exception:  # noqa: BLE001
            return -1

    def wait(self, timeout=None):
        if not self._done.wait(timeout):
            return None
        return self._code

    def signal(self, sig):
        import docker
        if self._done.is_set():
            return
        try:
            self.container.kill(signal=int(sig))
        except docker.errors.APIError:
            pass          # already stopped


class DockerRuntime(Runtime):
    name = "docker"
    node_output = CONTAINER_OUTPUT    # the container's own stdout/stderr (the node launcher's included)

    def __init__(self, config=None):
        super().__init__(config)
        self.clients = {}
        self.images = {}          # (host address, framework) -> tag
        self.containers = {}      # node label -> container
        self._lock = threading.Lock()

    def client(self, transport):
        with self._lock:
            if transport.name not in self.clients:
                self.clients[transport.name] = client_for(transport)
            return self.clients[transport.name]

    def prepare_case(self, transports, case, run_dir, log):
        """Make the vendor image ready on every host of the case, in parallel; raise on the first failure."""
        from flagperf.hosts.fanout import fan_out
        from flagperf.images import ImageError, ensure_image, image_spec
        spec = image_spec(self.config, case.case.framework)
        hosts = {h.address: transports[h.address] for h in case.hosts}

        def one(address):
            client = self.client(hosts[address])
            log_path = Path(run_dir) / "images" / f"{address}_{spec.tag.replace('/', '_').replace(':', '_')}.log"
            tag, built = ensure_image(client, spec, log_path)
            log.info(f"{address}: image {tag} {'built' if built else 'already there'}"
                     + (f" (log {log_path})" if built else ""))
            return tag

        for o in fan_out(list(hosts), one, deadline_s=3600):
            if not o.ok:
                raise ImageError(f"{o.key}: {o.error}", getattr(o.exc, "last_lines", []))

    def prepare(self, transport, node, log):
        """Create the node's container from the plan (not started yet: launch() starts it)."""
        run: ContainerRun = node.container
        client = self.client(transport)
        self._remove_stale(client, run.name, log)
        log.info(f"{node.label}: {run.docker_run_line()}")
        container = client.containers.create(run.image, list(run.command), **sdk_kwargs(run, _globber(transport)))
        with self._lock:
            self.containers[node.label] = container

    def launch(self, transport, node):
        container = self.containers[node.label]
        container.start()
        return ContainerProcess(container)

    def cleanup(self, transport, node, log):
        import docker
        with self._lock:
            container = self.containers.pop(node.label, None)
        if container is None:
            return
        try:
            output = container.logs(stdout=True, stderr=True)
            if output:
                transport.write_file(f"{node.node_dir}/{self.node_output}", output)
        except (docker.errors.APIError, OSError) as exc:
            log.warning(f"{node.label}: cannot save the container's output: {exc}")
        try:
            container.remove(force=True)
            log.info(f"{node.label}: container {container.name} removed")
        except docker.errors.NotFound:
            pass

    def _remove_stale(self, client, name, log):
        import docker
        try:
            old = client.containers.get(name)
        except docker.errors.NotFound:
            return
        log.warning(f"removing a stale container {name}")
        old.remove(force=True)

    def clean(self, transports, run_id=None) -> dict:
        return clean(transports, run_id)


def clean(transports, run_id=None) -> dict:
    """Remove every flagperf container (of one run, or all) on every host; returns {host: [names]}."""
    from flagperf.hosts.fanout import fan_out

    def one(address):
        client = client_for(transports[address])
        flt = {"label": f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN}
        removed = []
        for c in client.containers.list(all=True, filters=flt):
            c.remove(force=True)
            removed.append(c.name)
        return removed

    out = {}
    for o in fan_out(list(transports), one, deadline_s=300):
        out[o.key] = o.value if o.ok else o.error
    return out
