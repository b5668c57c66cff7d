"""Tests that kill the mutants tools/mutation.py found surviving in `kvplan/config/parse.py` (#26 item 5):
`parse_config` (the one pass that builds a ModelSpec) and `_dims` (the ArchDims beside the cache).

Pinned here: the defaults of parse_config's keywords (name "custom", source ""), the 0-layer guard's error (text,
field, flag), the conformance record's refusals as parse_config raises or records them (kv wrong, a moved KV key,
params wrong, a moved parameter key, the wrapper's record and its top-level keys), `verified.ENFORCE` switching
them off, which family's class keys gate the pattern fields, the layer kinds and state shape the weight rule reads
(Nemotron-H), and each ArchDims field from a config where it differs from the default. Refusals and warnings are
the product's one-line texts, so they are pinned word for word. Where the shipped conformance record has no family
that reaches a branch (no family is measured kv "wrong" or params "wrong", none has a `kv_fixed` key), the record
is replaced for the one test by a copy with one row changed: the rule under test is parse_config's use of it."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from kvplan import parse_config
from kvplan.config import parse, verified
from kvplan.errors import ConfigError, UnsupportedArchitectureError
from kvplan.model.arch import AttentionDims, Mamba2Dims
from kvplan.model.layers import FullAttentionSpec, NoCacheSpec
from kvplan.model.spec import ContextLimit

CONFIGS = Path(__file__).resolve().parent.parent / "model_configs"
TF = "5.24.0"  # the transformers version kvplan/data/conformance.json was measured with


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _bundled(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _llama(**extra) -> dict:
    """A 2-layer llama: 4 heads of 64 / 4 = 16, 2 KV heads; max_position_embeddings 4,096 tokens."""
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512,
            "max_position_embeddings": 4096,  # 4,096 tokens
            "torch_dtype": "bfloat16"}
    base.update(extra)
    return base


def _foo(**extra) -> dict:
    """The same shape under a model_type no transformers class has (no family defaults, not in the record)."""
    base = _llama(model_type="foo")
    for key in ("intermediate_size",):
        base.pop(key)
    base.update(extra)
    return base


def _patch_table(monkeypatch, **rows) -> None:
    """The conformance record with rows changed (a copy: the cached real table is never touched)."""
    real = verified._table()
    families = dict(real["families"])
    for model_type, changes in rows.items():
        families[model_type] = {**families[model_type], **changes}
    fake = {**real, "families": families}
    monkeypatch.setattr(verified, "_table", lambda: fake)


# ----------------------------------------------------------------------------- parse_config's keyword defaults

def test_default_name_and_source():
    spec = parse_config(_llama())
    assert spec.name == "custom"
    assert spec.source == ""
    assert spec.dtype_named is True and spec.architecture == ""


def test_zero_layers_guard(monkeypatch):
    """No config reaches 0 layers (every layer count is checked >= 1), so the builder is replaced to give none:
    the guard's error is the contract, with the default name in it."""
    monkeypatch.setattr(parse, "build_layers", lambda reader, notes: [])
    with pytest.raises(ConfigError, match=_exact("custom: the config describes 0 layers: pass --num-layers N")) as err:
        parse_config(_llama())
    assert err.value.field == "num_layers"
    assert err.value.flag == "--num-layers"
    with pytest.raises(ConfigError, match=_exact("m0: the config describes 0 layers: pass --num-layers N")):
        parse_config(_llama(), name="m0")


# ----------------------------------------------------------------------------- the family's record (verified)

def test_unknown_family_warning_names_the_type():
    """family_status(model_type, top) for a flat config of a type the record lacks: the warning names 'foo'."""
    spec = parse_config(_foo())
    assert spec.warnings == (f"model_type 'foo' is not one transformers {TF} ships: kvplan's figures for it follow "
                             "its general rules and are not verified",)


