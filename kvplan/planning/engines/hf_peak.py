"""transformers `generate` on one device: weights + the cache kvplan computes exactly + activation peaks.

    peak = max(prefill, decode)            (what torch.cuda.max_memory_allocated shows; the CUDA context
                                            and the allocator's cached-but-free blocks come on top)
    prefill = weights + inputs + the cache right after the prefill (sliding layers still pin all P tokens)
              + 3 x B x P x hidden (the layer's input still held by the model's loop, the post-attention sum,
                the normed input) + RoPE cos / sin
              + masks held for the whole forward (sdpa: one P x P boolean once a window forces a mask;
                eager: a B x P x P additive mask per attention kind)
              + the largest of one layer's transients on B x P tokens:
                  MLP       gated 3 x I (gate act, up, product), fused gate_up 4 x I, plain 2 x I
                  experts   grouped_mm: S = B x P x top_k rows: max(S x (H + 4 x I_e), 4 x S x H)
                            eager loop: one_hot(top_k, E + 1) int64 + the per-expert rows
                  attention sdpa: 3 x q_dim + 2 x kv_dim (q, its RoPE output, the output and its contiguous
                            copy; k / v before the cache copies them); once a window forces a mask, K / V
                            repeated to every head (repeat_kv) and sdpa's full-batch additive copy of the mask
                            (B x P x P x (1 + b)); eager: B x heads x P x P scores, their masked copy and the
                            float32 softmax; quantized caches add the quantizer's scratch
                  SSM / Gated DeltaNet: the torch paths' float32 scan / chunk tensors
              + the last position's logits: B x V x (b + 8) (lm_head, generate's float32 copy, processed scores)
    decode  = weights + inputs + output ids + the steady cache at T = P + N - 1 (the device part when offloaded)
              + one layer's K/V again while `torch.cat` copies it (DynamicCache), a dequantized layer twice plus
                the re-quantization scratch (QuantizedCache), the rolled copy of a sliding layer (StaticCache;
                full static layers are written in place), every token re-expanded to per-head K / V (MLA)
              + the logits

Every term is a tensor transformers 5.24 allocates on these paths. The validation harness
(`python -m validation`) measures the peak on a GPU (torch.cuda.max_memory_allocated) and on a CPU (torch
profiler allocation events) and reports both next to this prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...cache.estimate import Estimate
from ...dtypes import resolve_dtype
from ...units import GiB

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
    mla: bool = False               # latent cache: each step re-expands every cached token to per-head K / V
    has_full_attention: bool = True
    cache_k_elems_per_token: int = 0  # K part of the above (what one quantization call of a layer sees)
    deltanet: tuple = ()            # Gated DeltaNet: (k_heads, v_heads, k_head_dim, v_head_dim)
    sinks: bool = False             # gpt-oss: learned sink logits concatenated to the eager scores


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
            experts_implementation: str = "grouped_mm", device: str = "cuda") -> HFPeak:
    """Peak device memory of `generate` for the workload in `est` (batch, prompt_len, seq_len, cache).

    `shape` (from `activation_shape`) refines the plain sizes; without it the model is a dense gated decoder.
    `attn_implementation` is what the model runs: "sdpa", or "eager" (Gemma 2's softcapping, gpt-oss's sinks).
    `device` ("cuda" or "cpu") picks the dtype HQQ's optimizer works in (fp16 on CUDA, fp32 elsewhere).
    """
    shape = shape or ActivationShape(hidden_size, vocab_size, q_dim, kv_dim, intermediate_size=intermediate_size)
    b = int(resolve_dtype(est.activation_dtype).bytes)
    B, P = est.batch_size, est.prompt_len
    tokens = B * P
    H = shape.hidden_size
    head_dim = shape.q_dim // shape.num_heads if shape.num_heads else 0
    terms = []
    if shape.intermediate_size:
        factor = {"gated": 3, "fused_gated": 4, "plain": 2}.get(shape.mlp_kind, 3)
        terms.append(("mlp", tokens * factor * shape.intermediate_size * b))
    if shape.moe_experts:
        terms.append(("experts", _experts(shape, tokens, b, experts_implementation)))
    masks, attention = _attention(est, shape, b, attn_implementation)
    terms.append(("attention", attention))
    if shape.ssm_inner:   # the torch path: discretised A and B.u [B, I, P, S] in float32, then the scan
        terms.append(("ssm scan", 3 * tokens * shape.ssm_inner * shape.ssm_state * 4 + 6 * tokens * shape.ssm_inner * b))
    if shape.deltanet:
        terms.append(("gated deltanet", _deltanet(shape, B, P, b)))
    if est.cache == "quantized":    # the prompt is quantized layer by layer during the prefill
        extra = _quantize_transient(est, shape, P, b, device)
        terms = [(n, v + extra if n == "attention" else v) for n, v in terms]
    # the layer's input (still held by the model's loop), the post-attention sum, the normed input; RoPE cos / sin
    stream = 3 * tokens * H * b + 2 * tokens * head_dim * b
    logits = B * shape.vocab_size * (b + 8)
    transient = max(v for _, v in terms)
    prefill_activations = stream + masks + max(transient, logits)
    inputs = 2 * tokens * 8                       # input_ids and attention_mask, int64
    sequences = B * (est.seq_len + 1) * 8         # the growing output ids
    decode_transient = _decode_transient(est, shape, b, device) + logits
    prefill = weights_bytes + inputs + est.prefill_peak_bytes + prefill_activations
    decode = weights_bytes + inputs + sequences + _device_cache(est) + decode_transient
    if est.cache in ("offloaded", "offloaded_static"):
        prefill -= est.prefill_peak_bytes - _offloaded_prefill(est)
    peak = max(prefill, decode)
    formula = (f"weights {weights_bytes:,} + inputs {inputs:,} + max(prefill cache {est.prefill_peak_bytes:,} + "
               f"activations {prefill_activations:,} [{max(terms, key=lambda t: t[1])[0]}"
               + (f", masks {masks:,}" if masks else "") + f"], steady cache {_device_cache(est):,} + decode "
               f"transient {decode_transient:,})")
    return HFPeak(weights_bytes, est.kv_cache_bytes, prefill_activations, decode_transient, peak, CUDA_CONTEXT_BYTES,
                  formula, prefill, decode, inputs, tuple(terms) + (("masks", masks), ("stream", stream)))


def _experts(s: ActivationShape, tokens: int, b: int, implementation: str) -> int:
    rows = tokens * max(1, s.moe_top_k)
    H, Ie = s.hidden_size, s.moe_intermediate_size
    router = tokens * s.moe_experts * 4 + tokens * s.moe_top_k * (8 + 4)
    shared = tokens * 3 * s.shared_intermediate_size * b
    if implementation == "grouped_mm":
        # gathered rows [S, H] live to the end; gate_up [S, 2 I] with its gated half; then down, weighted and
        # re-ordered copies [S, H] side by side; plus the sort / permutation indices
        routed = max(rows * (H + 4 * Ie), 4 * rows * H) * b + rows * 8 * 3
    else:  # the eager loop: a one-hot expert mask, then each expert's rows one at a time
        routed = tokens * s.moe_top_k * (s.moe_experts + 1) * 8 + tokens * H * b + tokens * 3 * Ie * b
    return router + max(routed, shared) + tokens * H * b


def _attention(est: Estimate, s: ActivationShape, b: int, implementation: str) -> tuple[int, int]:
    """(masks held for the whole forward, one layer's attention transient) during the prefill."""
    B, P = est.batch_size, est.prompt_len
    tokens = B * P
    heads = s.num_heads or 1
    # q, its RoPE output and temporaries, the output and its contiguous copy; k / v before the cache copies them
    base = tokens * (3 * s.q_dim + 2 * s.kv_dim) * b
    repeat = 2 * tokens * s.q_dim * b if s.num_kv_heads and s.num_kv_heads < heads else 0   # repeat_kv
    if implementation == "eager":
        scores = B * heads * P * P
        kinds = 1 + (s.min_window is not None and s.has_full_attention)
        masks = kinds * B * P * P * b                       # additive float masks, one per attention kind
        # with the scores: q and K / V repeated to every head. The scores' peak: the input, the float32 softmax
        # and its cast back (2 b + 4 per score); with sinks the scores, their concatenation with the sink
        # logits and its shifted copy, softmax in the model dtype (3 b)
        per_score = 3 * b if s.sinks else 2 * b + 4
        return masks, tokens * s.q_dim * b + repeat + scores * per_score
    if s.min_window is None or P < s.min_window:
        return 0, base                                      # no mask: flash / efficient kernels with is_causal
    # a prompt as long as a window forces a mask: transformers keeps a P x P boolean one for the forward;
    # sdpa turns it into a full-batch additive mask in every layer, and GQA heads are repeated for it
    return P * P, base + repeat + B * P * P * (1 + b)


def _quantize_transient(est: Estimate, s: ActivationShape, tokens: int, b: int, device: str) -> int:
    """Scratch of quantizing one layer's K of `tokens` tokens: HQQ's proximal optimizer keeps about six copies
    (fp16 on CUDA, fp32 elsewhere), quanto about two float32 ones; fp8 casts in place."""
    n = est.batch_size * tokens * (s.cache_k_elems_per_token or s.cache_elems_per_token // 2)
    backend = est.quant_backend or ""
    if backend == "hqq":
        return 6 * n * (2 if device == "cuda" else 4)
    if backend == "quanto":
        return 2 * n * 4
    return 0


def _deltanet(s: ActivationShape, B: int, P: int, b: int) -> int:
    """Gated DeltaNet's torch path (chunks of 64): q / k / v in float32, repeated to the value heads, several
    copies; the per-chunk 64 x 64 attention; the causal conv over the mixed projections."""
    kh, vh, dk, dv = s.deltanet
    padded = -(-P // 64) * 64
    conv_dim = 2 * kh * dk + vh * dv
    return (5 * B * padded * vh * (2 * dk + dv) * 4 + 3 * B * vh * padded * 64 * 4 + 3 * B * P * conv_dim * b)


def _decode_transient(est: Estimate, s: ActivationShape, b: int, device: str = "cuda") -> int:
    """The largest one-step copy of a layer's cache at the final step."""
    if est.cache == "quantized":     # dequantized layer + its concatenation with the residual and the new token,
        # and, at a flush, the re-quantization of the whole layer
        return (2 * est.batch_size * est.seq_len * s.cache_elems_per_token * b
                + _quantize_transient(est, s, est.seq_len, b, device))
    expand = est.batch_size * est.seq_len * s.kv_dim * b if s.mla else 0
    if est.cache in ("static", "offloaded_static"):
        return expand + max((g.bytes // g.layers for g in est.groups
                             if g.layers and g.kind in ("sliding", "chunked")), default=0)
    return expand + max((g.bytes // g.layers for g in est.groups if g.layers and g.tokens), default=0)


def _device_cache(est: Estimate) -> int:
    return est.device_bytes if est.cache in ("offloaded", "offloaded_static") else est.kv_cache_bytes


def _offloaded_prefill(est: Estimate) -> int:
    """Device part of the cache right after an offloaded prefill: the same share as in steady decode."""
    if not est.kv_cache_bytes:
        return 0
    return est.prefill_peak_bytes * est.device_bytes // est.kv_cache_bytes


def activation_shape(model) -> ActivationShape:
    """The activation-relevant sizes of a `kvplan.ModelSpec`, largest over its layers."""
    from ...model.arch import AttentionDims, DeltaNetDims, MambaDims, MLPDims, MoEDims
    shape = model.require_arch()
    q = kv = heads = kv_heads = dense = moe_i = top_k = experts = shared = inner = state = 0
    kind = "gated"
    sinks = False
    deltanet: tuple = ()
    for layer in shape.layers:
        mixer, ffn = layer.mixer, layer.ffn
        if isinstance(mixer, DeltaNetDims):
            deltanet = (mixer.k_heads, mixer.v_heads, mixer.k_head_dim, mixer.v_head_dim)
        if isinstance(mixer, AttentionDims):
            q = max(q, mixer.heads * mixer.head_dim)
            kv = max(kv, mixer.kv_heads * (mixer.head_dim + mixer.v_head_dim))
            heads = max(heads, mixer.heads)
            kv_heads = max(kv_heads, mixer.kv_heads)
            sinks = sinks or mixer.sinks
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
    full = any(getattr(s, "kind", "") in ("full", "mla") for _, s in model.specs())
    k_elems = max((s.k_elems_per_token for _, s in model.specs() if hasattr(s, "k_elems_per_token")), default=0)
    return ActivationShape(shape.hidden, shape.vocab, q, kv, heads, kv_heads, dense, kind, moe_i, top_k, experts,
                           shared, min(windows) if windows else None, inner, state, elems, model.is_mla, full,
                           k_elems, deltanet, sinks)


# Families whose transformers 5.24 model class has no sdpa path (Gemma 2's softcapping, gpt-oss's sinks): without
# flash-attn installed, generate runs them eager, with B x heads x P x P scores.
EAGER_ONLY = frozenset({"gemma2", "gpt_oss"})


def hf_peak_for(model, est: Estimate, *, attn_implementation: str | None = None,
                experts_implementation: str = "grouped_mm", weights_bytes: int | None = None,
                device: str = "cuda") -> HFPeak:
    """`hf_peak` with the sizes and the weights read from a `kvplan.ModelSpec`; the attention kernel defaults to
    the one transformers picks for the family (sdpa, or eager for `EAGER_ONLY`)."""
    if attn_implementation is None:
        attn_implementation = "eager" if model.model_type in EAGER_ONLY else "sdpa"
    from ...weights.rule import weights_bytes as price

    s = activation_shape(model)
    if weights_bytes is None and model.checkpoint is not None:  # what from_pretrained loads
        # resident_bytes casts each float row to the model dtype, a DType (est names it: "bfloat16"); given the name
        # it raised AttributeError for every checkpoint-loaded model with float tensors, plan(engine="hf") included
        weights_bytes = model.checkpoint.resident_bytes(resolve_dtype(est.activation_dtype)) + buffer_bytes(model)
    elif weights_bytes is None:
        weights_bytes = price(model.require_arch(), est.activation_dtype).total_bytes + buffer_bytes(model)
    return hf_peak(est, weights_bytes=weights_bytes, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                   vocab_size=s.vocab_size, q_dim=s.q_dim, kv_dim=s.kv_dim, shape=s,
                   attn_implementation=attn_implementation, experts_implementation=experts_implementation,
                   device=device)


def buffer_bytes(model) -> int:
    """Non-persistent buffers transformers allocates next to the weights (not in the checkpoint), beyond the
    few-KB RoPE tables: GPT-BigCode's boolean causal mask of max_positions^2 (santacoder: 2048^2 = 4 MiB)."""
    if model.model_type == "gpt_bigcode":
        return (model.require_arch().learned_positions or 1024) ** 2
    return 0

