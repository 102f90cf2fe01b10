"""Config -> Plan: every case, round and node with the exact paths, commands, environment and container.

The plan is pure data: building it touches nothing (no host is contacted, no backend is imported), and
``flagperf run --dry-run`` prints it. A backend needs nothing else to run a round: each :class:`NodePlan`
states the node directory on its host, the launcher's and the monitor's argv, the ranks' argv and
environment (in its :class:`~flagperf_contract.LaunchSpec`), the master address, and the container if any.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flagperf.options.base import HostSpec
from flagperf.caselaunch import case_source, in_place_mounts, node_command, prepares_itself, training_notes
from flagperf.mpilaunch import MpiContext, mpi_starter_argv
from flagperf.config import CaseSpec, Config
from flagperf.containers import (LABEL_CASE, LABEL_NODE, LABEL_ROUND, LABEL_RUN, PREPARE_AND_LAUNCH, ContainerRun,
                                 container_name, container_run)
from flagperf.errors import ConfigError
from flagperf.images import ImageError, image_spec
from flagperf.vendors import ENV_NAME
from flagperf.yamlio import load_yaml_file, one_line, where
from flagperf_contract import CASE_CONFIG_FILE, LAUNCH_FILE, MONITOR_OUTPUT, LaunchSpec

CONTAINER_PYTHON = "python3"
CPU_AUTO_NPROC = 2          # nproc "auto" on a vendor without accelerators
CASE_ENV_KEY = "env"        # case-config key: {NAME: "value"} set in every rank's environment (docs/benchmarks.md)
# Names flagperf sets for the ranks itself (with the vendor's visible-devices variable and every FLAGPERF_* name):
# a case's env may not set them.
OWNED_ENV = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK",
             "LOCAL_RANK", "NODERANK", "NPROC_PER_NODE", "PYTHONUNBUFFERED")
OWNED_ENV_PREFIX = "FLAGPERF_"
CASE_ENV_VALUE_MAX = 32768  # characters of one value


@dataclass(frozen=True)
class NodePlan:
    host: HostSpec
    node_rank: int
    ranks: tuple            # global ranks on this node
    node_dir: str           # the round's node directory on the host
    local_dir: Path         # where its files land on the driver
    master_addr: str        # where rank 0 listens (MASTER_ADDR)
    launcher_argv: tuple    # run on the host, or inside the container
    monitor_argv: tuple     # always run on the host
    launch: LaunchSpec      # written to <node_dir>/launch.json for the node launcher
    case_config: dict       # written to <node_dir>/case_config.json for the ranks
    container: ContainerRun | None = None
    master_port: int = 0    # where rank 0 listens (MASTER_PORT; a scheduler's placeholder until its job runs)
    job: int | None = None  # a pairs round: the index of the 2-node job this node belongs to (None: any other)

    @property
    def label(self) -> str:
        return f"{self.host.address}_noderank{self.node_rank}"

    @property
    def files(self) -> dict:
        """{file name: JSON-ready content} that the backend writes into the node directory before the round."""
        return {LAUNCH_FILE: self.launch.to_dict(), CASE_CONFIG_FILE: self.case_config}

    @property
    def monitor_output(self) -> str:
        return f"{self.node_dir}/{MONITOR_OUTPUT}"


@dataclass(frozen=True)
class RoundPlan:
    index: int              # from 1, every round of the case in order
    local_dir: Path
    nodes: tuple
    stage: int | None = None    # a pairs case: the round-robin stage (from 1); ``repeat``: which repeat (from 1)
    repeat: int | None = None

    @property
    def jobs(self) -> list:
        """The node labels of every 2-node job of a pairs round, node 0 first, in job order; [] otherwise."""
        jobs: dict = {}
        for n in self.nodes:
            if n.job is not None:
                jobs.setdefault(n.job, []).append(n.label)
        return list(jobs.values())


@dataclass(frozen=True)
class CasePlan:
    case: CaseSpec          # with nproc resolved (never "auto")
    name: str
    config_files: tuple     # case-config files merged, in order
    rounds: tuple
    timeout_s: float = 7200.0   # CASE_TIMEOUT: how long each round may run
    run_dir: Path | None = None     # the run directory on the driver (a case's image build logs go under it)
    notes: tuple = ()       # how the case starts, besides its commands (a FlagPerf training case's preparation)

    @property
    def hosts(self) -> tuple:
        """The first round's hosts, then any host only a later round has (a pairs case's stages differ)."""
        first = [n.host for n in self.rounds[0].nodes] if self.rounds else []
        seen = {h.address for h in first}
        later = [n.host for r in self.rounds[1:] for n in r.nodes if n.host.address not in seen]
        return tuple(first + list({h.address: h for h in later}.values()))

    @property
    def env(self) -> dict:
        """The variables the case's configuration sets for every rank (its ``env`` key), {} if none."""
        nodes = self.rounds[0].nodes if self.rounds else ()
        return dict(nodes[0].case_config.get(CASE_ENV_KEY) or {}) if nodes else {}


