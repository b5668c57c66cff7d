"""`kvplan.estimate` on its own: workload validation, each cache strategy, each kind of layer, the breakdown.

Numbers are spelled out as products of config values so a failing case shows which factor moved.
Per layer-token sizes used below (bf16): Llama-3.1-8B 2 x 8 x 128 x 2 = 4,096 B; gemma-2-9b 2 x 8 x 256 x 2 = 8,192 B.
"""

from __future__ import annotations

import pytest

import kvplan
from kvplan.cache.estimate import _ranges
from kvplan.sources.library import bundled_index

LLAMA = "meta-llama/Llama-3.1-8B"
GEMMA = "google/gemma-2-9b"
LLAMA_LT = 2 * 8 * 128 * 2   # bytes per layer per token
GEMMA_LT = 2 * 8 * 256 * 2
SCALAR = 8                   # one int64 0-d bookkeeping tensor


@pytest.fixture(scope="module")
def llama():
    return kvplan.load_model(LLAMA)


@pytest.fixture(scope="module")
def gemma():
    return kvplan.load_model(GEMMA)


# ---------------------------------------------------------------- workload validation


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(seq_len=0),                          # nothing cached is not a workload
        dict(seq_len=-1),
        dict(seq_len=True),                       # bool is an int subclass: refused anyway
        dict(seq_len=1.5),
        dict(seq_len=4096.0),                     # a float, even a whole one
        dict(seq_len="4096"),
        dict(seq_len=None),
        dict(seq_len=2**40 + 1),                  # past MAX_TOKENS
        dict(seq_len=10, batch_size=0),
        dict(seq_len=10, batch_size=2**24 + 1),   # past MAX_BATCH
        dict(seq_len=10, cache="paged"),          # not a transformers cache
        dict(seq_len=10, prompt_len=11),          # the prompt is part of the cache
        dict(seq_len=10, prompt_len=0),
        dict(seq_len=10, kv_dtype="int3"),
        dict(seq_len=10, kv_dtype="fp8", cache="static"),  # fp8 in transformers' own caches: the quantized one
        dict(seq_len=10, kv_dtype="int8"),        # int8 / int4: the quantized cache (fp8 alone is engine-neutral)
        dict(seq_len=10, kv_dtype="bf16", dtype="fp16"),  # an unquantized cache stores the activation dtype
        dict(seq_len=10, dtype="int8"),           # transformers does not compute in int8
        dict(seq_len=10, cache="static", max_cache_len=9),  # a static cache cannot grow
        dict(seq_len=10, cache="static", max_cache_len=0),
        dict(seq_len=10, cache="quantized", kv_dtype="bf16"),
        dict(seq_len=10, cache="quantized", kv_dtype="int8", quant_backend="quanto"),  # quanto: int2/int4
        dict(seq_len=10, cache="quantized", kv_dtype="int4", quant_backend="fp8"),
        dict(seq_len=10, cache="quantized", quant_backend="bitsandbytes"),
        dict(seq_len=10, cache="quantized", q_group_size=0),
        dict(seq_len=10, cache="quantized", residual_length=-1),
    ],
)
def test_invalid_workloads_raise_workload_error(llama, kwargs):
    with pytest.raises(kvplan.WorkloadError):
        kvplan.estimate(llama, **kwargs)


def test_workload_errors_are_kvplan_errors_with_one_line_messages(llama):
    with pytest.raises(kvplan.KVPlanError) as info:
        kvplan.estimate(llama, 10, prompt_len=11)
    assert "\n" not in str(info.value) and "seq_len" in str(info.value)


def test_quantized_cache_refuses_sliding_models(gemma):
    # transformers' QuantizedCache only accepts full-attention layer lists
    with pytest.raises(kvplan.WorkloadError, match="full-attention"):
        kvplan.estimate(gemma, 10, cache="quantized")


def test_unknown_model_id_is_model_not_available():
    with pytest.raises(kvplan.ModelNotAvailableError):
        kvplan.estimate("definitely not a model", 10)


# ---------------------------------------------------------------- inputs and defaults


def test_id_spec_and_path_give_the_same_estimate(llama):
    by_id = kvplan.estimate(LLAMA, 4096)
    by_spec = kvplan.estimate(llama, 4096)
    by_path = kvplan.estimate(kvplan.load_model(bundled_index()[LLAMA.lower()]), 4096)
    assert by_id.kv_cache_bytes == by_spec.kv_cache_bytes == by_path.kv_cache_bytes == 32 * LLAMA_LT * 4096


