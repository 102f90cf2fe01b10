"""The ``ssh`` backend: a list of hosts. ``localhost`` is this machine, reached with subprocesses; every other
host is reached over SSH (paramiko, host keys verified). Ranks run as plain processes (``RUNTIME: bare``) or
in the vendor's container (``RUNTIME: docker``), through a Runtime of :mod:`flagperf.runtimes`.

One connection per host, opened in parallel, reused for the whole run. Node files and logs live under each
host's result root; after every round the node directories are copied back to the driver (a localhost node
writes straight into the run directory).
"""

from __future__ import annotations

import json
import shlex
from pathlib import PurePosixPath

from flagperf.backends.base import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, Backend, BackendError
from flagperf.options.hostlist import HostListOptions, host_fields, host_from_fields
from flagperf.caselaunch import needs_deploy
from flagperf.checks import CONTRACT_FILE, HostCheck, failed, interpret_probe, probe_failure, unique_hosts
from flagperf.config import ClusterConfig
from flagperf.deploy import case_trees, deploy_host, local_manifest
from flagperf.hosts import HostError, open_transport
from flagperf.hosts.fanout import fan_out
from flagperf.images import ImageError
from flagperf.plan import each_hosts, each_port, host_result_root
from flagperf.runtimes import get_runtime
from flagperf_contract import NODE_STATUS_FILE, NODE_STATUS_MAX_BYTES

MAX_PARALLEL = 32
CONNECT_DEADLINE_S = 60.0
PROBE_TIMEOUT_S = 60.0


