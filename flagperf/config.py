"""Test and cluster configuration: YAML files validated at load into frozen dataclasses.

Every problem found is collected and raised together as one ConfigError; each message names the file,
the line where YAML gives one, the key, and what was expected.
"""

from __future__ import annotations

from typing import Any

import difflib
import fnmatch
import math
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from flagperf.options import all_cluster_keys, backend_names, load_options, registration
from flagperf.options.base import COLLECT_MAX_BYTES, LOCALHOST, BackendOptions, HostSpec
from flagperf.catalog import MODEL_SOURCE_VALUES, base_chip_files, benchmark_names, resolve_cases, training_tree
from flagperf.checker import Checker, close_key, is_, looks_like_case_key, reason, resolve
from flagperf.container_opts import merge, translate_container_opt
from flagperf.errors import ConfigError
from flagperf.paths import SOURCE_ROOT, default_log_path
from flagperf.pyconfig import is_python_config, load_config_file
from flagperf.references import load_reference_dir, load_reference_file
from flagperf.suites import (INFERENCE, INFERENCE_KEY, OPERATION, OPERATION_KEY, parse_inference_key,
                             parse_operation_key, suite_of)
from flagperf.vendors import ContainerSpec, VendorProfile, check_size, detect_vendor, load_vendor, vendor_names
from flagperf.yamlio import LineMap, one_line, read_text, where

__all__ = ["CLUSTER_KEYS", "TEST_KEYS", "FLAGPERF_IGNORED", "CaseSpec", "ClusterConfig", "Config", "HostSpec",
           "LOCALHOST", "SOURCE_ROOT", "TestConfig", "close_key", "load_config", "resolve"]

DEFAULT_SCHEDULER = "ssh"       # the backend of a cluster config without SCHEDULER (flagperf.backends registry)
DEFAULT_MASTER_PORT = 29501
LOG_LEVELS = ("debug", "info", "warning", "error")

TEST_KEYS = (
    "VENDOR", "RUNTIME", "FLAGPERF_PATH", "FLAGPERF_LOG_PATH", "FLAGPERF_LOG_LEVEL", "SHM_SIZE",
    "CLEAR_CACHES", "ACCE_CONTAINER_OPT", "ACCE_VISIBLE_DEVICE_ENV_NAME", "PIP_SOURCE", "CLUSTER", "CASES",
    "MONITOR_INTERVAL", "CASE_TIMEOUT", "DOCKER_BUILD_ARGS", "EXTRA_CA_BUNDLE", "COLLECT_MAX_BYTES",
    "REFERENCES", "MONITOR_FORMAT", "CASE_PATHS", "BENCHMARKS_OR_TOOLKITS", "NPROC_PER_NODE", "MODEL_SOURCES",
    "FLAGPERF_SUITE",
)
# Cluster keys of every scheduler; each backend adds its own (its registration's cluster_keys) after HOSTS.
COMMON_CLUSTER_KEYS = ("SCHEDULER", "HOSTS", "MASTER_PORT", "PYTHON", "HOSTS_PORTS")
CLUSTER_KEYS = COMMON_CLUSTER_KEYS[:2] + all_cluster_keys() + COMMON_CLUSTER_KEYS[2:]     # every scheduler's
# FlagPerf keys flagperf accepts and ignores, each with a one-line warning (docs/migrating-from-flagperf.md).
FLAGPERF_IGNORED = {
    "TEST_TYPE": "an older FlagPerf test-config key; not used",
    "FLAGPERF_PATH_HOST": "an older FlagPerf path; flagperf uses FLAGPERF_PATH (its own tree on the hosts)",
    "FLAGPERF_PATH_CONTAINER": "an older FlagPerf path; containers mount FLAGPERF_PATH at the same path",
    "FLAGPERF_LOG_PATH_HOST": "an older FlagPerf path; flagperf uses FLAGPERF_LOG_PATH",
    "FLAGPERF_LOG_PATH_CONTAINER": "an older FlagPerf path; containers mount the run directory at the same path",
    "LOG_CALL_INFORMATION": "a FlagPerf inference logging option; not used",
    "DEVICE": "FlagPerf's operation device id; flagperf gives each rank its devices",
}
CLUSTER_IGNORED: tuple = ()      # FlagPerf cluster keys accepted and ignored (none now: HOSTS_PORTS is used)
BASE_MODES = ("benchmark", "toolkit")       # BENCHMARKS_OR_TOOLKITS, lower-cased
BASE_FRAMEWORK = "pytorch"                  # the framework of every case of a FlagPerf base config
DEFAULT_BASE_CHIP = "A100"                  # a base case key without ":<chip>" (FlagPerf's own default)

# Upper bounds (docs/configuration.md lists them): a value past one is a typo, not a plan.
MAX_NNODES = 10_000
MAX_NPROC = 1024
MAX_REPEAT = 1000
MIN_MONITOR_INTERVAL, MAX_MONITOR_INTERVAL = 0.05, 3600.0
MONITOR_FORMATS = ("native", "flagperf")    # flagperf: FlagPerf's monitor files too (docs/monitors.md)
MAX_CASE_TIMEOUT = 30 * 24 * 3600.0         # 30 days


@dataclass(frozen=True)
class CaseSpec:
    key: str
    model: str
    framework: str
    hw: str
    nnodes: int
    nproc: int | None           # None: "auto", every accelerator of a node (resolved by the plan)
    repeat: int
    data_dir: str | None = None
    each: bool = False          # nnodes "each": one independent single-node job per host (nnodes: every HOSTS entry)
    pairs: bool = False         # nnodes "pairs": a 2-node job on every pair of hosts, in round-robin stages
    framework_full: str = ""    # the framework field as written (pytorch_2.0); ``framework`` is its part before "_"
    extra: tuple = ()           # fields after the sixth (FlagPerf ignores them; so does flagperf, with a warning)
    image_dir: str | None = None    # a FlagPerf base case's image directory (its CASES value)
    suite: str = ""             # a case of FlagPerf's inference or operation host.yaml (flagperf.suites)
    suite_args: tuple = ()      # operation: (dataformat, spectflops, oplib) of its key

    FIELDS = ("model", "framework", "hw", "nnodes", "nproc", "repeat")
    LIMITS = {"nnodes": MAX_NNODES, "nproc": MAX_NPROC, "repeat": MAX_REPEAT}

    @classmethod
    def parse(cls, key: str, data_dir: str | None = None) -> "CaseSpec":
        """Parse ``model:framework:hw:nnodes:nproc:repeat[:extra...]``; ValueError says what is wrong."""
        if not isinstance(key, str):
            raise ValueError(f"expected a string 'model:framework:hw:nnodes:nproc:repeat', got {key!r}")
        parts = [p.strip() for p in key.split(":")]
        if len(parts) < 6:
            raise ValueError(f"expected 6 fields 'model:framework:hw:nnodes:nproc:repeat', got {len(parts)}")
        parts, extra = parts[:6], tuple(parts[6:])
        for name, value in zip(cls.FIELDS[:3], parts[:3]):
            if not value:
                raise ValueError(f"{name} is empty")
            if not re.fullmatch(r"[A-Za-z0-9_.+-]+", value):
                raise ValueError(f"{name} {value!r} may hold only letters, digits and _ . + -")
        if not parts[1].partition("_")[0]:
            raise ValueError(f"framework {parts[1]!r} has nothing before its '_' (expected e.g. pytorch_2.0)")
        numbers: list = []
        for name, value in zip(cls.FIELDS[3:], parts[3:]):
            if name == "nproc" and value.lower() == "auto":
                numbers.append(None)
                continue
            if name == "nnodes" and value.lower() in ("each", "pairs"):
                numbers.append(0)       # the number of hosts: set when the cluster is known (load_config)
                continue
            if not re.fullmatch(r"[0-9]+", value) or not value.strip("0"):
                more = {"nproc": " or auto", "nnodes": ", each or pairs"}.get(name, "")
                raise ValueError(f"{name} must be a positive integer{more}, got {value!r}")
            if len(value.lstrip("0")) > 6 or int(value) > cls.LIMITS[name]:
                raise ValueError(f"{name} must be at most {cls.LIMITS[name]}, got {value!r}")
            numbers.append(int(value))
        model, framework, hw = parts[:3]
        nnodes, nproc, repeat = numbers
        return cls(key, model, framework.partition("_")[0], hw, nnodes, nproc, repeat, data_dir=data_dir,
                   each=parts[3].lower() == "each", pairs=parts[3].lower() == "pairs", framework_full=framework,
                   extra=extra)

    @property
    def name(self) -> str:
        nodes = "each" if self.each else "pairs" if self.pairs else self.nnodes
        if self.suite == OPERATION:     # two keys may differ only in dataformat, spectflops or oplib
            return "-".join((self.model, *self.suite_args, self.hw, f"{nodes}x{self.nproc}"))
        framework = self.framework_full or self.framework
        return f"{self.model}-{framework}-{self.hw}-{nodes}x{'auto' if self.nproc is None else self.nproc}"


