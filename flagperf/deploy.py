"""Deploy: make each host's FLAGPERF_PATH hold the tree a run needs, sending only the files that differ."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flagperf.hosts.treesync import local_hashes

# What a host needs: the folders that run there, and the contract module they share with the driver.
DEPLOY_DIRS = ("benchmarks", "vendors", "launcher", "monitors", "flagperf_contract.py")


@dataclass(frozen=True)
class DeployResult:
    host: str
    path: str
    files_total: int
    files_sent: int
    bytes_sent: int
    same_tree: bool = False       # the host's FLAGPERF_PATH is the driver's own tree: nothing to do


def local_manifest(source_root: Path) -> dict:
    return local_hashes(source_root, DEPLOY_DIRS)


def needs_deploy(host, source_root: Path) -> bool:
    return not (host.is_local and Path(host.flagperf_path).resolve() == Path(source_root).resolve())


def deploy_host(transport, source_root: Path, manifest: dict | None = None) -> DeployResult:
    host = transport.host
    dest = host.flagperf_path
    manifest = manifest if manifest is not None else local_manifest(source_root)
    if not needs_deploy(host, source_root):
        return DeployResult(host.address, dest, len(manifest), 0, 0, same_tree=True)
    remote = transport.file_hashes(dest, DEPLOY_DIRS)
    differ = sorted(rel for rel, digest in manifest.items() if remote.get(rel) != digest)
    sent = transport.put_files(source_root, differ, dest) if differ else 0
    return DeployResult(host.address, dest, len(manifest), len(differ), sent)
