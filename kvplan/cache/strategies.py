"""KV-cache strategies side by side: what one model's cache would weigh under each, and how each was computed.

Every row comes from `kvplan.estimate` on the real model or on a variant of its layer layout (`as_mha`,
`with_window`), so the layer accounting (GQA, MLA latents, sliding windows, Mamba state, bookkeeping
scalars) is the same one the Estimate page shows. Pure: no I/O, no Streamlit.

Llama-3.1-8B, 8,192 tokens, bf16: the model's own GQA cache is 1,073,741,824 B; the MHA baseline with its
32 attention heads as KV heads is 4x that; fp8 halves it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import ceil

from ..dtypes import resolve_dtype
from ..errors import WorkloadError, shown
from ..model.layers import FullAttentionSpec, MLASpec, SlidingWindowSpec
from ..model.spec import ModelSpec
from .estimate import Estimate, estimate

QUANT_KV = ("fp8", "int8", "int4")
ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")


@dataclass(frozen=True)
class StrategyRow:
    """One strategy's cache. `device_bytes` is what stays on the GPU; `host_bytes` what is offloaded."""

    strategy: str
    device_bytes: int | None    # None: the strategy does not apply to this model (`note` says why)
    host_bytes: int
    how: str                    # the call (or the arithmetic) that produced the number
    note: str = ""
    exact: bool = True          # False: a per-element estimate, no scales or zero-points counted
    saving_bytes: int = 0       # vs the model's own cache (device bytes); negative = costs more
    saving_pct: float = 0.0

    @property
    def applies(self) -> bool:
        return self.device_bytes is not None


# ---------------------------------------------------------------------------------------- layout variants


def attention_heads(model: ModelSpec) -> int:
    """The query-head count, i.e. what an MHA model would cache as KV heads."""
    heads = model.dims.num_heads if model.dims else None
    if not heads:
        raise WorkloadError(f"{model.name}'s config gives no attention head count, so it has no MHA baseline")
    return heads


def _mla_head_dims(model: ModelSpec) -> tuple[int, int]:
    """(K, V) head dims an MLA model would cache without its latent: DeepSeek-V3 192 (128 nope + 64 rope), 128."""
    from ..model.arch import AttentionDims
    for layer in model.require_arch().layers:
        if isinstance(layer.mixer, AttentionDims):
            return layer.mixer.head_dim, layer.mixer.v_head_dim
    raise WorkloadError(f"{model.name} has MLA layers but no attention block in its config")


def as_mha(model: ModelSpec) -> ModelSpec:
    """Every attention layer as full multi-head attention with all query heads cached as KV heads.

    Sliding, chunked and MLA layers become full layers (the textbook `2 x layers x heads x head_dim` formula);
    Mamba / DeltaNet state and cache-less layers are kept as they are.
    """
    heads = attention_heads(model)
    mla = _mla_head_dims(model) if model.is_mla else None

    def convert(spec):
        if not isinstance(spec, FullAttentionSpec):
            return spec
        k, v = mla if isinstance(spec, MLASpec) else (spec.k_head_dim, spec.v_head_dim)
        return FullAttentionSpec(heads, k, v)

    layers = tuple(tuple(convert(s) for s in layer) for layer in model.layers)
    return dataclasses.replace(model, name=f"{model.name} (MHA baseline)", layers=layers)


def with_window(model: ModelSpec, window: int) -> ModelSpec:
    """Every attention layer (full, sliding, chunked or MLA latent) as a sliding window of `window` tokens."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise WorkloadError(f"a sliding window must hold at least 2 tokens, got {shown(window)}: pick a larger window")

    def convert(spec):
        if not isinstance(spec, FullAttentionSpec):
            return spec
        return SlidingWindowSpec(spec.kv_heads, spec.k_head_dim, spec.v_head_dim, sliding_window=window)

    layers = tuple(tuple(convert(s) for s in layer) for layer in model.layers)
    return dataclasses.replace(model, name=f"{model.name} (window {window})", layers=layers)


# ---------------------------------------------------------------------------------------- one row each


def own(model: ModelSpec, seq_len: int, batch_size: int = 1) -> StrategyRow:
    est = estimate(model, seq_len, batch_size)
    kinds = ", ".join(f"{n} {k}" for k, n in model.attention_kinds.items())
    return StrategyRow(f"model's own ({_attention_label(model)})", est.kv_cache_bytes, 0,
                       f"kvplan.estimate(model, {seq_len}, {batch_size}): {kinds} layers, {est.kv_dtype}")


def _attention_label(model: ModelSpec) -> str:
    if model.is_mla:
        return "MLA"
    kv, heads = model.kv_heads, (model.dims.num_heads if model.dims else None)
    if kv is None or heads is None:
        return "as configured"
    return "MHA" if kv == heads else ("MQA" if kv == 1 else f"GQA {heads}:{kv}")


def mha_baseline(model: ModelSpec, seq_len: int, batch_size: int = 1) -> StrategyRow:
    est = estimate(as_mha(model), seq_len, batch_size)
    heads = attention_heads(model)
    return StrategyRow("MHA baseline", est.kv_cache_bytes, 0,
                       f"kvplan.estimate on the layout with all {heads} attention heads as KV heads, every "
                       "attention layer full", "what the cache would be without GQA / MQA / MLA or windows")


def sliding_window(model: ModelSpec, seq_len: int, batch_size: int, window: int) -> StrategyRow:
    est = estimate(with_window(model, window), seq_len, batch_size)
    return StrategyRow(f"sliding window W={window:,}", est.kv_cache_bytes, 0,
                       f"kvplan.estimate with every attention layer a {window:,}-token sliding window "
                       "(transformers keeps min(T, W) tokens)",
                       "quality cost: tokens older than W are gone unless the model was trained for it")


def sinks_window(model: ModelSpec, seq_len: int, batch_size: int, sinks: int, window: int) -> StrategyRow:
    """StreamingLLM: the first `sinks` tokens plus the last `window`, i.e. a (sinks + window)-token cache."""
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise WorkloadError(f"attention sinks must be a whole number >= 0, got {shown(sinks)}")
    est = estimate(with_window(model, sinks + window), seq_len, batch_size)
    return StrategyRow(f"sinks {sinks} + window {window:,}", est.kv_cache_bytes, 0,
                       f"kvplan.estimate with every attention layer holding min(T, {sinks} + {window:,}) tokens "
                       "(StreamingLLM)", "keeps generation stable past the window; old content still forgotten")


def quantized(model: ModelSpec, seq_len: int, batch_size: int, kv_dtype: str) -> StrategyRow:
    """transformers' QuantizedCache where the model allows it; otherwise the bare per-element size."""
    label = f"{kv_dtype} KV"
    try:
        est = estimate(model, seq_len, batch_size, kv_dtype, "quantized")
    except WorkloadError as exc:
        base = estimate(model, seq_len, batch_size)
        bits = f"{resolve_dtype(kv_dtype).bits} / {resolve_dtype(base.kv_dtype).bits}"
        return StrategyRow(label, per_element_bytes(base, kv_dtype), 0,
                           f"per-element size: attention bytes of the {base.kv_dtype} cache x {bits} bits "
                           "(state layers unchanged)",
                           f"no scales or zero-points counted: kvplan's quantized cache does not apply ({exc})",
                           exact=False)
    return StrategyRow(label, est.kv_cache_bytes, 0,
                       f"kvplan.estimate(cache='quantized', kv_dtype='{kv_dtype}'): {est.quant_backend} backend, "
                       "scales and zero-points included", "; ".join(est.notes[-1:]) if est.quant_backend != "fp8"
                       else "one float32 scale per K and per V per layer")


