"""benchmarks/llm on CPU (gloo): real ranks, FSDP2 and DDP, the synthetic language and a tokenized corpus, the
time budget, the FLOP formula in the payload, and the failures (a wrong result exits 3, a bad config 2)."""
import json
import struct

import pytest

from tests.e2e.test_benchmarks_cpu import check_run, perflog, run_case


def details_of(fin):
    return fin["checks"]["details"]


@pytest.mark.parametrize("nproc", [1, 2])
def test_llm_tiny_trains_and_converges(tmp_path, nproc):
    results = run_case(tmp_path, "llm", nproc, {"time_budget_s": 10})
    fins = check_run(results, "llm", "tokens_per_s")
    fin = fins[0]
    d = details_of(fin)
    assert d["converged"] is True and d["final_loss"] < d["target_loss"]
    assert d["target_loss"] == pytest.approx(d["loss_floor"] + 0.8)
    assert d["parallel"] == ("fsdp" if nproc > 1 else "none")
    # the measured window fills the budget (whole steps), and runs min_steps at least (generous: 2 loaded cores)
    assert 9 <= d["measured_s"] < 60, d["measured_s"]
    assert d["steps_measured"] >= 120
    m = fin["metrics"]
    assert m["tokens_per_s_per_device"]["value"] == pytest.approx(fin["value"] / nproc)
    assert m["step_time_p90_s"]["value"] >= m["step_time_median_s"]["value"] > 0
    # the FLOP formula, written out, and recomputable from the payload
    mfu = d["mfu"]
    n, L, dim, T = mfu["N"], mfu["n_layers"], mfu["dim"], mfu["seq_len"]
    assert mfu["flops_per_token"] == 6 * n + 12 * L * dim * T
    assert n == d["params"]["block_matmul"] + d["params"]["lm_head"]
    assert mfu["model_tflops_per_device"] == pytest.approx(mfu["flops_per_token"] * fin["value"] / nproc / 1e12)
    assert "omitted" in mfu and "mfu" not in m            # fp32 on a CPU: no peak to divide by
    # seq_len null: the preset's (tiny: 64); the three named conventions, each with its formula and N
    assert T == 64 and set(mfu["conventions"]) == {"headline", "torchtitan", "flagperf_6n"}
    assert mfu["conventions"]["headline"]["flops_per_token"] == mfu["flops_per_token"]
    assert mfu["conventions"]["flagperf_6n"]["flops_per_token"] == 6 * d["params"]["total"]
    assert all(c["mfu_pct"] is None and c["formula"] for c in mfu["conventions"].values())
    assert (d["precision_requested"], d["precision"], d["precision_used"]) == ("auto", "fp32", "fp32")
    assert "fp8_fallback_reason" not in d
    # every rank's step times and probe, gathered; one rank has no one to be slower than
    s = d["stragglers"]
    assert [r["rank"] for r in s["per_rank"]] == list(range(nproc)) and s["slowest_rank"] in range(nproc)
    assert all(r["steps"]["n"] == d["steps_measured"] and r["probe"]["median_s"] > 0 for r in s["per_rank"])
    if nproc == 1:
        assert s["flagged"] == [] and "straggler_ranks" not in m
    assert d["baseline"] == {"omitted": "baseline off (baseline: false, or auto off CUDA)"}
    steps = [r for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert len(steps) >= 3 and steps[-1]["loss"] < steps[0]["loss"]
    if nproc > 1:       # every rank reports the same job figures
        assert fins[1]["value"] == pytest.approx(fin["value"], rel=1e-6)


def test_llm_ddp_with_accumulation_and_checkpointing(tmp_path):
    results = run_case(tmp_path, "llm", 2, {"parallel": "ddp", "grad_accum": 2, "micro_batch": 8,
                                            "activation_checkpointing": "full", "time_budget_s": 8})
    fin = check_run(results, "llm", "tokens_per_s")[0]
    d = details_of(fin)
    assert d["replicas_in_sync"] is True and d["activation_checkpointing"] == "full"
    assert fin["env"]["global_batch_tokens"] == 2 * 8 * 64 * 2


def test_llm_reads_a_tokenized_corpus(tmp_path):
    # a learnable corpus: a repeating pattern of 12 token ids out of vocab 256, as uint16
    ids = [(7 * i) % 12 + 100 for i in range(50_000)]
    (tmp_path / "tokens.bin").write_bytes(struct.pack(f"<{len(ids)}H", *ids))
    (tmp_path / "tokens.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 256}))
    results = run_case(tmp_path, "llm", 1, {"time_budget_s": 4})
    d = details_of(check_run(results, "llm", "tokens_per_s")[0])
    assert d["data"]["source"] == "corpus" and d["data"]["tokens"] == 50_000
    assert d["converged"] is True


def test_llm_corpus_with_a_bad_header_is_a_config_error(tmp_path):
    (tmp_path / "tokens.bin").write_bytes(b"\0" * 1000)
    (tmp_path / "tokens.json").write_text(json.dumps({"dtype": "float32", "vocab_size": 256}))
    rc, out, err = run_case(tmp_path, "llm", 1)[0]
    assert rc == 2 and "tokens.json: dtype must be one of" in err, err


def test_llm_unreachable_target_fails_its_check(tmp_path):
    results = run_case(tmp_path, "llm", 2, {"time_budget_s": 2}, fault="target")
    for rc, out, err in results:
        assert rc == 3, err
        rec = perflog(out)[-1]
        assert rec["event"] == "CHECK_FAILED" and rec["checks"]["details"]["converged"] is False


@pytest.mark.parametrize("bad,msg", [({"preset": "huge"}, "preset must be one of"),
                                     ({"time_budget_s": 0}, "time_budget_s must be > 0"),
                                     ({"n_heads": 3}, "must divide into"),
                                     ({"activation_checkpointing": "some"}, "activation_checkpointing must be"),
                                     ({"seq_len": 0}, "seq_len must be >= 1"),
                                     ({"precision": "fp4"}, "precision must be one of auto, fp8"),
                                     ({"fp8_recipe": "blockwise"}, "fp8_recipe must be one of tensorwise"),
                                     ({"fp8_recipe": "rowwise", "fp8_fsdp_all_gather": True},
                                      "fp8_fsdp_all_gather: true needs fp8_recipe: tensorwise"),
                                     ({"fp8_emulate": "maybe"}, "fp8_emulate must be one of true, false"),
                                     ({"straggler_margin_pct": 0}, "straggler_margin_pct > 0")])
def test_llm_bad_config_is_a_config_error(tmp_path, bad, msg):
    rc, out, err = run_case(tmp_path, "llm", 1, bad)[0]
    assert rc == 2 and msg in err, err