@dataclass(frozen=True)
class Plan:
    run_id: str
    run_dir: Path
    config: Config
    cases: tuple
    notes: tuple = ()       # what the plan assumed (nproc auto in a dry run)

    @property
    def hosts(self) -> tuple:
        """The hosts some case needs, in cluster order, each once."""
        return hosts_needed(self.config)


def hosts_needed(config: Config) -> tuple:
    needed = max((c.nnodes for c in config.test.cases), default=0)
    seen, out = set(), []
    for h in config.cluster.hosts[:needed]:
        if h.address not in seen:
            seen.add(h.address)
            out.append(h)
    return tuple(out)


def new_run_id(log_path: Path, now: float | None = None) -> str:
    """``run<YYYYmmddHHMMSS>-<6 hex digits>``: sorted by time, and unique across drivers (two drivers started in
    the same second on different machines never share a run directory, here or under a host's result root)."""
    base = "run" + time.strftime("%Y%m%d%H%M%S", time.localtime(now))
    while True:
        run_id = f"{base}-{secrets.token_hex(3)}"
        if not (log_path / run_id).exists():
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
    src = case_source(config, case)
    candidates = [
        src.root / "case_config.yaml",    # benchmarks/<model>/ or a CASE_PATHS folder
        vdir / "case_config.yaml",
        vdir / f"config_{case.hw}.yaml",
        vdir / f"config_{case.hw}x{job_nnodes(case)}x{case.nproc}.yaml",     # each: 1 node per job, pairs: 2
    ] if src.training is None and src.suite is None else []     # FlagPerf's training, inference and operation
    # cases read their own configs
    merged: dict = {}
    env: dict | None = None
    used, problems = [], []
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
            if CASE_ENV_KEY in data:        # merged name by name, later files winning
                file_env, errs = case_env(path, data, config.test.visible_devices_env)
                problems.extend(errs)
                env = {**(env or {}), **file_env}
    if env is not None:
        merged[CASE_ENV_KEY] = env
    peaks = config.vendor.peaks
    if peaks is not None:
        data, errs = load_yaml_file(peaks)
        if errs or not isinstance(data, dict):
            problems.extend(errs or [f"{peaks}: expected a mapping of device entries"])
        else:
            merged["vendor_peaks"] = data
    if problems:
        raise ConfigError(problems)
    merged.update(model=case.model, framework=case.framework, hw=case.hw, nnodes=job_nnodes(case),
                  nproc=case.nproc, data_dir=case.data_dir)
    if case.each:
        merged["each"] = True
    if case.pairs:      # not "pairs": a benchmark's own key (p2p's rank pairs)
        merged["pairwise"] = True
    return merged, tuple(used)


def job_nnodes(case: CaseSpec) -> int:
    """The nodes of one job: 1 for an ``each`` case, 2 for a ``pairs`` case, else the case's nnodes."""
    return 1 if case.each else 2 if case.pairs else case.nnodes


