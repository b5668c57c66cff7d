"""The generate peak (kvplan.planning.engines.hf_peak), second file (#26): what tests/test_mut_peak.py leaves alive.

Pinned here, each figure worked out by hand from the config beside it:
- `activation_shape` whole, for an all-Mamba, an all-MoE and a dense model (its fields are the contract every
  term reads: a missing layer kind must leave a field at its documented zero / "gated" / () / False);
- `hf_peak` without `shape=` (a dense gated decoder from the plain sizes), and the defaults of `hf_peak` and
  `hf_peak_for` (experts "grouped_mm", device "cuda": HQQ's scratch in fp16);
- GPT-BigCode's non-persistent causal-mask buffer (transformers 5.24 modeling_gpt_bigcode.py GPTBigCodeAttention:
  `register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)),
  persistent=False)`, one byte an element) on top of the weights, by rule and from a checkpoint's headers;
- an explicit `weights_bytes` beating the checkpoint, an offloaded estimate with no cache, and eager masks of an
  MLA model with sliding layers (MLA layers are the full, causal kind).
Workloads are estimate(model, 1000, 2): batch 2 x 1,000 tokens, 2,000 tokens in all."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import kvplan
from kvplan import estimate, load_model, plan
from kvplan.planning.engines.hf_peak import ActivationShape, activation_shape, buffer_bytes, hf_peak, hf_peak_for

CONFIGS = Path(__file__).resolve().parent.parent / "model_configs"


# ----------------------------------------------------------------------------- activation_shape, field by field
def test_an_all_mamba_model_leaves_every_attention_and_mlp_field_at_its_zero():
    """state-spaces/mamba-2.8b-hf: hidden 2,560, vocab 50,280 (already a multiple of pad_vocab_size_multiple 8),
    64 Mamba mixers of inner expand 2 x 2,560 = 5,120 and state 16; no attention, no MLP, no MoE. So q / kv / heads
    0; no spec caches K / V (StateSpec has no elems_per_token): cache elements 0 and K elements 0 (not None, not
    1); no full layer; mlp_kind stays "gated", sinks False, deltanet ()."""
    assert activation_shape(load_model("state-spaces/mamba-2.8b-hf")) == ActivationShape(
        hidden_size=2560, vocab_size=50_280, q_dim=0, kv_dim=0, num_heads=0, num_kv_heads=0, intermediate_size=0,
        mlp_kind="gated", moe_intermediate_size=0, moe_top_k=0, moe_experts=0, shared_intermediate_size=0,
        min_window=None, ssm_inner=5120, ssm_state=16, cache_elems_per_token=0, mla=False, has_full_attention=False,
        cache_k_elems_per_token=0, deltanet=(), sinks=False)


def test_an_all_moe_model_keeps_the_gated_kind_and_its_expert_sizes():
    """mistralai/Mixtral-8x7B-v0.1: hidden 4,096, vocab 32,000, 32 heads x 128 = 4,096 q, 8 KV heads x (128 + 128) =
    2,048 K + V (K 1,024) a token; every layer MoE (8 experts of 14,336, top 2), no dense MLP (0) and no shared
    expert; sliding_window null: no window. mlp_kind stays "gated" (no MLPDims layer sets it)."""
    assert activation_shape(load_model("mistralai/Mixtral-8x7B-v0.1")) == ActivationShape(
        hidden_size=4096, vocab_size=32_000, q_dim=4096, kv_dim=2048, num_heads=32, num_kv_heads=8,
        intermediate_size=0, mlp_kind="gated", moe_intermediate_size=14_336, moe_top_k=2, moe_experts=8,
        shared_intermediate_size=0, min_window=None, ssm_inner=0, ssm_state=0, cache_elems_per_token=2048,
        mla=False, has_full_attention=True, cache_k_elems_per_token=1024, deltanet=(), sinks=False)


def test_a_dense_gated_model_is_gated():
    """meta-llama/Llama-3.2-1B: hidden 2,048, vocab 128,256, 32 heads x 64 = 2,048 q, 8 KV heads x (64 + 64) = 1,024
    K + V (K 512) a token, a gated (gate / up, SiLU) MLP of 8,192: mlp_kind "gated", the word the MLP term reads."""
    assert activation_shape(load_model("meta-llama/Llama-3.2-1B")) == ActivationShape(
        hidden_size=2048, vocab_size=128_256, q_dim=2048, kv_dim=1024, num_heads=32, num_kv_heads=8,
        intermediate_size=8192, mlp_kind="gated", moe_intermediate_size=0, moe_top_k=0, moe_experts=0,
        shared_intermediate_size=0, min_window=None, ssm_inner=0, ssm_state=0, cache_elems_per_token=1024,
        mla=False, has_full_attention=True, cache_k_elems_per_token=512, deltanet=(), sinks=False)


def test_mla_layers_count_as_full_attention_for_the_eager_masks():
    """DeepSeek-V2-Lite's config (bf16, b = 2) with its 27 layers made alternately sliding (window 128) and full,
    by hand: the full ones are MLA ("mla" kind), the rest sliding. Eager attention keeps one additive B x P x P mask
    per kind, causal for the MLA layers and windowed for the rest: 2 x 2 x 1,000 x 1,000 x 2 B = 8,000,000 (one
    kind alone would be 4,000,000)."""
    config = json.loads((CONFIGS / "deepseek-ai__DeepSeek-V2-Lite.json").read_text())
    config["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(27)]
    config["sliding_window"] = 128
    model = kvplan.parse_config(config)
    assert model.attention_kinds == {"sliding": 14, "mla": 13}   # layers 0, 2, ..., 26 slide
    assert activation_shape(model).has_full_attention is True
    peak = hf_peak_for(model, estimate(model, 1000, 2), attn_implementation="eager")
    assert dict(peak.terms)["masks"] == 8_000_000   # 2 kinds x 2 x 1,000 x 1,000 x 2 B


# ----------------------------------------------------------------------------- hf_peak without a shape, its defaults
LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, vocab_size=128_256, q_dim=2048, kv_dim=1024)  # config


def test_without_a_shape_the_plain_sizes_make_a_dense_gated_decoder():
    """No `shape=`: ActivationShape(hidden, vocab, q, kv, intermediate_size=I) with no heads (head_dim 0, so no
    RoPE term; no KV heads, so no repeat_kv) and no window. Llama-3.2-1B's sizes, 2,000 tokens in bf16 (b = 2):
    mlp       2,000 x 3 x 8,192 x 2 = 98,304,000 (gate, up, their product)
    attention 2,000 x (3 x 2,048 + 2 x 1,024) x 2 = 32,768,000
    stream    3 x 2,000 x 2,048 x 2 = 24,576,000 (+ 2 x 2,000 x 0 x 2 for RoPE)
    logits    2 x 128,256 x (2 + 8) = 2,565,120, under the MLP: activations 24,576,000 + 98,304,000 = 122,880,000.
    decode: one layer's K / V again while torch.cat copies it, 2 x 1,000 x 1,024 x 2 = 4,096,000, + the logits:
    6,661,120."""
    model = load_model("meta-llama/Llama-3.2-1B")
    peak = hf_peak(estimate(model, 1000, 2), weights_bytes=0, **LLAMA_1B)
    assert dict(peak.terms) == {"mlp": 98_304_000, "attention": 32_768_000, "masks": 0, "stream": 24_576_000}
    assert peak.prefill_activation_bytes == 122_880_000      # 24,576,000 + 98,304,000
    assert peak.decode_transient_bytes == 4_096_000 + 2_565_120   # one layer's copy + the logits


def test_an_unknown_mlp_kind_is_priced_as_gated():
    """`.get(mlp_kind, 3)`: a kind outside gated / fused_gated / plain counts the gated 3 x I live tensors:
    2,000 x 3 x 8,192 x 2 B = 98,304,000, as for Llama-3.2-1B's gated MLP."""
    model = load_model("meta-llama/Llama-3.2-1B")
    shape = ActivationShape(2048, 128_256, 2048, 1024, 32, 8, 8192, mlp_kind="swiglu")   # Llama-3.2-1B's sizes
    peak = hf_peak(estimate(model, 1000, 2), weights_bytes=0, shape=shape, **LLAMA_1B)
    assert dict(peak.terms)["mlp"] == 98_304_000   # 2,000 x 3 x 8,192 x 2 B


