"""`parse_config`: a config.json read once, in one pass, into the one `ModelSpec` every later stage uses.

The pass: unwrap a multimodal config to its language model (`reader.text_config`), look up what the conformance
sweep proved for the family (`verified`), read the cache layout (`layout`), the weight shape (`arch`) and the sizes
around them (context limits, RoPE tables) with one `ConfigReader`, so a value is read once and recorded once in
`ModelSpec.fields`. It mirrors what transformers 5.24's config classes do with the same file (their defaults for
absent keys, their `__post_init__` rewrites), because the cache transformers builds is the truth kvplan must equal.
Nothing here imports transformers or runs code the config names (`auto_map` is ignored).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ConfigError, UnsupportedArchitectureError, shown
from ..model.arch import ArchShape
from ..model.layers import FullAttentionSpec, StateSpec
from ..model.spec import ArchDims, ModelSpec
from . import verified
from .arch import read_arch
from .context import linear_rope_factor, sglang_limit, vllm_limit
from .layout import build_layers, layer_kind
from .reader import (DTYPE_KEYS, HEAD_KEYS, HIDDEN_KEYS, ConfigReader, Overrides, check_float, check_int, config_dtype,
                     text_config)
from .verified import (family_status, fixed_field_refusal, kv_fixed_refusal, kv_refusal, params_refusal,
                       unread_fields, unverified_warnings)

# BERT-style families: their config classes default is_decoder to false, and only with is_decoder true is the
# causal-LM head (BertLMHeadModel, ...) a decoder that caches; the others here are encoders whatever they say.
ENCODER_ONLY = {"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "electra", "albert",
                "bert-generation", "big_bird", "camembert", "data2vec-text", "ernie", "megatron-bert", "rembert",
                "roberta-prelayernorm", "roformer", "roc_bert", "xlm-roberta-xl", "xmod"}
# ... and these have no causal-LM class at all (transformers 5.24 MODEL_FOR_CAUSAL_LM_MAPPING_NAMES lists no albert,
# deberta, deberta-v2 or distilbert; bert's is BertLMHeadModel, xmod's XmodForCausalLM): is_decoder true does not
# give them a cache, where kvplan sized albert-base with it at 12 layers of K and V
NO_CAUSAL_LM = frozenset({"albert", "deberta", "deberta-v2", "distilbert"})


POSITION_KEYS = ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "max_target_positions")


def parse_config(
    data: Mapping[str, Any], *, name: str = "custom", source: str = "", overrides: Overrides | None = None
) -> ModelSpec:
    """Read a config.json once into kvplan's description of the model: the per-layer cache layout, the
    weight shape (`arch`, or `arch_error` saying why it cannot be counted) and the sizes around them."""
    text, model_type = text_config(data)
    top = data.get("model_type") if isinstance(data.get("model_type"), str) else None
    status = family_status(model_type, top)
    _refuse_encoders(text, model_type, status, name)
    reader = ConfigReader(text, model_type, overrides or Overrides())
    # pattern fields are read where the family's config class has them (or no class is known to say otherwise)
    reader.class_keys = status.known_keys if status.measured and status.known_keys else None
    notes: list[str] = []
    layers = build_layers(reader, notes)
    if not layers:
        raise ConfigError(f"{name}: the config describes 0 layers: pass --num-layers N", field="num_layers",
                          flag="--num-layers")
    if reader.layer_kinds is None:  # what the weights are around, one per built layer (_looped sets its own)
        reader.layer_kinds = tuple(layer_kind(layer) for layer in layers)
    state = next((spec for layer in layers for spec in layer if isinstance(spec, StateSpec)), None)
    reader.state_shape = (state.conv_shape, state.recurrent_shape) if state else None
    refusal = (kv_refusal(status, name) or kv_fixed_refusal(status, text, name)) if verified.ENFORCE else None
    if refusal is not None:
        raise refusal
    arch, arch_error = _arch(reader, data, text)
    params_error = (params_refusal(status, name) or fixed_field_refusal(status, text, name, data, top)) \
        if verified.ENFORCE else None
    if params_error is not None:
        arch, arch_error = None, params_error
    warnings = (unverified_warnings(status) + unread_fields(text, reader, status)
                + _seq2seq_warning(text, reader, layers))
    return ModelSpec(
        name=name, model_type=model_type, dtype=config_dtype(text), layers=tuple(layers),
        fields=dict(reader.used), notes=tuple(notes), source=source, dims=_dims(reader), arch=arch,
        arch_error=arch_error, warnings=warnings, dtype_named=any(text.get(k) is not None for k in DTYPE_KEYS),
        architecture=_architecture(data),
    )


def _architecture(data: Mapping[str, Any]) -> str:
    """The class a config names first (`"architectures": ["LlamaForCausalLM"]`), a multimodal wrapper's top-level
    one ("Qwen3_5ForConditionalGeneration", not its text config's): the class vLLM and SGLang build; "" if none."""
    names = data.get("architectures")
    first = names[0] if isinstance(names, list) and names else None
    return first[:100] if isinstance(first, str) else ""


def _refuse_encoders(text: Mapping[str, Any], model_type: str, status, name: str) -> None:
    """BERT-style families are causal LMs only with `is_decoder: true` (BertLMHeadModel); without it generate()
    keeps no cache. Encoder-decoder models cache cross-attention kvplan does not size."""
    if text.get("is_encoder_decoder") is True and "decoder_layers" not in text:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} is an encoder-decoder model: kvplan sizes decoder-only KV caches")
    if model_type in NO_CAUSAL_LM:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} is an encoder, with no causal-LM class in transformers, so it keeps no "
            "KV cache whatever is_decoder says: kvplan sizes the caches of decoder models")
    if (model_type in ENCODER_ONLY or status.needs_decoder) and text.get("is_decoder") is not True:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} is an encoder unless its config says is_decoder: true, and as an "
            "encoder it keeps no KV cache: set is_decoder to true in the config.json to size it as a decoder")


