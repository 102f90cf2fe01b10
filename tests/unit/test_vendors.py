"""Vendor profiles (flagperf/vendors.py) and ACCE_CONTAINER_OPT translation (flagperf/container_opts.py)."""
from pathlib import Path

import pytest
from docker.models.containers import _create_container_args
from docker.types import DeviceRequest, Ulimit

from flagperf.config import SOURCE_ROOT, load_config
from flagperf.container_opts import merge, translate_container_opt
from flagperf.vendors import ContainerSpec, load_vendor, vendor_names

UNTESTED = ("ascend", "cambricon", "dcu", "iluvatar", "kunlunxin", "metax", "mthreads")
NVIDIA_OPT = ("--gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 --shm-size 32G "
              "-v /data:/data:ro --device=/dev/infiniband")
MINIMAL = "device: cuda\ndist_backend: nccl\nframeworks: [pytorch]\n"


def shipped(name):
    profile, problems = load_vendor(SOURCE_ROOT, name)
    assert problems == [] and profile is not None
    return profile


def sdk_accepts(kwargs):
    """The docker SDK turns the kwargs into a create request (no daemon needed) without complaint."""
    return _create_container_args(dict(kwargs, image="img", version="1.41"))


@pytest.mark.parametrize("name", vendor_names(SOURCE_ROOT))
def test_every_shipped_profile_loads(name):
    profile = shipped(name)
    assert profile.name == name and profile.frameworks == ("pytorch",)
    assert profile.tested is (name in ("nvidia", "cpu"))
    assert profile.device in ("cpu", "cuda") or not profile.tested
    sdk_accepts(profile.container.docker_kwargs("32G", expand=lambda pattern: []))


def test_all_vendors_are_shipped():
    assert set(UNTESTED) | {"cpu", "nvidia"} <= set(vendor_names(SOURCE_ROOT))


def test_nvidia_docker_kwargs():
    profile = shipped("nvidia")
    kw = profile.container.docker_kwargs("16G")
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
    kw = shipped("cpu").container.docker_kwargs("32G")
    assert kw["device_requests"] == [] and kw["devices"] == [] and kw["privileged"] is False
    assert (kw["network_mode"], kw["ipc_mode"], kw["shm_size"]) == ("host", "host", "32G")


def test_untested_profiles_say_so():
    for name in UNTESTED:
        profile = shipped(name)
        assert profile.tested is False and profile.gpu_monitor == "none" and profile.description
    assert shipped("ascend").torch_device == "npu" and shipped("ascend").dist_backend == "hccl"
    assert shipped("kunlunxin").torch_device is None          # not known for sure: left out


def test_device_globs_expand_on_the_host():
    spec = ContainerSpec(devices=("/dev/xpu[0-9]*", "/dev/xpuctrl", "/dev/davinci[0-9]*:rw", "/dev/a:/dev/b"))
    found = {"/dev/xpu[0-9]*": ["/dev/xpu1", "/dev/xpu0"], "/dev/davinci[0-9]*": []}
    assert spec.device_list(expand=found.get) == ["/dev/xpu0", "/dev/xpu1", "/dev/xpuctrl", "/dev/a:/dev/b"]
    assert ContainerSpec(devices=("/dev/x:rw",)).device_list() == ["/dev/x:/dev/x:rw"]


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
    pytest.param("gpu_monitor: dcgm\n", "gpu_monitor", ["expected one of nvml, none", "'dcgm'"],
                 id="gpu-monitor"),
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
    write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL.replace("cuda", "other") + "tested: false\n"
                                                "torch_device: npu\n")
    profile, problems = load_vendor(tmp_path, "acme")
    assert problems == [] and (profile.device, profile.torch_device, profile.tested) == ("other", "npu", False)


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
    kw = profile.container.docker_kwargs("32G")
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
    kw = merge(shipped("nvidia").container, overrides).docker_kwargs("8G")
    assert kw["volumes"] == {"/data": {"bind": "/data", "mode": "ro"}} and kw["devices"] == ["/dev/infiniband"]
    assert kw["shm_size"] == "32G" and kw["device_requests"][0].count == -1
    assert kw["environment"] == {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def test_unsupported_option_is_named():
    overrides, problems = translate_container_opt("--gpus all --cpuset-cpus 0-3")
    assert overrides == {"gpus": "all"}
    assert problems == ["ACCE_CONTAINER_OPT: option '--cpuset-cpus' is not supported (supported: --gpus, "
                        "--device, --volume, --privileged, --ipc, --shm-size, --ulimit, --group-add, --cap-add, "
                        "--security-opt, --env, --runtime, --network, -v, -e, --net)"]


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
                                f"--security-opt, --env, --runtime, --network, -v, -e, --net)"]
    assert not (tmp_path / "result").exists()
