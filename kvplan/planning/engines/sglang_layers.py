"""What one SGLang rank caches per token and per request: the KV cell of a stage's layers (SGLang's MLA latent
layouts and DeepSeek-V3.2 / GLM-5 index keys) and the Mamba state a request holds in SGLang's MambaPool.
Paths are under `sglang/srt/` of the wheel named."""

from __future__ import annotations

import dataclasses

from ...dtypes import DType, resolve_dtype
from ...gpus import GPU
from ...model.layers import FullAttentionSpec, IndexedMLASpec, MLASpec, NoCacheSpec, StateSpec
from ...model.spec import ModelSpec
from .vllm_kv import VllmLayerSpec, conv_channels, rank_layer_specs

# mem_cache/memory_pool.py DSATokenToKVPool (NSATokenToKVPool before 0.5.13): fp8 index keys with one fp32 scale per
# 128, stored as uint8
DSA_QUANT_BLOCK = 128


def is_dsa(model: ModelSpec) -> bool:
    """DeepSeek-V3.2 / GLM-5 sparse attention: an MLA latent plus the lightning indexer's keys in every layer."""
    return any(isinstance(spec, IndexedMLASpec) for spec in model.distinct_specs)   # asked by every stage


def dsa_kv_dtype(kv: DType, kv_default: bool, device: GPU, version: tuple[int, int, int]) -> DType:
    """The KV dtype SGLang runs a DSA model with: --kv-cache-dtype auto is fp8_e4m3 on SM 10.x and newer and
    bfloat16 below (0.5.5+ server_args.py; 0.5.23 arg_groups/overrides.py `_dsa_kv_cache_dtype_default`:
    `"fp8_e4m3" if major >= 10 else "bfloat16"`). AMD (no SM) reports major 9: bfloat16."""
    major = device.compute_capability[0] if device.compute_capability else 0
    if kv_default and major >= 10 and version >= (0, 5, 5):
        return resolve_dtype("fp8_e4m3")
    return kv


def dsa_latent_bytes(spec: MLASpec, kv: DType, device: GPU, version: tuple[int, int, int], architecture: str = ""
                     ) -> int:
    """Bytes of one token's latent in one layer as SGLang's cell counts it (`calculate_mla_kv_cache_dim`, 0.5.23
    kv_cache_configurator.py:3412-3475). With fp8 on a backend that keeps per-block scales (flashmla_kv, Hopper's
    fp8 default) the row is 512 fp8 + 512 / 128 x 4 B of fp32 scales + 64 x 2 B of bf16 rope = 656 B; Blackwell's
    fp8 default (trtllm) and the ROCm kernels keep the raw 576. The cell counts the 656 layout from 0.5.17
    (`_compute_cell_size` calls calculate_mla_kv_cache_dim); 0.5.8-0.5.16 counted the raw (512 + 64) x 1 B while the
    pool allocated 656 (GLM-5-FP8 on 8 MI35x, 0.5.8: 3,262,823 tokens = rest // 55,224 B, allocated 186.77 GB =
    3,262,823 x 61,464 B; validation/sglang_calibration.csv). GLM-5 with fp8 on SM 12.x runs flashinfer_sparse_mla
    instead of trtllm (0.5.17+ overrides.py `is_glm_sm12_fp8`), with the scaled row."""
    raw = int((spec.kv_lora_rank + spec.qk_rope_head_dim) * kv.bits / 8)
    major = device.compute_capability[0] if device.compute_capability else None
    glm_sm12 = architecture == "GlmMoeDsaForCausalLM" and major == 12
    trtllm_or_rocm = major is None or (major >= 10 and not glm_sm12)
    if kv.bits != 8 or version < (0, 5, 17) or trtllm_or_rocm:
        return raw
    return spec.kv_lora_rank + spec.kv_lora_rank // DSA_QUANT_BLOCK * 4 + spec.qk_rope_head_dim * 2


def dsa_index_bytes(spec: IndexedMLASpec) -> int:
    """Index-key bytes per token per layer, replicated on every TP rank (pool_configurator.py
    `_compute_dsa_indexer_cell_size`: ceil(index_head_dim + index_head_dim // 128 x 4, index_kpool) x 1 B; in the
    cell from 0.5.4, model_runner.py `profile_max_num_token`). DeepSeek-V3.2: 128 + 4 = 132."""
    return spec.index_head_dim + spec.index_head_dim // DSA_QUANT_BLOCK * 4


