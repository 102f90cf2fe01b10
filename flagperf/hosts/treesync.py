"""Helpers shared by transports for moving trees: hashing, tar streams, safe extraction (the standard library)."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import tarfile
import tempfile
import weakref
from pathlib import Path

from flagperf.options.base import COLLECT_MAX_BYTES  # noqa: F401 (per node directory; the config key overrides it)

try:
    import grp
    import pwd
except ImportError:     # not on this platform: tar headers carry numeric owners only
    grp = pwd = None  # type: ignore[assignment]

# Sent to the host as `python -c HASH_SCRIPT ROOT [SUBDIR ...]`: prints {relpath: sha256} of every file under
# ROOT (or under its given subfolders), relative to ROOT.
HASH_SCRIPT = r"""
import hashlib, json, os, sys
root = sys.argv[1]
out = {}
for top in [os.path.join(root, s) for s in sys.argv[2:]] or [root]:
  if os.path.isfile(top):
    h = hashlib.sha256()
    with open(top, "rb") as fh:
        h.update(fh.read())
    out[os.path.relpath(top, root)] = h.hexdigest()
    continue
  for d, dirs, files in os.walk(top):
    dirs[:] = [x for x in dirs if x != "__pycache__"]
    for f in files:
        p = os.path.join(d, f)
        if not os.path.isfile(p):
            continue
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        out[os.path.relpath(p, root)] = h.hexdigest()
print(json.dumps(out))
"""


def local_hashes(root, subdirs=()) -> dict:
    """{relpath: sha256} under root (or its subfolders and single files), following symlinks, skipping
    __pycache__."""
    root = Path(root)
    out = {}
    for top in [root / s for s in subdirs] or [root]:
        if top.is_file():
            out[os.path.relpath(top, root)] = sha256_file(top)
            continue
        if not top.is_dir():
            continue
        for d, dirs, files in os.walk(top, followlinks=True):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                p = Path(d) / f
                if p.is_file():
                    out[os.path.relpath(p, root)] = sha256_file(p)
    return out


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_tar(fileobj, source, relpaths) -> int:
    """Stream the files into an uncompressed tar on fileobj; returns payload bytes. ``source`` is a TreeSnapshot
    (what it read when hashing is sent) or a folder (each file is read once, now: snapshot_files)."""
    snap = source if isinstance(source, TreeSnapshot) else snapshot_files(source, relpaths)
    total = 0
    try:
        with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for rel in relpaths:
                if rel not in snap:
                    continue
                tar.addfile(snap.tarinfo(rel), snap.reader(rel))
                total += snap.size(rel)
    finally:
        if snap is not source:
            snap.close()
    return total


def missing_locally(remote_listing: dict, local_dir) -> list:
    """Names from {relpath: size} that are absent under local_dir or have another size there (or are not a
    regular file there: a symlink is never followed)."""
    want = []
    for rel, size in remote_listing.items():
        p = Path(local_dir) / rel
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_size == size:
                continue
        except OSError:
            pass
        want.append(rel)
    return sorted(want)


# ------------------------------------------------------------------------------------------------- collect
# What a host sends back is not trusted: a broken or hostile host may answer with any listing and any tar
# stream. Collect therefore creates only regular files and directories under the destination node directory,
# never follows a symlink there, never creates a link, device, FIFO or socket, and fetches at most
# COLLECT_MAX_BYTES per node directory (docs/results.md, "Collect").
COLLECT_LISTING_MAX_BYTES = 16 * 1024 ** 2  # the host's file listing (name and size per file)
TAR_HEADER_MAX_BYTES = 1024 ** 2            # a PAX or GNU long-name header: more is not a listing of ours
_CHUNK = 64 * 1024          # below malloc's mmap threshold: larger chunks are slower (page faults)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class FetchResult(tuple):
    """What Transport.fetch_tree did: a ``(files, bytes)`` tuple of what was copied, plus ``left``
    ({name: bytes} left on the host because of the byte cap) and ``skipped`` ({name: why} for what was not
    copied because it was not a safe regular file: links, devices, FIFOs, names leading outside, ...)."""

    left: dict
    skipped: dict

    def __new__(cls, files: int, nbytes: int, left=None, skipped=None):
        self = super().__new__(cls, (files, nbytes))
        self.left = dict(left or {})
        self.skipped = dict(skipped or {})
        return self

    @property
    def files(self) -> int:
        return self[0]

    @property
    def nbytes(self) -> int:
        return self[1]

    @property
    def left_bytes(self) -> int:
        return sum(self.left.values())

    def notes(self, where: str = "") -> list:
        """One line per problem, for the run log."""
        lead = f"{where}: " if where else ""
        out = []
        if self.left:
            names = ", ".join(f"{n} ({b} bytes)" for n, b in sorted(self.left.items())[:20])
            more = f" and {len(self.left) - 20} more" if len(self.left) > 20 else ""
            out.append(f"{lead}collect cap reached: {len(self.left)} file(s), {self.left_bytes} bytes left on the "
                       f"host: {names}{more}")
        for name, why in sorted(self.skipped.items())[:50]:
            out.append(f"{lead}not collected: {name!r}: {why}")
        if len(self.skipped) > 50:
            out.append(f"{lead}not collected: {len(self.skipped) - 50} more")
        return out


def report_fetch(result: FetchResult, where: str, local_dir) -> None:
    """Write a fetch's problems (cap reached, entries skipped) as WARNINGs to the run log of the run directory
    that holds local_dir (the ``flagperf.run.<id>`` logger writing there), else to the ``flagperf.collect``
    logger."""
    notes = result.notes(where)
    if not notes:
        return
    import logging
    local = os.path.abspath(local_dir)
    loggers = []
    for name, lg in list(logging.Logger.manager.loggerDict.items()):
        if not name.startswith("flagperf.run.") or not isinstance(lg, logging.Logger):
            continue
        for h in lg.handlers:
            base = getattr(h, "baseFilename", None)
            if base and local.startswith(os.path.dirname(base) + os.sep):
                loggers.append(lg)
                break
    for lg in loggers or [logging.getLogger("flagperf.collect")]:
        for line in notes:
            lg.warning(line)


def safe_relpath(name) -> str | None:
    """A relative path inside a folder, normalised ("a/b"), or None when it is empty, absolute, holds a
    ``..`` component or a NUL."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def parse_listing(data: bytes) -> tuple:
    """``find -printf '%s %P\\0'`` output -> ({safe relpath: size}, {raw name: why skipped})."""
    listing: dict = {}
    skipped: dict = {}
    for entry in data.split(b"\0"):
        if not entry:
            continue
        size_text, _, raw = entry.decode(errors="surrogateescape").partition(" ")
        name = safe_relpath(raw)
        if name is None:
            skipped[raw] = "the name leads outside the node directory"
            continue
        try:
            size = int(size_text)
        except ValueError:
            size = -1
        if size < 0:
            skipped[raw] = f"bad size {size_text!r} in the host's listing"
            continue
        listing[name] = size
    return listing, skipped


