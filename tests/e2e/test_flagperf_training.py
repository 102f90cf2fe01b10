"""FlagPerf training cases end to end: a training tree in FlagPerf's layout (tests/e2e/fixtures/training, written
for these tests) run by ``flagperf run`` with its own launcher: bare on localhost, over two real sshd hosts
(deployed in the tree's layout), and in a framework image built from the tree's docker_image/ folder."""
import json
import re
import shutil
from pathlib import Path

from .conftest import only_run_dir, run_cli, write_conf

TREE = Path(__file__).resolve().parent / "fixtures" / "training"


def dataset(tmp_path):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "dataset.json").write_text(json.dumps({"seed": 3, "samples": 256}))
    return data


def summary(run):
    return json.loads((run / "summary.json").read_text())


def case_entry(doc, prefix):
    return next(c for c in doc["cases"] if c["name"].startswith(prefix))


def test_training_cases_run_bare_with_their_launcher_preparation_and_env(tmp_path):
    data = dataset(tmp_path)
    conf = write_conf(tmp_path, {"tinymlp:pytorch_2.0:local:1:2:1": data, "tinymlp:pytorch:fail:1:2:1": data,
                                 "tinyllm:pytorch:local:1:1:1": data}, CASE_PATHS=f"[{TREE}]")
    code, out, err = run_cli(["run", "--config", conf], timeout=300)
    run = only_run_dir(tmp_path / "result")
    assert code == 1, out + err                     # the failing case fails the run
    assert "RUNTIME bare: FlagPerf's preparation pip-installs" in err
    doc = summary(run)
    ok = case_entry(doc, "tinymlp-pytorch_2.0-local-1x2")
    assert ok["status"] == "passed", ok
    finished = ok["rounds"][0]["finished"]
    metrics = finished["metrics"] if "metrics" in finished else finished
    text = json.dumps(metrics)
    assert "training_sequences_per_second" in text and "final_loss" in text
    node = run / "tinymlp-pytorch_2.0-local-1x2" / "round1" / "localhost_noderank0"
    # the launcher's own logs land in flagperf's node directory, under FlagPerf's names
    assert {"rank0.out.log", "rank1.out.log", "start_pytorch_task.log", "source_env.log.txt",
            "env_prepare.log"} <= {p.name for p in node.iterdir()}
    prepare = (node / "env_prepare.log").read_text()
    assert "-m pip install -r " in prepare and "requirements.txt" in prepare
    assert "building the tinymlp extension from " in prepare and "/csrc" in prepare
    assert (node / "source_env.log.txt").read_text() == "tinymlp environment set\n"
    rank0 = (node / "rank0.out.log").read_text()
    assert '"env_mark": "sourced"' in rank0          # environment_variables.sh reached the ranks
    # the failing case: the launcher's real exit code, and the failing rank's own error line
    bad = case_entry(doc, "tinymlp-pytorch-fail-1x2")
    assert bad["status"] == "failed"
    fail_node = run / "tinymlp-pytorch-fail-1x2" / "round1" / "localhost_noderank0"
    assert "ZeroDivisionError: planted failure of rank 1" in (fail_node / "rank1.out.log").read_text()
    assert "exit code 1" in json.dumps(bad)
    assert "ZeroDivisionError: planted failure of rank 1" in json.dumps(bad)     # the failing rank's own line
    # an LLM-style case that ends with MFU and tokens-per-second lines, no FINISHED event
    llm = case_entry(doc, "tinyllm-pytorch-local-1x1")
    assert llm["status"] == "passed", llm
    metrics = llm["rounds"][0]["metrics"]
    assert metrics["mfu"]["unit"] == "fraction" and 0 < metrics["mfu"]["value"] < 1
    assert metrics["tokens_per_s_per_chip"]["unit"] == "tokens/s/chip" and metrics["tokens_per_s"]["value"] > 0


def test_training_case_on_two_ssh_hosts_is_deployed_in_the_trees_layout(tmp_path, ssh_bed):
    data = dataset(tmp_path)
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    conf = write_conf(tmp_path, {"tinymlp:pytorch:local:2:1:1": data}, CASE_PATHS=f"[{TREE}]",
                      CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], timeout=400)
    run = only_run_dir(tmp_path / "result")
    assert code == 0, out + err
    assert case_entry(summary(run), "tinymlp-pytorch-local-2x1")["status"] == "passed"
    for rank, address in enumerate(ssh_bed.addresses):
        node = run / "tinymlp-pytorch-local-2x1" / "round1" / f"{address}_noderank{rank}"
        assert (node / f"rank{rank}.out.log").is_file() and (node / "start_pytorch_task.log").is_file()
        launch = json.loads((node / "launch.json").read_text())
        argv = launch["argv"]
        assert argv[argv.index("--hosts") + 1] == ",".join(ssh_bed.addresses)
        assert argv[argv.index("--node_rank") + 1] == str(rank)
        # only what the case needs, under cases/<tree>-<hash>/ of the host's FLAGPERF_PATH
        root = Path(launch["cwd"])
        assert re.fullmatch(r"training-[0-9a-f]{8}", root.name) and root.parent.name == "cases"
        assert {p.name for p in root.iterdir()} == {"run_benchmarks", "utils", "benchmarks", "cpu"}
        assert {p.name for p in (root / "benchmarks").iterdir()} == {"driver", "tinymlp"}
        assert {p.name for p in (root / "cpu").iterdir()} == {"tinymlp-pytorch"}


def test_training_case_in_its_framework_image(tmp_path, docker_clean):
    env = docker_clean
    data = dataset(tmp_path)
    tree = tmp_path / "training"
    shutil.copytree(TREE, tree)
    conf = write_conf(tmp_path, {"tinymlp:pytorch_fixture:local:1:2:1": data}, CASE_PATHS=f"[{tree}]",
                      RUNTIME="docker", DOCKER_BUILD_ARGS=json.dumps({"BASE_IMAGE": env.torch_image}))
    code, out, err = run_cli(["run", "--config", conf], timeout=600)
    run = only_run_dir(tmp_path / "result")
    runlog = (run / "flagperf_run.log").read_text()
    tags = set(re.findall(r"image (flagperf/cpu-pytorch_fixture:\w+) (?:built|already there)", runlog))
    try:
        assert code == 0, out + err + runlog
        assert tags, runlog
        node = run / "tinymlp-pytorch_fixture-local-1x2" / "round1" / "localhost_noderank0"
        rank0 = (node / "rank0.out.log").read_text()
        assert '"framework_image": true' in rank0 and '"env_mark": "sourced"' in rank0
    finally:
        for tag in tags:
            env.client.images.remove(tag, force=True)
