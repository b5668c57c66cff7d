"""Checkpoint formats priced from their quantization_config: ModelOpt (FP8 / NVFP4 / MIXED_PRECISION), AutoRound,
Gated DeltaNet sub-projection skips, and the published checkpoints they are checked against.

Every expected byte count is hand arithmetic on the tensors vLLM 0.33 registers for the format (file and class
named in each case), not a figure taken from kvplan."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

import kvplan
from kvplan.config.parse import parse_dims
from kvplan.config.quant import parse_quant
from kvplan.errors import ConfigError, UnsupportedArchitectureError
from kvplan.weights.rule import matrix_bytes, stored_bytes_by_rule, weights_bytes

ROOT = Path(__file__).resolve().parents[1]
NVIDIA_27B = json.loads((ROOT / "model_configs" / "nvidia__Qwen3.6-27B-NVFP4.json").read_text())


def _modelopt(algo: str, **extra) -> dict:
    return {"quant_method": "modelopt", "quant_algo": algo, **extra}


# [4096, 4096], per vLLM 0.33 quantization/modelopt.py `resolve` and its QuantKeySchemes
@pytest.mark.parametrize("algo, expected", [
    ("FP8", 4096 * 4096 + 4 + 4),                           # e4m3 weight + fp32 weight_scale + fp32 input_scale
    ("FP8_PER_CHANNEL_PER_TOKEN", 4096 * 4096 + 4 * 4096),  # + fp32 weight_scale per output row, dynamic input
    ("FP8_PB_WO", 4096 * 4096 + 4 * 32 * 32),               # + fp32 scale per 128 x 128 block
    ("NVFP4", 4096 * 2048 + 4096 * 256 + 4 + 4),            # uint8 [4096, 2048] + e4m3 [4096, 4096 / 16] + 2 fp32
    ("W4A16_NVFP4", 4096 * 2048 + 4096 * 256 + 4 + 4),      # the same tensors as stored (input_scale kept)
    ("MXFP8", 4096 * 4096 + 4096 * 128),                    # e4m3 weight + a uint8 e8m0 scale per 32
])
def test_modelopt_matrix_bytes(algo, expected):
    assert matrix_bytes(parse_quant(_modelopt(algo, group_size=16), []), 4096, 4096) == expected


def test_both_modelopt_shapes_read_alike():
    """config.json's quantization_config (ignore, kv_cache_scheme) and the older hf_quant_config.json shape
    (quantization.exclude_modules, kv_cache_quant_algo), with or without quant_method, are one scheme."""
    flat = _modelopt("NVFP4", group_size=16, ignore=["lm_head"],
                     kv_cache_scheme={"dynamic": False, "num_bits": 8, "type": "float"})
    nested = {"producer": {"name": "modelopt", "version": "0.29.0"},
              "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                               "exclude_modules": ["lm_head"]}}
    a, b, c = parse_quant(flat, []), parse_quant({**nested, "quant_method": "modelopt"}, []), parse_quant(nested, [])
    assert a == b == c
    assert a.kv_cache_dtype == "fp8" and a.skip == frozenset({("lm_head", -1)}) and a.group_size == 16


def test_modelopt_refusals_are_one_line():
    with pytest.raises(UnsupportedArchitectureError, match="quant_algo 'W4A8_AWQ' has no byte rule"):
        parse_quant(_modelopt("W4A8_AWQ"), [])
    with pytest.raises(ConfigError, match="quantized_layers"):
        parse_quant(_modelopt("MIXED_PRECISION"), [])


def _nv(rows: int, cols: int) -> int:
    """ModelOpt NVFP4 [rows, cols] as stored: uint8 pairs + e4m3 scale per 16 + weight_scale_2 + input_scale."""
    return rows * cols // 2 + rows * cols // 16 + 8


def _f8(rows: int, cols: int) -> int:
    return rows * cols + 8  # FP8 per tensor: weight + fp32 weight_scale + fp32 input_scale


def test_nvidia_qwen36_27b_mixed_precision_by_group():
    """nvidia/Qwen3.6-27B-NVFP4 (MIXED_PRECISION, quantized_layers): MLPs and lm_head W4A16_NVFP4 (group 16),
    attention and the Gated DeltaNet projections in_proj_qkv / in_proj_z / out_proj FP8, everything else bf16
    (in_proj_b and in_proj_a, which quantized_layers does not name, embeddings, norms, convolutions)."""
    est = weights_bytes(parse_dims(NVIDIA_27B))
    groups = dict(est.group_bytes)
    h, inter, vocab = 5120, 17408, 248320
    assert groups["mlp"] == 64 * (2 * _nv(inter, h) + _nv(h, inter))
    # NVFP4 by hand: 248,320 x 5,120 / 2 B of 4-bit weights + one fp8 scale per 16 (79,462,400) + 2 fp32 scalars
    assert groups["lm_head"] == _nv(vocab, h) == 715_161_608
    assert groups["embeddings"] == vocab * h * 2
    # 16 gated-attention layers: q with its output gate 24 x 256 x 2, k and v 4 x 256, o [5120, 6144],
    # q_norm and k_norm 256 each in bf16
    attention = _f8(2 * 24 * 256, h) + 2 * _f8(4 * 256, h) + _f8(h, 24 * 256) + 2 * 256 * 2
    assert groups["attention"] == 16 * attention
    # 48 Gated DeltaNet layers: in_proj_qkv + in_proj_z fused [2 x 2048 + 2 x 6144, H] fp8, in_proj_b/a [2 x 48, H]
    # bf16, conv1d [(2 x 2048 + 6144) x 4] + A_log, dt_bias (48 each) + norm (128) bf16, out_proj [H, 6144] fp8
    key, value = 16 * 128, 48 * 128
    mixer = (_f8(2 * key + 2 * value, h) + 2 * 48 * h * 2 + ((2 * key + value) * 4 + 2 * 48 + 128) * 2
             + _f8(h, value))
    assert groups["mixer"] == 48 * mixer
    assert est.quant_method == "modelopt" and any("MIXED_PRECISION" in r for r in est.rules)


def test_nvidia_qwen36_27b_plans_with_the_checkpoints_fp8_kv():
    """The refusal is closed, and vLLM's --kv-cache-dtype auto takes the checkpoint's kv_cache_scheme
    (fp8, 0.19-0.33 resolve_kv_cache_dtype_string): 16 attention layers x 4 KV heads x 256 x 2 x 1 B a token."""
    plan = kvplan.plan("nvidia/Qwen3.6-27B-NVFP4", gpu="H100", max_model_len=4096, engine="vllm")
    assert plan.fits and plan.kv_cache_dtype == "float8_e4m3"
    assert "--kv-cache-dtype fp8" in plan.vllm_command
    explicit = kvplan.plan("nvidia/Qwen3.6-27B-NVFP4", gpu="H100", max_model_len=4096, engine="vllm", kv_dtype="bf16")
    assert explicit.kv_cache_dtype == "bfloat16"
    plain = kvplan.plan("Qwen/Qwen3-8B", gpu="H100", max_model_len=4096, engine="vllm")
    assert plain.kv_cache_dtype == "bfloat16"  # no ModelOpt scheme: auto stays the model dtype
    # SGLang 0.5.16-0.5.23 mem_cache/kv_cache_dtype.py: kv_cache_quant_algo FP8 -> float8_e4m3fn for auto
    sglang = kvplan.plan("nvidia/Qwen3.6-27B-NVFP4", gpu="H100", max_model_len=4096, engine="sglang")
    assert sglang.kv_cache_dtype == "float8_e4m3"
    older = kvplan.plan("nvidia/Qwen3.6-27B-NVFP4", gpu="H100", max_model_len=4096, engine="vllm",
                        engine_version="0.11.0")
    assert older.kv_cache_dtype == "bfloat16"  # before the oldest source read: the model dtype, as before


def test_nvidia_qwen36_27b_against_vllms_log():
    """vLLM 0.23.1rc1 on a GB10 printed 'Model loading took 19.78 GiB' for this checkpoint (validation/
    vllm_holdout.csv, fs61544841280): the rule's resident weights, towers included, are 0.6 % below it."""
    plan = kvplan.plan("nvidia/Qwen3.6-27B-NVFP4", gpu="H100", max_model_len=4096, engine="vllm")
    logged = 19.78 * 2**30
    assert abs(plan.weights_bytes - logged) / logged < 0.007


