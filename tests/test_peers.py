"""Other calculators' published numbers, and one test per mistake that recurs among them (peers.md).

Each mistake test pins kvplan's exact bytes and shows that the peer's naive formula gives another number,
so a regression towards the naive formula fails loudly.

Mistakes of peers.md and where they are caught:

1. head_dim from hidden_size / heads ............ test_head_dim_* (Qwen3-0.6B, gemma-2/3, gpt-oss)
2. attention heads instead of KV heads .......... test_gqa_* / test_mqa_* (Llama-3.1-8B, Llama-2-70B, Falcon)
3. sliding layers counted full or dropped ....... test_sliding_* (gemma-2-9b, gpt-oss-20b, Mistral-7B-v0.1)
4. MLA by name, or its latent doubled ........... test_mla_* (DeepSeek-V3 under its own and an unknown name)
6. KV dtype assumed to be the weight dtype ...... test_kv_dtype_* (fp32 / fp16 / fp8 / int4 KV on bf16 models)

The planner's mistakes are caught next to the rules they break:
5. KV divided by TP without keeping one KV head per GPU .. test_vllm_rules.py::test_qwen3_30b_kv_heads_replicated_*
   and ::test_qwen3_coder_tp8_published_log_* (24,576 B/token per rank on TP8, not 12,288)
7. Engine overhead constants that go stale ............... test_vllm_rules.py::test_engine_version_drops_the_sampler_*
   (vLLM 0.16 vs 0.17 activation, measured 5.64 vs 2.23 GiB) and the calibration test against measured start-ups
8. Catalog memory instead of physical memory ............. test_gpus.py (calibration labels resolve to 79.19 GiB)
9. "GPU KV cache size" read as capacity on hybrids ........ test_vllm_rules.py::test_gemma2_9b_hybrid_concurrency_*,
   ::test_gpt_oss_20b_hybrid_concurrency_* (tokens per group vs concurrency, hand-derived)
"""

from __future__ import annotations

import copy

import pytest

import kvplan
from kvplan.sources.files import read_config_file
from kvplan.sources.library import bundled_index
from kvplan.units import fmt_gb

GiB = 2**30


def est(model, seq_len, batch_size=1, kv_dtype=None, **kwargs) -> kvplan.Estimate:
    return kvplan.estimate(model, seq_len, batch_size, kv_dtype, **kwargs)


def token_bytes(model, kv_dtype=None) -> int:
    """Bytes one token occupies across all layers at batch 1 (bookkeeping scalars left out)."""
    e = est(model, 1, 1, kv_dtype)
    return e.kv_cache_bytes - e.bookkeeping_bytes


def raw_config(model_id: str) -> dict:
    return copy.deepcopy(read_config_file(bundled_index()[model_id.lower()]))


# ---------------------------------------------------------------- published worked examples


@pytest.mark.parametrize(
    "model_id, per_token, total_bytes, published",
    [
        # gaunernst kv-cache-calculator, bf16, 32,768 tokens x 8 users, decimal GB
        ("Qwen/Qwen2.5-7B", 57_344, 15_032_385_536, "15.03 GB"),       # 28 x 2 x 4 x 128 x 2
        ("Qwen/Qwen3-30B-A3B", 98_304, 25_769_803_776, "25.77 GB"),    # 48 x 2 x 4 x 128 x 2
        ("mistralai/Mixtral-8x7B-v0.1", 131_072, 34_359_738_368, "34.36 GB"),  # 32 x 2 x 8 x 128 x 2
    ],
)
def test_gaunernst_totals(model_id, per_token, total_bytes, published):
    assert token_bytes(model_id, "bf16") == per_token
    e = est(model_id, 32_768, 8, "bf16")
    # 32,768 tokens x 8 users: the calculator's inputs
    assert e.kv_cache_bytes == total_bytes == per_token * 32_768 * 8
    assert fmt_gb(e.kv_cache_bytes) == published
    assert e.bytes_per_token == per_token


