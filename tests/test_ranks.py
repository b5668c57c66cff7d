"""What each vLLM / SGLang rank holds of the weights (issue #22 item 6): MLA's q_a / kv_a norms whole, EAGLE-1's
missing first input norm (tests/test_mut_spec.py), the vocabulary padded before its split, KV heads replicated past
TP = kv_heads, and whole experts under expert parallelism. Every figure is hand arithmetic from the bundled
config.json (model_configs/) and the engine source each rule cites (vLLM 0.33.0, SGLang 0.5.23), written here."""
from __future__ import annotations

import json
from math import ceil
from pathlib import Path

import pytest

from kvplan import load_model, plan
from kvplan.dtypes import resolve_dtype
from kvplan.errors import WorkloadError
from kvplan.model.checkpoint import CheckpointWeights, RankRules
from kvplan.model.ranks import (experts_per_rank, heads_share, kv_heads_per_rank, layers_span, padded_vocab,
                                vocab_refusal, vocab_rows_per_rank, vocab_rule)
from kvplan.planning.engines.spec_decode import Speculative, _mtp_bytes, draft_weight_bytes
from kvplan.planning.engines.vllm_mxfp4 import padding_bytes
from kvplan.gpus import resolve_gpu
from kvplan.sources.safetensors import summarise
from kvplan.weights.split import stage_weight_bytes

REPO = Path(__file__).resolve().parents[1]
BF16 = resolve_dtype("bfloat16")


def _fp8(rows: int, cols: int) -> int:
    """An fp8 weight with a float32 scale per 128 x 128 block (DeepSeek-V3's weight_block_size)."""
    return rows * cols + ceil(rows / 128) * ceil(cols / 128) * 4


# ----------------------------------------------------------------------------- the vocabulary, padded to 64

def test_padding_rules_by_engine_and_release():
    # vLLM 0.6-0.33 and SGLang before 0.5.22: a multiple of 64; SGLang 0.5.22+: 64 x TP when 64 does not divide
    assert [vocab_rule("vllm"), vocab_rule("sglang", (0, 5, 21)), vocab_rule("sglang", (0, 5, 22)),
            vocab_rule("hf")] == ["pad64", "pad64", "pad64_tp", ""]
    assert padded_vocab(50_400, 2, "pad64") == 50_432           # gpt-j-6b: 788 x 64
    assert padded_vocab(151_936, 3, "pad64") == 151_936         # Qwen2: 2,374 x 64 already
    assert padded_vocab(151_936, 3, "pad64_tp") == 152_064      # 792 x 192 (151,936 / 192 = 791.33)
    assert padded_vocab(151_936, 4, "pad64_tp") == 151_936      # 4 divides 2,374 x 64: no widening
    assert padded_vocab(50_400, 2, "") == 50_400
    assert vocab_rows_per_rank(50_400, 2, "pad64") == 25_216    # 50,432 / 2, not 25,200
    assert vocab_rows_per_rank(151_936, 3, "pad64_tp") == 50_688
    assert vocab_rows_per_rank(50_401, 2, "") == 25_201         # no engine: ceil(50,401 / 2)


def test_gpt_j_embeddings_and_head_take_vllms_padded_rows():
    # EleutherAI/gpt-j-6b: vocab 50,400, hidden 4,096, an untied lm_head with a bias, 28 layers; priced in bf16.
    # vLLM holds 50,432 rows: 32 more of embed_tokens and the head (4,096 x 2 B each) and of the head's bias (2 B)
    shape = load_model("EleutherAI/gpt-j-6b").require_arch()
    assert (shape.vocab, shape.hidden, shape.tied_embeddings, shape.lm_head_bias) == (50_400, 4096, False, True)
    layers = range(28)
    for tp, rows in ((1, 32), (2, 16)):                       # padded rows a rank beyond vocab / TP
        padded = stage_weight_bytes(shape, BF16, tp, layers, True, True, vocab_rule="pad64")
        plain = stage_weight_bytes(shape, BF16, tp, layers, True, True, vocab_rule="")
        assert padded - plain == rows * 4096 * 2 * 2 + rows * 2   # TP 1: 524,352 B; TP 2: 262,176 B
    assert stage_weight_bytes(shape, BF16, 2, layers, True, True, vocab_rule="pad64") - \
        stage_weight_bytes(shape, BF16, 2, layers, True, True, vocab_rule="") == 262_176


