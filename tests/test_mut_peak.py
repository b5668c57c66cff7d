"""The generate peak's per-layer transients (kvplan.planning.engines.hf_peak) pinned by hand arithmetic (#26).

hf_peak's terms are checked against torch in validation/ within a tolerance, which lets a wrong constant or a
swapped branch in one term through; these tests pin each term to the byte for a bundled model, with the
arithmetic written out from the config's sizes. Every workload is batch 2 x 1,000 prompt tokens (2,000 tokens,
bf16 activations, b = 2 bytes)."""
from __future__ import annotations

import pytest

from kvplan import estimate, load_model
from kvplan.planning.engines.hf_peak import ActivationShape, hf_peak, hf_peak_for


def _terms(name: str, implementation: str = "grouped_mm", **workload) -> dict[str, int]:
    model = load_model(name)
    peak = hf_peak_for(model, estimate(model, 1000, 2, **workload), experts_implementation=implementation)
    terms = dict(peak.terms)
    assert all(type(v) is int for v in terms.values()), terms     # bytes are ints inside, never a float
    return terms


# ----------------------------------------------------------------------------- routed experts
# router = tokens x E x 4 (float32 logits) + tokens x top_k x (8 + 4) (int64 indices, float32 weights)
# grouped_mm: S = tokens x max(1, top_k) rows; max(S x (H + 4 I_e), 4 x S x H) x b + S x 8 x 3 (sort indices)
# eager:      tokens x top_k x (E + 1) x 8 (one_hot) + tokens x H x b + tokens x 3 x I_e x b
# either: router + max(routed, shared expert tokens x 3 x I_s x b) + tokens x H x b (the layer's output)
EXPERTS = [
    # Qwen1.5-MoE-A2.7B: H 2,048, 60 experts of I_e 1,408, top 4, shared expert 5,632. S = 8,000;
    # router 2,000 x 60 x 4 + 8,000 x 12 = 576,000; H + 4 I_e = 7,680 < 4 H = 8,192, so the second branch:
    # 8,000 x 8,192 x 2 + 8,000 x 24 = 131,264,000 > shared 2,000 x 3 x 5,632 x 2 = 67,584,000;
    # + 2,000 x 2,048 x 2 = 8,192,000: 140,032,000
    ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "grouped_mm", 140_032_000),
    # eager: 8,000 x 61 x 8 = 3,904,000 + 8,192,000 + 2,000 x 3 x 1,408 x 2 = 16,896,000 -> 28,992,000, under the
    # shared expert's 67,584,000: 576,000 + 67,584,000 + 8,192,000 = 76,352,000
    ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "eager", 76_352_000),
    # Mixtral-8x7B: H 4,096, 8 experts of 14,336, top 2, no shared expert. S = 4,000; router 2,000 x 8 x 4 +
    # 4,000 x 12 = 112,000; H + 4 I_e = 61,440 > 4 H: 4,000 x 61,440 x 2 + 96,000 = 491,616,000;
    # + 2,000 x 4,096 x 2 = 16,384,000: 508,112,000
    ("mistralai/Mixtral-8x7B-v0.1", "grouped_mm", 508_112_000),
    # eager: 4,000 x 9 x 8 = 288,000 + 16,384,000 + 2,000 x 3 x 14,336 x 2 = 172,032,000 -> 188,704,000;
    # 112,000 + 188,704,000 + 16,384,000 = 205,200,000
    ("mistralai/Mixtral-8x7B-v0.1", "eager", 205_200_000),
    # Llama-4-Scout: H 5,120, 16 experts of 8,192, top 1, shared expert 8,192. S = 2,000 x max(1, 1) = 2,000;
    # router 2,000 x 16 x 4 + 2,000 x 12 = 152,000; 2,000 x (5,120 + 32,768) x 2 + 48,000 = 151,600,000 >
    # shared 2,000 x 3 x 8,192 x 2 = 98,304,000; + 2,000 x 5,120 x 2 = 20,480,000: 172,232,000
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "grouped_mm", 172_232_000),
    # eager: 2,000 x 17 x 8 = 272,000 + 20,480,000 + 98,304,000 = 119,056,000 > shared 98,304,000;
    # 152,000 + 119,056,000 + 20,480,000 = 139,688,000
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "eager", 139_688_000),
    # Qwen3-Next-80B-A3B: H 2,048, 512 experts of 512, top 10, shared 512. S = 20,000; router 2,000 x 512 x 4 +
    # 20,000 x 12 = 4,336,000; H + 4 I_e = 4,096 < 8,192: 20,000 x 8,192 x 2 + 480,000 = 328,160,000;
    # + 8,192,000: 340,688,000
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "grouped_mm", 340_688_000),
    # eager: 20,000 x 513 x 8 = 82,080,000 + 8,192,000 + 2,000 x 3 x 512 x 2 = 6,144,000 -> 96,416,000;
    # 4,336,000 + 96,416,000 + 8,192,000 = 108,944,000
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "eager", 108_944_000),
]


