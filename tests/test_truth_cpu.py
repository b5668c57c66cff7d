"""Truth on small real CPU models: storage (views pinning their buffers), static caches, generate().

Each model is a bundled config.json shrunk to a few layers and tiny widths, windows cut to 8 tokens. The
SAME shrunk dict goes to kvplan.parse_config and to transformers, so the shrink cannot hide a mismatch.
Every measurement compares logical bytes, storage bytes and 0-d scalars, exactly:
- right after a prefill of P tokens against `prefill_peak_bytes` (a sliding layer's W-1 view still pins the
  whole P-token concatenation),
- after each decode step against `kv_cache_bytes` (steady decode: W tokens of storage per sliding layer).
The meta device is checked against the same runs (test_meta_matches_cpu), which is what lets
test_truth_meta.py trust storage read from meta tensors.
"""

from __future__ import annotations

import functools

import pytest

from truth import (DTYPES, Tally, bundled_configs, compare, cpu_model, decode, hf_config, measure, meta_model,
                   prefill, shrink, single_thread, torch)  # noqa: F401 (fixture)

import kvplan

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache, StaticCache  # noqa: E402

TALLY = Tally("cpu")
W = 8  # every shrunk window / chunk
BUNDLED = dict(bundled_configs())
TINY = {"hidden_size": 64, "intermediate_size": 64, "vocab_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}
DROP = object()


def _shrunk(model_id: str, **changes) -> dict:
    data = shrink(BUNDLED[model_id], **changes)
    text = data.get("text_config", data)
    for key in [k for k, v in text.items() if v is DROP]:
        del text[key]
    for key in [k for k, v in data.items() if v is DROP]:
        del data[key]
    vocab = text.get("vocab_size")
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # keep special ids inside the tiny vocab
        for holder in {id(data): data, id(text): text}.values():
            value = holder.get(key)
            if isinstance(value, list):
                holder[key] = [v for v in value if v < vocab] or [1]
            elif isinstance(value, int) and value >= vocab:
                holder[key] = 1
    return data


# (label, bundled id, changes): the windowed and stateful families of the library, plus full-attention
# oddities (MLA, Falcon's two head rules, MQA) so meta-vs-CPU covers them too.
CASES = {
    "mistral-sliding": ("mistralai/Mistral-7B-v0.1", dict(TINY, num_hidden_layers=2, sliding_window=W)),
    "gemma2-alternating": ("google/gemma-2-9b", dict(TINY, num_hidden_layers=4, sliding_window=W,
                                                     sliding_window_size=W, query_pre_attn_scalar=16)),
    "gemma3-5to1": ("google/gemma-3-1b-it", dict(TINY, num_hidden_layers=7, num_key_value_heads=1,
                                                 sliding_window=W, query_pre_attn_scalar=16)),
    "gemma3-nested": ("google/gemma-3-4b-it", dict(TINY, num_hidden_layers=7, sliding_window=W)),
    "gpt-oss": ("openai/gpt-oss-20b", dict(TINY, num_hidden_layers=4, sliding_window=W, num_local_experts=4,
                                           experts_per_token=2, num_experts_per_tok=2,
                                           layer_types=["sliding_attention", "full_attention"] * 2,
                                           quantization_config=DROP)),
    "phi3-sliding": ("microsoft/Phi-3-mini-4k-instruct", dict(TINY, head_dim=DROP, num_hidden_layers=2,
                                                              sliding_window=W)),
    "starcoder2-sliding": ("bigcode/starcoder2-7b", dict(TINY, head_dim=DROP, num_hidden_layers=2,
                                                         sliding_window=W)),
    "llama4-chunked": ("meta-llama/Llama-4-Scout-17B-16E-Instruct",
                       dict(TINY, num_hidden_layers=4, attention_chunk_size=W, intermediate_size_mlp=64,
                            num_local_experts=2)),
    "qwen2-max-window-layers": ("Qwen/Qwen2-7B-Instruct", dict(TINY, head_dim=DROP, num_hidden_layers=4,
                                                               use_sliding_window=True, sliding_window=W,
                                                               max_window_layers=2)),
    "mamba": ("state-spaces/mamba-2.8b-hf", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                 n_layer=2, vocab_size=128, time_step_rank=4)),
    # expand 16 but intermediate_size 64 (not 16 x 32 = 512), as in falcon-mamba-7b's own config
    "falcon-mamba": ("tiiuae/falcon-mamba-7b", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                    vocab_size=128, time_step_rank=4)),
    "jamba": ("ai21labs/AI21-Jamba-1.5-Mini", dict(TINY, head_dim=DROP, num_hidden_layers=8, num_experts=2,
                                                   mamba_dt_rank=4, mamba_d_state=8)),
    "qwen3-next": ("Qwen/Qwen3-Next-80B-A3B-Thinking",
                   dict(TINY, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
                        linear_key_head_dim=8, linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, shared_expert_intermediate_size=32)),
    "llama": ("meta-llama/Llama-3.2-1B", dict(TINY, num_hidden_layers=2)),
    "deepseek-v3-mla": ("deepseek-ai/DeepSeek-V3",
                        dict(hidden_size=64, intermediate_size=64, moe_intermediate_size=16, vocab_size=128,
                             num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
                             num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=16, qk_rope_head_dim=8,
                             qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                             n_group=1, topk_group=1, quantization_config=DROP)),
    "falcon-40b-new-arch": ("tiiuae/falcon-40b-instruct", dict(hidden_size=128, num_attention_heads=8,
                                                               num_kv_heads=2, num_hidden_layers=2,
                                                               vocab_size=128)),
    "falcon-7b-mqa": ("tiiuae/falcon-7b-instruct", dict(hidden_size=64, num_attention_heads=4, num_kv_heads=4,
                                                        num_hidden_layers=2, vocab_size=128)),
}
DYNAMIC_WORKLOADS = [(B, P) for B in (1, 3) for P in (3, W - 1, W, 2 * W + 5)]   # below, at and above W
DECODE_STEPS = 3


