"""What the device ran at during a timed window: SM and memory clocks, power, energy and throttle reasons,
sampled through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``) on a background thread.

    with DeviceWindow(ctx) as w:       # or w = DeviceWindow(ctx); w.start(); ...; w.stop()
        ...timed work...
    details["device_window"] = w.summary()

The summary is a dict: median and max SM clock (MHz), median memory clock (MHz), median and max power (W), the
energy of the window in joules (from the energy counter, ``nvmlDeviceGetTotalEnergyConsumption``; where the
counter is missing, sampled power integrated over time, and ``energy_source`` says which), the throttle reasons
seen in any sample, and the sample count. Without NVML or off CUDA it is ``{"omitted": why}``. Stdlib + torch.
"""
import statistics
import threading
import time

_REASONS = (  # nvmlClocksEventReason* bits (formerly nvmlClocksThrottleReason*)
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)


def reason_names(mask):
    return [name for bit, name in _REASONS if mask & bit]


def _nvml_handle(pynvml, device):
    """The NVML handle of a torch CUDA device, found by PCI bus id (CUDA_VISIBLE_DEVICES renumbers devices)."""
    import torch
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0)
        dev = getattr(props, "pci_device_id", 0)
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{dev:02x}.0")
        except Exception:
            pass
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else "GPU-" + text)
    return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)


class DeviceWindow:
    def __init__(self, ctx, interval_s=0.1):
        self.ctx, self.interval_s = ctx, interval_s
        self.samples = []           # (t, sm_mhz, mem_mhz, power_w, reasons_mask)
        self.why_not = None
        self.energy0 = self.energy1 = None
        self.t0 = self.t1 = None
        self._stop = threading.Event()
        self._thread = None
        self._nvml = self._handle = None
        if not getattr(ctx, "is_cuda", False):
            kind = getattr(getattr(ctx, "device", None), "type", "cpu")
            self.why_not = f"device {kind}: NVML reads NVIDIA GPUs only"
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, _nvml_handle(pynvml, ctx.device)
        except ImportError:
            self.why_not = "pynvml (nvidia-ml-py) is not installed on this host"
        except Exception as e:
            self.why_not = f"NVML unavailable: {type(e).__name__}: {e}"

    def _energy_mj(self):
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception:
            return None

    def _sample(self):
        n, h = self._nvml, self._handle
        try:
            sm = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
            mem = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)
            power = n.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:
            return
        try:
            get = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                n.nvmlDeviceGetCurrentClocksThrottleReasons
            mask = int(get(h))
        except Exception:
            mask = 0
        self.samples.append((time.monotonic(), sm, mem, power, mask))

    def _run(self):
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self):
        self.t0 = time.monotonic()
        if self.why_not:
            return self
        self.energy0 = self._energy_mj()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="device-window")
        self._thread.start()
        return self

    def stop(self):
        self.t1 = time.monotonic()
        if self._thread is not None:
            self._stop.set()
            self._thread.join(2.0)
            self._sample()
            self.energy1 = self._energy_mj()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def summary(self):
        if self.why_not:
            return {"omitted": self.why_not}
        if not self.samples:
            return {"omitted": "NVML gave no sample"}
        sm = [s[1] for s in self.samples]
        mem = [s[2] for s in self.samples]
        power = [s[3] for s in self.samples]
        mask = 0
        for s in self.samples:
            mask |= s[4]
        out = {"samples": len(self.samples), "window_s": (self.t1 or time.monotonic()) - self.t0,
               "sm_clock_mhz_median": statistics.median(sm), "sm_clock_mhz_max": max(sm),
               "mem_clock_mhz_median": statistics.median(mem),
               "power_w_median": statistics.median(power), "power_w_max": max(power),
               "throttle_reasons": reason_names(mask)}
        if self.energy0 is not None and self.energy1 is not None and self.energy1 >= self.energy0:
            out["energy_j"] = (self.energy1 - self.energy0) / 1000.0
            out["energy_source"] = "nvmlDeviceGetTotalEnergyConsumption"
        else:
            joules = 0.0
            for a, b in zip(self.samples, self.samples[1:]):
                joules += (b[0] - a[0]) * (a[3] + b[3]) / 2.0
            out["energy_j"] = joules
            out["energy_source"] = "sampled power integrated (no energy counter)"
        return out
