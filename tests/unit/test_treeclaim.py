"""Ownership of FLAGPERF_PATH (flagperf/hosts/treeclaim.py, flagperf/ownership.py) on real directories: what is
created, adopted and refused, that a refused directory is left byte-identical, and concurrent claims."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flagperf.deploy import DEPLOY_DIRS
from flagperf.hosts import HostError, treeclaim
from flagperf.hosts.base import CommandResult
from flagperf.ownership import TreeNotOwned, claim_tree, refusal_message

SOURCE = Path(treeclaim.__file__).read_text()


def snapshot(root):
    """Every entry under root (not following symlinks): kind, mode, size, mtime, content or link target."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            body = os.readlink(p) if os.path.islink(p) else (Path(p).read_bytes() if os.path.isfile(p) else None)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, body)
    st = os.lstat(root)
    out["."] = (st.st_mode, st.st_mtime_ns)
    return out


def foreign_tree(root):
    """A FlagPerf checkout's top: folders of its own, a README, a symlink."""
    (root / "training" / "run_benchmarks" / "config").mkdir(parents=True)
    (root / "training" / "run_benchmarks" / "config" / "test_conf.py").write_text('VENDOR = "nvidia"\n')
    (root / "README.md").write_text("# FlagPerf\n")
    (root / "docs").symlink_to("/etc")
    return root


def marker(root):
    return json.loads((root / treeclaim.MARKER).read_text())


def test_missing_directory_is_created_and_marked(tmp_path):
    root = tmp_path / "a" / "b" / "fp"
    assert treeclaim.claim(str(root), "9.9") == {"ok": True, "how": "created"}
    m = marker(root)
    assert m["schema"] == "flagperf.tree/1" and m["created_by"] == "flagperf" and m["version"] == "9.9"
    assert m["how"] == "created" and os.listdir(root) == [treeclaim.MARKER]
    before = snapshot(root)
    assert treeclaim.claim(str(root), "10.0") == {"ok": True, "how": "owned"}     # a second run: reused as it is
    assert snapshot(root) == before


def test_empty_directory_is_adopted(tmp_path):
    root = tmp_path / "fp"
    root.mkdir()
    assert treeclaim.claim(str(root), "1") == {"ok": True, "how": "adopted-empty"}
    assert marker(root)["how"] == "adopted-empty"


def test_foreign_directory_is_refused_and_left_byte_identical(tmp_path):
    root = foreign_tree(tmp_path / "FlagPerf")
    before = snapshot(root)
    answer = treeclaim.claim(str(root), "1")
    assert answer == {"ok": False, "why": "foreign", "detail": "README.md, docs, training"}
    assert snapshot(root) == before
    assert refusal_message(answer, str(root), "h1") == (
        f"FLAGPERF_PATH {root} on host h1 exists and was not created by flagperf (no .flagperf-tree); point "
        "FLAGPERF_PATH at an empty or new directory")


@pytest.mark.parametrize("extra", [None, "README.md", "training"])
def test_an_older_flagperf_tree_is_adopted_only_when_it_holds_nothing_else(tmp_path, extra):
    root = tmp_path / "fp"
    for name in DEPLOY_DIRS:
        if name.endswith(".py"):
            (root / name).write_text("# contract\n")
        else:
            (root / name).mkdir(parents=True)
    (root / "launcher" / "node_launcher.py").write_text("# launcher\n")
    (root / "result" / "run1").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    if extra == "README.md":
        (root / extra).write_text("x\n")
    elif extra:
        (root / extra).mkdir()
    before = snapshot(root)
    answer = treeclaim.claim(str(root), "1")
    if extra is None:
        assert answer == {"ok": True, "how": "adopted-older"} and marker(root)["how"] == "adopted-older"
    else:
        assert answer["why"] == "foreign" and snapshot(root) == before


def test_deploy_dirs_are_all_adoptable():
    assert set(DEPLOY_DIRS) | {"result"} <= set(treeclaim.OLDER_TREE)


def test_a_tree_without_flagperfs_launcher_is_not_older_flagperf(tmp_path):
    root = tmp_path / "fp"
    (root / "benchmarks").mkdir(parents=True)
    (root / "launcher").mkdir()
    (root / "launcher" / "node_launcher.py").symlink_to("/etc/passwd")      # not a regular file of the tree
    assert treeclaim.claim(str(root), "1")["why"] == "foreign"


