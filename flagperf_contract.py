"""The contract between the flagperf driver and what runs on the hosts.

One module, stdlib only, importable by Python >= 3.9. The driver imports it as ``flagperf_contract``; the node
launcher, the monitor and the benchmark harness import the copy deployed at the root of ``FLAGPERF_PATH``
(they put that folder on ``sys.path``). It holds:

- the schema ids of every file exchanged (``SCHEMAS``),
- the names of the files in a node directory,
- typed records for them: :class:`LaunchSpec` (``launch.json``), :class:`RankReport` (``ranks.json``),
  :class:`NodeStatus` (``node_status.json``, the live state of a node's ranks),
  :class:`MonitorStatus` (``monitor_status.json``) and :class:`Finished` (a rank's PerfLog FINISHED line),
  each with ``from_dict`` that checks the schema and types and raises :class:`ContractError`, and ``to_dict``,
- :func:`validate_finished`, the one validator of FINISHED payloads, used by the harness before it prints the
  line and by the driver when it reads it back,
- :func:`now_iso` (timestamps in every log) and :func:`write_json_atomic`.

docs/results.md describes the files; docs/benchmarks.md the PerfLog lines.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

# ---------------------------------------------------------------------------------------------- schema ids
LAUNCH_SCHEMA = "flagperf.launch/1"
RANKS_SCHEMA = "flagperf.ranks/1"
MONITOR_STATUS_SCHEMA = "flagperf.monitor-status/1"
PERFLOG_SCHEMA = "flagperf.perflog/1"
HEALTH_SCHEMA = "flagperf.health/1"
NODE_STATUS_SCHEMA = "flagperf.node-status/1"
SCHEMAS = (LAUNCH_SCHEMA, RANKS_SCHEMA, MONITOR_STATUS_SCHEMA, PERFLOG_SCHEMA, HEALTH_SCHEMA, NODE_STATUS_SCHEMA)

# ------------------------------------------------------------------------------- files in a node directory
LAUNCH_FILE = "launch.json"             # LaunchSpec, written by the driver
CASE_CONFIG_FILE = "case_config.json"   # the merged case config, read by the ranks
RANKS_FILE = "ranks.json"               # RankReport, written by the node launcher
NODE_STATUS_FILE = "node_status.json"   # NodeStatus, rewritten by the node launcher while its ranks run
LAUNCHER_LOG = "launcher.log"           # the node launcher's own log
LAUNCHER_OUTPUT = "launcher.out.log"    # the node launcher's stdout/stderr (bare runtime)
CONTAINER_OUTPUT = "container.log"      # the container's stdout/stderr (docker runtime)
ENV_PREPARE_LOG = "env_prepare.log"     # pip install / environment_variables.sh inside a container
MONITOR_STATUS_FILE = "monitor_status.json"
MONITOR_LOG = "monitor.log"
MONITOR_OUTPUT = "monitor.out.log"      # the monitor's stdout/stderr
NATIVE_MONITOR_DIR = "flagperf"         # flagperf's own monitor data files under MONITOR_FORMAT: flagperf (FlagPerf's
                                        # files then take the node directory's top level, under FlagPerf's names)
SYS_INFO_FILE = "sys_info.log"          # the host's OS, CPU, memory, accelerators and versions (monitor, at start)
HEALTH_FILE = "health.json"             # passive health of the GPUs and the host (monitor, monitors/health.py)
NODE_COMMAND_LOG = "node.out.log"       # stdout+stderr of a node command (launch mode "node")
HOST_SENSORS = ("cpu", "mem", "pwr")    # every other <name>_monitor.log is the accelerator file of a vendor

PERFLOG_PREFIX = "[PerfLog] "
CHECK_FAILED_EXIT = 3                   # a benchmark whose result is wrong exits with this
CONFIG_ERROR_EXIT = 2                   # a benchmark that cannot use its case config exits with this
LAUNCHER_SIGNALLED_EXIT = 143           # the node launcher was stopped by a signal
LAUNCHER_BAD_SPEC_EXIT = 2
LAUNCHER_CANNOT_WRITE_EXIT = 4          # the node launcher could not write its node directory (disk full, read-only)
# How a node's processes start: "ranks", one process per rank (argv run nproc times, RANK/LOCAL_RANK set);
# "node", one command per node (argv run once, e.g. torchrun or `bash main.sh`, which starts the ranks itself);
# "mpi", one mpirun on node 0 that starts every node's ranks (the other nodes' launchers start nothing and wait).
LAUNCH_MODES = ("ranks", "node", "mpi")


def rank_log_name(rank: int) -> str:
    return "rank%d.out.log" % rank


def rank_exit_name(rank: int) -> str:
    """Launch mode "mpi": the file a rank's wrapper writes when the rank ended: ``<exit code> <stopped 0|1>``."""
    return "rank%d.exit" % rank


