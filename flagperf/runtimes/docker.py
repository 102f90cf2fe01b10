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

import re
import threading
from pathlib import Path

from flagperf.hosts.base import Process
from flagperf.runtimes.base import Runtime

DOCKER_SOCKET = "/var/run/docker.sock"
LABEL_RUN, LABEL_CASE, LABEL_ROUND, LABEL_NODE = "flagperf.run", "flagperf.case", "flagperf.round", "flagperf.node"

# Runs inside the container: $1 benchmark dir, $2 node dir, then the node launcher's argv.
_PREPARE_AND_LAUNCH = r"""
bench=$1; node=$2; shift 2
{
  echo "# environment preparation in $bench"
  if [ -f "$bench/requirements.txt" ]; then
    echo "\$ python3 -m pip install -r $bench/requirements.txt ${PIP_INDEX_URL:+--index-url $PIP_INDEX_URL}"
    python3 -m pip install --disable-pip-version-check -r "$bench/requirements.txt" \
      ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} || exit 90
  fi
  if [ -f "$bench/environment_variables.sh" ]; then echo "\$ . $bench/environment_variables.sh"; fi
} >>"$node/env_prepare.log" 2>&1 || { echo "environment preparation failed: see $node/env_prepare.log" >&2; exit 90; }
if [ -f "$bench/environment_variables.sh" ]; then . "$bench/environment_variables.sh"; fi
exec "$@"
"""


def client_for(transport):
    """A DockerClient for the daemon of the transport's host (local socket, or forwarded over SSH)."""
    import docker
    sock = transport.forward_unix_socket(DOCKER_SOCKET)
    return docker.DockerClient(base_url=f"unix://{sock}", timeout=120)


def _globber(transport):
    """Expands a device glob (/dev/xpu[0-9]*) on the host that runs the container, not on the driver."""
    import glob
    import json
    if transport.host.is_local:
        return glob.glob

    def remote(pattern):
        r = transport.run([transport.host.python, "-c",
                           "import glob, json, sys; print(json.dumps(sorted(glob.glob(sys.argv[1]))))", pattern])
        return json.loads(r.stdout) if r.ok else []
    return remote


def container_name(run_id: str, case: str, round_index: int, node_rank: int) -> str:
    raw = f"flagperf-{run_id}-{case}-r{round_index}-n{node_rank}"
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", raw)


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
    node_output = "container.log"     # the container's own stdout/stderr (the node launcher's included)

    def __init__(self, config):
        self.config = config
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
        hosts = {n.host.address: transports[n.host.address] for n in case.rounds[0].nodes}

        def one(address):
            client = self.client(hosts[address])
            log_path = Path(run_dir) / "images" / f"{address}_{spec.tag.replace('/', '_').replace(':', '_')}.log"
            tag, built = ensure_image(client, spec, log_path)
            log.info(f"{address}: image {tag} {'built' if built else 'already there'}"
                     + (f" (log {log_path})" if built else ""))
            return tag

        outcomes = fan_out(list(hosts), one, deadline_s=3600)
        for o in outcomes:
            if not o.ok:
                lines = getattr(o.exc, "last_lines", [])
                raise ImageError(f"{o.key}: {o.error}", lines)
            self.images[(o.key, case.case.framework)] = o.value

    def prepare(self, transport, node, log):
        """Create the node's container (not started yet: launch() starts it)."""
        spec = node.launch_spec
        client = self.client(transport)
        tag = self.images[(node.host.address, spec["framework"])]
        kwargs = self.config.container.docker_kwargs(self.config.test.shm_size, expand=_globber(transport))
        name = spec["container_name"]
        self._remove_stale(client, name, log)
        mounts = dict(kwargs.pop("volumes", {}) or {})
        run_dir_on_host = str(Path(node.node_dir).parents[2])
        for path in (node.host.flagperf_path, run_dir_on_host, spec.get("data_dir") or ""):
            if path:
                mounts.setdefault(path, {"bind": path, "mode": "rw"})
        env = dict(kwargs.pop("environment", {}) or {})
        argv = ["sh", "-c", _PREPARE_AND_LAUNCH, "flagperf-prepare", spec["cwd"], node.node_dir,
                *node.launcher_argv]
        log.info(f"{node.label}: docker create {name} from {tag}: {argv[-4:]}")
        container = client.containers.create(
            tag, argv, name=name, detach=True, init=True, working_dir=spec["cwd"], volumes=mounts, environment=env,
            labels={LABEL_RUN: spec["env"]["FLAGPERF_RUN_ID"], LABEL_CASE: spec["case_name"],
                    LABEL_ROUND: str(spec["round"]), LABEL_NODE: str(spec["node_rank"])},
            **kwargs)
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


def clean(transports, run_id=None, log=print) -> dict:
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
