"""Run the benchmarks for real on CPU (gloo), one subprocess per rank, as the node launcher does
(docs/benchmarks.md), and check their PerfLog output against the contract."""
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
PREFIX = "[PerfLog] "
TIMEOUT_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(tmp_path, model, nproc, overrides=None, fault=None):
    """Start nproc ranks of benchmarks/<model>/main.py; return [(returncode, stdout, stderr)] by rank. ``fault``:
    the harness's test hook, FLAGPERF_TEST_INJECT=<model>:<fault> (result, target) in every rank's environment."""
    cfg = yaml.safe_load((BENCH / model / "case_config.yaml").read_text()) or {}
    cfg.update(overrides or {})
    cfg.update(model=model, framework="pytorch", hw="cpu", nnodes=1, nproc=nproc, data_dir=str(tmp_path))
    node_dir = tmp_path / "node0"
    node_dir.mkdir()
    (node_dir / "case_config.json").write_text(json.dumps(cfg))
    port = free_port()
    inject = {"FLAGPERF_TEST_INJECT": f"{model}:{fault}"} if fault else {}
    # The launcher sets OMP_NUM_THREADS=max(1, cpu_count // nproc) unless it is set. The tests set 1: on a
    # small noisy VM a 2-thread OpenMP team occasionally stalls a run by 10x, and test time must stay bounded.
    return run_ranks(model, tmp_path, [
        (node_dir, dict(RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc), NODE_RANK="0", NNODES="1",
                        WORLD_SIZE=str(nproc), MASTER_PORT=str(port), **inject))
        for r in range(nproc)])


