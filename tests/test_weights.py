"""Weights: kvplan's parameter count equals transformers' meta-device model for every bundled model transformers
knows, the bytes equal the same model's in its config dtype, and each quantization rule keeps its worked number.

The truth is computed live: `AutoModelForCausalLM.from_config` under `torch.device("meta")` (no memory, no
init). transformers 5.24 stores MoE experts as fused 3-D tensors, so even DeepSeek-V3 (61 layers x 256
experts) builds in ~0.5 s and Kimi-K2 (384 experts) in ~0.6 s on 2 cores: no layer count is shrunk. The 81
builds take ~15 s in all.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

import kvplan
from kvplan.config import verified
from kvplan.config.parse import parse_dims
from kvplan.config.quant import parse_quant
from kvplan.config.reader import SAME_ARCHITECTURE, WEIGHT_DEFAULTS, text_config
from kvplan.errors import ConfigError, UnsupportedArchitectureError
from kvplan.model.arch import QuantDims
from kvplan.weights.rule import matrix_bytes, param_count, weights_bytes

MODEL_DIR = Path(__file__).resolve().parents[1] / "model_configs"
CONFIGS = {p.stem.replace("__", "/", 1): json.loads(p.read_text()) for p in sorted(MODEL_DIR.glob("*.json"))}


def _family(data: dict) -> str:
    _, model_type = text_config(data)
    return SAME_ARCHITECTURE.get(model_type, model_type)


# ---------------------------------------------------------------------------------------------- the meta truth


@dataclasses.dataclass(frozen=True)
class Truth:
    params: int  # sum(p.numel()) over model.parameters(): tied weights once
    buffers: int  # persistent buffers: state-dict entries that are not parameters
    params_bytes: int | None  # in the config dtype, after transformers' own fp8 swap; None: not comparable
    buffers_bytes: int


@lru_cache(maxsize=None)
def meta_truth(model_id: str) -> Truth:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    data = CONFIGS[model_id]
    text, _ = text_config(data)
    family = _family(data)
    qc = text.pop("quantization_config", None) or data.get("quantization_config")
    cfg = transformers.CONFIG_MAPPING[family].from_dict({**text, "model_type": family})
    verified.ENFORCE = False   # the dtype the raw rule reads, whether or not kvplan gives the count
    try:
        model_spec = kvplan.parse_config(data)
        dtype = getattr(torch, (model_spec.arch.dtype if model_spec.arch else model_spec.dtype).name)
    finally:
        verified.ENFORCE = True
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    nbytes = None
    if qc is None or qc["quant_method"] == "fp8":
        if qc:  # the layout transformers loads an fp8 checkpoint into: FP8Linear / FP8Experts + fp32 block scales
            from transformers.quantizers.auto import AutoHfQuantizer, AutoQuantizationConfig

            # as from_pretrained passes it: after the config class's own __post_init__ (DeepseekV4Config moves
            # DeepSeek-V4-Flash's top-level expert_dtype "fp4" into it)
            qc = _as_loaded(transformers, family, text, qc)
            quantizer = AutoHfQuantizer.from_config(AutoQuantizationConfig.from_dict(qc), pre_quantized=True)
            quantizer.preprocess_model(model, dtype=dtype)
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    names = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    buffers = [t for name, t in model.state_dict().items() if name not in names]
    return Truth(params, sum(t.numel() for t in buffers), nbytes, sum(t.numel() * t.element_size() for t in buffers))


def _as_loaded(transformers, family: str, text: dict, qc: dict) -> dict:
    """The quantization_config the config class holds once built with it (a dict where the class keeps one)."""
    folded = getattr(transformers.CONFIG_MAPPING[family].from_dict({**text, "model_type": family,
                                                                    "quantization_config": qc}),
                     "quantization_config", qc)
    return folded if isinstance(folded, dict) else qc


def _known(model_id: str) -> bool:
    """transformers builds this config's language model as a causal LM (Qwen2.5-VL's flat config only as a
    vision-language model: its tower is checked in tests/test_multimodal.py)."""
    try:
        from transformers import CONFIG_MAPPING
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return False
    _, model_type = text_config(CONFIGS[model_id])
    family = _family(CONFIGS[model_id])
    # Qwen2.5-VL's text model is Qwen2's decoder (SAME_ARCHITECTURE), but its rope_scaling type 'mrope' builds only
    # in the VL model (Qwen2Config raises KeyError 'mrope'): its count is checked whole in tests/test_unread.py.
    # Qwen3-VL's and GLM-4.6V's text configs build as the families they name, and count here
    return family in CONFIG_MAPPING and family in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type != "qwen2_5_vl"


KNOWN = [m for m in CONFIGS if _known(m)]
# Bundled configs whose count kvplan's rule is known to miss, with what transformers measures; the tests are expected
# to fail (strictly: once the rule counts it, drop the entry).
KNOWN_WRONG: dict[str, str] = {}
COUNTED = [pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[m])) if m in KNOWN_WRONG else m
           for m in KNOWN]
UNKNOWN = [m for m in CONFIGS if m not in KNOWN]  # chatglm x2, phi3small, nemotron-nas: remote code; Qwen2.5-VL


def _refused(model_id: str) -> bool:
    """True when kvplan gives no weights for this config because the conformance sweep measured its family's
    parameter rule wrong (kvplan.config.verified); then the raw rule must really be off here too, or the record is stale."""
    model = kvplan.parse_config(CONFIGS[model_id], name=model_id)
    if model.arch is not None:
        return False
    assert ("does not match transformers" in model.arch_error or "not verified against transformers" in
            model.arch_error or "has no byte rule" in model.arch_error or "does not explain" in model.arch_error), \
        model.arch_error
    if "has no byte rule" in model.arch_error:
        return True   # a quantization kvplan cannot price (NVIDIA's modelopt NVFP4): refused with its name
    verified.ENFORCE = False
    try:
        raw = kvplan.parse_config(CONFIGS[model_id], name=model_id).arch
    finally:
        verified.ENFORCE = True
    assert raw is None or param_count(raw).total != meta_truth(model_id).params, (
        f"{model_id}: kvplan refuses a parameter count that is exact: re-run the conformance sweep")
    return True


@pytest.mark.parametrize("model_id", COUNTED)
def test_param_count_equals_transformers_meta_model(model_id):
    # Quantized configs (DeepSeek-V3/R1 fp8, gpt-oss-20b mxfp4) count here too: from_config builds the logical
    # model, which is what param_count counts; their packed bytes are checked below.
    truth = meta_truth(model_id)
    if _refused(model_id):
        return
    counted = param_count(parse_dims(CONFIGS[model_id]))
    assert counted.total == truth.params
    assert counted.buffers == truth.buffers


@pytest.mark.parametrize("model_id", COUNTED)
def test_weights_bytes_equal_the_meta_model_in_its_dtype(model_id):
    # Unquantized: the config dtype, with DeepSeek's router in fp32 as transformers keeps it. DeepSeek-V3/R1:
    # transformers' own FP8Linear/FP8Experts swap (1 B weights + fp32 128x128 block scales) on the meta model.
    truth = meta_truth(model_id)
    if truth.params_bytes is None:
        method = (text_config(CONFIGS[model_id])[0].get("quantization_config")
                  or CONFIGS[model_id].get("quantization_config"))["quant_method"]
        pinned = {"mxfp4": "test_mxfp4_gpt_oss_matches_the_published_checkpoint (transformers keeps the e8m0 "
                           "scales outside parameters and dequantizes on CPU)",
                  "compressed-tensors": "tests/test_quant_formats.py, against a published checkpoint file"}
        pytest.skip(f"{method}: meta_truth swaps in transformers' own quantized layers for fp8 only, so the meta "
                    f"model has no {method} bytes to compare; the byte rule is pinned in "
                    f"{pinned.get(method, 'tests/test_quant_formats.py')}")
    if _refused(model_id):
        return
    estimate = weights_bytes(parse_dims(CONFIGS[model_id]))
    assert estimate.params_bytes == truth.params_bytes
    assert estimate.buffers_bytes == truth.buffers_bytes


def test_the_truth_covers_every_family_and_both_falcons():
    pytest.importorskip("transformers")
    families = {_family(CONFIGS[m]) for m in KNOWN}
    assert families >= {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2",
                        "gemma3_text", "phi", "phi3", "gpt2", "gptj", "gpt_neox", "gpt_bigcode", "falcon",
                        "starcoder2", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text", "olmo2", "mamba",
                        "falcon_mamba", "jamba", "qwen3_next", "gemma4_text", "nemotron_h"}
    assert {"tiiuae/falcon-7b-instruct", "tiiuae/falcon-40b-instruct", "moonshotai/Kimi-K2-Instruct",
            "google/gemma-3-4b-it", "meta-llama/Llama-4-Scout-17B-16E-Instruct"} <= set(KNOWN)
    # Qwen3-VL x3 and GLM-4.6V count as the Qwen3 / Qwen3-MoE / GLM-4.5 text models they are (SAME_ARCHITECTURE)
    assert len(KNOWN) == 100 and sorted(UNKNOWN) == ["Qwen/Qwen2.5-VL-7B-Instruct", "THUDM/chatglm3-6b",
                                                     "THUDM/glm-4-9b-chat", "microsoft/Phi-3-small-8k-instruct",
                                                     "nvidia/Llama-3_3-Nemotron-Super-49B-v1"]


def test_weight_defaults_are_transformers_class_defaults():
    transformers = pytest.importorskip("transformers")
    for family, defaults in WEIGHT_DEFAULTS.items():
        fields = {f.name: f.default for f in dataclasses.fields(transformers.CONFIG_MAPPING[family])}
        for key, value in defaults.items():
            assert fields.get(key, "missing") == value, (family, key)


# ------------------------------------------------------------------ hand-written rules at default and resized sizes


# (model_type, why, config-class kwargs): each built on meta and counted by transformers, at its class defaults and
# resized so that every size the rule reads moves (a rule that reads a constant where a field belongs fails here)
RESIZED = [
    ("mamba2", "default", {}),
    ("mamba2", "resized, biased in_proj, no conv bias",
     dict(hidden_size=2048, num_heads=64, head_dim=64, n_groups=4, state_size=64, vocab_size=50_000,
          num_hidden_layers=12, use_bias=True, use_conv_bias=False)),
    ("nemotron_h", "default: M, E, *, - blocks", {}),
    ("nemotron_h", "resized, head_dim 96 != 2048/16, biased",
     dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=4, head_dim=96, intermediate_size=5000,
          moe_intermediate_size=1000, moe_shared_expert_intermediate_size=700, n_routed_experts=16,
          mamba_num_heads=48, mamba_head_dim=32, n_groups=2, ssm_state_size=64, mlp_bias=True, use_bias=True,
          layers_block_type=["linear_attention", "moe", "full_attention", "mlp", "linear_attention", "moe"])),
    ("nemotron_h", "latent MoE (Nemotron 3 Super)", dict(moe_latent_size=512)),
    ("gemma4_text", "default: E-series per-layer inputs, 512-wide full layers", {}),
    ("gemma4_text", "resized, MoE beside the MLP, k_eq_v, KV-shared double-wide, biased",
     dict(hidden_size=1536, intermediate_size=3000, num_hidden_layers=12, num_attention_heads=12,
          num_key_value_heads=3, head_dim=128, global_head_dim=384, num_global_key_value_heads=1,
          attention_k_eq_v=True, enable_moe_block=True, num_experts=16, top_k_experts=2, moe_intermediate_size=500,
          num_kv_shared_layers=4, use_double_wide_mlp=True, attention_bias=True, hidden_size_per_layer_input=64,
          vocab_size_per_layer_input=40_000, vocab_size=50_000)),
    ("gemma4_text", "no per-layer inputs (26B-A4B)", dict(hidden_size_per_layer_input=0, num_kv_shared_layers=6)),
    ("gemma3n_text", "default: AltUp, LAuReL, 15 KV-shared layers", {}),
    ("gemma3n_text", "resized, per-layer MLP widths, 3 streams, rank 32",
     dict(hidden_size=1024, num_hidden_layers=10, num_attention_heads=4, num_key_value_heads=1, head_dim=128,
          intermediate_size=[4096, 2048] * 5, altup_num_inputs=3, laurel_rank=32, num_kv_shared_layers=5,
          hidden_size_per_layer_input=128, vocab_size_per_layer_input=30_000, vocab_size=40_000,
          attention_bias=True)),
    ("dory", "default: 36 blocks written as 72 attention + mlp entries", {}),
    ("dory", "resized, biased, tied (logit_scale stays)",
     dict(hidden_size=1024, num_hidden_layers=20, n_input_layers=4, n_output_layers=4, intermediate_size=3000,
          num_attention_heads=8, num_key_value_heads=2, head_dim=96, attention_bias=True, mlp_bias=True,
          vocab_size=40_000, tie_word_embeddings=True)),
    ("xlm", "default: tied pred_layer, one language", {}),
    ("xlm", "resized, 4 language embeddings, untied head",
     dict(emb_dim=1024, n_heads=8, n_layers=3, vocab_size=5000, n_langs=4, max_position_embeddings=300,
          tie_word_embeddings=False)),
    ("zamba2", "default: 54 Mamba-2 layers, 9 hybrid ones sharing one transformer block", {}),
    ("zamba2", "resized, 2 shared blocks, attention adapters, biased, 2 SSM groups",
     dict(hidden_size=1024, num_hidden_layers=10, num_attention_heads=16, num_key_value_heads=4, num_mem_blocks=2,
          layers_block_type=["mamba", "hybrid", "mamba", "mamba", "hybrid", "mamba", "hybrid", "mamba", "mamba",
                             "hybrid"], use_shared_attention_adapter=True, adapter_rank=32, intermediate_size=3000,
          add_bias_linear=True, n_mamba_heads=16, mamba_d_state=32, mamba_ngroups=2, vocab_size=5000)),
    ("zamba", "default: 76 Mamba layers of 2 heads, 13 hybrid ones sharing one block", {}),
    ("zamba", "resized, 4 SSM heads, biased in/out_proj, head_dim 96 != 2H / heads",
     dict(hidden_size=1024, num_hidden_layers=9, num_attention_heads=8, num_key_value_heads=4, intermediate_size=3000,
          n_mamba_heads=4, mamba_d_state=8, mamba_dt_rank=40, mamba_proj_bias=True, attn_layer_period=3,
          attn_layer_offset=1, vocab_size=5000, attention_head_dim=96)),
    ("deepseek_v4", "default: 23 HCA + 20 CSA layers, 3 hash_moe, hyper-connections, float32 sinks and norms", {}),
    ("deepseek_v4", "resized, every size moved, sliding layers, biased shared MLP, 3 streams",
     dict(hidden_size=2048, head_dim=256, num_attention_heads=16, q_lora_rank=512, o_groups=4, o_lora_rank=256,
          index_n_heads=8, index_head_dim=64, hc_mult=3, moe_intermediate_size=384, n_routed_experts=8,
          num_experts_per_tok=2, vocab_size=1000, num_hidden_layers=7, mlp_bias=True,
          compress_rates={"compressed_sparse_attention": 8, "heavily_compressed_attention": 16},
          layer_types=["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
                       "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                       "compressed_sparse_attention"],
          mlp_layer_types=["hash_moe", "moe", "hash_moe", "moe", "moe", "moe", "moe"])),
    # Inkling (kvplan.config.inkling.inkling1): 975,340,270,146 at the defaults. The traits it had were exact there only:
    # a router of 258 rows and experts [E, H, H] held while hidden = 2 x moe_intermediate and 256 + 2 experts, conv
    # channels sized by bos_token_id 1 (7 layers of 8 experts: +10,665,984)
    ("inkling_text", "default: 55 sliding and 11 full layers, 256 + 2 experts", {}),
    ("inkling_text", "7 layers, 8 experts", dict(num_hidden_layers=7, n_routed_experts=8)),
    ("inkling_text", "resized, dense layers, 3 shared experts, local_layer_ids, bos_token_id 7",
     dict(hidden_size=512, num_hidden_layers=7, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
          swa_num_attention_heads=4, swa_num_key_value_heads=1, swa_head_dim=32, sliding_window_size=48, d_rel=8,
          rel_extent=40, conv_kernel_size=3, moe_intermediate_size=96, intermediate_size=300, n_routed_experts=6,
          n_shared_experts=3, vocab_size=3000, local_layer_ids=[0, 2, 3], bos_token_id=7,
          mlp_layer_types=["dense", "sparse", "dense", "sparse", "sparse", "sparse", "dense"])),
    # Inkling 2 (kvplan.config.inkling): 593,718,478,848 at the defaults (48 layers of 4,608, 384 experts), the head
    # unpadded_vocab_size 200,058 rows against 201,024 embeddings; float32 convs, queries and routers in the bytes
    ("inkling2_text", "default: 40 sliding and 8 full layers, 384 experts", {}),
    ("inkling2_text", "resized, every size moved, a layer pattern of its own",
     dict(hidden_size=512, num_hidden_layers=7, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
          swa_num_attention_heads=4, swa_num_key_value_heads=1, swa_head_dim=32, sliding_window_size=48, d_rel=8,
          rel_extent=40, conv_kernel_size=3, moe_intermediate_size=96, n_routed_experts=6, vocab_size=3000,
          unpadded_vocab_size=2900, layer_types=["hybrid_sliding", "hybrid", "hybrid", "hybrid_sliding",
                                                 "hybrid_sliding", "hybrid", "hybrid_sliding"])),
    # Inkling 2 Loop: 26,068,156,416 (24 built layers, 6-17 looped with 4 message gates each)
    ("inkling2_loop_text", "default: 24 layers, 6-17 looped 3 times", {}),
    ("inkling2_loop_text", "resized, layers 3-8 looped twice, gate rank 16",
     dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, num_key_value_heads=2, head_dim=32,
          swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=48, sliding_window_size=20, d_rel=4,
          rel_extent=24, conv_kernel_size=5, moe_intermediate_size=64, n_routed_experts=5, vocab_size=2000,
          unpadded_vocab_size=1999, loop_layer_index_start=3, loop_layer_index_end=9, loop_num_passes=2,
          loop_gate_rank=16, n_layers_per_attn_res_block=3)),
    ("inkling2_loop_text", "one pass from loop_config: the message gates are built all the same",
     dict(num_hidden_layers=12, n_routed_experts=8,
          loop_config={"core_start": 6, "core_end": 12, "num_passes": 1, "gate_rank": 8})),
    ("hrm_text", "default: 2 stacks x 16 blocks", {}),
    ("hrm_text", "resized, biased, 5 blocks a stack x 3 x (2 + 1) cycles",
     dict(hidden_size=1024, intermediate_size=3000, num_attention_heads=8, head_dim=96, attention_bias=True,
          mlp_bias=True, vocab_size=40_000, num_hidden_layers=5, H_cycles=3, L_cycles=2)),
    ("rwkv", "default: 32 blocks of 4,096, no heads", {}),
    ("rwkv", "resized, intermediate None -> 4 x hidden", dict(hidden_size=512, num_hidden_layers=3, vocab_size=1000)),
    ("rwkv", "resized, attention 256 != hidden 512, tied head",
     dict(hidden_size=512, attention_hidden_size=256, intermediate_size=1000, num_hidden_layers=2, vocab_size=1000,
          tie_word_embeddings=True)),
    ("recurrent_gemma", "default: 18 recurrent + 8 attention blocks, tied", {}),
    ("recurrent_gemma", "resized, lru_width 640 != hidden, GQA 8 / 2, biased, 2-block pattern, untied",
     dict(hidden_size=512, lru_width=640, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=7,
          intermediate_size=1500, conv1d_width=3, attention_bias=True, block_types=["recurrent", "attention"],
          vocab_size=1000, tie_word_embeddings=False)),
    ("recurrent_gemma", "resized, head_dim 96 != 512 / 4",
     dict(hidden_size=512, num_attention_heads=4, head_dim=96, num_hidden_layers=4, vocab_size=1000)),
]


@pytest.mark.parametrize("model_type, why, kwargs", RESIZED, ids=[f"{m}-{w.split(',')[0]}" for m, w, _ in RESIZED])
def test_rules_equal_transformers_at_default_and_resized_configs(model_type, why, kwargs):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = transformers.CONFIG_MAPPING[model_type](**kwargs)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}   # a tied lm_head is no buffer
    buffers = sum(t.numel() for n, t in model.state_dict().items() if n not in names)
    verified.ENFORCE = False   # the raw rule, whatever the conformance record says of the family
    try:
        shape = kvplan.parse_config({**cfg.to_dict(), "dtype": "bfloat16"}).arch
    finally:
        verified.ENFORCE = True
    counted = param_count(shape)
    assert (counted.total, counted.buffers) == (sum(p.numel() for p in model.parameters()), buffers)
    assert weights_bytes(shape).params_bytes == sum(p.numel() * p.element_size() for p in model.parameters())


def test_deepseek_v4_flash_counted_and_priced_as_transformers_loads_it():
    """DeepSeek-V4-Flash against transformers 5.24 on meta (tests above): 284,332,230,231 parameters (the card's
    284B total, 13B active), 155,997,933,020 B once its FP8 quantizer swaps in FP8Linear / FP8Experts with
    expert_dtype fp4. The experts' bytes and the buffers by hand from finegrained_fp8.py _alloc_expert_proj and
    modeling_deepseek_v4.py."""
    verified.ENFORCE = False
    try:
        shape = parse_dims(CONFIGS["deepseek-ai/DeepSeek-V4-Flash"])
    finally:
        verified.ENFORCE = True
    counted, priced = param_count(shape), weights_bytes(shape)
    assert (counted.total, priced.params_bytes) == (284_332_230_231, 155_997_933_020)
    assert counted.active == 13_799_622_231   # 6 of 256 experts a layer
    # fp4: int8 [rows, cols / 2] + a ue8m0 scale per row per 32 inputs; gate_up [4096, 4096], down [4096, 2048]
    one_expert = (4096 * 2048 + 4096 * 128) + (4096 * 1024 + 4096 * 64)
    assert dict(priced.group_bytes)["experts"] == 43 * 256 * one_expert == 147_169_738_752
    # tid2eid int64 [129,280, 6] on the 3 hash_moe layers, e_score_correction_bias float32 [256] on the other 40
    assert priced.buffers_bytes == 3 * 129_280 * 6 * 8 + 40 * 256 * 4 == 18_657_280


def _vllm_nas_width(ffn_mult: float, hidden: int) -> int:
    """vLLM 0.33 model_executor/models/nemotron_nas.py: _find_multiple(int(2 * ffn_mult * n_embd / 3), 256)."""
    n = int(2 * ffn_mult * hidden / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def test_nemotron_nas_blocks_counted_as_vllm_builds_them():
    # DeciLMForCausalLM is remote code only (no transformers class to build), so the truth is vLLM's
    # DeciLMDecoderLayer arithmetic, written here block by block from the published block_configs
    data = CONFIGS["nvidia/Llama-3_3-Nemotron-Super-49B-v1"]
    h, heads, vocab = data["hidden_size"], data["num_attention_heads"], data["vocab_size"]
    head_dim = h // heads
    attention = mlp = norms = 0
    for block in data["block_configs"]:
        if not block["attention"]["no_op"]:   # q, o [64 x 128, H]; k, v [H / n_heads_in_group x 128, H]
            kv = heads // block["attention"]["n_heads_in_group"]
            attention += 2 * heads * head_dim * h + 2 * kv * head_dim * h
            norms += h                          # input_layernorm
        if not block["ffn"]["no_op"]:           # gate, up, down of the block's width
            mlp += 3 * h * _vllm_nas_width(block["ffn"]["ffn_mult"], h)
            norms += h                          # post_attention_layernorm
    # find_multiple(int(2 x m x 8,192 / 3), 256): 28,672; 14,336; 7,168; 5,461 -> 5,632; 2,730 -> 2,816
    assert [_vllm_nas_width(m, 8192) for m in (5.25, 2.625, 1.3125, 1.0, 0.5)] == [28672, 14336, 7168, 5632, 2816]
    counted = param_count(parse_dims(data))
    assert dict(counted.rows()) == {"embeddings": vocab * h, "attention": attention, "mlp": mlp,
                                    "norms": norms + h, "lm_head": vocab * h,
                                    "total": 2 * vocab * h + attention + mlp + norms + h}
    # 49 attention blocks of 80 (8 KV heads each), 49.87 B parameters: NVIDIA's card says 49B
    assert (attention // 150_994_944, counted.total) == (49, 49_867_145_216)
    est = kvplan.estimate(kvplan.parse_config(data), seq_len=4096)
    assert est.kv_cache_bytes == 49 * 2 * 8 * 128 * 4096 * 2   # no_op blocks cache nothing


def test_nemotron_nas_linear_replacements_and_no_op_ffn():
    # replace_with_linear: one bias-free [H, H] linear (self_attn.linear_attn / mlp.linear_mlp in NVIDIA's
    # checkpoints); ffn no_op: no MLP and no post_attention_layernorm
    data = dict(CONFIGS["nvidia/Llama-3_3-Nemotron-Super-49B-v1"])
    plain = {"attention": {"n_heads_in_group": 8, "no_op": False, "replace_with_linear": False},
             "ffn": {"ffn_mult": 1.0, "no_op": False, "replace_with_linear": False}}
    linear = {"attention": {"n_heads_in_group": None, "no_op": False, "replace_with_linear": True},
              "ffn": {"ffn_mult": None, "no_op": False, "replace_with_linear": True}}
    bare = {"attention": {"n_heads_in_group": None, "no_op": True}, "ffn": {"ffn_mult": None, "no_op": True}}
    data.update(num_hidden_layers=3, block_configs=[plain, linear, bare])
    h = 8192
    counted = param_count(parse_dims(data))
    # a plain layer: q, o 2 x 8,192^2 + k, v 2 x 8,192 x 1,024 (64 heads / n_heads_in_group 8 = 8 KV heads)
    # = 150,994,944, plus the linear layer's h x h; ffn_mult 1.0: find_multiple(int(2 x 8,192 / 3), 256) = 5,632
    # (transformers' Nemotron-NAS / DeciLM _ffn_mult_to_intermediate_size)
    assert counted.attention == 150_994_944 + h * h
    assert counted.mlp == 3 * h * 5632 + h * h
    assert counted.norms == 4 * h + h


# ---------------------------------------------------------------------------------------------- pinned counts


@pytest.mark.parametrize("model_id, total, note", [
    ("THUDM/chatglm3-6b", 6_243_584_000, "no dedicated rule"),  # THUDM's published 6.24B
    ("THUDM/glm-4-9b-chat", 9_399_951_360, "no dedicated rule"),  # published 9.40B
    ("microsoft/Phi-3-small-8k-instruct", 7_801_671_680, "does not say whether lm_head is tied"),
])
def test_families_transformers_lacks_fall_back_to_a_llama_like_count(model_id, total, note):
    shape = parse_dims(CONFIGS[model_id])
    assert param_count(shape).total == total
    assert any(note in n for n in shape.notes)


def test_breakdown_names_each_group_like_nanogpt():
    counted = param_count(parse_dims(CONFIGS["meta-llama/Llama-3.1-8B"]))
    # Llama-3.1-8B by hand: embeddings 128,256 x 4,096; attention 32 x (2 x 4,096^2 + 2 x 4,096 x 1,024); MLP
    # 32 x 3 x 4,096 x 14,336; norms 65 x 4,096; untied head; the total is transformers' LlamaForCausalLM count
    # (test_truth_meta / the conformance record); x 2 B = 16,060,522,496
    assert dict(counted.rows()) == {"embeddings": 525_336_576, "attention": 1_342_177_280, "mlp": 5_637_144_576,
                                    "norms": 266_240, "lm_head": 525_336_576, "total": 8_030_261_248}
    assert weights_bytes(parse_dims(CONFIGS["meta-llama/Llama-3.1-8B"])).total_bytes == 16_060_522_496


@pytest.mark.parametrize("model_id, active", [
    ("mistralai/Mixtral-8x7B-v0.1", 12_879_925_248),  # Mistral's "12.9B active"
    ("deepseek-ai/DeepSeek-V3", 37_552_282_624),  # "37B activated" (+ embeddings)
    ("Qwen/Qwen3-30B-A3B", 3_353_032_704),  # "A3B"
    ("meta-llama/Llama-3.2-1B", 1_235_814_400),  # dense: active == total
])
def test_active_parameters_drop_the_unrouted_experts(model_id, active):
    assert param_count(parse_dims(CONFIGS[model_id])).active == active


def test_mtp_layers_are_counted_apart_from_the_model():
    counted = param_count(parse_dims(CONFIGS["deepseek-ai/DeepSeek-V3"]))
    # transformers 5.24 DeepseekV3ForCausalLM built on meta from this config counts 671,026,404,352. MTP by hand:
    # one MoE layer (MLA 187,107,328 + 256 x 3 x 7,168 x 2,048 + shared 44,040,192 + router 1,835,008 + norms
    # 14,336) + eh_proj 14,336 x 7,168 + enorm, hnorm, head norm 3 x 7,168 = 11,610,067,968
    assert counted.total == 671_026_404_352 and counted.mtp == 11_610_067_968
    # The checkpoint repeats embed_tokens and the head inside layer 61: 684.5B, the model card's "685B".
    assert counted.total + counted.mtp + 2 * 129_280 * 7_168 == 684_489_830_400


# ---------------------------------------------------------------------------------------------- quantization rules


def _q(method, bits, **kw):
    return QuantDims(method, bits, **kw)


@pytest.mark.parametrize("q, rows, cols, expected", [
    # fp8, 128x128 blocks: 1 B per weight + fp32 per block. DeepSeek-V3 q_b_proj: 192 x 12 blocks.
    (_q("fp8", 8, strategy="block", block=(128, 128)), 4096, 4096, 16_777_216 + 1_024 * 4),
    (_q("fp8", 8, strategy="block", block=(128, 128)), 24576, 1536, 37_748_736 + 2_304 * 4),
    (_q("fp8", 8, strategy="block", block=(128, 128), scale_bytes=1), 4096, 4096, 16_777_216 + 1_024),  # ue8m0
    (_q("fp8", 8, strategy="tensor"), 4096, 4096, 16_777_216 + 4),  # per-tensor scale
    (_q("fp8", 8, strategy="tensor", static_input_scale=True), 4096, 4096, 16_777_216 + 8),
    # GPTQ 4-bit g128: qweight + qzeros (32 groups x 4096 x 4 bits) + fp16 scales + int32 g_idx = 4.26 bits/weight
    (_q("gptq", 4, strategy="group", group_size=128), 4096, 4096, 8_388_608 + 65_536 + 262_144 + 16_384),
    (_q("gptq", 8, strategy="group", group_size=128), 4096, 4096, 16_777_216 + 131_072 + 262_144 + 16_384),
    (_q("gptq", 4, strategy="channel"), 4096, 4096, 8_388_608 + 2_048 + 8_192 + 16_384),  # group_size -1
    # AWQ GEMM 4-bit g128: no g_idx
    (_q("awq", 4, strategy="group", group_size=128, symmetric=False), 4096, 4096, 8_388_608 + 65_536 + 262_144),
    # mxfp4 gpt-oss-20b gate_up [5760, 2880] of one expert: 4 bits + 1 scale byte per 32 = 4.25 bits
    (_q("mxfp4", 4, group_size=32), 5760, 2880, 8_294_400 + 518_400),
    # bitsandbytes (bitsandbytes 0.50.2 on CPU gives these tensors, plus an 82/171 B JSON quant_state blob)
    (_q("bitsandbytes", 8), 4096, 4096, 16_777_216 + 4_096 * 4),  # int8 + fp32 SCB per row
    (_q("bitsandbytes", 4), 4096, 4096, 8_388_608 + 262_144 * 4 + 64),  # fp32 absmax per 64
    (_q("bitsandbytes", 4, double_quant=True), 4096, 4096, 8_388_608 + 262_144 + 1_024 * 4 + 1_024 + 4 + 64),
])
def test_matrix_bytes_worked_numbers(q, rows, cols, expected):
    assert matrix_bytes(q, rows, cols) == expected


# Each row equals what compressed-tensors 0.20.1's compressors produced for nn.Linear(4096, 4096) in bf16.
CT_CASES = [
    ("pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True},
     None, 8_650_768),  # w4a16: int32 [4096, 512] + int64 [2] + bf16 [4096, 32]
    ("pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": False},
     None, 8_716_304),  # + int32 zero points [512, 32]
    ("int-quantized", {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
     {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}, 16_785_408),  # w8a8
    ("int-quantized", {"num_bits": 8, "type": "int", "strategy": "tensor", "symmetric": True},
     {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": False}, 16_777_220),  # + static input_scale
    ("float-quantized", {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
     {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": True}, 16_779_264),
    ("float-quantized", {"num_bits": 8, "type": "float", "strategy": "tensor"},  # FP8 static
     {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}, 16_777_220),
    ("nvfp4-pack-quantized", {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                              "scale_dtype": "torch.float8_e4m3fn"},
     {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local",
      "scale_dtype": "torch.float8_e4m3fn"}, 9_437_192),  # uint8 [4096, 2048] + fp8 [4096, 256] + 2 fp32 globals
    ("mxfp4-pack-quantized", {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                              "scale_dtype": "torch.uint8"}, None, 8_912_896),
]


@pytest.mark.parametrize("fmt, weights, inputs, expected", CT_CASES)
def test_compressed_tensors_bytes_match_the_library(fmt, weights, inputs, expected):
    qc = {"quant_method": "compressed-tensors", "format": fmt, "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": inputs}}}
    assert matrix_bytes(parse_quant(qc, []), 4096, 4096, act_bytes=2) == expected


def _with_quant(model_id: str, qc: dict) -> dict:
    return {**CONFIGS[model_id], "quantization_config": qc}


def test_gptq_llama_keeps_embeddings_lm_head_and_norms_in_16_bit():
    qc = {"bits": 4, "group_size": 128, "desc_act": False, "sym": True, "quant_method": "gptq"}
    est = weights_bytes(parse_dims(_with_quant("meta-llama/Llama-3.1-8B", qc)))
    gptq = lambda rows, cols: rows * cols // 2 + (cols // 128) * rows // 2 + (cols // 128) * rows * 2 + 4 * cols
    attention, mlp = 2 * gptq(4096, 4096) + 2 * gptq(1024, 4096), 2 * gptq(14336, 4096) + gptq(4096, 14336)
    # embeddings and head 128,256 x 4,096 x 2 B each; norms 266,240 x 2 B; GPTQ packing per the lambda above
    assert dict(est.group_bytes) == {"embeddings": 1_050_673_152, "attention": 32 * attention, "mlp": 32 * mlp,
                                     "norms": 532_480, "lm_head": 1_050_673_152}
    assert est.total_bytes == 2 * 1_050_673_152 + 532_480 + 32 * (attention + mlp) == 5_732_835_328
    assert est.quant_method == "gptq" and "4.26 bits" in est.rules[0]


def test_mxfp4_gpt_oss_matches_the_published_checkpoint():
    # Only the experts are packed; attention, router, embeddings and lm_head stay bf16 (the config names no dtype:
    # transformers' dtype="auto" reads bf16 from the checkpoint). The published safetensors total 13.76 GB.
    shape = parse_dims(CONFIGS["openai/gpt-oss-20b"])
    est = weights_bytes(shape)
    assert shape.dtype.name == "bfloat16" and any("no dtype" in n for n in shape.notes)
    experts = 24 * 32 * (matrix_bytes(shape.quant, 5760, 2880) + matrix_bytes(shape.quant, 2880, 2880))
    assert dict(est.group_bytes)["experts"] == experts + 24 * 32 * (5760 + 2880) * 4  # + fp32 expert biases
    assert est.total_bytes == 13_774_535_808
    assert abs(est.total_bytes - 13.76e9) / 13.76e9 < 0.002


def test_fp8_deepseek_v3_bytes_and_rules():
    est = weights_bytes(parse_dims(CONFIGS["deepseek-ai/DeepSeek-V3"]))
    # buffers: 58 MoE layers x 256 float32 e_score_correction_bias. By hand, fp8 linears o x i at 1 B + float32
    # scale_inv per 128 x 128 block, ceil(o / 128) x ceil(i / 128) x 4: 61 layers x (MLA q_a 1,536 x 7,168, q_b
    # 24,576 x 1,536, kv_a 576 x 7,168, kv_b 32,768 x 512, o 7,168 x 16,384 + bf16 norms (1,536 + 512 + 2 x 7,168)
    # x 2) + 3 dense MLPs (2 x 18,432 x 7,168 + 7,168 x 18,432) + 58 MoE layers x (257 experts x (2 x 2,048 x 7,168
    # + 7,168 x 2,048) + router 256 x 7,168 x 4 B, float32: DeepseekV3PreTrainedModel._keep_in_fp32_modules_strict)
    # + embeddings and head 2 x 129,280 x 7,168 x 2 B + the final norm 7,168 x 2 B = 673,363,413,344
    assert est.params_bytes == 673_363_413_344 and est.buffers_bytes == 14_848 * 4
    assert any("float32" in r and "router" in r for r in est.rules)


@pytest.mark.parametrize("qc, expected", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
      "modules_to_not_convert": ["gate"]}, {("router", -1)}),  # Qwen MoE AWQ
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head", "re:.*mlp.gate$"],
      "config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "group", "group_size": 128}}}},
     {("lm_head", -1), ("router", -1)}),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                          "model.embed_tokens", "lm_head"]},
     {("attention", -1), ("router", -1), ("embeddings", -1), ("lm_head", -1)}),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["model.layers.0.mlp.down_proj"]},
     {("mlp", 0)}),  # a sub-projection marks its group in that layer only
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True}, {("lm_head", -1)}),
])
def test_skip_patterns_become_weight_groups(qc, expected):
    assert parse_quant(qc, []).skip == frozenset(expected)


def test_a_skipped_layer_stays_in_the_model_dtype():
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["model.layers.0.mlp"]}
    plain = weights_bytes(parse_dims(_with_quant("meta-llama/Llama-3.2-1B", {**qc, "modules_to_not_convert": []})))
    skipped = weights_bytes(parse_dims(_with_quant("meta-llama/Llama-3.2-1B", qc)))
    one_mlp_bf16 = 3 * 8192 * 2048 * 2
    one_mlp_gptq = 2 * matrix_bytes(parse_quant(qc, []), 8192, 2048) + matrix_bytes(parse_quant(qc, []), 2048, 8192)
    assert skipped.total_bytes - plain.total_bytes == one_mlp_bf16 - one_mlp_gptq


def test_bitsandbytes_8bit_and_unknown_methods():
    q = parse_quant({"quant_method": "bitsandbytes", "load_in_8bit": True}, [])
    assert (q.bits, q.double_quant) == (8, False)
    with pytest.raises(UnsupportedArchitectureError, match="no byte rule"):
        parse_quant({"quant_method": "hqq"}, [])


def test_a_plain_low_bit_dtype_is_a_cast_with_a_note():
    est = weights_bytes(parse_dims(CONFIGS["meta-llama/Llama-3.2-1B"]), "fp8")
    # 1,235,814,400 parameters (transformers LlamaForCausalLM on meta) x 1 B
    assert est.total_bytes == 1_235_814_400 and any("plain cast" in n for n in est.notes)


# ---------------------------------------------------------------------------------------------- errors, purity


@pytest.mark.parametrize("data, match", [
    ({"model_type": "mystery", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128}, "vocabulary size"),  # no field and no class default
    ({"model_type": "llama", "hidden_size": "64", "num_hidden_layers": 2}, "must be an integer"),
    ({"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 10, "bias": "yes"}, "true or false"),
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 10, "quantization_config": {"quant_method": "fp8",
                                                                          "weight_block_size": 128}}, "rows, cols"),
])
def test_bad_fields_raise_one_actionable_sentence(data, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse_dims(data)
    assert str(err.value).endswith("config.json")


def test_encoder_only_models_are_refused():
    with pytest.raises(UnsupportedArchitectureError, match="is an encoder"):
        parse_dims({"model_type": "bert", "hidden_size": 768})


def test_weights_modules_never_import_torch_or_transformers():
    code = ("import sys, json, kvplan.weights.rule, kvplan.weights.split, kvplan.config.arch; "
            "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 2.5])
def test_non_integral_floats_are_config_errors_not_crashes(value):
    # int(inf) raises OverflowError and int(nan) ValueError: both halves of the config boundary share
    # kvplan.config.reader.check_int, which refuses them first
    data = json.loads((MODEL_DIR / "meta-llama__Llama-3.1-8B.json").read_text())
    data["intermediate_size"] = value
    with pytest.raises(ConfigError, match="must be an integer"):
        parse_dims(data)


def test_fp8_expert_dtype_other_than_fp8_or_fp4_is_refused():
    # FineGrainedFP8Config.post_init raises for anything but "fp8" / "fp4": kvplan says so in one line
    with pytest.raises(ConfigError, match="expert_dtype' must be fp8 or fp4"):
        parse_quant({"quant_method": "fp8", "weight_block_size": [128, 128], "expert_dtype": "fp6"}, [])
    plain = parse_quant({"quant_method": "fp8", "weight_block_size": [128, 128], "expert_dtype": "fp8"}, [])
    assert plain.experts is None   # fp8 experts: priced as every other projection


def test_inkling2_loop_config_wins_over_the_loop_fields():
    """Inkling2LoopTextConfig.__post_init__ takes `loop_config` {core_start, core_end, num_passes, gate_rank} over the
    loop_* fields: a config.json that gives only it (here with stale fields beside it) is read as transformers reads
    it, the cache one layer per visit (total_num_hidden_layers: 12 + (2 - 1) x 6 = 18) and the weights per built
    layer with the message gates on layers 3-8."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    loop = {"core_start": 3, "core_end": 9, "num_passes": 2, "gate_rank": 16}
    kwargs = dict(num_hidden_layers=12, n_routed_experts=8, n_layers_per_attn_res_block=3)
    cfg = transformers.CONFIG_MAPPING["inkling2_loop_text"](**kwargs, loop_config=loop)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    data = {**cfg.to_dict(), "dtype": "bfloat16", "loop_layer_index_start": 6, "loop_layer_index_end": 12,
            "loop_num_passes": 3, "loop_gate_rank": 64}
    verified.ENFORCE = False
    try:
        spec = kvplan.parse_config(data)
    finally:
        verified.ENFORCE = True
    assert cfg.total_num_hidden_layers == 18 and len(spec.layers) == 18
    assert param_count(spec.arch).total == sum(p.numel() for p in model.parameters())


