"""gemm (int8 / fp8 / direct torch.matmul), devmem and h2d run for real on CPU (gloo), one subprocess per rank,
as the node launcher starts them (docs/benchmarks.md); their PerfLog output is checked against the contract."""
import os
import sys

import pytest

from .test_benchmarks_cpu import BENCH, check_budget, check_node_figures, check_run, perflog, run_case


def cpu_model():
    """The device name the ranks report on CPU (harness.env_info), to build a matching peak table."""
    sys.path.insert(0, str(BENCH))
    try:
        from common import harness
    finally:
        sys.path.remove(str(BENCH))
    return harness._cpu_model()


def expect_check_failed(results, code=3):
    """Every rank exits `code` with CHECK_FAILED last and no FINISHED; returns the CHECK_FAILED records."""
    failed = []
    for rank, (rc, out, err) in enumerate(results):
        assert rc == code, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        records = perflog(out)
        events = [r["event"] for r in records]
        assert "FINISHED" not in events and events[-1] == "CHECK_FAILED", events
        assert records[-1]["checks"]["passed"] is False
        failed.append(records[-1])
    return failed


# --------------------------------------------------------------------------- gemm

GEMM_SMALL = {"m": 128, "n": 128, "k": 256, "sizes_per_dtype": {}, "warmup": 1, "time_budget_s": 0.5}


@pytest.mark.parametrize("nproc", [1, 2])
def test_gemm_int8_fp8_direct_and_peaks(tmp_path, nproc):
    peaks = {"test-cpu": {"match": [cpu_model()], "fp32_tflops": 2.0, "bf16_tflops": 4.0, "int8_tops": 8.0,
                          "fp8_tflops": 16.0}}
    results = run_case(tmp_path, "gemm", nproc,
                       dict(GEMM_SMALL, dtypes=["fp32", "bf16", "int8", "fp8"], vendor_peaks=peaks))
    fins = check_run(results, "gemm", "tflops_fp32")
    fin = fins[0]
    m, details = fin["metrics"], fin["checks"]["details"]

    # fp8 is CUDA-only (compute capability >= 8.9): skipped with the reason, nothing measured
    assert "CUDA" in details["skipped"]["fp8"]
    assert not any("fp8" in name for name in m) and "fp8" not in details["peaks"]
    assert "fp8" not in fin["env"]["matmul_allow_tf32"]

    # int8: torch._int_mm was attempted; if this torch build lacks it on CPU it is skipped with a reason
    if "int8" in details["skipped"]:
        assert "_int_mm" in details["skipped"]["int8"] and "tops_int8" not in m
    else:
        assert m["tops_int8"]["unit"] == "TOP/s" and m["tops_int8"]["value"] > 0
        assert m["tops_int8_min"]["value"] <= m["tops_int8"]["value"] <= m["tops_int8_max"]["value"]
        assert details["int8_mismatches"] == 0 and details["int8_max_abs_err"] == 0
        assert not any(name.startswith("tflops_int8") for name in m)
        assert m["pct_of_peak_int8"] == {"value": pytest.approx(100 * m["tops_int8"]["value"] / 8.0), "unit": "%"}
        assert details["peaks"]["int8"] == {"entry": "test-cpu", "key": "int8_tops", "value": 8.0}
        assert "direct_tflops_int8" not in m

    # the direct torch.matmul loop, checked like the harness result
    for d in ("fp32", "bf16"):
        assert m[f"direct_tflops_{d}"]["unit"] == "TFLOP/s" and m[f"direct_tflops_{d}"]["value"] > 0
        assert details[f"direct_{d}_rel_err"] <= details[f"{d}_tol"]
    assert details["fp32_rel_err"] < 1e-5 and details["bf16_rel_err"] < 2e-2

    # percent of the (fake) peak for the headline too, naming the entry
    assert m["pct_of_peak_fp32"]["value"] == pytest.approx(100 * fin["value"] / 2.0)
    assert m["pct_of_peak_bf16"]["value"] == pytest.approx(100 * m["tflops_bf16"]["value"] / 4.0)
    assert details["peaks"]["fp32"]["entry"] == "test-cpu"

    # the budget: one window per dtype that ran, one more per direct loop (fp8 is skipped: no share)
    ran = ["fp32", "direct_fp32", "bf16", "direct_bf16"] + ([] if "int8" in details["skipped"] else ["int8"])
    check_budget(fins, 0.5, ran)

    check_node_figures(fins, "tflops_fp32")
    if "tops_int8_node" in m:       # every dtype's node figure is judged on its own window
        assert nproc > 1 and m["tops_int8_node"] == {
            "value": pytest.approx(sum(f["metrics"]["tops_int8"]["value"] for f in fins)), "unit": "TOP/s"}