@functools.lru_cache(maxsize=None)
def _data(label: str) -> dict:
    model_id, changes = CASES[label]
    return _shrunk(model_id, **changes)


@functools.lru_cache(maxsize=None)
def _model(label: str, dtype: str):
    return cpu_model(hf_config(_data(label)), DTYPES[dtype])


@functools.lru_cache(maxsize=None)
def _spec(label: str) -> kvplan.ModelSpec:
    return kvplan.parse_config(_data(label), name=label)


def _est(label, T, B, dtype, P=None, **kwargs):
    return kvplan.estimate(_spec(label), seq_len=T, batch_size=B, dtype=dtype, prompt_len=P, **kwargs)


def _assert_new(before: int) -> None:
    new = TALLY.mismatches[before:]
    assert not new, "\n".join(new)


def test_shrunk_configs_keep_their_layer_pattern():
    """The shrink keeps what is under test: windows, chunks, state layers and MLA survive in kvplan's view."""
    kinds = {label: _spec(label).attention_kinds for label in CASES}
    assert kinds["mistral-sliding"] == {"sliding": 2}
    assert kinds["gemma2-alternating"] == {"sliding": 2, "full": 2}
    assert kinds["gemma3-5to1"] == kinds["gemma3-nested"] == {"sliding": 6, "full": 1}
    assert kinds["gpt-oss"] == {"sliding": 2, "full": 2}
    assert kinds["llama4-chunked"] == {"chunked": 3, "full": 1}
    assert kinds["qwen2-max-window-layers"] == {"full": 2, "sliding": 2}
    assert kinds["jamba"] == {"state": 7, "full": 1}
    assert kinds["qwen3-next"] == {"state": 3, "full": 1}
    assert kinds["deepseek-v3-mla"] == {"mla": 3}
    assert _spec("falcon-mamba").layers[0][0].conv_shape == (64, 4)


