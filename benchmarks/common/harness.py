"""Shared helpers for flagperf benchmarks (stdlib + torch only).

See docs/benchmarks.md for the contract: argv, environment, PerfLog lines,
the FINISHED schema ``flagperf.perflog/1`` and CHECK_FAILED + exit status 3. The schema id, the line prefix,
the exit statuses and the one FINISHED validator come from flagperf_contract, at the root of FLAGPERF_PATH
(the folder that holds benchmarks/), which this module puts on sys.path.

torch is imported lazily so that a benchmark can emit INIT_START before paying
for ``import torch``:

    import harness
    log = harness.PerfLog(benchmark="x")
    log.event("INIT_START")
    args, cfg = harness.parse_args()
    keys = harness.CaseKeys(cfg, "x")           # the case's keys: typed, defaults, clear config errors
    timing = keys.timing(warmup=5, budget_s=1.0)
    ctx = harness.setup_distributed(cfg)
    budget = harness.BudgetReport(timing, windows=1)
    t = budget.time("window", fn, ctx, label="x")   # warm-up, calibration, device-event samples on the budget

Test hook: the environment variable FLAGPERF_TEST_INJECT="<benchmark>:<kind>" is set by the tests only (never
by a case config). It makes a benchmark's result wrong (``result``) or its convergence target unreachable
(``target``), so that the tests see its check fail, or makes local rank 1 of every node slow in its timed
window (``slow``), so that the tests see the node's spread flagged; see test_fault.
"""
import argparse
import datetime
import importlib
import inspect
import json
import math
import os
import platform
import re
import socket
import statistics
import sys
import time

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from flagperf_contract import (CHECK_FAILED_EXIT, CONFIG_ERROR_EXIT, PERFLOG_SCHEMA,  # noqa: E402
                               perflog_line, validate_finished)

# torch device types (FLAGPERF_DEVICE) and torch.distributed backends (FLAGPERF_DIST_BACKEND); each device's
# own backend is its default, gloo goes with any device. Keep in step with flagperf/vendors.py (TORCH_DEVICES,
# DIST_BACKENDS, DEVICE_BACKEND; a unit test compares them).
DEVICE_TYPES = ("cpu", "cuda", "npu", "mlu", "xpu", "musa")
DIST_BACKENDS = ("nccl", "gloo", "hccl", "cncl", "xccl", "mccl")
DEVICE_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl", "mlu": "cncl", "xpu": "xccl", "musa": "mccl"}


# --------------------------------------------------------------------------- args / config

def parse_args(argv=None):
    """Parse the launcher's argv and load the JSON case config: returns (args, cfg)."""
    p = argparse.ArgumentParser(description="flagperf benchmark rank")
    p.add_argument("--case-config", required=True, help="merged case configuration (JSON)")
    p.add_argument("--data-dir", required=True, help="data directory (may be unused)")
    p.add_argument("--result-dir", required=True, help="per-node result directory")
    args = p.parse_args(argv)
    try:
        with open(args.case_config, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        config_error(f"cannot read case config {args.case_config}: {e}")
    if not isinstance(cfg, dict):
        config_error(f"case config {args.case_config} is not a JSON object")
    os.makedirs(args.result_dir, exist_ok=True)
    return args, cfg


def config_error(msg):
    """A case configuration the benchmark cannot run: message on stderr, exit 2."""
    print(f"config error: {msg}", file=sys.stderr, flush=True)
    sys.exit(CONFIG_ERROR_EXIT)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class CaseKeys:
    """A case's configuration (the JSON object of parse_args), read key by key: each reader returns the typed
    value, or the default when the key is absent, and a value it cannot take is a config error
    ``<benchmark>: <key> must be ..., got ...`` (exit 2). Every benchmark reads its keys this way."""

    def __init__(self, cfg, name):
        self.cfg, self.name = cfg, name

    def error(self, msg):
        """A config error about this benchmark's case: ``<benchmark>: <msg>``. Never returns."""
        config_error(f"{self.name}: {msg}")

    def check_int(self, key, v, minimum=1):
        """``v`` when it is an integer >= ``minimum`` (a bool is not), else a config error naming ``key``."""
        if not _is_int(v) or v < minimum:
            self.error(f"{key} must be an integer >= {minimum}, got {v!r}")
        return v

    def int(self, key, default, minimum=1):
        """The integer ``cfg[key]`` (``default`` when absent), >= ``minimum``."""
        return self.check_int(key, self.cfg.get(key, default), minimum)

    def opt_int(self, key, minimum=1):
        """The integer ``cfg[key]``, or None when the key is absent or null (an override that is not set)."""
        v = self.cfg.get(key)
        return None if v is None else self.check_int(key, v, minimum)

    def flag(self, key, default):
        """``cfg[key]`` as true or false (``default`` when absent)."""
        v = self.cfg.get(key, default)
        if not isinstance(v, bool):
            self.error(f"{key} must be true or false, got {v!r}")
        return v

    def number(self, key, default, ok, expected):
        """``cfg[key]`` (``default`` when absent): a finite number for which ``ok(value)`` holds, as float; else
        "<key> must be <expected>"."""
        v = self.cfg.get(key, default)
        if not _is_number(v) or not math.isfinite(v) or not ok(v):
            self.error(f"{key} must be {expected}, got {v!r}")
        return float(v)

    def seconds(self, key, default):
        """A positive, finite number of seconds (``default`` when absent), as float."""
        return self.number(key, default, lambda v: v > 0, "a positive number of seconds")

    def choice(self, key, default, choices):
        """One of ``choices`` (``default`` when absent)."""
        v = self.cfg.get(key, default)
        if v not in choices:
            self.error(f"{key} must be one of {sorted(choices)}, got {v!r}")
        return v

    def choices(self, key, default, choices):
        """A name or a non-empty list of names of ``choices`` (``default`` when absent): the list, deduplicated,
        in the given order."""
        v = self.cfg.get(key, default)
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, list) or not v or any(x not in choices for x in v):
            self.error(f"{key} must be a non-empty list of {list(choices)}, got {v!r}")
        return list(dict.fromkeys(v))

    def strings(self, key, default):
        """A list of strings, or one string split at whitespace (``default`` when absent)."""
        v = self.cfg.get(key, default)
        v = v.split() if isinstance(v, str) else v
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.error(f"{key} must be a list of strings, got {v!r}")
        return v

    def sizes_mib(self, default):
        """``sizes_mib``: an integer or a non-empty list of integers >= 1 (MiB); sorted, deduplicated."""
        sizes = self.cfg.get("sizes_mib", default)
        sizes = [sizes] if _is_int(sizes) else sizes
        if not isinstance(sizes, list) or not sizes:
            self.error(f"sizes_mib must be a non-empty list of sizes in MiB, got {sizes!r}")
        return sorted({self.check_int("sizes_mib[]", s) for s in sizes})

    def size_sweep(self):
        """Message sizes in bytes: `sizes` (a list) or, when it is null/absent, min_size .. max_size by step_factor;
        sorted, deduplicated, at most MAX_SIZES."""
        cfg, name = self.cfg, self.name
        sizes = cfg.get("sizes")
        if sizes is not None:
            sizes = [sizes] if isinstance(sizes, str) or _is_int(sizes) else sizes
            if not isinstance(sizes, list) or not sizes:
                self.error(f"sizes must be a non-empty list like ['1M', '64M'] (or null), got {sizes!r}")
            out = [parse_size(s, f"{name}: sizes") for s in sizes]
        else:
            if cfg.get("min_size") is None or cfg.get("max_size") is None:
                self.error("give sizes (a list) or min_size and max_size")
            lo, hi = parse_size(cfg["min_size"], f"{name}: min_size"), parse_size(cfg["max_size"], f"{name}: max_size")
            f = self.int("step_factor", 2, minimum=2)
            if lo > hi:
                self.error(f"min_size {cfg['min_size']!r} > max_size {cfg['max_size']!r}")
            out, s = [], lo
            while s <= hi and len(out) <= MAX_SIZES:
                out.append(s)
                s *= f
        out = sorted(set(out))
        if len(out) > MAX_SIZES:
            self.error(f"at most {MAX_SIZES} sizes, got {len(out)}")
        return out

    def timing(self, warmup, budget_s):
        """The timing keys every kernel benchmark reads: ``warmup`` (at most this many untimed calls per window),
        ``time_budget_s`` and the optional overrides ``iters`` / ``repeats`` (null: the budget decides);
        the arguments are the benchmark's defaults."""
        return Timing(self.int("warmup", warmup, minimum=0), self.seconds(BUDGET_KEY, budget_s),
                      self.opt_int("iters"), self.opt_int("repeats"))

    def typed(self, defaults, convert):
        """One value per key of ``defaults``, in order (the default when absent). A key whose default is a bool
        must be a bool; every other value is ``convert(key, value, default)``, the benchmark's own rule."""
        return {key: self.flag(key, default) if isinstance(default, bool)
                else convert(key, self.cfg.get(key, default), default) for key, default in defaults.items()}

    def require_positive(self, c, keys):
        """Every ``c[key]`` of ``keys`` must be >= 1."""
        for key in keys:
            if c[key] < 1:
                self.error(f"{key} must be >= 1, got {c[key]}")


