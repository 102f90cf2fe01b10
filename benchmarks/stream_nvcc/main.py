"""STREAM-style triad a = b + s*c in a CUDA kernel built with nvcc at case time; see README.md and
docs/benchmarks.md. Hosts without a CUDA device or without nvcc print SKIPPED and exit 0."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="stream_nvcc")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

import torch  # noqa: E402

SOURCE = os.path.join(HERE, "triad.cu")
BYTES_PER_ELEMENT = 3 * 4  # fp32: read b[i], read c[i], write a[i]
REL_TOL = 1e-6             # |a - ref| / |ref| against a float64 reference, for the kernel and for torch
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
FALLBACK_ARCH = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
                 "-gencode", "arch=compute_90,code=compute_90"]  # + PTX for newer GPUs
BASE_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-cudart=static"]
DEFAULT_BUDGET_S = 2.0     # time_budget_s when the case config has none


def read_config(cfg):
    keys = harness.CaseKeys(cfg, "stream_nvcc")
    c = {"n": keys.int("n", 1 << 20), "timing": keys.timing(warmup=5, budget_s=DEFAULT_BUDGET_S),
         "seed": keys.int("seed", 1234, minimum=0), "compile_timeout_s": keys.int("compile_timeout_s", 300)}
    s = cfg.get("scalar", 3.0)
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < 1e6:
        keys.error(f"scalar must be a number in (0, 1e6), got {s!r}")
    c["scalar"] = ctypes.c_float(float(s)).value  # the fp32 value the kernel sees, also in the reference
    if c["n"] >= 1 << 40:
        keys.error(f"n={c['n']} is absurdly large")
    c["nvcc_extra_flags"] = keys.strings("nvcc_extra_flags", [])
    return c


# --------------------------------------------------------------------------- nvcc

def find_nvcc():
    """nvcc on PATH, else $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin: (path or None, where looked)."""
    looked = ["PATH"]
    found = shutil.which("nvcc")
    if found:
        return found, looked
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cand = os.path.join(os.environ[var], "bin", "nvcc")
            looked.append(cand)
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand, looked
    cand = "/usr/local/cuda/bin/nvcc"
    looked.append(cand)
    if os.path.isfile(cand) and os.access(cand, os.X_OK):
        return cand, looked
    return None, looked


def nvcc_version(nvcc):
    """'release 13.0, V13.0.88' (the last line of nvcc --version), or the error."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    m = re.search(r"release\s+[\d.]+,\s*V[\d.]+", out)
    return m.group(0) if m else (out.strip().splitlines() or ["unknown"])[-1]


def supports_native(nvcc):
    """-arch=native exists from CUDA 11.5/11.6 on; nvcc --help lists it among the allowed values."""
    try:
        out = subprocess.run([nvcc, "--help"], capture_output=True, text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "'native'" in out or "-arch=native" in out


def compile_triad(nvcc, out_dir, c):
    """Build triad.cu into out_dir/libtriad.so: -arch=native when this nvcc knows it and finds a GPU,
    else (or when the native build fails) -gencode for sm_80 + sm_90 (+ compute_90 PTX).
    Returns a dict: ok, path, flags, arch, attempts [{cmd, rc, output}], seconds."""
    out = os.path.join(out_dir, "libtriad.so")
    archs = []
    if supports_native(nvcc):
        archs.append(("native", ["-arch=native"]))
    archs.append(("sm_80+sm_90", FALLBACK_ARCH))
    attempts, t0 = [], time.perf_counter()
    for arch, arch_flags in archs:
        tmp = out + f".tmp{os.getpid()}"
        flags = BASE_FLAGS + arch_flags + c["nvcc_extra_flags"]
        cmd = [nvcc, *flags, "-o", tmp, SOURCE]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=c["compile_timeout_s"])
            rc, output = proc.returncode, (proc.stdout + proc.stderr).strip()
        except subprocess.TimeoutExpired:
            rc, output = -1, f"nvcc timed out after {c['compile_timeout_s']} s"
        except OSError as e:
            rc, output = -1, f"cannot run nvcc: {e}"
        attempts.append({"arch": arch, "cmd": " ".join(cmd), "rc": rc, "output": output[-2000:]})
        # without a visible GPU, -arch=native only warns and builds for a default architecture: not ours
        if rc == 0 and arch == "native" and "Cannot find valid GPU" in output:
            attempts[-1]["rejected"] = "nvcc found no GPU for -arch=native"
            rc = 1
        if rc == 0:
            os.replace(tmp, out)  # atomic: a reader never sees a half-written library
            return {"ok": True, "path": out, "flags": flags, "arch": arch, "attempts": attempts,
                    "seconds": time.perf_counter() - t0}
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"ok": False, "path": None, "flags": None, "arch": None, "attempts": attempts,
            "seconds": time.perf_counter() - t0}


