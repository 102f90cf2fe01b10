"""Ownership of a host's FLAGPERF_PATH: deploy writes only into a directory flagperf created (or adopted).

Standard library only, no f-strings: the driver runs this file on SSH hosts as ``python -c <source> ROOT
VERSION`` (it prints one JSON object) and calls :func:`claim` directly for ``localhost``. A directory is
flagperf's when it holds the marker file ``.flagperf-tree`` (JSON: schema, created_by, version, created, how).
:func:`claim` decides, without following a symlink at ROOT itself:

- ROOT missing: it is created (its parents too) and marked (``how: created``);
- ROOT marked by flagperf: nothing changes (``how: owned``);
- ROOT an empty directory: adopted and marked (``adopted-empty``);
- ROOT holding only what an older flagperf's deploy left (``OLDER_TREE``, with ``launcher/node_launcher.py``):
  adopted and marked (``adopted-older``);
- anything else is refused and left untouched: a non-empty directory without the marker (``foreign``), a
  marker flagperf did not write (``bad_marker``), a symlink (``symlink``), a file (``not_dir``), or an error.

The marker is written to a temporary file and hard-linked into place (``link`` fails when the name exists), so
two drivers claiming the same new directory at once both end up with one marker, and neither refuses the other.
"""
import datetime
import errno
import json
import os
import stat
import sys

MARKER = ".flagperf-tree"
MARKER_SCHEMA = "flagperf.tree/1"
MARKER_MAX_BYTES = 4096
# The top of a tree deployed by a flagperf that did not mark it: deploy's folders and contract module, the
# case folders (cases/), the hosts' result folder, and Python's byte-code cache (of flagperf_contract.py).
OLDER_TREE = {"benchmarks": "dir", "vendors": "dir", "launcher": "dir", "monitors": "dir",
              "flagperf_contract.py": "file", "result": "dir", "cases": "dir", "__pycache__": "dir"}
OLDER_TREE_PROOF = "launcher/node_launcher.py"     # a file only flagperf's tree has
_TMP_PREFIX = MARKER + ".tmp."
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _refuse(why, detail=""):
    return {"ok": False, "why": why, "detail": detail}


def _describe(exc):
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)


def read_marker(dir_fd):
    """("ok", marker dict), ("missing", None) or ("bad", why) for the marker in the open directory."""
    try:
        fd = os.open(MARKER, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return "missing", None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "bad", "it is a symbolic link"
        return "bad", "unreadable: %s" % _describe(exc)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return "bad", "it is not a regular file"
        raw = f.read(MARKER_MAX_BYTES + 1)
    if len(raw) > MARKER_MAX_BYTES:
        return "bad", "larger than %d bytes" % MARKER_MAX_BYTES
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return "bad", "not JSON"
    if not isinstance(data, dict) or data.get("schema") != MARKER_SCHEMA or data.get("created_by") != "flagperf":
        return "bad", "not a %s marker" % MARKER_SCHEMA
    return "ok", data


def _kind_is(dir_fd, name, kind):
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) if kind == "dir" else stat.S_ISREG(mode)


def is_older_tree(dir_fd, names):
    """Whether the directory's entries ``names`` are exactly (a part of) what an older flagperf deployed."""
    if not names or any(OLDER_TREE.get(n) is None or not _kind_is(dir_fd, n, OLDER_TREE[n]) for n in names):
        return False
    return "launcher" in names and _kind_is(dir_fd, OLDER_TREE_PROOF, "file")


def write_marker(dir_fd, how, version):
    """Put the marker in place unless one is there already (another driver's): a temporary file, hard-linked."""
    body = json.dumps({"schema": MARKER_SCHEMA, "created_by": "flagperf", "version": version,
                       "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                       "how": how}, indent=1) + "\n"
    tmp = "%s%d.%s" % (_TMP_PREFIX, os.getpid(), os.urandom(4).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
        try:
            os.link(tmp, MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            pass                                    # another claim won: its marker stands
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                raise
            # A filesystem without hard links: rename, unless a marker appeared meanwhile.
            if read_marker(dir_fd)[0] == "missing":
                os.rename(tmp, MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass


def claim(root, version):
    """{"ok": True, "how": created | owned | adopted-empty | adopted-older}, or {"ok": False, "why": foreign |
    bad_marker | symlink | not_dir | error, "detail": text}. Never raises for a filesystem problem."""
    created = False
    try:
        try:
            st = os.lstat(root)
        except FileNotFoundError:
            parent = os.path.dirname(os.path.abspath(root))
            os.makedirs(parent, exist_ok=True)
            try:
                os.mkdir(root, 0o755)
                created = True
            except FileExistsError:
                pass                                # created meanwhile: judged as found below
            st = os.lstat(root)
        if stat.S_ISLNK(st.st_mode):
            return _refuse("symlink", os.readlink(root))
        if not stat.S_ISDIR(st.st_mode):
            return _refuse("not_dir")
        try:
            dir_fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):   # replaced by a symlink or a file meanwhile
                return _refuse("symlink" if exc.errno == errno.ELOOP else "not_dir", "")
            raise
        try:
            state, marker = read_marker(dir_fd)
            if state == "ok":
                return {"ok": True, "how": "owned"}
            if state == "bad":
                return _refuse("bad_marker", marker)
            names = sorted(n for n in os.listdir(dir_fd) if not n.startswith(_TMP_PREFIX))
            if MARKER in names:                     # another claim marked it after the first look
                state, marker = read_marker(dir_fd)
                if state == "ok":
                    return {"ok": True, "how": "owned"}
                if state == "bad":
                    return _refuse("bad_marker", marker)
                names.remove(MARKER)
            if not names:
                how = "created" if created else "adopted-empty"
            elif is_older_tree(dir_fd, names):
                how = "adopted-older"
            else:
                return _refuse("foreign", ", ".join(names[:5]) + (", ..." if len(names) > 5 else ""))
            write_marker(dir_fd, how, version)
            state, marker = read_marker(dir_fd)
            if state != "ok":
                return _refuse("bad_marker", marker)
            return {"ok": True, "how": how if marker.get("how") == how else "owned"}
        finally:
            os.close(dir_fd)
    except OSError as exc:
        return _refuse("error", "%s%s" % (_describe(exc), ": %s" % exc.filename if exc.filename else ""))


if __name__ == "__main__":
    print(json.dumps(claim(sys.argv[1], sys.argv[2])))
