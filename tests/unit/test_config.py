"""Test and cluster configuration (flagperf/config.py).

Every configuration error goes through the real CLI: exit code 2, one line per problem on stderr naming the
file (with the line where YAML gives one), the key and what was expected, and no traceback. The positive
cases (path resolution, overrides, defaults, VENDOR: auto) go through ``load_config`` directly.
"""
import sys
from pathlib import Path

import pytest

from flagperf.config import SOURCE_ROOT, load_config
from flagperf.errors import ConfigError

PREFIX = "flagperf: config error: "
CASE1 = '"gemm:pytorch:local:1:1:1": null'


def conf(*extra, cases=(CASE1,), vendor="cpu", runtime="bare"):
    """A test config: VENDOR (line 1), RUNTIME (line 2), FLAGPERF_LOG_PATH (line 3), then ``extra`` from
    line 4 on, then CASES."""
    lines = []
    if vendor is not None:
        lines.append(f"VENDOR: {vendor}")
    if runtime is not None:
        lines.append(f"RUNTIME: {runtime}")
    lines.append("FLAGPERF_LOG_PATH: result")
    lines += extra
    if cases is not None:
        lines.append("CASES:")
        lines += [f"  {c}" for c in cases]
    return "\n".join(lines) + "\n"


def cli_config_error(tmp_path, run_cli, args, expected, cwd=None):
    """Run ``flagperf run ARGS --dry-run`` and ``flagperf run ARGS``; both must exit 2 with exactly the
    expected problems, one line each. ``expected``: [(file name in tmp_path, line or None, [substrings])]."""
    results = {}
    for extra in (["--dry-run"], []):  # dry run first: a config that is valid by mistake must not run
        rc, out, err = run_cli("run", *args, *extra, cwd=cwd or tmp_path)
        what = f"flagperf run {' '.join(map(str, args + extra))}\nstdout:\n{out}\nstderr:\n{err}"
        assert rc == 2, what
        assert "Traceback" not in err and "Traceback" not in out, what
        assert out == "", what
        lines = err.splitlines()
        assert all(line.startswith(PREFIX) for line in lines), what
        assert len(lines) == len(expected), what
        remaining = list(lines)
        for name, line, words in expected:
            head = PREFIX + str((tmp_path / name).resolve()) + (f":{line}: " if line else ": ")
            words = [w.format(tmp=tmp_path.resolve()) for w in words]
            match = [x for x in remaining if x.startswith(head) and all(w in x for w in words)]
            assert match, f"no line starts with {head!r} and holds {words}\n{what}"
            remaining.remove(match[0])
        results[bool(extra)] = lines
        assert not (tmp_path / "result").exists(), what
    assert results[True] == results[False]
    return results[True]