def test_defaults(llama):
    e = kvplan.estimate(llama, 4096)
    assert (e.batch_size, e.cache, e.prompt_len, e.max_cache_len, e.quant_backend) == (1, "dynamic", 4096, None, None)
    assert e.kv_dtype == e.activation_dtype == "bfloat16"
    q = kvplan.estimate(llama, 4096, cache="quantized")
    assert (q.kv_dtype, q.quant_backend, q.activation_dtype) == ("int4", "quanto", "bfloat16")
    assert kvplan.estimate(llama, 4096, kv_dtype="int8", cache="quantized").quant_backend == "hqq"


@pytest.mark.parametrize("name", ["bf16", "bfloat16", "torch.bfloat16", "BF16", kvplan.resolve_dtype("bf16")])
def test_dtype_spellings(llama, name):
    assert kvplan.estimate(llama, 1, kv_dtype=name).kv_dtype == "bfloat16"


@pytest.mark.parametrize("batch", [1, 2, 7, 64])
def test_dynamic_is_linear_in_batch_and_tokens(llama, batch):
    assert kvplan.estimate(llama, 1000, batch).kv_cache_bytes == 32 * LLAMA_LT * 1000 * batch


def test_bookkeeping_scalars_do_not_scale_with_batch(gemma):
    one, eight = kvplan.estimate(gemma, 100, 1), kvplan.estimate(gemma, 100, 8)
    assert one.bookkeeping_bytes == eight.bookkeeping_bytes == 21 * SCALAR
    assert eight.kv_cache_bytes - eight.bookkeeping_bytes == 8 * (one.kv_cache_bytes - one.bookkeeping_bytes)


# ---------------------------------------------------------------- cache strategies


def test_static_cache_preallocates_max_cache_len(llama):
    e = kvplan.estimate(llama, 1000, cache="static", max_cache_len=4096)
    # every StaticLayer also holds an int64 cumulative_length
    assert e.kv_cache_bytes == 32 * LLAMA_LT * 4096 + 32 * SCALAR == 536_871_168
    assert e.max_cache_len == 4096 and e.prefill_peak_bytes == e.kv_cache_bytes


@pytest.mark.parametrize(
    "max_cache_len, sliding_tokens",
    [
        (8192, 4096),   # StaticSlidingWindowLayer holds min(W, M) = W
        (1000, 1000),   # ... or M when the preallocation is shorter than the window
    ],
)
def test_static_sliding_layers_hold_min_window_max_len(gemma, max_cache_len, sliding_tokens):
    e = kvplan.estimate(gemma, 1000, cache="static", max_cache_len=max_cache_len)
    assert e.kv_cache_bytes == 21 * GEMMA_LT * (sliding_tokens + max_cache_len) + 42 * SCALAR


def test_offloaded_keeps_one_layer_on_the_device(llama):
    e = kvplan.estimate(llama, 1000, cache="offloaded")
    assert e.kv_cache_bytes == 32 * LLAMA_LT * 1000
    assert e.device_bytes == LLAMA_LT * 1000 and e.host_bytes == 31 * LLAMA_LT * 1000
    assert any("CUDA" in n for n in e.notes)


def test_offloaded_static_keeps_sliding_layers_on_the_device(gemma):
    e = kvplan.estimate(gemma, 8192, cache="offloaded_static")
    assert e.host_bytes == 20 * GEMMA_LT * 8192  # 21 full layers, one of them resident
    assert e.device_bytes == 21 * GEMMA_LT * 4096 + GEMMA_LT * 8192 + 42 * SCALAR
    assert e.device_bytes + e.host_bytes == e.kv_cache_bytes


def test_quantized_fp8_backend_is_the_fp8_default(llama):
    e = kvplan.estimate(llama, 100, kv_dtype="fp8", cache="quantized")
    assert e.quant_backend == "fp8"
    assert e.kv_cache_bytes == 32 * 2 * 8 * 128 * 100 + 32 * 2 * 4  # 1 B elements + a float32 scale per K and V


