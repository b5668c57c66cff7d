"""`quantization_config` in kvplan's terms: the checkpoint's quantization method, bits, grouping, scales and
the modules it leaves unquantized, for the weights estimate (`kvplan.weights` holds the byte rules).

Part of `kvplan.config`, the only folder that reads Hugging Face field names (`arch.read_arch` calls it).
Nothing here imports transformers.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import ConfigError, UnsupportedArchitectureError, shown
from ..model.arch import QuantDims
from .reader import MAX_LAYERS, check_flag, check_int


def _int(key: str, value: Any, minimum: int = 1) -> int:
    return check_int(key, value, minimum=minimum)


def _object(key: str, value: Any) -> Mapping:
    """A nested object of quantization_config (`weights`, `input_activations`, a config group); absent = {}."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"quantization_config {key!r} must be an object, got {shown(value)}: fix the config.json")
    return value


def _pair(key: str, value: Any) -> tuple[int, int] | None:
    """weight_block_size / block_structure: [rows, cols] of positive ints, or None."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"quantization_config {key!r} must be [rows, cols], got {shown(value)}: fix the config.json")
    return _int(key, value[0]), _int(key, value[1])


def _word(qc: Mapping, key: str, default: str) -> str:
    """A name in quantization_config (quant_method, strategy, format), lower-cased; str() of a list nested 2,000
    deep raised RecursionError."""
    value = qc.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ConfigError(f"quantization_config {key!r} must be a name, got {shown(value)}: fix the config.json")
    return value.lower()


def _flag(qc: Mapping, key: str, default: bool) -> bool:
    """A switch of quantization_config: true, false or absent; `load_in_4bit: "yes"` was taken as 8-bit."""
    return check_flag(f"quantization_config.{key}", qc.get(key), default)


def parse_quant(qc: Any, notes: list[str]) -> QuantDims | None:
    """`quantization_config` in kvplan's terms, or None for an unquantized checkpoint."""
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise ConfigError("config field 'quantization_config' must be an object: fix the config.json")
    method = _word(qc, "quant_method", "").replace("_", "-")
    if not method and isinstance(qc.get("quantization"), Mapping) and "quant_algo" in qc["quantization"]:
        method = "modelopt"  # hf_quant_config.json pasted whole: vLLM reads that file as ModelOpt's
    parser = _QUANT_PARSERS.get(method)
    if parser is None:
        raise UnsupportedArchitectureError(
            f"quant_method {shown(qc.get('quant_method'))} has no byte rule yet: pass --dtype for an upper bound or "
            "open an issue with the model id")
    return parser(qc, notes)


def _bits(qc: Mapping, key: str, default: int | None = None) -> int:
    return check_int(key, qc.get(key, default), maximum=32)  # 2 to 8 in every published checkpoint


def _group(value: Any) -> int | None:
    """group_size: a positive int, or -1 / null for one group per output channel."""
    return None if value is None or value == -1 else _int("group_size", value)


def _fp8(qc: Mapping, notes: list[str]) -> QuantDims:
    block = _pair("weight_block_size", qc.get("weight_block_size"))
    scale = 1 if qc.get("scale_fmt") == "ue8m0" else 4  # DeepSeek-V3.1: e8m0 scales
    return QuantDims("fp8", 8, float_weights=True, strategy="block" if block else "tensor", block=block,
                     static_input_scale=qc.get("activation_scheme") == "static", scale_bytes=scale,
                     skip=_skip(qc.get("modules_to_not_convert"), notes), experts=_expert_dtype(qc, scale))


def _expert_dtype(qc: Mapping, scale: int) -> QuantDims | None:
    """FineGrainedFP8Config's expert_dtype (transformers 5.24 utils/quantization_config.py): "fp8" (the default,
    the experts priced as every other projection) or "fp4", DeepSeek-V4's experts: e2m1 pairs in int8 and a scale
    per row per 32 inputs, in the scale_fmt of the rest (kvplan.weights.rule `_fp4`)."""
    value = _word(qc, "expert_dtype", "fp8")
    if value not in ("fp8", "fp4"):
        raise ConfigError(f"quantization_config 'expert_dtype' must be fp8 or fp4 (FineGrainedFP8Config), got "
                          f"{shown(qc.get('expert_dtype'))}: fix the config.json", field="expert_dtype")
    if value == "fp8":
        return None
    return QuantDims("fp4", 4, float_weights=True, strategy="group", group_size=32, scale_bytes=scale)


def _gptq(qc: Mapping, notes: list[str]) -> QuantDims:
    group = _group(qc.get("group_size", 128))
    return QuantDims("gptq", _bits(qc, "bits", 4), strategy="group" if group else "channel", group_size=group,
                     g_idx=True, skip=_skip(qc.get("modules_to_not_convert"), notes),
                     lm_head=_flag(qc, "lm_head", False))


def _awq(qc: Mapping, notes: list[str]) -> QuantDims:
    group = _group(qc.get("group_size", qc.get("q_group_size", 128)))
    return QuantDims("awq", _bits(qc, "bits", qc.get("w_bit", 4)), strategy="group" if group else "channel",
                     group_size=group, symmetric=not _flag(qc, "zero_point", True),
                     skip=_skip(qc.get("modules_to_not_convert"), notes))


def _bnb(qc: Mapping, notes: list[str]) -> QuantDims:
    four = _flag(qc, "load_in_4bit", False) or _flag(qc, "_load_in_4bit", False)
    skip = qc.get("llm_int8_skip_modules")
    return QuantDims("bitsandbytes", 4 if four else 8, strategy="block" if four else "channel",
                     double_quant=four and _flag(qc, "bnb_4bit_use_double_quant", False),
                     skip=_skip(skip if skip is not None else ["lm_head"], notes))


def _mxfp4(qc: Mapping, notes: list[str]) -> QuantDims:
    return QuantDims("mxfp4", 4, float_weights=True, strategy="group", group_size=32,
                     skip=_skip(qc.get("modules_to_not_convert"), notes))


def _compressed(qc: Mapping, notes: list[str]) -> QuantDims:
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError("compressed-tensors quantization_config has no config_groups: fix the config.json")
    if len(groups) > 1:
        notes.append(f"compressed-tensors: {len(groups)} config groups; the first one's scheme is applied to "
                     "every quantized linear")
    scheme = _object("config_groups." + str(next(iter(groups)))[:60], next(iter(groups.values())))
    w, inputs = _object("weights", scheme.get("weights")), _object("input_activations", scheme.get("input_activations"))
    strategy = _word(w, "strategy", "channel")
    if strategy not in ("tensor", "channel", "group", "tensor_group", "block"):
        raise UnsupportedArchitectureError(f"compressed-tensors weight strategy {shown(strategy)} has no byte rule "
                                           "yet: open an issue with the model id")
    block = _pair("block_structure", w.get("block_structure")) if strategy == "block" else None
    nvfp4 = strategy == "tensor_group"  # + fp32 weight_global_scale, and input_global_scale with activations
    return QuantDims(
        "compressed-tensors", _bits(w, "num_bits", 8), float_weights=w.get("type") == "float",
        strategy=strategy, group_size=_group(w.get("group_size")) if strategy in ("group", "tensor_group") else None,
        block=block,
        symmetric=w.get("symmetric", True) is not False,
        static_input_scale=inputs.get("dynamic") is False and inputs.get("strategy") == "tensor",
        g_idx=w.get("actorder") not in (None, False), packed=_word(qc, "format", "") == "pack-quantized",
        scale_bytes=_scale_bytes(w.get("scale_dtype")),
        global_scales=(1 + (inputs.get("strategy") == "tensor_group")) if nvfp4 else 0,
        skip=_skip(qc.get("ignore"), notes, exact=True))


_SCALE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e8m0fnu": 1, "uint8": 1,
                "int8": 1}


def _scale_bytes(name: Any) -> int | None:
    """compressed-tensors `scale_dtype` ("torch.float8_e4m3fn" for NVFP4); None: the weight's (model) dtype."""
    if name is None:
        return None
    key = name.removeprefix("torch.") if isinstance(name, str) else None
    if key not in _SCALE_BYTES:
        raise ConfigError(f"quantization_config scale_dtype {shown(name)} is unknown: fix the config.json")
    return _SCALE_BYTES[key]