# (files {name: text}, extra CLI args, expected [(file, line, [substrings])])
ERRORS = [
    pytest.param({"test.yaml": conf() + " bad: indent\n"}, [],
                 [("test.yaml", 6, ["YAML syntax error"])], id="yaml-syntax"),
    pytest.param({"test.yaml": "VENDOR: cpu\nRUNTIME: bare\nCASES: [unclosed,\n"}, [],
                 [("test.yaml", 4, ["YAML syntax error"])], id="yaml-syntax-eof"),
    pytest.param({"test.yaml": conf("RUNTIME: bare")}, [],
                 [("test.yaml", 4, ["YAML syntax error", "duplicate key 'RUNTIME'"])], id="yaml-duplicate-key"),
    pytest.param({"test.yaml": "- VENDOR\n- cpu\n"}, [],
                 [("test.yaml", None, ["expected a mapping"])], id="not-a-mapping"),
    pytest.param({"test.yaml": conf("VENDER: cpu")}, [],
                 [("test.yaml", 4, ["VENDER: unknown key; did you mean VENDOR?"])], id="unknown-key-suggestion"),
    pytest.param({"test.yaml": conf("BANANA: 1")}, [],
                 [("test.yaml", 4, ["BANANA: unknown key; known keys: VENDOR, RUNTIME"])], id="unknown-key"),
    pytest.param({"test.yaml": conf('CLEAR_CACHES: "yes please"')}, [],
                 [("test.yaml", 4, ["CLEAR_CACHES: expected true or false", "'yes please'"])],
                 id="clear-caches-string"),
    pytest.param({"test.yaml": conf("MONITOR_INTERVAL: -1")}, [],
                 [("test.yaml", 4, ["MONITOR_INTERVAL: expected a number of seconds from 0.05 to 3600, got -1"])],
                 id="monitor-interval-negative"),
    pytest.param({"test.yaml": conf("MONITOR_INTERVAL: fast")}, [],
                 [("test.yaml", 4, ["MONITOR_INTERVAL: expected a number", "'fast'"])],
                 id="monitor-interval-string"),
    pytest.param({"test.yaml": conf("MONITOR_INTERVAL: true")}, [],
                 [("test.yaml", 4, ["MONITOR_INTERVAL: expected a number", "True"])],
                 id="monitor-interval-bool"),
    pytest.param({"test.yaml": conf("CASE_TIMEOUT: 0")}, [],
                 [("test.yaml", 4, ["CASE_TIMEOUT: expected a number of seconds > 0 and at most 2592000 (30 days), "
                                    "got 0"])], id="case-timeout"),
    pytest.param({"test.yaml": conf('SHM_SIZE: "lots"')}, [],
                 [("test.yaml", 4, ["SHM_SIZE: expected a size such as 32G", "'lots'"])], id="shm-size"),
    pytest.param({"test.yaml": conf("FLAGPERF_LOG_LEVEL: loud")}, [],
                 [("test.yaml", 4, ["FLAGPERF_LOG_LEVEL: expected one of debug, info, warning, error",
                                    "'loud'"])], id="log-level"),
    pytest.param({"test.yaml": conf("ACCE_VISIBLE_DEVICE_ENV_NAME: 1-BAD")}, [],
                 [("test.yaml", 4, ["ACCE_VISIBLE_DEVICE_ENV_NAME: expected an environment variable name"])],
                 id="visible-env-name"),
    pytest.param({"test.yaml": conf(runtime="podman")}, [],
                 [("test.yaml", 2, ["RUNTIME: expected one of bare, docker (the runtimes of SCHEDULER 'ssh'), "
                                    "got 'podman'"])], id="runtime-unknown"),
    pytest.param({"test.yaml": conf("DOCKER_BUILD_ARGS: [1]")}, [],
                 [("test.yaml", 4, ["DOCKER_BUILD_ARGS: expected a mapping"])], id="build-args-type"),
    pytest.param({"test.yaml": conf("EXTRA_CA_BUNDLE: missing.pem")}, [],
                 [("test.yaml", 4, ["EXTRA_CA_BUNDLE: expected a CA bundle file", "missing.pem"])],
                 id="ca-bundle-missing"),
    pytest.param({"test.yaml": conf(vendor="amd")}, [],
                 [("test.yaml", 1, ["VENDOR: no vendor 'amd'", "expected one of: auto, ", "cpu", "nvidia"])],
                 id="vendor-missing"),
    pytest.param({"test.yaml": conf(cases=None)}, [],
                 [("test.yaml", None, ["CASES: required key is missing"])], id="cases-missing"),
    pytest.param({"test.yaml": conf("CASES: {}", cases=None)}, [],
                 [("test.yaml", 4, ["CASES: expected a non-empty mapping"])], id="cases-empty"),
    pytest.param({"test.yaml": conf(cases=['"gemm:pytorch:local:1:1": null'])}, [],
                 [("test.yaml", 5, ["CASES['gemm:pytorch:local:1:1']: expected 6 fields", "got 5"])],
                 id="case-5-fields"),
    pytest.param({"test.yaml": conf(cases=['"gemm:pytorch:local:2:1:1": null'])}, [],
                 [("test.yaml", 5, ["CASES['gemm:pytorch:local:2:1:1']: nnodes 2 exceeds the 1 host(s)"])],
                 id="nnodes-over-default-cluster"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml", cases=['"gemm:pytorch:local:3:1:1": null']),
                  "cluster.yaml": "HOSTS:\n  - localhost\n  - localhost\n"}, [],
                 [("test.yaml", 6, ["nnodes 3 exceeds the 2 host(s) in {tmp}/cluster.yaml"])],
                 id="nnodes-over-cluster"),
    pytest.param({"test.yaml": conf(cases=['"nosuch:pytorch:local:1:1:1": null'])}, [],
                 [("test.yaml", 5, ["CASES['nosuch:pytorch:local:1:1:1']: model 'nosuch' has no benchmark",
                                    "main.py"])], id="model-missing"),
    pytest.param({"test.yaml": conf(cases=['"gemmm:pytorch:local:1:1:1": null'])}, [],
                 [("test.yaml", 5, ["model 'gemmm' has no benchmark", "did you mean gemm?"])],
                 id="model-misspelt"),
    pytest.param({"test.yaml": conf(cases=['"gemm:paddle:local:1:1:1": null'])}, [],
                 [("test.yaml", 5, ["CASES['gemm:paddle:local:1:1:1']: framework 'paddle' is not provided by "
                                    "vendor 'cpu'; expected one of: pytorch"])], id="framework"),
    pytest.param({"test.yaml": conf(cases=['"gemm:pytorch:local:1:1:1": nodata'])}, [],
                 [("test.yaml", 5, ["CASES['gemm:pytorch:local:1:1:1']: data directory {tmp}/nodata does not "
                                    "exist on localhost"])], id="data-dir-missing"),
    pytest.param({"test.yaml": conf(cases=['"gemm:pytorch:local:1:1:1": 5'])}, [],
                 [("test.yaml", 5, ["expected the data directory as a string"])], id="data-dir-type"),
    pytest.param({}, ["--config", "nope.yaml"],
                 [("nope.yaml", None, ["file not found"])], id="test-config-missing"),
    pytest.param({"test.yaml": conf("CLUSTER: nocluster.yaml")}, ["--config", "test.yaml"],
                 [("test.yaml", 4, ["CLUSTER: {tmp}/nocluster.yaml: file not found"])],
                 id="cluster-missing-via-CLUSTER"),
    pytest.param({"test.yaml": conf()}, ["--config", "test.yaml", "--cluster", "nocluster.yaml"],
                 [("nocluster.yaml", None, ["--cluster: file not found"])], id="cluster-missing-via-option"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"), "cluster.yaml": "HOSTS:\n  - localhost\n\tbad: x\n"},
                 [], [("cluster.yaml", 3, ["YAML syntax error"])], id="cluster-yaml-syntax"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"), "cluster.yaml": "HOSTS:\n  - localhost\nSSH_PROT: 22\n"},
                 [], [("cluster.yaml", 3, ["SSH_PROT: unknown key; did you mean SSH_PORT?"])],
                 id="cluster-unknown-key"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"),
                  "cluster.yaml": "HOSTS:\n  - localhost\n  - HOST: localhost\n    SSH_PROT: 22\n"},
                 [], [("cluster.yaml", 4, ["HOSTS[1].SSH_PROT: unknown key; did you mean SSH_PORT?"])],
                 id="host-entry-unknown-key"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"), "cluster.yaml": "SSH_PORT: 22\n"},
                 [], [("cluster.yaml", None, ["HOSTS: required key is missing"])], id="cluster-hosts-missing"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"), "cluster.yaml": "HOSTS: []\n"},
                 [], [("cluster.yaml", 1, ["HOSTS: expected a non-empty list"])], id="cluster-hosts-empty"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"), "cluster.yaml": "HOSTS:\n  - SSH_PORT: 22\n"},
                 [], [("cluster.yaml", None, ["HOSTS[0]: HOST is required"])], id="host-entry-without-HOST"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"), "cluster.yaml": "HOSTS:\n  - 'bad host!'\n"},
                 [], [("cluster.yaml", 1, ["HOSTS[0]: 'bad host!' is not a host name or address"])],
                 id="host-bad-address"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"),
                  "cluster.yaml": "HOSTS:\n  - localhost\nSSH_PORT: 70000\n"},
                 [], [("cluster.yaml", 3, ["SSH_PORT: expected a TCP port 1-65535, got 70000"])], id="port-too-big"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"),
                  "cluster.yaml": "HOSTS:\n  - localhost\nMASTER_PORT: 0\n"},
                 [], [("cluster.yaml", 3, ["MASTER_PORT: expected a TCP port 1-65535, got 0"])], id="port-zero"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"),
                  "cluster.yaml": "HOSTS:\n  - HOST: localhost\n    SSH_PORT: abc\n"},
                 [], [("cluster.yaml", 3, ["HOSTS[0].SSH_PORT: expected a TCP port 1-65535 (a number, or a string "
                                          "of digits), got 'abc'"])],
                 id="host-port-string"),
    pytest.param({"test.yaml": conf("CLUSTER: cluster.yaml"),
                  "cluster.yaml": "HOSTS:\n  - HOST: localhost\n    SSH_PORT: -5\n"},
                 [], [("cluster.yaml", 3, ["HOSTS[0].SSH_PORT: expected a TCP port 1-65535, got -5"])],
                 id="host-port-negative"),
]


