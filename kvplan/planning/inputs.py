"""The settings every engine's plan takes, checked once: positive counts, TP x PP that the model's heads allow,
the memory fraction, the compute dtype, max_model_len (given or the config's), the image limit, settings an engine
lacks, and what a serve command names as the model. Bad input is a WorkloadError saying what to pass instead."""

from __future__ import annotations

from pathlib import Path

from ..cache.estimate import MAX_TOKENS
from ..dtypes import BFLOAT16, FLOAT16, FLOAT32, DType, resolve_dtype
from ..errors import WorkloadError, shown
from ..gpus import GPU
from ..model.spec import ModelSpec
from .engines.lora import LoraSettings
from .engines.lora import check as lora_check
from .engines.spec_decode import Speculative

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


# Settings kvplan models for one engine only: SGLang's page is one token and it sizes its batch itself
# (max_running_requests from the pool); transformers' generate has none of them, nor a version or online quantization.
_VLLM_ONLY = ("block_size", "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "cudagraph_estimate",
              "kv_cache_memory_bytes", "nvls", "enable_prefix_caching")
_NOT_FOR = {"sglang": _VLLM_ONLY,
            "hf": _VLLM_ONLY + ("engine_version", "quantization", "dp", "expert_parallel", "speculative", "lora")}
_OFF_BY_DEFAULT = ("expert_parallel", "enforce_eager")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "hf": "transformers' generate"}


def engine_settings(engine: str, **given) -> None:
    """A setting the chosen engine lacks is an error, not silently ignored (`--engine hf --block-size -1`)."""
    for name in _NOT_FOR.get(engine, ()):
        # False is the default of the on / off switches (expert_parallel, enforce_eager), but nvls=False asks for
        # something (NCCL without NVLink SHARP)
        if given[name] is not None and not (given[name] is False and name in _OFF_BY_DEFAULT):
            raise WorkloadError(f"{ENGINE_NAMES[engine]} has no {name} setting kvplan models: leave it out, or "
                                "plan for vLLM")


