#!/usr/bin/env python3
"""flagperf host monitor: samples CPU, memory, host power and accelerators while a benchmark round runs.

    monitor.py --out-dir DIR --interval SECONDS --gpu PLUGIN [--vendor NAME] [--run-id ID] [--max-seconds S]
               [--format native|flagperf]

Runs on the benchmarked host. Dependencies: stdlib, psutil, flagperf_contract (from FLAGPERF_PATH, the folder
above this one) and whatever the accelerator plug-in needs (pynvml for nvml, imported lazily). --gpu names a
plug-in of monitors/accel/ (nvml, npu_smi, cnmon, ...) or none. It never imports the flagperf package. Each
sensor writes its own file in DIR, one line per sample:

    <ISO-8601 local time with ms and offset> key=value key=value ...

Sensors that are missing get no data file; monitor_status.json says which sensors are available and why not.
Diagnostics go to monitor.log. At start it writes sys_info.log (monitors/sysinfo.py), and health.json (the
passive health of the GPUs and the host, monitors/health.py) at start, at stop and on changes. With --format flagperf
FlagPerf's monitor files take FlagPerf's places in DIR, under FlagPerf's names and in its formats
(monitors/flagperf_format.py), and the data files above go to DIR/flagperf/ (NATIVE_MONITOR_DIR) instead;
monitor_status.json names where each is. Stops on SIGTERM/SIGINT, after --max-seconds, or when the parent
process dies. File formats: docs/monitors.md.
"""
import argparse
import dataclasses
import glob
import importlib
import math
import os
import re
import signal
import sys
import threading
import time
from datetime import datetime

FLAGPERF_PATH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if FLAGPERF_PATH not in sys.path:
    sys.path.insert(0, FLAGPERF_PATH)
from flagperf_contract import (HOST_SENSORS, MONITOR_LOG, MONITOR_STATUS_FILE, NATIVE_MONITOR_DIR,  # noqa: E402
                               SYS_INFO_FILE, MonitorStatus, SensorStatus, monitor_file_name, now_iso,
                               write_json_atomic)
from monitors import flagperf_format, health, sysinfo  # noqa: E402

MIB = 1024 * 1024
FIRST_WINDOW_S = 0.1  # minimum averaging window of the first cpu/pwr value after priming
MIN_INTERVAL_S = 0.05  # the driver refuses a MONITOR_INTERVAL below this too (flagperf/config.py)
FORMATS = ("native", "flagperf")  # flagperf: FlagPerf's files too (MONITOR_FORMAT in the test config)
ACCEL_DIR = os.path.join(FLAGPERF_PATH, "monitors", "accel")
_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")

try:
    import psutil
except ImportError as _e:  # reported as unavailable cpu/mem sensors, not as a crash
    psutil, PSUTIL_ERROR = None, f"psutil not importable: {_e}"


def fmt(fields):
    """`key=value ...` of the plain finite numbers in ``fields`` (whatever a plug-in returns), ``gpu`` first:
    anything else is dropped, so that data files only ever hold plain numbers."""
    return " ".join(f"{k}={fields[k]}" for k in sorted(fields, key=lambda k: k != "gpu")
                    if isinstance(k, str) and _KEY.match(k) and isinstance(fields[k], (int, float))
                    and not isinstance(fields[k], bool) and math.isfinite(fields[k]))


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


def accel_plugins(accel_dir=ACCEL_DIR):
    """The accelerator plug-ins: the modules of monitors/accel/ (helpers, named _*, excepted), sorted."""
    try:
        names = os.listdir(accel_dir)
    except OSError:
        return []
    return sorted(n[:-3] for n in names if n.endswith(".py") and not n.startswith("_")
                  and re.fullmatch(r"[A-Za-z0-9_]+", n[:-3]))


def load_plugin(name):
    """-> (module monitors.accel.<name>, None), or (None, why it cannot be loaded)."""
    if name not in accel_plugins():
        return None, f"no accelerator plug-in {name!r} in {ACCEL_DIR}"
    try:
        return importlib.import_module(f"monitors.accel.{name}"), None
    except Exception as e:  # a broken plug-in is an unavailable sensor, not a crashed monitor
        return None, f"plug-in {name} cannot be loaded: {type(e).__name__}: {e}"


def open_accelerators(name, log):
    """-> (sampler, None) or (None, reason) of plug-in ``name``."""
    plugin, problem = load_plugin(name)
    if plugin is None:
        return None, problem
    try:
        return plugin.open(log)
    except Exception as e:  # plug-ins report problems as reasons; this is a bug in one
        return None, f"plug-in {name} failed to open: {type(e).__name__}: {e}"


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


