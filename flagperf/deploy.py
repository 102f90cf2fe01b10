"""Deploy: make each host's FLAGPERF_PATH hold the tree a run needs, sending only the files that differ.

Besides flagperf's own folders, every CASE_PATHS folder the run's cases use goes to ``<FLAGPERF_PATH>/cases/
<model>/`` (flagperf.caselaunch.deploy_folders). Those folders are the user's: a symlink in one is sent only
when it points at a regular file inside that same folder, never followed out of it.

Every file is opened once, when it is hashed, and what is sent is what was read then (a TreeSnapshot): no path
is looked up again between the hash and the send, so a file swapped for a symlink meanwhile sends nothing from
outside (docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flagperf.caselaunch import deploy_folders, needs_deploy
from flagperf.hosts.treesync import TreeSnapshot, snapshot_files, snapshot_tree
from flagperf.ownership import claim_tree, tree_note

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
    notes: tuple = ()             # what was not sent from a case folder, and why
    tree: str = ""                # how FLAGPERF_PATH is flagperf's: created, adopted-empty, adopted-older, owned
    tree_note: str = ""           # what deploy did to FLAGPERF_PATH itself (created, adopted), for the terminal


@dataclass(frozen=True)
class CaseTree:
    """A CASE_PATHS folder to send: its files ({relpath: sha256}) and what is left out ({relpath: why})."""

    folder: Path
    rel: str                      # where it goes, relative to FLAGPERF_PATH (cases/<model>)
    files: dict
    skipped: dict


def case_tree(folder, dest_rel: str) -> CaseTree:
    """Hash a case folder without following a symlink out of it: a symlink to a regular file inside the folder is
    sent as that file; a symlink elsewhere, a symlinked folder and anything not a regular file are left out. Each
    file is opened once (O_NOFOLLOW, relative to its folder's handle) and what is sent is what was read then
    (flagperf.hosts.treesync.snapshot_tree)."""
    snap = snapshot_tree(folder, confined=True)
    return CaseTree(Path(folder), dest_rel, snap, snap.skipped)


def case_trees(config) -> tuple:
    """Every CASE_PATHS folder the config's cases use, hashed once for all hosts."""
    return tuple(case_tree(folder, rel) for folder, rel in deploy_folders(config))


def local_manifest(source_root: Path) -> dict:
    """{relpath: sha256} of the tree's DEPLOY_DIRS, each file read once and sent as read (a TreeSnapshot)."""
    return snapshot_tree(source_root, DEPLOY_DIRS, confined=False)


def deploy_host(transport, source_root: Path, manifest: dict | None = None, cases: tuple = ()) -> DeployResult:
    """Send what differs of the tree, and of each CaseTree in ``cases``, to the host's FLAGPERF_PATH."""
    host = transport.host
    dest = host.flagperf_path
    manifest = manifest if manifest is not None else local_manifest(source_root)
    if not needs_deploy(host, source_root):     # CASE_PATHS cases run from their own folders here
        return DeployResult(host.address, dest, len(manifest), 0, 0, same_tree=True)
    how = claim_tree(transport, dest)       # refused (TreeNotOwned): nothing is hashed, written or sent there
    remote = transport.file_hashes(dest, DEPLOY_DIRS)
    differ = sorted(rel for rel, digest in manifest.items() if remote.get(rel) != digest)
    sent = 0
    if differ:
        # What is sent is what was hashed: the manifest's own reads, or (a plain {relpath: sha256}) the tree's
        # files read once now.
        source = manifest if isinstance(manifest, TreeSnapshot) else snapshot_files(source_root, differ)
        try:
            sent = transport.put_files(source, differ, dest)
        finally:
            if source is not manifest:
                source.close()
    total, n_differ, notes = len(manifest), len(differ), []
    for tree in cases:
        remote = transport.file_hashes(dest, [tree.rel])
        prefix = PurePosixPath(tree.rel)
        differ = sorted(rel for rel, digest in tree.files.items() if remote.get(str(prefix / rel)) != digest)
        if differ:
            files = tree.files if isinstance(tree.files, TreeSnapshot) else case_tree(tree.folder, tree.rel).files
            sent += transport.put_files(files, differ, str(PurePosixPath(dest) / tree.rel))
        total, n_differ = total + len(tree.files), n_differ + len(differ)
        notes += [f"{tree.folder / rel}: {why}" for rel, why in sorted(tree.skipped.items())]
    return DeployResult(host.address, dest, total, n_differ, sent, notes=tuple(notes), tree=how,
                        tree_note=tree_note(how))
