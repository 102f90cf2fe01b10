"""The SSH test bed (testbed/sshbed.py) for real: 3 sshd servers on 127.0.0.2..4, strict host-key checking with
paramiko, per-host folders, and the negative cases other tests rely on (host down, changed host key, unknown
host key, wrong client key), and nothing of the bed left running after stop()."""

import os
import socket
from pathlib import Path

import paramiko
import pytest

from testbed import sshbed
from testbed.proctable import processes_matching
from testbed.realparts import unavailable


def _alive(pid):
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _client(bed, i, known_hosts=None, key=None):
    h = bed.hosts[i]
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts or bed.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(h["address"], port=h["port"], username=h["user"], key_filename=str(key or h["key"]),
                   allow_agent=False, look_for_keys=False, timeout=5, banner_timeout=5, auth_timeout=5)
    return client


def _run(client, command):
    _in, out, err = client.exec_command(command, timeout=10)
    text = out.read().decode()
    err.read()
    return out.channel.recv_exit_status(), text


@pytest.fixture
def bed(tmp_path):
    try:
        sshbed.ensure_openssh()
    except sshbed.SSHBedError as exc:
        unavailable(f"SSH test bed unavailable: {exc}")
    for _attempt in range(4):
        port = sshbed.find_free_port(sshbed.bed_addresses(3))
        b = sshbed.SSHBed(tmp_path / "bed", 3, port=port)
        try:
            b.start()
            break
        except sshbed.PortInUse:
            continue
    else:
        pytest.fail("no free port for the SSH test bed")
    yield b
    b.stop()


def test_bed_self_check_files_and_clean_stop(bed, tmp_path):
    assert bed.start_seconds < 120          # a hang catcher; how long it takes: bench/testbed_perf.py
    results = bed.self_check(repeat=3)
    assert [r["address"] for r in results] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    if bed.isolation == "unshare":
        assert all(r["bashrc_bytes"] == 0 for r in results), results      # the pyenv .bashrc is masked

    # files and per-host folders
    assert bed.client_key.is_file() and Path(str(bed.client_key) + ".pub").is_file()
    lines = bed.known_hosts.read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == [f"[127.0.0.{k}]:{bed.port}" for k in (2, 3, 4)]
    assert all(ln.split()[1] == "ssh-ed25519" for ln in lines)
    dirs = set()
    for h in bed.hosts:
        d = Path(h["dir"])
        for name in ("ssh_host_ed25519_key", "sshd_config", "sshd.log", "sshd.pid"):
            assert (d / name).is_file(), d / name
        assert Path(h["flagperf_path"]).is_dir() and Path(h["result_path"]).is_dir()
        assert not Path(h["flagperf_path"]).is_symlink()
        dirs |= {h["flagperf_path"], h["result_path"]}
        assert h["user"] == "root" or os.geteuid() != 0
    assert len(dirs) == 6

    # the cluster config reads back with the expected shape
    import yaml
    cluster = yaml.safe_load(bed.write_cluster_yaml(tmp_path / "cluster.yaml", per_host={1: {"PYTHON": "/x/py"}})
                             .read_text())
    assert [h["HOST"] for h in cluster["HOSTS"]] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert cluster["HOSTS"][1]["PYTHON"] == "/x/py" and "PYTHON" not in cluster["HOSTS"][0]
    assert cluster["SSH_PORT"] == bed.port and cluster["KNOWN_HOSTS"] == str(bed.known_hosts)

    # a session left running (a detached sleep) must end with the bed
    client = _client(bed, 0)
    code, out = _run(client, "sleep 300 >/dev/null 2>&1 & echo $!")
    sleeper = int(out.strip())
    assert code == 0 and _alive(sleeper)
    held = _client(bed, 1)                 # an open connection during stop()
    bed.stop()
    bed.stop()                             # idempotent
    client.close()
    held.close()
    assert not _alive(sleeper)
    assert processes_matching(str(bed.root)) == []
    assert bed.pids() == []
    for h in bed.hosts:
        with pytest.raises(OSError):
            socket.create_connection((h["address"], h["port"]), timeout=2).close()


def test_stop_host_refuses_connections(bed):
    bed.stop_host(1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((bed.hosts[1]["address"], bed.port), timeout=2).close()
    with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError):
        _client(bed, 1)
    assert _run(_client(bed, 0), "echo ok") == (0, "ok\n")       # the others stay up
    bed.start_host(1)
    assert _run(_client(bed, 1), "echo ok") == (0, "ok\n")


def test_changed_unknown_host_key_and_wrong_client_key(bed, tmp_path):
    old_line = bed.known_hosts_line(2)
    bed.rotate_host_key(2)
    assert bed.known_hosts_line(2) != old_line
    with pytest.raises(paramiko.BadHostKeyException):
        _client(bed, 2)
    assert _run(_client(bed, 0), "echo ok") == (0, "ok\n")

    unknown = bed.unknown_known_hosts(tmp_path / "kh_without_0", 0)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _client(bed, 0, known_hosts=unknown)
    _client(bed, 1, known_hosts=unknown).close()

    wrong = bed.wrong_client_key(tmp_path / "wrong_key")
    with pytest.raises(paramiko.AuthenticationException):
        _client(bed, 1, key=wrong)
    assert "Accepted publickey" in (Path(bed.hosts[1]["dir"]) / "sshd.log").read_text()
