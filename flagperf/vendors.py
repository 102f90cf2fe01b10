"""Vendor profiles: ``vendors/<name>/vendor.yaml``, validated into frozen dataclasses.

A profile says how ranks use the vendor's accelerators (device, backend, torch plug-in, visible-devices
variable, the accelerator plug-in of monitors/accel/ that counts and samples them) and, in its ``container:``
section, how the vendor's container is run (a :class:`ContainerSpec`, which turns into the keyword arguments of
docker SDK's ``containers.run``/``create``). docs/vendors.md describes every key. :func:`usable_on_host` says
why a profile cannot run on a host, from what launcher/probe.py found there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from flagperf.yamlio import load_yaml_file, one_line

DEVICES = ("cpu", "cuda", "other")          # other: an untested vendor whose torch device is not cuda
# torch device types the benchmark harness drives (FLAGPERF_DEVICE) and the torch.distributed backends it
# accepts (FLAGPERF_DIST_BACKEND), each device's own backend first: keep in step with
# benchmarks/common/harness.py (DEVICE_TYPES, DIST_BACKENDS, DEVICE_BACKEND; a unit test compares them).
TORCH_DEVICES = ("cpu", "cuda", "npu", "mlu", "xpu", "musa")
DIST_BACKENDS = ("nccl", "gloo", "hccl", "cncl", "xccl", "mccl")
DEVICE_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl", "mlu": "cncl", "xpu": "xccl", "musa": "mccl"}
NO_GPU_MONITOR = "none"
IPC_MODES = ("host", "private", "shareable", "none")
NAMESPACE_MODES = ("host",)                 # pid_mode, uts_mode: the host's namespace, or the container's own
ULIMIT_NAMES = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc",
                "rss", "rtprio", "rttime", "sigpending", "stack")

_KEYS = {
    "name": str,
    "description": str,
    "device": str,
    "torch_device": str,
    "dist_backend": str,
    "visible_devices_env": (str, type(None)),
    "gpu_monitor": str,
    "torch_plugin": (str, type(None)),
    "dist_backend_module": (str, type(None)),
    "rank_env": dict,
    "frameworks": list,
    "container": dict,
    "peaks": str,
    "tested": bool,
}
_REQUIRED = ("device", "dist_backend", "frameworks")
CONTAINER_KEYS = ("gpus", "devices", "group_add", "cap_add", "security_opt", "volumes", "env", "shm_size",
                  "ulimits", "privileged", "ipc_mode", "pid_mode", "uts_mode", "runtime")
LIST_FIELDS = ("devices", "group_add", "cap_add", "security_opt", "volumes")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SIZE = re.compile(r"[0-9]+(\.[0-9]+)?[bkmgtBKMGT]?[bB]?")
MIN_SIZE = 1024 ** 2                        # shared-memory sizes: at least 1 MiB ...
MAX_SIZE = 16 * 1024 ** 4                   # ... and at most 16 TiB
_GLOB = re.compile(r"[*?\[]")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class ContainerSpec:
    """How a vendor's container runs. Plain data: the plan turns it into one containers.ContainerRun per node,
    and the docker runtime turns that into API calls (runtimes/docker.py: sdk_kwargs)."""

    gpus: object = "none"           # "all", "none", a count (int) or a tuple of device ids
    devices: tuple = ()             # "/dev/x[:/dev/y[:rwm]]"; the host part may be a glob (/dev/xpu[0-9]*)
    group_add: tuple = ()
    cap_add: tuple = ()
    security_opt: tuple = ()
    volumes: tuple = ()             # "host:container[:ro|rw]"
    env: tuple = ()                 # ((name, value), ...)
    shm_size: str | None = None     # None: the test config's SHM_SIZE
    ulimits: tuple = ()             # ((name, soft, hard), ...)
    privileged: bool = False
    ipc_mode: str = "host"
    runtime: str | None = None
    pid_mode: str | None = None     # "host": the host's process namespace (--pid=host); None: the container's own
    uts_mode: str | None = None     # "host": the host's hostname namespace (--uts=host); None: the container's own

    network_mode = "host"           # not configurable: ranks rendezvous over the host network


@dataclass(frozen=True)
class VendorProfile:
    name: str
    path: Path
    description: str
    device: str
    dist_backend: str
    visible_devices_env: str | None
    gpu_monitor: str
    frameworks: tuple
    rank_env: tuple = field(default_factory=tuple)  # ((key, value), ...)
    torch_device: str | None = None                 # torch's device type (cuda, npu, mlu, ...); None: unknown
    container: ContainerSpec = field(default_factory=ContainerSpec)
    peaks: Path | None = None                       # peak table YAML
    tested: bool = True                             # False: written from documentation, never run
    torch_plugin: str | None = None                 # the vendor's torch extension module (torch_npu, ...)
    dist_backend_module: str | None = None          # a module that registers dist_backend's own backend (flagcx)

    @property
    def plugin_modules(self) -> str:
        """FLAGPERF_TORCH_PLUGIN: the modules the ranks import after torch, comma-separated ('' for none)."""
        return ",".join(m for m in (self.torch_plugin, self.dist_backend_module) if m)


# --- checks of single values, shared with container_opts; each returns what was expected, or None ---

def device_target(value: str) -> str:
    """The path a device has in the container: ``/dev/x``, ``/dev/x:rwm`` -> /dev/x; ``/dev/x:/dev/y`` -> /dev/y."""
    parts = value.split(":")
    return parts[1] if len(parts) > 1 and parts[1].startswith("/") else parts[0]


def check_device(value) -> str | None:
    parts = value.split(":") if isinstance(value, str) else []
    perms_only = len(parts) == 2 and re.fullmatch(r"[rwm]+", parts[1])             # /dev/x:rwm
    ok = 1 <= len(parts) <= 3 and parts[0].startswith("/dev/") and len(parts[0]) > 5 and \
        (len(parts) < 2 or perms_only or parts[1].startswith("/")) and \
        (len(parts) < 3 or re.fullmatch(r"[rwm]+", parts[2]))
    if ok and _GLOB.search(parts[0]) and len(parts) > 1 and not perms_only:
        return f"expected no container path after a glob (each device keeps its host path), got {value!r}"
    return None if ok else f"expected a device /dev/x[:/dev/y][:rwm], got {value!r}"


def split_volume(value) -> tuple:
    """``host:container[:ro|rw]`` -> (host, container, mode); ValueError says what was expected."""
    parts = value.split(":") if isinstance(value, str) else []
    if not 2 <= len(parts) <= 3 or not all(p.startswith("/") for p in parts[:2]) or \
            (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"expected a bind mount /host/path:/container/path[:ro|rw], got {value!r}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "rw"


def check_volume(value) -> str | None:
    try:
        split_volume(value)
    except ValueError as exc:
        return str(exc)
    return None


def check_word(value) -> str | None:
    ok = isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.:=/,-]+", value)
    return None if ok else f"expected a single word, got {value!r}"


def check_group(value) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    return check_word(value) and f"expected a group name or id, got {value!r}"


def parse_ulimit(value) -> tuple:
    """An int (soft = hard) or ``"soft:hard"``; -1 is unlimited. (soft, hard); ValueError says what was
    expected."""
    expected = f"expected an integer or 'soft:hard' (-1: unlimited), got {value!r}"
    if isinstance(value, int) and not isinstance(value, bool):
        parts = [value]
    elif isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}(:-?[0-9]{1,19})?", value.strip()):
        parts = [int(x) for x in value.strip().split(":")]
    else:
        raise ValueError(expected)
    soft, hard = parts[0], parts[-1]
    if min(soft, hard) < -1 or (hard != -1 and (soft == -1 or soft > hard)):
        raise ValueError(f"{expected} (soft must not exceed hard)")
    return soft, hard


def size_bytes(value) -> int | None:
    """Bytes of a size such as ``32G``, ``512m``, ``1.5GB`` or ``1048576`` (None: not a size)."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if len(text) > 32 or not SIZE.fullmatch(text):
        return None
    unit = text.rstrip("bB")[-1:].lower() if text.rstrip("bB")[-1:].isalpha() else ""
    number = text[:len(text.rstrip("bB")) - len(unit)] if unit else text.rstrip("bB")
    if not number:
        return None
    return int(float(number) * 1024 ** " kmgt".index(unit or " "))