def monitor_file_name(sensor: str, vendor: str) -> str:
    """``cpu_monitor.log``, ``mem_monitor.log``, ``pwr_monitor.log``; the accelerator sensor is named after
    the vendor (``nvidia_monitor.log``), as FlagPerf names it."""
    return "%s_monitor.log" % (vendor if sensor == "gpu" else sensor)


class ContractError(ValueError):
    """A file or line does not follow its schema; the message says which file (when known) and what is wrong."""


def now_iso() -> str:
    """Local time with milliseconds and UTC offset: 2026-11-23T10:00:00.123+00:00."""
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


def write_atomic(path, data, mode: int | None = None) -> None:
    """Write ``data`` (str as UTF-8, or bytes) to a temporary file beside ``path`` and rename it over ``path``:
    readers see the old file or the whole new one, never a part. The one atomic write of the project (driver and
    hosts). The temporary file is created exclusively under an unpredictable name and never through a link, so a
    link planted beside ``path`` in a shared folder is not written through; ``mode`` sets its permission bits
    (else 0o666 less the umask) before the rename."""
    path = os.fspath(path)
    tmp = "%s.tmp.%d.%s" % (path, os.getpid(), os.urandom(6).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(path, obj: Any, indent: int = 1) -> None:
    """JSON (no NaN, no Infinity) through write_atomic."""
    write_atomic(path, json.dumps(obj, indent=indent, allow_nan=False, default=str) + "\n")


JSON_FILE_MAX_BYTES = 16 * 1024 * 1024    # a record file larger than this is not one of ours
JSON_MAX_DEPTH = 64                       # nor one nested deeper than this (lists and objects)


def json_problem(value, max_depth: int = JSON_MAX_DEPTH, notes: Optional[List[str]] = None) -> Optional[str]:
    """Why the parsed JSON ``value`` is not acceptable ("nested deeper than N"), or None. Walks the value once,
    without recursion. With ``notes`` (a list), every non-finite number (NaN, Infinity, or a literal too large
    for a float) is replaced by None in place, and a note naming where it stood is appended."""
    stack: List[Tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        if depth > max_depth:
            return "nested deeper than %d levels" % max_depth
        for key, item in items:
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1, _where(where, key) if notes is not None else ""))
            elif notes is not None and not _float_sized(item):
                node[key] = None
                notes.append("%s: %s read as absent" % (_where(where, key), _short(item, 20)))
    return None


FLOAT_MAX_INT = 2 ** 1023     # an integer at least this large does not convert to a float


def _float_sized(value) -> bool:
    """False for a number no float can hold: NaN, an infinity, an integer of 2**1023 or more; True otherwise."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -FLOAT_MAX_INT < value < FLOAT_MAX_INT
    return True


def _where(where: str, key) -> str:
    """``cases[0].rounds``: a list index in brackets, an object key after a dot."""
    if isinstance(key, int):
        return "%s[%d]" % (where, key)
    return "%s.%s" % (where, key) if where else str(key)


def loads_bounded(text, max_depth: int = JSON_MAX_DEPTH, notes: Optional[List[str]] = None):
    """json.loads with a nesting bound: ValueError ("not JSON: ...", "nested deeper than N levels") for text that
    is not JSON or nests deeper than ``max_depth``; never RecursionError. ``notes``: see :func:`json_problem`
    (NaN and Infinity become None, each with a note)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested deeper than %d levels" % max_depth) from None
    except ValueError as exc:
        raise ValueError("not JSON: %s" % exc) from None
    problem = json_problem(value, max_depth, notes)
    if problem:
        raise ValueError(problem)
    return value


