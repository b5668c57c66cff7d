"""`estimate()`: the KV cache of a model for a workload, with its breakdown and formula. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from ..dtypes import DType, resolve_dtype
from ..errors import WorkloadError, shown
from ..model.layers import (CompressedAttentionSpec, FullAttentionSpec, IndexedMLASpec, MLASpec, NoCacheSpec,
                            StateSpec)
from ..model.spec import ModelSpec
from ..units import fmt_bytes, fmt_int
from .hf import CACHE_CHOICES, QUANT_BACKENDS, CachePlan, LayerBytes, layer_bytes

MAX_TOKENS = 1 << 40   # far beyond any context; keeps int arithmetic sane under fuzzing
MAX_BATCH = 1 << 24


class GroupRow(BaseModel):
    """Layers that cache the same thing, summed: e.g. gemma-2-9b's 21 sliding layers."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # schema built on first dump: faster CLI start

    kind: str                   # full / sliding / chunked / mla / state / none
    layers: int
    layer_indices: str          # "0-31" or "0,2,4,...": which layers
    detail: str                 # "2 x 8 KV heads x 128", "window 4096", "latent 512 + rope 64"
    tokens: int | None          # tokens of storage kept per sequence (None: constant state)
    logical_tokens: int | None  # tokens that still matter (sliding: W-1)
    bytes_per_token: int        # per layer, per sequence, at the KV dtype (0 for state / none)
    bytes: int                  # resident storage of all these layers, whole batch
    logical_bytes: int
    formula: str


