"""FlagPerf's inference and operation suites: their case keys, their trees, and the command FlagPerf's ``run.py``
starts on a host for each case (docs/migrating-from-flagperf.md, "Inference and operation suites").

- **inference** (FlagPerf's ``inference/`` folder; its ``host.yaml`` CASES ``"<model>:<framework>": <data dir>``):
  on the first host, in the tree (the container's working directory in FlagPerf), ``python3 run_inference.py
  --perf_dir <tree> --loglevel <level> --vendor <vendor> --case <model> --data_dir <data dir> --framework
  <framework as written> --log_dir <log dir>``, after FlagPerf's preparation (``prepare_in_container.py``): the
  case's ``benchmarks/<model>/<framework>/requirements.txt`` (or ``<vendor>_requirements.txt``) pip-installed
  with its ``environment_variables.sh`` sourced, and ``inference_engine/<vendor>/csrc/`` built. The case reads
  ``configs/<model>/configurations.yaml`` and ``parameters.yaml`` (and ``vendor_config/<vendor>_configurations.yaml``).
- **operation** (FlagPerf's ``operation/`` folder; CASES ``"<op>:<dataformat>:<spectflops>:<oplib>:<chip>": <image
  name>``): on every host, what ``container_main.py`` runs: ``python3 main.py --vendor=<vendor> --case_name=<op>
  --spectflops=<spectflops> --dataformat=<dataformat> --oplib=<oplib> --chip=<chip>`` in ``benchmarks/<op>/``, after
  pip-installing ``benchmarks/<op>/<vendor>/<chip>/requirements.txt`` and sourcing ``env.sh`` there. The case reads
  ``benchmarks/<op>/case_config.yaml`` and ``benchmarks/<op>/<vendor>/<chip>/case_config.yaml``.

Pure look-ups of the driver's files; nothing here touches a host. A missing piece is one line naming the path
that was looked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flagperf.checker import resolve
from flagperf.pyconfig import is_python_config

INFERENCE, OPERATION = "inference", "operation"
SUITES = (INFERENCE, OPERATION)
SUITE_KEY = "FLAGPERF_SUITE"    # a flagperf test config whose CASES are those of FlagPerf's inference or operation
INFERENCE_SCRIPT = "run_inference.py"
OPERATION_LAUNCHER = "container_main.py"     # FlagPerf's in-container launcher: flagperf starts main.py itself
OPERATION_SCRIPT = "main.py"
INFERENCE_KEY = "'<model>:<framework>'"
OPERATION_KEY = "'<op>:<dataformat>:<spectflops>:<oplib>:<chip>'"
OPERATION_FIELDS = ("op", "dataformat", "spectflops", "oplib", "chip")
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class SuiteCase:
    """A case of FlagPerf's inference or operation tree, as FlagPerf's ``run.py`` would start it. Paths are on the
    driver; ``rel`` gives each one relative to the tree (the layout deploy keeps on the hosts)."""

    suite: str                  # INFERENCE or OPERATION
    tree: Path                  # FlagPerf's inference/ or operation/ folder
    script: Path                # run_inference.py, or benchmarks/<op>/main.py
    workdir: Path               # where it starts: the tree (inference), benchmarks/<op>/ (operation)
    requirements: Path | None   # pip-installed before every round
    env_file: Path | None       # sourced before the installation and in the script's shell
    extension: Path | None      # inference_engine/<vendor>/csrc/ (setup.py): built and installed before every round
    config_files: tuple         # the case's own config files, for --dry-run

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.tree).as_posix()


def suite_of(path, data) -> str | None:
    """The FlagPerf suite of a test config: its FLAGPERF_SUITE (``flagperf convert`` writes it), else, for a FlagPerf
    ``host.yaml`` (a YAML test config with HOSTS and without BENCHMARKS_OR_TOOLKITS), its FLAGPERF_PATH folder's:
    one that holds ``run_inference.py`` (inference) or ``container_main.py`` (operation), or is named
    ``inference`` or ``operation``; None for any other config."""
    if not isinstance(data, dict) or is_python_config(path) or "BENCHMARKS_OR_TOOLKITS" in data:
        return None
    if data.get(SUITE_KEY) in SUITES:      # a converted host.yaml says so
        return data[SUITE_KEY]
    if "HOSTS" not in data:
        return None
    value = data.get("FLAGPERF_PATH")
    try:
        folder = resolve(Path(path), value if isinstance(value, str) else "")
    except ValueError:
        return None
    try:
        if (folder / INFERENCE_SCRIPT).is_file():
            return INFERENCE
        if (folder / OPERATION_LAUNCHER).is_file():
            return OPERATION
    except OSError:
        pass
    return folder.name if folder.name in SUITES else None


def suite_tree(folder, suite: str) -> Path | None:
    """The suite's tree a CASE_PATHS folder is (or whose ``benchmarks/`` it is): a folder with ``benchmarks/``;
    None when it has none."""
    folder = Path(folder)
    tree = folder.parent if folder.name == "benchmarks" else folder
    return tree if (tree / "benchmarks").is_dir() else None


def parse_inference_key(key) -> tuple:
    """(model, framework as written, fields after the second) of an inference case key; ValueError says why not.
    FlagPerf's run.py takes the first two fields and ignores the others."""
    if not isinstance(key, str):
        raise ValueError(f"expected a string {INFERENCE_KEY}, got {key!r}")
    parts = [p.strip() for p in key.split(":")]
    if len(parts) < 2:
        raise ValueError(f"expected {INFERENCE_KEY} in a FlagPerf inference host.yaml, got {len(parts)} field")
    for name, value in (("model", parts[0]), ("framework", parts[1])):
        if not _NAME.fullmatch(value):
            raise ValueError(f"{name} {value!r}: expected letters, digits and _ . + - (not empty)")
    if not parts[1].partition("_")[0]:
        raise ValueError(f"framework {parts[1]!r} has nothing before its '_' (expected e.g. pytorch_2.1)")
    return parts[0], parts[1], tuple(parts[2:])