def read_json_data(path, max_bytes: int = JSON_FILE_MAX_BYTES, notes: Optional[List[str]] = None,
                   max_depth: int = JSON_MAX_DEPTH):
    """The JSON value in ``path``. Only a regular file is read (never through a symlink, never a FIFO or device:
    O_NOFOLLOW|O_NONBLOCK and fstat), and at most ``max_bytes`` of it, nested at most ``max_depth`` deep;
    anything else, and text that is not JSON, is a ContractError naming the file ("unreadable: ..."). A missing
    file raises FileNotFoundError. With ``notes`` (a list), NaN and Infinity are read as None, each with a note
    (:func:`json_problem`)."""
    import stat
    path = os.fspath(path)
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file (%s)" % _file_kind(st.st_mode))
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise OSError("not a regular file (%s)" % _file_kind(st.st_mode))
            if st.st_size > max_bytes:
                raise OSError("larger than %d bytes (%d)" % (max_bytes, st.st_size))
            raw = f.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise OSError("larger than %d bytes" % max_bytes)
        return loads_bounded(raw.decode("utf-8"), max_depth, notes)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, RecursionError, MemoryError) as exc:
        raise ContractError("%s: unreadable: %s" % (path, _short(exc, 200))) from None


def read_json_file(path, record_type):
    """Read ``path`` (read_json_data) and build ``record_type`` from it; ContractError names the file on any
    problem."""
    try:
        data = read_json_data(path)
    except FileNotFoundError:
        raise ContractError("%s: missing" % os.fspath(path)) from None
    try:
        return record_type.from_dict(data)
    except ContractError as exc:
        raise ContractError("%s: %s" % (os.fspath(path), exc)) from None


def _short(value, limit: int = 80) -> str:
    """``str(value)`` (``repr`` for anything but an exception) cut to ``limit`` characters, for a message."""
    text = str(value) if isinstance(value, BaseException) else _safe_repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _safe_repr(value) -> str:
    """repr of a small value; a large or nested one is named by its type and length (a repr of it could be
    huge or recurse deeply)."""
    if isinstance(value, (dict, list, tuple)):
        return "%s of %d items" % ("an object" if isinstance(value, dict) else "a list", len(value))
    if isinstance(value, str) and len(value) > 200:
        return repr(value[:200]) + "..."
    return repr(value)