@pytest.mark.parametrize("files, args, expected", ERRORS)
def test_config_error_through_cli(tmp_path, write, run_cli, files, args, expected):
    for name, text in files.items():
        write(tmp_path, name, text)
    cli_config_error(tmp_path, run_cli, args or ["--config", tmp_path / "test.yaml"], expected)



@pytest.mark.parametrize("field, index", [("nnodes", 3), ("nproc", 4), ("repeat", 5)])
@pytest.mark.parametrize("value", ["0", "-1", "1.5", "x"])
def test_case_number_fields_through_cli(tmp_path, write, run_cli, field, index, value):
    parts = ["gemm", "pytorch", "local", "1", "1", "1"]
    parts[index] = value
    key = ":".join(parts)
    write(tmp_path, "test.yaml", conf(cases=[f'"{key}": null']))
    cli_config_error(tmp_path, run_cli, ["--config", tmp_path / "test.yaml"],
                     [("test.yaml", 5, [f"CASES[{key!r}]: {field} must be a positive integer"
                                         + {"nproc": " or auto", "nnodes": ", each or pairs"}.get(field, "")
                                         + f", got {value!r}"])])


def test_several_problems_reported_together(tmp_path, write, run_cli):
    write(tmp_path, "test.yaml", conf(
        "VENDER: cpu",                      # 4
        'CLEAR_CACHES: "yes please"',       # 5
        "SHM_SIZE: lots",                   # 6
        "CLUSTER: cluster.yaml",            # 7
        cases=['"gemm:pytorch:local:1:1": null',         # 9
               '"nosuch:pytorch:local:1:1:1": null',     # 10
               '"gemm:pytorch:local:1:0:1": null']))     # 11
    write(tmp_path, "cluster.yaml", "HOSTS:\n  - localhost\nSSH_PROT: 22\n")
    lines = cli_config_error(tmp_path, run_cli, ["--config", tmp_path / "test.yaml"], [
        ("test.yaml", 4, ["VENDER: unknown key"]),
        ("test.yaml", 5, ["CLEAR_CACHES: expected true or false"]),
        ("test.yaml", 6, ["SHM_SIZE: expected a size"]),
        ("test.yaml", 9, ["expected 6 fields"]),
        ("test.yaml", 10, ["model 'nosuch' has no benchmark"]),
        ("test.yaml", 11, ["nproc must be a positive integer"]),
        ("cluster.yaml", 3, ["SSH_PROT: unknown key"]),
    ])
    assert len(lines) == 7


def test_config_is_a_directory_is_a_usage_error(tmp_path, run_cli):
    rc, out, err = run_cli("run", "--config", tmp_path, "--dry-run")
    assert rc == 2
    assert "Traceback" not in err
    assert "--config" in err


# ---------------------------------------------------------------------------------------------------------
# load_config directly


def cpu_detector():
    return "cpu", "fake detector: no GPU"


def test_relative_paths_resolve_against_the_file_folder(tmp_path, write, monkeypatch):
    conf_dir = tmp_path / "conf" / "sub"
    (conf_dir / "data").mkdir(parents=True)
    test = write(conf_dir, "test.yaml", """\
        VENDOR: cpu
        RUNTIME: bare
        FLAGPERF_PATH: ..
        FLAGPERF_LOG_PATH: ../result
        CLUSTER: clusters/cluster.yaml
        CASES:
          "gemm:pytorch:local:1:1:1": data
          "gemm:pytorch:local:1:1:2": ./data/../data
          "gemm:pytorch:local:1:1:3": null
        """)
    write(conf_dir, "clusters/cluster.yaml", """\
        HOSTS:
          - localhost
          - HOST: localhost
            SSH_KEY: keys/host_key
            FLAGPERF_PATH: deploy
        SSH_KEY: keys/id_ed25519
        KNOWN_HOSTS: known
        """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(test, detect=cpu_detector)
    assert cfg.test.path == test.resolve()
    assert cfg.test.log_path == (tmp_path / "conf" / "result").resolve()
    assert cfg.test.flagperf_path == str((tmp_path / "conf").resolve())
    assert cfg.cluster.path == (conf_dir / "clusters" / "cluster.yaml").resolve()
    assert [c.data_dir for c in cfg.test.cases] == [str((conf_dir / "data").resolve())] * 2 + [None]
    clusters = (conf_dir / "clusters").resolve()
    h0, h1 = cfg.cluster.hosts
    assert h0.ssh_key == str(clusters / "keys" / "id_ed25519")
    assert h1.ssh_key == str(clusters / "keys" / "host_key")
    assert h1.flagperf_path == str(clusters / "deploy")
    assert h0.flagperf_path == cfg.test.flagperf_path
    assert cfg.cluster.options.known_hosts == str(clusters / "known")
    assert not (elsewhere / "result").exists() and not (tmp_path / "conf" / "result").exists()


def test_relative_test_path_resolves_against_cwd(tmp_path, write, monkeypatch):
    write(tmp_path, "a/test.yaml", conf())
    monkeypatch.chdir(tmp_path / "a")
    cfg = load_config("test.yaml", detect=cpu_detector)
    assert cfg.test.path == (tmp_path / "a" / "test.yaml").resolve()
    assert cfg.test.log_path == (tmp_path / "a" / "result").resolve()


def test_cluster_option_overrides_CLUSTER(tmp_path, write, monkeypatch):
    test = write(tmp_path, "test.yaml", conf("CLUSTER: does-not-exist.yaml"))
    write(tmp_path, "other/cluster.yaml", "HOSTS:\n  - 10.0.0.7\n  - 10.0.0.8\nMASTER_PORT: 30000\n")
    monkeypatch.chdir(tmp_path / "other")
    cfg = load_config(test, "cluster.yaml", detect=cpu_detector)   # relative --cluster: against the cwd
    assert cfg.cluster.path == (tmp_path / "other" / "cluster.yaml").resolve()
    assert [h.address for h in cfg.cluster.hosts] == ["10.0.0.7", "10.0.0.8"]
    assert cfg.cluster.master_port == 30000
    assert cfg.to_dict()["CLUSTER"] == str(cfg.cluster.path)


def test_per_host_overrides_apply_only_to_that_host(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf("FLAGPERF_PATH: /opt/flagperf", "CLUSTER: cluster.yaml"))
    write(tmp_path, "cluster.yaml", """\
        HOSTS:
          - 10.0.0.1
          - HOST: 10.0.0.2
            SSH_PORT: 2222
            SSH_USER: alice
            SSH_KEY: /keys/alice
            PYTHON: /opt/conda/bin/python3
            FLAGPERF_PATH: /data/flagperf
          - 10.0.0.3
          - HOST: localhost
        SSH_PORT: 2200
        SSH_USER: bob
        SSH_KEY: /keys/bob
        PYTHON: python3.11
        MASTER_PORT: 29999
        """)
    cfg = load_config(test, detect=cpu_detector)
    hosts = cfg.cluster.hosts
    assert [h.address for h in hosts] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "localhost"]
    for h in (hosts[0], hosts[2], hosts[3]):
        assert (h.ssh_port, h.ssh_user, h.ssh_key, h.python, h.flagperf_path) == \
            (2200, "bob", "/keys/bob", "python3.11", "/opt/flagperf")
    h = hosts[1]
    assert (h.ssh_port, h.ssh_user, h.ssh_key, h.python, h.flagperf_path) == \
        (2222, "alice", "/keys/alice", "/opt/conda/bin/python3", "/data/flagperf")
    assert cfg.cluster.master_port == 29999
    assert [h.is_local for h in hosts] == [False, False, False, True]
    assert hosts[0].address == "10.0.0.1" and hosts[3].is_local


def test_cluster_defaults_without_cluster_keys(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf("CLUSTER: cluster.yaml"))
    write(tmp_path, "cluster.yaml", "HOSTS:\n  - localhost\n  - 10.0.0.2\n")
    cfg = load_config(test, detect=cpu_detector)
    local, remote = cfg.cluster.hosts
    assert local.python == sys.executable and remote.python == "python3"
    # Unset port and user stay None: the SSH transport takes them from ~/.ssh/config, else 22 and the current user.
    assert local.ssh_port is remote.ssh_port is None
    assert local.ssh_user is remote.ssh_user is None
    assert local.ssh_key is None and remote.ssh_key is None
    assert cfg.cluster.master_port == 29501
    assert cfg.cluster.options.known_hosts == str(Path("~/.ssh/known_hosts").expanduser())


def test_defaults(tmp_path, write):
    test = write(tmp_path, "test.yaml", 'VENDOR: cpu\nRUNTIME: bare\nCASES:\n  "gemm:pytorch:local:1:2:3": null\n')
    cfg = load_config(test, detect=cpu_detector)
    t = cfg.test
    assert t.vendor == "cpu" and t.vendor_reason == "set in the test config"
    assert t.runtime == "bare"
    assert t.flagperf_path == str(SOURCE_ROOT)
    assert t.log_path == SOURCE_ROOT / "result"
    assert (t.log_level, t.shm_size, t.clear_caches, t.acce_container_opt, t.pip_source) == \
        ("info", "32G", False, "", "")
    assert t.monitor_interval == 1.0 and t.case_timeout == 7200.0
    assert t.visible_devices_env is None                      # the cpu vendor has none
    assert cfg.cluster.path is None
    assert [(h.address, h.ssh_port, h.python) for h in cfg.cluster.hosts] == [("localhost", None, sys.executable)]
    assert cfg.cluster.hosts[0].flagperf_path == str(SOURCE_ROOT)
    assert cfg.cluster.master_port == 29501
    (case,) = t.cases
    assert (case.model, case.framework, case.hw, case.nnodes, case.nproc, case.repeat, case.data_dir) == \
        ("gemm", "pytorch", "local", 1, 2, 3, None)
    d = cfg.to_dict()
    assert d["RUNTIME"] == "bare" and d["CASES"] == {"gemm:pytorch:local:1:2:3": None}


