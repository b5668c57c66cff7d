"""Tests that kill the mutants tools/mutation.py left alive in kvplan/planning/engines/sglang.py's `_extra_lines`,
`_formula`, `_stages` and `_division` (#26): the memory SGLang holds before it sizes the pool (drafts, LoRA slots,
the image cache), each pipeline stage's weights, and the printed formula, pinned word for word with its numbers
worked by hand here.

Cards (kvplan/data/gpus.json): H100-SXM runtime 85,029,158,912 B (79.19 GiB), H200 150,109,945,856 B. Every plan
below that pins a formula passes mem_fraction_static 0.8 (gpu_memory_utilization), so the budget is plain
arithmetic (sglang_pool.budget_bytes): before = card - PRELOAD int(0.38 GiB) = 408,021,893 B (389.12 MiB);
rest = int(before - weights - LOAD_EXTRA int(0.15 GiB) = 161,061,273 B (153.60 MiB) - held - before x 0.2).
On an H100: before = 85,029,158,912 - 408,021,893 = 84,621,137,019 B, before x 0.2 = 16,924,227,403.8 B.
Sizes are binary (kvplan.units.fmt_bytes: two decimals).

Llama-3.1-8B in bf16: 8,030,261,248 parameters x 2 B = 16,060,522,496 B + the RoPE table 131,072 x 128 x 2 B =
33,554,432 B = 16,094,076,928 B (14.99 GiB); a layer is q 4,096^2 + k, v 1,024 x 4,096 each + o 4,096^2 + gate,
up, down 3 x 14,336 x 4,096 + 2 norms x 4,096 = 218,112,000 parameters = 436,224,000 B; embed_tokens and lm_head
128,256 x 4,096 x 2 B = 1,050,673,152 B each; its KV 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B a token.
"""
from __future__ import annotations

import json
import re

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.planner import plan
from kvplan.sources.library import library_dir