def case_env(path, data: dict, visible_devices_env: str | None = None) -> tuple:
    """({name: value}, problems) of the ``env`` key of one case-config file: a mapping of environment variable
    names to strings (null: none), none of them a name flagperf sets itself. Each problem is one line naming the
    file, its line and the key."""
    raw = data.get(CASE_ENV_KEY)
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [f"{where(path, data, CASE_ENV_KEY)}: {CASE_ENV_KEY}: expected a mapping of environment variable "
                    f"names to strings (NCCL_ALGO: Ring), got {type(raw).__name__}"]
    owned = OWNED_ENV + ((visible_devices_env,) if visible_devices_env else ())
    env, problems = {}, []
    for name, value in raw.items():
        at = f"{where(path, raw, name)}: {CASE_ENV_KEY}.{name}"
        if not (isinstance(name, str) and ENV_NAME.fullmatch(name)):
            problems.append(one_line(f"{where(path, raw, name)}: {CASE_ENV_KEY}: {name!r}: expected an environment "
                                     f"variable name (letters, digits and _, not starting with a digit)"))
        elif name in owned or name.startswith(OWNED_ENV_PREFIX):
            problems.append(f"{at}: flagperf sets this variable itself ({', '.join(owned)} and every "
                            f"{OWNED_ENV_PREFIX}* name); expected another name")
        elif not isinstance(value, str):
            got = "null" if value is None else f"{type(value).__name__} {value!r}"
            problems.append(one_line(f"{at}: expected a string, got {got} (write numbers and yes/no in quotes, "
                                     f"\"1\", so that they reach the ranks as written)"))
        elif not value.isprintable() or len(value) > CASE_ENV_VALUE_MAX:
            problems.append(one_line(f"{at}: expected a string of at most {CASE_ENV_VALUE_MAX} printable "
                                     f"characters (no line break, tab or control character), got {value[:60]!r}"))
        else:
            env[name] = value
    return env, problems


def _with_case_env(env: dict, case_cfg: dict) -> dict:
    """The ranks' environment: flagperf's ``env``, then the case config's ``env`` (validated: never one of
    flagperf's names; should one be there all the same, flagperf's value stays)."""
    out = dict(env)
    out.update((k, v) for k, v in (case_cfg.get(CASE_ENV_KEY) or {}).items() if k not in env)
    return out


def resolve_nproc(config: Config, case: CaseSpec, accelerators: dict | None) -> tuple:
    """(nproc, note) for a case. ``nproc: auto`` is every accelerator of a node (the fewest any of the case's
    nodes has), or CPU_AUTO_NPROC on a vendor without accelerators. ``accelerators`` maps host addresses to
    the counts the hosts reported; a host missing from it (a dry run) is assumed to have 1, and the note says so.
    """
    if case.nproc is not None:
        return case.nproc, None
    if config.vendor.device == "cpu":
        return CPU_AUTO_NPROC, None
    hosts = config.cluster.hosts[:case.nnodes]
    counts = [(accelerators or {}).get(h.address) for h in hosts]
    known = [c for c in counts if isinstance(c, int)]
    if len(known) < len(counts):
        unknown = ", ".join(h.address for h, c in zip(hosts, counts) if not isinstance(c, int))
        return 1, (f"{case.key}: nproc auto: the accelerators of {unknown} are not counted (yet: a run counts them "
                   f"when it checks the hosts, unless the vendor has no accelerator plug-in); 1 rank per node")
    return max(1, min(known)), None


