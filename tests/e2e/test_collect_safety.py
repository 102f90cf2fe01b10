"""A hostile or broken host cannot reach the driver's files: collect over real SSH (testbed/sshbed.py) and on
localhost writes only regular files and folders inside the node directory, follows nothing, never blocks on a
FIFO, fetches at most the byte cap and says what it left; host keys with a corrupt line or a KNOWN_HOSTS that is
a folder fail clearly or not at all."""

import json
import logging
import os
import re
import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from flagperf.config import HostSpec
from flagperf.hosts import HostError
from flagperf.hosts import ssh as ssh_mod
from flagperf.hosts.local import LocalTransport
from flagperf.hosts.ssh import SSHTransport

from .conftest import only_run_dir, run_cli, write_conf


def within(seconds, fn, *args, **kw):
    """fn(*args) in a thread; the test fails (and does not hang) if it takes longer."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} blocked for more than {seconds} s", pytrace=False)
    if "exc" in box:
        raise box["exc"]
    return box["value"]


class HostileTransport(SSHTransport):
    """The real transport, whose commands find ``fakebin`` first on the host's PATH (a fake tar and/or find)."""

    fakebin: str = ""

    def _open(self, argv, wrapper=ssh_mod._PID_WRAPPER, extra=()):
        if not self.fakebin:
            return super()._open(argv, wrapper, extra)
        return super()._open(["env", f"PATH={self.fakebin}:/usr/bin:/bin", *map(str, argv)], wrapper, extra)


def connect(bed, i=0, fakebin=None, cls=HostileTransport, known_hosts=None):
    h = bed.hosts[i]
    host = HostSpec(h["address"], bed.port, h["user"], h["key"], sys.executable, h["flagperf_path"])
    tr = cls(host, str(known_hosts or bed.known_hosts))
    tr.fakebin = str(fakebin or "")
    return tr


def script(path, text):
    path.write_text(text)
    path.chmod(0o755)
    return path


def tree(root):
    """{relpath: kind} of everything under root, never following links."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = ("dir" if stat.S_ISDIR(st.st_mode) else
                                             "file" if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else
                                             stat.filemode(st.st_mode))
    return out


def digest(root):
    out = {}
    for rel, kind in tree(root).items():
        p = os.path.join(root, rel)
        st = os.lstat(p)
        out[rel] = (kind, st.st_mtime_ns, open(p, "rb").read() if kind == "file" else None)
    return out


@pytest.fixture
def driver(tmp_path):
    """The driver's side: a run directory and other files (a secret) that no host may touch or read."""
    outside = tmp_path / "driver_files"
    outside.mkdir()
    (outside / "secret").write_bytes(b"driver secret\n")
    (outside / "keys").mkdir()
    (outside / "keys" / "id").write_bytes(b"private key\n")
    run = tmp_path / "result" / "run1"
    dest = run / "case" / "round1" / "h_noderank0"
    return outside, run, dest


def test_hand_made_tar_from_a_hostile_host(tmp_path, ssh_bed, driver):
    outside, run, dest = driver
    host_dir = Path(ssh_bed.hosts[0]["result_path"]) / "node"
    host_dir.mkdir(parents=True)
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    # find lists innocent names; tar answers with a stream made by hand.
    names = ["rank0.out.log", "link/pwned", "rel/pwned2", "hard", "zero", "fifo", "sock", "dev"]
    listing = "".join(f"20 {n}\\000" for n in names)
    script(fakebin / "find", f"#!/bin/sh\nprintf '{listing}'\n")
    script(fakebin / "tar", textwrap.dedent(f"""\
        #!{sys.executable}
        import io, sys, tarfile
        sys.stdin.buffer.read()
        out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.GNU_FORMAT)
        def add(name, type=tarfile.REGTYPE, data=b"", linkname="", **kw):
            ti = tarfile.TarInfo(name); ti.type, ti.linkname, ti.mode = type, linkname, 0o6777
            ti.size = len(data) if type == tarfile.REGTYPE else 0
            for k, v in kw.items(): setattr(ti, k, v)
            out.addfile(ti, io.BytesIO(data) if type == tarfile.REGTYPE else None)
        add("../../../../driver_files/escape", data=b"dot-dot")
        add({str(outside / 'abs_escape')!r}, data=b"absolute")
        add("link", tarfile.SYMTYPE, linkname={str(outside)!r})
        add("link/pwned", data=b"through a symlink")
        add("link/secret", data=b"overwritten")
        add("rel", tarfile.SYMTYPE, linkname="../../../../driver_files")
        add("rel/pwned2", data=b"through a relative symlink")
        add("hard", tarfile.LNKTYPE, linkname={str(outside / 'secret')!r})
        add("hard", data=b"write through the hard link")
        add("zero", tarfile.CHRTYPE, devmajor=1, devminor=5)
        add("dev", tarfile.BLKTYPE, devmajor=7, devminor=0)
        add("fifo", tarfile.FIFOTYPE)
        add("rank0.out.log", data=b"the real log of rank 0\\n")
        out.close()
        """))
    before = digest(outside)
    tr = connect(ssh_bed, fakebin=fakebin)
    try:
        r = within(60, tr.fetch_tree, str(host_dir), dest)
    finally:
        tr.close()
    assert digest(outside) == before                         # nothing outside was created, changed or replaced
    assert not (tmp_path / "result" / "escape").exists() and not list(tmp_path.rglob("escape"))
    assert set(tree(dest).values()) <= {"dir", "file"}      # no symlink, hard link, FIFO or device
    assert (dest / "rank0.out.log").read_bytes() == b"the real log of rank 0\n"
    assert (dest / "link" / "pwned").read_bytes() == b"through a symlink"     # a real folder inside dest
    assert not stat.S_IMODE((dest / "rank0.out.log").stat().st_mode) & 0o7111
    assert "symlink" in r.skipped["link"] and "hard link" in r.skipped["hard"]
    assert "character device" in r.skipped["zero"] and "FIFO" in r.skipped["fifo"]
    assert "outside" in r.skipped["../../../../driver_files/escape"]
    assert r.skipped["link/secret"] == "not asked for"