def test_llama31_8b_per_token_kv_cache_size_crate():
    # kv-cache-size crate: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B
    assert token_bytes("meta-llama/Llama-3.1-8B", "bf16") == 32 * 8 * 128 * 2 * 2 == 131_072


def test_llama_7b_llm_analysis_published_544_tokens():
    # llm-analysis: LLaMA-7B (MHA: 32 layers, 32 heads, hidden 4096), 512 prompt + 32 generated, fp16,
    # counted as 544 cached tokens. Llama-2-7b-hf has the same shape.
    e = est("meta-llama/Llama-2-7b-hf", 544, 1, "fp16", prompt_len=512)
    assert e.kv_cache_bytes == 2 * 32 * 4096 * 2 * 544 == 285_212_672
    assert f"{e.kv_cache_bytes / 1e6:.2f} MB" == "285.21 MB"


def test_llama_7b_what_generate_really_caches_543_tokens():
    # generate(P=512, max_new_tokens=32) never feeds the last sampled token back, so the cache holds
    # P + N - 1 = 543 tokens (shared/reference/kv-rules.md; test_generate_caches_p_plus_n_minus_1 checks it
    # on a real transformers model). The published 285,212,672 B is one token (524,288 B) too high.
    e = est("meta-llama/Llama-2-7b-hf", 512 + 32 - 1, 1, "fp16", prompt_len=512)
    assert e.kv_cache_bytes == 2 * 32 * 4096 * 2 * 543 == 284_688_384
    assert 285_212_672 - e.kv_cache_bytes == 32 * 2 * 4096 * 2


def test_llama2_70b_gqa_4096_tokens_fp16():
    # The seeds' case: 80 layers x 8 KV heads x 128 x 2 x 2 B x 4,096 tokens = 1.25 GiB
    e = est("meta-llama/Llama-2-70b-hf", 4096, 1, "fp16")
    assert e.kv_cache_bytes == 80 * 8 * 128 * 2 * 2 * 4096 == 1_342_177_280 == int(1.25 * GiB)
    mha = kvplan.load_model("meta-llama/Llama-2-70b-hf", overrides=kvplan.Overrides(kv_heads=64))
    naive_mha = est(mha, 4096, 1, "fp16")
    # Llama-2-70b with 64 KV heads (MHA): 8 x the GQA 1,342,177,280 B above
    assert naive_mha.kv_cache_bytes == 8 * e.kv_cache_bytes == 10_737_418_240