def _file_kind(mode: int) -> str:
    import stat
    for test, kind in ((stat.S_ISLNK, "a symlink, not followed"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return kind
    return "a special file"


# ------------------------------------------------------------------------------------------ type checking
_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
          dict: "an object", type(None): "null"}


def _is(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in types:
        return False
    if float in types and isinstance(value, (int, float)) and not isinstance(value, bool):
        return not isinstance(value, float) or math.isfinite(value)
    return isinstance(value, types)


def _describe(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(_NAMES.get(t, t.__name__) for t in types if not (t is int and float in types))


def _fields(data, spec: Dict[str, Any], required: Tuple[str, ...], what: str) -> List[str]:
    """Problems of ``data`` against ``spec`` ({key: types}); keys in ``required`` must be present."""
    if not isinstance(data, dict):
        return ["expected %s object, got %s" % (what, type(data).__name__)]
    problems = []
    for key, types in spec.items():
        if key not in data:
            if key in required:
                problems.append("missing key %r" % key)
            continue
        if not _is(data[key], types):
            problems.append("%r: expected %s, got %r" % (key, _describe(types), data[key]))
    return problems


def _check_schema(data, schema: str) -> None:
    if not isinstance(data, dict):
        raise ContractError("expected a JSON object with schema %r" % schema)
    got = data.get("schema")
    if got != schema:
        raise ContractError("expected schema %r, got %r" % (schema, got))


def _raise(problems: List[str]) -> None:
    if problems:
        raise ContractError("; ".join(problems))


# --------------------------------------------------------------------------------------------- launch.json
_NUM = (int, float)
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))


@dataclass(frozen=True)
class LaunchSpec:
    """What one node launcher starts: ``nproc`` ranks of ``argv`` in ``cwd`` with ``env``, logs in ``out_dir``."""

    case: str                       # the CASES key
    case_name: str                  # the case's directory name
    framework: str
    round: int
    node_rank: int
    nnodes: int
    nproc: int
    ranks: List[int]                # global ranks of this node
    argv: List[str]                 # every rank's argv
    cwd: str
    env: Dict[str, str]             # set for every rank (MASTER_ADDR, WORLD_SIZE, ...)
    out_dir: str                    # the node directory
    env_defaults: Dict[str, str] = field(default_factory=dict)   # set unless the environment has them
    visible_devices_env: Optional[str] = None
    visible_devices: str = ""
    data_dir: Optional[str] = None
    grace_s: float = 10.0           # SIGTERM to SIGKILL when stopping ranks
    container_name: Optional[str] = None
    mode: str = "ranks"             # LAUNCH_MODES: argv once per rank, or once per node

    _TYPES = {"case": str, "case_name": str, "framework": str, "round": int, "node_rank": int, "nnodes": int,
              "nproc": int, "ranks": list, "argv": list, "cwd": str, "env": dict, "out_dir": str,
              "env_defaults": dict, "visible_devices_env": _OPT_STR, "visible_devices": str, "data_dir": _OPT_STR,
              "grace_s": _NUM, "container_name": _OPT_STR, "mode": str}
    _REQUIRED = ("case", "case_name", "framework", "round", "node_rank", "nnodes", "nproc", "ranks", "argv",
                 "cwd", "env", "out_dir")

    def to_dict(self) -> dict:
        d = {"schema": LAUNCH_SCHEMA}
        d.update(asdict(self))
        return d

    @classmethod
    def from_dict(cls, data) -> "LaunchSpec":
        _check_schema(data, LAUNCH_SCHEMA)
        problems = _fields(data, cls._TYPES, cls._REQUIRED, "a launch spec")
        if not problems:
            if not data["argv"] or not all(isinstance(a, str) for a in data["argv"]):
                problems.append("'argv': expected a non-empty list of strings")
            if not all(_is(r, int) for r in data["ranks"]) or len(data["ranks"]) != data["nproc"]:
                problems.append("'ranks': expected nproc (%r) integers" % data["nproc"])
            if data.get("mode", "ranks") not in LAUNCH_MODES:
                problems.append("'mode': expected one of %s, got %r" % (", ".join(LAUNCH_MODES), data["mode"]))
            for key in ("env", "env_defaults"):
                if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.get(key, {}).items()):
                    problems.append("%r: expected an object of strings" % key)
        _raise(problems)
        return cls(**{k: data[k] for k in cls._TYPES if k in data})


