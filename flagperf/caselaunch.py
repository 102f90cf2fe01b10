"""How a planned node starts its case: launch mode, argv, working directory and environment. Pure: it reads the
driver's benchmark folders (flagperf.catalog) and touches no host.

Where a case's folder is on a host: flagperf's own benchmarks under ``<FLAGPERF_PATH>/benchmarks/<model>/``;
a case from CASE_PATHS under ``<FLAGPERF_PATH>/cases/<model>/`` (deploy sends it there), except on a
``localhost`` whose FLAGPERF_PATH is the driver's own tree, where nothing is deployed and the case runs from
its own folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flagperf.catalog import (DEFAULT_RANK_COMMAND, LAUNCH_NODE, LAUNCH_RANKS, CaseSource, find_case,
                              substitute)
from flagperf.errors import ConfigError
from flagperf_contract import CASE_CONFIG_FILE

CASES_DIR = "cases"         # <FLAGPERF_PATH>/cases/<model>/: the CASE_PATHS folders a run uses, as deployed


@dataclass(frozen=True)
class NodeCommand:
    mode: str               # LAUNCH_RANKS or LAUNCH_NODE
    argv: list              # every rank's argv (ranks), or the node command (node)
    cwd: str
    env: dict               # added to the node's environment
    source: CaseSource


def case_paths_of(config) -> tuple:
    return tuple(str(p) for p in config.test.case_paths)


def base_mode_of(config) -> str | None:
    mode = config.test.base_mode
    return mode.lower() if mode else None


_cache: dict = {}


def _stamp(config, model: str) -> tuple:
    """What the look-up of ``model`` depends on, cheaply: the candidate folders' benchmark.yaml change times."""
    out: list = []
    for folder in (config.source_root / "benchmarks", *map(Path, case_paths_of(config))):
        try:
            out.append(os.stat(folder / model / "benchmark.yaml").st_mtime_ns)
        except OSError:
            out.append(None)
    return tuple(out)


def case_source(config, case) -> CaseSource:
    """The case's folder and launch mode (flagperf.catalog.find_case). A model with no folder anywhere falls back
    to ``benchmarks/<model>/main.py`` of the tree (the config check reports it); a bad benchmark.yaml raises
    ConfigError."""
    key = (str(config.source_root), case_paths_of(config), case.model, config.vendor.name, case.hw,
           base_mode_of(config), _stamp(config, case.model))
    if key not in _cache:
        src, problems = find_case(config.source_root, case_paths_of(config), case.model, config.vendor.name,
                                  case.hw, base_mode_of(config))
        if problems:
            raise ConfigError(problems)
        if src is None:
            root = config.source_root / "benchmarks" / case.model
            src = CaseSource(case.model, root, root, LAUNCH_RANKS, DEFAULT_RANK_COMMAND, "main.py")
        if len(_cache) > 256:
            _cache.clear()
        _cache[key] = src
    return _cache[key]


def needs_deploy(host, source_root: Path) -> bool:
    """False for a localhost whose FLAGPERF_PATH is the driver's own tree (the same-tree test): nothing is
    deployed there, and a CASE_PATHS case runs from its own folder."""
    return not (host.is_local and Path(host.flagperf_path).resolve() == Path(source_root).resolve())


def runs_in_place(host, config) -> bool:
    """True where nothing is deployed (a localhost whose FLAGPERF_PATH is the driver's tree): a CASE_PATHS case
    then runs from its own folder."""
    return not needs_deploy(host, config.source_root)


def case_root_on_host(src: CaseSource, host, config) -> PurePosixPath:
    if not src.external:
        return PurePosixPath(host.flagperf_path) / "benchmarks" / src.model
    if runs_in_place(host, config):
        return PurePosixPath(src.root)
    return PurePosixPath(host.flagperf_path) / CASES_DIR / src.model


def in_place_mounts(config, case, host) -> tuple:
    """Folders a container must mount (same path inside) so that an in-place CASE_PATHS case is visible."""
    src = case_source(config, case)
    if src.external and runs_in_place(host, config):
        return (str(src.case_path),)
    return ()


def deploy_folders(config) -> tuple:
    """((local folder, path relative to FLAGPERF_PATH), ...): every CASE_PATHS folder the run's cases use, with
    the folders beside it that they need (FlagPerf's drivers/), each once."""
    out: dict = {}
    for case in config.test.cases:
        try:
            src = case_source(config, case)
        except ConfigError:
            continue        # reported when the config was loaded
        if not src.external:
            continue
        out.setdefault(f"{CASES_DIR}/{src.model}", src.root)
        for name in src.support:
            out.setdefault(f"{CASES_DIR}/{name}", Path(str(src.case_path)) / name)
    return tuple((folder, rel) for rel, folder in out.items())


def node_command(config, case, host, *, python: str, node_rank: int, node_dir: str, master_addr: str,
                 master_port: int, base_env: dict) -> NodeCommand:
    """The node's argv, working directory and extra environment. Placeholders (docs/benchmarks.md) are filled
    here, so that launch.json and --dry-run hold the exact command."""
    src = case_source(config, case)
    case_dir = case_root_on_host(src, host, config)
    if src.subdir:
        case_dir = case_dir / src.subdir
    values = {
        "master_addr": master_addr, "master_port": str(master_port), "node_rank": str(node_rank),
        "nnodes": str(case.nnodes), "nproc": str(case.nproc), "world_size": str(case.nnodes * case.nproc),
        "data_dir": case.data_dir or "", "result_dir": node_dir, "vendor": config.vendor.name, "chip": case.hw,
        "config_file": f"{node_dir}/{CASE_CONFIG_FILE}", "case_dir": str(case_dir), "python": python,
        "framework": case.framework_full or case.framework,
    }
    env = {}
    if src.mode == LAUNCH_NODE:
        env = {"NODERANK": str(node_rank), "NPROC_PER_NODE": str(case.nproc),
               "FLAGPERF_CASE_DIR": str(case_dir)}
    return NodeCommand(src.mode, substitute(src.command, values), str(case_dir), {**base_env, **env}, src)
