"""What a flagperf tree and the CASE_PATHS folders provide: benchmark folders, and how each one starts.

A benchmark is a folder ``<model>/``, looked up in flagperf's own ``benchmarks/`` first, then in each CASE_PATHS
folder in order. How it starts (docs/benchmarks.md, "Launch modes"):

- ``benchmark.yaml`` says so: ``launch: ranks`` (one process per rank), ``launch: node`` with ``command``
  (one process per node, e.g. torchrun or ``bash main.sh``) or ``launch: mpi`` with ``command`` (every rank's
  program, started by one mpirun on node 0, with ``mpi_args`` for mpirun), argv elements with ``{placeholders}``;
- a FlagPerf toolkit, ``<model>/<vendor>/<chip>/main.sh``: ``bash main.sh`` in that chip folder, once per node;
- a FlagPerf base benchmark (base mode "benchmark", a CASE_PATHS folder): ``main.py`` under torchrun, per node;
- ``main.py``: one process per rank (flagperf's own benchmarks);
- only ``main.sh``: ``bash main.sh`` once per node;
- a FlagPerf training tree (a CASE_PATHS folder, or a FlagPerf test config's FLAGPERF_PATH, that holds
  ``run_benchmarks/<framework>/start_<framework>_task.py`` and ``benchmarks/``): ``model:framework`` is
  ``benchmarks/<model>/<framework>/`` with ``<vendor>/<model>-<framework>/config/config_<hw>x<nnodes>x<nproc>.py``,
  started once per node by FlagPerf's own launcher with FlagPerf's arguments (:class:`TrainingCase`);
- a case of FlagPerf's inference or operation tree (a test config whose FLAGPERF_PATH is that tree, or with
  FLAGPERF_SUITE): ``run_inference.py`` or ``benchmarks/<op>/main.py`` with FlagPerf's arguments, once per node
  (:func:`suite_case_source`, flagperf.suites).

A model that is a benchmark of flagperf's tree and also of a CASE_PATHS folder is ambiguous unless the test
config's MODEL_SOURCES says which (``flagperf`` or ``case_paths``); a model found nowhere, or a folder with
nothing runnable, is a load-time problem saying what was looked for.

Pure look-ups of the driver's files; nothing here touches a host.
"""

from __future__ import annotations

import difflib
import string
from dataclasses import dataclass
from pathlib import Path

from flagperf.suites import SuiteCase, find_suite_case
from flagperf.yamlio import LineMap, load_yaml_file, where

BENCHMARK_FILE = "benchmark.yaml"
LAUNCH_RANKS, LAUNCH_NODE, LAUNCH_MPI = "ranks", "node", "mpi"
LAUNCH_MODES = (LAUNCH_RANKS, LAUNCH_NODE, LAUNCH_MPI)
BENCHMARK_KEYS = ("launch", "command", "mpi_args")
MAX_COMMAND_ARGS = 4096
# What a command's argv elements may name; plan.py substitutes them for every node (docs/benchmarks.md).
PLACEHOLDERS = ("master_addr", "master_port", "node_rank", "nnodes", "nproc", "world_size", "data_dir",
                "result_dir", "vendor", "chip", "config_file", "case_dir", "python", "framework", "hosts",
                "host_addr", "hosts_ports", "round", "case_key")
# Every rank of a `ranks` benchmark without its own command: flagperf's benchmark contract.
DEFAULT_RANK_COMMAND = ("{python}", "-u", "{case_dir}/main.py", "--case-config", "{config_file}",
                        "--data-dir", "{data_dir}", "--result-dir", "{result_dir}")
# A FlagPerf base benchmark: torchrun (from the python that runs the ranks) per node; --node_size is the number
# of ranks per node (FlagPerf's main.py takes local_rank = rank % node_size).
BASE_BENCHMARK_COMMAND = ("{python}", "-m", "torch.distributed.run", "--nnodes={nnodes}", "--nproc_per_node={nproc}",
                          "--node_rank={node_rank}", "--master_addr={master_addr}", "--master_port={master_port}",
                          "main.py", "--vendor={vendor}/{chip}", "--node_size={nproc}")
