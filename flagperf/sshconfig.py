"""~/.ssh/config lookups shared by the plan (master address) and the SSH transport (port, user, identity)."""

from __future__ import annotations

from pathlib import Path


def ssh_config_lookup(address: str) -> dict:
    """~/.ssh/config entries for an address (hostname, user, port, identityfile), {} when none."""
    path = Path("~/.ssh/config").expanduser()
    if not path.is_file():
        return {}
    import paramiko
    try:
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(address))
    except Exception:  # noqa: BLE001 - a broken ssh config must not stop the run; paramiko parses loosely
        return {}


def resolved_address(address: str) -> str:
    """The address that other hosts should use for this host (HostName from ~/.ssh/config, if any)."""
    return ssh_config_lookup(address).get("hostname", address)
