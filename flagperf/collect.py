"""`flagperf collect`: fetch what is missing of a past run from the hosts recorded in its run.json."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from flagperf.backends import BackendError, backend_class
from flagperf.options import backend_names
from flagperf.options.base import HostSpec
from flagperf.errors import ConfigError
from flagperf.hosts import MissingPath
from flagperf.hosts.fanout import fan_out
from flagperf.records import RecordError, RunRecord


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


@dataclass(frozen=True)
class CollectTarget:
    """A node directory of a past run, as run.json recorded it (what Backend.collect reads of a NodePlan)."""

    host: HostSpec
    node_dir: str
    local_dir: Path
    label: str


def latest_run(log_path: Path) -> Path:
    runs = sorted(p for p in Path(log_path).glob("run*") if (p / "run.json").is_file())
    if not runs:
        raise ConfigError(f"{log_path}: no run directory with a run.json here; give RUN_DIR")
    return runs[-1]


def load_run_record(run_dir: Path) -> RunRecord:
    try:
        return RunRecord.load(Path(run_dir) / "run.json")
    except RecordError as exc:
        raise ConfigError(str(exc)) from None


def _safe_local_dir(run_dir: Path, rel) -> Path:
    """A node's directory on the driver, which must lie inside the run directory (run.json is not trusted)."""
    target = (run_dir / str(rel)).resolve()
    if not str(rel) or Path(str(rel)).is_absolute() or run_dir.resolve() not in target.parents:
        raise ConfigError(f"{run_dir / 'run.json'}: node directory {rel!r} is outside the run directory")
    return target


_NODE_FIELDS = (("host", True), ("node_dir", True), ("local_dir", True), ("node", False))


def _check_nodes(run_dir: Path, nodes) -> None:
    """Every node entry of run.json names its host, node directory and local directory as strings (and its
    label, when it has one); ConfigError naming the first entry that does not."""
    for i, n in enumerate(nodes):
        for key, required in _NODE_FIELDS:
            if (required or key in n) and not (isinstance(n.get(key), str) and n.get(key)):
                got = n.get(key)
                shown = f"{type(got).__name__} of {len(got)} items" if isinstance(got, (list, dict)) else \
                    repr(got)[:60]
                raise ConfigError(f"{run_dir / 'run.json'}: nodes[{i}].{key}: expected a non-empty string, "
                                  f"got {shown}")


def collect_run(run_dir: Path, *, accept_new_host_keys: bool = False, log=None) -> list:
    """Fetch every node directory of the run that is missing (or incomplete) on the driver, per host."""
    run_dir = Path(run_dir)
    rec = load_run_record(run_dir)
    name = rec.backend or "ssh"
    if name not in backend_names():
        raise ConfigError(f"{run_dir / 'run.json'}: backend {name!r} is not known to this flagperf")
    record = rec.to_dict()
    cls = backend_class(name)
    _check_nodes(run_dir, rec.nodes)
    try:
        hosts = cls.hosts_from_record(record)
        bad = next((h for h in hosts if not (isinstance(h.address, str) and h.address)), None)
        if bad is not None:
            raise ValueError(f"a host address is {type(bad.address).__name__}, not a non-empty string")
        by_address = {h.address: h for h in hosts}
        targets = [CollectTarget(by_address[n["host"]], n["node_dir"], _safe_local_dir(run_dir, n["local_dir"]),
                                 n.get("node", n["host"])) for n in rec.nodes]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{run_dir / 'run.json'}: a host or node entry is incomplete "
                          f"({type(exc).__name__}: {str(exc)[:200]})") from None
    try:
        backend = cls.collector(record, log or logging.getLogger("flagperf.collect"),
                                accept_new_host_keys=accept_new_host_keys)
    except BackendError as exc:
        raise ConfigError(f"{run_dir / 'run.json'}: {exc}") from None
    results = {f.host: HostCollect(f.host, 0, 0, 0, f"{f.outcome}: {f.detail}") for f in backend.connect(hosts)}

    def fetch(host):
        mine = [t for t in targets if t.host.address == host.address]
        files = size = 0
        for t in mine:
            try:
                f, b = backend.collect(t)
            except MissingPath:
                continue                  # that round never started on this node
            files += f
            size += b
        return HostCollect(host.address, len(mine), files, size)

    try:
        todo = [h for h in hosts if h.address not in results]
        for o in fan_out(todo, fetch, deadline_s=3600):
            results[o.key.address] = o.value if o.ok else HostCollect(o.key.address, 0, 0, 0, o.error)
    finally:
        backend.close()
    return [results[h.address] for h in hosts]