@dataclass(frozen=True)
class ClusterConfig:
    path: Path | None
    hosts: tuple                # HostSpec: the nodes the plan uses (a scheduler's placeholders until it allocates)
    master_port: int            # rank 0's port (an ``each`` case: MASTER_PORT + the job's index)
    scheduler: str = DEFAULT_SCHEDULER     # the backend (flagperf.backends registry) that runs the rounds
    # the scheduler's own keys (HOSTS' SSH settings, SLURM_*), validated by its registration's options module
    options: BackendOptions = field(default_factory=BackendOptions)
    hosts_ports: tuple = ()     # HOSTS_PORTS: FlagPerf's per-host worker ports (a training launcher's --hosts_ports)


@dataclass(frozen=True)
class TestConfig:
    path: Path
    vendor: str
    vendor_reason: str
    runtime: str
    flagperf_path: str
    log_path: Path
    log_level: str
    shm_size: str
    clear_caches: bool
    acce_container_opt: str
    visible_devices_env: str | None
    pip_source: str
    monitor_interval: float
    case_timeout: float
    cases: tuple
    docker_build_args: tuple = ()       # ((name, value), ...) for image builds
    extra_ca_bundle: str | None = None  # a CA bundle added to images (corporate TLS proxies)
    collect_max_bytes: int = COLLECT_MAX_BYTES  # at most this much of a node directory is collected to the driver
    references: str | bool | None = None  # REFERENCES: a reference file; False: none; None: the vendor's folder
    monitor_format: str = "native"      # MONITOR_FORMAT: native, or flagperf (FlagPerf's monitor files too)
    case_paths: tuple = ()              # CASE_PATHS: folders of case code besides the tree's benchmarks/
    base_mode: str | None = None        # a FlagPerf base config: "benchmark" or "toolkit" (BENCHMARKS_OR_TOOLKITS)
    model_sources: tuple = ()           # MODEL_SOURCES: ((model, "flagperf" | "case_paths"), ...)
    suite: str | None = None            # FLAGPERF_SUITE: CASES of FlagPerf's inference or operation host.yaml

    @property
    def model_source_map(self) -> dict:
        return dict(self.model_sources)


@dataclass(frozen=True)
class Config:
    test: TestConfig
    cluster: ClusterConfig
    vendor: VendorProfile
    source_root: Path = field(default=SOURCE_ROOT)
    container: ContainerSpec | None = None      # the vendor's container with ACCE_CONTAINER_OPT applied
    references: tuple = ()      # flagperf.references.ReferenceFile: the expected figures, loaded and checked
    warnings: tuple = ()        # one line each: FlagPerf keys accepted and ignored, keys given a new meaning
    overrides: tuple = ()       # ((option, value), ...): the command line's overrides (apply_overrides)

    def to_dict(self) -> dict:
        """The effective configuration, after defaults, path resolution and VENDOR: auto."""
        t, c = self.test, self.cluster
        return {
            "TEST_CONFIG": str(t.path),
            "VENDOR": t.vendor,
            "RUNTIME": t.runtime,
            "FLAGPERF_PATH": t.flagperf_path,
            "FLAGPERF_LOG_PATH": str(t.log_path),
            "FLAGPERF_LOG_LEVEL": t.log_level,
            "SHM_SIZE": t.shm_size,
            "CLEAR_CACHES": t.clear_caches,
            "ACCE_CONTAINER_OPT": t.acce_container_opt,
            "ACCE_VISIBLE_DEVICE_ENV_NAME": t.visible_devices_env,
            "PIP_SOURCE": t.pip_source,
            "MONITOR_INTERVAL": t.monitor_interval,
            "MONITOR_FORMAT": t.monitor_format,
            "CASE_TIMEOUT": t.case_timeout,
            "DOCKER_BUILD_ARGS": dict(t.docker_build_args),
            "EXTRA_CA_BUNDLE": t.extra_ca_bundle,
            "COLLECT_MAX_BYTES": t.collect_max_bytes,
            "REFERENCES": t.references if t.references is not None else [r.path for r in self.references],
            "CASE_PATHS": list(t.case_paths),
            "BENCHMARKS_OR_TOOLKITS": t.base_mode.upper() if t.base_mode else None,
            "MODEL_SOURCES": dict(t.model_sources),
            **({"FLAGPERF_SUITE": t.suite} if t.suite else {}),
            "CLUSTER": str(c.path) if c.path else None,
            "CASES": {case.key: case.image_dir if t.base_mode or case.suite == OPERATION else case.data_dir
                      for case in t.cases},
            "cluster": {
                **c.options.to_dict(),
                "MASTER_PORT": c.master_port,
                "SCHEDULER": c.scheduler,
                **({"HOSTS_PORTS": list(c.hosts_ports)} if c.hosts_ports else {}),
            },
            **({"COMMAND_LINE": {k: list(v) if isinstance(v, tuple) else v for k, v in self.overrides}}
               if self.overrides else {}),
        }


def load_config(test_path, cluster_override=None, *, source_root: Path = SOURCE_ROOT, detect=detect_vendor) -> Config:
    """Load and validate the test config (and the cluster config it names, or ``cluster_override``)."""
    problems: list[str] = []
    try:
        config = _load_config(test_path, cluster_override, problems, source_root, detect)
    except ConfigError as exc:
        raise ConfigError([one_line(p) for p in exc.problems]) from None
    if config is not None and not problems:     # each case's folder: benchmark.yaml, toolkit vendor/chip folders
        t = config.test
        sources, found = resolve_cases(t.path, config.source_root, t.case_paths, config.vendor.name, t.cases,
                                       t.base_mode, t.model_source_map)
        problems.extend(found)
        problems.extend(_pairs_problems(config, sources))
    if problems:
        raise ConfigError([one_line(p) for p in problems])
    assert config is not None
    return _with_preparation_warnings(config, sources)


PYTHON_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*=(?!=)")     # VENDOR = "nvidia"
INDENT_ERRORS = ("mapping values are not allowed here", "expected <block end>", "did not find expected key",
                 "could not find expected ':'", "did not find expected '-' indicator")
INDENT_HINT = ("hint: check the indentation of that line and the one above it: the keys of one mapping start in "
               "the same column, a key's value is indented under the key, with spaces")
TAB_HINT = "hint: YAML indents with spaces, not tabs: replace the tabs at the start of that line"
COLON_HINT = ("hint: a key needs ': ' after it (\"key\": value); else check the indentation of that line and the one "
              "above it")


def _hinted(path: Path, problems: list) -> list:
    """A YAML file that did not read as a mapping: FlagPerf's Python config under a YAML name is said so (one
    line), an indentation error gets a hint after the parser's sentence."""
    if Path(path).suffix != ".py":
        text, unreadable = read_text(Path(path))      # a regular file of at most 1 MiB, else not read
        lines = [] if unreadable else [line.rstrip() for line in text.splitlines()]
        code = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
        assigned = [line for line in code if not line[:1].isspace() and PYTHON_ASSIGNMENT.match(line)]
        if assigned and len(assigned) * 2 >= len([line for line in code if not line[:1].isspace()]):
            name = assigned[0].split("=", 1)[0].strip()
            return [one_line(f"{path}: this is Python (assignments such as '{name} = ...'), not YAML: FlagPerf's "
                             f"test_conf.py or cluster_conf.py under another name? Give it back its .py name "
                             f"(flagperf reads FlagPerf's Python configs as they are, and `flagperf convert` "
                             f"writes them as YAML)")]
    out = []
    for p in problems:
        if "YAML syntax error" in p and "character '\\t'" in p:
            p = f"{p}; {TAB_HINT}"
        elif "YAML syntax error" in p and "could not find expected ':'" in p:
            p = f"{p}; {COLON_HINT}"
        elif "YAML syntax error" in p and any(e in p for e in INDENT_ERRORS):
            p = f"{p}; {INDENT_HINT}"
        out.append(p)
    return out


