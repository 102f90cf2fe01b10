#!/usr/bin/env python3
"""flagperf host monitor: samples CPU, memory, host power and GPUs while a benchmark round runs.

    monitor.py --out-dir DIR --interval SECONDS --gpu {nvml,none} [--vendor NAME] [--run-id ID] [--max-seconds S]

Runs on the benchmarked host. Dependencies: stdlib, psutil, and pynvml only with --gpu nvml (imported lazily).
It never imports the flagperf package. Each sensor writes its own file in DIR, one line per sample:

    <ISO-8601 local time with ms and offset> key=value key=value ...

Sensors that are missing get no data file; monitor_status.json says which sensors are available and why not.
Diagnostics go to monitor.log. Stops on SIGTERM/SIGINT, after --max-seconds, or when the parent process dies.
File formats: docs/monitors.md.
"""
import argparse
import glob
import json
import math
import os
import re
import signal
import sys
import threading
import time
from datetime import datetime

STATUS_SCHEMA = "flagperf.monitor-status/1"
MIB = 1024 * 1024
FIRST_WINDOW_S = 0.1  # minimum averaging window of the first cpu/pwr value after priming
RESERVED_FILES = ("cpu", "mem", "pwr")

try:
    import psutil
except ImportError as _e:  # reported as unavailable cpu/mem sensors, not as a crash
    psutil, PSUTIL_ERROR = None, f"psutil not importable: {_e}"


def now_iso():
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def fmt(fields):
    """`key=value ...`; non-finite floats are dropped so data files only ever hold plain numbers."""
    return " ".join(f"{k}={v}" for k, v in fields.items()
                    if not (isinstance(v, float) and not math.isfinite(v)))


def read_int(path):
    with open(path) as f:
        return int(f.read().strip())


def sysfs_root(root=None):
    return root or os.environ.get("FLAGPERF_SYSFS_ROOT", "/sys")


# ---------------------------------------------------------------- sensors
# Each sensor has read(now) -> dict | list[dict] | None (None: nothing to write this tick).

class CpuSensor:
    status = {"available": True, "source": "psutil"}

    def __init__(self):
        psutil.cpu_percent(interval=None)  # prime: the next call reports utilisation since now

    def read(self, now):
        return {"util_pct": psutil.cpu_percent(interval=None), "load1": round(os.getloadavg()[0], 2)}


class MemSensor:
    status = {"available": True, "source": "psutil"}

    def read(self, now):
        vm = psutil.virtual_memory()
        return {"used_mib": round(vm.used / MIB, 1), "available_mib": round(vm.available / MIB, 1),
                "total_mib": round(vm.total / MIB, 1), "used_pct": vm.percent}


class RaplPower:
    """Sum of RAPL package energy counters; watts = energy delta / elapsed time, wrap-corrected."""

    def __init__(self, zones):
        self.zones = zones  # [(name, energy_uj path, max_energy_range_uj)]
        self.prev = None
        self.status = {"available": True, "source": "rapl", "zones": [z[0] for z in zones]}

    @classmethod
    def discover(cls, root=None):
        """-> (RaplPower | None, problem text | None)."""
        zones, problem = [], None
        for d in sorted(glob.glob(os.path.join(sysfs_root(root), "class", "powercap", "intel-rapl:*"))):
            if not re.fullmatch(r"intel-rapl:\d+", os.path.basename(d)):
                continue  # sub-zones (core, uncore, dram) are contained in their package
            try:
                with open(os.path.join(d, "name")) as f:
                    name = f.read().strip()
            except OSError:
                name = os.path.basename(d)
            if name == "psys":
                continue  # platform domain overlaps the packages
            try:
                read_int(os.path.join(d, "energy_uj"))
                max_range = read_int(os.path.join(d, "max_energy_range_uj"))
            except PermissionError:
                problem = "RAPL energy counters not readable (permission denied; root needed)"
                continue
            except (OSError, ValueError):
                continue
            zones.append((name, os.path.join(d, "energy_uj"), max_range))
        return (cls(zones), None) if zones else (None, problem)

    def read(self, now):
        energies = [read_int(path) for _, path, _ in self.zones]
        prev, self.prev = self.prev, (now, energies)
        if prev is None or now <= prev[0]:
            return None
        total = 0
        for e, e0, (_, _, max_range) in zip(energies, prev[1], self.zones):
            delta = e - e0
            if delta < 0:  # counter wrapped at max_energy_range_uj
                if max_range <= 0:
                    return None
                delta += max_range
            total += delta
        return {"power_w": round(total / 1e6 / (now - prev[0]), 2)}