def build_plan(config: Config, run_id: str | None = None, accelerators: dict | None = None) -> Plan:
    t = config.test
    run_id = run_id or new_run_id(t.log_path)
    run_dir = t.log_path / run_id
    resolved, notes = [], []
    for case in t.cases:
        nproc, note = resolve_nproc(config, case, accelerators)
        resolved.append(dataclasses.replace(case, nproc=nproc))
        if note:
            notes.append(note)
    cases = []
    for case, name in zip(resolved, case_names(resolved)):
        case_cfg, files = merged_case_config(config, case)
        if case.each or case.pairs:     # each: one job per host, the plan's nnodes is the number of jobs;
            case = dataclasses.replace(case, nnodes=len(each_hosts(config)))      # pairs: the hosts it pairs
        rounds = pair_rounds(config, case, name, case_cfg, run_id, run_dir) if case.pairs else []
        for k in range(1, case.repeat + 1) if not case.pairs else ():
            round_rel = PurePosixPath(run_id, name, f"round{k}")
            master = config.cluster.hosts[0]
            if case.each:
                nodes = [_node(config, dataclasses.replace(case, nnodes=1), name, k, case_cfg, host, 0, host, run_id,
                               round_rel, run_dir, master_port=each_port(config, i), slot=i)
                         for i, host in enumerate(each_hosts(config))]
            else:
                nodes = [_node(config, case, name, k, case_cfg, host, node_rank, master, run_id, round_rel, run_dir)
                         for node_rank, host in enumerate(config.cluster.hosts[:case.nnodes])]
            rounds.append(RoundPlan(k, run_dir / name / f"round{k}", tuple(nodes)))
        how = tuple(training_notes(case_source(config, case), config, case))
        cases.append(CasePlan(case, name, files, tuple(rounds), t.case_timeout, run_dir, how))
    return Plan(run_id, run_dir, config, tuple(cases), tuple(notes))


