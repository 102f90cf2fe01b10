"""Host checks: the pure reading of a probe's answer, and how probe failures are named."""

import json
import logging
from types import SimpleNamespace

import pytest

from flagperf.checks import MIN_PYTHON, interpret_probe, needed_accelerators, probe_failure
from flagperf.config import HostSpec
from flagperf.hosts import HostError
from flagperf.hosts.local import LocalTransport

FP, LAUNCHER, ROOT = "/opt/fp", "/opt/fp/launcher", "/data/result"
CPU = SimpleNamespace(name="cpu", device="cpu", torch_device="cpu", torch_plugin=None, gpu_monitor="none")
NVIDIA = SimpleNamespace(name="nvidia", device="cuda", torch_device="cuda", torch_plugin=None, gpu_monitor="nvml")


def answer(python=(3, 11, 7), torch="2.13.0", gpus=0, exists=True, writable=True, free=10 << 30):
    return json.dumps({
        "python": list(python), "cpu_count": 2, "torch": torch, "torch_error": None if torch else "No module",
        "gpus": gpus, "accelerators": {"source": "nvml", "count": gpus, "error": None},
        "paths": {FP: {"exists": exists}, LAUNCHER: {"exists": exists},
                  ROOT: {"exists": True, "writable": writable, "free_bytes": free}}})


def judge(stdout, vendor=CPU, runtime="bare", need=0, returncode=0, stderr=""):
    return interpret_probe("h", "python3", returncode, stdout, stderr, fp=FP, launcher_dir=LAUNCHER,
                           result_root=ROOT, need=need, vendor=vendor, runtime=runtime,
                           in_container=runtime == "docker")


def test_ok_host():
    c = judge(answer())
    assert c.ok and "torch 2.13.0" in c.detail and "2 CPU(s)" in c.detail


def test_minimum_python_is_3_9():
    assert MIN_PYTHON == (3, 9)
    assert judge(answer(python=(3, 8, 18))).outcome == "python_too_old"
    assert judge(answer(python=(3, 9, 0))).ok


def test_torch_is_not_asked_of_the_host_under_docker():
    assert judge(answer(torch=None)).outcome == "torch_missing"
    c = judge(answer(torch=None), runtime="docker")
    assert c.ok, c
    assert "torch in the image" in c.detail


@pytest.mark.parametrize("kw, outcome", [
    ({"exists": False}, "deploy_path_missing"),
    ({"writable": False}, "log_path_not_writable"),
    ({"free": 1 << 20}, "low_disk"),
])
def test_host_problems(kw, outcome):
    assert judge(answer(**kw)).outcome == outcome


def test_accelerators_against_need():
    assert judge(answer(gpus=1), vendor=NVIDIA, need=2).outcome == "too_few_accelerators"
    c = judge(answer(gpus=8), vendor=NVIDIA, need=2)
    assert c.ok and c.accelerators == 8


@pytest.mark.parametrize("stdout", ["", "not json", "{}", '{"python": "x"}', "[1, 2]"])
def test_unreadable_answer_is_an_error_not_a_traceback(stdout):
    c = judge(stdout)
    assert c.outcome == "error" and "not readable" in c.detail


def test_exit_codes_of_the_probe():
    assert judge("", returncode=127, stderr="python3: not found").outcome == "python_missing"
    assert judge("", returncode=1, stderr="  File x\nSyntaxError: invalid").outcome == "python_too_old"
    assert judge("", returncode=1, stderr="boom").outcome == "error"


def test_probe_timeout_on_localhost_is_a_timeout_not_python_missing():
    tr = LocalTransport(HostSpec("localhost", None, None, None, "python3", "/tmp"))
    with pytest.raises(HostError) as info:
        tr.run(["sleep", "5"], timeout=0.2)
    assert info.value.kind == "timeout"
    assert probe_failure("localhost", "python3", info.value.kind, str(info.value)).outcome == "timeout"
    with pytest.raises(HostError) as info:
        tr.run(["/nonexistent/python3", "-c", "1"])
    assert probe_failure("localhost", "/nonexistent/python3", info.value.kind, str(info.value)).outcome == \
        "python_missing"


def test_needed_accelerators_with_auto():
    hosts = (SimpleNamespace(address="a"), SimpleNamespace(address="b"))
    cases = (SimpleNamespace(nproc=None, nnodes=2), SimpleNamespace(nproc=4, nnodes=1))
    cfg = SimpleNamespace(test=SimpleNamespace(cases=cases), cluster=SimpleNamespace(hosts=hosts), vendor=NVIDIA)
    assert needed_accelerators(cfg) == {"a": 4, "b": 1}
    cfg.vendor = CPU
    assert needed_accelerators(cfg) == {"a": 4, "b": 0}


def test_a_tree_without_the_contract_module_is_named():
    data = json.loads(answer())
    data["paths"][f"{FP}/flagperf_contract.py"] = {"exists": False, "is_file": False}
    c = judge(json.dumps(data))
    assert c.outcome == "deploy_path_missing" and "flagperf_contract.py" in c.detail
    data["paths"][f"{FP}/flagperf_contract.py"] = {"exists": False, "is_file": True}
    assert judge(json.dumps(data)).ok


def test_master_port_taken_on_node_0_is_named():
    data = json.loads(answer())
    data["master_port"] = {"port": 29501, "free": False, "error": "OSError: [Errno 98] Address already in use"}
    c = judge(json.dumps(data))
    assert c.outcome == "port_in_use" and "MASTER_PORT 29501" in c.detail and "MASTER_PORT" in c.remedy
    data["master_port"] = {"port": 29501, "free": True, "error": None}
    assert judge(json.dumps(data)).ok


def test_collect_max_bytes_reaches_the_transport():
    from flagperf.backends.hostlist import HostListBackend
    seen = {}

    class Transport:
        def fetch_tree(self, remote_dir, local_dir, max_bytes=None):
            seen["cap"] = max_bytes
            return 0, 0

    from flagperf.options.hostlist import HostListOptions
    config = SimpleNamespace(test=SimpleNamespace(runtime="bare", collect_max_bytes=12345),
                             cluster=SimpleNamespace(options=HostListOptions()))
    backend = HostListBackend(config, logging.getLogger("test"))
    backend.transports = {"h": Transport()}
    node = SimpleNamespace(host=SimpleNamespace(address="h"), node_dir="/x", local_dir="/y", label="h_noderank0")
    assert backend.collect(node) == (0, 0) and seen["cap"] == 12345