# ModelOpt's linear formats: vLLM 0.33 quantization/modelopt.py LINEAR_ALGOS and `resolve` (what each loads per
# projection [rows, cols]; the checkpoint holds the same tensors, one per HF module):
#   FP8: float8_e4m3fn weight + fp32 weight_scale + fp32 input_scale (static) -> rows x cols + 8 B
#   FP8_PER_CHANNEL_PER_TOKEN: + fp32 weight_scale per output row, dynamic activations
#   FP8_PB_WO: + an fp32 weight_scale per 128 x 128 block (KFp8Block128)
#   NVFP4 / W4A16_NVFP4 (KNvfp4Static): uint8 weight [rows, cols / 2] + float8_e4m3fn weight_scale per 16 inputs
#     + fp32 weight_scale_2 (+ fp32 input_scale: W4A4's KNvfp4Dynamic; nvidia/Qwen3.6-27B-NVFP4's W4A16
#     projections store one too, r0b0tlab's scale audit lists it for all 193 of them, which vLLM drops at load)
#     [4096, 4096]: 8,388,608 + 1,048,576 + 8 = 9,437,192 B (4.5 bits)
#   MXFP8 (KMxfp8Static): float8 weight + a uint8 e8m0 scale per 32 inputs
_MODELOPT_SCHEMES = {
    "FP8": {"bits": 8, "strategy": "tensor", "scale_bytes": 4, "static_input_scale": True},
    "FP8_PER_CHANNEL_PER_TOKEN": {"bits": 8, "strategy": "channel", "scale_bytes": 4},
    "FP8_PB_WO": {"bits": 8, "strategy": "block", "block": (128, 128), "scale_bytes": 4},
    # vLLM's checkpoint-compatibility alias of FP8_PB_WO
    "FP8_BLOCK_SCALES": {"bits": 8, "strategy": "block", "block": (128, 128), "scale_bytes": 4},
    "NVFP4": {"bits": 4, "strategy": "tensor_group", "scale_bytes": 1, "global_scales": 2},
    "W4A16_NVFP4": {"bits": 4, "strategy": "tensor_group", "scale_bytes": 1, "global_scales": 2},
    "MXFP8": {"bits": 8, "strategy": "group", "group_size": 32, "scale_bytes": 1},
}


def _modelopt_scheme(algo: str, group: Any, skip: frozenset = frozenset(), kv: str | None = None) -> QuantDims:
    if algo not in _MODELOPT_SCHEMES:
        raise UnsupportedArchitectureError(
            f"ModelOpt quant_algo {shown(algo)} has no byte rule yet (vLLM 0.33 loads "
            f"{', '.join(sorted(_MODELOPT_SCHEMES))} and MIXED_PRECISION): open an issue with the model id")
    kw = dict(_MODELOPT_SCHEMES[algo])
    if kw["strategy"] == "tensor_group":  # vLLM's default group for NVFP4 when the config names none
        kw["group_size"] = 16 if group is None else _int("group_size", group)
    # vLLM quantizes ParallelLMHead too unless exclude_modules names it (ModelOptQuantConfigBase.get_quant_method)
    return QuantDims("modelopt", float_weights=True, algo=algo, lm_head=True, skip=skip, kv_cache_dtype=kv, **kw)


def _modelopt(qc: Mapping, notes: list[str]) -> QuantDims:
    """ModelOpt checkpoints in both shapes vLLM 0.33 reads (ModelOptQuantConfigBase.from_config): the config.json
    form (quant_algo, ignore, kv_cache_scheme at the top) and the older hf_quant_config.json one nested under
    `quantization` (quant_algo, exclude_modules, kv_cache_quant_algo, quantized_layers)."""
    nested = _object("quantization", qc.get("quantization")) if "quantization" in qc else None
    inner = nested if nested is not None else qc
    algo = _word(inner, "quant_algo", "").upper()
    if not algo:
        raise ConfigError("ModelOpt quantization_config has no quant_algo: fix the config.json")
    exclude = inner.get("exclude_modules") if nested is not None else qc.get("ignore", qc.get("exclude_modules"))
    kv = _modelopt_kv(qc, inner)
    if algo != "MIXED_PRECISION":
        return _modelopt_scheme(algo, inner.get("group_size"), _skip(exclude, notes, modelopt=True), kv)
    layers = _object("quantized_layers", inner.get("quantized_layers"))
    if not layers:
        raise ConfigError("ModelOpt MIXED_PRECISION needs a non-empty quantized_layers mapping: fix the config.json")
    table: dict[tuple[str, int, str], QuantDims] = {}
    for name, recipe in layers.items():
        recipe = _object(f"quantized_layers.{str(name)[:60]}", recipe)
        scheme = _modelopt_scheme(_word(recipe, "quant_algo", "").upper(), recipe.get("group_size"))
        for key in _module_keys(str(name), notes):
            if table.setdefault(key, scheme) != scheme:
                notes.append(f"ModelOpt quantized_layers gives {key[0]} of layer {key[1]} two formats: "
                             f"{table[key].algo} is priced")
    bits = min(q.bits for q in table.values()) if table else 16
    return QuantDims("modelopt", bits, float_weights=True, algo=algo, kv_cache_dtype=kv,
                     layers=tuple(sorted(table.items(), key=lambda item: item[0])))


