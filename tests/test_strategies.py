"""kvplan.cache.strategies: every row is kvplan.estimate on the real model or on a stated variant of its layout."""

from __future__ import annotations

import pytest

import kvplan
from kvplan.cache import strategies as S
from kvplan.errors import WorkloadError
from kvplan.model.layers import FullAttentionSpec, SlidingWindowSpec, StateSpec


@pytest.fixture(scope="module")
def llama8b():
    return kvplan.load_model("meta-llama/Llama-3.1-8B")


def by_name(rows, prefix):
    return next(r for r in rows if r.strategy.startswith(prefix))


def test_own_row_is_the_estimate(llama8b):
    row = S.own(llama8b, 8192, 2)
    assert row.device_bytes == kvplan.estimate(llama8b, 8192, 2).kv_cache_bytes == 2 * 1_073_741_824
    assert row.strategy == "model's own (GQA 32:8)"


@pytest.mark.parametrize("model_id, heads_ratio", [
    ("meta-llama/Llama-3.1-8B", 4),      # 32 heads / 8 KV heads
    ("meta-llama/Llama-2-70b-hf", 8),    # 64 / 8: the Learn page's table
    ("tiiuae/falcon-7b-instruct", 71),   # MQA: 71 heads share one KV head
])
def test_mha_baseline_expands_kv_heads(model_id, heads_ratio):
    model = kvplan.load_model(model_id)
    mha = S.mha_baseline(model, 4096, 1).device_bytes
    assert mha == heads_ratio * kvplan.estimate(model, 4096, 1).kv_cache_bytes


def test_llama2_70b_naive_is_8x_real():
    model = kvplan.load_model("meta-llama/Llama-2-70b-hf")
    real = kvplan.estimate(model, 4096, 1, "fp16").kv_cache_bytes
    naive = kvplan.estimate(S.as_mha(model), 4096, 1, "fp16").kv_cache_bytes
    assert real == 1_342_177_280  # 2 x 80 layers x 8 KV heads x 128 x 4,096 x 2 B
    assert naive == 8 * real


def test_mha_baseline_of_mla_uses_full_head_dims():
    # DeepSeek-V3: 128 heads x (192 K + 128 V) per token per layer instead of the 512 + 64 latent
    model = kvplan.load_model("deepseek-ai/DeepSeek-V3")
    layout = S.as_mha(model)
    spec = layout.layers[0][0]
    assert type(spec) is FullAttentionSpec and (spec.kv_heads, spec.k_head_dim, spec.v_head_dim) == (128, 192, 128)
    assert S.mha_baseline(model, 1000, 1).device_bytes == 61 * 128 * (192 + 128) * 1000 * 2


def test_mha_baseline_not_applicable_without_heads():
    model = kvplan.load_model("state-spaces/mamba-2.8b-hf")
    rows = S.compare(model, 4096)
    mha = by_name(rows, "MHA baseline")
    assert not mha.applies and "no attention head count" in mha.note
    assert by_name(rows, "model's own").applies


def test_window_on_every_layer(llama8b):
    layout = S.with_window(llama8b, 4096)
    # the window asked (input)
    assert all(isinstance(layer[0], SlidingWindowSpec) and layer[0].window == 4096 for layer in layout.layers)
    row = S.sliding_window(llama8b, 8192, 1, 4096)
    assert row.device_bytes == kvplan.estimate(layout, 8192, 1).kv_cache_bytes
    # below the window nothing is dropped: same bytes as the plain cache (+ one int64 bookkeeping scalar a layer)
    short = S.sliding_window(llama8b, 1000, 1, 4096).device_bytes
    assert short == kvplan.estimate(llama8b, 1000, 1).kv_cache_bytes + 32 * 8


def test_window_keeps_state_layers():
    model = kvplan.load_model("Qwen/Qwen3-Next-80B-A3B-Thinking")
    layout = S.with_window(model, 1024)
    assert sum(isinstance(s, StateSpec) for _, s in layout.specs()) == 36


