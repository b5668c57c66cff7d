"""`plan(engine="hf")`: transformers generate on one GPU, built on the exact cache and the generate peak model."""

import pytest

from kvplan import estimate, load_model
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.hf_peak import CUDA_CONTEXT_BYTES, hf_peak_for
from kvplan.planning.planner import plan


def _peak(model, length, batch):
    return hf_peak_for(model, estimate(model, length, batch)).peak_allocated_bytes


def test_llama_8b_on_l4_reports_the_largest_batch_that_fits():
    model = load_model("meta-llama/Llama-3.1-8B")
    p = plan(model, engine="hf", gpu="L4", max_model_len=8192)
    budget = int(0.9 * resolve_gpu("L4").memory_bytes) - CUDA_CONTEXT_BYTES
    assert p.fits and p.engine == "hf"
    batch = int(p.max_concurrency)
    assert _peak(model, 8192, batch) <= budget < _peak(model, 8192, batch + 1)  # largest, not just some
    assert p.kv_bytes_per_token == 131_072  # 32 layers x 2 x 8 heads x 128 x 2 B
    assert p.weights_bytes == 16_060_522_496  # 8,030,261,248 params x 2 B


def test_a_model_that_cannot_fit_says_by_how_much():
    p = plan("meta-llama/Llama-3.1-70B", engine="hf", gpu="L4", max_model_len=4096)
    assert not p.fits and p.max_concurrency == 0
    budget = int(0.9 * resolve_gpu("L4").memory_bytes) - CUDA_CONTEXT_BYTES
    assert p.shortfall_bytes == _peak(load_model("meta-llama/Llama-3.1-70B"), 4096, 1) - budget


def test_longest_prompt_is_the_boundary():
    model = load_model("meta-llama/Llama-3.1-8B")
    p = plan(model, engine="hf", gpu="L4", max_model_len=131072)
    budget = int(0.9 * resolve_gpu("L4").memory_bytes) - CUDA_CONTEXT_BYTES
    n = p.max_model_len_that_fits
    assert 0 < n < 131072
    assert _peak(model, n, 1) <= budget < _peak(model, n + 1, 1)


@pytest.mark.parametrize("kwargs, text", [
    ({"tp": 2}, "one GPU"),                 # generate has no tensor parallelism
    ({"kv_dtype": "fp8"}, "model dtype"),   # DynamicCache stores the activation dtype
])
def test_hf_plan_rejects_what_generate_cannot_do(kwargs, text):
    with pytest.raises(WorkloadError, match=text):
        plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=4096, **kwargs)
