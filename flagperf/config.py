"""Test and cluster configuration: YAML files validated at load into frozen dataclasses.

Every problem found is collected and raised together as one ConfigError; each message names the file,
the line where YAML gives one, the key, and what was expected.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from flagperf.backends import backend_names, registration
from flagperf.catalog import benchmark_names
from flagperf.container_opts import merge, translate_container_opt
from flagperf.errors import ConfigError
from flagperf.hosts.treesync import COLLECT_MAX_BYTES
from flagperf.paths import SOURCE_ROOT, default_log_path
from flagperf.vendors import ContainerSpec, VendorProfile, check_size, detect_vendor, load_vendor, vendor_names
from flagperf.yamlio import LineMap, load_yaml_file, one_line, where

LOCALHOST = "localhost"
LOG_LEVELS = ("debug", "info", "warning", "error")

TEST_KEYS = (
    "VENDOR", "RUNTIME", "FLAGPERF_PATH", "FLAGPERF_LOG_PATH", "FLAGPERF_LOG_LEVEL", "SHM_SIZE",
    "CLEAR_CACHES", "ACCE_CONTAINER_OPT", "ACCE_VISIBLE_DEVICE_ENV_NAME", "PIP_SOURCE", "CLUSTER", "CASES",
    "MONITOR_INTERVAL", "CASE_TIMEOUT", "DOCKER_BUILD_ARGS", "EXTRA_CA_BUNDLE", "COLLECT_MAX_BYTES",
    "REFERENCES",
)
CLUSTER_KEYS = ("SCHEDULER", "HOSTS", "SSH_PORT", "SSH_USER", "SSH_KEY", "KNOWN_HOSTS", "MASTER_PORT", "PYTHON")
HOST_KEYS = ("HOST", "SSH_PORT", "SSH_USER", "SSH_KEY", "PYTHON", "FLAGPERF_PATH")

# Upper bounds (docs/configuration.md lists them): a value past one is a typo, not a plan.
MAX_NNODES = 10_000
MAX_HOSTS = 10_000
MAX_NPROC = 1024
MAX_REPEAT = 1000
MIN_MONITOR_INTERVAL, MAX_MONITOR_INTERVAL = 0.05, 3600.0
MAX_CASE_TIMEOUT = 30 * 24 * 3600.0         # 30 days
MAX_PATH_BYTES, MAX_NAME_BYTES = 4095, 255  # Linux PATH_MAX - 1 and NAME_MAX


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

    FIELDS = ("model", "framework", "hw", "nnodes", "nproc", "repeat")
    LIMITS = {"nnodes": MAX_NNODES, "nproc": MAX_NPROC, "repeat": MAX_REPEAT}

    @classmethod
    def parse(cls, key: str, data_dir: str | None = None) -> "CaseSpec":
        """Parse ``model:framework:hw:nnodes:nproc:repeat``; ValueError says what is wrong."""
        if not isinstance(key, str):
            raise ValueError(f"expected a string 'model:framework:hw:nnodes:nproc:repeat', got {key!r}")
        parts = [p.strip() for p in key.split(":")]
        if len(parts) != 6:
            raise ValueError(f"expected 6 fields 'model:framework:hw:nnodes:nproc:repeat', got {len(parts)}")
        for name, value in zip(cls.FIELDS[:3], parts[:3]):
            if not value:
                raise ValueError(f"{name} is empty")
            if not re.fullmatch(r"[A-Za-z0-9_.+-]+", value):
                raise ValueError(f"{name} {value!r} may hold only letters, digits and _ . + -")
        numbers: list = []
        for name, value in zip(cls.FIELDS[3:], parts[3:]):
            if name == "nproc" and value.lower() == "auto":
                numbers.append(None)
                continue
            if name == "nnodes" and value.lower() == "each":
                numbers.append(0)       # the number of hosts: set when the cluster is known (load_config)
                continue
            if not re.fullmatch(r"[0-9]+", value) or not value.strip("0"):
                more = {"nproc": " or auto", "nnodes": " or each"}.get(name, "")
                raise ValueError(f"{name} must be a positive integer{more}, got {value!r}")
            if len(value.lstrip("0")) > 6 or int(value) > cls.LIMITS[name]:
                raise ValueError(f"{name} must be at most {cls.LIMITS[name]}, got {value!r}")
            numbers.append(int(value))
        model, framework, hw = parts[:3]
        nnodes, nproc, repeat = numbers
        return cls(key, model, framework, hw, nnodes, nproc, repeat, data_dir=data_dir, each=parts[3].lower() == "each")

    @property
    def name(self) -> str:
        nodes = "each" if self.each else self.nnodes
        return f"{self.model}-{self.framework}-{self.hw}-{nodes}x{'auto' if self.nproc is None else self.nproc}"


@dataclass(frozen=True)
class HostSpec:
    address: str
    ssh_port: int | None        # None: from ~/.ssh/config, else 22
    ssh_user: str | None        # None: from ~/.ssh/config, else the current user
    ssh_key: str | None
    python: str
    flagperf_path: str

    @property
    def is_local(self) -> bool:
        return self.address == LOCALHOST


@dataclass(frozen=True)
class ClusterConfig:
    path: Path | None
    hosts: tuple
    known_hosts: str
    master_port: int
    scheduler: str = "ssh"      # the backend (flagperf.backends registry) that runs the rounds


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


@dataclass(frozen=True)
class Config:
    test: TestConfig
    cluster: ClusterConfig
    vendor: VendorProfile
    source_root: Path = field(default=SOURCE_ROOT)
    container: ContainerSpec | None = None      # the vendor's container with ACCE_CONTAINER_OPT applied
    references: tuple = ()      # flagperf.references.ReferenceFile: the expected figures, loaded and checked

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
            "CASE_TIMEOUT": t.case_timeout,
            "DOCKER_BUILD_ARGS": dict(t.docker_build_args),
            "EXTRA_CA_BUNDLE": t.extra_ca_bundle,
            "COLLECT_MAX_BYTES": t.collect_max_bytes,
            "REFERENCES": t.references if t.references is not None else [r.path for r in self.references],
            "CLUSTER": str(c.path) if c.path else None,
            "CASES": {case.key: case.data_dir for case in t.cases},
            "cluster": {
                "HOSTS": [
                    {"HOST": h.address, "SSH_PORT": h.ssh_port, "SSH_USER": h.ssh_user, "SSH_KEY": h.ssh_key,
                     "PYTHON": h.python, "FLAGPERF_PATH": h.flagperf_path}
                    for h in c.hosts
                ],
                "KNOWN_HOSTS": c.known_hosts,
                "MASTER_PORT": c.master_port,
                "SCHEDULER": c.scheduler,
            },
        }


class _Checker:
    """Collects problems while reading one file."""

    def __init__(self, path: Path, problems: list):
        self.path = path
        self.problems = problems

    def add(self, mapping, key, message, label=None):
        self.problems.append(f"{where(self.path, mapping, key)}: {label or key}: {message}")

    def unknown_keys(self, mapping, known, prefix=""):
        for i, key in enumerate(k for k in mapping if k not in known):
            # A suggestion for the first 100 only: difflib on thousands of keys would take seconds.
            close = difflib.get_close_matches(str(key)[:100].upper(), known, n=1, cutoff=0.6) if i < 100 else []
            hint = f"; did you mean {close[0]}?" if close else f"; known keys: {', '.join(known)}"
            self.problems.append(f"{where(self.path, mapping, key)}: {prefix}{key}: unknown key{hint}")

    def get(self, mapping, key, types, default, label=None):
        if key not in mapping or mapping[key] is None and type(None) not in _tuple(types):
            return default
        value = mapping[key]
        if isinstance(value, bool) and bool not in _tuple(types):
            self.add(mapping, key, f"expected {_describe(types)}, got {value!r}", label)
            return default
        if not isinstance(value, types):
            self.add(mapping, key, f"expected {_describe(types)}, got {type(value).__name__} {value!r}", label)
            return default
        return value

    def path_value(self, mapping, key, default=None, label=None):
        value = self.get(mapping, key, str, None, label)
        if value is None:
            return default
        try:
            return str(resolve(self.path, value))
        except ValueError as exc:
            self.add(mapping, key, str(exc), label)
            return default


def resolve(config_file: Path, value: str) -> Path:
    """Resolve a path from a config file: ``~`` expands, relative paths are relative to the file's folder.

    ValueError says why ``value`` cannot be a path: not a string, empty, a NUL, ``~user`` of no such user,
    too long, or a symlink loop."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty path, got {value!r}")
    if "\0" in value:
        raise ValueError(f"a path may not hold a NUL character, got {value!r}")
    try:
        p = Path(value).expanduser()
    except RuntimeError:        # ~user of no such user
        p = Path(value)
    if str(p).startswith("~"):
        raise ValueError(f"cannot expand {value!r}: no such user's home directory")
    _check_length(value, str(p))
    try:
        resolved = p if p.is_absolute() else (Path(config_file).resolve().parent / p).resolve()
    except (OSError, RuntimeError, ValueError) as exc:       # symlink loop (RuntimeError in 3.11/3.12)
        raise ValueError(f"cannot resolve {value!r}: {_reason(exc)}") from None
    _check_length(value, str(resolved))
    return resolved