def pair_schedule(n: int) -> list:
    """The round-robin schedule of ``n`` hosts (the circle method): n-1 stages of n/2 pairs for an even n, n
    stages of (n-1)/2 pairs for an odd n (one host sits out each stage), each stage a list of disjoint pairs
    ``(i, j)`` of host indices, i < j, so that every pair comes exactly once and no host twice in a stage; [] for
    fewer than 2 hosts."""
    if n < 2:
        return []
    ring = list(range(n)) + ([None] if n % 2 else [])
    m = len(ring)
    stages = []
    for _ in range(m - 1):
        pairs = [(ring[i], ring[m - 1 - i]) for i in range(m // 2)]
        stages.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        ring = [ring[0], ring[-1], *ring[1:-1]]         # host 0 stays, the others turn one place
    return stages


def pair_rounds(config: Config, case: CaseSpec, name: str, case_cfg: dict, run_id: str, run_dir: Path) -> list:
    """The rounds of a ``pairs`` case: for every repeat k, every stage s of :func:`pair_schedule` is one round
    (directory ``round<k>-stage<s>``) whose nodes are the stage's 2-node jobs: job j pairs hosts a and b (a first
    in HOSTS), a is node 0 and the job's master, listening on :func:`each_port` (MASTER_PORT + j)."""
    hosts = each_hosts(config)
    job_case = dataclasses.replace(case, nnodes=2)
    rounds, index = [], 0
    for k in range(1, case.repeat + 1):
        for s, stage in enumerate(pair_schedule(len(hosts)), 1):
            index += 1
            folder = f"round{k}-stage{s}"
            round_rel = PurePosixPath(run_id, name, folder)
            nodes = []
            for j, (a, b) in enumerate(stage):
                pair = (hosts[a], hosts[b])
                nodes += [_node(config, job_case, name, index, case_cfg, host, node_rank, pair[0], run_id, round_rel,
                                run_dir, master_port=each_port(config, j), slot=2 * j + node_rank, job_hosts=pair,
                                job=j)
                          for node_rank, host in enumerate(pair)]
            rounds.append(RoundPlan(index, run_dir / name / folder, tuple(nodes), stage=s, repeat=k))
    return rounds


def each_hosts(config: Config) -> tuple:
    """The hosts an ``each`` case runs on: every address of HOSTS once, in order (host i is job i); the hosts a
    ``pairs`` case pairs."""
    seen, out = set(), []
    for h in config.cluster.hosts:
        if h.address not in seen:
            seen.add(h.address)
            out.append(h)
    return tuple(out)


def each_port(config: Config, index: int) -> int:
    """MASTER_PORT of job ``index`` of an ``each`` case (or of a ``pairs`` round): MASTER_PORT + index, so that
    jobs never share a port, also where several hosts are one machine (the SSH test bed) or listen on every
    address."""
    return config.cluster.master_port + index


def host_result_root(host, config) -> PurePosixPath:
    """Where a host writes its node directories: FLAGPERF_LOG_PATH on localhost (straight into the driver's
    tree), ``<FLAGPERF_PATH of the host>/result`` on any other host (collected to the driver after each round).
    A backend whose nodes share the driver's result path (its options' ``results_on_driver``) writes straight there
    too."""
    if host.is_local or config.cluster.options.results_on_driver:
        return PurePosixPath(config.test.log_path)
    return PurePosixPath(host.flagperf_path) / "result"


def _node(config, case, case_name, round_index, case_cfg, host, node_rank, master, run_id, round_rel,
          run_dir, *, master_port: int | None = None, slot: int | None = None, job_hosts: tuple | None = None,
          job: int | None = None) -> NodePlan:
    t, vendor = config.test, config.vendor
    in_container = t.runtime in config.cluster.options.container_runtimes
    port = config.cluster.master_port if master_port is None else master_port
    # Ranks and the node launcher use the host's PYTHON, or the image's python3 inside a container.
    python = CONTAINER_PYTHON if in_container else host.python
    fp = PurePosixPath(host.flagperf_path)
    label = f"{host.address}_noderank{node_rank}"
    node_dir = str(host_result_root(host, config) / round_rel / label)
    local_dir = run_dir.parent / round_rel / label
    ranks = tuple(range(node_rank * case.nproc, (node_rank + 1) * case.nproc))
    master_addr = config.cluster.options.master_address(master)
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(port),
        "NNODES": str(case.nnodes),
        "NODE_RANK": str(node_rank),
        "WORLD_SIZE": str(case.nnodes * case.nproc),
        "LOCAL_WORLD_SIZE": str(case.nproc),
        "FLAGPERF_VENDOR": vendor.name,
        "FLAGPERF_DEVICE": vendor.torch_device or vendor.device,
        "FLAGPERF_DIST_BACKEND": vendor.dist_backend,
        "FLAGPERF_TORCH_PLUGIN": vendor.plugin_modules,      # torch_plugin, dist_backend_module
        "FLAGPERF_RUN_ID": run_id,
        "FLAGPERF_FRAMEWORK": case.framework_full or case.framework,     # as written: pytorch_2.0
    }
    # what starts: every rank's argv, or one command per node (benchmark.yaml, main.sh, toolkits, torchrun)
    hosts = job_hosts or ((host,) if case.nnodes == 1 else config.cluster.hosts[:case.nnodes])
    cmd = node_command(config, case, host, python=python, node_rank=node_rank, node_dir=node_dir,
                       master_addr=master_addr, master_port=port, base_env=env,
                       hosts=[h.address for h in hosts], round_index=round_index)
    slot = node_rank if slot is None else slot      # each: the job's index, so that names never clash
    cname = container_name(run_id, case_name, round_index, slot) if in_container else None
    argv = cmd.argv
    if cmd.mode == "mpi" and node_rank == 0:        # one mpirun on node 0 starts every node's ranks
        argv = _mpi_argv(config, case, cmd, hosts, python, node_dir, round_rel, case_cfg, master_addr, port,
                         round_index, env)
    launch = LaunchSpec(
        case=case.key, case_name=case_name, framework=case.framework, round=round_index, node_rank=node_rank,
        nnodes=case.nnodes, nproc=case.nproc, ranks=list(ranks), argv=argv, mode=cmd.mode,
        cwd=cmd.cwd, env=_with_case_env(cmd.env, case_cfg), out_dir=node_dir,
        env_defaults=dict(vendor.rank_env), visible_devices_env=t.visible_devices_env,
        visible_devices=",".join(str(i) for i in range(case.nproc)), data_dir=case.data_dir, grace_s=10.0,
        container_name=cname)
    launcher_argv = (python, str(fp / "launcher" / "node_launcher.py"), "--spec", f"{node_dir}/{LAUNCH_FILE}")
    monitor_argv: tuple = (host.python, str(fp / "monitors" / "monitor.py"), "--out-dir", node_dir,
                           "--interval", f"{t.monitor_interval:g}", "--gpu", vendor.gpu_monitor,
                           "--vendor", vendor.name, "--run-id", run_id)
    if t.monitor_format != "native":        # FlagPerf's monitor files too (docs/monitors.md)
        monitor_argv += ("--format", t.monitor_format)
    container = None
    if in_container:
        container = _container(config, case, host, launch, launcher_argv, node_dir, run_id, case_name, round_index,
                               slot, cname)
    return NodePlan(host, node_rank, ranks, node_dir, local_dir, master_addr, launcher_argv, monitor_argv, launch,
                    case_cfg, container, port, job)


def _mpi_argv(config, case, cmd, hosts, python, node_dir, round_rel, case_cfg, master_addr, port, round_index,
              base_env) -> list:
    """Launch mode mpi, node 0: the starter of one mpirun over every node of the job (flagperf.mpilaunch), each
    node's context with its rank command as that node's own launch would have it."""
    vendor, t = config.vendor, config.test
    contexts = [MpiContext(hosts[0].address, 0, case.nproc, cmd.cwd, node_dir, tuple(cmd.argv))]
    for j, h in enumerate(hosts[1:], 1):
        nd = str(host_result_root(h, config) / round_rel / f"{h.address}_noderank{j}")
        other = node_command(config, case, h, python=h.python, node_rank=j, node_dir=nd, master_addr=master_addr,
                             master_port=port, base_env={**base_env, "NODE_RANK": str(j)},
                             hosts=[x.address for x in hosts], round_index=round_index)
        contexts.append(MpiContext(h.address, j, case.nproc, other.cwd, nd, tuple(other.argv)))
    env = _with_case_env(cmd.env, case_cfg)
    names = [*env, *(name for name, _ in vendor.rank_env), *([t.visible_devices_env] if t.visible_devices_env else []),
             "OMP_NUM_THREADS", "PYTHONUNBUFFERED"]
    values = {"master_addr": master_addr, "master_port": str(port), "node_rank": "0", "nnodes": str(case.nnodes),
              "nproc": str(case.nproc), "world_size": str(case.nnodes * case.nproc), "data_dir": case.data_dir or "",
              "result_dir": node_dir, "vendor": vendor.name, "chip": case.hw,
              "config_file": f"{node_dir}/{CASE_CONFIG_FILE}", "case_dir": cmd.cwd, "python": python,
              "framework": case.framework_full or case.framework, "hosts": ",".join(h.address for h in hosts),
              "host_addr": hosts[0].address, "hosts_ports": ",".join(str(p) for p in config.cluster.hosts_ports),
              "round": str(round_index), "case_key": case.key}
    return mpi_starter_argv(config, cmd.source, python, hosts[0].flagperf_path, contexts, names, hosts, values)


def _container(config, case, host, launch, launcher_argv, node_dir, run_id, case_name, round_index, node_rank,
               name) -> ContainerRun:
    try:
        image = image_spec(config, case)
    except ImageError as exc:
        raise ConfigError(str(exc)) from None
    run_dir_on_host = str(PurePosixPath(node_dir).parents[2])
    extra = [(p, p, "rw") for p in (host.flagperf_path, run_dir_on_host, case.data_dir or "",
                                    *in_place_mounts(config, case, host)) if p]
    return container_run(
        config.container, name=name, image=image.tag, image_folder=str(image.folder),
        command=tuple(launcher_argv) if prepares_itself(case_source(config, case)) else
        ("sh", "-c", PREPARE_AND_LAUNCH, "flagperf-prepare", launch.cwd, node_dir, *launcher_argv),
        workdir=launch.cwd, extra_mounts=extra, shm_size_default=config.test.shm_size,
        extra_env=(("PIP_INDEX_URL", config.test.pip_source),) if config.test.pip_source else (),
        labels=((LABEL_RUN, run_id), (LABEL_CASE, case_name), (LABEL_ROUND, str(round_index)),
                (LABEL_NODE, str(node_rank))))
