"""End-to-end with RUNTIME: docker: a real Docker engine, images built from vendors/<vendor>/<framework>/,
containers through the SDK (directly for localhost, through the SSH connection for 127.0.0.x hosts)."""

import json
import re
import signal
import time

from .conftest import materialize, only_run_dir, processes_matching, run_cli, start_cli, wait_for, write_conf


def _docker_conf(tmp_path, env, cases, **extra):
    return write_conf(tmp_path, cases, RUNTIME="docker",
                      DOCKER_BUILD_ARGS=json.dumps({"BASE_IMAGE": env.torch_image}), **extra)


def _edit_dockerfile(home, lines):
    """Append to the cpu vendor's Dockerfile in a materialized FLAGPERF_HOME; returns its folder."""
    dockerfile = home / "vendors" / "cpu" / "pytorch" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\n" + lines)
    return dockerfile.parent


def _ours(client, run_name):
    return client.containers.list(all=True, filters={"label": f"flagperf.run={run_name}"})


def test_docker_run_on_two_ssh_hosts(tmp_path, ssh_bed, docker_clean):
    env = docker_clean
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    conf = _docker_conf(tmp_path, env, {"gemm:pytorch:docker:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], timeout=600)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    for node_rank, address in enumerate(ssh_bed.addresses):
        node = next(run.glob(f"*/round1/{address}_noderank{node_rank}"))
        assert (node / f"rank{node_rank}.out.log").is_file()
        assert (node / "env_prepare.log").is_file()
        ranks = json.loads((node / "ranks.json").read_text())["ranks"]
        assert [(r["rank"], r["exit_code"]) for r in ranks] == [(node_rank, 0)]
    assert list((run / "images").glob("*.log")) or "already there" in (run / "flagperf_run.log").read_text()
    runlog = (run / "flagperf_run.log").read_text()
    assert re.search(r"docker run -d --name flagperf-run\d+-gemm-pytorch-docker-2x1-r1-n0 .* flagperf/cpu-pytorch:",
                     runlog), runlog
    assert "container flagperf-" in runlog and "removed" in runlog
    assert _ours(env.client, run.name) == []


def test_image_reused_unchanged_and_rebuilt_after_edit(tmp_path, flagperf_home, docker_clean):
    env = docker_clean
    conf = _docker_conf(tmp_path, env, {"sleeper:pytorch:img:1:1:1": "null"})
    flagperf_home = materialize(flagperf_home)
    folder = _edit_dockerfile(flagperf_home, f"# test {time.time()}\n")   # a tag no earlier run built

    def image_line():
        code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=600)
        assert code == 0, out + err
        run = sorted((tmp_path / "result").glob("run*"))[-1]
        m = re.search(r"image (flagperf/cpu-pytorch:\w+) (built|already there)", (run / "flagperf_run.log").read_text())
        assert m, (run / "flagperf_run.log").read_text()
        return m.group(1), m.group(2)

    tag1, how1 = image_line()
    assert how1 == "built"
    tag2, how2 = image_line()
    assert (tag2, how2) == (tag1, "already there")
    (folder / "Dockerfile").write_text((folder / "Dockerfile").read_text() + "# edited\n")
    tag3, how3 = image_line()
    assert how3 == "built" and tag3 != tag1
    for tag in (tag1, tag3):
        env.client.images.remove(tag, force=True)


def test_failed_build_fails_the_case_with_its_last_lines(tmp_path, flagperf_home, docker_clean):
    env = docker_clean
    conf = _docker_conf(tmp_path, env, {"sleeper:pytorch:bad:1:1:1": "null", "sleeper:pytorch:bare:1:1:1": "null"})
    flagperf_home = materialize(flagperf_home)
    _edit_dockerfile(flagperf_home, "RUN echo broken-build-marker && exit 42\n")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=600)
    assert code == 1, out + err
    assert "preparation failed" in out and "broken-build-marker" in out
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    assert [c["status"] for c in summary["cases"]] == ["failed", "failed"]


