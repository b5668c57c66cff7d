"""transformers `generate`'s plan, end to end: the peak of prefill and decode (`hf_peak`) against the card, the
largest batch and the longest prompt that fit, and the `from_pretrained(...).generate(...)` line."""

from __future__ import annotations

from functools import cache

from ...cache.estimate import estimate
from ...dtypes import resolve_dtype
from ...errors import WorkloadError
from ...gpus import GPU
from ...model.spec import ModelSpec
from ...units import fmt_bytes
from ..inputs import model_argument
from ..result import Plan, StageMemory
from .hf_peak import CUDA_CONTEXT_BYTES, hf_peak_for


def plan_hf(model: ModelSpec, device: GPU, num_gpus: int, util: float, max_len: int, dtype, kv_dtype) -> Plan:
    """transformers `generate` on one GPU with a DynamicCache: the peak of prefill and decode
    (kvplan.planning.engines.hf_peak) against `util` x memory minus the CUDA context, for prompts of max_model_len tokens.
    Concurrency is the largest batch whose peak fits; context the longest prompt that fits at batch 1."""
    if num_gpus != 1:
        raise WorkloadError("the transformers plan covers one GPU (generate has no tensor parallelism): "
                            "use --engine vllm or sglang for TP / PP")
    act = model.dtype if dtype in (None, "auto") else resolve_dtype(dtype)
    if kv_dtype not in (None, "auto") and resolve_dtype(kv_dtype) != act:
        raise WorkloadError("transformers' dynamic cache stores the model dtype: use --kv-dtype auto "
                            "(kvplan estimate --cache quantized sizes int4 / fp8 caches)")
    budget = int(util * device.memory_bytes) - CUDA_CONTEXT_BYTES

    @cache                    # the searches below revisit (max_len, 1)
    def peak(length: int, batch: int):
        est = estimate(model, length, batch, dtype=act.name)
        return est, hf_peak_for(model, est)

    est, p = peak(max_len, 1)
    fits = p.peak_allocated_bytes <= budget
    batch = _largest(lambda b: peak(max_len, b)[1].peak_allocated_bytes <= budget, 4096) if fits else 0
    # the peak grows with the prompt: when max_len fits at batch 1 it is the longest that does
    longest = max_len if fits else _largest(lambda n: peak(n, 1)[1].peak_allocated_bytes <= budget, max_len)
    transient = p.peak_allocated_bytes - p.weights_bytes - est.prefill_peak_bytes
    pool = max(0, budget - p.weights_bytes - max(0, transient))
    per_token = est.bytes_per_token
    stage = StageMemory(stage=0, layers=f"0-{model.num_layers - 1}", weights_bytes=p.weights_bytes,
                        activation_bytes=max(0, transient), non_torch_bytes=CUDA_CONTEXT_BYTES, kv_pool_bytes=pool,
                        kv_bytes_per_token=per_token, num_blocks=0)
    command = (f"AutoModelForCausalLM.from_pretrained({model_argument(model)!r}, dtype=torch.{act.name}, "
               "device_map='cuda')"
               f".generate(input_ids, max_new_tokens=N)  # prompt + N <= {max_len}")
    return Plan(
        model=model.name, engine="hf", engine_version="transformers 5.24", gpu=device.name,
        gpu_memory_bytes=device.memory_bytes, num_gpus=1, tensor_parallel_size=1, pipeline_parallel_size=1,
        max_model_len=max_len, gpu_memory_utilization=util, dtype=act.name, kv_cache_dtype=act.name, block_size=1,
        max_num_batched_tokens=max_len, max_num_seqs=batch, weights_bytes=p.weights_bytes,
        activation_bytes=max(0, transient), non_torch_bytes=CUDA_CONTEXT_BYTES, kv_pool_bytes=pool,
        kv_bytes_per_token=per_token, kv_cache_tokens=pool // per_token if per_token else 0, num_blocks=0,
        max_concurrency=float(batch), fits=fits, shortfall_bytes=max(0, p.peak_allocated_bytes - budget),
        max_model_len_that_fits=longest, stages=[stage], vllm_command=command,
        formula=[f"budget = {util} x {fmt_bytes(device.memory_bytes)} - CUDA context {fmt_bytes(CUDA_CONTEXT_BYTES)}"
                 f" = {fmt_bytes(budget)}", f"peak at batch 1, {max_len:,} tokens: {p.formula}"],
        notes=["transformers generate, DynamicCache, prompt of max_model_len tokens (worst-case prefill)",
               "max concurrency = the largest batch whose peak fits (all sequences prefilled together)"],
    )


def _largest(ok, upper: int) -> int:
    """Largest n in [1, upper] with ok(n), assuming ok is monotone; 0 when ok(1) is false."""
    if not ok(1):
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo
