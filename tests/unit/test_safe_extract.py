"""The collect extractor (flagperf.hosts.treesync.safe_extract, safe_copy_tree) against hand-made tar streams
and hostile trees: only regular files and folders inside the destination, nothing followed, nothing blocked."""

import io
import logging
import os
import stat
import tarfile
import threading

import pytest

from flagperf.hosts.treesync import (
    FetchResult,
    parse_listing,
    plan_fetch,
    report_fetch,
    safe_copy_tree,
    safe_extract,
    safe_relpath,
)


def within(seconds, fn, *args):
    """fn(*args) in a thread; fails the test (instead of hanging it) when it does not return in time."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {seconds} s (blocked)"
    if "exc" in box:
        raise box["exc"]
    return box["value"]


class Stream(io.RawIOBase):
    """read(n) only, no seek: what a channel gives."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def readable(self):
        return True

    def read(self, n=-1):
        n = len(self.data) - self.pos if n is None or n < 0 else n
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


def member(name, type=tarfile.REGTYPE, data=b"", linkname="", mode=0o644, **kw):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode, ti.size = type, linkname, mode, len(data) if type == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti, data


def make_tar(*members, fmt=tarfile.GNU_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|", format=fmt) as tar:
        for ti, data in members:
            tar.addfile(ti, io.BytesIO(data) if ti.type == tarfile.REGTYPE else None)
    return buf.getvalue()


def snapshot(root):
    """{relpath: (kind, bytes or link target)} of everything under root, never following a link."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out[rel] = ("file", f.read(), st.st_nlink)
            else:
                out[rel] = (stat.S_IFMT(st.st_mode), None)
    return out


def only_plain(root):
    """Everything under root is a plain directory or a singly linked regular file."""
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(d, name))
            assert stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1), \
                (os.path.join(d, name), stat.filemode(st.st_mode), st.st_nlink)


@pytest.fixture
def area(tmp_path):
    """dest (the node directory) and outside (the driver's other files, with a secret)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"driver secret\n")
    dest = tmp_path / "run" / "case" / "node"
    return tmp_path, dest, outside


def test_regular_files_and_folders_are_written(area):
    _, dest, _ = area
    data = make_tar(member("rank0.out.log", data=b"hello\n", mode=0o6755, mtime=1_000_000),
                    member("sub", tarfile.DIRTYPE), member("sub/deep/x.log", data=b"x" * 70000),
                    member("..dots..", data=b"an odd but legal name"))
    want = {"rank0.out.log": 6, "sub/deep/x.log": 70000, "..dots..": 21}
    r = within(10, safe_extract, Stream(data), dest, want, 1 << 30)
    files, nbytes = r                       # still a (files, bytes) tuple
    assert (files, nbytes) == (3, 6 + 70000 + 21) and r.skipped == {} and r.left == {}
    assert (dest / "rank0.out.log").read_bytes() == b"hello\n"
    assert (dest / "sub" / "deep" / "x.log").read_bytes() == b"x" * 70000
    assert (dest / "..dots..").read_bytes() == b"an odd but legal name"
    mode = (dest / "rank0.out.log").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IXUSR)     # the archive's mode is not applied
    assert (dest / "rank0.out.log").stat().st_mtime == 1_000_000
    only_plain(dest)


def test_hostile_members_are_skipped_and_nothing_outside_changes(area):
    tmp, dest, outside = area
    before = snapshot(tmp)
    secret = str(outside / "secret")
    data = make_tar(
        member("../../../outside/escape1", data=b"1"),
        member(str(outside / "abs_escape"), data=b"2"),             # an absolute name
        member("a/../../../../outside/escape3", data=b"3"),
        member("link", tarfile.SYMTYPE, linkname=str(outside)),       # a symlink, then a file through it
        member("link/pwned", data=b"through the link"),
        member("rel", tarfile.SYMTYPE, linkname="../../../outside"),
        member("rel/pwned2", data=b"through the link"),
        member("hard", tarfile.LNKTYPE, linkname=secret),             # a hard link, then a write to it
        member("hard", data=b"overwrite the secret"),
        member("zero", tarfile.CHRTYPE, devmajor=1, devminor=5),      # /dev/zero
        member("disk", tarfile.BLKTYPE, devmajor=7, devminor=0),
        member("fifo", tarfile.FIFOTYPE),
        member("rank0.out.log", data=b"the real log\n"),
        member("extra.bin", data=b"not in the listing"),
    )
    want = {"../../../outside/escape1": 1, "link/pwned": 16, "rel/pwned2": 16, "hard": 20, "zero": 0,
            "rank0.out.log": 13}
    r = within(10, safe_extract, Stream(data), dest, want, 1 << 30)
    assert (dest / "rank0.out.log").read_bytes() == b"the real log\n"
    # "link/pwned" lands in a real folder "link" inside dest, never in outside/.
    assert (dest / "link" / "pwned").read_bytes() == b"through the link"
    assert (dest / "hard").read_bytes() == b"overwrite the secret"
    assert snapshot(outside) == {k[len("outside/"):]: v for k, v in before.items() if k.startswith("outside/")}
    assert (outside / "secret").read_bytes() == b"driver secret\n"
    only_plain(dest)
    assert set(snapshot(tmp)) - set(before) <= {"run", "run/case"} | {
        os.path.relpath(p, tmp) for p in [dest, dest / "rank0.out.log", dest / "link", dest / "link" / "pwned",
                                          dest / "rel", dest / "rel" / "pwned2", dest / "hard"]}
    for name in ("../../../outside/escape1", str(outside / "abs_escape"), "a/../../../../outside/escape3"):
        assert "outside" in r.skipped[name]
    assert "symlink" in r.skipped["link"] and "hard link" in r.skipped["hard"]
    assert "character device" in r.skipped["zero"] and "FIFO" in r.skipped["fifo"]
    assert "block device" in r.skipped["disk"] and r.skipped["extra.bin"] == "not asked for"
    assert r.files == 4


def test_what_is_already_on_the_driver_is_never_followed(area):
    tmp, dest, outside = area
    dest.mkdir(parents=True)
    os.symlink(outside / "secret", dest / "rank0.out.log")          # a file slot that is a symlink
    os.symlink(outside, dest / "sub")                               # a folder that is a symlink
    os.link(outside / "secret", dest / "hard.log")                  # a hard link to a driver file
    os.mkfifo(dest / "fifo.log")                                    # a FIFO: opening it for writing would block
    before = snapshot(outside)
    data = make_tar(member("rank0.out.log", data=b"A"), member("sub/x", data=b"B"), member("hard.log", data=b"C"),
                    member("fifo.log", data=b"D"))
    want = {"rank0.out.log": 1, "sub/x": 1, "hard.log": 1, "fifo.log": 1}
    r = within(10, safe_extract, Stream(data), dest, want, 1 << 30)
    assert {k: v[:2] for k, v in snapshot(outside).items()} == {k: v[:2] for k, v in before.items()}
    assert "symlink" in r.skipped["rank0.out.log"] and "not a plain directory" in r.skipped["sub/x"]
    assert "FIFO" in r.skipped["fifo.log"]
    assert (dest / "hard.log").read_bytes() == b"C" and os.stat(dest / "hard.log").st_nlink == 1
    assert r.files == 1


def test_byte_cap_leaves_the_excess_and_says_so(area):
    _, dest, _ = area
    data = make_tar(member("a.log", data=b"a" * 600), member("b.log", data=b"b" * 600), member("c.log", data=b"c"))
    r = within(10, safe_extract, Stream(data), dest, {"a.log": 600, "b.log": 600, "c.log": 1}, 1000)
    assert (r.files, r.nbytes) == (2, 601) and r.left == {"b.log": 600} and r.left_bytes == 600
    assert not (dest / "b.log").exists()
    note = r.notes("h: /x")[0]
    assert "1 file(s), 600 bytes left on the host" in note and "b.log (600 bytes)" in note


def test_a_member_larger_than_listed_counts_its_real_size(area):
    _, dest, _ = area
    data = make_tar(member("a.log", data=b"a" * 5000))
    r = within(10, safe_extract, Stream(data), dest, {"a.log": 10}, 1000)
    assert r.files == 0 and r.left == {"a.log": 5000} and not (dest / "a.log").exists()


def test_not_a_tar_and_oversized_headers_fail_without_reading_on(area):
    _, dest, _ = area
    with pytest.raises(tarfile.TarError):
        within(10, safe_extract, Stream(b"this is not a tar stream" * 100), dest, {}, 1 << 30)
    # A GNU long-name header announcing 1 GiB: refused at once, not read into memory.
    ti = tarfile.TarInfo("././@LongLink")
    ti.type, ti.size = tarfile.GNUTYPE_LONGNAME, 1 << 30
    stream = Stream(ti.tobuf(format=tarfile.USTAR_FORMAT) + b"x" * 4096)
    with pytest.raises(tarfile.TarError, match="extended header"):
        within(10, safe_extract, stream, dest, {}, 1 << 40)
    assert stream.pos < 1 << 20
    # A cut-off stream: an error, not a hang.
    whole = make_tar(member("a.log", data=b"a" * 100000))
    with pytest.raises(tarfile.TarError):
        within(10, safe_extract, Stream(whole[:50000]), dest, {"a.log": 100000}, 1 << 30)


def test_pax_names_are_checked_too(area):
    _, dest, outside = area
    ti, data = member("innocent", data=b"z")
    ti.pax_headers = {"path": "../../../outside/pax_escape"}
    r = within(10, safe_extract, Stream(make_tar((ti, data), fmt=tarfile.PAX_FORMAT)), dest, {"innocent": 1}, 100)
    assert r.files == 0 and "../../../outside/pax_escape" in r.skipped
    assert not (outside / "pax_escape").exists()


def test_names_and_listing():
    assert safe_relpath("a/./b//c") == "a/b/c"
    for bad in ("", "/etc/passwd", "..", "a/../b", "../x", "a/..", ".", "a\0b"):
        assert safe_relpath(bad) is None, bad
    assert safe_relpath("..x") == "..x" and safe_relpath("x..") == "x.."
    listing, skipped = parse_listing(b"5 a.log\0" b"7 ../../etc/x\0" b"9 /abs\0" b"zz bad\0" b"-1 neg\0" b"3 d/e\0")
    assert listing == {"a.log": 5, "d/e": 3}
    assert set(skipped) == {"../../etc/x", "/abs", "bad", "neg"}


def test_plan_takes_small_files_first_and_counts_what_is_there(tmp_path):
    (tmp_path / "have.log").write_bytes(b"h" * 300)
    take, left, budget = plan_fetch({"have.log": 300, "big": 800, "small": 100, "mid": 500}, tmp_path, 1000)
    assert budget == 700 and take == ["mid", "small"] and left == {"big": 800}


def test_local_copy_copies_regular_files_only(tmp_path):
    src, dst, outside = tmp_path / "src", tmp_path / "run" / "node", tmp_path / "outside"
    (src / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_bytes(b"driver secret\n")
    (src / "rank0.out.log").write_bytes(b"log\n")
    (src / "sub" / "ranks.json").write_bytes(b"{}")
    (src / "..odd").write_bytes(b"odd")
    os.symlink(outside / "secret", src / "secret_link")
    os.symlink("/dev/zero", src / "rank1.out.log")
    os.symlink(outside, src / "dirlink")
    os.mkfifo(src / "fifo.log")
    r = within(10, safe_copy_tree, src, dst, 1 << 30)
    assert (r.files, r.nbytes) == (3, 9)
    assert snapshot(dst) == {"rank0.out.log": ("file", b"log\n", 1), "sub": (stat.S_IFDIR, None),
                             "sub/ranks.json": ("file", b"{}", 1), "..odd": ("file", b"odd", 1)}
    assert "symlink" in r.skipped["secret_link"] and "symlink" in r.skipped["rank1.out.log"]
    assert "symlink" in r.skipped["dirlink"] and "FIFO" in r.skipped["fifo.log"]
    # again: nothing to copy; a cap below what is missing leaves the excess.
    assert tuple(within(10, safe_copy_tree, src, dst, 1 << 30)) == (0, 0)
    (src / "big.log").write_bytes(b"b" * 5000)
    r = within(10, safe_copy_tree, src, dst, 1000)
    assert r.left == {"big.log": 5000} and not (dst / "big.log").exists()


def test_report_goes_to_the_run_log_of_the_run_directory(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    log = logging.getLogger("flagperf.run.test-safe-extract")
    handler = logging.FileHandler(run / "flagperf_run.log")
    log.handlers[:] = [handler]
    log.propagate = False
    try:
        report_fetch(FetchResult(1, 10, {"huge.log": 5 << 30}, {"zero": "a character device"}), "h1: /r/node",
                     run / "case" / "round1" / "node")
    finally:
        handler.close()
        log.handlers[:] = []
    text = (run / "flagperf_run.log").read_text()
    assert "h1: /r/node: collect cap reached: 1 file(s), 5368709120 bytes left on the host: huge.log" in text
    assert "not collected: 'zero': a character device" in text
