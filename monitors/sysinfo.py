"""sys_info.log: what the host is, written by the monitor into every node directory when it starts.

Standard library and flagperf_contract only; runs on the hosts. Plain text, one ``key: value`` line per fact,
always the same keys in the same order (``KEYS``); a fact that cannot be read is ``unknown``, one that does not
exist is ``none``. Nothing here starts a process or imports torch: torch's versions come from its
``torch/version.py`` (what ``torch.__version__``, ``torch.version.cuda`` and ``torch.version.hip`` report), found
with importlib's ``find_spec``. The accelerator facts are what the monitor's accelerator plug-in reported when it
opened (names, driver and CUDA versions). docs/results.md describes the file.
"""
import ast
import os
import platform
import re
import sys

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from flagperf_contract import write_atomic  # noqa: E402

UNKNOWN, NONE = "unknown", "none"
KEYS = ("hostname", "os", "kernel", "arch", "cpu_model", "cpu_count", "memory_mib", "server_vendor", "server_model",
        "accelerator_plugin", "accelerator_count", "accelerators", "accelerator_driver", "accelerator_runtime",
        "python", "torch", "torch_cuda", "torch_hip")
READ_LIMIT = 1 << 20


def _read(path):
    """The text of a small file, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(READ_LIMIT).decode("utf-8", "replace")
    except OSError:
        return None


def os_name(path="/etc/os-release"):
    """PRETTY_NAME of os-release (NAME VERSION when it has none), or unknown."""
    text = _read(path) or ""
    fields = {}
    for line in text.splitlines():
        m = re.match(r"\s*([A-Z_]+)=(.*)$", line)
        if m:
            value = m.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            fields[m.group(1)] = value
    name = fields.get("PRETTY_NAME") or " ".join(filter(None, (fields.get("NAME"), fields.get("VERSION"))))
    return name or UNKNOWN


def cpu_model(path="/proc/cpuinfo"):
    """The first ``model name`` (x86) or ``Model``/``Hardware`` (ARM) of /proc/cpuinfo, else unknown."""
    text = _read(path) or ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        m = re.search(r"^%s\s*:\s*(.+)$" % re.escape(key), text, re.M)
        if m and m.group(1).strip():
            return m.group(1).strip()
    return UNKNOWN


def memory_mib(path="/proc/meminfo"):
    """MemTotal in MiB (one decimal), or unknown."""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", _read(path) or "", re.M)
    return "%.1f" % (int(m.group(1)) / 1024.0) if m else UNKNOWN


def dmi(name, sysfs="/sys"):
    """/sys/class/dmi/id/<name> (sys_vendor, product_name), or unknown (no DMI, a VM without it, no access)."""
    value = (_read(os.path.join(sysfs, "class", "dmi", "id", name)) or "").strip()
    return value or UNKNOWN


def torch_versions():
    """(version, cuda, hip) from torch/version.py of the torch this interpreter would import; (None, None, None)
    when there is none. A version the file does not hold is None."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
    except Exception:  # noqa: BLE001 - a broken parent package or path entry: as if there were no torch
        return None, None, None
    if spec is None:
        return None, None, None
    for location in spec.submodule_search_locations or []:
        text = _read(os.path.join(location, "version.py"))
        if text is None:
            continue
        found = {}
        for line in text.splitlines():
            m = re.match(r"(__version__|cuda|hip)\s*(?::[^=]*)?=\s*(.+)$", line)
            if m:
                try:
                    value = ast.literal_eval(m.group(2).strip())
                except (ValueError, SyntaxError):
                    continue
                found[m.group(1)] = value if isinstance(value, str) and value else None
        return found.get("__version__") or UNKNOWN, found.get("cuda"), found.get("hip")
    return UNKNOWN, None, None


def accelerator_names(devices):
    """``8 x NVIDIA H200`` (or ``NVIDIA H100, 2 x NVIDIA A100``), in index order; none without devices."""
    groups = []
    for d in devices:
        name = str(d.get("name") or UNKNOWN)
        if groups and groups[-1][0] == name:
            groups[-1][1] += 1
        else:
            groups.append([name, 1])
    return ", ".join(name if n == 1 else "%d x %s" % (n, name) for name, n in groups) or NONE


def accelerator_facts(plugin, gpu):
    """The accelerator keys from the monitor's gpu sensor status (a dict: available, count, devices,
    driver_version, cuda_driver_version); ``plugin`` is the --gpu name."""
    if not gpu or not gpu.get("available"):
        return {"accelerator_plugin": plugin, "accelerator_count": "0", "accelerators": NONE,
                "accelerator_driver": NONE, "accelerator_runtime": NONE}
    devices = gpu.get("devices") or []
    cuda = gpu.get("cuda_driver_version")
    return {"accelerator_plugin": plugin, "accelerator_count": str(gpu.get("count", len(devices))),
            "accelerators": accelerator_names(devices),
            "accelerator_driver": str(gpu.get("driver_version") or UNKNOWN),
            "accelerator_runtime": "CUDA %s" % cuda if cuda else UNKNOWN}


def collect(plugin, gpu, sysfs="/sys"):
    """{key: value} for every key of KEYS."""
    version, cuda, hip = torch_versions()
    facts = {
        "hostname": platform.node() or UNKNOWN,
        "os": os_name(),
        "kernel": platform.release() or UNKNOWN,
        "arch": platform.machine() or UNKNOWN,
        "cpu_model": cpu_model(),
        "cpu_count": str(os.cpu_count() or UNKNOWN),
        "memory_mib": memory_mib(),
        "server_vendor": dmi("sys_vendor", sysfs),
        "server_model": dmi("product_name", sysfs),
        "python": "%s (%s)" % (platform.python_version(), sys.executable or UNKNOWN),
        "torch": version or NONE,
        "torch_cuda": cuda or NONE,
        "torch_hip": hip or NONE,
    }
    facts.update(accelerator_facts(plugin, gpu))
    return {k: facts[k] for k in KEYS}


def render(facts):
    """``key: value`` lines; a value is kept on its line (control characters become spaces)."""
    return "".join("%s: %s\n" % (k, re.sub(r"[\x00-\x1f\x7f]+", " ", str(v)).strip() or UNKNOWN)
                   for k, v in facts.items())


def write(path, facts):
    """Write the file atomically (readers see the old file or the whole new one)."""
    write_atomic(path, render(facts))