SHELL_COMMAND = ("bash", "main.sh")
BASE_SUPPORT_DIRS = ("drivers",)    # FlagPerf base benchmarks import drivers/ from their parent folder
BASE_BENCHMARK_KIND = "base-benchmark"
# A FlagPerf base case's preparation, in <case>/<vendor>/<chip>/ (<case>/<vendor>/ for a key without a chip), as
# FlagPerf's base run.py applies them before the case: pip install -r requirements.txt, then source env.sh.
BASE_ENV_FILE, BASE_REQUIREMENTS = "env.sh", "requirements.txt"
SOURCE_FLAGPERF, SOURCE_CASE_PATHS = "flagperf", "case_paths"     # MODEL_SOURCES values
MODEL_SOURCE_VALUES = (SOURCE_FLAGPERF, SOURCE_CASE_PATHS)
# A FlagPerf training tree (training/ of FlagPerf): its launchers, rank scripts and vendor adaptations.
TRAINING_LAUNCHERS = "run_benchmarks"
TRAINING_SCRIPT = "run_pretraining.py"          # FlagPerf's run.py passes --train_script run_pretraining.py
TRAINING_SUPPORT = ("utils", "benchmarks/driver")   # what every launcher and rank script imports besides its case


@dataclass(frozen=True)
class CaseSource:
    """Where a case's code is on the driver and how it starts."""

    model: str
    root: Path                      # the benchmark's folder: <tree>/benchmarks/<model> or <case path>/<model>
    folder: Path                    # where its command runs: root, or root/<vendor>/<chip> for a toolkit
    mode: str                       # LAUNCH_RANKS or LAUNCH_NODE
    command: tuple                  # the argv template, with {placeholders}
    kind: str                       # main.py, benchmark.yaml, main.sh, toolkit, base-benchmark
    case_path: Path | None = None   # the CASE_PATHS folder it came from; None: flagperf's own tree
    support: tuple = ()             # folders beside root that the command needs too (names in case_path)
    training: "TrainingCase | None" = None  # a FlagPerf training case: launcher, vendor config, preparation
    mpi_args: tuple = ()            # launch: mpi: mpirun's own options (argv elements, with {placeholders})
    suite: SuiteCase | None = None  # a FlagPerf inference or operation case (flagperf.suites)

    @property
    def external(self) -> bool:
        return self.case_path is not None

    @property
    def subdir(self) -> str:
        """``folder`` relative to ``root`` (``""`` or ``<vendor>/<chip>``), POSIX style."""
        rel = self.folder.relative_to(self.root)
        return "" if str(rel) == "." else rel.as_posix()


@dataclass(frozen=True)
class TrainingCase:
    """A case of a FlagPerf training tree, as FlagPerf's ``run.py`` would start it. Paths are on the driver;
    ``rel`` gives each one relative to the tree (the layout deploy keeps on the hosts)."""

    tree: Path                      # FlagPerf's training/ folder
    framework: str                  # the launcher's name: the case key's framework before its '_'
    launcher: Path                  # run_benchmarks/<framework>/start_<framework>_task.py
    model_dir: Path                 # benchmarks/<model>/<framework>/ (holds run_pretraining.py)
    vendor_dir: Path                # <vendor>/<model>-<framework>/
    config_file: str                # config_<hw>x<nnodes>x<nproc>.py, in vendor_dir/config/
    requirements: Path | None       # vendor_dir/config/requirements.txt: installed before every round
    env_file: Path | None           # vendor_dir/config/environment_variables.sh: sourced in the launcher's shell
    extension: Path | None          # vendor_dir/csrc/ (setup.py): built and installed before every round
    image_folder: Path | None       # <vendor>/docker_image/<framework as written>/ with a Dockerfile

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.tree).as_posix()

    @property
    def support(self) -> tuple:
        """Folders of the tree the case needs on a host, relative to the tree, each once."""
        out = [self.rel(self.launcher.parent), *(d for d in TRAINING_SUPPORT if (self.tree / d).is_dir()),
               self.rel(self.model_dir.parent), self.rel(self.vendor_dir)]
        return tuple(dict.fromkeys(out))


def training_tree(folder) -> Path | None:
    """The FlagPerf training tree ``folder`` is, or whose ``benchmarks/`` it is; None if neither."""
    folder = Path(folder)
    for tree in (folder, folder.parent) if folder.name == "benchmarks" else (folder,):
        if (tree / "benchmarks").is_dir() and training_frameworks(tree):
            return tree
    return None