class Estimate(BaseModel):
    """KV cache of one model under one workload and cache strategy (transformers 5.24 semantics).

    `kv_cache_bytes` is the storage the cache holds in steady decode at `seq_len` tokens per sequence,
    including the few 0-d bookkeeping tensors; `logical_bytes` counts only tokens attention still reads;
    `prefill_peak_bytes` is what is resident right after a prefill of `prompt_len` tokens.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)  # schema built on first dump: faster CLI start

    model: str
    model_type: str
    engine: str = "hf"
    cache: str
    seq_len: int
    batch_size: int
    kv_dtype: str
    activation_dtype: str
    max_cache_len: int | None
    prompt_len: int
    quant_backend: str | None
    kv_cache_bytes: int
    logical_bytes: int
    prefill_peak_bytes: int
    bookkeeping_bytes: int
    device_bytes: int
    host_bytes: int
    bytes_per_token: int        # growth per extra token per sequence while every unbounded layer grows
    groups: list[GroupRow]
    formula: str
    notes: list[str]
    verified: bool = True       # False: kvplan has not proven its rules for this model (see `warnings`)
    warnings: list[str] = []    # what is not verified, one sentence each (kvplan.config.verified)

    @property
    def kv_cache_gib(self) -> float:
        return self.kv_cache_bytes / 2**30

    @property
    def kv_cache_gb(self) -> float:
        return self.kv_cache_bytes / 1e9


def estimate(
    model: ModelSpec | str,
    seq_len: int,
    batch_size: int = 1,
    kv_dtype: str | DType | None = None,
    cache: str = "dynamic",
    *,
    max_cache_len: int | None = None,
    prompt_len: int | None = None,
    dtype: str | DType | None = None,
    quant_backend: str | None = None,
    q_group_size: int = 64,
    residual_length: int = 128,
) -> Estimate:
    """KV cache bytes for `batch_size` sequences of `seq_len` cached tokens each.

    `kv_dtype` defaults to the config's dtype (int4 for `cache="quantized"`); `dtype` is the activation
    dtype (defaults to the config's, or to `kv_dtype` when that is a 16/32-bit float).
    """
    if not isinstance(model, ModelSpec):   # a name, a path or a config's data: read it here, once
        from ..config.load import as_model

        model = as_model(model)
    plan = make_plan(model, seq_len, batch_size, kv_dtype, cache, max_cache_len, prompt_len, dtype,
                     quant_backend, q_group_size, residual_length)
    return build_estimate(model, plan)


def _positive(name: str, value, *, minimum: int = 1, maximum: int = MAX_TOKENS) -> int:
    if type(value) is int and minimum <= value <= maximum:  # the usual case first (bool is not `int` here)
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(f"{name} must be a whole number, got {shown(value)}")
    if not minimum <= value <= maximum:
        raise WorkloadError(f"{name} must be between {minimum} and {maximum:,}, got {shown(value)}")
    return value


STATIC_CACHES = ("static", "offloaded_static")


def make_plan(model: ModelSpec, seq_len, batch_size=1, kv_dtype=None, cache="dynamic", max_cache_len=None,
              prompt_len=None, dtype=None, quant_backend=None, q_group_size=64, residual_length=128) -> CachePlan:
    """Validate a workload against a model and resolve its defaults."""
    seq_len = _positive("seq_len", seq_len)
    batch_size = _positive("batch_size", batch_size, maximum=MAX_BATCH)
    if cache not in CACHE_CHOICES:
        raise WorkloadError(f"unknown cache {shown(cache)}: use one of {', '.join(CACHE_CHOICES)}")
    prompt_len = seq_len if prompt_len is None else _positive("prompt_len", prompt_len)
    if prompt_len > seq_len:
        raise WorkloadError(f"prompt_len {prompt_len:,} exceeds seq_len {seq_len:,}: the cache holds prompt + "
                            "generated tokens, so pass a seq_len of at least the prompt length")
    if cache != "dynamic" and "compressed" in model.spec_kinds:
        # transformers 5.24 modeling_deepseek_v4.py: the compressor state lives in DeepseekV4CSACache / HCACache,
        # DynamicCache layers of their own; a static cache hands the compressor a layer without it and fails
        raise WorkloadError(f"{model.name}'s compressed attention layers (DeepSeek-V4) keep their compressor state "
                            f"in dynamic cache layers of their own, which the {cache} cache does not build: use "
                            "--cache dynamic")
    act, kv = _dtypes(model, cache, kv_dtype, dtype)
    # a setting the cache does not take is an error, never ignored (--cache dynamic --max-cache-len 5 was)
    if max_cache_len is not None and cache not in STATIC_CACHES:
        raise WorkloadError(f"max_cache_len sizes a static cache, and the {cache} cache grows with its tokens: use "
                            "--cache static (or offloaded_static), or leave out --max-cache-len")
    if quant_backend is not None and cache != "quantized":
        raise WorkloadError(f"a quantization backend is for the quantized cache, not the {cache} cache: add --cache "
                            "quantized, or leave out --quant-backend")
    max_len = seq_len if max_cache_len is None else _positive("max_cache_len", max_cache_len)
    if cache in STATIC_CACHES and seq_len > max_len:
        raise WorkloadError(f"seq_len {seq_len:,} exceeds max_cache_len {max_len:,}: a static cache cannot grow, "
                            "so raise --max-cache-len")
    backend = ""
    # checked for every cache, as the CLI accepts them for every cache: --q-group-size -5 is wrong anywhere
    q_group_size = _positive("q_group_size", q_group_size, maximum=1 << 20)
    residual_length = _positive("residual_length", residual_length, maximum=1 << 20)
    if cache == "quantized":
        backend = _backend(model, kv, quant_backend)
    assumed = dtype is None and (kv_dtype is None or cache == "quantized") and not model.dtype_named
    return CachePlan(cache, seq_len, batch_size, act, kv, max_len, prompt_len, backend, q_group_size,
                     residual_length, assumed)


def neutral_fp8(plan: CachePlan) -> bool:
    """An fp8 KV cache asked of the default (dynamic) cache: the engine-neutral bytes, every cached element in
    one byte at the dynamic cache's token counts, which is what vLLM and SGLang store per token (fp8 K and V, or
    the fp8 MLA latent), not a cache transformers builds (its fp8 is the quantized cache, `--cache quantized`)."""
    return plan.cache == "dynamic" and plan.kv_dtype != plan.act_dtype and plan.kv_dtype.is_sub_16bit


def _dtypes(model: ModelSpec, cache: str, kv_dtype, dtype) -> tuple[DType, DType]:
    act = resolve_dtype(dtype) if dtype is not None else None
    if act is not None and act.is_sub_16bit:
        raise WorkloadError(f"activation dtype {act.name} is not one transformers computes in: "
                            "use fp32, fp16 or bf16")
    if cache == "quantized":
        kv = resolve_dtype(kv_dtype) if kv_dtype is not None else resolve_dtype("int4")
        if not kv.is_sub_16bit:
            raise WorkloadError(f"the quantized cache stores int2, int4, int8 or fp8, not {kv.name}: "
                                "pass --kv-dtype int4 (or use --cache dynamic)")
        return act or model.dtype, kv
    kv = resolve_dtype(kv_dtype) if kv_dtype is not None else (act or model.dtype)
    if kv.is_float and kv.is_sub_16bit and cache == "dynamic":  # fp8: the engine-neutral figure (neutral_fp8)
        return act or model.dtype, kv
    if kv.is_sub_16bit:
        raise WorkloadError(f"transformers stores {kv.name} KV only in a quantized cache: "
                            f"add --cache quantized (or pick fp16 / bf16 / fp32)")
    if act is not None and act != kv:
        raise WorkloadError(f"an unquantized cache stores the activation dtype: kv_dtype {kv.name} "
                            f"cannot differ from dtype {act.name}")
    return kv, kv


def _backend(model: ModelSpec, kv: DType, requested: str | None) -> str:
    if not model.all_full_attention:
        raise WorkloadError(f"{model.name} has sliding, chunked or state layers, and transformers' quantized "
                            "cache accepts only full-attention models: use --cache dynamic or static")
    default = {"float8_e4m3": "fp8", "int8": "hqq"}.get(kv.name, "quanto")
    backend = requested or default
    if backend not in QUANT_BACKENDS:
        raise WorkloadError(f"unknown quantization backend {shown(backend)}: use one of {', '.join(QUANT_BACKENDS)}")
    allowed = {"quanto": ("int2", "int4"), "hqq": ("int2", "int4", "int8"), "fp8": ("float8_e4m3",)}[backend]
    if kv.name not in allowed:
        raise WorkloadError(f"the {backend} backend stores {', '.join(allowed)}, not {kv.name}: "
                            "pick a matching --kv-dtype or --quant-backend")
    return backend


def build_estimate(model: ModelSpec, plan: CachePlan) -> Estimate:
    """Size each group of identical layers once (`layer_bytes` depends only on the spec and the plan) and
    multiply by its layer count: gemma-2-9b is 2 evaluations, not 42."""
    rows, sized = [], []
    storage = logical = prefill = scalars = unbounded = 0
    kv_bytes = int(plan.kv_dtype.bytes)
    tokens_per_row = plan.cache != "quantized"  # quantized: packed groups + residual, no single per-token size
    for group in _layout(model):
        lb = layer_bytes(group.spec, plan)
        n = group.count
        total = n * lb.storage
        storage += total
        logical += n * lb.logical
        prefill += n * lb.after_prefill
        scalars += n * lb.scalars
        per_token = 0  # state / none: nothing per token
        if group.caches_tokens and tokens_per_row:
            per_token = group.spec.bytes_per_token(kv_bytes)
            formula = f"{group.prefix}{lb.tokens:,} tokens x {plan.batch_size} seq x {kv_bytes} B"
            if per_token != group.elems_per_token * kv_bytes:  # Dots3-Note: float32 indexer keys beside the latent
                formula = (f"{n} {group.kind} layers x {lb.tokens:,} tokens x {plan.batch_size} seq x {per_token:,} B "
                           f"({group.detail}, at {kv_bytes} B and 4 B)")
            unbounded += n * per_token if group.unbounded else 0  # growth per token: layers keeping every token
        else:
            formula = _formula(group, plan, total)
        rows.append(_construct(GroupRow, {
            "kind": group.kind, "layers": n, "layer_indices": group.layer_indices, "detail": group.detail,
            "tokens": lb.tokens, "logical_tokens": lb.logical_tokens, "bytes_per_token": per_token, "bytes": total,
            "logical_bytes": n * lb.logical, "formula": formula,
        }))
        sized.append((group, lb))
    storage += scalars
    device, host = _placement(plan, sized, storage)
    formula = " + ".join([row.formula for row in rows if row.bytes]) or "0 B"
    if scalars:
        formula += f" + {scalars:,} B bookkeeping scalars"
    return _construct(Estimate, {
        "model": model.name, "model_type": model.model_type, "engine": "neutral" if neutral_fp8(plan) else "hf",
        "cache": plan.cache,
        "seq_len": plan.seq_len, "batch_size": plan.batch_size, "kv_dtype": plan.kv_dtype.name,
        "activation_dtype": plan.act_dtype.name,
        "max_cache_len": plan.max_cache_len if plan.cache in ("static", "offloaded_static") else None,
        "prompt_len": plan.prompt_len, "quant_backend": plan.backend or None,
        "kv_cache_bytes": storage, "logical_bytes": logical + scalars, "prefill_peak_bytes": prefill + scalars,
        "bookkeeping_bytes": scalars, "device_bytes": device, "host_bytes": host, "bytes_per_token": unbounded,
        "groups": rows, "formula": f"{formula} = {storage:,} B ({fmt_bytes(storage)})",
        "notes": [*model.notes, *_plan_notes(model, plan)],
        "verified": model.verified, "warnings": list(model.warnings),
    })


_set = object.__setattr__
# BaseModel's slot setters: what model_construct assigns, without BaseModel.__setattr__ in the way
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


def _construct(cls, values: dict):
    """`cls.model_construct(**values)` for trusted values that name every field, without its per-call
    overhead (~10 us for Estimate here, most of an estimate): set exactly the attributes pydantic 2's
    model_construct sets. tests/test_api.py round-trips estimates through model_validate to keep it honest."""
    if len(values) != _FIELD_COUNTS[cls]:  # a field left to its default: let pydantic fill it in
        return cls.model_construct(**values)
    obj = object.__new__(cls)
    _set(obj, "__dict__", values)
    _SET_FIELDS_SET(obj, set(values))
    _SET_EXTRA(obj, None)
    _SET_PRIVATE(obj, None)
    return obj


_FIELD_COUNTS = {GroupRow: len(GroupRow.model_fields), Estimate: len(Estimate.model_fields)}


def _placement(plan: CachePlan, sized: list[tuple[_Group, LayerBytes]], storage: int) -> tuple[int, int]:
    """(device, host) bytes. Offloading keeps one offloaded layer (the next to be prefetched: the first in
    layer order) on the device between steps, plus every layer that is never offloaded (state, sliding
    under offloaded_static)."""
    if plan.cache not in ("offloaded", "offloaded_static"):
        return storage, 0
    moved = [(group.first, lb.storage, group.count) for group, lb in sized if lb.offloadable and lb.storage]
    if not moved:
        return storage, 0
    host = sum(size * count for _, size, count in moved) - min(moved)[1]
    return storage - host, host


def _plan_notes(model: ModelSpec, plan: CachePlan) -> list[str]:
    notes = [_dtype_note(plan)] if plan.dtype_assumed else []
    limit = model.dims.max_position_embeddings if model.dims is not None else None
    if limit and plan.seq_len > limit:  # exact bytes all the same: the cache holds whatever it is given
        notes.append(f"seq_len {plan.seq_len:,} is past the model's max_position_embeddings of {limit:,}: positions "
                     "beyond it were never trained (vLLM and SGLang refuse such a length unless told otherwise)")
    if neutral_fp8(plan):
        notes += _neutral_notes(model, plan)
    if plan.cache == "dynamic" or plan.cache == "static":
        return notes
    if plan.cache in ("offloaded", "offloaded_static"):
        notes.append("offloading needs CUDA; during a step a second offloaded layer is prefetched onto the device")
    if plan.cache == "quantized" and plan.backend != "fp8":
        notes.append(f"{plan.backend} {plan.kv_dtype.name}, group {plan.q_group_size}, residual "
                     f"{plan.residual_length}: prompt quantized at prefill, (T - P) mod R tokens kept in "
                     f"{plan.act_dtype.name}")
    return notes


def _neutral_notes(model: ModelSpec, plan: CachePlan) -> list[str]:
    """What the engine-neutral fp8 figure is, and where an engine or transformers stores something else."""
    notes = [f"engine-neutral {plan.kv_dtype.name} KV: every cached element in 1 byte, as vLLM and SGLang store "
             "an fp8 KV cache (their per-tensor K and V scales sit outside the pool); a capacity plan gives an "
             "engine's own pool. transformers' DynamicCache cannot hold fp8: its fp8 is the quantized cache with "
             "the fp8 backend (full-attention models only), these bytes plus one float32 scale per K and V, 8 B a "
             "layer"]
    if any(isinstance(spec, MLASpec) for _, spec in model.specs()):
        # vLLM 0.33 MLAAttentionSpec (model_executor/layers/attention/mla_attention.py `get_kv_cache_spec`:
        # head_size kv_lora_rank + rope, dtype fp8) and SGLang 0.5.23 MLATokenToKVPool (mem_cache/memory_pool.py:
        # kv_cache_dim = kv_lora_rank + qk_rope_head_dim, uint8 store) keep DeepSeek-V3's latent as 512 + 64 fp8
        # bytes; the sparse (DSA) kernels pack 512 fp8 + 4 float32 scales + 64 bfloat16 rope = 656 B
        # (vLLM flashmla_sparse.py 'fp8_ds_mla', SGLang NSA/DSA override_kv_cache_dim)
        notes.append("MLA: this is the dense fp8 layout both engines use (vLLM 0.33 MLAAttentionSpec, SGLang 0.5.23 "
                     "MLATokenToKVPool: the latent and its rope part all fp8, 576 B per layer per token for "
                     "DeepSeek-V3); sparse-attention kernels (vLLM FLASHMLA_SPARSE 'fp8_ds_mla', SGLang DSA) store "
                     "656 B instead (512 fp8 + 16 B of scales + 64 bfloat16 rope values)")
    if any(isinstance(spec, StateSpec) for _, spec in model.specs()):
        notes.append(f"state layers (Mamba, linear attention) keep {plan.act_dtype.name}: an fp8 KV cache covers "
                     "attention layers only")
    return notes


def _dtype_note(plan: CachePlan) -> str:
    """gpt-oss-20b's config names no dtype: from_config builds float32, from_pretrained("auto") loads bf16."""
    return (f"the config names no dtype, so this assumes {plan.act_dtype.name}, what transformers' from_config "
            "builds; from_pretrained(dtype=\"auto\") uses the checkpoint's weight dtype (often bfloat16): "
            "pass --dtype bf16 for that")


