"""Config -> Plan: every case, round and node with the exact paths and commands a run would use.

The plan is pure data: building it touches nothing, and ``flagperf run --dry-run`` prints it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flagperf.config import CaseSpec, Config, HostSpec
from flagperf.errors import ConfigError
from flagperf.yamlio import load_yaml_file

PLAN_SCHEMA = "flagperf.launch/1"
CONTAINER_PYTHON = "python3"


@dataclass(frozen=True)
class NodePlan:
    host: HostSpec
    node_rank: int
    ranks: tuple            # global ranks on this node
    node_dir: str           # the round's node directory on the host
    local_dir: Path         # where its files land on the driver
    launcher_argv: tuple
    monitor_argv: tuple
    launch_spec: dict       # written to <node_dir>/launch.json for the node launcher
    case_config: dict       # written to <node_dir>/case_config.json for the ranks

    @property
    def label(self) -> str:
        return f"{self.host.address}_noderank{self.node_rank}"


@dataclass(frozen=True)
class RoundPlan:
    index: int
    local_dir: Path
    nodes: tuple


@dataclass(frozen=True)
class CasePlan:
    case: CaseSpec
    name: str
    config_files: tuple     # case-config files merged, in order
    rounds: tuple


@dataclass(frozen=True)
class Plan:
    run_id: str
    run_dir: Path
    config: Config
    cases: tuple

    @property
    def hosts(self) -> tuple:
        """The hosts some case needs, in cluster order, each once."""
        needed = max((c.case.nnodes for c in self.cases), default=0)
        return self.config.cluster.hosts[:needed]


def new_run_id(log_path: Path, now: float | None = None) -> str:
    base = "run" + time.strftime("%Y%m%d%H%M%S", time.localtime(now))
    run_id, n = base, 1
    while (log_path / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def case_names(cases) -> list:
    """Readable, unique directory names: <model>-<framework>-<hw>-<nnodes>x<nproc>[-<n>]."""
    seen: dict = {}
    names = []
    for case in cases:
        seen[case.name] = seen.get(case.name, 0) + 1
        names.append(case.name if seen[case.name] == 1 else f"{case.name}-{seen[case.name]}")
    return names


def merged_case_config(config: Config, case: CaseSpec) -> tuple:
    """(config dict, files used): benchmark defaults, then vendor, hardware and scale overrides."""
    root = config.source_root
    vdir = root / "vendors" / config.vendor.name / case.model
    candidates = [
        root / "benchmarks" / case.model / "case_config.yaml",
        vdir / "case_config.yaml",
        vdir / f"config_{case.hw}.yaml",
        vdir / f"config_{case.hw}x{case.nnodes}x{case.nproc}.yaml",
    ]
    merged, used, problems = {}, [], []
    for path in candidates:
        if not path.is_file():
            continue
        data, errs = load_yaml_file(path)
        if errs:
            problems.extend(errs)
        elif data is None:
            used.append(path)
        elif not isinstance(data, dict):
            problems.append(f"{path}: expected a mapping of case-config keys")
        else:
            merged.update(data)
            used.append(path)
    peaks = config.vendor.peaks
    if peaks is not None:
        data, errs = load_yaml_file(peaks)
        if errs or not isinstance(data, dict):
            problems.extend(errs or [f"{peaks}: expected a mapping of device entries"])
        else:
            merged["vendor_peaks"] = data
    if problems:
        raise ConfigError(problems)
    merged.update(model=case.model, framework=case.framework, hw=case.hw, nnodes=case.nnodes,
                  nproc=case.nproc, data_dir=case.data_dir)
    return merged, tuple(used)


def build_plan(config: Config, run_id: str | None = None) -> Plan:
    t = config.test
    run_id = run_id or new_run_id(t.log_path)
    run_dir = t.log_path / run_id
    cases = []
    for case, name in zip(t.cases, case_names(t.cases)):
        case_cfg, files = merged_case_config(config, case)
        rounds = []
        for k in range(1, case.repeat + 1):
            round_rel = PurePosixPath(run_id, name, f"round{k}")
            nodes = []
            master = config.cluster.hosts[0]
            for node_rank, host in enumerate(config.cluster.hosts[:case.nnodes]):
                nodes.append(_node(config, case, name, k, case_cfg, host, node_rank, master, run_id, round_rel,
                                   run_dir))
            rounds.append(RoundPlan(k, run_dir / name / f"round{k}", tuple(nodes)))
        cases.append(CasePlan(case, name, files, tuple(rounds)))
    return Plan(run_id, run_dir, config, tuple(cases))


def host_result_root(host, config):
    """Where a host writes its node directories: FLAGPERF_LOG_PATH on localhost (straight into the driver's
    tree), ``<FLAGPERF_PATH of the host>/result`` on an SSH host (collected to the driver after each round)."""
    if host.is_local:
        return PurePosixPath(config.test.log_path)
    return PurePosixPath(host.flagperf_path) / "result"


def master_address(host) -> str:
    if host.is_local:
        return "127.0.0.1"
    from flagperf.hosts.ssh import resolved_address
    return resolved_address(host.address)


def _node(config, case, case_name, round_index, case_cfg, host, node_rank, master, run_id, round_rel,
          run_dir) -> NodePlan:
    t, vendor = config.test, config.vendor
    in_container = t.runtime == "docker"
    # Ranks and the node launcher use the host's PYTHON, or the image's python3 inside a container.
    python = CONTAINER_PYTHON if in_container else host.python
    fp = PurePosixPath(host.flagperf_path)
    label = f"{host.address}_noderank{node_rank}"
    node_dir = str(host_result_root(host, config) / round_rel / label)
    local_dir = run_dir.parent / round_rel / label
    ranks = tuple(range(node_rank * case.nproc, (node_rank + 1) * case.nproc))
    rank_argv = [
        python, "-u", str(fp / "benchmarks" / case.model / "main.py"),
        "--case-config", f"{node_dir}/case_config.json",
        "--data-dir", case.data_dir or "",
        "--result-dir", node_dir,
    ]
    env = {
        "MASTER_ADDR": master_address(master),
        "MASTER_PORT": str(config.cluster.master_port),
        "NNODES": str(case.nnodes),
        "NODE_RANK": str(node_rank),
        "WORLD_SIZE": str(case.nnodes * case.nproc),
        "LOCAL_WORLD_SIZE": str(case.nproc),
        "FLAGPERF_VENDOR": vendor.name,
        "FLAGPERF_DEVICE": vendor.device,
        "FLAGPERF_DIST_BACKEND": vendor.dist_backend,
        "FLAGPERF_RUN_ID": run_id,
    }
    spec = {
        "schema": PLAN_SCHEMA,
        "case": case.key,
        "case_name": case_name,
        "framework": case.framework,
        "round": round_index,
        "data_dir": case.data_dir,
        "node_rank": node_rank,
        "nnodes": case.nnodes,
        "nproc": case.nproc,
        "ranks": list(ranks),
        "argv": rank_argv,
        "cwd": str(fp / "benchmarks" / case.model),
        "env": env,
        "env_defaults": dict(vendor.rank_env),
        "visible_devices_env": t.visible_devices_env,
        "visible_devices": ",".join(str(i) for i in range(case.nproc)),
        "out_dir": node_dir,
        "grace_s": 10,
    }
    if in_container:
        from flagperf.runtimes.docker import container_name
        spec["container_name"] = container_name(run_id, case_name, round_index, node_rank)
    launcher_argv = (python, str(fp / "launcher" / "node_launcher.py"), "--spec", f"{node_dir}/launch.json")
    monitor_argv = (host.python, str(fp / "monitors" / "monitor.py"), "--out-dir", node_dir,
                    "--interval", f"{t.monitor_interval:g}", "--gpu", vendor.gpu_monitor,
                    "--vendor", vendor.name, "--run-id", run_id)
    return NodePlan(host, node_rank, ranks, node_dir, local_dir, launcher_argv, monitor_argv, spec, case_cfg)