# ------------------------------------------------ ModelOpt exclude_modules as nvidia's own checkpoints write them
# vLLM 0.33 quantization/modelopt.py: get_quant_method packs every LinearBase / ParallelLMHead / RoutedExperts unless
# is_layer_excluded(prefix) (the module's own name exactly, as a substring, or as an fnmatch wildcard);
# apply_vllm_mapper reads "module_path*" as the tree rooted at module_path. The quantization configs below are the
# checkpoints' own, written out from their stated structure (irregular entries quoted) as read in github
# ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce, folder
# aic-core/src/aiconfigurator_core/model_configs/ (file and blob named at each), on the bundled configs of the same
# architecture (each checkpoint's config.json there agrees with the bundled one in every shape field).

def _hf_quant(producer: str, algo: str, exclude: list[str], **extra) -> dict:
    """An hf_quant_config.json (the older ModelOpt shape vLLM reads when config.json has no quantization_config):
    kv_cache_quant_algo FP8 in every checkpoint here."""
    return {"producer": {"name": "modelopt", "version": producer},
            "quantization": {"quant_algo": algo, "kv_cache_quant_algo": "FP8", **extra, "exclude_modules": exclude}}


def _bundled_with(bundled: str, quantization_config: dict) -> dict:
    config = json.loads((ROOT / "model_configs" / f"{bundled}.json").read_text())
    config.pop("quantization_config", None)
    return {**config, "quantization_config": quantization_config}


# nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json (blob 74d1fc37da95): NVFP4, group_size 16, 246 exclude_modules:
# "lm_head", q_a_proj / q_b_proj / kv_a_proj_with_mqa / kv_b_proj of layers 0-60 (never o_proj), "model.layers.61*".
DSV31_EXCLUDE = ["lm_head", *(f"model.layers.{i}.self_attn.{p}" for i in range(61)
                              for p in ("kv_a_proj_with_mqa", "kv_b_proj", "q_a_proj", "q_b_proj")), "model.layers.61*"]
# nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4_hf_quant_config.json (blob 8fe27a960d79): NVFP4, group_size 16,
# 60 exclude_modules: "lm_head"; mixer.q/k/v/o_proj of the 6 attention layers and mixer.in_proj / out_proj of the
# Mamba layer just before each; mixer.conv1d of all 23 Mamba layers ("M" in hybrid_override_pattern).
NEMOTRON_ATTENTION = (5, 12, 19, 26, 33, 42)
NEMOTRON_MAMBA = (0, 2, 4, 7, 9, 11, 14, 16, 18, 21, 23, 25, 28, 30, 32, 35, 37, 39, 41, 44, 46, 48, 50)
NEMOTRON_EXCLUDE = ["lm_head", *(f"backbone.layers.{i}.mixer.{p}" for a in NEMOTRON_ATTENTION
                                 for i, p in [(a - 1, "in_proj"), (a - 1, "out_proj"),
                                              *((a, f"{x}_proj") for x in "qkvo")]),
                    *(f"backbone.layers.{i}.mixer.conv1d" for i in NEMOTRON_MAMBA)]