def _pairs_problems(config: Config, sources: dict) -> list:
    """A ``pairs`` case of a FlagPerf training tree is refused: its launcher takes the round as a number and
    writes into ``round<k>/``, while a pairs case's rounds are ``round<k>-stage<s>/``."""
    t, out = config.test, []
    for case in t.cases:
        if not case.pairs:
            continue
        src = sources.get(case.key)
        if src is not None and src.training is not None:
            out.append(f"{t.path}: CASES[{case.key!r}]: nnodes pairs runs flagperf's benchmarks and toolkits, not "
                       f"a FlagPerf training case (its launcher names its round folders by number); give it a "
                       f"number of nodes")
    return out


def _with_preparation_warnings(config: Config, sources: dict) -> Config:
    """A FlagPerf training case prepares its environment before every round (pip install of its requirements.txt,
    its csrc/ extension); outside a container that installs into the host's Python environment: say so."""
    t = config.test
    if t.runtime in config.cluster.options.container_runtimes:
        return config
    extra = []
    for case in t.cases:
        src = sources.get(case.key)
        tc = src.training if src is not None else None
        env_file, req = base_chip_files(src, config.vendor.name, case.key, case.hw) if src else (None, None)
        if env_file is not None or req is not None:     # a FlagPerf base case's per-chip preparation
            what = " and ".join(x for x in (f"pip-installs {req} into the Python environment of each host (its "
                                            f"PYTHON)" if req else "", f"sources {env_file}" if env_file else "") if x)
            extra.append(f"{t.path}: CASES[{case.key!r}]: RUNTIME {t.runtime}: FlagPerf's base preparation {what} "
                         f"on each host before the case, as FlagPerf does in its container")
            continue
        if tc is None or (tc.requirements is None and tc.extension is None):
            continue
        what = " and ".join(x for x in (f"pip-installs {tc.requirements}" if tc.requirements else "",
                                        f"builds and installs {tc.extension}" if tc.extension else "") if x)
        line = (f"{t.path}: CASES[{case.key!r}]: RUNTIME {t.runtime}: FlagPerf's preparation {what} into the "
                f"Python environment of each host (its PYTHON) before every round, as FlagPerf does in its container")
        if line not in extra:
            extra.append(line)
    return replace(config, warnings=config.warnings + tuple(one_line(w) for w in extra)) if extra else config


def _cli_path(value, what) -> Path:
    """A path given on the command line (--config, --cluster), resolved; ConfigError when it cannot be."""
    try:
        return resolve(Path.cwd() / "-", str(value)).resolve()
    except ValueError as exc:
        raise ConfigError(f"{value}: {what}: {exc}") from None
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"{value}: {what}: cannot resolve: {reason(exc)}") from None


def _load_config(test_path, cluster_override, problems, source_root, detect) -> Config | None:
    """The test config at ``test_path`` with its cluster (``--cluster``, its CLUSTER key, or its own HOSTS as in
    FlagPerf's host.yaml) and vendor; every problem goes to ``problems`` (None is returned then)."""
    test_path = _cli_path(test_path, "--config")
    data, problems_yaml = load_config_file(test_path)
    if problems_yaml:
        raise ConfigError(_hinted(test_path, problems_yaml))
    if not isinstance(data, LineMap):
        raise ConfigError(_hinted(test_path, [f"{test_path}: expected a mapping of test-config keys (VENDOR, "
                                              f"RUNTIME, CASES, ...)"]))
    warnings: list[str] = []
    ck = Checker(test_path, problems, warnings)
    # A test config that lists HOSTS holds its cluster keys too (FlagPerf's host.yaml).
    combined = "HOSTS" in data
    ck.unknown_keys(data, TEST_KEYS + _cluster_keys(data) if combined else TEST_KEYS, ignored=FLAGPERF_IGNORED,
                    elsewhere=None if combined else (CLUSTER_KEYS, "the cluster config", "a test config"))
    # Cluster first: the cases are checked against its hosts.
    cluster = _cluster_of(ck, test_path, data, cluster_override, combined, warnings)
    vendor_name, reason, vendor = _vendor_of(ck, data, source_root, detect)
    runtime = _runtime_of(ck, data, cluster, _default_runtime(test_path, data, combined))
    base_mode = _base_mode(ck, data)
    case_paths = _case_paths(ck, data)
    model_sources = _model_sources(ck, data)
    if is_python_config(test_path) or "BENCHMARKS_OR_TOOLKITS" in data or combined:
        # FlagPerf's FLAGPERF_PATH is the user's FlagPerf checkout: its cases, not flagperf's deploy path.
        flagperf_path = str(source_root)
        case_paths += _flagperf_checkout(ck, data, base_mode)
    else:
        flagperf_path = ck.path_value(data, "FLAGPERF_PATH", str(source_root))
    settings = _settings(ck, test_path, data, source_root)
    container_opt = ck.get(data, "ACCE_CONTAINER_OPT", str, "")
    overrides, opt_problems = translate_container_opt(container_opt)
    problems.extend(f"{where(test_path, data, 'ACCE_CONTAINER_OPT')}: {p}" for p in opt_problems)
    container = merge(vendor.container, overrides) if vendor is not None else None
    visible_env = ck.get(data, "ACCE_VISIBLE_DEVICE_ENV_NAME", (str, type(None)),
                         vendor.visible_devices_env if vendor else None)
    if visible_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", visible_env):
        ck.add(data, "ACCE_VISIBLE_DEVICE_ENV_NAME", f"expected an environment variable name, got {visible_env!r}")

    suite = _suite(ck, data)
    if "BENCHMARKS_OR_TOOLKITS" in data:
        cases = _load_base_cases(ck, data, cluster, vendor, source_root, case_paths)
    elif suite is not None:
        cases = _load_suite_cases(ck, data, cluster, vendor, suite)
    else:
        if "NPROC_PER_NODE" in data:
            ck.warn(data, "NPROC_PER_NODE", "accepted and ignored: it counts only with BENCHMARKS_OR_TOOLKITS "
                                            "(a FlagPerf base config); each case key gives its nproc")
        # a scheduler that picks the nodes has no host list to check the cases against
        cases = _load_cases(ck, data, cluster if cluster is None or cluster.hosts else None, vendor, source_root,
                            case_paths, cluster.scheduler if cluster is not None and not cluster.hosts else None)
    references, reference_files = _load_references(ck, data, vendor, source_root, case_paths)
    if problems:
        return None
    test = TestConfig(path=test_path, vendor=vendor_name, vendor_reason=reason, runtime=runtime,
                      flagperf_path=flagperf_path, acce_container_opt=container_opt, visible_devices_env=visible_env,
                      cases=tuple(cases), references=references, case_paths=tuple(case_paths), base_mode=base_mode,
                      model_sources=model_sources, suite=suite, **settings)
    assert cluster is not None and vendor is not None      # else a problem was reported above
    hosts = cluster.options.plan_hosts(cases, flagperf_path)
    if not cluster.hosts:       # a scheduler's nodes: placeholders until it allocates them
        test = replace(test, cases=tuple(replace(c, nnodes=len(hosts)) if c.each else c for c in test.cases))
    cluster = replace(cluster, hosts=hosts)
    return Config(test=test, cluster=cluster, vendor=vendor, source_root=source_root, container=container,
                  references=reference_files, warnings=tuple(one_line(w) for w in warnings))


def _cluster_of(ck: Checker, test_path: Path, data, cluster_override, combined: bool, warnings: list):
    """The cluster config: the test config's own HOSTS (combined), ``--cluster``, or the file CLUSTER names;
    None when it could not be read (the problem is reported)."""
    problems = ck.problems
    if combined and (cluster_override is not None or "CLUSTER" in data):
        other = "--cluster" if cluster_override is not None else "CLUSTER"
        ck.add(data, "HOSTS", f"this test config lists its hosts (as FlagPerf's host.yaml does), so {other} cannot "
                              f"name another cluster config; keep one of them")
        return None
    if combined:
        return _cluster_from(test_path, data, problems, warnings)
    cluster_file, origin = None, ""
    if cluster_override is not None:
        cluster_file = _cli_path(cluster_override, "--cluster")
        origin = f"{cluster_file}: --cluster"
    else:
        value = ck.get(data, "CLUSTER", str, None)
        if "CLUSTER" in data and data["CLUSTER"] is not None and value is None:
            return None                     # wrong type: already reported
        if value is not None:
            try:
                cluster_file = resolve(test_path, value)
                origin = f"{where(test_path, data, 'CLUSTER')}: CLUSTER: {cluster_file}"
            except ValueError as exc:
                ck.add(data, "CLUSTER", str(exc))
                return None
    if cluster_file is not None and not is_("exists", cluster_file):
        problems.append(f"{origin}: file not found; expected a cluster config (YAML with HOSTS)")
        return None
    return _load_cluster(cluster_file, problems, warnings)