def test_kv_wrong_refused(monkeypatch):
    """A family the sweep measured kv 'wrong' (-35.7 % here): no number, the class and the error named."""
    _patch_table(monkeypatch, llama={"kv": "wrong", "kv_error": "-35.7 %"})
    with pytest.raises(UnsupportedArchitectureError, match=_exact(
            "kvw: kvplan's cache rule for model_type 'llama' (LlamaForCausalLM) does not match transformers "
            f"{TF} yet (-35.7 % on its default config), so it gives no number: open an issue with the model id")):
        parse_config(_llama(), name="kvw")


def test_kv_wrong_not_refused_without_enforce(monkeypatch):
    """verified.ENFORCE off (the sweep's raw-rule mode): the same family is sized, 2 layers of 2 x 16 K values."""
    _patch_table(monkeypatch, llama={"kv": "wrong", "kv_error": "-35.7 %"})
    monkeypatch.setattr(verified, "ENFORCE", False)
    spec = parse_config(_llama(), name="kvw")
    assert spec.layers == ((FullAttentionSpec(2, 16, 16),),) * 2


def test_kv_fixed_key_refused(monkeypatch):
    """kv exact, but the config moves a key the cache rule was proven at its default only (kv_field_probes.json
    `kv_fixed`; none ships, so one is recorded here): attention_bias true against the default false."""
    monkeypatch.setattr(verified, "_kv_probes", lambda: {"llama": {"kv_fixed": {"attention_bias": {"default": False}}}})
    with pytest.raises(UnsupportedArchitectureError, match=_exact(
            "kvf: kvplan's cache rule for model_type 'llama' does not follow this config's attention_bias True "
            f"(proven at its class default False) as transformers {TF} builds it, so it gives no KV figure: open an "
            "issue with the model id")):
        parse_config(_llama(attention_bias=True), name="kvf")
    # at the default it is proven: sized
    assert parse_config(_llama(attention_bias=False), name="kvf").num_layers == 2


def test_params_wrong_refused(monkeypatch):
    """params 'wrong' (+2.0 %): the cache stands, the weights are not counted, the reason in arch_error."""
    _patch_table(monkeypatch, llama={"params": "wrong", "params_error": "+2.0 %"})
    spec = parse_config(_llama(), name="pw")
    assert spec.arch is None
    assert spec.arch_error == (
        "pw: kvplan's parameter rule for model_type 'llama' (LlamaForCausalLM) does not match transformers "
        f"{TF} yet (+2.0 % on its default config), so its weights are not counted and no plan is made: open an "
        "issue with the model id")
    assert spec.layers == ((FullAttentionSpec(2, 16, 16),),) * 2
    with pytest.raises(ConfigError, match=_exact(spec.arch_error)):
        spec.require_arch()


def test_fixed_field_refused():
    """field_probes.json: deepseek_v2's rule reads mlp_bias as its class default False; DeepSeek-V2-Lite with
    mlp_bias true is not counted (the sentence names the key, the value and the default)."""
    data = _bundled("deepseek-ai__DeepSeek-V2-Lite")
    assert data.get("mlp_bias") in (None, False)
    data["mlp_bias"] = True
    spec = parse_config(data, name="ds")
    assert spec.arch is None
    assert spec.arch_error == (
        "ds: kvplan's parameter rule for model_type 'deepseek_v2' does not follow this config's mlp_bias True "
        f"(proven at its class default False) as transformers {TF} builds it, so its weights are not counted and no "
        "plan is made: open an issue with the model id")


def test_fixed_field_counted_without_enforce(monkeypatch):
    """The same config with verified.ENFORCE off: the raw rule counts it (no arch_error)."""
    data = _bundled("deepseek-ai__DeepSeek-V2-Lite")
    data["mlp_bias"] = True
    monkeypatch.setattr(verified, "ENFORCE", False)
    spec = parse_config(data, name="ds")
    assert spec.arch_error is None
    assert spec.arch is not None and spec.arch.model_type == "deepseek_v2"