def test_hostile_folder_with_links_fifos_and_devices_real_tar(tmp_path, ssh_bed, driver):
    """The real find and tar on the host, a node directory full of traps; then a find that lists the traps as
    files (a host that swapped them after listing): tar sends them as links/FIFOs, which are skipped."""
    outside, run, dest = driver
    host_dir = Path(ssh_bed.hosts[0]["result_path"]) / "node"
    (host_dir / "sub").mkdir(parents=True)
    (host_dir / "rank0.out.log").write_bytes(b"log 0\n")
    (host_dir / "sub" / "ranks.json").write_bytes(b"{}")
    (host_dir / "..odd..").write_bytes(b"odd name")
    os.symlink(outside / "secret", host_dir / "secret_link")
    os.symlink("/dev/zero", host_dir / "rank1.out.log")
    os.symlink(outside, host_dir / "dirlink")
    os.mkfifo(host_dir / "fifo.log")
    before = digest(outside)
    tr = connect(ssh_bed, cls=SSHTransport)
    try:
        t0 = time.monotonic()
        r = within(60, tr.fetch_tree, str(host_dir), dest)
        assert time.monotonic() - t0 < 30
    finally:
        tr.close()
    assert (r.files, r.nbytes) == (3, 6 + 2 + 8)
    assert tree(dest) == {"rank0.out.log": "file", "sub": "dir", "sub/ranks.json": "file", "..odd..": "file"}

    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    swapped = ["secret_link", "rank1.out.log", "dirlink", "fifo.log"]
    script(fakebin / "find", "#!/bin/sh\nprintf '" + "".join(f"14 {n}\\000" for n in swapped) + "'\n")
    tr = connect(ssh_bed, fakebin=fakebin)
    try:
        r = within(60, tr.fetch_tree, str(host_dir), dest)
    finally:
        tr.close()
    assert r.files == 0
    assert "symlink" in r.skipped["secret_link"] and "symlink" in r.skipped["rank1.out.log"]
    assert "symlink" in r.skipped["dirlink"] and "FIFO" in r.skipped["fifo.log"]
    assert digest(outside) == before
    assert set(tree(dest).values()) <= {"dir", "file"}
    assert not (dest / "secret_link").exists() and not os.path.lexists(dest / "rank1.out.log")