MIXTRAL_GROUPED = 508_112_000   # Mixtral's grouped_mm experts: 112,000 + 491,616,000 + 16,384,000 (below)


def test_hf_peak_and_hf_peak_for_default_to_grouped_mm_experts():
    """Mixtral-8x7B (H 4,096, 8 experts of 14,336, top 2), 2,000 tokens: S = 4,000 rows; router 2,000 x 8 x 4 +
    4,000 x 12 = 112,000; grouped_mm: H + 4 I_e = 61,440 > 4 H, 4,000 x 61,440 x 2 + 4,000 x 24 = 491,616,000; +
    2,000 x 4,096 x 2 = 16,384,000: 508,112,000 (the eager loop would give 205,200,000)."""
    model = load_model("mistralai/Mixtral-8x7B-v0.1")
    est = estimate(model, 1000, 2)
    assert dict(hf_peak_for(model, est).terms)["experts"] == MIXTRAL_GROUPED
    s = activation_shape(model)
    peak = hf_peak(est, weights_bytes=0, hidden_size=4096, intermediate_size=0, vocab_size=32_000, q_dim=4096,
                   kv_dim=2048, shape=s)   # Mixtral's config sizes, as above
    assert dict(peak.terms)["experts"] == MIXTRAL_GROUPED


def test_hf_peak_and_hf_peak_for_default_to_cuda_for_hqq():
    """Llama-3.2-1B, HQQ int4 cache: the prefill quantizes one layer's K of the prompt, n = 2 x 1,000 x 512 =
    1,024,000 elements, six copies in fp16 on CUDA (the default device): 12,288,000 (fp32 elsewhere: 24,576,000),
    on top of the attention's 2,000 x (3 x 2,048 + 2 x 1,024) x 2 = 32,768,000: 45,056,000."""
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="quantized", quant_backend="hqq", kv_dtype="int4")
    terms = dict(hf_peak_for(model, est).terms)
    assert terms["attention"] == 32_768_000 + 6 * 1_024_000 * 2
    assert terms["mlp"] == 98_304_000   # 2,000 x 3 x 8,192 x 2 B: the quantizer's scratch is the attention's alone
    peak = hf_peak(est, weights_bytes=0, shape=activation_shape(model), **LLAMA_1B)
    assert dict(peak.terms)["attention"] == 32_768_000 + 6 * 1_024_000 * 2   # six fp16 copies


