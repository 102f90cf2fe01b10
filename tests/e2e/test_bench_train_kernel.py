"""stream_nvcc and resnet50 on CPU (gloo), one subprocess per rank as the node launcher
starts them (docs/benchmarks.md). On this host stream_nvcc can only skip; its nvcc build is checked when nvcc
is installed (compile only, nothing runs on a GPU)."""
import importlib.util
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


@pytest.mark.parametrize("overrides, message", [
    ({"time_budget_s": 0}, "stream_nvcc: time_budget_s must be a positive number of seconds, got 0"),
    ({"time_budget_s": "10"}, "stream_nvcc: time_budget_s must be a positive number of seconds, got '10'"),
    ({"repeats": 0}, "stream_nvcc: repeats must be an integer >= 1"),
])
def test_stream_nvcc_config_errors_before_the_skip(tmp_path, overrides, message):
    """The case config is checked before the CUDA/nvcc skips: a bad time budget is a config error (exit 2) on
    a CPU host too, not a silent skip."""
    (rc, out, err), = run_case(tmp_path, "stream_nvcc", 1, overrides)
    assert rc == 2 and message in err, (rc, out, err)
    assert [r["event"] for r in perflog(out)] == ["INIT_START"]


def test_stream_nvcc_budget_defaults():
    """The default: a 2 s budget and no explicit counts: the budget sizes both windows (torch.add, kernel)."""
    script = ("import contextlib, io, json\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              "    import main\n"
              "t = main.read_config({})['timing']\n"
              "print(json.dumps({'time_budget_s': t.budget_s, 'iters': t.iters, 'repeats': t.repeats}))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=BENCH / "stream_nvcc", env=dict(os.environ, RANK="0"),
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    c = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (c["time_budget_s"], c["iters"], c["repeats"]) == (2.0, None, None)


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


# --------------------------------------------------------------------------- resnet50

@pytest.mark.parametrize("nproc", [1, 2])
def test_resnet50(tmp_path, nproc):
    """The CPU preset (small): trains to 0.9 held-out accuracy in well under its 20 s budget."""
    results = run_case(tmp_path, "resnet50", nproc)
    fins = check_run(results, "resnet50", "images_per_s")
    fin = fins[0]
    m, details = fin["metrics"], fin["checks"]["details"]
    assert fin["unit"] == "images/s"
    assert {"images_per_s_per_device", "step_time_median_s", "step_time_p90_s", "model_tflops_per_device",
            "final_loss", "eval_accuracy", "converged", "compile_s", "time_to_first_step_s", "e2e_time"} <= set(m)
    assert m["converged"]["value"] == 1 and details["converged"] is True and details["stop_reason"] == "converged"
    assert m["eval_accuracy"]["value"] >= details["target_accuracy"] == 0.9
    assert details["replicas_in_sync"] is True and details["steps"] < details["max_steps"]
    assert 0 < m["final_loss"]["value"] < 2.3  # below ln(10), the loss at chance
    assert m["images_per_s_per_device"]["value"] == pytest.approx(fin["value"] / nproc)
    assert 0 < m["step_time_median_s"]["value"] <= m["step_time_p90_s"]["value"]
    assert details["model"] == {"preset": "small", "blocks": [1, 1, 1, 1], "base_width": 16, "num_classes": 10,
                                "image_size": 64, "params": 511_514}
    assert details["compile"]["enabled"] is False and details["memory_format"] == "channels_last"
    assert details["compile"]["cuda_graphs"] is False                  # eager on a CPU
    assert details["optimizer"]["impl"] == "fused" and details["optimizer"]["note"] is None   # torch >= 2.4 on a CPU
    # every rank's step times and probe gathered (the same record on every rank)
    s = details["stragglers"]
    assert [r["rank"] for r in s["per_rank"]] == list(range(nproc)) and s["slowest_rank"] in range(nproc)
    assert all(f["checks"]["details"]["stragglers"]["per_rank"] == s["per_rank"] for f in fins)
    assert all(r["probe"]["n"] == 10 and r["steps"]["n"] > 0 for r in s["per_rank"])
    assert details["data"]["kind"] == "synthetic" and details["optimizer"]["nesterov"] is True
    # every rank reports the same global numbers
    for f in fins:
        for key in ("eval_accuracy", "steps", "final_loss"):
            assert f["metrics"][key] == m[key], key
    # FLOPs: 2 x MACs of every conv and the head at 64x64, x3 for training; no MFU on a CPU
    mfu = details["mfu"]
    assert mfu["forward_macs_per_image"] == 9_294_848 and mfu["forward_flops_per_image"] == 2 * 9_294_848
    assert m["train_flops_per_image"]["value"] == mfu["train_flops_per_image"] == 3 * 2 * 9_294_848
    assert "3 * forward_flops_per_image" in mfu["formula"] and "Conv2d" in mfu["formula"]
    assert m["model_tflops_per_device"]["value"] == pytest.approx(
        mfu["train_flops_per_image"] * fin["value"] / nproc / 1e12, rel=1e-9)
    assert "mfu" not in m and "cpu" in mfu["omitted"] and mfu["dtype"] == "fp32"
    assert "peak_memory_gib" not in m  # CUDA only
    # the torchvision baseline: omitted without torchvision, skipped for the small preset with it
    assert "omitted" in details["baseline"] and "baseline_images_per_s" not in m
    if importlib.util.find_spec("torchvision") is None:
        assert details["baseline"] == {"omitted": "torchvision not installed"}
    steps = [r for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert steps and steps[-1]["step"] == m["steps"]["value"]
    assert steps[-1]["accuracy"] == m["eval_accuracy"]["value"] and steps[0]["loss"] > steps[-1]["loss"]


def test_resnet50_planted_straggler_is_named_and_flagged(tmp_path):
    """The harness's test hook (resnet50:slow) makes local rank 1 sleep twice each probe pass: it is the slowest rank,
    flagged beyond the 5% margin, named with its local rank; a flag is a finding, the run still passes."""
    results = run_case(tmp_path, "resnet50", 2, fault="slow")
    fin = check_run(results, "resnet50", "images_per_s")[0]
    s = fin["checks"]["details"]["stragglers"]
    assert s["slowest_rank"] == 1 and s["flagged"] == [1] and s["slowest"]["local_rank"] == 1
    assert s["slowest"]["vs_median_pct"] > s["margin_pct"] == 5.0
    assert fin["metrics"]["straggler_ranks"]["value"] == 1
    assert "warning: straggler: rank(s) [1]" in results[0][2]


def test_resnet50_unreachable_target_fails_check(tmp_path):
    results = run_case(tmp_path, "resnet50", 1, {"max_steps": 20, "eval_every": 10}, fault="target")
    rc, out, err = results[0]
    assert rc == 3, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    records = perflog(out)
    assert records[-1]["event"] == "CHECK_FAILED" and "FINISHED" not in [r["event"] for r in records]
    details = records[-1]["checks"]["details"]
    assert details["converged"] is False and details["stop_reason"] == "max_steps"
    assert "target_accuracy 1.01" in details["failures"][0]
    assert [r["step"] for r in records if r["event"] == "STEP"] == [10, 20]


@pytest.mark.parametrize("overrides, message", [
    ({"preset": "resnet5"}, "preset must be one of resnet50, small, got 'resnet5'"),
    ({"blocks": [3, 4, 6]}, "blocks must be a list of 4 integers"),
    ({"compile": "sometimes"}, "compile must be auto, true or false"),
    ({"warmup_steps": 0}, "warmup_steps must be >= 1"),
    ({"optimizer": "lamb"}, "optimizer must be one of fused, foreach, got 'lamb'"),
    # DALI decodes on a GPU: where nvidia.dali does not import (or off CUDA), one line at the case's start
    ({"data": "dali"}, "resnet50: data: dali "),
])
def test_resnet50_config_error(tmp_path, overrides, message):
    rc, out, err = run_case(tmp_path, "resnet50", 1, overrides)[0]
    assert rc == 2, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    assert message in err and "Traceback" not in err
    assert [r["event"] for r in perflog(out)] == ["INIT_START"]


def test_resnet50_image_folder(tmp_path):
    """A data directory of class subfolders of images. Without torchvision (optional, not a project dependency)
    reading it is a config error (exit 2) that says so. With torchvision it is decoded (torchvision.io), resized,
    centre cropped and trained on; two colours of noisy images are told apart (target: halfway from chance to 1).
    The test checks whichever of the two this host supports: it never skips."""
    if importlib.util.find_spec("torchvision") is None:
        for name in ("cat", "dog"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "0.jpg").write_bytes(b"not decoded before the check")
        rc, out, err = run_case(tmp_path, "resnet50", 1)[0]
        assert rc == 2, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        assert "needs torchvision" in err and "torchvision.io.decode_image" in err and "Traceback" not in err
        return
    import torch
    from torchvision.io import write_png

    g = torch.Generator().manual_seed(0)
    for label, name in enumerate(("red", "blue")):
        (tmp_path / "train" / name).mkdir(parents=True)
        for i in range(40):
            img = torch.full((3, 40, 48), 60.0)
            img[0 if label == 0 else 2] = 190.0
            img += 30 * torch.randn(3, 40, 48, generator=g)
            write_png(img.clamp(0, 255).to(torch.uint8), str(tmp_path / "train" / name / f"{i}.png"))
    results = run_case(tmp_path, "resnet50", 1, {"image_size": 32, "batch_size": 8, "eval_every": 10})
    fin = check_run(results, "resnet50", "images_per_s")[0]
    details = fin["checks"]["details"]
    assert details["data"]["kind"] == "folder" and details["data"]["classes"] == 2
    assert details["data"]["train_images"] == 72 and details["data"]["eval_images"] == 8  # every 10th held out
    assert details["model"]["num_classes"] == 2 and details["target_accuracy"] == 0.75
    assert details["converged"] is True