def _modelopt_kv(qc: Mapping, inner: Mapping) -> str | None:
    """The KV cache dtype vLLM takes for --kv-cache-dtype auto (0.19-0.33 utils/torch_utils.py
    get_kv_cache_quant_algo_string): kv_cache_scheme {num_bits 8, type float, dynamic false} or
    kv_cache_quant_algo "FP8" -> fp8 (float8_e4m3); num_bits 4 float -> nvfp4."""
    algo = inner.get("kv_cache_scheme") or qc.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo") \
        or qc.get("kv_cache_quant_algo")
    if isinstance(algo, Mapping):
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            return "fp8"
        return "nvfp4" if algo.get("num_bits") == 4 and algo.get("type") == "float" else None
    return algo.lower() if isinstance(algo, str) and algo.lower() in ("fp8", "nvfp4") else None


def _module_keys(name: str, notes: list[str]) -> list[tuple[str, int, str]]:
    """(group, layer, part) for one module name of quantized_layers: "model.language_model.layers.3.mlp.up_proj"
    -> ("mlp", 3, ""); "...layers.0.linear_attn.in_proj_b" -> ("mixer", 0, "in_proj_ba")."""
    p = name.lower()
    parts = _attention_parts(p)  # "...self_attn.q_proj": that projection only (vLLM _resolve_quant_algo looks
    # a Linear up by its own name, so one entry never covers its siblings)
    groups = [f"attention/{part}" for part in parts] or [g for g in _skip_groups(p) if g != "router"]
    if not groups:
        notes.append(f"ModelOpt quantized layer {shown(name)} names no weight group kvplan knows: priced in the "
                     "model dtype")
    layer = _skip_layer(p, name)
    return [(g.split("/")[0], layer, g.split("/")[1] if "/" in g else "") for g in groups]


def _auto_round(qc: Mapping, notes: list[str]) -> QuantDims:
    """AutoRound / Intel Neural Compressor (quant_method auto-round, intel/auto-round or inc), as vLLM 0.33
    loads it (quantization/inc/inc.py INCConfig.from_config; inc_wna16_linear.py `_create_inc_weights`):
    integer weights only. packing_format "auto_round:auto_gptq" (the default) is auto-round 0.16's
    qlinear_torch_zp.QuantLinear: int32 qweight [cols x bits / 32, rows], int32 qzeros [groups, rows x bits / 32],
    fp16 scales [groups, rows] and no g_idx; "auto_round:auto_awq" is AWQ's GEMM layout (zeros always stored).
    extra_config entries with bits >= 16 stay in the model dtype (INCConfig.get_quant_method)."""
    data_type = _word(qc, "data_type", "int")
    fmt = _word(qc, "packing_format", "auto_round:auto_gptq")
    if data_type != "int" or fmt not in ("auto_round:auto_gptq", "auto_round:auto_awq", "auto_round"):
        raise UnsupportedArchitectureError(f"auto-round data_type {shown(data_type)} / packing_format {shown(fmt)} "
                                           "has no byte rule yet (integer GPTQ- and AWQ-packed weights have one): "
                                           "open an issue with the model id")
    group = _group(qc.get("group_size", 128))
    extra = _object("extra_config", qc.get("extra_config"))
    kept = [name for name, layer in extra.items() if _bits(_object(str(name)[:60], layer), "bits", 16) >= 16]
    if any(_bits(_object(str(n)[:60], c), "bits", 16) < 16 for n, c in extra.items()):
        notes.append("auto-round extra_config gives some layers their own bit width: they are priced at the "
                     f"config's {_bits(qc, 'bits')} bits")
    awq = fmt.endswith("awq")  # AWQ's GEMM layout stores qzeros whether or not the scheme is symmetric
    return QuantDims("auto-round", _bits(qc, "bits"), strategy="group" if group else "channel", group_size=group,
                     symmetric=False if awq else _flag(qc, "sym", True), algo=fmt,
                     skip=_skip(kept, notes) | _skip(["lm_head"], notes))


