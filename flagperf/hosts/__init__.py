"""How the driver reaches a machine: one small Transport interface, one module per way."""

from flagperf.hosts.base import CommandResult, HostError, MissingPath, Process, Transport


def open_transport(host, cluster, *, accept_new_host_keys: bool = False) -> Transport:
    """The transport for a host: ``localhost`` is this machine; every other address goes through SSH (the
    cluster's host-list options name the known_hosts file). Each transport is imported when first needed:
    paramiko takes a while to import, and a run on localhost alone never needs it."""
    if host.is_local:
        from flagperf.hosts.local import LocalTransport
        return LocalTransport(host)
    from flagperf.hosts.ssh import SSHTransport
    return SSHTransport(host, cluster.options.known_hosts, accept_new_host_keys=accept_new_host_keys)


__all__ = ["CommandResult", "HostError", "MissingPath", "Process", "Transport", "open_transport"]