@pytest.mark.parametrize("name, implementation, expected", EXPERTS)
def test_routed_experts_transient(name, implementation, expected):
    assert _terms(name, implementation)["experts"] == expected


# ----------------------------------------------------------------------------- Gated DeltaNet
def test_gated_deltanet_chunked_torch_path():
    # Qwen3-Next-80B-A3B's linear attention: 16 key heads, 32 value heads, head dims 128 / 128. P = 1,000 pads to
    # 16 chunks of 64 = 1,024; conv width 2 x 16 x 128 + 32 x 128 = 8,192.
    # 5 x 2 x 1,024 x 32 x (256 + 128) x 4 = 503,316,480 (float32 q / k / v copies on the value heads)
    # + 3 x 2 x 32 x 1,024 x 64 x 4 = 50,331,648 (the per-chunk 64 x 64 attention)
    # + 3 x 2 x 1,000 x 8,192 x 2 = 98,304,000 (the causal conv over the mixed projections): 651,952,128
    assert _terms("Qwen/Qwen3-Next-80B-A3B-Instruct")["gated deltanet"] == 651_952_128
    # one sequence of 2,000 tokens: 32 chunks (31.25 rounded up; chunks of 65 would give 31), 2,048 padded rows,
    # the same 2,048 padded and 2,000 real tokens as above, so the same 651,952,128
    model = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert dict(hf_peak_for(model, estimate(model, 2000, 1)).terms)["gated deltanet"] == 651_952_128


# ----------------------------------------------------------------------------- quantized caches
# Llama-3.2-1B: q 32 x 64 = 2,048, K + V 2 x 8 x 64 = 1,024 (K 512) per token. sdpa without a window:
# 2,000 x (3 x 2,048 + 2 x 1,024) x 2 = 32,768,000; quantizing one layer's K of the prompt sees
# n = 2 x 1,000 x 512 = 1,024,000 elements
@pytest.mark.parametrize("workload, device, attention", [
    ({"quant_backend": "hqq", "kv_dtype": "int4"}, "cuda", 32_768_000 + 6 * 1_024_000 * 2),   # six fp16 copies
    ({"quant_backend": "hqq", "kv_dtype": "int4"}, "cpu", 32_768_000 + 6 * 1_024_000 * 4),    # six fp32 copies
    ({"quant_backend": "quanto", "kv_dtype": "int4"}, "cuda", 32_768_000 + 2 * 1_024_000 * 4),  # two fp32 copies
    ({"kv_dtype": "float8_e4m3"}, "cuda", 32_768_000),       # fp8 (the default backend for it) casts in place
])
def test_the_prefill_quantizer_scratch_by_backend_and_device(workload, device, attention):
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="quantized", **workload)
    peak = hf_peak_for(model, est, device=device)
    assert dict(peak.terms)["attention"] == attention
    assert type(peak.peak_allocated_bytes) is int


def test_a_latent_cache_quantizes_its_k_width_not_half_the_row():
    # DeepSeek-V2-Lite caches per token a 512-wide latent as K and the 64-wide RoPE key as V (576 elements): the
    # quantizer sees K, n = 2 x 1,000 x 512 = 1,024,000 (not 576 // 2 = 288 per token). q 16 x 192 = 3,072,
    # projected K + V 16 x (192 + 128) = 5,120: 2,000 x (3 x 3,072 + 2 x 5,120) x 2 = 77,824,000; quanto adds
    # 2 x 1,024,000 x 4 = 8,192,000: 86,016,000
    model = load_model("deepseek-ai/DeepSeek-V2-Lite")
    est = estimate(model, 1000, 2, cache="quantized", quant_backend="quanto")
    assert dict(hf_peak_for(model, est).terms)["attention"] == 86_016_000


def test_a_shape_without_its_k_width_quantizes_half_the_cached_elements():
    # a hand-built ActivationShape (the public `shape=` argument) that gives only K + V = 1,024 elements per token:
    # the quantizer's call sees K, 1,024 // 2 = 512 of them, as for Llama-3.2-1B above (quanto: 2 x 1,024,000 x 4)
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="quantized", quant_backend="quanto")
    shape = ActivationShape(2048, 128_256, 2048, 1024, 32, 8, 8192, cache_elems_per_token=1024)
    peak = hf_peak(est, weights_bytes=0, hidden_size=2048, intermediate_size=8192, vocab_size=128_256, q_dim=2048,
                   kv_dim=1024, shape=shape)
    attention = dict(peak.terms)["attention"]
    assert attention == 32_768_000 + 2 * 1_024_000 * 4 and type(attention) is int   # 2,000 x 8,192 x 2 + quanto