def test_wrapper_top_level_key_refused():
    """Llama 4's keys were probed at the wrapper's top level (field_probes.json llama4: tie_word_embeddings False):
    Llama-4-Scout with a top-level tie_word_embeddings true is not counted, the text model_type named."""
    data = _bundled("meta-llama__Llama-4-Scout-17B-16E-Instruct")
    assert "tie_word_embeddings" not in data and data["text_config"]["model_type"] == "llama4_text"
    data["tie_word_embeddings"] = True
    spec = parse_config(data, name="scout")
    assert spec.model_type == "llama4_text"
    assert spec.arch is None
    assert spec.arch_error == (
        "scout: kvplan's parameter rule for model_type 'llama4_text' does not follow this config's "
        f"tie_word_embeddings True (proven at its class default False) as transformers {TF} builds it, so its "
        "weights are not counted and no plan is made: open an issue with the model id")
    assert spec.architecture == "Llama4ForConditionalGeneration"


def test_wrapper_record_is_used(monkeypatch):
    """family_status: the record of the wrapper the sweep built (gemma3, Gemma3ForConditionalGeneration) wins over
    the text family's (gemma3_text, Gemma3ForCausalLM). With the wrapper's row params 'wrong' (+1.5 %) and the
    text family's exact, gemma-3-27b-it is refused under the text model_type and the wrapper's class."""
    _patch_table(monkeypatch, gemma3={"params": "wrong", "params_error": "+1.5 %"})
    spec = parse_config(_bundled("google__gemma-3-27b-it"), name="g3")
    assert spec.arch_error == (
        "g3: kvplan's parameter rule for model_type 'gemma3_text' (Gemma3ForConditionalGeneration) does not match "
        f"transformers {TF} yet (+1.5 % on its default config), so its weights are not counted and no plan is made: "
        "open an issue with the model id")


def test_non_string_top_model_type_ignored():
    """A top-level model_type that is not a string beside a nested text config: the text config names the family
    (llama), and the odd top value is not looked up (a list is not even hashable)."""
    data = {"model_type": ["llava"], "text_config": _llama()}
    spec = parse_config(data)
    assert spec.model_type == "llama"
    assert spec.warnings == () and spec.arch_error is None


# ----------------------------------------------------------------------------- class keys gate the pattern fields

def test_stray_pattern_field_ignored_for_a_measured_family():
    """LlamaConfig has no layers_block_type (its record's keys): a stray one is not read, both layers stay
    attention, and the warning names it."""
    spec = parse_config(_llama(layers_block_type=["attention", "mlp"]))
    assert spec.layers == ((FullAttentionSpec(2, 16, 16),),) * 2
    assert spec.warnings == ("config field(s) layers_block_type may change the cache or the weights and kvplan does "
                             "not read them: the figures ignore them",)


def test_pattern_field_read_for_an_unknown_family():
    """No class known for 'foo': the pattern is read, layer 1 ("mlp") caches nothing."""
    spec = parse_config(_foo(layers_block_type=["attention", "mlp"], intermediate_size=128))
    assert spec.layers == ((FullAttentionSpec(2, 16, 16),), (NoCacheSpec("MLP-only layer"),))


def test_pattern_field_read_for_a_measured_family_without_keys(monkeypatch):
    """A measured family whose record lists no class keys: nothing is known to say otherwise, so the pattern is
    read (class_keys None, not an empty set that would ignore every pattern field)."""
    _patch_table(monkeypatch, llama={"keys": []})
    spec = parse_config(_llama(layers_block_type=["attention", "mlp"]))
    assert spec.layers == ((FullAttentionSpec(2, 16, 16),), (NoCacheSpec("MLP-only layer"),))


# ----------------------------------------------------------------------------- layer kinds and state for the weights

