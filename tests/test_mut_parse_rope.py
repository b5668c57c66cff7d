"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/config/parse.py's RoPE readers and its
encoder refusal (#26): `_gemma4_rope_widths`, `_fraction` and `_refuse_encoders`.

Pinned, through `kvplan.parse_config(...)`:
- `ModelSpec.dims.rope_widths`: the cos/sin table widths vLLM builds for Gemma 4, one per layer type that the
  config's `layer_types` names, in sorted order ("full_attention" before "sliding_attention"). The rule (vllm
  0.20.0-0.33.0 models/gemma4.py `Gemma4Attention` -> `get_rope(head_dim, ...)`; a "proportional" RoPE is a
  `Gemma4RotaryEmbedding`, layers/rotary_embedding/gemma4_rope.py:48-50, whose table spans the whole head):
  full layers use global_head_dim (Gemma4TextConfig default 512), sliding layers head_dim (default 256); a
  proportional table is `head` wide, any other `int(head x partial_rotary_factor)` (factor default 1.0, only a
  number in (0, 1] accepted); () for other families, a non-dict rope_parameters, a missing per-type entry, a head
  that is not a positive int, or a non-proportional factor outside (0, 1].
- `ModelSpec.dims.rotary_fraction`: rope_parameters.partial_rotary_factor wins over the top-level keys
  (transformers 5 standardize_rope_params only setdefaults the top-level value there; vLLM 0.33 get_rope reads
  rope_parameters["partial_rotary_factor"]), bounds 0.001..1.0, and the ConfigError texts word for word.
- `_refuse_encoders`: the refusal text for an ENCODER_ONLY family without a conformance needs_decoder flag
  (albert), and a needs_decoder family (bert) let through only with is_decoder exactly true.

The bundled configs are real: google/gemma-4-31B-it (text_config: head_dim 256, global_head_dim 512, 60
layer_types of both kinds, full_attention rope proportional with partial_rotary_factor 0.25, sliding_attention
rope default) and Qwen/Qwen3.5-27B (rope_parameters.partial_rotary_factor 0.25, no top-level key)."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

import kvplan
from kvplan.errors import ConfigError, UnsupportedArchitectureError

