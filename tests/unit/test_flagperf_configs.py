"""FlagPerf users' config files load as they are (flagperf/config.py with flagperf/pyconfig.py).

Files in FlagPerf's formats (tests/unit/fixtures/flagperf_format_configs/, written for these tests): a
training test_conf.py with cluster_conf.py, a base host.yaml (test and cluster keys in one file), CASE_PATHS,
ports written as strings, case keys with extra fields or a framework version, and the hints for keys that belong
in the other file. Errors go through the real CLI (exit 2, one line each, no traceback).
"""
import shutil
from pathlib import Path

import pytest
import yaml

from flagperf.config import (CLUSTER_KEYS, FLAGPERF_IGNORED, SOURCE_ROOT, TEST_KEYS, CaseSpec, close_key,
                             load_config)
from flagperf.errors import ConfigError
from flagperf.plan import build_plan
from flagperf.pyconfig import load_config_file

UPSTREAM = Path(__file__).resolve().parent / "fixtures" / "flagperf_format_configs"
PREFIX = "flagperf: config error: "
WARN = "flagperf: warning: "


def upstream(tmp_path, name, checkout=None, **replace):
    """A copy of an upstream fixture in tmp_path, with text replaced (``old=new`` pairs given as a dict)."""
    text = (UPSTREAM / name).read_text()
    for old, new in replace.get("text", {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def checkout(tmp_path, suite, *cases, sub="benchmarks"):
    """A FlagPerf ``<suite>/`` folder with ``<sub>/<case>/main.py`` for each case."""
    root = tmp_path / "FlagPerf" / suite
    (root / sub).mkdir(parents=True, exist_ok=True)
    for case in cases:
        (root / sub / case).mkdir(parents=True, exist_ok=True)
        (root / sub / case / "main.py").write_text("")
    return root


# ---------------------------------------------------------------------------------------------- upstream files

@pytest.mark.parametrize("name", ["training_test_conf.py", "cluster_conf.py", "base_host.yaml",
                                  "inference_host.yaml"])
def test_every_upstream_key_is_used_or_accepted(name):
    data, problems = load_config_file(UPSTREAM / name)
    assert problems == []
    accepted = set(TEST_KEYS) | set(CLUSTER_KEYS) | set(FLAGPERF_IGNORED)
    assert set(data) <= accepted, set(data) - accepted


def test_training_files_load(tmp_path):
    root = checkout(tmp_path, "training")
    conf = upstream(tmp_path, "training_test_conf.py", text={"/home/FlagPerf/training": str(root)})
    cluster = UPSTREAM / "cluster_conf.py"
    cfg = load_config(conf, cluster)
    t, c = cfg.test, cfg.cluster
    assert (t.vendor, t.runtime, t.log_level, t.shm_size, t.clear_caches, t.pip_source) == \
        ("nvidia", "docker", "debug", "32G", True, "https://pypi.tuna.tsinghua.edu.cn/simple")
    assert t.log_path == root / "result"
    assert t.flagperf_path == str(SOURCE_ROOT)          # not FlagPerf's folder: flagperf's own default
    assert t.case_paths == (str(root / "benchmarks"),)
    assert t.base_mode is None
    [case] = t.cases
    assert (case.model, case.framework, case.framework_full, case.hw, case.nnodes, case.nproc, case.repeat) == \
        ("gemm", "pytorch", "pytorch_2.0", "A100", 1, 8, 1)
    assert case.data_dir == "/raid/dataset/gemm" and case.name == "gemm-pytorch_2.0-A100-1x8"
    assert [h.address for h in c.hosts] == ["10.1.2.2", "10.1.2.3", "10.1.2.4"]
    assert {h.ssh_port for h in c.hosts} == {22} and c.master_port == 29501
    assert c.hosts_ports == (2222,)             # FlagPerf's "2222": a training launcher's --hosts_ports
    assert cfg.warnings == (
        f"{conf}:16: FLAGPERF_PATH: a FlagPerf training/ folder: its benchmarks/ ({root / 'benchmarks'}) is used as "
        f"a CASE_PATHS folder; flagperf deploys its own tree to its default FLAGPERF_PATH",
    )
    assert cfg.to_dict()["CASE_PATHS"] == [str(root / "benchmarks")]


def test_unchanged_upstream_files_fail_only_on_what_this_machine_lacks(tmp_path):
    """Every key is accepted; what fails is FlagPerf's checkout, which is not on this machine."""
    with pytest.raises(ConfigError) as err:
        load_config(UPSTREAM / "training_test_conf.py", UPSTREAM / "cluster_conf.py")
    assert err.value.problems == [
        f"{UPSTREAM / 'training_test_conf.py'}:16: FLAGPERF_PATH: a FlagPerf training/ folder: expected its "
        f"benchmarks/ at /home/FlagPerf/training/benchmarks (a directory on this machine); point FLAGPERF_PATH at "
        f"your FlagPerf training/ checkout, or remove it"]
    base = UPSTREAM / "base_host.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(base)
    assert len(err.value.problems) == 2, err.value.problems
    assert err.value.problems[0].startswith(f"{base}:1: FLAGPERF_PATH: a FlagPerf base/ folder: expected its "
                                            f"benchmarks/ at /home/FlagPerf/base/benchmarks")
    assert err.value.problems[1].startswith(f"{base}:33: CASES['computation-FP32']: model 'computation-FP32' has "
                                            f"no benchmark")
    inference = UPSTREAM / "inference_host.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(inference)
    # its case key loads as an inference case ('model:framework'): only the missing checkout is a problem
    assert [p.split(": ")[1] for p in err.value.problems] == ["FLAGPERF_PATH"]
    assert "a FlagPerf inference/ folder: expected its benchmarks/" in err.value.problems[0]


def test_base_host_yaml_loads_with_its_hosts(tmp_path):
    root = checkout(tmp_path, "base", "computation-FP32")
    (tmp_path / "configs").mkdir()
    conf = upstream(tmp_path / "configs", "base_host.yaml", text={"/home/FlagPerf/base": str(root),
                                                                  'VENDOR: "nvidia"': 'VENDOR: "cpu"'})
    cfg = load_config(conf)
    t, c = cfg.test, cfg.cluster
    assert t.base_mode == "benchmark"
    assert t.case_paths == (str(root / "benchmarks"),)
    assert t.flagperf_path == str(SOURCE_ROOT)
    assert t.log_path == tmp_path / "configs" / "result"
    assert (t.vendor, t.shm_size, t.clear_caches, t.visible_devices_env) == ("cpu", "32G", True, "CUDA_VISIBLE_DEVICES")
    assert c.path == conf and [h.address for h in c.hosts] == ["192.168.1.2", "192.168.1.3"]
    assert {h.ssh_port for h in c.hosts} == {22} and c.master_port == 29501
    [case] = t.cases
    assert (case.key, case.model, case.framework, case.hw, case.nnodes, case.nproc, case.repeat) == \
        ("computation-FP32", "computation-FP32", "pytorch", "A100", 2, 8, 1)
    assert (case.image_dir, case.data_dir) == ("pytorch_2.3", None)
    assert [w.split(": ")[1] for w in cfg.warnings] == ["FLAGPERF_PATH", "FLAGPERF_LOG_PATH"]
    assert cfg.warnings[1] == (f"{conf}:2: FLAGPERF_LOG_PATH: 'result' resolves against this file's folder "
                               f"({tmp_path / 'configs'}), not against FlagPerf's FLAGPERF_PATH")
    effective = cfg.to_dict()
    assert effective["BENCHMARKS_OR_TOOLKITS"] == "BENCHMARK" and effective["CASES"] == {
        "computation-FP32": "pytorch_2.3"}


def base_conf(tmp_path, write, *, mode="BENCHMARK", cases='  "computation-FP32": "pytorch_2.3"', extra="",
              hosts='["localhost"]'):
    root = checkout(tmp_path, "base", "computation-FP32", "interconnect-P2P",
                    sub="toolkits" if mode.lower() == "toolkit" else "benchmarks")
    lines = [f'FLAGPERF_PATH: "{root}"', f'FLAGPERF_LOG_PATH: "{tmp_path / "result"}"', 'VENDOR: "cpu"',
             f'BENCHMARKS_OR_TOOLKITS: "{mode}"', f"HOSTS: {hosts}", 'MASTER_PORT: "30150"', "RUNTIME: bare", extra,
             "CASES:", cases]
    return write(tmp_path, "host.yaml", "\n".join(lines) + "\n"), root


@pytest.mark.parametrize("extra, nproc", [("", None), ("NPROC_PER_NODE: 4", 4), ('NPROC_PER_NODE: "2"', 2),
                                          ("NPROC_PER_NODE: auto", None), ('NPROC_PER_NODE: "AUTO"', None)])
def test_base_nproc_per_node(tmp_path, write, extra, nproc):
    conf, _root = base_conf(tmp_path, write, extra=extra)
    [case] = load_config(conf).test.cases
    assert case.nproc == nproc and case.nnodes == 1


def test_base_toolkit_mode_chip_and_case_paths(tmp_path, write):
    conf, root = base_conf(tmp_path, write, mode="toolkit",
                           cases='  "computation-FP32:H100": "pytorch_2.3"\n  "interconnect-P2P": "pytorch_ssh"')
    for case in ("computation-FP32", "interconnect-P2P"):
        for chip in ("H100", "A100"):
            (root / "toolkits" / case / "cpu" / chip).mkdir(parents=True)
            (root / "toolkits" / case / "cpu" / chip / "main.sh").write_text("echo\n")
    cfg = load_config(conf)
    assert cfg.test.base_mode == "toolkit" and cfg.test.case_paths == (str(root / "toolkits"),)
    assert [(c.model, c.hw, c.image_dir) for c in cfg.test.cases] == [
        ("computation-FP32", "H100", "pytorch_2.3"), ("interconnect-P2P", "A100", "pytorch_ssh")]


def test_base_plan_runs_each_case_on_every_host(tmp_path, write):
    conf, _root = base_conf(tmp_path, write, hosts="[localhost, localhost]", extra="NPROC_PER_NODE: 1")
    plan = build_plan(load_config(conf))
    [case] = plan.cases
    assert case.name == "computation-FP32-pytorch-A100-2x1"
    assert [n.ranks for n in case.rounds[0].nodes] == [(0,), (1,)]


def cli_errors(run_cli, tmp_path, args):
    rc, out, err = run_cli("run", *args, "--dry-run", cwd=tmp_path)
    assert rc == 2, out + err
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert all(line.startswith(PREFIX) for line in lines), err
    return [line[len(PREFIX):] for line in lines]


@pytest.mark.parametrize("change, line, message", [
    ({"mode": "BENCHMARKS"}, 4, "BENCHMARKS_OR_TOOLKITS: expected BENCHMARK (torch benchmarks under torchrun) or "
                                "TOOLKIT (bash main.sh per node), got 'BENCHMARKS'"),
    ({"cases": '  "computation-FP32:A100:x": "pytorch_2.3"'}, 10,
     "CASES['computation-FP32:A100:x']: expected '<case>' or '<case>:<chip>' in a FlagPerf base config, got 3 "
     "fields"),
    ({"cases": '  "computation-FP32": ["pytorch_2.3"]'}, 10,
     "CASES['computation-FP32']: expected FlagPerf's image directory (a name such as pytorch_2.3), got "
     "['pytorch_2.3']"),
    ({"cases": '  "nosuch:A100": "pytorch_2.3"'}, 10, "CASES['nosuch:A100']: model 'nosuch' has no benchmark"),
    ({"cases": '  "computation-FP32: ": "pytorch_2.3"'}, 10,
     "CASES['computation-FP32: ']: chip '': expected letters, digits and _ . + - (not empty)"),
    ({"extra": "NPROC_PER_NODE: 0"}, 8, "NPROC_PER_NODE: expected ranks per host from 1 to 1024, or auto, got 0"),
    ({"extra": "NPROC_PER_NODE: eight"}, 8,
     "NPROC_PER_NODE: expected ranks per host from 1 to 1024, or auto, got 'eight'"),
    ({"extra": "CLUSTER: cluster.yaml"}, 5, "HOSTS: this test config lists its hosts (as FlagPerf's host.yaml does), "
                                            "so CLUSTER cannot name another cluster config; keep one of them"),
])
def test_base_config_errors_through_cli(tmp_path, write, run_cli, change, line, message):
    conf, _root = base_conf(tmp_path, write, **change)
    problems = cli_errors(run_cli, tmp_path, ["--config", conf])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{conf}:{line}: {message}"), problems


def test_base_config_with_cluster_option_and_missing_checkout(tmp_path, write, run_cli):
    conf, root = base_conf(tmp_path, write)
    write(tmp_path, "cluster.yaml", "HOSTS: [localhost]\n")
    assert cli_errors(run_cli, tmp_path, ["--config", conf, "--cluster", tmp_path / "cluster.yaml"]) == [
        f"{conf}:5: HOSTS: this test config lists its hosts (as FlagPerf's host.yaml does), so --cluster cannot name "
        f"another cluster config; keep one of them"]
    shutil.rmtree(root / "benchmarks")
    assert cli_errors(run_cli, tmp_path, ["--config", conf])[0] == (
        f"{conf}:1: FLAGPERF_PATH: a FlagPerf base/ folder: expected its benchmarks/ at {root / 'benchmarks'} (a "
        f"directory on this machine); point FLAGPERF_PATH at your FlagPerf base/ checkout, or remove it")


def test_warnings_are_printed_one_line_each_before_the_plan(tmp_path, write, run_cli):
    conf, root = base_conf(tmp_path, write, extra='TEST_TYPE: base')
    rc, out, err = run_cli("run", "--config", conf, "--dry-run", cwd=tmp_path)
    assert rc == 0, out + err
    assert err.splitlines() == [
        f"{WARN}{conf}:8: TEST_TYPE: accepted and ignored: {FLAGPERF_IGNORED['TEST_TYPE']}",
        f"{WARN}{conf}:1: FLAGPERF_PATH: a FlagPerf base/ folder: its benchmarks/ ({root / 'benchmarks'}) is used "
        f"as a CASE_PATHS folder; flagperf deploys its own tree to its default FLAGPERF_PATH",
    ]
    assert "case computation-FP32-pytorch-A100-1x2  [computation-FP32]" in out     # auto: 2 on cpu


# ------------------------------------------------------------------------------------------------- CASE_PATHS

def conf(*extra, cases=('"gemm:pytorch:local:1:1:1": null',)):
    return "\n".join(["VENDOR: cpu", "RUNTIME: bare", "FLAGPERF_LOG_PATH: result", *extra, "CASES:",
                      *(f"  {c}" for c in cases)]) + "\n"


def test_case_paths_resolve_against_the_file_and_provide_models(tmp_path, write):
    (tmp_path / "mine" / "mybench").mkdir(parents=True)
    (tmp_path / "mine" / "mybench" / "main.py").write_text("")
    path = write(tmp_path, "sub/test.yaml", conf("CASE_PATHS: [../mine, ../mine]",
                                                 cases=('"mybench:pytorch:x:1:1:1": null',)))
    cfg = load_config(path)
    assert cfg.test.case_paths == (str(tmp_path / "mine"),)
    assert cfg.test.cases[0].model == "mybench"
    assert cfg.test.flagperf_path == str(SOURCE_ROOT)     # a flagperf YAML keeps FLAGPERF_PATH's meaning
    assert cfg.warnings == ()


@pytest.mark.parametrize("value, message", [
    ('"mine"', "CASE_PATHS: expected a list of folders, got str 'mine'"),
    ("[missing]", "CASE_PATHS[0]: expected a folder of cases, {tmp}/missing does not exist"),
    ("[afile]", "CASE_PATHS[0]: expected a folder of cases, {tmp}/afile is not a directory"),
    ('[""]', "CASE_PATHS[0]: expected a non-empty path, got ''"),
])
def test_case_paths_errors_through_cli(tmp_path, write, run_cli, value, message):
    write(tmp_path, "afile", "")
    path = write(tmp_path, "test.yaml", conf(f"CASE_PATHS: {value}"))
    assert cli_errors(run_cli, tmp_path, ["--config", path]) == [
        f"{path}:4: " + message.format(tmp=tmp_path)]


def test_model_missing_names_the_case_paths(tmp_path, write, run_cli):
    (tmp_path / "mine").mkdir()
    path = write(tmp_path, "test.yaml", conf("CASE_PATHS: [mine]", cases=('"nosuch:pytorch:x:1:1:1": null',)))
    [problem] = cli_errors(run_cli, tmp_path, ["--config", path])
    assert problem.startswith(f"{path}:6: CASES['nosuch:pytorch:x:1:1:1']: model 'nosuch' has no benchmark "
                              f"({SOURCE_ROOT}/benchmarks/nosuch/main.py or {tmp_path}/mine/nosuch/); ")


# ---------------------------------------------------------------------------------------------- string ports

def test_ports_may_be_strings_of_digits(tmp_path, write):
    write(tmp_path, "cluster.yaml", 'HOSTS: [localhost, {HOST: localhost, SSH_PORT: "2200"}]\nSSH_PORT: " 22 "\n'
                                    'MASTER_PORT: "30120"\n')
    cfg = load_config(write(tmp_path, "test.yaml", conf("CLUSTER: cluster.yaml")))
    assert [h.ssh_port for h in cfg.cluster.hosts] == [22, 2200] and cfg.cluster.master_port == 30120


@pytest.mark.parametrize("line, message", [
    ('SSH_PORT: "abc"', "SSH_PORT: expected a TCP port 1-65535 (a number, or a string of digits), got 'abc'"),
    ('SSH_PORT: ""', "SSH_PORT: expected a TCP port 1-65535 (a number, or a string of digits), got ''"),
    ('MASTER_PORT: "70000"', "MASTER_PORT: expected a TCP port 1-65535, got 70000"),
    ('MASTER_PORT: "0"', "MASTER_PORT: expected a TCP port 1-65535, got 0"),
    ('MASTER_PORT: "123456"', "MASTER_PORT: expected a TCP port 1-65535 (a number, or a string of digits), got "
                              "'123456'"),
    ('MASTER_PORT: "-1"', "MASTER_PORT: expected a TCP port 1-65535 (a number, or a string of digits), got '-1'"),
])
def test_bad_port_strings_through_cli(tmp_path, write, run_cli, line, message):
    cluster = write(tmp_path, "cluster.yaml", f"HOSTS: [localhost]\n{line}\n")
    path = write(tmp_path, "test.yaml", conf("CLUSTER: cluster.yaml"))
    assert cli_errors(run_cli, tmp_path, ["--config", path]) == [f"{cluster}:2: {message}"]


def test_bad_port_string_in_a_python_cluster_config(tmp_path, write, run_cli):
    cluster = write(tmp_path, "cluster_conf.py", 'HOSTS = ["localhost"]\nSSH_PORT = "twenty-two"\n')
    path = write(tmp_path, "test.yaml", conf())
    assert cli_errors(run_cli, tmp_path, ["--config", path, "--cluster", cluster]) == [
        f"{cluster}:2: SSH_PORT: expected a TCP port 1-65535 (a number, or a string of digits), got 'twenty-two'"]


# ------------------------------------------------------------------------------------- keys in the wrong file

@pytest.mark.parametrize("cluster_line, test_line, expected", [
    ("SHM_SIZE: 32G", None, ("cluster.yaml", 2, "SHM_SIZE: unknown key in a cluster config; SHM_SIZE belongs in "
                                                "the test config")),
    ("FLAGPERF_PATH_HOST: /x", None, ("cluster.yaml", 2, "FLAGPERF_PATH_HOST: unknown key in a cluster config; "
                                                         "FLAGPERF_PATH_HOST belongs in the test config")),
    ("BANANA: 1", None, ("cluster.yaml", 2, "BANANA: unknown key; known keys: SCHEDULER, HOSTS")),
    ("SHHKEY: k", None, ("cluster.yaml", 2, "SHHKEY: unknown key; did you mean SSH_KEY?")),
    ("MASTERPORT: 1", None, ("cluster.yaml", 2, "MASTERPORT: unknown key; did you mean MASTER_PORT?")),
    (None, "SSH_PORT: 22", ("test.yaml", 4, "SSH_PORT: unknown key in a test config; SSH_PORT belongs in the "
                                            "cluster config")),
    (None, "MASTER_PORT: 22", ("test.yaml", 4, "MASTER_PORT: unknown key in a test config; MASTER_PORT belongs "
                                               "in the cluster config")),
    (None, "SHMSIZE: 1G", ("test.yaml", 4, "SHMSIZE: unknown key; did you mean SHM_SIZE?")),
    (None, "CASE_PATH: []", ("test.yaml", 4, "CASE_PATH: unknown key; did you mean CASE_PATHS?")),
])
def test_keys_in_the_wrong_file_and_hints_only_when_close(tmp_path, write, run_cli, cluster_line, test_line,
                                                          expected):
    write(tmp_path, "cluster.yaml", "HOSTS: [localhost]\n" + (cluster_line + "\n" if cluster_line else ""))
    path = write(tmp_path, "test.yaml", conf(*([test_line] if test_line else []), "CLUSTER: cluster.yaml"))
    name, line, message = expected
    [problem] = cli_errors(run_cli, tmp_path, ["--config", path])
    assert problem.startswith(f"{tmp_path / name}:{line}: {message}"), problem
    if "did you mean" not in message:
        assert "did you mean" not in problem


@pytest.mark.parametrize("word, known, hint", [
    ("SHM_SIZE", ("SSH_USER", "SSH_KEY", "HOSTS"), None),
    ("VENDER", ("VENDOR", "RUNTIME"), "VENDOR"),
    ("SSH_PROT", ("SSH_PORT", "SSH_USER"), "SSH_PORT"),
    ("SHHKEY", ("SSH_KEY",), "SSH_KEY"),
    ("HOST", ("HOSTS", "SSH_USER"), "HOSTS"),
    ("XYZ", ("HOSTS",), None),
    ("PYTHN", ("PYTHON",), "PYTHON"),
])
def test_close_key(word, known, hint):
    assert close_key(word, known) == hint


def test_ignored_keys_warn_in_either_file(tmp_path, write, run_cli):
    cluster = write(tmp_path, "cluster.yaml", 'HOSTS: [localhost]\nHOSTS_PORTS: ["2222"]\nMASTER_PORT: 30151\n')
    path = write(tmp_path, "test.yaml", conf("TEST_TYPE: training", "FLAGPERF_LOG_PATH_CONTAINER: /x",
                                             "LOG_CALL_INFORMATION: true", "DEVICE: 0", "NPROC_PER_NODE: 8",
                                             "CLUSTER: cluster.yaml"))
    rc, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path)
    assert rc == 0, out + err
    assert [line.split(": ")[3] for line in err.splitlines()] == [
        "TEST_TYPE", "FLAGPERF_LOG_PATH_CONTAINER", "LOG_CALL_INFORMATION", "DEVICE", "NPROC_PER_NODE"]
    assert all(line.startswith(WARN) for line in err.splitlines())
    assert "HOSTS_PORTS" not in err and str(cluster) not in err        # used: a training launcher's --hosts_ports
    assert err.splitlines()[-1] == (f"{WARN}{path}:8: NPROC_PER_NODE: accepted and ignored: it counts only with "
                                    f"BENCHMARKS_OR_TOOLKITS (a FlagPerf base config); each case key gives its nproc")


# ------------------------------------------------------------------------------- case key extras, framework suffix

@pytest.mark.parametrize("key, framework, full, extra, name", [
    ("gemm:pytorch_2.0:cpu:1:2:1", "pytorch", "pytorch_2.0", (), "gemm-pytorch_2.0-cpu-1x2"),
    ("gemm:pytorch_1.8:A100:1:8:1:x", "pytorch", "pytorch_1.8", ("x",), "gemm-pytorch_1.8-A100-1x8"),
    ("gemm:pytorch:A100:1:8:1:a:b:", "pytorch", "pytorch", ("a", "b", ""), "gemm-pytorch-A100-1x8"),
    ("llama:paddle_2.5.1:TP1PP1:1:8:1", "paddle", "paddle_2.5.1", (), "llama-paddle_2.5.1-TP1PP1-1x8"),
    ("gpt:megatron:H100:2:8:1", "megatron", "megatron", (), "gpt-megatron-H100-2x8"),
])
def test_case_key_extras_and_framework_suffix(key, framework, full, extra, name):
    case = CaseSpec.parse(key)
    assert (case.framework, case.framework_full, case.extra, case.name) == (framework, full, extra, name)


def test_framework_with_nothing_before_underscore():
    with pytest.raises(ValueError, match=r"framework '_2.0' has nothing before its '_'"):
        CaseSpec.parse("gemm:_2.0:x:1:1:1")


def test_extras_warn_and_the_suffix_reaches_the_ranks(tmp_path, write, run_cli):
    path = write(tmp_path, "test.yaml", conf(cases=('"gemm:pytorch_2.0:cpu:1:2:1:ignored:too": null',)))
    rc, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path)
    assert rc == 0, out + err
    assert err == (f"{WARN}{path}:5: CASES['gemm:pytorch_2.0:cpu:1:2:1:ignored:too']: fields after the sixth "
                   f"(ignored:too) are accepted and ignored, as FlagPerf does\n")
    assert "case gemm-pytorch_2.0-cpu-1x2  [gemm:pytorch_2.0:cpu:1:2:1:ignored:too]" in out
    assert "FLAGPERF_FRAMEWORK=pytorch_2.0" in out


