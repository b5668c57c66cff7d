"""What transformers 5.24 `generate` keeps per layer, for each cache implementation.

Pure arithmetic over the layer specs. Every rule here is pinned by a test against the real cache
(tests/test_truth_*.py). T = tokens cached per sequence, P = prompt tokens, W = window, M = max_cache_len.
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

from ..dtypes import DType
from ..errors import WorkloadError
from ..model.layers import CompressedAttentionSpec, FullAttentionSpec, NoCacheSpec, StateSpec

CACHE_CHOICES = ("dynamic", "static", "quantized", "offloaded", "offloaded_static")
QUANT_BACKENDS = ("quanto", "hqq", "fp8")

INT64_BYTES = 8  # the 0-d bookkeeping tensors: `_sliding_window_tensor`, StaticLayer.cumulative_length
FP32_BYTES = 4   # Fp8QuantizedLayer keeps one float32 scale for K and one for V per layer


class CachePlan(NamedTuple):
    """The resolved workload one estimate runs on (all lengths in tokens per sequence).

    A NamedTuple, like LayerBytes: built once or a few times per estimate, and tuples construct ~5x
    faster than frozen dataclasses (kvplan aims at >= 100k estimates/s)."""

    cache: str
    seq_len: int
    batch_size: int
    act_dtype: DType            # what the model computes in; unquantized caches store this
    kv_dtype: DType             # what the cache stores (== act_dtype unless quantized)
    max_cache_len: int          # static caches: preallocated length (defaults to seq_len)
    prompt_len: int             # tokens in the prefill (defaults to seq_len)
    backend: str = ""           # quantized: quanto / hqq / fp8
    q_group_size: int = 64
    residual_length: int = 128
    dtype_assumed: bool = False  # the config names no dtype and none was passed: act_dtype is float32 by default


class LayerBytes(NamedTuple):
    """One layer's bytes under a plan: resident storage, logical content, right after prefill, scalars."""

    tokens: int | None          # tokens of storage kept (None for constant state)
    logical_tokens: int | None
    storage: int
    logical: int
    after_prefill: int
    scalars: int
    offloadable: bool


def window_tokens(window: int, tokens: int) -> tuple[int, int]:
    """(storage, logical) tokens a DynamicSlidingWindowLayer holds once decoding has reached `tokens`.

    It keeps the last W-1 tokens as a view of the concatenation, so W tokens of storage stay pinned:
    W=4096, T=10,000 -> 4,096 stored, 4,095 meaningful. W=1 slices `[-0:]`, which keeps everything.
    """
    if window <= 1:
        return tokens, tokens
    return min(tokens, window), min(tokens, window - 1)


def layer_bytes(spec, plan: CachePlan) -> LayerBytes:
    if isinstance(spec, NoCacheSpec):
        return LayerBytes(0, 0, 0, 0, 0, 0, False)
    if isinstance(spec, StateSpec):
        return _state_bytes(spec, plan)
    if isinstance(spec, CompressedAttentionSpec):
        return compressed_bytes(spec, plan)
    prefix = getattr(spec, "prefix_tokens", 0)
    if prefix:  # CPM-Ant: its learned prompt tokens sit in the cache ahead of every sequence
        plan = plan._replace(seq_len=plan.seq_len + prefix, prompt_len=plan.prompt_len + prefix,
                             max_cache_len=plan.max_cache_len + prefix)
    if plan.cache == "quantized":
        return _quantized_bytes(spec, plan)
    if plan.cache in ("static", "offloaded_static"):
        return _static_bytes(spec, plan)
    return _dynamic_bytes(spec, plan)


def _per_token(spec: FullAttentionSpec, plan: CachePlan) -> int:
    return plan.batch_size * spec.bytes_per_token(int(plan.kv_dtype.bytes))


