"""Capacity planning: does a model fit on these GPUs with this engine, and how many requests of what length.

`plan()` is pure: model + GPU + engine settings in, a `Plan` with the per-GPU memory breakdown, the KV pool,
vLLM's own "GPU KV cache size" and "Maximum concurrency" figures, the fit verdict and the `vllm serve`
command out. `fewest_gpus()` searches the smallest TP x PP that fits.
"""

from __future__ import annotations

import shlex
from contextlib import suppress
from functools import cache, lru_cache
from pathlib import Path
from math import ceil

from pydantic import BaseModel, ConfigDict

from .layers import MLASpec
from .dtypes import BFLOAT16, FLOAT16, FLOAT32, DType, resolve_dtype
from .engines.sglang import LOAD_EXTRA_BYTES as SGLANG_LOAD_EXTRA_BYTES
from .engines.sglang import PRELOAD_BYTES as SGLANG_PRELOAD_BYTES
from .engines.sglang import DEFAULT_VERSION as SGLANG_DEFAULT_VERSION
from .engines.sglang import SglangSettings, sglang_pool, vlm_factor
from .engines.vllm import (NVLS_GPUS, ActivationModel, VllmSettings, activation_peak, batch_defaults,
                           default_utilization, non_torch_bytes, parse_version, pp_layer_split)
from .engines.vllm_mm import TOWERS_SKIPPED_EARLY, TOWERS_SKIPPED_FROM, encoder_cache_bytes, limit_flags
from .engines.vllm_mxfp4 import padding_bytes as mxfp4_padding_bytes
from .engines.vllm_kv import (bytes_per_token, cdiv, hybrid_block_size, kv_groups, max_usage_bytes, pool_capacity,
                              rank_layer_specs)
from .engines.weights_split import gpu_weight_bytes, with_online_quant
from .config_context import SGLANG_ENV, VLLM_ENV, ContextLimit
from .plan_weights import tower_warning, weights_provenance
from .errors import PlanInvariantError, WorkloadError
from .estimate import MAX_TOKENS
from .gpus import GPU, resolve_gpu
from .model import ModelSpec
from .units import fmt_bytes

ENGINES = ("vllm", "sglang", "hf")


class StageMemory(BaseModel):
    """One GPU's budget (a TP rank of one pipeline stage)."""

    model_config = ConfigDict(frozen=True)

    stage: int
    layers: str
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    kv_pool_bytes: int
    kv_bytes_per_token: int
    num_blocks: int


class Plan(BaseModel):
    """Where a model fits: per-GPU memory (binding stage), KV capacity and the serve command."""

    model_config = ConfigDict(frozen=True)

    model: str
    engine: str
    engine_version: str
    gpu: str
    gpu_memory_bytes: int
    num_gpus: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    gpu_memory_utilization: float
    dtype: str
    kv_cache_dtype: str
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    weights_bytes: int              # per GPU (binding stage)
    activation_bytes: int
    non_torch_bytes: int
    kv_pool_bytes: int              # per GPU
    kv_bytes_per_token: int         # per GPU
    kv_cache_tokens: int            # vLLM's "GPU KV cache size: N tokens"
    num_blocks: int
    max_concurrency: float          # vLLM's "Maximum concurrency for max_model_len tokens per request"
    fits: bool
    shortfall_bytes: int            # > 0: how much one max_model_len request misses by
    max_model_len_that_fits: int
    stages: list[StageMemory]
    vllm_command: str
    formula: list[str]
    notes: list[str]
    verified: bool = True           # False: kvplan has not proven its rules for this model (see `warnings`)
    warnings: list[str] = []        # also the first notes, prefixed "not verified:"
    weights_source: str = "config rule"   # or "checkpoint": where weights_bytes came from
    weights_provenance: str = ""          # the headers read (or why none), in words
    weights_components: dict[str, int] = {}   # whole model, resident bytes by component (language_model, vision...)
    weights_checkpoint_bytes: int | None = None  # whole model, as loaded from the checkpoint's tensors
    weights_rule_bytes: int | None = None        # whole model, by kvplan's config rule
    checkpoint_stored_bytes: int | None = None   # what the checkpoint stores (headers or a bundled record's total)
    rule_stored_bytes: int | None = None         # what the config rule says it stores (+ MTP layers, towers)

    def rule_vs_checkpoint(self) -> tuple[int, float] | None:
        """(bytes, %) by which the config rule differs from the checkpoint as loaded; None without both."""
        return _diff(self.weights_rule_bytes, self.weights_checkpoint_bytes)

    def rule_vs_stored(self) -> tuple[int, float] | None:
        """(bytes, %) by which the rule's stored bytes differ from what the checkpoint stores; None without both."""
        return _diff(self.rule_stored_bytes, self.checkpoint_stored_bytes)


def _diff(rule: int | None, truth: int | None) -> tuple[int, float] | None:
    return (rule - truth, 100 * (rule - truth) / truth) if rule and truth else None