@dataclass(frozen=True)
class _Group:
    """Layers that share one spec, with everything about them that does not depend on the workload."""

    spec: object
    kind: str
    count: int
    elems_per_token: int    # K + V elements per token per layer per sequence (0: state / none)
    layer_indices: str      # "0-31", "0,2,4,..."
    first: int              # (layer, spec) position of its first layer
    detail: str
    prefix: str             # formula up to the token count: "32 full layers x 2 x 8 KV heads x 128 head_dim x "
    caches_tokens: bool     # attention of some kind (not state, not nothing)
    unbounded: bool         # full attention or MLA: grows with every token


_LAYOUTS: dict[int, tuple[ModelSpec, tuple[_Group, ...]]] = {}
_LAYOUTS_MAX = 256


def _layout(model: ModelSpec) -> tuple[_Group, ...]:
    """The model's layers grouped by identical spec, in order of first appearance.

    Computed once per ModelSpec object (it is frozen), so an estimate does not walk 126 layers each time.
    Keyed by id() with an identity check: hashing a ModelSpec would hash every layer spec on each call.
    """
    hit = _LAYOUTS.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    found: dict = {}
    position = 0
    for index, layer in enumerate(model.layers):
        for spec in layer:
            found.setdefault(spec, []).append((index, position))
            position += 1
    groups = tuple(_group(spec, items) for spec, items in found.items())
    if len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[id(model)] = (model, groups)
    return groups