def _dynamic_bytes(spec: FullAttentionSpec, plan: CachePlan) -> LayerBytes:
    per_token = _per_token(spec, plan)
    T, P = plan.seq_len, plan.prompt_len
    if spec.window is None:
        return LayerBytes(T, T, T * per_token, T * per_token, P * per_token, 0, True)
    # steady decode: W tokens stored. Right after a prefill the whole P-token concatenation is still
    # pinned by the W-1 view until the next step (gemma-2-9b, W 4096, P 8192: 8,192 tokens resident).
    stored, logical = window_tokens(spec.window, T)
    return LayerBytes(stored, logical, stored * per_token, logical * per_token, P * per_token,
                      INT64_BYTES, plan.cache == "dynamic")


def _static_bytes(spec: FullAttentionSpec, plan: CachePlan) -> LayerBytes:
    per_token = _per_token(spec, plan)
    M = plan.max_cache_len
    tokens = M if spec.window is None else min(spec.window, M)  # StaticSlidingWindowLayer: min(W, M), not W-1
    size = tokens * per_token
    offloadable = spec.window is None  # offloaded_static keeps sliding layers on the device
    return LayerBytes(tokens, tokens, size, size, size, INT64_BYTES, offloadable)


def _state_bytes(spec: StateSpec, plan: CachePlan) -> LayerBytes:
    # conv state in the activation dtype, recurrent state in float32 (transformers' torch path)
    act = int(plan.act_dtype.bytes)
    size = plan.batch_size * (spec.conv_bytes(act) + spec.recurrent_bytes(act))
    stored = size + plan.batch_size * spec.pinned_bytes(act)   # RecurrentGemma's decode view: one column more
    return LayerBytes(None, None, stored, size, size, INT64_BYTES if spec.counter else 0, False)


