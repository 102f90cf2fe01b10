"""Vendor profiles (flagperf/vendors.py), their fitness for a probed host (usable_on_host), the harness's
device/backend choice (benchmarks/common/harness.py), and ACCE_CONTAINER_OPT translation
(flagperf/container_opts.py)."""
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from docker.models.containers import _create_container_args
from docker.types import DeviceRequest, Ulimit

from flagperf.config import SOURCE_ROOT, load_config
from flagperf.container_opts import merge, translate_container_opt
from flagperf.containers import container_run
from flagperf.runtimes.docker import expand_devices, sdk_kwargs
from flagperf.vendors import (DEVICE_BACKEND, DIST_BACKENDS, TORCH_DEVICES, ContainerSpec, accel_plugins,
                              load_vendor, usable_on_host, vendor_names)

UNTESTED = ("ascend", "cambricon", "dcu", "iluvatar", "kunlunxin", "metax", "mthreads")
NVIDIA_OPT = ("--gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 --shm-size 32G "
              "-v /data:/data:ro --device=/dev/infiniband")
MINIMAL = "device: cuda\ndist_backend: nccl\nframeworks: [pytorch]\n"


def shipped(name):
    profile, problems = load_vendor(SOURCE_ROOT, name)
    assert problems == [] and profile is not None
    return profile


def docker_kwargs(spec, shm="32G", expand=lambda pattern: []):
    """What the docker runtime passes to containers.create for a node container made from this spec."""
    return sdk_kwargs(container_run(spec, name="n", image="img", shm_size_default=shm), expand)


def sdk_accepts(kwargs):
    """The docker SDK turns the kwargs into a create request (no daemon needed) without complaint."""
    return _create_container_args(dict(kwargs, image=kwargs.get("image", "img"), version="1.41"))


@pytest.mark.parametrize("name", vendor_names(SOURCE_ROOT))
def test_every_shipped_profile_loads(name):
    profile = shipped(name)
    assert profile.name == name and profile.frameworks == ("pytorch",)
    assert profile.tested is (name in ("nvidia", "cpu"))
    assert profile.device in ("cpu", "cuda") or not profile.tested
    assert profile.gpu_monitor in accel_plugins(SOURCE_ROOT) + ["none"]
    assert (profile.torch_device or profile.device) in TORCH_DEVICES + ("other",)
    assert profile.dist_backend in (DEVICE_BACKEND.get(profile.torch_device), "gloo") or profile.torch_device is None
    sdk_accepts(docker_kwargs(profile.container, "32G", expand=lambda pattern: []))


def test_all_vendors_are_shipped():
    assert set(UNTESTED) | {"cpu", "nvidia"} <= set(vendor_names(SOURCE_ROOT))


