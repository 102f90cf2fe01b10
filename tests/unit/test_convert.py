"""``flagperf convert``: FlagPerf's files written as flagperf YAML (flagperf/convert.py), through the real CLI.

The written files must load as they are, plan exactly what the FlagPerf files plan, and say in comments what
changed and why.
"""
import re
from pathlib import Path

import yaml

from flagperf.config import FLAGPERF_IGNORED

UPSTREAM = Path(__file__).resolve().parent / "fixtures" / "flagperf_format_configs"
PREFIX = "flagperf: config error: "


def copy_upstream(tmp_path, name, replace):
    text = (UPSTREAM / name).read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def checkout(tmp_path, suite, *cases):
    root = tmp_path / "FlagPerf" / suite
    (root / "benchmarks").mkdir(parents=True)
    for case in cases:
        (root / "benchmarks" / case).mkdir()
        (root / "benchmarks" / case / "main.py").write_text("")
    return root


def dry_run(run_cli, cwd, *args):
    """The plan ``flagperf run --dry-run`` prints, with the run id masked; and stderr."""
    rc, out, err = run_cli("run", *args, "--dry-run", cwd=cwd)
    assert rc == 0, out + err
    return re.sub(r"run\d{14}-[0-9a-f]{6}", "RUN", out), err


def test_training_files_convert_and_plan_the_same(tmp_path, run_cli):
    root = checkout(tmp_path, "training")
    conf = copy_upstream(tmp_path, "training_test_conf.py", {"/home/FlagPerf/training": str(root)})
    cluster = UPSTREAM / "cluster_conf.py"
    out_dir = tmp_path / "out"
    rc, out, err = run_cli("convert", conf, cluster, "--out", out_dir, cwd=tmp_path)
    assert rc == 0, out + err
    assert out.splitlines() == [f"wrote {out_dir / 'test_conf.yaml'}", f"wrote {out_dir / 'cluster.yaml'}",
                                f"check it with: flagperf run --config {out_dir / 'test_conf.yaml'} --dry-run"]
    test_text = (out_dir / "test_conf.yaml").read_text()
    cluster_text = (out_dir / "cluster.yaml").read_text()
    test = yaml.safe_load(test_text)
    assert test == {
        "VENDOR": "nvidia", "ACCE_CONTAINER_OPT": " --gpus all", "ACCE_VISIBLE_DEVICE_ENV_NAME": "CUDA_VISIBLE_DEVICES",
        "PIP_SOURCE": "https://pypi.tuna.tsinghua.edu.cn/simple", "FLAGPERF_LOG_PATH": str(root / "result"),
        "FLAGPERF_LOG_LEVEL": "debug", "SHM_SIZE": "32G", "CLEAR_CACHES": True,
        "CASES": {"gemm:pytorch_2.0:A100:1:8:1": "/raid/dataset/gemm/"},
        "CASE_PATHS": [str(root / "benchmarks")], "RUNTIME": "docker", "CLUSTER": "cluster.yaml",
    }
    assert f"# FLAGPERF_PATH '{root}' named your FlagPerf training/ checkout: its benchmarks/ is now a " \
           f"CASE_PATHS folder (below)." in test_text
    assert "# RUNTIME: FlagPerf always ran its cases in containers" in test_text     # kept: docker
    assert yaml.safe_load(cluster_text) == {"HOSTS": ["10.1.2.2", "10.1.2.3", "10.1.2.4"], "MASTER_PORT": 29501,
                                            "SSH_PORT": 22, "HOSTS_PORTS": ["2222"]}
    assert "# MASTER_PORT: was the string '29501'\nMASTER_PORT: 29501\n" in cluster_text
    assert "# SSH_PORT: was the string '22'\nSSH_PORT: 22\n" in cluster_text

    original, original_err = dry_run(run_cli, tmp_path, "--config", conf, "--cluster", cluster)
    converted, converted_err = dry_run(run_cli, tmp_path, "--config", out_dir / "test_conf.yaml")
    assert converted == original
    assert converted_err == "" and "FLAGPERF_PATH" in original_err    # the converted files need no warning