def test_gemm_int8_wrong_result_fails_exactly(tmp_path):
    results = run_case(tmp_path, "gemm", 1, dict(GEMM_SMALL, dtypes=["int8"]), fault="result")
    # torch 2.13 (the pinned build) has int8 _int_mm on CPU; a build without it would leave nothing to run.
    assert "gemm: skipping int8" not in results[0][1], results[0][1]
    (failed,) = expect_check_failed(results)
    assert failed["checks"]["details"]["int8_mismatches"] > 0
    assert failed["checks"]["details"]["failed_dtypes"] == ["int8"]


def test_gemm_int8_shape_rules_are_config_errors(tmp_path):
    (rc, out, err), = run_case(tmp_path, "gemm", 1, dict(GEMM_SMALL, dtypes=["int8"], k=100))
    assert rc == 2, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    assert "multiples of 8" in err
    assert "FINISHED" not in [r["event"] for r in perflog(out)]


# --------------------------------------------------------------------------- devmem

DEVMEM_SMALL = {"sizes_mib": [16, 4], "warmup": 1, "time_budget_s": 0.5}


def check_devmem(fins):
    fin = fins[0]
    m, details = fin["metrics"], fin["checks"]["details"]
    sizes = details["sizes_mib"]
    assert sizes == sorted(sizes)
    assert fin["unit"] == "GB/s" and fin["value"] == m[f"copy_bw_gbs_{sizes[-1]}mib"]["value"]
    for s in sizes:
        assert m[f"copy_bw_gbs_{s}mib_min"]["value"] <= m[f"copy_bw_gbs_{s}mib"]["value"] \
            <= m[f"copy_bw_gbs_{s}mib_max"]["value"]
        assert details["mismatches"][f"{s}mib"] == 0
    assert details["direct_mismatches"] == {"copy_": 0, "clone": 0}
    direct = [m["direct_tensor_copy_bw_gbs"]["value"], m["direct_clone_bw_gbs"]["value"]]
    assert m["direct_copy_bw_gbs"] == {"value": max(direct), "unit": "GB/s"} and min(direct) > 0
    # cpu: no allocation search, the host's total memory instead
    assert "cpu" in details["capacity_search_skipped"] and "capacity" not in details
    assert "max_alloc_gib" not in m
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    assert m["mem_total_gib"]["value"] == pytest.approx(total, rel=0.05)
    # the budget: one window per size and the two direct loops, which run the largest size's counts
    budget = check_budget(fins, details["time_budget_s"], [f"{s}mib" for s in sizes] + ["direct_copy_",
                                                                                          "direct_clone"])
    for op in ("copy_", "clone"):
        assert budget["counts"][f"direct_{op}"]["mode"] == f"counts of {sizes[-1]}mib"
        assert [budget["counts"][f"direct_{op}"][k] for k in ("warmup", "iters", "repeats")] == \
            [budget["counts"][f"{sizes[-1]}mib"][k] for k in ("warmup", "iters", "repeats")]
    return fin