def test_nvidia_docker_kwargs():
    profile = shipped("nvidia")
    kw = docker_kwargs(profile.container, "16G")
    [request] = kw["device_requests"]
    assert isinstance(request, DeviceRequest) and request.count == -1 and request.capabilities == [["gpu"]]
    assert (kw["privileged"], kw["network_mode"], kw["ipc_mode"], kw["shm_size"]) == (False, "host", "host", "16G")
    assert all(isinstance(u, Ulimit) for u in kw["ulimits"])
    assert {u.name: (u.soft, u.hard) for u in kw["ulimits"]} == {"memlock": (-1, -1),
                                                                  "stack": (67108864, 67108864)}
    assert kw["environment"] == {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    assert "runtime" not in kw and profile.torch_device == "cuda" and profile.gpu_monitor == "nvml"
    host_config = sdk_accepts(kw)["host_config"]
    assert host_config["DeviceRequests"][0]["Count"] == -1 and host_config["NetworkMode"] == "host"


def test_cpu_docker_kwargs():
    kw = docker_kwargs(shipped("cpu").container, "32G")
    assert kw["device_requests"] == [] and kw["devices"] == [] and kw["privileged"] is False
    assert (kw["network_mode"], kw["ipc_mode"], kw["shm_size"]) == ("host", "host", "32G")


def test_untested_profiles_say_so():
    monitors = {"ascend": "npu_smi", "cambricon": "cnmon"}
    plugins = {"ascend": "torch_npu", "cambricon": "torch_mlu", "mthreads": "torch_musa"}
    for name in UNTESTED:
        profile = shipped(name)
        assert profile.tested is False and profile.description
        assert profile.gpu_monitor == monitors.get(name, "none") and profile.torch_plugin == plugins.get(name)
    assert shipped("ascend").torch_device == "npu" and shipped("ascend").dist_backend == "hccl"
    assert shipped("cambricon").torch_device == "mlu" and shipped("mthreads").torch_device == "musa"
    assert shipped("kunlunxin").torch_device is None          # not known for sure: left out
    assert shipped("nvidia").torch_plugin is None and shipped("cpu").torch_plugin is None


def test_device_globs_expand_on_the_host():
    spec = ContainerSpec(devices=("/dev/xpu[0-9]*", "/dev/xpuctrl", "/dev/davinci[0-9]*:rw", "/dev/a:/dev/b"))
    found = {"/dev/xpu[0-9]*": ["/dev/xpu1", "/dev/xpu0"], "/dev/davinci[0-9]*": []}
    assert expand_devices(spec.devices, found.get) == ["/dev/xpu0", "/dev/xpu1", "/dev/xpuctrl", "/dev/a:/dev/b"]
    assert expand_devices(("/dev/x:rw",)) == ["/dev/x:/dev/x:rw"]


# --- schema errors: exactly one line each, naming the file and the key ---

SCHEMA_ERRORS = [
    pytest.param("colour: red\n", "colour", ["unknown key", "known: name, description"], id="unknown-key"),
    pytest.param("container:\n  gpu: all\n", "container.gpu", ["unknown key", "known: gpus, devices"],
                 id="unknown-container-key"),
    pytest.param("container:\n  network_mode: bridge\n", "container.network_mode", ["unknown key"],
                 id="network-mode-not-configurable"),
    pytest.param("container:\n  gpus: some\n", "container.gpus", ["expected all, none or a number"],
                 id="gpus-word"),
    pytest.param("container:\n  gpus: true\n", "container.gpus", ["expected all, none or a number"],
                 id="gpus-bool"),
    pytest.param("container:\n  devices: /dev/xpu0\n", "container.devices", ["expected a list, got str"],
                 id="devices-not-a-list"),
    pytest.param("container:\n  devices: [/dev/xpu0, xpu1]\n", "container.devices[1]",
                 ["expected a device /dev/x", "'xpu1'"], id="bad-device"),
    pytest.param("container:\n  devices: ['/dev/x:/dev/y:rwx']\n", "container.devices[0]",
                 ["expected a device"], id="bad-device-perms"),
    pytest.param("container:\n  devices: ['/dev/xpu*:/dev/y']\n", "container.devices[0]",
                 ["no container path after a glob"], id="glob-with-target"),
    pytest.param("container:\n  volumes: [/data]\n", "container.volumes[0]",
                 ["expected a bind mount /host/path:/container/path[:ro|rw]"], id="volume-without-target"),
    pytest.param("container:\n  volumes: ['/a:/b:rx']\n", "container.volumes[0]", ["expected a bind mount"],
                 id="volume-bad-mode"),
    pytest.param("container:\n  ulimits:\n    memlock: lots\n", "container.ulimits.memlock",
                 ["expected an integer or 'soft:hard'"], id="bad-ulimit-value"),
    pytest.param("container:\n  ulimits:\n    stack: '200:100'\n", "container.ulimits.stack",
                 ["soft must not exceed hard"], id="ulimit-soft-above-hard"),
    pytest.param("container:\n  ulimits:\n    memlok: -1\n", "container.ulimits.memlok",
                 ["expected a ulimit name", "memlock"], id="bad-ulimit-name"),
    pytest.param("container:\n  privileged: yes please\n", "container.privileged", ["expected true or false"],
                 id="privileged-string"),
    pytest.param("container:\n  ipc_mode: shared\n", "container.ipc_mode", ["expected one of host"],
                 id="ipc-mode"),
    pytest.param("container:\n  shm_size: lots\n", "container.shm_size", ["expected a size"], id="shm-size"),
    pytest.param("container:\n  env:\n    A: null\n", "container.env.A", ["expected a string or number"],
                 id="env-null"),
    pytest.param("container:\n  runtime: 'a b'\n", "container.runtime", ["docker runtime name"], id="runtime"),
    pytest.param("container: [gpus]\n", "container", ["expected a mapping, got list"], id="container-list"),
    pytest.param("tested: maybe\n", "tested", ["expected true or false"], id="tested-string"),
    pytest.param("gpu_monitor: dcgm\n", "gpu_monitor", ["expected one of none (the plug-ins in",
                                                         "monitors/accel, or none), got 'dcgm'"], id="gpu-monitor"),
    pytest.param("torch_device: tpu\n", "torch_device",
                 ["expected one of cpu, cuda, npu, mlu, xpu, musa, got 'tpu'"], id="torch-device-unknown"),
    pytest.param("torch_plugin: torch-npu\n", "torch_plugin", ["expected a Python module name", "'torch-npu'"],
                 id="torch-plugin-name"),
    pytest.param("torch_plugin: [torch_npu]\n", "torch_plugin", ["expected a string or null, got list"],
                 id="torch-plugin-list"),
    pytest.param("peaks: peaks.yaml\n", "peaks", ["peak table YAML", "does not exist"], id="peaks-missing"),
    pytest.param("torch_device: npu\n", "torch_device", ["expected 'cuda' (as device)"], id="torch-device-cuda"),
    pytest.param("name: other\n", "name", ["the folder name"], id="name-mismatch"),
]


@pytest.mark.parametrize("extra, key, words", SCHEMA_ERRORS)
def test_schema_error_is_one_line_naming_file_and_key(tmp_path, write, extra, key, words):
    path = write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL + extra)
    profile, problems = load_vendor(tmp_path, "acme")
    assert profile is None and len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: {key}: ") and "\n" not in problems[0], problems
    assert all(w in problems[0] for w in words), problems