CONFIGS = Path(__file__).resolve().parent.parent / "model_configs"


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _load(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


GEMMA4 = _load("google__gemma-4-31B-it.json")
QWEN35 = _load("Qwen__Qwen3.5-27B.json")


def _gemma4(change=None) -> dict:
    data = copy.deepcopy(GEMMA4)
    if change is not None:
        change(data["text_config"])
    return data


def _widths(data: dict) -> tuple:
    return kvplan.parse_config(data).dims.rope_widths


def _sliding(text: dict) -> dict:
    return text["rope_parameters"]["sliding_attention"]


def _full(text: dict) -> dict:
    return text["rope_parameters"]["full_attention"]


# ----------------------------------------------------------------------------- _gemma4_rope_widths

def test_gemma4_31b_widths_as_published():
    """gemma-4-31B-it as published: full (proportional) 512 wide = global_head_dim 512, not 512 x 0.25 = 128;
    sliding (default, factor 1.0) int(256 x 1.0) = 256. Sorted: full_attention, sliding_attention."""
    data = _gemma4()
    assert data["text_config"]["model_type"] == "gemma4_text"
    assert _widths(data) == (512, 256)


@pytest.mark.parametrize("name", ["google__gemma-4-E2B-it.json", "google__gemma-4-26B-A4B.json"])
def test_gemma4_other_bundled_widths(name):
    """E2B-it and 26B-A4B carry the same head sizes (head_dim 256, global_head_dim 512) and the same rope_parameters
    as 31B-it: (512, 256)."""
    assert _widths(_load(name)) == (512, 256)


def test_gemma4_flat_model_type_gemma4():
    """A text_config without its own model_type takes the wrapper's "gemma4" (reader.text_config): the rule is the
    same for model_type "gemma4", (512, 256)."""
    data = _gemma4(lambda t: t.pop("model_type"))
    spec = kvplan.parse_config(data)
    assert spec.model_type == "gemma4"
    assert spec.dims.rope_widths == (512, 256)


def test_gemma4_text_flat_without_wrapper():
    """The text config alone (model_type gemma4_text at top level): (512, 256)."""
    assert _widths(copy.deepcopy(GEMMA4["text_config"])) == (512, 256)


def test_gemma4_no_rope_parameters_is_empty():
    """Without rope_parameters the config does not set its RoPE per layer type: () (the one-table rule)."""
    assert _widths(_gemma4(lambda t: t.pop("rope_parameters"))) == ()


def test_gemma4_rope_parameters_not_a_dict_is_empty():
    """rope_parameters [1] is no per-layer-type mapping: ()."""
    assert _widths(_gemma4(lambda t: t.__setitem__("rope_parameters", [1]))) == ()


def test_other_family_with_per_type_rope_is_empty():
    """gemma-3-27b-it (model_type gemma3_text) given transformers-5 style per-layer-type rope_parameters and an
    explicit layer_types (5 sliding then 1 full, 62 layers): not Gemma 4, so () even though a Gemma 4 reading would
    give full int(512 x 1.0) = 512 and sliding head_dim 128."""
    data = copy.deepcopy(_load("google__gemma-3-27b-it.json"))
    text = data["text_config"]
    text["rope_parameters"] = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},  # 5 digits
                               "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}
    n = text["num_hidden_layers"]
    assert n == 62
    text["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    spec = kvplan.parse_config(data)
    assert spec.model_type == "gemma3_text"
    assert spec.dims.rope_widths == ()


def test_gemma4_global_head_dim_read():
    """global_head_dim 384: full layers (proportional) 384 wide, sliding int(256 x 1.0) = 256 -> (384, 256)."""
    assert _widths(_gemma4(lambda t: t.__setitem__("global_head_dim", 384))) == (384, 256)


def test_gemma4_global_head_dim_default_512():
    """global_head_dim absent: Gemma4TextConfig's default 512 (configuration_gemma4.py) -> (512, 256)."""
    assert _widths(_gemma4(lambda t: t.pop("global_head_dim"))) == (512, 256)


def test_gemma4_head_dim_read():
    """head_dim 128: sliding int(128 x 1.0) = 128, full still global_head_dim 512 -> (512, 128)."""
    assert _widths(_gemma4(lambda t: t.__setitem__("head_dim", 128))) == (512, 128)


def test_gemma4_head_dim_default_256():
    """head_dim absent: Gemma4TextConfig's default 256 -> sliding 256, (512, 256)."""
    assert _widths(_gemma4(lambda t: t.pop("head_dim"))) == (512, 256)


def test_gemma4_only_sliding_layers():
    """All 60 layers sliding_attention: only the sliding table, (256,) (the full entry of rope_parameters names a
    layer type the model does not have)."""
    assert _widths(_gemma4(lambda t: t.__setitem__("layer_types", ["sliding_attention"] * 60))) == (256,)


def test_gemma4_missing_per_type_entry_is_empty():
    """rope_parameters without its sliding_attention entry while sliding layers exist: ()."""
    assert _widths(_gemma4(lambda t: t["rope_parameters"].pop("sliding_attention"))) == ()


def _bad_full_head(value):
    """global_head_dim set to `value` with per_layer_config {} (so the cache layout takes every layer's head_dim
    256 and never reads global_head_dim, kvplan/config/per_layer.py `_per_layer_config`): only the RoPE rule sees
    the value."""
    def change(text):
        text["global_head_dim"] = value
        text["per_layer_config"] = {}
    return _gemma4(change)


@pytest.mark.parametrize("value", [0, -512, True, 512.0, "512"])
def test_gemma4_full_head_not_positive_int_is_empty(value):
    """global_head_dim 0, -512, true (a bool, not a size), 512.0 or "512": no positive int head, so ()."""
    assert _widths(_bad_full_head(value)) == ()


def test_gemma4_full_head_one_just_passes():
    """global_head_dim 1 (the smallest positive int): the proportional full table is 1 wide -> (1, 256)."""
    assert _widths(_bad_full_head(1)) == (1, 256)


def test_gemma4_sliding_partial_factor_read():
    """sliding partial_rotary_factor 0.5 (rope_type default): int(256 x 0.5) = 128 -> (512, 128)."""
    assert _widths(_gemma4(lambda t: _sliding(t).__setitem__("partial_rotary_factor", 0.5))) == (512, 128)


def test_gemma4_sliding_partial_factor_one_kept():
    """sliding partial_rotary_factor 1 (the upper bound, an int): int(256 x 1) = 256 -> (512, 256)."""
    assert _widths(_gemma4(lambda t: _sliding(t).__setitem__("partial_rotary_factor", 1))) == (512, 256)


@pytest.mark.parametrize("value", [0, 1.5, 2, "0.5", None])
def test_gemma4_sliding_factor_out_of_range_is_empty(value):
    """A non-proportional table with partial_rotary_factor 0, 1.5, 2, "0.5" or null: not a number in (0, 1], so ()
    (a table int(256 x 1.5) = 384 or int(256 x 2) = 512 or 0 wide would be wrong)."""
    assert _widths(_gemma4(lambda t: _sliding(t).__setitem__("partial_rotary_factor", value))) == ()


@pytest.mark.parametrize("value", [0, 1.5, 2, "0.25"])
def test_gemma4_proportional_ignores_factor(value):
    """A proportional table spans the whole head whatever partial_rotary_factor says (0, 1.5, 2, "0.25"): full
    stays global_head_dim 512 -> (512, 256)."""
    assert _widths(_gemma4(lambda t: _full(t).__setitem__("partial_rotary_factor", value))) == (512, 256)


def test_gemma4_full_default_rope_uses_factor():
    """full_attention rope_type "default" with partial_rotary_factor 0.25: int(512 x 0.25) = 128 -> (128, 256)."""
    assert _widths(_gemma4(lambda t: _full(t).__setitem__("rope_type", "default"))) == (128, 256)


def test_gemma4_full_default_rope_without_factor():
    """full_attention rope_type "default" and no partial_rotary_factor: factor 1.0, int(512 x 1.0) = 512."""
    def change(text):
        _full(text)["rope_type"] = "default"
        _full(text).pop("partial_rotary_factor")
    assert _widths(_gemma4(change)) == (512, 256)


def test_gemma4_sliding_proportional_spans_head():
    """sliding_attention proportional with partial_rotary_factor 0.5: the whole head_dim 256, not 128."""
    def change(text):
        _sliding(text)["rope_type"] = "proportional"
        _sliding(text)["partial_rotary_factor"] = 0.5
    assert _widths(_gemma4(change)) == (512, 256)


# ----------------------------------------------------------------------------- _fraction

def _qwen35(change=None) -> dict:
    data = copy.deepcopy(QWEN35)
    if change is not None:
        change(data["text_config"])
    return data


def test_fraction_from_rope_parameters():
    """Qwen3.5-27B keeps partial_rotary_factor 0.25 in rope_parameters only: rotary_fraction 0.25, not the 1.0 of
    a config that names none."""
    text = QWEN35["text_config"]
    assert "partial_rotary_factor" not in text and text["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert kvplan.parse_config(_qwen35()).dims.rotary_fraction == 0.25


def test_fraction_rope_parameters_wins_over_top_level():
    """rope_parameters 0.25 and a top-level partial_rotary_factor 0.5: rope_parameters wins (transformers 5
    standardize_rope_params only setdefaults the top-level value there) -> 0.25."""
    data = _qwen35(lambda t: t.__setitem__("partial_rotary_factor", 0.5))
    assert kvplan.parse_config(data).dims.rotary_fraction == 0.25


def test_fraction_top_level_when_rope_parameters_has_none():
    """rope_parameters without the key, top-level partial_rotary_factor 0.5 -> 0.5; with neither -> 1.0."""
    def top(text):
        text["rope_parameters"].pop("partial_rotary_factor")
        text["partial_rotary_factor"] = 0.5
    assert kvplan.parse_config(_qwen35(top)).dims.rotary_fraction == 0.5
    assert kvplan.parse_config(_qwen35(lambda t: t["rope_parameters"].pop("partial_rotary_factor"))
                               ).dims.rotary_fraction == 1.0


@pytest.mark.parametrize("value", [1.0, 1e-3])
def test_fraction_bounds_inclusive(value):
    """1.0 and 0.001 are the inclusive bounds: kept as they are."""
    data = _qwen35(lambda t: t["rope_parameters"].__setitem__("partial_rotary_factor", value))
    assert kvplan.parse_config(data).dims.rotary_fraction == value


@pytest.mark.parametrize("value, shown_as", [(1.5, "1.5"), (2.0, "2.0"), (0.0005, "0.0005")])
def test_fraction_out_of_range_refused(value, shown_as):
    """rope_parameters.partial_rotary_factor 1.5 / 2.0 (over the 1.0 maximum) or 0.0005 (under 0.001)."""
    data = _qwen35(lambda t: t["rope_parameters"].__setitem__("partial_rotary_factor", value))
    message = (f"config field 'rope_parameters.partial_rotary_factor' must be between 0.001 and 1, got {shown_as}: "
               "fix the config.json")
    with pytest.raises(ConfigError, match=_exact(message)) as info:
        kvplan.parse_config(data)
    assert info.value.field == "rope_parameters.partial_rotary_factor"


def test_fraction_not_a_number_refused():
    """rope_parameters.partial_rotary_factor "0.25" (a string)."""
    data = _qwen35(lambda t: t["rope_parameters"].__setitem__("partial_rotary_factor", "0.25"))
    message = "config field 'rope_parameters.partial_rotary_factor' must be a number, got '0.25': fix the config.json"
    with pytest.raises(ConfigError, match=_exact(message)):
        kvplan.parse_config(data)


# ----------------------------------------------------------------------------- _refuse_encoders

# bert-base-uncased's sizes: intermediate 3072 = 4 x hidden 768, vocab 30522 (its config.json)
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072,  # 4 x 768
             "vocab_size": 30522, "max_position_embeddings": 512}  # bert-base-uncased vocab: 30522 tokens


def _encoder_message(model_type: str) -> str:
    return (f"enc: model_type {model_type!r} is an encoder unless its config says is_decoder: true, and as an "
            "encoder it keeps no KV cache: set is_decoder to true in the config.json to size it as a decoder")


@pytest.mark.parametrize("is_decoder", [None, True])
@pytest.mark.parametrize("model_type", ["albert", "distilbert", "deberta", "deberta-v2"])
def test_encoders_without_a_causal_lm_are_refused_whatever_is_decoder_says(model_type, is_decoder):
    """albert / distilbert / deberta / deberta-v2 have no causal-LM class in transformers 5.24
    (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES has none of them), so is_decoder true gives them no cache either."""
    data = {"model_type": model_type, **BERT_BASE, **({"is_decoder": True} if is_decoder else {})}
    with pytest.raises(UnsupportedArchitectureError, match=_exact(
            f"enc: model_type {model_type!r} is an encoder, with no causal-LM class in transformers, so it keeps no "
            "KV cache whatever is_decoder says: kvplan sizes the caches of decoder models")):
        kvplan.parse_config(data, name="enc")


def test_an_encoder_with_a_causal_lm_but_no_record_needs_is_decoder_too():
    """xmod has a causal LM (XmodForCausalLM) but no needs_decoder row in kvplan/data/conformance.json: ENCODER_ONLY
    alone refuses it without is_decoder true."""
    with pytest.raises(UnsupportedArchitectureError, match=_exact(_encoder_message("xmod"))):
        kvplan.parse_config({"model_type": "xmod", **BERT_BASE}, name="enc")


def test_the_encoders_without_a_causal_lm_are_the_ones_transformers_has_none_for():
    # the list follows transformers' own mapping: bert (BertLMHeadModel) and xmod (XmodForCausalLM) have one
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as causal
    from kvplan.config.parse import ENCODER_ONLY, NO_CAUSAL_LM
    assert NO_CAUSAL_LM == {t for t in ENCODER_ONLY if t not in causal}


@pytest.mark.parametrize("flag", [None, False, 1, "true"])
def test_bert_refused_unless_is_decoder_true(flag):
    """bert (needs_decoder in conformance.json): absent, false, 1 or "true" is not `is_decoder: true`: refused."""
    data = {"model_type": "bert", **BERT_BASE}
    if flag is not None:
        data["is_decoder"] = flag
    with pytest.raises(UnsupportedArchitectureError, match=_exact(_encoder_message("bert"))):
        kvplan.parse_config(data, name="enc")


def test_bert_is_decoder_true_is_sized():
    """bert with is_decoder true is BertLMHeadModel, a decoder with a cache: 12 layers, one per num_hidden_layers."""
    spec = kvplan.parse_config({"model_type": "bert", "is_decoder": True, **BERT_BASE}, name="enc")
    assert spec.model_type == "bert"
    assert len(spec.layers) == 12