# ---------------------------------------------------------------------------------------------- ranks.json
@dataclass(frozen=True)
class RankRecord:
    rank: int
    local_rank: int
    pid: Optional[int]
    exit_code: Optional[int]            # None: never ended (should not happen); < 0: killed by signal -code
    started: Optional[str] = None
    ended: Optional[str] = None
    duration_s: Optional[float] = None
    stopped_by_launcher: bool = False   # it was still running when the launcher stopped the ranks

    _TYPES = {"rank": int, "local_rank": int, "pid": _OPT_INT, "exit_code": _OPT_INT, "started": _OPT_STR,
              "ended": _OPT_STR, "duration_s": (int, float, type(None)), "stopped_by_launcher": (bool, type(None))}
    _REQUIRED = ("rank", "local_rank", "pid", "exit_code")

    @classmethod
    def from_dict(cls, data) -> "RankRecord":
        _raise(_fields(data, cls._TYPES, cls._REQUIRED, "a rank record"))
        kw = {k: data[k] for k in cls._TYPES if k in data}
        kw["stopped_by_launcher"] = bool(kw.get("stopped_by_launcher"))
        return cls(**kw)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RankReport:
    """ranks.json: every rank of one node, and which rank failed first."""

    node_rank: int
    ranks: List[RankRecord]
    first_failure: Optional[int] = None     # the global rank that failed first (None: none failed)
    stopped: Optional[str] = None           # why the launcher stopped the ranks, if it did
    signalled: bool = False                 # the launcher itself was stopped by a signal
    # processes the ranks left behind (they carried the launcher's token) and the launcher ended after them:
    # {"pid": int, "cmdline": str (cut), "signal": "SIGTERM" | "SIGKILL", "survived": true (only if it did)}
    reaped: List[Dict[str, Any]] = field(default_factory=list)
    # "ranks": one record per rank; "node": one record, the node command (its ``rank`` is the node's first
    # global rank, its ``local_rank`` 0), which started the node's ranks itself; "mpi": one record per rank, from
    # the rank<R>.exit files the ranks' wrapper wrote (pid null: mpirun started them)
    mode: str = "ranks"

    _TYPES = {"node_rank": int, "ranks": list, "first_failure": _OPT_INT, "stopped": _OPT_STR,
              "signalled": bool, "reaped": list, "mode": str}
    _REQUIRED = ("node_rank", "ranks")
    _REAPED_TYPES = {"pid": int, "cmdline": str, "signal": _OPT_STR, "survived": bool}

    @classmethod
    def from_dict(cls, data) -> "RankReport":
        _check_schema(data, RANKS_SCHEMA)
        _raise(_fields(data, cls._TYPES, cls._REQUIRED, "a rank report"))
        ranks = []
        for i, r in enumerate(data["ranks"]):
            try:
                ranks.append(RankRecord.from_dict(r))
            except ContractError as exc:
                raise ContractError("ranks[%d]: %s" % (i, exc)) from None
        reaped = data.get("reaped", [])     # absent in files written before it existed
        for i, p in enumerate(reaped):
            problems = _fields(p, cls._REAPED_TYPES, ("pid",), "a reaped process")
            if problems:
                raise ContractError("reaped[%d]: %s" % (i, "; ".join(problems)))
        mode = data.get("mode", "ranks")    # absent in files written before it existed
        if mode not in LAUNCH_MODES:
            raise ContractError("'mode': expected one of %s, got %r" % (", ".join(LAUNCH_MODES), mode))
        return cls(data["node_rank"], ranks, data.get("first_failure"), data.get("stopped"),
                   bool(data.get("signalled", False)), [dict(p) for p in reaped], mode)

    def to_dict(self) -> dict:
        return {"schema": RANKS_SCHEMA, "node_rank": self.node_rank, "mode": self.mode, "stopped": self.stopped,
                "signalled": self.signalled, "first_failure": self.first_failure,
                "ranks": [r.to_dict() for r in self.ranks], "reaped": [dict(p) for p in self.reaped]}

    def rank(self, rank: int) -> Optional[RankRecord]:
        for r in self.ranks:
            if r.rank == rank:
                return r
        return None


# ----------------------------------------------------------------------------------------- node_status.json
RANK_STATES = ("running", "exited")
NODE_STATUS_MAX_BYTES = 64 * 1024       # a larger node_status.json is not read (the driver reads at most this)
STEP_FIELDS_MAX = 12                    # scalar fields of the latest STEP event kept in node_status.json
STEP_TEXT_MAX = 64                      # characters of a string field kept


@dataclass(frozen=True)
class RankState:
    rank: int
    state: str                          # RANK_STATES
    exit_code: Optional[int] = None     # once exited; < 0: killed by signal -code

    _TYPES = {"rank": int, "state": str, "exit_code": _OPT_INT}
    _REQUIRED = ("rank", "state")

    @classmethod
    def from_dict(cls, data) -> "RankState":
        problems = _fields(data, cls._TYPES, cls._REQUIRED, "a rank state")
        if not problems and data["state"] not in RANK_STATES:
            problems.append("'state': expected one of %s, got %s" % (", ".join(RANK_STATES), _short(data["state"])))
        _raise(problems)
        return cls(data["rank"], data["state"], data.get("exit_code"))


def step_fields(record: dict) -> Dict[str, Any]:
    """The scalar fields of a STEP event worth showing live (``event``, ``time`` and ``rank`` left out), at most
    STEP_FIELDS_MAX, strings cut to STEP_TEXT_MAX characters."""
    out: Dict[str, Any] = {}
    for k, v in record.items():
        if k in ("event", "time", "rank") or not isinstance(k, str) or len(out) >= STEP_FIELDS_MAX:
            continue
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[k[:STEP_TEXT_MAX]] = v
        elif isinstance(v, str):
            out[k[:STEP_TEXT_MAX]] = v[:STEP_TEXT_MAX]
    return out