class HostListBackend(Backend):
    name = "ssh"

    @property
    def node_output(self) -> str:  # type: ignore[override]
        return self.runtime.node_output

    def __init__(self, config, log, *, accept_new_host_keys: bool = False):
        super().__init__(config, log, accept_new_host_keys=accept_new_host_keys)
        options = config.cluster.options
        if not isinstance(options, HostListOptions):
            raise BackendError(f"SCHEDULER ssh: the cluster config's options are {type(options).__name__}, not "
                               f"HostListOptions")
        self.runtime = get_runtime(config.test.runtime, config)
        self.options: HostListOptions = options
        self.cluster: ClusterConfig = config.cluster
        self.collect_max_bytes: int | None = config.test.collect_max_bytes
        self.transports: dict = {}

    @classmethod
    def collector(cls, record: dict, log, *, accept_new_host_keys: bool = False) -> "HostListBackend":
        """A backend that connects to the hosts of an earlier run's run.json and collects from them (nothing
        else: it has no config)."""
        hosts = tuple(cls.hosts_from_record(record))
        options = HostListOptions(hosts=hosts, known_hosts=str(record.get("known_hosts") or ""))
        self = cls.__new__(cls)
        Backend.__init__(self, None, log, accept_new_host_keys=accept_new_host_keys)
        self.runtime = get_runtime("bare")
        self.options = options
        self.cluster = ClusterConfig(None, hosts, 0, cls.name, options)
        self.collect_max_bytes = None
        self.transports = {}
        return self

    # -- hosts ----------------------------------------------------------------------------------------------
    def connect(self, hosts) -> list:
        todo = [h for h in unique_hosts(hosts) if h.address not in self.transports]
        outcomes = fan_out(todo, lambda h: open_transport(h, self.cluster,
                                                          accept_new_host_keys=self.accept_new_host_keys),
                           deadline_s=CONNECT_DEADLINE_S, max_workers=MAX_PARALLEL)
        failures = []
        for o in outcomes:
            if o.ok:
                self.transports[o.key.address] = o.value
            elif o.timed_out:
                failures.append(failed(o.key.address, "timeout", o.error))
            else:
                failures.append(failed(o.key.address, o.exc.kind if isinstance(o.exc, HostError) else "error",
                                       o.error))
        return failures

    def deploy(self, hosts) -> list:
        root = self.config.source_root
        todo = [h for h in unique_hosts(hosts) if h.address in self.transports]
        anywhere = any(needs_deploy(h, root) for h in todo)
        manifest = local_manifest(root) if anywhere else {}
        cases = case_trees(self.config) if anywhere else ()      # CASE_PATHS folders, to <FLAGPERF_PATH>/cases/
        return fan_out(todo, lambda h: deploy_host(self.transports[h.address], root, manifest, cases),
                       deadline_s=3600)

    def probe(self, hosts, need: dict) -> list:
        cfg = self.config
        probe_source = (cfg.source_root / "launcher" / "probe.py").read_text(encoding="utf-8")
        todo = [h for h in unique_hosts(hosts) if h.address in self.transports]
        outcomes = fan_out(todo, lambda h: self._probe_one(h, need.get(h.address, 0), probe_source),
                           deadline_s=PROBE_TIMEOUT_S * 2, max_workers=MAX_PARALLEL)
        return [o.value if o.ok else failed(o.key.address, "timeout" if o.timed_out else "error", o.error)
                for o in outcomes]

    def _probe_one(self, host, need: int, probe_source: str) -> HostCheck:
        vendor = self.config.vendor
        fp = host.flagperf_path
        launcher_dir = str(PurePosixPath(fp) / "launcher")
        result_root = str(host_result_root(host, self.config))
        argv = [host.python, "-c", probe_source, "--path", fp, "--path", launcher_dir, "--path", result_root,
                "--path", str(PurePosixPath(fp) / CONTRACT_FILE), "--flagperf-path", fp, "--accel", vendor.gpu_monitor]
        if vendor.torch_plugin:
            argv += ["--torch-plugin", vendor.torch_plugin]
        if host.address == self.config.cluster.hosts[0].address:     # node 0: where rank 0 listens
            argv += ["--port", str(self.config.cluster.master_port)]
        elif any(c.each for c in self.config.test.cases):    # each: every host's rank 0 listens
            order = [h.address for h in each_hosts(self.config)]
            argv += ["--port", str(each_port(self.config, order.index(host.address)))]
        try:
            r = self.transports[host.address].run(argv, timeout=PROBE_TIMEOUT_S)
        except HostError as exc:
            return probe_failure(host.address, host.python, exc.kind, str(exc))
        return interpret_probe(host.address, host.python, r.returncode, r.stdout, r.stderr, fp=fp,
                               launcher_dir=launcher_dir, result_root=result_root, need=need, vendor=vendor,
                               runtime=self.config.test.runtime,
                               in_container=self.config.test.runtime in self.options.container_runtimes,
                               move_busy_port=len(unique_hosts(self.config.cluster.hosts)) == 1)

    # -- a case ---------------------------------------------------------------------------------------------
    def prepare_case(self, case) -> None:
        try:
            self.runtime.prepare_case(self.transports, case, case.run_dir or self.config.test.log_path, self.log)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - images, daemons, APIs: each failure fails this case only
            raise BackendError(str(exc) or type(exc).__name__, exc.last_lines if isinstance(exc, ImageError) else ()) \
                from exc

    # -- a round --------------------------------------------------------------------------------------------
    def _transport(self, node):
        try:
            return self.transports[node.host.address]
        except KeyError:
            raise BackendError(f"{node.label}: no connection to {node.host.address}") from None

    def prepare_node(self, node) -> None:
        tr = self._transport(node)
        try:
            for name, content in node.files.items():
                tr.write_file(f"{node.node_dir}/{name}", json.dumps(content, indent=1).encode())
            self.runtime.prepare(tr, node, self.log)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - a host or container API error fails the round, not the run
            raise BackendError(f"{node.label}: cannot prepare the node: {exc}") from exc

    def spawn_monitor(self, node):
        try:
            return self._transport(node).spawn(node.monitor_argv, log_path=node.monitor_output)
        except HostError as exc:
            raise BackendError(f"{node.label}: cannot start the monitor: {exc}") from exc

    def spawn_launcher(self, node):
        try:
            return self.runtime.launch(self._transport(node), node)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{node.label}: cannot start the node launcher: {exc}") from exc

    def heartbeat(self, hosts) -> dict:
        out: dict = {}
        remote = []
        for h in unique_hosts(hosts):
            if h.is_local:
                out[h.address] = None           # this machine: the driver itself answers for it
            elif h.address not in self.transports:
                out[h.address] = "no connection"
            else:
                remote.append(h)
        for o in fan_out(remote, lambda h: self.transports[h.address].run(["true"], timeout=HEARTBEAT_TIMEOUT_S),
                         deadline_s=HEARTBEAT_TIMEOUT_S + 2):
            out[o.key.address] = None if o.ok and o.value.ok else \
                (o.error or f"exit {o.value.returncode}" if not o.ok else f"`true` exited {o.value.returncode}")
        return out

    def node_status(self, node) -> str | None:
        tr = self.transports.get(node.host.address)
        if tr is None:
            return None
        r = tr.run(["head", "-c", str(NODE_STATUS_MAX_BYTES), f"{node.node_dir}/{NODE_STATUS_FILE}"],
                   timeout=HEARTBEAT_INTERVAL_S)
        return r.stdout if r.ok else None

    def drop_caches(self, node) -> tuple:
        argv = ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"]
        self.log.info(f"{node.label}: $ {shlex.join(argv)}")
        try:
            r = self._transport(node).run(argv, timeout=120)
        except (HostError, BackendError) as exc:
            return False, str(exc)
        return r.ok, r.stderr.strip() or ("" if r.ok else "not permitted")

    def cleanup_node(self, node) -> None:
        if node.host.address in self.transports:
            self.runtime.cleanup(self.transports[node.host.address], node, self.log)

    def collect(self, node) -> tuple:
        """(files, bytes) fetched; the FetchResult also says what was left on the host or refused (``notes``)."""
        return self._transport(node).fetch_tree(node.node_dir, node.local_dir, max_bytes=self.collect_max_bytes)

    # -- housekeeping ---------------------------------------------------------------------------------------
    def clean(self, hosts, run_id=None) -> dict:
        connected = {h.address: self.transports[h.address] for h in unique_hosts(hosts)
                     if h.address in self.transports}
        # Containers are what runs leave behind; they are looked for whatever RUNTIME the config has now.
        return get_runtime("docker", self.config).clean(connected, run_id)

    def run_record_fields(self, hosts) -> dict:
        return {"known_hosts": self.options.known_hosts, "hosts": [host_fields(h) for h in hosts]}

    @classmethod
    def hosts_from_record(cls, record: dict) -> list:
        return [host_from_fields(h) for h in record["hosts"]]

    def describe(self, node) -> list:
        lines = []
        if node.container is not None:
            lines.append(f"container (image built from {node.container.image_folder} when the tag is missing):")
            lines.append(f"  {node.container.docker_run_line()}")
        if not node.host.is_local:
            lines.append(f"reached over SSH; node directory collected to {node.local_dir}")
        return lines

    def close(self) -> None:
        for t in self.transports.values():
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self.transports.clear()