def build_once_per_node(ctx, nvcc, c, result_dir):
    """Local rank 0 of every node compiles into a fresh temp dir (not the result dir: it may be mounted
    noexec); the other local ranks wait at a barrier and take their node leader's library. Every rank
    learns whether every node's build succeeded. Returns (build dict of this node, all nodes ok)."""
    leader = ctx.rank - ctx.local_rank
    build = None
    if ctx.local_rank == 0:
        tmpdir = tempfile.mkdtemp(prefix="flagperf_stream_nvcc_")
        build = compile_triad(nvcc, tmpdir, c)
        build["dir"] = tmpdir
        node = os.environ.get("NODE_RANK", "0")
        try:  # the full nvcc record next to the rank logs, for diagnosis
            with open(os.path.join(result_dir, f"stream_nvcc_build_node{node}.log"), "w", encoding="utf-8") as f:
                for a in build["attempts"]:
                    f.write(f"$ {a['cmd']}\nexit {a['rc']}\n{a['output']}\n\n")
        except OSError:
            pass
    if ctx.initialized:
        import torch.distributed as dist
        ctx.barrier()  # the other local ranks wait for their leader's build
        gathered = [None] * ctx.world_size
        dist.all_gather_object(gathered, build)
        build = gathered[leader]
        all_ok = all(b["ok"] for b in gathered if b is not None)
    else:
        all_ok = build["ok"]
    return build, all_ok


class Triad:
    """ctypes binding of libtriad.so; every call's cudaError_t is checked."""

    def __init__(self, path, device_index):
        self.lib = ctypes.CDLL(path)
        self.device = device_index
        i, vp, f, ll = ctypes.c_int, ctypes.c_void_p, ctypes.c_float, ctypes.c_longlong
        ip = ctypes.POINTER(ctypes.c_int)
        self.lib.triad_info.argtypes = [i, ip, ip, ip, ip, ip]
        self.lib.triad_launch.argtypes = [i, vp, vp, vp, f, ll, vp]
        self.lib.triad_timed.argtypes = [i, vp, vp, vp, f, ll, i, vp, ctypes.POINTER(ctypes.c_float)]
        self.lib.triad_vectorized.argtypes = [vp, vp, vp, ll]
        self.lib.triad_error_string.argtypes = [i]
        self.lib.triad_error_string.restype = ctypes.c_char_p
        for name in ("triad_info", "triad_launch", "triad_timed", "triad_vectorized"):
            getattr(self.lib, name).restype = i

    def error(self, code):
        return self.lib.triad_error_string(code).decode(errors="replace")

    def _check(self, what, code):
        if code != 0:
            raise CudaError(what, code, self.error(code))

    def info(self):
        vals = [ctypes.c_int(0) for _ in range(5)]
        code = self.lib.triad_info(self.device, *[ctypes.byref(v) for v in vals])
        runtime, driver, sms, grid, block = (v.value for v in vals)
        return code, {"cudart_runtime_version": runtime, "driver_version": driver, "sm_count": sms,
                      "grid_vec4": grid, "block": block}

    def launch(self, a, b, cc, s, n, stream):
        self._check("triad_launch", self.lib.triad_launch(self.device, a.data_ptr(), b.data_ptr(), cc.data_ptr(),
                                                          s, n, stream))

    def timed(self, a, b, cc, s, n, iters, stream):
        ms = ctypes.c_float(0.0)
        self._check("triad_timed", self.lib.triad_timed(self.device, a.data_ptr(), b.data_ptr(), cc.data_ptr(),
                                                        s, n, iters, stream, ctypes.byref(ms)))
        return ms.value

    def vectorized(self, a, b, cc, n):
        return bool(self.lib.triad_vectorized(a.data_ptr(), b.data_ptr(), cc.data_ptr(), n))


