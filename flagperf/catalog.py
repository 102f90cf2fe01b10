"""What a flagperf tree and the CASE_PATHS folders provide: benchmark folders, and how each one starts.

A benchmark is a folder ``<model>/``, looked up in flagperf's own ``benchmarks/`` first, then in each CASE_PATHS
folder in order. How it starts (docs/benchmarks.md, "Launch modes"):

- ``benchmark.yaml`` says so: ``launch: ranks`` (one process per rank) or ``launch: node`` with ``command``
  (one process per node, e.g. torchrun or ``bash main.sh``), argv elements with ``{placeholders}``;
- a FlagPerf toolkit, ``<model>/<vendor>/<chip>/main.sh``: ``bash main.sh`` in that chip folder, once per node;
- a FlagPerf base benchmark (base mode "benchmark", a CASE_PATHS folder): ``main.py`` under torchrun, per node;
- ``main.py``: one process per rank (flagperf's own benchmarks);
- only ``main.sh``: ``bash main.sh`` once per node.

Pure look-ups of the driver's files; nothing here touches a host.
"""

from __future__ import annotations

import difflib
import string
from dataclasses import dataclass
from pathlib import Path

from flagperf.yamlio import LineMap, load_yaml_file, where

BENCHMARK_FILE = "benchmark.yaml"
LAUNCH_RANKS, LAUNCH_NODE = "ranks", "node"
LAUNCH_MODES = (LAUNCH_RANKS, LAUNCH_NODE)
BENCHMARK_KEYS = ("launch", "command")
MAX_COMMAND_ARGS = 4096
# What a command's argv elements may name; plan.py substitutes them for every node (docs/benchmarks.md).
PLACEHOLDERS = ("master_addr", "master_port", "node_rank", "nnodes", "nproc", "world_size", "data_dir",
                "result_dir", "vendor", "chip", "config_file", "case_dir", "python", "framework")
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

    @property
    def external(self) -> bool:
        return self.case_path is not None

    @property
    def subdir(self) -> str:
        """``folder`` relative to ``root`` (``""`` or ``<vendor>/<chip>``), POSIX style."""
        rel = self.folder.relative_to(self.root)
        return "" if str(rel) == "." else rel.as_posix()


def _is_benchmark_folder(folder: Path) -> bool:
    if any((folder / name).is_file() for name in ("main.py", BENCHMARK_FILE, "main.sh")):
        return True
    return any(p.is_file() for p in folder.glob("*/*/main.sh"))


def benchmark_names(root: Path, case_paths=()) -> list:
    """Benchmarks of the flagperf tree, then those of each CASE_PATHS folder (a folder per benchmark)."""
    bench = Path(root) / "benchmarks"
    names = {p.name for p in bench.iterdir() if p.is_dir() and _is_benchmark_folder(p)} if bench.is_dir() else set()
    for folder in case_paths:
        names.update(p.name for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith("."))
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
        if mode == LAUNCH_NODE:
            problems.append(f"{where(path, data, 'launch') if 'launch' in data else path}: command: required with "
                            f"launch: node; expected a list of argv strings, e.g. [bash, main.sh]")
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
    if problems:
        return None, problems
    return (mode, command), []


def find_case(source_root: Path, case_paths, model: str, vendor: str, hw: str, base_mode: str | None = None) -> tuple:
    """(CaseSource or None, problems) of a case: flagperf's ``benchmarks/<model>/`` first, then each CASE_PATHS
    folder's ``<model>/``. ``base_mode`` "benchmark" starts a CASE_PATHS ``main.py`` under torchrun per node
    (FlagPerf base benchmarks). None with no problem: no folder of that name is a benchmark."""
    candidates: list[tuple[Path, Path | None]] = [(Path(source_root) / "benchmarks" / model, None)]
    candidates += [(Path(cp) / model, Path(cp)) for cp in case_paths]
    missing_toolkit = []
    for root, case_path in candidates:
        if not root.is_dir():
            continue
        spec = root / BENCHMARK_FILE
        if spec.exists():
            launch, problems = load_benchmark_yaml(spec)
            if problems:
                return None, problems
            mode, command = launch
            if mode == LAUNCH_RANKS and not command:
                command = DEFAULT_RANK_COMMAND
            return CaseSource(model, root, root, mode, command, "benchmark.yaml", case_path), []
        chip = root / vendor / hw
        if (chip / "main.sh").is_file():
            return CaseSource(model, root, chip, LAUNCH_NODE, SHELL_COMMAND, "toolkit", case_path), []
        if (root / vendor / "main.sh").is_file():      # FlagPerf's layout without a chip folder
            return CaseSource(model, root, root / vendor, LAUNCH_NODE, SHELL_COMMAND, "toolkit", case_path), []
        if (root / "main.py").is_file():
            if base_mode == "benchmark" and case_path is not None:
                support = tuple(d for d in BASE_SUPPORT_DIRS if (case_path / d).is_dir())
                return CaseSource(model, root, root, LAUNCH_NODE, BASE_BENCHMARK_COMMAND, "base-benchmark",
                                  case_path, support), []
            return CaseSource(model, root, root, LAUNCH_RANKS, DEFAULT_RANK_COMMAND, "main.py", case_path), []
        if (root / "main.sh").is_file():
            return CaseSource(model, root, root, LAUNCH_NODE, SHELL_COMMAND, "main.sh", case_path), []
        chips = sorted(p.parent.relative_to(root).as_posix() for p in root.glob("*/*/main.sh") if p.is_file())
        if chips:
            missing_toolkit.append(f"{root} has no {vendor}/{hw}/main.sh (toolkits there: {', '.join(chips[:8])}"
                                   f"{', ...' if len(chips) > 8 else ''})")
    if missing_toolkit:
        return None, [f"model {model!r}: " + "; ".join(missing_toolkit)]
    return None, []


def case_problems(config_path, source_root: Path, case_paths, vendor: str, cases, base_mode: str | None) -> list:
    """Config-load check of every case's folder: a bad benchmark.yaml (file, line, key) or a toolkit without the
    vendor/chip folder; one line each."""
    problems: list = []
    seen = set()
    for case in cases:
        key = (case.model, case.hw)
        if key in seen:
            continue
        seen.add(key)
        _src, found = find_case(source_root, tuple(str(p) for p in case_paths), case.model, vendor, case.hw,
                                base_mode.lower() if base_mode else None)
        for p in found:     # benchmark.yaml problems name that file; the others are about the case
            p = f"{config_path}: CASES[{case.key!r}]: {p}" if p.startswith("model ") else p
            if p not in problems:
                problems.append(p)
    return problems
