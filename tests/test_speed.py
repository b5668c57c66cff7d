"""The roofline speed model: worked numbers, and bad GPUs as kvplan errors."""

import pytest

from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.speed import SpeedAssumptions, roofline

H100 = resolve_gpu("H100-80GB")
# Llama-3.1-8B: 8,030,261,248 params (transformers' count, by hand in tests/test_weights.py) x 2 B; KV
# 32 x 2 x 8 x 128 x 2 B a token; attention 4 x 32 layers x 32 heads x 128 FLOPs a token pair: inputs
LLAMA_8B = dict(active_params=8_030_261_248, weight_bytes=16_060_522_496, kv_bytes_per_token=131_072,
                attn_flops_per_token_pair=4 * 32 * 32 * 128)


def test_decode_is_weights_plus_kv_over_bandwidth():
    # batch 1 at 8,192 tokens: 16.06 GB of weights + 1.07 GB of KV per step, at 70 % of 3.35 TB/s
    s = roofline(**LLAMA_8B, prompt_len=8192, context_len=8192, batch=1, flops=H100.bf16_flops,
                 bandwidth=H100.bandwidth_bytes_per_s)
    step = 16_060_522_496 + 131_072 * 8192
    assert s.decode_bytes_per_step == step
    assert s.time_per_output_token_s == pytest.approx(step / (H100.bandwidth_bytes_per_s * 0.7))
    assert 0.0070 < s.time_per_output_token_s < 0.0076       # ~7.3 ms per token


def test_prefill_counts_linear_and_quadratic_attention_flops():
    s = roofline(**LLAMA_8B, prompt_len=1000, context_len=1000, batch=2, flops=1e15, bandwidth=1e12,
                 assumptions=SpeedAssumptions(mfu=1.0, mbu=1.0))
    linear = 2 * 8_030_261_248 * 1000 * 2
    attention = 4 * 32 * 32 * 128 * 1000 * 1000 // 2 * 2
    assert s.prefill_flops == linear + attention
    assert s.ttft_s == pytest.approx((linear + attention) / 1e15)


def test_tensor_parallel_divides_time_and_batch_multiplies_throughput():
    one = roofline(**LLAMA_8B, prompt_len=512, context_len=512, batch=4, flops=1e15, bandwidth=3e12)
    two = roofline(**LLAMA_8B, prompt_len=512, context_len=512, batch=4, flops=1e15, bandwidth=3e12, tp=2)
    assert two.time_per_output_token_s == pytest.approx(one.time_per_output_token_s / 2)
    assert one.tokens_per_s_total == pytest.approx(4 * one.tokens_per_s_per_sequence)


def test_a_gpu_without_figures_is_a_kvplan_error():
    with pytest.raises(WorkloadError, match="FLOP/s and bandwidth"):
        roofline(**LLAMA_8B, prompt_len=1, context_len=1, batch=1, flops=0, bandwidth=1e12)