def _seq2seq_warning(text: Mapping[str, Any], r: ConfigReader, layers: list[tuple]) -> tuple[str, ...]:
    """An encoder-decoder checkpoint is sized as its causal LM (BartForCausalLM: the decoder, whose cache holds
    self-attention only); a seq2seq generate() adds cross-attention K and V over the encoder output, which
    depends on the input's length, not the generated one. bart-large: 2 x 12 layers x 1,024 values per encoder
    token."""
    if text.get("is_encoder_decoder") is not True:
        return ()
    width = sum(s.k_elems_per_token + s.v_elems_per_token for layer in layers for s in layer
                if isinstance(s, FullAttentionSpec))
    return (f"{r.model_type} is an encoder-decoder model: this sizes its decoder as a causal LM (self-attention "
            f"cache only); seq2seq generation also caches cross-attention K and V of {width:,} values per encoder "
            "token per sequence, not included",)


def _arch(reader: ConfigReader, data: Mapping[str, Any], text: Mapping[str, Any]):
    """(weight shape, None), or (None, the one-line reason) when the config sizes the cache but not the weights
    (a config without vocab_size still has an exact KV cache)."""
    try:
        return read_arch(reader, data, text), None
    except ConfigError as exc:
        return None, str(exc)


def _dims(r: ConfigReader) -> ArchDims:
    invalid: list[str] = []

    def soft(keys: tuple[str, ...]) -> int | None:
        """A size the cache does not need: None when absent or unusable (then named in `invalid`)."""
        found = r.first(keys)
        if found is None:
            return None
        try:
            return check_int(found[0], found[1])
        except ConfigError:
            invalid.append(f"{found[0]} {shown(found[1])}")
            return None

    tie = r.get("tie_word_embeddings", True)
    return ArchDims(
        hidden_size=r.overrides.hidden_size or soft(HIDDEN_KEYS),
        num_heads=r.overrides.num_heads or soft(HEAD_KEYS),
        intermediate_size=soft(("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim")),
        vocab_size=soft(("vocab_size", "padded_vocab_size")),
        max_position_embeddings=soft(POSITION_KEYS),
        tie_word_embeddings=tie if isinstance(tie, bool) else True,
        rotary_dim=soft(("rotary_dim",)),
        rotary_fraction=_fraction(r, ("partial_rotary_factor", "rotary_pct")),
        rope_tables=2 if r.model_type in TWO_ROPE_TABLES else 1, rope_linear_factor=linear_rope_factor(r.get),
        rope_widths=_gemma4_rope_widths(r),
        vllm_limit=vllm_limit(r.get, r.model_type), sglang_limit=sglang_limit(r.get),
        invalid=tuple(invalid),
        invalid_positions=next((f for f in invalid if f.split()[0] in POSITION_KEYS), None),
    )