def plan(model: ModelSpec | str, **settings) -> Plan:
    """Plan one deployment (settings as `_plan` takes them). A model kvplan has not verified gets its warnings in
    `warnings` and at the head of `notes`."""
    if isinstance(model, str):
        model = _load(model)
    result = _plan(model, **settings)
    update = weights_provenance(model, settings.get("quantization"), resolve_dtype(result.dtype))
    past = context_warning(model, result)
    if past is not None and past[1]:
        update["vllm_command"] = f"{past[1]}=1 {result.vllm_command}"
    warnings = list(model.warnings) + tower_warning(model, update["weights_source"], result.engine) + (
        [past[0]] if past else [])
    if warnings:
        update.update(verified=False, warnings=warnings,
                      notes=[f"not verified: {w}" for w in warnings] + result.notes)
    return result.model_copy(update=update)


def context_warning(model: ModelSpec, p: Plan) -> tuple[str, str | None] | None:
    """(warning, the engine's override variable) when max_model_len is past what the engine derives from the
    config (kvplan.config_context); None within it. vLLM and SGLang refuse such a length unless the variable is
    set; transformers' generate runs it, past the positions the model was trained on."""
    dims = model.dims
    if dims is None:
        return None
    limit = {"vllm": dims.vllm_limit, "sglang": dims.sglang_limit}.get(p.engine)
    if p.engine == "hf" and dims.max_position_embeddings:
        limit = ContextLimit(dims.max_position_embeddings, "max_position_embeddings")
    if limit is None or p.max_model_len <= limit.tokens:
        return None
    env = {"vllm": VLLM_ENV, "sglang": SGLANG_ENV}.get(p.engine)
    refusal = (f"{_ENGINE_NAMES[p.engine]} refuses it unless {env}=1 (in the command), and positions past the "
               "limit give wrong outputs" if env else "positions past it were never trained and give wrong outputs")
    return (f"max_model_len {p.max_model_len:,} is past {model.name}'s context limit of {limit.tokens:,} tokens "
            f"({limit.key}): {refusal}; plan {limit.tokens:,} or fewer", env)


MODEL_PLACEHOLDER = "<path-to-model>"


def model_argument(model: ModelSpec) -> str:
    """What a serve command names: the Hub id (bundled ids are Hub ids), the folder of the config.json given as a
    path (vLLM, SGLang and from_pretrained take the model folder), or a placeholder to fill for a config given as
    data (an app upload): `vllm serve uploaded config` named nothing vLLM can find. Quote it for a shell."""
    if model.source in ("bundled", "hub"):
        return model.name
    path = Path(model.source)
    if model.source in ("dict", "") or path.name != "config.json":  # a loose JSON file: its folder is no model
        return MODEL_PLACEHOLDER
    return str(path.parent)


