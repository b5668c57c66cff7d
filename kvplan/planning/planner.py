"""Capacity planning: does a model fit on these GPUs with this engine, and how many requests of what length.

`plan()` takes a finished ModelSpec (a name is read first, completely, by `kvplan.config.load`), checks the
settings every engine shares (`inputs`), hands them to the engine's own planner (`engines.vllm`, `.sglang`,
`.hf`: each plans its engine end to end) and adds what holds for any engine: the model's warnings, where its
weights came from, a max_model_len past the context limit. `search` finds the fewest GPUs and the fixes of a plan
that does not fit. A new engine is one module in `kvplan/planning/engines/` with a `plan_<engine>` returning a
`Plan`, and a line in `_plan`.
"""

from __future__ import annotations

from ..config.context import SGLANG_ENV, VLLM_ENV
from ..config.load import as_model, load_cached
from ..dtypes import DType, resolve_dtype
from ..errors import WorkloadError, shown
from ..gpus import GPU, resolve_gpu
from ..model.spec import ContextLimit, ModelSpec
from ..weights.provenance import weights_provenance, weights_warnings
from .engines.hf import plan_hf
from .engines.lora import LoraSettings
from .engines.sglang import plan_sglang
from .engines.sglang_pool import DEFAULT_VERSION as SGLANG_DEFAULT_VERSION
from .engines.spec_decode import Speculative
from .engines.vllm import plan_vllm
from .engines.vllm_profile import parse_version
from . import defaults
from .inputs import (ENGINE_NAMES, dtype_note, engine_settings, image_limit, lora_settings, model_dtype, positive,
                     resolve_max_len, resolve_parallel, resolve_utilization, speculative_settings)
from .result import Plan, checked

__all__ = ["ENGINES", "Plan", "context_warning", "plan"]

ENGINES = ("vllm", "sglang", "hf")
# vLLM's entry points, each with its own batch defaults (engine/arg_utils.py get_batch_defaults, UsageContext
# OPENAI_API_SERVER and LLM_CLASS): `vllm serve` and the offline LLM class; SGLang and transformers have one
USAGE_CONTEXTS = ("api_server", "llm_class")


def _checkpoint_kv(model: ModelSpec, engine: str, version: tuple[int, int, int]) -> DType | None:
    """The KV dtype --kv-cache-dtype auto takes from a ModelOpt checkpoint calibrated for an fp8 KV cache
    (kv_cache_scheme {num_bits 8, float} or kv_cache_quant_algo FP8), or None: vLLM 0.19-0.33 engine/arg_utils.py
    -> utils/torch_utils.py resolve_kv_cache_dtype_string (fp8_e4m3); SGLang 0.5.16-0.5.23
    mem_cache/kv_cache_dtype.py configure_kv_cache_dtype (quant_config.kv_cache_quant_algo "FP8" ->
    float8_e4m3fn; its ModelOpt configs derive it from kv_cache_scheme). nvidia/Qwen3.6-27B-NVFP4: 32,768 B of
    KV per token instead of bf16's 65,536."""
    q = model.arch.quant if model.arch is not None else None
    oldest = {"vllm": (0, 19, 0), "sglang": (0, 5, 16)}.get(engine)  # the oldest sources read
    if q is None or q.kv_cache_dtype != "fp8" or oldest is None or version < oldest:
        return None
    return resolve_dtype("fp8")


def plan(model: ModelSpec | str, **settings) -> Plan:
    """Plan one deployment (settings as `_plan` takes them). A model kvplan has not verified gets its warnings in
    `warnings` and at the head of `notes`."""
    model = as_model(model)
    result = _plan(model, **settings)
    update = weights_provenance(model, settings.get("quantization"), resolve_dtype(result.dtype))
    past = context_warning(model, result)
    if past is not None and past[1]:
        update["vllm_command"] = f"{past[1]}=1 {result.vllm_command}"
    warnings = list(model.warnings) + weights_warnings(model, update["weights_source"], result.engine) + (
        [past[0]] if past else []) + result.warnings   # the engine's: what it does not model, a release it has not read
    library = [model.library_note] if model.library_note and model.library_note not in warnings else []
    if warnings:
        update.update(verified=False, warnings=warnings,
                      notes=[f"not verified: {w}" for w in warnings] + library + result.notes)
    elif library:   # a bundled copy whose gap moves no figure: said once, at the head of the notes
        update["notes"] = library + result.notes
    return result.model_copy(update=update)