def _group(spec, items: list[tuple[int, int]]) -> _Group:
    count = len(items)
    caches_tokens = isinstance(spec, FullAttentionSpec)  # compressed layers (DeepSeek-V4) have their own formula
    prefix = ""
    if caches_tokens:
        if isinstance(spec, IndexedMLASpec):
            heads = f"({spec.kv_lora_rank} latent + {spec.qk_rope_head_dim} rope + {spec.index_head_dim} indexer)"
        elif isinstance(spec, MLASpec):
            heads = f"({spec.kv_lora_rank} latent + {spec.qk_rope_head_dim} rope)"
        elif spec.k_head_dim == spec.v_head_dim:
            heads = f"2 x {spec.kv_heads} KV heads x {spec.k_head_dim} head_dim"
        else:
            heads = f"{spec.kv_heads} KV heads x ({spec.k_head_dim} + {spec.v_head_dim})"
        prefix = f"{count} {spec.kind} layers x {heads} x "
    elems = spec.elems_per_token if caches_tokens else 0
    return _Group(spec, spec.kind, count, elems, _ranges([index for index, _ in items]), items[0][1],
                  spec.describe(), prefix, caches_tokens, spec.kind in ("full", "mla"))


def _formula(group: _Group, plan: CachePlan, total: int) -> str:
    """The row formula of a group that does not cache plain tokens (the common case is in build_estimate)."""
    spec, count = group.spec, group.count
    if isinstance(spec, NoCacheSpec):
        return f"{count} layers x 0 ({spec.reason})"
    act = int(plan.act_dtype.bytes)
    if isinstance(spec, StateSpec):
        # RecurrentGemma's conv view pins one column more once decoding: 2,560 x 1 x 2 B a layer and sequence
        pinned = spec.pinned_bytes(act)
        view = f" + {fmt_int(pinned)} B pinned by the conv view" if pinned else ""
        return (f"{count} {spec.mixer} layers x {plan.batch_size} seq x ({fmt_int(spec.conv_elems)} x "
                f"{4 if spec.conv_fp32 else act} B + {fmt_int(spec.recurrent_elems)} x "
                f"{4 if spec.recurrent_fp32 else act} B{view})")
    if isinstance(spec, CompressedAttentionSpec):
        T, m = plan.seq_len, spec.compress_rate
        overlap = f" + overlap {m} x {spec.entry_elems} x ({act} + 4) B" if spec.overlap and T >= m else ""
        return (f"{count} {spec.kind} layers x {plan.batch_size} seq x ((window {group_tokens(spec, T)} x "
                f"{spec.head_dim} + {T // m:,} entries x {spec.entry_elems} + {(T - 1) % m + 1} buffered x "
                f"{spec.buffer_elems}) x {act} B{overlap})")
    return f"{count} layers x quantized K and V ({plan.backend} {plan.kv_dtype.name}) = {fmt_int(total)} B"