def check_size(value) -> str | None:
    """None for a size from MIN_SIZE to MAX_SIZE, else what was expected."""
    size = size_bytes(value)
    if size is None:
        return f"expected a size such as 32G or 512M, got {value!r}"
    if not MIN_SIZE <= size <= MAX_SIZE:
        return f"expected a size from 1M to 16T, got {value!r}"
    return None


def check_env_value(value) -> str | None:
    ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    return None if ok else f"expected a string or number, got {value!r}"


def accel_plugins(root: Path) -> list[str]:
    """The accelerator plug-ins of the tree at ``root``: the modules of monitors/accel/ (helpers, named _*,
    excepted), sorted. ``gpu_monitor`` names one of them, or none."""
    d = Path(root) / "monitors" / "accel"
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.py") if not p.stem.startswith("_") and re.fullmatch(r"\w+", p.stem))


def vendor_names(root: Path) -> list[str]:
    d = root / "vendors"
    return sorted(p.name for p in d.iterdir() if (p / "vendor.yaml").is_file()) if d.is_dir() else []


class _Problems(list):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def add(self, key, expected):
        self.append(f"{self.path}: {key}: {expected}")

    def unknown(self, mapping, known, prefix=""):
        for key in mapping:
            if key not in known:
                self.add(f"{prefix}{key}", f"unknown key (known: {', '.join(known)})")

    def get(self, mapping, key, types, default, label=None):
        """mapping[key] when it has one of ``types``; else report and return ``default``."""
        if key not in mapping:
            return default
        value = mapping[key]
        types = types if isinstance(types, tuple) else (types,)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            got = "null" if value is None else f"{type(value).__name__} {value!r}"
            self.add(label or key, f"expected {_type_name(types)}, got {got}")
            return default
        return value