def _gemma4_rope_widths(r: ConfigReader) -> tuple[int, ...]:
    """The widths of the cos/sin tables vLLM builds for Gemma 4, one per layer type's rope_parameters (vllm
    0.20.0-0.33.0 models/gemma4.py `Gemma4Attention`: `get_rope(self.head_dim, ...)` with that type's parameters).
    A "proportional" RoPE (the full layers) is a `Gemma4RotaryEmbedding` (layers/rotary_embedding/gemma4_rope.py
    :48-50), whose table spans the whole head, zero-padded past partial_rotary_factor: gemma-4-31B-it's full layers
    cache 512 wide, not 512 x 0.25 = 128; its sliding layers (default RoPE) 256. () for other families, or when the
    config does not set its RoPE per layer type (then the one-table rule)."""
    params = r.get("rope_parameters")
    if r.model_type not in ("gemma4_text", "gemma4") or not isinstance(params, dict):
        return ()
    heads = {"sliding_attention": r.get("head_dim"), "full_attention": r.get("global_head_dim", 512)}
    widths = []
    for layer_type in sorted(set(r.get("layer_types") or ()) & set(heads)):
        rope, head = params.get(layer_type), heads[layer_type]
        if not isinstance(rope, dict) or not isinstance(head, int) or isinstance(head, bool) or head <= 0:
            return ()
        fraction = rope.get("partial_rotary_factor", 1.0)
        if rope.get("rope_type") != "proportional" and not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
            return ()
        widths.append(head if rope.get("rope_type") == "proportional" else int(head * fraction))
    return tuple(widths)


# Families with a sliding-window RoPE base of their own (rope_local_base_freq) beside the global one.
TWO_ROPE_TABLES = frozenset({"gemma3_text", "gemma3"})


def _fraction(r: ConfigReader, keys: tuple[str, ...]) -> float:
    """The share of each head that rotates (1.0 when the config names none): a fraction of at least 0.001, else the
    ConfigError that says so (NaN, a string or 1.5 was taken as 1.0 without a word)."""
    rope = r.get("rope_parameters")
    if isinstance(rope, dict) and "partial_rotary_factor" in rope:
        # transformers 5 keeps it in rope_parameters (Qwen3.5: 0.25, no top-level key), and its
        # standardize_rope_params only setdefaults the top-level value there, so this one wins when both are set;
        # vLLM 0.33 get_rope reads rope_parameters["partial_rotary_factor"] (layers/rotary_embedding/__init__.py)
        return check_float("rope_parameters.partial_rotary_factor", rope["partial_rotary_factor"], minimum=1e-3,
                           maximum=1.0)
    found = r.first(keys)
    if found is None:
        return 1.0
    r.used[found[0]] = check_float(found[0], found[1], minimum=1e-3, maximum=1.0)
    return r.used[found[0]]


def parse_dims(data: Mapping[str, Any], overrides: Overrides | None = None) -> ArchShape:
    """The weight shape of the (text) model a config.json describes: `parse_config(data).arch`, for callers
    that need only the weights. Raises the error that left `arch` empty."""
    return parse_config(data, overrides=overrides).require_arch()
