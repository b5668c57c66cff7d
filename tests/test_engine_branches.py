"""Branches a one-line bug could break with every other test green (#26 item 4), each pinned by hand arithmetic
whose inputs are written here: LoRA slots on a MoE model, MXFP4 padding of experts a checkpoint leaves unquantized,
the tied head the last pipeline stage holds again; and the drafting and LoRA refusals of both engines, by message."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvplan
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.lora import LoraSettings, lora_bytes
from kvplan.planning.engines.lora import check as check_lora
from kvplan.planning.engines.vllm_mxfp4 import padding_bytes
from kvplan.planning.planner import plan

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- LoRA slots on MoE

# Qwen3-30B-A3B: 48 layers, hidden 2,048, 32 query heads and 4 KV heads of 128, 128 experts of intermediate 768,
# vocabulary 151,936 (model_configs/Qwen__Qwen3-30B-A3B.json). vLLM 0.33 lora/layers/fused_moe.py
# `create_lora_weights`: w13 A 2 x [E, R, H], w13 B 2 x [E, I, R], w2 A [E, R, I], w2 B [E, H, R] per adapter:
# E x R x (3 H + 3 I); attention R x (4 H + 2 q + 2 kv) (column A whole, B split; row A split, B whole).
R, H, Q, KV, E, I, V, LAYERS = 16, 2048, 32 * 128, 4 * 128, 128, 768, 151_936, 48


def _qwen_moe():
    return kvplan.load_model("Qwen/Qwen3-30B-A3B").require_arch()


def test_lora_slots_on_moe_count_every_expert_of_the_rank():
    attention = R * (4 * H + 2 * Q + 2 * KV)                  # 278,528
    experts = R * E * (3 * H + 3 * I)                         # 17,301,504
    embed = 2 * R * (V + H)                                   # embed_tokens A + B, lm_head A + B
    total, formula = lora_bytes(_qwen_moe(), 2, tp=1, moe_ranks=1, lora=LoraSettings(1, R))
    assert total == (LAYERS * (attention + experts) + embed) * 2 == 1_697_538_048
    assert "1 adapters" in formula and "rank 16" in formula


def test_lora_slots_under_tp_split_the_expert_intermediate():
    # TP 4, no EP: every rank holds all 128 experts at I / 4 = 192, attention B over 4 ranks (1 KV head of 128)
    attention = R * (4 * H + 2 * Q // 4 + 2 * KV // 4)
    experts = R * E * (3 * H + 3 * I // 4)
    embed = 2 * R * (V + H)
    total, _ = lora_bytes(_qwen_moe(), 2, tp=4, moe_ranks=4, lora=LoraSettings(1, R))
    assert total == (LAYERS * (attention + experts) + embed) * 2 and isinstance(total, int)


def test_lora_slots_under_tp_and_ep_keep_the_expert_whole():
    # TP 2 x DP 2 with EP: 4 MoE ranks of 32 whole experts (intermediate 768, not 768 / 2); attention split by 2
    attention = R * (4 * H + 2 * Q // 2 + 2 * KV // 2)
    experts = R * (E // 4) * (3 * H + 3 * I)
    total, _ = lora_bytes(_qwen_moe(), 2, tp=2, moe_ranks=4, lora=LoraSettings(1, R), expert_parallel=True)
    assert total == (LAYERS * (attention + experts) + 2 * R * (V + H)) * 2 and isinstance(total, int)


def test_lora_slots_under_ep_hold_a_share_of_whole_experts():
    # TP 1 x DP 2 with expert parallelism: 2 MoE ranks, 64 whole experts each (intermediate 768 unsplit)
    attention = R * (4 * H + 2 * Q + 2 * KV)
    experts = R * (E // 2) * (3 * H + 3 * I)
    embed = 2 * R * (V + H)
    total, _ = lora_bytes(_qwen_moe(), 2, tp=1, moe_ranks=2, lora=LoraSettings(1, R), expert_parallel=True)
    assert total == (LAYERS * (attention + experts) + embed) * 2


def test_lora_slots_under_dp_without_ep_split_every_expert_over_the_moe_ranks():
    # TP 1 x DP 2 without expert parallelism: FusedMoE flattens TP x DP into its TP (vLLM 0.33 lora/layers/
    # fused_moe.py reads moe_config.local_num_experts, all 128, and intermediate_size_per_partition, 768 / 2 = 384);
    # it was priced as EP (64 whole experts) whenever the MoE ranks outnumbered TP
    attention = R * (4 * H + 2 * Q + 2 * KV)
    experts = R * E * (3 * H + 3 * I // 2)
    embed = 2 * R * (V + H)
    total, _ = lora_bytes(_qwen_moe(), 2, tp=1, moe_ranks=2, lora=LoraSettings(1, R))
    assert total == (LAYERS * (attention + experts) + embed) * 2


# ----------------------------------------------------------------------------- MXFP4 padding, experts skipped

# gpt-oss-20b on an A100 (vLLM's Marlin MoE kernel: intermediate 2,880 -> 2,944, hidden 2,880 -> 3,072), 32
# experts a layer: 32 x (2 x 2,944 x (1,536 + 96 + 2) + 3,072 x (1,472 + 92 + 2)) - the unpadded 32 x (2 x 2,880 x
# (1,440 + 90 + 2) + 2,880 x (1,440 + 90 + 2)) = 38,248,448 B a layer (vllm_mxfp4.py; the 13.72 GiB v0.19 log).
PER_LAYER = 32 * (2 * 2944 * (1536 + 96 + 2) + 3072 * (1472 + 92 + 2)) - 32 * 3 * 2880 * (1440 + 90 + 2)


def _gpt_oss(tmp_path: Path, skipped: list[str]):
    config = json.loads((REPO / "model_configs" / "openai__gpt-oss-20b.json").read_text())
    config["quantization_config"]["modules_to_not_convert"] += skipped
    (tmp_path / "config.json").write_text(json.dumps(config))
    return kvplan.load_model(tmp_path / "config.json").require_arch()


def test_mxfp4_padding_per_layer_by_hand(tmp_path):
    # the module comment above PER_LAYER works 38,248,448 B a layer by hand
    assert PER_LAYER == 38_248_448
    extra, line = padding_bytes(_gpt_oss(tmp_path, []), resolve_gpu("A100-80GB"), 1, range(24))
    assert extra == 24 * PER_LAYER and isinstance(extra, int) and "2,880 -> 2,944" in line and "2,880 -> 3,072" in line


def test_mxfp4_padding_leaves_out_a_layer_whose_experts_stay_bf16(tmp_path):
    # a checkpoint that keeps layer 3's experts unquantized: vLLM builds them as an unquantized FusedMoE, unpadded
    shape = _gpt_oss(tmp_path, ["model.layers.3.mlp.experts"])
    assert padding_bytes(shape, resolve_gpu("A100-80GB"), 1, range(24))[0] == 23 * PER_LAYER
    assert padding_bytes(shape, resolve_gpu("A100-80GB"), 1, range(3, 4)) == (0, "")


def test_mxfp4_padding_on_blackwell_follows_flashinfer(tmp_path):
    # B200 (SM 10.0): FlashInfer's MXFP4 MoE aligns the intermediate to 256 as well: 2,880 -> 3,072 both ways
    padded = 32 * 3 * 3072 * (1536 + 96 + 2)
    unpadded = 32 * 3 * 2880 * (1440 + 90 + 2)
    extra, line = padding_bytes(_gpt_oss(tmp_path, []), resolve_gpu("B200"), 1, range(24))
    assert extra == 24 * (padded - unpadded) and isinstance(extra, int)
    assert "FlashInfer MXFP4 MoE (SM100)" in line and "2,880 -> 3,072, hidden 2,880 -> 3,072" in line
    h100, _ = padding_bytes(_gpt_oss(tmp_path, []), resolve_gpu("H100"), 2, range(24))
    # H100 at TP 2: Marlin, intermediate 1,440 -> 1,536 per rank, hidden 2,880 -> 3,072
    per_layer = (32 * (2 * 1536 * (1536 + 96 + 2) + 3072 * (768 + 48 + 2))
                 - 32 * (2 * 1440 * (1440 + 90 + 2) + 2880 * (720 + 45 + 2)))
    assert h100 == 24 * per_layer and isinstance(h100, int)


def test_mxfp4_padding_under_expert_parallelism_pads_whole_experts(tmp_path):
    # --enable-expert-parallel over 3 MoE ranks (FusedMoEParallelConfig.make, tp_size=1): each rank holds whole
    # experts, the heaviest ceil(32 / 3) = 11, their intermediate unsplit: Marlin pads 2,880 -> 2,944 and the hidden
    # 2,880 -> 3,072, PER_LAYER / 32 = 1,195,264 B an expert, 11 x 1,195,264 x 24 layers = 315,549,696 B (TP 3
    # without EP: 32 experts of 2,880 / 3 = 960 -> 1,024 each)
    extra, line = padding_bytes(_gpt_oss(tmp_path, []), resolve_gpu("A100-80GB"), 3, range(24), expert_parallel=True)
    assert PER_LAYER // 32 == 1_195_264 and extra == 11 * 1_195_264 * 24 == 315_549_696   # worked above
    assert line == ("MXFP4 experts padded for vLLM's Marlin MoE kernel on A100-SXM-80GB: intermediate per rank 2,880 -> "
                    "2,944, hidden 2,880 -> 3,072: +300.93 MiB (315,549,696 B)")     # 315,549,696 / 2^20 = 300.93
    split = padding_bytes(_gpt_oss(tmp_path, []), resolve_gpu("A100-80GB"), 3, range(24))[0]
    assert split == 24 * (32 * (2 * 1024 * (1536 + 96 + 2) + 3072 * (512 + 32 + 2))      # 960 -> 1,024 a rank
                          - 32 * (2 * 960 * (1440 + 90 + 2) + 2880 * (480 + 30 + 2)))


def test_mxfp4_padding_is_none_when_no_expert_is_quantized(tmp_path):
    shape = _gpt_oss(tmp_path, ["model.layers.*.mlp.experts"])
    assert padding_bytes(shape, resolve_gpu("A100-80GB"), 1, range(24)) == (0, "")


# ----------------------------------------------------------------------------- the tied head under PP

# Llama-3.2-1B: 16 layers of hidden 2,048 (32 heads x 64, 8 KV heads x 64, MLP 8,192), vocabulary 128,256, tied
# embeddings, bf16. A layer: 2 x 2,048^2 + 2 x 2,048 x 512 (q, o, k, v) + 3 x 2,048 x 8,192 + 2 x 2,048 norms.
LAYER = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
EMBED = 128_256 * 2048
ROPE = 131_072 * 64 * 2          # vLLM's cos/sin cache, 131,072 positions x 64 x 2 B, on every stage


@pytest.mark.parametrize("engine_version", ["0.19.0", "0.33.0"])
def test_pp_last_stage_holds_the_tied_head_again(engine_version):
    # vLLM's PP: the first stage embeds, the last computes logits; with tie_word_embeddings the last stage
    # materialises lm_head from the embedding (a second copy) - not only stage 0's
    p = plan("meta-llama/Llama-3.2-1B", gpu="L4", pp=2, max_model_len=4096, engine_version=engine_version)
    first, last = (s.weights_bytes for s in p.stages)
    assert LAYER == 60_821_504
    # LAYER 2 x 2,048^2 + 2 x 2,048 x 512 + 3 x 2,048 x 8,192 + 2 x 2,048 = 60,821,504; EMBED 128,256 x 2,048;
    # stage 0: (262,668,288 + 8 x 60,821,504) x 2 B + ROPE 16,777,216 = 1,515,257,856; the last adds the final norm
    assert first == (EMBED + 8 * LAYER) * 2 + ROPE == 1_515_257_856
    assert last == (8 * LAYER + 2048 + EMBED) * 2 + ROPE == 1_515_261_952
    whole = plan("meta-llama/Llama-3.2-1B", gpu="L4", max_model_len=4096, engine_version=engine_version)
    assert whole.stages[0].weights_bytes == (EMBED + 16 * LAYER + 2048) * 2 + ROPE    # one copy at PP 1


# ----------------------------------------------------------------------------- drafting and LoRA refusals


LLAMA = "meta-llama/Llama-3.1-8B"
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_drafting_under_pp_is_refused(engine):
    # kvplan's draft accounting puts the drafter on the one stage; neither engine's PP drafting is modelled
    with pytest.raises(WorkloadError, match="without pipeline parallelism: use PP 1"):
        plan(LLAMA, engine=engine, gpu="H100", pp=2, max_model_len=8192, speculative=EAGLE3)
    plan(LLAMA, engine=engine, gpu="H100", max_model_len=8192, speculative=EAGLE3)      # PP 1 plans


def test_sglang_lora_under_pp_is_refused():
    with pytest.raises(WorkloadError, match="drafts and LoRA slots without pipeline parallelism: use PP 1"):
        plan(LLAMA, engine="sglang", gpu="H100", pp=2, max_model_len=8192, lora={"max_loras": 2})


def test_sglang_eagle_one_is_refused_with_the_methods_it_sizes():
    # SGLang 0.5.23 speculative-algorithm EAGLE reads an EAGLE-1 head; kvplan sizes EAGLE3 / NEXTN / STANDALONE
    with pytest.raises(WorkloadError, match="use eagle3, mtp or draft_model"):
        plan(LLAMA, engine="sglang", gpu="H100", max_model_len=8192,
             speculative={**EAGLE3, "method": "eagle"})


@pytest.mark.parametrize("model, why", [
    ("deepseek-ai/DeepSeek-V3", "not MLA's low-rank projections"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "not Mamba / linear-attention mixers"),
])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_lora_on_what_kvplan_cannot_size_is_refused_by_name(model, why, engine):
    with pytest.raises(WorkloadError, match=why + r".*: plan .* without LoRA"):
        plan(model, engine=engine, gpu="H200", tp=8, max_model_len=8192, lora={"max_loras": 1})


def test_sglang_mamba_hybrids_refuse_pp_and_drafting():
    qwen_next = "Qwen/Qwen3-Next-80B-A3B-Thinking"
    with pytest.raises(WorkloadError, match="Qwen3-Next and Falcon-H1 assert one stage"):
        plan(qwen_next, engine="sglang", gpu="H200", tp=2, pp=2, max_model_len=8192)
    with pytest.raises(WorkloadError, match="state pool without drafting"):
        plan(qwen_next, engine="sglang", gpu="H200", tp=4, max_model_len=8192,
             speculative={"method": "mtp", "num_speculative_tokens": 1})


# ----------------------------------------------------------------------------- LoRA settings and the sum's parts



@pytest.mark.parametrize("settings, message", [
    (LoraSettings(0, 16), "max_loras must be a whole number from 1 to 1024, got 0"),
    (LoraSettings(1025, 16), "max_loras must be a whole number from 1 to 1024, got 1,025"),
    (LoraSettings(True, 16), "max_loras must be a whole number from 1 to 1024, got True"),
    (LoraSettings("4", 16), "max_loras must be a whole number from 1 to 1024, got '4'"),
    (LoraSettings(4, 0), "max_lora_rank must be a whole number from 1 to 4096, got 0"),
    (LoraSettings(4, 4097), "max_lora_rank must be a whole number from 1 to 4096, got 4,097"),
])
def test_lora_settings_out_of_range_are_refused_by_name(settings, message):
    with pytest.raises(WorkloadError, match="^" + re.escape(message) + "$"):
        check_lora(settings)


def test_lora_settings_at_the_edges_pass():
    for settings in (LoraSettings(1, 1), LoraSettings(1024, 4096)):
        assert check_lora(settings) is settings


def test_lora_bytes_are_whole_bytes_and_follow_the_layers_asked():
    shape = _qwen_moe()
    total, _ = lora_bytes(shape, 2, tp=1, moe_ranks=2, lora=LoraSettings(1, R))
    assert isinstance(total, int)            # 128 experts // 2 ranks, never 64.0
    half, _ = lora_bytes(shape, 2, tp=1, moe_ranks=1, lora=LoraSettings(1, R), layers=range(24))
    per_layer = R * (4 * H + 2 * Q + 2 * KV) + R * E * (3 * H + 3 * I)
    assert half == (24 * per_layer + 2 * R * (V + H)) * 2          # a first PP stage of 24 layers, with the vocab
    sglang, _ = lora_bytes(shape, 2, tp=1, moe_ranks=1, lora=LoraSettings(3, R, embeddings=False))
    assert sglang == 3 * LAYERS * per_layer * 2                     # SGLang: no embed_tokens / lm_head slots


def test_lora_bytes_count_the_shared_expert(tmp_path):
    # a two-layer Qwen2-MoE (hidden 64, 4 heads and 2 KV heads of 16, 4 experts of 32, a shared expert of 48,
    # vocabulary 100): per layer R x (4 x 64 + 2 x 64 + 2 x 32) + R x 4 x (3 x 64 + 3 x 32) + R x (3 x 64 + 3 x 48)
    config = {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
              "shared_expert_intermediate_size": 48, "vocab_size": 100, "max_position_embeddings": 512,
              "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = kvplan.load_model(tmp_path / "config.json").require_arch()
    per_layer = 16 * (4 * 64 + 2 * 64 + 2 * 32) + 16 * 4 * (3 * 64 + 3 * 32) + 16 * (3 * 64 + 3 * 48)
    # per_layer above = 30,976 elements; (2 layers x 30,976 + embeddings and head 2 x 16 x (100 + 64)) x 2 B
    assert lora_bytes(shape, 2, tp=1, moe_ranks=1, lora=LoraSettings(1, 16))[0] == \
        (2 * per_layer + 2 * 16 * (100 + 64)) * 2 == 134_400
    # TP 2: the dense-MLP, expert and shared-expert intermediates and the heads halve; whole bytes still
    per_rank = 16 * (4 * 64 + 64 + 32) + 16 * 4 * (3 * 64 + 3 * 16) + 16 * (3 * 64 + 3 * 24)
    total = lora_bytes(shape, 2, tp=2, moe_ranks=2, lora=LoraSettings(1, 16))[0]
    assert total == (2 * per_rank + 2 * 16 * (100 + 64)) * 2 and isinstance(total, int)


def test_lora_slots_of_a_dense_mlp_split_by_tp():
    # Llama-3.1-8B at TP 2: R x (7 H + 2 q / 2 + 2 kv_rank + 3 I / 2) a layer, kv_rank 4 heads x 128
    shape = kvplan.load_model("meta-llama/Llama-3.1-8B").require_arch()
    per_layer = 16 * (4 * 4096 + 4096 + 2 * 512) + 16 * (3 * 4096 + 3 * 14336 // 2)
    total = lora_bytes(shape, 2, tp=2, moe_ranks=2, lora=LoraSettings(4, 16))[0]
    # 4 slots x (32 layers x per_layer + embeddings and head 2 x 16 x (128,256 + 4,096)) x 2 B
    assert total == 4 * (32 * per_layer + 2 * 16 * (128_256 + 4096)) * 2 and isinstance(total, int)


@pytest.mark.parametrize("model, why", [
    ("deepseek-ai/DeepSeek-V3", "kvplan sizes LoRA slots for MHA / GQA attention, not MLA's low-rank projections"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking",
     "kvplan sizes LoRA slots for attention models, not Mamba / linear-attention mixers"),
])
def test_lora_refusals_word_for_word(model, why):
    name = re.escape(model)
    with pytest.raises(WorkloadError, match=f"^{re.escape(why)}: plan {name} without LoRA$"):
        plan(model, gpu="H200", tp=8, max_model_len=8192, lora={"max_loras": 1})


def test_lora_on_blocks_with_their_own_linears_is_refused(tmp_path):
    # LFM2: short-convolution blocks (in_proj / out_proj linears vLLM would wrap, lfm2.py SupportsLoRA) and an MLP
    # whose width transformers derives (Lfm2MLP): the q/k/v/o + gate/up/down sum would undercount them silently
    transformers = pytest.importorskip("transformers")
    config = transformers.Lfm2Config(layer_types=["conv", "full_attention"] * 4, num_hidden_layers=8).to_dict()
    config["architectures"] = ["Lfm2ForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    lfm2 = kvplan.load_model(tmp_path / "config.json")
    for model in (lfm2, "XiaomiMiMo/MiMo-V2-Flash"):
        with pytest.raises(WorkloadError, match="blocks carry linears of their own .*: plan .* without LoRA$"):
            plan(model, gpu="H200", tp=8 if model != lfm2 else 1, max_model_len=8192, lora={"max_loras": 1})


def _llama_layer():
    return kvplan.load_model("meta-llama/Llama-3.1-8B").require_arch().layers[0]


@pytest.mark.parametrize("change, own", [
    ({}, False),                                                     # Llama: the standard projections
    # inputs: extra tensors of 4,096-wide layers, by the kind of LoRA target each is
    ({"mixer": None, "extra": (("mixer", 4096 * 3, (3, 4096)),)}, True),   # a short conv: family tensors only
    ({"mixer": None, "extra": (("norms", 4096, None),)}, True),
    ({"mixer": None, "extra": ()}, False),                           # no mixer, no tensors (a NAS no_op block)
    ({"mixer_weights": False}, True),                                # the family's tensors replace the dims'
    ({"ffn_weights": False}, True),
    ({"extra": (("norms", 128, None),)}, False),                     # q/k norms: vectors, no LoRA
    ({"extra": (("norms", 16, (4, 4)),)}, False),                    # a matrix outside the projection groups
    # inputs: a 4,096-wide bias vector
    ({"extra": (("attention", 4096, None),)}, False),                # a bias vector in a projection group
    *(({"extra": ((group, 16, (4, 4)),)}, True)
      for group in ("attention", "mlp", "experts", "shared_experts", "mixer")),
])
def test_which_blocks_carry_linears_of_their_own(change, own):
    import dataclasses

    from kvplan.planning.engines.lora import _own_linears

    assert _own_linears(dataclasses.replace(_llama_layer(), **change)) is own


def test_the_own_linears_refusal_word_for_word():
    why = ("kvplan sizes LoRA slots for the standard attention and MLP projections, and this model's blocks carry "
           "linears of their own (a short convolution or family-specific projections)")
    with pytest.raises(WorkloadError, match="^" + re.escape(why + ": plan XiaomiMiMo/MiMo-V2-Flash without LoRA") + "$"):
        plan("XiaomiMiMo/MiMo-V2-Flash", gpu="H200", tp=8, max_model_len=8192, lora={"max_loras": 1})
