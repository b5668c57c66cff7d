"""Checkpoint formats priced from their quantization_config: ModelOpt (FP8 / NVFP4 / MIXED_PRECISION), AutoRound,
Gated DeltaNet sub-projection skips, and the published checkpoints they are checked against.

Every expected byte count is hand arithmetic on the tensors vLLM 0.33 registers for the format (file and class
named in each case), not a figure taken from kvplan."""

from __future__ import annotations

import json
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
    dense layer-0 MLP, embeddings and lm_head bf16. No published total of the checkpoint was found to hold it to."""
    est = weights_bytes(kvplan.load_model("moonshotai/Kimi-K2-Thinking").require_arch())
    one = 2048 * 7168 // 8 * 4 + 16 + 2048 * 7168 // 32 * 2  # the same for [2048, 7168] and [7168, 2048]
    assert dict(est.group_bytes)["experts"] == 60 * 384 * 3 * one == 570_761_994_240
    assert est.total_bytes == 594_536_759_296  # 2,053,146,812,416 B when it was planned as bf16


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
