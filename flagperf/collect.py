"""`flagperf collect`: fetch what is missing of a past run from the hosts recorded in its run.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from flagperf.checks import connect_hosts
from flagperf.config import ClusterConfig, HostSpec
from flagperf.errors import ConfigError
from flagperf.hosts import HostError
from flagperf.hosts.fanout import fan_out


@dataclass(frozen=True)
class HostCollect:
    host: str
    nodes: int
    files: int
    bytes: int
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def latest_run(log_path: Path) -> Path:
    runs = sorted(p for p in Path(log_path).glob("run*") if (p / "run.json").is_file())
    if not runs:
        raise ConfigError(f"{log_path}: no run directory with a run.json here; give RUN_DIR")
    return runs[-1]


def load_run_record(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; is {run_dir} a flagperf run directory?") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable: {exc}") from None
    if rec.get("schema") != "flagperf.run/1" or not isinstance(rec.get("nodes"), list):
        raise ConfigError(f"{path}: expected a flagperf.run/1 record with nodes")
    return rec


def collect_run(run_dir: Path, *, accept_new_host_keys: bool = False) -> list:
    """Fetch every node directory of the run that is missing (or incomplete) on the driver, per host."""
    run_dir = Path(run_dir)
    rec = load_run_record(run_dir)
    hosts = [HostSpec(h["HOST"], h.get("SSH_PORT"), h.get("SSH_USER"), h.get("SSH_KEY"), h.get("PYTHON") or
                      "python3", h.get("FLAGPERF_PATH") or "") for h in rec.get("hosts", [])]
    config = SimpleNamespace(cluster=ClusterConfig(None, tuple(hosts), rec.get("known_hosts", ""), 0))
    transports, failures = connect_hosts(config, hosts, accept_new_host_keys=accept_new_host_keys)
    results = {f.host: HostCollect(f.host, 0, 0, 0, f"{f.outcome}: {f.detail}") for f in failures}

    def fetch(host):
        tr = transports[host.address]
        nodes = [n for n in rec["nodes"] if n["host"] == host.address]
        files = size = 0
        for n in nodes:
            try:
                f, b = tr.fetch_tree(n["node_dir"], run_dir / n["local_dir"])
            except HostError as exc:
                if "No such file" in str(exc) or "does not exist" in str(exc):
                    continue              # that round never started on this node
                raise
            files += f
            size += b
        return HostCollect(host.address, len(nodes), files, size)

    try:
        todo = [h for h in hosts if h.address in transports]
        for o in fan_out(todo, fetch, deadline_s=3600):
            results[o.key.address] = o.value if o.ok else HostCollect(o.key.address, 0, 0, 0, o.error)
    finally:
        for t in transports.values():
            t.close()
    return [results[h.address] for h in hosts]