def test_container_that_fails_to_start(tmp_path, docker_clean):
    env = docker_clean
    conf = _docker_conf(tmp_path, env, {"gemm:pytorch:nodev:1:1:1": "null"},
                        ACCE_CONTAINER_OPT='"--device /dev/flagperf-no-such-device"')
    code, out, err = run_cli(["run", "--config", conf], timeout=600)
    assert code == 1, out + err
    assert "flagperf-no-such-device" in out
    assert "Traceback" not in out + err
    run = only_run_dir(tmp_path / "result")
    assert _ours(env.client, run.name) == []


def test_rank_crash_inside_container(tmp_path, flagperf_home, docker_clean):
    env = docker_clean
    (flagperf_home / "vendors" / "cpu" / "sleeper").mkdir()
    (flagperf_home / "vendors" / "cpu" / "sleeper" / "config_crash.yaml").write_text(
        "fail_rank: 1\nfail_code: 7\nsleep_s: 120\n")
    conf = _docker_conf(tmp_path, env, {"sleeper:pytorch:crash:1:2:1": "null"})
    flagperf_home = materialize(flagperf_home)
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=600)
    assert code == 1, out + err
    assert "rank 1" in out and "exit code 7" in out
    run = only_run_dir(tmp_path / "result")
    ranks = json.loads(next(run.glob("*/round1/*/ranks.json")).read_text())["ranks"]
    assert ranks[1]["exit_code"] == 7 and ranks[0]["stopped_by_launcher"]
    assert _ours(env.client, run.name) == []


def test_sigint_mid_round_leaves_no_container(tmp_path, flagperf_home, docker_clean):
    env = docker_clean
    (flagperf_home / "vendors" / "cpu" / "sleeper").mkdir()
    (flagperf_home / "vendors" / "cpu" / "sleeper" / "config_long.yaml").write_text("sleep_s: 300\n")
    conf = _docker_conf(tmp_path, env, {"sleeper:pytorch:long:1:2:1": "null"})
    flagperf_home = materialize(flagperf_home)
    proc = start_cli(["run", "--config", conf], home=flagperf_home)
    try:
        wait_for(lambda: list((tmp_path / "result").glob("run*/*/round1/*/rank1.out.log")), 300,
                 "the ranks to start in the container")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    run = only_run_dir(tmp_path / "result")
    assert _ours(env.client, run.name) == []
    assert processes_matching("sleeper/main.py") == []
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"


def test_clean_removes_leftovers_by_label(tmp_path, docker_clean):
    env = docker_clean
    leftover = env.client.containers.create(env.base_image, ["sleep", "600"],
                                            name=f"flagperf-leftover-{time.time_ns()}",
                                            labels={"flagperf.run": "run19990101000000"})
    other = env.client.containers.create(env.base_image, ["sleep", "600"], labels={"not.flagperf": "1"})
    try:
        conf = write_conf(tmp_path, {"gemm:pytorch:x:1:1:1": "null"})
        code, out, err = run_cli(["clean", "--config", conf, "--run", "run19990101000000"])
        assert code == 0, out + err
        assert leftover.name in out
        names = [c.name for c in env.client.containers.list(all=True)]
        assert leftover.name not in names and other.name in names
    finally:
        other.remove(force=True)


def test_docker_api_error_fails_the_case_and_the_run_goes_on(tmp_path, docker_clean):
    """An API error while creating a container (an unknown runtime) fails that round as 'error', with the
    daemon's message; the next case still runs, and the run ends with exit 1, not as an internal error."""
    env = docker_clean
    conf = _docker_conf(tmp_path, env, {"gemm:pytorch:api1:1:1:1": "null", "gemm:pytorch:api2:1:1:1": "null"},
                        ACCE_CONTAINER_OPT='"--runtime=flagperf-no-such-runtime"')
    code, out, err = run_cli(["run", "--config", conf], timeout=600)
    assert code == 1, out + err
    assert "Traceback" not in out + err and "internal error" not in out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    rounds = [c["rounds"][0] for c in summary["cases"]]
    assert [r["status"] for r in rounds] == ["error", "error"], rounds
    assert all("flagperf-no-such-runtime" in r["failure"]["reason"] for r in rounds), rounds
    assert _ours(env.client, run.name) == []