# ----------------------------------------------------------------------------- offloaded, no cache
def test_an_offloaded_decode_holds_the_device_share():
    """Llama-3.2-1B, OffloadedCache: one layer of the 65,536,000 B on the device, 4,096,000 (16 layers x 2 x 1,000 x
    1,024 x 2 B, 1 of 16): decode 2,471,628,800 weights + 32,000 inputs + 16,016 output ids + 4,096,000 + the step's
    6,661,120 (a layer copied by torch.cat 4,096,000 + logits 2,565,120) = 2,482,433,936; the formula's steady
    cache is the device share."""
    model = load_model("meta-llama/Llama-3.2-1B")
    p = hf_peak_for(model, estimate(model, 1000, 2, cache="offloaded"))
    assert p.decode_bytes == 2_482_433_936   # as above
    assert "steady cache 4,096,000 + decode transient 6,661,120)" in p.formula   # the device share, 1 of 16 layers


def test_an_offloaded_estimate_with_no_cache_puts_none_on_the_device():
    """An offloaded estimate whose cache is 0 B (built from Llama-3.2-1B's by model_copy): the device share
    `prefill_peak x device // kv_cache` has no cache to divide by, and the prefill holds 0 B of it, not 1 B.
    The real one holds 65,536,000 B (16 layers x 2 x 1,000 x 1,024 x 2 B), one layer of it, 4,096,000, on the device."""
    model = load_model("meta-llama/Llama-3.2-1B")
    real = estimate(model, 1000, 2, cache="offloaded")
    assert (real.kv_cache_bytes, real.prefill_peak_bytes) == (65_536_000, 65_536_000)   # as above
    est = real.model_copy(update={"kv_cache_bytes": 0, "device_bytes": 0})
    peak = hf_peak_for(model, est)
    assert peak.prefill_bytes - peak.weights_bytes - peak.inputs_bytes - peak.prefill_activation_bytes == 0