def positive(name: str, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{name} must be a positive whole number, got {shown(value)}")
    if value > MAX_TOKENS:  # as for estimates: far beyond any engine's setting, and figures stay floats
        raise WorkloadError(f"{name} must be between 1 and {MAX_TOKENS:,}, got {shown(value)}")
    return value


def resolve_parallel(model: ModelSpec, num_gpus, tp, pp, dp: int = 1) -> tuple[int, int]:
    """(TP, PP) from what was given: `num_gpus` without `tp` means TP = num_gpus / (PP x DP)."""
    pp = positive("pipeline parallel size", pp) or 1
    replicas = pp * dp
    if tp is None:
        num = positive("num_gpus", num_gpus) or replicas
        if num % replicas:
            raise WorkloadError(f"{num} GPUs cannot be split into {pp} pipeline stages x {dp} data-parallel "
                                f"engines: pick a multiple of {replicas}")
        tp = num // replicas
    tp = positive("tensor parallel size", tp)
    if num_gpus is not None and tp * replicas != num_gpus:
        raise WorkloadError(f"TP {tp} x PP {pp}" + (f" x DP {dp}" if dp > 1 else "") + f" = {tp * replicas} GPUs, "
                            f"not the {num_gpus} asked for: make them agree")
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


def resolve_utilization(value, default: float = 0.9) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise WorkloadError(f"gpu_memory_utilization must be in (0, 1], got {shown(value)}")
    return float(value)


def model_dtype(model: ModelSpec, dtype, device: GPU, engine: str = "vllm") -> DType:
    """The dtype the engine computes (and caches) in on this card.

    vLLM `auto` (config/model.py `_resolve_auto_dtype`, 0.11-0.33) keeps the config's dtype when the card supports
    it, downcasts float32 to the platform's first dtype, and on cards without bfloat16 (compute capability < 8.0,
    platforms/cuda.py `supported_dtypes`: T4, V100) falls back to float16; an explicit bfloat16 there is refused
    (`check_if_supports_dtype`). SGLang runs float16 on every card below SM80, whatever was asked
    (model_runner_components/load_model_utils.py `maybe_downgrade_dtype_for_legacy_gpu`, 0.5.23), and refuses
    cards below SM75."""
    cc = device.compute_capability
    if engine == "sglang" and cc is not None and cc < (7, 5):
        raise WorkloadError(f"SGLang runs on compute capability 7.5 and newer ('SGLang only supports sm75 and above'), "
                            f"and the {device.name} has {cc[0]}.{cc[1]}: plan it for vLLM, or pick a newer card")
    # bfloat16 asked, float16 served: the engines on an NVIDIA card below SM 8.0
    cast = engine in ("vllm", "sglang") and cc is not None and not device.has_bfloat16
    if dtype in (None, "auto"):
        d = model.dtype
        if d == FLOAT32:
            d = BFLOAT16 if device.has_bfloat16 else FLOAT16
        return FLOAT16 if cast and d == BFLOAT16 else d
    d = resolve_dtype(dtype)
    if d.is_sub_16bit:
        raise WorkloadError(f"--dtype {d.name} is not a compute dtype: use auto, bfloat16, float16 or float32")
    if d == BFLOAT16 and cast and engine == "vllm":
        raise WorkloadError(f"vLLM refuses bfloat16 on the {device.name} (compute capability {cc[0]}.{cc[1]}: bfloat16 "
                            "needs 8.0): plan --dtype float16, or auto, which vLLM casts to float16 there")
    return FLOAT16 if d == BFLOAT16 and cast else d


def dtype_note(model: ModelSpec, act: DType, device: GPU, engine: str) -> str | None:
    """Why the plan's dtype is not the config's, when the card decided it."""
    cc = device.compute_capability
    if act == FLOAT16 and model.dtype == BFLOAT16 and not device.has_bfloat16 and cc is not None:
        return (f"the {device.name} (compute capability {cc[0]}.{cc[1]}) has no bfloat16: "
                + ("vLLM falls back to float16 ('Your device ... doesn't support torch.bfloat16. Falling back to "
                   "torch.float16')" if engine == "vllm" else "SGLang runs float16 below SM80")
                + "; the bytes are the same")
    return None


def resolve_max_len(model: ModelSpec, value) -> int:
    if value is not None:
        return positive("max_model_len", value)
    derived = model.dims.max_position_embeddings if model.dims else None
    if not derived:
        bad = model.dims.invalid_positions if model.dims else None
        if bad:
            raise WorkloadError(f"{model.name}'s config sets {bad}, not a token count from 1 to 2**40: pass "
                                "--max-model-len N or fix the config.json")
        raise WorkloadError(f"{model.name}'s config has no max_position_embeddings: pass --max-model-len N")
    return derived


def image_limit(images_per_prompt, language_model_only) -> int | None:
    """The image limit a plan serves with: None for vLLM's default, 0 for the language model alone."""
    if language_model_only:
        if images_per_prompt not in (None, 0):
            raise WorkloadError("language-model-only serving takes no images: leave out the images per prompt, or "
                                "set it to 0")
        return 0
    if images_per_prompt is None:
        return None
    if isinstance(images_per_prompt, bool) or not isinstance(images_per_prompt, int) or not 0 <= images_per_prompt <= 999:
        raise WorkloadError(f"images per prompt must be a whole number from 0 to 999, got {shown(images_per_prompt)}")
    return images_per_prompt


def speculative_settings(value, load) -> Speculative | None:
    """A Speculative from the API's dict ({"method", "num_speculative_tokens", "model"}) or one given; the draft
    named by id or path is loaded with `load` (bundled, a path, or the Hub)."""
    if value is None or isinstance(value, Speculative):
        return value
    if not isinstance(value, dict) or set(value) - {"method", "num_speculative_tokens", "model"}:
        raise WorkloadError("speculative decoding takes method, num_speculative_tokens and model (the draft): "
                            "e.g. {\"method\": \"eagle3\", \"model\": \"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\", "
                            "\"num_speculative_tokens\": 3}")
    draft = value.get("model")
    if draft is not None and not isinstance(draft, (str, ModelSpec)):
        raise WorkloadError("the draft model is named by a Hub id or a path to its config.json")
    spec = load(draft) if isinstance(draft, str) else draft
    return Speculative(str(value.get("method", "")), value.get("num_speculative_tokens", 1), spec,
                       model_argument(spec) if spec is not None else "")


def lora_settings(value, engine: str) -> LoraSettings | None:
    """LoraSettings from the API's dict ({"max_loras", "max_lora_rank"}): vLLM's defaults 1 and 16 with
    embed_tokens / lm_head slots; SGLang's max_loras_per_batch 8 and its linear layers alone."""
    if value is None:
        return None
    if isinstance(value, LoraSettings):
        return lora_check(value)
    if not isinstance(value, dict) or set(value) - {"max_loras", "max_lora_rank"}:
        raise WorkloadError("LoRA takes max_loras and max_lora_rank: e.g. {\"max_loras\": 4, \"max_lora_rank\": 16}")
    sglang = engine == "sglang"
    return lora_check(LoraSettings(value.get("max_loras", 8 if sglang else 1), value.get("max_lora_rank", 16),
                                   embeddings=not sglang))

