"""vendor.yaml's dist_backend as torch.distributed's composite spec (``cpu:gloo,cuda:flagcx``) and the module that
registers a backend of none of torch's (``dist_backend_module``): the profile check (flagperf/vendors.py), the
ranks' environment (flagperf/plan.py: FLAGPERF_TORCH_PLUGIN) and the harness's reading of it
(benchmarks/common/harness.py). The run through ``flagperf run`` is tests/e2e/test_dist_backend_plugin.py."""
import importlib.util
from pathlib import Path

import pytest

from flagperf.vendors import backend_problems, load_vendor, parse_backend_spec

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flagperf_harness_backend_spec",
                                               REPO / "benchmarks" / "common" / "harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


def vendor(tmp_path, repo_root, body):
    root = tmp_path / "tree"
    (root / "vendors" / "x").mkdir(parents=True)
    (root / "monitors").symlink_to(repo_root / "monitors", target_is_directory=True)
    (root / "vendors" / "x" / "vendor.yaml").write_text(
        "name: x\ndevice: cuda\nvisible_devices_env: CUDA_VISIBLE_DEVICES\ngpu_monitor: none\nframeworks: [pytorch]\n"
        + body)
    return load_vendor(root, "x")


def test_composite_with_a_registered_backend(tmp_path, repo_root):
    profile, problems = vendor(tmp_path, repo_root,
                               "dist_backend: 'cpu:gloo,cuda:flagcx'\ndist_backend_module: flagcx\n")
    assert problems == []
    assert profile.dist_backend == "cpu:gloo,cuda:flagcx" and profile.plugin_modules == "flagcx"
    profile, problems = vendor(tmp_path / "b", repo_root, "dist_backend: 'cpu:gloo,cuda:nccl'\n")
    assert problems == [] and profile.plugin_modules == ""


@pytest.mark.parametrize("body, expected", [
    ("dist_backend: 'cpu:gloo,cuda:flagcx'\n",
     "dist_backend: 'flagcx' is none of torch's backends (nccl, gloo, hccl, cncl, xccl, mccl): name the module "
     "that registers it in dist_backend_module (e.g. flagcx)"),
    ("dist_backend: 'cpu:gloo,cuda:hccl'\n", "dist_backend: expected nccl or gloo with torch device cuda, got 'hccl'"),
    ("dist_backend: 'cpu:gloo'\n", "dist_backend: 'cpu:gloo' names no backend for the torch device cuda"),
    ("dist_backend: 'cpu:gloo,gpu:nccl'\n", "dist_backend: expected device:backend pairs"),
    ("dist_backend: 'cpu:gloo,cpu:nccl'\n", "dist_backend: device cpu named twice"),
    ("dist_backend: 'Nccl'\n", "dist_backend: expected a backend name or device:backend pairs"),
    ("dist_backend: flagcx\ndist_backend_module: 'flag cx'\n",
     "dist_backend_module: expected a Python module name such as flagcx, got 'flag cx'"),
])
def test_bad_specs(tmp_path, repo_root, body, expected):
    profile, problems = vendor(tmp_path, repo_root, body)
    assert profile is None and any(expected in p for p in problems), problems


def test_parse_and_problems():
    assert parse_backend_spec("nccl") == [(None, "nccl")]
    assert parse_backend_spec("cpu:gloo, cuda:flagcx") == [("cpu", "gloo"), ("cuda", "flagcx")]
    assert backend_problems("flagcx", "cuda", True) == [] and backend_problems("gloo", "cuda", False) == []


def test_harness_reads_the_spec():
    env = {"FLAGPERF_DEVICE": "cpu", "FLAGPERF_DIST_BACKEND": "cpu:testcx,cuda:gloo"}
    assert harness.pick_device_backend(env) == ("cpu", "cpu:testcx,cuda:gloo")
    assert harness.device_backend("cpu:testcx,cuda:gloo", "cpu") == "testcx"
    assert harness.device_backend("cpu:gloo,cuda:nccl", "cuda") == "nccl"
    assert harness.device_backend("nccl", "cuda") == "nccl"
    assert harness.pick_device_backend({"FLAGPERF_DEVICE": "cuda", "FLAGPERF_DIST_BACKEND": "flagcx"}) == \
        ("cuda", "flagcx")
    for spec, expected in (("cpu:gloo", "names no backend for FLAGPERF_DEVICE=cuda"),
                           ("cpu:gloo,cuda:hccl", "the hccl backend needs FLAGPERF_DEVICE=npu"),
                           ("cuda:nccl,cuda:gloo", "each device once")):
        with pytest.raises(ValueError, match=expected):
            harness.pick_device_backend({"FLAGPERF_DEVICE": "cuda", "FLAGPERF_DIST_BACKEND": spec})


def test_harness_imports_every_plugin_module(tmp_path, monkeypatch):
    (tmp_path / "plug_a.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert harness.import_torch_plugin({"FLAGPERF_TORCH_PLUGIN": "json,plug_a"}) == "json,plug_a"
    with pytest.raises(SystemExit):
        harness.import_torch_plugin({"FLAGPERF_TORCH_PLUGIN": "json,no_such_module_here"})