def test_device_other_only_in_untested_profiles(tmp_path, write):
    write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL.replace("cuda", "other"))
    profile, problems = load_vendor(tmp_path, "acme")
    assert profile is None and problems == [f"{tmp_path / 'vendors/acme/vendor.yaml'}: device: expected cpu or "
                                            f"cuda: 'other' is only for untested profiles (tested: false)"]
    write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL.replace("cuda", "other").replace("nccl", "hccl")
              + "tested: false\ntorch_device: npu\n")
    profile, problems = load_vendor(tmp_path, "acme")
    assert problems == [] and (profile.device, profile.torch_device, profile.tested) == ("other", "npu", False)


@pytest.mark.parametrize("head, key, words", [
    ("device: cuda\ndist_backend: mpi\n", "dist_backend",
     ["'mpi' is none of torch's backends (nccl, gloo, hccl, cncl, xccl, mccl): name the module that registers it "
      "in dist_backend_module"]),
    ("device: cuda\ndist_backend: hccl\n", "dist_backend",
     ["expected nccl or gloo with torch device cuda, got 'hccl'"]),
    ("device: cpu\ndist_backend: nccl\n", "dist_backend", ["expected gloo or gloo with torch device cpu"]),
    ("device: other\ntorch_device: npu\ndist_backend: nccl\ntested: false\n", "dist_backend",
     ["expected hccl or gloo with torch device npu, got 'nccl'"]),
    ("device: other\ntorch_device: cuda\ndist_backend: nccl\ntested: false\n", "torch_device",
     ["expected one of npu, mlu, xpu, musa with device: other", "got 'cuda'"]),
])
def test_device_and_backend_must_agree(tmp_path, write, head, key, words):
    path = write(tmp_path, "vendors/acme/vendor.yaml", head + "frameworks: [pytorch]\n")
    profile, problems = load_vendor(tmp_path, "acme")
    assert profile is None and len(problems) == 1 and problems[0].startswith(f"{path}: {key}: "), problems
    assert all(w in problems[0] for w in words), problems


@pytest.mark.parametrize("device, backend", [("npu", "hccl"), ("npu", "gloo"), ("mlu", "cncl"), ("xpu", "xccl"),
                                             ("musa", "mccl"), ("musa", "gloo")])
def test_accelerator_devices_with_their_backends(tmp_path, write, device, backend):
    write(tmp_path, "vendors/acme/vendor.yaml", f"device: other\ntorch_device: {device}\ndist_backend: {backend}\n"
                                                f"torch_plugin: vendor_ext.torch_{device}\nframeworks: [pytorch]\n"
                                                "tested: false\n")
    profile, problems = load_vendor(tmp_path, "acme")
    assert problems == [] and (profile.torch_device, profile.dist_backend) == (device, backend)
    assert profile.torch_plugin == f"vendor_ext.torch_{device}"


