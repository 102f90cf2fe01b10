"""The docker runtime's bounded daemon calls, driver labels and PIP_SOURCE in the container, without a daemon:
a silent unix socket (accepts, never answers), dead pids, the planned ContainerRun and PREPARE_AND_LAUNCH run
by sh with a stub python3."""
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("docker")

from flagperf.config import load_config  # noqa: E402
from flagperf.containers import PREPARE_AND_LAUNCH, container_run  # noqa: E402
from flagperf.plan import build_plan  # noqa: E402
from flagperf.runtimes import docker as rt  # noqa: E402
from flagperf.vendors import ContainerSpec  # noqa: E402


@pytest.fixture
def silent_socket(tmp_path):
    """A unix socket that accepts connections and never answers (a hung daemon)."""
    path = str(tmp_path / "silent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    conns = []

    def accept():
        while True:
            try:
                conns.append(server.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    yield path
    server.close()
    for c in conns:
        c.close()


class _Transport:
    """A transport of this machine (the socket is used as it is)."""
    name = "127.0.0.9"

    def forward_unix_socket(self, path):
        return path


def test_silent_daemon_is_a_daemon_error_within_the_timeout(silent_socket, monkeypatch):
    monkeypatch.setenv(rt.SOCKET_ENV, silent_socket)
    t0 = time.monotonic()
    with pytest.raises(rt.DaemonError) as info:
        rt.client_for(_Transport(), timeout=1)
    assert time.monotonic() - t0 < rt.CONTROL_TIMEOUT_S - 1    # the 1 s asked for, not the default 10 s
    assert str(info.value) == f"Docker daemon at {silent_socket} did not answer within 1 s"


def test_missing_socket_is_unreachable(tmp_path, monkeypatch):
    monkeypatch.setenv(rt.SOCKET_ENV, str(tmp_path / "none.sock"))
    with pytest.raises(rt.DaemonError, match=rf"Docker daemon at {tmp_path}/none.sock is not reachable"):
        rt.client_for(_Transport(), timeout=1)


def test_socket_default_and_override(monkeypatch):
    monkeypatch.delenv(rt.SOCKET_ENV, raising=False)
    assert rt.docker_socket() == "/var/run/docker.sock"
    monkeypatch.setenv(rt.SOCKET_ENV, "/run/other.sock")
    assert rt.docker_socket() == "/run/other.sock"


def test_a_call_that_times_out_marks_the_daemon_and_later_calls_are_skipped():
    import requests
    runtime = rt.DockerRuntime()
    calls = []

    def hang():
        calls.append("hang")
        raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=10)")

    with pytest.raises(rt.DaemonError, match=r"did not answer within 10 s \(logs\)"):
        runtime._call(_Transport(), "logs", hang)
    with pytest.raises(rt.DaemonError, match=r"did not answer within 10 s; remove skipped"):
        runtime._call(_Transport(), "remove", hang)
    assert calls == ["hang"]            # skipped: the second call never reached the daemon


def test_an_api_answer_is_not_a_daemon_failure():
    import docker
    runtime = rt.DockerRuntime()

    def refuse():
        raise docker.errors.NotFound("No such container: x")

    with pytest.raises(docker.errors.NotFound):
        runtime._call(_Transport(), "remove", refuse)
    assert runtime.unanswered == {}


# -- the driver label --------------------------------------------------------------------------------------------

def test_driver_identity_names_this_process():
    host, pid, started = rt.driver_identity().rsplit(":", 2)
    assert host == socket.gethostname() and int(pid) == os.getpid() and started
    assert not rt.driver_gone(rt.driver_identity())


def test_a_dead_driver_is_gone_and_other_machines_are_left_alone():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = rt._start_time(proc.pid)
    proc.wait()
    here = socket.gethostname()
    assert rt.driver_gone(f"{here}:{proc.pid}:{started}")
    assert not rt.driver_gone(f"another-machine-{here}:{proc.pid}:{started}")
    assert not rt.driver_gone("garbage")
    me = os.getpid()
    assert rt.driver_gone(f"{here}:{me}:1")            # the pid lives on, but is another process (reused)


# -- PIP_SOURCE reaches the container ----------------------------------------------------------------------------

def _docker_config(tmp_path, write, repo_root, extra=""):
    write(tmp_path, "conf/cluster.yaml", "HOSTS: [localhost]\nMASTER_PORT: 29611\n")
    return load_config(write(tmp_path, "conf/test.yaml",
                             "VENDOR: cpu\nRUNTIME: docker\nFLAGPERF_LOG_PATH: ../logs\nCLUSTER: cluster.yaml\n"
                             f'{extra}CASES:\n  "gemm:pytorch:pip:1:1:1": null\n'),
                       source_root=repo_root)


def _container_env(cfg):
    (case,) = build_plan(cfg, run_id="run20250101000000").cases
    return dict(case.rounds[0].nodes[0].container.env)


def test_pip_source_is_the_containers_pip_index_url(tmp_path, write, repo_root):
    cfg = _docker_config(tmp_path, write, repo_root, "PIP_SOURCE: http://127.0.0.1:9/simple\n")
    assert _container_env(cfg)["PIP_INDEX_URL"] == "http://127.0.0.1:9/simple"
    (case,) = build_plan(cfg, run_id="run20250101000000").cases
    assert "-e PIP_INDEX_URL=http://127.0.0.1:9/simple" in case.rounds[0].nodes[0].container.docker_run_line()


def test_no_pip_source_no_pip_index_url(tmp_path, write, repo_root):
    cfg = _docker_config(tmp_path, write, repo_root)
    assert "PIP_INDEX_URL" not in _container_env(cfg)


def test_the_vendors_own_pip_index_url_wins():
    spec = ContainerSpec(env=(("PIP_INDEX_URL", "https://vendor/simple"),))
    run = container_run(spec, name="n", image="i", extra_env=(("PIP_INDEX_URL", "https://src/simple"),
                                                              ("OTHER", "1")))
    assert run.env == (("PIP_INDEX_URL", "https://vendor/simple"), ("OTHER", "1"))


def test_env_prepare_log_shows_the_index(tmp_path):
    bench, node, stub = tmp_path / "bench", tmp_path / "node", tmp_path / "bin"
    for d in (bench, node, stub):
        d.mkdir()
    (bench / "requirements.txt").write_text("psutil\n")
    (stub / "python3").write_text('#!/bin/sh\necho "stub python3 $*"\n')
    (stub / "python3").chmod(0o755)
    env = {"PATH": f"{stub}:/usr/bin:/bin", "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    r = subprocess.run(["sh", "-c", PREPARE_AND_LAUNCH, "flagperf-prepare", str(bench), str(node), "true"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    log = Path(node / "env_prepare.log").read_text()
    assert "(package index: http://127.0.0.1:9/simple)" in log
    assert f"$ python3 -m pip install -r {bench}/requirements.txt --index-url http://127.0.0.1:9/simple" in log
    assert "--index-url http://127.0.0.1:9/simple" in log.splitlines()[-1]       # what the stub pip was given