def _plan(model: ModelSpec | str, *, engine: str = "vllm", gpu: str | GPU = "H100-80GB", num_gpus: int | None = None,
         tp: int | None = None, pp: int = 1, max_model_len: int | None = None,
         gpu_memory_utilization: float | None = None, kv_dtype: str = "auto", dtype: str = "auto",
         quantization: str | None = None, engine_version: str | None = None,
         max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
         block_size: int | None = None, usage_context: str = "api_server", language_model_only: bool = False,
         images_per_prompt: int | None = None) -> Plan:
    """Plan one deployment. `num_gpus` without `tp` means TP = num_gpus / pp. `language_model_only`: serve a
    multimodal model's language model alone (vLLM `--language-model-only`; no tower, no image profiling);
    `images_per_prompt`: vLLM's `--limit-mm-per-prompt '{"image": N}'` (0 is the language model alone)."""
    if isinstance(model, str):
        model = _load(model)
    if engine not in ENGINES:
        raise WorkloadError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    _engine_settings(engine, quantization=quantization, engine_version=engine_version, block_size=block_size,
                     max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
    device = gpu if isinstance(gpu, GPU) else resolve_gpu(gpu)
    tp, pp = _parallel(model, num_gpus, tp, pp)
    version = None if engine == "hf" else parse_version(engine_version)   # transformers has no version knob
    util = _utilization(gpu_memory_utilization, default_utilization(version) if engine == "vllm" else 0.9)
    if engine == "hf" and (language_model_only or images_per_prompt is not None):
        raise WorkloadError("transformers' generate loads what its model class builds: image limits and "
                            "language-model-only serving are vLLM settings")
    if engine == "hf":
        return checked(_plan_hf(model, device, tp * pp, util, _max_len(model, max_model_len), dtype, kv_dtype))
    if all(spec.kind == "none" for _, spec in model.specs()):  # vLLM would group zero KV layers: min() of nothing
        raise WorkloadError(f"{model.name} caches nothing (every layer is MLP-only or reuses another layer's KV), so "
                            f"{engine} has no KV pool to size: its KV cache is 0 B (`kvplan estimate`); plan it with "
                            "--engine hf for the weights alone")
    act = _model_dtype(model, dtype, device)
    kv = act if kv_dtype in (None, "auto") else resolve_dtype(kv_dtype)
    if not kv.is_float:  # int8/int4/int2 are transformers' quantized caches, not a serving engine's KV dtype
        raise WorkloadError(f"KV cache dtype {kv.name} is not one {engine} stores: use auto, fp8, fp8_e5m2, bf16, "
                            "fp16 or fp32")
    max_len = _max_len(model, max_model_len)
    default_tokens, default_seqs = batch_defaults(device.memory_bytes, device.name, usage_context,
                                                  version, max_len)
    settings = VllmSettings(tp, pp, util, max_len, _pos("max_num_batched_tokens", max_num_batched_tokens)
                            or default_tokens, _pos("max_num_seqs", max_num_seqs) or default_seqs,
                            _pos("block_size", block_size), kv.name, act.name, ".".join(map(str, version)),
                            usage_context)
    if engine == "vllm" and block_size is not None and block_size not in VLLM_BLOCK_SIZES:
        raise WorkloadError(f"vLLM's --block-size takes {', '.join(map(str, VLLM_BLOCK_SIZES))} (256 in newer "
                            f"releases), not {block_size}: pick one of those or leave it out (16; 64 for MLA)")
    limit = _images(images_per_prompt, language_model_only)
    if engine == "sglang":  # an explicit 0.9 is the user's mem_fraction_static; None is SGLang's own default
        return checked(_plan_sglang(model, device, settings, act, kv, quantization,
                                    None if gpu_memory_utilization is None else util,
                                    version if engine_version else SGLANG_DEFAULT_VERSION, limit))
    return checked(_plan_vllm(model, device, settings, act, kv, quantization, engine, limit))


def checked(p: Plan) -> Plan:
    """The plan, if it keeps the invariants every engine's answer must keep; PlanInvariantError naming the first
    broken one otherwise (a kvplan bug: an impossible answer is never returned)."""
    figures = {"weights": p.weights_bytes, "activation": p.activation_bytes, "non-torch": p.non_torch_bytes,
               "KV pool": p.kv_pool_bytes}
    used = sum(figures.values())
    counts = {**figures, "bytes per token": p.kv_bytes_per_token, "KV tokens": p.kv_cache_tokens,
              "blocks": p.num_blocks, "concurrency": p.max_concurrency, "shortfall": p.shortfall_bytes,
              **{f"stage {s.stage} {k}": v for s in p.stages for k, v in s.model_dump().items() if k.endswith("bytes")}}
    rules = [
        ("the memory fraction is in (0, 1]", 0 < p.gpu_memory_utilization <= 1, p.gpu_memory_utilization),
        ("the KV pool is no larger than the card", p.kv_pool_bytes <= p.gpu_memory_bytes, p.kv_pool_bytes),
        *((f"the per-GPU {name} is >= 0", value >= 0, value) for name, value in counts.items()),
        ("a plan that fits uses no more than the card", not p.fits or used <= p.gpu_memory_bytes, used),
        ("a plan that fits holds one max_model_len request", not p.fits or (
            p.shortfall_bytes == 0 and p.max_model_len_that_fits >= p.max_model_len), p.max_model_len_that_fits),
        ("a plan that does not fit says by how much", p.fits or p.shortfall_bytes > 0, p.shortfall_bytes),
    ]
    for name, ok, value in rules:
        if not ok:
            raise PlanInvariantError(f"kvplan's {p.engine} plan for {p.model} on {p.gpu} breaks its invariant "
                                     f"'{name}' (got {value!r}): please report it with the settings that gave it")
    return p


# Settings kvplan models for one engine only: SGLang's page is one token and it sizes its batch itself
# (max_running_requests from the pool); transformers' generate has none of them, nor a version or online quantization.
_NOT_FOR = {"sglang": ("block_size", "max_num_seqs", "max_num_batched_tokens"),
            "hf": ("block_size", "max_num_seqs", "max_num_batched_tokens", "engine_version", "quantization")}
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "hf": "transformers' generate"}


def _engine_settings(engine: str, **given) -> None:
    """A setting the chosen engine lacks is an error, not silently ignored (`--engine hf --block-size -1`)."""
    for name in _NOT_FOR.get(engine, ()):
        if given[name] is not None:
            raise WorkloadError(f"{_ENGINE_NAMES[engine]} has no {name} setting kvplan models: leave it out, or "
                                "plan for vLLM")


# vllm/config/cache.py `BlockSize`: the choices `vllm serve --block-size` accepts (256 was added later; hybrid
# models' internal page sizes such as Qwen3-Next's 528 are vLLM's own choice, never this flag's).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def _load(name: str) -> ModelSpec:
    """A model by name; bundled ones are parsed once per process (ModelSpec is frozen, safe to share)."""
    from .library import _find_bundled, load_model

    return _load_bundled(name) if _find_bundled(name) else load_model(name)


@lru_cache(maxsize=256)
def _load_bundled(name: str) -> ModelSpec:
    from .library import load_model

    return load_model(name)


def _shape(model: ModelSpec):
    """The weight shape parse_config read with the cache layout (a ConfigError when the config lacks it)."""
    return model.require_arch()