def training_frameworks(tree: Path) -> list:
    """The frameworks a training tree has a launcher for (run_benchmarks/<fw>/start_<fw>_task.py)."""
    launchers = Path(tree) / TRAINING_LAUNCHERS
    if not launchers.is_dir():
        return []
    return sorted(p.name for p in launchers.iterdir()
                  if p.is_dir() and (p / f"start_{p.name}_task.py").is_file())


def training_models(tree: Path) -> list:
    """Models of a training tree: benchmarks/<model>/ folders with a folder for one of its frameworks."""
    fws = training_frameworks(tree)
    bench = Path(tree) / "benchmarks"
    return sorted(p.name for p in bench.iterdir() if p.is_dir() and any((p / fw).is_dir() for fw in fws))


def _listing(paths, limit: int = 8) -> str:
    names = sorted(paths)
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "") if names else "none"


def find_training_case(tree: Path, model: str, vendor: str, framework: str, framework_full: str, hw: str,
                       nnodes: int, nproc) -> tuple:
    """(TrainingCase or None, problems): what FlagPerf's run.py checks before it starts a case; the first missing
    piece (launcher, then the model's framework folder, then the vendor config) is named with the path that was
    looked for, one line."""
    tree = Path(tree)
    fws = training_frameworks(tree)
    launcher = tree / TRAINING_LAUNCHERS / framework / f"start_{framework}_task.py"
    if framework not in fws:
        return None, [f"FlagPerf training tree {tree} has no launcher {launcher} (launchers there: "
                      f"{_listing(fws)})"]
    model_dir = tree / "benchmarks" / model / framework
    if not model_dir.is_dir():
        have = [p.name for p in (tree / "benchmarks" / model).iterdir() if p.is_dir()] \
            if (tree / "benchmarks" / model).is_dir() else []
        return None, [f"FlagPerf training tree {tree} has no {model_dir} (frameworks of {model} there: "
                      f"{_listing(have)})"]
    if not (model_dir / TRAINING_SCRIPT).is_file():
        return None, [f"FlagPerf training case {model_dir} has no {TRAINING_SCRIPT}"]
    vendor_dir = tree / vendor / f"{model}-{framework}"
    configs = [p.name for p in (vendor_dir / "config").glob("config_*x*x*.py")] \
        if (vendor_dir / "config").is_dir() else []
    if nproc is None:
        return None, [f"nproc 'auto' is not possible for a FlagPerf training case: its vendor config is named "
                      f"config_<hw>x<nnodes>x<nproc>.py (configs in {vendor_dir / 'config'}: {_listing(configs)})"]
    config_file = f"config_{hw}x{nnodes}x{nproc}.py"
    if not (vendor_dir / "config" / config_file).is_file():
        return None, [f"FlagPerf training case has no vendor config {vendor_dir / 'config' / config_file} "
                      f"(configs there: {_listing(configs)})"]
    cfg = vendor_dir / "config"
    image = tree / vendor / "docker_image" / framework_full
    return TrainingCase(
        tree, framework, launcher, model_dir, vendor_dir, config_file,
        requirements=cfg / "requirements.txt" if (cfg / "requirements.txt").is_file() else None,
        env_file=cfg / "environment_variables.sh" if (cfg / "environment_variables.sh").is_file() else None,
        extension=vendor_dir / "csrc" if (vendor_dir / "csrc" / "setup.py").is_file() else None,
        image_folder=image if (image / "Dockerfile").is_file() else None), []


def base_chip_files(src: CaseSource, vendor: str, case_key: str, hw: str) -> tuple:
    """(env.sh or None, requirements.txt or None) of a FlagPerf base benchmark, on the driver: those of
    ``<case>/<vendor>/<chip>/`` for a case key ``<case>:<chip>``, of ``<case>/<vendor>/`` for a key without one
    (FlagPerf's base run.py: its env_dir). (None, None) for any other kind of case."""
    if src.kind != BASE_BENCHMARK_KIND:
        return None, None
    folder = src.root / vendor / hw if ":" in case_key else src.root / vendor
    return tuple(folder / name if (folder / name).is_file() else None for name in (BASE_ENV_FILE, BASE_REQUIREMENTS))