def _vendor_of(ck: Checker, data, source_root: Path, detect) -> tuple:
    """(VENDOR's name, why it is that one, the vendor profile or None when it could not be loaded)."""
    vendor_name = ck.get(data, "VENDOR", str, None if "VENDOR" in data and data["VENDOR"] is not None else "auto")
    reason = "set in the test config"
    if vendor_name is None:
        return None, reason, None           # wrong type: already reported
    if vendor_name == "auto":
        vendor_name, why = detect()
        reason = f"VENDOR: auto -> {vendor_name} ({why})"
    if vendor_name not in vendor_names(source_root):
        ck.add(data, "VENDOR", f"no vendor {vendor_name!r} under {source_root / 'vendors'}; "
                               f"expected one of: auto, {', '.join(vendor_names(source_root))}")
        return vendor_name, reason, None
    vendor, vproblems = load_vendor(source_root, vendor_name)
    ck.problems.extend(vproblems)
    return vendor_name, reason, vendor


def _default_runtime(test_path: Path, data, combined: bool) -> str:
    """RUNTIME when the file sets none: docker for FlagPerf's own files (a .py config, a base config, a host.yaml
    with its HOSTS, an inference or operation suite), whose cases always ran in containers; bare for a flagperf
    YAML test config, as the embedded default runs."""
    flagperf_format = is_python_config(test_path) or combined or \
        any(k in data for k in ("BENCHMARKS_OR_TOOLKITS", "FLAGPERF_SUITE"))
    return "docker" if flagperf_format else "bare"


def _runtime_of(ck: Checker, data, cluster, default: str = "docker") -> str:
    """RUNTIME, checked against the runtimes the cluster's backend registered and what its own keys allow."""
    runtime = ck.get(data, "RUNTIME", str, default)
    reg = registration(cluster.scheduler) if cluster is not None else None
    if reg is not None and runtime not in reg.runtimes:
        why = dict(reg.refused).get(runtime)
        ck.add(data, "RUNTIME", f"expected one of {', '.join(reg.runtimes)} (the runtimes of SCHEDULER "
                                f"{reg.name!r}), got {runtime!r}" + (f": {why}" if why else ""))
    elif reg is not None and cluster is not None:
        why = cluster.options.runtime_problem(runtime)      # what the scheduler's own keys must give this RUNTIME
        if why:
            ck.add(data, "RUNTIME", why)
    return runtime