def compressed_bytes(spec: CompressedAttentionSpec, plan: CachePlan) -> LayerBytes:
    """A DeepSeek-V4 CSA / HCA layer under a DynamicCache (see CompressedAttentionSpec for what it holds).

    DeepSeek-V4 defaults, P = T = 1,000 in bf16, a CSA layer (m 4, window 128): window 127 x 512 x 2 B logical but
    the prefill's 1,000-token K (= V) pinned; 250 entries x (512 + 128) x 2 B; buffers empty (1,000 mod 4 = 0) yet
    pinning the prefill's projections, 1,000 x 2 x 2 x 640 x 2 B; overlap 4 x 640 x (2 + 4) B; 8 B scalar."""
    B, T, P, m = plan.batch_size, plan.seq_len, plan.prompt_len, spec.compress_rate
    act = int(plan.act_dtype.bytes)
    stored, kept = window_tokens(spec.window, T)
    window, entry, buffer = spec.head_dim * act, spec.entry_elems * act, spec.buffer_elems * act

    def overlap(tokens: int) -> int:  # set the first time a window closes, a clone of m tokens
        return m * spec.entry_elems * (act + FP32_BYTES) if spec.overlap and tokens >= m else 0

    def held(tokens: int, window_tokens_: int, buffer_tokens: int) -> int:
        return B * (window_tokens_ * window + (tokens // m) * entry + buffer_tokens * buffer + overlap(tokens))

    # steady decode: each step concatenates the buffered tokens with the new one, so the buffer pins
    # ((T - 1) mod m) + 1 tokens (m at the step that closes a window, whose leftover is an empty view)
    storage = held(T, stored, (T - 1) % m + 1)
    logical = held(T, kept, T % m)
    after_prefill = held(P, P, P)  # the window and the buffers are views of the prefill's whole projections
    return LayerBytes(stored, kept, storage, logical, after_prefill, INT64_BYTES, False)


def quantized_tensor_bytes(elems_per_token: int, plan: CachePlan) -> tuple[int, int, int]:
    """(storage, quantized tokens, residual tokens) of one K or V tensor of a quanto/HQQ QuantizedLayer.

    The prefill is quantized whole; each decode token lands in a full-precision residual that is flushed
    (everything re-quantized) when it would reach R tokens, so it holds (T - P) mod R tokens.
    Quantized part (axis 0, transformers' default): n elements in n / G groups, one scale and one
    zero-point per group in the activation dtype, plus the packed data:
    - HQQ packs along the G rows of its [G, n / G] view: n x bits / 8 bytes exactly
      (n = 3,072 at int4, G 32, bf16 -> 1,536 + 2 x 96 x 2 = 1,920 B);
    - quanto packs along the n / G rows of its [n / G, G] view and pads them to whole bytes:
      ceil((n / G) x bits / 8) x G bytes (n = 1,344 at int2, G 32: 11 x 32 = 352 B, not 336).
    Raises WorkloadError for shapes the backend itself rejects (see `check_quantized_shape`).
    """
    check_quantized_shape(elems_per_token, plan)
    residual = (plan.seq_len - plan.prompt_len) % plan.residual_length
    quantized = plan.seq_len - residual
    act = int(plan.act_dtype.bytes)
    bits = plan.kv_dtype.bits
    n = plan.batch_size * quantized * elems_per_token
    groups = n // plan.q_group_size
    if plan.backend == "quanto":
        data = ceil(groups * bits / 8) * plan.q_group_size
    else:
        data = n * bits // 8
    size = data + 2 * groups * act + plan.batch_size * residual * elems_per_token * act
    return size, quantized, residual


def check_quantized_shape(elems_per_token: int, plan: CachePlan) -> None:
    """Reject the group sizes quanto / HQQ refuse (or silently corrupt) for this workload.

    Quantization happens on the prompt (P tokens) and at every flush (P + kR tokens). quanto needs G to
    divide the elements per sequence at each of those points (`Group size must be a divisor`), HQQ needs G
    to divide the whole tensor and to be a multiple of the values one byte packs (2 at int4, 4 at int2).
    G | e.P and G | e.(P + R) imply G | e.(P + kR) for every k, so two points suffice.
    """
    G, e, P = plan.q_group_size, elems_per_token, plan.prompt_len
    points = [P] + ([P + plan.residual_length] if plan.seq_len - P >= plan.residual_length else [])
    if plan.backend == "hqq":
        per_byte = 8 // plan.kv_dtype.bits
        if G % per_byte:
            raise WorkloadError(f"HQQ {plan.kv_dtype.name} packs {per_byte} values per byte along each group, "
                                f"so q_group_size must be a multiple of {per_byte}, not {G}")
        rows, per = plan.batch_size, f"{plan.batch_size} seq x "   # HQQ groups the whole tensor
    else:
        rows, per = 1, ""                                           # quanto groups within each sequence
    for t in points:
        if (rows * t * e) % G:
            raise WorkloadError(
                f"the {plan.backend} backend cannot split {per}{t:,} tokens x {e:,} elements = {rows * t * e:,} "
                f"values into groups of {G} (transformers raises here): pick a q_group_size that divides the "
                f"values of the prompt and of {plan.residual_length} residual tokens")


def _quantized_bytes(spec: FullAttentionSpec, plan: CachePlan) -> LayerBytes:
    T = plan.seq_len
    if plan.backend == "fp8":  # float8_e4m3fn data appended as-is; one fp32 scale per K and per V
        size = plan.batch_size * T * spec.elems_per_token
        return LayerBytes(T, T, size, size, plan.batch_size * plan.prompt_len * spec.elems_per_token,
                          2 * FP32_BYTES, False)
    k, quantized, residual = quantized_tensor_bytes(spec.k_elems_per_token, plan)
    v, _, _ = quantized_tensor_bytes(spec.v_elems_per_token, plan)
    prefill_plan = plan._replace(seq_len=plan.prompt_len)
    after = (quantized_tensor_bytes(spec.k_elems_per_token, prefill_plan)[0]
             + quantized_tensor_bytes(spec.v_elems_per_token, prefill_plan)[0])
    return LayerBytes(T, T, k + v, k + v, after, 0, False)