def setup_sensors(gpu, vendor, log, root=None, data_dir=""):
    """-> ({name: (sensor, file name)} for available sensors, {name: SensorStatus} for all of cpu, mem, pwr, gpu).
    ``gpu``: an accelerator plug-in of monitors/accel/ or "none". ``data_dir``: the folder of the node directory
    the data files go to ("": the node directory itself); file names are relative to the node directory."""
    sensors, status = {}, {}
    if psutil is None:
        status["cpu"] = status["mem"] = SensorStatus(False, reason=PSUTIL_ERROR)
    else:
        sensors["cpu"], sensors["mem"] = CpuSensor(), MemSensor()
    rapl, problem = RaplPower.discover(root)
    pwr = rapl or HwmonPower.discover(root)
    if pwr:
        sensors["pwr"] = pwr
        pwr.read(time.monotonic())  # prime RAPL: the first tick reports power since now
    else:
        status["pwr"] = SensorStatus(False, reason="; ".join(
            filter(None, [problem, "no RAPL energy counters or hwmon power sensors"])))
    if gpu == "none":
        status["gpu"] = SensorStatus(False, reason="disabled (--gpu none)", extra={"vendor": vendor})
    else:
        sampler, reason = open_accelerators(gpu, log)
        if sampler is not None:
            sensors["gpu"] = sampler
        else:
            status["gpu"] = SensorStatus(False, reason=reason, extra={"plugin": gpu, "vendor": vendor})
    files = {name: (s, "/".join(filter(None, (data_dir, monitor_file_name(name, vendor)))))
             for name, s in sensors.items()}
    for name, (s, fname) in files.items():
        extra = {k: v for k, v in s.status.items() if k not in ("available", "reason", "source", "file")}
        if name == "gpu":
            extra.update(plugin=gpu, vendor=vendor)
        status[name] = SensorStatus(True, source=s.status.get("source"), file=fname, extra=extra)
    return files, {k: status[k] for k in ("cpu", "mem", "pwr", "gpu")}


class Monitor:
    """Samples every sensor at each tick into its file; ``flagperf`` (a flagperf_format.FlagPerfFiles, or None)
    gets the same samples for FlagPerf's files; ``health`` (a health.Health, or None) ticks too, with the
    accelerator rows of the tick."""

    def __init__(self, out_dir, sensors, log, flagperf=None, health=None):
        self.log, self.flagperf, self.health = log, flagperf, health
        self.sensors = [(name, s, open(os.path.join(out_dir, fname), "w")) for name, (s, fname) in sensors.items()]
        self.samples, self.cost_s = 0, 0.0

    def tick(self):
        t = time.perf_counter()
        now, when = time.monotonic(), datetime.now().astimezone()
        ts = when.isoformat(timespec="milliseconds")        # what now_iso() gives, for this very instant
        gpu_rows = []
        for name, sensor, f in self.sensors:
            try:
                rows = sensor.read(now)
            except Exception as e:  # one failing sensor must not stop the others
                self.log.once(f"{name}: read failed: {type(e).__name__}: {e}")
                continue
            rows = [rows] if isinstance(rows, dict) else rows or []
            if name == "gpu":
                gpu_rows = rows
            lines = [fmt(r) for r in rows]
            if any(lines):
                f.write("".join(f"{ts} {line}\n" for line in lines if line))
                f.flush()
            if self.flagperf is not None:
                try:
                    self.flagperf.write(name, when, rows)
                except Exception as e:  # noqa: BLE001 - FlagPerf's files must never stop flagperf's own
                    self.log.once(f"flagperf format: {name}: {type(e).__name__}: {e}")
        if self.health is not None:
            try:
                self.health.tick(gpu_rows)
            except Exception as e:  # noqa: BLE001 - health must never stop the sampling
                self.log.once(f"health: {type(e).__name__}: {e}")
        self.samples += 1
        self.cost_s += time.perf_counter() - t

    def close(self):
        for _, sensor, f in self.sensors:
            f.close()
            if hasattr(sensor, "close"):
                sensor.close()
        if self.flagperf is not None:
            self.flagperf.close()


def write_sys_info(out_dir, plugin, gpu_status, log):
    """sys_info.log in the node directory; a failure is logged, never fatal."""
    try:
        sysinfo.write(os.path.join(out_dir, SYS_INFO_FILE), sysinfo.collect(plugin, gpu_status.to_dict(), sysfs_root()))
    except Exception as e:  # noqa: BLE001 - a host fact that cannot be written must not stop the sampling
        log(f"{SYS_INFO_FILE} not written: {type(e).__name__}: {e}")


