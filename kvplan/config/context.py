"""The longest context each engine accepts for a config, as the engine derives it (a boundary module: it reads the
config's length and RoPE fields). A longer max_model_len is refused by the engine unless an environment variable
allows it, so kvplan plans it with a warning and that variable in the command, never a silent FITS.

vLLM 0.19 (config/model.py `_get_and_verify_max_len`, transformers_utils/model_arch_config_convertor.py
`derive_max_model_len_and_key`): the smallest of the length keys below (model_max_length wins when set), times
the RoPE scaling factor unless the RoPE is su / longrope / llama3 (yarn: original_max_position_embeddings x
factor), except Gemma 3, whose 128K already counts its scaling. Llama-2-7b: 4,096; Qwen2.5 with yarn 4 x 32,768:
131,072. SGLang 0.5.1 (hf_transformers_utils.py `get_context_length`): the first of its keys times the factor,
unless rope_scaling holds original_max_position_embeddings or is llama3.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..model.spec import ContextLimit
from .reader import check_float, check_int

# The largest RoPE factors published are 40 (DeepSeek-V3's yarn) and 64; the product with a context length
# stays far inside a float, where 1e308 raised OverflowError from int(tokens x factor).
MAX_ROPE_FACTOR = 1024.0

VLLM_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
             "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
SGLANG_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
VLLM_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
SGLANG_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def _length(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 2**40:
        return None
    return int(value)


def rope_parameters(get) -> Mapping[str, Any] | None:
    """The config's RoPE scaling: rope_scaling, or transformers 5's rope_parameters, which may nest one per layer
    kind ({"full_attention": {...}, "sliding_attention": {...}}): then the full-attention one, the scaled one."""
    for key in ("rope_scaling", "rope_parameters"):
        value = get(key)
        if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
            value = value.get("full_attention") or next(iter(value.values()))
        if isinstance(value, Mapping) and value:
            return value
    return None


def linear_rope_factor(get) -> float:
    """The factor of a linear RoPE scaling (Gemma 3 4b-27b: 8.0; vLLM caches that many times the positions), 1.0
    for none or another kind."""
    rope = rope_parameters(get)
    if rope is not None and (rope.get("rope_type") or rope.get("type")) == "linear":
        return rope_factor(rope)
    return 1.0


def rope_factor(rope: Mapping[str, Any]) -> float:
    """rope_scaling's factor (1.0 when it names none): a number from 0.001 to 1,024, else the ConfigError that says
    so. NaN, a negative or a string factor was taken as 1.0 without a word."""
    factor = rope.get("factor")
    return 1.0 if factor is None else check_float("rope_scaling.factor", factor, minimum=1e-3,
                                                  maximum=MAX_ROPE_FACTOR)


def _original_length(rope: Mapping[str, Any]) -> int | None:
    value = rope.get("original_max_position_embeddings")
    return None if value is None else check_int("rope_scaling.original_max_position_embeddings", value)


def vllm_limit(get, model_type: str) -> ContextLimit | None:
    """vLLM's derived max_model_len; `get(key)` reads the text config (family defaults included)."""
    found = [(n, k) for k in VLLM_KEYS if (n := _length(get(k))) is not None]
    if not found:
        return None
    tokens, key = min(found)
    if (n := _length(get("model_max_length"))) is not None:
        tokens, key = n, "model_max_length"
    rope = rope_parameters(get)
    if rope is not None and "gemma3" not in model_type:
        kind = rope.get("rope_type") or rope.get("type")
        if kind not in ("su", "longrope", "llama3"):
            if kind == "yarn" and (original := _original_length(rope)):
                tokens, key = original, "rope_scaling.original_max_position_embeddings"
            factor = rope_factor(rope)
            if factor != 1.0:
                tokens, key = int(tokens * factor), f"{key} x rope factor {factor:g}"
    return ContextLimit(tokens, key)


def sglang_limit(get) -> ContextLimit | None:
    rope = rope_parameters(get)
    factor = 1.0
    if rope is not None and "original_max_position_embeddings" not in rope and rope.get("rope_type") != "llama3":
        factor = rope_factor(rope)
    for key in SGLANG_KEYS:
        if (n := _length(get(key))) is not None:
            return ContextLimit(int(n * factor), key if factor == 1.0 else f"{key} x rope factor {factor:g}")
    return None