def test_base_host_yaml_converts_and_plans_the_same(tmp_path, run_cli):
    root = checkout(tmp_path, "base", "computation-FP32")
    (tmp_path / "configs").mkdir()
    conf = copy_upstream(tmp_path / "configs", "base_host.yaml", {"/home/FlagPerf/base": str(root)})
    out_dir = tmp_path / "out"
    rc, out, err = run_cli("convert", conf, "--out", out_dir, cwd=tmp_path)
    assert rc == 0, out + err
    test_text = (out_dir / "test_conf.yaml").read_text()
    test = yaml.safe_load(test_text)
    assert test["BENCHMARKS_OR_TOOLKITS"] == "BENCHMARK" and test["NPROC_PER_NODE"] == 8
    assert test["CASES"] == {"computation-FP32": "pytorch_2.3"}
    assert test["CASE_PATHS"] == [str(root / "benchmarks")] and "FLAGPERF_PATH" not in test
    assert test["FLAGPERF_LOG_PATH"] == str(tmp_path / "configs" / "result")
    assert f"# FLAGPERF_LOG_PATH: 'result' resolved against {tmp_path / 'configs'}" in test_text
    assert "# CLUSTER: the hosts (HOSTS, SSH_PORT, HOSTS_PORTS, MASTER_PORT moved there)" in test_text
    assert not set(test) & {"HOSTS", "SSH_PORT", "MASTER_PORT", "HOSTS_PORTS"}
    assert yaml.safe_load((out_dir / "cluster.yaml").read_text()) == {
        "HOSTS": ["192.168.1.2", "192.168.1.3"], "SSH_PORT": 22, "HOSTS_PORTS": ["2222"], "MASTER_PORT": 29501}

    original, _ = dry_run(run_cli, tmp_path, "--config", conf)
    converted, converted_err = dry_run(run_cli, tmp_path, "--config", out_dir / "test_conf.yaml")
    assert converted == original and converted_err == ""


def test_extras_dropped_and_relative_data_dirs_made_absolute(tmp_path, write, run_cli):
    (tmp_path / "data").mkdir()
    conf = write(tmp_path, "src/test_conf.py", """\
        VENDOR = "cpu"
        RUNTIME = "bare"
        FLAGPERF_LOG_PATH = "result"
        TEST_TYPE = "default"
        CASES = {"gemm:pytorch_2.0:cpu:1:2:1:x": "../data"}
    """)
    rc, out, err = run_cli("convert", conf, "--out", tmp_path / "out", cwd=tmp_path)
    assert rc == 0, out + err
    assert not (tmp_path / "out" / "cluster.yaml").exists()
    text = (tmp_path / "out" / "test_conf.yaml").read_text()
    assert yaml.safe_load(text) == {"VENDOR": "cpu", "RUNTIME": "bare",
                                    "FLAGPERF_LOG_PATH": str(tmp_path / "src" / "result"),
                                    "CASES": {"gemm:pytorch_2.0:cpu:1:2:1": str(tmp_path / "data")}}
    assert "  # was 'gemm:pytorch_2.0:cpu:1:2:1:x': fields after the sixth (x) dropped, as FlagPerf ignored " \
           f"them; '../data' resolved against {tmp_path / 'src'}\n" in text
    assert f"# dropped TEST_TYPE: 'default': {FLAGPERF_IGNORED['TEST_TYPE']}\n" in text
    _plan, err = dry_run(run_cli, tmp_path, "--config", tmp_path / "out" / "test_conf.yaml")
    assert err == ""


