"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/planning/engines/spec_decode.py (#26).

Every figure is hand arithmetic whose inputs are written here, taken from the bundled config.json files
(model_configs/) and the vLLM 0.33.0 modules the module cites (deepseek_mtp.py, llama_eagle3.py, llama_eagle.py);
every refusal is asserted whole."""
from __future__ import annotations

import json
import re
from math import ceil
from pathlib import Path

import pytest

from kvplan import load_model, plan
from kvplan.dtypes import resolve_dtype
from kvplan.errors import WorkloadError
from kvplan.planning.engines.spec_decode import (
    Speculative, _mtp_bytes, check, config_json, draft_layer_specs, draft_weight_bytes, idle_mtp_note, layer_count)
from kvplan.planning.engines.vllm_kv import VllmLayerSpec

REPO = Path(__file__).resolve().parents[1]
BF16 = resolve_dtype("bfloat16")
DSV3 = "deepseek-ai/DeepSeek-V3"
LLAMA = "meta-llama/Llama-3.1-8B"
HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _refused(model, spec: Speculative, message: str) -> None:
    with pytest.raises(WorkloadError, match=_exact(message)):
        check(model, spec)


def _deepseek_with_mtp_layers(tmp_path: Path, layers: int):
    """DeepSeek-V3's own config.json with num_nextn_predict_layers set to `layers` (the published one says 1)."""
    data = json.loads((REPO / "model_configs" / "deepseek-ai__DeepSeek-V3.json").read_text())
    folder = tmp_path / f"DeepSeek-V3-MTP{layers}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**data, "num_nextn_predict_layers": layers}))
    return load_model(str(folder))


# ----------------------------------------------------------------------------- DeepSeek-V3's MTP layer

# DeepSeek-V3 (model_configs/deepseek-ai__DeepSeek-V3.json): hidden 7,168, q_lora_rank 1,536, kv_lora_rank 512,
# 128 heads of qk_nope 128 + qk_rope 64 and v 128, 256 routed experts and 1 shared of moe_intermediate 2,048,
# fp8 with 128 x 128 weight blocks, each block one float32 scale_inv; the rest bf16, the router float32.
HID, QL, KVL, HEADS, NOPE, ROPE, VDIM, EXPERTS, MOE_I = 7168, 1536, 512, 128, 128, 64, 128, 256, 2048


def _fp8(rows: int, cols: int) -> int:
    return rows * cols + ceil(rows / 128) * ceil(cols / 128) * 4


# whole on every rank (deepseek_mtp.py: mtp_block is a DeepseekV2DecoderLayer whose q_a / kv_a projections and
# MoE gate are ReplicatedLinear, and q_a_layernorm / kv_a_layernorm plain RMSNorms, deepseek_v2.py:1082/1098;
# eh_proj an nn.Linear [H, 2H], unquantized in the fp8 checkpoint; the norms)
WHOLE = (_fp8(QL, HID)                                  # q_a_proj          11,012,736
         + _fp8(KVL + ROPE, HID)                         # kv_a_proj_with_mqa 4,129,888
         + (QL + KVL) * 2                                # q_a_layernorm, kv_a_layernorm: 4,096
         + EXPERTS * HID * 4                             # gate (router), float32  7,340,032
         + 2 * HID * 2                                   # input / post-attention layernorms
         + 3 * HID * 2                                   # enorm, hnorm, shared_head.norm
         + 2 * HID * HID * 2)                            # eh_proj          205,520,896
# over TP: q_b, kv_b, o and the shared expert
SPLIT = (_fp8(HEADS * (NOPE + ROPE), QL) + _fp8(HEADS * (NOPE + VDIM), KVL)
         + _fp8(HID, HEADS * VDIM) + 2 * _fp8(MOE_I, HID) + _fp8(HID, MOE_I))
ROUTED = EXPERTS * (2 * _fp8(MOE_I, HID) + _fp8(HID, MOE_I))     # 11,277,041,664: over the MoE ranks
MTP_NOTE = ("{} MTP layer(s): one decoder layer like the last, eh_proj [H, 2H] and norms whole on every rank; "
            "embed_tokens and the head shared with the target")


