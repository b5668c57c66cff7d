"""Roofline speed model: what the GPU's bandwidth and FLOP/s allow, stated with its assumptions.

Prefill is compute-bound:  time = 2 x active params x prompt tokens x batch / (FLOP/s x mfu)
                                 + attention 4 x layers x heads x head_dim x P^2/2 x batch / (FLOP/s x mfu)
Decode is bandwidth-bound: each step reads every active weight once and the whole KV of the batch:
                            time = (weight bytes + KV bytes) / (bandwidth x mbu)
Tensor parallel divides both across ranks (ideal scaling; all-reduce cost ignored, said in the notes).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ..cache.estimate import estimate
from ..dtypes import resolve_dtype
from ..errors import WorkloadError, shown
from ..model.spec import ModelSpec


@dataclass(frozen=True)
class SpeedAssumptions:
    mfu: float = 0.5    # achieved fraction of peak dense FLOP/s in prefill
    mbu: float = 0.7    # achieved fraction of peak memory bandwidth in decode


@dataclass(frozen=True)
class SpeedEstimate:
    ttft_s: float
    time_per_output_token_s: float
    tokens_per_s_per_sequence: float
    tokens_per_s_total: float
    prefill_flops: float
    decode_bytes_per_step: int
    assumptions: SpeedAssumptions
    notes: tuple[str, ...]


def roofline(*, active_params: int, weight_bytes: int, kv_bytes_per_token: int, prompt_len: int, context_len: int,
             batch: int, attn_flops_per_token_pair: int, flops: float, bandwidth: float, tp: int = 1,
             assumptions: SpeedAssumptions = SpeedAssumptions(), moe: bool = False) -> SpeedEstimate:
    """All sizes are whole-model (not per rank); `kv_bytes_per_token` is per sequence for all layers.

    Example: Llama-3.1-8B bf16 on one H100 (3.35 TB/s, mbu 0.7), batch 1, 8k context: decode reads
    16.06 GB of weights + 1.07 GB of KV per step -> 7.3 ms per token, 137 tokens/s.
    """
    if flops <= 0 or bandwidth <= 0:
        raise WorkloadError("the GPU needs positive FLOP/s and bandwidth for a speed estimate: pick a catalog GPU "
                            "or give a custom GPU both figures")
    linear = 2 * active_params * prompt_len * batch
    attention = attn_flops_per_token_pair * prompt_len * prompt_len // 2 * batch
    prefill = linear + attention
    ttft = prefill / (flops * tp * assumptions.mfu)
    step_bytes = weight_bytes + kv_bytes_per_token * context_len * batch
    tpot = step_bytes / (bandwidth * tp * assumptions.mbu)
    notes = (f"prefill at {assumptions.mfu:.0%} of peak FLOP/s, decode at {assumptions.mbu:.0%} of peak bandwidth",
             "tensor-parallel scaling assumed ideal (all-reduce time not counted)" if tp > 1 else
             "single GPU",
             *(("MoE: only the routed experts' weights are read per token at batch 1; larger batches touch more",)
               if moe else ()))
    return SpeedEstimate(ttft, tpot, 1 / tpot, batch / tpot, float(prefill), step_bytes, assumptions, notes)


@dataclass(frozen=True)
class ModelCompute:
    """What the roofline needs from a config: parameters (all and per token) and attention FLOPs per token pair."""

    total_params: int
    active_params: int
    weight_bytes: int
    attn_flops_per_token_pair: int   # 2 x heads x (d_k + d_v) per attention layer: QK^T and AV
    notes: tuple[str, ...] = ()

    @property
    def active_weight_bytes(self) -> int:
        """Bytes one decode token reads at batch 1: the active share of the weights (MoE: top-k experts)."""
        return ceil(self.weight_bytes * self.active_params / self.total_params) if self.total_params else 0


def model_compute(model: ModelSpec, dtype: str | None = None) -> ModelCompute:
    from ..model.arch import AttentionDims
    from ..weights.rule import weights_bytes

    shape = model.require_arch()
    weights = weights_bytes(shape, dtype)
    attn = sum(2 * m.heads * (m.head_dim + m.v_head_dim) for m in (layer.mixer for layer in shape.layers)
               if isinstance(m, AttentionDims))
    return ModelCompute(weights.params.total, weights.params.active, weights.total_bytes, attn, weights.notes)


def kv_bytes_per_token(model: ModelSpec, context_len: int, kv_dtype: str = "auto") -> int:
    """Average KV bytes per token of one sequence at `context_len` (sliding and state layers included), at
    `kv_dtype` (an 8-bit KV is priced per element, as vLLM stores it)."""
    from ..cache.strategies import per_element_bytes

    est = estimate(model, context_len, 1)
    total = est.kv_cache_bytes
    if kv_dtype not in (None, "auto") and resolve_dtype(kv_dtype).bits != resolve_dtype(est.kv_dtype).bits:
        total = per_element_bytes(est, kv_dtype)
    return ceil(total / context_len)


def gpu_flops(gpu, dtype: str) -> float:
    """Dense tensor FLOP/s for the compute dtype (bf16 figure for fp32 too: no TF32 figure in the catalog)."""
    value = gpu.fp16_flops if dtype == "float16" and gpu.fp16_flops else gpu.bf16_flops or gpu.fp16_flops
    if not value:
        raise WorkloadError(f"the catalog has no 16-bit FLOP/s for {gpu.name}: speed cannot be estimated")
    return float(value)


def plan_speed(model: ModelSpec, plan, prompt_len: int, batch: int = 1, context_len: int | None = None):
    """`roofline` for a plan: TTFT for a `prompt_len` prefill and the time per token at `context_len` of context
    (the plan's max_model_len when None), with the GPU's catalog FLOP/s and bandwidth."""
    from ..gpus import resolve_gpu

    if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len < 1:
        raise WorkloadError(f"the prompt must be at least 1 token, got {shown(prompt_len)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise WorkloadError(f"the batch must be at least 1 sequence, got {shown(batch)}")
    gpu = resolve_gpu(plan.gpu)
    if not gpu.bandwidth_bytes_per_s:
        raise WorkloadError(f"the catalog has no memory bandwidth for {gpu.name}: speed cannot be estimated")
    mc = model_compute(model, plan.dtype)
    context = min(context_len or plan.max_model_len, plan.max_model_len)
    per_token = kv_bytes_per_token(model, context, plan.kv_cache_dtype)
    return roofline(active_params=mc.active_params, weight_bytes=mc.active_weight_bytes,
                    kv_bytes_per_token=per_token, prompt_len=min(prompt_len, plan.max_model_len),
                    context_len=context, batch=batch, attn_flops_per_token_pair=mc.attn_flops_per_token_pair,
                    flops=gpu_flops(gpu, plan.dtype), bandwidth=float(gpu.bandwidth_bytes_per_s),
                    tp=plan.tensor_parallel_size, moe=mc.active_params < mc.total_params)


@dataclass(frozen=True)
class StepCost:
    """FLOPs to produce the n-th token with and without a KV cache, and the cache that buys it."""

    tokens: int
    flops_with_cache: int      # 2 x active params + attention over n cached tokens: O(n)
    flops_without_cache: int   # recompute all n tokens: 2 x active x n + attention n^2/2: O(n^2)
    kv_bytes: int


def step_cost(model: ModelSpec, tokens: int, mc: ModelCompute | None = None) -> StepCost:
    mc = mc or model_compute(model)
    with_cache = 2 * mc.active_params + mc.attn_flops_per_token_pair * tokens
    without = 2 * mc.active_params * tokens + mc.attn_flops_per_token_pair * tokens * tokens // 2
    return StepCost(tokens, with_cache, without, estimate(model, tokens, 1).kv_cache_bytes)