def test_values_are_taken(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf(
        "FLAGPERF_LOG_LEVEL: DEBUG", "SHM_SIZE: 512M", "CLEAR_CACHES: true", "MONITOR_INTERVAL: 0.25",
        "CASE_TIMEOUT: 30", "ACCE_CONTAINER_OPT: --ipc=host", "ACCE_VISIBLE_DEVICE_ENV_NAME: MY_DEVICES",
        "PIP_SOURCE: https://pypi.example/simple"))
    t = load_config(test, detect=cpu_detector).test
    assert (t.log_level, t.shm_size, t.clear_caches, t.monitor_interval, t.case_timeout) == \
        ("debug", "512M", True, 0.25, 30.0)
    assert (t.acce_container_opt, t.visible_devices_env, t.pip_source) == \
        ("--ipc=host", "MY_DEVICES", "https://pypi.example/simple")


def test_runtime_default_is_bare_for_a_flagperf_yaml(tmp_path, write):
    """A flagperf YAML without RUNTIME runs bare, as the embedded default; FlagPerf's own files (test_conf.py,
    a host.yaml with its HOSTS, a base config) keep docker: their cases always ran in containers."""
    test = write(tmp_path, "test.yaml", conf(runtime=None))
    assert load_config(test, detect=cpu_detector).test.runtime == "bare"
    host_yaml = write(tmp_path, "host.yaml", "HOSTS: [localhost]\n" + conf(runtime=None))
    assert load_config(host_yaml, detect=cpu_detector).test.runtime == "docker"
    py = write(tmp_path, "test_conf.py", 'VENDOR = "cpu"\nFLAGPERF_LOG_PATH = "result"\n'
                                         'CASES = {"gemm:pytorch:local:1:1:1": None}\n')
    assert load_config(py, detect=cpu_detector).test.runtime == "docker"
    explicit = write(tmp_path, "docker.yaml", conf(runtime="docker"))
    assert load_config(explicit, detect=cpu_detector).test.runtime == "docker"


