"""Host health checks: each host gets a typed outcome and a one-line remedy."""

from __future__ import annotations

import json
from dataclasses import dataclass

from flagperf.hosts import HostError, open_transport
from flagperf.hosts.fanout import fan_out

MIN_PYTHON = (3, 8)
MIN_FREE_BYTES = 1 << 30


@dataclass(frozen=True)
class HostCheck:
    host: str
    outcome: str          # ok | unreachable | python_missing | python_too_old | deploy_path_missing | ...
    detail: str
    remedy: str = ""
    info: dict | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def check_hosts(config, hosts=None, *, need_nproc=None, deadline_s=90.0) -> list:
    """Check every host in parallel; ``need_nproc`` maps host address -> accelerators the cases need there."""
    hosts = list(hosts if hosts is not None else config.cluster.hosts)
    need_nproc = need_nproc or {}
    outcomes = fan_out(hosts, lambda h: _check_one(config, h, need_nproc.get(h.address, 0)),
                       deadline_s=deadline_s, max_workers=32)
    return [o.value if o.ok else HostCheck(o.key.address, "timeout" if "no answer" in o.error else "error",
                                           o.error, "check that the host is up and reachable")
            for o in outcomes]


def needed_accelerators(config) -> dict:
    need = {}
    for case in config.test.cases:
        for host in config.cluster.hosts[:case.nnodes]:
            need[host.address] = max(need.get(host.address, 0), case.nproc)
    return need


def _check_one(config, host, nproc) -> HostCheck:
    name = host.address
    try:
        tr = open_transport(host, config.cluster)
    except HostError as exc:
        return HostCheck(name, "unreachable", str(exc), "fix the address in the cluster config")
    try:
        fp = host.flagperf_path
        probe = f"{fp}/launcher/probe.py"
        log_path = str(config.test.log_path)
        try:
            r = tr.run([host.python, "-c", "import sys; print(sys.version_info[:2] >= (3, 8))"], timeout=30)
        except HostError as exc:
            return HostCheck(name, "python_missing", str(exc), f"install Python 3 or set PYTHON for {name}")
        if not r.ok:
            return HostCheck(name, "python_missing", r.stderr.strip()[-200:], f"set PYTHON for {name}")
        if r.stdout.strip() != "True":
            return HostCheck(name, "python_too_old", f"{host.python} is older than 3.8",
                             f"point PYTHON for {name} at Python >= 3.8")
        r = tr.run([host.python, probe, "--path", fp, "--path", log_path, "--torch"], timeout=60)
        if not r.ok:
            if "No such file" in r.stderr or "can't open file" in r.stderr:
                return HostCheck(name, "deploy_path_missing", f"{fp} holds no flagperf tree",
                                 f"set FLAGPERF_PATH for {name} to a flagperf checkout")
            return HostCheck(name, "error", r.stderr.strip()[-300:], "see the message")
        info = json.loads(r.stdout)
        paths = info["paths"]
        if not paths[log_path]["writable"]:
            return HostCheck(name, "log_path_not_writable", f"cannot write under {log_path}",
                             "make FLAGPERF_LOG_PATH writable", info)
        if (paths[log_path]["free_bytes"] or 0) < MIN_FREE_BYTES:
            return HostCheck(name, "low_disk", f"{paths[log_path]['free_bytes'] // (1 << 20)} MiB free under "
                             f"{log_path}", "free at least 1 GiB there", info)
        if info.get("torch") is None:
            return HostCheck(name, "torch_missing", f"{host.python} cannot import torch: {info.get('torch_error')}",
                             f"install torch for {host.python} (README: set-up)", info)
        if config.vendor.device == "cuda" and info.get("cuda_devices", 0) < nproc:
            return HostCheck(name, "too_few_accelerators", f"{info.get('cuda_devices', 0)} CUDA device(s), "
                             f"cases need {nproc}", "lower nproc or use a host with more GPUs", info)
        detail = f"python {'.'.join(map(str, info['python']))}, torch {info['torch']}, "
        detail += f"{info.get('cuda_devices', 0)} GPU(s)" if config.vendor.device == "cuda" else \
            f"{info['cpu_count']} CPU(s)"
        return HostCheck(name, "ok", detail, "", info)
    finally:
        tr.close()