def test_fp8_with_the_default_cache_is_the_engine_neutral_figure(llama):
    """Issue #24: `--kv-dtype fp8` needed `--cache quantized`. With the default cache it is every element in one
    byte, what vLLM 0.33 and SGLang 0.5.23 store per token (their own plans below, each from its engine's source),
    and transformers' fp8 (the quantized cache's fp8 backend) is that plus a float32 scale per K and V a layer."""
    e = kvplan.estimate(llama, 1000, kv_dtype="fp8")
    assert e.engine == "neutral" and e.kv_dtype == "float8_e4m3" and e.activation_dtype == "bfloat16"
    assert e.bytes_per_token == 32 * 2 * 8 * 128 * 1 == 65_536      # 32 layers x K and V x 8 heads x 128 x 1 B
    assert e.kv_cache_bytes == 65_536 * 1000
    assert kvplan.estimate(llama, 1000, kv_dtype="fp8", cache="quantized").kv_cache_bytes == 65_536_000 + 32 * 8
    assert "transformers' DynamicCache cannot hold fp8" in " ".join(e.notes)
    for engine in ("vllm", "sglang"):
        p = kvplan.plan(llama, engine=engine, kv_dtype="fp8", max_model_len=8192)
        assert p.kv_bytes_per_token == e.bytes_per_token, engine


def test_fp8_mla_is_the_dense_layout_both_engines_use():
    """DeepSeek-V3: the latent (kv_lora_rank 512) and its rope part (64) in fp8, 576 B a layer a token over 61
    layers: vLLM 0.33's MLAAttentionSpec and SGLang 0.5.23's MLATokenToKVPool; the sparse kernels' 656 B is noted."""
    e = kvplan.estimate("deepseek-ai/DeepSeek-V3", 1000, kv_dtype="fp8")
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 1 B (fp8)
    assert e.bytes_per_token == 61 * (512 + 64) == 35_136
    assert "656 B" in " ".join(e.notes)
    for engine in ("vllm", "sglang"):
        p = kvplan.plan("deepseek-ai/DeepSeek-V3", engine=engine, gpu="H200", num_gpus=8, kv_dtype="fp8",
                        max_model_len=8192)
        # 61 x 576 x 1 B, the same on both engines
        assert p.kv_bytes_per_token == 35_136, engine


@pytest.mark.parametrize(
    "generated, residual",
    [
        (0, 0),        # prompt quantized whole at prefill
        (100, 100),    # decode tokens wait in the bf16 residual
        (127, 127),    # one short of the flush: the largest cache of the cycle
        (128, 0),      # flushed: everything re-quantized
        (300, 44),     # 300 mod 128
    ],
)
def test_quantized_quanto_residual(llama, generated, residual):
    P, T = 4096, 4096 + generated
    e = kvplan.estimate(llama, T, kv_dtype="int4", cache="quantized", prompt_len=P)
    n = (T - residual) * 8 * 128                    # elements of one quantized K (or V) tensor
    one_tensor = n // 2 + 2 * (n // 64) * 2 + residual * 8 * 128 * 2  # packed int4 + bf16 scale/zero + residual
    assert e.kv_cache_bytes == 32 * 2 * one_tensor
    assert e.prefill_peak_bytes == 150_994_944  # the 4,096-token prompt alone (test_peers pins it)


# ---------------------------------------------------------------- layer kinds


def test_sliding_logical_bytes_are_window_minus_one(gemma):
    e = kvplan.estimate(gemma, 8192)
    # DynamicSlidingWindowLayer keeps a W-1 view over W stored tokens
    assert e.logical_bytes == 21 * GEMMA_LT * 4095 + 21 * GEMMA_LT * 8192 + 21 * SCALAR
    sliding = next(g for g in e.groups if g.kind == "sliding")
    assert (sliding.tokens, sliding.logical_tokens) == (4096, 4095)


def test_sliding_prefill_pins_the_whole_prompt(gemma):
    # right after an 8,192-token prefill the W-1 view still pins all 8,192 tokens of every sliding layer
    e = kvplan.estimate(gemma, 8192, prompt_len=8192)
    assert e.prefill_peak_bytes == 42 * GEMMA_LT * 8192 + 21 * SCALAR


