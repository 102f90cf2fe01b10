"""Where a node's ranks run on a host: one small Runtime interface, one module per way."""

from flagperf.runtimes.base import Runtime


def get_runtime(name: str, config=None) -> Runtime:
    if name == "bare":
        from flagperf.runtimes.bare import BareRuntime
        return BareRuntime()
    if name == "docker":
        from flagperf.runtimes.docker import DockerRuntime
        return DockerRuntime(config)
    raise ValueError(f"runtime {name!r} is not available in this version")


__all__ = ["Runtime", "get_runtime"]
