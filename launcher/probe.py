#!/usr/bin/env python3
"""flagperf host probe: prints one JSON object describing this host (stdlib only; torch/pynvml if present).

Usage: probe.py [--path P ...] [--torch]
"""

import argparse
import json
import os
import platform
import shutil
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", action="append", default=[], help="a path whose existence and free space to report")
    ap.add_argument("--torch", action="store_true", help="also import torch and report its accelerators")
    args = ap.parse_args()
    out = {
        "python": list(sys.version_info[:3]),
        "executable": sys.executable,
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "paths": {},
    }
    for p in args.path:
        probe = p
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe.rstrip("/")) or "/"
        usage = shutil.disk_usage(probe) if probe else None
        out["paths"][p] = {
            "exists": os.path.isdir(p),
            "writable": os.access(probe, os.W_OK) if probe else False,
            "free_bytes": usage.free if usage else None,
        }
    try:
        import pynvml
        pynvml.nvmlInit()
        out["nvml_gpus"] = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - no NVML simply means no NVIDIA GPU visible
        out["nvml_gpus"] = 0
        out["nvml_error"] = str(exc) or type(exc).__name__
    if args.torch:
        try:
            import torch
            out["torch"] = torch.__version__
            out["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception as exc:  # noqa: BLE001
            out["torch"] = None
            out["torch_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