class CudaError(RuntimeError):
    def __init__(self, what, code, message):
        super().__init__(f"{what}: cudaError {code} ({message})")
        self.what, self.code, self.message = what, code, message


# --------------------------------------------------------------------------- checks

def verify(a, b, cc, s, chunk=1 << 24):
    """Compare a with b + s*c in float64 over the whole array, chunk by chunk: (max relative error,
    number of non-finite outputs = elements never written after the NaN poison, first bad index or -1,
    number of outputs that differ from the float64 reference rounded to fp32). With fmaf the kernel's result
    is the correctly rounded b + s*c, so the last count is 0 up to rare double roundings (information only:
    a mul + add without fma rounds twice and may differ by an ulp)."""
    n = a.numel()
    max_rel, non_finite, first_bad, inexact = 0.0, 0, -1, 0
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        ref = b[lo:hi].double() + s * cc[lo:hi].double()
        got = a[lo:hi].double()
        bad = ~torch.isfinite(got)
        nb = int(bad.sum().item())
        if nb:
            non_finite += nb
            if first_bad < 0:
                first_bad = lo + int(bad.nonzero()[0, 0].item())
        rel = ((got - ref).abs() / ref.abs().clamp_min(1e-30))
        rel = torch.where(bad, torch.zeros_like(rel), rel)
        max_rel = max(max_rel, float(rel.max().item()))
        inexact += int((a[lo:hi] != ref.float()).sum().item()) - nb
    return max_rel, non_finite, first_bad, inexact


def cleanup(ctx, build):
    """The node leader removes its build dir (the library is loaded already; unlinking it is safe)."""
    if ctx.local_rank == 0 and build and build.get("dir"):
        shutil.rmtree(build["dir"], ignore_errors=True)


def build_triad(cfg, c, result_dir):
    """Skip where this case cannot run (no CUDA device, no nvcc on some node, a driver older than nvcc's
    runtime), build the kernel once per node and load it. Returns (ctx, triad, build, nvcc, nvcc version,
    triad_info). Never returns on a skip or a failed build."""
    device_type = os.environ.get("FLAGPERF_DEVICE", "cpu").strip().lower()
    nvcc, looked = find_nvcc()
    nvcc_note = f"nvcc: {nvcc}" if nvcc else f"nvcc: not found (looked in {', '.join(looked)})"
    # Skips that every rank sees alike (a node property): decided before the process group exists.
    if device_type != "cuda":
        LOG.skipped(f"no CUDA device: FLAGPERF_DEVICE={device_type} (this case runs a CUDA kernel built with "
                    f"nvcc; {nvcc_note})")
    if not torch.cuda.is_available():
        LOG.skipped(f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
                    f"built for CUDA {torch.version.cuda}; {nvcc_note})")
    ctx = harness.setup_distributed(cfg)
    # nvcc may be missing on one node only: all ranks agree before anyone compiles
    if ctx.all_reduce([1.0 if nvcc else 0.0], "min")[0] <= 0:
        LOG.skipped(f"no nvcc on {'this node' if not nvcc else 'some node'} ({nvcc_note}); "
                    "install the CUDA toolkit or set CUDA_HOME")
    nvcc_ver = nvcc_version(nvcc)
    build, all_ok = build_once_per_node(ctx, nvcc, c, result_dir)
    if not all_ok:
        cleanup(ctx, build)
        LOG.check_failed({"stage": "compile", "nvcc": nvcc, "nvcc_version": nvcc_ver,
                          "this_node_ok": bool(build and build["ok"]),
                          "attempts": (build or {}).get("attempts"),
                          "log": os.path.join(result_dir, "stream_nvcc_build_node*.log")})
    triad = Triad(build["path"], ctx.device.index)
    code, info = triad.info()
    # nvcc's cudart (linked statically) newer than the driver: this host cannot run what its nvcc builds
    too_old, failed = ctx.all_reduce([float(code == CUDA_ERROR_INSUFFICIENT_DRIVER), float(code != 0)], "max")
    if too_old > 0:
        cleanup(ctx, build)
        LOG.skipped(f"the CUDA driver (version {info['driver_version'] or 'none found'}) is too old for the "
                    f"runtime of {nvcc} ({nvcc_ver}, cudart {info['cudart_runtime_version']}) on some node; "
                    "use an nvcc no newer than the driver's CUDA version")
    if failed > 0:
        cleanup(ctx, build)
        LOG.check_failed({"stage": "triad_info", "cuda_error": code, "message": triad.error(code),
                          "failed_on_some_rank": True, **info})
    return ctx, triad, build, nvcc, nvcc_ver, info


