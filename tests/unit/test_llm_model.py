"""The llm benchmark's model: parameter counts and the FLOP formula against hand computations."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "llm"))
import model as llm  # noqa: E402


def test_flops_of_a_small_config_match_a_hand_count():
    s = llm.LlamaShape(vocab_size=10, dim=8, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=16)
    m = llm.Llama(s, max_seq_len=4)
    c = llm.count_params(m)
    # per layer: wq 8x8=64, wk 8x4=32, wv 32, wo 64, w1/w3/w2 8x16=128 each: 576; two layers 1152
    assert c["block_matmul"] == 1152
    assert c["lm_head"] == 80 and c["matmul"] == 1152 + 80          # the tied head counts as a matmul
    # parameters once each: embedding 80 (= the tied head) + blocks 1152 + norms 2x2x8 + final 8
    assert c["total"] == 80 + 1152 + 32 + 8
    assert c["titan"] == c["total"] - 80
    # 6 N + 12 L d T = 6*1232 + 12*2*8*4
    assert llm.flops_per_token(c["matmul"], s, 4) == 7392 + 768


def test_untied_head_counts_separately_and_to_empty_keeps_the_tie():
    s = llm.LlamaShape(vocab_size=10, dim=8, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=16, tie_embeddings=False)
    c = llm.count_params(llm.Llama(s, 4))
    assert c["total"] == 80 + 80 + (4 * 64 + 3 * 128) + 16 + 8 and c["titan"] == c["total"] - 80
    tied = llm.LlamaShape(vocab_size=10, dim=8, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=16)
    with torch.device("meta"):
        m = llm.Llama(tied, 4)
    m.to_empty(device="cpu")
    m.tie()
    assert m.output.weight is m.tok_embeddings.weight


def test_preset_shapes_match_the_published_parameter_counts():
    with torch.device("meta"):
        one = llm.count_params(llm.Llama(llm.PRESETS["1b"], 16))
        eight = llm.count_params(llm.Llama(llm.PRESETS["8b"], 16))
    assert one["total"] == 1_235_814_400             # Llama-3.2 1B, tied
    assert one["matmul"] == 1_235_746_816
    assert eight["total"] == 8_030_261_248           # Llama-3 8B


def test_forward_is_causal_and_gqa_matches_repeated_heads():
    torch.manual_seed(0)
    s = llm.LlamaShape(vocab_size=32, dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32)
    m = llm.Llama(s, 8)
    x = torch.randint(32, (1, 8))
    h1 = m.hidden(x)
    x2 = x.clone()
    x2[0, 5:] = (x2[0, 5:] + 1) % 32
    h2 = m.hidden(x2)
    assert torch.allclose(h1[0, :5], h2[0, :5], atol=1e-6)          # later tokens do not leak backwards
    assert not torch.allclose(h1[0, 5:], h2[0, 5:])