# nvidia--Kimi-K2.6-NVFP4_config.json (blob 555e443a8b9e): quantization_config quant_method modelopt, quant_algo
# NVFP4, one config group (Linear, 4-bit float weights and inputs, group_size 16), kv_cache_scheme 8-bit float, and
# 124 ignore entries: "language_model.lm_head", "language_model.model.layers.0*", mlp.shared_experts* and self_attn*
# of layers 1-60, "mm_projector*", "vision_tower*".
KIMI_K26_QUANT = {
    "quant_method": "modelopt", "quant_algo": "NVFP4",
    "producer": {"name": "modelopt", "version": "0.0.1.dev752+gbd4fc3a65.d20260504"},
    "config_groups": {"group_0": {"targets": ["Linear"], **{k: {"dynamic": False, "num_bits": 4, "type": "float",
                                                                "group_size": 16}
                                                            for k in ("weights", "input_activations")}}},
    "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
    "ignore": ["language_model.lm_head", "language_model.model.layers.0*",
               *(f"language_model.model.layers.{i}.{m}*" for i in range(1, 61) for m in ("mlp.shared_experts",
                                                                                         "self_attn")),
               "mm_projector*", "vision_tower*"]}
# nvidia--Qwen3.6-27B-NVFP4_hf_quant_config.json (blob 0563e0c8d074): MIXED_PRECISION, exclude_modules "mtp*",
# "mtp.layers.0*", and 401 quantized_layers: "lm_head" and mlp.gate/up/down_proj of all 64 layers W4A16_NVFP4
# (group_size 16), linear_attn.in_proj_qkv / in_proj_z / out_proj of the 48 Gated DeltaNet layers and
# self_attn.q/k/v/o_proj of the 16 full-attention layers (3, 7, ..., 63) FP8.
_NVFP4_16, _FP8 = {"group_size": 16, "quant_algo": "W4A16_NVFP4"}, {"quant_algo": "FP8"}
QWEN36_27B_LAYERS = {
    **{f"model.language_model.layers.{i}.{m}": _FP8 for i in range(64)
       for m in ([f"self_attn.{x}_proj" for x in "qkvo"] if i % 4 == 3
                 else ["linear_attn.out_proj", "linear_attn.in_proj_qkv", "linear_attn.in_proj_z"])},
    **{f"model.language_model.layers.{i}.mlp.{x}_proj": _NVFP4_16 for i in range(64) for x in ("gate", "up", "down")},
    "lm_head": _NVFP4_16}


@pytest.mark.parametrize("pattern, expected", [
    ("model.layers.0.post_attention_layernorm", set()),          # no Linear: was read as layer 0's attention
    ("model.layers.0.self_attn.kv_a_layernorm", set()),
    ("model.norm", set()),                                       # was "names no weight group kvplan knows"
    ("backbone.layers.0.mixer.conv1d", set()),                   # was the whole Mamba mixer of layer 0
    ("model.layers.61*", {(g, 61) for g in ("attention", "mixer", "mlp", "experts", "shared_experts", "router")}),
    ("language_model.model.layers.0*", {(g, 0) for g in ("attention", "mixer", "mlp", "experts",
                                                         "shared_experts", "router")}),
    ("mtp*", {("mtp", -1)}), ("mtp.layers.0*", {("mtp", -1)}),
    ("model.layers.3.self_attn.kv_b_proj", {("attention/kv_b_proj", 3)}),   # that projection, not o_proj beside it
    ("model.layers.3.self_attn.indexer*", {("attention/indexer", 3)}),
    ("backbone.layers.5.mixer.q_proj", {("attention/q_proj", 5)}),          # Nemotron-H's attention is a "mixer"
    ("backbone.layers.1.mixer.gate", {("router", 1)}),
    ("model.layers.2.self_attn*", {("attention", 2)}),
    ("model.language_model.layers.0.linear_attn*", {("mixer", 0)}),
])
def test_modelopt_exclude_entries(pattern, expected):
    notes: list[str] = []
    q = parse_quant(_modelopt("NVFP4", exclude_modules=[pattern], group_size=16), notes)
    assert set(q.skip) == expected and not notes


def test_nvidia_deepseek_v31_nvfp4_packs_o_proj_and_keeps_the_mtp_block():
    """nvidia/DeepSeek-V3.1-NVFP4's own hf_quant_config.json lists q_a, q_b, kv_a and kv_b of every layer and not
    o_proj: each of the 61 layers keeps 69,664,768 MLA weights and its two norms in bf16 and packs o_proj [7168, 16384]
    (66,060,296 B; 234,881,024 in bf16, +10.3 GB over the model, 2.6 %, when a sub-projection excluded the group).
    "model.layers.61*" keeps the MTP block in bf16: the stored bytes add the bf16 module (11,610,067,968 parameters,
    its own embed_tokens and head 2 x 129,280 x 7,168, the router's 256 x 7,168 in float32)."""
    shape = parse_dims(_bundled_with("deepseek-ai__DeepSeek-V3", _hf_quant("0.22.1.dev750+g59a703703", "NVFP4",
                                                                     DSV31_EXCLUDE, group_size=16)))
    est = weights_bytes(shape)
    groups = dict(est.group_bytes)
    # q_a [1536, 7168], q_b [128 x 192, 1536], kv_a [512 + 64, 7168], kv_b [128 x 256, 512]
    mla = 1536 * 7168 + 24576 * 1536 + 576 * 7168 + 32768 * 512
    assert groups["attention"] == 61 * (2 * (mla + 1536 + 512) + _nv(7168, 16384)) == 12_529_029_608
    assert groups["experts"] == 58 * 256 * 3 * _nv(2048, 7168)
    assert stored_bytes_by_rule(shape) - est.total_bytes == 2 * (11_610_067_968 + 2 * 129280 * 7168) + 256 * 7168 * 2
    assert not est.notes  # "model.layers.61*" is read, not noted as unknown
    assert ("left unquantized by the config: attention/kv_a_proj_with_mqa (layers 0-60), attention/kv_b_proj "
            "(layers 0-60), attention/q_a_proj (layers 0-60), attention/q_b_proj (layers 0-60), lm_head, whole block "
            "(layer 61)") in est.rules