def test_gpu_monitor_names_a_plugin_of_the_tree(tmp_path, write):
    """The plug-ins are the modules in <root>/monitors/accel/ (helpers named _* excepted), plus none."""
    write(tmp_path, "monitors/accel/acme_smi.py", "SOURCE = 'acme-smi'\n")
    write(tmp_path, "monitors/accel/_cli.py", "")
    write(tmp_path, "monitors/accel/notes.txt", "")
    assert accel_plugins(tmp_path) == ["acme_smi"] and accel_plugins(tmp_path / "nowhere") == []
    assert accel_plugins(SOURCE_ROOT) == ["cnmon", "npu_smi", "nvml"]
    for monitor, ok in (("acme_smi", True), ("none", True), ("_cli", False), ("nvml", False)):
        write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL + f"gpu_monitor: {monitor}\n")
        profile, problems = load_vendor(tmp_path, "acme")
        assert (problems == []) is ok, problems
        if not ok:
            assert problems[0].endswith(f"gpu_monitor: expected one of acme_smi, none (the plug-ins in "
                                        f"{tmp_path / 'monitors' / 'accel'}, or none), got {monitor!r}")


def test_full_container_section(tmp_path, write):
    write(tmp_path, "vendors/acme/peaks.yaml", "{}\n")
    write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL + """\
        peaks: peaks.yaml
        container:
          gpus: 2
          devices: [/dev/kfd, '/dev/dri:/dev/dri:rw']
          group_add: [video, 44]
          cap_add: [SYS_PTRACE]
          security_opt: [seccomp=unconfined]
          volumes: ['/opt/hyhal:/opt/hyhal:ro', '/data:/mnt/data']
          env: {HSA_FORCE_FINE_GRAIN_PCIE: 1}
          shm_size: 64G
          ulimits: {nofile: '1024:4096'}
          privileged: true
          ipc_mode: private
          runtime: nvidia
        """.replace("        ", ""))
    profile, problems = load_vendor(tmp_path, "acme")
    assert problems == []
    assert profile.peaks == (tmp_path / "vendors/acme/peaks.yaml").resolve()
    kw = docker_kwargs(profile.container, "32G")
    [request] = kw["device_requests"]
    assert request.count == 2 and request.capabilities == [["gpu"]]
    assert kw["devices"] == ["/dev/kfd", "/dev/dri:/dev/dri:rw"] and kw["group_add"] == ["video", "44"]
    assert kw["volumes"] == {"/opt/hyhal": {"bind": "/opt/hyhal", "mode": "ro"},
                             "/data": {"bind": "/mnt/data", "mode": "rw"}}
    assert kw["environment"] == {"HSA_FORCE_FINE_GRAIN_PCIE": "1"} and kw["shm_size"] == "64G"
    assert [(u.name, u.soft, u.hard) for u in kw["ulimits"]] == [("nofile", 1024, 4096)]
    assert (kw["privileged"], kw["ipc_mode"], kw["runtime"], kw["cap_add"]) == (True, "private", "nvidia",
                                                                                ["SYS_PTRACE"])
    sdk_accepts(kw)


# --- ACCE_CONTAINER_OPT ---

