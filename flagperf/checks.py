"""Host health checks: connect to every host in parallel, probe it, give each a typed outcome and a remedy.

Outcomes: ok, connection_refused, timeout, auth_failed, unknown_host_key, changed_host_key, unreachable,
deploy_path_missing, python_missing, python_too_old, torch_missing, low_disk, log_path_not_writable,
too_few_accelerators, error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from flagperf.hosts import HostError, open_transport
from flagperf.hosts.fanout import fan_out

MIN_PYTHON = (3, 8)
MIN_FREE_BYTES = 1 << 30
MAX_PARALLEL = 32
REMEDIES = {
    "connection_refused": "start sshd on the host or fix SSH_PORT",
    "timeout": "check that the host is up and that a firewall lets SSH through",
    "auth_failed": "fix SSH_USER / SSH_KEY, or add the key to the host's authorized_keys",
    "unknown_host_key": "verify the fingerprint and add it to KNOWN_HOSTS, or pass --accept-new-host-keys",
    "changed_host_key": "find out why the key changed; if the host was reinstalled, remove its old entry "
                        "from KNOWN_HOSTS",
    "unreachable": "fix the address in the cluster config",
    "deploy_path_missing": "run `flagperf deploy` (flagperf run deploys by itself)",
    "python_missing": "install Python 3 there or set PYTHON for the host",
    "python_too_old": "point PYTHON at Python >= 3.8",
    "torch_missing": "install torch for that interpreter (README: set-up) or set PYTHON",
    "low_disk": "free at least 1 GiB under the result directory",
    "log_path_not_writable": "make the result directory writable for the SSH user",
    "too_few_accelerators": "lower nproc or use hosts with more accelerators",
    "error": "see the message",
}


@dataclass(frozen=True)
class HostCheck:
    host: str
    outcome: str
    detail: str
    remedy: str = ""
    info: dict | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def failed(host: str, outcome: str, detail: str, info=None) -> HostCheck:
    return HostCheck(host, outcome, detail, REMEDIES.get(outcome, ""), info)


def unique_hosts(hosts) -> list:
    seen, out = set(), []
    for h in hosts:
        if h.address not in seen:
            seen.add(h.address)
            out.append(h)
    return out


def connect_hosts(config, hosts, *, accept_new_host_keys=False, deadline_s=60.0):
    """Open one transport per host in parallel: ({address: transport}, [failed HostCheck])."""
    outcomes = fan_out(unique_hosts(hosts),
                       lambda h: open_transport(h, config.cluster, accept_new_host_keys=accept_new_host_keys),
                       deadline_s=deadline_s, max_workers=MAX_PARALLEL)
    transports, failures = {}, []
    for o in outcomes:
        if o.ok:
            transports[o.key.address] = o.value
        elif "no answer within" in o.error:
            failures.append(failed(o.key.address, "timeout", o.error))
        else:
            failures.append(failed(o.key.address, getattr(o.exc, "kind", "error"), o.error))
    return transports, failures


def probe_hosts(config, transports: dict, hosts, need_nproc=None, *, source_root=None, deadline_s=120.0) -> list:
    """Probe every connected host in parallel (Python, deploy path, torch, disk, accelerators)."""
    from flagperf.plan import host_result_root
    need_nproc = need_nproc or {}
    root = source_root or config.source_root
    probe_source = (root / "launcher" / "probe.py").read_text(encoding="utf-8")
    todo = [h for h in unique_hosts(hosts) if h.address in transports]
    outcomes = fan_out(todo, lambda h: _probe_one(config, transports[h.address], h, need_nproc.get(h.address, 0),
                                                  probe_source, str(host_result_root(h, config))),
                       deadline_s=deadline_s, max_workers=MAX_PARALLEL)
    return [o.value if o.ok else failed(o.key.address, "timeout" if "no answer" in o.error else "error", o.error)
            for o in outcomes]


def check_hosts(config, hosts=None, *, need_nproc=None, accept_new_host_keys=False) -> list:
    """`flagperf check`: connect and probe every host; one HostCheck per host, in cluster order."""
    hosts = unique_hosts(hosts if hosts is not None else config.cluster.hosts)
    transports, failures = connect_hosts(config, hosts, accept_new_host_keys=accept_new_host_keys)
    try:
        results = {c.host: c for c in failures}
        results.update({c.host: c for c in probe_hosts(config, transports, hosts, need_nproc)})
    finally:
        for t in transports.values():
            t.close()
    return [results[h.address] for h in hosts]


def needed_accelerators(config) -> dict:
    need = {}
    for case in config.test.cases:
        for host in config.cluster.hosts[:case.nnodes]:
            need[host.address] = max(need.get(host.address, 0), case.nproc)
    return need


def _probe_one(config, tr, host, nproc, probe_source, result_root) -> HostCheck:
    name = host.address
    fp = host.flagperf_path
    launcher_dir = str(PurePosixPath(fp) / "launcher")
    try:
        r = tr.run([host.python, "-c", probe_source, "--path", fp, "--path", launcher_dir, "--path", result_root],
                   timeout=60)
    except HostError as exc:
        if exc.kind in ("command_failed", "error") or "not found" in str(exc):
            return failed(name, "python_missing", str(exc))
        raise
    if r.returncode == 127:
        return failed(name, "python_missing", f"{host.python}: {(r.stderr or r.stdout).strip()[-200:]}")
    if not r.ok:
        if "SyntaxError" in r.stderr:
            return failed(name, "python_too_old", f"{host.python} cannot run the probe: {r.stderr.strip()[-120:]}")
        return failed(name, "error", f"probe failed: {r.stderr.strip()[-300:]}")
    info = json.loads(r.stdout)
    version = tuple(info["python"][:2])
    if version < MIN_PYTHON:
        return failed(name, "python_too_old", f"{host.python} is Python {'.'.join(map(str, info['python']))}")
    paths = info["paths"]
    if not paths[fp]["exists"] or not paths[launcher_dir]["exists"]:
        return failed(name, "deploy_path_missing", f"{fp} holds no flagperf tree", info)
    if not paths[result_root]["writable"]:
        return failed(name, "log_path_not_writable", f"cannot write under {result_root}", info)
    free = paths[result_root]["free_bytes"] or 0
    if free < MIN_FREE_BYTES:
        return failed(name, "low_disk", f"{free // (1 << 20)} MiB free under {result_root}", info)
    if info.get("torch") is None:
        return failed(name, "torch_missing", f"{host.python} cannot import torch: {info.get('torch_error')}", info)
    if config.vendor.device == "cuda":
        have = max(info.get("gpus") or 0, 0)
        if have < nproc:
            return failed(name, "too_few_accelerators", f"{have} CUDA device(s), the cases need {nproc}", info)
        detail = f"{have} GPU(s)"
    else:
        detail = f"{info['cpu_count']} CPU(s)"
    detail = f"python {'.'.join(map(str, info['python']))}, torch {info['torch']}, {detail}, " \
             f"{free / (1 << 30):.0f} GiB free"
    return HostCheck(name, "ok", detail, "", info)