def _settings(ck: Checker, test_path: Path, data, source_root: Path) -> dict:
    """The test config's scalar settings (logs, container sizes, monitor, timeout, build and collect limits),
    each checked, as TestConfig's keyword arguments; a bad value is reported and replaced by its default."""
    if "BENCHMARKS_OR_TOOLKITS" in data and isinstance(data.get("FLAGPERF_LOG_PATH"), str) and \
            not data["FLAGPERF_LOG_PATH"].startswith(("/", "~")):
        ck.warn(data, "FLAGPERF_LOG_PATH", f"{data['FLAGPERF_LOG_PATH']!r} resolves against this file's folder "
                                           f"({test_path.parent}), not against FlagPerf's FLAGPERF_PATH")
    log_path = Path(ck.path_value(data, "FLAGPERF_LOG_PATH", str(
        default_log_path() if source_root == SOURCE_ROOT else source_root / "result")))
    log_level = ck.get(data, "FLAGPERF_LOG_LEVEL", str, "info").lower()
    if log_level not in LOG_LEVELS:
        ck.add(data, "FLAGPERF_LOG_LEVEL", f"expected one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
        log_level = "info"
    shm_size = str(ck.get(data, "SHM_SIZE", (str, int), "32G"))
    if check_size(shm_size):
        ck.add(data, "SHM_SIZE", check_size(shm_size))
    interval = ck.get(data, "MONITOR_INTERVAL", (int, float), 1.0)
    if not MIN_MONITOR_INTERVAL <= interval <= MAX_MONITOR_INTERVAL:     # False for nan too
        ck.add(data, "MONITOR_INTERVAL", f"expected a number of seconds from {MIN_MONITOR_INTERVAL} to "
                                         f"{MAX_MONITOR_INTERVAL:g}, got {interval!r}")
        interval = 1.0
    monitor_format = ck.get(data, "MONITOR_FORMAT", str, "native")
    if monitor_format not in MONITOR_FORMATS:
        ck.add(data, "MONITOR_FORMAT", f"expected native (flagperf's monitor files) or flagperf (FlagPerf's files "
                                       f"too), got {monitor_format!r}")
        monitor_format = "native"
    timeout = ck.get(data, "CASE_TIMEOUT", (int, float), 7200.0)
    if not (0 < timeout <= MAX_CASE_TIMEOUT and math.isfinite(timeout)):
        ck.add(data, "CASE_TIMEOUT", f"expected a number of seconds > 0 and at most {MAX_CASE_TIMEOUT:.0f} "
                                     f"(30 days), got {timeout!r}")
        timeout = 7200.0
    build_args = ck.get(data, "DOCKER_BUILD_ARGS", dict, {})
    for name, value in build_args.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or \
                not isinstance(value, (str, int, float)) or isinstance(value, bool):
            ck.add(data, "DOCKER_BUILD_ARGS", f"expected NAME: value pairs (strings or numbers), got {name!r}: "
                                              f"{value!r}")
    ca_bundle = ck.path_value(data, "EXTRA_CA_BUNDLE")
    if ca_bundle and not is_("is_file", ca_bundle):
        ck.add(data, "EXTRA_CA_BUNDLE", f"expected a CA bundle file (PEM), {ca_bundle} does not exist")
    collect_max = ck.get(data, "COLLECT_MAX_BYTES", int, COLLECT_MAX_BYTES)
    if not collect_max > 0:
        ck.add(data, "COLLECT_MAX_BYTES", f"expected a number of bytes > 0, got {collect_max!r}")
        collect_max = COLLECT_MAX_BYTES
    return dict(log_path=log_path, log_level=log_level, shm_size=shm_size,
                clear_caches=ck.get(data, "CLEAR_CACHES", bool, False), pip_source=ck.get(data, "PIP_SOURCE", str, ""),
                monitor_interval=float(interval), monitor_format=monitor_format, case_timeout=float(timeout),
                docker_build_args=tuple(sorted((str(k), str(v)) for k, v in build_args.items())),
                extra_ca_bundle=ca_bundle, collect_max_bytes=collect_max)


def _load_references(ck: Checker, data, vendor, source_root, case_paths=()) -> tuple:
    """(REFERENCES as given: a path, False or None; the reference files loaded). Without REFERENCES every file
    of ``vendors/<vendor>/references/`` is loaded; each problem in a file is a config problem naming it."""
    known = benchmark_names(source_root, case_paths)
    value = data.get("REFERENCES")
    if value is False:
        return False, ()
    if value is True:
        ck.add(data, "REFERENCES", "expected a reference file (YAML, docs/references.md) or false, got true")
        return None, ()
    path = ck.path_value(data, "REFERENCES")
    if path is None:
        if "REFERENCES" in data and value is not None or vendor is None:
            return None, ()         # a wrong value, reported above; or no vendor to take references from
        files, problems = load_reference_dir(source_root / "vendors" / vendor.name / "references", known)
        ck.problems.extend(problems)
        return None, files
    if not is_("is_file", path):
        what = "is a directory" if is_("is_dir", path) else "does not exist"
        ck.add(data, "REFERENCES", f"expected a reference file (YAML, docs/references.md), {path} {what}")
        return path, ()
    ref, problems = load_reference_file(Path(path), known, need_match=False)
    ck.problems.extend(problems)
    return path, (ref,) if ref is not None else ()


def _load_cases(ck: Checker, data, cluster, vendor, source_root, case_paths=(), no_host_list: str | None = None) \
        -> list:
    """The case keys of CASES; ``no_host_list``: the scheduler, when it picks the nodes itself (no HOSTS)."""
    cases_map = data.get("CASES")
    if "CASES" not in data:
        ck.problems.append(f"{ck.path}: CASES: required key is missing; expected a mapping "
                           f"'model:framework:hw:nnodes:nproc:repeat': data_dir")
        return []
    if not isinstance(cases_map, dict) or not cases_map:
        if cases_map is None and any(looks_like_case_key(k) for k in data):
            return []       # its case keys are outside it: said once each, with the indentation hint
        ck.add(data, "CASES", "expected a non-empty mapping 'model:framework:hw:nnodes:nproc:repeat': data_dir")
        return []
    cases = []
    known = benchmark_names(source_root, case_paths)
    for key, data_dir in cases_map.items():
        label = f"CASES[{key!r}]"
        try:
            case = CaseSpec.parse(key)
        except ValueError as exc:
            ck.add(cases_map, key, str(exc), label)
            continue
        if case.extra:
            ck.warn(cases_map, key, f"fields after the sixth ({':'.join(case.extra)}) are accepted and ignored, "
                                    f"as FlagPerf does", label)
        if data_dir is not None and not isinstance(data_dir, str):
            ck.add(cases_map, key, f"expected the data directory as a string (or null), got {data_dir!r}", label)
            continue
        if case.pairs and no_host_list is not None:
            ck.add(cases_map, key, f"nnodes pairs pairs the hosts of HOSTS, but SCHEDULER {no_host_list!r} picks "
                                   f"its nodes itself; list the hosts (SCHEDULER: ssh) or give a number of nodes",
                   label)
            continue
        if data_dir is not None and ":" in data_dir:
            ck.add(cases_map, key, f"the data directory may not hold ':' (it is bind-mounted as "
                                   f"host:container), got {data_dir!r}", label)
            continue
        try:
            resolved = str(resolve(ck.path, data_dir)) if data_dir is not None else None
        except ValueError as exc:
            ck.add(cases_map, key, f"data directory: {exc}", label)
            continue
        if resolved is not None and ":" in resolved:
            ck.add(cases_map, key, f"the data directory may not hold ':' (it is bind-mounted as "
                                   f"host:container), got {resolved!r} from {data_dir!r}", label)
            continue
        _check_model(ck, cases_map, key, label, case.model, known, source_root, case_paths)
        if vendor is not None and case.framework not in vendor.frameworks and \
                not _training_framework(case_paths, case.model, case.framework):
            suffix = f" (from {case.framework_full!r})" if case.framework_full != case.framework else ""
            ck.add(cases_map, key, f"framework {case.framework!r}{suffix} is not provided by vendor "
                                   f"{vendor.name!r}; expected one of: {', '.join(vendor.frameworks)}", label)
        nnodes = len(cluster.hosts) if (case.each or case.pairs) and cluster is not None else case.nnodes
        if (case.each or case.pairs) and cluster is not None:
            if case.each:
                _check_each(ck, cases_map, key, label, cluster)
            else:
                _check_pairs(ck, cases_map, key, label, cluster)
            if resolved and any(h.is_local for h in cluster.hosts) and not is_("is_dir", resolved):
                ck.add(cases_map, key, f"data directory {resolved} does not exist on localhost", label)
        elif cluster is not None and case.nnodes > len(cluster.hosts):
            ck.add(cases_map, key, f"nnodes {case.nnodes} exceeds the {len(cluster.hosts)} host(s) in "
                                   f"{cluster.path or 'the default cluster (localhost)'}", label)
        elif cluster is not None and case.nnodes > 1 and cluster.hosts[0].is_local and \
                any(not h.is_local for h in cluster.hosts[:case.nnodes]):
            ck.add(cases_map, key, "node 0 is 'localhost' but other nodes are SSH hosts, which cannot reach "
                                   "its MASTER_ADDR 127.0.0.1; list this machine by an address they can reach",
                   label)
        elif cluster is not None and resolved and any(h.is_local for h in cluster.hosts[:case.nnodes]):
            if not is_("is_dir", resolved):
                ck.add(cases_map, key, f"data directory {resolved} does not exist on localhost", label)
        _check_cpu_nproc(ck, cases_map, key, label, case, vendor, cluster)
        cases.append(CaseSpec(key, case.model, case.framework, case.hw, nnodes, case.nproc, case.repeat,
                              data_dir=resolved, each=case.each, pairs=case.pairs,
                              framework_full=case.framework_full, extra=case.extra))
    return cases


def _check_cpu_nproc(ck: Checker, cases_map, key, label, case: CaseSpec, vendor, cluster, cores=None) -> None:
    """A CPU case with more ranks than this machine has cores, on this machine: a warning (the ranks share cores,
    and their figures are not what the node delivers)."""
    cores = cores or os.cpu_count()
    if vendor is None or vendor.device != "cpu" or case.nproc is None or cluster is None or not cores or \
            case.nproc <= cores:
        return
    if not any(h.is_local for h in (cluster.hosts if case.each or case.pairs else cluster.hosts[:case.nnodes])):
        return
    ck.warn(cases_map, key, f"nproc {case.nproc} is above the {cores} CPU core(s) of this machine (localhost): "
                            f"the ranks share cores and each one's figure drops; use nproc auto or at most {cores}",
            label)


def _training_framework(case_paths, model: str, framework: str) -> bool:
    """True when a FlagPerf training tree of CASE_PATHS has ``model``: the tree's launchers provide the
    frameworks, whatever the vendor profile lists (a framework without a launcher there is reported by the case
    check, with the launchers the tree has)."""
    for folder in case_paths:
        tree = training_tree(folder)
        if tree is not None and (tree / "benchmarks" / model).is_dir():
            return True
    return False


def _check_model(ck: Checker, mapping, key, label, model: str, known, source_root, case_paths) -> None:
    if model in known:
        return
    bench = source_root / "benchmarks" / model
    if bench.is_dir() or any((Path(p) / model).is_dir() for p in case_paths):
        return      # a folder without anything runnable: the case check says what it looked for
    looked = [f"{bench}/main.py"]
    for p in case_paths[:3]:
        tree = training_tree(p)
        looked.append(f"{tree / 'benchmarks' / model}/<framework>/" if tree is not None else f"{Path(p) / model}/")
    where_ = " or ".join(looked) + (" or ..." if len(case_paths) > 3 else "")
    close = difflib.get_close_matches(model, known, n=1)
    hint = f"did you mean {close[0]}?" if close else \
        f"known: {', '.join(known[:24])}{', ...' if len(known) > 24 else ''}"
    ck.add(mapping, key, f"model {model!r} has no benchmark ({where_}); {hint}", label)


def _base_mode(ck: Checker, data) -> str | None:
    """BENCHMARKS_OR_TOOLKITS (FlagPerf's base config): BENCHMARK or TOOLKIT, any case."""
    if "BENCHMARKS_OR_TOOLKITS" not in data:
        return None
    value = data["BENCHMARKS_OR_TOOLKITS"]
    if isinstance(value, str) and value.strip().lower() in BASE_MODES:
        return value.strip().lower()
    ck.add(data, "BENCHMARKS_OR_TOOLKITS", f"expected BENCHMARK (torch benchmarks under torchrun) or TOOLKIT "
                                           f"(bash main.sh per node), got {value!r}")
    return None


def _case_paths(ck: Checker, data) -> list:
    """CASE_PATHS: existing folders, resolved against the config file."""
    value = data.get("CASE_PATHS")
    if value is None:
        return []
    if not isinstance(value, list):
        ck.add(data, "CASE_PATHS", f"expected a list of folders, got {type(value).__name__} {value!r}")
        return []
    out = []
    for i, item in enumerate(value):
        label = f"CASE_PATHS[{i}]"
        try:
            path = resolve(ck.path, item)
        except ValueError as exc:
            ck.add(data, "CASE_PATHS", str(exc), label)
            continue
        if not is_("is_dir", path):
            ck.add(data, "CASE_PATHS", f"expected a folder of cases, {path} "
                                       f"{'is not a directory' if is_('exists', path) else 'does not exist'}", label)
            continue
        if str(path) not in out:
            out.append(str(path))
    return out


def _model_sources(ck: Checker, data) -> tuple:
    """MODEL_SOURCES: which tree a model that is in both flagperf's benchmarks/ and a CASE_PATHS folder runs from."""
    value = data.get("MODEL_SOURCES")
    if value is None:
        return ()
    if not isinstance(value, dict):
        ck.add(data, "MODEL_SOURCES", f"expected a mapping of model names to {' or '.join(MODEL_SOURCE_VALUES)}, "
                                      f"got {type(value).__name__} {value!r:.80}")
        return ()
    out = []
    for model, where_from in value.items():
        if not isinstance(model, str) or where_from not in MODEL_SOURCE_VALUES:
            ck.add(value, model, f"expected {' or '.join(MODEL_SOURCE_VALUES)} (flagperf's own benchmarks/, or the "
                                 f"CASE_PATHS folders), got {where_from!r:.80}", f"MODEL_SOURCES[{model!r}]")
            continue
        out.append((model, where_from))
    return tuple(out)


def _flagperf_checkout(ck: Checker, data, base_mode) -> list:
    """FlagPerf's FLAGPERF_PATH (a training/, base/, ... checkout) as a CASE_PATHS folder: its benchmarks/ (or
    toolkits/ for a TOOLKIT base config). flagperf's own FLAGPERF_PATH then keeps its default."""
    value = ck.path_value(data, "FLAGPERF_PATH")
    if value is None:
        return []
    kind = flagperf_kind(ck.path, data)
    sub = "toolkits" if base_mode == "toolkit" else "benchmarks"
    folder = Path(value) / sub
    if not is_("is_dir", folder):
        ck.add(data, "FLAGPERF_PATH", f"a FlagPerf {kind} folder: expected its {sub}/ at {folder} (a directory on "
                                      f"this machine); point FLAGPERF_PATH at your FlagPerf {kind} checkout, or "
                                      f"remove it")
        return []
    if training_tree(folder) is not None and base_mode is None:
        ck.warn(data, "FLAGPERF_PATH", f"a FlagPerf training tree: its cases ({folder}) run with its own launchers "
                                       f"(run_benchmarks/), as a CASE_PATHS folder; flagperf deploys its own tree to "
                                       f"its default FLAGPERF_PATH")
    elif kind in (f"{INFERENCE}/", f"{OPERATION}/"):
        script = "run_inference.py" if kind == f"{INFERENCE}/" else "benchmarks/<op>/main.py"
        ck.warn(data, "FLAGPERF_PATH", f"a FlagPerf {kind} tree: its cases run as FlagPerf's run.py starts them "
                                       f"({script}), from this tree ({folder} as a CASE_PATHS folder); flagperf "
                                       f"deploys its own tree to its default FLAGPERF_PATH")
    else:
        ck.warn(data, "FLAGPERF_PATH", f"a FlagPerf {kind} folder: its {sub}/ ({folder}) is used as a CASE_PATHS "
                                       f"folder; flagperf deploys its own tree to its default FLAGPERF_PATH")
    return [str(folder)]


def flagperf_kind(path, data) -> str:
    """Which FlagPerf folder a FlagPerf-format test config's FLAGPERF_PATH names: base/, training/ or (a
    host.yaml without BENCHMARKS_OR_TOOLKITS: inference/, operation/) that suite's folder."""
    if "BENCHMARKS_OR_TOOLKITS" in data:
        return "base/"
    suite = suite_of(path, data)
    return "training/" if is_python_config(path) else f"{suite}/" if suite else "inference/ or operation/"


def _load_base_cases(ck: Checker, data, cluster, vendor, source_root, case_paths) -> list:
    """CASES of a FlagPerf base config: ``"<case>[:<chip>]": "<image dir>"``; every case runs on all HOSTS
    with NPROC_PER_NODE ranks each, once."""
    nproc = _nproc_per_node(ck, data)
    cases_map = data.get("CASES")
    if "CASES" not in data:
        ck.problems.append(f"{ck.path}: CASES: required key is missing; expected a mapping "
                           f"'<case>[:<chip>]': <image dir>")
        return []
    if not isinstance(cases_map, dict) or not cases_map:
        ck.add(data, "CASES", "expected a non-empty mapping '<case>[:<chip>]': <image dir>")
        return []
    if cluster is not None and not cluster.hosts:
        ck.add(data, "BENCHMARKS_OR_TOOLKITS", f"a FlagPerf base config runs each case on every host of HOSTS; "
                                               f"SCHEDULER {cluster.scheduler!r} lists no hosts")
        return []
    nnodes = len(cluster.hosts) if cluster is not None else 1
    known = benchmark_names(source_root, case_paths)
    cases = []
    for key, image_dir in cases_map.items():
        label = f"CASES[{key!r}]"
        if not isinstance(key, str):
            ck.add(cases_map, key, f"expected a string '<case>[:<chip>]', got {key!r}", label)
            continue
        parts = [p.strip() for p in key.split(":")]
        if len(parts) > 2:
            ck.add(cases_map, key, f"expected '<case>' or '<case>:<chip>' in a FlagPerf base config, got "
                                   f"{len(parts)} fields", label)
            continue
        model, chip = parts[0], parts[1] if len(parts) == 2 else DEFAULT_BASE_CHIP
        bad = [f"{name} {value!r}" for name, value in (("case", model), ("chip", chip))
               if not re.fullmatch(r"[A-Za-z0-9_.+-]+", value)]
        if bad:
            ck.add(cases_map, key, f"{' and '.join(bad)}: expected letters, digits and _ . + - (not empty)", label)
            continue
        if not isinstance(image_dir, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", image_dir):
            ck.add(cases_map, key, f"expected FlagPerf's image directory (a name such as pytorch_2.3), got "
                                   f"{image_dir!r}", label)
            continue
        _check_model(ck, cases_map, key, label, model, known, source_root, case_paths)
        if vendor is not None and BASE_FRAMEWORK not in vendor.frameworks:
            ck.add(cases_map, key, f"framework {BASE_FRAMEWORK!r} (every base case) is not provided by vendor "
                                   f"{vendor.name!r}; expected one of: {', '.join(vendor.frameworks)}", label)
        if nnodes > 1 and cluster is not None and cluster.hosts[0].is_local and \
                any(not h.is_local for h in cluster.hosts):
            ck.add(cases_map, key, "node 0 is 'localhost' but other nodes are SSH hosts, which cannot reach "
                                   "its MASTER_ADDR 127.0.0.1; list this machine by an address they can reach",
                   label)
        cases.append(CaseSpec(key, model, BASE_FRAMEWORK, chip, nnodes, nproc, 1, framework_full=BASE_FRAMEWORK,
                              image_dir=image_dir))
    return cases


def _suite(ck: Checker, data) -> str | None:
    """FLAGPERF_SUITE (inference or operation), or the suite of FlagPerf's host.yaml (flagperf.suites.suite_of)."""
    if "FLAGPERF_SUITE" in data and data["FLAGPERF_SUITE"] not in (INFERENCE, OPERATION):
        ck.add(data, "FLAGPERF_SUITE", f"expected {INFERENCE} (CASES {INFERENCE_KEY}: <data dir>) or {OPERATION} "
                                       f"(CASES {OPERATION_KEY}: <image name>), got {data['FLAGPERF_SUITE']!r:.80}")
        return None
    if "FLAGPERF_SUITE" in data and "BENCHMARKS_OR_TOOLKITS" in data:
        ck.add(data, "FLAGPERF_SUITE", "a FlagPerf base config (BENCHMARKS_OR_TOOLKITS) is no inference or operation "
                                       "config; keep one of them")
        return None
    return suite_of(ck.path, data)


def _load_suite_cases(ck: Checker, data, cluster, vendor, suite: str) -> list:
    """CASES of a FlagPerf inference host.yaml (``"<model>:<framework>": <data dir>``: on the first host) or
    operation host.yaml (``"<op>:<dataformat>:<spectflops>:<oplib>:<chip>": <image name>``: on every host), as
    FlagPerf's run.py reads them: one round, one process per host (flagperf.suites)."""
    grammar = f"{INFERENCE_KEY}: <data dir>" if suite == INFERENCE else f"{OPERATION_KEY}: <image name>"
    if "NPROC_PER_NODE" in data:
        ck.warn(data, "NPROC_PER_NODE", f"accepted and ignored: FlagPerf's {suite} cases run one process per host, "
                                        f"as FlagPerf's run.py starts them")
    cases_map = data.get("CASES")
    if "CASES" not in data:
        ck.problems.append(f"{ck.path}: CASES: required key is missing; expected a mapping {grammar}")
        return []
    if not isinstance(cases_map, dict) or not cases_map:
        ck.add(data, "CASES", f"expected a non-empty mapping {grammar}")
        return []
    hosts: tuple = cluster.hosts if cluster is not None else ()
    if cluster is not None and not hosts:
        ck.add(data, "HOSTS", f"a FlagPerf {suite} host.yaml runs its cases on the hosts of HOSTS; it lists none")
        return []
    cases = []
    for key, value in cases_map.items():
        label = f"CASES[{key!r}]"
        try:
            if suite == INFERENCE:
                model, framework_full, extra = parse_inference_key(key)
                fields: dict = {}
            else:
                fields = parse_operation_key(key)
                model, framework_full, extra = fields["op"], BASE_FRAMEWORK, ()
        except ValueError as exc:
            ck.add(cases_map, key, str(exc), label)
            continue
        framework = framework_full.partition("_")[0]
        if vendor is not None and framework not in vendor.frameworks:
            ck.add(cases_map, key, f"framework {framework!r} is not provided by vendor {vendor.name!r}; expected one "
                                   f"of: {', '.join(vendor.frameworks)}", label)
            continue
        if suite == OPERATION:
            if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", value):
                ck.add(cases_map, key, f"expected FlagPerf's image name (a folder of vendors/<vendor>/, such as "
                                       f"ngctorch2403), got {value!r}", label)
                continue
            if len(hosts) > 1 and hosts[0].is_local and any(not h.is_local for h in hosts):
                ck.add(cases_map, key, "node 0 is 'localhost' but other nodes are SSH hosts; list this machine by an "
                                       "address they can reach", label)
                continue
            cases.append(CaseSpec(key, model, framework, fields["chip"], max(len(hosts), 1), 1, 1,
                                  framework_full=framework_full, image_dir=value, suite=suite,
                                  suite_args=(fields["dataformat"], fields["spectflops"], fields["oplib"])))
            continue
        if extra:
            ck.warn(cases_map, key, f"fields after the second ({':'.join(extra)}) are accepted and ignored, as "
                                    f"FlagPerf's inference run.py ignores them", label)
        if not isinstance(value, str) or not value or ":" in value:
            ck.add(cases_map, key, f"expected the data directory (a path without ':', it is bind-mounted as "
                                   f"host:container), got {value!r}", label)
            continue
        try:
            resolved = str(resolve(ck.path, value))
        except ValueError as exc:
            ck.add(cases_map, key, f"data directory: {exc}", label)
            continue
        if hosts and hosts[0].is_local and not is_("is_dir", resolved):
            ck.add(cases_map, key, f"data directory {resolved} does not exist on localhost", label)
            continue
        cases.append(CaseSpec(key, model, framework, vendor.name if vendor is not None else "default", 1, 1, 1,
                              data_dir=resolved, framework_full=framework_full, extra=extra, suite=suite))
    return cases


def _nproc_per_node(ck: Checker, data) -> int | None:
    """NPROC_PER_NODE: a number (or a string of digits), or auto (the default): every accelerator."""
    value = data.get("NPROC_PER_NODE", "auto")
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,6}", value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NPROC:
        ck.add(data, "NPROC_PER_NODE", f"expected ranks per host from 1 to {MAX_NPROC}, or auto, got {value!r}")
        return None
    return value


def _check_each(ck: Checker, cases_map, key, label, cluster) -> None:
    """An ``each`` case runs one job per host, host i's rank 0 listening on MASTER_PORT + i: every such port
    must exist."""
    count = len({h.address for h in cluster.hosts})
    if cluster.master_port + count - 1 > 65535:
        ck.add(cases_map, key, f"nnodes each: the {count} hosts listen on MASTER_PORT {cluster.master_port} to "
                               f"{cluster.master_port + count - 1}, past 65535; lower MASTER_PORT", label)


def _check_pairs(ck: Checker, cases_map, key, label, cluster) -> None:
    """A ``pairs`` case runs a 2-node job on every pair of the distinct hosts, up to n/2 jobs at a time, job j's
    node 0 listening on MASTER_PORT + j: at least 2 hosts, every such port, and no localhost beside SSH hosts
    (those could not reach its MASTER_ADDR 127.0.0.1)."""
    hosts = {h.address: h for h in cluster.hosts}
    count = len(hosts)
    if count < 2:
        where_ = cluster.path or "the default cluster (localhost)"
        ck.add(cases_map, key, f"nnodes pairs needs at least 2 hosts in HOSTS, {where_} lists {count}", label)
        return
    if cluster.master_port + count // 2 - 1 > 65535:
        ck.add(cases_map, key, f"nnodes pairs: the {count // 2} simultaneous pair jobs listen on MASTER_PORT "
                               f"{cluster.master_port} to {cluster.master_port + count // 2 - 1}, past 65535; "
                               f"lower MASTER_PORT", label)
    if any(h.is_local for h in hosts.values()) and any(not h.is_local for h in hosts.values()):
        ck.add(cases_map, key, "nnodes pairs: 'localhost' is listed beside SSH hosts, which cannot reach its "
                               "MASTER_ADDR 127.0.0.1; list this machine by an address they can reach", label)


def default_cluster() -> ClusterConfig:
    """No cluster config: the default scheduler's cluster of this machine alone."""
    reg = registration(DEFAULT_SCHEDULER)
    assert reg is not None
    problems: list = []
    data = LineMap({"HOSTS": [LOCALHOST]})
    data.lines = {}
    options = load_options(reg, Checker(Path("(default cluster)"), problems), data)
    assert options is not None and not problems
    return ClusterConfig(None, options.plan_hosts((), ""), DEFAULT_MASTER_PORT, DEFAULT_SCHEDULER, options)


def _load_cluster(path: Path | None, problems: list, warnings: list | None = None) -> ClusterConfig | None:
    if path is None:
        return default_cluster()
    data, yproblems = load_config_file(path)
    if yproblems:
        problems.extend(_hinted(path, yproblems))
        return None
    if not isinstance(data, LineMap):
        problems.extend(_hinted(path, [f"{path}: expected a mapping of cluster keys (HOSTS, MASTER_PORT, ...)"]))
        return None
    ck = Checker(path, problems, warnings)
    ck.unknown_keys(data, _cluster_keys(data), ignored={k: FLAGPERF_IGNORED[k] for k in CLUSTER_IGNORED},
                    elsewhere=(TEST_KEYS + tuple(FLAGPERF_IGNORED), "the test config", "a cluster config"))
    return _cluster_from(path, data, problems, warnings)


def _cluster_keys(data) -> tuple:
    """The cluster keys, with those of the SCHEDULER named in ``data`` (its own keys are known keys too)."""
    named = data.get("SCHEDULER", DEFAULT_SCHEDULER)
    own = registration(named) if isinstance(named, str) else None
    return COMMON_CLUSTER_KEYS[:2] + (own.cluster_keys if own else ()) + COMMON_CLUSTER_KEYS[2:]


def _cluster_from(path: Path, data: LineMap, problems: list, warnings: list | None) -> ClusterConfig | None:
    """The cluster keys of ``data`` (a cluster config, or a test config that lists HOSTS), checked: the common
    ones here, the scheduler's own by its registration's options module."""
    ck = Checker(path, problems, warnings)
    scheduler = ck.get(data, "SCHEDULER", str, DEFAULT_SCHEDULER)
    reg = registration(scheduler)
    if reg is None:
        ck.add(data, "SCHEDULER", f"expected one of {', '.join(backend_names())}, got {scheduler!r}")
        scheduler = DEFAULT_SCHEDULER
        reg = registration(scheduler)
        assert reg is not None
    master_port = ck.port(data, "MASTER_PORT", DEFAULT_MASTER_PORT) or DEFAULT_MASTER_PORT
    ck.get(data, "PYTHON", str, None)       # its type; each options module reads what it means
    options = load_options(reg, ck, data)
    if options is None:
        return None     # the problems are reported; checking the cases against no hosts would only repeat them
    hosts = options.plan_hosts((), "") if reg.host_list else ()
    return ClusterConfig(path, hosts, options.plan_master_port(master_port), scheduler, options,
                         _hosts_ports(ck, data))


def _hosts_ports(ck: Checker, data) -> tuple:
    """HOSTS_PORTS: a list of ports (numbers or strings of digits, as FlagPerf writes them)."""
    value = data.get("HOSTS_PORTS")
    if value is None:
        return ()
    if not isinstance(value, list):
        ck.add(data, "HOSTS_PORTS", f"expected a list of ports (FlagPerf's [\"2222\"]), got {value!r:.80}")
        return ()
    ports = []
    for item in value:
        text = str(item).strip() if isinstance(item, (int, str)) and not isinstance(item, bool) else ""
        if not re.fullmatch(r"[0-9]{1,5}", text) or not 1 <= int(text) <= 65535:
            ck.add(data, "HOSTS_PORTS", f"expected a list of TCP ports 1-65535 (numbers or strings of digits), "
                                        f"got {item!r:.40} in it")
            return ()
        ports.append(int(text))
    return tuple(ports)


# -- command-line overrides (flagperf run --case, --repeat, --hosts, --log-path, --master-port) ------------------

HOST_ADDRESS = re.compile(r"[A-Za-z0-9_.:%\[\]-]{1,253}")   # what HOSTS accepts as an address


@dataclass(frozen=True)
class Overrides:
    """What the command line sets over the files; None or () leaves the file's value."""

    cases: tuple = ()               # shell-style patterns, each matched against a case's model and its whole key
    repeat: int | None = None       # every selected case's repeat
    hosts: tuple = ()               # the cluster's HOSTS (addresses)
    log_path: str | None = None     # FLAGPERF_LOG_PATH
    master_port: int | None = None  # MASTER_PORT

    def as_pairs(self) -> tuple:
        """((option, value), ...) as the effective configuration records them."""
        out = [("--case", tuple(self.cases)) if self.cases else None,
               ("--repeat", self.repeat) if self.repeat is not None else None,
               ("--hosts", ",".join(self.hosts)) if self.hosts else None,
               ("--log-path", self.log_path) if self.log_path is not None else None,
               ("--master-port", self.master_port) if self.master_port is not None else None]
        return tuple(x for x in out if x is not None)


def apply_overrides(config: Config, ov: Overrides) -> Config:
    """A new Config with the command line's overrides applied, re-checked as the loader checks the files (case
    selection, repeat bounds, host addresses, ports, nnodes against the hosts); ConfigError names the option."""
    if not ov.as_pairs():
        return config
    t, c = config.test, config.cluster
    problems: list = []
    cases = _selected_cases(t.cases, ov.cases, problems)
    if ov.repeat is not None:
        if not 1 <= ov.repeat <= MAX_REPEAT:
            problems.append(f"--repeat: expected rounds from 1 to {MAX_REPEAT}, got {ov.repeat}")
        else:
            cases = tuple(replace(case, repeat=ov.repeat) for case in cases)
    log_path = t.log_path
    if ov.log_path is not None:
        try:
            log_path = _cli_path(ov.log_path, "--log-path")
        except ConfigError as exc:
            problems.extend(exc.problems)
        else:
            if log_path.exists() and not log_path.is_dir():
                problems.append(f"--log-path {ov.log_path}: expected a folder for the run directories, "
                                f"{log_path} is not a directory")
    options, port = c.options, c.master_port
    if ov.hosts:
        options = _hosts_override(c, ov.hosts, problems)
    if ov.master_port is not None:
        if not 1 <= ov.master_port <= 65535:
            problems.append(f"--master-port: expected a TCP port 1-65535, got {ov.master_port}")
        else:
            port = options.plan_master_port(ov.master_port)
    if problems:
        raise ConfigError([one_line(p) for p in problems])
    hosts = options.plan_hosts(cases, t.flagperf_path)
    if t.base_mode:
        cases = tuple(replace(case, nnodes=len(hosts)) for case in cases)
    elif ov.hosts or not _host_list(c.scheduler):
        cases = tuple(replace(case, nnodes=len(hosts)) if case.each or case.pairs or case.suite == OPERATION
                      else case for case in cases)
    cluster = replace(c, hosts=hosts, options=options, master_port=port)
    test = replace(t, cases=cases, log_path=log_path)
    problems.extend(_override_case_problems(test, cluster, ov))
    if problems:
        raise ConfigError([one_line(p) for p in problems])
    return replace(config, test=test, cluster=cluster, overrides=config.overrides + ov.as_pairs())


def _selected_cases(cases: tuple, patterns: tuple, problems: list) -> tuple:
    """The cases whose model or whole key matches one of ``patterns`` (shell-style, case-sensitive), in the
    file's order; a pattern that matches none is a problem listing the keys."""
    if not patterns:
        return cases
    keys = ", ".join(case.key for case in cases)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(case.model, pattern) or fnmatch.fnmatchcase(case.key, pattern)
                   for case in cases):
            problems.append(f"--case {pattern}: no case's model or key matches; expected one of: {keys}")
    return tuple(case for case in cases if any(fnmatch.fnmatchcase(case.model, p) or fnmatch.fnmatchcase(case.key, p)
                                               for p in patterns))