def test_nvidia_nemotron_3_nano_nvfp4_keeps_attention_and_the_mamba_layers_before_it():
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4's own hf_quant_config.json: the attention layers' mixer.q/k/v/o_proj
    and in_proj / out_proj of the 6 Mamba layers before them stay bf16 ("keeps the attention layers and the Mamba
    layers that feed them in BF16", its card); the other 17 Mamba layers pack in_proj [10304, 2688] and out_proj
    [2688, 4096], their conv1d (excluded everywhere) and A / D / norm in bf16 as always. Before: attention packed
    (78,962,880 B, not 280,756,224) and every Mamba layer bf16 (conv1d read as the whole mixer)."""
    shape = parse_dims(_bundled_with("nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                     _hf_quant("0.29.0", "NVFP4", NEMOTRON_EXCLUDE, group_size=16)))
    est = weights_bytes(shape)
    groups = dict(est.group_bytes)
    # 6 attention layers: q [32 x 128, 2688], k and v [2 x 128, 2688], o [2688, 4096]
    assert groups["attention"] == 6 * 2 * (2688 * (4096 + 2 * 256) + 2688 * 4096) == 280_756_224
    rest = 2 * (6144 * 4 + 6144 + 3 * 64 + 4096)  # conv1d [6144, 4] + bias, dt_bias / A_log / D [64], norm [4096]
    bf16 = 2 * (10304 * 2688 + 2688 * 4096) + rest  # in_proj rows 4096 + 6144 + 64
    assert groups["mixer"] == 6 * bf16 + 17 * (_nv(10304, 2688) + _nv(2688, 4096) + rest) == 836_234_640
    assert not est.notes
    attention = "(layers 5, 12, 19, 26, 33, 42)"
    assert (f"left unquantized by the config: attention/k_proj {attention}, attention/o_proj {attention}, "
            f"attention/q_proj {attention}, attention/v_proj {attention}, lm_head, mixer (layers 4, 11, 18, 25, 32, "
            "41)") in est.rules


def test_nvidia_kimi_k26_nvfp4_keeps_its_dense_first_block():
    """nvidia/Kimi-K2.6-NVFP4's own config.json: "language_model.model.layers.0*" leaves the dense first block whole
    (its MLP [18432, 7168] x 3 in bf16; before, the entry was noted as unknown and the MLP packed), self_attn* and
    mlp.shared_experts* every layer's attention and shared expert, language_model.lm_head the head."""
    # its config.json is the bundled Kimi-K2.5's but for eos_token_id (163586, no shape), text_config model_type
    # deepseek_v3 (kimi_k2 there) and this quantization_config at the top instead of K2.5's int4 one in text_config
    k25 = json.loads((ROOT / "model_configs" / "moonshotai__Kimi-K2.5.json").read_text())
    text = {k: v for k, v in k25["text_config"].items() if k != "quantization_config"}
    est = weights_bytes(parse_dims({**k25, "text_config": {**text, "model_type": "deepseek_v3"},
                                    "quantization_config": KIMI_K26_QUANT}))
    groups = dict(est.group_bytes)
    assert groups["mlp"] == 3 * 18432 * 7168 * 2
    # its text_config: 60 MoE layers, one shared expert of moe_intermediate_size 2048, vocab_size 163,840
    assert groups["shared_experts"] == 60 * 3 * 2048 * 7168 * 2 and groups["lm_head"] == 163840 * 7168 * 2
    assert groups["experts"] == 60 * 384 * 3 * _nv(2048, 7168)
    assert not any("names no weight group" in n for n in est.notes)


def test_nvidia_qwen36_27b_hf_quant_config_reads_as_its_config_json():
    """The checkpoint's hf_quant_config.json (quantization.quantized_layers, kv_cache_quant_algo FP8) and the
    bundled config.json's quantization_config (the same 401 entries, kv_cache_scheme) are one scheme: 64 MLPs and
    lm_head W4A16_NVFP4, 48 Gated DeltaNet mixers FP8, and q / k / v / o of the 16 attention layers FP8, each
    projection under its own name."""
    assert QWEN36_27B_LAYERS == NVIDIA_27B["quantization_config"]["quantized_layers"]  # the 401 entries, as written
    hf = parse_quant(_hf_quant("0.45.0", "MIXED_PRECISION", ["mtp*", "mtp.layers.0*"],
                               quantized_layers=QWEN36_27B_LAYERS), [])
    assert hf == parse_quant(NVIDIA_27B["quantization_config"], [])
    kinds: dict[tuple[str, str, str], int] = {}
    for (group, _, part), scheme in hf.layers:
        kinds[(group, part, scheme.algo)] = kinds.get((group, part, scheme.algo), 0) + 1
    assert kinds == {("mlp", "", "W4A16_NVFP4"): 64, ("lm_head", "", "W4A16_NVFP4"): 1, ("mixer", "", "FP8"): 48,
                     **{("attention", p, "FP8"): 16 for p in ("q_proj", "k_proj", "v_proj", "o_proj")}}
    assert hf.kv_cache_dtype == "fp8"


# ---------------------------------------------------------------------------------------------- AutoRound


@pytest.mark.parametrize("method", ["auto-round", "intel/auto-round", "inc"])
def test_auto_round_gptq_packing(method):
    """auto-round 0.16 qlinear_torch_zp (auto_round:auto_gptq, vLLM 0.33 inc_wna16_linear.py): int32 qweight
    [4096 x 4 / 32, 4096] + int32 qzeros [32 groups, 4096 x 4 / 32] + fp16 scales [32, 4096], no g_idx."""
    qc = {"quant_method": method, "bits": 4, "group_size": 128, "sym": True,
          "extra_config": {"model.layers.0.mlp.down_proj": {"bits": 16}}}
    q = parse_quant(qc, [])
    # int32 qweight 512 x 4,096 x 4 + int32 qzeros 32 x 512 x 4 + fp16 scales 32 x 4,096 x 2 (the docstring)
    assert matrix_bytes(q, 4096, 4096) == 512 * 4096 * 4 + 32 * 512 * 4 + 32 * 4096 * 2 == 8_716_288
    assert q.skip == frozenset({("mlp", 0), ("lm_head", -1)})  # bits 16 in extra_config; lm_head never packed


def test_auto_round_awq_packing_and_refusals():
    q = parse_quant({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
                     "packing_format": "auto_round:auto_awq"}, [])
    # WQLinear_GEMM: qweight [4096, 4096 / 8] int32 + qzeros [32, 512] int32 + fp16 scales [32, 4096]
    assert matrix_bytes(q, 4096, 4096) == 4096 * 512 * 4 + 32 * 512 * 4 + 32 * 4096 * 2
    with pytest.raises(UnsupportedArchitectureError, match="auto-round data_type 'mx_fp'"):
        parse_quant({"quant_method": "auto-round", "bits": 4, "group_size": 32, "data_type": "mx_fp"}, [])


# ---------------------------------------------------------------------------------------------- skips


def test_deltanet_b_and_a_projections_can_be_skipped_alone():
    """RedHatAI-style ignore lists name linear_attn.in_proj_b / in_proj_a: only those [48, 5120] projections
    stay bf16, not the whole mixer."""
    text = {**NVIDIA_27B["text_config"], "model_type": "qwen3_5_text"}
    group = {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                         "scale_dtype": "torch.float8_e4m3fn"}}
    qc = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"g": group}}
    plain = weights_bytes(parse_dims({**text, "quantization_config": {**qc, "ignore": ["lm_head"]}}))
    skipped = weights_bytes(parse_dims({**text, "quantization_config": {
        **qc, "ignore": ["lm_head", "re:.*linear_attn.in_proj_b$", "re:.*linear_attn.in_proj_a$"]}}))
    assert parse_quant({**qc, "ignore": ["re:.*in_proj_a$"]}, []).skip == frozenset({("mixer/in_proj_ba", -1)})
    nvfp4_ba = 96 * 5120 // 2 + 96 * 5120 // 16 + 4  # compressed-tensors: + fp32 weight_global_scale
    diff = dict(skipped.group_bytes)["mixer"] - dict(plain.group_bytes)["mixer"]
    assert diff == 48 * (96 * 5120 * 2 - nvfp4_ba)


