"""FlagPerf's inference and operation suites (flagperf/suites.py with config.py, catalog.py and caselaunch.py): their
host.yaml files load with their own case grammars, each case plans the command FlagPerf's run.py starts for it,
what a case lacks is a one-line config error, and ``flagperf convert`` writes what can run. Trees and host.yaml
files are written here in FlagPerf's layout and format."""
import json
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from flagperf.caselaunch import TRAINING_PREPARE_AND_START, case_source, deploy_folders, tree_dir
from flagperf.config import load_config
from flagperf.convert import convert
from flagperf.errors import ConfigError
from flagperf.plan import build_plan
from flagperf.suites import INFERENCE, OPERATION, parse_inference_key, parse_operation_key, suite_of


def inference_tree(root: Path, case="resnet50", framework="pytorch", vendor="cpu") -> Path:
    tree = root / "FlagPerf" / "inference"
    (tree / "benchmarks" / case / framework).mkdir(parents=True, exist_ok=True)
    (tree / "benchmarks" / case / framework / "__init__.py").write_text("")
    (tree / "run_inference.py").write_text("")
    cfg = tree / "configs" / case
    (cfg / "vendor_config").mkdir(parents=True, exist_ok=True)
    (cfg / "configurations.yaml").write_text("batch_size: 4\n")
    (cfg / "parameters.yaml").write_text("")
    (cfg / "vendor_config" / f"{vendor}_configurations.yaml").write_text("batch_size: 8\n")
    return tree


def operation_tree(root: Path, op="mm", vendor="cpu", chip="local") -> Path:
    tree = root / "FlagPerf" / "operation"
    chip_dir = tree / "benchmarks" / op / vendor / chip
    chip_dir.mkdir(parents=True, exist_ok=True)
    (tree / "benchmarks" / "drivers").mkdir(exist_ok=True)
    (tree / "container_main.py").write_text("")
    (tree / "benchmarks" / op / "main.py").write_text("")
    (tree / "benchmarks" / op / "case_config.yaml").write_text("M: 8\n")
    (chip_dir / "case_config.yaml").write_text("ITERS: 2\n")
    return tree