def test_symlink_file_and_bad_marker_are_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    assert treeclaim.claim(str(link), "1") == {"ok": False, "why": "symlink", "detail": str(target)}
    assert os.listdir(target) == []                                     # never followed, even to an empty one
    f = tmp_path / "file"
    f.write_text("x")
    assert treeclaim.claim(str(f), "1") == {"ok": False, "why": "not_dir", "detail": ""}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / treeclaim.MARKER).write_text('{"created_by": "someone"}')
    assert treeclaim.claim(str(bad), "1") == {"ok": False, "why": "bad_marker",
                                               "detail": "not a flagperf.tree/1 marker"}
    (bad / treeclaim.MARKER).unlink()
    (bad / treeclaim.MARKER).symlink_to(tmp_path / "file")
    assert treeclaim.claim(str(bad), "1")["detail"] == "it is a symbolic link"


def test_unwritable_place_is_an_error_not_an_exception(tmp_path):
    answer = treeclaim.claim("/proc/flagperf-cannot-write-here", "1")
    assert answer["ok"] is False and answer["why"] == "error" and answer["detail"]


def test_concurrent_claims_of_one_new_directory_all_succeed_with_one_marker(tmp_path):
    root = tmp_path / "shared" / "fp"
    procs = [subprocess.Popen([sys.executable, "-c", SOURCE, str(root), "1"], stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    answers = [json.loads(p.communicate(timeout=30)[0]) for p in procs]
    # none refuses another; one marker stands (written by the creator, or by a claim that found the new directory
    # empty first), and no temporary file is left
    assert all(a["ok"] for a in answers), answers
    assert [a["how"] for a in answers].count("created") <= 1, answers
    assert os.listdir(root) == [treeclaim.MARKER] and marker(root)["how"] in ("created", "adopted-empty")


class RunTransport:
    """What claim_tree needs of an SSH transport (``host`` and ``run``), running the command on this machine."""

    def __init__(self, python=sys.executable, stdout=None):
        self.host = SimpleNamespace(address="10.0.0.9", python=python, is_local=False)
        self.stdout = stdout

    def run(self, argv, timeout=60.0):
        if self.stdout is not None:
            return CommandResult(tuple(argv), 0, self.stdout, "", 0.0)
        cp = subprocess.run(["sh", "-c", 'exec "$@"', "sh", *argv], capture_output=True, text=True, timeout=timeout)
        return CommandResult(tuple(argv), cp.returncode, cp.stdout, cp.stderr, 0.0)


def test_claim_tree_over_a_command_and_in_process(tmp_path):
    assert claim_tree(RunTransport(), str(tmp_path / "new")) == "created"
    assert claim_tree(RunTransport(), str(tmp_path / "new")) == "owned"
    local = SimpleNamespace(host=SimpleNamespace(address="localhost", python="python3", is_local=True))
    assert claim_tree(local, str(tmp_path / "new")) == "owned"
    root = foreign_tree(tmp_path / "foreign")
    for transport in (RunTransport(), local):
        with pytest.raises(TreeNotOwned) as e:
            claim_tree(transport, str(root))
        assert str(e.value).startswith(f"FLAGPERF_PATH {root} on host {transport.host.address} exists and was not")
    with pytest.raises(HostError, match="cannot check FLAGPERF_PATH .*not found"):
        claim_tree(RunTransport(python=str(tmp_path / "no-python")), str(tmp_path / "x"))
    with pytest.raises(HostError, match="gave no answer: 'Welcome!'"):
        claim_tree(RunTransport(stdout="Welcome!\n"), str(tmp_path / "x"))


def test_treeclaim_runs_anywhere_with_the_standard_library_alone():
    """It is sent to hosts as ``python -c``: no import of flagperf or of anything outside the standard library."""
    import ast
    tree = ast.parse(SOURCE)
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and names <= set(sys.stdlib_module_names), names


def test_flagperf_source_tree_is_its_own(repo_root):
    """A checkout of flagperf (what hosts on a shared filesystem see at the default FLAGPERF_PATH) carries the
    marker, so deploy may sync into it; claiming it changes nothing."""
    m = marker(repo_root)
    assert m["how"] == "source" and m["created_by"] == "flagperf"
    before = (repo_root / treeclaim.MARKER).read_bytes()
    assert treeclaim.claim(str(repo_root), "9.9") == {"ok": True, "how": "owned"}
    assert (repo_root / treeclaim.MARKER).read_bytes() == before
