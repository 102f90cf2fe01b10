"""How a planned node starts its case: launch mode, argv, working directory and environment. Pure: it reads the
driver's benchmark folders (flagperf.catalog) and touches no host.

Where a case's folder is on a host: flagperf's own benchmarks under ``<FLAGPERF_PATH>/benchmarks/<model>/``;
a case from CASE_PATHS under ``<FLAGPERF_PATH>/cases/<model>/`` (deploy sends it there), and a FlagPerf
training case under ``<FLAGPERF_PATH>/cases/<tree>-<hash>/`` in the training tree's own layout (its launcher,
``utils/``, ``benchmarks/<model>/``, ``benchmarks/driver/`` and ``<vendor>/<model>-<framework>/``), except on a
``localhost`` whose FLAGPERF_PATH is the driver's own tree, where nothing is deployed and the case runs from
its own folder. ``cases/`` is ignored by flagperf's own checkout (.gitignore), for a FLAGPERF_PATH that is the
driver's checkout seen from another host (a shared file system).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flagperf.catalog import (BASE_BENCHMARK_KIND, LAUNCH_NODE, TRAINING_SCRIPT, CaseSource, base_chip_files,
                              find_case_of, substitute)
from flagperf.errors import ConfigError
from flagperf.suites import OPERATION, suite_argv, suite_notes
from flagperf_contract import CASE_CONFIG_FILE, ENV_PREPARE_LOG

CASES_DIR = "cases"         # <FLAGPERF_PATH>/cases/<model>/: the CASE_PATHS folders a run uses, as deployed
SOURCE_ENV_LOG = "source_env.log.txt"   # FlagPerf's name: the output of sourcing environment_variables.sh
PREPARE_FAILED_EXIT = 90            # the node command's exit status when the case's preparation failed

# FlagPerf's preparation of a training case (its prepare_in_container.py), then its launch (run.py's start
# command): with the case's environment_variables.sh sourced, pip-install its requirements.txt (from PIP_SOURCE
# when set) and build and install its csrc/ extension (setup.py install, in a scratch folder), all logged to
# env_prepare.log; then source the env file in this shell (output to source_env.log.txt, FlagPerf's name) and
# exec the launcher. Arguments: env file, requirements, csrc folder, package index, node dir, python, launcher
# argv... (an empty string: none). A FlagPerf base case (``$0`` BASE_PREPARE_NAME) follows FlagPerf's base run.py
# instead: pip install first, without the env file, which is then sourced in the launcher's shell only.
BASE_PREPARE_NAME = "flagperf-base"
TRAINING_PREPARE_AND_START = " ".join([
    'env_file=$1; req=$2; csrc=$3; index=$4; node=$5; py=$6; shift 6;',
    '( echo "# FlagPerf case preparation (requirements, extension), package index: ${index:-the default}";',
    f'if [ -n "$env_file" ] && [ "$0" != {BASE_PREPARE_NAME} ]; then echo "\\$ . $env_file"; . "$env_file"; fi;',
    'if [ -n "$req" ]; then echo "\\$ $py -m pip install -r $req${index:+ -i $index}";',
    '"$py" -m pip install --disable-pip-version-check -r "$req" ${index:+-i "$index"} || exit 1; fi;',
    'if [ -n "$csrc" ]; then scratch=$(mktemp -d); trap \'rm -rf "$scratch"\' EXIT;',
    'echo "\\$ (cd $scratch && EXTENSION_SOURCE_DIR=$csrc $py $csrc/setup.py install)";',
    'export EXTENSION_SOURCE_DIR="$csrc"; cd "$scratch" && "$py" "$csrc/setup.py" install || exit 1; fi',
    f') >>"$node/{ENV_PREPARE_LOG}" 2>&1',
    f'|| {{ echo "FlagPerf case preparation failed: see $node/{ENV_PREPARE_LOG}" >&2; exit {PREPARE_FAILED_EXIT}; }};',
    f'if [ -n "$env_file" ]; then . "$env_file" >"$node/{SOURCE_ENV_LOG}" 2>&1 ||',
    f'{{ echo "sourcing $env_file failed: see $node/{SOURCE_ENV_LOG}" >&2; exit {PREPARE_FAILED_EXIT}; }}; fi;',
    'exec "$@"',
])


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


def model_sources_of(config) -> tuple:
    return tuple(config.test.model_sources)


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
    """The case's folder and launch mode (flagperf.catalog.find_case). A case with no folder anywhere, a folder
    with nothing runnable, an ambiguous model or a bad benchmark.yaml raises ConfigError saying what was looked
    for (the config check reports the same at load time)."""
    key = (str(config.source_root), case_paths_of(config), case.model, case.framework, case.framework_full,
           config.vendor.name, case.hw, case.nnodes, case.nproc, case.each, base_mode_of(config),
           model_sources_of(config), _stamp(config, case.model))
    if key not in _cache:
        src, problems = find_case_of(config.source_root, case_paths_of(config), config.vendor.name, case,
                                     base_mode_of(config), dict(model_sources_of(config)))
        if problems:
            raise ConfigError(problems)
        if src is None:
            raise ConfigError(f"CASES[{case.key!r}]: model {case.model!r} has no benchmark "
                              f"({config.source_root / 'benchmarks' / case.model} or a CASE_PATHS folder)")
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


def tree_dir(src: CaseSource) -> str:
    """``cases/<tree>-<hash>``: where a FlagPerf training tree goes under FLAGPERF_PATH (named after the tree's
    folder and its path on the driver, so that two trees never share one)."""
    tree = src.training.tree if src.training is not None else src.suite.tree if src.suite is not None else None
    assert tree is not None
    return f"{CASES_DIR}/{tree.name}-{hashlib.sha256(str(tree).encode()).hexdigest()[:8]}"


def case_root_on_host(src: CaseSource, host, config) -> PurePosixPath:
    """Where the case's folder is on the host (a training case: the training tree's root)."""
    if not src.external:
        return PurePosixPath(host.flagperf_path) / "benchmarks" / src.model
    if src.training is not None:
        if runs_in_place(host, config):
            return PurePosixPath(src.training.tree)
        return PurePosixPath(host.flagperf_path) / tree_dir(src)
    if src.suite is not None:       # FlagPerf's inference or operation tree, deployed whole
        return PurePosixPath(src.suite.tree) if runs_in_place(host, config) else \
            PurePosixPath(host.flagperf_path) / tree_dir(src)
    if runs_in_place(host, config):
        return PurePosixPath(src.root)
    return PurePosixPath(host.flagperf_path) / CASES_DIR / src.model


def in_place_mounts(config, case, host) -> tuple:
    """Folders a container must mount (same path inside) so that an in-place CASE_PATHS case is visible."""
    src = case_source(config, case)
    if src.external and runs_in_place(host, config):
        return (str(src.training.tree if src.training is not None else src.case_path),)
    return ()


def deploy_folders(config) -> tuple:
    """((local folder, path relative to FLAGPERF_PATH), ...): every CASE_PATHS folder the run's cases use, with
    the folders beside it that they need (FlagPerf's drivers/; a training tree's launcher, utils/, driver/ and
    vendor folder), each once."""
    out: dict = {}
    for case in config.test.cases:
        try:
            src = case_source(config, case)
        except ConfigError:
            continue        # reported when the config was loaded
        if not src.external:
            continue
        if src.training is not None:
            for rel in src.training.support:
                out.setdefault(f"{tree_dir(src)}/{rel}", src.training.tree / rel)
            continue
        if src.suite is not None:
            out.setdefault(tree_dir(src), src.suite.tree)
            continue
        out.setdefault(f"{CASES_DIR}/{src.model}", src.root)
        for name in src.support:
            out.setdefault(f"{CASES_DIR}/{name}", Path(str(src.case_path)) / name)
    return tuple((folder, rel) for rel, folder in out.items())


def node_command(config, case, host, *, python: str, node_rank: int, node_dir: str, master_addr: str,
                 master_port: int, base_env: dict, hosts=(), round_index: int = 1) -> NodeCommand:
    """The node's argv, working directory and extra environment. Placeholders (docs/benchmarks.md) are filled
    here, so that launch.json and --dry-run hold the exact command. ``hosts``: the addresses of the case's nodes
    (node 0 first); ``round_index``: the round, from 1."""
    src = case_source(config, case)
    case_dir = case_root_on_host(src, host, config)
    if src.subdir:
        case_dir = case_dir / src.subdir
    hosts = list(hosts) or [host.address]
    values = {
        "master_addr": master_addr, "master_port": str(master_port), "node_rank": str(node_rank),
        "nnodes": str(case.nnodes), "nproc": str(case.nproc), "world_size": str(case.nnodes * case.nproc),
        "data_dir": case.data_dir or "", "result_dir": node_dir, "vendor": config.vendor.name, "chip": case.hw,
        "config_file": f"{node_dir}/{CASE_CONFIG_FILE}", "case_dir": str(case_dir), "python": python,
        "framework": case.framework_full or case.framework, "hosts": ",".join(hosts), "host_addr": host.address,
        "hosts_ports": ",".join(str(p) for p in config.cluster.hosts_ports),
        "round": str(round_index), "case_key": case.key,
    }
    env = {}
    if src.mode == LAUNCH_NODE:
        env = {"NODERANK": str(node_rank), "NPROC_PER_NODE": str(case.nproc),
               "FLAGPERF_CASE_DIR": str(case_dir)}
    if src.training is not None:
        argv = training_argv(config, case, src, case_dir, values)
        return NodeCommand(src.mode, argv, str(case_dir), {**base_env, **env}, src)
    if src.suite is not None:
        return NodeCommand(src.mode, suite_command(config, case, src, case_root_on_host(src, host, config), values),
                           str(case_dir),
                           {**base_env, **env}, src)
    argv = substitute(src.command, values)
    env_file, req = base_chip_files(src, config.vendor.name, case.key, case.hw)
    if env_file is not None or req is not None:     # FlagPerf base: its per-chip requirements and env.sh
        on_host = lambda path: str(case_dir / path.relative_to(src.root).as_posix()) if path else ""  # noqa: E731
        argv = ["bash", "-c", TRAINING_PREPARE_AND_START, BASE_PREPARE_NAME, on_host(env_file), on_host(req), "",
                config.test.pip_source or "", node_dir, python, *argv]
    return NodeCommand(src.mode, argv, str(case_dir), {**base_env, **env}, src)


def suite_command(config, case, src: CaseSource, tree, values: dict) -> list:
    """FlagPerf's command for an inference or operation case on one node (flagperf.suites.suite_argv), after its
    preparation when it has any: inference as FlagPerf's prepare_in_container.py (env file sourced, then pip and
    the engine's csrc/), operation as FlagPerf's run.py (pip install, then env.sh sourced in the script's shell)."""
    sc = src.suite
    assert sc is not None
    tree = PurePosixPath(tree)      # the suite's tree on the host
    argv = suite_argv(sc, case, str(tree), values, config.test.log_level)
    if sc.env_file is None and sc.requirements is None and sc.extension is None:
        return argv
    on_host = lambda path: str(tree / sc.rel(path)) if path is not None else ""  # noqa: E731
    name = BASE_PREPARE_NAME if sc.suite == OPERATION else f"flagperf-{sc.suite}"
    return ["bash", "-c", TRAINING_PREPARE_AND_START, name, on_host(sc.env_file), on_host(sc.requirements),
            on_host(sc.extension), config.test.pip_source or "", values["result_dir"], values["python"], *argv]


def training_argv(config, case, src: CaseSource, tree, values: dict) -> list:
    """FlagPerf's start command for a training case on one node: its preparation and env file (when the case has
    any), then ``start_<framework>_task.py`` with the arguments FlagPerf's run.py gives it. ``--log_dir``,
    ``--case_name``, ``--round`` and ``--host_addr`` are chosen so that the launcher's own log folder
    (``<log_dir>/<case_name>/round<k>/<host_addr>_noderank<i>/``) is this node's directory."""
    tc = src.training
    assert tc is not None
    node = PurePosixPath(values["result_dir"])
    on_host = lambda path: str(PurePosixPath(tree) / tc.rel(path)) if path is not None else ""  # noqa: E731
    argv = [values["python"], on_host(tc.launcher), "--vendor", values["vendor"], "--case_name", node.parents[1].name,
            "--model_name", src.model, "--train_script", TRAINING_SCRIPT, "--nnodes", values["nnodes"],
            "--nproc", values["nproc"], "--hosts", values["hosts"], "--hosts_ports", values["hosts_ports"]]
    if case.data_dir:
        argv += ["--data_dir", case.data_dir]
    argv += ["--log_dir", str(node.parents[2]), "--log_level", config.test.log_level,
             "--extern_config_file", tc.config_file, "--enable_extern_config",
             "--master_port", values["master_port"], "--round", node.parent.name[len("round"):]]
    if config.test.visible_devices_env:
        argv += ["--visible_dev_env", config.test.visible_devices_env]
    argv += ["--master_addr", values["master_addr"], "--node_rank", values["node_rank"],
             "--host_addr", node.name.rsplit("_noderank", 1)[0]]
    if tc.env_file is None and tc.requirements is None and tc.extension is None:
        return argv
    return ["bash", "-c", TRAINING_PREPARE_AND_START, "flagperf-training", on_host(tc.env_file),
            on_host(tc.requirements), on_host(tc.extension), config.test.pip_source or "", str(node),
            values["python"], *argv]


def prepares_itself(src: CaseSource) -> bool:
    """True for a case whose node command does its own environment preparation (a FlagPerf training or base
    case): a container then starts the node launcher without flagperf's generic preparation."""
    return src.training is not None or src.suite is not None or src.kind == BASE_BENCHMARK_KIND


def training_notes(src: CaseSource, config, case) -> list:
    """What --dry-run says about a FlagPerf training case besides its command: launcher, vendor config,
    preparation, env file and image."""
    tc = src.training
    if src.suite is not None:
        return suite_notes(src.suite, case) + (
            [f"image: the vendor image (vendors/{config.vendor.name}/{case.framework}/); FlagPerf's own image "
             f"folders are not built"] if config.test.runtime in config.cluster.options.container_runtimes else [])
    if tc is None:
        return base_notes(src, config, case)
    notes = [f"FlagPerf training case: launcher {tc.launcher}, train script {tc.model_dir / TRAINING_SCRIPT}, "
             f"vendor config {tc.vendor_dir / 'config' / tc.config_file}",
             "preparation before every round (logged to env_prepare.log): "
             + ("; ".join(x for x in (f"pip install -r {tc.requirements}" if tc.requirements else "",
                                      f"{tc.extension}/setup.py install" if tc.extension else "") if x) or "none"),
             f"env file (sourced in the launcher's shell, output to {SOURCE_ENV_LOG}): {tc.env_file or 'none'}"]
    if config.test.runtime in config.cluster.options.container_runtimes:
        notes.append(f"image: {tc.image_folder}" if tc.image_folder else
                     f"image: the vendor image (no {tc.tree / config.vendor.name / 'docker_image'}/"
                     f"{case.framework_full or case.framework}/Dockerfile)")
    return notes


def base_notes(src: CaseSource, config, case) -> list:
    """What --dry-run says about a FlagPerf base case's preparation: its per-chip requirements.txt and env.sh
    (nothing when it has neither)."""
    env_file, req = base_chip_files(src, config.vendor.name, case.key, case.hw)
    if env_file is None and req is None:
        return []
    return [f"FlagPerf base case preparation before the case (logged to {ENV_PREPARE_LOG}): "
            + (f"pip install -r {req}" if req else "none"),
            f"env file (sourced in the node command's shell after it, output to {SOURCE_ENV_LOG}): "
            f"{env_file or 'none'}"]