def host_yaml(path: Path, tree: Path, cases: dict, hosts=("localhost",), vendor="cpu", extra="") -> Path:
    """A FlagPerf inference or operation host.yaml as FlagPerf ships it, with the user's edits."""
    lines = [f'FLAGPERF_PATH: "{tree}"', f'FLAGPERF_LOG_PATH: "{path.parent / "result"}"', f'VENDOR: "{vendor}"',
             'FLAGPERF_LOG_LEVEL: "INFO"', f"HOSTS: {json.dumps(list(hosts))}", 'SSH_PORT: "22"',
             'HOSTS_PORTS: ["2222"]', 'MASTER_PORT: "29501"', 'SHM_SIZE: "32G"', 'ACCE_CONTAINER_OPT: " --gpus all"',
             'PIP_SOURCE: "https://pypi.example/simple"', "CLEAR_CACHES: True",
             'ACCE_VISIBLE_DEVICE_ENV_NAME: "CUDA_VISIBLE_DEVICES"', "RUNTIME: bare", extra, "CASES:"]
    lines += [f'    "{k}": "{v}"' for k, v in cases.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def nodes_of(cfg, index=0):
    return build_plan(cfg, "run20261126000000-abcdef").cases[index].rounds[0].nodes


def after(argv, suffix):
    i = next(i for i, a in enumerate(argv) if a.endswith(suffix))
    return argv[i - 1:]


# ------------------------------------------------------------------------------------------------ the suite

def test_the_suite_comes_from_flagperf_path_or_flagperf_suite(tmp_path):
    inf, op = inference_tree(tmp_path), operation_tree(tmp_path)
    assert suite_of(tmp_path / "h.yaml", {"HOSTS": [], "FLAGPERF_PATH": str(inf)}) == INFERENCE
    assert suite_of(tmp_path / "h.yaml", {"HOSTS": [], "FLAGPERF_PATH": str(op)}) == OPERATION
    # a checkout that is not on this machine: its folder's name
    assert suite_of(tmp_path / "h.yaml", {"HOSTS": [], "FLAGPERF_PATH": "/home/FlagPerf/operation/"}) == OPERATION
    assert suite_of(tmp_path / "t.yaml", {"FLAGPERF_SUITE": "inference"}) == INFERENCE
    assert suite_of(tmp_path / "h.yaml", {"HOSTS": [], "FLAGPERF_PATH": "/home/FlagPerf/base",
                                          "BENCHMARKS_OR_TOOLKITS": "BENCHMARK"}) is None
    assert suite_of(tmp_path / "t.yaml", {"FLAGPERF_PATH": str(op)}) is None        # flagperf's own YAML
    assert suite_of(tmp_path / "test_conf.py", {"HOSTS": [], "FLAGPERF_PATH": str(op)}) is None


@pytest.mark.parametrize("key, expected", [
    ("resnet50:pytorch_1.13", ("resnet50", "pytorch_1.13", ())),
    ("vit_l_16:pytorch_2.1:x:y", ("vit_l_16", "pytorch_2.1", ("x", "y"))),
])
def test_inference_keys(key, expected):
    assert parse_inference_key(key) == expected


@pytest.mark.parametrize("key, why", [
    ("resnet50", "expected '<model>:<framework>'"),
    ("resnet50:", "framework '': expected letters"),
    ("res net:pytorch", "model 'res net'"),
])
def test_bad_inference_keys(key, why):
    with pytest.raises(ValueError, match=why):
        parse_inference_key(key)


def test_operation_keys():
    assert parse_operation_key("mm:FP16:312:nativetorch:A100_40_SXM") == {
        "op": "mm", "dataformat": "FP16", "spectflops": "312", "oplib": "nativetorch", "chip": "A100_40_SXM"}
    with pytest.raises(ValueError, match="expected 5 fields .* got 4"):
        parse_operation_key("mm:FP16:flaggems:A100_40_SXM")
    with pytest.raises(ValueError, match="spectflops 'fast'"):
        parse_operation_key("mm:FP16:fast:flaggems:A100_40_SXM")
    with pytest.raises(ValueError, match="spectflops '0'"):
        parse_operation_key("mm:FP16:0:flaggems:A100_40_SXM")


# ------------------------------------------------------------------------------------------------ inference

def test_inference_host_yaml_plans_run_inference_with_flagperfs_arguments(tmp_path):
    tree = inference_tree(tmp_path)
    data = tmp_path / "imagenet"
    data.mkdir()
    conf = host_yaml(tmp_path / "host.yaml", tree, {"resnet50:pytorch_1.13": data},
                     extra="LOG_CALL_INFORMATION: True")
    cfg = load_config(conf)
    (case,) = cfg.test.cases
    assert (case.model, case.framework, case.framework_full, case.nnodes, case.nproc, case.repeat, case.data_dir,
            case.suite) == ("resnet50", "pytorch", "pytorch_1.13", 1, 1, 1, str(data), INFERENCE)
    assert cfg.to_dict()["CASES"] == {"resnet50:pytorch_1.13": str(data)}
    assert [w.split(": ")[1] for w in cfg.warnings] == ["LOG_CALL_INFORMATION", "FLAGPERF_PATH"]
    (node,) = nodes_of(cfg)
    spec = node.launch
    assert spec.mode == "node" and spec.cwd == str(tree)
    argv = after(spec.argv, "/run_inference.py")
    assert argv == [sys.executable, f"{tree}/run_inference.py", "--perf_dir", str(tree), "--loglevel", "INFO",
                    "--vendor", "cpu", "--case", "resnet50", "--data_dir", str(data), "--framework", "pytorch_1.13",
                    "--log_dir", node.node_dir]
    assert argv == spec.argv        # no requirements, env file or extension: nothing wraps it
    assert node.case_config.get("model") == "resnet50"


def test_inference_preparation_wraps_the_script(tmp_path):
    tree = inference_tree(tmp_path)
    fw = tree / "benchmarks" / "resnet50" / "pytorch"
    (fw / "requirements.txt").write_text("timm\n")
    (fw / "cpu_requirements.txt").write_text("timm-cpu\n")            # the vendor's own list wins, as in FlagPerf
    (fw / "environment_variables.sh").write_text("export X=1\n")
    conf = host_yaml(tmp_path / "host.yaml", tree, {"resnet50:pytorch_1.13": tmp_path})
    (node,) = nodes_of(load_config(conf))
    argv = node.launch.argv
    assert argv[:3] == ["bash", "-c", TRAINING_PREPARE_AND_START]
    assert argv[3:10] == ["flagperf-inference", str(fw / "environment_variables.sh"), str(fw / "cpu_requirements.txt"),
                          "", "https://pypi.example/simple", node.node_dir, sys.executable]
    assert argv[10:12] == [sys.executable, f"{tree}/run_inference.py"]


@pytest.mark.parametrize("remove, expected", [
    ("configs/resnet50/parameters.yaml", "FlagPerf inference case resnet50 has no {tree}/configs/resnet50/"
                                         "parameters.yaml (run_inference.py reads it)"),
    ("benchmarks/resnet50/pytorch/__init__.py", "FlagPerf inference tree {tree} has no {tree}/benchmarks/resnet50/"
                                                "pytorch/__init__.py (frameworks of resnet50 there: pytorch)"),
    ("run_inference.py", "FlagPerf inference tree {tree} has no {tree}/run_inference.py"),
])
def test_what_an_inference_case_lacks_is_one_line(tmp_path, remove, expected):
    tree = inference_tree(tmp_path)
    (tree / remove).unlink()
    conf = host_yaml(tmp_path / "host.yaml", tree, {"resnet50:pytorch_1.13": tmp_path})
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    assert err.value.problems == [f"{conf}: CASES['resnet50:pytorch_1.13']: model 'resnet50': "
                                  + expected.format(tree=tree)]


def test_inference_case_problems_at_load(tmp_path):
    tree = inference_tree(tmp_path)
    conf = host_yaml(tmp_path / "host.yaml", tree, {"resnet50": tmp_path, "resnet50:tensorflow": tmp_path,
                                                    "resnet50:pytorch_2.0": tmp_path / "nowhere"})
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    problems = err.value.problems
    assert len(problems) == 3 and all("\n" not in p for p in problems)
    assert "CASES['resnet50']: expected '<model>:<framework>' in a FlagPerf inference host.yaml, got 1 field" in \
        problems[0]
    assert "CASES['resnet50:tensorflow']: framework 'tensorflow' is not provided by vendor 'cpu'" in problems[1]
    assert f"CASES['resnet50:pytorch_2.0']: data directory {tmp_path / 'nowhere'} does not exist on localhost" in \
        problems[2]


# ------------------------------------------------------------------------------------------------ operation

def test_operation_host_yaml_plans_main_py_on_every_host(tmp_path):
    tree = operation_tree(tmp_path, vendor="nvidia", chip="A100_40_SXM")
    chip_dir = tree / "benchmarks" / "mm" / "nvidia" / "A100_40_SXM"
    (chip_dir / "env.sh").write_text("echo env\n")
    (chip_dir / "requirements.txt").write_text("flag_gems\n")
    conf = host_yaml(tmp_path / "host.yaml", tree, {"mm:FP16:312:nativetorch:A100_40_SXM": "ngctorch2403",
                                                    "mm:FP16:312:flaggems:A100_40_SXM": "ngctorch2403"},
                     hosts=("10.0.0.1", "10.0.0.2"), vendor="nvidia", extra="NPROC_PER_NODE: 1\nDEVICE: 0")
    cfg = load_config(conf)
    native, gems = cfg.test.cases
    assert (native.model, native.hw, native.nnodes, native.nproc, native.image_dir, native.data_dir,
            native.suite_args) == ("mm", "A100_40_SXM", 2, 1, "ngctorch2403", None, ("FP16", "312", "nativetorch"))
    assert (native.name, gems.name) == ("mm-FP16-312-nativetorch-A100_40_SXM-2x1",
                                        "mm-FP16-312-flaggems-A100_40_SXM-2x1")
    assert cfg.to_dict()["CASES"]["mm:FP16:312:nativetorch:A100_40_SXM"] == "ngctorch2403"
    assert {w.split(": ")[1] for w in cfg.warnings} == {"DEVICE", "FLAGPERF_PATH", "NPROC_PER_NODE"}
    # the whole tree goes to each host, under FLAGPERF_PATH/cases/
    src = case_source(cfg, native)
    base = tree_dir(src)
    assert base.startswith("cases/operation-") and deploy_folders(cfg) == ((tree, base),)
    for rank, node in enumerate(nodes_of(cfg, 1)):
        on_host = PurePosixPath(node.host.flagperf_path) / base
        spec = node.launch
        assert spec.cwd == str(on_host / "benchmarks" / "mm")
        assert spec.argv[3:9] == ["flagperf-base", str(on_host / "benchmarks/mm/nvidia/A100_40_SXM/env.sh"),
                                  str(on_host / "benchmarks/mm/nvidia/A100_40_SXM/requirements.txt"), "",
                                  "https://pypi.example/simple", node.node_dir]
        assert spec.argv[10:] == [spec.argv[9], "main.py", "--vendor=nvidia", "--case_name=mm", "--spectflops=312",
                                  "--dataformat=FP16", "--oplib=flaggems", "--chip=A100_40_SXM"]
        assert node.node_rank == rank


def test_what_an_operation_case_lacks_is_one_line(tmp_path):
    tree = operation_tree(tmp_path)
    conf = host_yaml(tmp_path / "keys.yaml", tree, {"mm:FP32:nativetorch:local": "img",
                                                    "mm:FP32:10:nativetorch:local": "not an image/"})
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    problems = err.value.problems
    assert len(problems) == 2, problems
    assert problems[0].endswith("CASES['mm:FP32:nativetorch:local']: expected 5 fields "
                                "'<op>:<dataformat>:<spectflops>:<oplib>:<chip>' in a FlagPerf operation host.yaml, "
                                "got 4")
    assert "expected FlagPerf's image name" in problems[1]
    conf = host_yaml(tmp_path / "host.yaml", tree, {"mm:FP32:10:nativetorch:H100": "img",
                                                    "exp:FP32:10:nativetorch:local": "img"})
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    problems = err.value.problems
    assert len(problems) == 2, problems
    assert problems[0] == (f"{conf}: CASES['mm:FP32:10:nativetorch:H100']: model 'mm': FlagPerf operation case mm "
                           f"has no {tree}/benchmarks/mm/cpu/H100/case_config.yaml (chips of cpu there: local)")
    assert problems[1] == (f"{conf}: CASES['exp:FP32:10:nativetorch:local']: model 'exp': FlagPerf operation tree "
                           f"{tree} has no {tree}/benchmarks/exp/main.py (operations there: mm)")


def test_hosts_override_runs_an_operation_case_on_every_given_host(tmp_path):
    from flagperf.config import Overrides, apply_overrides
    tree = operation_tree(tmp_path)
    conf = host_yaml(tmp_path / "host.yaml", tree, {"mm:FP32:10:nativetorch:local": "img"})
    cfg = apply_overrides(load_config(conf), Overrides(hosts=("10.0.0.1", "10.0.0.2")))
    assert cfg.test.cases[0].nnodes == 2


# ------------------------------------------------------------------------------------------------ convert

def test_convert_writes_what_runs_and_says_what_it_left_out(tmp_path):
    tree = operation_tree(tmp_path)
    conf = host_yaml(tmp_path / "host.yaml", tree, {"mm:FP32:10:nativetorch:local": "ngctorch2403",
                                                    "mm:FP16:nativetorch:local": "ngctorch2403"},
                     extra="NPROC_PER_NODE: 1\nDEVICE: 0")
    left: list = []
    convert([conf], tmp_path / "out", left_out=left)
    assert [line.split(": left out ")[1].split(":")[0] for line in left] == ["NPROC_PER_NODE", "DEVICE", "CASES['mm"]
    assert all(line.startswith(f"{conf}:") and "\n" not in line for line in left)
    test = yaml.safe_load((tmp_path / "out" / "test_conf.yaml").read_text())
    assert test["FLAGPERF_SUITE"] == "operation" and test["CASES"] == {"mm:FP32:10:nativetorch:local": "ngctorch2403"}
    assert test["CASE_PATHS"] == [str(tree / "benchmarks")] and "NPROC_PER_NODE" not in test
    converted = load_config(tmp_path / "out" / "test_conf.yaml")
    original = load_config(host_yaml(tmp_path / "host2.yaml", tree, {"mm:FP32:10:nativetorch:local": "x"}))
    mine, theirs = nodes_of(converted)[0].launch, nodes_of(original)[0].launch
    assert mine.argv[-7:] == theirs.argv[-7:] and mine.cwd == theirs.cwd == str(tree / "benchmarks" / "mm")


def test_convert_of_an_inference_host_yaml_keeps_the_data_directory(tmp_path):
    tree = inference_tree(tmp_path)
    (tmp_path / "val").mkdir()
    conf = host_yaml(tmp_path / "host.yaml", tree, {"resnet50:pytorch_1.13:extra": "val"},
                     extra="LOG_CALL_INFORMATION: True")
    left: list = []
    convert([conf], tmp_path / "out", left_out=left)
    assert len(left) == 1 and "left out LOG_CALL_INFORMATION" in left[0]
    test = yaml.safe_load((tmp_path / "out" / "test_conf.yaml").read_text())
    assert test["FLAGPERF_SUITE"] == "inference" and test["CASES"] == {"resnet50:pytorch_1.13": str(tmp_path / "val")}
    (case,) = load_config(tmp_path / "out" / "test_conf.yaml").test.cases
    assert (case.suite, case.data_dir, case.framework_full) == (INFERENCE, str(tmp_path / "val"), "pytorch_1.13")


def test_a_bad_flagperf_suite_is_a_config_error(tmp_path):
    conf = tmp_path / "t.yaml"
    conf.write_text("VENDOR: cpu\nFLAGPERF_SUITE: training\nCASES:\n  \"a:b\": x\n")
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    assert "FLAGPERF_SUITE: expected inference" in err.value.problems[0]


def test_the_real_cli_convert_prints_each_left_out_line(tmp_path):
    tree = operation_tree(tmp_path)
    conf = host_yaml(tmp_path / "host.yaml", tree, {"mm:FP32:10:nativetorch:local": "img", "bad": "img"})
    proc = subprocess.run([sys.executable, "-m", "flagperf", "convert", str(conf), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"{conf}:18: left out CASES['bad']: expected 5 fields "
                                   f"'<op>:<dataformat>:<spectflops>:<oplib>:<chip>' in a FlagPerf operation "
                                   f"host.yaml, got 1")
    dry = subprocess.run([sys.executable, "-m", "flagperf", "run", "--config", str(tmp_path / "o" / "test_conf.yaml"),
                          "--dry-run"], capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    line = next(x for x in dry.stdout.splitlines() if "node command" in x)
    argv = shlex.split(line.split("): ", 1)[1].rstrip(")"))
    assert argv[-7:] == ["main.py", "--vendor=cpu", "--case_name=mm", "--spectflops=10", "--dataformat=FP32",
                         "--oplib=nativetorch", "--chip=local"]