# ---------------------------------------------------------------------------------------------- published sizes


def test_deepseek_r1_fp8_block_within_half_a_percent_of_its_shards():
    """fp8 128 x 128 blocks: the sum of DeepSeek-R1's 163 shard sizes (Git LFS pointers of a git copy of the HF
    repo, tools/checkpoint_sources/deepseek-ai__DeepSeek-R1) against the rule's stored bytes (MTP layer included,
    as the checkpoint holds it). The shards also carry their JSON headers, a few hundred KB each."""
    lines = (ROOT / "tools/checkpoint_sources/deepseek-ai__DeepSeek-R1/lfs_pointer_sizes.txt").read_text().split("\n")
    published = sum(int(line.split()[1]) for line in lines if line.strip())
    # the sum of the 163 LFS pointer sizes in that file: the published figure itself
    assert published == 688_586_727_753
    rule = stored_bytes_by_rule(kvplan.load_model("deepseek-ai/DeepSeek-R1").require_arch())
    assert abs(rule - published) / published < 0.005


def test_kimi_k2_thinking_is_planned_int4():
    """The bundled Kimi-K2-Thinking now carries its int4 quantization_config (model_configs/SOURCES.md says where
    it was quoted): 60 MoE layers x 384 routed experts x 3 pack-quantized [2048, 7168]-sized matrices, each int32
    words [rows, cols / 8] + int64 weight_shape [2] + bf16 scales per 32 inputs; attention, shared experts, the
    dense layer-0 MLP, embeddings and lm_head bf16."""
    est = weights_bytes(kvplan.load_model("moonshotai/Kimi-K2-Thinking").require_arch())
    one = 2048 * 7168 // 8 * 4 + 16 + 2048 * 7168 // 32 * 2  # the same for [2048, 7168] and [7168, 2048]
    assert dict(est.group_bytes)["experts"] == 60 * 384 * 3 * one == 570_761_994_240
    assert est.total_bytes == 594_536_759_296  # 2,053,146,812,416 B when it was planned as bf16


