"""FlagPerf's ``ACCE_CONTAINER_OPT`` (a ``docker run`` option string) translated into ContainerSpec fields.

Only the options that describe how accelerators, devices, mounts and the host's namespaces reach the container
are accepted (:data:`OPTIONS`); anything else (resource limits, ports, names, ...) is reported, never passed on
silently. See docs/vendors.md.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

from flagperf.vendors import (IPC_MODES, LIST_FIELDS, NAMESPACE_MODES, ULIMIT_NAMES, ContainerSpec, check_device,
                              check_group, check_size, check_volume, check_word, device_target, parse_ulimit,
                              split_volume)

KEY = "ACCE_CONTAINER_OPT"
# option -> (field, takes a value); short forms map to their long one
OPTIONS = {
    "--gpus": ("gpus", True), "--device": ("devices", True), "--volume": ("volumes", True),
    "--privileged": ("privileged", False), "--ipc": ("ipc_mode", True), "--shm-size": ("shm_size", True),
    "--ulimit": ("ulimits", True), "--group-add": ("group_add", True), "--cap-add": ("cap_add", True),
    "--security-opt": ("security_opt", True), "--env": ("env", True), "--runtime": ("runtime", True),
    "--network": ("network", True), "--pid": ("pid_mode", True), "--uts": ("uts_mode", True),
    "--mount": ("mount", True),
}
ALIASES = {"-v": "--volume", "-e": "--env", "--net": "--network"}
SUPPORTED = ", ".join(list(OPTIONS) + list(ALIASES))


def translate_container_opt(text: str) -> tuple[dict, list]:
    """(overrides, problems): the options as ContainerSpec fields (for :func:`merge`), and one line per
    problem, each starting with ``ACCE_CONTAINER_OPT: ``."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as exc:
        return {}, [f"{KEY}: cannot split {text!r} into options: {exc}"]
    out: dict = {}
    problems: list = []
    i = 0
    while i < len(tokens):
        token, i = tokens[i], i + 1
        if not token.startswith("-") or token == "-":
            problems.append(f"{KEY}: unexpected argument {token!r}; expected options only (flagperf chooses "
                            f"the image and the command)")
            continue
        if token[:2] in ALIASES and len(token) > 2:              # -v/a:/b, -v=/a:/b
            name, eq, value = token[:2], "=", token[2:].removeprefix("=")
        else:
            name, eq, value = token.partition("=")
        typed, name = name, ALIASES.get(name, name)
        if name not in OPTIONS:
            problems.append(f"{KEY}: option {typed!r} is not supported (supported: {SUPPORTED})")
            if not eq and i < len(tokens) and not tokens[i].startswith("-"):
                i += 1                                           # its value, most likely
            continue
        field, takes_value = OPTIONS[name]
        if takes_value and not eq:
            if i == len(tokens):
                problems.append(f"{KEY}: option {typed} needs a value")
                break
            value, i = tokens[i], i + 1
        error = _apply(out, field, value if (takes_value or eq) else None)
        if error:
            problems.append(f"{KEY}: {typed} {value}: {error}" if value else f"{KEY}: {typed}: {error}")
    return out, problems