def plan_fetch(listing: dict, local_dir, max_bytes: int) -> tuple:
    """(names to fetch, {name: size} left on the host, bytes that may still be fetched): what is missing
    locally, smallest files first, as long as the node directory on the driver stays within max_bytes (the
    listed files already there count)."""
    want = missing_locally(listing, local_dir)
    wanted = set(want)
    budget = max(0, max_bytes - sum(size for name, size in listing.items() if name not in wanted))
    take, left = [], {}
    used = 0
    for name in sorted(want, key=lambda n: (listing[n], n)):
        if used + listing[name] <= budget:
            take.append(name)
            used += listing[name]
        else:
            left[name] = listing[name]
    return sorted(take), left, budget


class UnsafeEntry(Exception):
    """An entry that collect does not create (the message says why)."""


class SafeTree:
    """Creates regular files and directories under root only: every directory is opened relative to its
    parent with O_NOFOLLOW (a symlink anywhere on the way is refused, never followed), files are created with
    O_NOFOLLOW|O_CREAT|O_EXCL (or truncated when a plain, singly linked regular file is already there), and
    anything else in the way (a link, FIFO, device, socket, directory) makes that entry be skipped."""

    def __init__(self, root):
        os.makedirs(root, exist_ok=True)
        self.root = os.fspath(root)
        self._dirs = {"": os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)}

    def close(self):
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def dir_fd(self, rel: str) -> int:
        fd = self._dirs.get(rel)
        if fd is not None:
            return fd
        parent, _, name = rel.rpartition("/")
        pfd = self.dir_fd(parent)
        flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
        try:
            try:
                fd = os.open(name, flags, dir_fd=pfd)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o755, dir_fd=pfd)
                except FileExistsError:
                    pass
                fd = os.open(name, flags, dir_fd=pfd)
        except OSError as exc:
            raise UnsafeEntry(f"{rel} on the driver is not a plain directory ({exc.strerror})") from None
        self._dirs[rel] = fd
        return fd

    def open_file(self, rel: str) -> int:
        """A write descriptor of the regular file rel (created, or truncated), never through a link."""
        parent, _, name = rel.rpartition("/")
        dfd = self.dir_fd(parent)
        flags = os.O_WRONLY | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
        try:
            try:
                fd = os.open(name, flags | os.O_EXCL, 0o644, dir_fd=dfd)
            except FileExistsError:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    raise UnsafeEntry(f"a {file_kind(st.st_mode)} is in the way on the driver") from None
                if st.st_nlink > 1:         # a hard link to some other file: replace it, never write through it
                    os.unlink(name, dir_fd=dfd)
                    fd = os.open(name, flags | os.O_EXCL, 0o644, dir_fd=dfd)
                else:
                    fd = os.open(name, flags, 0o644, dir_fd=dfd)
        except OSError as exc:
            raise UnsafeEntry(f"cannot create it on the driver ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise UnsafeEntry("not a plain regular file on the driver")
        os.ftruncate(fd, 0)
        return fd

    def mkdir(self, rel: str) -> None:
        self.dir_fd(rel)


def file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISREG, "regular file")):
        if test(mode):
            return kind
    return "special file"


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