def context_warning(model: ModelSpec, p: Plan) -> tuple[str, str | None] | None:
    """(warning, the engine's override variable) when max_model_len is past what the engine derives from the
    config (kvplan.config.context); None within it. vLLM and SGLang refuse such a length unless the variable is
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
    refusal = (f"{ENGINE_NAMES[p.engine]} refuses it unless {env}=1 (in the command), and positions past the "
               "limit give wrong outputs" if env else "positions past it were never trained and give wrong outputs")
    return (f"max_model_len {p.max_model_len:,} is past {model.name}'s context limit of {limit.tokens:,} tokens "
            f"({limit.key}): {refusal}; plan {limit.tokens:,} or fewer", env)


def _plan(model: ModelSpec | str, *, engine: str = defaults.ENGINE, gpu: str | GPU = defaults.GPU,
          num_gpus: int | None = None, tp: int | None = None, pp: int = defaults.PIPELINE_STAGES,
          max_model_len: int | None = defaults.MAX_MODEL_LEN, gpu_memory_utilization: float | None = None,
          kv_dtype: str = defaults.KV_DTYPE, dtype: str = defaults.DTYPE,
          quantization: str | None = None, engine_version: str | None = None,
          max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
          block_size: int | None = None, usage_context: str = "api_server", language_model_only: bool = False,
          images_per_prompt: int | None = None, dp: int | None = None, expert_parallel: bool | None = None,
          enforce_eager: bool | None = None, cudagraph_estimate: bool | None = None,
          kv_cache_memory_bytes: int | None = None, speculative: Speculative | dict | None = None,
          lora: LoraSettings | dict | None = None, nvls: bool | None = None,
          enable_prefix_caching: bool | None = None) -> Plan:
    """Plan one deployment. `num_gpus` without `tp` means TP = num_gpus / (pp x dp). `language_model_only`: serve
    a multimodal model's language model alone (vLLM `--language-model-only`; no tower, no image profiling);
    `images_per_prompt`: vLLM's `--limit-mm-per-prompt '{"image": N}'` (0 is the language model alone).
    `max_model_len` -1 or "auto": the longest that fits (vLLM's -1). `dp`: data-parallel engines (SGLang: DP
    attention ranks inside the TP group); `expert_parallel`: vLLM --enable-expert-parallel, SGLang --ep-size = TP;
    `enforce_eager`, `cudagraph_estimate` (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), `kv_cache_memory_bytes`:
    vLLM; `speculative`: {"method": "mtp" | "eagle3" | "eagle" | "draft_model", "num_speculative_tokens": k,
    "model": draft}; `lora`: {"max_loras": N, "max_lora_rank": R}; `nvls`: False for NCCL without NVLink SHARP
    (NCCL_NVLS_ENABLE=0, or GPUs without NVSwitch), None by GPU; `enable_prefix_caching`: vLLM's
    --[no-]enable-prefix-caching, None for the version's default (it sets how many Mamba states a request holds)."""
    model = as_model(model)
    if engine not in ENGINES:
        raise WorkloadError(f"unknown engine {shown(engine)}: use one of {', '.join(ENGINES)}")
    # any other string planned `vllm serve`'s defaults silently ("LLM" is not "llm_class")
    if usage_context not in USAGE_CONTEXTS:
        raise WorkloadError(f"unknown usage context {shown(usage_context)}: use api_server (`vllm serve`) or "
                            "llm_class (vLLM's offline LLM class)")
    if usage_context != "api_server" and engine != "vllm":
        raise WorkloadError(f"{ENGINE_NAMES[engine]} has no LLM-class batch defaults (usage context llm_class is "
                            "vLLM's offline LLM class): leave it out, or plan with vllm")
    engine_settings(engine, quantization=quantization, engine_version=engine_version, block_size=block_size,
                    max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, dp=dp,
                    expert_parallel=expert_parallel, enforce_eager=enforce_eager,
                    cudagraph_estimate=cudagraph_estimate, kv_cache_memory_bytes=kv_cache_memory_bytes,
                    speculative=speculative, lora=lora, nvls=nvls, enable_prefix_caching=enable_prefix_caching)
    device = gpu if isinstance(gpu, GPU) else resolve_gpu(gpu)
    dp = positive("data parallel size", dp) or 1
    # SGLang's DP attention splits the TP group (--tp 8 --dp 8 is 8 GPUs); vLLM's DP engines are replicas
    tp, pp = resolve_parallel(model, num_gpus, tp, pp, dp=dp if engine == "vllm" else 1)
    auto_len = max_model_len in (-1, "auto")
    if auto_len:
        max_model_len = None
    version = None if engine == "hf" else parse_version(engine_version)   # transformers has no version knob
    # None for SGLang: it picks mem_fraction_static itself (an explicit value is the user's)
    util = resolve_utilization(gpu_memory_utilization, defaults.utilization(engine, version))
    if engine == "hf" and (language_model_only or images_per_prompt is not None):
        raise WorkloadError("transformers' generate loads what its model class builds: image limits and "
                            "language-model-only serving are vLLM settings")
    if engine == "hf":
        return checked(plan_hf(model, device, tp * pp, util, resolve_max_len(model, max_model_len), dtype, kv_dtype))
    if all(spec.kind == "none" for _, spec in model.specs()):  # vLLM would group zero KV layers: min() of nothing
        raise WorkloadError(f"{model.name} caches nothing (every layer is MLP-only or reuses another layer's KV), so "
                            f"{engine} has no KV pool to size: its KV cache is 0 B (`kvplan estimate`); plan it with "
                            "--engine hf for the weights alone")
    act = model_dtype(model, dtype, device, engine)
    cast = dtype_note(model, act, device, engine)
    kv = act if kv_dtype in (None, "auto") else resolve_dtype(kv_dtype)
    if kv_dtype in (None, "auto"):
        at = version if engine_version or engine == "vllm" else SGLANG_DEFAULT_VERSION
        kv = _checkpoint_kv(model, engine, at) or kv
    if not kv.is_float:  # int8/int4/int2 are transformers' quantized caches, not a serving engine's KV dtype
        raise WorkloadError(f"KV cache dtype {kv.name} is not one {engine} stores: use auto, fp8, fp8_e5m2, bf16, "
                            "fp16 or fp32")
    max_len = resolve_max_len(model, max_model_len)
    tokens, seqs = positive("max_num_batched_tokens", max_num_batched_tokens), positive("max_num_seqs", max_num_seqs)
    limit = image_limit(images_per_prompt, language_model_only)
    spec = speculative_settings(speculative, load_cached)
    adapters = lora_settings(lora, engine)
    if engine == "sglang":  # an explicit 0.9 is the user's mem_fraction_static; None is SGLang's own default
        if auto_len:
            raise WorkloadError("SGLang has no automatic context length: pass --max-model-len N")
        return _noted(cast, plan_sglang(model, device, tp=tp, pp=pp, max_len=max_len, act=act, kv=kv,
                                   quantization=quantization,
                                   mem_fraction=None if gpu_memory_utilization is None else util,
                                   version=version if engine_version else SGLANG_DEFAULT_VERSION, image_limit=limit,
                                   dp=dp, expert_parallel=bool(expert_parallel), speculative=spec, lora=adapters,
                                   kv_default=kv_dtype in (None, "auto")))
    if kv_cache_memory_bytes is not None:
        kv_cache_memory_bytes = positive("kv_cache_memory_bytes", kv_cache_memory_bytes)
    return _noted(cast, plan_vllm(model, device, tp=tp, pp=pp, util=util, max_len=max_len, act=act, kv=kv,
                             quantization=quantization, version=version, max_num_batched_tokens=tokens,
                             max_num_seqs=seqs, block_size=positive("block_size", block_size),
                             usage_context=usage_context, limit=limit, dp=dp,
                             expert_parallel=bool(expert_parallel), enforce_eager=bool(enforce_eager),
                             cudagraph_estimate=cudagraph_estimate, kv_cache_memory_bytes=kv_cache_memory_bytes,
                             speculative=spec, lora=adapters, auto_len=auto_len, nvls=nvls,
                             prefix_caching=_switch("enable_prefix_caching", enable_prefix_caching)))


def _noted(note: str | None, p: Plan) -> Plan:
    """The engine's plan, checked, with the note saying why its dtype is not the config's."""
    return checked(p.model_copy(update={"notes": [note] + p.notes}) if note else p)


def _switch(name: str, value) -> bool | None:
    """An on / off setting: True, False or None (the engine's default); anything else is refused."""
    if value is None or isinstance(value, bool):
        return value
    raise WorkloadError(f"{name} must be true or false, got {str(value)[:40]!r}")