# ----------------------------------------------------------------------------- GPT-BigCode's mask buffer, the weights
def test_gpt_bigcode_holds_its_causal_mask_buffer():
    """santacoder: n_positions 2,048, so a 2,048 x 2,048 boolean buffer, 4,194,304 B. Llama (no such buffer): 0."""
    assert buffer_bytes(load_model("bigcode/gpt_bigcode-santacoder")) == 2048 * 2048 == 4_194_304   # 1 B each
    assert buffer_bytes(load_model("meta-llama/Llama-3.2-1B")) == 0


def test_the_rule_weights_of_gpt_bigcode_add_the_buffer():
    """bigcode/gpt_bigcode-santacoder, no torch_dtype in its config: float32 (4 B). Parameters: wte 49,280 x 2,048 =
    100,925,440; wpe 2,048 x 2,048 = 4,194,304; per layer ln_1 4,096 + c_attn 2,048 x (2,048 + 2 x 128) + 2,304 =
    4,720,896 + c_proj 2,048 x 2,048 + 2,048 = 4,196,352 + ln_2 4,096 + c_fc 2,048 x 8,192 + 8,192 = 16,785,408 +
    c_proj 8,192 x 2,048 + 2,048 = 16,779,264: 42,490,112, x 24 layers = 1,019,762,688; ln_f 4,096; lm_head tied.
    1,124,886,528 x 4 B = 4,499,546,112, + the mask buffer 4,194,304 = 4,503,740,416."""
    model = load_model("bigcode/gpt_bigcode-santacoder")
    assert hf_peak_for(model, estimate(model, 1000, 2)).weights_bytes == 4_499_546_112 + 4_194_304


def _santacoder_checkpoint(folder: Path, dtype: str, size: int) -> int:
    """santacoder cut to 1 layer, its tensors in one header-only safetensors file (the data a sparse hole: kvplan
    reads only the header and checks the file's length); `size` bytes an element. Returns the stored bytes."""
    config = json.loads((CONFIGS / "bigcode__gpt_bigcode-santacoder.json").read_text())
    config["n_layer"] = 1
    if dtype == "BF16":
        config["torch_dtype"] = "bfloat16"
    (folder / "config.json").write_text(json.dumps(config))
    H, I, V, P = 2048, 8192, 49_280, 2048   # n_embd, n_inner, vocab_size, n_positions
    p = "transformer.h.0"
    shapes = {"transformer.wte.weight": [V, H], "transformer.wpe.weight": [P, H],
              f"{p}.ln_1.weight": [H], f"{p}.ln_1.bias": [H],
              f"{p}.attn.c_attn.weight": [H + 256, H], f"{p}.attn.c_attn.bias": [H + 256],   # q + 1 KV head of 128 x 2
              f"{p}.attn.c_proj.weight": [H, H], f"{p}.attn.c_proj.bias": [H],
              f"{p}.ln_2.weight": [H], f"{p}.ln_2.bias": [H],
              f"{p}.mlp.c_fc.weight": [I, H], f"{p}.mlp.c_fc.bias": [I],
              f"{p}.mlp.c_proj.weight": [H, I], f"{p}.mlp.c_proj.bias": [H],
              "transformer.ln_f.weight": [H], "transformer.ln_f.bias": [H]}
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = math.prod(shape) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + offset)
    return offset


# 1-layer santacoder: wte 100,925,440 + wpe 4,194,304 + one layer 42,490,112 + ln_f 4,096 = 147,613,952 elements
ONE_LAYER = 147_613_952


def test_checkpoint_weights_are_what_the_headers_hold_plus_the_buffer(tmp_path):
    """Every tensor stored as F8_E4M3 (1 B, not castable: held as stored whatever the model dtype): 147,613,952 B
    resident + the 2,048 x 2,048 mask buffer 4,194,304 = 151,808,256. The config rule would give 147,613,952 x 4 B
    (float32, the config names no dtype) = 590,455,808 + 4,194,304: the checkpoint, not the rule, is what
    from_pretrained loads."""
    assert _santacoder_checkpoint(tmp_path, "F8_E4M3", 1) == ONE_LAYER      # 1 B an element
    model = load_model(tmp_path, weights="checkpoint")
    assert hf_peak_for(model, estimate(model, 1000, 2)).weights_bytes == ONE_LAYER + 4_194_304   # + 2,048^2