@dataclass(frozen=True)
class NodeStatus:
    """node_status.json: what the node launcher knows while its ranks run (rewritten on every rank start and
    exit, and when the node's first rank logs a new STEP event); ranks.json is the final word."""

    node_rank: int
    ranks: List[RankState]
    step: Dict[str, Any] = field(default_factory=dict)  # step_fields of the latest STEP of ``step_rank``
    step_rank: Optional[int] = None
    updated: Optional[str] = None

    _TYPES = {"node_rank": int, "ranks": list, "step": dict, "step_rank": _OPT_INT, "updated": _OPT_STR}
    _REQUIRED = ("node_rank", "ranks")

    @classmethod
    def from_dict(cls, data) -> "NodeStatus":
        _check_schema(data, NODE_STATUS_SCHEMA)
        _raise(_fields(data, cls._TYPES, cls._REQUIRED, "a node status"))
        ranks = []
        for i, r in enumerate(data["ranks"][:PER_RANK_MAX]):
            try:
                ranks.append(RankState.from_dict(r))
            except ContractError as exc:
                raise ContractError("ranks[%d]: %s" % (i, exc)) from None
        return cls(data["node_rank"], ranks, step_fields(data.get("step", {})), data.get("step_rank"),
                   data.get("updated"))

    def to_dict(self) -> dict:
        return {"schema": NODE_STATUS_SCHEMA, "node_rank": self.node_rank, "updated": self.updated,
                "ranks": [{"rank": r.rank, "state": r.state, "exit_code": r.exit_code} for r in self.ranks],
                "step_rank": self.step_rank, "step": dict(self.step)}