@pytest.mark.parametrize("tp, moe_ranks, expected", [
    (8, 8, WHOLE + SPLIT // 8 + ROUTED // 8),        # 1,664,716,960: TP 8, experts over TP
    (8, 16, WHOLE + SPLIT // 8 + ROUTED // 16),      # 959,901,856: TP 8 x DP 2 with expert parallelism
    (1, 1, WHOLE + SPLIT + ROUTED),                  # 11,721,180,384: one GPU holds it all
])
def test_deepseek_v3_mtp_layer_per_rank(tp, moe_ranks, expected):
    shape = load_model(DSV3).require_arch()
    # whole: 11,012,736 + 4,129,888 + 4,096 + 7,340,032 + 28,672 + 43,008 + 205,520,896; every share divides
    assert (WHOLE, SPLIT % 8, ROUTED % 16) == (228_079_328, 0, 0)
    assert expected in (1_664_716_960, 959_901_856, 11_721_180_384)
    total, how = _mtp_bytes(shape, BF16, tp, moe_ranks)
    assert (total, how) == (expected, MTP_NOTE.format(1))
    assert type(total) is int                        # `*_bytes` ints: a float would print 1664716960.0 in --json


def test_two_mtp_layers_cost_twice_one(tmp_path):
    shape = _deepseek_with_mtp_layers(tmp_path, 2).require_arch()
    assert _mtp_bytes(shape, BF16, 8, 8) == (2 * (WHOLE + SPLIT // 8 + ROUTED // 8), MTP_NOTE.format(2))


def test_mtp_weights_through_draft_weight_bytes():
    model = load_model(DSV3)
    assert draft_weight_bytes(model, Speculative("mtp", 1), BF16, 8, 16) == \
        (WHOLE + SPLIT // 8 + ROUTED // 16, MTP_NOTE.format(1))


# ----------------------------------------------------------------------------- the MTP note of a plan without it

def _idle(layers: int, weights: str, kv: int) -> str:
    return (f"MTP: the checkpoint's {layers} MTP layer(s) are not loaded without speculative decoding (vLLM "
            "deepseek_v2.py / qwen3_next.py / qwen3_5.py skip them), so this plan holds none; drafting with them adds "
            f"{weights} of weights per GPU and {kv} B of KV per token: plan with --speculative mtp")


def test_idle_mtp_note_for_deepseek_v3_on_tp8():
    # weights 1,664,713,376 B / 2^30 = 1.55 GiB; KV one more MLA layer: (512 + 64) x 2 B = 1,152 B a token
    assert idle_mtp_note(load_model(DSV3), BF16, 2, 8, 8) == _idle(1, "1.55 GiB", "1,152")


def test_idle_mtp_note_counts_every_mtp_layer(tmp_path):
    # two layers: 2 x 1,664,713,376 B = 3.10 GiB, 2 x 1,152 B of KV; an fp8 KV cache halves the latent: 2 x 576 B
    model = _deepseek_with_mtp_layers(tmp_path, 2)
    assert idle_mtp_note(model, BF16, 2, 8, 8) == _idle(2, "3.10 GiB", "2,304")
    assert idle_mtp_note(model, BF16, 1, 8, 8) == _idle(2, "3.10 GiB", "1,152")


def test_no_idle_note_without_mtp_layers():
    assert idle_mtp_note(load_model(LLAMA), BF16, 2, 1, 1) is None


# ----------------------------------------------------------------------------- the drafter's KV layers

def test_mtp_draft_layers_are_the_last_layer_once_per_mtp_layer(tmp_path):
    mla = VllmLayerSpec("mla", (512 + 64) * 2)
    assert draft_layer_specs(load_model(DSV3), Speculative("mtp", 1), 8, 2, 2) == [mla]
    assert draft_layer_specs(_deepseek_with_mtp_layers(tmp_path, 2), Speculative("mtp", 2), 8, 2, 2) == [mla, mla]


def test_a_mamba_draft_models_state_is_priced_in_the_act_dtype():
    # state-spaces/mamba-2.8b-hf: 64 layers, intermediate 5,120, state 16, conv kernel 4. vLLM keeps kernel - 1 conv
    # columns: 5,120 x 3 x 2 B = 30,720 B, the SSM state 5,120 x 16 x 2 B = 163,840 B: 194,560 B a layer
    mamba = load_model("state-spaces/mamba-2.8b-hf")
    specs = draft_layer_specs(load_model(LLAMA), Speculative("draft_model", 1, mamba), 1, 2, 2)
    assert specs == [VllmLayerSpec("mamba", 0, state_bytes=194_560, conv_bytes_per_column=5120 * 2)] * 64


def test_eagle3_draft_layers_are_the_heads_one_layer():
    # the head's one Llama layer: 8 KV heads of 128 over TP 2, K and V in bf16: 4 x 256 x 2 B = 2,048 B a token
    spec = Speculative("eagle3", 3, load_model(HEAD))
    assert draft_layer_specs(load_model(LLAMA), spec, 2, 2, 2) == [VllmLayerSpec("full", 4 * 256 * 2)]


# ----------------------------------------------------------------------------- EAGLE heads and draft models

# Llama-3.1-8B and its EAGLE-3 head (model_configs/yuhuili__EAGLE3-LLaMA3.1-Instruct-8B.json): hidden 4,096,
# 32 heads and 8 KV heads of 128, MLP 14,336, draft_vocab_size 32,000; bf16, TP 2.
H, Q_OUT, KV_OUT, MLP, DRAFT_VOCAB, TP = 4096, 32 * 128, 8 * 128, 14336, 32000, 2
LAYER = ((2 * H * Q_OUT + 2 * H * KV_OUT) * 2 // TP       # q, o, k, v: 41,943,040 B a rank
         + 3 * H * MLP * 2 // TP                          # gate, up, down: 176,160,768 B
         + 2 * H * 2)                                     # input / post-attention norms, whole: 16,384 B


def test_eagle3_head_for_llama_3_1_8b_on_tp2():
    fc = 3 * H * H * 2                                    # fc [H, 3H], replicated: 100,663,296 B
    wider = (Q_OUT + 2 * KV_OUT) * H * 2 // TP            # q/k/v read 2H: the second H, 25,165,824 B
    head = DRAFT_VOCAB * H * 2 // TP                      # lm_head over the draft vocabulary: 131,072,000 B
    d2t, norms = DRAFT_VOCAB * 8, 2 * H * 2               # int64 map; hidden_norm and the final norm
    total, how = draft_weight_bytes(load_model(LLAMA), Speculative("eagle3", 3, load_model(HEAD)), BF16, TP, TP)
    assert total == LAYER + fc + wider + head + d2t + norms == 475_293_696
    assert how == (f"{HEAD}: 1 layer(s) 218,120,192 B + fc 100,663,296 B (whole on every rank) + q/k/v over 2 x "
                   "hidden 25,165,824 B + lm_head 32,000 x 4,096 / TP 131,072,000 B + d2t 256,000 B + hidden_norm and "
                   "final norm 16,384 B; embed_tokens shared with the target")


def _eagle3_head(tmp_path: Path, **dims):
    data = json.loads((REPO / "model_configs" / "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    folder = tmp_path / "odd-eagle3-head"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**data, **dims}))
    return load_model(str(folder))


def test_eagle3_head_replicates_its_kv_head_and_pads_its_vocabulary(tmp_path):
    # a head of 4 query heads and 1 KV head of 128 over hidden 640 (MLP 1,280), draft vocabulary 1,001, on TP 2.
    # The KV head is whole on both ranks (QKVParallelLinear: num_kv_head_replicas = TP / kv_heads = 2), in the
    # layer's k / v and in the second H the q/k/v read; the lm_head pads 1,001 rows to 1,024 (a multiple of 64,
    # vocab_parallel_embedding.py pad_vocab_size) and holds 512 a rank
    h, tp = 640, 2
    head = _eagle3_head(tmp_path, hidden_size=h, num_attention_heads=4, num_key_value_heads=1, head_dim=128,
                        intermediate_size=1280, draft_vocab_size=1001)
    layer = (2 * 512 * 640 * 2 // tp                       # q [512, 640] and o [640, 512] over TP: 655,360 B
             + 2 * 128 * 640 * 2                           # k and v, one whole KV head each: 327,680 B
             + 3 * 640 * 1280 * 2 // tp + 2 * h * 2)       # gate, up, down: 2,457,600 B; the two norms 2,560 B
    wider = (512 // tp + 2 * 128) * h * 2                 # 256 q rows + the whole k and v rows: 655,360 B
    lm_head = 1024 // tp * h * 2                          # 512 of the 1,024 padded rows: 655,360 B
    total, how = draft_weight_bytes(load_model(LLAMA), Speculative("eagle3", 1, head), BF16, tp, tp)
    assert (layer, wider, lm_head) == (3_443_200, 655_360, 655_360)
    assert total == layer + 3 * h * h * 2 + wider + lm_head + 1001 * 8 + 2 * h * 2 == 7_222_088
    assert "q/k/v over 2 x hidden 655,360 B + lm_head 1,001 x 640 / TP 655,360 B" in how
    # without an engine's padding (rule ""), the head is ceil(1,001 x 640 x 2 / 2) = 640,640 B
    assert draft_weight_bytes(load_model(LLAMA), Speculative("eagle3", 1, head), BF16, tp, tp, "")[0] == \
        total - lm_head + 640_640


def test_eagle_one_head_has_a_2h_fc_and_no_first_input_norm():
    # EAGLE-1 (vLLM 0.33 llama_eagle.py): fc = ReplicatedLinear(2H -> H): 2 x 4,096 x 4,096 x 2 B = 67,108,864 B,
    # and layer 0's input_layernorm an nn.Identity: 4,096 x 2 B = 8,192 B fewer than the config's layer
    total, how = draft_weight_bytes(load_model(LLAMA), Speculative("eagle", 3, load_model(HEAD)), BF16, TP, TP)
    assert (total, how) == (LAYER + 2 * H * H * 2 - H * 2,
                            f"{HEAD}: 1 layer(s) 218,120,192 B + fc 67,108,864 B (whole on every rank) - layer 0's "
                            "input_layernorm 8,192 B (an nn.Identity in vLLM's EAGLE-1); embed_tokens shared with "
                            "the target")
    assert total == 285_220_864                           # 218,120,192 + 67,108,864 - 8,192
    # vLLM 0.8.3's V0 eagle.py keeps the norm ("but we do as HF implementation also does"); 0.8.4's llama_eagle.py
    # drops it
    assert draft_weight_bytes(load_model(LLAMA), Speculative("eagle", 3, load_model(HEAD)), BF16, TP, TP,
                              version=(0, 8, 3))[0] == total + 8_192
    assert draft_weight_bytes(load_model(LLAMA), Speculative("eagle", 3, load_model(HEAD)), BF16, TP, TP,
                              version=(0, 8, 4))[0] == total


def test_a_draft_model_holds_all_its_weights():
    # Llama-3.1-8B drafting for Llama-3.1-70B on TP 2: 8,030,261,248 parameters, of which the norms
    # (32 x 2 x 4,096 + 4,096 = 266,240) are whole and the rest (embeddings and head untied) split in two, bf16
    params, norms = 8_030_261_248, 32 * 2 * 4096 + 4096
    total, how = draft_weight_bytes(load_model("meta-llama/Llama-3.1-70B"), Speculative("draft_model", 2,
                                    load_model(LLAMA)), BF16, 2, 2)
    assert (total, how) == ((params - norms) * 2 // 2 + norms * 2, f"{LLAMA}: every weight, split over TP 2")
    assert total == 8_030_527_488          # (8,030,261,248 - 266,240) x 2 B / 2 + 266,240 x 2 B


# ----------------------------------------------------------------------------- check(): what is sized, what refused

@pytest.mark.parametrize("k", [1, 2, 63, 64])
def test_speculative_tokens_from_one_to_sixty_four_are_accepted(k):
    spec = Speculative("mtp", k)
    assert check(load_model(DSV3), spec) is spec


@pytest.mark.parametrize("k, shown", [(0, "0"), (65, "65"), (-1, "-1"), (True, "True"), ("3", "'3'"), (2.0, "2.0")])
def test_speculative_tokens_outside_one_to_sixty_four_are_refused(k, shown):
    _refused(load_model(DSV3), Speculative("mtp", k),
             f"speculative tokens must be a whole number from 1 to 64, got {shown}")


def test_an_unknown_method_is_refused_with_the_four_kvplan_sizes():
    _refused(load_model(LLAMA), Speculative("medusa", 3),
             "speculative method 'medusa' is not one kvplan sizes: use mtp, eagle3, eagle, draft_model")


def test_mtp_on_a_model_without_mtp_layers_is_refused():
    _refused(load_model(LLAMA), Speculative("mtp", 1),
             "meta-llama/Llama-3.1-8B's config declares no MTP layers kvplan reads (num_nextn_predict_layers of "
             "DeepSeek-V3 / V3.2 and GLM-5 configs, mtp_num_hidden_layers of Qwen3.5 / 3.6; Qwen3-Next's one, "
             "unnamed): use an EAGLE head or a draft model")


def test_mtp_modules_no_engine_loads_are_refused_with_why():
    # MiniMax-M2: num_mtp_modules 3 of mtp_transformer_layers 1, which vLLM 0.33 and SGLang 0.5.23 skip
    _refused(load_model("MiniMaxAI/MiniMax-M2"), Speculative("mtp", 1),
             "MiniMaxAI/MiniMax-M2: 3 MTP module(s) of 1 layer(s) each are declared (num_mtp_modules, "
             "mtp_transformer_layers), but vLLM 0.33 and SGLang 0.5.23 skip them at load and have no MiniMax-M2 MTP "
             "drafter, and the published checkpoint holds none: use an EAGLE head or a draft model")


def test_speculative_tokens_must_be_a_multiple_of_the_mtp_layers(tmp_path):
    model = _deepseek_with_mtp_layers(tmp_path, 2)
    _refused(model, Speculative("mtp", 3),
             "3 speculative tokens do not divide over DeepSeek-V3-MTP2's 2 MTP layers: use a multiple of 2")
    assert check(model, Speculative("mtp", 4)).num_speculative_tokens == 4


def test_mtp_with_a_draft_model_is_refused():
    _refused(load_model(DSV3), Speculative("mtp", 1, load_model(LLAMA)),
             "MTP drafts with the checkpoint's own layers: leave the draft model out")


@pytest.mark.parametrize("method", ["eagle3", "eagle", "draft_model"])
def test_a_drafter_method_without_its_draft_is_refused(method):
    _refused(load_model(LLAMA), Speculative(method, 3),
             f"speculative method {method} needs the draft's config: name the draft model")


def test_eagle3_with_a_whole_model_as_draft_is_refused():
    _refused(load_model(LLAMA), Speculative("eagle3", 3, load_model("meta-llama/Llama-3.2-1B")),
             "meta-llama/Llama-3.2-1B is not an EAGLE-3 head (its config has no draft_vocab_size with an Eagle "
             "architecture): use method draft_model for a whole model")


# ----------------------------------------------------------------------------- the command and the note's count

def test_config_json_names_the_draft_as_the_command_did():
    head = load_model(HEAD)
    assert config_json(Speculative("eagle3", 3, head, "/models/eagle3-head")) == \
        '{"method": "eagle3", "model": "/models/eagle3-head", "num_speculative_tokens": 3}'
    assert config_json(Speculative("eagle3", 3, head)) == \
        '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
    assert config_json(Speculative("mtp", 2)) == '{"method": "mtp", "num_speculative_tokens": 2}'


def test_layer_count_is_the_drafts_layers_or_the_mtp_layers(tmp_path):
    assert layer_count(Speculative("eagle3", 3, load_model(HEAD)), load_model(LLAMA)) == 1
    assert layer_count(Speculative("draft_model", 1, load_model("meta-llama/Llama-3.2-1B")), load_model(LLAMA)) == 16
    assert layer_count(Speculative("mtp", 2), _deepseek_with_mtp_layers(tmp_path, 2)) == 2


# ----------------------------------------------------------------------------- an MTP layer unlike the last

def _qwen35_ending_in(tmp_path: Path, last: str):
    """Qwen3.5-27B's config (64 layers, full attention every 4th, the 64th full) with its last layer type replaced."""
    data = json.loads((REPO / "model_configs" / "Qwen__Qwen3.5-27B.json").read_text())
    text = data["text_config"]
    folder = tmp_path / f"Qwen3.5-27B-{last}"
    folder.mkdir()
    text["layer_types"] = text["layer_types"][:-1] + [last]
    (folder / "config.json").write_text(json.dumps(data))
    return load_model(str(folder))


UNLIKE = ("Qwen3.5-27B-linear_attention's last layer is gated_deltanet, not attention, and kvplan prices the MTP layer "
          "as a copy of the last, where vLLM 0.33 builds it as attention (qwen3_5_mtp.py, qwen3_next_mtp.py: "
          'layer_type "full_attention")')


def test_mtp_is_refused_where_the_last_layer_is_linear_attention(tmp_path):
    # vLLM 0.33 qwen3_5_mtp.py:121 builds the MTP layer `layer_type="full_attention"` whatever the last layer is;
    # a copy of a Gated DeltaNet layer would be a 3,207,168 B state and 0 B a token
    _refused(_qwen35_ending_in(tmp_path, "linear_attention"), Speculative("mtp", 1),
             UNLIKE + ": use an EAGLE head or a draft model")
    published = Speculative("mtp", 1)
    assert check(_qwen35_ending_in(tmp_path, "full_attention"), published) is published   # the layer types as shipped


def test_the_idle_note_says_why_it_cannot_size_such_mtp_layers(tmp_path):
    assert idle_mtp_note(_qwen35_ending_in(tmp_path, "linear_attention"), BF16, 2, 1, 1) == \
        "MTP: the checkpoint's 1 MTP layer(s) are not loaded, and kvplan cannot size them: " + UNLIKE


def test_qwen35_mtp_kv_is_one_full_attention_layer():
    # Qwen3.5-27B's full-attention layers: 4 KV heads of 256, K and V in bf16: 4 x 256 x 2 x 2 B = 4,096 B a token
    assert draft_layer_specs(load_model("Qwen/Qwen3.5-27B"), Speculative("mtp", 1), 1, 2, 2) == \
        [VllmLayerSpec("full", 4 * 256 * 2 * 2)]


# ----------------------------------------------------------------------------- expert parallelism, vocabulary padding,
# and a LayerNorm head: the pass-throughs the shard at M = 15 left alive

# one DeepSeek-V3 routed expert in fp8: gate and up [2,048, 7,168], down [7,168, 2,048], each with its float32
# 128 x 128 block scales: 2 x 14,696,448 + 14,658,048 = 44,050,944 B; the 256 of them make ROUTED
EXPERT = 2 * _fp8(MOE_I, HID) + _fp8(HID, MOE_I)


def test_mtp_experts_are_whole_under_expert_parallelism_on_ep24():
    # TP 8 x DP 3 with --enable-expert-parallel: the routed experts spread over 24 MoE ranks, and the heaviest rank
    # holds ceil(256 / 24) = 11 whole experts (vLLM 0.33 fused_moe/expert_map_manager.py determine_expert_map:
    # 256 // 24 = 10, and the first 256 % 24 = 16 ranks take one more): 11 x 44,050,944 = 484,560,384 B. The MTP
    # block is a DeepseekV2DecoderLayer, its experts a FusedMoE like the target's
    assert (EXPERT, 11 * EXPERT, SPLIT // 8) == (44_050_944, 484_560_384, 27_007_424)
    ep = WHOLE + SPLIT // 8 + 11 * EXPERT                 # 228,079,328 + 27,007,424 + 484,560,384 = 739,647,136
    assert ep == 739_647_136
    shape, model = load_model(DSV3).require_arch(), load_model(DSV3)
    assert _mtp_bytes(shape, BF16, 8, 24, True) == (ep, MTP_NOTE.format(1))
    assert draft_weight_bytes(model, Speculative("mtp", 1), BF16, 8, 24, expert_parallel=True) == \
        (ep, MTP_NOTE.format(1))
    # expert parallelism is opt-in (vLLM's enable_expert_parallel defaults to False): left out, the experts are
    # sharded, not whole. (Sharded over 24 ranks is no configuration vLLM starts, 2,048 rows do not split 24 ways, so
    # only that the default is the sharded rule, not the whole-expert one, is asserted here; the sharded rule's
    # figures are pinned at 8 and 16 ranks above)
    sharded = _mtp_bytes(shape, BF16, 8, 24, False)[0]
    assert sharded != ep
    assert _mtp_bytes(shape, BF16, 8, 24)[0] == sharded
    assert draft_weight_bytes(model, Speculative("mtp", 1), BF16, 8, 24)[0] == sharded


def _config(tmp_path: Path, name: str, source: str, **fields):
    data = json.loads((REPO / "model_configs" / source).read_text())
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**data, **fields}))
    return load_model(str(folder))


def test_a_draft_models_vocabulary_is_padded_by_the_engines_rule(tmp_path):
    # Llama-3.1-8B with one more vocabulary row, 128,257 (its embed_tokens and untied lm_head [V, 4,096] in bf16),
    # drafting on TP 2: 8,030,261,248 + 2 x 4,096 = 8,030,269,440 parameters, the norms (266,240) whole.
    # vLLM pads 128,257 rows to 128,320 (2,005 x 64, vocab_parallel_embedding.py pad_vocab_size): 64,160 rows a rank,
    # 64,160 x 4,096 x 2 B = 525,598,720 B for each of the two; unpadded (rule "") each is 128,257 x 4,096 x 2 B / 2
    # = 525,340,672 B
    draft = _config(tmp_path, "Llama-3.1-8B-V128257", "meta-llama__Llama-3.1-8B.json", vocab_size=128257)
    params, norms, vocab = 8_030_261_248 + 2 * 4096, 32 * 2 * 4096 + 4096, 128257 * 4096
    rest = (params - 2 * vocab - norms) * 2 // 2 + norms * 2                     # 6,979,854,336 B
    padded, plain = rest + 2 * 64160 * 4096 * 2, rest + 2 * vocab * 2 // 2
    assert (rest, padded, plain) == (6_979_854_336, 8_031_051_776, 8_030_535_680)
    spec = Speculative("draft_model", 2, draft)
    target = load_model("meta-llama/Llama-3.1-70B")
    assert draft_weight_bytes(target, spec, BF16, 2, 2, "pad64")[0] == padded
    assert draft_weight_bytes(target, spec, BF16, 2, 2, "")[0] == plain


# Qwen1.5-MoE-A2.7B (model_configs/Qwen__Qwen1.5-MoE-A2.7B-Chat.json): 24 layers, hidden 2,048, 60 routed experts of
# moe_intermediate 1,408 in bf16: gate, up, down 3 x 1,408 x 2,048 x 2 B = 17,301,504 B an expert. On TP 8 with
# expert parallelism a rank holds ceil(60 / 8) = 8 whole experts; without, 60 / 8 = 7.5 experts' worth: half an
# expert, 8,650,752 B, more a layer under expert parallelism
QWEN_MOE_EXPERT = 3 * 1408 * 2048 * 2


def test_a_moe_draft_model_holds_whole_experts_under_expert_parallelism():
    draft = load_model("Qwen/Qwen1.5-MoE-A2.7B-Chat")
    spec = Speculative("draft_model", 2, draft)
    with_ep, _ = draft_weight_bytes(draft, spec, BF16, 8, 8, expert_parallel=True)
    without, _ = draft_weight_bytes(draft, spec, BF16, 8, 8, expert_parallel=False)
    assert QWEN_MOE_EXPERT // 2 == 8_650_752                  # 3 x 1,408 x 2,048 x 2 B / 2: half an expert
    assert with_ep - without == 24 * QWEN_MOE_EXPERT // 2 == 207_618_048    # 24 layers x 8,650,752 B
    assert draft_weight_bytes(draft, spec, BF16, 8, 8)[0] == without          # expert parallelism is opt-in


def test_a_moe_eagle_heads_layer_holds_whole_experts_under_expert_parallelism(tmp_path):
    # an EAGLE-1 head of one Qwen1.5-MoE layer (vLLM drafts MoE models with EAGLE-1 heads of their own layer kind,
    # deepseek_eagle.py): the layer's 60 experts over TP 8 differ by half an expert between the two placements
    head = _config(tmp_path, "Qwen1.5-MoE-eagle", "Qwen__Qwen1.5-MoE-A2.7B-Chat.json", num_hidden_layers=1)
    spec = Speculative("eagle", 1, head)
    target = load_model("Qwen/Qwen1.5-MoE-A2.7B-Chat")
    with_ep, _ = draft_weight_bytes(target, spec, BF16, 8, 8, expert_parallel=True)
    without, _ = draft_weight_bytes(target, spec, BF16, 8, 8, expert_parallel=False)
    assert with_ep - without == QWEN_MOE_EXPERT // 2 == 8_650_752      # one layer: 3 x 1,408 x 2,048 x 2 B / 2


def test_an_eagle_one_head_with_layernorm_bias_drops_weight_and_bias(tmp_path):
    # a one-layer EAGLE-1 head of StarCoder2-7B's kind (model_configs/bigcode__starcoder2-7b.json: norm_type
    # layer_norm with use_bias, hidden 4,608, bf16): vLLM 0.8.4+ replaces layer 0's input_layernorm by an
    # nn.Identity (llama_eagle.py), so its weight and its bias go: 2 x 4,608 x 2 B = 18,432 B; 0.8.3's V0 eagle.py
    # keeps both
    head = _config(tmp_path, "starcoder2-eagle", "bigcode__starcoder2-7b.json", num_hidden_layers=1)
    spec = Speculative("eagle", 1, head)
    target = load_model("bigcode/starcoder2-7b")
    kept, _ = draft_weight_bytes(target, spec, BF16, 2, 2, version=(0, 8, 3))
    dropped, how = draft_weight_bytes(target, spec, BF16, 2, 2, version=(0, 8, 4))
    assert kept - dropped == 2 * 4608 * 2 == 18_432       # weight and bias of hidden 4,608 (config.json), 2 B
    assert " - layer 0's input_layernorm 18,432 B (an nn.Identity in vLLM's EAGLE-1)" in how


# Qwen1.5-MoE-A2.7B drafting for itself on DP 2 (model_configs/Qwen__Qwen1.5-MoE-A2.7B-Chat.json, bf16): per layer
# q, k, v [2,048, 2,048] with biases and o [2,048, 2,048] (16 KV heads, so split like q), 60 routed experts of
# 17,301,504 B, a shared expert of 5,632 (3 x 5,632 x 2,048 x 2 B = 69,206,016 B), the router [60, 2,048] and the
# shared-expert gate [1, 2,048] (whole), 2 norms of 2,048 (whole); outside, embed_tokens and lm_head of 151,936 x
# 2,048 x 2 B = 622,329,856 B each (151,936 = 2,374 x 64: no padding at TP 2 or 4) and the final norm
QKV = (3 * 2048 * 2048 + 3 * 2048) * 2            # 25,178,112 B
O_PROJ = 2048 * 2048 * 2                          # 8,388,608 B
SHARED = 3 * 5632 * 2048 * 2                      # 69,206,016 B
ROUTER = (60 * 2048 + 2048) * 2                   # 249,856 B, whole
LAYER_NORMS = 2 * 2048 * 2                        # 8,192 B, whole
VOCAB = 151936 * 2048 * 2                         # 622,329,856 B (embed_tokens; lm_head the same, untied)


def _qwen_moe_draft(attn: int, dense: int, moe: int) -> int:
    layer = (QKV + O_PROJ) // attn + 60 * QWEN_MOE_EXPERT // moe + SHARED // dense + ROUTER + LAYER_NORMS
    return 24 * layer + 2 * VOCAB // dense + 2048 * 2


def test_a_moe_draft_models_experts_spread_over_tp_times_dp_on_vllm():
    # vLLM 0.33 fused_moe/config.py FusedMoEParallelConfig.make -> flatten_tp_across_dp_and_pcp: `flatten_tp_size =
    # dp_size * pcp_size * tp_size` ("shard across all devices"); the drafter builds with the target's parallel
    # config, so on TP 2 x DP 2 its experts split 4 ways, the rest 2
    draft = load_model("Qwen/Qwen1.5-MoE-A2.7B-Chat")
    spec = Speculative("draft_model", 2, draft)
    total, how = draft_weight_bytes(draft, spec, BF16, 2, 4)
    assert total == _qwen_moe_draft(2, 2, 4) == 8_090_341_376   # 24 x 311,166,976 + 2 x 311,164,928 + 4,096
    assert how == "Qwen/Qwen1.5-MoE-A2.7B-Chat: every weight, split over TP 2, its routed experts over 4 ranks"
    # over TP alone it held 24 x 60 x 17,301,504 / 4 = 6,228,541,440 B more
    assert draft_weight_bytes(draft, spec, BF16, 2, 2)[0] - total == 6_228_541_440
    planned = plan("Qwen/Qwen1.5-MoE-A2.7B-Chat", engine="vllm", gpu="H100", tp=2, dp=2, max_model_len=4096,
                   speculative={"method": "draft_model", "num_speculative_tokens": 2,
                                "model": "Qwen/Qwen1.5-MoE-A2.7B-Chat"})
    assert planned.extra["draft model weights"] == 8_090_341_376    # _qwen_moe_draft(2, 2, 4), as above
    # the same model as target: its weights are the draft's and the rotary table, 32,768 x 128 x 2 B = 8,388,608 B
    assert planned.weights_bytes - 8_090_341_376 == 32768 * 128 * 2


def test_a_moe_draft_model_on_sglang_dp_attention_is_priced_as_its_target():
    # SGLang 0.5.23, TP 4 with --attn-dp-size 2: a STANDALONE draft builds in the target's layout
    # (speculative/draft_parallel.py legacy_draft_parallel_spec: TARGET_LAYOUT; resolve_draft_parallel_layout gives
    # it the target's groups), so attention splits over TP / DP = 2 (qwen2_moe.py attn_tp_size) and the experts over
    # moe_tp x moe_ep = TP 4 (distributed/parallel_state.py); kvplan prices the rest over TP 4 as for the target
    planned = plan("Qwen/Qwen1.5-MoE-A2.7B-Chat", engine="sglang", gpu="H100", tp=4, dp=2, max_model_len=4096,
                   speculative={"method": "draft_model", "num_speculative_tokens": 2,
                                "model": "Qwen/Qwen1.5-MoE-A2.7B-Chat"})
    drafted = planned.extra["draft model weights"]
    assert drafted == _qwen_moe_draft(2, 4, 4) == 7_363_940_352    # 24 x 293,865,472 + 2 x 155,582,464 + 4,096
    assert planned.weights_bytes - drafted == 32768 * 128 * 2       # the target's: the draft's + its rotary table
    # kvplan split the draft's experts, shared expert, embed_tokens and lm_head over the attention TP 2:
    # 24 x (60 x 17,301,504 + 69,206,016) / 4 + 2 x 622,329,856 / 4 = 6,954,942,464 B more
    draft = load_model("Qwen/Qwen1.5-MoE-A2.7B-Chat")
    old, _ = draft_weight_bytes(draft, Speculative("draft_model", 2, draft), BF16, 2, 2, "pad64_tp")
    assert old - drafted == 6_954_942_464


def test_a_moe_eagle_heads_experts_spread_over_tp_times_dp(tmp_path):
    # the one-layer EAGLE-1 head of Qwen1.5-MoE's kind on vLLM TP 2 x DP 2: its 60 experts over 4 ranks, not 2:
    # 60 x 17,301,504 / 4 = 259,522,560 B less (FusedMoEParallelConfig, as for a draft model)
    head = _config(tmp_path, "Qwen1.5-MoE-eagle", "Qwen__Qwen1.5-MoE-A2.7B-Chat.json", num_hidden_layers=1)
    spec = Speculative("eagle", 1, head)
    target = load_model("Qwen/Qwen1.5-MoE-A2.7B-Chat")
    over_tp, _ = draft_weight_bytes(target, spec, BF16, 2, 2)
    over_tp_dp, _ = draft_weight_bytes(target, spec, BF16, 2, 4)
    assert over_tp - over_tp_dp == 60 * QWEN_MOE_EXPERT // 4 == 259_522_560   # 60 x 17,301,504 B / 4


def test_the_mtp_note_names_each_familys_fused_projection():
    # DeepSeek's eh_proj is a plain nn.Linear, whole (deepseek_mtp.py:87: MTP_NOTE above); Qwen3.5's fc [H, 2H] is a
    # ColumnParallelLinear (vLLM 0.33 qwen3_5_mtp.py:98, gather_output=True): Qwen3.5-27B's 5,120 x 10,240 x 2 B =
    # 104,857,600 B are 52,428,800 B a rank on TP 2, and the note says it splits
    shape = load_model("Qwen/Qwen3.5-27B").require_arch()
    one, two = _mtp_bytes(shape, BF16, 1, 1), _mtp_bytes(shape, BF16, 2, 2)
    assert two[1] == ("1 MTP layer(s): one decoder layer like the last, fc [H, 2H] split over TP 2 (a "
                      "ColumnParallelLinear), norms whole on every rank; embed_tokens and the head shared with the "
                      "target")
    # what TP 2 saves is half of all but the whole part (52,224 B: tests/test_ranks.py), the fc's half among it
    assert one[0] - two[0] == (one[0] - 52_224) // 2 == 424_673_280      # (849,398,784 - 52,224) / 2
    assert _mtp_bytes(load_model(DSV3).require_arch(), BF16, 8, 8)[1] == MTP_NOTE.format(1)


def test_a_draft_model_in_the_target_layout_names_its_split():
    # SGLang under DP attention: a draft model's attention over the attention TP (2), the rest over the layout's TP
    # (4); a dense draft says nothing of routed experts whatever the MoE ranks (8)
    target, draft = load_model(LLAMA), load_model("meta-llama/Llama-3.2-1B")
    _, how = draft_weight_bytes(target, Speculative("draft_model", 1, draft), BF16, 2, 8, layout_tp=4)
    assert how == "meta-llama/Llama-3.2-1B: every weight, split over TP 4, its attention over 2"
    _, how = draft_weight_bytes(target, Speculative("draft_model", 1, draft), BF16, 2, 2)
    assert how == "meta-llama/Llama-3.2-1B: every weight, split over TP 2"


def test_an_eagle_head_with_routed_experts_honours_expert_parallel():
    # a head of MoE layers (vLLM's EAGLE heads for DeepSeek / Llama 4 are MoE decoder layers: deepseek_eagle.py,
    # llama4_eagle.py), here Qwen1.5-MoE's 24 layers of 60 experts (3 x 2,048 x 1,408 x 2 B = 17,301,504 B each) on 8
    # ranks: whole experts put ceil(60 / 8) = 8 on the heaviest rank, sharding gives each 60 / 8 = 7.5 experts'
    # worth: 0.5 x 17,301,504 x 24 = 207,618,048 B more
    head = Speculative("eagle", 1, load_model("Qwen/Qwen1.5-MoE-A2.7B-Chat"))
    ep = draft_weight_bytes(load_model(LLAMA), head, BF16, 8, 8, expert_parallel=True)[0]
    sharded = draft_weight_bytes(load_model(LLAMA), head, BF16, 8, 8)[0]
    assert ep - sharded == 207_618_048     # 0.5 x 17,301,504 x 24


# ----------------------------------------------------------------------------- an EAGLE head and its target's width

GPT_OSS = "openai/gpt-oss-20b"   # hidden_size 2,880 (its config.json)


def _head(tmp_path: Path, **fields) -> Speculative:
    """yuhuili's EAGLE-3 head for Llama-3.1-8B (hidden 4,096, 1 layer, draft_vocab_size 32,000) with `fields` set."""
    data = json.loads((REPO / "model_configs" / "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, **fields}))
    return Speculative("eagle3", 3, load_model(path))


def _fc_bytes(spec: Speculative, target: str) -> int:
    """The fc term of the head's breakdown, '... + fc N B (whole on every rank)'."""
    return int(re.search(r"\+ fc ([\d,]+) B", draft_weight_bytes(load_model(target), spec, BF16, 1, 1)[1])
               .group(1).replace(",", ""))


def test_an_eagle_head_for_another_width_is_refused():
    """llama_eagle3.py (vLLM 0.33, SGLang 0.5.23): fc takes target_hidden_size (else hidden_size) per aux state, so
    yuhuili's head reads 4,096-wide states, and gpt-oss-20b's are 2,880: the engine fails at its first forward.
    EAGLE-1's fc [2H] reads the embedding and the target's state, both its hidden_size."""
    message = (f"{HEAD} reads hidden states 4,096 wide (its hidden_size), and {GPT_OSS}'s are 2,880: use an EAGLE "
               f"head trained for {GPT_OSS}")
    _refused(load_model(GPT_OSS), Speculative("eagle3", 3, load_model(HEAD)), message)
    _refused(load_model(GPT_OSS), Speculative("eagle", 3, load_model(HEAD)), message)
    for engine in ("vllm", "sglang"):
        with pytest.raises(WorkloadError, match=_exact(message)):
            plan(GPT_OSS, engine=engine, gpu="H100", max_model_len=8192,
                 speculative={"method": "eagle3", "num_speculative_tokens": 3, "model": HEAD})
    assert check(load_model(LLAMA), Speculative("eagle3", 3, load_model(HEAD))).draft.name == HEAD


def test_an_eagle3_fc_reads_target_hidden_size_and_the_aux_states(tmp_path):
    """fc [hidden, target_hidden_size x num_aux_hidden_states] (llama_eagle3.py, both engines; the aux count from
    num_aux_hidden_states, else eagle_config.eagle_aux_hidden_state_layer_ids, else 3), whole on every rank, bf16:
    yuhuili's 3 x 4,096 x 4,096 x 2 B = 100,663,296 B; with target_hidden_size 2,880 (a 4,096-wide head for
    gpt-oss) 3 x 2,880 x 4,096 x 2 = 70,778,880 B, accepted on gpt-oss-20b and refused on Llama-3.1-8B."""
    assert _fc_bytes(Speculative("eagle3", 3, load_model(HEAD)), LLAMA) == 100_663_296   # 3 x 4,096 x 4,096 x 2
    wide = _head(tmp_path, target_hidden_size=2880)
    assert _fc_bytes(wide, GPT_OSS) == 70_778_880                                       # 3 x 2,880 x 4,096 x 2
    _refused(load_model(LLAMA), wide, f"{wide.draft.name} reads hidden states 2,880 wide (its target_hidden_size), "
                                      f"and {LLAMA}'s are 4,096: use an EAGLE head trained for {LLAMA}")
    four = _head(tmp_path, num_aux_hidden_states=4)
    assert _fc_bytes(four, LLAMA) == 134_217_728                                         # 4 x 4,096 x 4,096 x 2
    five = _head(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 9, 17, 25, 30]})
    assert _fc_bytes(five, LLAMA) == 167_772_160                                         # 5 x 4,096 x 4,096 x 2


def test_an_eagle3_heads_fc_input_norms_are_counted(tmp_path):
    """norm_before_fc: input_norm, an RMSNorm over the whole fc input, 3 x 4,096 x 2 B = 24,576 B; fc_norm: one
    RMSNorm [4,096] per aux state, 24,576 B too; both whole on every rank (llama_eagle3.py, both engines)."""
    def total(spec):
        return draft_weight_bytes(load_model(LLAMA), spec, BF16, 1, 1)[0]

    plain = total(Speculative("eagle3", 3, load_model(HEAD)))
    assert total(_head(tmp_path, norm_before_fc=True)) - plain == 24_576          # 3 x 4,096 x 2 B
    assert total(_head(tmp_path, eagle_config={"norm_before_fc": True}, fc_norm=True)) - plain == 49_152  # twice
    assert "+ fc 100,663,296 B (whole on every rank) + fc input norms 24,576 B + q/k/v" in draft_weight_bytes(
        load_model(LLAMA), _head(tmp_path, fc_norm=True), BF16, 1, 1)[1]       # 3 x 4,096 x 4,096 x 2 B, as above


@pytest.mark.parametrize("fields, named", [
    ({"eagle_config": {"use_aux_hidden_state": False}}, "eagle_config.use_aux_hidden_state false"),
    ({"use_aux_norm": True}, "use_aux_norm"),
    ({"bias": True, "use_aux_norm": True}, "use_aux_norm, bias"),
])
def test_an_eagle3_setting_the_engines_read_apart_is_refused(tmp_path, fields, named):
    """vLLM 0.33 builds no fc without aux hidden states; SGLang 0.5.23 reads use_aux_norm as fc_norm and bias as the
    fc's bias, vLLM neither (llama_eagle3.py of each): kvplan names the setting rather than size one reading."""
    head = _head(tmp_path, **fields)
    _refused(load_model(LLAMA), head, f"{head.draft.name} sets {named}, which vLLM and SGLang build differently and "
                                      "kvplan does not size: plan the head as the engine you run reads it, or "
                                      "without drafting")


def test_an_eagle1_head_reads_its_hidden_size_not_an_eagle3_field(tmp_path):
    """EAGLE-1's fc [2H] takes the embedding and the target's state at the head's hidden_size (llama_eagle.py): an
    EAGLE-3 config's target_hidden_size and use_aux_norm are not read, so such a head run as EAGLE-1 on a 4,096-wide
    target is accepted where, as EAGLE-3, the 2,880 field is refused."""
    head = _head(tmp_path, target_hidden_size=2880, use_aux_norm=True)
    eagle1 = Speculative("eagle", 3, head.draft)
    assert check(load_model(LLAMA), eagle1) is eagle1
    with pytest.raises(WorkloadError, match="sets use_aux_norm"):
        check(load_model(LLAMA), head)


def test_a_draft_model_of_another_vocabulary_is_refused_on_vllm():
    # vLLM config/speculative.py `verify_equal_vocab_size_if_draft_model` (0.19.0 :824, 0.33.0 :2040): the draft
    # model's vocab_size must be the target's. gemma-3-1b-it has 262,144 entries and gemma-3-27b-it 262,208 (gemma-2's
    # equal vocabularies are planned: tests/test_mut_vllm_plan.py::test_a_draft_models_layers_are_buckets_of_their_own)
    with pytest.raises(WorkloadError, match=re.escape(
            "the draft model google/gemma-3-1b-it has a vocabulary of 262,144 tokens and google/gemma-3-27b-it one of "
            "262,208: vLLM and SGLang refuse a draft model whose vocab_size is not the target's, so use a draft of "
            "the same tokenizer")):
        plan("google/gemma-3-27b-it", engine="vllm", gpu="H200", max_model_len=4096,
             speculative={"method": "draft_model", "num_speculative_tokens": 3, "model": "google/gemma-3-1b-it"})


def test_a_state_draft_for_an_attention_only_target_is_refused_on_vllm():
    """vLLM 0.33 expects no state layers in a draft model (v1/core/kv_cache_coordinator.py :873-874); its V1 runner
    asserts at start-up (llm_base_proposer.py :1689-1709), and under V2 the draft's own hook sets the Mamba mode and
    k speculative pages kvplan did not plan: falcon-mamba-7b (64 Mamba layers) drafting for falcon-40b-instruct,
    one vocabulary of 65,024 tokens, was planned with one state page a layer."""
    with pytest.raises(WorkloadError, match=re.escape(
            "the draft model tiiuae/falcon-mamba-7b holds mamba state and tiiuae/falcon-40b-instruct none, which "
            "vLLM's draft-model path does not expect (its V1 runner refuses it at start-up) and kvplan does not "
            "plan: use a draft of attention layers")):
        plan("tiiuae/falcon-40b-instruct", engine="vllm", gpu="H200", max_model_len=2048,
             speculative={"method": "draft_model", "num_speculative_tokens": 2, "model": "tiiuae/falcon-mamba-7b"})
    # an attention draft for the same target is planned (falcon-7b-instruct: the same 65,024-token vocabulary)
    p = plan("tiiuae/falcon-40b-instruct", engine="vllm", gpu="H200", max_model_len=2048,
             speculative={"method": "draft_model", "num_speculative_tokens": 2, "model": "tiiuae/falcon-7b-instruct"})
    assert p.kv_cache_tokens > 0


def test_a_draft_of_two_state_kinds_names_both():
    """No bundled family keeps two kinds of state; falcon-mamba-7b with its second layer's Mamba mixer renamed
    gated_deltanet (a hand-built spec) holds both, and the refusal names them in order, joined by "and"."""
    import dataclasses

    from kvplan.planning.engines.spec_decode import check_vllm_draft_state

    mamba = load_model("tiiuae/falcon-mamba-7b")
    layers = list(mamba.layers)
    layers[1] = tuple(dataclasses.replace(s, mixer="gated_deltanet") for s in layers[1])
    two = dataclasses.replace(mamba, layers=tuple(layers), name="hand/two-states")
    with pytest.raises(WorkloadError, match=re.escape("the draft model hand/two-states holds gated_deltanet and mamba "
                                                      "state and tiiuae/falcon-40b-instruct none")):
        check_vllm_draft_state(load_model("tiiuae/falcon-40b-instruct"), Speculative("draft_model", 2, two))


# ----------------------------------------------------------------------------- state-holding drafts on vLLM

QWEN35_MOE, QWEN35_DENSE = "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-27B"


def _qwen35_moe_card(**text) -> dict:
    card = json.loads((REPO / "model_configs" / "Qwen__Qwen3.5-35B-A3B.json").read_text())
    return {**card, "text_config": {**card["text_config"], **text}}


def test_a_draft_state_larger_than_the_targets_padded_page_is_refused():
    """vLLM pads every Mamba state to the target's attention page (cache_config.mamba_page_size_padded, one cache
    config for target and drafter) and asserts the page holds the state (0.33 kv_cache_interface.py :1127).
    Qwen3.5-35B-A3B at TP 2 (model_configs): 2 KV heads of 256 -> 1 a rank, 1 x 256 x 2 x 2 B = 1,024 B a token;
    its gated-DeltaNet state 32 / 2 = 16 value heads x 128 x 128 x 4 B (float32) = 1,048,576 B + conv
    (2 x 16 x 128 + 32 x 128) / 2 = 4,096 channels x (4 - 1 + 1 drafted) x 2 B = 32,768: 1,081,344 B, so the block is
    64 x cdiv(1,081,344, 64 x 1,024) = 1,088 tokens (0.33 'align' mode on an H200: lcm(16, 64) = 64), a
    1,114,112 B page. Qwen3.5-27B drafting (same 248,320-token vocabulary): 48 / 2 = 24 heads x 128 x 128 x 4 B =
    1,572,864 + (2 x 16 x 128 + 48 x 128) / 2 = 5,120 channels x 4 x 2 B = 40,960: 1,613,824 B, more than the page."""
    with pytest.raises(WorkloadError, match=_exact(
            "the draft model's Mamba/linear state is 1,613,824 B a layer on each GPU, more than the 1,114,112 B page "
            "vLLM pads the target's states to (1,088-token attention blocks x 1,024 B a token), and vLLM stops at "
            "start-up on it (MambaSpec.page_size_bytes asserts the padded page holds the state): use a draft model "
            "whose state is at most 1,114,112 B a layer on each GPU, such as a smaller one of the target's family")):
        plan(QWEN35_MOE, engine="vllm", gpu="H200", num_gpus=2, max_model_len=32768,
             speculative={"method": "draft_model", "num_speculative_tokens": 1, "model": QWEN35_DENSE})


def test_the_hybrid_block_is_the_targets_whatever_the_draft():
    """vLLM sizes the hybrid block from the target's config alone (platforms/interface.py `_align_hybrid_block_size`
    reads model_config). A draft of 35B-A3B's card with 4 KV heads (2 a rank at TP 2: 2,048 B a token) and 16 value
    heads (a 548,864 B state with its drafted conv column): the block stays the target's 1,088 tokens (above), not
    64 x cdiv(1,081,344, 64 x 2,048) = 576; the draft's 2,228,224 B attention page (1,088 x 2,048) is then the
    largest, so the target's attention blocks double (unify_kv_cache_spec_page_size) and every state is padded to
    it."""
    draft = load_model(_qwen35_moe_card(num_key_value_heads=4, linear_num_value_heads=16, num_hidden_layers=8,
                                        layer_types=None))
    spec = {"method": "draft_model", "num_speculative_tokens": 1, "model": draft}
    p = plan(QWEN35_MOE, engine="vllm", gpu="H200", num_gpus=2, max_model_len=32768, speculative=spec)
    alone = plan(QWEN35_MOE, engine="vllm", gpu="H200", num_gpus=2, max_model_len=32768)
    assert p.block_size == alone.block_size == 1088
    assert "full layers' blocks hold 2176 tokens, the others 1088" in " ".join(p.notes)


def _mamba_130m():
    """state-spaces/mamba-130m-hf's shape on mamba-2.8b-hf's card (one 50,280-token vocabulary): 24 layers,
    hidden 768, intermediate 1,536, state 16, conv kernel 4."""
    card = json.loads((REPO / "model_configs" / "state-spaces__mamba-2.8b-hf.json").read_text())
    return load_model({**card, "hidden_size": 768, "num_hidden_layers": 24, "intermediate_size": 1536,
                       "_name_or_path": "hand/mamba-130m"})


@pytest.mark.parametrize("version, blocks, block_bytes, concurrency", [
    # 0.28: Mamba states of any size are one type (MambaSpec.is_uniform_with_collection compares no page): one
    # group, a block every layer's page, 64 x 215,040 + 24 x 64,512 = 15,310,848 B; 3 pages a request
    ("0.28.0", 4580, 15_310_848, 4580 / 3),
    # 0.33: a page of its type (0.33 kv_cache_interface.py :1163), so 64 target and 24 draft layers are two
    # buckets; 64 >= 1.5 x 24, so groups of 24: 3 of the target's (8 padding layers) and the draft's, each state
    # padded to 215,040 B (kv_cache_planning.py :380): a block 24 x 215,040 = 5,160,960 B, and a request takes its
    # 3 pages in each of the 4 groups
    ("0.33.0", 13580, 5_160_960, 13580 / 12),
])
def test_a_mamba_draft_beside_a_mamba_target_of_another_state_size(version, blocks, block_bytes, concurrency):
    """mamba-2.8b-hf drafted by a 130m-shaped model, 2 tokens a step, mamba_cache_mode 'none': 1 + 2 state pages a
    request. vLLM keeps kernel - 1 + k = 5 conv columns: 2.8b 5,120 x 5 x 2 B = 51,200 + SSM 5,120 x 16 x 2 B =
    163,840 -> 215,040 B a layer; 130m 1,536 x 5 x 2 = 15,360 + 1,536 x 16 x 2 = 49,152 -> 64,512 B."""
    p = plan("state-spaces/mamba-2.8b-hf", engine="vllm", gpu="H100", max_model_len=4096, engine_version=version,
             speculative={"method": "draft_model", "num_speculative_tokens": 2, "model": _mamba_130m()})
    assert (p.num_blocks, p.max_concurrency) == (blocks, pytest.approx(concurrency, abs=1e-4))
    assert p.num_blocks == p.kv_pool_bytes // block_bytes