def test_an_explicit_weights_figure_beats_the_checkpoint(tmp_path):
    """weights_bytes given: hf_peak_for reads neither the checkpoint nor the rule (bf16 headers: 2 x 147,613,952 B)."""
    _santacoder_checkpoint(tmp_path, "BF16", 2)
    model = load_model(tmp_path, weights="checkpoint")
    assert hf_peak_for(model, estimate(model, 1000, 2), weights_bytes=123).weights_bytes == 123   # as given


def test_a_bf16_checkpoint_loads_its_headers_plus_the_buffer(tmp_path):
    """bf16 headers (2 B an element, the model dtype bfloat16): 2 x 147,613,952 = 295,227,904 resident + 4,194,304
    buffer = 299,422,208. This raised AttributeError ('str' object has no attribute 'bits': hf_peak_for passed the
    dtype's name to CheckpointWeights.resident_bytes), and so did kvplan.plan(model, engine="hf") for every
    checkpoint-loaded model with float tensors."""
    assert _santacoder_checkpoint(tmp_path, "BF16", 2) == 2 * ONE_LAYER
    model = load_model(tmp_path, weights="checkpoint")
    assert hf_peak_for(model, estimate(model, 1000, 2)).weights_bytes == 2 * ONE_LAYER + 4_194_304
    p = plan(model, engine="hf", gpu="H100", max_model_len=1024)   # the planner's path to it
    assert p.weights_bytes == 2 * ONE_LAYER + 4_194_304 and p.weights_source == "checkpoint"


# ----------------------------------------------------------------------------- the whole peak, every figure
def test_every_figure_of_a_dynamic_cache_peak():
    """Llama-3.2-1B (bf16, b = 2), DynamicCache, 2 x 1,000 tokens (prompt 1,000, seq_len 1,000).
    weights by rule: embed 128,256 x 2,048 = 262,668,288; a layer q 2,048 x 2,048 + k, v 2 x 2,048 x 512 + o 2,048 x
    2,048 + MLP 3 x 2,048 x 8,192 + 2 norms x 2,048 = 60,821,504, x 16 = 973,144,064; final norm 2,048; tied head:
    1,235,814,400 x 2 B = 2,471,628,800.
    inputs 2 x 2,000 x 8 = 32,000 (input_ids, attention_mask); output ids 2 x (1,000 + 1) x 8 = 16,016.
    cache 16 x 2 x 1,000 x 1,024 x 2 = 65,536,000, all of it right after the prefill and in steady decode.
    prefill activations: stream 3 x 2,000 x 2,048 x 2 + RoPE 2 x 2,000 x 64 x 2 = 25,088,000, no mask, + the MLP's
    98,304,000 (over attention 32,768,000 and logits 2,565,120): 123,392,000.
    prefill 2,471,628,800 + 32,000 + 65,536,000 + 123,392,000 = 2,660,588,800;
    decode transient one layer 4,096,000 + logits 2,565,120 = 6,661,120;
    decode 2,471,628,800 + 32,000 + 16,016 + 65,536,000 + 6,661,120 = 2,543,873,936; peak the prefill."""
    model = load_model("meta-llama/Llama-3.2-1B")
    p = hf_peak_for(model, estimate(model, 1000, 2))
    assert (p.weights_bytes, p.inputs_bytes, p.cache_bytes) == (2_471_628_800, 32_000, 65_536_000)   # as above
    assert (p.prefill_activation_bytes, p.decode_transient_bytes) == (123_392_000, 6_661_120)         # as above
    assert (p.prefill_bytes, p.decode_bytes) == (2_660_588_800, 2_543_873_936)                        # as above
    assert p.peak_allocated_bytes == 2_660_588_800 and p.cuda_context_bytes == 2**29   # 0.5 GiB of context
    # the formula names the largest transient by its bytes (the MLP), and no mask (there is none)
    assert p.formula == ("weights 2,471,628,800 + inputs 32,000 + max(prefill cache 65,536,000 + activations "
                         "123,392,000 [mlp], steady cache 65,536,000 + decode transient 6,661,120)")


