#!/usr/bin/env python3
"""flagperf host probe: prints one JSON object describing this host. Stdlib only, and cheap: torch and the
vendor's torch plug-in are found, not imported (importing them costs seconds of CPU per host).

Accelerators are counted by the accelerator plug-in named by --accel (monitors/accel/<PLUGIN>.py of the
flagperf tree at --flagperf-path, loaded by file path: the driver runs this file as ``python -c <source>``, so
it has no __file__ to find the tree from); ``none`` counts nothing. Without the plug-in file (a tree not
deployed yet), nvml still counts through NVML, else from the /dev/nvidia<N> device files. Written without
f-strings so that an old interpreter still reports its version instead of a syntax error.

Usage: probe.py [--path P ...] [--flagperf-path FP] [--accel PLUGIN] [--torch-plugin MODULE]

Output keys: python, executable, hostname, cpu_count, paths, torch, torch_error,
accelerators {"source": PLUGIN, "count": N, "error": reason or null}, gpus (= accelerators.count), gpus_from,
torch_plugin {"module": MODULE or null, "found": bool, "error": reason or null}.
"""

import argparse
import glob
import json
import os
import platform
import re
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
        "is_file": os.path.isfile(p),
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


def nvml_count():
    """The nvml plug-in's count when the tree is not there: NVML, else the /dev/nvidia<N> device files."""
    devices = len(glob.glob("/dev/nvidia[0-9]*"))
    if not devices:
        return 0, None              # no NVIDIA device files: no need to load NVML
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount(), None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: fall back to the device files
        return devices, None


def describe(exc):
    return ("%s: %s" % (type(exc).__name__, exc)).strip().rstrip(":")


def accelerator_count(plugin, flagperf_path):
    """(count, error) of accelerator plug-in ``plugin``: FP/monitors/accel/<plugin>.py's count()."""
    if plugin == "none":
        return 0, None
    if not re.match(r"[A-Za-z0-9_]+$", plugin) or plugin.startswith("_"):
        return 0, "%r is not an accelerator plug-in name" % plugin
    path = os.path.join(flagperf_path, "monitors", "accel", plugin + ".py") if flagperf_path else None
    if path is None or not os.path.isfile(path):
        if plugin == "nvml":
            return nvml_count()
        return 0, "no accelerator plug-in %s" % (path or (plugin + " (no --flagperf-path)"))
    try:
        import importlib.util
        if flagperf_path not in sys.path:
            sys.path.insert(0, flagperf_path)   # plug-ins import monitors.accel._cli
        spec = importlib.util.spec_from_file_location("flagperf_accel_" + plugin, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        count, error = module.count()
    except Exception as exc:  # noqa: BLE001 - a broken plug-in is a reason, not a crashed probe
        return 0, "plug-in %s failed: %s" % (plugin, describe(exc))
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return 0, "plug-in %s counted %r" % (plugin, count)
    return count, error


def torch_plugin_info(module):
    """Whether ``module`` (the vendor's torch plug-in, e.g. torch_npu) can be found, without importing it."""
    if not module:
        return {"module": None, "found": False, "error": None}
    try:
        import importlib.util
        spec = importlib.util.find_spec(module)
    except Exception as exc:  # noqa: BLE001 - a parent package that fails to import, a bad name
        return {"module": module, "found": False, "error": describe(exc)}
    if spec is None:
        return {"module": module, "found": False, "error": "No module named %r" % module}
    return {"module": module, "found": True, "error": None}


PORT_SETTLE_S = 5.0     # a taken port is tried again for this long: the sockets of a run that just ended close


def _listen_error(port):
    """None when ``port`` can be listened on as rank 0's rendezvous store will (all interfaces, SO_REUSEADDR),
    else the OSError."""
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        s.listen(1)
        return None
    except OSError as exc:
        return exc
    finally:
        s.close()


def port_holders(port, limit=3):
    """Who listens on TCP ``port`` here, as "pid <N> (<comm>)" strings (at most ``limit``), read from
    /proc/net/tcp{,6} and /proc/<pid>/fd; [] where that cannot be read (another user's process, no /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except (OSError, ValueError, IndexError):
            continue
    found = []
    if not inodes:
        return found
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        try:
            links = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in links:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                pid = fd_dir.split("/")[2]
                try:
                    with open("/proc/%s/comm" % pid) as f:
                        comm = f.read().strip()
                except OSError:
                    comm = "?"
                found.append("pid %s (%s)" % (pid, comm))
                break
        if len(found) >= limit:
            break
    return found


def port_info(port, settle_s=PORT_SETTLE_S):
    """Whether a TCP port can be listened on, as rank 0's rendezvous store will. A taken port is tried again
    for ``settle_s`` (the sockets of a run that just ended may hold it a moment); a port still taken is
    reported with who listens on it, where /proc tells, and the first free port after it."""
    if port is None:
        return None
    import errno
    import time
    deadline = time.monotonic() + settle_s
    while True:
        exc = _listen_error(port)
        if exc is None:
            return {"port": port, "free": True, "error": None}
        if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    return {"port": port, "free": False, "error": describe(exc), "holders": port_holders(port),
            "free_port": free_port_after(port)}


def free_port_after(port, tries=100):
    """The first port after ``port`` that can be listened on (None: none of the next ``tries``)."""
    import socket
    for candidate in range(port + 1, min(port + tries, 65535) + 1):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", candidate))
            s.listen(1)
            return candidate
        except OSError:
            continue
        finally:
            s.close()
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", action="append", default=[], help="a path whose existence and free space to report")
    ap.add_argument("--flagperf-path", default=None, help="the flagperf tree (FLAGPERF_PATH) on this host")
    ap.add_argument("--accel", default="nvml", help="accelerator plug-in that counts the accelerators, or none")
    ap.add_argument("--torch-plugin", default=None, help="the vendor's torch plug-in module, e.g. torch_npu")
    ap.add_argument("--port", type=int, default=None, help="a TCP port rank 0 will listen on (MASTER_PORT)")
    args = ap.parse_args()
    version, error = torch_info()
    count, count_error = accelerator_count(args.accel, args.flagperf_path)
    out = {
        "python": list(sys.version_info[:3]),
        "executable": sys.executable,
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "paths": dict((p, path_info(p)) for p in args.path),
        "torch": version,
        "torch_error": error,
        "accelerators": {"source": args.accel, "count": count, "error": count_error},
        "gpus": count,
        "gpus_from": args.accel,
        "torch_plugin": torch_plugin_info(args.torch_plugin),
        "master_port": port_info(args.port),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