@pytest.mark.parametrize("label", list(CASES))
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_dynamic_cache_storage(label, dtype):
    """Prefill below, at and above the window, then decode: storage, logical and scalars, every step."""
    before = len(TALLY.mismatches)
    model = _model(label, dtype)
    for B, P in DYNAMIC_WORKLOADS:
        cache, token = prefill(model, B, P)
        assert isinstance(cache, DynamicCache)
        compare(TALLY, f"{label} {dtype} B={B} P={P} after prefill", measure(cache), _est(label, P, B, dtype, P),
                after_prefill=True)
        for step in range(1, DECODE_STEPS + 1):
            token = decode(model, cache, token, 1)
            compare(TALLY, f"{label} {dtype} B={B} P={P} T={P + step}", measure(cache),
                    _est(label, P + step, B, dtype, P), after_prefill=False)
    _assert_new(before)


def test_sliding_view_pins_the_prefill():
    """The rule itself, in numbers (kv-rules §1.3): Mistral W=8, P=20 pins 20 tokens until the next step."""
    label = "mistral-sliding"
    model = _model(label, "fp32")
    cache, token = prefill(model, 1, 20)
    keys = cache.layers[0].keys
    assert keys.shape[-2] == W - 1 and keys.untyped_storage().nbytes() == 20 * 2 * 16 * 4
    per_token = 2 * 2 * 2 * 16 * 4          # layers x (K, V) x kv heads x head_dim x fp32
    scalars = 2 * 8                          # one int64 _sliding_window_tensor per layer
    m = measure(cache)
    assert (m.logical, m.storage, m.scalars) == ((W - 1) * per_token + scalars, 20 * per_token + scalars, scalars)
    est = _est(label, 20, 1, "fp32", 20)
    assert (est.logical_bytes, est.prefill_peak_bytes, est.bookkeeping_bytes) == (m.logical, m.storage, m.scalars)
    decode(model, cache, token, 1)
    m = measure(cache)
    assert (m.logical, m.storage) == ((W - 1) * per_token + scalars, W * per_token + scalars)
    assert _est(label, 21, 1, "fp32", 20).kv_cache_bytes == m.storage


@pytest.mark.parametrize("label", ["mamba", "falcon-mamba", "jamba", "qwen3-next"])
def test_state_layers_dtypes_and_widths(label):
    """kv-rules §1.3 on the torch path: conv state in the model dtype with the full kernel width, recurrent
    state in float32, whatever the model dtype; kvplan's StateSpec shapes are those tensors' shapes."""
    model = _model(label, "bf16")
    cache, _ = prefill(model, 2, 11)
    states = [s for _, s in _spec(label).specs() if s.kind == "state"]
    layers = [layer for layer in cache.layers if hasattr(layer, "conv_states")]
    assert len(layers) == len(states) > 0
    for layer, spec in zip(layers, states):
        conv, rec = layer.conv_states[0], layer.recurrent_states[0]
        assert conv.dtype == torch.bfloat16 and tuple(conv.shape) == (2, *spec.conv_shape)
        assert rec.dtype == torch.float32 and tuple(rec.shape) == (2, *spec.recurrent_shape)


def test_cached_shapes_mla_and_falcon():
    """What the attention modules hand to cache.update: MLA's latent [B, 1, T, R] + RoPE key [B, 1, T, rope];
    Falcon new_decoder_architecture all num_attention_heads (8, not num_kv_heads 2); Falcon-7B MQA 1 head."""
    shapes = {}
    for label in ("deepseek-v3-mla", "falcon-40b-new-arch", "falcon-7b-mqa"):
        cache, _ = prefill(_model(label, "bf16"), 2, 9)
        shapes[label] = (tuple(cache.layers[0].keys.shape), tuple(cache.layers[0].values.shape))
    assert shapes["deepseek-v3-mla"] == ((2, 1, 9, 32), (2, 1, 9, 8))
    assert shapes["falcon-40b-new-arch"] == ((2, 8, 9, 16), (2, 8, 9, 16))
    assert shapes["falcon-7b-mqa"] == ((2, 1, 9, 16), (2, 1, 9, 16))