# --------------------------------------------------------------------------- message sizes (collectives, p2p)

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MAX_SIZES = 64


def parse_size(v, key):
    """Bytes from an int or a string like "64K", "1M", "4G", "512", "1MiB" (binary units, as nccl-tests)."""
    if not (_is_int(v) or isinstance(v, str)):
        config_error(f"{key}: a size must be an integer or a string like '64M', got {v!r}")
    if isinstance(v, int):
        n = v
    else:
        m = _SIZE_RE.match(v)
        if not m:
            config_error(f"{key}: cannot read size {v!r} (examples: 65536, '64K', '1M', '4G')")
        n = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if n < 1:
        config_error(f"{key}: sizes must be >= 1 byte, got {v!r}")
    return n


def format_size(n):
    """The metric-name form of a byte count: 65536 -> '64K', 1 << 30 -> '1G', 1000 -> '1000B'."""
    for suffix in ("T", "G", "M", "K"):
        if n % _UNITS[suffix] == 0:
            return f"{n // _UNITS[suffix]}{suffix}"
    return f"{n}B"


# --------------------------------------------------------------------------- test hook: injected faults

TEST_INJECT_ENV = "FLAGPERF_TEST_INJECT"
TEST_FAULTS = ("result", "target", "slow")
SLOW_FOR_TEST_RANK = 1      # the ``slow`` fault: this local rank of every node ...
SLOW_FOR_TEST_FACTOR = 3.0  # ... takes this many times as long per sample of its aligned window
RUNNING = {"benchmark": None}   # the benchmark this process runs (PerfLog sets it), for the ``slow`` fault


def test_fault(benchmark):
    """The fault that the test hook FLAGPERF_TEST_INJECT="<benchmark>:<kind>" asks of ``benchmark``, or None.
    Only the tests set it (no case config can): they prove that a benchmark's own check fails (CHECK_FAILED,
    exit 3) when its result is wrong. Kinds: ``result`` (corrupt_for_test: one element of a result is wrong),
    ``target`` (target_for_test: a convergence target no run reaches) and ``slow`` (slow_for_test: local rank
    SLOW_FOR_TEST_RANK of every node is SLOW_FOR_TEST_FACTOR times slower in its aligned windows, so that the
    node's spread is flagged and its windows are no longer simultaneous)."""
    value = os.environ.get(TEST_INJECT_ENV, "").strip()
    if not value:
        return None
    name, _, kind = value.partition(":")
    if kind not in TEST_FAULTS:
        config_error(f"{TEST_INJECT_ENV}={value!r}: expected <benchmark>:<kind>, kind one of {', '.join(TEST_FAULTS)}")
    return kind if name == benchmark else None


def corrupt_for_test(benchmark, t, here=True):
    """The ``result`` fault of the test hook (test_fault), applied where ``here`` holds: the first element of the
    tensor ``t`` becomes wrong in place (a float: -(|x| + 1) x 1024; an integer: its bitwise complement), so that
    the benchmark's check must fail. Does nothing without the hook."""
    if here and test_fault(benchmark) == "result":
        first = t.view(-1)[:1]
        if first.is_floating_point():
            first.copy_(-(first.abs() + 1) * 1024)
        else:
            first.bitwise_not_()


def slow_for_test(ctx):
    """The ``slow`` fault of the test hook (test_fault) for the running benchmark (RUNNING): the factor by which
    this rank's aligned window is slowed (SLOW_FOR_TEST_FACTOR on local rank SLOW_FOR_TEST_RANK, else 1.0).
    After every sample the rank sleeps (factor - 1) x the sample's seconds and counts factor x them, so that
    its figure drops and its window grows without taking the CPU from the other ranks."""
    name = RUNNING["benchmark"]
    if name and ctx.local_rank == SLOW_FOR_TEST_RANK and test_fault(name) == "slow":
        return SLOW_FOR_TEST_FACTOR
    return 1.0


def target_for_test(benchmark, target, unreachable):
    """The ``target`` fault of the test hook (test_fault): ``unreachable`` instead of the convergence ``target``."""
    return unreachable if test_fault(benchmark) == "target" else target


# --------------------------------------------------------------------------- PerfLog