def _hosts_override(cluster: ClusterConfig, addresses: tuple, problems: list) -> BackendOptions:
    """The cluster's options with HOSTS replaced: a host the cluster config lists keeps its entry (SSH settings,
    PYTHON, FLAGPERF_PATH); another takes the SSH settings and PYTHON of the config's first SSH host."""
    reg = registration(cluster.scheduler)
    known = getattr(cluster.options, "hosts", None)
    if reg is None or not reg.host_list or known is None:
        problems.append(f"--hosts: SCHEDULER {cluster.scheduler!r} picks its nodes itself; expected a cluster "
                        f"config with HOSTS (SCHEDULER: ssh)")
        return cluster.options
    bad = [a for a in addresses if not HOST_ADDRESS.fullmatch(a)]
    if bad:
        problems.append(f"--hosts: expected comma-separated host names or addresses (localhost allowed), got "
                        f"{', '.join(repr(a) for a in bad)}")
        return cluster.options
    by_address = {h.address: h for h in known}
    remote = next((h for h in known if not h.is_local), None)
    hosts = []
    for address in addresses:
        if address in by_address:
            hosts.append(by_address[address])
        elif address == LOCALHOST:
            hosts.append(HostSpec(LOCALHOST, None, None, None, sys.executable, ""))
        elif remote is not None:
            hosts.append(replace(remote, address=address, flagperf_path=""))
        else:
            hosts.append(HostSpec(address, None, None, None, "python3", ""))
    options: Any = cluster.options     # a host-list backend's options (checked above): they have hosts
    return replace(options, hosts=tuple(hosts))