LLAMA = "meta-llama/Llama-3.1-8B"
EAGLE = {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
MTP = {"method": "mtp", "num_speculative_tokens": 1}
HEAD = ("mem_fraction_static = 0.800; KV = (free before loading 79.19 GiB - context 389.12 MiB) x 0.800 - weights ")


def _sglang(name, **kwargs):
    return plan(name, engine="sglang", **kwargs)


# ----------------------------------------------------------------------------- _formula / _division: the text


def test_a_plain_plan_prints_exactly_two_lines():
    """Llama-3.1-8B on one H100 at 0.8: nothing held before the pool, one stage, page 1, so no stage name, no
    "held before", no page rounding. rest = int(84,621,137,019 - 16,094,076,928 - 161,061,273 - 16,924,227,403.8)
    = int(51,441,771,414.2) = 51,441,771,414 B (47.91 GiB); 51,441,771,414 // 131,072 = 392,469 tokens
    (392,469 x 131,072 = 51,441,696,768, 74,646 B left)."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, gpu_memory_utilization=0.8)
    assert p.extra == {}
    assert p.formula == [
        HEAD + "14.99 GiB - load extras 153.60 MiB = 47.91 GiB (51,441,771,414 B)",
        "max_total_num_tokens = 51,441,771,414 // 131,072 = 392,469",   # the 32 layers' 131,072 B a token
    ]


def test_two_stages_name_the_most_loaded_one():
    """Llama-3.1-8B at PP 2: SGLang's Llama builds the lm_head on every stage, so stage 0 holds 16 layers
    6,979,584,000 + embed_tokens 1,050,673,152 + lm_head 1,050,673,152 + RoPE 33,554,432 = 9,114,484,736 B
    (8.49 GiB) and stage 1 16 layers + lm_head + final norm 8,192 + RoPE = 8,063,819,776 B: stage 0 sets the
    budget. rest = int(84,621,137,019 - 9,114,484,736 - 161,061,273 - 16,924,227,403.8) = 58,421,363,606 B
    (54.41 GiB); each stage's 16 layers cache 65,536 B a token (the same quotient, printed once):
    58,421,363,606 // 65,536 = 891,439."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, gpu_memory_utilization=0.8, pp=2)
    assert [s.weights_bytes for s in p.stages] == [9_114_484_736, 8_063_819_776]   # the sums above
    assert p.formula == [
        HEAD + "8.49 GiB (stage 0, the most loaded) - load extras 153.60 MiB = 54.41 GiB (58,421,363,606 B)",
        "max_total_num_tokens = 58,421,363,606 // 65,536 = 891,439",   # 16 layers x 4,096 B
    ]


def test_two_things_held_before_are_listed_in_order():
    """Llama-3.1-8B with an EAGLE-3 head and 8 LoRA slots of rank 16 at 0.8 (0.5.23). The head (one layer at TP 1):
    its layer 436,224,000 + fc 3 x 4,096 x 4,096 x 2 = 100,663,296 + the second q/k/v half (4,096 + 2,048) x
    4,096 x 2 = 50,331,648 + lm_head 32,000 x 4,096 x 2 = 262,144,000 + d2t 32,000 x 8 = 256,000 + 2 norms
    16,384 = 849,635,328 B (810.28 MiB). The LoRA pool (srt/lora/mem_pool.py, no embeddings): a layer's slot
    16 x (4 x 4,096 + 2 x 4,096 + 2 x 1,024) + 16 x (3 x 4,096 + 3 x 14,336) = 425,984 + 884,736 = 1,310,720
    elements, x 32 layers x 8 slots x 2 B = 671,088,640 B (640.00 MiB). Held 1,520,723,968 B (1.42 GiB); rest =
    int(84,621,137,019 - 16,094,076,928 - 161,061,273 - 1,520,723,968 - 16,924,227,403.8) = 49,921,047,446 B;
    the cell 131,072 + the head's layer 8 x 256 x 2 = 4,096 = 135,168 B; 49,921,047,446 // 135,168 = 369,325."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=1024, gpu_memory_utilization=0.8, speculative=EAGLE,
                lora={"max_lora_rank": 16})
    assert p.extra == {"draft model weights": 849_635_328, "LoRA memory pool": 671_088_640}   # the sums above
    assert p.formula == [
        HEAD + "14.99 GiB - load extras 153.60 MiB - 1.42 GiB held before = 46.49 GiB (49,921,047,446 B)",
        "taken before the pool is sized: draft model weights 810.28 MiB, LoRA memory pool 640.00 MiB",
        "max_total_num_tokens = 49,921,047,446 // 135,168 = 369,325",   # the cell worked above
    ]


def test_the_mamba_state_pool_is_not_held_before():
    """Qwen3.5-27B on an H100 at 0.8 (0.5.23): a multimodal model holds SGLang's 100 MiB image cache back
    (SGLANG_VLM_CACHE_SIZE_MB, 0.5.18+) before the budget; its Mamba state pool is carved out of the budget after
    (its own formula line), never "held before". weights 54,747,011,552 B (50.99 GiB, the plan's); rest =
    int(84,621,137,019 - 54,747,011,552 - 161,061,273 - 104,857,600 - 16,924,227,403.8) = 12,683,979,190 B."""
    p = _sglang("Qwen/Qwen3.5-27B", gpu="H100", max_model_len=8192, gpu_memory_utilization=0.8)
    assert p.weights_bytes == 54_747_011_552   # the input above (50.99 GiB)
    assert p.extra["image cache (SGLANG_VLM_CACHE_SIZE_MB)"] == 100 * 2**20
    assert "Mamba state pool" in p.extra
    assert p.formula[:2] == [
        HEAD + "50.99 GiB - load extras 153.60 MiB - 100.00 MiB held before = 11.81 GiB (12,683,979,190 B)",
        "taken before the pool is sized: image cache (SGLANG_VLM_CACHE_SIZE_MB) 100.00 MiB",
    ]
    assert p.formula[2].startswith("Mamba state = ") and len(p.formula) == 4


# gpt-oss-20b: 24 layers, 12 sliding and 12 full, 8 KV heads x 64 x 2 (K, V) x 2 B = 2,048 B a layer a token:
# full 12 x 2,048 = 24,576 B, SWA 24,576 B, the cell 49,152 B; SGLang divides by full + 0.8 x SWA = 44,236.8 B.
# weights 13,791,313,024 B (12.84 GiB, the plan's: MXFP4 experts); rest = int(84,621,137,019 - 13,791,313,024 -
# 161,061,273 - 16,924,227,403.8) = 53,744,535,318 B (50.05 GiB)
GPT_OSS_HEAD = HEAD + "12.84 GiB - load extras 153.60 MiB = 50.05 GiB (53,744,535,318 B)"


@pytest.mark.parametrize("version, division, tokens, swa", [
    # 0.5.11+: one division, 53,744,535,318 / 44,236.8 = 1,214,928.4 -> 1,214,928; int(1,214,928 x 0.8) = 971,942
    ("0.5.11", "53,744,535,318 // 44,236.8", "1,214,928", "971,942"),
    ("0.5.23", "53,744,535,318 // 44,236.8", "1,214,928", "971,942"),
    # before 0.5.11 the two-step split: 53,744,535,318 // 49,152 = 1,093,435 cells, x 49,152 = 53,744,517,120,
    # / 44,236.8 = 1,214,927.99 -> 1,214,927; int(1,214,927 x 0.8) = 971,941
    ("0.5.10", "int(53,744,535,318 // 49,152 x 49,152 / 44,236.8)", "1,214,927", "971,941"),
], ids=["0.5.11", "0.5.23", "0.5.10"])
def test_an_swa_hybrid_prints_its_division_and_swa_pool(version, division, tokens, swa):
    p = _sglang("openai/gpt-oss-20b", gpu="H100", max_model_len=8192, gpu_memory_utilization=0.8,
                engine_version=version)
    assert p.weights_bytes == 13_791_313_024   # the input above (12.84 GiB)
    assert p.formula == [
        GPT_OSS_HEAD,
        f"max_total_num_tokens = {division} = {tokens}",
        f"SWA pool = int({tokens} x 0.8) = {swa} tokens of the sliding layers",
    ]


# ----------------------------------------------------------------------------- _stages: each stage's weights


def _qwen25_15b_tp6() -> int:
    """Qwen2.5-1.5B (bf16, 28 layers, hidden 1,536, 12 heads, 2 KV heads of 128, intermediate 8,960, tied
    embeddings, vocab 151,936) on one TP 6 rank, SGLang 0.5.23: a layer q 1,536^2 x 2 / 6 = 786,432 + its bias
    512 + k and v one KV head each (2 heads over 6 ranks, replicated: 128 of 256 rows) 393,216 + 256 twice + o
    786,432 + gate, up, down 1,536 x 8,960 x 2 / 6 = 4,587,520 each + 2 norms 6,144 = 16,129,024 B, x 28 =
    451,612,672; the final norm 3,072; embed_tokens: 151,936 rows pad to 64 (2,374 x 64), which TP 6 does not
    divide, so 0.5.22+ pads to 64 x 6 = 384: ceil(151,936 / 384) = 396 x 384 = 152,064 rows, 25,344 a rank x
    3,072 B = 77,856,768 B (0.5.1-0.5.21's 64-padding would give 25,323 rows, no padding ceil(/6) 25,322.67)."""
    return 451_612_672 + 3_072 + 25_344 * 3_072   # the layers, final norm and embeddings above


def test_the_stage_weights_pad_the_vocabulary_as_the_release_does():
    """The target's weights take SGLang 0.5.23's vocabulary rule (kvplan.model.ranks.vocab_rule "pad64_tp"):
    529,472,512 B + the RoPE table 131,072 x 128 x 2 B = 33,554,432 = 563,026,944 B a rank."""
    p = _sglang("Qwen/Qwen2.5-1.5B", gpu="H100", max_model_len=8192, tp=6)
    assert _qwen25_15b_tp6() == 529_472_512   # the sum in _qwen25_15b_tp6's docstring
    assert p.weights_bytes == _qwen25_15b_tp6() + 33_554_432   # the RoPE table, 131,072 x 128 x 2 B
    assert p.stages[0].weights_bytes == p.weights_bytes


def test_only_the_first_stage_holds_the_vision_tower():
    """Qwen2.5-VL-7B at PP 2 (not Qwen3.5, whose tower SGLang builds on every rank): the tower (676,550,144
    parameters, transformers 5.24 model.visual, x 2 B = 1,353,100,288 B) and embed_tokens (152,064 x 3,584 x 2 B =
    1,089,994,752 B) sit on stage 0, the final norm (3,584 x 2 B = 7,168) on stage 1; the 14 + 14 layers and the
    RoPE tables are alike, so stage 0 - stage 1 = 1,353,100,288 + 1,089,994,752 - 7,168 = 2,443,087,872 B."""
    p = _sglang("Qwen/Qwen2.5-VL-7B-Instruct", gpu="H100", max_model_len=8192, pp=2)
    first, second = (s.weights_bytes for s in p.stages)
    assert first - second == 2_443_087_872   # the difference worked above
    assert p.weights_bytes == first


# ----------------------------------------------------------------------------- _extra_lines: what is held before


def test_a_draft_model_pads_its_vocabulary_as_the_target_does():
    """Qwen2.5-1.5B drafting for itself (method draft_model) at TP 6 on 0.5.23: every weight of the draft, split as
    the target's (draft_parallel.py TARGET_LAYOUT), its vocabulary padded by 0.5.23's rule: 529,472,512 B (the
    target's sum without the RoPE table, _qwen25_15b_tp6), held before the budget from 0.5.14."""
    p = _sglang("Qwen/Qwen2.5-1.5B", gpu="H100", max_model_len=1024, tp=6,
                speculative={"method": "draft_model", "num_speculative_tokens": 3, "model": "Qwen/Qwen2.5-1.5B"})
    assert p.extra == {"draft model weights": _qwen25_15b_tp6()}


def test_a_moe_draft_under_expert_parallelism_needs_its_experts_whole_and_even():
    """A draft model builds at the target's --ep-size (0.5.23 speculative/draft_parallel.py TARGET_LAYOUT), and
    FusedMoE asserts `num_experts % ep_size == 0` at start-up (layers/moe/fused_moe_triton/layer.py): Qwen1.5-MoE's
    60 experts over EP 8 (60 % 8 = 4) are refused, where Qwen3-30B-A3B's 128 pass. Over EP 4 they are 15 whole
    experts a rank, the bytes of 60 / 4 split ones: the draft weighs the same with and without EP."""
    draft = {"method": "draft_model", "num_speculative_tokens": 3, "model": "Qwen/Qwen1.5-MoE-A2.7B-Chat"}
    with pytest.raises(WorkloadError, match=re.escape(
            "the draft Qwen/Qwen1.5-MoE-A2.7B-Chat's 60 routed experts do not divide over --ep-size 8, which SGLang's "
            "FusedMoE asserts at start-up as for the target: use a TP that divides them, or no expert parallelism")):
        _sglang("Qwen/Qwen3-30B-A3B", gpu="H100", max_model_len=8192, tp=8, expert_parallel=True, speculative=draft)
    ep = _sglang("Qwen/Qwen3-30B-A3B", gpu="H100", max_model_len=8192, tp=4, expert_parallel=True, speculative=draft)
    plain = _sglang("Qwen/Qwen3-30B-A3B", gpu="H100", max_model_len=8192, tp=4, speculative=draft)
    assert ep.extra["draft model weights"] == plain.extra["draft model weights"]


def _deepseek(vocab: int):
    data = json.loads((library_dir() / "deepseek-ai__DeepSeek-V3.json").read_text())
    return load_model({**data, "vocab_size": vocab}, name=f"deepseek-v3-vocab-{vocab}")


@pytest.mark.parametrize("vocab, rows", [
    (129_280, 16_160),   # DeepSeek-V3's own 129,280 rows (2,020 x 64) / TP 8
    # one row more pads to 129,344 (2,021 x 64), which TP 8 divides: 16,168 rows a rank (unpadded, 16,160.125)
    (129_281, 16_168),
])
def test_mtp_holds_its_own_embed_tokens_and_shared_head_before_the_budget(vocab, rows):
    """SGLang's NEXTN drafter (0.5.14+) loads its own embed_tokens and shared_head, [vocab, 7,168] bf16, before the
    budget and frees them after (it then shares the target's): two vocabulary-split copies, 2 x rows x 7,168 x 2 B,
    on top of the MTP layer vLLM 0.33 also holds (deepseek_mtp.py shares the two from the start). TP 8 on an
    H200."""
    model = _deepseek(vocab)
    sglang = _sglang(model, gpu="H200", max_model_len=8192, tp=8, speculative=MTP)
    vllm = plan(model, engine="vllm", gpu="H200", max_model_len=8192, tp=8, speculative=MTP)
    assert list(sglang.extra) == ["draft model weights"]
    assert sglang.extra["draft model weights"] - vllm.extra["draft model weights"] == 2 * rows * 7_168 * 2


@pytest.mark.parametrize("expert_parallel, per_layer", [
    # experts over --ep-size 4: 128 / 4 = 32 whole experts of 3 x 2,048 + 3 x 768 = 8,448 elements a rank
    (True, 16 * (4 * 2_048 + 2 * 4_096 // 4 + 2 * 128) + 16 * 32 * (3 * 2_048 + 3 * 768)),
    # without it all 128 experts, their 768 rows split 4 ways: 3 x 2,048 + 3 x 192 = 6,720 elements
    (False, 16 * (4 * 2_048 + 2 * 4_096 // 4 + 2 * 128) + 16 * 128 * (3 * 2_048 + 3 * 192)),
], ids=["ep", "no-ep"])
def test_the_lora_pool_of_a_moe_model_follows_its_experts(expert_parallel, per_layer):
    """Qwen3-30B-A3B (48 layers, hidden 2,048, 32 heads x 128 = 4,096 query rows, 4 KV heads, 128 experts of
    768) at TP 4 with 8 LoRA slots of rank 16 (SGLang's --max-loras-per-batch default), bf16: attention's slot
    16 x (4 x 2,048 + 2 x 4,096 / 4 + 2 x 1 head x 128) = 167,936 elements a layer, the experts' as above;
    x 48 layers x 8 slots x 2 B. EP: 4,493,312 x 768 = 3,450,863,616 B; without: 13,930,496 x 768 =
    10,698,620,928 B."""
    p = _sglang("Qwen/Qwen3-30B-A3B", gpu="H100", max_model_len=8192, tp=4, expert_parallel=expert_parallel,
                lora={"max_lora_rank": 16})
    assert p.extra == {"LoRA memory pool": per_layer * 48 * 8 * 2}   # 48 layers x 8 slots x 2 B
    assert p.extra["LoRA memory pool"] == (3_450_863_616 if expert_parallel else 10_698_620_928)   # worked above


def test_a_moe_draft_without_expert_parallelism_is_split_and_planned():
    """Without --ep-size every expert is TP-sharded, so FusedMoE's divisibility assert does not apply: Qwen1.5-MoE's
    60 experts drafting over TP 8 plan (the refusal above is for expert parallelism alone)."""
    draft = {"method": "draft_model", "num_speculative_tokens": 3, "model": "Qwen/Qwen1.5-MoE-A2.7B-Chat"}
    p = _sglang("Qwen/Qwen3-30B-A3B", gpu="H100", max_model_len=8192, tp=8, speculative=draft)
    assert list(p.extra) == ["draft model weights"] and p.fits and p.expert_parallel_size == 1


def test_a_drafters_sliding_layers_join_the_swa_pool_where_it_is_on():
    """SGLang 0.5.23 keeps gpt-oss's SWA pool with drafting on an H100: gpt-oss-120b's 36 layers (18 sliding) and the
    gpt-oss-20b draft's 24 (12 sliding) give 30 full and 30 sliding layers, each 4 KV heads a rank (8 / TP 2) x 64 x
    K,V x 2 B = 1,024 B a token: the cell is 30 x 1,024 + 0.8 x 30 x 1,024 = 55,296 B, and the 32,182,799,465 B
    budget (kvplan's at fraction 0.85, the draft's weights taken before) holds 582,009 tokens."""
    p = _sglang("openai/gpt-oss-120b", gpu="H100", tp=2, max_model_len=8192, gpu_memory_utilization=0.85,
                speculative={"method": "draft_model", "num_speculative_tokens": 3, "model": "openai/gpt-oss-20b"})
    assert sorted(x.kind for x in p.kv_layers) == ["full"] * 30 + ["sliding"] * 30   # 18 + 12 of each, worked above
    assert p.formula[2] == "max_total_num_tokens = 32,182,799,465 // 55,296.0 = 582,009"          # worked above
    assert p.formula[3] == "SWA pool = int(582,009 x 0.8) = 465,607 tokens of the sliding layers"  # 465,607.2


def test_a_hybrid_draft_model_is_refused():
    """Qwen3-Next-80B-A3B as a whole draft model: its 12 full-attention layers joined the cell and its 36 Gated
    DeltaNet layers came out as 0-byte entries, their state in no pool (cell_specs leaves Mamba layers out; only the
    target's state is pooled): refused, naming the state."""
    with pytest.raises(WorkloadError, match=re.escape(
            "Qwen/Qwen3-Next-80B-A3B-Instruct holds gated_deltanet state besides its KV, which kvplan does not size "
            "for an SGLang draft model: use a draft of attention layers")):
        _sglang("Qwen/Qwen3-32B", gpu="H100", max_model_len=1024,   # both vocabularies 151,936
                speculative={"method": "draft_model", "num_speculative_tokens": 3,
                             "model": "Qwen/Qwen3-Next-80B-A3B-Instruct"})
