"""The llm benchmark's FLOP conventions (headline, torchtitan, FlagPerf's 6N) against hand computations, the
presets' sequence lengths, the fp8 plan and its fallback reasons, and the straggler rule."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH / "llm"))
sys.path.insert(0, str(BENCH))
import fp8 as llm_fp8  # noqa: E402
import model as llm  # noqa: E402
from common import stragglers  # noqa: E402

SMALL = llm.LlamaShape(vocab_size=10, dim=8, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=16)


def test_three_conventions_of_a_small_config_match_a_hand_count():
    counts = llm.count_params(llm.Llama(SMALL, max_seq_len=4))
    conv = llm.flop_conventions(counts, SMALL, 4)
    # N: matmul 1152 (blocks) + 80 (tied head) = 1232; total 80 + 1152 + 32 + 8 = 1272; titan 1272 - 80 = 1192
    # attention: 12 * L * H * Q * T = 12 * 2 * 2 * 4 * 4 = 768 (= 12 * L * dim * T)
    assert conv["headline"]["N"] == 1232 and conv["headline"]["flops_per_token"] == 6 * 1232 + 768 == 8160
    assert conv["torchtitan"]["N"] == 1192 and conv["torchtitan"]["flops_per_token"] == 6 * 1192 + 768 == 7920
    assert conv["flagperf_6n"]["N"] == 1272 and conv["flagperf_6n"]["flops_per_token"] == 6 * 1272 == 7632
    assert set(conv) == {"headline", "torchtitan", "flagperf_6n"}
    assert all("6*N" in c["formula"] for c in conv.values())


def test_attention_term_follows_the_sequence_length():
    counts = llm.count_params(llm.Llama(SMALL, max_seq_len=4))
    short, long = llm.flop_conventions(counts, SMALL, 4), llm.flop_conventions(counts, SMALL, 4096)
    # 12 * 2 * 8 * (4096 - 4) more FLOPs per token in the two conventions with attention; 6N has none
    for name in ("headline", "torchtitan"):
        assert long[name]["flops_per_token"] - short[name]["flops_per_token"] == 12 * 2 * 8 * 4092
    assert long["flagperf_6n"]["flops_per_token"] == short["flagperf_6n"]["flops_per_token"]


def test_1b_at_seq_8192_by_hand():
    with torch.device("meta"):
        counts = llm.count_params(llm.Llama(llm.PRESETS["1b"], 16))
    conv = llm.flop_conventions(counts, llm.PRESETS["1b"], 8192)
    attention = 12 * 16 * 2048 * 8192                                     # 3,221,225,472
    assert attention == 3_221_225_472
    assert conv["headline"]["flops_per_token"] == 7_414_480_896 + attention == 10_635_706_368
    assert conv["torchtitan"]["N"] == 1_235_814_400 - 262_668_288 == 973_146_112
    assert conv["torchtitan"]["flops_per_token"] == 5_838_876_672 + attention == 9_060_102_144
    assert conv["flagperf_6n"]["flops_per_token"] == 6 * 1_235_814_400 == 7_414_886_400


def test_llama_presets_train_at_8192_tokens_and_tiny_stays_short():
    assert llm.PRESET_SEQ_LEN == {"tiny": 64, "1b": 8192, "3b": 8192, "8b": 8192}
    assert set(llm.PRESET_SEQ_LEN) == set(llm.PRESETS)


def test_fp8_is_used_only_on_a_cuda_gpu_of_capability_8_9_with_torchao():
    def no_torchao():
        raise ImportError("No module named 'torchao'")

    assert llm_fp8.plan("auto", "cpu") == (False, None)
    on, why = llm_fp8.plan("fp8", "cpu")
    assert not on and why == "fp8 needs a CUDA GPU of compute capability >= 8.9; this run is on cpu"
    on, why = llm_fp8.plan("fp8", "cuda", (8, 0), "NVIDIA A100-SXM4-80GB", no_torchao)
    assert not on and "compute capability >= 8.9" in why and "A100-SXM4-80GB is 8.0" in why
    on, why = llm_fp8.plan("fp8", "cuda", (9, 0), "NVIDIA H100 80GB HBM3", no_torchao)
    assert not on and why.startswith("torchao.float8 does not import (ImportError: No module named 'torchao')")
    assert llm_fp8.plan("fp8", "cuda", (8, 9), "NVIDIA L40S", lambda: None) == (True, None)
    assert llm_fp8.plan("fp8", "cuda", (10, 0), "NVIDIA B200", lambda: None) == (True, None)
    # emulated casts: any device, still only with torchao
    assert llm_fp8.plan("fp8", "cpu", find_torchao=lambda: None, emulate=True) == (True, None)
    assert llm_fp8.plan("fp8", "cuda", (8, 0), "NVIDIA A100-SXM4-80GB", lambda: None, emulate=True) == (True, None)
    on, why = llm_fp8.plan("fp8", "cpu", find_torchao=no_torchao, emulate=True)
    assert not on and why.startswith("torchao.float8 does not import")


def test_fp8_all_gathers_in_fp8_only_under_fsdp2_with_tensorwise_scales():
    def case(recipe, key):
        return {"fp8_recipe": recipe, "fp8_fsdp_all_gather": key}
    assert llm_fp8.fsdp_all_gather(case("tensorwise", "auto"), "fsdp")
    assert llm_fp8.fsdp_all_gather(case("tensorwise", "true"), "fsdp")
    assert not llm_fp8.fsdp_all_gather(case("tensorwise", "false"), "fsdp")
    assert not llm_fp8.fsdp_all_gather(case("tensorwise", "auto"), "ddp")
    assert not llm_fp8.fsdp_all_gather(case("tensorwise", "auto"), "none")
    assert not llm_fp8.fsdp_all_gather(case("rowwise", "auto"), "fsdp")


def test_fp8_converts_the_block_projections_only():
    m = llm.Llama(llm.LlamaShape(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=48), 8)
    kept = sorted(name for name, mod in m.named_modules() if llm_fp8.keep(mod, name))
    # wk/wv are 32 -> 16 (kept); w1/w3/w2 48 wide (kept); the LM head and the embedding stay out
    assert kept == [f"layers.0.{n}" for n in ("attention.wk", "attention.wo", "attention.wq", "attention.wv",
                                              "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")]
    odd = llm.Llama(llm.LlamaShape(vocab_size=64, dim=24, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=40), 8)
    assert not [name for name, mod in odd.named_modules() if llm_fp8.keep(mod, name)]   # 24, 40: not x16


def row(rank, probe, step=1.0, local=None, median=None):
    return {"rank": rank, "node": 0, "host": "h", "local_rank": rank if local is None else local,
            "gpu": {"uuid": f"GPU-{rank}"}, "steps": stragglers.summary([step, step]),
            "probe": {"n": 3, "median_s": probe if median is None else median, "min_s": probe}}


def test_straggler_rule_names_the_slowest_and_flags_beyond_the_margin():
    v = stragglers.view([row(0, 1.0), row(1, 1.0), row(2, 1.04), row(3, 1.5)])
    # median 1.02, limit 1.02 x 1.05 = 1.071: rank 3 (47% over) is flagged, rank 2 (2% over) is not
    assert v["median_probe_s"] == pytest.approx(1.02) and v["limit_s"] == pytest.approx(1.071)
    assert v["slowest_rank"] == 3 and v["flagged"] == [3]
    assert v["slowest"]["gpu"] == {"uuid": "GPU-3"} and v["slowest"]["local_rank"] == 3
    assert v["slowest"]["vs_median_pct"] == pytest.approx(100 * (1.5 / 1.02 - 1))
    assert "5%" in v["rule"] and "best (minimum)" in v["rule"] and len(v["per_rank"]) == 4
    assert v["judged_by"] == "min" and v["slowest"]["probe_min_s"] == 1.5
    assert "one decoder block" in stragglers.view([row(0, 1.0)], 5.0, "one decoder block")["rule"]


def test_straggler_rule_judges_each_rank_by_its_best_probe():
    # host launch jitter: rank 3's median is 17% over the others', its best pass is not -> not flagged
    jitter = stragglers.view([row(0, 1.0, median=1.02), row(1, 1.0, median=1.02), row(2, 1.01, median=1.03),
                              row(3, 1.03, median=1.19)])
    assert jitter["flagged"] == [] and jitter["median_probe_s"] == pytest.approx(1.005)
    assert jitter["slowest_rank"] == 3 and jitter["slowest"]["probe_median_s"] == 1.19
    assert jitter["slowest"]["vs_median_pct"] == pytest.approx(100 * (1.03 / 1.005 - 1))
    # a slow GPU lengthens every pass, the best one included -> flagged, even with the same median as the others
    slow = stragglers.view([row(0, 1.0, median=1.2), row(1, 1.0, median=1.2), row(2, 1.2, median=1.2)])
    assert slow["flagged"] == [2] and slow["slowest_rank"] == 2


def test_straggler_margin_edges_and_one_rank():
    assert stragglers.view([row(0, 1.0), row(1, 1.2)])["flagged"] == [1]       # median 1.1, limit 1.155
    assert stragglers.view([row(0, 1.0), row(1, 1.1)])["flagged"] == []        # limit 1.1025
    assert stragglers.view([row(0, 1.0), row(1, 1.1)], margin_pct=2)["flagged"] == [1]
    one = stragglers.view([row(0, 9.0)])
    assert one["slowest_rank"] == 0 and one["flagged"] == []                 # one rank: no one to compare with
    none = stragglers.view([row(0, None), row(1, None)])
    assert none["slowest_rank"] is None and none["flagged"] == [] and "no probe" in none["omitted"]


def test_step_time_summary_and_printable():
    s = stragglers.summary([0.3, 0.1, 0.2, 0.4])
    assert s["n"] == 4 and s["median_s"] == pytest.approx(0.25) and s["max_s"] == 0.4
    assert s["p90_s"] == pytest.approx(0.37) and s["mean_s"] == pytest.approx(0.25)
    assert stragglers.summary([])["median_s"] is None
    assert stragglers.printable("node-1") == "node-1"
    assert stragglers.printable("evil\x1b[2Jhost") is None and stragglers.printable("x" * 97) is None


class FakeCtx:
    def __init__(self, local_rank):
        self.local_rank, self.syncs = local_rank, 0

    def sync(self):
        self.syncs += 1


def test_time_probe_counts_untimed_first_pass_and_the_planted_slow_rank(monkeypatch):
    from common import harness

    calls = []
    ctx = FakeCtx(local_rank=0)
    times = stragglers.time_probe(lambda: calls.append(1), ctx, 4)
    assert len(calls) == 5 and len(times) == 4 and ctx.syncs == 10     # one untimed pass, a sync on both sides
    assert stragglers.time_probe(lambda: calls.append(1), ctx, 0) == [] and len(calls) == 5
    # the test hook's slow fault: local rank 1 sleeps (3 - 1) x each pass inside its timing; rank 0 does not
    monkeypatch.setenv("FLAGPERF_TEST_INJECT", "probe:slow")
    monkeypatch.setitem(harness.RUNNING, "benchmark", "probe")
    import time
    slow = stragglers.time_probe(lambda: time.sleep(0.02), FakeCtx(local_rank=1), 2)
    assert all(t >= 3 * 0.02 for t in slow)          # every pass, so also the best one the rule judges by
    fast = stragglers.time_probe(lambda: time.sleep(0.02), FakeCtx(local_rank=0), 2)
    assert all(t >= 0.02 for t in fast) and len(fast) == 2
