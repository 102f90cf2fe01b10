"""Accelerator plug-in ``nvml``: NVIDIA GPUs through NVML (``pynvml``, package nvidia-ml-py), imported only
inside ``count`` and ``open``. No subprocess: one sample of a GPU costs about 0.3 ms.

A field a device does not support (``NVMLError_NotSupported``) is left out of that GPU's rows for the rest of
the run and noted once in monitor.log; any other NVML error leaves the field out of that sample and is logged
once per distinct message.
"""
import glob

SOURCE = "nvml"
MIB = 1024 * 1024


class NvmlGpus:
    """One row per GPU via NVML."""

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
        self.status = {"available": True, "source": SOURCE, "count": len(devices), "devices": devices}
        self.status.update(versions(nv))
        self.fields = (
            ("temp", lambda h: {"temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)}),
            ("power", lambda h: {"power_w": round(nv.nvmlDeviceGetPowerUsage(h) / 1000, 1)}),
            ("mem", self._mem),
            ("util", lambda h: {"util_pct": nv.nvmlDeviceGetUtilizationRates(h).gpu}),
            ("clocks", lambda h: {"sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                  "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)}),
            # the board's energy counter (mJ since the driver loaded): exact energy between any two samples
            ("energy", lambda h: {"energy_j": round(nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000, 3)}),
            ("throttle", self._throttle),
        )

    def _throttle(self, h):
        get = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self.nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return {"throttle_mask": int(get(h))}

    def _mem(self, h):
        m = self.nv.nvmlDeviceGetMemoryInfo(h)
        return {"mem_used_mib": round(m.used / MIB, 1), "mem_total_mib": round(m.total / MIB, 1)}

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
                    self.log.once("gpu %d: %s not supported, field omitted" % (i, name))
                except self.nv.NVMLError as e:
                    self.log.once("gpu %d: %s: %s" % (i, name, e))
                except Exception as e:  # noqa: BLE001 - e.g. a pynvml too old to have the call: field dropped
                    self.skip.add((i, name))
                    self.log.once("gpu %d: %s unavailable (%s: %s), field omitted" % (i, name, type(e).__name__, e))
            if len(row) > 1:
                rows.append(row)
        return rows

    def close(self):
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass


def versions(nv):
    """{"driver_version": "560.35.03", "cuda_driver_version": "12.6"} as far as NVML tells them: the driver,
    and the newest CUDA version it supports (nvmlSystemGetCudaDriverVersion, 12060 -> "12.6")."""
    out = {}
    try:
        v = nv.nvmlSystemGetDriverVersion()
        out["driver_version"] = v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - NVMLError, or a pynvml without the call: the version stays unknown
        pass
    try:
        v = int(nv.nvmlSystemGetCudaDriverVersion())
        out["cuda_driver_version"] = "%d.%d" % (v // 1000, v % 1000 // 10)
    except Exception:  # noqa: BLE001
        pass
    return out


def open(log):  # noqa: A001 - the plug-in interface's name
    """(NvmlGpus, None), or (None, reason)."""
    try:
        import pynvml as nv
    except ImportError as e:
        return None, "pynvml not installed (%s)" % e
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return None, "NVML not usable: %s" % e
    try:
        gpus = NvmlGpus(nv, log)
    except nv.NVMLError as e:
        nv.nvmlShutdown()
        return None, "NVML device query failed: %s" % e
    if not gpus.handles:
        nv.nvmlShutdown()
        return None, "NVML found no GPU"
    return gpus, None


def count(dev_glob="/dev/nvidia[0-9]*"):
    """(number of GPUs, None). Without /dev/nvidia<N> device files the host has no NVIDIA GPU and NVML is not
    loaded; with them, NVML counts, and when NVML cannot be used (pynvml missing, driver library not loadable)
    the device files are counted instead."""
    devices = len(glob.glob(dev_glob))
    if not devices:
        return 0, None
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount(), None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: the device files tell
        return devices, None