def with_flagperf_files(sensor_status, files, final=False):
    """The sensors' statuses with what FlagPerf's files hold (``flagperf_file``, or ``flagperf_reason``); the
    pwr entry (ipmitool answers in its own time) only once the monitor has stopped (``final``)."""
    out = {}
    for name, st in sensor_status.items():
        extra = files.status(name) if (name != "pwr" or final) else {}
        out[name] = dataclasses.replace(st, extra={**st.extra, **extra}) if extra else st
    return out


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
    p.add_argument("--gpu", default="nvml", metavar="PLUGIN",
                   help=f"accelerator plug-in of monitors/accel/ ({', '.join(accel_plugins())}) or none "
                        "(default nvml)")
    p.add_argument("--vendor", default="nvidia", help="names the GPU file <vendor>_monitor.log")
    p.add_argument("--run-id")
    p.add_argument("--max-seconds", type=float, help="stop by itself after this many seconds")
    p.add_argument("--format", default="native", choices=FORMATS,
                   help="native (default): flagperf's files; flagperf: FlagPerf's files in DIR, flagperf's in "
                        f"DIR/{NATIVE_MONITOR_DIR}/")
    args = p.parse_args(argv)
    if not (math.isfinite(args.interval) and MIN_INTERVAL_S <= args.interval):
        p.error(f"--interval must be a finite number of seconds >= {MIN_INTERVAL_S}, got {args.interval!r}")
    plugins = accel_plugins()
    if args.gpu != "none" and args.gpu not in plugins:
        p.error(f"--gpu {args.gpu!r}: expected none or an accelerator plug-in of {ACCEL_DIR} ({', '.join(plugins)})")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.vendor) or (args.gpu != "none" and args.vendor in HOST_SENSORS):
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
    data_dir = NATIVE_MONITOR_DIR if args.format == "flagperf" else ""     # FlagPerf's files take the top level
    if data_dir:
        os.makedirs(os.path.join(args.out_dir, data_dir), exist_ok=True)
    log = Log(os.path.join(args.out_dir, MONITOR_LOG))
    sensors, sensor_status = setup_sensors(args.gpu, args.vendor, log, data_dir=data_dir)  # primes cpu and RAPL
    hl = health.open_health(args.out_dir, sensors["gpu"][0] if "gpu" in sensors else None, args.gpu, log,
                            sysfs=sysfs_root(), interval_s=args.interval)
    if hl is not None:
        hl.sample("start")                                  # health.json: the start sample
    primed = time.monotonic()
    status = MonitorStatus(pid=os.getpid(), interval_s=args.interval, started=now_iso(), sensors=sensor_status,
                           run_id=args.run_id)
    status_path = os.path.join(args.out_dir, MONITOR_STATUS_FILE)
    write_json_atomic(status_path, status.to_dict())
    log(f"started pid={os.getpid()} ppid={ppid} interval={args.interval}s run_id={args.run_id} "
        f"sensors={','.join(sensors)}")
    for name, st in sensor_status.items():
        if not st.available:
            log(f"sensor {name} unavailable: {st.reason}")
    write_sys_info(args.out_dir, args.gpu, sensor_status["gpu"], log)
    fp_files = None
    if args.format == "flagperf":
        try:
            fp_files = flagperf_format.FlagPerfFiles(args.out_dir, args.vendor, sensors, args.interval, log)
        except OSError as e:        # flagperf's own files still go on
            log(f"flagperf format: cannot write FlagPerf's files: {e}")
        else:
            status = dataclasses.replace(status, sensors=with_flagperf_files(status.sensors, fp_files))
            write_json_atomic(status_path, status.to_dict())

    mon = Monitor(args.out_dir, sensors, log, fp_files, hl)
    deadline = started_mono + args.max_seconds if args.max_seconds is not None else None
    try:
        reason = run_loop(mon, args.interval, stop, ppid, deadline, primed + min(FIRST_WINDOW_S, args.interval))
    except Exception:
        import traceback
        log("crashed:\n" + traceback.format_exc())
        return 1
    finally:
        if hl is not None:
            try:
                hl.finish()                                 # the end sample, before NVML is shut down
            except Exception as e:  # noqa: BLE001
                log(f"health: end sample failed: {type(e).__name__}: {e}")
        mon.close()
    reason = reason or (f"signal {signals[0]}" if signals else "stopped")
    cost_ms = round(mon.cost_s / mon.samples * 1000, 3) if mon.samples else None
    if fp_files is not None:
        status = dataclasses.replace(status, sensors=with_flagperf_files(status.sensors, fp_files, final=True))
        if not fp_files.ipmi.samples:
            log(f"flagperf format: no power reading in pwr_monitor.log ({flagperf_format.EMPTY_POWER}): "
                f"{fp_files.ipmi.reason or 'the monitor stopped before ipmitool answered'}")
    write_json_atomic(status_path, dataclasses.replace(status, stopped=now_iso(), stop_reason=reason,
                                                       samples=mon.samples, sample_ms_mean=cost_ms).to_dict())
    log(f"stopped ({reason}) after {mon.samples} samples, mean sample cost {cost_ms} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