def test_sinks_add_to_the_window(llama8b):
    plain = S.sliding_window(llama8b, 32768, 1, 4096).device_bytes
    sinks = S.sinks_window(llama8b, 32768, 1, 4, 4096).device_bytes
    assert sinks - plain == 32 * 4 * 131_072 // 32  # 4 more tokens in each of 32 layers, 4 KiB a token a layer


@pytest.mark.parametrize("window", [0, 1, -5])
def test_window_too_small_is_a_workload_error(llama8b, window):
    with pytest.raises(WorkloadError, match="at least 2 tokens"):
        S.with_window(llama8b, window)


def test_quantized_uses_the_quantized_cache(llama8b):
    fp8 = S.quantized(llama8b, 8192, 1, "fp8")
    assert fp8.exact and fp8.device_bytes == kvplan.estimate(llama8b, 8192, 1, "fp8", "quantized").kv_cache_bytes
    int4 = S.quantized(llama8b, 8192, 1, "int4")
    assert int4.device_bytes == kvplan.estimate(llama8b, 8192, 1, "int4", "quantized").kv_cache_bytes
    assert "quanto" in int4.how


def test_quantized_falls_back_to_per_element_size():
    # gemma-2 has sliding layers, which transformers' QuantizedCache refuses: priced per element, said so
    model = kvplan.load_model("google/gemma-2-9b")
    est = kvplan.estimate(model, 8192, 1)
    row = S.quantized(model, 8192, 1, "int4")
    assert not row.exact and "no scales" in row.note
    attention = sum(g.bytes for g in est.groups)
    assert row.device_bytes == attention // 4 + est.bookkeeping_bytes


def test_offloaded_splits_device_and_host(llama8b):
    row = S.offloaded(llama8b, 8192, 1)
    est = kvplan.estimate(llama8b, 8192, 1, cache="offloaded")
    assert (row.device_bytes, row.host_bytes) == (est.device_bytes, est.host_bytes)
    assert row.device_bytes + row.host_bytes == kvplan.estimate(llama8b, 8192, 1).kv_cache_bytes


# tokens kept of 8,192: 0.5 x 8,192; ceil(0.001 x 8,192) = 9; all of them
@pytest.mark.parametrize("fraction, kept", [(0.5, 4096), (0.001, 9), (1.0, 8192)])
def test_keep_fraction(llama8b, fraction, kept):
    row = S.keep_fraction(llama8b, 8192, 1, fraction)
    assert row.device_bytes == kvplan.estimate(llama8b, kept, 1).kv_cache_bytes


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, True])
def test_keep_fraction_out_of_range(llama8b, fraction):
    with pytest.raises(WorkloadError, match="keep fraction"):
        S.keep_fraction(llama8b, 8192, 1, fraction)


def test_compare_rows_and_savings(llama8b):
    rows = S.compare(llama8b, 8192, 1, window=4096, sinks=4, fraction=0.5)
    assert [r.strategy for r in rows] == [
        "MHA baseline", "model's own (GQA 32:8)", "sliding window W=4,096", "sinks 4 + window 4,096", "fp8 KV",
        "int8 KV", "int4 KV", "offload to host memory", "evict: keep 50%"]
    own = by_name(rows, "model's own")
    assert own.saving_bytes == 0 and own.saving_pct == 0
    assert by_name(rows, "MHA baseline").saving_pct == -300.0
    assert by_name(rows, "evict").saving_pct == 50.0
    assert all(r.how for r in rows)


@pytest.mark.parametrize("seq_len", [0, -1, 1 << 41])
def test_compare_bad_context_raises_workload_error(llama8b, seq_len):
    with pytest.raises(WorkloadError):
        S.compare(llama8b, seq_len)


@pytest.mark.parametrize("model_id", kvplan.bundled_ids())
def test_compare_runs_on_every_bundled_model(model_id):
    rows = S.compare(kvplan.load_model(model_id), 4096, 1)
    assert len(rows) == 9 and by_name(rows, "model's own").device_bytes > 0