def _check_length(value: str, path: str) -> None:
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise ValueError(f"cannot encode {value!r} as a file name") from None
    if len(raw) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise ValueError(f"path too long ({len(raw)} bytes; at most {MAX_PATH_BYTES}, and {MAX_NAME_BYTES} per "
                         f"name): {value[:60]!r}{'...' if len(value) > 60 else ''}")


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _is(test, path) -> bool:
    """``Path(path).is_dir()`` (or another test) that says False where the OS refuses to answer."""
    try:
        return bool(getattr(Path(path), test)())
    except (OSError, ValueError):
        return False


def _tuple(types):
    return types if isinstance(types, tuple) else (types,)


def _describe(types) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
             dict: "a mapping", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(types) if not (t is int and float in _tuple(types)))


def load_config(test_path, cluster_override=None, *, source_root: Path = SOURCE_ROOT, detect=detect_vendor) -> Config:
    """Load and validate the test config (and the cluster config it names, or ``cluster_override``)."""
    problems: list[str] = []
    try:
        config = _load_config(test_path, cluster_override, problems, source_root, detect)
    except ConfigError as exc:
        raise ConfigError([one_line(p) for p in exc.problems]) from None
    if problems:
        raise ConfigError([one_line(p) for p in problems])
    assert config is not None
    return config