def test_an_offloaded_static_prefill_holds_the_device_share():
    """Llama-3.2-1B, OffloadedStaticCache of 1,000 tokens: 65,536,000 B of layers + 128 B of bookkeeping scalars
    = 65,536,128 (the estimate's formula), one layer 4,096,000 + the 128 B on the device = 4,096,128. The prefill
    holds the same share: 65,536,128 x 4,096,128 // 65,536,128 = 4,096,128, so prefill 2,471,628,800 + 32,000 +
    4,096,128 + 123,392,000 = 2,599,148,928 (the whole cache would give 2,660,588,928). A static layer is written
    in place: decode transient the logits 2,565,120 alone; decode 2,471,628,800 + 32,000 + 16,016 + 4,096,128 +
    2,565,120 = 2,478,338,064."""
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="offloaded_static")
    assert (est.kv_cache_bytes, est.device_bytes, est.prefill_peak_bytes) == (65_536_128, 4_096_128, 65_536_128)
    p = hf_peak_for(model, est)
    assert (p.prefill_bytes, p.decode_bytes) == (2_599_148_928, 2_478_338_064)   # as above
    assert p.peak_allocated_bytes == 2_599_148_928


def test_eager_masks_add_to_the_prefill_activations():
    """Phi-3-mini eager (bf16; 32 heads of 96 = 3,072, 32 KV heads: no repeat_kv; window 2,047, every layer
    sliding): stream 3 x 2,000 x 3,072 x 2 + 2 x 2,000 x 96 x 2 = 37,632,000; one mask kind 2 x 1,000 x 1,000 x 2 =
    4,000,000; attention q 2,000 x 3,072 x 2 = 12,288,000 + scores 2 x 32 x 1,000 x 1,000 x (2 x 2 + 4) =
    512,000,000 = 524,288,000, over the MLP's 131,072,000: 37,632,000 + 4,000,000 + 524,288,000 = 565,920,000."""
    model = load_model("microsoft/Phi-3-mini-4k-instruct")
    est = estimate(model, 1000, 2)
    p = hf_peak_for(model, est, attn_implementation="eager", weights_bytes=0)
    assert p.prefill_activation_bytes == 565_920_000   # stream + masks + attention, as above
    # the cache: 32 layers x 2 x 1,000 x 2 x 3,072 x 2 B = 786,432,000 + 32 x 8 B of bookkeeping scalars = 786,432,256;
    # decode: one layer's copy 786,432,000 // 32 = 24,576,000 + logits 2 x 32,064 x (2 + 8) = 641,280: 25,217,280.
    # The formula names the largest transient by its bytes (attention 524,288,000, not the MLP's 131,072,000, though
    # "mlp" sorts after "attention") and the masks beside it.
    assert (est.kv_cache_bytes, est.bookkeeping_bytes) == (786_432_256, 256)   # as above
    assert p.formula == ("weights 0 + inputs 32,000 + max(prefill cache 786,432,256 + activations 565,920,000 "
                         "[attention, masks 4,000,000], steady cache 786,432,256 + decode transient 25,217,280)")


def test_the_decode_requantization_runs_on_the_device_asked_for():
    """Llama-3.2-1B, HQQ int4: at the last step a dequantized layer twice, 2 x 2 x 1,000 x 1,024 x 2 = 8,192,000,
    plus re-quantizing its K, n = 2 x 1,000 x 512 = 1,024,000, six copies: fp16 on CUDA 12,288,000, fp32 on a CPU
    24,576,000; + logits 2,565,120. CUDA (the default): 23,045,120; CPU: 35,333,120."""
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="quantized", quant_backend="hqq", kv_dtype="int4")
    assert hf_peak_for(model, est).decode_transient_bytes == 8_192_000 + 12_288_000 + 2_565_120
    assert hf_peak_for(model, est, device="cpu").decode_transient_bytes == 8_192_000 + 24_576_000 + 2_565_120


