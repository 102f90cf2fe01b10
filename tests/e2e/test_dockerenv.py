"""The Docker test environment (testbed/dockerenv.py) for real: the daemon answers, both test images exist, torch
runs in a container with host networking, and two gloo ranks in two containers all_reduce over 127.0.0.1 --
what the multi-node docker-runtime tests need.  The first run builds the images (~2 min); later runs are cached."""

import contextlib
import os

from testbed import dockerenv

# docker_env and docker_clean are the fixtures of tests/e2e/conftest.py (one Docker set-up per process:
# dockerenv.get_env)


def test_daemon_answers_and_images_exist(docker_env):
    client = docker_env.client
    assert client.ping() is True
    info = client.info()
    assert info["Driver"], info
    for tag in (docker_env.base_image, docker_env.torch_image):
        image = client.images.get(tag)
        assert tag in image.tags
    base = client.images.get(docker_env.base_image)
    assert base.attrs["Config"]["Cmd"] == ["/bin/bash"]


def test_torch_imports_in_a_host_network_container(docker_env, docker_clean):
    # how long it takes: bench/testbed_perf.py
    out = docker_env.client.containers.run(
        docker_env.torch_image, ["python3", "-c", "import torch; print(torch.__version__)"],
        network_mode="host", remove=True, labels={dockerenv.RUN_LABEL: "test-dockerenv"})
    assert out.decode().strip().startswith(dockerenv.TORCH_VERSION), out


def test_two_gloo_ranks_in_two_containers_all_reduce(docker_env, docker_clean):
    # bounded by the timeout of each container's wait; how long it takes: bench/testbed_perf.py
    results = dockerenv.run_gloo_allreduce(docker_env.client, docker_env.torch_image, world_size=2, timeout=120,
                                           label="test-dockerenv-gloo")
    assert len(results) == 2
    for rank, (code, output) in enumerate(results):
        assert code == 0, f"rank {rank}: exit {code}\n{output}"
        assert f"ALLREDUCE {rank} 3.0" in output, f"rank {rank}:\n{output}"     # 1 + 2
    label = f"{dockerenv.RUN_LABEL}=test-dockerenv-gloo"
    assert docker_env.client.containers.list(all=True, filters={"label": label}) == []


def test_cleanup_removes_labelled_containers_only(docker_env):
    client = docker_env.client
    value = f"test-dockerenv-cleanup-{os.getpid()}"        # only ours: another session may share the daemon
    labelled = client.containers.run(docker_env.base_image, ["sleep", "300"], detach=True, network_mode="host",
                                     labels={dockerenv.RUN_LABEL: value})
    kept = client.containers.create(docker_env.base_image, ["true"], network_mode="host",
                                    labels={dockerenv.RUN_LABEL: value})
    other = client.containers.create(docker_env.base_image, ["true"], network_mode="host")
    try:
        assert {labelled.id, kept.id} <= dockerenv.flagperf_container_ids(client)
        removed = dockerenv.cleanup_flagperf_containers(client, value=value, keep={kept.id})
        assert removed == [labelled.name]
        assert [c.id for c in client.containers.list(all=True, filters={"label": f"{dockerenv.RUN_LABEL}={value}"})
                ] == [kept.id]
        assert client.containers.get(other.id).id == other.id
        assert dockerenv.cleanup_flagperf_containers(client, value=value) == [kept.name]
    finally:
        for c in (labelled, kept, other):
            with contextlib.suppress(dockerenv.docker.errors.NotFound):
                c.remove(force=True)