# ------------------------------------------------------------------------------------- monitor_status.json
@dataclass(frozen=True)
class SensorStatus:
    available: bool
    reason: Optional[str] = None        # why it is unavailable
    source: Optional[str] = None        # psutil, rapl, hwmon, nvml, npu-smi, ...
    file: Optional[str] = None          # its data file in the node directory
    extra: Dict[str, Any] = field(default_factory=dict)  # source-specific (devices, zones, ...)

    @classmethod
    def from_dict(cls, data) -> "SensorStatus":
        _raise(_fields(data, {"available": bool, "reason": _OPT_STR, "source": _OPT_STR, "file": _OPT_STR},
                       ("available",), "a sensor status"))
        extra = {k: v for k, v in data.items() if k not in ("available", "reason", "source", "file")}
        return cls(data["available"], data.get("reason"), data.get("source"), data.get("file"), extra)

    def to_dict(self) -> dict:
        d: Dict[str, Any] = {"available": self.available}
        for key in ("reason", "source", "file"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        d.update(self.extra)
        return d


@dataclass(frozen=True)
class MonitorStatus:
    """monitor_status.json: which sensors a node's monitor had, and how it ended."""

    pid: int
    interval_s: float
    started: str
    sensors: Dict[str, SensorStatus]
    run_id: Optional[str] = None
    stopped: Optional[str] = None
    stop_reason: Optional[str] = None
    samples: Optional[int] = None
    sample_ms_mean: Optional[float] = None

    _TYPES = {"pid": int, "interval_s": _NUM, "started": str, "sensors": dict, "run_id": _OPT_STR,
              "stopped": _OPT_STR, "stop_reason": _OPT_STR, "samples": _OPT_INT,
              "sample_ms_mean": (int, float, type(None))}
    _REQUIRED = ("pid", "interval_s", "started", "sensors")

    @classmethod
    def from_dict(cls, data) -> "MonitorStatus":
        _check_schema(data, MONITOR_STATUS_SCHEMA)
        _raise(_fields(data, cls._TYPES, cls._REQUIRED, "a monitor status"))
        sensors = {}
        for name, s in data["sensors"].items():
            try:
                sensors[name] = SensorStatus.from_dict(s)
            except ContractError as exc:
                raise ContractError("sensors[%r]: %s" % (name, exc)) from None
        kw = {k: data[k] for k in cls._TYPES if k in data}
        kw["sensors"] = sensors
        return cls(**kw)

    def to_dict(self) -> dict:
        d: Dict[str, Any] = {"schema": MONITOR_STATUS_SCHEMA}
        for key in self._TYPES:
            value = getattr(self, key)
            if key == "sensors":
                value = {n: s.to_dict() for n, s in value.items()}
            if value is not None or key in self._REQUIRED:
                d[key] = value
        return d


# --------------------------------------------------------------------------------------- PerfLog FINISHED
_FINISHED_TYPES = {"schema": str, "benchmark": str, "metric": str, "value": _NUM, "unit": str,
                   "higher_is_better": bool, "e2e_time": _NUM, "metrics": dict, "checks": dict, "env": dict}


FINISHED_MAX_BYTES = 2 * 1024 * 1024     # a FINISHED payload larger than this (as JSON) is refused
FINISHED_MAX_DEPTH = 32                  # and one nested deeper
PER_RANK_MAX = 65536                     # checks.details.per_rank: at most this many values


def finished_bounds_problem(payload) -> Optional[str]:
    """Why a FINISHED payload is too deep or too large to keep ("nested deeper than 32 levels", "larger than
    ... bytes"), or None. Checked before anything else reads the payload."""
    problem = json_problem(payload, FINISHED_MAX_DEPTH)
    if problem:
        return problem
    try:
        size = len(json.dumps(payload, allow_nan=True, default=str))
    except (ValueError, TypeError, RecursionError) as exc:
        return "not JSON data: %s" % _short(exc)
    if size > FINISHED_MAX_BYTES:
        return "larger than %d bytes as JSON (%d)" % (FINISHED_MAX_BYTES, size)
    return None


def per_rank_problem(per_rank) -> Optional[str]:
    """Why ``checks.details.per_rank`` is malformed, or None: it is ``{"metric": string, "values": [finite
    numbers]}`` with at most PER_RANK_MAX values."""
    if not isinstance(per_rank, dict):
        return "checks.details.per_rank: expected an object, got %s" % _short(per_rank)
    if not isinstance(per_rank.get("metric"), str):
        return "checks.details.per_rank.metric: expected a string, got %s" % _short(per_rank.get("metric"))
    values = per_rank.get("values")
    if not isinstance(values, list):
        return "checks.details.per_rank.values: expected a list, got %s" % _short(values)
    if len(values) > PER_RANK_MAX:
        return "checks.details.per_rank.values: %d values, at most %d" % (len(values), PER_RANK_MAX)
    bad = next((i for i, v in enumerate(values) if not (_is(v, _NUM) and _float_sized(v))), None)
    if bad is not None:
        return "checks.details.per_rank.values[%d]: expected a finite number, got %s" % (bad, _short(values[bad]))
    return None


def validate_finished(payload) -> List[str]:
    """Every problem of a FINISHED payload against flagperf.perflog/1; [] when it is valid.

    Rules: at most FINISHED_MAX_BYTES as JSON and FINISHED_MAX_DEPTH deep; every key of the schema is present
    with its type; ``value`` and ``e2e_time`` are finite numbers; each ``metrics`` entry is
    ``{"value": finite number, "unit": string}``; ``checks`` is ``{"passed": true, "details": {...}}`` (a
    failed check is a CHECK_FAILED line, never a FINISHED one); ``checks.details.per_rank``, when present, is
    ``{"metric": string, "values": [finite numbers]}`` (:func:`per_rank_problem`).
    """
    if not isinstance(payload, dict):
        return ["expected a FINISHED object, got %s" % type(payload).__name__]
    bounds = finished_bounds_problem(payload)
    if bounds:
        return [bounds]
    problems = []
    for key, types in _FINISHED_TYPES.items():
        if key not in payload:
            problems.append("missing key %r" % key)
        elif not _is(payload[key], types) or not _float_sized(payload[key]):
            problems.append("%r: expected %s, got %s" % (key, _describe(types), _short(payload[key])))
    if isinstance(payload.get("schema"), str) and payload["schema"] != PERFLOG_SCHEMA:
        problems.append("unsupported schema %s (expected %r)" % (_short(payload["schema"]), PERFLOG_SCHEMA))
    for key in ("benchmark", "metric"):
        if payload.get(key) == "":
            problems.append("%r: expected a non-empty string" % key)
    metrics = payload.get("metrics")
    for name, m in metrics.items() if isinstance(metrics, dict) else ():
        if not (isinstance(m, dict) and _is(m.get("value"), _NUM) and _float_sized(m.get("value"))
                and isinstance(m.get("unit"), str)):
            problems.append("metrics[%s]: expected {'value': finite number, 'unit': string}, got %s"
                            % (_short(name), _short(m)))
    checks = payload.get("checks")
    if isinstance(checks, dict):
        if checks.get("passed") is not True:
            problems.append("checks.passed is not true")
        details = checks.get("details", {})
        if not isinstance(details, dict):
            problems.append("checks.details: expected an object")
        elif "per_rank" in details:
            problem = per_rank_problem(details["per_rank"])
            if problem:
                problems.append(problem)
    return problems


@dataclass(frozen=True)
class Finished:
    """A valid FINISHED payload: the headline figure of a round, its named metrics, checks and environment."""

    benchmark: str
    metric: str
    value: float
    unit: str
    higher_is_better: bool
    e2e_time: float
    metrics: Dict[str, Dict[str, Any]]
    checks: Dict[str, Any]
    env: Dict[str, Any]
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the whole record

    @classmethod
    def from_dict(cls, data) -> "Finished":
        _raise(validate_finished(data))
        return cls(data["benchmark"], data["metric"], data["value"], data["unit"], data["higher_is_better"],
                   data["e2e_time"], data["metrics"], data["checks"], data["env"], dict(data))

    def to_dict(self) -> dict:
        return dict(self.raw) if self.raw else dict(
            schema=PERFLOG_SCHEMA, benchmark=self.benchmark, metric=self.metric, value=self.value, unit=self.unit,
            higher_is_better=self.higher_is_better, e2e_time=self.e2e_time, metrics=self.metrics,
            checks=self.checks, env=self.env)


def perflog_line(record: dict) -> str:
    """The text of one PerfLog line (strict JSON: NaN and infinities are refused)."""
    return PERFLOG_PREFIX + json.dumps(record, allow_nan=False)


PERFLOG_LINE_MAX_CHARS = 4 * 1024 * 1024  # a longer PerfLog line is refused unread
PERFLOG_MAX_DEPTH = FINISHED_MAX_DEPTH + 2  # a record nested deeper is refused


def read_perflog_line(line: str) -> Tuple[Optional[dict], Optional[str]]:
    """(record, None) for a ``[PerfLog] {json}`` line; (None, None) for any other line (or a cut-off one, text
    that is not JSON); (None, why) for a PerfLog line refused for its size or nesting depth."""
    i = line.find(PERFLOG_PREFIX)
    if i < 0:
        return None, None
    if len(line) - i > PERFLOG_LINE_MAX_CHARS:
        return None, "a PerfLog line longer than %d characters" % PERFLOG_LINE_MAX_CHARS
    try:
        record = json.loads(line[i + len(PERFLOG_PREFIX):])
    except RecursionError:
        return None, "a PerfLog line nested deeper than %d levels" % PERFLOG_MAX_DEPTH
    except ValueError:
        return None, None
    problem = json_problem(record, PERFLOG_MAX_DEPTH)
    if problem:
        return None, "a PerfLog line %s" % problem
    if isinstance(record, dict) and isinstance(record.get("event"), str):
        return record, None
    return None, None


def parse_perflog_line(line: str) -> Optional[dict]:
    """The record of a ``[PerfLog] {json}`` line, or None for any other line (or a cut-off one, or one refused
    for its size or depth: :func:`read_perflog_line`)."""
    return read_perflog_line(line)[0]


# ------------------------------------------------------------------------------------------ Slurm placeholders
# A Slurm job's MASTER_PORT, derived from its job id when the cluster config sets none, and the placeholders of
# the node specs (``{slurm-node<k>}``, the placeholder port) filled in: the driver (flagperf.backends.slurm)
# and the node (launcher/slurm_node.py) do it with these same functions.
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000     # below Linux's ephemeral ports


def slurm_derived_port(job_id) -> int:
    return SLURM_PORT_BASE + int(job_id) % SLURM_PORT_SPAN


def substitute_placeholders(value, table, port=None):
    """``value`` (JSON-like data) with every key of ``table`` replaced by its value in every string, and ``port``
    ((placeholder, real), both strings) replaced where it stands as a whole number."""
    if isinstance(value, str):
        for old, new in table.items():
            value = value.replace(old, new)
        if port is not None:
            value = re.sub(r"(?<![0-9])%s(?![0-9])" % re.escape(port[0]), port[1], value)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(substitute_placeholders(v, table, port) for v in value)
    if isinstance(value, dict):
        return {substitute_placeholders(k, table, port): substitute_placeholders(v, table, port)
                for k, v in value.items()}
    return value