def test_byte_cap_leaves_the_excess_on_the_host_and_says_so(tmp_path, ssh_bed, driver):
    outside, run, dest = driver
    run.mkdir(parents=True)
    host_dir = Path(ssh_bed.hosts[0]["result_path"]) / "node"
    host_dir.mkdir(parents=True)
    (host_dir / "ranks.json").write_bytes(b"{}")
    for i in range(3):
        (host_dir / f"rank{i}.out.log").write_bytes(bytes([65 + i]) * 400_000)
    log = logging.getLogger("flagperf.run.test-collect-cap")
    handler = logging.FileHandler(run / "flagperf_run.log")
    log.handlers[:] = [handler]
    log.propagate = False
    tr = connect(ssh_bed, cls=SSHTransport)
    try:
        r = within(60, tr.fetch_tree, str(host_dir), dest, max_bytes=1_000_000)
        again = within(60, tr.fetch_tree, str(host_dir), dest, max_bytes=1_000_000)
    finally:
        tr.close()
        handler.close()
        log.handlers[:] = []
    assert (r.files, r.nbytes) == (3, 800_002) and r.left == {"rank2.out.log": 400_000}
    assert sorted(p.name for p in dest.iterdir()) == ["rank0.out.log", "rank1.out.log", "ranks.json"]
    assert tuple(again) == (0, 0) and again.left == {"rank2.out.log": 400_000}    # still within the cap
    text = (run / "flagperf_run.log").read_text()
    assert re.search(r"collect cap reached: 1 file\(s\), 400000 bytes left on the host: "
                     r"rank2\.out\.log \(400000 bytes\)", text), text


def test_a_host_that_streams_without_end_or_stalls_does_not_hang_the_driver(tmp_path, ssh_bed, driver, monkeypatch):
    outside, run, dest = driver
    host_dir = Path(ssh_bed.hosts[0]["result_path"]) / "node"
    host_dir.mkdir(parents=True)
    (host_dir / "rank0.out.log").write_bytes(b"x" * 1000)
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    script(fakebin / "tar", "#!/bin/sh\nexec cat /dev/zero\n")       # zero blocks forever: an endless "tar"
    tr = connect(ssh_bed, fakebin=fakebin)
    try:
        with pytest.raises(HostError, match="fetching .* failed"):
            within(60, tr.fetch_tree, str(host_dir), dest)
        script(fakebin / "tar", "#!/bin/sh\nexec cat /dev/zero | head -c 5000000\n")     # more than it listed
        monkeypatch.setattr(ssh_mod, "STREAM_SLACK_BYTES", 100_000)
        with pytest.raises(HostError, match="more than"):
            within(60, tr.fetch_tree, str(host_dir), dest)
        script(fakebin / "tar", "#!/bin/sh\nexec sleep 300\n")                        # says nothing
        monkeypatch.setattr(ssh_mod, "IDLE_TIMEOUT_S", 2.0)
        t0 = time.monotonic()
        with pytest.raises(HostError, match="sent nothing for 2 s"):
            within(60, tr.fetch_tree, str(host_dir), dest)
        assert time.monotonic() - t0 < 45       # the 2 s idle timeout, not the 300 s of silence
        script(fakebin / "find", "#!/bin/sh\nexec cat /dev/zero\n")                   # an endless listing
        with pytest.raises(HostError, match="printed more than|timed out"):
            within(200, tr.fetch_tree, str(host_dir), dest)
    finally:
        tr.close()
    assert set(tree(dest).values()) <= {"dir", "file"} if dest.exists() else True


def test_local_collect_copies_regular_files_only(tmp_path, driver):
    outside, run, dest = driver
    src = tmp_path / "localhost_node"
    src.mkdir()
    (src / "rank0.out.log").write_bytes(b"log\n")
    os.symlink(outside / "secret", src / "secret_link")
    os.symlink("/dev/zero", src / "rank1.out.log")
    os.mkfifo(src / "fifo.log")
    tr = LocalTransport(HostSpec("localhost", None, None, None, sys.executable, ""))
    r = within(20, tr.fetch_tree, str(src), dest)
    assert (r.files, r.nbytes) == (1, 4) and tree(dest) == {"rank0.out.log": "file"}
    assert {"secret_link", "rank1.out.log", "fifo.log"} <= set(r.skipped)


HOSTILE_BENCH = '''\
import os, sys
sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
from common import harness
log = harness.PerfLog()
log.event("INIT_START")
args, cfg = harness.parse_args()
rank = int(os.environ["RANK"])
log.event("RUN_START")
log.event("RUN_END")
if rank == 0:
    log.finished(benchmark="hostile", metric="x", value=1.0, unit="s", higher_is_better=False, metrics={},
                 checks={"passed": True, "details": {}}, env={"device": "cpu"})
    sys.stdout.flush()
mine = os.path.join(args.result_dir, "rank%d.out.log" % rank)
os.unlink(mine)
if rank == 0:
    os.mkfifo(mine)                                         # the driver must not block on it
    os.mkfifo(os.path.join(args.result_dir, "evil_monitor.log"))
else:
    os.symlink("/dev/zero", mine)                           # nor read it without end
'''


