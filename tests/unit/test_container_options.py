"""Container options of a seed guide's ``docker run`` line (``--pid=host``, ``--uts=host``, ``--cap-add=ALL``,
``--mount type=bind``, ``--privileged``, ...): ACCE_CONTAINER_OPT (flagperf/container_opts.py) and a vendor's
``container:`` section (flagperf/vendors.py) carried into ContainerRun (flagperf/containers.py), its
``docker run`` line (--dry-run) and the docker SDK's create arguments (flagperf/runtimes/docker.py)."""
import shlex
from pathlib import Path

import pytest
from docker.models.containers import _create_container_args

from flagperf.config import SOURCE_ROOT
from flagperf.container_opts import merge, translate_container_opt
from flagperf.containers import container_run
from flagperf.runtimes.docker import sdk_kwargs
from flagperf.vendors import ContainerSpec, load_vendor

# The container line of a FlagScale/FlagCX set-up guide, less "docker run" and what flagperf chooses itself
SEED = ("--privileged --net=host --pid=host --cap-add=ALL --shm-size 128G --ulimit memlock=-1 --gpus all "
        "-v /dev/:/dev/ -v /usr/src/:/usr/src/ -v /lib/modules/:/lib/modules/")
MINIMAL = "device: cuda\ndist_backend: nccl\nframeworks: [pytorch]\n"


def nvidia():
    profile, problems = load_vendor(SOURCE_ROOT, "nvidia")
    assert problems == [] and profile is not None
    return profile


def run_of(spec):
    return container_run(spec, name="n", image="img", shm_size_default="32G")


def host_config(run):
    """The HostConfig the docker SDK sends to the daemon for this container (no daemon needed)."""
    kwargs = sdk_kwargs(run, lambda pattern: [])
    return _create_container_args(dict(kwargs, image="img", version="1.41"))["host_config"]


def test_seed_line_is_accepted_and_reaches_the_sdk():
    overrides, problems = translate_container_opt(SEED)
    assert problems == []
    assert overrides == {"privileged": True, "pid_mode": "host", "cap_add": ["ALL"], "shm_size": "128G",
                         "ulimits": {"memlock": (-1, -1)}, "gpus": "all",
                         "volumes": ["/dev/:/dev/", "/usr/src/:/usr/src/", "/lib/modules/:/lib/modules/"]}
    run = run_of(merge(nvidia().container, overrides))
    assert (run.pid_mode, run.privileged, run.cap_add, run.shm_size) == ("host", True, ("ALL",), "128G")
    hc = host_config(run)
    assert hc["PidMode"] == "host" and hc["Privileged"] is True and hc["CapAdd"] == ["ALL"]
    assert hc["NetworkMode"] == "host" and hc["ShmSize"] == 128 * 1024 ** 3
    assert hc["Binds"] == ["/dev/:/dev/:rw", "/usr/src/:/usr/src/:rw", "/lib/modules/:/lib/modules/:rw"]
    assert {"Name": "memlock", "Soft": -1, "Hard": -1} in hc["Ulimits"]
    assert hc["DeviceRequests"][0]["Count"] == -1
    assert "UTSMode" not in hc                      # not asked for


def test_seed_line_in_the_docker_run_line():
    argv = shlex.split(run_of(merge(nvidia().container, translate_container_opt(SEED)[0])).docker_run_line())
    pairs = set(zip(argv, argv[1:]))
    for pair in (("--pid", "host"), ("--cap-add", "ALL"), ("--shm-size", "128G"), ("--gpus", "all"),
                 ("--network", "host"), ("--ulimit", "memlock=-1:-1"), ("-v", "/dev/:/dev/:rw"),
                 ("-v", "/usr/src/:/usr/src/:rw"), ("-v", "/lib/modules/:/lib/modules/:rw")):
        assert pair in pairs, (pair, argv)
    assert "--privileged" in argv and "--uts" not in argv