def _host_list(scheduler: str) -> bool:
    reg = registration(scheduler)
    return reg is not None and reg.host_list


def _override_case_problems(test: TestConfig, cluster: ClusterConfig, ov: Overrides) -> list:
    """What the loader checks of the cases against the cluster, again after --hosts and --master-port."""
    out = []
    distinct = {h.address: h for h in cluster.hosts}
    mixed = any(h.is_local for h in distinct.values()) and any(not h.is_local for h in distinct.values())
    what = f"--hosts {','.join(ov.hosts)}" if ov.hosts else str(cluster.path or "the default cluster (localhost)")
    for case in test.cases:
        label = f"CASES[{case.key!r}]"
        if case.each and cluster.master_port + len(distinct) - 1 > 65535:
            out.append(f"{label}: nnodes each: the {len(distinct)} hosts listen on MASTER_PORT {cluster.master_port} "
                       f"to {cluster.master_port + len(distinct) - 1}, past 65535; lower --master-port")
        elif case.pairs and len(distinct) < 2:
            out.append(f"{label}: nnodes pairs needs at least 2 hosts, {what} gives {len(distinct)}")
        elif case.pairs and cluster.master_port + len(distinct) // 2 - 1 > 65535:
            out.append(f"{label}: nnodes pairs: the pair jobs listen on MASTER_PORT {cluster.master_port} to "
                       f"{cluster.master_port + len(distinct) // 2 - 1}, past 65535; lower --master-port")
        elif case.pairs and mixed:
            out.append(f"{label}: nnodes pairs: 'localhost' is listed beside SSH hosts, which cannot reach its "
                       f"MASTER_ADDR 127.0.0.1; list this machine by an address they can reach")
        elif not (case.each or case.pairs) and _host_list(cluster.scheduler) and \
                case.nnodes > len(cluster.hosts):
            out.append(f"{label}: nnodes {case.nnodes} exceeds the {len(cluster.hosts)} host(s) of {what}")
        elif not (case.each or case.pairs) and case.nnodes > 1 and cluster.hosts[0].is_local and \
                any(not h.is_local for h in cluster.hosts[:case.nnodes]):
            out.append(f"{label}: node 0 is 'localhost' but other nodes are SSH hosts, which cannot reach its "
                       f"MASTER_ADDR 127.0.0.1; list this machine by an address they can reach ({what})")
    return out