def group_tokens(spec: CompressedAttentionSpec, tokens: int) -> int:
    """Tokens a compressed layer's window stores in steady decode."""
    return tokens if spec.window <= 1 else min(tokens, spec.window)


def _ranges(indices: list[int]) -> str:
    """[0,1,2,3,5,7] -> '0-3,5,7'."""
    parts, start = [], None
    for i, value in enumerate(indices):
        if start is None:
            start = value
        if i + 1 == len(indices) or indices[i + 1] != value + 1:
            parts.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ",".join(parts)


def secondary_figures(est: Estimate) -> list[str]:
    """The figures worth a line next to kv_cache_bytes, only where they differ from it (CLI and app)."""
    lines = []
    if est.logical_bytes != est.kv_cache_bytes:
        lines.append(f"Tokens attention still reads: {fmt_int(est.logical_bytes)} B ({fmt_bytes(est.logical_bytes)})")
    if est.prefill_peak_bytes != est.kv_cache_bytes:
        lines.append(f"Right after a {fmt_int(est.prompt_len)}-token prefill: {fmt_int(est.prefill_peak_bytes)} B "
                     f"({fmt_bytes(est.prefill_peak_bytes)})")
    if est.host_bytes:
        lines.append(f"On the GPU: {fmt_bytes(est.device_bytes)}; in host memory: {fmt_bytes(est.host_bytes)}")
    if est.quant_backend:
        lines.append(f"Quantized with the {est.quant_backend} backend ({est.kv_dtype})")
    return lines