def load_vendor(root: Path, name: str) -> tuple[VendorProfile | None, list[str]]:
    """Return (profile, problems). The profile is None when problems were found."""
    path = root / "vendors" / name / "vendor.yaml"
    data, problems = load_yaml_file(path)
    if problems:
        return None, problems
    if not isinstance(data, dict):
        return None, [f"{path}: expected a mapping of vendor keys ({', '.join(_KEYS)})"]
    profile, problems = _load_profile(root, name, path, data)
    return profile, [one_line(x) for x in problems]


def _load_profile(root: Path, name: str, path: Path, data: dict) -> tuple[VendorProfile | None, list[str]]:
    p = _Problems(path)
    p.unknown(data, _KEYS)
    for key in _REQUIRED:
        if key not in data:
            p.add(key, "required key is missing")
    get = {key: p.get(data, key, types, None) for key, types in _KEYS.items()}
    if get["name"] not in (None, name):
        p.add("name", f"expected {name!r} (the folder name), got {get['name']!r}")
    tested = True if get["tested"] is None else get["tested"]
    device = get["device"]
    if device is not None and device not in DEVICES:
        p.add("device", f"expected one of {', '.join(DEVICES)}, got {device!r}")
    elif device == "other" and tested:
        p.add("device", "expected cpu or cuda: 'other' is only for untested profiles (tested: false)")
    torch_device = get["torch_device"]
    effective_device = None     # the torch device the ranks will use, when the profile names a valid one
    if torch_device is not None and torch_device not in TORCH_DEVICES:
        p.add("torch_device", f"expected one of {', '.join(TORCH_DEVICES)}, got {torch_device!r}")
    elif device in ("cpu", "cuda") and torch_device not in (None, device):
        p.add("torch_device", f"expected {device!r} (as device) or no torch_device, got {torch_device!r}")
    elif device == "other" and torch_device in ("cpu", "cuda"):
        p.add("torch_device", f"expected one of {', '.join(TORCH_DEVICES[2:])} with device: other "
                              f"(cpu and cuda are devices of their own), got {torch_device!r}")
    else:
        effective_device = torch_device or (device if device in ("cpu", "cuda") else None)
    backend = get["dist_backend"]
    backend_module = get["dist_backend_module"]
    if backend_module is not None and not _MODULE.fullmatch(backend_module):
        p.add("dist_backend_module", f"expected a Python module name such as flagcx, got {backend_module!r}")
    if backend is not None:
        for problem in backend_problems(backend, effective_device, backend_module is not None):
            p.add("dist_backend", problem)
    torch_plugin = get["torch_plugin"]
    if torch_plugin is not None and not _MODULE.fullmatch(torch_plugin):
        p.add("torch_plugin", f"expected a Python module name such as torch_npu, got {torch_plugin!r}")
    visible = get["visible_devices_env"]
    if visible is not None and not ENV_NAME.fullmatch(visible):
        p.add("visible_devices_env", f"expected an environment variable name, got {visible!r}")
    monitor = NO_GPU_MONITOR if get["gpu_monitor"] is None else get["gpu_monitor"]
    monitors = accel_plugins(root) + [NO_GPU_MONITOR]
    if monitor not in monitors:
        p.add("gpu_monitor", f"expected one of {', '.join(monitors)} (the plug-ins in "
                             f"{Path(root) / 'monitors' / 'accel'}, or none), got {monitor!r}")
    frameworks = get["frameworks"]
    if frameworks is not None and (not frameworks or not all(isinstance(f, str) and f for f in frameworks)):
        p.add("frameworks", f"expected a non-empty list of framework names, got {frameworks!r}")
    rank_env = get["rank_env"] or {}
    for key, value in rank_env.items():
        if not (isinstance(key, str) and ENV_NAME.fullmatch(key)):
            p.add(f"rank_env.{key}", "expected an environment variable name")
        elif check_env_value(value):
            p.add(f"rank_env.{key}", check_env_value(value))
    peaks = None
    if get["peaks"] is not None:
        try:
            peaks = (path.parent / get["peaks"]).resolve()
            found = bool(get["peaks"]) and peaks.is_file()
        except (OSError, RuntimeError, ValueError):
            peaks, found = path.parent / get["peaks"], False
        if not found:
            p.add("peaks", f"expected a peak table YAML file relative to {path.parent}, {str(peaks)!r} does not "
                           f"exist")
    container = _load_container(p, get["container"] or {})
    if p:
        return None, list(p)
    return VendorProfile(
        name=name,
        path=path.parent,
        description=get["description"] or "",
        device=device,
        dist_backend=get["dist_backend"],
        visible_devices_env=visible,
        gpu_monitor=monitor,
        frameworks=tuple(frameworks),
        rank_env=tuple((str(k), str(v)) for k, v in rank_env.items()),
        torch_device=torch_device or (device if device != "other" else None),
        container=container,
        peaks=peaks,
        tested=tested,
        torch_plugin=torch_plugin,
        dist_backend_module=backend_module,
    ), []


