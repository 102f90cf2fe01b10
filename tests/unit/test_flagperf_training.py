"""FlagPerf training trees as a case source (flagperf/catalog.py, flagperf/caselaunch.py, flagperf/images.py).

The trees are written here in FlagPerf's training layout (run_benchmarks/<fw>/start_<fw>_task.py, benchmarks/
<model>/<fw>/run_pretraining.py, <vendor>/<model>-<fw>/config/config_<hw>x<nnodes>x<nproc>.py, docker_image/),
with one framework folder for each of FlagPerf's launchers; the files are placeholders, since only planning is
tested here (tests/e2e/test_flagperf_training.py runs a tree).
"""
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from flagperf.caselaunch import TRAINING_PREPARE_AND_START, deploy_folders, tree_dir
from flagperf.catalog import benchmark_names, training_frameworks, training_tree
from flagperf.config import load_config
from flagperf.containers import PREPARE_AND_LAUNCH
from flagperf.errors import ConfigError
from flagperf.images import image_spec
from flagperf.plan import build_plan

# run_benchmarks/ of FlagPerf's training tree: a launcher per framework, and two folders that are not frameworks
FRAMEWORKS = ("pytorch", "megatron", "megatron-deepspeed", "deepspeed", "deepspeed-torch", "flagscale", "paddle",
              "tensorflow2", "mindspore")
NOT_FRAMEWORKS = ("in_container", "in_cluster", "config")
PREFIX = "flagperf: config error: "


def make_tree(root: Path, vendor="nvidia", hw="A100", shape=(1, 8), models=None) -> Path:
    """A training tree with model ``m<i>`` for each framework (FlagPerf's layout, placeholder files)."""
    tree = root / "FlagPerf" / "training"
    for fw in FRAMEWORKS:
        (tree / "run_benchmarks" / fw).mkdir(parents=True, exist_ok=True)
        (tree / "run_benchmarks" / fw / f"start_{fw}_task.py").write_text("# launcher\n")
    for name in NOT_FRAMEWORKS:
        (tree / "run_benchmarks" / name).mkdir(parents=True, exist_ok=True)
        (tree / "run_benchmarks" / name / "run.py").write_text("")
    (tree / "utils").mkdir(exist_ok=True)
    (tree / "utils" / "helper.py").write_text("")
    (tree / "benchmarks" / "driver").mkdir(parents=True, exist_ok=True)
    (tree / "benchmarks" / "driver" / "__init__.py").write_text("")
    for model, fw in (models or {f"m_{fw}": fw for fw in FRAMEWORKS}).items():
        (tree / "benchmarks" / model / fw).mkdir(parents=True, exist_ok=True)
        (tree / "benchmarks" / model / fw / "run_pretraining.py").write_text("")
        cfg = tree / vendor / f"{model}-{fw}" / "config"
        cfg.mkdir(parents=True, exist_ok=True)
        (cfg / f"config_{hw}x{shape[0]}x{shape[1]}.py").write_text("steps = 1\n")
    return tree