_QUANT_PARSERS = {"fp8": _fp8, "gptq": _gptq, "awq": _awq, "bitsandbytes": _bnb, "mxfp4": _mxfp4,
                  "compressed-tensors": _compressed, "modelopt": _modelopt, "auto-round": _auto_round,
                  "intel/auto-round": _auto_round, "inc": _auto_round}

# Module-name words -> kvplan weight groups, most specific first.
_SKIP_WORDS = (
    ("lm_head", ("lm_head",)), ("embed", ("embeddings",)), ("wte", ("embeddings",)),
    ("shared_expert_gate", ("router",)), ("shared_expert", ("shared_experts",)), ("router", ("router",)),
    ("experts", ("experts",)), ("linear_attn", ("mixer",)), ("mamba", ("mixer",)), ("mixer", ("mixer",)),
    ("attn", ("attention",)), ("attention", ("attention",)),
)


# Names outside the language model's blocks: the vision / audio towers (priced in the model dtype whatever the
# list says, kvplan.weights.rule.tower_bytes) and the MTP head (stored and priced apart). "model.visual.blocks.0.mlp.
# linear_fc1" named every layer's MLP and "mtp.layers.0.self_attn.q_proj" layer 0's attention before they were
# set aside here (philbert440/Qwen3.6-27B-...-W4A16-AWQ's ignore list: +192 % of its checkpoint).
_OUTSIDE_BLOCKS = re.compile(r"(^|[.*:^])(mtp|visual|vision_tower|vision_model|vision|mm_projector|"
                             r"multi_modal_projector|audio_tower|audio)([.*_$]|$)")
# Module names that are no Linear: an exact (non "re:") compressed-tensors ignore entry naming one matches nothing
# (vLLM 0.33 compressed_tensors/utils.py should_ignore_layer compares the Linear's own name), e.g. the
# "model.language_model.layers.0.linear_attn" and "...linear_attn.norm" entries llm-compressor writes beside
# in_proj_b / in_proj_a, whose in_proj_qkv / in_proj_z / out_proj it does pack.
_NOT_LINEAR = re.compile(r"(^|\.)(linear_attn|self_attn|attn|attention|mlp|mixer|experts|shared_experts?|"
                         r"block_sparse_moe|feed_forward|mamba|conv1d|[a-z_]*norm|[a-z_]*layernorm)$")


def _skip(patterns: Any, notes: list[str], exact: bool = False, modelopt: bool = False) -> frozenset:
    """modules_to_not_convert / ignore / llm_int8_skip_modules as (group, layer) pairs, layer -1 = all layers.

    "model.layers.*.mlp.router" -> ("router", -1); "model.layers.0.mlp.down_proj" -> ("mlp", 0): a sub-projection
    marks its whole group in that layer. `exact`: compressed-tensors, where a plain name skips one Linear only, so
    a container's name skips nothing. `modelopt`: exclude_modules as ModelOpt writes them (`_modelopt_skip`).
    """
    out: set[tuple[str, int]] = set()
    if patterns is not None and not isinstance(patterns, list):
        raise ConfigError(f"quantization_config's skipped modules must be a list of module names, got "
                          f"{shown(patterns)}: fix the config.json")
    for raw in patterns or []:
        if not isinstance(raw, str):
            raise ConfigError(f"quantization_config's skipped modules must be module names (text), got "
                              f"{shown(raw)}: fix the config.json")
        p = raw.lower().removeprefix("re:")
        index = _skip_layer(p, raw)  # first: a 5,000-digit layer index is refused whatever the name
        if modelopt:
            found = _modelopt_skip(p)
            if found is not None:
                out.update((g, -1 if g == "mtp" else index) for g in found)
                continue
        if _OUTSIDE_BLOCKS.search(p) or (exact and not raw.startswith("re:") and _NOT_LINEAR.search(p)):
            continue
        groups = _skip_groups(p)
        if not groups:
            notes.append(f"quantization skip pattern {shown(raw)} names no weight group kvplan knows: ignored")
        out.update((g, index) for g in groups)
    return frozenset(out)