_BACKEND_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def parse_backend_spec(spec: str) -> list:
    """[(device type or None, backend)] of a dist_backend: ``nccl`` -> [(None, 'nccl')];
    ``cpu:gloo,cuda:flagcx`` -> [('cpu', 'gloo'), ('cuda', 'flagcx')] (torch.distributed's composite form).
    ValueError says what is wrong."""
    if ":" not in spec:
        if not _BACKEND_NAME.fullmatch(spec):
            raise ValueError(f"expected a backend name or device:backend pairs such as cpu:gloo,cuda:nccl, got "
                             f"{spec!r}")
        return [(None, spec)]
    out: list = []
    for part in spec.split(","):
        device, sep, name = part.strip().partition(":")
        if not sep or device not in TORCH_DEVICES or not _BACKEND_NAME.fullmatch(name):
            raise ValueError(f"expected device:backend pairs (devices: {', '.join(TORCH_DEVICES)}) such as "
                             f"cpu:gloo,cuda:nccl, got {part.strip()!r} in {spec!r}")
        if any(d == device for d, _ in out):
            raise ValueError(f"device {device} named twice in {spec!r}")
        out.append((device, name))
    return out


def backend_problems(spec: str, device: str | None, has_module: bool) -> list:
    """What is wrong with a dist_backend for a profile whose ranks use torch ``device`` (None: not known): a
    built-in backend with another device than its own (gloo goes with any); a backend of none of torch's
    (flagcx, ...) without dist_backend_module to register it; a composite spec without an entry for ``device``."""
    try:
        pairs = parse_backend_spec(spec)
    except ValueError as exc:
        return [str(exc)]
    problems = []
    for dev, name in pairs:
        dev = dev or device
        if name in DIST_BACKENDS:
            if name != "gloo" and dev is not None and DEVICE_BACKEND[dev] != name:
                problems.append(f"expected {DEVICE_BACKEND[dev]} or gloo with torch device {dev}, got {name!r}"
                                + (f" in {spec!r}" if len(pairs) > 1 or pairs[0][0] else ""))
        elif not has_module:
            problems.append(f"{name!r} is none of torch's backends ({', '.join(DIST_BACKENDS)}): name the module "
                            f"that registers it in dist_backend_module (e.g. flagcx)")
    if device is not None and pairs[0][0] is not None and not any(d == device for d, _ in pairs):
        problems.append(f"{spec!r} names no backend for the torch device {device}")
    return problems