def test_window_of_one_keeps_everything():
    # transformers slices `[-(W-1):]` = `[-0:]` for W = 1, which keeps every token
    data = {"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "hidden_size": 256, "sliding_window": 1, "torch_dtype": "bfloat16"}
    e = kvplan.estimate(kvplan.parse_config(data), 100)
    assert e.kv_cache_bytes == 2 * 2 * 2 * 64 * 2 * 100 + 2 * SCALAR


def test_chunked_layers_llama4_scout():
    # 36 RoPE layers attend within 8,192-token chunks (cached as a window), every 4th layer is full
    e = kvplan.estimate("meta-llama/Llama-4-Scout-17B-16E-Instruct", 16384)
    assert e.kv_cache_bytes == 36 * LLAMA_LT * 8192 + 12 * LLAMA_LT * 16384 + 36 * SCALAR == 2_013_266_208
    assert e.bytes_per_token == 12 * LLAMA_LT  # only the full layers still grow


@pytest.mark.parametrize("seq_len", [1, 4096, 1_000_000])
def test_mamba_state_is_constant_in_tokens(seq_len):
    # 64 layers x (conv 5,120 x 4 + SSM 5,120 x 16) x 4 B (float32: the config names no dtype)
    e = kvplan.estimate("state-spaces/mamba-2.8b-hf", seq_len)
    assert e.kv_cache_bytes == 64 * (5120 * 4 + 5120 * 16) * 4 == 26_214_400
    assert e.bytes_per_token == 0 and e.groups[0].tokens is None


def test_jamba_hybrid():
    e = kvplan.estimate("ai21labs/AI21-Jamba-1.5-Mini", 1000)
    attention = 4 * LLAMA_LT * 1000                      # layers 4, 12, 20, 28
    mamba = 28 * (8192 * 4 * 2 + 8192 * 16 * 4)          # conv in bf16, SSM state in float32
    assert e.kv_cache_bytes == attention + mamba == 32_899_072
    assert {g.kind: g.layer_indices for g in e.groups}["full"] == "4,12,20,28"


def test_qwen3_next_hybrid():
    e = kvplan.estimate("Qwen/Qwen3-Next-80B-A3B-Thinking", 1000)
    attention = 12 * 2 * 2 * 256 * 2 * 1000
    gdn = 36 * ((2 * 16 * 128 + 32 * 128) * 4 * 2 + 32 * 128 * 128 * 4)
    # Qwen3-Next: 12 attention layers x 2 x 2 KV heads x 256 x 2 B x 1,000; 36 Gated DeltaNet layers: conv
    # (2 x 16 x 128 + 32 x 128) x kernel 4 x 2 B + float32 state 32 x 128 x 128 x 4 B; tests/test_truth_meta.py
    # measures this bundled config on meta
    assert e.kv_cache_bytes == attention + gdn == 102_432_768


def test_shared_kv_layers_store_nothing():
    data = {"model_type": "novel", "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 4,
            "head_dim": 64, "num_kv_shared_layers": 2, "torch_dtype": "float16"}
    e = kvplan.estimate(kvplan.parse_config(data), 10)
    assert e.kv_cache_bytes == 4 * 2 * 4 * 64 * 2 * 10
    assert {g.kind: g.layers for g in e.groups} == {"full": 4, "none": 2}


# ---------------------------------------------------------------- breakdown


def test_groups_name_their_layers(gemma):
    e = kvplan.estimate(gemma, 10)
    rows = {g.kind: g for g in e.groups}
    assert rows["sliding"].layer_indices == ",".join(str(i) for i in range(0, 42, 2))
    assert rows["full"].layers == 21 and rows["full"].bytes_per_token == GEMMA_LT
    assert rows["sliding"].detail == "2 x 8 KV heads x 256, window 4096"


@pytest.mark.parametrize(
    "indices, text",
    [
        ([0, 1, 2, 3], "0-3"),
        ([0, 1, 2, 3, 5, 7], "0-3,5,7"),
        ([4], "4"),
        ([1, 3, 5], "1,3,5"),
        ([], ""),
    ],
)
def test_ranges(indices, text):
    assert _ranges(indices) == text


def test_formula_ends_with_the_total(gemma):
    e = kvplan.estimate(gemma, 8192, 2)
    assert e.formula.endswith(f"= {e.kv_cache_bytes:,} B (3.94 GiB)")
    assert "168 B bookkeeping scalars" in e.formula


# ---------------------------------------------------------------- the grouped fast path


@pytest.mark.parametrize("cache", ["dynamic", "static", "offloaded", "offloaded_static", "quantized"])
def test_grouped_totals_equal_the_per_layer_sum(cache):
    """build_estimate sizes each group of identical layers once; summing kvplan.cache.hf over every layer agrees."""
    from kvplan.cache.estimate import make_plan
    from kvplan.cache.hf import layer_bytes

    for model_id in kvplan.bundled_ids():
        spec = kvplan.load_model(model_id)
        if cache == "quantized" and not spec.all_full_attention:
            continue
        if cache != "dynamic" and "compressed" in spec.spec_kinds:
            continue    # DeepSeek-V4: transformers builds its compressor state only in a dynamic cache (refused)
        static = {"max_cache_len": 6000} if "static" in cache else {}
        plan = make_plan(spec, 5000, 3, cache=cache, prompt_len=4000, **static)
        flat = [layer_bytes(s, plan) for _, s in spec.specs()]
        scalars = sum(lb.scalars for lb in flat)
        e = kvplan.estimate(spec, 5000, 3, cache=cache, prompt_len=4000, **static)
        assert e.kv_cache_bytes == sum(lb.storage for lb in flat) + scalars, model_id
        assert e.logical_bytes == sum(lb.logical for lb in flat) + scalars, model_id
        assert e.prefill_peak_bytes == sum(lb.after_prefill for lb in flat) + scalars, model_id
        moved = [lb.storage for lb in flat if lb.offloadable and lb.storage]
        assert e.host_bytes == (sum(moved[1:]) if cache.startswith("offloaded") else 0), model_id


def test_layout_cache_follows_the_object_not_the_name(llama):
    import dataclasses

    first = kvplan.estimate(llama, 100).kv_cache_bytes
    halved = dataclasses.replace(llama, layers=llama.layers[:16])  # same name, another object
    assert kvplan.estimate(halved, 100).kv_cache_bytes == first // 2
    assert kvplan.estimate(llama, 100).kv_cache_bytes == first


# ---------------------------------------------------------------- issue #23: the zoo's last KV refusals

CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"


def _v4(types: list[str], **changes) -> kvplan.ModelSpec:
    """DeepSeek-V4's cache fields as DeepseekV4Config.to_dict() writes them (head_dim 512, window 128, indexer 128,
    CSA every 4 tokens, HCA every 128), with `types` as its layers."""
    data = {"model_type": "deepseek_v4", "num_hidden_layers": len(types), "layer_types": types, "head_dim": 512,
            "sliding_window": 128, "index_head_dim": 128, "num_attention_heads": 64, "num_key_value_heads": 1,
            "hidden_size": 4096, "compress_rates": {CSA: 4, HCA: 128}, "dtype": "bfloat16", **changes}
    return kvplan.parse_config(data, name="v4")


@pytest.mark.parametrize("kind, after_prefill, decoded", [
    # CSA right after a 1,000-token prefill: the 1,000-token K (= V) the window view pins, 1,000 / 4 = 250 entries
    # of 512 + 128, the prefill's kv and gate projections (each 2 x 640 wide) still pinned by the empty buffer
    # views, the overlap (4 x 640 in bf16 + 4 x 640 in float32); one decode step later: a 128-token window, the
    # same 250 entries, 1 buffered token (1,001 mod 4), the overlap
    (CSA, 1000 * 512 * 2 + 250 * 640 * 2 + 1000 * 2 * 1280 * 2 + 4 * 640 * (2 + 4),
     128 * 512 * 2 + 250 * 640 * 2 + 1 * 2 * 1280 * 2 + 4 * 640 * (2 + 4)),
    # HCA: 7 entries of 512, kv and gate 512 wide each, no indexer, no overlap; then 1,001 mod 128 = 105 buffered
    (HCA, 1000 * 512 * 2 + 7 * 512 * 2 + 1000 * 2 * 512 * 2, 128 * 512 * 2 + 7 * 512 * 2 + 105 * 2 * 512 * 2),
    # a plain sliding layer: DynamicSlidingWindowLayer concatenates K and V apart, 2 x 512 per token
    ("sliding_attention", 1000 * 2 * 512 * 2, 128 * 2 * 512 * 2),
])
def test_deepseek_v4_layers_by_hand(kind, after_prefill, decoded):
    model = _v4([kind])
    prefill = kvplan.estimate(model, 1000, dtype="bf16")
    assert prefill.prefill_peak_bytes == after_prefill + SCALAR
    assert kvplan.estimate(model, 1001, prompt_len=1000, dtype="bf16").kv_cache_bytes == decoded + SCALAR


def test_deepseek_v4_buffer_at_a_window_close():
    """At 1,004 tokens a CSA window has just closed: 251 entries, the buffer an empty view of the 4 tokens
    concatenated at that step (storage 4 tokens, logical 0)."""
    est = kvplan.estimate(_v4([CSA]), 1004, prompt_len=1000, dtype="bf16")
    entries, overlap = 251 * 640 * 2, 4 * 640 * (2 + 4)
    # window 128 x 512 x 2 B; 251 entries (1,004 / 4) of 640 x 2 B; 4 buffered tokens' kv and gate 2 x 1,280 x 2 B;
    # the overlap 4 x 640 x (2 + 4 B), as test_deepseek_v4_layers_by_hand's table works them
    assert est.kv_cache_bytes == 128 * 512 * 2 + entries + 4 * 2 * 1280 * 2 + overlap + SCALAR
    assert est.logical_bytes == 127 * 512 * 2 + entries + 0 + overlap + SCALAR


def test_deepseek_v4_default_pattern_and_legacy_ratios():
    """DeepseekV4Config without layer_types: 2 HCA, then CSA and HCA in turn (43 layers: 23 HCA, 20 CSA); a
    legacy config's compress_ratios (0 / 4 / 128 per layer) name the types instead."""
    data = {"model_type": "deepseek_v4", "num_hidden_layers": 43, "head_dim": 512, "sliding_window": 128,
            "index_head_dim": 128, "num_attention_heads": 64, "hidden_size": 4096}
    kinds = [layer[0].overlap for layer in kvplan.parse_config(data).layers]
    assert kinds.count(False) == 23 and kinds.count(True) == 20 and kinds[:4] == [False, False, False, True]
    legacy = kvplan.parse_config({**data, "num_hidden_layers": 3, "compress_ratios": [0, 4, 128]})
    assert [layer[0].kind for layer in legacy.layers] == ["sliding", "compressed", "compressed"]


@pytest.mark.parametrize("cache", ["static", "offloaded", "quantized"])
def test_deepseek_v4_only_in_the_dynamic_cache(cache):
    with pytest.raises(kvplan.WorkloadError, match="--cache dynamic"):
        kvplan.estimate(_v4([CSA, HCA]), 1000, cache=cache)


def test_dots3_note_indexer_keys_are_float32():
    """Dots3-Note's indexed layers: the bf16 latent (512 + 64) x 2 B beside float32 indexer keys 128 x 4 B, 1,664 B
    per token (all bf16 would be 1,408), in a float32 model 704 x 4 B."""
    data = {"model_type": "dots3_note_text", "num_hidden_layers": 1, "layer_types": ["indexed_attention"],
            "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_head_dim": 128, "num_attention_heads": 64,
            "hidden_size": 4096, "dtype": "bfloat16"}
    model = kvplan.parse_config(data)
    est = kvplan.estimate(model, 1000)
    assert est.kv_cache_bytes == 1000 * ((512 + 64) * 2 + 128 * 4)
    assert est.groups[0].bytes_per_token == 1664 and "1,000 tokens x 1 seq x 1,664 B" in est.formula
    assert kvplan.estimate(model, 1000, dtype="fp32").kv_cache_bytes == 1000 * 704 * 4


def test_inkling_convolution_states_are_float32():
    """An Inkling sliding layer (16 KV heads x 128, window 512) keeps four float32 conv states of 4 columns:
    k and v over 16 x 128 channels, attention and MLP over hidden 6,144: (2 x 2,048 + 2 x 6,144) x 4 x 4 B."""
    data = {"model_type": "inkling_text", "num_hidden_layers": 1, "layer_types": ["hybrid_sliding"],
            "hidden_size": 6144, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
            "swa_num_key_value_heads": 16, "swa_head_dim": 128, "sliding_window_size": 512, "conv_kernel_size": 4,
            "dtype": "bfloat16"}
    est = kvplan.estimate(kvplan.parse_config(data), 1000)
    conv = (2 * 2048 + 2 * 6144) * 4 * 4
    assert est.prefill_peak_bytes == 1000 * 2 * 16 * 128 * 2 + conv + SCALAR
    assert est.logical_bytes == 511 * 2 * 16 * 128 * 2 + conv + SCALAR


def test_rwkv_state_by_hand():
    """RWKV-4 defaults (hidden 4,096, 32 layers) in bf16: per layer and sequence two token-shift vectors in bf16 and
    three WKV vectors in float32, 4,096 x (2 x 2 + 3 x 4) B, the same at 10 tokens and at 100,000."""
    data = {"model_type": "rwkv", "hidden_size": 4096, "num_hidden_layers": 32, "dtype": "bfloat16"}
    model = kvplan.parse_config(data)
    for tokens in (10, 100_000):
        assert kvplan.estimate(model, tokens, batch_size=2).kv_cache_bytes == 2 * 32 * 4096 * (2 * 2 + 3 * 4)