class KernelRun:
    """The nvcc kernel's launches for the harness timing: ``launch()`` one (a warm-up), ``batch(k)`` the seconds
    of k launches between two cudaEvents (triad_timed). The first CUDA error is kept; after it both do nothing
    (a batch is 0 s), so that this rank still takes part in the barriers and all-reduces and no rank waits."""

    def __init__(self, triad, a, b, cc, s, n, stream_ptr):
        self.triad, self.args, self.stream_ptr, self.error = triad, (a, b, cc, s, n), stream_ptr, None

    def launch(self):
        if self.error is None:
            try:
                self.triad.launch(*self.args, self.stream_ptr)
            except CudaError as e:
                self.error = e

    def batch(self, k):
        if self.error is not None:
            return 0.0
        try:
            return self.triad.timed(*self.args, k, self.stream_ptr) / 1e3
        except CudaError as e:
            self.error = e
            return 0.0


def triad_metrics(cfg, bytes_per_iter, t_kernel, t_torch, node, device_name):
    """The kernel's and torch.add's figures (the kernel's median is FINISHED's value), and the peak used."""
    gbs = bytes_per_iter / t_kernel["median"] / 1e9
    torch_gbs = bytes_per_iter / t_torch["median"] / 1e9
    metrics = {
        "triad_gbs_min": {"value": bytes_per_iter / t_kernel["max"] / 1e9, "unit": "GB/s"},
        "triad_gbs_max": {"value": bytes_per_iter / t_kernel["min"] / 1e9, "unit": "GB/s"},
        "time_ms": {"value": t_kernel["median"] * 1e3, "unit": "ms"},
        "torch_triad_gbs": {"value": torch_gbs, "unit": "GB/s"},
        "triad_vs_torch": {"value": gbs / torch_gbs, "unit": "ratio"},
    }
    metrics.update(node)        # triad_gbs_node: this node's sum, only over simultaneous windows
    peak, entry = harness.peak_for(cfg, "mem_bw_gbs", device_name)
    if not peak:
        return metrics, f"no mem_bw_gbs entry in vendor_peaks matches {device_name!r}"
    metrics["pct_of_peak_mem_bw"] = {"value": 100.0 * gbs / peak, "unit": "%"}
    metrics["torch_pct_of_peak_mem_bw"] = {"value": 100.0 * torch_gbs / peak, "unit": "%"}
    return metrics, {"key": "mem_bw_gbs", "entry": entry, "value_gbs": peak}


