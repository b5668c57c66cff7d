"""`plan(engine="hf")`: transformers generate on one GPU, checked against the peak worked out by hand.

The peak of a dense gated decoder with sdpa, no window, a DynamicCache and a prompt of P tokens at batch B is the
prefill (transformers 5.24, LlamaModel.forward / LlamaDecoderLayer / LlamaMLP on the sdpa path; decode's one-layer
copy is far smaller at these lengths):
    weights + B x P x (16 inputs [input_ids + attention_mask, int64]
                       + cache [layers x 2 (K, V) x kv heads x head_dim x 2 B, DynamicCache's key/value tensors]
                       + stream [3 x hidden x 2 B: layer input, residual sum, normed input; + 2 x head_dim x 2 B RoPE]
                       + MLP [3 x intermediate x 2 B: act(gate), up, their product])
Llama-3.1-8B (model_configs/meta-llama/Llama-3.1-8B): 32 layers, 8 KV heads, head_dim 128, hidden 4096,
intermediate 14336, bf16; 8,030,261,248 parameters (transformers LlamaForCausalLM on meta, tests/test_weights.py).
    16 + 32 x 2 x 8 x 128 x 2 (131,072) + 3 x 4096 x 2 + 2 x 128 x 2 (25,088) + 3 x 14336 x 2 (86,016)
    = 242,192 B a prompt token
The L4's budget: 0.9 x 23,570,219,008 B (deviceQuery, kvplan/data/gpus.json) = 21,213,197,107 - the 0.5 GiB CUDA
context (536,870,912) = 20,676,326,195 B.
"""

import pytest

from kvplan.errors import WorkloadError
from kvplan.planning.planner import plan

L4_BUDGET = 20_676_326_195           # int(0.9 x 23,570,219,008) - 536,870,912, worked in the docstring
LLAMA8_WEIGHTS = 16_060_522_496      # 8,030,261,248 params (transformers count) x 2 B
LLAMA8_PER_TOKEN = 242_192           # prefill bytes a prompt token, worked in the docstring


def test_llama_8b_on_l4_reports_the_largest_batch_that_fits():
    p = plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="L4", max_model_len=8192)
    assert p.fits and p.engine == "hf"
    assert p.kv_bytes_per_token == 131_072  # 32 layers x 2 x 8 heads x 128 x 2 B
    assert p.weights_bytes == LLAMA8_WEIGHTS
    # batch 2: 16,060,522,496 + 242,192 x 8,192 x 2 = 20,028,596,224 <= 20,676,326,195; batch 3: 22,012,633,088 >
    assert LLAMA8_WEIGHTS + LLAMA8_PER_TOKEN * 8192 * 2 <= L4_BUDGET < LLAMA8_WEIGHTS + LLAMA8_PER_TOKEN * 8192 * 3
    assert p.max_concurrency == 2
    # the planner's own peak at batch 1, in its formula line: 16,060,522,496 + 242,192 x 8,192 = 18,044,559,360
    assert p.stages[0].activation_bytes == 18_044_559_360 - LLAMA8_WEIGHTS - 8192 * 131_072


def test_a_model_that_cannot_fit_says_by_how_much():
    """Llama-3.1-70B: 70,553,706,496 parameters = 80 layers x (150,994,944 attention [8192 x (8192 + 2 x 1024 + 8192)]
    + 704,643,072 MLP [3 x 8192 x 28672] + 16,384 norms) + 2 x 1,050,673,152 (embeddings, untied lm_head: 128,256 x
    8,192) + 8,192 final norm, which transformers' LlamaForCausalLM counts too; x 2 B = 141,107,412,992 B;
    a prompt token: 16 + 80 x 2 x 8 x 128 x 2 (327,680) + 3 x 8192 x 2 + 2 x 128 x 2 (49,664)
    + 3 x 28672 x 2 (172,032) = 549,392 B; at 4,096 tokens the peak is 141,107,412,992 + 2,250,309,632."""
    p = plan("meta-llama/Llama-3.1-70B", engine="hf", gpu="L4", max_model_len=4096)
    assert not p.fits and p.max_concurrency == 0
    assert p.weights_bytes == 141_107_412_992
    # the peak worked in the docstring less the budget, on this line
    assert p.shortfall_bytes == 141_107_412_992 + 549_392 * 4096 - L4_BUDGET == 122_681_396_429


def test_longest_prompt_is_the_boundary():
    # (20,676,326,195 - 16,060,522,496) / 242,192 = 19,058.3: 19,058 tokens fit at batch 1, 19,059 do not
    p = plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="L4", max_model_len=131072)
    assert LLAMA8_WEIGHTS + LLAMA8_PER_TOKEN * 19_058 <= L4_BUDGET < LLAMA8_WEIGHTS + LLAMA8_PER_TOKEN * 19_059
    assert p.max_model_len_that_fits == 19_058


@pytest.mark.parametrize("kwargs, text", [
    ({"tp": 2}, "one GPU"),                 # generate has no tensor parallelism
    ({"kv_dtype": "fp8"}, "model dtype"),   # DynamicCache stores the activation dtype
])
def test_hf_plan_rejects_what_generate_cannot_do(kwargs, text):
    with pytest.raises(WorkloadError, match=text):
        plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=4096, **kwargs)