def test_a_tied_head_on_the_last_stage_is_padded_too():
    # gpt2 (tied, vocab 50,257 -> 50,304, hidden 768) on PP 2: the last stage materialises the head again, a
    # ParallelLMHead of 50,304 rows: 47 x 768 x 2 B = 72,192 B more than the unpadded copy
    shape = load_model("openai-community/gpt2").require_arch()
    last = range(6, 12)
    assert stage_weight_bytes(shape, BF16, 1, last, False, True, vocab_rule="pad64") - \
        stage_weight_bytes(shape, BF16, 1, last, False, True, vocab_rule="") == 47 * 768 * 2 == 72_192


def test_gpt2_learned_positions_are_whole_on_every_rank():
    # vLLM 0.33 gpt2.py:210 `self.wpe = nn.Embedding(max_position_embeddings, n_embd)`: 1,024 x 768 x 2 B =
    # 1,572,864 B on each rank; wte (50,257 -> 50,304 rows over TP 2 = 25,152) is vocabulary-parallel
    shape = load_model("openai-community/gpt2").require_arch()
    first = stage_weight_bytes(shape, BF16, 2, range(0), True, False, vocab_rule="pad64")
    assert first == 1024 * 768 * 2 + 25_152 * 768 * 2 == 40_206_336


def _llama_like(tmp_path: Path, **fields) -> object:
    data = json.loads((REPO / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_text())
    folder = tmp_path / "llama-like"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**data, **fields}))
    return load_model(str(folder))


def test_vllm_refuses_a_tp_that_does_not_divide_the_padded_vocabulary(tmp_path):
    # 48 heads and 24 KV heads of 128 (TP 3 divides both) with Qwen2's 151,936-row vocabulary: 151,936 / 3 =
    # 50,645.33, and vLLM's divide() asserts; SGLang 0.5.23 widens the padding to 152,064 and starts
    model = _llama_like(tmp_path, num_attention_heads=48, num_key_value_heads=24, head_dim=128, vocab_size=151_936)
    message = vocab_refusal(model.name, 151_936, 3, "pad64", "vLLM")
    assert message == (f"{model.name}'s vocabulary of 151,936 rows pads to 151,936 (a multiple of 64), which TP 3 does "
                       "not divide: vLLM's VocabParallelEmbedding asserts it does at start-up "
                       "(vocab_parallel_embedding.py, divide()); use a TP that divides it")
    with pytest.raises(WorkloadError, match="which TP 3 does not divide: vLLM's"):
        plan(model, tp=3, max_model_len=4096)
    with pytest.raises(WorkloadError, match="which TP 3 does not divide: SGLang 0.5.21's"):
        plan(model, tp=3, max_model_len=4096, engine="sglang", engine_version="0.5.21")
    sglang = plan(model, tp=3, max_model_len=4096, engine="sglang", engine_version="0.5.23")
    shape = model.require_arch()
    widened = stage_weight_bytes(shape, BF16, 3, range(32), True, True, vocab_rule="pad64_tp")
    plain = stage_weight_bytes(shape, BF16, 3, range(32), True, True, vocab_rule="")
    # embed_tokens and lm_head: 50,688 rows a rank, not ceil(151,936 x 4,096 x 2 / 3) B = 50,645.33 rows
    assert widened - plain == 2 * (50_688 * 4096 * 2 - ceil(151_936 * 4096 * 2 / 3)) == 699_050
    assert sglang.weights_bytes >= widened
    assert vocab_refusal("m", 151_936, 4, "pad64", "vLLM") == ""


# ----------------------------------------------------------------------------- KV heads past TP

def test_kv_heads_are_replicated_past_tp():
    assert [kv_heads_per_rank(8, tp) for tp in (1, 2, 8, 16, 32)] == [8, 4, 1, 1, 1]
    # Llama-3.1-70B's k_proj [1,024, 8,192] bf16 = 16,777,216 B: TP 16 holds one 128-row head, 2,097,152 B
    assert heads_share(16_777_216, 0, 1024, 8, 16) == 2_097_152
    assert heads_share(16_777_216, 0, 1024, 8, 4) == 4_194_304      # 2 heads a rank: a plain quarter