def _apply(out: dict, field: str, value) -> str | None:
    """Record one option in ``out``; return what was expected when the value is wrong."""
    if field == "privileged":
        if value not in (None, "true", "false"):
            return "expected no value, true or false"
        out["privileged"] = value != "false"
    elif field == "gpus":
        gpus = _gpus(value)
        if gpus is None:
            return "expected all, a number of GPUs, or device=ID[,ID...]"
        out["gpus"] = gpus
    elif field == "network":
        if value != "host":
            return "expected host: flagperf runs every container on the host network"
    elif field in ("pid_mode", "uts_mode"):
        if value not in NAMESPACE_MODES:
            return "expected host (the host's namespace; without the option the container has its own)"
        out[field] = value
    elif field == "mount":
        volume = _bind_mount(value)
        if volume.startswith("expected"):
            return volume
        out.setdefault("volumes", []).append(volume)
    elif field == "ipc_mode":
        if value not in IPC_MODES:
            return f"expected one of {', '.join(IPC_MODES)}"
        out["ipc_mode"] = value
    elif field == "shm_size":
        if check_size(value):
            return "expected a size from 1M to 16T, such as 32G or 512M"
        out["shm_size"] = value
    elif field == "runtime":
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            return "expected a docker runtime name such as nvidia"
        out["runtime"] = value
    elif field == "env":
        key, eq, val = value.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            return "expected NAME=VALUE"
        out.setdefault("env", {})[key] = val
    elif field == "ulimits":
        key, eq, val = value.partition("=")
        if key not in ULIMIT_NAMES or not eq:
            return f"expected NAME=SOFT[:HARD] with NAME one of {', '.join(ULIMIT_NAMES)}"
        try:
            out.setdefault("ulimits", {})[key] = parse_ulimit(val)
        except ValueError as exc:
            return str(exc)
    else:                                   # devices, volumes, group_add, cap_add, security_opt
        check = {"devices": check_device, "volumes": check_volume, "group_add": check_group}.get(field, check_word)
        error = check(value)
        if error:
            return error
        out.setdefault(field, []).append(value)
    return None


MOUNT_EXPECTED = "expected type=bind,source=/host/path,target=/container/path[,readonly]"


def _bind_mount(value: str) -> str:
    """``--mount type=bind,source=/a,target=/b[,readonly]`` as the volume ``/a:/b[:ro]``; or what was expected
    (a string starting with "expected"). Only bind mounts: a named volume or tmpfs is not the host's file."""
    fields: dict = {}
    for item in value.split(","):
        key, eq, val = item.partition("=")
        key = {"src": "source", "dst": "target", "destination": "target", "ro": "readonly"}.get(key, key)
        if key not in ("type", "source", "target", "readonly") or key in fields or (not eq and key != "readonly"):
            return f"{MOUNT_EXPECTED}; {item!r} is not one of these"
        fields[key] = val if eq else "true"
    if fields.get("type") != "bind":
        return f"{MOUNT_EXPECTED}; only bind mounts (type=bind) are supported"
    if fields.get("readonly", "false") not in ("true", "false", "1", "0"):
        return f"{MOUNT_EXPECTED}; readonly is true or false"
    mode = ":ro" if fields.get("readonly") in ("true", "1") else ""
    volume = f"{fields.get('source', '')}:{fields.get('target', '')}{mode}"
    if check_volume(volume):
        return f"{MOUNT_EXPECTED}; source and target must be absolute paths without ':'"
    return volume


def _gpus(value: str):
    value = value.strip().strip('"')
    if value == "all":
        return "all"
    if re.fullmatch(r"(count=)?[0-9]+", value):
        count = int(value.rpartition("=")[2])
        return count if count else "none"
    if value == "count=all":
        return "all"
    m = re.fullmatch(r"device=([A-Za-z0-9-]+(,[A-Za-z0-9-]+)*)", value)
    return tuple(m.group(1).split(",")) if m else None


def merge(spec: ContainerSpec, overrides: dict) -> ContainerSpec:
    """``spec`` with ``overrides`` (from :func:`translate_container_opt`) applied:
    list entries are added (one for the same container path replaces the vendor's), env and ulimits are
    updated by name, other values are replaced."""
    changes: dict = {}
    for key, value in overrides.items():
        if key in LIST_FIELDS:
            target = {"devices": device_target, "volumes": lambda v: split_volume(v)[1]}.get(key, str)
            new = {target(v) for v in value}
            changes[key] = tuple(v for v in getattr(spec, key) if target(v) not in new) + \
                tuple(dict.fromkeys(value))
        elif key == "env":
            changes[key] = tuple({**dict(spec.env), **{k: str(v) for k, v in value.items()}}.items())
        elif key == "ulimits":
            merged = {n: (s, h) for n, s, h in spec.ulimits}
            merged.update(value)
            changes[key] = tuple((n, s, h) for n, (s, h) in merged.items())
        else:
            changes[key] = value
    return dataclasses.replace(spec, **changes)
