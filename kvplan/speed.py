"""Roofline speed model: what the GPU's bandwidth and FLOP/s allow, stated with its assumptions.

Prefill is compute-bound:  time = 2 x active params x prompt tokens x batch / (FLOP/s x mfu)
                                 + attention 4 x layers x heads x head_dim x P^2/2 x batch / (FLOP/s x mfu)
Decode is bandwidth-bound: each step reads every active weight once and the whole KV of the batch:
                            time = (weight bytes + KV bytes) / (bandwidth x mbu)
Tensor parallel divides both across ranks (ideal scaling; all-reduce cost ignored, said in the notes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import WorkloadError


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