def per_element_bytes(est: Estimate, kv_dtype: str) -> int:
    """Attention groups rescaled from the estimate's element size to `kv_dtype`'s; state and bookkeeping kept."""
    bits, base = resolve_dtype(kv_dtype).bits, resolve_dtype(est.kv_dtype).bits
    attention = sum(g.bytes for g in est.groups if g.kind in ATTENTION_KINDS)
    rest = est.kv_cache_bytes - attention
    return ceil(attention * bits / base) + rest


def offloaded(model: ModelSpec, seq_len: int, batch_size: int) -> StrategyRow:
    est = estimate(model, seq_len, batch_size, cache="offloaded")
    return StrategyRow("offload to host memory", est.device_bytes, est.host_bytes,
                       "kvplan.estimate(cache='offloaded'): one layer (the next to prefetch) and never-offloaded "
                       "layers stay on the GPU", "needs CUDA; PCIe bandwidth bounds decode speed")


def keep_fraction(model: ModelSpec, seq_len: int, batch_size: int, fraction: float) -> StrategyRow:
    """FastGen / DMS-style eviction, as a uniform keep ratio: every layer keeps ceil(fraction x T) tokens."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise WorkloadError(f"the keep fraction must be in (0, 1], got {shown(fraction)}")
    kept = max(1, ceil(fraction * seq_len))
    est = estimate(model, kept, batch_size)
    return StrategyRow(f"evict: keep {fraction:.0%}", est.kv_cache_bytes, 0,
                       f"kvplan.estimate at ceil({fraction:g} x {seq_len:,}) = {kept:,} tokens per sequence",
                       "real policies keep different fractions per head and layer; this is the uniform average")


# ---------------------------------------------------------------------------------------- the table


def compare(model: ModelSpec, seq_len: int, batch_size: int = 1, *, window: int = 4096, sinks: int = 4,
            fraction: float = 0.5, quant_dtypes: tuple[str, ...] = QUANT_KV) -> list[StrategyRow]:
    """All strategies for one model and workload, each with its saving against the model's own cache."""
    base = own(model, seq_len, batch_size)  # a bad workload raises here, before any other row
    rows = [_or_not_applicable("MHA baseline", mha_baseline, model, seq_len, batch_size), base,
            sliding_window(model, seq_len, batch_size, window),
            sinks_window(model, seq_len, batch_size, sinks, window),
            *(_or_not_applicable(f"{d} KV", quantized, model, seq_len, batch_size, d) for d in quant_dtypes),
            _or_not_applicable("offload to host memory", offloaded, model, seq_len, batch_size),   # V4: dynamic only
            keep_fraction(model, seq_len, batch_size, fraction)]
    return [with_saving(r, base.device_bytes) for r in rows]


def _or_not_applicable(label: str, fn, *args) -> StrategyRow:
    """A row that says why the strategy has no number (Mamba-2.8B has no attention heads to expand)."""
    try:
        return fn(*args)
    except WorkloadError as exc:
        return StrategyRow(label, None, 0, "not computed", str(exc), exact=False)


def with_saving(row: StrategyRow, reference_bytes: int) -> StrategyRow:
    if row.device_bytes is None:
        return row
    saving = reference_bytes - row.device_bytes
    pct = 100.0 * saving / reference_bytes if reference_bytes else 0.0
    return dataclasses.replace(row, saving_bytes=saving, saving_pct=pct)