def test_inkling_checkpoint_kwargs_size_the_mlps_as_its_config_class_does():
    """InklingTextConfig.__post_init__ reads two keys a checkpoint's config.json may carry and to_dict() drops:
    `dense_intermediate_size` (then intermediate_size is the experts' width, transformers #49416) and
    `dense_mlp_idx` (the first N layers dense). 6 layers, 8 experts of 1,000, the first 2 dense of 4,000."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    raw = {"intermediate_size": 1000, "dense_intermediate_size": 4000, "dense_mlp_idx": 2}
    cfg = transformers.CONFIG_MAPPING["inkling_text"](num_hidden_layers=6, n_routed_experts=8, **raw)
    assert (cfg.intermediate_size, cfg.moe_intermediate_size, cfg.mlp_layer_types[:3]) == (4000, 1000,
                                                                                           ["dense"] * 2 + ["sparse"])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    data = {k: v for k, v in cfg.to_dict().items() if k not in ("mlp_layer_types", "moe_intermediate_size")}
    verified.ENFORCE = False
    try:
        shape = kvplan.parse_config({**data, **raw, "dtype": "bfloat16"}).arch
    finally:
        verified.ENFORCE = True
    # transformers 5.24 on meta counts 4,135,835,142 for this config (the sum two lines up, pinned)
    assert param_count(shape).total == sum(p.numel() for p in model.parameters()) == 4_135_835_142


def test_rwkv_parameters_by_hand():
    """RWKV-4 defaults (RwkvConfig: hidden 4,096, attention 4,096, intermediate 4 x 4,096, 32 blocks, vocab 50,277,
    untied head), tensor by tensor as modeling_rwkv.py builds them: a block's time mixing 4 x 4,096^2 (key, value,
    receptance, output) + 2 x 4,096 (time_decay, time_first) + 3 x 4,096 (time_mix_*), channel mixing
    2 x 16,384 x 4,096 + 4,096^2 + 2 x 4,096, ln1 and ln2 2 x 2 x 4,096; block 0's pre_ln 2 x 4,096; embeddings and
    head 2 x 50,277 x 4,096; ln_out 2 x 4,096. transformers on meta counts 7,392,649,216 (docs/coverage.md)."""
    h, i, v = 4096, 4 * 4096, 50277
    block = (4 * h * h + 5 * h) + (2 * i * h + h * h + 2 * h) + 4 * h
    expected = 32 * block + 2 * h + 2 * v * h + 2 * h
    # a config.json may leave the derived sizes null: RwkvConfig.__post_init__ fills hidden and 4 x hidden
    config = {"model_type": "rwkv", "hidden_size": h, "num_hidden_layers": 32, "vocab_size": v,
              "attention_hidden_size": None, "intermediate_size": None, "tie_word_embeddings": False}
    assert param_count(kvplan.parse_config(config, name="rwkv").arch).total == expected == 7_392_649_216


def test_recurrent_gemma_parameters_by_hand():
    """RecurrentGemma-2B defaults (RecurrentGemmaConfig: 26 blocks recurrent, recurrent, attention; hidden and
    lru_width 2,560, 10 heads x 256, intermediate 7,680, conv1d_width 4, vocab 256,000, tied): a recurrent block
    linear_x / linear_y / linear_out 3 x (2,560^2 + 2,560), conv_1d 2,560 x 4 + 2,560, rg_lru 2,560 + 2 x (10 x 256^2
    + 2,560); an attention block q / k / v / o 4 x 2,560^2 and o_proj's bias 2,560; every block's MLP (intermediate
    // 2 = 3,840) 3 x (3,840 x 2,560) + 2 x 3,840 + 2,560 and two RMSNorms 2 x 2,560; embeddings 256,000 x 2,560,
    final_norm 2,560. transformers on meta counts 2,010,263,040 (docs/coverage.md)."""
    h, w, heads, mlp = 2560, 2560, 10, 3840
    recurrent = 3 * (w * h + w) + (w * 4 + w) + w + 2 * (heads * (w // heads) ** 2 + w)
    attention = 4 * h * h + h
    common = 3 * mlp * h + 2 * mlp + h + 2 * h
    expected = 18 * recurrent + 8 * attention + 26 * common + 256_000 * h + h
    config = {"model_type": "recurrent_gemma", "hidden_size": h, "num_hidden_layers": 26, "num_attention_heads": 10,
              "intermediate_size": 7680, "vocab_size": 256_000, "tie_word_embeddings": True,
              "block_types": ["recurrent", "recurrent", "attention"]}
    assert param_count(kvplan.parse_config(config, name="rg").arch).total == expected == 2_010_263_040


@pytest.mark.parametrize("model_type", ["deepseek_v4", "inkling2_text", "inkling_text"])
def test_the_float32_rule_line_counts_what_transformers_keeps_in_float32(model_type):
    """The weights rule's "N parameters in float32" line, by group, is transformers' own count of float32 parameters
    in a bf16 model (_keep_in_fp32_modules_strict). DeepSeek-V4's and Inkling's float32 tensors were two mechanisms
    (a separate fp32 list, and a fourth element on the family extras) and the line read only the first, so Inkling's
    float32 short convolutions and queries were priced at 4 B but never named."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = transformers.CONFIG_MAPPING[model_type]()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    # the float32 router matrices (Inkling 2's mlp.gate.weight) have a rule line of their own
    fp32 = sum(p.numel() for n, p in model.named_parameters() if p.dtype == torch.float32
               and not n.endswith("mlp.gate.weight"))
    verified.ENFORCE = False
    try:
        shape = kvplan.parse_config({**cfg.to_dict(), "dtype": "bfloat16"}).arch
    finally:
        verified.ENFORCE = True
    line = [r for r in weights_bytes(shape).rules if "parameters in float32" in r]
    assert line and line[0].startswith(f"{fp32:,} parameters in float32"), (line, fp32)
