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
    return QuantDims("fp8", 8, float_weights=True, strategy="block" if block else "tensor", block=block,
                     static_input_scale=qc.get("activation_scheme") == "static",
                     scale_bytes=1 if qc.get("scale_fmt") == "ue8m0" else 4,  # DeepSeek-V3.1: e8m0 scales
                     skip=_skip(qc.get("modules_to_not_convert"), notes))


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
        skip=_skip(qc.get("ignore"), notes))


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


_QUANT_PARSERS = {"fp8": _fp8, "gptq": _gptq, "awq": _awq, "bitsandbytes": _bnb, "mxfp4": _mxfp4,
                  "compressed-tensors": _compressed}

# Module-name words -> kvplan weight groups, most specific first.
_SKIP_WORDS = (
    ("lm_head", ("lm_head",)), ("embed", ("embeddings",)), ("wte", ("embeddings",)),
    ("shared_expert_gate", ("router",)), ("shared_expert", ("shared_experts",)), ("router", ("router",)),
    ("experts", ("experts",)), ("linear_attn", ("mixer",)), ("mamba", ("mixer",)), ("mixer", ("mixer",)),
    ("attn", ("attention",)), ("attention", ("attention",)),
)


def _skip(patterns: Any, notes: list[str]) -> frozenset:
    """modules_to_not_convert / ignore / llm_int8_skip_modules as (group, layer) pairs, layer -1 = all layers.

    "model.layers.*.mlp.router" -> ("router", -1); "model.layers.0.mlp.down_proj" -> ("mlp", 0): a sub-projection
    marks its whole group in that layer.
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
        groups, index = _skip_groups(p), _skip_layer(p, raw)
        if not groups:
            notes.append(f"quantization skip pattern {shown(raw)} names no weight group kvplan knows: ignored")
        out.update((g, index) for g in groups)
    return frozenset(out)


def _skip_layer(p: str, raw: str) -> int:
    """The layer index a skip pattern names ("model.layers.3.mlp" -> 3), or -1 for every layer."""
    layer = re.search(r"layers\.(\d+)\.", p)
    if layer is None:
        return -1
    # no model has MAX_LAYERS layers, and int() of a 5,000-digit index would raise past Python's 4,300-digit limit
    if len(layer.group(1)) > len(str(MAX_LAYERS)) or int(layer.group(1)) > MAX_LAYERS:
        raise ConfigError(f"quantization skip pattern {shown(raw)} names a layer past {MAX_LAYERS:,}: fix the "
                          "config.json")
    return int(layer.group(1))


def _skip_groups(p: str) -> tuple[str, ...]:
    for word, groups in _SKIP_WORDS:
        if word in p:
            return groups
    if re.search(r"(^|\.)gate\$?$", p):
        return ("router",)
    if re.search(r"mlp\$?$", p):
        return ("mlp", "experts", "shared_experts", "router")
    if "mlp" in p or "feed_forward" in p:
        return ("mlp",)
    return ()
