"""How the driver reaches a machine: one small Transport interface, one module per way."""

from flagperf.hosts.base import CommandResult, HostError, Process, Transport


def open_transport(host, cluster) -> Transport:
    """The transport for a host: ``localhost`` is this machine; every other address goes through SSH."""
    if host.is_local:
        from flagperf.hosts.local import LocalTransport
        return LocalTransport(host)
    raise HostError(f"{host.address}: SSH hosts are not supported by this version yet; "
                    f"only 'localhost' can be used in HOSTS")


__all__ = ["CommandResult", "HostError", "Process", "Transport", "open_transport"]