@pytest.mark.slow  # ~15 s here, nearly all of it importing transformers' Llama modules
def test_generate_caches_p_plus_n_minus_1():
    """The 543-token reality on a real transformers Llama with the LLaMA-7B head layout, shrunk."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=32, num_key_value_heads=32,
                                      num_hidden_layers=2, intermediate_size=64, vocab_size=64,
                                      max_position_embeddings=1024)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 64, (1, 512))
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    cache = getattr(out, "cache", None) or out.past_key_values  # transformers 5.24 renamed it `cache`
    assert cache.layers[0].keys.shape[-2] == 543
    real = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    spec = kvplan.parse_config(config.to_dict())
    assert est(spec, 543, 1, "fp32").kv_cache_bytes == real  # built in float32, the default dtype


# ---------------------------------------------------------------- 1. head_dim given by the config


@pytest.mark.parametrize(
    "model_id, layers, kv_heads, head_dim, naive_head_dim, dtype",
    [
        ("Qwen/Qwen3-0.6B", 28, 8, 128, 1024 // 16, "bf16"),      # head_dim 128 != 1024 / 16 = 64
        ("google/gemma-2-9b", 42, 8, 256, 3584 // 16, "bf16"),    # 256 != 224
        ("google/gemma-2-27b", 46, 16, 128, 4608 // 32, "bf16"),  # 128 != 144: naive is too HIGH here
        ("google/gemma-3-4b-it", 34, 4, 256, 2560 // 8, "bf16"),  # text_config: 256 != 320
        ("openai/gpt-oss-20b", 24, 8, 64, 2880 // 64, "bf16"),    # 64 != 45
    ],
)
def test_head_dim_from_config_not_hidden_over_heads(model_id, layers, kv_heads, head_dim, naive_head_dim, dtype):
    expected = layers * 2 * kv_heads * head_dim * 2
    naive = layers * 2 * kv_heads * naive_head_dim * 2
    assert token_bytes(model_id, dtype) == expected != naive
    assert kvplan.load_model(model_id).head_dim == head_dim


def test_head_dim_given_wins_for_an_unknown_family():
    data = {"model_type": "brand_new", "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
            "hidden_size": 1024, "head_dim": 128, "torch_dtype": "bfloat16"}
    assert token_bytes(kvplan.parse_config(data)) == 4 * 2 * 8 * 128 * 2 == 16_384  # not 8,192 (1024/16 = 64)
    del data["head_dim"]
    assert token_bytes(kvplan.parse_config(data)) == 4 * 2 * 8 * 64 * 2  # only then hidden / heads


# ---------------------------------------------------------------- 2. KV heads, not attention heads


@pytest.mark.parametrize(
    "model_id, kv_heads, heads, expected",
    [
        ("meta-llama/Llama-3.1-8B", 8, 32, 32 * 2 * 8 * 128 * 2),     # 4x too high with 32 heads
        ("meta-llama/Llama-2-70b-hf", 8, 64, 80 * 2 * 8 * 128 * 2),   # 8x
        ("Qwen/Qwen2.5-7B", 4, 28, 28 * 2 * 4 * 128 * 2),             # 7x
        ("google/gemma-2b", 1, 8, 18 * 2 * 1 * 256 * 2),              # MQA
    ],
)
def test_gqa_uses_kv_heads(model_id, kv_heads, heads, expected):
    model = kvplan.load_model(model_id)
    assert model.kv_heads == kv_heads
    assert token_bytes(model, "bf16") == expected
    mha = kvplan.load_model(model_id, overrides=kvplan.Overrides(kv_heads=heads))
    assert token_bytes(mha, "bf16") == expected * heads // kv_heads


@pytest.mark.parametrize(
    "model_id, expected",
    [
        # Falcon-7B multi_query: one KV head whatever the 71 attention heads say
        ("tiiuae/falcon-7b-instruct", 32 * 2 * 1 * 64 * 2),
        # SantaCoder (gpt_bigcode, multi_query): one KV head of 128
        ("bigcode/gpt_bigcode-santacoder", 24 * 2 * 1 * 128 * 2),
    ],
)
def test_mqa_families_keep_one_kv_head(model_id, expected):
    assert token_bytes(model_id, "bf16") == expected
    assert kvplan.load_model(model_id).kv_heads == 1


# ---------------------------------------------------------------- 3. sliding-window layers


def test_sliding_gemma2_9b_half_the_layers_slide():
    # 21 sliding layers keep 4,096 tokens, 21 full layers 8,192; 8 KV heads x 256 x 2 x 2 B = 8,192 B per layer-token
    per_layer_token = 2 * 8 * 256 * 2
    e = est("google/gemma-2-9b", 8192, 1, "bf16")
    scalars = 21 * 8  # one int64 `_sliding_window_tensor` per sliding layer
    assert e.kv_cache_bytes == 21 * per_layer_token * (4096 + 8192) + scalars == 2_113_929_384
    counted_full = 42 * per_layer_token * 8192
    dropped = 21 * per_layer_token * 8192
    assert e.kv_cache_bytes not in (counted_full, dropped, counted_full + scalars, dropped + scalars)
    # gemma-2-9b config.json sliding_window 4,096; 8,192 the sequence
    assert {g.kind: g.tokens for g in e.groups} == {"sliding": 4096, "full": 8192}


def test_sliding_gpt_oss_20b_128_token_window():
    per_layer_token = 2 * 8 * 64 * 2
    e = est("openai/gpt-oss-20b", 8192, 1, "bf16")
    # gpt-oss-20b: 12 sliding (window 128) + 12 full layers x 2 x 8 KV heads x 64 x 2 B, + 12 int64 counters
    assert e.kv_cache_bytes == 12 * per_layer_token * 128 + 12 * per_layer_token * 8192 + 12 * 8 == 204_472_416
    assert e.kv_cache_bytes - e.bookkeeping_bytes not in (24 * per_layer_token * 8192, 12 * per_layer_token * 8192)


def test_sliding_mistral_7b_v01_every_layer_slides():
    per_layer_token = 2 * 8 * 128 * 2
    e = est("mistralai/Mistral-7B-v0.1", 8192, 1, "bf16")
    # Mistral-7B-v0.1: 32 layers, window 4,096 x 4,096 B a layer-token, + 32 int64 counters = 536,871,168
    assert e.kv_cache_bytes == 32 * per_layer_token * 4096 + 32 * 8 == 536_871_168
    counted_full = 32 * per_layer_token * 8192  # 2x too high; dropping the layers would give 0
    assert e.kv_cache_bytes - e.bookkeeping_bytes == counted_full // 2


@pytest.mark.parametrize(
    "seq_len, cached",
    [
        # Mistral-7B-v0.1's 4,096-token window (config.json sliding_window): tokens cached at each length
        (4095, 4095),   # under the window: every token kept
        (4096, 4096),   # exactly the window
        (4097, 4096),   # one past: the oldest token is dropped
        (100_000, 4096),
    ],
)
def test_sliding_window_boundary_mistral(seq_len, cached):
    e = est("mistralai/Mistral-7B-v0.1", seq_len, 1, "bf16")
    assert e.kv_cache_bytes == 32 * 2 * 8 * 128 * 2 * cached + 32 * 8


def test_sliding_window_absent_key_takes_the_family_default_and_null_means_full():
    data = raw_config("mistralai/Mistral-7B-v0.1")
    del data["sliding_window"]  # MistralConfig's default: 4096
    assert kvplan.parse_config(data).attention_kinds == {"sliding": 32}
    data["sliding_window"] = None  # explicit null: full attention (Mistral-7B-v0.2 and later)
    assert kvplan.parse_config(data).attention_kinds == {"full": 32}
    assert est(kvplan.parse_config(data), 8192, 1, "bf16").kv_cache_bytes == 32 * 2 * 8 * 128 * 2 * 8192


# ---------------------------------------------------------------- 4. MLA


def test_mla_deepseek_v3_one_latent_per_token_per_layer():
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B; no K/V pair, no per-head expansion
    assert token_bytes("deepseek-ai/DeepSeek-V3", "bf16") == 61 * 576 * 2 == 70_272
    doubled = 2 * 61 * 576 * 2
    naive_mha = 61 * 128 * (192 + 128) * 2  # 128 heads x (qk_nope 128 + rope 64) keys + 128 values
    assert 70_272 not in (doubled, naive_mha)


@pytest.mark.parametrize("model_id, layers", [("deepseek-ai/DeepSeek-V2-Lite", 27), ("moonshotai/Kimi-K2-Instruct", 61)])
def test_mla_other_families(model_id, layers):
    assert token_bytes(model_id, "bf16") == layers * 576 * 2


@pytest.mark.parametrize("model_type", ["my_private_mla", "llama", None])
def test_mla_detected_by_fields_not_by_name(model_type):
    """A config with kv_lora_rank is MLA whatever it is called (llm-d detects MLA by architecture name)."""
    data = raw_config("deepseek-ai/DeepSeek-V3")
    data["architectures"] = ["SomethingForCausalLM"]
    if model_type is None:
        del data["model_type"]
    else:
        data["model_type"] = model_type
    model = kvplan.parse_config(data)
    assert model.is_mla
    assert token_bytes(model, "bf16") == 61 * 576 * 2


# ---------------------------------------------------------------- 6. KV dtype != weight dtype


def test_kv_dtype_fp32_and_fp16_on_a_bf16_model():
    bf16 = 32 * 2 * 8 * 128 * 2
    assert kvplan.load_model("meta-llama/Llama-3.1-8B").dtype.name == "bfloat16"
    # fp32: 32 x 2 x 8 x 128 x 4 B
    assert token_bytes("meta-llama/Llama-3.1-8B", "fp32") == 2 * bf16 == 262_144
    e = est("meta-llama/Llama-3.1-8B", 1, 1, "fp16")
    assert e.kv_cache_bytes == bf16 and e.kv_dtype == "float16"


def test_kv_dtype_default_is_the_config_dtype():
    assert est("meta-llama/Llama-2-7b-hf", 1).kv_dtype == "float16"
    assert est("meta-llama/Llama-3.1-8B", 1).kv_dtype == "bfloat16"
    assert est("state-spaces/mamba-2.8b-hf", 1).activation_dtype == "float32"


def test_kv_dtype_int4_quantized_cache_on_a_bf16_model():
    # quanto int4, group 64, residual 128; P = T = 4096, so nothing sits in the full-precision residual.
    # Per K (or V) tensor per layer: n = 4,096 x 8 x 128 = 4,194,304 elements -> 2,097,152 B packed
    # + 65,536 groups x (scale + zero point) x 2 B (bf16) = 262,144 B.
    e = est("meta-llama/Llama-3.1-8B", 4096, 1, "int4", cache="quantized")
    assert e.kv_cache_bytes == 32 * 2 * (2_097_152 + 262_144) == 150_994_944
    as_weight_dtype = 32 * 2 * 8 * 128 * 2 * 4096  # bf16 KV: 536,870,912
    without_scales = as_weight_dtype // 4
    assert e.kv_cache_bytes not in (as_weight_dtype, without_scales)


def test_kv_dtype_fp8_quantized_cache_on_a_bf16_model():
    # fp8 backend: 1 B per element plus one float32 scale for K and one for V per layer
    e = est("meta-llama/Llama-3.1-8B", 4096, 1, "fp8", cache="quantized")
    assert e.kv_cache_bytes == 32 * 2 * 8 * 128 * 1 * 4096 + 32 * 2 * 4 == 268_435_712


def test_kv_dtype_fp8_with_the_default_cache_is_one_byte_per_element():
    """Issue #24: fp8 with the default cache was refused (transformers' DynamicCache holds no fp8); it is now the
    engine-neutral figure, 1 B an element with no scales (vLLM and SGLang keep theirs outside the pool), half of
    bf16's, as vLLM 0.19 measured 952,032 fp8 tokens where bf16 gave 476,016 (peers.md)."""
    e = est("meta-llama/Llama-3.1-8B", 4096, 1, "fp8")
    # 32 layers x 2 x 8 KV heads x 128 x 1 B (fp8) x 4,096 tokens
    assert e.engine == "neutral" and e.kv_cache_bytes == 32 * 2 * 8 * 128 * 1 * 4096 == 268_435_456
    assert 2 * e.bytes_per_token == est("meta-llama/Llama-3.1-8B", 4096).bytes_per_token
    with pytest.raises(kvplan.WorkloadError, match="quantized"):   # transformers' static cache: still refused
        est("meta-llama/Llama-3.1-8B", 4096, 1, "fp8", cache="static")


def test_int4_weights_still_cache_the_activation_dtype():
    """An AWQ / GPTQ / mxfp4 checkpoint computes (and caches) in its torch dtype, not in 4 bits."""
    data = raw_config("meta-llama/Llama-3.1-8B")
    data["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    data["torch_dtype"] = "float16"
    e = est(kvplan.parse_config(data), 4096)
    assert e.kv_dtype == "float16"
    # 32 x 2 x 8 x 128 x 2 B (fp16) x 4,096 tokens
    assert e.kv_cache_bytes == 32 * 2 * 8 * 128 * 2 * 4096 == 536_870_912
    gpt_oss = est("openai/gpt-oss-20b", 1, 1, "bf16")  # mxfp4 weights, bf16 KV
    assert gpt_oss.kv_dtype == "bfloat16"