def parse_operation_key(key) -> dict:
    """{op, dataformat, spectflops, oplib, chip} of an operation case key; ValueError says why not. FlagPerf's
    run.py and container_main.py split the key into exactly these five fields."""
    if not isinstance(key, str):
        raise ValueError(f"expected a string {OPERATION_KEY}, got {key!r}")
    parts = [p.strip() for p in key.split(":")]
    if len(parts) != len(OPERATION_FIELDS):
        raise ValueError(f"expected 5 fields {OPERATION_KEY} in a FlagPerf operation host.yaml, got {len(parts)}")
    fields = dict(zip(OPERATION_FIELDS, parts))
    for name, value in fields.items():
        if name == "spectflops":
            if not _NUMBER.fullmatch(value) or not float(value) > 0:
                raise ValueError(f"spectflops {value!r}: expected the chip's peak TFLOPS at that dataformat, a "
                                 f"number > 0 (FlagPerf divides by it)")
        elif not _NAME.fullmatch(value):
            raise ValueError(f"{name} {value!r}: expected letters, digits and _ . + - (not empty)")
    return fields


def _listing(names, limit: int = 8) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "") if names else "none"


def _dirs(folder: Path) -> list:
    try:
        return [p.name for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []


def find_inference_case(tree: Path, model: str, vendor: str, framework_full: str) -> tuple:
    """(SuiteCase or None, problems): what run_inference.py needs for ``model`` (the first missing piece, one
    line naming the path looked for)."""
    tree = Path(tree)
    framework = framework_full.partition("_")[0]
    script = tree / INFERENCE_SCRIPT
    if not script.is_file():
        return None, [f"FlagPerf inference tree {tree} has no {script}"]
    case_dir = tree / "benchmarks" / model / framework
    if not (case_dir / "__init__.py").is_file():
        have = _dirs(tree / "benchmarks" / model)
        what = f"frameworks of {model} there: {_listing(have)}" if (tree / "benchmarks" / model).is_dir() else \
            f"cases there: {_listing(_dirs(tree / 'benchmarks'))}"
        return None, [f"FlagPerf inference tree {tree} has no {case_dir / '__init__.py'} ({what})"]
    configs = tree / "configs" / model
    for name in ("configurations.yaml", "parameters.yaml"):
        if not (configs / name).is_file():
            return None, [f"FlagPerf inference case {model} has no {configs / name} (run_inference.py reads it)"]
    files = [configs / "configurations.yaml", configs / "parameters.yaml"]
    vendor_cfg = configs / "vendor_config" / f"{vendor}_configurations.yaml"
    if vendor_cfg.is_file():
        files.append(vendor_cfg)
    req = case_dir / f"{vendor}_requirements.txt"
    req = req if req.is_file() else case_dir / "requirements.txt"
    env = case_dir / "environment_variables.sh"
    csrc = tree / "inference_engine" / vendor / "csrc"
    return SuiteCase(INFERENCE, tree, script, tree, req if req.is_file() else None, env if env.is_file() else None,
                     csrc if (csrc / "setup.py").is_file() else None, tuple(files)), []


def find_operation_case(tree: Path, op: str, vendor: str, chip: str) -> tuple:
    """(SuiteCase or None, problems): what benchmarks/<op>/main.py needs on ``vendor``'s ``chip`` (the first
    missing piece, one line naming the path looked for)."""
    tree = Path(tree)
    case_dir = tree / "benchmarks" / op
    script = case_dir / OPERATION_SCRIPT
    if not script.is_file():
        ops = [p.parent.name for p in (tree / "benchmarks").glob(f"*/{OPERATION_SCRIPT}")] if \
            (tree / "benchmarks").is_dir() else []
        return None, [f"FlagPerf operation tree {tree} has no {script} (operations there: {_listing(ops)})"]
    if not (case_dir / "case_config.yaml").is_file():
        return None, [f"FlagPerf operation case {op} has no {case_dir / 'case_config.yaml'} (main.py reads it)"]
    chip_dir = case_dir / vendor / chip
    if not (chip_dir / "case_config.yaml").is_file():
        return None, [f"FlagPerf operation case {op} has no {chip_dir / 'case_config.yaml'} (chips of {vendor} "
                      f"there: {_listing(_dirs(case_dir / vendor))})"]
    req, env = chip_dir / "requirements.txt", chip_dir / "env.sh"
    return SuiteCase(OPERATION, tree, script, case_dir, req if req.is_file() else None,
                     env if env.is_file() else None, None,
                     (case_dir / "case_config.yaml", chip_dir / "case_config.yaml")), []


def find_suite_case(case_paths, suite: str, case, vendor: str) -> tuple:
    """(SuiteCase or None, problems) of a suite case (a CaseSpec with ``suite``), in the first CASE_PATHS folder
    that is a tree of that suite."""
    trees = [t for t in (suite_tree(p, suite) for p in case_paths) if t is not None]
    if not trees:
        return None, [f"no FlagPerf {suite} tree among the CASE_PATHS folders "
                      f"({', '.join(map(str, case_paths)) or 'none'}); FLAGPERF_PATH names it"]
    if suite == INFERENCE:
        return find_inference_case(trees[0], case.model, vendor, case.framework_full or case.framework)
    return find_operation_case(trees[0], case.model, vendor, case.hw)


def suite_argv(sc: SuiteCase, case, tree_on_host: str, values: dict, log_level: str) -> list:
    """FlagPerf's command for the case on one node, with the tree at ``tree_on_host`` (values: the node's
    placeholders, flagperf.caselaunch). inference: run_inference.py with run.py's arguments, its log folder
    the node's directory; operation: main.py with container_main.py's arguments."""
    on_host = f"{tree_on_host.rstrip('/')}/"
    if sc.suite == INFERENCE:
        return [values["python"], on_host + sc.rel(sc.script), "--perf_dir", tree_on_host,
                "--loglevel", log_level.upper(), "--vendor", values["vendor"], "--case", case.model,
                "--data_dir", case.data_dir or "", "--framework", case.framework_full or case.framework,
                "--log_dir", values["result_dir"]]
    dataformat, spectflops, oplib = case.suite_args
    return [values["python"], OPERATION_SCRIPT, f"--vendor={values['vendor']}", f"--case_name={case.model}",
            f"--spectflops={spectflops}", f"--dataformat={dataformat}", f"--oplib={oplib}", f"--chip={case.hw}"]


def suite_notes(sc: SuiteCase, case) -> list:
    """What --dry-run says about a suite case besides its command: script, config files, preparation."""
    what = "run_inference.py" if sc.suite == INFERENCE else "benchmarks/<op>/main.py"
    notes = [f"FlagPerf {sc.suite} case ({what}): {sc.script}; its config: {', '.join(map(str, sc.config_files))}",
             "preparation before every round (logged to env_prepare.log): "
             + ("; ".join(x for x in (f"pip install -r {sc.requirements}" if sc.requirements else "",
                                      f"{sc.extension}/setup.py install" if sc.extension else "") if x) or "none"),
             f"env file: {sc.env_file or 'none'}"]
    return notes