def _is_benchmark_folder(folder: Path) -> bool:
    if any((folder / name).is_file() for name in ("main.py", BENCHMARK_FILE, "main.sh")):
        return True
    return any(p.is_file() for p in folder.glob("*/*/main.sh"))


def benchmark_names(root: Path, case_paths=()) -> list:
    """Benchmarks of the flagperf tree, then those of each CASE_PATHS folder (a folder per benchmark)."""
    bench = Path(root) / "benchmarks"
    names = {p.name for p in bench.iterdir() if p.is_dir() and _is_benchmark_folder(p)} if bench.is_dir() else set()
    for folder in case_paths:
        tree = training_tree(folder)
        if tree is not None:
            names.update(training_models(tree))
        else:
            names.update(p.name for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith(".")
                         and (_is_benchmark_folder(p) or any(p.glob("*/main.sh"))))
    return sorted(names)


def benchmark_description(root: Path, name: str) -> str:
    """The first comment line of the benchmark's case_config.yaml, or ''."""
    try:
        first = (Path(root) / "benchmarks" / name / "case_config.yaml").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return ""
    return first.lstrip("#").strip() if first.startswith("#") else ""


def placeholder_problems(arg: str) -> list:
    """What is wrong with the {placeholders} of one argv element: unknown names, format specs, bad braces."""
    try:
        fields = list(string.Formatter().parse(arg))
    except ValueError as exc:
        return [f"{arg!r}: {exc} (write a literal brace as {{{{ or }}}})"]
    problems = []
    for _literal, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            close = difflib.get_close_matches(name, PLACEHOLDERS, n=1, cutoff=0.7)
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            hint = f"did you mean {{{close[0]}}}?" if close else f"known: {known}"
            problems.append(f"{arg!r}: unknown placeholder {{{name}}}; {hint}")
        elif spec or conversion:
            problems.append(f"{arg!r}: placeholder {{{name}}} takes no format or conversion")
    return problems


def substitute(command, values: dict) -> list:
    """The argv of a command template with every {placeholder} replaced (the template is checked at load)."""
    return [str(arg).format(**values) for arg in command]


def load_benchmark_yaml(path: Path) -> tuple:
    """((mode, command) or None, problems) of a benchmark.yaml; problems are one-line messages naming the file,
    line and key."""
    data, problems = load_yaml_file(path)
    if problems:
        return None, problems
    if not isinstance(data, LineMap):
        return None, [f"{path}: expected a mapping with launch: ranks or node (and command: for node)"]
    for key in (k for k in data if k not in BENCHMARK_KEYS):
        close = difflib.get_close_matches(str(key).lower(), BENCHMARK_KEYS, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else f"; known keys: {', '.join(BENCHMARK_KEYS)}"
        problems.append(f"{where(path, data, key)}: {key}: unknown key{hint}")
    mode = data.get("launch", LAUNCH_RANKS)
    if mode not in LAUNCH_MODES:
        problems.append(f"{where(path, data, 'launch')}: launch: expected one of {', '.join(LAUNCH_MODES)}, "
                        f"got {mode!r}")
    command = data.get("command")
    if command is None:
        if mode in (LAUNCH_NODE, LAUNCH_MPI):
            example = "[bash, main.sh]" if mode == LAUNCH_NODE else "[./test_allreduce, -b, 128K]"
            problems.append(f"{where(path, data, 'launch') if 'launch' in data else path}: command: required with "
                            f"launch: {mode}; expected a list of argv strings, e.g. {example}")
        command = ()
    elif not isinstance(command, list) or not command or len(command) > MAX_COMMAND_ARGS or \
            not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in command):
        problems.append(f"{where(path, data, 'command')}: command: expected a non-empty list of argv strings "
                        f"(no shell: each element is one argument), got {command!r:.80}")
        command = ()
    else:
        command = tuple(str(a) for a in command)
        if not command[0].strip():
            problems.append(f"{where(path, data, 'command')}: command: the program (first element) is empty")
        for arg in command:
            problems += [f"{where(path, data, 'command')}: command: {p}" for p in placeholder_problems(arg)]
    mpi_args = data.get("mpi_args", [])
    if mpi_args and mode != LAUNCH_MPI:
        problems.append(f"{where(path, data, 'mpi_args')}: mpi_args: only with launch: mpi")
    elif not isinstance(mpi_args, list) or len(mpi_args) > MAX_COMMAND_ARGS or \
            not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in mpi_args):
        problems.append(f"{where(path, data, 'mpi_args')}: mpi_args: expected a list of mpirun's argv strings, "
                        f"e.g. [--mca, btl, 'tcp,self'], got {mpi_args!r:.80}")
    else:
        mpi_args = [str(a) for a in mpi_args]
        for arg in mpi_args:
            problems += [f"{where(path, data, 'mpi_args')}: mpi_args: {p}" for p in placeholder_problems(arg)]
    if problems:
        return None, problems
    return (mode, command, tuple(mpi_args)), []


