"""stream_nvcc, train_cnn and the MFU of train_gpt on CPU (gloo), one subprocess per rank as the node launcher
starts them (docs/benchmarks.md). On this host stream_nvcc can only skip; its nvcc build is checked when nvcc
is installed (compile only, nothing runs on a GPU)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from testbed.realparts import unavailable

from tests.e2e.test_benchmarks_cpu import BENCH, check_run, perflog, run_case


# --------------------------------------------------------------------------- stream_nvcc

def check_skipped(results, reason_part):
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        records = perflog(out)
        assert [r["event"] for r in records] == ["INIT_START", "SKIPPED"], records
        skipped = records[-1]
        assert skipped["rank"] == rank and skipped["benchmark"] == "stream_nvcc"
        assert reason_part in skipped["reason"]
    return [perflog(out)[-1]["reason"] for _, out, _ in results]


def test_stream_nvcc_skips_on_cpu(tmp_path):
    reasons = check_skipped(run_case(tmp_path, "stream_nvcc", 2), "no CUDA device")
    assert "FLAGPERF_DEVICE=cpu" in reasons[0] and "nvcc" in reasons[0]


def test_stream_nvcc_skips_without_visible_gpu(tmp_path):
    """An nvidia-profile rank (FLAGPERF_DEVICE=cuda) on a host where torch sees no GPU skips, not config-errors."""
    cfg = tmp_path / "case_config.json"
    cfg.write_text(json.dumps({"n": 1024}))
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", FLAGPERF_DEVICE="cuda",
               FLAGPERF_DIST_BACKEND="nccl", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-u", str(BENCH / "stream_nvcc" / "main.py"), "--case-config", str(cfg),
                           "--data-dir", str(tmp_path), "--result-dir", str(tmp_path / "node0")],
                          cwd=BENCH / "stream_nvcc", env=env, capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = perflog(proc.stdout)
    assert [r["event"] for r in records] == ["INIT_START", "SKIPPED"]
    assert "torch.cuda.is_available() is False" in records[-1]["reason"]


def test_stream_nvcc_kernel_compiles(tmp_path):
    """Build triad.cu with the benchmark's own nvcc command and load it with ctypes (no GPU needed for either);
    without a GPU -arch=native is rejected and the sm_80 + sm_90 fallback is used."""
    if shutil.which("nvcc") is None:
        unavailable("no nvcc on this host: the CUDA kernel cannot be compiled")
    script = textwrap.dedent("""
        import contextlib, io, json, sys
        with contextlib.redirect_stdout(io.StringIO()):
            import main
        nvcc, _ = main.find_nvcc()
        build = main.compile_triad(nvcc, sys.argv[1], main.read_config({}))
        if build["ok"]:
            main.Triad(build["path"], 0)  # symbols and argtypes resolve
        build["version"] = main.nvcc_version(nvcc)
        print(json.dumps(build))
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=BENCH / "stream_nvcc",
                          env=dict(os.environ, RANK="0"), capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    build = json.loads(proc.stdout.strip().splitlines()[-1])
    assert build["ok"], json.dumps(build["attempts"], indent=1)
    assert build["flags"][:2] == ["-O3", "-std=c++17"] and os.path.isfile(build["path"])
    assert build["arch"] in ("native", "sm_80+sm_90")
    if build["arch"] == "sm_80+sm_90":
        assert "arch=compute_90,code=sm_90" in build["flags"] and "arch=compute_80,code=sm_80" in build["flags"]
    assert "release" in build["version"]


# --------------------------------------------------------------------------- train_cnn

@pytest.mark.parametrize("nproc", [1, 2])
def test_train_cnn(tmp_path, nproc):
    results = run_case(tmp_path, "train_cnn", nproc)
    fins = check_run(results, "train_cnn", "samples_per_s")
    fin = fins[0]
    m, details = fin["metrics"], fin["checks"]["details"]
    assert fin["unit"] == "samples/s"
    assert {"final_loss", "accuracy", "converged", "e2e_time", "flops_per_sample", "model_tflops"} <= set(m)
    assert m["converged"]["value"] == 1 and details["converged"] is True
    assert m["accuracy"]["value"] >= details["target_accuracy"] == 0.9
    assert details["replicas_in_sync"] is True and details["steps"] < details["max_steps"]
    assert 0 < m["final_loss"]["value"] < 2.3  # below ln(10), the loss at chance
    # every rank reports the same global numbers
    for f in fins:
        assert f["metrics"]["accuracy"] == m["accuracy"] and f["metrics"]["steps"] == m["steps"]
        assert f["metrics"]["final_loss"] == m["final_loss"]
    # FLOPs from FlopCounterMode: 3 x forward; the CPU default model does ~25 MFLOP forward per 32x32 image
    mfu = details["mfu"]
    assert m["flops_per_sample"]["value"] == mfu["flops_per_sample"] == 3 * mfu["forward_flops_per_sample"]
    assert 2e7 < mfu["forward_flops_per_sample"] < 3e7
    assert m["model_tflops"]["value"] == pytest.approx(
        mfu["flops_per_sample"] * fin["value"] / nproc / 1e12, rel=1e-9)
    # CPU: no MFU, and the details say why
    assert "mfu" not in m and "cpu" in mfu["omitted"] and mfu["dtype"] == "fp32"
    steps = [r for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert steps and steps[-1]["step"] == m["steps"]["value"] and steps[-1]["accuracy"] == m["accuracy"]["value"]
    assert steps[0]["loss"] > steps[-1]["loss"]


def test_train_cnn_inject_error_fails_check(tmp_path):
    results = run_case(tmp_path, "train_cnn", 1, {"inject_error": True, "max_steps": 20, "eval_every": 10})
    rc, out, err = results[0]
    assert rc == 3, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    records = perflog(out)
    assert records[-1]["event"] == "CHECK_FAILED" and "FINISHED" not in [r["event"] for r in records]
    assert records[-1]["checks"]["details"]["converged"] is False
    assert [r["step"] for r in records if r["event"] == "STEP"] == [10, 20]


# --------------------------------------------------------------------------- train_gpt MFU

def test_train_gpt_mfu_omitted_on_cpu(tmp_path):
    fin = check_run(run_case(tmp_path, "train_gpt", 1), "train_gpt", "tokens_per_s")[0]
    assert "mfu" not in fin["metrics"]
    mfu = fin["checks"]["details"]["mfu"]
    assert "cpu" in mfu["omitted"] and mfu["dtype"] == "fp32"
    assert "6*N" in mfu["formula"] and "12*n_layers*d_model*seq_len" in mfu["formula"]
    # defaults: d_model 64, 2 layers, seq_len 64; N = params without the 64 x 64 position table
    assert mfu["N"] == fin["metrics"]["params"]["value"] - 64 * 64
    assert mfu["flops_per_token"] == 6 * mfu["N"] + 12 * 2 * 64 * 64
    assert mfu["model_tflops_per_device"] == pytest.approx(mfu["flops_per_token"] * fin["value"] / 1e12)