@pytest.mark.parametrize("nproc", [1, 2])
def test_devmem(tmp_path, nproc):
    peaks = {"test-cpu": {"match": [cpu_model()], "mem_bw_gbs": 50.0}}
    # 1 rank: the benchmark's default (64 MiB); 2 ranks: a small two-size sweep
    overrides = dict(DEVMEM_SMALL) if nproc == 2 else {}
    fins = check_run(run_case(tmp_path, "devmem", nproc, dict(overrides, vendor_peaks=peaks)),
                     "devmem", "copy_bw_gbs")
    fin = check_devmem(fins)
    m, details = fin["metrics"], fin["checks"]["details"]
    assert details["sizes_mib"] == ([4, 16] if nproc == 2 else [64])
    assert details["time_budget_s"] == (0.5 if nproc == 2 else 1.0)
    assert m["pct_of_peak_mem_bw"] == {"value": pytest.approx(100 * fin["value"] / 50.0), "unit": "%"}
    assert details["peaks"]["mem_bw"] == {"entry": "test-cpu", "key": "mem_bw_gbs", "value": 50.0}
    if nproc > 1:
        values = [f["value"] for f in fins]
        assert m["copy_bw_gbs_min_rank"]["value"] == pytest.approx(min(values))
    else:
        assert not any(name.endswith(("_node", "_min_rank")) for name in m)
    check_node_figures(fins, "copy_bw_gbs")


def test_devmem_wrong_result_fails_check(tmp_path):
    # explicit iters and repeats: fixed counts, the budget is not used
    results = run_case(tmp_path, "devmem", 2, {"sizes_mib": [4], "warmup": 1, "iters": 2, "repeats": 2},
                       fault="result")
    for failed in expect_check_failed(results):
        details = failed["checks"]["details"]
        assert details["mismatches"] == {"4mib": 1} and details["test_fault"] == "result"
        assert details["failed_on_some_rank"] is True and details["problems"]
        assert details["counts"]["4mib"] == {"mode": "fixed", "warmup": 1, "iters": 2, "repeats": 2,
                                             "measured_s": details["counts"]["4mib"]["measured_s"]}


def test_devmem_too_small_budget_warns_and_finishes(tmp_path):
    results = run_case(tmp_path, "devmem", 2, {"sizes_mib": [4], "time_budget_s": 1e-7})
    fins = check_run(results, "devmem", "copy_bw_gbs")
    details = check_budget(fins, 1e-7, ["4mib", "direct_copy_", "direct_clone"], modes=("minimum",))
    assert {(c["warmup"], c["iters"], c["repeats"]) for c in details["counts"].values()} == {(1, 1, 1)}
    for fin, (_, _, err) in zip(fins, results):
        assert "4mib: one call takes" in fin["checks"]["details"]["budget_warning"]
        assert "budget warning: devmem 4 MiB: one call takes" in err


# --------------------------------------------------------------------------- bad time budgets

@pytest.mark.parametrize("model, value", [("devmem", 0), ("devmem", "1s"), ("h2d", -0.5), ("h2d", None)])
def test_bad_time_budget_is_config_error(tmp_path, model, value):
    """Also h2d, which skips on a CPU host: its config is checked first, so the mistake shows everywhere."""
    (rc, out, err), = run_case(tmp_path, model, 1, {"time_budget_s": value})
    assert rc == 2, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    assert f"{model}: time_budget_s must be a positive number of seconds" in err
    assert [r["event"] for r in perflog(out)] == ["INIT_START"]


# --------------------------------------------------------------------------- h2d

def test_h2d_skipped_on_cpu(tmp_path):
    for rank, (rc, out, err) in enumerate(run_case(tmp_path, "h2d", 1)):
        assert rc == 0, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        records = perflog(out)
        assert [r["event"] for r in records] == ["INIT_START", "SKIPPED"]
        assert records[-1]["reason"] == "no accelerator: host-device copies need a GPU"
        assert records[-1]["rank"] == rank and records[-1]["benchmark"] == "h2d"
