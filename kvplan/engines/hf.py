"""transformers `generate` on one device: weights + the cache kvplan computes exactly + activation peaks.

    peak = max(prefill, decode)            (what torch.cuda.max_memory_allocated shows; the CUDA context
                                            and the allocator's cached-but-free blocks come on top)
    prefill = weights + inputs + the cache right after the prefill (sliding layers still pin all P tokens)
              + 2 x B x P x hidden (the residual stream and the layer input)
              + the larger of one layer's transients on B x P tokens:
                  MLP       gated 3 x I (gate act, up, product), fused gate_up 4 x I, plain 2 x I
                  experts   grouped_mm: S = B x P x top_k rows: max(S x (H + 3 x I_e), 4 x S x H)
                            eager loop: one_hot(top_k, E + 1) int64 + the per-expert rows
                  attention sdpa: 3 x q_dim + 4 x kv_dim (projections, RoPE outputs, the cache's first copy),
                            plus K/V repeated to every head (repeat_kv) and the boolean + additive masks
                            (P x P) whenever a window forces a mask (P >= W)
                            eager: B x heads x P x P scores in the model dtype and their float32 softmax
              + the last position's logits: B x V x (b + 8) (lm_head, generate's float32 copy, processed scores)
    decode  = weights + inputs + the steady cache at T = P + N - 1
              + one layer's K/V again while `torch.cat` copies it (DynamicCache), a full-precision copy of a
                layer (twice: dequantized and concatenated) for QuantizedCache, the rolled copy of a sliding
                layer in StaticCache; nothing for full static layers (written in place)
              + the logits

Every term is a tensor transformers 5.24 allocates on these paths; the validation harness
(`python -m validation`) measures the peak on a GPU (torch.cuda.max_memory_allocated) and on a CPU (torch
profiler allocation events) and reports both next to this prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..estimate import Estimate
from ..units import GiB

CUDA_CONTEXT_BYTES = int(0.5 * GiB)  # typical CUDA context + cuBLAS workspace outside torch's allocator


@dataclass(frozen=True)
class ActivationShape:
    """What the activation peak depends on, largest over layers. Build it with `activation_shape(model)`."""

    hidden_size: int
    vocab_size: int
    q_dim: int                      # heads x q/k head dim (MLA: heads x (nope + rope))
    kv_dim: int                     # K + V elements per token the projections emit (MLA: heads x (nope + rope + v))
    num_heads: int = 0
    num_kv_heads: int = 0
    intermediate_size: int = 0      # largest dense MLP
    mlp_kind: str = "gated"         # gated | fused_gated | plain
    moe_intermediate_size: int = 0  # one routed expert
    moe_top_k: int = 0
    moe_experts: int = 0
    shared_intermediate_size: int = 0
    min_window: int | None = None   # smallest sliding / chunk window: a mask is materialised once P >= W
    ssm_inner: int = 0              # Mamba: inner width x state (the torch path's discretised A and B.u)
    ssm_state: int = 0
    cache_elems_per_token: int = 0  # largest K + V elements one layer caches per token (quantized decode copy)


@dataclass(frozen=True)
class HFPeak:
    weights_bytes: int
    cache_bytes: int
    prefill_activation_bytes: int
    decode_transient_bytes: int
    peak_allocated_bytes: int      # what torch.cuda.max_memory_allocated would show
    cuda_context_bytes: int
    formula: str
    prefill_bytes: int = 0         # weights + inputs + prefill cache + activations
    decode_bytes: int = 0          # weights + inputs + steady cache + one-step transient
    inputs_bytes: int = 0
    terms: tuple = ()              # (name, bytes) of the prefill transient candidates


def hf_peak(est: Estimate, *, weights_bytes: int, hidden_size: int, intermediate_size: int, vocab_size: int,
            q_dim: int, kv_dim: int, shape: ActivationShape | None = None, attn_implementation: str = "sdpa",
            experts_implementation: str = "grouped_mm") -> HFPeak:
    """Peak device memory of `generate` for the workload in `est` (batch, prompt_len, seq_len, cache).

    `shape` (from `activation_shape`) refines the plain sizes; without it the model is a dense gated decoder.
    `attn_implementation` is what the model runs: "sdpa", or "eager" (Gemma 2's softcapping, gpt-oss's sinks).
    """
    shape = shape or ActivationShape(hidden_size, vocab_size, q_dim, kv_dim, intermediate_size=intermediate_size)
    b = _bytes(est.activation_dtype)
    B, P = est.batch_size, est.prompt_len
    tokens = B * P
    H = shape.hidden_size
    terms = []
    if shape.intermediate_size:
        factor = {"gated": 3, "fused_gated": 4, "plain": 2}.get(shape.mlp_kind, 3)
        terms.append(("mlp", tokens * factor * shape.intermediate_size * b + tokens * H * b))
    if shape.moe_experts:
        terms.append(("experts", _experts(shape, tokens, b, experts_implementation)))
    terms.append(("attention", _attention(est, shape, b, attn_implementation)))
    if shape.ssm_inner:
        terms.append(("ssm scan", 2 * tokens * shape.ssm_inner * shape.ssm_state * 4 + 3 * tokens * shape.ssm_inner * b))
    stream = 2 * tokens * H * b
    logits = B * shape.vocab_size * (b + 8)
    transient = max(v for _, v in terms)
    prefill_activations = stream + max(transient, logits)
    inputs = 2 * tokens * 8                       # input_ids and attention_mask, int64
    sequences = B * (est.seq_len + 1) * 8         # the growing output ids
    decode_transient = _decode_transient(est, shape, b) + logits
    prefill = weights_bytes + inputs + est.prefill_peak_bytes + prefill_activations
    decode = weights_bytes + inputs + sequences + _device_cache(est) + decode_transient
    if est.cache in ("offloaded", "offloaded_static"):
        prefill -= est.prefill_peak_bytes - _offloaded_prefill(est)
    peak = max(prefill, decode)
    formula = (f"weights {weights_bytes:,} + inputs {inputs:,} + max(prefill cache {est.prefill_peak_bytes:,} + "
               f"activations {prefill_activations:,} [{max(terms, key=lambda t: t[1])[0]}], steady cache "
               f"{_device_cache(est):,} + decode transient {decode_transient:,})")
    return HFPeak(weights_bytes, est.kv_cache_bytes, prefill_activations, decode_transient, peak, CUDA_CONTEXT_BYTES,
                  formula, prefill, decode, inputs, tuple(terms))


def _experts(s: ActivationShape, tokens: int, b: int, implementation: str) -> int:
    rows = tokens * max(1, s.moe_top_k)
    H, Ie = s.hidden_size, s.moe_intermediate_size
    router = tokens * s.moe_experts * 4 + tokens * s.moe_top_k * (8 + 4)
    shared = tokens * 3 * s.shared_intermediate_size * b
    if implementation == "grouped_mm":
        routed = max(rows * (H + 3 * Ie), 4 * rows * H) * b + rows * 8 * 3   # + sort / permutation indices
    else:  # the eager loop: a one-hot expert mask, then each expert's rows one at a time
        routed = tokens * s.moe_top_k * (s.moe_experts + 1) * 8 + tokens * H * b + tokens * 3 * Ie * b
    return router + max(routed, shared) + tokens * H * b


def _attention(est: Estimate, s: ActivationShape, b: int, implementation: str) -> int:
    B, P = est.batch_size, est.prompt_len
    tokens = B * P
    base = tokens * (3 * s.q_dim + 2 * s.kv_dim) * b + tokens * s.hidden_size * b
    heads = s.num_heads or 1
    if implementation == "eager":
        scores = B * heads * P * P
        mask = B * P * P * b
        return base + scores * (2 * b + 4) + mask
    masked = s.min_window is not None and P >= s.min_window
    extra = 0
    if masked:
        extra += P * P * (1 + 2 * b)                       # boolean mask, its additive copy, alignment
        if s.num_kv_heads and s.num_kv_heads < heads:      # GQA with a mask: K/V repeated to every head
            extra += 2 * tokens * s.q_dim * b
    return base + extra


def _decode_transient(est: Estimate, s: ActivationShape, b: int) -> int:
    """The largest one-step copy of a layer's cache at the final step."""
    if est.cache == "quantized":     # dequantized layer + its concatenation with the residual and the new token
        return 2 * est.batch_size * est.seq_len * s.cache_elems_per_token * b
    if est.cache in ("static", "offloaded_static"):
        return max((g.bytes // g.layers for g in est.groups if g.layers and g.kind in ("sliding", "chunked")),
                   default=0)
    return max((g.bytes // g.layers for g in est.groups if g.layers and g.tokens), default=0)


def _device_cache(est: Estimate) -> int:
    return est.device_bytes if est.cache in ("offloaded", "offloaded_static") else est.kv_cache_bytes


def _offloaded_prefill(est: Estimate) -> int:
    """Device part of the cache right after an offloaded prefill: the same share as in steady decode."""
    if not est.kv_cache_bytes:
        return 0
    return est.prefill_peak_bytes * est.device_bytes // est.kv_cache_bytes


def activation_shape(model) -> ActivationShape:
    """The activation-relevant sizes of a `kvplan.ModelSpec`, largest over its layers."""
    from ..config_dims import AttentionDims, MambaDims, MLPDims, MoEDims, parse_dims

    shape = parse_dims(model.raw)
    q = kv = heads = kv_heads = dense = moe_i = top_k = experts = shared = inner = state = 0
    kind = "gated"
    for layer in shape.layers:
        mixer, ffn = layer.mixer, layer.ffn
        if isinstance(mixer, AttentionDims):
            q = max(q, mixer.heads * mixer.head_dim)
            kv = max(kv, mixer.kv_heads * (mixer.head_dim + mixer.v_head_dim))
            heads = max(heads, mixer.heads)
            kv_heads = max(kv_heads, mixer.kv_heads)
        elif isinstance(mixer, MambaDims):
            inner, state = max(inner, mixer.inner), max(state, mixer.state)
        if isinstance(ffn, MLPDims):
            dense = max(dense, ffn.intermediate)
            kind = "fused_gated" if ffn.fused_gate_up else ("gated" if ffn.gated else "plain")
        elif isinstance(ffn, MoEDims):
            moe_i, top_k, experts = max(moe_i, ffn.expert.intermediate), max(top_k, ffn.top_k), max(experts, ffn.experts)
            if ffn.shared:
                shared = max(shared, ffn.shared.intermediate)
    windows = [s.window for _, s in model.specs() if getattr(s, "window", None)]
    elems = max((s.elems_per_token for _, s in model.specs() if hasattr(s, "elems_per_token")), default=0)
    return ActivationShape(shape.hidden, shape.vocab, q, kv, heads, kv_heads, dense, kind, moe_i, top_k, experts,
                           shared, min(windows) if windows else None, inner, state, elems)


def hf_peak_for(model, est: Estimate, *, attn_implementation: str = "sdpa",
                experts_implementation: str = "grouped_mm", weights_bytes: int | None = None) -> HFPeak:
    """`hf_peak` with the sizes and the weights read from a `kvplan.ModelSpec`."""
    from ..config_dims import parse_dims
    from ..weights import weights_bytes as price

    s = activation_shape(model)
    if weights_bytes is None:
        weights_bytes = price(parse_dims(model.raw), est.activation_dtype).total_bytes
    return hf_peak(est, weights_bytes=weights_bytes, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                   vocab_size=s.vocab_size, q_dim=s.q_dim, kv_dim=s.kv_dim, shape=s,
                   attn_implementation=attn_implementation, experts_implementation=experts_implementation)


def _bytes(dtype_name: str) -> int:
    return 4 if dtype_name == "float32" else 2