def test_framework_base_picks_vendor_framework_and_image(tmp_path, write):
    path = write(tmp_path, "test.yaml", conf(cases=('"gemm:pytorch_2.0:cpu:1:2:1": null',)).replace(
        "RUNTIME: bare", "RUNTIME: docker"))
    plan = build_plan(load_config(path))
    node = plan.cases[0].rounds[0].nodes[0]
    assert node.launch.env["FLAGPERF_FRAMEWORK"] == "pytorch_2.0"
    assert node.launch.framework == "pytorch" and node.case_config["framework"] == "pytorch"
    assert node.container.image_folder == str(SOURCE_ROOT / "vendors" / "cpu" / "pytorch")


def test_framework_base_not_provided_through_cli(tmp_path, write, run_cli):
    path = write(tmp_path, "test.yaml", conf(cases=('"gemm:tensorflow_2.0:cpu:1:2:1": null',)))
    assert cli_errors(run_cli, tmp_path, ["--config", path]) == [
        f"{path}:5: CASES['gemm:tensorflow_2.0:cpu:1:2:1']: framework 'tensorflow' (from 'tensorflow_2.0') is not "
        f"provided by vendor 'cpu'; expected one of: pytorch"]


def test_python_test_config_with_yaml_cluster(tmp_path, write):
    """A Python test config without FLAGPERF_PATH, beside flagperf's own YAML cluster config."""
    write(tmp_path, "cluster.yaml", "HOSTS: [localhost]\nMASTER_PORT: 30152\n")
    path = write(tmp_path, "test_conf.py", """\
        VENDOR = "cpu"
        RUNTIME = "bare"
        CLUSTER = "cluster.yaml"
        FLAGPERF_LOG_PATH = "result"
        CASES = {"gemm:pytorch:cpu:1:1:1": None}
    """)
    cfg = load_config(path)
    assert cfg.cluster.master_port == 30152 and cfg.test.log_path == tmp_path / "result"
    assert cfg.test.case_paths == () and cfg.warnings == ()
    assert yaml.safe_load(yaml.safe_dump(cfg.to_dict()))["CASES"] == {"gemm:pytorch:cpu:1:1:1": None}