def _cli_path(value, what) -> Path:
    """A path given on the command line (--config, --cluster), resolved; ConfigError when it cannot be."""
    try:
        return resolve(Path.cwd() / "-", str(value)).resolve()
    except ValueError as exc:
        raise ConfigError(f"{value}: {what}: {exc}") from None
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"{value}: {what}: cannot resolve: {_reason(exc)}") from None


def _load_config(test_path, cluster_override, problems, source_root, detect) -> Config | None:
    test_path = _cli_path(test_path, "--config")
    data, problems_yaml = load_yaml_file(test_path)
    if problems_yaml:
        raise ConfigError(problems_yaml)
    if not isinstance(data, LineMap):
        raise ConfigError(f"{test_path}: expected a mapping of test-config keys (VENDOR, RUNTIME, CASES, ...)")
    ck = _Checker(test_path, problems)
    ck.unknown_keys(data, TEST_KEYS)

    # Cluster first: the cases are checked against its hosts.
    cluster_file = None
    cluster_bad = False
    if cluster_override is not None:
        cluster_file = _cli_path(cluster_override, "--cluster")
        origin = f"{cluster_file}: --cluster"
    else:
        value = ck.get(data, "CLUSTER", str, None)
        cluster_bad = "CLUSTER" in data and data["CLUSTER"] is not None and value is None
        if value is not None:
            try:
                cluster_file = resolve(test_path, value)
                origin = f"{where(test_path, data, 'CLUSTER')}: CLUSTER: {cluster_file}"
            except ValueError as exc:
                ck.add(data, "CLUSTER", str(exc))
                cluster_bad = True
    if cluster_bad:
        cluster = None
    elif cluster_file is not None and not _is("exists", cluster_file):
        problems.append(f"{origin}: file not found; expected a cluster config (YAML with HOSTS)")
        cluster = None
    else:
        cluster = _load_cluster(cluster_file, problems)

    # Vendor.
    vendor_name = ck.get(data, "VENDOR", str, None if "VENDOR" in data and data["VENDOR"] is not None else "auto")
    reason = "set in the test config"
    if vendor_name is None:
        pass                                # wrong type: already reported
    elif vendor_name == "auto":
        vendor_name, reason = detect()
        reason = f"VENDOR: auto -> {vendor_name} ({reason})"
    vendor = None
    if vendor_name is None:
        pass
    elif vendor_name not in vendor_names(source_root):
        ck.add(data, "VENDOR", f"no vendor {vendor_name!r} under {source_root / 'vendors'}; "
                               f"expected one of: auto, {', '.join(vendor_names(source_root))}")
    else:
        vendor, vproblems = load_vendor(source_root, vendor_name)
        problems.extend(vproblems)

    runtime = ck.get(data, "RUNTIME", str, "docker")
    reg = registration(cluster.scheduler) if cluster is not None else None
    if reg is not None and runtime not in reg.runtimes:
        ck.add(data, "RUNTIME", f"expected one of {', '.join(reg.runtimes)} (the runtimes of SCHEDULER "
                                f"{reg.name!r}), got {runtime!r}")

    flagperf_path = ck.path_value(data, "FLAGPERF_PATH", str(source_root))
    log_path = Path(ck.path_value(data, "FLAGPERF_LOG_PATH", str(
        default_log_path() if source_root == SOURCE_ROOT else source_root / "result")))
    log_level = ck.get(data, "FLAGPERF_LOG_LEVEL", str, "info").lower()
    if log_level not in LOG_LEVELS:
        ck.add(data, "FLAGPERF_LOG_LEVEL", f"expected one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
        log_level = "info"
    shm_size = str(ck.get(data, "SHM_SIZE", (str, int), "32G"))
    if check_size(shm_size):
        ck.add(data, "SHM_SIZE", check_size(shm_size))
    clear_caches = ck.get(data, "CLEAR_CACHES", bool, False)
    container_opt = ck.get(data, "ACCE_CONTAINER_OPT", str, "")
    overrides, opt_problems = translate_container_opt(container_opt)
    problems.extend(f"{where(test_path, data, 'ACCE_CONTAINER_OPT')}: {p}" for p in opt_problems)
    container = merge(vendor.container, overrides) if vendor is not None else None
    visible_env = ck.get(data, "ACCE_VISIBLE_DEVICE_ENV_NAME", (str, type(None)),
                         vendor.visible_devices_env if vendor else None)
    if visible_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", visible_env):
        ck.add(data, "ACCE_VISIBLE_DEVICE_ENV_NAME", f"expected an environment variable name, got {visible_env!r}")
    pip_source = ck.get(data, "PIP_SOURCE", str, "")
    interval = ck.get(data, "MONITOR_INTERVAL", (int, float), 1.0)
    if not MIN_MONITOR_INTERVAL <= interval <= MAX_MONITOR_INTERVAL:     # False for nan too
        ck.add(data, "MONITOR_INTERVAL", f"expected a number of seconds from {MIN_MONITOR_INTERVAL} to "
                                         f"{MAX_MONITOR_INTERVAL:g}, got {interval!r}")
        interval = 1.0
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
    if ca_bundle and not _is("is_file", ca_bundle):
        ck.add(data, "EXTRA_CA_BUNDLE", f"expected a CA bundle file (PEM), {ca_bundle} does not exist")
    collect_max = ck.get(data, "COLLECT_MAX_BYTES", int, COLLECT_MAX_BYTES)
    if not collect_max > 0:
        ck.add(data, "COLLECT_MAX_BYTES", f"expected a number of bytes > 0, got {collect_max!r}")
        collect_max = COLLECT_MAX_BYTES

    cases = _load_cases(ck, data, cluster, vendor, source_root)
    references, reference_files = _load_references(ck, data, vendor, source_root)

    if problems:
        return None
    test = TestConfig(
        path=test_path, vendor=vendor_name, vendor_reason=reason, runtime=runtime, flagperf_path=flagperf_path,
        log_path=log_path, log_level=log_level, shm_size=shm_size, clear_caches=clear_caches,
        acce_container_opt=container_opt, visible_devices_env=visible_env, pip_source=pip_source,
        monitor_interval=float(interval), case_timeout=float(timeout), cases=tuple(cases),
        docker_build_args=tuple(sorted((str(k), str(v)) for k, v in build_args.items())),
        extra_ca_bundle=ca_bundle,
        collect_max_bytes=collect_max,
        references=references,
    )
    assert cluster is not None and vendor is not None      # else a problem was reported above
    hosts = tuple(
        h if h.flagperf_path else HostSpec(h.address, h.ssh_port, h.ssh_user, h.ssh_key, h.python, flagperf_path)
        for h in cluster.hosts
    )
    cluster = ClusterConfig(cluster.path, hosts, cluster.known_hosts, cluster.master_port, cluster.scheduler)
    return Config(test=test, cluster=cluster, vendor=vendor, source_root=source_root, container=container,
                  references=reference_files)


def _load_references(ck: _Checker, data, vendor, source_root) -> tuple:
    """(REFERENCES as given: a path, False or None; the reference files loaded). Without REFERENCES every file
    of ``vendors/<vendor>/references/`` is loaded; each problem in a file is a config problem naming it."""
    from flagperf.references import load_reference_dir, load_reference_file
    known = benchmark_names(source_root)
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
    if not _is("is_file", path):
        what = "is a directory" if _is("is_dir", path) else "does not exist"
        ck.add(data, "REFERENCES", f"expected a reference file (YAML, docs/references.md), {path} {what}")
        return path, ()
    ref, problems = load_reference_file(Path(path), known, need_match=False)
    ck.problems.extend(problems)
    return path, (ref,) if ref is not None else ()


def _load_cases(ck: _Checker, data, cluster, vendor, source_root) -> list:
    cases_map = data.get("CASES")
    if "CASES" not in data:
        ck.problems.append(f"{ck.path}: CASES: required key is missing; expected a mapping "
                           f"'model:framework:hw:nnodes:nproc:repeat': data_dir")
        return []
    if not isinstance(cases_map, dict) or not cases_map:
        ck.add(data, "CASES", "expected a non-empty mapping 'model:framework:hw:nnodes:nproc:repeat': data_dir")
        return []
    cases = []
    known = benchmark_names(source_root)
    for key, data_dir in cases_map.items():
        label = f"CASES[{key!r}]"
        try:
            case = CaseSpec.parse(key)
        except ValueError as exc:
            ck.add(cases_map, key, str(exc), label)
            continue
        if data_dir is not None and not isinstance(data_dir, str):
            ck.add(cases_map, key, f"expected the data directory as a string (or null), got {data_dir!r}", label)
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
        bench = source_root / "benchmarks" / case.model
        if case.model not in known:
            close = difflib.get_close_matches(case.model, known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
            ck.add(cases_map, key, f"model {case.model!r} has no benchmark ({bench}/main.py); {hint}", label)
        if vendor is not None and case.framework not in vendor.frameworks:
            ck.add(cases_map, key, f"framework {case.framework!r} is not provided by vendor {vendor.name!r}; "
                                   f"expected one of: {', '.join(vendor.frameworks)}", label)
        nnodes = len(cluster.hosts) if case.each and cluster is not None else case.nnodes
        if case.each and cluster is not None:
            _check_each(ck, cases_map, key, label, cluster)
            if resolved and any(h.is_local for h in cluster.hosts) and not _is("is_dir", resolved):
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
            if not _is("is_dir", resolved):
                ck.add(cases_map, key, f"data directory {resolved} does not exist on localhost", label)
        cases.append(CaseSpec(key, case.model, case.framework, case.hw, nnodes, case.nproc, case.repeat,
                              data_dir=resolved, each=case.each))
    return cases


def _check_each(ck: _Checker, cases_map, key, label, cluster) -> None:
    """An ``each`` case runs one job per host, host i's rank 0 listening on MASTER_PORT + i: every such port
    must exist."""
    count = len({h.address for h in cluster.hosts})
    if cluster.master_port + count - 1 > 65535:
        ck.add(cases_map, key, f"nnodes each: the {count} hosts listen on MASTER_PORT {cluster.master_port} to "
                               f"{cluster.master_port + count - 1}, past 65535; lower MASTER_PORT", label)


def default_cluster() -> ClusterConfig:
    return ClusterConfig(None, (HostSpec(LOCALHOST, None, None, None, sys.executable, ""),),
                         str(Path("~/.ssh/known_hosts").expanduser()), 29501)


def _load_cluster(path: Path | None, problems: list) -> ClusterConfig | None:
    if path is None:
        return default_cluster()
    data, yproblems = load_yaml_file(path)
    if yproblems:
        problems.extend(yproblems)
        return None
    if not isinstance(data, LineMap):
        problems.append(f"{path}: expected a mapping of cluster keys (HOSTS, SSH_PORT, ...)")
        return None
    ck = _Checker(path, problems)
    ck.unknown_keys(data, CLUSTER_KEYS)
    scheduler = ck.get(data, "SCHEDULER", str, "ssh")
    if registration(scheduler) is None:
        ck.add(data, "SCHEDULER", f"expected one of {', '.join(backend_names())}, got {scheduler!r}")
        scheduler = "ssh"
    port = _port(ck, data, "SSH_PORT", None)
    user = ck.get(data, "SSH_USER", str, None)
    key = ck.path_value(data, "SSH_KEY")
    known_hosts = ck.path_value(data, "KNOWN_HOSTS", str(Path("~/.ssh/known_hosts").expanduser()))
    master_port = _port(ck, data, "MASTER_PORT", 29501)
    python = ck.get(data, "PYTHON", str, None)
    hosts_raw = data.get("HOSTS")
    hosts = []
    if "HOSTS" not in data:
        problems.append(f"{path}: HOSTS: required key is missing; expected a list of addresses")
    elif not isinstance(hosts_raw, list) or not hosts_raw:
        ck.add(data, "HOSTS", "expected a non-empty list of addresses or {HOST: ...} mappings")
    elif len(hosts_raw) > MAX_HOSTS:
        ck.add(data, "HOSTS", f"expected at most {MAX_HOSTS} hosts, got {len(hosts_raw)}")
    else:
        for i, entry in enumerate(hosts_raw):
            label = f"HOSTS[{i}]"
            if isinstance(entry, str) and entry.strip():
                address, entry = entry.strip(), LineMap()
                entry.lines = {}
            elif isinstance(entry, LineMap):
                ck.unknown_keys(entry, HOST_KEYS, prefix=f"{label}.")
                address = ck.get(entry, "HOST", str, None, f"{label}.HOST")
                if not address:
                    problems.append(f"{path}: {label}: HOST is required in a host mapping")
                    continue
            else:
                problems.append(f"{where(path, data, 'HOSTS')}: {label}: expected an address string or a mapping "
                                f"with HOST, got {entry!r}")
                continue
            if len(address) > 253 or not re.fullmatch(r"[A-Za-z0-9_.:%\[\]-]+", address):
                problems.append(f"{where(path, data, 'HOSTS')}: {label}: {address!r} is not a host name or address")
                continue
            host_python = ck.get(entry, "PYTHON", str, None, f"{label}.PYTHON")
            if host_python is None:
                host_python = python or (sys.executable if address == LOCALHOST else "python3")
            hosts.append(HostSpec(
                address=address,
                ssh_port=_port(ck, entry, "SSH_PORT", port, f"{label}.SSH_PORT"),
                ssh_user=ck.get(entry, "SSH_USER", str, None, f"{label}.SSH_USER") or user,
                ssh_key=ck.path_value(entry, "SSH_KEY", key, f"{label}.SSH_KEY"),
                python=host_python,
                flagperf_path=_host_path(ck, entry, label),
            ))
    if not hosts:
        return None     # the problems are reported above; checking the cases against 0 hosts would only repeat them
    if any(not h.is_local for h in hosts) and Path(known_hosts).is_dir():
        ck.add(data, "KNOWN_HOSTS", f"expected a known_hosts file, {known_hosts} is a directory")
    return ClusterConfig(path, tuple(hosts), known_hosts, master_port or 29501, scheduler)


def _host_path(ck, entry, label) -> str:
    value = ck.get(entry, "FLAGPERF_PATH", str, None, f"{label}.FLAGPERF_PATH")
    if value is None:
        return ""
    # Remote paths are taken as written (absolute); only localhost paths resolve against the file.
    try:
        return str(resolve(ck.path, value)) if not value.startswith("/") else str(_checked_remote(value))
    except ValueError as exc:
        ck.add(entry, "FLAGPERF_PATH", str(exc), f"{label}.FLAGPERF_PATH")
        return ""


def _checked_remote(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"a path may not hold a NUL character, got {value!r}")
    _check_length(value, value)
    return value


def _port(ck, mapping, key, default, label=None) -> int | None:
    value = ck.get(mapping, key, int, default, label)
    if value is not None and not 1 <= value <= 65535:
        ck.add(mapping, key, f"expected a TCP port 1-65535, got {value}", label)
        return default
    return value