# SGLang's pools hold a row for every layer a stage owns, attention or not, at the model's one cell:
# - the MHA pool (0.5.23 pool_configurator.py DefaultPoolConfigurator: num_layers = layer_info.num_effective_layers =
#   end_layer - start_layer, `_compute_cell_size` n x (head_dim + v_head_dim) x layers; the same num_effective_layers
#   in 0.5.9 model_runner_kv_cache_mixin.py profile_max_num_token): Llama-3.3-Nemotron-Super-49B's 31 MLP-only
#   layers (no_op attention) are counted with its 49 attention layers, 80 x 8 x 256 x 2 B = 327,680 B at TP 1;
# - Gemma 4's full and SWA pools (configs/model_config.py get_hybrid_layer_ids, read in 0.5.11, 0.5.14, 0.5.19,
#   0.5.23) take every layer of layer_types, the KV-shared ones too. gemma-4-E4B-it on a GB10 (a 2026 build):
#   "SWAKVPool mem usage: 79.94 GB, swa size: 798276, full size: 997846" = 997,846 x 7 x 4,096 B + 798,276 x 35 x
#   2,048 B, all 42 layers (its 24 own caches: 45.68 GB).
# A Mamba hybrid's pool counts its full-attention layers alone (full_attention_layer_ids): it keeps kvplan's layers.
POOL_ROW_REASONS = frozenset({"MLP-only layer", "MoE-only layer", "reuses the KV of an earlier layer"})


def pooled_layers(model: ModelSpec) -> ModelSpec:
    """The model as SGLang's pool counts its layers: a KV-shared layer as its own layer type would cache
    (NoCacheSpec.shares), an MLP-only layer at the model's attention cell; a Mamba hybrid, an MLA model and one with
    cross-attention or no attention layer as they are."""
    if model.has_state or model.is_mla:
        return model
    attention = next((x for x in model.distinct_specs if type(x) is FullAttentionSpec), None)
    blanks = [x for x in model.distinct_specs if isinstance(x, NoCacheSpec)]
    if not blanks or any(x.reason not in POOL_ROW_REASONS for x in blanks):
        return model

    def row(spec):
        if not isinstance(spec, NoCacheSpec):
            return spec
        return spec.shares or attention or spec

    return dataclasses.replace(model, layers=tuple(tuple(row(x) for x in layer) for layer in model.layers))


def cell_specs(model: ModelSpec, layers: range, attn_tp: int, kv: DType, act_bytes: int, device: GPU,
               version: tuple[int, int, int], swa_pool: bool) -> list[VllmLayerSpec]:
    """The attention layers of a stage as SGLang's cell counts them: KV heads per attention-TP rank
    max(1, kv // attn_tp) (model_config.get_num_kv_heads), the MLA latent whole on every rank, DSA index keys
    beside it. Mamba layers hold no tokens: their state is a per-request pool (`state_bytes_per_request`).
    With the SWA pool (sglang_rules.swa_pool) sliding and chunked layers are "sliding" (Llama 4's chunked layers
    are its SWA layers: model_config.get_hybrid_layer_ids); without it every layer is "full", cached at full length."""
    if not is_dsa(model):
        pooled = pooled_layers(model)
        return pool_kinds(rank_layer_specs(pooled, layers, attn_tp, kv.bits / 8, act_bytes), swa_pool)
    specs = []
    for index in layers:
        for spec in model.layers[index]:
            if isinstance(spec, IndexedMLASpec):
                specs += [VllmLayerSpec("mla", dsa_latent_bytes(spec, kv, device, version, model.architecture)),
                          VllmLayerSpec("mla", dsa_index_bytes(spec))]
    return specs


def pool_kinds(specs: list[VllmLayerSpec], swa_pool: bool) -> list[VllmLayerSpec]:
    """Layers as SGLang's token pool holds them: sliding and chunked layers in the SWA pool where there is one,
    else at full length; Mamba layers left out (their state is a per-request pool). A drafter's layers too: 0.5.9
    turns gpt-oss's SWA pool off with drafting, and a gpt-oss-20b draft's sliding layers then cache the full
    context as the target's do."""
    windowed = ("sliding", "chunked")
    return [dataclasses.replace(x, kind="sliding" if swa_pool else "full") if x.kind in windowed else x
            for x in specs if x.kind != "mamba"]


# configs/mamba_utils.py `mamba2_state_dtype`: SGLANG_MAMBA_CONV_DTYPE defaults to bfloat16; the SSM state is
# float32 unless the config's mamba_ssm_dtype says otherwise (read from 0.5.9; before, the server argument
# mamba_ssm_dtype, "float32", through SGLANG_MAMBA_SSM_DTYPE)
CONV_BYTES = 2
SSM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def state_bytes_per_request(model: ModelSpec, layers: range, attn_tp: int, version: tuple[int, int, int]) -> int:
    """One request's Mamba state on an attention-TP rank (`BaseLinearStateParams.mamba_cache_per_req`, 0.5.23
    configs/mamba_utils.py:115-125): per state layer conv (channels / attn_tp) x (kernel - 1) x 2 B plus the SSM
    state / attn_tp in its dtype. Qwen3-Next at TP1: 36 x (8,192 x 3 x 2 + 32 x 128 x 128 x 4) = 77,266,944 B."""
    configured = model.fields.get("engine_ssm_dtype") if version >= (0, 5, 9) else None
    ssm = SSM_BYTES.get(configured, 4)
    total = 0
    for index in layers:
        for spec in model.layers[index]:
            if isinstance(spec, StateSpec):
                kernel = spec.conv_shape[1] if spec.conv_shape else 1
                conv = conv_channels(spec, attn_tp) * (kernel - 1)   # Mamba-2 groups replicated over TP
                total += conv * CONV_BYTES + spec.recurrent_elems // attn_tp * ssm
    return total