def _plain(x):
    """Turn torch/numpy scalars (anything with .item()) into plain Python values, recursively."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item") and callable(x.item):
        return x.item()
    return x


class PerfLog:
    """Writes ``[PerfLog] {json}`` lines on stdout, one per event, flushed."""

    def __init__(self, rank=None, benchmark=None):
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
        self.benchmark = benchmark
        self.init_start = None
        if benchmark:
            RUNNING["benchmark"] = benchmark

    def _emit(self, record):
        line = perflog_line(record)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return record

    def _mark_test_fault(self, details):
        """A run under the test hook (test_fault) says so in its verdict's details: ``test_fault: <kind>``."""
        kind = test_fault(self.benchmark) if self.benchmark else None
        if kind and isinstance(details, dict):
            details["test_fault"] = kind
        return details

    def event(self, name, **extra):
        now = time.time()
        if name == "INIT_START":
            self.init_start = now
        record = {"event": name, "time": now, "rank": self.rank}
        record.update(_sanitize(extra))  # free-form data, kept strict JSON
        return self._emit(record)

    def finished(self, *, benchmark=None, metric, value, unit, higher_is_better,
                 metrics=None, checks=None, env=None):
        """Validate (flagperf_contract.validate_finished, the validator the driver uses too) and print the
        FINISHED line (schema flagperf.perflog/1). ValueError naming every problem of an invalid payload."""
        if self.init_start is None:
            raise RuntimeError("FINISHED before INIT_START: e2e_time is undefined")
        checks = _plain(checks if checks is not None else {"passed": True, "details": {}})
        if isinstance(checks, dict):
            self._mark_test_fault(checks.setdefault("details", {}))
        now = time.time()
        record = {
            "event": "FINISHED", "time": now, "rank": self.rank,
            "schema": PERFLOG_SCHEMA, "benchmark": benchmark or self.benchmark,
            "metric": metric, "value": _plain(value),
            "unit": unit, "higher_is_better": higher_is_better,
            "e2e_time": now - self.init_start,
            "metrics": _plain(metrics or {}), "checks": checks, "env": _plain(env or {}),
        }
        errors = validate_finished(record)
        if errors:
            raise ValueError("invalid FINISHED payload: " + "; ".join(errors))
        return self._emit(record)

    def check_failed(self, details, exit_code=CHECK_FAILED_EXIT):
        """Print CHECK_FAILED with the details, leave the process group, exit 3. Never returns."""
        record = {"event": "CHECK_FAILED", "time": time.time(), "rank": self.rank}
        if self.benchmark:
            record["benchmark"] = self.benchmark
        record["checks"] = {"passed": False, "details": self._mark_test_fault(_sanitize(details))}
        self._emit(record)
        _destroy_quietly()
        sys.exit(exit_code)

    def skipped(self, reason):
        """Print SKIPPED with the reason (this host cannot run the case, e.g. no nvcc), leave the process
        group, exit 0. Every rank should call it; the round is reported as skipped, not failed."""
        record = {"event": "SKIPPED", "time": time.time(), "rank": self.rank, "reason": str(reason)}
        if self.benchmark:
            record["benchmark"] = self.benchmark
        self._emit(record)
        _destroy_quietly()
        sys.exit(0)


def peak_for(cfg, key, device_name):
    """The datasheet peak ``key`` (e.g. ``bf16_tflops``, ``mem_bw_gbs``) for this device from the vendor's
    peak table (the driver passes it in the case config as ``vendor_peaks``): (value, entry name) or
    (None, None). An entry matches when one of its ``match`` strings occurs in the device name; the most
    specific (longest) match wins."""
    best = (None, None, -1)
    for name, entry in (cfg.get("vendor_peaks") or {}).items():
        if not isinstance(entry, dict):
            continue
        for pattern in entry.get("match", [name]):
            if pattern.lower() in str(device_name).lower() and len(pattern) > best[2] and key in entry:
                best = (float(entry[key]), name, len(pattern))
    return best[0], best[1]


def _sanitize(x):
    """Non-finite floats become strings so that the line stays strict JSON."""
    x = _plain(x)
    if isinstance(x, dict):
        return {k: _sanitize(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_sanitize(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


# --------------------------------------------------------------------------- distributed

class DistContext:
    """What setup_distributed() found: rank layout, device, backend."""

    def __init__(self, rank, world_size, local_rank, device, backend, initialized):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.device, self.backend, self.initialized = device, backend, initialized

    @property
    def is_cuda(self):
        """The device is a CUDA GPU (benchmarks that need CUDA itself: events, nvcc kernels, NCCL knobs)."""
        return self.device.type == "cuda"

    @property
    def is_accelerator(self):
        """The device is not the CPU (cuda, npu, mlu, xpu, musa)."""
        return self.device.type != "cpu"

    @property
    def device_module(self):
        """torch.<device type> (torch.cuda, torch.npu, ...); None on the CPU."""
        if not self.is_accelerator:
            return None
        import torch
        return getattr(torch, self.device.type)

    def sync(self):
        """Wait for queued device work (no-op on CPU)."""
        if self.is_accelerator:
            self.device_module.synchronize(self.device)

    def barrier(self):
        """A real barrier across ranks; device work is finished first."""
        self.sync()
        if self.initialized:
            import torch.distributed as dist
            if device_backend(self.backend, self.device.type) == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()
            self.sync()

    def all_reduce(self, values, op="sum"):
        """All-reduce a list of floats (in float64) and return the reduced list."""
        import torch
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._comm_device())
        if self.initialized:
            import torch.distributed as dist
            dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                   "min": dist.ReduceOp.MIN}[op])
        return t.tolist()

    def _comm_device(self):
        """Where collective tensors live: gloo takes CPU tensors, a device's own backend its device's."""
        import torch
        return torch.device("cpu") if device_backend(self.backend, self.device.type) == "gloo" else self.device

    def destroy(self):
        if self.initialized:
            self.barrier()
            import torch.distributed as dist
            dist.destroy_process_group()
            self.initialized = False


def env_int(name, default):
    """The integer environment variable ``name`` (``default`` when unset); a config error when it is not one."""
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        config_error(f"environment variable {name}={os.environ.get(name)!r} is not an integer")


def skip_below_ranks(log, minimum, reason):
    """WORLD_SIZE from the environment, read before torch is imported; below ``minimum`` this rank prints
    SKIPPED "<reason> (WORLD_SIZE=<n>)" and exits 0 (every rank does the same)."""
    world_size = env_int("WORLD_SIZE", 1)
    if world_size < minimum:
        log.skipped(f"{reason} (WORLD_SIZE={world_size})")
    return world_size


def backend_pairs(spec):
    """[(device type or None, backend)] of a backend spec: 'nccl' -> [(None, 'nccl')], torch's composite form
    'cpu:gloo,cuda:flagcx' -> [('cpu', 'gloo'), ('cuda', 'flagcx')]. ValueError says what is wrong."""
    if ":" not in spec:
        if not _BACKEND_NAME.fullmatch(spec):
            raise ValueError(f"FLAGPERF_DIST_BACKEND: expected a backend name or device:backend pairs, got {spec!r}")
        return [(None, spec)]
    pairs = []
    for part in spec.split(","):
        device, _, name = part.strip().partition(":")
        if device not in DEVICE_TYPES or not _BACKEND_NAME.fullmatch(name) or device in dict(pairs):
            raise ValueError(f"FLAGPERF_DIST_BACKEND: expected device:backend pairs such as cpu:gloo,cuda:nccl "
                             f"(each device once), got {spec!r}")
        pairs.append((device, name))
    return pairs