@pytest.mark.parametrize("label", list(CASES))
def test_meta_matches_cpu(label):
    """The meta device reports the same logical, storage and scalar bytes as real CPU tensors."""
    data = _data(label)
    meta = meta_model(hf_config(data), torch.bfloat16)
    cpu = _model(label, "bf16")
    for B, P in [(3, 2 * W + 5), (1, W - 1)]:
        runs = []
        for model in (meta, cpu):
            cache, token = prefill(model, B, P)
            after_prefill = measure(cache)
            decode(model, cache, token, 2)
            runs.append((after_prefill, measure(cache)))
        assert runs[0] == runs[1], f"{label} B={B} P={P}: meta {runs[0]} != cpu {runs[1]}"


STATIC_CASES = ["llama", "mistral-sliding", "gemma2-alternating", "gemma3-5to1", "llama4-chunked",
                "deepseek-v3-mla", "jamba", "qwen3-next", "mamba"]


@pytest.mark.parametrize("label", STATIC_CASES)
def test_static_cache(label):
    """StaticCache(config, max_cache_len=M) as `cache=`: M tokens for full layers, min(W, M) for sliding ones,
    allocated at the first update; one int64 cumulative_length per attention layer."""
    before = len(TALLY.mismatches)
    model = _model(label, "bf16")
    cfg = model.config
    for M, B, P in [(6, 2, 4), (W, 1, 5), (30, 3, 12), (30, 1, 20)]:
        cache = StaticCache(config=cfg, max_cache_len=M)
        cache, token = prefill(model, B, P, cache=cache)
        compare(TALLY, f"{label} static M={M} B={B} P={P}", measure(cache),
                _est(label, P, B, "bf16", P, cache="static", max_cache_len=M), after_prefill=True)
        steps = min(M - P, 4)
        for step in range(1, steps + 1):
            token = decode(model, cache, token, 1)
            compare(TALLY, f"{label} static M={M} B={B} P={P} T={P + step}", measure(cache),
                    _est(label, P + step, B, "bf16", P, cache="static", max_cache_len=M), after_prefill=False)
    _assert_new(before)


def _generate(model, B, P, N, **kwargs):
    ids = torch.randint(3, 128, (B, P), generator=torch.Generator().manual_seed(B + P))
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, min_new_tokens=N,
                             do_sample=False, return_dict_in_generate=True, **kwargs)
    assert out.sequences.shape[-1] == P + N
    return out.cache


@pytest.mark.parametrize("label", ["llama", "gemma2-alternating", "gemma3-5to1", "qwen3-next"])
def test_generate_dynamic(label):
    """generate() holds P + N - 1 tokens (the last sampled token is never fed back): kvplan seq_len."""
    before = len(TALLY.mismatches)
    model = _model(label, "bf16")
    for B, P, N in [(1, 5, 6), (2, 12, 9)]:
        cache = _generate(model, B, P, N)
        assert type(cache).__name__ == "DynamicCache"
        if label == "llama":
            assert cache.get_seq_length() == P + N - 1
        compare(TALLY, f"{label} generate B={B} P={P} N={N}", measure(cache),
                _est(label, P + N - 1, B, "bf16", P), after_prefill=False)
    _assert_new(before)


@pytest.mark.parametrize("label", ["llama", "gemma2-alternating", "deepseek-v3-mla"])
def test_generate_static(label):
    """generate(cache_implementation="static") sizes the cache max_length - 1 = P + N - 1."""
    before = len(TALLY.mismatches)
    model = _model(label, "bf16")
    for B, P, N in [(1, 5, 6), (2, 12, 9)]:
        cache = _generate(model, B, P, N, cache_implementation="static")
        assert isinstance(cache, StaticCache)
        T = P + N - 1
        compare(TALLY, f"{label} generate static B={B} P={P} N={N}", measure(cache),
                _est(label, T, B, "bf16", P, cache="static", max_cache_len=T), after_prefill=False)
    _assert_new(before)


def test_zz_summary():
    """Runs last in this module: the summary line (pytest -s shows it) and a floor on the pairs checked."""
    print("\n" + TALLY.summary())
    assert not TALLY.mismatches, "\n".join(TALLY.mismatches)
    if TALLY.checked < 1000:
        pytest.skip(f"only part of the module ran ({TALLY.summary()})")