def _folder_case(root: Path, case_path: Path | None, vendor: str, hw: str, base_mode: str | None) -> tuple:
    """(CaseSource or None, problems) of one benchmark folder (flagperf's or a CASE_PATHS one)."""
    spec = root / BENCHMARK_FILE
    if spec.exists():
        launch, problems = load_benchmark_yaml(spec)
        if problems:
            return None, problems
        mode, command, mpi_args = launch
        if mode == LAUNCH_RANKS and not command:
            command = DEFAULT_RANK_COMMAND
        return CaseSource(root.name, root, root, mode, command, "benchmark.yaml", case_path, mpi_args=mpi_args), []
    chip = root / vendor / hw
    if (chip / "main.sh").is_file():
        return CaseSource(root.name, root, chip, LAUNCH_NODE, SHELL_COMMAND, "toolkit", case_path), []
    if (root / vendor / "main.sh").is_file():      # FlagPerf's layout without a chip folder
        return CaseSource(root.name, root, root / vendor, LAUNCH_NODE, SHELL_COMMAND, "toolkit", case_path), []
    if (root / "main.py").is_file():
        if base_mode == "benchmark" and case_path is not None:
            support = tuple(d for d in BASE_SUPPORT_DIRS if (case_path / d).is_dir())
            return CaseSource(root.name, root, root, LAUNCH_NODE, BASE_BENCHMARK_COMMAND, BASE_BENCHMARK_KIND,
                              case_path, support), []
        return CaseSource(root.name, root, root, LAUNCH_RANKS, DEFAULT_RANK_COMMAND, "main.py", case_path), []
    if (root / "main.sh").is_file():
        return CaseSource(root.name, root, root, LAUNCH_NODE, SHELL_COMMAND, "main.sh", case_path), []
    chips = sorted(p.parent.relative_to(root).as_posix() for p in root.glob("*/*/main.sh") if p.is_file())
    if chips:
        return None, [f"model {root.name!r}: {root} has no {vendor}/{hw}/main.sh (toolkits there: "
                      f"{_listing(chips)})"]
    return None, [f"model {root.name!r}: {root} has nothing runnable (looked for {BENCHMARK_FILE}, main.py, "
                  f"main.sh, {vendor}/{hw}/main.sh)"]


def _claims(case_path: Path, model: str) -> bool:
    """True when a CASE_PATHS folder has a case ``model``: a benchmark folder (main.py, benchmark.yaml, main.sh,
    toolkits) or, in a training tree, benchmarks/<model>/."""
    tree = training_tree(case_path)
    if tree is not None:
        return (tree / "benchmarks" / model).is_dir()
    folder = case_path / model
    return folder.is_dir() and (_is_benchmark_folder(folder) or any(folder.glob("*/main.sh")))


