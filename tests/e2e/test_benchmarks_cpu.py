"""Run the benchmarks for real on CPU (gloo), one subprocess per rank, as the node launcher does
(docs/benchmarks.md), and check their PerfLog output against the contract."""
import json
import math
import os
import socket
import subprocess
import sys
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


def run_case(tmp_path, model, nproc, overrides=None):
    """Start nproc ranks of benchmarks/<model>/main.py; return [(returncode, stdout, stderr)] by rank."""
    cfg = yaml.safe_load((BENCH / model / "case_config.yaml").read_text()) or {}
    cfg.update(overrides or {})
    cfg.update(model=model, framework="pytorch", hw="cpu", nnodes=1, nproc=nproc, data_dir=str(tmp_path))
    node_dir = tmp_path / "node0"
    node_dir.mkdir()
    (node_dir / "case_config.json").write_text(json.dumps(cfg))
    port = free_port()
    # The launcher sets OMP_NUM_THREADS=max(1, cpu_count // nproc) unless it is set. The tests set 1: on a
    # small noisy VM a 2-thread OpenMP team occasionally stalls a run by 10x, and test time must stay bounded.
    return run_ranks(model, tmp_path, [
        (node_dir, dict(RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc), NODE_RANK="0", NNODES="1",
                        WORLD_SIZE=str(nproc), MASTER_PORT=str(port)))
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


@pytest.mark.parametrize("nproc", [1, 2])
def test_gemm(tmp_path, nproc):
    fins = check_run(run_case(tmp_path, "gemm", nproc), "gemm", "tflops_fp32")
    fin = fins[0]
    assert fin["unit"] == "TFLOP/s"
    assert "tflops_bf16" in fin["metrics"] and "tflops_fp32" not in fin["metrics"]
    details = fin["checks"]["details"]
    assert details["fp32_rel_err"] < 1e-5 and details["bf16_rel_err"] < 2e-2
    assert fin["env"]["matmul_allow_tf32"] == {"fp32": False, "bf16": False}
    if nproc > 1:
        total = fin["metrics"]["tflops_fp32_total"]["value"]
        assert total == pytest.approx(sum(f["value"] for f in fins))
        assert all(f["metrics"]["tflops_bf16_total"] == fin["metrics"]["tflops_bf16_total"] for f in fins)
    else:
        assert not any(k.endswith("_total") for k in fin["metrics"])


def test_gemm_inject_error_fails_check(tmp_path):
    results = run_case(tmp_path, "gemm", 2, {"inject_error": True, "iters": 2, "repeats": 2, "warmup": 1})
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        records = perflog(out)
        events = [r["event"] for r in records]
        assert "FINISHED" not in events
        assert events[-1] == "CHECK_FAILED"
        failed = records[-1]
        assert failed["checks"]["passed"] is False
        assert failed["checks"]["details"]["fp32_rel_err"] > 1e-5


def test_gemm_tf32_skipped_on_cpu(tmp_path):
    results = run_case(tmp_path, "gemm", 1, {"dtypes": ["tf32", "fp64"], "iters": 2, "repeats": 2})
    fin = check_run(results, "gemm", "tflops_fp64")[0]
    assert "tf32" in fin["checks"]["details"]["skipped"]
    assert fin["checks"]["details"]["fp64_rel_err"] < 1e-12


@pytest.mark.parametrize("nproc", [1, 2])
def test_train_gpt(tmp_path, nproc):
    results = run_case(tmp_path, "train_gpt", nproc)
    fins = check_run(results, "train_gpt", "tokens_per_s")
    fin = fins[0]
    m, details = fin["metrics"], fin["checks"]["details"]
    assert {"final_loss", "steps", "params", "samples_per_s", "converged"} <= set(m)
    assert m["converged"]["value"] == 1 and details["converged"] is True
    assert m["final_loss"]["value"] < details["target_loss"] < 2.0
    assert details["replicas_in_sync"] is True
    assert m["samples_per_s"]["value"] == pytest.approx(fin["value"] / 64)
    # every rank reports the same global numbers
    assert all(f["metrics"]["final_loss"] == m["final_loss"] and f["metrics"]["steps"] == m["steps"] for f in fins)
    steps = [r for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert steps and steps[-1]["step"] == m["steps"]["value"] and steps[0]["loss"] > steps[-1]["loss"]


def test_train_gpt_inject_error_fails_check(tmp_path):
    results = run_case(tmp_path, "train_gpt", 1, {"inject_error": True, "max_steps": 20})
    rc, out, err = results[0]
    assert rc == 3, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    records = perflog(out)
    assert records[-1]["event"] == "CHECK_FAILED"
    assert "FINISHED" not in [r["event"] for r in records]
    assert records[-1]["checks"]["details"]["converged"] is False
    assert [r["step"] for r in records if r["event"] == "STEP"] == [10, 20]


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