def training_conf(tmp_path, tree, cases, extra="", vendor="nvidia", runtime="docker"):
    """A FlagPerf test_conf.py as a user edits it: FLAGPERF_PATH, VENDOR, CASES."""
    path = tmp_path / "test_conf.py"
    lines = [f'VENDOR = "{vendor}"', f'FLAGPERF_PATH = "{tree}"', f'FLAGPERF_LOG_PATH = "{tmp_path}/result/"',
             'ACCE_VISIBLE_DEVICE_ENV_NAME = "CUDA_VISIBLE_DEVICES"', 'PIP_SOURCE = "https://pypi.example/simple"',
             f'RUNTIME = "{runtime}"', extra, "CASES = {"]
    lines += [f'    "{key}": "{tmp_path}",' for key in cases] + ["}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def cluster_conf(tmp_path, hosts=("127.0.0.1", "127.0.0.2")):
    path = tmp_path / "cluster_conf.py"
    path.write_text(f"HOSTS = {list(hosts)!r}\nSSH_PORT = \"22\"\nMASTER_PORT = \"29601\"\n")
    return path


def argv_after(argv, launcher_suffix):
    i = next(i for i, a in enumerate(argv) if a.endswith(launcher_suffix))
    return argv[i - 1:]


def test_tree_detection(tmp_path):
    tree = make_tree(tmp_path)
    assert training_tree(tree) == tree and training_tree(tree / "benchmarks") == tree
    assert training_tree(tmp_path) is None and training_tree(tree / "utils") is None
    assert training_frameworks(tree) == sorted(FRAMEWORKS)          # in_container, in_cluster: no launcher
    names = benchmark_names(tmp_path / "flagperf-tree", [tree / "benchmarks"])
    assert set(names) == {f"m_{fw}" for fw in FRAMEWORKS}            # driver/ is no model


def test_one_key_per_framework_plans_flagperfs_launcher_with_its_arguments(tmp_path):
    tree = make_tree(tmp_path)
    keys = [f"m_{fw}:{fw}{'_2.0' if fw == 'pytorch' else ''}:A100:1:8:2" for fw in FRAMEWORKS]
    cfg = load_config(training_conf(tmp_path, tree, keys), cluster_conf(tmp_path))
    plan = build_plan(cfg, "run20261126000000-abcdef")
    assert len(plan.cases) == len(FRAMEWORKS)
    for case, fw in zip(plan.cases, FRAMEWORKS):
        assert case.config_files == ()            # no flagperf case config for a FlagPerf training case
        for rnd in case.rounds:
            node = rnd.nodes[0]
            spec = node.launch
            assert spec.mode == "node"
            argv = argv_after(spec.argv, f"run_benchmarks/{fw}/start_{fw}_task.py")
            node_dir = PurePosixPath(node.node_dir)
            assert argv[0] == "python3"          # the image's python (RUNTIME docker)
            assert argv[1:] == [
                argv[1], "--vendor", "nvidia", "--case_name", case.name, "--model_name", f"m_{fw}",
                "--train_script", "run_pretraining.py", "--nnodes", "1", "--nproc", "8", "--hosts", "127.0.0.1",
                "--hosts_ports", "", "--data_dir", str(tmp_path), "--log_dir", str(node_dir.parents[2]),
                "--log_level", "info", "--extern_config_file", "config_A100x1x8.py", "--enable_extern_config",
                "--master_port", "29601", "--round", str(rnd.index), "--visible_dev_env", "CUDA_VISIBLE_DEVICES",
                "--master_addr", "127.0.0.1", "--node_rank", "0", "--host_addr", "127.0.0.1"]
            # the launcher's own log folder <log_dir>/<case_name>/round<k>/<host_addr>_noderank<i> is the node dir
            assert node_dir == PurePosixPath(argv[argv.index("--log_dir") + 1], case.name, f"round{rnd.index}",
                                             "127.0.0.1_noderank0")
            assert spec.cwd.endswith(tree_dir_for(cfg, case)) and argv[1] == f"{spec.cwd}/run_benchmarks/{fw}/" \
                                                                              f"start_{fw}_task.py"
            # the container runs the node launcher without flagperf's generic preparation
            assert node.container is not None and PREPARE_AND_LAUNCH not in node.container.command


def tree_dir_for(cfg, case):
    from flagperf.caselaunch import case_source
    return tree_dir(case_source(cfg, case.case))


def test_two_nodes_get_the_host_list_and_their_rank(tmp_path):
    tree = make_tree(tmp_path, shape=(2, 4), models={"cpm": "pytorch"})
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:2:4:1"]), cluster_conf(tmp_path))
    nodes = build_plan(cfg).cases[0].rounds[0].nodes
    for rank, node in enumerate(nodes):
        argv = node.launch.argv
        assert argv[argv.index("--hosts") + 1] == "127.0.0.1,127.0.0.2"
        assert argv[argv.index("--node_rank") + 1] == str(rank)
        assert argv[argv.index("--host_addr") + 1] == f"127.0.0.{rank + 1}"
        assert argv[argv.index("--master_addr") + 1] == "127.0.0.1"


def test_preparation_and_env_file_wrap_the_launcher(tmp_path):
    tree = make_tree(tmp_path, models={"cpm": "pytorch"})
    vdir = tree / "nvidia" / "cpm-pytorch"
    (vdir / "config" / "requirements.txt").write_text("sentencepiece\n")
    (vdir / "config" / "environment_variables.sh").write_text("export X=1\n")
    (vdir / "csrc").mkdir()
    (vdir / "csrc" / "setup.py").write_text("")
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1"]), cluster_conf(tmp_path))
    node = build_plan(cfg).cases[0].rounds[0].nodes[0]
    argv = node.launch.argv
    root = node.launch.cwd
    assert argv[:3] == ["bash", "-c", TRAINING_PREPARE_AND_START]
    assert argv[4:10] == [f"{root}/nvidia/cpm-pytorch/config/environment_variables.sh",
                          f"{root}/nvidia/cpm-pytorch/config/requirements.txt", f"{root}/nvidia/cpm-pytorch/csrc",
                          "https://pypi.example/simple", node.node_dir, "python3"]
    assert argv[10:12] == ["python3", f"{root}/run_benchmarks/pytorch/start_pytorch_task.py"]
    # what --dry-run says about it
    notes = build_plan(cfg).cases[0].notes
    assert any("pip install -r" in n and "requirements.txt" in n and "csrc/setup.py install" in n for n in notes)
    assert any(n.startswith("env file") and n.endswith("environment_variables.sh") for n in notes)


def test_the_preparation_script_runs_each_step_and_stops_on_failure(tmp_path):
    """The wrapper itself, with bash: env file sourced for the launcher, requirements through pip (a failing
    pip stops the node with exit 90 before the launcher starts), the extension's setup.py run in a scratch folder."""
    node = tmp_path / "node"
    node.mkdir()
    env = tmp_path / "env.sh"
    env.write_text("export CASE_ENV=ok\necho sourcing\n")
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "setup.py").write_text("import os, sys\n"
                                   "print('built', sys.argv[1:], os.getcwd() != os.environ['EXTENSION_SOURCE_DIR'])\n")
    fake_py = tmp_path / "py"
    fake_py.write_text(f"#!/bin/sh\nif [ \"$1\" = -m ]; then echo pip \"$@\"; exit ${{PIP_EXIT:-0}}; fi\n"
                       f"exec {sys.executable} \"$@\"\n")
    fake_py.chmod(0o755)
    req = tmp_path / "requirements.txt"
    req.write_text("x\n")
    launcher = ["sh", "-c", 'echo "launcher sees CASE_ENV=$CASE_ENV"']
    args = ["bash", "-c", TRAINING_PREPARE_AND_START, "t", str(env), str(req), str(csrc), "https://idx", str(node),
            str(fake_py), *launcher]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "launcher sees CASE_ENV=ok\n", r
    log = (node / "env_prepare.log").read_text()
    assert f"pip -m pip install --disable-pip-version-check -r {req} -i https://idx" in log
    assert "built ['install'] True" in log
    assert (node / "source_env.log.txt").read_text() == "sourcing\n"
    r = subprocess.run(args, capture_output=True, text=True, env={"PIP_EXIT": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 90 and "launcher sees" not in r.stdout
    assert r.stderr.strip() == f"FlagPerf case preparation failed: see {node}/env_prepare.log"


@pytest.mark.parametrize("key, expected", [
    ("m_pytorch:pytorch:H100:1:8:1", "FlagPerf training case has no vendor config {tree}/nvidia/m_pytorch-pytorch/"
                                     "config/config_H100x1x8.py (configs there: config_A100x1x8.py)"),
    ("m_pytorch:caffe:A100:1:8:1", "FlagPerf training tree {tree} has no launcher {tree}/run_benchmarks/caffe/"
                                   "start_caffe_task.py (launchers there: deepspeed, deepspeed-torch, flagscale, "
                                   "megatron, megatron-deepspeed, mindspore, paddle, pytorch, ...)"),
    ("m_pytorch:paddle:A100:1:8:1", "FlagPerf training tree {tree} has no {tree}/benchmarks/m_pytorch/paddle "
                                    "(frameworks of m_pytorch there: pytorch)"),
])
def test_what_is_missing_is_a_one_line_config_error(tmp_path, key, expected):
    tree = make_tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(training_conf(tmp_path, tree, [key]), cluster_conf(tmp_path))
    model = key.split(":")[0]
    assert err.value.problems == [f"{tmp_path}/test_conf.py: CASES[{key!r}]: model {model!r}: "
                                  + expected.format(tree=tree)]


def test_a_framework_the_vendor_profile_lacks_is_accepted_for_a_training_case(tmp_path):
    """megatron is no framework of flagperf's nvidia profile; the tree's launcher provides it."""
    tree = make_tree(tmp_path)
    cfg = load_config(training_conf(tmp_path, tree, ["m_megatron:megatron_core060:A100:1:8:1"]), cluster_conf(tmp_path))
    assert cfg.test.cases[0].framework == "megatron"


def test_resnet50_in_both_trees_needs_model_sources(tmp_path):
    tree = make_tree(tmp_path, models={"resnet50": "pytorch"})
    with pytest.raises(ConfigError) as err:
        load_config(training_conf(tmp_path, tree, ["resnet50:pytorch_1.8:A100:1:8:1"]), cluster_conf(tmp_path))
    (problem,) = err.value.problems
    assert "model 'resnet50' is both flagperf's benchmark" in problem and "MODEL_SOURCES" in problem
    cfg = load_config(training_conf(tmp_path, tree, ["resnet50:pytorch_1.8:A100:1:8:1"],
                                extra='MODEL_SOURCES = {"resnet50": "case_paths"}'), cluster_conf(tmp_path))
    argv = build_plan(cfg).cases[0].rounds[0].nodes[0].launch.argv
    assert any(a.endswith("run_benchmarks/pytorch/start_pytorch_task.py") for a in argv)
    cfg = load_config(training_conf(tmp_path, tree, ["resnet50:pytorch_1.8:A100:1:8:1"],
                                extra='MODEL_SOURCES = {"resnet50": "flagperf"}'), cluster_conf(tmp_path))
    assert build_plan(cfg).cases[0].rounds[0].nodes[0].launch.mode == "ranks"     # flagperf's own resnet50
    with pytest.raises(ConfigError) as err:
        load_config(training_conf(tmp_path, tree, ["resnet50:pytorch_1.8:A100:1:8:1"],
                              extra='MODEL_SOURCES = {"resnet50": "theirs"}'), cluster_conf(tmp_path))
    assert "MODEL_SOURCES['resnet50']: expected flagperf or case_paths" in err.value.problems[0]


def test_a_case_folder_with_nothing_runnable_fails_at_load_with_what_was_looked_for(tmp_path):
    cases = tmp_path / "cases"
    (cases / "mobilenetv2").mkdir(parents=True)
    (cases / "mobilenetv2" / "README.md").write_text("")
    conf = tmp_path / "test.yaml"
    conf.write_text(f"VENDOR: cpu\nRUNTIME: bare\nCASE_PATHS: [{cases}]\n"
                    f"CASES:\n  \"mobilenetv2:pytorch_1.8:A100:1:8:1\": null\n")
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    assert err.value.problems == [f"{conf}: CASES['mobilenetv2:pytorch_1.8:A100:1:8:1']: model 'mobilenetv2': "
                                  f"{cases}/mobilenetv2 has nothing runnable (looked for benchmark.yaml, main.py, "
                                  f"main.sh, cpu/A100/main.sh)"]


def test_deploy_sends_what_the_case_needs_in_the_trees_layout(tmp_path):
    tree = make_tree(tmp_path, models={"cpm": "pytorch", "glm": "pytorch"})
    (tree / "nvidia" / "bert-pytorch").mkdir(parents=True)           # another case's folder: not sent
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1"]), cluster_conf(tmp_path))
    folders = deploy_folders(cfg)
    from flagperf.caselaunch import case_source
    base = tree_dir(case_source(cfg, cfg.test.cases[0]))
    assert base.startswith("cases/training-")
    assert folders == ((tree / "run_benchmarks/pytorch", f"{base}/run_benchmarks/pytorch"),
                       (tree / "utils", f"{base}/utils"), (tree / "benchmarks/driver", f"{base}/benchmarks/driver"),
                       (tree / "benchmarks/cpm", f"{base}/benchmarks/cpm"),
                       (tree / "nvidia/cpm-pytorch", f"{base}/nvidia/cpm-pytorch"))


def test_framework_image_from_the_trees_docker_image_folder(tmp_path):
    tree = make_tree(tmp_path, models={"cpm": "pytorch", "glm": "pytorch"})
    img = tree / "nvidia" / "docker_image" / "pytorch_1.8"
    img.mkdir(parents=True)
    (img / "Dockerfile").write_text("FROM nvcr.io/nvidia/pytorch:21.02-py3\n")
    (img / "pytorch_1.8_install.sh").write_text("pip install x\n")
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1", "glm:pytorch_2.0:A100:1:8:1"]),
                      cluster_conf(tmp_path))
    spec = image_spec(cfg, cfg.test.cases[0])
    assert spec.folder == img and spec.repository == "flagperf/nvidia-pytorch_1.8"
    assert spec.dockerfile().endswith("COPY . /workspace/docker_image\n"
                                      "RUN bash /workspace/docker_image/pytorch_1.8_install.sh\n")
    before = spec.tag
    (img / "pytorch_1.8_install.sh").write_text("pip install y\n")
    assert image_spec(cfg, cfg.test.cases[0]).tag != before             # content-hashed
    other = image_spec(cfg, cfg.test.cases[1])                          # no docker_image/pytorch_2.0
    assert other.folder == cfg.source_root / "vendors" / "nvidia" / "pytorch" and other.install_script is None
    plan = build_plan(cfg)
    assert f"image: {img}" in plan.cases[0].notes
    assert any(n.startswith("image: the vendor image (no ") for n in plan.cases[1].notes)


def test_the_real_cli_dry_run_and_errors(tmp_path):
    tree = make_tree(tmp_path, models={"cpm": "pytorch"})
    conf = training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1"])
    r = subprocess.run([sys.executable, "-m", "flagperf", "run", "--config", str(conf), "--cluster",
                        str(cluster_conf(tmp_path)), "--dry-run"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "FlagPerf training case: launcher " in r.stdout and "start_pytorch_task.py" in r.stdout
    assert "--extern_config_file config_A100x1x8.py --enable_extern_config" in r.stdout
    conf = training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:4:1"])
    r = subprocess.run([sys.executable, "-m", "flagperf", "run", "--config", str(conf), "--cluster",
                        str(cluster_conf(tmp_path)), "--dry-run"], capture_output=True, text=True)
    errors = [line for line in r.stderr.splitlines() if not line.startswith("flagperf: warning")]
    assert r.returncode == 2 and len(errors) == 1 and errors[0].startswith(PREFIX) and "config_A100x1x4.py" in \
        errors[0] and "Traceback" not in r.stderr


def test_bare_runtime_warns_that_preparation_installs_into_the_host(tmp_path):
    tree = make_tree(tmp_path, models={"cpm": "pytorch"})
    (tree / "nvidia" / "cpm-pytorch" / "config" / "requirements.txt").write_text("sentencepiece\n")
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1"], runtime="bare"),
                      cluster_conf(tmp_path))
    assert any("RUNTIME bare: FlagPerf's preparation pip-installs" in w and "requirements.txt" in w
               for w in cfg.warnings)
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1"]), cluster_conf(tmp_path))
    assert not any("preparation" in w for w in cfg.warnings)


def test_shlex_of_the_dry_run_command_is_the_argv(tmp_path):
    """--dry-run prints the node command with shlex.join: pasting it into a shell gives the same argv."""
    tree = make_tree(tmp_path, models={"cpm": "pytorch"})
    (tree / "nvidia" / "cpm-pytorch" / "config" / "environment_variables.sh").write_text("export A=1\n")
    cfg = load_config(training_conf(tmp_path, tree, ["cpm:pytorch_1.8:A100:1:8:1"]), cluster_conf(tmp_path))
    argv = build_plan(cfg).cases[0].rounds[0].nodes[0].launch.argv
    assert shlex.split(shlex.join(argv)) == argv


def test_hosts_ports_reach_the_launcher_and_bad_ones_are_refused(tmp_path):
    tree = make_tree(tmp_path, models={"resnet50": "tensorflow2"})
    cluster = tmp_path / "cluster_conf.py"
    cluster.write_text('HOSTS = ["127.0.0.1"]\nHOSTS_PORTS = ["2222", 2223]\nMASTER_PORT = "29601"\n')
    conf = training_conf(tmp_path, tree, ["resnet50:tensorflow2:A100:1:8:1"],
                         extra='MODEL_SOURCES = {"resnet50": "case_paths"}')
    argv = build_plan(load_config(conf, cluster)).cases[0].rounds[0].nodes[0].launch.argv
    assert argv[argv.index("--hosts_ports") + 1] == "2222,2223"
    assert any(a.endswith("run_benchmarks/tensorflow2/start_tensorflow2_task.py") for a in argv)
    cluster.write_text('HOSTS = ["127.0.0.1"]\nHOSTS_PORTS = ["22x"]\n')
    with pytest.raises(ConfigError) as err:
        load_config(conf, cluster)
    assert err.value.problems == [f"{cluster}:2: HOSTS_PORTS: expected a list of TCP ports 1-65535 (numbers or "
                                  f"strings of digits), got '22x' in it"]