def find_case(source_root: Path, case_paths, model: str, vendor: str, hw: str, base_mode: str | None = None, *,
              framework: str | None = None, framework_full: str | None = None, nnodes: int = 1, nproc=1,
              prefer: str | None = None) -> tuple:
    """(CaseSource or None, problems) of a case: flagperf's ``benchmarks/<model>/`` or the first CASE_PATHS
    folder that has ``<model>/`` (a training tree: ``benchmarks/<model>/``). A model that is both is ambiguous
    unless ``prefer`` (MODEL_SOURCES) says ``flagperf`` or ``case_paths``. ``base_mode`` "benchmark" starts a
    CASE_PATHS ``main.py`` under torchrun per node (FlagPerf base benchmarks). None with no problem: no folder
    of that name anywhere."""
    own = Path(source_root) / "benchmarks" / model
    own_is = own.is_dir() and _is_benchmark_folder(own)
    external = next((Path(cp) for cp in case_paths if _claims(Path(cp), model)), None)
    if own_is and external is not None and prefer is None:
        return None, [f"model {model!r} is both flagperf's benchmark {own} and a case of the CASE_PATHS folder "
                      f"{external}: say which in the test config's MODEL_SOURCES ({{{model}: {SOURCE_FLAGPERF}}} or "
                      f"{{{model}: {SOURCE_CASE_PATHS}}})"]
    if prefer == SOURCE_FLAGPERF or (prefer is None and external is None):
        if own.is_dir():
            return _folder_case(own, None, vendor, hw, base_mode)
        empty = next((Path(cp) / model for cp in case_paths if (Path(cp) / model).is_dir()), None)
        return _folder_case(empty, Path(empty.parent), vendor, hw, base_mode) if empty else (None, [])
    if external is None:
        return None, [f"model {model!r}: MODEL_SOURCES says {SOURCE_CASE_PATHS}, but no CASE_PATHS folder has it "
                      f"({', '.join(str(p) for p in case_paths) or 'CASE_PATHS is empty'})"]
    tree = training_tree(external)
    if tree is None:
        return _folder_case(external / model, external, vendor, hw, base_mode)
    fw = framework or ""
    training, problems = find_training_case(tree, model, vendor, fw, framework_full or fw, hw, nnodes, nproc)
    if problems:
        return None, [f"model {model!r}: {p}" for p in problems]
    assert training is not None
    root = tree / "benchmarks" / model
    return CaseSource(model, root, root, LAUNCH_NODE, (), "flagperf-training", tree, training.support,
                      training), []


def find_case_of(source_root: Path, case_paths, vendor: str, case, base_mode: str | None = None,
                 model_sources=None) -> tuple:
    """find_case for a CaseSpec (its model, framework, hw and shape; an ``each`` case is one node per job, a
    ``pairs`` case two); a case of FlagPerf's inference or operation suite: suite_case_source."""
    if getattr(case, "suite", ""):
        return suite_case_source(case_paths, vendor, case)
    return find_case(source_root, tuple(str(p) for p in case_paths), case.model, vendor, case.hw,
                     base_mode.lower() if base_mode else None, framework=case.framework,
                     framework_full=case.framework_full or case.framework,
                     nnodes=1 if getattr(case, "each", False) else 2 if getattr(case, "pairs", False) else case.nnodes,
                     nproc=case.nproc,
                     prefer=(model_sources or {}).get(case.model))


def suite_case_source(case_paths, vendor: str, case) -> tuple:
    """(CaseSource or None, problems) of a case of FlagPerf's inference or operation suite: FlagPerf's script in the
    suite's tree (a CASE_PATHS folder, from FLAGPERF_PATH), started once per node (flagperf.suites)."""
    sc, problems = find_suite_case(tuple(Path(p) for p in case_paths), case.suite, case, vendor)
    if problems or sc is None:
        return None, [f"model {case.model!r}: {p}" for p in problems]
    return CaseSource(case.model, sc.tree, sc.workdir, LAUNCH_NODE, (), f"flagperf-{sc.suite}", sc.tree,
                      suite=sc), []


def resolve_cases(config_path, source_root: Path, case_paths, vendor: str, cases, base_mode: str | None,
                  model_sources=None) -> tuple:
    """({case key: CaseSource or None}, problems): the config-load check of every case's folder (a bad
    benchmark.yaml naming its file, line and key; a toolkit without the vendor/chip folder; a FlagPerf training case
    without its launcher or vendor config; an ambiguous model; one line each), each distinct case looked up once."""
    problems: list = []
    sources: dict = {}
    seen: dict = {}
    for case in cases:
        key = (case.model, case.framework, case.framework_full, case.hw, case.nnodes, case.nproc,
               getattr(case, "each", False), getattr(case, "pairs", False))
        if key not in seen:
            seen[key] = find_case_of(source_root, case_paths, vendor, case, base_mode, model_sources)
        src, found = seen[key]
        sources[case.key] = src
        for p in found:     # benchmark.yaml problems name that file; the others are about the case
            p = f"{config_path}: CASES[{case.key!r}]: {p}" if p.startswith("model ") else p
            if p not in problems:
                problems.append(p)
    return sources, problems