def test_nemotron_h_weights_follow_the_pattern():
    """Nemotron-H-56B: hybrid_override_pattern of 118 codes, 54 "M" (Mamba-2), 10 "*" (attention), 54 "-" (MLP).
    The weight rule reads the built layers' kinds and the first state's shape: each Mamba-2 mixer 256 heads x 64 =
    16,384 inner, conv 16,384 + 2 x 8 groups x 256 state = 20,480 channels, kernel 4."""
    data = _bundled("nvidia__Nemotron-H-56B-Base-8K")
    pattern = data["hybrid_override_pattern"]
    assert (len(pattern), pattern.count("M"), pattern.count("*")) == (118, 54, 10)
    spec = parse_config(data)
    assert spec.arch_error is None
    mixers = [layer.mixer for layer in spec.arch.layers]
    assert len(mixers) == 118
    assert sum(isinstance(m, AttentionDims) for m in mixers) == 10
    mamba = [m for m in mixers if isinstance(m, Mamba2Dims)]
    assert len(mamba) == 54
    assert set(mamba) == {Mamba2Dims(16384, 256, 20480, 4, conv_bias=True, proj_bias=False)}  # 16,384 / 20,480
    assert [m is None for m in mixers] == [c == "-" for c in pattern]


# ----------------------------------------------------------------------------- _dims

def test_tie_default_is_true():
    """PretrainedConfig's tie_word_embeddings default is True (transformers 5.24 configuration_utils.py): a config
    of an unknown family that does not say is tied."""
    assert parse_config(_foo(intermediate_size=128)).dims.tie_word_embeddings is True


def test_gemma3_two_rope_tables_and_linear_factor():
    """gemma-3-27b-it: local and global RoPE bases (2 tables), rope_scaling linear factor 8."""
    dims = parse_config(_bundled("google__gemma-3-27b-it")).dims
    assert dims.rope_tables == 2
    assert dims.rope_linear_factor == 8.0


def test_gemma4_rope_widths():
    """gemma-4-31B-it: full layers proportional over global_head_dim 512, sliding layers default RoPE over head_dim
    256, in sorted layer-type order (full_attention, sliding_attention)."""
    text = _bundled("google__gemma-4-31B-it")["text_config"]
    assert (text["global_head_dim"], text["head_dim"]) == (512, 256)
    assert parse_config(_bundled("google__gemma-4-31B-it")).dims.rope_widths == (512, 256)


def test_sglang_limit():
    """SGLang 0.5.1 get_context_length: no rope scaling, the first key it knows set: max_position_embeddings,
    4,096 tokens."""
    assert parse_config(_llama()).dims.sglang_limit == ContextLimit(4096, "max_position_embeddings")  # 4,096


@pytest.mark.parametrize("key", ["n_inner", "ffn_hidden_size", "ffn_dim"])
def test_intermediate_aliases(key):
    """GPT-2's n_inner, ChatGLM's ffn_hidden_size, OPT's ffn_dim: 96 wide, the only intermediate key given."""
    assert parse_config(_foo(**{key: 96})).dims.intermediate_size == 96


def test_padded_vocab_size():
    """ChatGLM names its vocabulary padded_vocab_size (65,024 in chatglm3-6b); 640 here, no vocab_size."""
    data = _foo(intermediate_size=128, padded_vocab_size=640)
    data.pop("vocab_size")
    assert parse_config(data).dims.vocab_size == 640


def test_rotary_pct():
    """GPT-NeoX / Pythia name the rotating share rotary_pct: 0.4 here (no partial_rotary_factor)."""
    assert parse_config(_foo(intermediate_size=128, rotary_pct=0.4)).dims.rotary_fraction == 0.4


def test_huge_size_is_invalid_not_a_crash():
    """intermediate_size 10**5000: a whole number of 16,610 bits (5,000 x log2 10 = 16,609.6), over 2**40, so it is
    dropped and named in `invalid` (its repr would exceed Python's 4,300-digit int-to-str limit)."""
    spec = parse_config(_llama(intermediate_size=10 ** 5000))  # 5,000 digits
    assert spec.dims.intermediate_size is None
    assert spec.dims.invalid == ("intermediate_size an integer of 16,610 bits",)
    assert spec.dims.invalid_positions is None
