"""Deploy sends what it hashed: every file of a case folder (and of the tree) is opened once, and a file swapped
for a symlink to a file outside after hashing sends nothing from outside, also with the swap racing the deploy."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

from flagperf.deploy import case_tree, deploy_host, local_manifest
from flagperf.hosts.local import LocalTransport
from flagperf.hosts.treesync import TreeSnapshot, snapshot_tree
from flagperf.options.base import HostSpec

SECRET = b"SECRET-7f3a9c-not-for-any-host\n"
SWAPPED = ("data.txt", "sub/deeper/config.yaml", "run.sh")


def make_case(root: Path, files: int = 150) -> Path:
    """A case folder of many small files (a wide window between hash and send), three of them swapped below."""
    case = root / "ext" / "kit"
    (case / "sub" / "deeper").mkdir(parents=True)
    for i in range(files):
        (case / "sub" / f"f{i:03}.py").write_text(f"x = {i}\n" * 50)
    for name in SWAPPED:
        (case / name).write_text(f"inside: {name}\n")
    return case


def make_secret(root: Path) -> Path:
    secret = root / "outside" / "secret.txt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes(SECRET)
    return secret


class Swapper:
    """A thread that keeps replacing files of a folder by a symlink to ``secret`` and back (atomic renames from a
    staging folder beside it), until stopped. ``swaps`` counts the replacements."""

    def __init__(self, folder: Path, names, secret: Path, staging: Path):
        self.folder, self.names, self.secret, self.staging = folder, list(names), secret, staging
        staging.mkdir(parents=True, exist_ok=True)
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        n = 0
        while not self.stop.is_set():
            for name in self.names:
                n += 1
                tmp = self.staging / f"t{n}"
                if n % 2:
                    os.symlink(self.secret, tmp)
                else:
                    tmp.write_text(f"inside: {name}\n")
                os.replace(tmp, self.folder / name)
                self.swaps += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def files_holding(root: Path, needle: bytes) -> list:
    """Every file under root (symlinks followed, as a benchmark on the host would read them) holding needle."""
    out = []
    for d, _dirs, names in os.walk(root, followlinks=True):
        for name in names:
            p = Path(d) / name
            try:
                if needle in p.read_bytes():
                    out.append(str(p))
            except OSError:
                pass
    return out


def _host(path: Path) -> HostSpec:
    return HostSpec("localhost", None, None, None, sys.executable, str(path))


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "launcher").mkdir(parents=True)
    (src / "launcher" / "x.py").write_text("")
    return src


# ------------------------------------------------------------------------------------------- deterministic
def test_a_file_swapped_for_a_symlink_after_hashing_sends_what_was_hashed(tmp_path):
    case = make_case(tmp_path, files=3)
    secret = make_secret(tmp_path)
    tree = case_tree(case, "cases/kit")
    assert isinstance(tree.files, TreeSnapshot)
    assert tree.files["data.txt"] == hashlib.sha256(b"inside: data.txt\n").hexdigest()
    for name in SWAPPED:                          # every swapped file now a symlink to the secret
        (case / name).unlink()
        (case / name).symlink_to(secret)
    fp = tmp_path / "host-fp"
    src = _tree(tmp_path)
    result = deploy_host(LocalTransport(_host(fp)), src, local_manifest(src), (tree,))
    for name in SWAPPED:
        assert (fp / "cases/kit" / name).read_text() == f"inside: {name}\n"
    assert files_holding(fp, SECRET) == []
    assert result.files_sent == len(tree.files) + 1


def test_a_file_grown_or_edited_after_hashing_sends_the_bytes_hashed(tmp_path):
    case = make_case(tmp_path, files=1)
    tree = case_tree(case, "cases/kit")
    (case / "data.txt").write_text("edited after the hash, longer than before\n")
    fp = tmp_path / "host-fp"
    deploy_host(LocalTransport(_host(fp)), _tree(tmp_path), None, (tree,))
    sent = (fp / "cases/kit/data.txt").read_bytes()
    assert sent == b"inside: data.txt\n" and hashlib.sha256(sent).hexdigest() == tree.files["data.txt"]


def test_a_large_file_is_sent_from_the_descriptor_it_was_hashed_from(tmp_path, monkeypatch):
    """Beyond the bytes a snapshot keeps, the open descriptor is: the swap of its path changes nothing."""
    import flagperf.hosts.treesync as treesync
    monkeypatch.setattr(treesync, "SNAPSHOT_KEEP_FILE_BYTES", 4)
    case = make_case(tmp_path, files=1)
    secret = make_secret(tmp_path)
    tree = case_tree(case, "cases/kit")
    assert tree.files._fds                                      # descriptors kept, not bytes
    (case / "data.txt").unlink()
    (case / "data.txt").symlink_to(secret)
    fp = tmp_path / "host-fp"
    deploy_host(LocalTransport(_host(fp)), _tree(tmp_path), None, (tree,))
    assert (fp / "cases/kit/data.txt").read_text() == "inside: data.txt\n"
    assert files_holding(fp, SECRET) == []
    fds = list(tree.files._fds)
    tree.files.close()
    for fd in fds:
        try:
            os.fstat(fd)
            raise AssertionError(f"descriptor {fd} left open")
        except OSError:
            pass


def test_past_the_descriptor_budget_files_are_sent_from_one_spool_of_what_was_read(tmp_path, monkeypatch):
    import flagperf.hosts.treesync as treesync
    monkeypatch.setattr(treesync, "SNAPSHOT_KEEP_FILE_BYTES", 4)
    monkeypatch.setattr(treesync, "SNAPSHOT_MAX_FDS", 1)
    case = make_case(tmp_path, files=40)
    secret = make_secret(tmp_path)
    want = {p.relative_to(case).as_posix(): p.read_bytes() for p in case.rglob("*") if p.is_file()}
    tree = case_tree(case, "cases/kit")
    assert len(tree.files._fds) == 2                            # one file's own descriptor, and the spool
    for name in SWAPPED:
        (case / name).unlink()
        (case / name).symlink_to(secret)
    fp = tmp_path / "host-fp"
    deploy_host(LocalTransport(_host(fp)), _tree(tmp_path), None, (tree,))
    assert {rel: (fp / "cases/kit" / rel).read_bytes() for rel in want} == want
    assert files_holding(fp, SECRET) == []


def test_a_folder_swapped_for_a_symlink_is_not_walked_into(tmp_path):
    case = make_case(tmp_path, files=1)
    secret = make_secret(tmp_path)
    (case / "sub" / "deeper").rename(tmp_path / "moved")
    (case / "sub" / "deeper").symlink_to(secret.parent, target_is_directory=True)
    snap = snapshot_tree(case, confined=True)
    assert not any(rel.startswith("sub/deeper/") for rel in snap)
    assert snap.skipped["sub/deeper"] == "a symlink to a folder, not followed"


def test_the_tree_manifest_is_sent_as_read(tmp_path):
    """flagperf's own tree: symlinks the installer made are followed, each file read once and sent as read."""
    src = _tree(tmp_path)
    (src / "launcher" / "x.py").write_text("print('tree')\n")
    manifest = local_manifest(src)
    assert isinstance(manifest, TreeSnapshot) and sorted(manifest) == ["launcher/x.py"]
    secret = make_secret(tmp_path)
    (src / "launcher" / "x.py").unlink()
    (src / "launcher" / "x.py").symlink_to(secret)
    fp = tmp_path / "host-fp"
    deploy_host(LocalTransport(_host(fp)), src, manifest)
    assert (fp / "launcher" / "x.py").read_text() == "print('tree')\n"
    assert files_holding(fp, SECRET) == []


# ------------------------------------------------------------------------------------------------- racing
def test_swap_racing_local_deploys_never_sends_the_secret(tmp_path):
    case = make_case(tmp_path)
    secret = make_secret(tmp_path)
    src = _tree(tmp_path)
    manifest = local_manifest(src)
    sent_inside = 0
    with Swapper(case, SWAPPED, secret, tmp_path / "staging") as swapper:
        for i in range(30):
            fp = tmp_path / f"host-fp{i}"
            tree = case_tree(case, "cases/kit")
            deploy_host(LocalTransport(_host(fp)), src, manifest, (tree,))
            assert files_holding(fp, SECRET) == [], f"deploy {i}: the secret reached the host"
            sent_inside += sum((fp / "cases/kit" / n).is_file() for n in SWAPPED)
    assert swapper.swaps >= 10           # the swap really raced the deploys
    assert sent_inside > 0               # and the swapped files were sent whenever they were regular files