def test_existing_outputs_are_kept_unless_force(tmp_path, write, run_cli):
    conf = write(tmp_path, "test_conf.py", 'VENDOR = "cpu"\nCASES = {"gemm:pytorch:cpu:1:1:1": None}\n')
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "test_conf.yaml").write_text("mine\n")
    rc, out, err = run_cli("convert", conf, "--out", out_dir, cwd=tmp_path)
    assert rc == 2 and out == ""
    assert err == f"{PREFIX}{out_dir / 'test_conf.yaml'}: exists; flagperf convert overwrites only with --force\n"
    assert (out_dir / "test_conf.yaml").read_text() == "mine\n"
    rc, out, err = run_cli("convert", conf, "--out", out_dir, "--force", cwd=tmp_path)
    assert rc == 0, out + err
    assert yaml.safe_load((out_dir / "test_conf.yaml").read_text())["VENDOR"] == "cpu"


def test_force_replaces_a_symlink_and_leaves_its_target(tmp_path, write, run_cli):
    conf = write(tmp_path, "test_conf.py", 'VENDOR = "cpu"\nCASES = {"gemm:pytorch:cpu:1:1:1": None}\n')
    target = write(tmp_path, "elsewhere.txt", "keep me\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "test_conf.yaml").symlink_to(target)
    rc, out, err = run_cli("convert", conf, "--out", out_dir, "--force", cwd=tmp_path)
    assert rc == 0, out + err
    assert target.read_text() == "keep me\n"
    assert not (out_dir / "test_conf.yaml").is_symlink()
    assert [p.name for p in out_dir.iterdir()] == ["test_conf.yaml"]       # no temporary file left


def test_convert_refuses_what_it_cannot_convert(tmp_path, write, run_cli):
    conf = write(tmp_path, "test_conf.py", 'VENDOR = "cpu"\nVENDER = "x"\nSSH_PORT = "22"\n'
                                           'CASES = {"gemm:pytorch:cpu:1:1:1": None}\n')
    rc, out, err = run_cli("convert", conf, "--out", tmp_path / "out", cwd=tmp_path)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.splitlines() == [
        f"{PREFIX}{conf}:2: VENDER: unknown key; did you mean VENDOR?; it cannot be converted",
        f"{PREFIX}{conf}:3: SSH_PORT: SSH_PORT belongs in the cluster config",
    ]
    assert not (tmp_path / "out").exists()

    other = write(tmp_path, "other.py", 'CASES = {"gemm:pytorch:cpu:1:1:1": None}\n')
    neither = write(tmp_path, "neither.py", 'VENDOR = "cpu"\n')
    rc, out, err = run_cli("convert", other, neither, other, "--out", tmp_path / "out", cwd=tmp_path)
    assert rc == 2
    assert err.splitlines() == [
        f"{PREFIX}{neither}: holds neither CASES (a test config) nor HOSTS (a cluster config)",
        f"{PREFIX}expected one test config (a file with CASES) among {other}, {neither}, {other}, got 2",
    ]
    bad_py = write(tmp_path, "bad.py", "import subprocess\n")
    rc, out, err = run_cli("convert", bad_py, cwd=tmp_path)
    assert rc == 2 and err.startswith(f"{PREFIX}{bad_py}:1: import subprocess: nothing is imported")

    inplace = write(tmp_path, "inplace/test_conf.yaml", 'VENDOR: cpu\nCASES: {"gemm:pytorch:cpu:1:1:1": null}\n')
    rc, out, err = run_cli("convert", inplace, "--out", inplace.parent, "--force", cwd=tmp_path)
    assert rc == 2
    assert err == f"{PREFIX}{inplace}: is one of the files being converted; choose another --out\n"

    cluster = write(tmp_path, "cluster_conf.py", 'HOSTS = ["localhost"]\nMASTER_PORT = "port"\n')
    rc, out, err = run_cli("convert", other, cluster, "--out", tmp_path / "out", cwd=tmp_path)
    assert rc == 2
    assert err == f"{PREFIX}{cluster}:2: MASTER_PORT: expected a TCP port 1-65535, got 'port'\n"
    assert not (tmp_path / "out").exists()
