"""``flagperf convert``: FlagPerf's config files written as flagperf YAML.

Input: a training ``test_conf.py`` (with or without its ``cluster_conf.py``), or a base, inference or operation
``host.yaml`` (test and cluster keys in one file). Output: ``test_conf.yaml`` and, when there are hosts,
``cluster.yaml``, each with a YAML comment on every key that changed or was dropped and why. The files load as
they are (``flagperf run --config test_conf.yaml --dry-run``); the values are not checked here beyond what the
conversion needs, so that a config can be converted on a machine other than the one that runs it. Of an inference
or operation host.yaml, a case key that FlagPerf could not run either and the keys those suites do not use are
left out, each with a line saying so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from flagperf.config import (CLUSTER_IGNORED, CLUSTER_KEYS, FLAGPERF_IGNORED, TEST_KEYS, close_key, flagperf_kind,
                             resolve)
from flagperf.options.hostlist import PATH_KEYS as HOSTLIST_PATH_KEYS
from flagperf.options.hostlist import PORT_KEYS as HOSTLIST_PORT_KEYS
from flagperf.errors import ConfigError
from flagperf.pyconfig import is_python_config, load_config_file
from flagperf.suites import INFERENCE, SUITE_KEY, parse_inference_key, parse_operation_key, suite_of
from flagperf.yamlio import LineMap, one_line, where
from flagperf_contract import write_atomic

TEST_FILE, CLUSTER_FILE = "test_conf.yaml", "cluster.yaml"
PATH_KEYS = ("FLAGPERF_LOG_PATH", "EXTRA_CA_BUNDLE", "REFERENCES")      # resolved against the source file
CLUSTER_PATH_KEYS = HOSTLIST_PATH_KEYS
PORT_KEYS = HOSTLIST_PORT_KEYS + ("MASTER_PORT",)


class _Source:
    def __init__(self, path: Path, data: LineMap):
        self.path = path
        self.data = data

    @property
    def is_test(self) -> bool:
        return "CASES" in self.data

    @property
    def has_hosts(self) -> bool:
        return "HOSTS" in self.data


def convert(files, out_dir: Path, *, force: bool = False, left_out: list | None = None) -> list:
    """Write the flagperf YAML of FlagPerf's ``files`` into ``out_dir``; return the paths written. ConfigError
    (exit 2) for a file that cannot be read or converted, or an output that exists (unless ``force``).
    ``left_out`` gets one line for each key or case of an inference or operation host.yaml that the written
    config leaves out, and why."""
    sources = [_read(Path(f)) for f in files]
    tests = [s for s in sources if s.is_test]
    clusters = [s for s in sources if not s.is_test]
    problems = [f"{s.path}: holds neither CASES (a test config) nor HOSTS (a cluster config)"
                for s in clusters if not s.has_hosts]
    if len(tests) != 1:
        problems.append(f"expected one test config (a file with CASES) among {', '.join(map(str, files))}, got "
                        f"{len(tests)}")
    if len(clusters) > 1 or tests and tests[0].has_hosts and clusters:
        host_files = [str(s.path) for s in sources if s.has_hosts]
        problems.append(f"expected the hosts in one file, got HOSTS in {', '.join(host_files)}")
    if problems:
        raise ConfigError(problems)
    test = tests[0]
    cluster = clusters[0] if clusters else (test if test.has_hosts else None)

    out_dir = Path(out_dir)
    outputs = {TEST_FILE: _test_yaml(test, cluster, left_out if left_out is not None else [])}
    if cluster is not None:
        outputs[CLUSTER_FILE] = _cluster_yaml(cluster)
    _check_outputs(out_dir, outputs, sources, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in outputs.items():
        write_atomic(out_dir / name, text, mode=0o644)     # a symlink at the name is replaced, not followed
        written.append(out_dir / name)
    return written


def _read(path: Path) -> _Source:
    data, problems = load_config_file(path)
    if problems:
        raise ConfigError(problems)
    if not isinstance(data, LineMap):
        raise ConfigError(f"{path}: expected a mapping of config keys")
    return _Source(path.resolve(), data)


# -- the test config -----------------------------------------------------------------------------------------------

def _test_yaml(src: _Source, cluster: _Source | None, left_out: list) -> str:
    data, path = src.data, src.path
    base = "BENCHMARKS_OR_TOOLKITS" in data
    combined = src is cluster
    suite = suite_of(path, data)        # FlagPerf's inference or operation host.yaml
    flagperf_format = is_python_config(path) or base or combined
    known = TEST_KEYS + (CLUSTER_KEYS if combined else ())
    _unknown(src, known, FLAGPERF_IGNORED, (CLUSTER_KEYS, "the cluster config") if not combined else None)

    out = _Writer(f"flagperf test config, converted from {path} by flagperf convert.")
    given = data.get("CASE_PATHS")
    case_paths = [_abs(path, p) for p in given] if isinstance(given, list) else []
    for key, value in data.items():
        if combined and (key in CLUSTER_KEYS or key in CLUSTER_IGNORED):
            continue        # written to the cluster config; said once, below
        elif key in FLAGPERF_IGNORED:
            out.comment(f"dropped {key}: {_short(value)}: {FLAGPERF_IGNORED[key]}")
            if suite:
                left_out.append(one_line(f"{where(path, data, key)}: left out {key}: {FLAGPERF_IGNORED[key]}"))
        elif key == "FLAGPERF_PATH" and flagperf_format:
            sub = "toolkits" if base and str(data.get("BENCHMARKS_OR_TOOLKITS")).strip().lower() == "toolkit" \
                else "benchmarks"
            folder = str(Path(_abs(path, value)) / sub)
            kind = flagperf_kind(path, data)
            out.comment(f"FLAGPERF_PATH {_short(value)} named your FlagPerf {kind} checkout: its {sub}/ is now a "
                        f"CASE_PATHS folder (below). flagperf's own FLAGPERF_PATH (where it deploys its tree on "
                        f"the hosts) keeps its default.")
            if folder not in case_paths:
                case_paths.append(folder)
        elif key == "CASE_PATHS" and isinstance(value, list):
            continue        # written with FLAGPERF_PATH's folder, below
        elif key == "CLUSTER":
            if cluster is not None:
                out.comment(f"CLUSTER {_short(value)}: replaced by the converted {CLUSTER_FILE}")
            else:
                out.key(key, _abs(path, value), _moved(path, value))
        elif key in PATH_KEYS and isinstance(value, str):
            out.key(key, _abs(path, value), _moved(path, value))
        elif key == "NPROC_PER_NODE" and suite:
            why = f"FlagPerf's {suite} cases run one process per host"
            out.comment(f"dropped NPROC_PER_NODE: {_short(value)}: {why}")
            left_out.append(one_line(f"{where(path, data, key)}: left out NPROC_PER_NODE: {why}"))
        elif key == "NPROC_PER_NODE" and not base:
            out.comment(f"dropped NPROC_PER_NODE: {_short(value)}: it counts only in a FlagPerf base config "
                        f"(with BENCHMARKS_OR_TOOLKITS); each case key gives its nproc")
        elif key == "NPROC_PER_NODE" and isinstance(value, str) and value.strip().isdigit():
            out.key(key, int(value.strip()), f"was the string {value!r}")
        elif key == "BENCHMARKS_OR_TOOLKITS":
            out.key(key, value.strip().upper() if isinstance(value, str) else value,
                    "a FlagPerf base config: every case runs on all HOSTS with NPROC_PER_NODE ranks each")
        elif key == "CASES" and suite and isinstance(value, dict):
            if SUITE_KEY not in data:
                out.key(SUITE_KEY, suite, f"CASES below are those of FlagPerf's {suite} host.yaml "
                                          f"(docs/migrating-from-flagperf.md)")
            out.cases(_suite_cases(path, data, value, suite, left_out))
        elif key == "CASES" and not base and isinstance(value, dict):
            out.cases(_training_cases(path, value))
        else:
            out.key(key, value)
    if case_paths:
        out.key("CASE_PATHS", case_paths, "folders where case code lives besides flagperf's benchmarks/")
    if "RUNTIME" not in data:
        out.key("RUNTIME", "docker", "FlagPerf always ran its cases in containers (a flagperf YAML without RUNTIME "
                                     "runs bare); RUNTIME: bare runs them as plain processes")
    if cluster is not None:
        moved = [k for k in cluster.data if k in CLUSTER_KEYS] if combined else []
        note = f"{', '.join(moved)} moved there" if moved else f"converted from {cluster.path}"
        out.key("CLUSTER", CLUSTER_FILE, f"the hosts ({note})")
    return out.text()


def _training_cases(path: Path, cases: dict) -> list:
    """[(key, data dir, comment)]: keys cut to six fields, relative data directories made absolute."""
    out = []
    for key, data_dir in cases.items():
        notes = []
        if isinstance(key, str) and key.count(":") > 5:
            fields = key.split(":")
            notes.append(f"was {key!r}: fields after the sixth ({':'.join(fields[6:])}) dropped, as FlagPerf "
                         f"ignored them")
            key = ":".join(fields[:6])
        if isinstance(data_dir, str) and _moved(path, data_dir):
            notes.append(_moved(path, data_dir))
            data_dir = _abs(path, data_dir)
        out.append((key, data_dir, "; ".join(notes)))
    return out


def _suite_cases(path: Path, data, cases: dict, suite: str, left_out: list) -> list:
    """[(key, value, comment)] of an inference (data directories made absolute, fields after the second dropped)
    or operation host.yaml (image names kept); a case that cannot run is left out, with a line in ``left_out``."""
    out = []
    for key, value in cases.items():
        try:
            if suite == INFERENCE:
                model, framework, extra = parse_inference_key(key)
                if not isinstance(value, str) or not value:
                    raise ValueError(f"expected the data directory, got {value!r}")
            else:
                parse_operation_key(key)
                if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", value):
                    raise ValueError(f"expected FlagPerf's image name, got {value!r}")
        except ValueError as exc:
            left_out.append(one_line(f"{where(path, cases, key)}: left out CASES[{key!r}]: {exc}"))
            continue
        if suite != INFERENCE:
            out.append((key, value, ""))
            continue
        notes = [f"was {key!r}: fields after the second ({':'.join(extra)}) dropped, as FlagPerf ignored "
                 f"them"] if extra else []
        if _moved(path, value):
            notes.append(_moved(path, value))
        out.append((f"{model}:{framework}", _abs(path, value), "; ".join(notes)))
    return out


# -- the cluster config --------------------------------------------------------------------------------------------

def _cluster_yaml(src: _Source) -> str:
    data, path = src.data, src.path
    combined = "CASES" in data
    if not combined:
        _unknown(src, CLUSTER_KEYS, CLUSTER_IGNORED, (TEST_KEYS + tuple(FLAGPERF_IGNORED), "the test config"))
    out = _Writer(f"flagperf cluster config, converted from {path} by flagperf convert.")
    for key, value in data.items():
        if key in CLUSTER_IGNORED:
            out.comment(f"dropped {key}: {_short(value)}: {FLAGPERF_IGNORED[key]}")
        elif key not in CLUSTER_KEYS:
            continue        # a test key of a combined file
        elif key in PORT_KEYS and isinstance(value, str):
            if not re.fullmatch(r"[0-9]{1,5}", value.strip()) or not 1 <= int(value.strip()) <= 65535:
                raise ConfigError(f"{where(path, data, key)}: {key}: expected a TCP port 1-65535, got {value!r}")
            out.key(key, int(value.strip()), f"was the string {value!r}")
        elif key in CLUSTER_PATH_KEYS and isinstance(value, str):
            out.key(key, _abs(path, value), _moved(path, value))
        else:
            out.key(key, value)
    return out.text()


# -- helpers -------------------------------------------------------------------------------------------------------

class _Writer:
    """YAML text, key by key, with a comment above each key that changed."""

    def __init__(self, title: str):
        self.lines = [f"# {one_line(title)}"]

    def comment(self, text: str) -> None:
        self.lines.append(f"# {one_line(text)}")

    def key(self, key: str, value, note: str = "") -> None:
        if note:
            self.comment(f"{key}: {note}")
        self.lines.append(_dump({key: _plain(value)}).rstrip("\n"))

    def cases(self, cases: list) -> None:
        self.lines.append("CASES:")
        for key, data_dir, note in cases:
            if note:
                self.lines.append(f"  # {one_line(note)}")
            self.lines.append("  " + _dump({key: _plain(data_dir)}).rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _dump(value) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False, width=4096)


def _plain(value):
    """LineMaps as dicts, tuples as lists: what safe_dump writes."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _unknown(src: _Source, known, ignored, elsewhere) -> None:
    problems = []
    for key in src.data:
        if key in known or key in ignored:
            continue
        at = f"{where(src.path, src.data, key)}: {key}"
        if elsewhere is not None and key in elsewhere[0]:
            problems.append(f"{at}: {key} belongs in {elsewhere[1]}")
            continue
        close = close_key(str(key)[:100].upper(), known)
        problems.append(f"{at}: unknown key{f'; did you mean {close}?' if close else ''}; it cannot be converted")
    if problems:
        raise ConfigError(problems)


def _abs(path: Path, value) -> str:
    if not isinstance(value, str):
        return value
    try:
        return str(resolve(path, value))
    except ValueError:
        return value        # the converted file reports it where it is loaded


def _moved(path: Path, value) -> str:
    if isinstance(value, str) and value and not value.startswith(("/", "~")):
        return f"{value!r} resolved against {path.parent}"
    return ""


def _short(value, n: int = 300) -> str:
    text = repr(_plain(value))
    return text if len(text) <= n else text[:n] + "..."


def _check_outputs(out_dir: Path, outputs: dict, sources: list, force: bool) -> None:
    problems = []
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: --out: expected a directory")
    inputs = {s.path for s in sources}
    for name in outputs:
        target = out_dir / name
        if target.resolve() in inputs:
            problems.append(f"{target}: is one of the files being converted; choose another --out")
        elif os.path.lexists(target) and not force:
            problems.append(f"{target}: exists; flagperf convert overwrites only with --force")
        elif os.path.lexists(target) and (target.is_dir() or not (target.is_file() or target.is_symlink())):
            problems.append(f"{target}: exists and is not a file")
    if problems:
        raise ConfigError(problems)