def _pos(name: str, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{name} must be a positive whole number, got {value!r}")
    if value > MAX_TOKENS:  # as for estimates: far beyond any engine's setting, and figures stay floats
        shown = f"{value:,}" if value.bit_length() < 100 else f"an integer of {value.bit_length():,} bits"
        raise WorkloadError(f"{name} must be between 1 and {MAX_TOKENS:,}, got {shown}")
    return value


def _parallel(model: ModelSpec, num_gpus, tp, pp) -> tuple[int, int]:
    pp = _pos("pipeline parallel size", pp) or 1
    if tp is None:
        num = _pos("num_gpus", num_gpus) or pp
        if num % pp:
            raise WorkloadError(f"{num} GPUs cannot be split into {pp} pipeline stages: pick a multiple of {pp}")
        tp = num // pp
    tp = _pos("tensor parallel size", tp)
    if num_gpus is not None and tp * pp != num_gpus:
        raise WorkloadError(f"TP {tp} x PP {pp} = {tp * pp} GPUs, not the {num_gpus} asked for: make them agree")
    heads = model.dims.num_heads if model.dims else None
    if heads and heads % tp:
        raise WorkloadError(f"{model.name} has {heads} attention heads, which TP {tp} does not divide: "
                            f"use a TP that divides {heads}")
    kv = model.fields.get("engine_kv_heads") or model.kv_heads
    if kv and not model.is_mla and kv % tp and tp % kv:
        raise WorkloadError(f"{kv} KV heads cannot be split or replicated over TP {tp}: use a TP that divides {kv} "
                            f"or a multiple of it")
    if pp > model.num_layers:
        raise WorkloadError(f"PP {pp} exceeds the model's {model.num_layers} layers: use fewer stages")
    return tp, pp


def _utilization(value, default: float = 0.9) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise WorkloadError(f"gpu_memory_utilization must be in (0, 1], got {value!r}")
    return float(value)


def _model_dtype(model: ModelSpec, dtype, device: GPU) -> DType:
    if dtype in (None, "auto"):
        d = model.dtype
        if d == FLOAT32:
            # vLLM's "auto" (`_resolve_auto_dtype`) downcasts float32 checkpoints, and configs that name no dtype,
            # to the platform's first dtype: bfloat16, float16 on GPUs without bf16 (T4, V100). SGLang: same bytes.
            d = FLOAT16 if device.bf16_flops is None and not device.is_custom else BFLOAT16
        return d
    d = resolve_dtype(dtype)
    if d.is_sub_16bit:
        raise WorkloadError(f"--dtype {d.name} is not a compute dtype: use auto, bfloat16, float16 or float32")
    return d


def _max_len(model: ModelSpec, value) -> int:
    if value is not None:
        return _pos("max_model_len", value)
    derived = model.dims.max_position_embeddings if model.dims else None
    if not derived:
        bad = model.dims.invalid_positions if model.dims else None
        if bad:
            raise WorkloadError(f"{model.name}'s config sets {bad}, not a token count from 1 to 2**40: pass "
                                "--max-model-len N or fix the config.json")
        raise WorkloadError(f"{model.name}'s config has no max_position_embeddings: pass --max-model-len N")
    return derived


def _images(images_per_prompt, language_model_only) -> int | None:
    """The image limit a plan serves with: None for vLLM's default, 0 for the language model alone."""
    if language_model_only:
        if images_per_prompt not in (None, 0):
            raise WorkloadError("language-model-only serving takes no images: leave out the images per prompt, or "
                                "set it to 0")
        return 0
    if images_per_prompt is None:
        return None
    if isinstance(images_per_prompt, bool) or not isinstance(images_per_prompt, int) or not 0 <= images_per_prompt <= 999:
        raise WorkloadError(f"images per prompt must be a whole number from 0 to 999, got {images_per_prompt!r}")
    return images_per_prompt


def _plan_vllm(model, device: GPU, s: VllmSettings, act: DType, kv: DType, quantization, engine,
               limit: int | None = None) -> Plan:
    shape = with_online_quant(_shape(model), quantization)
    version = s.version_tuple
    text_only = limit == 0
    # a text-only start-up skips the tower's weights from 0.15 (`_mark_tower_model`); Mistral 3 did so before
    early = shape.vit is not None and shape.vit[0] in TOWERS_SKIPPED_EARLY
    towers = not (text_only and (version[:2] >= TOWERS_SKIPPED_FROM or early))
    kept, kept_line = encoder_cache_bytes(shape, version, s.max_num_batched_tokens, int(act.bytes), text_only,
                                          s.max_num_seqs, s.max_model_len, limit)
    splits = pp_layer_split(model.num_layers, s.pipeline_parallel_size)
    dims = _activation_dims(shape, s.tensor_parallel_size, act)
    stages, budgets = [], []
    block = s.block_size or _default_block(model, device)
    all_specs = rank_layer_specs(model, range(model.num_layers), s.tensor_parallel_size, kv.bits / 8, int(act.bytes))
    block = hybrid_block_size(all_specs, block, model.is_mla)
    rows = min(s.max_num_batched_tokens, s.max_num_seqs)
    padding_lines = []
    for index, layers in enumerate(splits):
        first, last = index == 0, index == len(splits) - 1
        padding, line = mxfp4_padding_bytes(shape, device, s.tensor_parallel_size, layers)
        if line:
            padding_lines.append(f"stage {index}: {line}" if len(splits) > 1 else line)
        weights = (gpu_weight_bytes(model, shape, act, s.tensor_parallel_size, layers, first, last, towers)
                   + _rope_cache(model, act) + padding)
        activation = activation_peak(dims, s.max_num_batched_tokens, rows, has_sampler=last,
                                     has_pp_buffers=s.pipeline_parallel_size > 1, version=version,
                                     kept=kept if first else 0)
        other = non_torch_bytes(s.tensor_parallel_size, s.pipeline_parallel_size, version, device.name)
        pool = int(s.gpu_memory_utilization * device.memory_bytes) - weights - activation.total_bytes - other
        specs = rank_layer_specs(model, layers, s.tensor_parallel_size, kv.bits / 8, int(act.bytes))
        groups = kv_groups(specs, block)
        cap = pool_capacity(groups, pool, s.max_model_len, s.max_num_batched_tokens)
        stages.append(StageMemory(stage=index, layers=f"{layers.start}-{layers.stop - 1}", weights_bytes=weights,
                                  activation_bytes=activation.total_bytes, non_torch_bytes=other,
                                  kv_pool_bytes=max(0, pool), kv_bytes_per_token=bytes_per_token(specs),
                                  num_blocks=cap.num_blocks))
        budgets.append((cap, groups, specs, activation, pool))  # a negative pool: the weights alone overflow
    # PP: every stage gets the smallest stage's number of blocks
    binding = min(range(len(stages)), key=lambda i: stages[i].num_blocks)
    cap, groups, specs, activation, pool = budgets[binding]
    need = sum(max_usage_bytes(x, block, s.max_model_len, s.max_num_batched_tokens) for x in specs)
    fits = pool >= need and cap.num_blocks >= cap.blocks_per_request > 0
    fit_len = _max_len_that_fits(specs, block, pool, s)
    head = stages[binding]
    notes = _vllm_notes(model, s, kv, groups) + padding_lines + ([kept_line] if kept_line else [])
    if shape.quant is not None and shape.quant.method == "mxfp4" and device.compute_capability == (9, 0):
        notes.append("Hopper: sized for the Marlin MoE kernel (published H100 logs of gpt-oss); a vLLM with "
                     "OpenAI's triton_kernels uses the Triton layout instead, with less padding")
    if s.tensor_parallel_size > 1 and device.name not in NVLS_GPUS:
        notes.append("NCCL memory without NVLink SHARP is an assumption (0.25 GiB), not a measurement")
    formula = [
        f"KV pool = {s.gpu_memory_utilization} x {fmt_bytes(device.memory_bytes)} - weights {fmt_bytes(head.weights_bytes)}"
        f" - activation {fmt_bytes(head.activation_bytes)} - non-torch {fmt_bytes(head.non_torch_bytes)}"
        f" = {fmt_bytes(pool)}",
        f"activation = {activation.formula}",
        f"blocks = {pool:,} // {groups.bytes_per_block:,} B per block = {cap.num_blocks:,}; "
        f"tokens = {cap.kv_cache_tokens:,} ({block}-token blocks)",
        f"max concurrency = {cap.num_blocks:,} / {cap.blocks_per_request:,} blocks per {s.max_model_len:,}-token "
        f"request = {cap.max_concurrency:.2f}",
    ]
    return Plan(
        model=model.name, engine=engine, engine_version=s.version, gpu=device.name,
        gpu_memory_bytes=device.memory_bytes, num_gpus=s.tensor_parallel_size * s.pipeline_parallel_size,
        tensor_parallel_size=s.tensor_parallel_size, pipeline_parallel_size=s.pipeline_parallel_size,
        max_model_len=s.max_model_len, gpu_memory_utilization=s.gpu_memory_utilization, dtype=act.name,
        kv_cache_dtype=kv.name, block_size=block, max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs, weights_bytes=head.weights_bytes, activation_bytes=head.activation_bytes,
        non_torch_bytes=head.non_torch_bytes, kv_pool_bytes=max(0, pool), kv_bytes_per_token=head.kv_bytes_per_token,
        kv_cache_tokens=cap.kv_cache_tokens, num_blocks=cap.num_blocks, max_concurrency=round(cap.max_concurrency, 4),
        fits=fits, shortfall_bytes=max(0, need - pool), max_model_len_that_fits=fit_len, stages=stages,
        vllm_command=vllm_command(shlex.quote(model_argument(model)), s, kv, quantization)
        + (f" {limit_flags(version, limit)}" if limit is not None and shape.towers else ""),
        formula=formula, notes=notes,
    )


def _default_block(model: ModelSpec, device: GPU) -> int:
    """vLLM's block size when --block-size is not given: 16, and 64 for MLA where FlashMLA runs (Hopper and
    newer; and GPUs kvplan knows no SM version for). FlashMLA needs SM90: on Ampere / Ada vLLM runs Triton MLA
    with 16-token blocks (DeepSeek-V2-Lite on L4s: 807,792 tokens = 50,487 x 16, not a multiple of 64)."""
    if not model.is_mla:
        return 16
    cc = device.compute_capability
    return 16 if cc is not None and cc < (9, 0) else 64


LEARNED_POSITIONS = {"gpt2", "gpt_bigcode", "opt", "bloom", "mamba", "falcon_mamba", "mamba2"}


def _rope_cache(model: ModelSpec, act: DType) -> int:
    """vLLM builds one rotary cos/sin table per distinct RoPE on each GPU: max_position x rotary width in the
    model dtype (Llama-3.1-8B: 131,072 x 128 x 2 B = 32 MiB, the gap between 14.96 GiB of parameters and the
    14.99 GiB vLLM reports). The width is the rotating part of a head (Qwen3-Next: 256 x 0.25 = 64; MLA: the
    64-wide RoPE key); Gemma 3 keeps two tables (local and global bases). A linear-scaled RoPE caches
    max_position x factor positions (vllm 0.11-0.19 rotary_embedding/linear_scaling_rope.py: "the maximum length
    after applying the rope scaling is self.max_position_embeddings * self.scaling_factor"): gemma-3-4b-it's
    global table is 131,072 x 8 x 256 x 2 B = 512 MiB, its local one 64 MiB."""
    dims = model.dims
    if model.model_type in LEARNED_POSITIONS or dims is None or not dims.max_position_embeddings:
        return 0
    if model.is_mla:
        spec = next(s for _, s in model.specs() if isinstance(s, MLASpec))
        width = spec.qk_rope_head_dim
    elif model.head_dim:
        width = dims.rotary_dim or int(model.head_dim * dims.rotary_fraction)
    else:
        return 0
    positions = dims.max_position_embeddings
    scaled = int(positions * dims.rope_linear_factor)
    return ((dims.rope_tables - 1) * positions + scaled) * width * int(act.bytes)


def _activation_dims(shape, tp: int, act: DType) -> ActivationModel:
    from .arch import MLPDims, MoEDims

    dense, moe, topk = 0, 0, 0
    for layer in shape.layers:
        if isinstance(layer.ffn, MoEDims):
            moe = max(moe, layer.ffn.expert.intermediate)
            topk = max(topk, layer.ffn.top_k)
            if layer.ffn.shared:
                dense = max(dense, layer.ffn.shared.intermediate)
        elif isinstance(layer.ffn, MLPDims):
            dense = max(dense, layer.ffn.intermediate)
    return ActivationModel(shape.hidden, cdiv(dense, tp), cdiv(moe, tp), topk, shape.vocab, int(act.bytes))


def _max_len_that_fits(specs, block: int, pool: int, s: VllmSettings) -> int:
    """vLLM's `estimate_max_model_len`: the longest single request the pool holds (binary search)."""
    def fits(length: int) -> bool:
        return sum(max_usage_bytes(x, block, length, s.max_num_batched_tokens) for x in specs) <= pool

    if pool <= 0 or not fits(1):
        return 0
    lo, hi = 1, s.max_model_len
    if fits(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _vllm_notes(model: ModelSpec, s: VllmSettings, kv: DType, groups) -> list[str]:
    notes = []
    kv_heads = model.fields.get("engine_kv_heads") or model.kv_heads
    if kv_heads and not model.is_mla and kv_heads < s.tensor_parallel_size:
        notes.append(f"{kv_heads} KV heads < TP {s.tensor_parallel_size}: vLLM replicates them, 1 head per rank")
    if model.is_mla and s.tensor_parallel_size > 1:
        notes.append("MLA latent is replicated on every TP rank: per-GPU KV does not shrink with TP")
    if not groups.uniform:
        notes.append(f"hybrid KV groups ({len(groups.groups)} groups of {len(groups.groups[0])} layers"
                     + (f", {groups.padding_layers} padding layers" if groups.padding_layers else "")
                     + "): 'GPU KV cache size' is per group, concurrency counts sliding layers' capped blocks")
    if model.has_state:
        notes.append("Mamba/linear state: one state per request; vLLM's token figure is not a token capacity")
    if s.version_tuple[:2] >= (0, 19):
        notes.append("with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (off by default) vLLM also reserves its "
                     "CUDA-graph pool before sizing the KV cache: 0.5-1.0 GiB for 7-8B models on an H100 in the "
                     "calibration logs, not modelled")
    return notes


def vllm_command(name: str, s: VllmSettings, kv: DType, quantization) -> str:
    parts = [f"vllm serve {name}", f"--tensor-parallel-size {s.tensor_parallel_size}"]
    if s.pipeline_parallel_size > 1:
        parts.append(f"--pipeline-parallel-size {s.pipeline_parallel_size}")
    parts += [f"--max-model-len {s.max_model_len}", f"--max-num-seqs {s.max_num_seqs}",
              f"--gpu-memory-utilization {s.gpu_memory_utilization}"]
    if kv.bits == 8:
        parts.append("--kv-cache-dtype fp8" if kv.name == "float8_e4m3" else "--kv-cache-dtype fp8_e5m2")
    if quantization:
        parts.append(f"--quantization {quantization}")
    return " ".join(parts)


def _plan_sglang(model, device: GPU, s: VllmSettings, act: DType, kv: DType, quantization,
                 mem_fraction: float | None = None, version: tuple[int, int, int] = SGLANG_DEFAULT_VERSION,
                 image_limit: int | None = None) -> Plan:
    shape = with_online_quant(_shape(model), quantization)
    if image_limit is not None:
        raise WorkloadError("kvplan models image limits and language-model-only serving for vLLM; SGLang 0.5 "
                            "loads the vision tower of most models whatever its flags: plan it with the tower")
    layers = range(model.num_layers)
    weights = gpu_weight_bytes(model, shape, act, s.tensor_parallel_size, layers, True, True) + _rope_cache(model, act)
    specs = rank_layer_specs(model, layers, s.tensor_parallel_size, kv.bits / 8, int(act.bytes))
    settings = SglangSettings(s.tensor_parallel_size, s.pipeline_parallel_size, mem_fraction, version=version,
                              vlm_factor=vlm_factor(shape.vit, version))
    if not any(x.kind in ("full", "mla", "chunked", "sliding") for x in specs):
        # cell_size counts attention layers only, so a pure SSM model got a 0-token pool: "short by 1 B"
        raise WorkloadError(f"{model.name} has no attention layers (its cache is Mamba state per request), and "
                            "kvplan models SGLang's token pool only: plan it for vLLM or transformers")
    pool = sglang_pool(device.memory_bytes, weights, specs, settings, s.max_model_len)
    per_token = bytes_per_token(specs)
    fits = pool.max_total_tokens >= s.max_model_len
    concurrency = pool.max_total_tokens / s.max_model_len
    reserved = int(device.memory_bytes * (1 - pool.mem_fraction_static))
    stage = StageMemory(stage=0, layers=f"0-{model.num_layers - 1}", weights_bytes=weights, activation_bytes=reserved,
                        non_torch_bytes=0, kv_pool_bytes=max(0, pool.rest_bytes), kv_bytes_per_token=per_token,
                        num_blocks=pool.max_total_tokens)
    formula = [f"mem_fraction_static = {pool.mem_fraction_static:.3f}; KV = (free before loading "
               f"{fmt_bytes(device.memory_bytes)} - context {fmt_bytes(SGLANG_PRELOAD_BYTES)}) x "
               f"{pool.mem_fraction_static:.3f} - weights {fmt_bytes(weights)} - load extras "
               f"{fmt_bytes(SGLANG_LOAD_EXTRA_BYTES)} = {fmt_bytes(pool.rest_bytes)}",
               f"max_total_num_tokens = {pool.rest_bytes:,} // {pool.cell_bytes:,} B per token = "
               f"{pool.max_total_tokens:,}"]
    return Plan(
        model=model.name, engine="sglang", engine_version=".".join(map(str, version)), gpu=device.name,
        gpu_memory_bytes=device.memory_bytes, num_gpus=s.tensor_parallel_size * s.pipeline_parallel_size,
        tensor_parallel_size=s.tensor_parallel_size, pipeline_parallel_size=s.pipeline_parallel_size,
        max_model_len=s.max_model_len, gpu_memory_utilization=round(pool.mem_fraction_static, 4), dtype=act.name,
        kv_cache_dtype=kv.name, block_size=1, max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=pool.max_running_requests, weights_bytes=weights, activation_bytes=reserved, non_torch_bytes=0,
        kv_pool_bytes=max(0, pool.rest_bytes), kv_bytes_per_token=per_token, kv_cache_tokens=pool.max_total_tokens,
        num_blocks=pool.max_total_tokens, max_concurrency=round(concurrency, 4), fits=fits,
        shortfall_bytes=0 if fits else max(1, ceil(s.max_model_len * _sglang_token_cost(pool, specs, settings)
                                                   - pool.rest_bytes)),
        max_model_len_that_fits=min(s.max_model_len, pool.max_total_tokens), stages=[stage],
        vllm_command=sglang_command(shlex.quote(model_argument(model)), s, kv, quantization,
                                    pool.mem_fraction_static),
        formula=formula,
        notes=["SGLang: activations and CUDA graphs live in the (1 - mem_fraction_static) reserve",
               "the command field holds the `sglang.launch_server` command for this engine"]
        + ([f"SGLang loads the vision tower with the language model and scales a default mem_fraction_static by "
            f"{settings.vlm_factor:.4f} for it (server_args.py adjust_mem_fraction_for_vlm; 1 where multimodal "
            "is off by default: Gemma 3, Llama 4); its ~100 MB image cache (SGLANG_VLM_CACHE_SIZE_MB) is not "
            "modelled"] if shape.towers else []),
    )


def _sglang_token_cost(pool, specs, settings: SglangSettings) -> float:
    """Pool bytes one more full-attention token costs: the cell, or for SWA hybrids full + ratio x SWA cell."""
    full = sum(x.bytes_per_token for x in specs if x.kind in ("full", "mla", "chunked"))
    swa = sum(x.bytes_per_token for x in specs if x.kind == "sliding")
    return full + settings.swa_full_tokens_ratio * swa if full and swa else pool.cell_bytes


def sglang_command(name: str, s: VllmSettings, kv: DType, quantization, mem_fraction: float) -> str:
    parts = [f"python -m sglang.launch_server --model-path {name}", f"--tp-size {s.tensor_parallel_size}"]
    if s.pipeline_parallel_size > 1:
        parts.append(f"--pp-size {s.pipeline_parallel_size}")
    parts += [f"--context-length {s.max_model_len}", f"--mem-fraction-static {round(mem_fraction, 4)}"]
    if kv.bits == 8:
        parts.append("--kv-cache-dtype " + ("fp8_e4m3" if kv.name == "float8_e4m3" else "fp8_e5m2"))
    if quantization:
        parts.append(f"--quantization {quantization}")
    return " ".join(parts)


GPUS_PER_NODE = 8  # an HGX / DGX node: tensor parallelism stays inside one, pipeline stages may cross nodes
TP_SIZES = (1, 2, 4, 8)


def fewest_gpus(model: ModelSpec | str, *, max_gpus: int = 64, gpus_per_node: int = GPUS_PER_NODE,
                **kwargs) -> Plan:
    """The fewest GPUs that fit, over every TP x PP with TP inside one node (TP 1, 2, 4, 8: TP across nodes
    would run its all-reduces over the network); at that count, the layout with the most KV capacity (vLLM's
    max concurrency, then KV tokens, then fewer stages). Qwen2.5-72B on L4s: 10 (TP 2 x PP 5), not TP 16;
    DeepSeek-V3 on H100s: 11 (TP 1 x PP 11), where at 16 TP 8 x PP 2 holds twice TP 16's requests (the MLA latent is
    replicated on every TP rank). A layout over one node says so in its notes."""
    if isinstance(model, str):
        model = _load(model)
    per_node = _pos("gpus_per_node", gpus_per_node)
    last_error = None
    for count in range(1, _pos("max_gpus", max_gpus) + 1):
        fitting = []
        for tp in (t for t in TP_SIZES if t <= per_node and count % t == 0):
            try:
                candidate = plan(model, tp=tp, pp=count // tp, **kwargs)
            except WorkloadError as exc:
                last_error = exc
                continue
            if candidate.fits:
                fitting.append(candidate)
        if fitting:
            best = max(fitting, key=lambda p: (p.max_concurrency, p.kv_cache_tokens, -p.pipeline_parallel_size))
            return best.model_copy(update={"notes": best.notes + _node_notes(best, per_node, fitting)})
    raise WorkloadError(f"{model.name} does not fit on {max_gpus} GPUs with these settings"
                        + (f" ({last_error})" if last_error else "") + ": use a larger GPU or a smaller max_model_len")


def _node_notes(best: Plan, per_node: int, fitting: list[Plan]) -> list[str]:
    """Why this layout among those of its size, and whether it spans nodes."""
    notes = []
    if len(fitting) > 1:
        others = ", ".join(f"TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}: "
                           f"{p.max_concurrency:,.2f}x" for p in fitting if p is not best)
        notes.append(f"fewest GPUs: {best.num_gpus}; of the layouts that fit there, TP {best.tensor_parallel_size} x "
                     f"PP {best.pipeline_parallel_size} holds the most requests ({best.max_concurrency:,.2f}x; {others})")
    if best.num_gpus > per_node:
        nodes = -(-best.num_gpus // per_node)
        notes.append(f"{best.num_gpus} GPUs span {nodes} nodes of {per_node}: the {best.pipeline_parallel_size} "
                     "pipeline stages pass activations between nodes (TP stays inside each node)")
    return notes


def fixes(model: ModelSpec | str, current: Plan | None = None, **settings) -> list[tuple[str, str]]:
    """For a plan that does not fit: the nearest changes that do, each checked by planning it, as (sentence, the
    CLI flag that makes it). More GPUs (the fewest, any layout), an fp8 KV cache, online fp8 weights (vLLM,
    unquantized checkpoints), the longest context that fits. Mixtral-8x7B on one H100: 2 GPUs, or fp8 weights.
    Not part of plan(): fewest_gpus plans many layouts that do not fit. `current`: the plan of these settings,
    when the caller has it already."""
    if isinstance(model, str):
        model = _load(model)
    p = current or plan(model, **settings)
    if p.fits:
        return []
    base = {k: v for k, v in settings.items() if k not in ("num_gpus", "tp", "pp")}
    out = []
    try:
        more = fewest_gpus(model, **base)
        out.append((f"{more.num_gpus} x {more.gpu} (TP {more.tensor_parallel_size} x PP "
                    f"{more.pipeline_parallel_size}) fits: {more.max_concurrency:,.2f} requests of "
                    f"{more.max_model_len:,} tokens",
                    f"--tp {more.tensor_parallel_size} --pp {more.pipeline_parallel_size}"))
    except WorkloadError:
        pass
    trials = []
    if p.kv_cache_dtype not in ("float8_e4m3", "float8_e5m2") and p.engine != "hf":
        trials.append(("an fp8 KV cache", {"kv_dtype": "fp8"}, "--kv-dtype fp8"))
    if p.engine == "vllm" and model.arch is not None and model.arch.quant is None and not settings.get("quantization"):
        trials.append(("weights quantized to fp8 at load", {"quantization": "fp8"}, "--quantization fp8"))
    for what, change, flag in trials:
        with suppress(WorkloadError):
            tried = plan(model, **{**settings, **change})
            if tried.fits:
                out.append((f"{what} fits on these GPUs: {tried.max_concurrency:,.2f} requests of "
                            f"{tried.max_model_len:,} tokens", flag))
    if p.max_model_len_that_fits > 0:
        out.append((f"a context of {p.max_model_len_that_fits:,} tokens fits on these GPUs",
                    f"--max-model-len {p.max_model_len_that_fits}"))
    return out


def max_concurrency_at(p: Plan, context_len: int, model: ModelSpec) -> float:
    """Requests of `context_len` tokens the pool holds at once (vLLM's formula at that length)."""
    specs = rank_layer_specs(model, range(model.num_layers), p.tensor_parallel_size,
                             resolve_dtype(p.kv_cache_dtype).bits / 8, int(resolve_dtype(p.dtype).bytes))
    groups = kv_groups(specs, p.block_size)
    return pool_capacity(groups, p.kv_pool_bytes, _pos("context_len", context_len), p.max_num_batched_tokens).max_concurrency


def _plan_hf(model: ModelSpec, device: GPU, num_gpus: int, util: float, max_len: int, dtype, kv_dtype) -> Plan:
    """transformers `generate` on one GPU with a DynamicCache: the peak of prefill and decode
    (kvplan.engines.hf) against `util` x memory minus the CUDA context, for prompts of max_model_len tokens.
    Concurrency is the largest batch whose peak fits; context the longest prompt that fits at batch 1."""
    from .engines.hf import CUDA_CONTEXT_BYTES, hf_peak_for
    from .estimate import estimate

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
