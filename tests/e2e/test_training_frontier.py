"""End-to-end through ``flagperf run`` on CPU ranks (gloo): llm at a longer sequence with fp8 asked for (the CPU
falls back to fp32 and says why), its three MFU conventions and its straggler view with one rank planted slow
(the harness's test hook, llm:slow: local rank 1 sleeps inside its probe), and resnet50 channels-last with the fused
SGD, eager on the CPU. DALI and CUDA graphs are GPU paths: only their CPU behaviour (a one-line config error, and
no CUDA graphs) is tested here."""
import json

from flagperf.untrusted import for_markdown

from .conftest import only_run_dir, run_cli, write_conf
from .test_benchmarks_cpu import free_port


def own_vendor_folder(home, model):
    """home/vendors/cpu/<model> as a real folder of this test (the repository's own is linked, never written)."""
    folder = home / "vendors" / "cpu" / model
    if folder.is_symlink():
        folder.unlink()
    folder.mkdir(exist_ok=True)
    return folder


def test_llm_long_seq_fp8_fallback_straggler_and_resnet50_fused(tmp_path, flagperf_home, monkeypatch):
    (own_vendor_folder(flagperf_home, "llm") / "config_long.yaml").write_text(
        "seq_len: 256\nmicro_batch: 4\nprecision: fp8\nfp8_recipe: rowwise\ntime_budget_s: 3\n")
    (own_vendor_folder(flagperf_home, "resnet50") / "config_fused.yaml").write_text(
        "channels_last: true\noptimizer: fused\ntime_budget_s: 60\n")     # early stop ends it at the target
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {free_port()}\n")
    conf = write_conf(tmp_path, {"llm:pytorch:long:1:2:1": "null", "resnet50:pytorch:fused:1:1:1": "null"},
                      CLUSTER="cluster.yaml")
    monkeypatch.setenv("FLAGPERF_TEST_INJECT", "llm:slow")       # local rank 1: its probe passes 3x as long
    # one OpenMP thread per rank: on a small loaded VM a 2-thread team occasionally stalls a run by 10x
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("COLUMNS", "400")        # the case table's notes on one line each
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=400)
    assert code == 0, out + err
    assert "Traceback" not in out + err
    run_dir = only_run_dir(tmp_path / "result")
    summary = json.loads((run_dir / "summary.json").read_text())
    llm, r50 = summary["cases"]
    assert (llm["status"], r50["status"]) == ("passed", "passed")

    d = llm["rounds"][0]["finished"]["checks"]["details"]
    assert d["converged"] is True
    # fp8 asked for, the CPU cannot: the base precision, and why
    assert (d["precision_requested"], d["precision_used"], d["precision"]) == ("fp8", "fp32", "fp32")
    assert d["fp8_fallback_reason"] == "fp8 needs a CUDA GPU of compute capability >= 8.9; this run is on cpu"
    assert "fp8" not in d
    # the three conventions at seq 256, recomputable from the payload
    mfu = d["mfu"]
    assert mfu["seq_len"] == 256
    conv, p = mfu["conventions"], d["params"]
    attention = 12 * mfu["n_layers"] * mfu["n_heads"] * mfu["head_dim"] * 256
    assert conv["headline"]["flops_per_token"] == 6 * (p["block_matmul"] + p["lm_head"]) + attention
    assert conv["torchtitan"]["flops_per_token"] == 6 * (p["total"] - p["embedding"]) + attention
    assert conv["flagperf_6n"]["flops_per_token"] == 6 * p["total"]
    tokens_per_device = llm["rounds"][0]["finished"]["value"] / 2
    for c in conv.values():
        assert c["mfu_pct"] is None          # no peak on a CPU
        assert abs(c["model_tflops_per_device"] - c["flops_per_token"] * tokens_per_device / 1e12) < 1e-12
    # the straggler: rank 1 (local rank 1) named and flagged; every rank's step times gathered
    s = d["stragglers"]
    assert s["slowest_rank"] == 1 and s["flagged"] == [1] and s["slowest"]["local_rank"] == 1
    assert s["slowest"]["vs_median_pct"] > s["margin_pct"] == 5.0
    assert [r["rank"] for r in s["per_rank"]] == [0, 1]
    assert all(r["steps"]["n"] == d["steps_measured"] and r["probe"]["n"] == 10 for r in s["per_rank"])
    assert llm["rounds"][0]["finished"]["metrics"]["straggler_ranks"]["value"] == 1
    assert s["judged_by"] == "min" and s["slowest"]["probe_min_s"] == s["per_rank"][1]["probe"]["min_s"]
    # the driver surfaces it: summary.json's case, the terminal table's row, report.md (a finding: still passed)
    (seen,) = llm["stragglers"]
    assert seen["round"] == 1 and seen["flagged"] == [1] and seen["judged_by"] == "min"
    assert seen["slowest"]["rank"] == 1 and seen["slowest"]["local_rank"] == 1 and seen["slowest"]["gpu"] == ""
    assert seen["slowest"]["vs_median_pct"] == s["slowest"]["vs_median_pct"] and r50["stragglers"] == []
    where = f"{seen['slowest']['host']}, local rank 1" if seen["slowest"]["host"] else "node 0, local rank 1"
    note = f"straggler: rank 1 ({where}) {seen['slowest']['vs_median_pct']:+.1f}% over the median probe"
    assert note in out, out
    assert f"- round 1: **{for_markdown(note)}** (judged by each rank's min probe time, margin 5%)" \
        in (run_dir / "report.md").read_text()

    r = r50["rounds"][0]["finished"]["checks"]["details"]
    assert r["converged"] is True and r["memory_format"] == "channels_last"
    assert r["optimizer"]["impl"] == "fused" and r["optimizer"]["requested"] == "fused"
    assert r["compile"]["enabled"] is False and r["compile"]["cuda_graphs"] is False     # eager on the CPU