def run_ranks(model, tmp_path, ranks):
    """Start one process of benchmarks/<model>/main.py per (node_dir, env) in ranks, as the node launcher
    would; wait for all; return [(returncode, stdout, stderr)] in that order."""
    procs = []
    for node_dir, rank_env in ranks:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", FLAGPERF_VENDOR="cpu", FLAGPERF_DEVICE="cpu",
                   FLAGPERF_DIST_BACKEND="gloo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **rank_env)
        cmd = [sys.executable, "-u", str(BENCH / model / "main.py"), "--case-config",
               str(node_dir / "case_config.json"), "--data-dir", str(tmp_path), "--result-dir", str(node_dir)]
        procs.append(subprocess.Popen(cmd, cwd=BENCH / model, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def perflog(stdout):
    """The PerfLog records of one rank, checking the common keys."""
    records = [json.loads(line[len(PREFIX):]) for line in stdout.splitlines() if line.startswith(PREFIX)]
    for rec in records:
        assert isinstance(rec["event"], str)
        assert isinstance(rec["time"], float) and math.isfinite(rec["time"])
        assert isinstance(rec["rank"], int)
    return records


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_finished(records, benchmark, metric, rank, world_size):
    events = [r["event"] for r in records]
    assert events[:3] == ["INIT_START", "INIT_END", "RUN_START"], events
    assert events[-2:] == ["RUN_END", "FINISHED"], events
    assert set(events) <= {"INIT_START", "INIT_END", "RUN_START", "STEP", "RUN_END", "FINISHED"}
    assert all(r["rank"] == rank for r in records)
    times = [r["time"] for r in records]
    assert times == sorted(times)
    init_end = records[1]
    assert init_end["backend"] == "gloo" and init_end["device"] == "cpu" and init_end["world_size"] == world_size

    fin = records[-1]
    expected = {"event", "time", "rank", "schema", "benchmark", "metric", "value", "unit", "higher_is_better",
                "e2e_time", "metrics", "checks", "env"}
    assert set(fin) == expected
    assert fin["schema"] == "flagperf.perflog/1"
    assert fin["benchmark"] == benchmark and fin["metric"] == metric
    assert is_number(fin["value"]) and fin["value"] > 0
    assert isinstance(fin["unit"], str) and fin["unit"]
    assert fin["higher_is_better"] is True
    assert is_number(fin["e2e_time"]) and 0 < fin["e2e_time"] <= fin["time"] - records[0]["time"] + 1e-3
    assert isinstance(fin["metrics"], dict)
    for name, m in fin["metrics"].items():
        assert set(m) == {"value", "unit"}, name
        assert is_number(m["value"]) and isinstance(m["unit"], str), name
    assert fin["checks"]["passed"] is True and isinstance(fin["checks"]["details"], dict)
    env = fin["env"]
    assert env["device"] == "cpu" and env["backend"] == "gloo" and env["world_size"] == world_size
    assert isinstance(env["device_name"], str) and isinstance(env["torch"], str)
    return fin


def check_run(results, benchmark, metric):
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return [check_finished(perflog(out), benchmark, metric, rank, len(results))
            for rank, (_, out, _) in enumerate(results)]


def check_node_figures(fins, metric):
    """The node figures of every rank's FINISHED details (docs/benchmarks.md, "Node figures"): one node, every
    rank's own value per device, the same on every rank, and ``<metric>_node`` the devices' sum exactly when
    their windows were simultaneous (never a sum of figures measured at different moments). Returns node 0's."""
    figures = fins[0]["checks"]["details"]["node_figures"]
    assert all(f["checks"]["details"]["node_figures"] == figures for f in fins)
    node = figures["0"]
    assert list(figures) == ["0"] and node["metric"] == metric and node["unit"] == fins[0]["unit"]
    values = [f["value"] for f in fins]
    assert node["per_device"] == [[rank, pytest.approx(v)] for rank, v in enumerate(values)]
    assert (node["min"], node["max"]) == (pytest.approx(min(values)), pytest.approx(max(values)))
    assert node["spread_pct"] == pytest.approx(100 * (max(values) - min(values)) / node["median"])
    assert 0 <= node["overlap"] <= 1 and node["window_s"] > 0
    assert node["simultaneous"] == (node["overlap"] >= 0.9)
    if node["simultaneous"]:
        assert node["aggregate"] == pytest.approx(sum(values)) and node["reason"] is None
    else:
        assert node["aggregate"] is None and "measured at different moments, not summed" in node["reason"]
    for f in fins:
        if len(fins) > 1 and node["simultaneous"]:
            assert f["metrics"][f"{metric}_node"]["value"] == pytest.approx(sum(values))
        else:
            assert f"{metric}_node" not in f["metrics"]
        assert not any(k.endswith("_total") for k in f["metrics"])
    return node


def check_budget(fins, budget_s, windows, modes=("budget",)):
    """The time-budget report of every rank's FINISHED details (docs/benchmarks.md, "Time budget"): the budget,
    its split over ``windows`` (the names of the timed windows), the counts each window chose (the same on every
    rank, so that barriers and collectives pair up) and the measured seconds. Returns rank 0's details."""
    for fin in fins:
        d = fin["checks"]["details"]
        assert d["time_budget_s"] == budget_s and d["budget_windows"] == len(windows)
        assert d["budget_per_window_s"] == pytest.approx(budget_s / len(windows))
        assert list(d["counts"]) == list(windows)
        for name, counts in d["counts"].items():
            assert counts["iters"] >= 1 and counts["repeats"] >= 1 and counts["warmup"] >= 0, name
            assert is_number(counts["measured_s"]) and counts["measured_s"] > 0, name
            assert counts["mode"] in modes or counts["mode"].startswith("counts of "), name
        assert d["measured_s"] == pytest.approx(sum(c["measured_s"] for c in d["counts"].values()))
        assert {n: (c["iters"], c["repeats"]) for n, c in d["counts"].items()} == \
            {n: (c["iters"], c["repeats"]) for n, c in fins[0]["checks"]["details"]["counts"].items()}
    return fins[0]["checks"]["details"]


@pytest.mark.parametrize("nproc", [1, 2])
def test_gemm(tmp_path, nproc):
    """The CPU default: fp32 at 512^3 and bf16 at 128^3 (bf16 is ~70x slower than fp32 on CPUs without AVX-512),
    each beside its direct torch.matmul loop, on a 1 s budget."""
    t0 = time.monotonic()
    fins = check_run(run_case(tmp_path, "gemm", nproc), "gemm", "tflops_fp32")
    wall = time.monotonic() - t0
    fin = fins[0]
    assert fin["unit"] == "TFLOP/s"
    assert "tflops_bf16" in fin["metrics"] and "tflops_fp32" not in fin["metrics"]
    details = fin["checks"]["details"]
    assert details["fp32_rel_err"] < 1e-5 and details["bf16_rel_err"] < 2e-2
    assert details["shapes"] == {"fp32": [512, 512, 512], "bf16": [128, 128, 128]}
    assert fin["env"]["matmul_allow_tf32"] == {"fp32": False, "bf16": False}
    check_budget(fins, 1.0, ["fp32", "direct_fp32", "bf16", "direct_bf16"])
    for d in ("fp32", "bf16"):  # the direct loop runs the counts its dtype's harness measurement chose
        assert {k: v for k, v in details["counts"][f"direct_{d}"].items() if k not in ("mode", "measured_s")} == \
            {k: v for k, v in details["counts"][d].items() if k not in ("mode", "measured_s")}
        assert details["counts"][f"direct_{d}"]["mode"] == f"counts of {d}"
    # the CPU default is quick (the embedded default config runs it twice): generous on a loaded 2-core VM
    assert wall < 60, wall
    check_node_figures(fins, "tflops_fp32")


def test_gemm_wrong_result_fails_check(tmp_path):
    # explicit iters and repeats: fixed counts, the budget is not used
    results = run_case(tmp_path, "gemm", 2, {"iters": 2, "repeats": 2, "warmup": 1}, fault="result")
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        records = perflog(out)
        events = [r["event"] for r in records]
        assert "FINISHED" not in events
        assert events[-1] == "CHECK_FAILED"
        failed = records[-1]
        assert failed["checks"]["passed"] is False
        assert failed["checks"]["details"]["fp32_rel_err"] > 1e-5
        counts = failed["checks"]["details"]["counts"]
        assert {(c["mode"], c["warmup"], c["iters"], c["repeats"]) for n, c in counts.items()
                if not n.startswith("direct_")} == {("fixed", 1, 2, 2)}


def test_gemm_tf32_skipped_on_cpu(tmp_path):
    results = run_case(tmp_path, "gemm", 1, {"dtypes": ["tf32", "fp64"], "time_budget_s": 0.5})
    fin = check_run(results, "gemm", "tflops_fp64")[0]
    assert "tf32" in fin["checks"]["details"]["skipped"]
    assert fin["checks"]["details"]["fp64_rel_err"] < 1e-12
    check_budget([fin], 0.5, ["fp64"])  # a skipped dtype takes no share of the budget


def test_gemm_budget_is_honoured(tmp_path):
    """One window of 2 s: the samples fill it (within a generous factor: a 2-core VM under load), at least 3 of
    them, and the STEP line says what was chosen."""
    budget = 2.0
    results = run_case(tmp_path, "gemm", 1, {"dtypes": ["fp32"], "direct": False, "time_budget_s": budget})
    fin = check_run(results, "gemm", "tflops_fp32")[0]
    details = check_budget([fin], budget, ["fp32"])
    counts = details["counts"]["fp32"]
    assert counts["mode"] == "budget" and counts["repeats"] >= 3 and counts["iters"] >= 1
    assert budget / 4 <= details["measured_s"] <= 4 * budget, details
    assert fin["e2e_time"] < 60
    (step,) = [r for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert (step["iters"], step["repeats"]) == (counts["iters"], counts["repeats"])
    assert step["measured_s"] == pytest.approx(counts["measured_s"])


@pytest.mark.parametrize("nproc", [1, 2])
def test_gemm_too_small_budget_warns_and_finishes(tmp_path, nproc):
    """One GEMM alone takes longer than the budget: 1 sample of 1 GEMM per window, a warning on stderr and in
    the details, and the case still passes (on every rank: the ranks agree on the minimum)."""
    results = run_case(tmp_path, "gemm", nproc, {"time_budget_s": 1e-6, "sustained_s": 1e-6})
    fins = check_run(results, "gemm", "tflops_fp32")
    details = check_budget(fins, 1e-6, ["fp32", "direct_fp32", "bf16", "direct_bf16"], modes=("minimum",))
    assert {(c["warmup"], c["iters"], c["repeats"]) for c in details["counts"].values()} == {(1, 1, 1)}
    for fin, (_, _, err) in zip(fins, results):
        warning = fin["checks"]["details"]["budget_warning"]
        assert isinstance(warning, str) and "more than the budget" in warning
        assert "fp32:" in warning and "bf16:" in warning
        assert "budget warning: gemm fp32: one call takes" in err
        sustained = fin["checks"]["details"]["sustained"]
        assert sustained["counts"]["fp32"]["mode"] == "minimum" and "budget_warning" in sustained
        assert fin["metrics"]["tflops_fp32_sustained"]["value"] > 0
        assert fin["e2e_time"] < 60


@pytest.mark.parametrize("overrides, mode, iters, repeats", [
    ({"iters": 2, "repeats": 3}, "fixed", 2, 3),       # both set: fixed counts, the budget is not used
    ({"repeats": 4}, "budget", None, 4),               # one set: kept, the budget sizes the other
    ({"iters": 3}, "budget", 3, None),
    ({"iters_per_dtype": {"fp32": 5}}, "budget", 5, None),
])
def test_gemm_explicit_counts_override_the_budget(tmp_path, overrides, mode, iters, repeats):
    results = run_case(tmp_path, "gemm", 1, dict(overrides, dtypes=["fp32"], direct=False, time_budget_s=0.3))
    counts = check_run(results, "gemm", "tflops_fp32")[0]["checks"]["details"]["counts"]["fp32"]
    assert counts["mode"] == mode
    assert counts["iters"] == (iters or counts["iters"]) and counts["repeats"] == (repeats or counts["repeats"])


@pytest.mark.parametrize("value", [0, True, float("nan")])  # more bad values: test_bench_comm.py (cheaper there)
def test_gemm_bad_time_budget_is_config_error(tmp_path, value):
    (rc, out, err), = run_case(tmp_path, "gemm", 1, {"time_budget_s": value})
    assert rc == 2, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    assert "gemm: time_budget_s must be a positive number of seconds" in err
    assert "FINISHED" not in [r["event"] for r in perflog(out)]


def test_gemm_sustained_window(tmp_path):
    fin = check_run(run_case(tmp_path, "gemm", 1, {"dtypes": ["fp32"], "direct": False, "time_budget_s": 0.3,
                                                   "sustained_s": 0.5}), "gemm", "tflops_fp32")[0]
    sustained = fin["checks"]["details"]["sustained"]
    assert sustained["time_budget_s"] == 0.5 and sustained["budget_per_window_s"] == 0.5
    assert sustained["counts"]["fp32"]["repeats"] == 1 and sustained["counts"]["fp32"]["iters"] > 1
    assert 0.5 / 4 <= sustained["counts"]["fp32"]["measured_s"] <= 2.0
    assert fin["metrics"]["tflops_fp32_sustained"]["unit"] == "TFLOP/s"
    assert fin["metrics"]["tflops_fp32_sustained"]["value"] > 0


def test_perflog_finished_validation(capsys):
    sys.path.insert(0, str(BENCH))
    try:
        from common import harness
    finally:
        sys.path.remove(str(BENCH))
    log = harness.PerfLog(rank=0, benchmark="x")
    with pytest.raises(RuntimeError):  # no INIT_START yet
        log.finished(metric="m", value=1.0, unit="u", higher_is_better=True)
    log.event("INIT_START")
    for bad in (dict(value=float("nan")), dict(value=float("inf")), dict(value="1"), dict(value=True),
                dict(higher_is_better=1), dict(metrics={"a": {"value": float("nan"), "unit": "u"}}),
                dict(metrics={"a": 1.0}), dict(checks={"passed": False, "details": {}})):
        kwargs = dict(metric="m", value=1.0, unit="u", higher_is_better=True)
        kwargs.update(bad)
        with pytest.raises(ValueError):
            log.finished(**kwargs)
    log.finished(metric="m", value=2, unit="u", higher_is_better=False, metrics={"a": {"value": 1, "unit": "u"}})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith(PREFIX) for line in lines)
    fin = json.loads(lines[1][len(PREFIX):])
    assert fin["schema"] == "flagperf.perflog/1" and fin["value"] == 2 and fin["checks"]["passed"] is True
    assert fin["e2e_time"] >= 0


# --------------------------------------------------------------------------- harness: time budget

def load_harness():
    sys.path.insert(0, str(BENCH))
    try:
        from common import harness
    finally:
        sys.path.remove(str(BENCH))
    return harness


@pytest.mark.parametrize("per_call, budget, iters, repeats, expected", [
    (0.001, 1.0, None, None, (100, 10)),        # 1000 calls: 10 samples of 100
    (0.1, 1.0, None, None, (1, 10)),            # 10 calls: 10 samples of 1
    (0.25, 1.0, None, None, (1, 4)),            # 4 calls: 4 samples of 1 (at least 3)
    (0.5, 1.0, None, None, (1, 2)),             # only 2 calls fit: 2 samples
    (0.001, 1.0, None, 4, (250, 4)),            # repeats kept, iters sized
    (0.001, 1.0, 50, None, (50, 20)),           # iters kept, repeats sized
    (0.001, 1.0, 7, 3, (7, 3)),                 # both kept
    (1e-10, 1.0, None, None, (1_000_000, 1000)),  # capped: at most MAX_ITERS x MAX_SAMPLES calls
])
def test_plan_counts(per_call, budget, iters, repeats, expected):
    harness = load_harness()
    it, reps, warning = harness.plan_counts(per_call, budget, iters=iters, repeats=repeats)
    assert (it, reps) == expected and warning is None


def test_plan_counts_caps_and_warnings():
    harness = load_harness()
    # max_iters (e.g. an in-place all_reduce whose values grow call by call): more samples instead
    assert harness.plan_counts(1e-5, 1.0, max_iters=199)[:2] == (199, 502)
    # one call longer than the budget: the minimum, with a warning
    it, reps, warning = harness.plan_counts(2.0, 1.0)
    assert (it, reps) == (1, 1) and "more than the budget" in warning and "time_budget_s" in warning
    # explicit counts are kept even when they take far longer than the budget, with a warning
    it, reps, warning = harness.plan_counts(0.1, 1.0, iters=10, repeats=5)
    assert (it, reps) == (10, 5) and "more than twice the budget" in warning


class CpuCtx:
    """A one-rank CPU context, as setup_distributed returns it without a process group."""
    is_cuda = initialized = False
    world_size = 1

    def sync(self):
        pass

    def all_reduce(self, values, op="sum"):
        raise AssertionError("no all-reduce without a process group")


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_time_fn_fills_the_budget():
    harness = load_harness()
    calls, barriers = [], []
    t0 = time.perf_counter()
    t = harness.time_fn(lambda: (calls.append(1), busy(0.002)), CpuCtx(), warmup=3,
                        before_repeat=lambda: barriers.append(1), budget_s=0.5, label="busy")
    wall = time.perf_counter() - t0
    assert t["mode"] == "budget" and t["budget_warning"] is None and t["budget_s"] == 0.5
    assert t["warmup"] == 3 and t["repeats"] == len(t["samples"]) >= 3
    assert t["iters"] * t["repeats"] + t["warmup"] + t["calibration_calls"] == len(calls)
    assert 0.5 / 4 <= t["measured_s"] <= 0.5 * 4 and wall < 0.5 * 20     # warm-up and calibration included
    assert t["per_call_s"] >= 0.002 and t["min"] <= t["median"] <= t["max"]
    # before_repeat: once before the warm-up, before every calibration batch and before every sample
    assert len(barriers) >= 1 + 1 + t["repeats"]


def test_time_fn_minimum_when_one_call_exceeds_the_budget(capsys):
    harness = load_harness()
    calls = []
    t = harness.time_fn(lambda: (calls.append(1), busy(0.05)), CpuCtx(), warmup=5, budget_s=0.001, label="slow")
    assert t["mode"] == "minimum" and (t["warmup"], t["iters"], t["repeats"]) == (1, 1, 1)
    assert len(calls) == 2                   # the timed warm-up call and one measured call, not 5 + many
    assert "one call takes" in t["budget_warning"]
    assert capsys.readouterr().err.startswith("budget warning: slow: one call takes")


def test_time_fn_fixed_counts_without_budget():
    harness = load_harness()
    calls = []
    t = harness.time_fn(lambda: calls.append(1), CpuCtx(), warmup=2, iters=3, repeats=4)
    assert (t["mode"], t["warmup"], t["iters"], t["repeats"]) == ("fixed", 2, 3, 4) and len(calls) == 2 + 12
    assert t["per_call_s"] is None and t["budget_warning"] is None and len(t["samples"]) == 4


def test_time_fn_stops_when_the_device_slows_down(capsys):
    """The calibration saw fast calls, then every call became 20x slower: the samples stop after about OVERRUN
    times the budget, with a warning, instead of running 20 times the budget."""
    harness = load_harness()
    state = {"calls": 0}

    def fn():
        state["calls"] += 1
        busy(0.001 if state["calls"] <= 30 else 0.02)
    t = harness.time_fn(fn, CpuCtx(), warmup=1, budget_s=0.2, label="slowing")
    assert t["repeats"] < 10 and "stopped after" in t["budget_warning"]    # stopped early, by the OVERRUN rule
    assert "budget warning: slowing: stopped after" in capsys.readouterr().err