# ----------------------------------------------------------------------------- sdpa once a window forces a mask
@pytest.mark.parametrize("prompt, attention, masks", [
    # P 511 < W 512: no mask, flash / efficient kernels with is_causal: base alone, 1,022 x 4,096 x 2 = 8,372,224
    (511, 8_372_224, 0),
    # P 512 = W: a P x P boolean mask for the forward, 512 x 512 = 262,144; base 1,024 x 4,096 x 2 = 8,388,608 +
    # repeat_kv 2 x 1,024 x 1,024 x 2 = 4,194,304 + sdpa's additive copy 2 x 512 x 512 x (1 + 2) = 1,572,864
    (512, 8_388_608 + 4_194_304 + 1_572_864, 262_144),
    # P 1,000: 1,000,000 B mask; 16,384,000 + 8,192,000 + 2 x 1,000 x 1,000 x 3 = 6,000,000
    (1000, 16_384_000 + 8_192_000 + 6_000_000, 1_000_000),
])
def test_sdpa_masks_once_the_prompt_reaches_the_window(prompt, attention, masks):
    """gemma-3-1b-it (sdpa, bf16 b = 2): 4 heads of 256 (q 1,024), 1 KV head (K + V 512, repeated to the 4 heads
    once a mask is built), window 512; base = tokens x (3 x 1,024 + 2 x 512) x 2 = tokens x 8,192. Batch 2."""
    model = load_model("google/gemma-3-1b-it")
    terms = dict(hf_peak_for(model, estimate(model, prompt, 2)).terms)
    assert (terms["attention"], terms["masks"]) == (attention, masks)


def test_the_decode_copy_is_the_largest_layer_and_static_copies_only_sliding_ones():
    """gemma-3-1b-it, 2 x 1,000 tokens: 22 sliding layers of 2 x 512 x 512 x 2 B = 1,048,576 each (the window), 4 full
    ones of 2 x 1,000 x 512 x 2 = 2,048,000; logits 2 x 262,144 x (2 + 8) = 5,242,880. DynamicCache: torch.cat copies
    the largest layer, 2,048,000 + 5,242,880 = 7,290,880. StaticCache writes full layers in place and rolls a sliding
    one: 1,048,576 + 5,242,880 = 6,291,456."""
    model = load_model("google/gemma-3-1b-it")
    dynamic = hf_peak_for(model, estimate(model, 1000, 2)).decode_transient_bytes
    assert dynamic == 2_048_000 + 5_242_880 and type(dynamic) is int   # a layer's bytes // its count: an int
    static = hf_peak_for(model, estimate(model, 1000, 2, cache="static")).decode_transient_bytes
    assert static == 1_048_576 + 5_242_880 and type(static) is int     # the rolled sliding layer


def test_static_rolls_a_chunked_layer_too():
    """Llama-4-Scout (bf16), StaticCache of 1,000 tokens: 36 chunked layers (chunk 8,192) of 2 x 1,000 x 2 x 8 x 128
    x 2 B = 8,192,000 each, rolled like a sliding one; its 12 full layers are written in place. Logits 2 x 202,048
    x (2 + 8) = 4,040,960: 12,232,960."""
    model = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    static = estimate(model, 1000, 2, cache="static")
    assert hf_peak_for(model, static).decode_transient_bytes == 8_192_000 + 4_040_960   # as above


def test_without_heads_eager_scores_count_one_head():
    """No `shape=` and no head count: eager scores are B x 1 x P x P (`num_heads or 1`). Llama-3.2-1B's sizes, bf16:
    q 2,000 x 2,048 x 2 = 8,192,000 (no KV heads given: no repeat_kv) + 2 x 1 x 1,000 x 1,000 scores x (2 x 2 + 4) =
    16,000,000: 24,192,000; one additive mask kind (no window), 2 x 1,000 x 1,000 x 2 = 4,000,000."""
    model = load_model("meta-llama/Llama-3.2-1B")
    peak = hf_peak(estimate(model, 1000, 2), weights_bytes=0, attn_implementation="eager", **LLAMA_1B)
    terms = dict(peak.terms)
    assert (terms["attention"], terms["masks"]) == (8_192_000 + 16_000_000, 4_000_000)   # as above


def test_a_mamba_state_is_updated_in_place_at_decode():
    """mamba-2.8b-hf (float32, b = 4): its 64 layers' state (52,428,800 B, 819,200 a layer) holds no tokens, so no
    layer is copied by torch.cat at a step: the decode transient is the logits alone, 2 x 50,280 x (4 + 8) =
    1,206,720, with DynamicCache and with StaticCache (not a sliding layer) alike."""
    model = load_model("state-spaces/mamba-2.8b-hf")
    for cache in ("dynamic", "static"):
        assert hf_peak_for(model, estimate(model, 1000, 2, cache=cache)).decode_transient_bytes == 1_206_720  # logits