# ----------------------------------------------------------------------------- offloaded caches
def test_an_offloaded_prefill_holds_the_steady_device_share():
    # Llama-3.2-1B, offloaded: 16 layers x 2 x 1,000 x 1,024 x 2 B = 65,536,000 cached, one layer (4,096,000) on the
    # device; the prefill's cache term is 65,536,000 x 4,096,000 // 65,536,000 = 4,096,000, not the whole cache
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="offloaded")
    assert (est.kv_cache_bytes, est.device_bytes, est.prefill_peak_bytes) == (65_536_000, 4_096_000, 65_536_000)
    peak = hf_peak_for(model, est)
    cache_part = peak.prefill_bytes - peak.weights_bytes - peak.inputs_bytes - peak.prefill_activation_bytes
    assert cache_part == 4_096_000 and type(peak.prefill_bytes) is int    # 1 of the 16 layers


# ----------------------------------------------------------------------------- the MLP's kind, the terms a model has
@pytest.mark.parametrize("name, terms", [
    # plain (falcon's dense_h_to_4h, then GELU): 2 live [tokens, I] tensors, 2,000 x 2 x 18,176 x 2 B = 145,408,000
    # (attention 2,000 x (3 x 4,544 + 2 x 128) x 2 B = 55,552,000; stream 3 x 2,000 x 4,544 x 2 + 2 x 2,000 x 64 x 2)
    ("tiiuae/falcon-7b-instruct", {"mlp": 145_408_000, "attention": 55_552_000, "masks": 0, "stream": 55_040_000}),
    # fused gate_up (Phi-3's gate_up_proj [2 I], then its halves): 4 of them, 2,000 x 4 x 8,192 x 2 B = 131,072,000;
    # attention 2,000 x (3 x 3,072 + 2 x 6,144) x 2 B = 86,016,000 (no mask: P 1,000 under its 2,047 window)
    ("microsoft/Phi-3-mini-4k-instruct",
     {"mlp": 131_072_000, "attention": 86_016_000, "masks": 0, "stream": 37_632_000}),
    # gated (Llama's gate, up, their product): 3, 2,000 x 3 x 8,192 x 2 B = 98,304,000. A dense model has no
    # experts, SSM or DeltaNet term; attention 2,000 x (3 x 2,048 + 2 x 1,024) x 2 B = 32,768,000; stream 3 x
    # 2,000 x 2,048 x 2 + 2 x 2,000 x 64 x 2 = 25,088,000
    ("meta-llama/Llama-3.2-1B", {"mlp": 98_304_000, "attention": 32_768_000, "masks": 0, "stream": 25_088_000}),
    # Mamba (float32 in its config, b = 4): no attention layer, no MLP (an all-mixer model): the scan, 3 x 2,000 x
    # 5,120 x 16 x 4 B + 6 x 2,000 x 5,120 x 4 B = 1,966,080,000 + 245,760,000; stream 3 x 2,000 x 2,560 x 4 B
    ("state-spaces/mamba-2.8b-hf", {"attention": 0, "ssm scan": 2_211_840_000, "masks": 0, "stream": 61_440_000}),
    # all MoE (Mixtral): no dense MLP term, the experts' 508,112,000 (EXPERTS above); attention 2,000 x (3 x 4,096 +
    # 2 x 2,048) x 2 B = 65,536,000; stream 3 x 2,000 x 4,096 x 2 + 2 x 2,000 x 128 x 2 = 50,176,000
    ("mistralai/Mixtral-8x7B-v0.1", {"experts": 508_112_000, "attention": 65_536_000, "masks": 0,
                                     "stream": 50_176_000}),
])
def test_each_model_has_the_terms_of_its_layers(name, terms):
    assert _terms(name) == terms