def test_secure_by_default():
    """Nothing asked for: not privileged, no host process or hostname namespace, no capability added."""
    for spec in (nvidia().container, ContainerSpec()):
        run = run_of(spec)
        argv = shlex.split(run.docker_run_line())
        assert "--privileged" not in argv and "--pid" not in argv and "--uts" not in argv
        assert "--cap-add" not in argv
        hc = host_config(run)
        assert not hc.get("Privileged") and "PidMode" not in hc and "UTSMode" not in hc


@pytest.mark.parametrize("text, expected", [
    ("--pid host", {"pid_mode": "host"}),
    ("--pid=host --uts=host", {"pid_mode": "host", "uts_mode": "host"}),
    ("--uts host", {"uts_mode": "host"}),
    ("--mount type=bind,source=/opt/nccl,target=/opt/nccl", {"volumes": ["/opt/nccl:/opt/nccl"]}),
    ("--mount=type=bind,src=/a,dst=/b,readonly", {"volumes": ["/a:/b:ro"]}),
    ("--mount type=bind,source=/a,destination=/b,ro=true -v /c:/d", {"volumes": ["/a:/b:ro", "/c:/d"]}),
    ("--mount type=bind,source=/a,target=/b,readonly=false", {"volumes": ["/a:/b"]}),
    ("--cap-add SYS_ADMIN --cap-add=IPC_LOCK --cap-add=CAP_SYS_PTRACE",
     {"cap_add": ["SYS_ADMIN", "IPC_LOCK", "CAP_SYS_PTRACE"]}),
    ("--security-opt=apparmor=unconfined --security-opt seccomp=unconfined",
     {"security_opt": ["apparmor=unconfined", "seccomp=unconfined"]}),
    ("--device=/dev/infiniband/uverbs0 --device /dev/infiniband/rdma_cm",
     {"devices": ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]}),
    ("--network=host --net host --ipc=host --privileged", {"ipc_mode": "host", "privileged": True}),
    ("--ulimit memlock=-1:-1 --ulimit nofile=65536", {"ulimits": {"memlock": (-1, -1), "nofile": (65536, 65536)}}),
])
def test_accepted_forms(text, expected):
    assert translate_container_opt(text) == (expected, [])


@pytest.mark.parametrize("text, words", [
    ("--pid=container:abc", ["--pid container:abc: expected host"]),
    ("--pid", ["option --pid needs a value"]),
    ("--uts private", ["--uts private: expected host"]),
    ("--mount type=volume,source=data,target=/data", ["only bind mounts (type=bind)"]),
    ("--mount type=tmpfs,target=/scratch", ["only bind mounts (type=bind)"]),
    ("--mount type=bind,source=rel,target=/b", ["source and target must be absolute paths"]),
    ("--mount type=bind,target=/b", ["source and target must be absolute paths"]),
    ("--mount type=bind,source=/a,target=/b,bind-propagation=rshared", ["'bind-propagation=rshared' is not one"]),
    ("--mount type=bind,source=/a,target=/b,readonly=maybe", ["readonly is true or false"]),
    ("--cap-add 'SYS ADMIN'", ["--cap-add SYS ADMIN: expected a single word"]),
    ("--userns=host", ["option '--userns' is not supported", "--pid, --uts, --mount"]),
    ("--cpus 2", ["option '--cpus' is not supported"]),
    ("--pid=host -it", ["option '-it' is not supported"]),
])
def test_unsupported_or_bad_options_are_one_line_each(text, words):
    overrides, problems = translate_container_opt(text)
    assert len(problems) == 1 and problems[0].startswith("ACCE_CONTAINER_OPT: "), problems
    assert "\n" not in problems[0]
    assert all(w in problems[0] for w in words), problems


def test_merge_keeps_the_vendors_namespaces_unless_overridden():
    spec = ContainerSpec(pid_mode="host", cap_add=("SYS_PTRACE",))
    assert merge(spec, {"cap_add": ["ALL"]}).pid_mode == "host"
    merged = merge(spec, {"uts_mode": "host", "cap_add": ["ALL"]})
    assert (merged.pid_mode, merged.uts_mode, merged.cap_add) == ("host", "host", ("SYS_PTRACE", "ALL"))


# --- the vendor profile's container section ---