def device_backend(spec, device):
    """The backend of a spec that carries ``device``'s tensors ('gloo' when a composite spec names none)."""
    pairs = backend_pairs(spec)
    if pairs[0][0] is None:
        return pairs[0][1]
    return dict(pairs).get(device, "gloo")


_BACKEND_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def pick_device_backend(env=None):
    """(device type, backend) from FLAGPERF_DEVICE (default cpu) and FLAGPERF_DIST_BACKEND (default: the
    device's own backend: cpu gloo, cuda nccl, npu hccl, mlu cncl, xpu xccl, musa mccl) in ``env``
    (os.environ by default). A backend goes with its own device or is gloo; a composite spec
    (``cpu:gloo,cuda:flagcx``) is checked pair by pair and must name the device; a backend none of torch's (one a
    plug-in module registers, FLAGPERF_TORCH_PLUGIN) is taken as it is. ValueError says what is wrong."""
    env = os.environ if env is None else env
    device = env.get("FLAGPERF_DEVICE", "cpu").strip().lower()
    if device not in DEVICE_TYPES:
        raise ValueError(f"FLAGPERF_DEVICE must be one of {', '.join(DEVICE_TYPES)}, got {device!r}")
    spec = env.get("FLAGPERF_DIST_BACKEND", DEVICE_BACKEND[device]).strip().lower()
    pairs = backend_pairs(spec)
    if pairs[0][0] is not None and device not in dict(pairs):
        raise ValueError(f"FLAGPERF_DIST_BACKEND={spec} names no backend for FLAGPERF_DEVICE={device}")
    for dev, backend in pairs:
        _check_builtin(backend, dev or device)
    return device, spec


def _check_builtin(backend, device):
    """A built-in backend goes with its own device or is gloo; ValueError otherwise."""
    if backend not in DIST_BACKENDS:
        return
    if backend not in ("gloo", DEVICE_BACKEND[device]):
        owner = next(d for d, b in DEVICE_BACKEND.items() if b == backend)
        use = "gloo" if device == "cpu" else f"{DEVICE_BACKEND[device]} or gloo"
        raise ValueError(f"the {backend} backend needs FLAGPERF_DEVICE={owner}, got {device} (use {use})")


def import_torch_plugin(env=None):
    """Import the vendor's torch plug-ins named by FLAGPERF_TORCH_PLUGIN (torch_npu, torch_mlu, ...; several
    comma-separated: the vendor's torch_plugin, then its dist_backend_module, which registers its backend, e.g.
    flagcx; unset or empty: none) after torch, so that torch.<device> and its backend exist. -> the names as
    given or None; a config error naming the module when one cannot be imported."""
    env = os.environ if env is None else env
    value = env.get("FLAGPERF_TORCH_PLUGIN", "").strip()
    if not value:
        return None
    for name in (n.strip() for n in value.split(",") if n.strip()):
        try:
            importlib.import_module(name)
        except Exception as e:  # ImportError, or whatever the plug-in raises while loading its runtime
            config_error(f"FLAGPERF_TORCH_PLUGIN={value}: cannot import {name}: {type(e).__name__}: {e}")
    return value


def setup_distributed(cfg=None):
    """Read RANK/WORLD_SIZE/LOCAL_RANK/FLAGPERF_DEVICE/FLAGPERF_DIST_BACKEND/FLAGPERF_TORCH_PLUGIN, import the
    torch plug-in, pick the device and init the process group (only when WORLD_SIZE > 1; rendezvous via
    MASTER_ADDR/MASTER_PORT). Device calls go through torch.<device type>, so any device in DEVICE_TYPES
    whose module (built in, or added by the plug-in) has is_available/device_count/set_device works."""
    try:
        device_type, backend = pick_device_backend()
    except ValueError as e:
        config_error(str(e))
    cfg = cfg or {}
    rank, world_size = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    local_rank = env_int("LOCAL_RANK", 0)
    if not 0 <= rank < world_size:
        config_error(f"RANK={rank} outside WORLD_SIZE={world_size}")

    import torch
    import torch.distributed as dist

    plugin = import_torch_plugin()
    if device_type != "cpu":
        mod = getattr(torch, device_type, None)
        if mod is None or not hasattr(mod, "set_device"):
            config_error(f"FLAGPERF_DEVICE={device_type} but torch has no torch.{device_type} "
                         + (f"after importing {plugin}" if plugin else "(set FLAGPERF_TORCH_PLUGIN to the vendor's "
                                                                       "torch plug-in)"))
        if not mod.is_available():
            config_error(f"FLAGPERF_DEVICE={device_type} but torch.{device_type}.is_available() is False")
        count = mod.device_count()
        if local_rank >= count:
            config_error(f"LOCAL_RANK={local_rank} but only {count} visible {device_type} devices")
        if device_type == "cuda":
            os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off
        mod.set_device(local_rank)
        device = torch.device(device_type, local_rank)
    else:
        device = torch.device("cpu")

    initialized = False
    if world_size > 1:
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(var):
                config_error(f"{var} must be set when WORLD_SIZE > 1")
        kwargs = dict(backend=backend, init_method="env://", rank=rank, world_size=world_size,
                      timeout=datetime.timedelta(seconds=float(cfg.get("dist_timeout_s", 300))))
        if device_backend(backend, device_type) == "nccl" and \
                "device_id" in inspect.signature(dist.init_process_group).parameters:
            kwargs["device_id"] = device  # bind the communicator to this rank's GPU
        dist.init_process_group(**kwargs)
        initialized = True
    return DistContext(rank, world_size, local_rank, device, backend, initialized)


def _destroy_quietly():
    if "torch" not in sys.modules:
        return              # torch never imported: no process group to leave (and no 2 s import to pay)
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # leaving anyway
        pass


# --------------------------------------------------------------------------- timing

# Time budget (docs/benchmarks.md, "Time budget"): a benchmark reads `time_budget_s`, splits it over the windows
# it times (sizes, dtypes, ops) and passes each share to time_fn(budget_s=...), which sizes the samples to fill it.
BUDGET_KEY = "time_budget_s"
TARGET_SAMPLES = 10        # samples when the budget holds that many calls (more calls: longer samples); fewer
                           # calls: one sample per call, so at least 3 samples wherever 3 calls fit
MAX_SAMPLES = 1000         # cap on samples (only reached when max_iters caps the calls per sample)
MAX_ITERS = 1_000_000      # cap on calls per sample
WARMUP_SHARE = 0.25        # warm-up calls beyond the first stop at about this share of the budget
CALIBRATION_SHARE = 0.05   # a calibration batch aims at this share of the budget ...
CALIBRATION_MAX_S = 0.2    # ... but at most this long
OVERRUN = 3.0              # samples stop early once the measurement has taken this many times its budget