def _load_container(p: _Problems, raw: dict) -> ContainerSpec:
    p.unknown(raw, CONTAINER_KEYS, "container.")
    kw: dict = {}
    if "gpus" in raw:
        gpus = raw["gpus"]
        if gpus in ("all", "none") or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0):
            kw["gpus"] = "none" if gpus == 0 else gpus
        else:
            p.add("container.gpus", f"expected all, none or a number of GPUs, got {gpus!r}")
    checks = {"devices": check_device, "volumes": check_volume, "group_add": check_group,
              "cap_add": check_word, "security_opt": check_word}
    for key in LIST_FIELDS:
        items = p.get(raw, key, list, [], f"container.{key}")
        for i, item in enumerate(items):
            if checks[key](item):
                p.add(f"container.{key}[{i}]", checks[key](item))
        kw[key] = tuple(str(item) for item in items)
    env = p.get(raw, "env", dict, {}, "container.env")
    for key, value in env.items():
        if not (isinstance(key, str) and ENV_NAME.fullmatch(key)):
            p.add(f"container.env.{key}", "expected an environment variable name")
        elif check_env_value(value):
            p.add(f"container.env.{key}", check_env_value(value))
    kw["env"] = tuple((str(k), str(v)) for k, v in env.items())
    shm = p.get(raw, "shm_size", (str, int), None, "container.shm_size")
    if shm is not None and check_size(shm):
        p.add("container.shm_size", check_size(shm))
    kw["shm_size"] = None if shm is None else str(shm)
    ulimits = []
    for key, value in p.get(raw, "ulimits", dict, {}, "container.ulimits").items():
        if key not in ULIMIT_NAMES:
            p.add(f"container.ulimits.{key}", f"expected a ulimit name ({', '.join(ULIMIT_NAMES)})")
            continue
        try:
            ulimits.append((key, *parse_ulimit(value)))
        except ValueError as exc:
            p.add(f"container.ulimits.{key}", str(exc))
    kw["ulimits"] = tuple(ulimits)
    kw["privileged"] = p.get(raw, "privileged", bool, False, "container.privileged")
    ipc = p.get(raw, "ipc_mode", str, "host", "container.ipc_mode")
    if ipc not in IPC_MODES:
        p.add("container.ipc_mode", f"expected one of {', '.join(IPC_MODES)}, got {ipc!r}")
    kw["ipc_mode"] = ipc
    for key in ("pid_mode", "uts_mode"):
        mode = p.get(raw, key, (str, type(None)), None, f"container.{key}")
        if mode is not None and mode not in NAMESPACE_MODES:
            p.add(f"container.{key}", f"expected host or null (the container's own namespace), got {mode!r}")
        kw[key] = mode if mode in NAMESPACE_MODES else None
    runtime = p.get(raw, "runtime", (str, type(None)), None, "container.runtime")
    if runtime is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", runtime):
        p.add("container.runtime", f"expected a docker runtime name such as nvidia, got {runtime!r}")
    kw["runtime"] = runtime
    return ContainerSpec(**kw)