def test_translate_flagperf_nvidia_options():
    overrides, problems = translate_container_opt(NVIDIA_OPT)
    assert problems == []
    assert overrides == {"gpus": "all", "ipc_mode": "host", "ulimits": {"memlock": (-1, -1),
                                                                        "stack": (67108864, 67108864)},
                         "shm_size": "32G", "volumes": ["/data:/data:ro"], "devices": ["/dev/infiniband"]}
    kw = docker_kwargs(merge(shipped("nvidia").container, overrides), "8G")
    assert kw["volumes"] == {"/data": {"bind": "/data", "mode": "ro"}} and kw["devices"] == ["/dev/infiniband"]
    assert kw["shm_size"] == "32G" and kw["device_requests"][0].count == -1
    assert kw["environment"] == {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def test_unsupported_option_is_named():
    overrides, problems = translate_container_opt("--gpus all --cpuset-cpus 0-3")
    assert overrides == {"gpus": "all"}
    assert problems == ["ACCE_CONTAINER_OPT: option '--cpuset-cpus' is not supported (supported: --gpus, "
                        "--device, --volume, --privileged, --ipc, --shm-size, --ulimit, --group-add, --cap-add, "
                        "--security-opt, --env, --runtime, --network, --pid, --uts, --mount, -v, -e, --net)"]


@pytest.mark.parametrize("text, expected", [
    ("-v /a:/b -v=/c:/d -v/e:/f:ro --volume /g:/h", {"volumes": ["/a:/b", "/c:/d", "/e:/f:ro", "/g:/h"]}),
    ("-e A=1 --env=B=x=y -eC=", {"env": {"A": "1", "B": "x=y", "C": ""}}),
    ("--privileged", {"privileged": True}),
    ("--privileged=false", {"privileged": False}),
    ("--gpus 2", {"gpus": 2}),
    ("--gpus '\"device=0,1\"'", {"gpus": ("0", "1")}),
    ("--gpus device=GPU-abc", {"gpus": ("GPU-abc",)}),
    ("--net=host --network host --ipc private", {"ipc_mode": "private"}),
    ("--group-add video --cap-add SYS_PTRACE --security-opt seccomp=unconfined --runtime=nvidia",
     {"group_add": ["video"], "cap_add": ["SYS_PTRACE"], "security_opt": ["seccomp=unconfined"],
      "runtime": "nvidia"}),
    ("--ulimit nofile=1024:4096", {"ulimits": {"nofile": (1024, 4096)}}),
    ("--device /dev/kfd --device=/dev/dri/ --device /dev/x:rwm", {"devices": ["/dev/kfd", "/dev/dri/", "/dev/x:rwm"]}),
    ("", {}),
])
def test_translate_accepted_forms(text, expected):
    assert translate_container_opt(text) == (expected, [])


@pytest.mark.parametrize("text, words", [
    ("--net bridge", ["--net bridge: expected host"]),
    ("-v /usr/local/Ascend/driver", ["-v /usr/local/Ascend/driver: expected a bind mount"]),
    ("--device xpu0", ["--device xpu0: expected a device"]),
    ("--ulimit memlock", ["--ulimit memlock: expected NAME=SOFT[:HARD]"]),
    ("--ulimit memlock=lots", ["expected an integer or 'soft:hard'"]),
    ("--gpus some", ["--gpus some: expected all"]),
    ("-e A", ["-e A: expected NAME=VALUE"]),
    ("--shm-size", ["option --shm-size needs a value"]),
    ("--ipc=weird", ["expected one of host"]),
    ("image:tag", ["unexpected argument 'image:tag'"]),
    ("--gpus 'all", ["cannot split", "No closing quotation"]),
    ("--rm", ["option '--rm' is not supported"]),
])
def test_translate_problems(text, words):
    overrides, problems = translate_container_opt(text)
    assert len(problems) == 1 and problems[0].startswith("ACCE_CONTAINER_OPT: "), problems
    assert all(w in problems[0] for w in words), problems


def test_merge_adds_and_overrides():
    spec = ContainerSpec(gpus="all", devices=("/dev/a", "/dev/b:/dev/c"), volumes=("/x:/data", "/y:/y"),
                         env=(("A", "1"), ("B", "2")), ulimits=(("memlock", -1, -1),), group_add=("video",))
    merged = merge(spec, {"gpus": ("0",), "devices": ["/dev/z:/dev/c", "/dev/d"], "volumes": ["/w:/data:ro"],
                          "env": {"B": "3", "C": "4"}, "ulimits": {"stack": (1, 2)}, "group_add": ["video"],
                          "privileged": True})
    assert merged.gpus == ("0",) and merged.privileged is True
    assert merged.devices == ("/dev/a", "/dev/z:/dev/c", "/dev/d")
    assert merged.volumes == ("/y:/y", "/w:/data:ro") and merged.group_add == ("video",)
    assert dict(merged.env) == {"A": "1", "B": "3", "C": "4"}
    assert merged.ulimits == (("memlock", -1, -1), ("stack", 1, 2))
    assert spec.devices == ("/dev/a", "/dev/b:/dev/c")                # the vendor's spec is left alone


def test_config_holds_the_merged_container(tmp_path, write):
    path = write(tmp_path, "test.yaml", f"VENDOR: nvidia\nRUNTIME: bare\nFLAGPERF_LOG_PATH: result\n"
                                        f"ACCE_CONTAINER_OPT: '{NVIDIA_OPT} -e NCCL_DEBUG=INFO'\n"
                                        f"CASES:\n  \"gemm:pytorch:local:1:1:1\": null\n")
    cfg = load_config(path)
    assert cfg.container.volumes == ("/data:/data:ro",) and dict(cfg.container.env)["NCCL_DEBUG"] == "INFO"
    assert cfg.container.gpus == "all" and cfg.vendor.container.volumes == ()


@pytest.mark.parametrize("dry_run", [True, False])
def test_unsupported_option_through_the_cli(tmp_path, write, run_cli, dry_run):
    path = write(tmp_path, "test.yaml", "VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: result\n"
                                        "ACCE_CONTAINER_OPT: \"--cpuset-cpus 0-3\"\n"
                                        "CASES:\n  \"gemm:pytorch:local:1:1:1\": null\n")
    rc, out, err = run_cli("run", *(["--dry-run"] if dry_run else []), "--config", path, cwd=tmp_path)
    assert rc == 2 and out == "" and "Traceback" not in err, err
    assert err.splitlines() == [f"flagperf: config error: {Path(path).resolve()}:4: ACCE_CONTAINER_OPT: option "
                                f"'--cpuset-cpus' is not supported (supported: --gpus, --device, --volume, "
                                f"--privileged, --ipc, --shm-size, --ulimit, --group-add, --cap-add, "
                                f"--security-opt, --env, --runtime, --network, --pid, --uts, --mount, -v, -e, "
                                f"--net)"]
    assert not (tmp_path / "result").exists()


# --- usable_on_host: why a profile cannot run on a probed host ---

def probe_info(accel="nvml", count=0, error=None, module=None, found=False, plugin_error=None):
    """launcher/probe.py's answer, as far as usable_on_host reads it."""
    return {"python": [3, 11, 7], "executable": "/usr/bin/python3", "torch": "2.5.1", "torch_error": None,
            "accelerators": {"source": accel, "count": count, "error": error}, "gpus": count, "gpus_from": accel,
            "torch_plugin": {"module": module, "found": found, "error": plugin_error}}


def test_usable_on_host_reasons():
    ascend, nvidia, cpu, metax = shipped("ascend"), shipped("nvidia"), shipped("cpu"), shipped("metax")
    ok = probe_info("npu_smi", 8, module="torch_npu", found=True)
    assert usable_on_host(ascend, ok, "bare") is None and usable_on_host(ascend, ok, "docker") is None
    missing = probe_info("npu_smi", 8, module="torch_npu", plugin_error="No module named 'torch_npu'")
    assert usable_on_host(ascend, missing, "bare") == (
        "its torch plug-in torch_npu is not importable by /usr/bin/python3, the Python that RUNTIME: bare runs "
        "the ranks with (No module named 'torch_npu')")
    assert usable_on_host(ascend, missing, "docker") is None         # the image brings torch_npu
    no_tool = probe_info("npu_smi", 0, "npu-smi not found (looked on PATH)", module="torch_npu", found=True)
    assert usable_on_host(ascend, no_tool, "docker") == ("the npu_smi plug-in cannot count the accelerators: "
                                                         "npu-smi not found (looked on PATH)")
    assert usable_on_host(ascend, probe_info("npu_smi", 0, module="torch_npu", found=True), "docker") == (
        "torch device npu, but the npu_smi plug-in finds no accelerator on the host")
    assert usable_on_host(nvidia, probe_info("nvml", 0), "bare") == (
        "torch device cuda, but the nvml plug-in finds no accelerator on the host")
    assert usable_on_host(nvidia, probe_info("nvml", 2), "bare") is None
    assert usable_on_host(cpu, probe_info("none", 0), "bare") is None
    assert usable_on_host(metax, probe_info("none", 0), "docker") is None        # none: the count is unknown
    both = usable_on_host(ascend, probe_info("npu_smi", 0, "npu-smi info exited with status 1", module="torch_npu"),
                          "bare")
    assert both.count("; ") == 1 and "torch_npu is not importable" in both and "exited with status 1" in both


def test_usable_on_host_ignores_what_the_probe_was_not_asked():
    ascend = shipped("ascend")
    assert usable_on_host(ascend, probe_info("nvml", 0, module=None), "bare") is None   # asked about nvml only
    assert usable_on_host(ascend, {"python": [3, 9, 0], "gpus": 0}, "bare") is None      # an older probe
    assert usable_on_host(ascend, {}, "bare") is None


def test_usable_on_host_with_the_real_probe():
    """The probe run for real on this machine (no accelerators here, no torch_npu)."""
    def probe(*args):
        r = subprocess.run([sys.executable, "-c", (SOURCE_ROOT / "launcher" / "probe.py").read_text(),
                            "--flagperf-path", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    info = probe("--accel", "none")
    assert usable_on_host(shipped("cpu"), info, "bare") is None
    info = probe("--accel", "nvml")
    reason = usable_on_host(shipped("nvidia"), info, "bare")
    assert (reason is None) == (info["accelerators"]["count"] > 0)
    info = probe("--accel", "npu_smi", "--torch-plugin", "torch_npu")
    if not info["torch_plugin"]["found"]:
        assert "torch plug-in torch_npu is not importable" in usable_on_host(shipped("ascend"), info, "bare")


# --- the harness: FLAGPERF_DEVICE / FLAGPERF_DIST_BACKEND / FLAGPERF_TORCH_PLUGIN ---

def load_harness():
    spec = importlib.util.spec_from_file_location("flagperf_harness_under_test",
                                                  SOURCE_ROOT / "benchmarks" / "common" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = load_harness()


def test_harness_and_vendors_agree_on_devices_and_backends():
    assert harness.DEVICE_TYPES == TORCH_DEVICES and harness.DIST_BACKENDS == DIST_BACKENDS
    assert harness.DEVICE_BACKEND == DEVICE_BACKEND


@pytest.mark.parametrize("env, expected", [
    ({}, ("cpu", "gloo")),
    ({"FLAGPERF_DEVICE": "cuda"}, ("cuda", "nccl")),
    ({"FLAGPERF_DEVICE": "npu"}, ("npu", "hccl")),
    ({"FLAGPERF_DEVICE": "mlu"}, ("mlu", "cncl")),
    ({"FLAGPERF_DEVICE": "xpu"}, ("xpu", "xccl")),
    ({"FLAGPERF_DEVICE": "musa"}, ("musa", "mccl")),
    ({"FLAGPERF_DEVICE": " CUDA ", "FLAGPERF_DIST_BACKEND": "Gloo"}, ("cuda", "gloo")),
    ({"FLAGPERF_DEVICE": "npu", "FLAGPERF_DIST_BACKEND": "gloo"}, ("npu", "gloo")),
    ({"FLAGPERF_DEVICE": "cpu", "FLAGPERF_DIST_BACKEND": "gloo"}, ("cpu", "gloo")),
])
def test_pick_device_backend(env, expected):
    assert harness.pick_device_backend(env) == expected


@pytest.mark.parametrize("env, message", [
    ({"FLAGPERF_DEVICE": "tpu"}, "FLAGPERF_DEVICE must be one of cpu, cuda, npu, mlu, xpu, musa, got 'tpu'"),
    ({"FLAGPERF_DEVICE": ""}, "FLAGPERF_DEVICE must be one of cpu, cuda, npu, mlu, xpu, musa, got ''"),
    ({"FLAGPERF_DIST_BACKEND": "no such"}, "FLAGPERF_DIST_BACKEND: expected a backend name or device:backend "
                                           "pairs, got 'no such'"),
    ({"FLAGPERF_DIST_BACKEND": "nccl"}, "the nccl backend needs FLAGPERF_DEVICE=cuda, got cpu (use gloo)"),
    ({"FLAGPERF_DEVICE": "cuda", "FLAGPERF_DIST_BACKEND": "hccl"},
     "the hccl backend needs FLAGPERF_DEVICE=npu, got cuda (use nccl or gloo)"),
    ({"FLAGPERF_DEVICE": "mlu", "FLAGPERF_DIST_BACKEND": "mccl"},
     "the mccl backend needs FLAGPERF_DEVICE=musa, got mlu (use cncl or gloo)"),
])
def test_pick_device_backend_refuses(env, message):
    with pytest.raises(ValueError) as exc:
        harness.pick_device_backend(env)
    assert str(exc.value) == message


def test_torch_plugin_import(capsys):
    assert harness.import_torch_plugin({}) is None
    assert harness.import_torch_plugin({"FLAGPERF_TORCH_PLUGIN": ""}) is None
    assert harness.import_torch_plugin({"FLAGPERF_TORCH_PLUGIN": "json"}) == "json"
    with pytest.raises(SystemExit) as exc:
        harness.import_torch_plugin({"FLAGPERF_TORCH_PLUGIN": "torch_no_such_plugin"})
    assert exc.value.code == harness.CONFIG_ERROR_EXIT == 2
    assert capsys.readouterr().err == ("config error: FLAGPERF_TORCH_PLUGIN=torch_no_such_plugin: cannot import "
                                       "torch_no_such_plugin: ModuleNotFoundError: No module named "
                                       "'torch_no_such_plugin'\n")


def dist_env(monkeypatch, **env):
    for key in ("FLAGPERF_DEVICE", "FLAGPERF_DIST_BACKEND", "FLAGPERF_TORCH_PLUGIN", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in dict(dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"), **env).items():
        monkeypatch.setenv(key, value)


def test_setup_distributed_drives_the_device_through_torch_device_module(monkeypatch):
    """A non-CUDA device without its hardware: the vendor's plug-in (here a module that stands in for, say,
    torch_xpu_ext) is imported first, then every device call goes to torch.<device type>."""
    torch = pytest.importorskip("torch")
    calls = []
    fake = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,
                                 set_device=lambda i: calls.append(("set_device", i)),
                                 synchronize=lambda d=None: calls.append(("synchronize", str(d))),
                                 get_device_name=lambda d=None: "Fake XPU")
    plugin = types.ModuleType("fake_vendor_torch_plugin")
    monkeypatch.setitem(sys.modules, "fake_vendor_torch_plugin", plugin)
    monkeypatch.setattr(torch, "xpu", fake)
    dist_env(monkeypatch, FLAGPERF_DEVICE="xpu", FLAGPERF_TORCH_PLUGIN="fake_vendor_torch_plugin", LOCAL_RANK="1")
    ctx = harness.setup_distributed({})
    assert (str(ctx.device), ctx.backend, ctx.initialized) == ("xpu:1", "xccl", False)
    assert ctx.is_cuda is False and ctx.is_accelerator is True and ctx.device_module is fake
    ctx.sync()
    assert calls == [("set_device", 1), ("synchronize", "xpu:1")]
    env = harness.env_info(ctx)
    assert (env["device"], env["device_name"], env["torch_plugin"], env["backend"]) == (
        "xpu", "Fake XPU", "fake_vendor_torch_plugin", "xccl")
    timing = harness.time_fn(lambda: None, ctx, warmup=1, iters=2, repeats=2)
    assert len(timing["samples"]) == 2 and calls.count(("synchronize", "xpu:1")) >= 5   # synced around samples


@pytest.mark.parametrize("env, words", [
    (dict(FLAGPERF_DEVICE="npu"), "FLAGPERF_DEVICE=npu but torch has no torch.npu (set FLAGPERF_TORCH_PLUGIN"),
    (dict(FLAGPERF_DEVICE="mlu", FLAGPERF_TORCH_PLUGIN="json"), "torch has no torch.mlu after importing json"),
    (dict(FLAGPERF_DEVICE="musa", FLAGPERF_TORCH_PLUGIN="torch_musa_missing"),
     "FLAGPERF_TORCH_PLUGIN=torch_musa_missing: cannot import torch_musa_missing"),
    (dict(FLAGPERF_DEVICE="cpu", FLAGPERF_DIST_BACKEND="hccl"), "the hccl backend needs FLAGPERF_DEVICE=npu"),
    (dict(FLAGPERF_DEVICE="cuda"), "FLAGPERF_DEVICE=cuda but torch.cuda.is_available() is False"),
    (dict(FLAGPERF_DEVICE="cuda", LOCAL_RANK="3"), "LOCAL_RANK=3 but only 2 visible cuda devices"),
])
def test_setup_distributed_config_errors(monkeypatch, capsys, env, words):
    torch = pytest.importorskip("torch")
    if env.get("LOCAL_RANK"):       # a host with two GPUs, as torch.cuda would report it
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    else:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dist_env(monkeypatch, **env)
    with pytest.raises(SystemExit) as exc:
        harness.setup_distributed({})
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("config error: ") and words in err, err