class HwmonPower:
    """Sum of hwmon power*_input (or power*_average where a channel has no _input), in microwatts."""

    def __init__(self, files):
        self.files = files
        self.status = {"available": True, "source": "hwmon", "files": files}

    @classmethod
    def discover(cls, root=None):
        channels = {}
        pattern = os.path.join(sysfs_root(root), "class", "hwmon", "hwmon*", "power*_*")
        for path in sorted(glob.glob(pattern)):
            m = re.fullmatch(r"(power\d+)_(input|average)", os.path.basename(path))
            if not m:
                continue
            key = (os.path.dirname(path), m[1])
            if key in channels and m[2] == "average":
                continue  # keep _input
            try:
                read_int(path)
            except (OSError, ValueError):
                continue
            channels[key] = path
        return cls(sorted(channels.values())) if channels else None

    def read(self, now):
        return {"power_w": round(sum(read_int(p) for p in self.files) / 1e6, 2)}


class NvmlGpus:
    """One line per GPU via NVML; a field the device does not support is left out of its lines."""

    def __init__(self, nv, log):
        self.nv, self.log = nv, log
        self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        self.skip = set()  # (index, field) that raised NotSupported
        devices = []
        for i, h in enumerate(self.handles):
            dev = {"index": i}
            for key, fn in (("name", nv.nvmlDeviceGetName), ("uuid", nv.nvmlDeviceGetUUID)):
                try:
                    v = fn(h)
                    dev[key] = v.decode() if isinstance(v, bytes) else v
                except nv.NVMLError:
                    pass
            devices.append(dev)
        self.status = {"available": True, "source": "nvml", "count": len(devices), "devices": devices}
        self.fields = (
            ("temp", lambda h: {"temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)}),
            ("power", lambda h: {"power_w": round(nv.nvmlDeviceGetPowerUsage(h) / 1000, 1)}),
            ("mem", self._mem),
            ("util", lambda h: {"util_pct": nv.nvmlDeviceGetUtilizationRates(h).gpu}),
        )

    def _mem(self, h):
        m = self.nv.nvmlDeviceGetMemoryInfo(h)
        return {"mem_used_mib": round(m.used / MIB, 1), "mem_total_mib": round(m.total / MIB, 1)}

    @classmethod
    def open(cls, log):
        """-> (NvmlGpus | None, reason | None)."""
        try:
            import pynvml as nv
        except ImportError as e:
            return None, f"pynvml not installed ({e})"
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            return None, f"NVML not usable: {e}"
        try:
            gpus = cls(nv, log)
        except nv.NVMLError as e:
            nv.nvmlShutdown()
            return None, f"NVML device query failed: {e}"
        if not gpus.handles:
            nv.nvmlShutdown()
            return None, "NVML found no GPU"
        return gpus, None

    def read(self, now):
        rows = []
        for i, h in enumerate(self.handles):
            row = {"gpu": i}
            for name, fn in self.fields:
                if (i, name) in self.skip:
                    continue
                try:
                    row.update(fn(h))
                except self.nv.NVMLError_NotSupported:
                    self.skip.add((i, name))
                    self.log.once(f"gpu {i}: {name} not supported, field omitted")
                except self.nv.NVMLError as e:
                    self.log.once(f"gpu {i}: {name}: {e}")
            if len(row) > 1:
                rows.append(row)
        return rows

    def close(self):
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass


# ---------------------------------------------------------------- monitor

class Log:
    """monitor.log: plain text, one timestamped line per message; once() suppresses repeats."""

    def __init__(self, path):
        self.f = open(path, "a")
        self.seen = set()

    def __call__(self, msg):
        self.f.write(f"{now_iso()} {msg}\n")
        self.f.flush()

    def once(self, msg):
        if msg not in self.seen:
            self.seen.add(msg)
            self(msg)


def write_json_atomic(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def setup_sensors(gpu, vendor, log, root=None):
    """-> ({name: (sensor, file name)} for available sensors, {name: status entry} for all)."""
    sensors, status = {}, {}
    if psutil is None:
        status["cpu"] = status["mem"] = {"available": False, "reason": PSUTIL_ERROR}
    else:
        sensors["cpu"], sensors["mem"] = CpuSensor(), MemSensor()
    rapl, problem = RaplPower.discover(root)
    pwr = rapl or HwmonPower.discover(root)
    if pwr:
        sensors["pwr"] = pwr
        pwr.read(time.monotonic())  # prime RAPL: the first tick reports power since now
    else:
        status["pwr"] = {"available": False,
                         "reason": "; ".join(filter(None, [problem, "no RAPL energy counters or hwmon power sensors"]))}
    if gpu == "nvml":
        gpus, reason = NvmlGpus.open(log)
        if gpus:
            sensors["gpu"] = gpus
        else:
            status["gpu"] = {"available": False, "reason": reason}
    else:
        status["gpu"] = {"available": False, "reason": "disabled (--gpu none)"}
    files = {name: (s, f"{vendor if name == 'gpu' else name}_monitor.log") for name, s in sensors.items()}
    for name, (s, fname) in files.items():
        status[name] = dict(s.status, file=fname)
    if "gpu" in status:
        status["gpu"]["vendor"] = vendor
    return files, {k: status[k] for k in ("cpu", "mem", "pwr", "gpu")}


class Monitor:
    def __init__(self, out_dir, sensors, log):
        self.log = log
        self.sensors = [(name, s, open(os.path.join(out_dir, fname), "w")) for name, (s, fname) in sensors.items()]
        self.samples, self.cost_s = 0, 0.0

    def tick(self):
        t = time.perf_counter()
        now, ts = time.monotonic(), now_iso()
        for name, sensor, f in self.sensors:
            try:
                rows = sensor.read(now)
            except Exception as e:  # one failing sensor must not stop the others
                self.log.once(f"{name}: read failed: {type(e).__name__}: {e}")
                continue
            if rows:
                f.write("".join(f"{ts} {fmt(r)}\n" for r in ([rows] if isinstance(rows, dict) else rows)))
                f.flush()
        self.samples += 1
        self.cost_s += time.perf_counter() - t

    def close(self):
        for _, sensor, f in self.sensors:
            f.close()
            if hasattr(sensor, "close"):
                sensor.close()


def run_loop(mon, interval, stop, ppid, deadline, first_at):
    """Sample at first_at + k*interval until stopped; -> stop reason (None: stopped by a signal)."""
    def wait_until(t):
        while not stop.is_set():
            if os.getppid() != ppid:
                return "parent exited"
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "max-seconds reached"
            if now >= t:
                return None
            stop.wait(min(t - now, 1.0, deadline - now if deadline is not None else 1.0))
        return None

    reason = wait_until(first_at)
    k = 0
    while reason is None and not stop.is_set():
        mon.tick()
        k += 1
        behind = int((time.monotonic() - first_at) / interval) + 1
        if behind > k:
            mon.log.once("sampling fell behind schedule; ticks skipped")
            k = behind
        reason = wait_until(first_at + k * interval)
    return reason


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", required=True)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--gpu", choices=("nvml", "none"), default="nvml")
    p.add_argument("--vendor", default="nvidia", help="names the GPU file <vendor>_monitor.log")
    p.add_argument("--run-id")
    p.add_argument("--max-seconds", type=float, help="stop by itself after this many seconds")
    args = p.parse_args(argv)
    if not args.interval > 0:
        p.error("--interval must be > 0")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.vendor) or (args.gpu != "none" and args.vendor in RESERVED_FILES):
        p.error(f"--vendor {args.vendor!r} cannot name a GPU file")
    return args


def main(argv=None):
    ppid, started_mono = os.getppid(), time.monotonic()
    stop, signals = threading.Event(), []

    def on_signal(signum, frame):
        signals.append(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    log = Log(os.path.join(args.out_dir, "monitor.log"))
    sensors, sensor_status = setup_sensors(args.gpu, args.vendor, log)  # primes cpu and RAPL counters
    primed = time.monotonic()
    status = {"schema": STATUS_SCHEMA, "pid": os.getpid(), "run_id": args.run_id, "interval_s": args.interval,
              "started": now_iso(), "sensors": sensor_status}
    status_path = os.path.join(args.out_dir, "monitor_status.json")
    write_json_atomic(status_path, status)
    log(f"started pid={os.getpid()} ppid={ppid} interval={args.interval}s run_id={args.run_id} "
        f"sensors={','.join(sensors)}")
    for name, st in sensor_status.items():
        if not st["available"]:
            log(f"sensor {name} unavailable: {st['reason']}")

    mon = Monitor(args.out_dir, sensors, log)
    deadline = started_mono + args.max_seconds if args.max_seconds is not None else None
    try:
        reason = run_loop(mon, args.interval, stop, ppid, deadline, primed + min(FIRST_WINDOW_S, args.interval))
    except Exception:
        import traceback
        log("crashed:\n" + traceback.format_exc())
        return 1
    finally:
        mon.close()
    reason = reason or (f"signal {signals[0]}" if signals else "stopped")
    cost_ms = round(mon.cost_s / mon.samples * 1000, 3) if mon.samples else None
    write_json_atomic(status_path, dict(status, stopped=now_iso(), stop_reason=reason,
                                        samples=mon.samples, sample_ms_mean=cost_ms))
    log(f"stopped ({reason}) after {mon.samples} samples, mean sample cost {cost_ms} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
