#!/usr/bin/env python3
"""flagperf host probe: prints one JSON object describing this host. Stdlib only, and cheap: torch is found,
not imported (importing it costs seconds of CPU per host); accelerators are counted through NVML when
pynvml is there, else from the /dev/nvidia<N> device files. Written without f-strings so that an old
interpreter still reports its version instead of a syntax error.

Usage: probe.py [--path P ...]
"""

import argparse
import glob
import json
import os
import platform
import shutil
import sys


def path_info(p):
    probe = p
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe.rstrip("/")) or "/"
        if parent == probe:
            break
        probe = parent
    usage = shutil.disk_usage(probe) if probe and os.path.exists(probe) else None
    return {
        "exists": os.path.isdir(p),
        "writable": bool(probe) and os.access(probe, os.W_OK),
        "free_bytes": usage.free if usage else None,
    }


def torch_info():
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
    except Exception as exc:  # noqa: BLE001
        return None, "%s: %s" % (type(exc).__name__, exc)
    if spec is None:
        return None, "No module named 'torch'"
    # torch/version.py holds `__version__ = '2.x.y'`: read it rather than importing importlib.metadata.
    for location in spec.submodule_search_locations or []:
        try:
            with open(os.path.join(location, "version.py")) as f:
                for line in f:
                    if line.startswith("__version__"):
                        return line.split("=", 1)[1].strip().strip("'\""), None
        except OSError:
            continue
    return "unknown", None


def gpu_count():
    devices = len(glob.glob("/dev/nvidia[0-9]*"))
    if not devices:
        return 0, "dev"             # no NVIDIA device files: no need to load NVML
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount(), "nvml"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: fall back to the device files
        return devices, "dev"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", action="append", default=[], help="a path whose existence and free space to report")
    args = ap.parse_args()
    version, error = torch_info()
    gpus, source = gpu_count()
    out = {
        "python": list(sys.version_info[:3]),
        "executable": sys.executable,
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "paths": dict((p, path_info(p)) for p in args.path),
        "torch": version,
        "torch_error": error,
        "gpus": gpus,
        "gpus_from": source,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