# ModelOpt's exclude_modules as vLLM 0.33 reads them (quantization/modelopt.py ModelOptQuantConfigBase: get_quant_method
# quantizes LinearBase / ParallelLMHead / RoutedExperts unless is_layer_excluded(prefix), which matches the module's own
# name exactly, as a substring, or as an fnmatch wildcard; apply_vllm_mapper reads ModelOpt's one wildcard form
# "module_path*" as module_path and module_path.*, the whole tree rooted there):
#   "model.layers.61*" -> every projection of block 61 (nvidia/DeepSeek-V3.1-NVFP4's MTP block, kept in bf16;
#     Kimi-K2.6-NVFP4's "language_model.model.layers.0*", its dense first block); "mtp*" -> the MTP module
#   "...self_attn.kv_b_proj" -> that projection only: DeepSeek-V3.1-NVFP4 lists q_a, q_b, kv_a and kv_b of every
#     layer and packs o_proj [7168, 16384] in NVFP4 (66,060,296 B a layer, 234,881,024 B in bf16)
#   "...mixer.q_proj" -> attention: Nemotron-H names its attention blocks' projections under `mixer`
#   "...input_layernorm", "model.norm", "...mixer.conv1d" -> nothing: no Linear, never packed
_BLOCK = re.compile(r"layers\.\d+(\*|\.\*)$")
_MTP_ROOT = re.compile(r"^(model\.)?mtp(\.layers\.\d+)?(\*|\.\*)$")
_NOT_PACKED = re.compile(r"(^|\.)([a-z_]*norm|conv1d)\*?$")
_BLOCK_GROUPS = ("attention", "mixer", "mlp", "experts", "shared_experts", "router")


def _modelopt_skip(p: str) -> tuple[str, ...] | None:
    """The groups one ModelOpt exclude_modules entry names where ModelOpt's reading differs from `_skip_groups`;
    None for the rest."""
    if _NOT_PACKED.search(p):
        return ()
    if _MTP_ROOT.search(p):
        return ("mtp",)
    if _BLOCK.search(p):
        return _BLOCK_GROUPS
    parts = _attention_parts(p)
    return tuple(f"attention/{part}" for part in parts) if parts else None


# An attention projection's module name -> the `Tensor.part`s it stores (kvplan.weights.rule `_attention`, `_mla`):
# vLLM fuses q/k/v into qkv_proj and MLA's q_a / kv_a into fused_qkv_a_proj, whose shards must agree.
_ATTN_PARTS = {"q_proj": ("q_proj",), "k_proj": ("k_proj",), "v_proj": ("v_proj",), "o_proj": ("o_proj",),
               "qkv_proj": ("qkv_proj", "q_proj", "k_proj", "v_proj"), "q_a_proj": ("q_a_proj",),
               "q_b_proj": ("q_b_proj",), "kv_a_proj_with_mqa": ("kv_a_proj_with_mqa",),
               "kv_b_proj": ("kv_b_proj",), "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
               "indexer": ("indexer",)}
_ATTN_NAME = re.compile(r"(^|\.)(self_attn|attn|attention|mixer)\.([a-z_]+)(\*|\.\*)?\$?$")


def _attention_parts(p: str) -> tuple[str, ...]:
    """The attention projections one module name stands for ("model.layers.0.self_attn.kv_b_proj" ->
    ("kv_b_proj",)); () when it names a container or anything else."""
    match = _ATTN_NAME.search(p)
    return _ATTN_PARTS.get(match.group(3), ()) if match else ()


def _skip_layer(p: str, raw: str) -> int:
    """The layer index a skip pattern names ("model.layers.3.mlp" -> 3, "model.layers.61*" -> 61), or -1 for
    every layer."""
    layer = re.search(r"layers\.(\d+)(?=[.*]|$)", p)
    if layer is None:
        return -1
    # no model has MAX_LAYERS layers, and int() of a 5,000-digit index would raise past Python's 4,300-digit limit
    if len(layer.group(1)) > len(str(MAX_LAYERS)) or int(layer.group(1)) > MAX_LAYERS:
        raise ConfigError(f"quantization skip pattern {shown(raw)} names a layer past {MAX_LAYERS:,}: fix the "
                          "config.json")
    return int(layer.group(1))


def _skip_groups(p: str) -> tuple[str, ...]:
    if re.search(r"in_proj_(a|b|ba)\$?$", p):  # Qwen3.5 / Qwen3-Next Gated DeltaNet's [heads, H] projections
        return ("mixer/in_proj_ba",)
    if re.search(r"(^|\.)gate\$?$", p):  # before the words: Nemotron-H's router is "backbone.layers.1.mixer.gate"
        return ("router",)
    for word, groups in _SKIP_WORDS:
        if word in p:
            return groups
    if re.search(r"mlp\$?$", p):
        return ("mlp", "experts", "shared_experts", "router")
    if "mlp" in p or "feed_forward" in p:
        return ("mlp",)
    return ()