def test_vendor_profile_namespaces(tmp_path, write):
    write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL + "container:\n  pid_mode: host\n  uts_mode: host\n"
                                                           "  cap_add: [ALL]\n  privileged: true\n")
    profile, problems = load_vendor(tmp_path, "acme")
    assert problems == []
    spec = profile.container
    assert (spec.pid_mode, spec.uts_mode, spec.cap_add, spec.privileged) == ("host", "host", ("ALL",), True)
    hc = host_config(run_of(spec))
    assert hc["PidMode"] == "host" and hc["UTSMode"] == "host" and hc["Privileged"] is True


@pytest.mark.parametrize("extra, line", [
    ("container:\n  pid_mode: container\n", "container.pid_mode: expected host or null"),
    ("container:\n  uts_mode: 1\n", "container.uts_mode: expected a string or null, got int 1"),
])
def test_vendor_profile_bad_namespace(tmp_path, write, extra, line):
    path = write(tmp_path, "vendors/acme/vendor.yaml", MINIMAL + extra)
    profile, problems = load_vendor(tmp_path, "acme")
    assert profile is None and len(problems) == 1
    assert problems[0].startswith(f"{path}: {line}"), problems


# --- through the CLI: --dry-run shows the options, an unsupported one is a config error ---

def _config(tmp_path, write, opt, runtime="docker"):
    write(tmp_path, "cluster.yaml", "HOSTS: [localhost]\nMASTER_PORT: 29650\n")
    return write(tmp_path, "test.yaml", f"VENDOR: nvidia\nRUNTIME: {runtime}\nFLAGPERF_LOG_PATH: result\n"
                                        f"CLUSTER: cluster.yaml\nACCE_CONTAINER_OPT: {opt!r}\n"
                                        f"CASES:\n  \"gemm:pytorch:H100:1:1:1\": null\n")


def test_dry_run_shows_the_seed_options_in_the_docker_run_line(tmp_path, write, run_cli):
    path = _config(tmp_path, write, SEED + " --uts=host --security-opt seccomp=unconfined "
                                           "--mount type=bind,source=/opt/nccl,target=/opt/nccl,readonly")
    rc, out, err = run_cli("run", "--dry-run", "--config", path, cwd=tmp_path)
    assert rc == 0, out + err
    (line,) = [x.strip() for x in out.splitlines() if x.strip().startswith("docker run ")]
    argv = shlex.split(line)
    pairs = set(zip(argv, argv[1:]))
    for pair in (("--pid", "host"), ("--uts", "host"), ("--cap-add", "ALL"), ("--shm-size", "128G"),
                 ("--gpus", "all"), ("--ulimit", "memlock=-1:-1"), ("-v", "/dev/:/dev/:rw"),
                 ("-v", "/usr/src/:/usr/src/:rw"), ("-v", "/lib/modules/:/lib/modules/:rw"),
                 ("-v", "/opt/nccl:/opt/nccl:ro"), ("--security-opt", "seccomp=unconfined")):
        assert pair in pairs, (pair, line)
    assert "--privileged" in argv
    assert not (tmp_path / "result").exists()


def test_dry_run_without_options_is_not_privileged(tmp_path, write, run_cli):
    rc, out, err = run_cli("run", "--dry-run", "--config", _config(tmp_path, write, "--gpus all"), cwd=tmp_path)
    assert rc == 0, out + err
    (line,) = [x.strip() for x in out.splitlines() if x.strip().startswith("docker run ")]
    assert "--privileged" not in line and "--pid" not in line and "--cap-add" not in line


def test_unsupported_option_is_a_one_line_config_error(tmp_path, write, run_cli):
    path = _config(tmp_path, write, SEED + " --userns=host")
    rc, out, err = run_cli("run", "--dry-run", "--config", path, cwd=tmp_path)
    assert rc == 2 and out == "" and "Traceback" not in err, err
    (line,) = err.splitlines()
    assert line.startswith(f"flagperf: config error: {Path(path).resolve()}:5: ACCE_CONTAINER_OPT: option "
                           f"'--userns' is not supported (supported: "), line