_TAR_KINDS = {tarfile.SYMTYPE: "a symlink", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
              tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a FIFO"}


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses PAX and GNU long-name headers larger than TAR_HEADER_MAX_BYTES (tarfile reads them whole)."""

    def _proc_member(self, tarfile_):
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                         tarfile.SOLARIS_XHDTYPE) and self.size > TAR_HEADER_MAX_BYTES:
            raise tarfile.HeaderError(f"an extended header of {self.size} bytes")
        return super()._proc_member(tarfile_)


def safe_extract(fileobj, dest, want: dict, max_bytes: int) -> FetchResult:
    """Unpack an uncompressed tar stream read from fileobj (read(n) only, never seek) under dest.

    Only regular members named in ``want`` ({relpath: listed size}) are written, each as a new regular file
    (SafeTree); directories are created; every other member (links, devices, FIFOs, names leading outside
    dest, names not asked for, data beyond max_bytes in all) is read past, skipped and reported. Raises
    tarfile.TarError for a stream that is not a tar."""
    files = total = 0
    left: dict = {}
    skipped: dict = {}
    with SafeTree(dest) as tree, tarfile.open(fileobj=fileobj, mode="r|", bufsize=_CHUNK,
                                              tarinfo=_BoundedTarInfo) as tar:
        for m in tar:
            name = safe_relpath(m.name)
            if name is None:
                skipped[m.name] = "the name leads outside the node directory"
                continue
            if m.isdir():
                try:
                    tree.mkdir(name)
                except UnsafeEntry as exc:
                    skipped[name] = str(exc)
                continue
            if not m.isreg():
                skipped[name] = f"{_TAR_KINDS.get(m.type, 'not a regular file')} (type {m.type!r})"
                continue
            if name not in want:
                skipped[name] = "not asked for"
                continue
            if total + m.size > max_bytes:
                left[name] = m.size
                continue
            try:
                fd = tree.open_file(name)
            except UnsafeEntry as exc:
                skipped[name] = str(exc)
                continue
            try:
                src = tar.extractfile(m)
                assert src is not None
                while True:
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    _write_all(fd, chunk)
                try:
                    os.utime(fd, (m.mtime, m.mtime))
                except (OSError, TypeError, ValueError, OverflowError):
                    pass
            finally:
                os.close(fd)
            files += 1
            total += m.size
    return FetchResult(files, total, left, skipped)


def safe_copy_tree(src, dst, max_bytes: int) -> FetchResult:
    """Copy what is missing (or differs in size) of the folder src into dst, on this machine: regular files
    only, never following a symlink, never opening a FIFO or device (O_NOFOLLOW|O_NONBLOCK, fstat), at most
    max_bytes in dst. What is skipped or left is in the result."""
    listing: dict = {}
    skipped: dict = {}

    def walk(folder, prefix):
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            skipped[prefix or "."] = f"cannot list it: {exc.strerror}"
            return
        for e in entries:
            rel = f"{prefix}{e.name}"
            try:
                st = e.stat(follow_symlinks=False)
            except OSError as exc:
                skipped[rel] = f"cannot stat it: {exc.strerror}"
                continue
            if stat.S_ISDIR(st.st_mode):
                walk(e.path, rel + "/")
            elif stat.S_ISREG(st.st_mode):
                listing[rel] = st.st_size
            else:
                skipped[rel] = f"a {file_kind(st.st_mode)}"

    walk(os.fspath(src), "")
    take, left, budget = plan_fetch(listing, dst, max_bytes)
    files = total = 0
    with SafeTree(dst) as tree:
        for rel in take:
            try:
                sfd = os.open(os.path.join(src, rel), os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
            except OSError as exc:
                skipped[rel] = f"cannot open it: {exc.strerror}"
                continue
            try:
                st = os.fstat(sfd)
                if not stat.S_ISREG(st.st_mode):
                    skipped[rel] = f"a {file_kind(st.st_mode)}"
                    continue
                size = st.st_size
                if total + size > budget:
                    left[rel] = size
                    continue
                try:
                    dfd = tree.open_file(rel)
                except UnsafeEntry as exc:
                    skipped[rel] = str(exc)
                    continue
                try:
                    copied = _copy_fd(sfd, dfd, size)
                    os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
            files += 1
            total += copied
    return FetchResult(files, total, left, skipped)


def _copy_fd(sfd: int, dfd: int, size: int) -> int:
    """Copy at most size bytes from sfd to dfd (the file's size when it was opened: a growing log is copied as
    it was then); returns the bytes copied."""
    done = 0
    while done < size:
        try:
            n = os.sendfile(dfd, sfd, done, min(size - done, 1 << 30))
        except OSError:
            data = os.pread(sfd, min(size - done, _CHUNK), done)
            if not data:
                break
            _write_all(dfd, data)
            n = len(data)
        if n == 0:
            break
        done += n
    return done


# -------------------------------------------------------------------------------------------------- deploy
# Deploy hashes a local folder once and later sends the files whose hash the host lacks. Every file is opened
# once, relative to a handle on its folder, and what is sent is what was read then: the bytes, or, for a large
# file, that same open descriptor (past SNAPSHOT_MAX_FDS of them, a copy of the bytes read, in one nameless spool
# file). No path is looked up again between hashing and sending, so a file replaced by a symlink in between sends
# nothing of the symlink's target. In a confined folder (a CASE_PATHS folder) every folder and file is opened
# with O_NOFOLLOW, walking down from the folder's own handle.
SNAPSHOT_KEEP_FILE_BYTES = 4 * 1024 ** 2      # a file up to this size is kept as the bytes read ...
SNAPSHOT_KEEP_TOTAL_BYTES = 256 * 1024 ** 2   # ... while the snapshot keeps at most this many bytes in memory
SNAPSHOT_MAX_FDS = 256                        # large files kept open at most; past them, one spool file


class _Read:
    """One file as read when it was hashed: its stat, the bytes hashed (or the descriptor they were read from)."""

    __slots__ = ("st", "size", "data", "fd", "offset")

    def __init__(self, st, size, data, fd, offset=0):
        self.st, self.size, self.data, self.fd, self.offset = st, size, data, fd, offset


def _close_fds(fds: list) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class TreeSnapshot(dict):
    """{relpath: sha256} of a local folder's files, each opened once, with what was read from it: put_files sends
    these bytes, never the path again. ``skipped`` is {relpath: why} for what was left out. The descriptors kept
    for large files are closed by close() or when the snapshot is garbage."""

    def __init__(self, root):
        super().__init__()
        self.root = Path(root)
        self.skipped: dict = {}
        self._reads: dict = {}
        self._fds: list = []
        self._kept = 0
        self._spool: int | None = None      # the spool file's descriptor (also in _fds), once needed
        self._spooled = 0
        self._closer = weakref.finalize(self, _close_fds, self._fds)

    def close(self) -> None:
        self._closer()

    def size(self, rel: str) -> int:
        return self._reads[rel].size

    def tarinfo(self, rel: str) -> tarfile.TarInfo:
        """The tar header of rel as it was read (size, mode, times and owner of the file then)."""
        r = self._reads[rel]
        info = tarfile.TarInfo(rel)
        info.size, info.mode, info.mtime = r.size, stat.S_IMODE(r.st.st_mode), int(r.st.st_mtime)
        info.uid, info.gid = r.st.st_uid, r.st.st_gid
        try:
            info.uname = pwd.getpwuid(r.st.st_uid).pw_name
            info.gname = grp.getgrgid(r.st.st_gid).gr_name
        except (AttributeError, KeyError):
            pass
        return info

    def reader(self, rel: str):
        """A file object giving exactly size(rel) bytes: those hashed (a large file shrunk since is padded)."""
        r = self._reads[rel]
        return io.BytesIO(r.data) if r.data is not None else _FdReader(r.fd, r.size, r.offset)

    def chunks(self, rel: str):
        """The bytes of rel, as reader() gives them, in pieces."""
        src = self.reader(rel)
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                return
            yield chunk

    def _add(self, rel: str, fd: int, st) -> None:
        """Hash the file open on fd (its first st_size bytes: a file growing meanwhile is taken as it was when
        opened) and keep what was read. Takes ownership of fd."""
        keep = st.st_size <= SNAPSHOT_KEEP_FILE_BYTES and self._kept + st.st_size <= SNAPSHOT_KEEP_TOTAL_BYTES
        spool = not keep and len(self._fds) >= SNAPSHOT_MAX_FDS
        if spool and self._spool is None:
            self._spool, path = tempfile.mkstemp(prefix="flagperf-deploy-")
            os.unlink(path)                                 # open, nameless: closed with the snapshot
            self._fds.append(self._spool)
        offset = self._spooled
        h = hashlib.sha256()
        parts, done = [], 0
        try:
            while done < st.st_size:
                chunk = os.pread(fd, min(st.st_size - done, 1 << 20), done)
                if not chunk:
                    break
                h.update(chunk)
                if keep:
                    parts.append(chunk)
                elif spool:
                    _pwrite_all(self._spool, chunk, offset + done)
                done += len(chunk)
        except BaseException:
            os.close(fd)
            raise
        if keep or spool:
            os.close(fd)
        if keep:
            self._kept += done
            self._reads[rel] = _Read(st, done, b"".join(parts), None)
        elif spool:
            self._spooled += done
            self._reads[rel] = _Read(st, done, None, self._spool, offset)
        else:
            self._fds.append(fd)
            self._reads[rel] = _Read(st, done, None, fd)
        self[rel] = h.hexdigest()


def _pwrite_all(fd, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


class _FdReader(io.RawIOBase):
    """size bytes of an open file from offset on with pread (several senders may share the descriptor); what
    the file no longer holds is given as NULs."""

    def __init__(self, fd: int, size: int, offset: int = 0):
        self.fd, self.size, self.offset, self.pos = fd, size, offset, 0

    def readable(self):
        return True

    def read(self, n=-1):
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        if n <= 0:
            return b""
        data = os.pread(self.fd, n, self.offset + self.pos) or b"\0" * n
        self.pos += len(data)
        return data


_DIR_OPEN = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def snapshot_tree(root, subdirs=(), *, confined: bool) -> TreeSnapshot:
    """Hash every file under root (or under its given subfolders and single files), skipping __pycache__, each
    file opened once relative to its folder's handle and kept as read (TreeSnapshot).

    confined (a CASE_PATHS folder): nothing is followed out of root. Folders and files are opened with
    O_NOFOLLOW; a symlink to a regular file inside root is read as that file (opened the same way, walking down
    from root's handle); a symlink elsewhere, a symlinked folder and anything not a regular file are left out,
    each in ``skipped``. Not confined (flagperf's own tree): symlinks are followed, as the installer made them;
    what is not a regular file is left out."""
    snap = TreeSnapshot(root)
    top = os.fspath(root)
    try:
        root_fd = os.open(top, _DIR_OPEN)       # the configured folder itself, as the user named it
    except OSError:
        return snap
    try:
        real = os.path.realpath(top)
        walker = _Walker(snap, root_fd, real, confined)
        if not subdirs:
            walker.folder(root_fd, "", os.fstat(root_fd))
        for sub in subdirs:
            rel = safe_relpath(str(sub))
            if rel is not None:
                walker.entry_at(rel)
    except BaseException:
        snap.close()
        raise
    finally:
        os.close(root_fd)
    return snap


def snapshot_files(root, relpaths) -> TreeSnapshot:
    """The given files under root, each opened once (symlinks followed), as a TreeSnapshot; a name that is not a
    regular file there is left out."""
    snap = TreeSnapshot(root)
    try:
        for rel in relpaths:
            name = safe_relpath(str(rel))
            if name is None:
                continue
            try:
                fd = os.open(os.path.join(os.fspath(root), name), _FILE_OPEN)
            except OSError:
                continue
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                continue
            snap._add(name, fd, st)
    except BaseException:
        snap.close()
        raise
    return snap


class _Walker:
    """The walk of snapshot_tree: holds the root's handle and the folders on the way (for symlink loops)."""

    def __init__(self, snap: TreeSnapshot, root_fd: int, real_root: str, confined: bool):
        self.snap, self.root_fd, self.real_root, self.confined = snap, root_fd, real_root, confined
        self.nofollow = _NOFOLLOW if confined else 0
        self.on_path: set = set()

    def entry_at(self, rel: str) -> None:
        """A subfolder or single file of root given by name (flagperf's DEPLOY_DIRS): walked down to from root."""
        parts = rel.split("/")
        fds = []
        try:
            dfd = self.root_fd
            for part in parts[:-1]:
                dfd = os.open(part, _DIR_OPEN | self.nofollow, dir_fd=dfd)
                fds.append(dfd)
            self.entry(dfd, "/".join(parts[:-1]) + "/" if len(parts) > 1 else "", parts[-1])
        except OSError:
            return
        finally:
            for fd in fds:
                os.close(fd)

    def folder(self, dfd: int, prefix: str, st) -> None:
        key = (st.st_dev, st.st_ino)
        if key in self.on_path:
            return                  # a symlink loop (followed trees only)
        self.on_path.add(key)
        try:
            names = sorted(os.listdir(dfd))
        except OSError as exc:
            self.snap.skipped[prefix.rstrip("/") or "."] = f"unreadable ({exc.strerror}): not sent"
            return
        try:
            for name in names:
                self.entry(dfd, prefix, name)
        finally:
            self.on_path.discard(key)

    def entry(self, dfd: int, prefix: str, name: str) -> None:
        rel = prefix + name
        skipped = self.snap.skipped
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=not self.confined)
        except OSError as exc:
            if not self.confined:
                return              # a dangling symlink in flagperf's tree: nothing to send, as before
            skipped[rel] = f"unreadable ({exc.strerror}): not sent"
            return
        if stat.S_ISDIR(st.st_mode):
            if name == "__pycache__":
                return
            try:
                sub = os.open(name, _DIR_OPEN | self.nofollow, dir_fd=dfd)
            except OSError as exc:
                skipped[rel] = f"unreadable ({exc.strerror}): not sent"
                return
            try:
                self.folder(sub, rel + "/", os.fstat(sub))
            finally:
                os.close(sub)
            return
        if stat.S_ISLNK(st.st_mode):        # confined only: followed trees stat through the link
            self.link(dfd, prefix, name)
            return
        if not stat.S_ISREG(st.st_mode):
            if self.confined:
                skipped[rel] = "not a regular file: not sent"
            return
        self.file(dfd, name, rel)

    def file(self, dfd: int, name: str, rel: str) -> None:
        try:
            fd = os.open(name, _FILE_OPEN | self.nofollow, dir_fd=dfd)
        except OSError as exc:
            self.snap.skipped[rel] = ("replaced by a symlink while it was read: not sent" if self.confined and
                                      _is_link_refusal(exc) else f"unreadable ({exc.strerror}): not sent")
            return
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if self.confined:
                self.snap.skipped[rel] = "not a regular file: not sent"
            return
        self.snap._add(rel, fd, st)

    def link(self, dfd: int, prefix: str, name: str) -> None:
        """A symlink in a confined folder: read as its target when that is a regular file inside the folder,
        reached from the folder's own handle with O_NOFOLLOW (the path resolved once, here)."""
        rel = prefix + name
        try:
            target_text = os.readlink(name, dir_fd=dfd)
        except OSError as exc:
            self.snap.skipped[rel] = f"unreadable ({exc.strerror}): not sent"
            return
        here = os.path.join(self.real_root, prefix) if prefix else self.real_root
        try:
            target = os.path.realpath(os.path.join(here, name))
        except (OSError, RuntimeError):         # replaced while it was resolved
            self.snap.skipped[rel] = f"a symlink to {target_text!r}, changed while it was read: not sent"
            return
        inside = os.path.relpath(target, self.real_root) if target.startswith(self.real_root + os.sep) else None
        try:
            st = os.stat(target)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            self.snap.skipped[rel] = "a symlink to a folder, not followed"
            return
        if inside is None or st is None or not stat.S_ISREG(st.st_mode):
            self.snap.skipped[rel] = f"a symlink to {target_text!r}, outside the case folder: not sent"
            return
        parts = inside.split(os.sep)
        fds = []
        try:
            tfd = self.root_fd
            for part in parts[:-1]:
                tfd = os.open(part, _DIR_OPEN | _NOFOLLOW, dir_fd=tfd)
                fds.append(tfd)
            fd = os.open(parts[-1], _FILE_OPEN | _NOFOLLOW, dir_fd=tfd)
        except OSError as exc:
            self.snap.skipped[rel] = (f"a symlink to {target_text!r}, changed while it was read: not sent"
                                      if _is_link_refusal(exc) else f"unreadable ({exc.strerror}): not sent")
            return
        finally:
            for f in fds:
                os.close(f)
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            os.close(fd)
            self.snap.skipped[rel] = "not a regular file: not sent"
            return
        self.snap._add(rel, fd, fst)


def _is_link_refusal(exc: OSError) -> bool:
    """O_NOFOLLOW met a symlink (ELOOP; ENOTDIR for a folder opened with O_DIRECTORY)."""
    return exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