def main():
    args, cfg = harness.parse_args()
    c = read_config(cfg)
    ctx, triad, build, nvcc, nvcc_ver, info = build_triad(cfg, c, args.result_dir)
    n, s, dev = c["n"], c["scalar"], ctx.device
    gen = torch.Generator(device=dev).manual_seed(c["seed"] + ctx.rank)
    # b, c in [1, 2) and s > 0: no cancellation, so the relative error of any sane rounding stays ~1e-7
    b = torch.rand(n, generator=gen, device=dev, dtype=torch.float32).add_(1.0)
    cc = torch.rand(n, generator=gen, device=dev, dtype=torch.float32).add_(1.0)
    a = torch.empty(n, device=dev, dtype=torch.float32)
    kernel = KernelRun(triad, a, b, cc, s, n, torch.cuda.current_stream(dev).cuda_stream)
    vectorized = triad.vectorized(a, b, cc, n)
    LOG.event("INIT_END", backend=ctx.backend, device=str(dev), world_size=ctx.world_size)

    # the budget is split evenly over the two timed windows: torch.add and the nvcc kernel
    budget = harness.BudgetReport(c["timing"], 2, split="evenly over the two timed windows: torch.add and "
                                                        "the nvcc kernel")
    LOG.event("RUN_START")
    # 1. the library version of the same operation, timed the same way (cudaEvents on the current stream);
    # 2. the nvcc kernel: warm-up launches, calibration batches, then repeats x iters launches between events.
    # Each after a NaN poison, so that an element never written shows.
    a.fill_(float("nan"))
    t_torch = budget.time("torch_add", lambda: torch.add(b, cc, alpha=s, out=a), ctx,
                          label="stream_nvcc torch.add", before_repeat=ctx.barrier, aligned=True)
    torch_err, torch_nonfinite, _, torch_inexact = verify(a, b, cc, s)
    a.fill_(float("nan"))
    ctx.sync()
    t_kernel = budget.time("kernel", kernel.launch, ctx, label="stream_nvcc kernel", before_repeat=ctx.barrier,
                           batch=kernel.batch, aligned=True)
    harness.corrupt_for_test("stream_nvcc", a)
    ctx.sync()
    LOG.event("RUN_END")

    if ctx.all_reduce([float(kernel.error is not None)], "max")[0] > 0:
        cleanup(ctx, build)
        e = kernel.error
        LOG.check_failed({"stage": "kernel", "failed_on_some_rank": True,
                          **({"call": e.what, "cuda_error": e.code, "message": e.message} if e else {})})
    err, nonfinite, first_bad, inexact = verify(a, b, cc, s)
    ok_here = err <= REL_TOL and nonfinite == 0 and torch_err <= REL_TOL and torch_nonfinite == 0
    bytes_per_iter = BYTES_PER_ELEMENT * n
    gbs = bytes_per_iter / t_kernel["median"] / 1e9
    node, figures = harness.node_metrics(ctx, [("triad_gbs", gbs, "GB/s", t_kernel["window"])])
    per_rank = harness.per_rank_list(ctx, gbs)
    env = harness.env_info(ctx, nvcc=nvcc, nvcc_version=nvcc_ver, nvcc_flags=build["flags"],
                           nvcc_arch=build["arch"], **info)
    details = {
        "rel_err": err, "rel_tol": REL_TOL, "non_finite_outputs": nonfinite, "first_bad_index": first_bad,
        "torch_rel_err": torch_err, "torch_non_finite_outputs": torch_nonfinite,
        "not_correctly_rounded": inexact, "torch_not_correctly_rounded": torch_inexact,
        "verified_elements": n, "poison": "NaN before each measured operation",
        "n": n, "scalar": s, "dtype": "fp32", "vectorized_float4": vectorized,
        "bytes_per_iter": bytes_per_iter,
        "bytes_formula": "3 * n * 4 B per iteration: read b, read c, write a (no write-allocate counted)",
        "timing": f"median of {t_kernel['repeats']} samples of {t_kernel['iters']} launches between cudaEvents "
                  f"after {t_kernel['warmup']} warm-up launches and {t_kernel['calibration_calls']} calibration "
                  f"launches; torch.add(b, c, alpha=s, out=a) the same way ({t_torch['repeats']} x "
                  f"{t_torch['iters']})",
        "nvcc": nvcc, "nvcc_version": nvcc_ver, "nvcc_flags": build["flags"], "nvcc_arch": build["arch"],
        "compile_seconds": build["seconds"], "stream": "torch.cuda.current_stream()",
    }
    details.update(budget.details())
    if ctx.all_reduce([0.0 if ok_here else 1.0], "max")[0] > 0:
        details["failed_on_some_rank"] = True
        cleanup(ctx, build)
        LOG.check_failed(details)

    metrics, details["peak"] = triad_metrics(cfg, bytes_per_iter, t_kernel, t_torch, node, env["device_name"])
    details["per_rank"] = {"metric": "triad_gbs", "values": per_rank}
    details["node_figures"] = figures["triad_gbs"]
    ctx.destroy()
    cleanup(ctx, build)
    LOG.finished(metric="triad_gbs", value=gbs, unit="GB/s", higher_is_better=True, metrics=metrics,
                 checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