def usable_on_host(profile: VendorProfile, probe_info: dict, runtime: str) -> str | None:
    """Why ``profile`` cannot run on a host, from launcher/probe.py's answer there (None: nothing against it).

    - RUNTIME bare (ranks use the host's Python): the vendor's torch plug-in must be importable there (in a
      container it comes with the image);
    - the accelerator plug-in (``gpu_monitor``) must be able to count the host's accelerators;
    - an accelerator device (cuda, npu, ...) needs at least one accelerator (when the plug-in can count them:
      with ``gpu_monitor: none`` the count is unknown).
    Whether there are enough accelerators for the cases is the caller's business. The probe must have been
    asked about this profile (``--accel <gpu_monitor> --torch-plugin <torch_plugin>``); what it was not asked
    about is not held against the profile."""
    info: dict = probe_info if isinstance(probe_info, dict) else {}
    problems = []
    plugin: dict = info["torch_plugin"] if isinstance(info.get("torch_plugin"), dict) else {}
    if runtime == "bare" and profile.torch_plugin and plugin.get("module") == profile.torch_plugin \
            and not plugin.get("found"):
        python = info.get("executable") or "the host's python"
        problems.append(f"its torch plug-in {profile.torch_plugin} is not importable by {python}, the Python "
                        f"that RUNTIME: bare runs the ranks with ({plugin.get('error') or 'not found'})")
    if profile.device == "other" and not profile.torch_device:
        problems.append("it names no torch_device (device: other), so the ranks would not know which torch "
                        "device to use; set torch_device in its vendor.yaml")
    acc: dict = info["accelerators"] if isinstance(info.get("accelerators"), dict) else {}
    monitor = profile.gpu_monitor
    if monitor != NO_GPU_MONITOR and acc.get("source") == monitor:
        count = acc.get("count")
        device = profile.torch_device or profile.device
        if acc.get("error"):
            problems.append(f"the {monitor} plug-in cannot count the accelerators: {acc['error']}")
        elif device not in ("cpu", "other") and isinstance(count, int) and count < 1:
            problems.append(f"torch device {device}, but the {monitor} plug-in finds no accelerator on the host")
    return "; ".join(problems) or None


def detect_vendor() -> tuple[str, str]:
    """The vendor for ``VENDOR: auto`` on this machine: nvidia when NVML sees a GPU, else cpu."""
    try:
        import pynvml
    except ImportError:
        return "cpu", "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return "cpu", f"NVML unavailable ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if count > 0:
        return "nvidia", f"NVML sees {count} GPU(s)"
    return "cpu", "NVML sees no GPU"


def _type_name(types) -> str:
    names = {str: "a string", list: "a list", dict: "a mapping", bool: "true or false", int: "an integer",
             type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)
