"""How the driver reaches a machine: one small Transport interface, one module per way."""

from flagperf.hosts.base import CommandResult, HostError, Process, Transport


def open_transport(host, cluster, *, accept_new_host_keys: bool = False) -> Transport:
    """The transport for a host: ``localhost`` is this machine; every other address goes through SSH."""
    if host.is_local:
        from flagperf.hosts.local import LocalTransport
        return LocalTransport(host)
    from flagperf.hosts.ssh import SSHTransport
    return SSHTransport(host, cluster.known_hosts, accept_new_host_keys=accept_new_host_keys)


__all__ = ["CommandResult", "HostError", "Process", "Transport", "open_transport"]