class Timing:
    """The timing keys of a case (CaseKeys.timing): warm-up calls, the time budget in seconds, and the optional
    overrides of the counts the budget picks (None: the budget decides)."""

    def __init__(self, warmup, budget_s, iters=None, repeats=None):
        self.warmup, self.budget_s, self.iters, self.repeats = warmup, float(budget_s), iters, repeats


def _agree_max(ctx, values):
    """The element-wise maximum over all ranks (the values themselves without a process group): every rank
    then derives the same counts from them, so that collectives and barriers pair up."""
    return ctx.all_reduce(values, "max") if ctx.initialized else [float(v) for v in values]


def timed_batch(fn, ctx, k):
    """Seconds for ``k`` back-to-back ``fn()`` calls on ctx.device: torch.cuda.Event pairs on CUDA, else
    time.perf_counter between device synchronisations."""
    if ctx.is_cuda:
        import torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(k):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    ctx.sync()
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    ctx.sync()
    return time.perf_counter() - t0


def plan_counts(per_call_s, budget_s, *, iters=None, repeats=None, max_iters=None):
    """(iters per sample, samples, warning or None) so that samples x iters calls of ``per_call_s`` seconds
    take about ``budget_s``. ``iters`` / ``repeats`` given (not None) are kept as they are (an explicit
    override) and the budget sizes the other one. Without either: up to TARGET_SAMPLES samples (one call each
    when fewer calls fit, so at least 3 wherever 3 fit), calls per sample capped by ``max_iters`` (default
    MAX_ITERS; more samples then, up to MAX_SAMPLES). When one call alone takes longer than the budget the
    counts are the minimum, 1 x 1 (or the explicit ones), with a warning; explicit counts that take more than
    twice the budget are kept, with a warning."""
    cap = MAX_ITERS if max_iters is None else max(1, min(MAX_ITERS, int(max_iters)))
    calls = budget_s / per_call_s if per_call_s > 0 else float("inf")
    if calls < 1:
        it, reps = iters or 1, repeats or 1
        return it, reps, (f"one call takes {per_call_s:.3g} s, more than the budget of {budget_s:.3g} s: "
                          f"measured {reps} sample(s) of {it} call(s) (raise {BUDGET_KEY} or shrink the case)")
    n = int(min(calls, float(cap) * MAX_SAMPLES))
    if iters is not None and repeats is not None:
        it, reps = iters, repeats
    elif repeats is not None:
        it, reps = max(1, min(cap, n // repeats)), repeats
    elif iters is not None:
        it, reps = iters, max(1, min(MAX_SAMPLES, n // iters))
    else:
        reps = min(n, TARGET_SAMPLES)
        it = min(cap, n // reps)
        if it == cap:
            reps = max(reps, min(MAX_SAMPLES, n // it))
    expected = it * reps * per_call_s
    warning = None
    if expected > 2 * budget_s:
        warning = (f"the explicit counts ({reps} samples of {it} calls of {per_call_s:.3g} s) take about "
                   f"{expected:.3g} s, more than twice the budget of {budget_s:.3g} s")
    return it, reps, warning


def calibrate(batch, ctx, budget_s, *, before_repeat=None, max_iters=None):
    """Per-call seconds, the maximum over all ranks, from timed batches: ``batch(k)`` returns the seconds of
    ``k`` back-to-back calls; k grows from 1 until a batch takes about CALIBRATION_SHARE of the budget (at most
    CALIBRATION_MAX_S), or one call alone exceeds the budget, or k reaches ``max_iters``. Every rank runs the
    same batches (the batch times are all-reduced, MAX). ``before_repeat`` runs before every batch.
    Returns (per-call seconds, calls made)."""
    cap = MAX_ITERS if max_iters is None else max(1, min(MAX_ITERS, int(max_iters)))
    target = min(CALIBRATION_SHARE * budget_s, CALIBRATION_MAX_S)
    k, calls = 1, 0
    while True:
        if before_repeat is not None:
            before_repeat()
        t = _agree_max(ctx, [batch(k)])[0]
        calls += k
        per_call = t / k
        if t >= 0.5 * target or per_call > budget_s or k >= cap:
            return per_call, calls
        grow = math.ceil(1.2 * k * target / t) if t > 0 else 100 * k
        k = min(cap, max(2 * k, min(100 * k, grow)))


def measure(batch, ctx, iters, repeats, *, before_repeat=None, budget_s=None):
    """``repeats`` samples of ``batch(iters)`` (seconds of ``iters`` back-to-back calls), ``before_repeat``
    before each. With ``budget_s`` the samples stop early (a warning) once the measurement has taken OVERRUN x
    the budget of wall time, all ranks together. Returns (seconds per call of every sample, measured seconds,
    warning or None)."""
    samples, measured, t0 = [], 0.0, time.perf_counter()
    for i in range(repeats):
        if before_repeat is not None:
            before_repeat()
        s = batch(iters)
        samples.append(s / iters)
        measured += s
        if budget_s is not None and i < repeats - 1:
            over = time.perf_counter() - t0 > OVERRUN * budget_s
            if _agree_max(ctx, [float(over)])[0] > 0:
                return samples, measured, (f"stopped after {i + 1} of {repeats} samples: the measurement took "
                                           f"more than {OVERRUN:g} x its budget of {budget_s:.3g} s (the device "
                                           "or host slowed down after calibration)")
    return samples, measured, None


def measure_aligned(batch, ctx, iters, repeats, *, budget_s=None):
    """``repeats`` samples of ``batch(iters)`` in one barrier-aligned window: a barrier (every rank starts
    together), a device sync, the wall-clock start (time.time()), the samples back to back (no barrier, no
    collective: a rank that finishes first is not held back, so a window measured alone shows as shorter), a
    device sync and the wall-clock end. With ``budget_s`` the samples stop early (a warning) once this rank's
    window has taken OVERRUN x the budget (decided by each rank alone: no collective inside the window).
    Returns (seconds per call of every sample, measured seconds, warning or None, {"start", "end"})."""
    slow = slow_for_test(ctx)
    ctx.barrier()
    ctx.sync()
    start = time.time()
    t0 = time.perf_counter()
    samples, measured, stop = [], 0.0, None
    for i in range(repeats):
        s = batch(iters)
        if slow > 1.0:                      # the test hook's slow device (slow_for_test)
            time.sleep(s * (slow - 1.0))
            s *= slow
        samples.append(s / iters)
        measured += s
        if budget_s is not None and i < repeats - 1 and time.perf_counter() - t0 > OVERRUN * budget_s:
            stop = (f"stopped after {i + 1} of {repeats} samples on rank {ctx.rank}: its window took more than "
                    f"{OVERRUN:g} x its budget of {budget_s:.3g} s (the device or host slowed down after "
                    "calibration)")
            break
    ctx.sync()
    return samples, measured, stop, {"start": start, "end": time.time()}


def budget_warning(label, message):
    """Print a budget warning line on stderr (the rank's log) and return it, prefixed with ``label``."""
    text = f"{label}: {message}" if label else message
    print(f"budget warning: {text}", file=sys.stderr, flush=True)
    return text


def time_fn(fn, ctx, *, warmup=3, iters=None, repeats=None, before_repeat=None, budget_s=None, max_iters=None,
            label=None, batch=None, aligned=False):
    """Time ``fn()`` on ctx.device. CUDA: torch.cuda.Event pairs; other devices and the CPU: time.perf_counter
    between device synchronisations. ``before_repeat`` (e.g. ctx.barrier) is called before every sample,
    outside the timed region. ``batch(k)``, when given, returns the seconds of ``k`` back-to-back calls timed
    by the caller (a kernel that records its own events); the warm-up calls ``fn()`` still.

    Fixed counts (no ``budget_s``, or both ``iters`` and ``repeats`` given): ``warmup`` untimed calls, then
    ``repeats`` samples of ``iters`` back-to-back calls (defaults 10 and 5).

    Time budget (``budget_s`` seconds; docs/benchmarks.md, "Time budget"): ``before_repeat``, one warm-up call
    timed by the wall clock, then up to ``warmup - 1`` more while they fit in WARMUP_SHARE of the budget; then
    calibration batches (``calibrate``) give the seconds per call, and ``plan_counts`` picks the calls per
    sample and the samples so that the samples take about ``budget_s`` (``iters`` or ``repeats`` given: kept,
    the budget sizes the other; ``max_iters`` caps the calls per sample, e.g. when values grow call by call).
    Every rank uses the same counts: the timings they are derived from are all-reduced (MAX) when a process
    group exists. A warm-up or calibration call longer than the budget: 1 sample of 1 call, and a warning
    (stderr and ``budget_warning``) instead of many times the budget.

    ``aligned`` (the kernel benchmarks' per-device figures): the samples are one barrier-aligned window
    (measure_aligned): every rank passes a barrier, then runs its samples back to back with no barrier or
    collective between them, and records the window's wall-clock start and end (time.time() after a device
    sync); node_figures then tells whether the ranks' windows were simultaneous. ``fn`` must not hold a
    collective there (the samples may stop early on one rank alone). Otherwise ``before_repeat`` runs before
    every sample, as in warm-up and calibration.

    Returns seconds per call: {"median", "min", "max", "samples"} and what was done: "mode" ("fixed",
    "budget" or "minimum"), "warmup" (warm-up calls made), "iters", "repeats" (samples taken),
    "calibration_calls", "per_call_s" (calibration estimate, None with fixed counts), "budget_s",
    "measured_s" (the sum of the timed samples: the measured window), "budget_warning" (None or a string) and
    "window" ({"start", "end"}: the aligned window's wall-clock seconds; None when not ``aligned``)."""
    if batch is None:
        def batch(k):
            return timed_batch(fn, ctx, k)

    warmup = max(0, int(warmup))
    warning = per_call = None
    cal_calls = 0
    if budget_s is None or (iters is not None and repeats is not None):
        mode = "fixed"
        it, reps = max(1, int(iters or 10)), max(1, int(repeats or 5))
        for _ in range(warmup):
            fn()
        ctx.sync()
        done = warmup
    else:
        mode, done = "budget", 0
        if warmup:
            if before_repeat is not None:
                before_repeat()
            ctx.sync()
            t0 = time.perf_counter()
            fn()
            ctx.sync()
            first = _agree_max(ctx, [time.perf_counter() - t0])[0]
            done = 1
            if first > budget_s:
                per_call = first
            else:
                for _ in range(min(warmup - 1, int(WARMUP_SHARE * budget_s / max(first, 1e-9)))):
                    fn()
                    done += 1
                ctx.sync()
        if per_call is None:
            per_call, cal_calls = calibrate(batch, ctx, budget_s, before_repeat=before_repeat, max_iters=max_iters)
        it, reps, warning = plan_counts(per_call, budget_s, iters=iters, repeats=repeats, max_iters=max_iters)
        if per_call > budget_s:
            mode = "minimum"
    window = device_window(ctx).start()      # clocks, power, throttling and energy of the timed samples
    span = None
    if aligned:
        samples, measured, stop, span = measure_aligned(batch, ctx, it, reps,
                                                        budget_s=budget_s if mode == "budget" else None)
    else:
        samples, measured, stop = measure(batch, ctx, it, reps, before_repeat=before_repeat,
                                          budget_s=budget_s if mode == "budget" else None)
    window.stop()
    warning = "; ".join(w for w in (warning, stop) if w) or None
    if warning:
        budget_warning(label, warning)
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples,
            "mode": mode, "warmup": done, "iters": it, "repeats": len(samples), "calibration_calls": cal_calls,
            "per_call_s": per_call, "budget_s": budget_s, "measured_s": measured, "budget_warning": warning,
            "device_window": window.summary(), "window": span}


def device_window(ctx):
    """A common.devicestats.DeviceWindow for ctx's device (NVML on CUDA; elsewhere its summary says why not)."""
    mod = sys.modules.get("flagperf_devicestats")
    if mod is None:     # the file beside this one, however this module itself was imported
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "flagperf_devicestats", os.path.join(os.path.dirname(os.path.abspath(__file__)), "devicestats.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules["flagperf_devicestats"] = mod
    return mod.DeviceWindow(ctx)


class BudgetReport:
    """The time budget of one benchmark run (a Timing), split evenly over its ``windows`` (the timed
    measurements: sizes, dtypes, ops, ...), and what each window did; ``time`` measures one window,
    ``details()`` goes into the FINISHED (or CHECK_FAILED) details."""

    def __init__(self, timing, windows, split="evenly over the timed windows"):
        self.timing, self.budget_s = timing, timing.budget_s
        self.windows, self.split = max(1, int(windows)), split
        self.share_s = self.budget_s / self.windows
        self.counts, self.warnings = {}, []
        self.window_omitted = None

    def time(self, name, fn, ctx, *, label, before_repeat=None, iters=None, max_iters=None, batch=None,
             aligned=False):
        """time_fn of ``fn`` with the case's counts (``iters``: this window's own override) within one share
        of the budget, recorded as window ``name``; ``aligned``: time_fn's barrier-aligned window. Returns
        time_fn's result."""
        t = self.timing
        return self.add(name, time_fn(fn, ctx, warmup=t.warmup, iters=t.iters if iters is None else iters,
                                      repeats=t.repeats, before_repeat=before_repeat, budget_s=self.share_s,
                                      max_iters=max_iters, label=label, batch=batch, aligned=aligned))

    def repeat(self, name, fn, ctx, like, like_name):
        """``fn`` timed with the counts that window ``like_name`` chose (``like``: its time_fn result), e.g. a
        plain torch loop beside the harness measurement of the same operation; recorded as window ``name``
        with mode "counts of <like_name>". Returns time_fn's result."""
        t = time_fn(fn, ctx, warmup=like["warmup"], iters=like["iters"], repeats=like["repeats"])
        self.counts[name] = {"mode": f"counts of {like_name}",
                             **{key: t[key] for key in ("warmup", "iters", "repeats", "measured_s")}}
        return t

    def add(self, name, t):
        """Record window ``name`` from a time_fn result (or a dict with the same keys); returns ``t``."""
        self.counts[name] = {key: t.get(key) for key in ("mode", "warmup", "iters", "repeats", "measured_s")}
        window = t.get("device_window")
        if window and "omitted" not in window:      # per window: the clocks and power it ran at
            self.counts[name]["device_window"] = window
        elif window:
            self.window_omitted = window["omitted"]
        if t.get("budget_warning"):
            self.warnings.append(f"{name}: {t['budget_warning']}")
        return t

    def details(self):
        d = {"time_budget_s": self.budget_s, "budget_split": self.split, "budget_windows": self.windows,
             "budget_per_window_s": self.share_s,
             "measured_s": sum(c["measured_s"] or 0.0 for c in self.counts.values()), "counts": self.counts}
        if self.warnings:
            d["budget_warning"] = "; ".join(self.warnings)
        if self.window_omitted:
            d["device_window"] = {"omitted": self.window_omitted}
        return d


def sweep_step(log, ctx, r, where, label, measures, head, tail):
    """One timed size of a bandwidth sweep done (``r``: its result, with bytes, time_s and time_fn's counts):
    its STEP event (``where``, the size ``label``, bytes, time_us, ``measures``, the counts) and, on rank 0,
    its row of the table (``head``, size, bytes, time in us, ``tail``)."""
    log.event("STEP", **where, size=label, bytes=r["bytes"], time_us=r["time_s"] * 1e6, **measures,
              iters=r["iters"], repeats=r["repeats"], measured_s=r["measured_s"])
    if ctx.rank == 0:
        print(f"{head} {label:>6} {r['bytes']:>12} {r['time_s'] * 1e6:>11.2f} {tail}", flush=True)


class StepClock:
    """Per-step times of a training loop: ``mark()`` after every step (and once before the first) records a
    torch.cuda.Event on CUDA, else time.perf_counter (after a device sync when ``sync``). ``pause()`` closes a
    segment (what runs until the next ``mark()``, an evaluation, is no step). ``times()``: every step's seconds."""

    def __init__(self, ctx, sync=True):
        self.ctx, self.sync, self.segments = ctx, sync, [[]]

    def mark(self):
        if self.ctx.is_cuda:
            import torch
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.segments[-1].append(e)
        else:
            if self.sync:
                self.ctx.sync()
            self.segments[-1].append(time.perf_counter())

    def pause(self):
        if self.segments[-1]:
            self.segments.append([])

    def times(self):
        if self.ctx.is_cuda:
            return [a.elapsed_time(b) / 1e3 for seg in self.segments for a, b in zip(seg, seg[1:])]
        return [b - a for seg in self.segments for a, b in zip(seg, seg[1:])]


class Stopwatch:
    """Wall-clock interval with device synchronisation (and optional barrier) at both ends."""

    def __init__(self, ctx, barrier=True):
        self.ctx, self.use_barrier = ctx, barrier
        self.t0 = self.elapsed = None

    def _sync(self):
        if self.use_barrier:
            self.ctx.barrier()
        else:
            self.ctx.sync()

    def start(self):
        self._sync()
        self.t0 = time.perf_counter()

    def stop(self):
        self._sync()
        self.elapsed = time.perf_counter() - self.t0
        return self.elapsed


# --------------------------------------------------------------------------- verdict and aggregates across ranks

def fail_on_any_rank(log, ctx, failed_here, details, **extra):
    """The verdict, the same on every rank (every rank must call it): when any rank failed (``failed_here``
    on that rank), every rank adds ``extra`` and ``failed_on_some_rank: true`` to ``details`` and leaves
    through log.check_failed (CHECK_FAILED, exit 3). Returns when no rank failed."""
    if ctx.all_reduce([float(bool(failed_here))], "max")[0] > 0:
        details.update(extra, failed_on_some_rank=True)
        log.check_failed(details)


def check_all_ranks(log, ctx, failures, details):
    """The verdict, the same on every rank (every rank must call it): when any rank has ``failures`` (a list),
    every rank adds its own ``failures``, ``failures_per_rank`` and ``failed_ranks`` to ``details`` and leaves
    through log.check_failed (CHECK_FAILED, exit 3). Returns when no rank failed."""
    passed = ctx.all_reduce([0.0 if failures else 1.0], "min")[0] > 0
    per_rank = [0.0] * ctx.world_size
    per_rank[ctx.rank] = float(len(failures))
    per_rank = ctx.all_reduce(per_rank, "sum")
    if not passed:
        details.update(failures=failures, failures_per_rank=[int(x) for x in per_rank],
                       failed_ranks=[i for i, x in enumerate(per_rank) if x > 0])
        log.check_failed(details)


def per_rank_list(ctx, value):
    """Every rank's ``value``, as a list indexed by global rank (all-reduced, SUM); every rank must call it. The
    kernel benchmarks put it into their FINISHED details as ``per_rank: {"metric": <headline>, "values": [...]}``:
    in an ``each`` case (one node per job) index i is device i, which the driver ranks (results/slownodes.py)."""
    values = [0.0] * ctx.world_size
    values[ctx.rank] = float(value)
    return ctx.all_reduce(values, "sum")


def rank_aggregates(ctx, figures):
    """The slowest rank's figure, as FINISHED metrics; ``figures``: [(name, value, unit)]. Every rank must call
    it: the values are all-reduced (MIN), also when world_size is 1. Returns, figure by figure and only when
    world_size > 1, ``<name>_min_rank`` (the lowest value: for a throughput, the slowest rank's). Sums are
    node_figures' (only over simultaneous windows)."""
    mins = ctx.all_reduce([value for _, value, _ in figures], "min")
    metrics = {}
    if ctx.world_size > 1:
        for (name, _, unit), low in zip(figures, mins):
            metrics[f"{name}_min_rank"] = {"value": low, "unit": unit}
    return metrics


# Two windows are simultaneous when the span every rank of a node was measuring at once (the latest start to the
# earliest end) is at least this share of the node's longest window: then every device's figure was measured while
# (nearly) all the others ran, and their sum is what the node does at once. Below it the figures were measured
# at different moments (a rank ran alone while others waited or had finished) and are never summed.
SIMULTANEOUS_OVERLAP = 0.9


def node_index(ctx=None):
    """This rank's node: GROUP_RANK (torchrun), else NODE_RANK (flagperf's launcher), else RANK // LOCAL_WORLD_SIZE,
    else 0."""
    for name in ("GROUP_RANK", "NODE_RANK"):
        if os.environ.get(name, "").strip():
            return env_int(name, 0)
    per_node = env_int("LOCAL_WORLD_SIZE", 0)
    rank = ctx.rank if ctx is not None else env_int("RANK", 0)
    return rank // per_node if per_node > 0 else 0


IDENTITY_CHARS = 96     # at most this many characters of a reported identity (GPU uuid, PCI bus id, name, host)


def printable(text, limit=IDENTITY_CHARS):
    """``text`` when it is short printable ASCII, else None (nothing a host or device reports is passed raw)."""
    text = str(text).strip() if text is not None else ""
    return text if text and len(text) <= limit and text.isascii() and text.isprintable() else None


def gpu_identity(ctx):
    """Which card this rank's device is, as CUDA tells: {"uuid", "pci_bus_id", "name"} (NVML's forms: "GPU-<uuid>",
    "00000000:19:00.0"); the keys a device or torch version does not give are left out ({} off CUDA)."""
    if not ctx.is_cuda:
        return {}
    import torch

    out = {}
    try:
        props = torch.cuda.get_device_properties(ctx.device)
    except Exception:
        return out
    uuid = printable(getattr(props, "uuid", None))
    if uuid:
        out["uuid"] = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    parts = [getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in parts):
        out["pci_bus_id"] = f"{parts[0]:08X}:{parts[1]:02X}:{parts[2]:02X}.0"
    name = printable(getattr(props, "name", None))
    if name:
        out["name"] = name
    return out


def window_overlap(windows):
    """The share of the longest of ``windows`` ([(start, end)] in seconds) during which all of them ran: (earliest
    end - latest start) / longest, at least 0; 1.0 for one window; None without windows or when the longest is
    not longer than 0 s."""
    windows = [(float(a), float(b)) for a, b in windows]
    if not windows:
        return None
    longest = max(b - a for a, b in windows)
    if not longest > 0:
        return None
    return max(0.0, min(b for _, b in windows) - max(a for a, _ in windows)) / longest


def summarize_node_figures(metric, unit, rows):
    """The per-node figures of ``rows`` ([(value, start, end, node, local rank)], one per rank, start/end None when
    the rank had no aligned window): {node index as str: {"metric", "unit", "aggregate" (the sum over the node's
    devices, only when their windows were simultaneous, else None), "reason" (why not summed; None when summed),
    "median", "min", "max" (over the devices), "spread_pct" ((max - min) / median x 100), "simultaneous",
    "overlap" (window_overlap of the node's windows), "window_s" (the longest), "per_device" [[local rank,
    value], ...]}}."""
    nodes = {}
    for value, start, end, node, local in rows:
        nodes.setdefault(int(node), []).append((int(local), float(value), start, end))
    out = {}
    for node in sorted(nodes):
        devs = sorted(nodes[node])
        values = [v for _, v, _, _ in devs]
        windows = [(a, b) for _, _, a, b in devs if a is not None and b is not None]
        overlap = window_overlap(windows) if len(windows) == len(devs) else None
        median = statistics.median(values)
        simultaneous = overlap is not None and overlap >= SIMULTANEOUS_OVERLAP
        if simultaneous:
            reason = None
        elif overlap is None:
            reason = "not every device measured in an aligned window: not summed"
        else:
            reason = (f"the windows overlap {100 * overlap:.0f}% of the longest, below "
                      f"{100 * SIMULTANEOUS_OVERLAP:.0f}%: measured at different moments, not summed")
        all_finite = all(math.isfinite(v) for v in values)
        out[str(node)] = {
            "metric": metric, "unit": unit, "aggregate": sum(values) if simultaneous and all_finite else None,
            "reason": reason, "median": median, "min": min(values), "max": max(values),
            "spread_pct": 100.0 * (max(values) - min(values)) / median if median > 0 else None,
            "simultaneous": simultaneous, "overlap": overlap,
            "window_s": max((b - a for a, b in windows), default=None),
            "per_device": [[local, v] for local, v, _, _ in devs]}
    return out


def node_figures(ctx, metric, value, unit, window):
    """Every device's ``value`` of ``metric`` grouped by node (summarize_node_figures), from this rank's figure
    and its aligned ``window`` ({"start", "end"}, time_fn's "window"; None when it had none). Every rank must
    call it: (value, start, end, node index, local rank) of every rank are all-gathered (an all-reduce, SUM, of
    one row per rank in float64: wall-clock seconds stay exact to the microsecond)."""
    width = 6
    rows = [0.0] * (width * ctx.world_size)
    has = window is not None and window.get("start") is not None and window.get("end") is not None
    rows[width * ctx.rank:width * (ctx.rank + 1)] = [
        float(value), float(window["start"]) if has else 0.0, float(window["end"]) if has else 0.0, float(has),
        float(node_index(ctx)), float(ctx.local_rank)]
    got = ctx.all_reduce(rows, "sum")
    per_rank = [got[i * width:(i + 1) * width] for i in range(ctx.world_size)]
    return summarize_node_figures(metric, unit, [(v, a if h else None, b if h else None, n, lr)
                                                 for v, a, b, h, n, lr in per_rank])


def node_metrics(ctx, figures):
    """node_figures of every figure ([(name, value, unit, window)]) and their FINISHED metrics: ``<name>_node``,
    the aggregate of this rank's node (for rank 0, the FINISHED line's, node 0) where it has more than one device
    and their windows were simultaneous (never a sum of figures measured at different moments). Every rank
    must call it, with the same names in the same order. Returns (metrics, {name: node_figures})."""
    metrics, by_name = {}, {}
    mine = str(node_index(ctx))
    for name, value, unit, window in figures:
        by_name[name] = node_figures(ctx, name, value, unit, window)
        node = by_name[name].get(mine) or {}
        if len(node.get("per_device") or []) > 1 and node.get("aggregate") is not None:
            metrics[f"{name}_node"] = {"value": node["aggregate"], "unit": unit}
    return metrics, by_name


# --------------------------------------------------------------------------- environment

def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def env_info(ctx, **extra):
    """What this rank ran on, for the FINISHED line's ``env``."""
    import torch

    env = {"device": ctx.device.type, "device_name": None, "torch": torch.__version__,
           "backend": ctx.backend, "world_size": ctx.world_size, "rank": ctx.rank,
           "local_rank": ctx.local_rank, "hostname": socket.gethostname(),
           "python": platform.python_version()}
    if ctx.is_cuda:
        env["device_name"] = torch.cuda.get_device_name(ctx.device)
        env["cuda"] = torch.version.cuda
        try:
            v = torch.cuda.nccl.version()
            env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
        env["nccl_nvls_enable"] = os.environ.get("NCCL_NVLS_ENABLE")
    elif ctx.is_accelerator:
        try:
            env["device_name"] = ctx.device_module.get_device_name(ctx.device)
        except Exception:
            pass
        env["torch_plugin"] = os.environ.get("FLAGPERF_TORCH_PLUGIN") or None
    else:
        env["device_name"] = _cpu_model()
        env["cpu_threads"] = torch.get_num_threads()
    env.update(extra)
    return env