def test_llama_70b_layer_on_tp16_holds_a_whole_kv_head():
    # Llama-3.1-70B: hidden 8,192, 64 heads and 8 KV heads of 128, MLP 28,672, bf16. One layer on a TP 16 rank:
    # q and o 8,192 x 8,192 x 2 B / 16 = 8,388,608 B each; k and v one head of 128 rows each (8 heads, 16 ranks:
    # num_kv_head_replicas 2) 128 x 8,192 x 2 B = 2,097,152 B each, not 1,048,576; gate, up, down 28,672 x 8,192 x
    # 2 B / 16 = 29,360,128 B each; the two norms whole, 2 x 8,192 x 2 B
    shape = load_model("meta-llama/Llama-3.1-70B").require_arch()
    layer = 2 * 8_388_608 + 2 * 2_097_152 + 3 * 29_360_128 + 2 * 8192 * 2
    assert stage_weight_bytes(shape, BF16, 16, range(1), False, False) == layer == 109_084_672
    # TP 8 holds the same one head of k and v: 16,777,216 x 2 + 2,097,152 x 2 + 58,720,256 x 3 + 32,768
    assert stage_weight_bytes(shape, BF16, 8, range(1), False, False) == 213_942_272


# ----------------------------------------------------------------------------- whole experts under EP

def test_experts_per_rank_is_determine_expert_maps_heaviest():
    # vLLM 0.33 determine_expert_map: base E // ep, the first E % ep ranks one more
    assert [experts_per_rank(256, ep) for ep in (8, 16, 24, 32)] == [32, 16, 11, 8]
    assert [experts_per_rank(60, ep) for ep in (4, 8)] == [15, 8]


def test_deepseek_v3_on_ep24_prices_eleven_whole_experts():
    # DeepSeek-V3 on TP 8 x DP 3 with --enable-expert-parallel: 256 experts over 24 ranks, 16 ranks hold 11 and 8
    # hold 10. An expert's gate, up and down are fp8 [2,048, 7,168] / [7,168, 2,048] with 16 x 56 float32 scales:
    # 14,683,648 B each. 58 MoE layers (first_k_dense_replace 3 of 61). Without EP the rule divides each of the
    # three 256-expert tensors by 24 and rounds up: ceil(256 x 14,683,648 / 24) = 156,625,579 B
    shape = load_model("deepseek-ai/DeepSeek-V3").require_arch()
    proj = _fp8(2048, 7168)
    assert proj == 14_683_648
    ep = stage_weight_bytes(shape, shape.dtype, 8, range(61), True, True, moe_ranks=24, expert_parallel=True)
    sharded = stage_weight_bytes(shape, shape.dtype, 8, range(61), True, True, moe_ranks=24)
    assert ep - sharded == 58 * 3 * (11 * proj - ceil(256 * proj / 24)) == 851_651_526   # 58 x 3 x 4,894,549
    # EP 32 divides: the same bytes either way (8 experts a rank)
    assert stage_weight_bytes(shape, shape.dtype, 8, range(61), True, True, moe_ranks=32, expert_parallel=True) == \
        stage_weight_bytes(shape, shape.dtype, 8, range(61), True, True, moe_ranks=32)
    # its MTP layer's experts too: 11 whole ones on the heaviest rank
    assert _mtp_bytes(shape, BF16, 8, 24, True)[0] - _mtp_bytes(shape, BF16, 8, 24)[0] == \
        3 * (11 * proj - ceil(256 * proj / 24)) == 14_683_647


def test_a_vllm_ep_plan_prices_the_heaviest_rank():
    # the plan's weights on TP 8 x DP 3 with EP are the stage above plus the RoPE table and nothing else moved
    shape = load_model("deepseek-ai/DeepSeek-V3").require_arch()
    ep = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, dp=3, expert_parallel=True, max_model_len=8192)
    rank = stage_weight_bytes(shape, shape.dtype, 8, range(61), True, True, moe_ranks=24, expert_parallel=True)
    rope = 163_840 * 64 * 2                              # max_position_embeddings x the 64-wide RoPE key x 2 B
    assert ep.weights_bytes == rank + rope


def test_sglang_refuses_experts_that_do_not_divide_over_ep():
    # Qwen1.5-MoE-A2.7B: 60 routed experts; SGLang's FusedMoE asserts num_experts % ep_size == 0 (0.5.23
    # fused_moe_triton/layer.py), so --ep-size 8 does not start and --ep-size 4 (15 each) does
    name = "Qwen/Qwen1.5-MoE-A2.7B-Chat"
    with pytest.raises(WorkloadError, match="^Qwen/Qwen1.5-MoE-A2.7B-Chat's 60 routed experts do not divide over "
                                            "--ep-size 8, which SGLang's FusedMoE asserts at start-up: use a TP that "
                                            "divides them, or no expert parallelism$"):
        plan(name, engine="sglang", tp=8, expert_parallel=True, max_model_len=4096)
    assert plan(name, engine="sglang", tp=4, expert_parallel=True, max_model_len=4096).expert_parallel_size == 4