def test_vendor_auto_uses_the_detector(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf(vendor="auto"))
    calls = []

    def detect():
        calls.append(1)
        return "nvidia", "fake: 8 GPUs"

    cfg = load_config(test, detect=detect)
    assert calls == [1]
    assert cfg.test.vendor == "nvidia" and cfg.vendor.name == "nvidia"
    assert "auto" in cfg.test.vendor_reason and "fake: 8 GPUs" in cfg.test.vendor_reason
    assert cfg.test.visible_devices_env == "CUDA_VISIBLE_DEVICES"
    assert cfg.to_dict()["VENDOR"] == "nvidia"


def test_vendor_omitted_means_auto(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf(vendor=None))
    cfg = load_config(test, detect=cpu_detector)
    assert cfg.test.vendor == "cpu" and "fake detector" in cfg.test.vendor_reason


def test_vendor_set_does_not_detect(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf(vendor="cpu"))

    def detect():
        raise AssertionError("detect called although VENDOR is set")

    assert load_config(test, detect=detect).test.vendor == "cpu"


def test_vendor_auto_falls_back_to_cpu_without_nvml(tmp_path, write, monkeypatch):
    import pynvml

    def no_nvml():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_nvml)
    test = write(tmp_path, "test.yaml", conf(vendor="auto"))
    cfg = load_config(test)                                # the real detector
    assert cfg.test.vendor == "cpu" and cfg.vendor.device == "cpu"
    assert cfg.test.vendor_reason.startswith("VENDOR: auto -> cpu")


def test_vendor_auto_detector_naming_an_unknown_vendor(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf(vendor="auto"))
    with pytest.raises(ConfigError) as exc:
        load_config(test, detect=lambda: ("acme", "fake"))
    (problem,) = exc.value.problems
    assert problem.startswith(f"{test.resolve()}:1: VENDOR: no vendor 'acme'")


def test_two_localhost_hosts_are_allowed(tmp_path, write):
    test = write(tmp_path, "test.yaml", conf("CLUSTER: cluster.yaml", cases=['"gemm:pytorch:local:2:1:1": null']))
    write(tmp_path, "cluster.yaml", "HOSTS:\n  - localhost\n  - localhost\n")
    cfg = load_config(test, detect=cpu_detector)
    assert [h.address for h in cfg.cluster.hosts] == ["localhost", "localhost"]


def test_data_dir_is_not_checked_for_remote_hosts(tmp_path, write):
    test = write(tmp_path, "test.yaml",
                 conf("CLUSTER: cluster.yaml", cases=['"gemm:pytorch:local:1:1:1": /no/such/dir']))
    write(tmp_path, "cluster.yaml", "HOSTS:\n  - 10.0.0.1\n  - localhost\n")
    cfg = load_config(test, detect=cpu_detector)
    assert cfg.test.cases[0].data_dir == "/no/such/dir"
