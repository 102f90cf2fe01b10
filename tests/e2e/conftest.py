"""End-to-end fixtures: a flagperf tree with the test-only benchmarks, and the real CLI in a subprocess."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.proctable import processes_matching  # noqa: F401 (re-exported for the e2e tests)
from testbed.realparts import unavailable

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Every test under tests/e2e carries the ``e2e`` marker (``pytest -m "not e2e"`` leaves them out)."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def flagperf_home(tmp_path):
    """A FLAGPERF_HOME: the repo's launcher, monitors, contract module, vendors and benchmarks plus
    tests/e2e/benchmarks/*."""
    home = tmp_path / "home"
    (home / "benchmarks").mkdir(parents=True)
    for name in ("launcher", "monitors", "flagperf_contract.py"):
        (home / name).symlink_to(REPO / name)
    for vendor in (REPO / "vendors").iterdir():       # real folders, so tests can add override files
        (home / "vendors" / vendor.name).mkdir(parents=True)
        for entry in vendor.iterdir():
            (home / "vendors" / vendor.name / entry.name).symlink_to(entry)
    for bench in (REPO / "benchmarks").iterdir():
        (home / "benchmarks" / bench.name).symlink_to(bench)
    for bench in (HERE / "benchmarks").iterdir():
        shutil.copytree(bench, home / "benchmarks" / bench.name)
    return home


def materialize(home):
    """A copy of a FLAGPERF_HOME with its symlinks resolved (containers see only the mounted folder)."""
    real = home.parent / (home.name + "-real")
    shutil.copytree(home, real, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    return real


def write_conf(tmp_path, cases, **extra):
    """A test config running on localhost with RUNTIME: bare and VENDOR: cpu (``extra`` keys override)."""
    keys = {"VENDOR": "cpu", "RUNTIME": "bare", "FLAGPERF_LOG_PATH": tmp_path / "result", "MONITOR_INTERVAL": 0.5}
    keys.update(extra)
    lines = [f"{k}: {v}" for k, v in keys.items()]
    lines.append("CASES:")
    lines += [f'  "{key}": {data}' for key, data in cases.items()]
    path = tmp_path / "test_conf.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_cli(args, home=None, **kw):
    env = dict(os.environ)
    if home is not None:
        env["FLAGPERF_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-m", "flagperf", *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def run_cli(args, home=None, timeout=180):
    proc = start_cli(args, home)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"flagperf {args} did not finish in {timeout} s\n{out}\n{err}")
    return proc.returncode, out, err


def only_run_dir(result):
    runs = sorted(p for p in Path(result).iterdir() if p.name.startswith("run"))
    assert len(runs) == 1, runs
    return runs[0]


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def kill_all(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# ---- SSH test bed: N real sshd servers on 127.0.0.2, 127.0.0.3, ... (see testbed/sshbed.py) ----------------------

@pytest.fixture
def ssh_bed_factory(tmp_path):
    """``make(n=2, **kw)`` starts an SSHBed of n hosts under tmp_path on a port free on all its addresses and
    returns it (started); every bed made is stopped at teardown.  Outside CI a machine where openssh-server
    cannot be installed skips; under CI=true nothing skips: a bed that cannot start fails with the reason."""
    from testbed import sshbed

    beds = []

    def make(n=2, **kw):
        try:
            sshbed.ensure_openssh()
        except sshbed.SSHBedError as exc:
            unavailable(f"SSH test bed unavailable: {exc}")
        root = tmp_path / f"sshbed{len(beds)}"
        if any(c.isspace() for c in str(root)):
            import tempfile
            root = Path(tempfile.mkdtemp(prefix="sshbed-", dir="/tmp"))
        first_octet = kw.pop("first_octet", 2)
        last_error = None
        for _attempt in range(4):       # a port picked free can be taken before sshd binds it: pick again
            port = kw.pop("port", None) or sshbed.find_free_port(sshbed.bed_addresses(n, first_octet))
            bed = sshbed.SSHBed(root, n, port=port, first_octet=first_octet, **kw)
            beds.append(bed)
            try:
                return bed.start()
            except sshbed.PortInUse as exc:
                last_error = exc
            except sshbed.SSHBedError as exc:
                pytest.fail(f"SSH test bed of {n} hosts did not start: {exc}", pytrace=False)
        pytest.fail(f"SSH test bed of {n} hosts: no usable port: {last_error}", pytrace=False)

    yield make
    for bed in reversed(beds):
        bed.stop()


@pytest.fixture
def ssh_bed(ssh_bed_factory):
    """A started SSHBed of 2 hosts (testbed/sshbed.py); ``ssh_bed.write_cluster_yaml(path)`` gives a cluster config."""
    return ssh_bed_factory(2)


# ---- Docker: a real engine (Debian's docker.io) and two offline-built test images (see testbed/dockerenv.py) ----

@pytest.fixture(scope="session")
def docker_env():
    """The Docker test environment, set up once per session: ``.client`` (docker SDK, /var/run/docker.sock),
    ``.base_image`` (flagperf-test/debian-python:bookworm) and ``.torch_image`` (flagperf-test/torch-cpu:2.13.0).
    Installs docker.io/debootstrap if missing, starts dockerd if none answers (log /tmp/flagperf-dockerd.log;
    left running for later sessions) and builds the images when not cached (~2 min the first time).
    Under CI=true nothing skips: no Docker is a test failure with the reason; otherwise the test skips."""
    from testbed import dockerenv

    try:
        env = dockerenv.get_env(log_path="/tmp/flagperf-dockerd.log")
    except dockerenv.DockerEnvError as exc:
        unavailable(f"Docker test environment unavailable: {exc}")
    yield env


@pytest.fixture
def docker_clean(docker_env):
    """After the test (passed or failed), force-remove the containers labelled ``flagperf.run`` that appeared
    during it, so that a failing test leaks nothing.  It asserts nothing.  Containers that existed before the
    test are left alone: another pytest session may share the daemon (dockerenv.cleanup_flagperf_containers
    without ``keep`` removes them all)."""
    from testbed import dockerenv

    before = dockerenv.flagperf_container_ids(docker_env.client)
    yield docker_env
    dockerenv.cleanup_flagperf_containers(docker_env.client, keep=before)


# ---- a headless browser (Debian's chromium, see testbed/browser.py) ----

@pytest.fixture(scope="module")
def chromium():
    """chromium's path; installed with apt-get when missing (under CI=true a missing browser fails)."""
    from testbed import browser

    try:
        return browser.ensure_chromium()
    except browser.BrowserError as exc:
        unavailable(f"headless browser unavailable: {exc}")


# ---- network bed: sshd hosts in network namespaces on a bridge, links shaped with tc (see testbed/netbed.py) ----

@pytest.fixture
def net_bed_factory(tmp_path):
    """``make(n=4, **kw)`` starts a NetBed of n hosts under tmp_path (keywords: ``line_rate``, ``kind``, ``slot``)
    and returns it (started); every bed made is stopped and its namespaces, veths and bridge removed at teardown.
    Outside CI a machine without root, network namespaces, veth, bridge or tc skips; under CI=true nothing skips:
    a bed that cannot start fails with the reason."""
    from testbed import netbed, sshbed

    beds = []

    def make(n=4, **kw):
        try:
            sshbed.ensure_openssh()
        except sshbed.SSHBedError as exc:
            unavailable(f"network test bed unavailable: {exc}")
        why = netbed.unavailable_reason()
        if why:
            unavailable(f"network test bed unavailable: {why}")
        root = tmp_path / f"netbed{len(beds)}"
        if any(c.isspace() for c in str(root)):
            import tempfile
            root = Path(tempfile.mkdtemp(prefix="netbed-", dir="/tmp"))
        bed = netbed.NetBed(root, n, **kw)
        beds.append(bed)
        try:
            return bed.start()
        except sshbed.SSHBedError as exc:
            pytest.fail(f"network test bed of {n} hosts did not start: {exc}", pytrace=False)

    yield make
    for bed in reversed(beds):
        bed.stop()


@pytest.fixture
def net_bed(net_bed_factory):
    """A started NetBed of 4 hosts, links not shaped (testbed/netbed.py); ``net_bed.limit(i, rate)`` slows one."""
    return net_bed_factory(4)