def test_mxfp4_padding_follows_the_moe_layout(tmp_path):
    # gpt-oss-20b (32 experts, intermediate = hidden = 2,880, 24 layers) on A100s (Marlin: intermediate to 128,
    # hidden to 256): TP 2 x DP 2 without EP shards each expert over 4 ranks, 720 -> 768 rows; with EP each rank
    # holds 8 whole experts of 2,880 -> 2,944
    shape = load_model("openai/gpt-oss-20b").require_arch()
    gpu = resolve_gpu("A100")
    sharded, line = padding_bytes(shape, gpu, 2, range(24), moe_ranks=4)
    assert "intermediate per rank 720 -> 768" in line
    whole, line = padding_bytes(shape, gpu, 2, range(24), moe_ranks=4, expert_parallel=True)
    assert "intermediate per rank 2,880 -> 2,944" in line

    def layout(experts: int, inter: int, hidden: int) -> int:    # vllm_mxfp4._layout_bytes, written out
        return experts * (2 * inter * (hidden // 2 + hidden // 32 + 2) + hidden * (inter // 2 + inter // 32 + 2))

    assert sharded == 24 * (layout(32, 768, 3072) - layout(32, 720, 2880))
    assert whole == 24 * (layout(8, 2944, 3072) - layout(8, 2880, 2880))


# ----------------------------------------------------------------------------- a norm over one head, whole

# Qwen3-8B (model_configs/Qwen__Qwen3-8B.json, bf16): 36 layers of hidden 4,096, 32 query heads and 8 KV heads of
# 128, intermediate 12,288, vocabulary 151,936 (2,374 x 64: no padding), untied, no biases; each layer's q_norm and
# k_norm are RMSNorm(head_dim), 128 weights each (vLLM 0.33 qwen3.py Qwen3Attention.__init__:153-154, SGLang 0.5.23
# qwen3.py:193-194), whole on every rank like the input / post-attention norms
Q3_ATTN = (4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096) * 2     # q, k, v, o: 83,886,080 B, split over TP
Q3_MLP = 3 * 12288 * 4096 * 2                                   # gate, up, down: 301,989,888 B, split
Q3_NORMS = 2 * 4096 * 2                                         # input / post-attention: 16,384 B, whole
Q3_QK_NORMS = 2 * 128 * 2                                       # q_norm + k_norm: 512 B, whole
Q3_VOCAB = 151936 * 4096 * 2                                    # embed_tokens, lm_head: 1,244,659,712 B each


def test_qwen3_q_norm_and_k_norm_are_whole_on_every_rank():
    shape = load_model("Qwen/Qwen3-8B").require_arch()
    tp2 = 36 * (Q3_ATTN // 2 + Q3_MLP // 2 + Q3_NORMS + Q3_QK_NORMS) + 2 * Q3_VOCAB // 2 + 4096 * 2
    # 36 x 192,954,880 + 1,244,667,904 (embed_tokens and lm_head halved, the final norm whole)
    assert stage_weight_bytes(shape, BF16, 2, range(36), True, True) == tp2 == 8_191_043_584
    # split over TP 2 they were 36 x 256 B = 9,216 B short a rank; the whole model does not move
    whole = 36 * (Q3_ATTN + Q3_MLP + Q3_NORMS + Q3_QK_NORMS) + 2 * Q3_VOCAB + 4096 * 2
    # 36 x 385,892,864 + 2,489,327,616
    assert stage_weight_bytes(shape, BF16, 1, range(36), True, True) == whole == 16_381_470_720
    # drafting with it (a whole draft model, TP 2) it holds them whole too
    draft = load_model("Qwen/Qwen3-8B")
    assert draft_weight_bytes(draft, Speculative("draft_model", 2, draft), BF16, 2, 2)[0] == tp2


def test_qwen35_mtp_layers_q_norm_and_k_norm_are_whole():
    # Qwen3.5-27B (model_configs/Qwen__Qwen3.5-27B.json, bf16, hidden 5,120): its MTP layer is a full-attention
    # layer whose q_norm / k_norm are RMSNorm(head_dim 256) (vLLM 0.33 qwen3_next.py:370-371), whole like its two
    # layer norms and the MTP block's pre_fc_norm_hidden, pre_fc_norm_embedding and final norm (qwen3_5_mtp.py:136);
    # the rest splits evenly over TP 2 (24 heads, 4 KV heads, fc a ColumnParallelLinear), so twice a TP 2 rank less
    # one GPU's is the whole part: (2 + 3) x 5,120 x 2 B + 2 x 256 x 2 B = 52,224 B (51,200 while they split)
    shape = load_model("Qwen/Qwen3.5-27B").require_arch()
    one, two = _mtp_bytes(shape, BF16, 1, 1)[0], _mtp_bytes(shape, BF16, 2, 2)[0]
    assert 2 * two - one == 5 * 5120 * 2 + 2 * 256 * 2 == 52_224      # the sum above


# ----------------------------------------------------------------------------- a checkpoint's headers

def test_checkpoint_rows_split_as_the_config_rule():
    # a DeepSeek-like layer's headers: q_a_layernorm [1,536] and kv_a_layernorm [512] whole; k_proj of 8 KV heads
    # of 128 one head a rank on TP 16; 4 experts of 1,000 B over EP 3: 2 whole ones a rank; a 1,000-row
    # embedding of 10 B a row padded to 1,024 rows over TP 2
    tensors = [
        ("model.layers.0.self_attn.q_a_layernorm.weight", "BF16", (1536,), 3072),
        ("model.layers.0.self_attn.kv_a_layernorm.weight", "BF16", (512,), 1024),
        ("model.layers.0.self_attn.k_proj.weight", "BF16", (1024, 8), 16_384),
        *((f"model.layers.0.mlp.experts.{e}.down_proj.weight", "BF16", (10, 50), 1000) for e in range(4)),
        ("model.embed_tokens.weight", "BF16", (1000, 5), 10_000),
    ]
    rows = summarise(tensors, 1, hidden=7168)
    norms = [r for r in rows if r.attention and not r.kv]
    assert [(r.replicated, r.bytes) for r in norms] == [(True, 4096)]     # 3,072 + 1,024 B, one whole row
    assert [r.bytes for r in rows if r.kv] == [16_384]                   # the k_proj header's 16,384 B
    weights = CheckpointWeights("test", rows, 1)
    rules = RankRules(vocab=1000, vocab_rule="pad64", kv_heads=8, experts=(4,), expert_parallel=True)
    got = weights.stage_bytes(BF16, 16, range(1), True, True, False, moe_ranks=3, ranks=rules)
    # 4,096 whole + 16,384 / 8 (one head of 8) + 2 x 1,000 (ceil(4 / 3) experts) + 1,024 / 16 x 10 B (64 rows)
    assert got == 4096 + 2048 + 2000 + 640
    plain = weights.stage_bytes(BF16, 16, range(1), True, True, False, moe_ranks=3)
    assert plain == 4096 + ceil(16_384 / 16) + ceil(4000 / 3) + ceil(10_000 / 16)


def test_a_record_row_reads_with_or_without_the_kv_flag():
    from kvplan.sources.library import from_record, record_json

    weights = CheckpointWeights("test", summarise([("model.layers.0.self_attn.k_proj.weight", "BF16", (4, 4), 32)],
                                                  1, hidden=4), 1)
    record = record_json(weights)
    assert record["rows"] == [["language_model", 0, False, "BF16", True, 1, 32, False, True, True]]
    assert from_record(record, "r").rows == weights.rows
    old = {**record, "rows": [row[:9] for row in record["rows"]]}     # a record written before the kv flag
    assert from_record(old, "r").rows[0].kv is False


def test_a_stage_span_is_clamped_to_the_model_and_strides_sum_layer_by_layer():
    """Three layers of 5, 7 and 8 B: prefix (0, 5, 12, 20). Layers past the model are dropped (range(1, 9): 7 + 8),
    a reversed range holds none, a negative start clamps to layer 0, and a stride takes layers 0 and 2 (5 + 8)."""
    prefix = (0, 5, 12, 20)
    assert layers_span(prefix, range(1, 9)) == 15
    assert layers_span(prefix, range(3, 1)) == 0 and layers_span(prefix, range(2, 2)) == 0
    assert layers_span(prefix, range(-4, 1)) == 5
    assert layers_span(prefix, range(0, 3, 2)) == 13 and layers_span(prefix, range(-2, 9, 2)) == 13
    assert layers_span(prefix, range(9, 20)) == 0