def test_llm_fp8_emulated_under_fsdp2_all_gathers_in_fp8(tmp_path, flagperf_home, monkeypatch):
    """fp8's real code path on CPU ranks (torchao's emulated casts, fp8_emulate): the blocks' projections become
    Float8Linear; under FSDP2 with the tensorwise recipe the weights are all-gathered in fp8 and their scales
    precomputed after each optimizer step; the run still converges and its replicas agree. One rank with the
    rowwise recipe has no fp8 all-gather."""
    folder = own_vendor_folder(flagperf_home, "llm")
    (folder / "config_fp8ag.yaml").write_text("precision: fp8\nfp8_emulate: true\ntime_budget_s: 3\n")
    (folder / "config_fp8rw.yaml").write_text("precision: fp8\nfp8_emulate: true\nfp8_recipe: rowwise\n"
                                              "time_budget_s: 3\n")
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {free_port()}\n")
    conf = write_conf(tmp_path, {"llm:pytorch:fp8ag:1:2:1": "null", "llm:pytorch:fp8rw:1:1:1": "null"},
                      CLUSTER="cluster.yaml")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=400)
    assert code == 0, out + err
    assert "Traceback" not in out + err
    ag, rw = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())["cases"]
    assert (ag["status"], rw["status"]) == ("passed", "passed"), (ag, rw)
    d = ag["rounds"][0]["finished"]["checks"]["details"]
    assert (d["precision_requested"], d["precision_used"], d["parallel"]) == ("fp8", "fp8", "fsdp")
    assert "fp8_fallback_reason" not in d
    # tiny: 2 blocks x (q, k, v, o, w1, w2, w3)
    assert d["fp8"]["float8_linears"] == 14 and d["fp8"]["recipe"] == "tensorwise"
    assert d["fp8"]["fsdp_float8_all_gather"] is True and d["fp8"]["emulated"] is True
    assert d["fp8"]["fp8_gathered_weights"] == 14       # read from the sharded model: every weight's shard
    assert "precompute_float8_dynamic_scale_for_fsdp" in d["fp8"]["api"]
    assert "not fp8's speed" in d["fp8"]["note"]
    assert d["converged"] is True and d["replicas_in_sync"] is True
    r = rw["rounds"][0]["finished"]["checks"]["details"]
    assert (r["precision_used"], r["parallel"], r["fp8"]["recipe"]) == ("fp8", "none", "rowwise")
    assert r["fp8"]["fsdp_float8_all_gather"] is False and r["fp8"]["float8_linears"] == 14
    assert r["fp8"]["fp8_gathered_weights"] == 0
    assert r["converged"] is True


def test_a_round_that_fails_its_check_still_names_its_straggler(tmp_path, flagperf_home, monkeypatch):
    """A slow rank (the test hook: local rank 1's probe passes take 3x as long) in a run that misses its
    convergence target (target_loss 0: unreachable): the round fails, and the straggler view of its CHECK_FAILED
    line still names rank 1 in summary.json, the case row and report.md."""
    (own_vendor_folder(flagperf_home, "llm") / "config_unreached.yaml").write_text(
        "target_loss: 0.0\ntime_budget_s: 2\n")
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {free_port()}\n")
    conf = write_conf(tmp_path, {"llm:pytorch:unreached:1:2:1": "null"}, CLUSTER="cluster.yaml")
    monkeypatch.setenv("FLAGPERF_TEST_INJECT", "llm:slow")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("COLUMNS", "400")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=400)
    assert code == 1, out + err         # a failed case, not a usage error
    assert "Traceback" not in out + err
    run_dir = only_run_dir(tmp_path / "result")
    (case,) = json.loads((run_dir / "summary.json").read_text())["cases"]
    assert case["status"] == "failed"
    r = case["rounds"][0]
    assert r["finished"] is None and r["check_failed"]["passed"] is False
    assert r["check_failed"]["details"]["converged"] is False
    (seen,) = case["stragglers"]
    assert seen["check_failed"] is True and seen["flagged"] == [1] and seen["slowest"]["local_rank"] == 1
    assert "over the median probe (round 1 failed its check)" in " ".join(out.split()), out
    assert "the round failed its own check)" in (run_dir / "report.md").read_text()
