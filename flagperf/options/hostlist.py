"""The ``ssh`` backend's cluster keys: ``HOSTS`` and how to reach each host (SSH_PORT, SSH_USER, SSH_KEY,
KNOWN_HOSTS), validated at load with the rest of the cluster config.

Light on purpose: ``flagperf.config`` calls :func:`load_options` through the backend registry without importing
the backend or paramiko (read lazily, for ~/.ssh/config only). ``~/.ssh/config`` is read here and by the SSH
transport (:mod:`flagperf.hosts.ssh`), so that the plan's master address and the connection agree.
"""

from __future__ import annotations

import getpass
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from flagperf.options.base import LOCALHOST, BackendOptions, HostSpec
from flagperf.options.registry import register
from flagperf.checker import check_length, resolve
from flagperf.yamlio import LineMap, where

HOSTLIST_KEYS = ("SSH_PORT", "SSH_USER", "SSH_KEY", "KNOWN_HOSTS")     # besides HOSTS, MASTER_PORT and PYTHON
HOST_KEYS = ("HOST", "SSH_PORT", "SSH_USER", "SSH_KEY", "PYTHON", "FLAGPERF_PATH")
MAX_HOSTS = 10_000
# `flagperf check`: what to do about each way an SSH connection fails (flagperf.hosts.ssh names the kind)
CONNECT_REMEDIES = {
    "connection_refused": "start sshd on the host or fix SSH_PORT",
    "auth_failed": "fix SSH_USER / SSH_KEY, or add the key to the host's authorized_keys",
    "unknown_host_key": "verify the fingerprint and add it to KNOWN_HOSTS, or pass --accept-new-host-keys",
    "changed_host_key": "find out why the key changed; if the host was reinstalled, remove its old entry "
                        "from KNOWN_HOSTS",
}
# flagperf convert: keys whose values are paths (resolved against the source file) and ports
PATH_KEYS = ("SSH_KEY", "KNOWN_HOSTS")
PORT_KEYS = ("SSH_PORT",)
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class HostListOptions(BackendOptions):
    """HOSTS (each with how SSH reaches it) and KNOWN_HOSTS of a cluster config (docs/configuration.md)."""

    hosts: tuple = ()               # HostSpec, FLAGPERF_PATH "" where the host's entry gives none
    known_hosts: str = ""

    container_runtimes: ClassVar[tuple] = ("docker",)

    def plan_hosts(self, cases, flagperf_path: str) -> tuple:
        return tuple(h if h.flagperf_path else replace(h, flagperf_path=flagperf_path) for h in self.hosts)

    def master_address(self, host: HostSpec) -> str:
        """HostName of ~/.ssh/config for a host listed by an alias there: the address the other hosts use."""
        return "127.0.0.1" if host.is_local else resolved_address(host.address)

    def mpi_shell_config(self, hosts) -> str | None:
        """An ssh_config for node 0's mpirun with each host's SSH_PORT, SSH_USER and SSH_KEY (or its ~/.ssh/config
        entries, as flagperf's own connection reads them), KNOWN_HOSTS checked strictly, no prompt."""
        blocks = []
        for host in hosts:
            if host.is_local:
                continue
            cfg = ssh_config_lookup(host.address)
            keys = [host.ssh_key] if host.ssh_key else [str(Path(p).expanduser()) for p in cfg.get("identityfile", [])]
            lines = [f"Host {_ssh_value(host.address)}", f"  HostName {_ssh_value(cfg.get('hostname', host.address))}",
                     f"  Port {int(host.ssh_port or cfg.get('port') or 22)}",
                     f"  User {_ssh_value(host.ssh_user or cfg.get('user') or getpass.getuser())}"]
            lines += [f"  IdentityFile {_ssh_value(k)}" for k in keys]
            lines += ["  IdentitiesOnly yes"] if keys else []
            lines += [f"  UserKnownHostsFile {_ssh_value(str(Path(self.known_hosts).expanduser()))}",
                      "  StrictHostKeyChecking yes", "  BatchMode yes", "  ConnectTimeout 30"]
            blocks.append("\n".join(lines))
        return "\n".join(blocks) + "\n" if blocks else ""

    def to_dict(self) -> dict:
        return {"HOSTS": [host_fields(h) for h in self.hosts], "KNOWN_HOSTS": self.known_hosts}


def _ssh_value(value) -> str:
    """One ssh_config value, double-quoted when it holds white space; ValueError for what ssh_config cannot hold."""
    text = str(value)
    if not text or any(c in text for c in '"\n\r\0') or any(ord(c) < 32 for c in text):
        raise ValueError(f"{text!r} cannot be written into an ssh_config file")
    return f'"{text}"' if any(c.isspace() for c in text) else text


def host_fields(host: HostSpec) -> dict:
    """A host as the effective config and run.json record it."""
    return {"HOST": host.address, "SSH_PORT": host.ssh_port, "SSH_USER": host.ssh_user, "SSH_KEY": host.ssh_key,
            "PYTHON": host.python, "FLAGPERF_PATH": host.flagperf_path}


def host_from_fields(entry: dict) -> HostSpec:
    """The inverse of :func:`host_fields` (run.json of an earlier run); KeyError, TypeError when incomplete."""
    return HostSpec(entry["HOST"], entry.get("SSH_PORT"), entry.get("SSH_USER"), entry.get("SSH_KEY"),
                    entry.get("PYTHON") or "python3", entry.get("FLAGPERF_PATH") or "")