def test_eager_sink_scores_are_three_copies_in_the_model_dtype():
    """gpt-oss-20b runs eager (sinks): its config names no dtype, so transformers loads float32 (b = 4). heads 64, q
    64 x 64 = 4,096, 8 KV heads (repeated to 64: repeat_kv). q 2,000 x 4,096 x 4 = 32,768,000; repeated K / V
    2 x 2,000 x 4,096 x 4 = 65,536,000; scores 2 x 64 x 1,000 x 1,000 = 128,000,000, each 3 b = 12 B with sinks
    (the scores, their concatenation with the sink logits, the shifted copy; softmax in float32 itself):
    1,536,000,000. Without sinks each score is 2 b + 4 = 12 B too at float32, so the test also runs bf16, where
    sinks give 6 B a score and no sinks 8."""
    model = load_model("openai/gpt-oss-20b")
    # masks: sliding (window 128) and full layers, one additive P x P float mask per kind for the whole forward:
    # 2 x 2 x 1,000 x 1,000 x 4 B = 16,000,000 (one kind alone would be 8,000,000). Experts (H 2,880, 32 of I_e
    # 2,880, top 4; S = 8,000): router 2,000 x 32 x 4 + 8,000 x 12 = 352,000; H + 4 I_e = 14,400 > 4 H: 8,000 x
    # 14,400 x 4 + 8,000 x 24 = 460,992,000; + 2,000 x 2,880 x 4 = 23,040,000: 484,384,000. Stream 3 x 2,000 x
    # 2,880 x 4 + 2 x 2,000 x 64 x 4 = 70,144,000
    assert _terms("openai/gpt-oss-20b") == {"experts": 484_384_000, "attention": 32_768_000 + 65_536_000 + 1_536_000_000,
                                            "masks": 16_000_000, "stream": 70_144_000}
    # bf16 (b = 2): 16,384,000 + 32,768,000 + 128,000,000 x 6 = 817,152,000 (no sinks: x 8 -> 1,073,152,000)
    peak = hf_peak_for(model, estimate(model, 1000, 2, dtype="bfloat16"))
    assert dict(peak.terms)["attention"] == 16_384_000 + 32_768_000 + 768_000_000


def test_an_all_sliding_model_holds_one_eager_mask():
    # Phi-3-mini: every layer slides (window 2,047), none full: one additive mask kind, 2 x 1,000 x 1,000 x 2 B =
    # 4,000,000 (gpt-oss above, sliding and full, holds two)
    # Its eager scores, without sinks: 2 b + 4 = 8 B each (the input, the float32 softmax, its cast back) over
    # 2 x 32 heads x 1,000 x 1,000 = 64,000,000 = 512,000,000, plus q 2,000 x 3,072 x 2 = 12,288,000; its 32 KV
    # heads are all 32 query heads, so nothing is repeated: 524,288,000
    model = load_model("microsoft/Phi-3-mini-4k-instruct")
    terms = dict(hf_peak_for(model, estimate(model, 1000, 2), attn_implementation="eager").terms)
    assert (terms["masks"], terms["attention"]) == (4_000_000, 12_288_000 + 512_000_000)


@pytest.mark.parametrize("prompt, masks, attention", [
    # gemma-3-1b-it under sdpa (window 512; 4 heads of 256, 1 KV head, b = 2), batch 2. Under the window, no mask:
    # 1,022 tokens x (3 x 1,024 + 2 x 512) x 2 B = 8,372,224
    (511, 0, 8_372_224),
    # at the window a mask is built: P x P = 262,144 bool for the forward; in each layer 1,024 x 4,096 x 2 =
    # 8,388,608, K / V repeated to the 4 heads 2 x 1,024 x 1,024 x 2 = 4,194,304, the additive mask 2 x 512 x 512
    # x (1 + 2) = 1,572,864: 14,155,776
    (512, 262_144, 8_388_608 + 4_194_304 + 1_572_864),
])
def test_an_sdpa_prompt_as_long_as_a_window_builds_a_mask(prompt, masks, attention):
    model = load_model("google/gemma-3-1b-it")
    terms = dict(hf_peak_for(model, estimate(model, prompt, 2)).terms)
    assert (terms["masks"], terms["attention"]) == (masks, attention)


def test_the_decode_step_copies_a_quantized_layer_and_expands_a_latent_one():
    # Llama-3.2-1B, quanto: a layer's 1,024 K + V elements a token dequantized and concatenated, 2 x 2 x 1,000 x
    # 1,024 x 2 B = 8,192,000; re-quantizing its K (512 a token) 2 x (2 x 1,000 x 512) x 4 B = 8,192,000; logits
    # 2 x 128,256 x (2 + 8) = 2,565,120: 18,949,120
    model = load_model("meta-llama/Llama-3.2-1B")
    est = estimate(model, 1000, 2, cache="quantized", quant_backend="quanto")
    assert hf_peak_for(model, est).decode_transient_bytes == 8_192_000 + 8_192_000 + 2_565_120
    # DeepSeek-V2-Lite (MLA): every cached token re-expanded to per-head K / V, 2 x 1,000 x 16 x (192 + 128) x 2 B
    # = 20,480,000, plus one layer's latent cache 62,208,000 // 27 = 2,304,000 and logits 2 x 102,400 x 10 =
    # 2,048,000: 24,832,000
    model = load_model("deepseek-ai/DeepSeek-V2-Lite")
    assert hf_peak_for(model, estimate(model, 1000, 2)).decode_transient_bytes == 20_480_000 + 2_304_000 + 2_048_000
