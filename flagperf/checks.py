"""Host health checks: typed outcomes with a one-line remedy each, and the pure reading of a probe's answer.

Outcomes: ok, connection_refused, timeout, auth_failed, unknown_host_key, changed_host_key, unreachable,
deploy_failed, deploy_path_missing, python_missing, python_too_old, torch_missing, vendor_unusable, low_disk,
log_path_not_writable, too_few_accelerators, port_in_use, error. Backends connect and probe
(``flagperf.backends``); this module only judges what they found.
"""

from __future__ import annotations

from dataclasses import dataclass

from flagperf.options.hostlist import CONNECT_REMEDIES
from flagperf.vendors import usable_on_host

MIN_PYTHON = (3, 9)             # os.waitstatus_to_exitcode in the node launcher
MIN_FREE_BYTES = 1 << 30
CONTRACT_FILE = "flagperf_contract.py"      # at the root of FLAGPERF_PATH, beside launcher/
REMEDIES = {
    **CONNECT_REMEDIES,         # how the host-list backend's connections fail
    "timeout": "check that the host is up and answers (firewall, load); the message says which step timed out",
    "unreachable": "fix the address in the cluster config",
    "deploy_failed": "make FLAGPERF_PATH on the host a writable directory flagperf created (or a new or empty "
                     "one) with enough space, then run again",
    "deploy_path_missing": "run `flagperf deploy` (flagperf run deploys by itself)",
    "python_missing": "install Python 3 there or set PYTHON for the host",
    "python_too_old": "point PYTHON at Python >= 3.9",
    "torch_missing": "install torch for that interpreter (README: set-up) or set PYTHON",
    "vendor_unusable": "install what the vendor profile needs on the host, or pick another VENDOR",
    "low_disk": "free at least 1 GiB under the result directory",
    "log_path_not_writable": "make the result directory writable for the SSH user",
    "too_few_accelerators": "lower nproc (or use auto) or use hosts with more accelerators",
    "port_in_use": "stop what listens on MASTER_PORT on node 0, or set another MASTER_PORT in the cluster config",
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

    @property
    def accelerators(self) -> int | None:
        """The accelerators the probe counted on the host (None: not probed, or no plug-in to count them)."""
        if not self.info:
            return None
        acc = self.info.get("accelerators")
        if isinstance(acc, dict):
            if acc.get("source") in (None, "none") or acc.get("error"):
                return None
            return acc["count"] if isinstance(acc.get("count"), int) else None
        gpus = self.info.get("gpus")
        return gpus if isinstance(gpus, int) else None


def failed(host: str, outcome: str, detail: str, info=None) -> HostCheck:
    return HostCheck(host, outcome, detail, REMEDIES.get(outcome, ""), info)


def unique_hosts(hosts) -> list:
    seen, out = set(), []
    for h in hosts:
        if h.address not in seen:
            seen.add(h.address)
            out.append(h)
    return out


def needed_accelerators(config) -> dict:
    """{address: accelerators the cases need there}; a case with nproc auto needs at least 1 (none on CPU)."""
    need: dict = {}
    for case in config.test.cases:
        n = case.nproc if case.nproc is not None else (0 if config.vendor.device == "cpu" else 1)
        for host in config.cluster.hosts[:case.nnodes]:
            need[host.address] = max(need.get(host.address, 0), n)
    return need


def ranks_per_host(plan) -> dict:
    """{address: the most ranks any round of the plan starts there at once} (nodes of one round that share a host
    add up)."""
    out: dict = {}
    for case in plan.cases:
        for rnd in case.rounds:
            per: dict = {}
            for node in rnd.nodes:
                per[node.host.address] = per.get(node.host.address, 0) + len(node.ranks)
            for address, n in per.items():
                out[address] = max(out.get(address, 0), n)
    return out


def core_warnings(vendor, checks, ranks: dict) -> list:
    """One line per CPU host (vendor without accelerators) whose ranks outnumber the cores its probe counted.
    localhost is left out: its cores are counted when the config loads, and that warning is already given."""
    if vendor is None or vendor.device != "cpu":
        return []
    out = []
    for c in checks:
        cores, n = (c.info or {}).get("cpu_count"), ranks.get(c.host)
        if c.ok and c.host != "localhost" and isinstance(cores, int) and cores > 0 and isinstance(n, int) \
                and n > cores:
            out.append(f"host {c.host}: nproc {n} is above its {cores} CPU core(s): the ranks share cores, so each "
                       f"rank's figure drops and the case's figures are not what the host delivers; use nproc auto "
                       f"or at most {cores}")
    return out


def probe_failure(name: str, python: str, exc_kind: str, message: str) -> HostCheck:
    """The check for a probe that could not be run at all (HostError of kind exc_kind)."""
    if exc_kind == "timeout":
        return failed(name, "timeout", f"the probe ({python}) did not finish: {message}")
    if exc_kind == "not_found":
        return failed(name, "python_missing", message)
    return failed(name, "error", message)


def interpret_probe(name: str, python: str, returncode: int, stdout: str, stderr: str, *, fp: str,
                    launcher_dir: str, result_root: str, need: int, vendor, runtime: str,
                    in_container: bool = False, move_busy_port: bool = False) -> HostCheck:
    """Judge the output of launcher/probe.py on one host. Pure: no I/O. ``move_busy_port`` (a single-host run):
    a taken MASTER_PORT is no failure when the probe found a free one after it (:func:`moved_port`)."""
    import json
    if returncode == 127:
        return failed(name, "python_missing", f"{python}: {(stderr or stdout).strip()[-200:]}")
    if returncode != 0:
        if "SyntaxError" in stderr:
            return failed(name, "python_too_old", f"{python} cannot run the probe: {stderr.strip()[-120:]}")
        return failed(name, "error", f"probe failed (exit {returncode}): {stderr.strip()[-300:]}")
    try:
        info = json.loads(stdout)
        version = tuple(info["python"][:2])
        paths = info["paths"]
    except (ValueError, KeyError, TypeError) as exc:
        return failed(name, "error", f"the probe's answer is not readable ({type(exc).__name__}: {exc}): "
                                     f"{stdout.strip()[:200]!r}")
    if version < MIN_PYTHON:
        return failed(name, "python_too_old", f"{python} is Python {'.'.join(map(str, info['python']))}")
    if not paths.get(fp, {}).get("exists") or not paths.get(launcher_dir, {}).get("exists"):
        return failed(name, "deploy_path_missing", f"{fp} holds no flagperf tree", info)
    contract = paths.get(f"{fp.rstrip('/')}/{CONTRACT_FILE}")
    if contract is not None and not contract.get("is_file"):
        return failed(name, "deploy_path_missing", f"{fp} has launcher/ but no {CONTRACT_FILE} (a tree from an "
                                                   f"older flagperf, or a FLAGPERF_HOME without it)", info)
    root = paths.get(result_root, {})
    if not root.get("writable"):
        return failed(name, "log_path_not_writable", f"cannot write under {result_root}", info)
    free = root.get("free_bytes") or 0
    if free < MIN_FREE_BYTES:
        return failed(name, "low_disk", f"{free // (1 << 20)} MiB free under {result_root}", info)
    port = info.get("master_port")
    if isinstance(port, dict) and port.get("free") is False and not (move_busy_port and _free_port(port)):
        holders = port.get("holders")
        held = ""
        if isinstance(holders, list) and holders:
            held = f"; listening there: {', '.join(str(h) for h in holders)}"
        return failed(name, "port_in_use", f"MASTER_PORT {port.get('port')} is taken on node 0 ({port.get('error')}"
                                           f"{held}); rank 0 could not listen there", info)
    if info.get("torch") is None and not in_container:
        return failed(name, "torch_missing", f"{python} cannot import torch: {info.get('torch_error')}", info)
    why = _vendor_problem(vendor, info, runtime)
    if why:
        return failed(name, "vendor_unusable", f"vendor {vendor.name}: {why}", info)
    check = HostCheck(name, "ok", "", "", info)
    have = check.accelerators
    if vendor.device != "cpu" and have is None:
        what = f"accelerators not counted (gpu_monitor: {vendor.gpu_monitor})"
    elif have is not None and vendor.device != "cpu":
        if have < need:
            return failed(name, "too_few_accelerators",
                          f"{have} {vendor.torch_device or vendor.device} device(s), the cases need {need}", info)
        what = f"{have} accelerator(s)"
    else:
        what = f"{info.get('cpu_count')} CPU(s)"
    torch = "torch in the image" if in_container else f"torch {info.get('torch')}"
    detail = f"python {'.'.join(map(str, info['python']))}, {torch}, {what}, {free / (1 << 30):.0f} GiB free"
    check = HostCheck(name, "ok", detail, "", info)
    if moved_port(check) is not None:
        check = HostCheck(name, "ok", f"{detail}; {port_note(check)}", "", info)
    return check


def _free_port(port: dict) -> int | None:
    value = port.get("free_port")
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535 else None


def moved_port(check: HostCheck) -> int | None:
    """The free port a passed check of node 0 found in place of a taken MASTER_PORT (None: not moved)."""
    port = (check.info or {}).get("master_port")
    if not check.ok or not isinstance(port, dict) or port.get("free") is not False:
        return None
    return _free_port(port)


def port_note(check: HostCheck) -> str:
    """One line: which MASTER_PORT was taken, why, and which one rank 0 uses instead."""
    port = (check.info or {}).get("master_port") or {}
    return (f"MASTER_PORT {port.get('port')} is taken on {check.host} ({port.get('error')}); this single-host run "
            f"uses the free port {moved_port(check)} instead")


def _vendor_problem(vendor, info, runtime) -> str | None:
    """Why the vendor profile cannot run on this host, from the probe's answer (None: it can)."""
    return usable_on_host(vendor, info, runtime)