KIMI_SOURCES = ROOT / "tools/checkpoint_sources"
TABLE_BYTES = {"BF16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1}


def _table(folder: str) -> tuple[list, dict]:
    """A published per-tensor table (tools/checkpoint_sources/<folder>/tensor_table.json, SOURCE.txt there): rows of
    name, tensor count, shape, safetensors dtype, as a model inspection report printed them."""
    data = json.loads((KIMI_SOURCES / folder / "tensor_table.json").read_text())
    return data["rows"], data["report_totals"]


def _sum(rows: list) -> tuple[int, int, int]:
    """(bytes, elements, tensors) of table rows."""
    return (sum(n * math.prod(s) * TABLE_BYTES[d] for _, n, s, d in rows),
            sum(n * math.prod(s) for _, n, s, _ in rows), sum(n for _, n, _, _ in rows))


def test_kimi_k2_instruct_fp8_blocks_against_its_published_tensor_table():
    """fp8 128 x 128 blocks, Kimi-K2-Instruct (the verbatim config.json with its quantization_config, from the same
    report): the table's 38 rows give the report's own totals exactly (139,644 tensors, 1,026,470,731,056
    parameters, 958.49 GiB), so the transcription is whole. The rule is +330,294,608 B (+0.032 %) over it, all of it
    named: transformers keeps the router weight [384, 7,168] of the 60 MoE layers in float32
    (_keep_in_fp32_modules_strict), which the checkpoint stores in bf16 (+2 B each), and the checkpoint carries 61
    bf16 rotary_emb.inv_freq [56] tensors nobody loads (-6,832 B)."""
    rows, totals = _table("moonshotai__Kimi-K2-Instruct")
    published, params, tensors = _sum(rows)
    assert (tensors, params) == (totals["tensors"], totals["parameters"]) == (139_644, 1_026_470_731_056)
    assert f"{published / 2**30:.2f}" == totals["tensor_bytes_gib"] == "958.49"
    assert published == 1_029_173_256_720   # the report's 38-row tensor table summed (958.49 GiB as it prints)
    model = kvplan.load_model("moonshotai/Kimi-K2-Instruct")
    rule = stored_bytes_by_rule(model.require_arch())
    assert abs(rule - published) / published < 0.005
    assert rule - published == 60 * 384 * 7168 * 2 - 61 * 56 * 2 == 330_294_608
    assert model.checkpoint_total.total_bytes == published  # the bundled record is this table's sum
    # the file total the report prints, 958.51 GiB (so 958.505 to 958.515), is the tensors plus the 61 files' JSON
    # headers: 13.6 to 24.4 MB, 97 to 175 B for each of the 139,644 entries (name, dtype, shape, offsets)
    headers = (958.505 * 2**30 - published, 958.515 * 2**30 - published)
    assert 90 * tensors < headers[0] < headers[1] < 180 * tensors


def test_kimi_k25_int4_experts_against_its_published_tensor_table():
    """compressed-tensors int4 pack-quantized (group 32, symmetric), Kimi-K2.5: the table reproduces the report's
    208,550 tensors, 170,738,182,128 parameters and 554.27 GiB. The rule's language model is +330,854,400 B over the
    table's: the float32 routers again (+330,301,440) and weight_shape priced int64 [2] as vLLM registers it, where
    the checkpoint stores int32 [2] (+8 B x 69,120). The MoonViT tower (942,287,840 B) is what the rule cannot count
    (remote code only): -0.103 % overall, inside half a percent."""
    rows, totals = _table("moonshotai__Kimi-K2.5")
    published, params, tensors = _sum(rows)
    assert (tensors, params) == (totals["tensors"], totals["parameters"]) == (208_550, 170_738_182_128)
    assert f"{published / 2**30:.2f}" == totals["tensor_bytes_gib"] == "554.27"
    language = _sum([r for r in rows if r[0].startswith("language_model.")])[0]
    assert published - language == 942_287_840
    rule = stored_bytes_by_rule(kvplan.load_model("moonshotai/Kimi-K2.5").require_arch())
    # hand arithmetic (docstring): the 60 routers [384 experts, 7,168] in float32 where the table has them bf16,
    # 60 x 384 x 7,168 x 2 B = 330,301,440, plus weight_shape int64 [2] against the checkpoint's int32 [2]:
    # 60 layers x 384 experts x 3 projections x 8 B = 552,960 (69,120 tensors)
    assert rule - language == 60 * 384 * 7168 * 2 + 60 * 384 * 3 * 8 == 330_854_400
    assert abs(rule - published) / published < 0.005


def test_kimi_k2_thinking_against_its_published_download_sizes():
    """Kimi-K2-Thinking's checkpoint as two deployment notes print it (github jwt625/PlayGround@97232dde117484b3
    20251107_kimi_k2_thinking/DEPLOYMENT_SUMMARY.md: "Size: 554 GB (62 safetensors files)", du's GiB rounded up, so
    553 to 554 GiB; README.md there: "du -sh ... Expected: ~594 GB", decimal). The rule's 594,536,759,296 B is
    553.71 GiB (inside du's rounding) and 594.54 GB (0.09 % over "~594"), well within 2 %. The same int4 text model
    in Kimi-K2.5's table is 594,205,904,896 B (553.39 GiB), the rule +0.056 % over it for the reasons above."""
    rule = stored_bytes_by_rule(kvplan.load_model("moonshotai/Kimi-K2-Thinking").require_arch())
    assert 553 * 2**30 < rule <= 554 * 2**30
    assert abs(rule / 1e9 - 594) < 1  # "~594 GB": 594.54 GB, 0.09 % off the quoted figure
    assert abs(rule - 554 * 2**30) / (554 * 2**30) < 0.02
    rows, _ = _table("moonshotai__Kimi-K2.5")
    text = _sum([r for r in rows if r[0].startswith("language_model.")])[0]
    # published: "Size: 554 GB (62 safetensors files)" (jwt625/PlayGround@97232dde DEPLOYMENT_SUMMARY.md, a du figure)
    assert 553 * 2**30 < text <= 554 * 2**30 and rule - text == 330_854_400


def test_qwen3_next_checkpoint_holds_an_mtp_layer_its_config_does_not_name():
    """Qwen3-Next-80B-A3B-Instruct's published tensor table (all bf16) reproduces its report's 75,944 tensors and
    81,324,862,720 parameters; 1,650,471,424 of them are `mtp.*`, one MTP layer the config names nowhere (vLLM 0.33
    qwen3_next_mtp.py defaults num_nextn_predict_layers to 1). The rule's stored bytes hold it, without an
    embed_tokens / head copy of its own (the table has none): exactly the table."""
    rows, totals = _table("Qwen__Qwen3-Next-80B-A3B-Instruct")
    published, params, tensors = _sum(rows)
    assert (tensors, params) == (totals["tensors"], totals["parameters"]) == (75_944, 81_324_862_720)
    mtp = _sum([r for r in rows if r[0].startswith("mtp.")])
    assert mtp[:2] == (3_300_942_848, 1_650_471_424)   # the published tensor table's mtp.* rows (bf16: 2 B each)
    assert not any("embed_tokens" in name or "head" in name for name, *_ in rows if name.startswith("mtp."))
    shape = kvplan.load_model("Qwen/Qwen3-Next-80B-A3B-Instruct").require_arch()
    assert shape.mtp_layers == 1
    assert stored_bytes_by_rule(shape) == published == 162_649_725_440   # the published table's total bytes
    assert weights_bytes(shape).total_bytes == published - mtp[0]  # resident: vLLM skips `mtp.` without drafting


def test_nvfp4_llama_31_8b_against_its_published_file_sizes():
    """ModelOpt NVFP4 (group 16, lm_head excluded, as ModelOpt's unified export writes it): nvidia/Llama-3.1-8B-
    Instruct-FP4's safetensors files total 6,027,861,376 B (a calculator's test quotes the measured sizes;
    tools/checkpoint_sources/nvidia__Llama-3.1-8B-Instruct-FP4/SOURCE.txt). The rule, on the bundled Llama-3.1-8B's
    shapes: 32 layers x 7 NVFP4 linears (uint8 [rows, cols / 2] + e4m3 scale per 16 + fp32 weight_scale_2 and
    input_scale) + bf16 embeddings, lm_head and norms = 6,027,749,120 B, 112,256 B under the files: their JSON
    headers, ~1,027 tensor entries of ~110 B (and the 32 layers' k_scale / v_scale, 256 B)."""
    config = json.loads((ROOT / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    shape = parse_dims({**config, "quantization_config": qc})
    rule = stored_bytes_by_rule(shape)
    h, inter, vocab, layers = 4096, 14336, 128256, 32
    linears = 2 * _nv(h, h) + 2 * _nv(1024, h) + 2 * _nv(inter, h) + _nv(h, inter)
    assert rule == layers * (linears + 2 * h * 2) + 2 * vocab * h * 2 + h * 2 == 6_027_749_120
    published = 6_027_861_376
    assert abs(rule - published) / published < 0.005
    tensors = layers * (7 * 4 + 2 + 2) + 3  # + k_scale, v_scale and the two norms a layer; embed, norm, lm_head
    assert 80 * tensors < published - rule < 130 * tensors  # one header entry: name, dtype, shape, offsets
    nvfp4_head = _nv(vocab, h) - vocab * h * 2  # an NVFP4 lm_head would be 12.5 % under the files
    assert (rule + nvfp4_head - published) / published < -0.12


NVIDIA_235B = ROOT / "tools/checkpoint_sources/nvidia__Qwen3-235B-A22B-NVFP4"


def test_nvfp4_qwen3_235b_from_its_own_hf_quant_config_against_its_index_total_size():
    """nvidia/Qwen3-235B-A22B-NVFP4 at revision 21cfa2c9, priced from its own config.json and hf_quant_config.json
    (ModelOpt 0.33.0: NVFP4, group 16, exclude_modules lm_head and the 94 routers, kv_cache_quant_algo FP8), both
    byte for byte the checkpoint's (sha256 as github ytworks/kairyu's bench pins them for that revision;
    tools/checkpoint_sources/nvidia__Qwen3-235B-A22B-NVFP4/SOURCE.txt). The published size there: the index's
    metadata.total_size 134,101,652,144 B over 146,549 tensors, 27 shards of 134,118,973,816 B. The rule gives
    134,101,651,392 B, 752 B under: the 188 fp32 scalars k_proj.k_scale / v_proj.v_scale (94 layers x 2 x 4 B)
    that the FP8 KV calibration stores and the rule does not price (-0.0000006 %)."""
    config_raw = (NVIDIA_235B / "config.json").read_bytes()
    quant_raw = (NVIDIA_235B / "hf_quant_config.json").read_bytes()
    # the digests github ytworks/kairyu@d4c0e1ec verification/l1/correctness/g4_ma1_qwen3_235b_nvfp4_bench.py pins
    assert hashlib.sha256(config_raw).hexdigest().startswith("2d002795e3d79a92")
    assert hashlib.sha256(quant_raw).hexdigest().startswith("6423e9dd81773597")
    config, quant = json.loads(config_raw), json.loads(quant_raw)
    assert "quantization_config" not in config  # vLLM reads hf_quant_config.json beside it instead
    shape = parse_dims({**config, "quantization_config": quant})
    est = weights_bytes(shape)
    rule = stored_bytes_by_rule(shape)
    h, vocab, layers, experts = 4096, 151936, 94, 128
    # q [64 x 128, 4096], k and v [4 x 128, 4096], o [4096, 64 x 128], q_norm / k_norm [128] bf16
    attention = 2 * _nv(8192, h) + 2 * _nv(512, h) + 2 * 2 * 128
    expert = 2 * _nv(1536, h) + _nv(h, 1536)  # gate / up [1536, 4096], down [4096, 1536]
    router = experts * h * 2  # mlp.gate [128, 4096] bf16 (excluded)
    norms = 2 * h * 2         # input_layernorm, post_attention_layernorm
    assert dict(est.group_bytes)["experts"] == layers * experts * expert == 127_742_011_392  # 94 x 128 x 10,616,856
    hand = layers * (attention + experts * expert + router + norms) + 2 * vocab * h * 2 + h * 2  # embed, lm_head, norm
    assert rule == est.total_bytes == hand == 134_101_651_392  # the docstring's rule figure
    published = 134_101_652_144  # the index's metadata.total_size (SOURCE.txt: EXPECTED_INDEX_TOTAL_SIZE)
    kv_scales = layers * 2 * 4   # k_scale, v_scale: fp32 scalars, one each an attention layer
    assert published - rule == kv_scales
    assert abs(rule - published) / published < 0.005
    # tensors: per layer q/k/v/o x 4 (weight, weight_scale, weight_scale_2, input_scale) + k_scale, v_scale, 2 qk norms,
    # 2 layer norms, the router and 128 x 3 experts x 4; then embed_tokens, norm, lm_head: the index's 146,549
    assert layers * (4 * 4 + 2 + 2 + 2 + 1 + experts * 3 * 4) + 3 == 146_549  # SOURCE.txt: EXPECTED_TENSOR_COUNT
    files = [int(line.split()[1]) for line in (NVIDIA_235B / "shard_sizes.txt").read_text().splitlines()]
    assert len(files) == 27 and sum(files) == 134_118_973_816  # SOURCE.txt: the 27 shards' sizes
    assert 80 * 146_549 < sum(files) - published < 130 * 146_549  # headers: ~118 B of JSON a tensor entry
    assert shape.quant.kv_cache_dtype == "fp8" and shape.quant.group_size == 16
    assert not est.notes
    assert "left unquantized by the config: lm_head, router (layers 0-93)" in est.rules
    bf16 = weights_bytes(parse_dims(config)).total_bytes  # config.json alone: bf16, 3.5 x the checkpoint
    assert bf16 == 470_187_269_120 and bf16 / published > 3.5  # the rule on the bare config (kvplan plan, bf16)


def test_a_checkpoint_folder_reads_hf_quant_config_beside_its_config_json(tmp_path):
    """vLLM 0.27.1 transformers_utils/config.py reads hf_quant_config.json beside a config.json that has no
    quantization_config (ModelOpt 0.29 and before write it there only). A folder holding the two files of
    nvidia/Qwen3-235B-A22B-NVFP4 was planned in bf16 (470,187,269,120 B of weights, 7 H100s at least, KV in bf16);
    now as vLLM loads it: NVFP4 weights and the checkpoint's FP8 KV calibration taken for --kv-cache-dtype auto."""
    for name in ("config.json", "hf_quant_config.json"):
        (tmp_path / name).write_bytes((NVIDIA_235B / name).read_bytes())
    for source in (tmp_path, tmp_path / "config.json"):
        shape = kvplan.load_model(source).require_arch()
        assert (shape.quant.method, shape.quant.algo, shape.quant.kv_cache_dtype) == ("modelopt", "NVFP4", "fp8")
        assert stored_bytes_by_rule(shape) == 134_101_651_392  # the test above: the index's total less 752 B
    plan = kvplan.plan(str(tmp_path), gpu="H100", max_model_len=4096, engine="vllm")
    assert plan.kv_cache_dtype == "float8_e4m3" and plan.weights_rule_bytes == 134_101_651_392  # (the test above)
    (tmp_path / "other.json").write_bytes((NVIDIA_235B / "config.json").read_bytes())
    assert kvplan.load_model(tmp_path / "other.json").require_arch().quant is None  # not a checkpoint's config.json
    own = {**json.loads((NVIDIA_235B / "config.json").read_text()), "quantization_config": {"quant_method": "fp8"}}
    (tmp_path / "config.json").write_text(json.dumps(own))
    assert kvplan.load_model(tmp_path).require_arch().quant.method == "fp8"  # config.json's own scheme wins


PHILBERT = ROOT / "tools/checkpoint_sources/philbert440__Qwen3.6-27B-Uncensored-Aggressive-W4A16-AWQ"


def test_int4_pack_quantized_qwen36_27b_against_its_published_file():
    """compressed-tensors pack-quantized, int4 asymmetric group 128 (philbert440/Qwen3.6-27B-...-W4A16-AWQ, a git
    copy on GitHub; SOURCE.txt there): the rule's weights plus the bf16 vision tower against model.safetensors'
    size, 18,698,467,264 B from its Git LFS pointer, which also holds the file's JSON header. Its ignore list names
    the vision tower's Linears, the MTP head's and bare container names ("layers.0.linear_attn"): none of them may
    unquantize a language-model group (before: every layer's attention and MLP in bf16, +192 %)."""
    pointer = (PHILBERT / "model.safetensors.lfs-pointer.txt").read_text().split()
    published = int(pointer[pointer.index("size") + 1])
    shape = parse_dims(json.loads((PHILBERT / "config.json").read_text()))
    est = weights_bytes(shape)
    rule = est.total_bytes + est.towers_bytes
    assert published == 18_698_467_264
    assert 0 < published - rule < 400_000  # the header: ~2,600 tensor entries of ~120 B of JSON
    assert abs(rule - published) / published < 0.005
    assert not est.notes  # no ignore entry left unexplained
    h, inter = 5120, 17408
    g128 = lambda rows, cols: rows * cols // 2 + 16 + rows * (cols // 128) * 2 + rows // 8 * 4 * (cols // 128)
    assert dict(est.group_bytes)["mlp"] == 64 * (2 * g128(inter, h) + g128(h, inter))
