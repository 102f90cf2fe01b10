"""End-to-end: node figures with real torch.distributed ranks on CPU (gloo). The harness's all-gather of every
rank's figure and window, its simultaneity rule on windows measured at different moments, and a real
``flagperf run`` of gemm on localhost with one rank planted slow (the harness's test hook, gemm:slow): the spread
is flagged and the slow device named in summary.json, on the terminal and in report.md; the windows are not
simultaneous, so nothing is summed."""

import json
import os
import subprocess
import sys
import textwrap

from .conftest import only_run_dir, run_cli, write_conf
from .test_benchmarks_cpu import ROOT, free_port

TIMEOUT_S = 120

RANK_SCRIPT = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    import harness
    ctx = harness.setup_distributed({})
    t = 1.8e9
    out = {}
    # measured at different moments: rank 1's window starts after rank 0's ended
    window = {"start": t + 2 * ctx.rank, "end": t + 2 * ctx.rank + 1}
    out["apart"] = harness.node_figures(ctx, "x_gbs", 10.0 + ctx.rank, "GB/s", window)
    # the same moment
    out["together"] = harness.node_figures(ctx, "x_gbs", 10.0 + ctx.rank, "GB/s", {"start": t, "end": t + 1})
    # a real aligned window of the same work on every rank: its start and end are this rank's wall clock
    timed = harness.time_fn(lambda: sum(range(2000)), ctx, warmup=1, iters=50, repeats=3, aligned=True)
    out["timed"] = timed["window"]
    metrics, figs = harness.node_metrics(ctx, [("y_gbs", 1.0, "GB/s", timed["window"])])
    out["real"] = figs["y_gbs"]
    ctx.destroy()
    print("RESULT " + json.dumps(out), flush=True)
""")


def run_script_ranks(tmp_path, nproc):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    port = free_port()
    procs = []
    for r in range(nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), LOCAL_RANK=str(r),
                   WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), NODE_RANK="0", FLAGPERF_DEVICE="cpu",
                   FLAGPERF_DIST_BACKEND="gloo", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-u", str(script), str(ROOT / "benchmarks" / "common")],
                                      env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            assert p.returncode == 0, out + err
            (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
            results.append(json.loads(line[len("RESULT "):]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def test_windows_at_different_moments_are_not_simultaneous_and_not_summed(tmp_path):
    results = run_script_ranks(tmp_path, 3)
    assert all(r["apart"] == results[0]["apart"] for r in results)     # every rank sees every rank's figure
    apart = results[0]["apart"]["0"]
    assert apart["per_device"] == [[0, 10.0], [1, 11.0], [2, 12.0]]
    assert apart["simultaneous"] is False and apart["aggregate"] is None and apart["overlap"] == 0.0
    assert "measured at different moments, not summed" in apart["reason"]
    together = results[0]["together"]["0"]
    assert together["simultaneous"] is True and together["aggregate"] == 33.0 and together["overlap"] == 1.0
    assert together["spread_pct"] == 100 * 2 / 11
    # the real aligned windows: every rank's own, gathered exactly, judged by the documented rule
    real = results[0]["real"]["0"]
    windows = [(r["timed"]["start"], r["timed"]["end"]) for r in results]
    assert all(a < b for a, b in windows)
    longest = max(b - a for a, b in windows)
    expected = max(0.0, min(b for _, b in windows) - max(a for a, _ in windows)) / longest
    assert abs(real["overlap"] - expected) < 1e-6
    assert real["simultaneous"] == (expected >= 0.9)
    assert real["aggregate"] == (3.0 if real["simultaneous"] else None)


def test_a_planted_slow_rank_is_flagged_and_named_and_not_summed(tmp_path, flagperf_home, monkeypatch):
    override = flagperf_home / "vendors" / "cpu" / "gemm"
    override.mkdir()
    (override / "config_slow.yaml").write_text("dtypes: [fp32]\ndirect: false\ntime_budget_s: 0.5\n")
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {free_port()}\n")
    conf = write_conf(tmp_path, {"gemm:pytorch:slow:1:2:1": "null"}, CLUSTER="cluster.yaml")
    monkeypatch.setenv("FLAGPERF_TEST_INJECT", "gemm:slow")      # local rank 1 of the node: 3x slower
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=300)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    (fig,) = case["node_figures"]
    assert fig["node"] == "localhost" and fig["metric"] == "tflops_fp32" and fig["unit"] == "TFLOP/s"
    assert fig["flagged"] is True and fig["spread_pct"] > 10
    assert [d[0] for d in fig["per_device"]] == [0, 1] and fig["per_device"][1][1] < fig["per_device"][0][1]
    assert "slowest local rank 1" in fig["reason"]
    # the slow rank's window is about 3x the other's: measured at different moments, never summed
    assert fig["simultaneous"] is False and fig["aggregate"] is None and fig["overlap"] < 0.9
    assert "measured at different moments, not summed" in fig["reason"]
    fin = case["rounds"][0]["finished"]
    assert fin["checks"]["details"]["node_figures"]["0"]["aggregate"] is None
    assert not any(k.endswith(("_node", "_total")) for k in fin["metrics"])

    flat = " ".join(out.split())
    assert "SPREAD: gemm-pytorch-slow-1x2: node localhost: spread" in flat and "slowest local rank 1" in flat
    assert "gemm-pytorch-slow-1x2: node localhost: not summed; per device median" in flat
    report = (run / "report.md").read_text()
    assert "- **SPREAD: gemm-pytorch-slow-1x2: node localhost: spread" in report
    # one round on CPU ranks that share cores: a note, not a degraded node
    assert summary["verdicts"][0]["verdict"] == "accept"
