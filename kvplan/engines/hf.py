"""transformers `generate` on one GPU: weights + the cache kvplan computes exactly + activation peaks.

    peak = weights + max(prefill, decode) + CUDA context (not in torch's allocator)
    prefill = cache right after the prefill (sliding layers still pin all P tokens)
              + the largest transient of one layer on B x P tokens (MLP gate/up/act, Q/K/V, outputs)
              + logits of the last position only (generate uses logits_to_keep=1): B x V x (b + 4)
    decode  = steady cache + one layer's K/V again while `torch.cat` copies it (DynamicCache),
              or a full dequantized layer (QuantizedCache)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..estimate import Estimate
from ..units import GiB

CUDA_CONTEXT_BYTES = int(0.5 * GiB)  # typical CUDA context + cuBLAS workspace outside torch's allocator


@dataclass(frozen=True)
class HFPeak:
    weights_bytes: int
    cache_bytes: int
    prefill_activation_bytes: int
    decode_transient_bytes: int
    peak_allocated_bytes: int      # what torch.cuda.max_memory_allocated would show
    cuda_context_bytes: int
    formula: str


def hf_peak(est: Estimate, *, weights_bytes: int, hidden_size: int, intermediate_size: int, vocab_size: int,
            q_dim: int, kv_dim: int) -> HFPeak:
    """Peak device memory of `generate` for the workload in `est` (batch, prompt_len, seq_len, cache)."""
    b = _bytes(est.activation_dtype)
    tokens = est.batch_size * est.prompt_len
    mlp = tokens * 3 * intermediate_size * b
    attention = tokens * (q_dim + 2 * kv_dim) * b
    residual = 3 * tokens * hidden_size * b
    logits = est.batch_size * vocab_size * (b + 4)
    prefill = max(mlp, attention) + residual + logits
    largest_layer = max((g.bytes // g.layers for g in est.groups if g.layers), default=0)
    decode = largest_layer
    peak = weights_bytes + max(est.prefill_peak_bytes + prefill, est.kv_cache_bytes + decode)
    formula = (f"weights {weights_bytes:,} + max(prefill cache {est.prefill_peak_bytes:,} + activations "
               f"{prefill:,}, steady cache {est.kv_cache_bytes:,} + one-layer copy {decode:,})")
    return HFPeak(weights_bytes, est.kv_cache_bytes, prefill, decode, peak, CUDA_CONTEXT_BYTES, formula)


def _bytes(dtype_name: str) -> int:
    return 4 if dtype_name == "float32" else 2
