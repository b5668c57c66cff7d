"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/config/reader.py (#26): `config_dtype`,
`text_config`, `ConfigReader.__init__` (defaults of an aliased family, the unread attributes), `hidden_size`'s flag
and `layer_set`'s bound.

Every config is a small dict built here (or a bundled model_configs/*.json read as JSON); expected numbers are the
transformers 5.24 config-class defaults named beside them, counts taken off the config by hand, and refusals the
product's one-line errors pinned word for word."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvplan
from kvplan.config.reader import ConfigReader, config_dtype, text_config
from kvplan.config.state import pattern_types
from kvplan.dtypes import BFLOAT16
from kvplan.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "model_configs"


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


# a llama-like text config small enough to read by eye: 2 layers, 4 heads of 64 / 4 = 16, 2 KV heads
TINY = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64,
        "intermediate_size": 128, "vocab_size": 100, "torch_dtype": "bfloat16"}


# ----------------------------------------------------------------------------- config_dtype

def test_config_dtype_reads_a_torch_dtype_object_by_its_str():
    """A dict built in Python holds torch.bfloat16 itself, not the string: str(torch.bfloat16) is
    'torch.bfloat16', which resolve_dtype takes as bfloat16 (16 bits)."""
    torch = pytest.importorskip("torch")
    assert config_dtype({"torch_dtype": torch.bfloat16}) == BFLOAT16
    assert config_dtype({"dtype": torch.float16}).name == "float16"


def test_config_dtype_name_length_bound_is_inclusive():
    """MAX_NAME_CHARS is 100: 'bfloat16' (8 chars) + 92 spaces = 100 chars is still read (resolve_dtype strips
    the spaces), 'bfloat16' + 93 spaces = 101 chars is refused unread."""
    assert config_dtype({"torch_dtype": "bfloat16" + " " * 92}) == BFLOAT16
    long = "bfloat16" + " " * 93
    with pytest.raises(ConfigError, match=r"^config field 'torch_dtype' has unknown dtype 'bfloat16 .*: pass "
                                          r"--dtype explicitly$"):
        config_dtype({"torch_dtype": long})


def test_config_dtype_list_is_refused():
    # a list names no dtype: refused with its repr, never str()-ed into a name
    with pytest.raises(ConfigError, match=_exact("config field 'dtype' has unknown dtype ['bfloat16']: pass "
                                                 "--dtype explicitly")):
        config_dtype({"dtype": ["bfloat16"]})


# ----------------------------------------------------------------------------- text_config

def test_text_config_keeps_the_wrapper_model_type_when_the_nested_one_is_absent():
    """A text_config with no model_type takes the wrapper's, mapped by TEXT_MODEL_TYPES when listed there
    (llava -> llama) and kept as it is otherwise (qwen2_5_vl is not listed: 'qwen2_5_vl')."""
    text, model_type = text_config({"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 64}})
    assert (text, model_type) == ({"hidden_size": 64}, "qwen2_5_vl")
    assert text_config({"model_type": "llava", "text_config": {"hidden_size": 64}})[1] == "llama"
    # the nested one wins when it names itself
    assert text_config({"model_type": "llava", "text_config": {"model_type": "mistral"}})[1] == "mistral"


def test_parse_config_names_the_wrapper_family_of_an_untyped_text_config():
    """kvplan.parse_config on a wrapper 'my_wrapper' around TINY (no nested model_type): the spec's model_type is
    'my_wrapper' (not 'unknown'), its 2 layers cached, bfloat16 inherited from the text config."""
    spec = kvplan.parse_config({"model_type": "my_wrapper", "text_config": dict(TINY)})
    assert spec.model_type == "my_wrapper"
    assert len(spec.layers) == 2
    assert spec.dtype == BFLOAT16


# ----------------------------------------------------------------------------- __init__: an aliased family's defaults

def test_same_architecture_family_gets_its_native_class_defaults():
    """kimi_k2 is read as deepseek_v3 (SAME_ARCHITECTURE): an empty config gets DeepseekV3Config's defaults
    (transformers 5.24 configuration_deepseek_v3.py: num_hidden_layers 61, hidden_size 7168), which kimi_k2's own
    extra defaults (kv_lora_rank 512, qk_rope_head_dim 64) do not carry."""
    r = ConfigReader({}, "kimi_k2")
    assert (r.model_type, r.family) == ("kimi_k2", "deepseek_v3")
    assert r.num_layers() == 61
    assert r.hidden_size() == 7168
    assert r.used == {"num_hidden_layers": 61, "hidden_size": 7168}
    spec = kvplan.parse_config({"model_type": "kimi_k2"})
    assert len(spec.layers) == 61
    assert spec.dims.hidden_size == 7168  # DeepseekV3Config hidden_size


def test_model_type_defaults_win_over_the_native_family():
    """qwen2_5_vl is read as qwen2, but its own Qwen2_5_VLTextConfig defaults come last and win
    (transformers 5.24 configuration_qwen2_5_vl.py: hidden_size 8192, num_hidden_layers 80; Qwen2Config's are
    4096 and 32)."""
    r = ConfigReader({}, "qwen2_5_vl")
    assert r.family == "qwen2"
    assert r.hidden_size() == 8192
    assert r.num_layers() == 80
    spec = kvplan.parse_config({"model_type": "qwen2_5_vl"})
    assert len(spec.layers) == 80
    assert spec.dims.hidden_size == 8192  # Qwen2_5_VLTextConfig hidden_size


# ----------------------------------------------------------------------------- __init__: nothing read yet

def test_a_fresh_reader_has_read_nothing():
    # class_keys None means "any key counts", layer_kinds / state_shape None "not read yet" (their annotations)
    r = ConfigReader({"num_hidden_layers": 2}, "llama")
    assert r.used == {}
    assert r.class_keys is None
    assert r.layer_kinds is None
    assert r.state_shape is None
    assert r.decoder_layout is False


def test_a_fresh_reader_reads_pattern_fields_of_any_class():
    """class_keys None: a layers_block_type is read whatever the family ['mamba', 'attention'] -> kvplan's
    ['mamba', 'full_attention'] (state.BLOCK_TYPES)."""
    r = ConfigReader({"layers_block_type": ["mamba", "attention"]}, "my_hybrid")
    assert pattern_types(r) == ["mamba", "full_attention"]


def test_decoder_layers_in_the_config_switch_to_the_decoder_keys():
    # a BART-style config: decoder_layers 2 wins over num_hidden_layers 6 (the encoder's)
    r = ConfigReader({"decoder_layers": 2, "num_hidden_layers": 6}, "my_seq2seq")
    assert r.decoder_layout is True
    assert r.num_layers() == 2


def test_nemotron_h_weights_follow_the_layer_kinds_parse_sets():
    """Nemotron-H-56B-Base-8K's hybrid_override_pattern has 118 codes: 54 M + 10 * + 54 - (counted off the
    bundled config). parse_config sets layer_kinds only where build_layers left it None, and the weights (one
    LayerDims per block) need one kind per block: 118."""
    data = json.loads((CONFIGS / "nvidia__Nemotron-H-56B-Base-8K.json").read_text())
    pattern = data["hybrid_override_pattern"]
    assert (len(pattern), pattern.count("M"), pattern.count("*"), pattern.count("-")) == (118, 54, 10, 54)
    spec = kvplan.parse_config(data)
    assert spec.arch_error is None
    assert len(spec.arch.layers) == 118


# ----------------------------------------------------------------------------- hidden_size, flag, layer_set

def test_hidden_size_missing_names_its_flag():
    message = ("config has no hidden_size (hidden_size / n_embd / d_model / n_embed / model_dim / emb_dim): "
               "pass --hidden-size N")
    with pytest.raises(ConfigError, match=_exact(message)):
        ConfigReader({}, "my_decoder").hidden_size()
    # through parse_config: TINY without hidden_size but with head_dim 16 sizes the cache, not the weights
    data = {k: v for k, v in TINY.items() if k != "hidden_size"}
    spec = kvplan.parse_config({"model_type": "my_decoder", "head_dim": 16, **data})
    assert spec.arch_error == message


def test_flag_default_and_null():
    r = ConfigReader({"attention_bias": None, "mlp_bias": True}, "my_decoder")
    assert r.flag("attention_bias", True) is True      # null: the class default
    assert r.flag("absent_switch", True) is True       # absent: the default
    assert r.flag("absent_other") is False              # default False
    assert r.flag("mlp_bias") is True
    assert r.used == {"attention_bias": True, "absent_switch": True, "absent_other": False, "mlp_bias": True}


def test_layer_set_bound_is_max_layers():
    """Layer indices run 0 .. MAX_LAYERS (10,000): [0, 10,000] is read, 10,001 refused."""
    r = ConfigReader({"mlp_only_layers": [0, 10_000], "moe_layers": [10_001]}, "my_moe")  # 10,000 and 10,001
    assert r.layer_set("mlp_only_layers") == {0, 10_000}  # MAX_LAYERS 10,000
    with pytest.raises(ConfigError, match=_exact("config field 'moe_layers' must be <= 10,000, got 10,001: fix the "
                                                 "config.json")):
        r.layer_set("moe_layers")
    assert r.layer_set("absent") is None