def default_options() -> HostListOptions:
    """No cluster config: this machine alone."""
    return HostListOptions(hosts=(HostSpec(LOCALHOST, None, None, None, sys.executable, ""),),
                           known_hosts=str(Path(DEFAULT_KNOWN_HOSTS).expanduser()))


def ssh_config_lookup(address: str) -> dict:
    """~/.ssh/config entries for an address (hostname, user, port, identityfile), {} when none."""
    path = Path("~/.ssh/config").expanduser()
    if not path.is_file():
        return {}
    import paramiko     # only where a ~/.ssh/config exists: loading the config stays light
    try:
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(address))
    except Exception:  # noqa: BLE001 - a broken ssh config must not stop the run; paramiko parses loosely
        return {}


def resolved_address(address: str) -> str:
    """The address that other hosts should use for this host (HostName from ~/.ssh/config, if any)."""
    return ssh_config_lookup(address).get("hostname", address)


def load_options(ck, data) -> HostListOptions | None:
    """Validate HOSTS, SSH_PORT, SSH_USER, SSH_KEY and KNOWN_HOSTS of one cluster config; problems go to ``ck``
    (flagperf.checker.Checker). None when no host could be read (the problems say why)."""
    path, problems = ck.path, ck.problems
    port = ck.port(data, "SSH_PORT", None)
    user = ck.get(data, "SSH_USER", str, None)
    key = ck.path_value(data, "SSH_KEY")
    known_hosts = ck.path_value(data, "KNOWN_HOSTS", str(Path(DEFAULT_KNOWN_HOSTS).expanduser()))
    python = data.get("PYTHON")     # its type is checked with the other cluster keys
    python = python if isinstance(python, str) else None
    hosts_raw = data.get("HOSTS")
    hosts = []
    if "HOSTS" not in data:
        problems.append(f"{path}: HOSTS: required key is missing; expected a list of addresses")
    elif not isinstance(hosts_raw, list) or not hosts_raw:
        ck.add(data, "HOSTS", "expected a non-empty list of addresses or {HOST: ...} mappings")
    elif len(hosts_raw) > MAX_HOSTS:
        ck.add(data, "HOSTS", f"expected at most {MAX_HOSTS} hosts, got {len(hosts_raw)}")
    else:
        for i, entry in enumerate(hosts_raw):
            label = f"HOSTS[{i}]"
            if isinstance(entry, str) and entry.strip():
                address, entry = entry.strip(), LineMap()
                entry.lines = {}
            elif isinstance(entry, LineMap):
                ck.unknown_keys(entry, HOST_KEYS, prefix=f"{label}.")
                address = ck.get(entry, "HOST", str, None, f"{label}.HOST")
                if not address:
                    problems.append(f"{path}: {label}: HOST is required in a host mapping")
                    continue
            else:
                problems.append(f"{where(path, data, 'HOSTS')}: {label}: expected an address string or a mapping "
                                f"with HOST, got {entry!r}")
                continue
            if len(address) > 253 or not re.fullmatch(r"[A-Za-z0-9_.:%\[\]-]+", address):
                problems.append(f"{where(path, data, 'HOSTS')}: {label}: {address!r} is not a host name or address")
                continue
            host_python = ck.get(entry, "PYTHON", str, None, f"{label}.PYTHON")
            if host_python is None:
                host_python = python or (sys.executable if address == LOCALHOST else "python3")
            hosts.append(HostSpec(
                address=address,
                ssh_port=ck.port(entry, "SSH_PORT", port, f"{label}.SSH_PORT"),
                ssh_user=ck.get(entry, "SSH_USER", str, None, f"{label}.SSH_USER") or user,
                ssh_key=ck.path_value(entry, "SSH_KEY", key, f"{label}.SSH_KEY"),
                python=host_python,
                flagperf_path=_host_path(ck, entry, label),
            ))
    if not hosts:
        return None     # the problems are reported above; checking the cases against 0 hosts would only repeat them
    if any(not h.is_local for h in hosts) and Path(known_hosts).is_dir():
        ck.add(data, "KNOWN_HOSTS", f"expected a known_hosts file, {known_hosts} is a directory")
    return HostListOptions(hosts=tuple(hosts), known_hosts=known_hosts)


def _host_path(ck, entry, label) -> str:
    value = ck.get(entry, "FLAGPERF_PATH", str, None, f"{label}.FLAGPERF_PATH")
    if value is None:
        return ""
    # Remote paths are taken as written (absolute); only localhost paths resolve against the file.
    try:
        return str(resolve(ck.path, value)) if not value.startswith("/") else _checked_remote(value)
    except ValueError as exc:
        ck.add(entry, "FLAGPERF_PATH", str(exc), f"{label}.FLAGPERF_PATH")
        return ""


def _checked_remote(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"a path may not hold a NUL character, got {value!r}")
    check_length(value, value)
    return value


register("ssh", "flagperf.backends.hostlist:HostListBackend", runtimes=("bare", "docker"),
         description="a list of hosts: localhost without SSH, every other host over SSH; ranks as plain "
                     "processes (bare) or in the vendor's container (docker)",
         cluster_keys=HOSTLIST_KEYS, options=load_options)