def test_localhost_rank_that_swaps_its_log_for_a_fifo_does_not_hang_the_driver(tmp_path, flagperf_home):
    bench = flagperf_home / "benchmarks" / "hostile"
    bench.mkdir()
    (bench / "main.py").write_text(HOSTILE_BENCH)
    (bench / "case_config.yaml").write_text("# test-only: ranks replace their logs with a FIFO or /dev/zero\n")
    import socket
    with socket.socket() as sock:               # another test session may hold the default MASTER_PORT
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {port}\n")
    conf = write_conf(tmp_path, {"hostile:pytorch:local:1:2:1": "null"}, CLUSTER="cluster.yaml")
    t0 = time.monotonic()
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=180)
    assert time.monotonic() - t0 < 170
    assert code == 1, out + err
    run = only_run_dir(tmp_path / "result")
    node = next(run.glob("*/round1/localhost_noderank0"))
    assert stat.S_ISFIFO(os.lstat(node / "rank0.out.log").st_mode)
    summary = json.loads((run / "summary.json").read_text())
    rnd = summary["cases"][0]["rounds"][0]
    assert rnd["status"] == "failed"
    assert any("rank0.out.log: not a regular file (a FIFO)" in line for line in rnd["failure"]["last_lines"]), rnd
    monitors = rnd["nodes"][0]["monitors"]
    assert "FIFO" in monitors["unreadable"]["evil_monitor.log"]


def test_known_hosts_with_a_corrupt_line_for_another_host(tmp_path, ssh_bed, caplog):
    known = tmp_path / "known_hosts"
    good = ssh_bed.known_hosts.read_text()
    known.write_text("# comment\n10.9.9.9 ssh-ed25519 AAAA!!!!not-base64\n[other]:22 ssh-rsa AAAA\n" + good)
    with caplog.at_level(logging.WARNING, logger="flagperf.hosts.ssh"):
        tr = connect(ssh_bed, cls=SSHTransport, known_hosts=known)
        try:
            assert tr.run(["true"]).ok
        finally:
            tr.close()
    msgs = [r.getMessage() for r in caplog.records]
    assert any(f"{known}:2: not a valid known_hosts line, skipped" in m for m in msgs), msgs
    assert any(f"{known}:3: not a valid known_hosts line, skipped" in m for m in msgs), msgs
    assert not any("('" in m for m in msgs)

    # The host's own line corrupt: it is unknown (a clear outcome), not a Python tuple.
    mine = f"[{ssh_bed.addresses[0]}]"
    known.write_text("".join(" ".join(line.split()[:2] + ["AAAA!!!!"]) + "\n" if line.startswith(mine) else line + "\n"
                             for line in good.splitlines()))
    with pytest.raises(HostError) as exc:
        connect(ssh_bed, cls=SSHTransport, known_hosts=known)
    assert exc.value.kind == "unknown_host_key" and "('" not in str(exc.value)


def test_known_hosts_that_is_a_folder(tmp_path, ssh_bed):
    folder = tmp_path / "kh_dir"
    folder.mkdir()
    with pytest.raises(HostError) as exc:
        connect(ssh_bed, cls=SSHTransport, known_hosts=folder)
    assert exc.value.kind == "error" and f"KNOWN_HOSTS {folder} is a directory" in str(exc.value)
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml", extra={"KNOWN_HOSTS": str(folder)})
    conf = write_conf(tmp_path, {"gemm:pytorch:ssh:1:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["check", "--config", conf])
    assert code == 2, out + err
    assert re.search(r"cluster\.yaml:\d+: KNOWN_HOSTS: expected a known_hosts file, .*kh_dir is a directory",
                     out + err), out + err


def test_collect_max_bytes_config_key(tmp_path):
    from flagperf.config import load_config
    from flagperf.errors import ConfigError
    from flagperf.hosts.treesync import COLLECT_MAX_BYTES
    assert load_config(write_conf(tmp_path, {"gemm:pytorch:x:1:1:1": "null"})).test.collect_max_bytes == \
        COLLECT_MAX_BYTES == 2 * 1024 ** 3
    cfg = load_config(write_conf(tmp_path, {"gemm:pytorch:x:1:1:1": "null"}, COLLECT_MAX_BYTES=1000))
    assert cfg.test.collect_max_bytes == 1000 and cfg.to_dict()["COLLECT_MAX_BYTES"] == 1000
    for bad in (0, -5, "lots", "true"):
        with pytest.raises(ConfigError, match="COLLECT_MAX_BYTES: expected"):
            load_config(write_conf(tmp_path, {"gemm:pytorch:x:1:1:1": "null"}, COLLECT_MAX_BYTES=bad))
