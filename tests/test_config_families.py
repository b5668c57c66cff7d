"""Cache rules read from what a config says, for the families the conformance sweep (validation/conformance.py)
found kvplan refusing or wrong. Each figure is the bytes transformers 5.24 holds after a 1,000-token bf16 prefill
of the family's default config on the meta device (validation.measure.walk_cache), written down with how it
decomposes; the sweep re-measures them all (docs/coverage.md)."""

from __future__ import annotations

import pytest

import kvplan
from kvplan.errors import UnsupportedArchitectureError

transformers = pytest.importorskip("transformers")


def _default(model_type: str, **changes) -> dict:
    return {**transformers.CONFIG_MAPPING[model_type]().to_dict(), **changes}


def _bytes(config: dict, tokens: int = 1000) -> int:
    model = kvplan.parse_config(config, name=config.get("model_type", "?"))
    return kvplan.estimate(model, seq_len=tokens, batch_size=1, dtype="bf16", prompt_len=tokens).prefill_peak_bytes


def test_a_bart_style_decoder_is_sized_from_its_decoder_keys_with_a_warning():
    config = _default("bart")   # is_encoder_decoder true; BartForCausalLM is its 12-layer decoder
    model = kvplan.parse_config(config, name="bart")
    # 12 layers x 16 heads x 64 x (K + V) x 1,000 tokens x 2 B: the self-attention cache BartForCausalLM keeps
    assert _bytes(config) == 12 * 16 * 64 * 2 * 1000 * 2 == 49_152_000
    assert not model.verified
    assert any("cross-attention K and V of 24,576 values per encoder token" in w for w in model.warnings)


def test_decoder_layers_win_over_the_encoders_num_hidden_layers():
    # distil-whisper-large-v3's config.json: num_hidden_layers 32 (the encoder) beside decoder_layers 2
    config = _default("whisper", num_hidden_layers=32, encoder_layers=32, decoder_layers=2, d_model=1280,
                      decoder_attention_heads=20, max_target_positions=448)
    model = kvplan.parse_config(config, name="distil-whisper")
    assert model.num_layers == 2
    assert model.fields["decoder_layers"] == 2
    # distil-whisper's decoder: 2 layers x d_model 1,280 x 2 (K, V) x 448 target positions x 2 B
    assert _bytes(config, 448) == 2 * 1280 * 2 * 448 * 2


def test_an_encoder_decoder_without_decoder_keys_is_still_refused():
    with pytest.raises(UnsupportedArchitectureError, match="encoder-decoder"):
        kvplan.parse_config({"model_type": "t5", "is_encoder_decoder": True, "num_layers": 6, "d_model": 512,
                             "num_heads": 8, "d_kv": 64, "vocab_size": 32128}, name="t5-small")


@pytest.mark.parametrize("model_type", ["openai-gpt", "xlm"])
def test_a_class_that_keeps_no_cache_holds_zero_bytes(model_type):
    model = kvplan.parse_config(_default(model_type), name=model_type)
    assert _bytes(_default(model_type), 100) == 0
    assert any("keeps no KV cache between steps" in n for n in model.notes)


def test_recurrent_gemma_caches_its_window_and_the_state_its_modules_hold():
    # RecurrentGemma-2B defaults, 26 blocks (recurrent, recurrent, attention): 8 attention blocks x 10 KV heads x 256
    # x (K + V) x 1,000 tokens x 2 B in generate's DynamicSlidingWindowLayers, each with its int64 window scalar,
    # and 18 recurrent blocks holding conv1d_state [1, 2,560, 3] in bf16 and rg_lru.recurrent_states [1, 2,560] in
    # float32 (modeling_recurrent_gemma.py; the conformance walk measures both: 82,380,864 B)
    attention = 8 * (10 * 256 * 2 * 1000 * 2 + 8)
    assert _bytes(_default("recurrent_gemma")) == attention + 18 * (2560 * 3 * 2 + 2560 * 4) == 82_380_864


def test_recurrent_gemma_refuses_a_block_type_it_does_not_know():
    with pytest.raises(kvplan.ConfigError, match="block_types"):
        kvplan.parse_config(_default("recurrent_gemma", block_types=["recurrent", "mlp"]), name="rg")


def test_cpm_ant_caches_its_learned_prompt_tokens_ahead_of_the_sequence():
    # 48 layers x 32 heads x 128 x (K + V) x (1,000 + 32 prompt_length) tokens x 2 B
    assert _bytes(_default("cpmant")) == 48 * 32 * 128 * 2 * 1032 * 2 == 811_597_824


def test_xlstm_state_is_c_n_m_per_head_in_the_model_dtype_plus_one_counter():
    # 32 layers x 8 heads x (256 x 512 + 256 + 1) x 2 B, and xLSTMCache's int64 seqlen_offset
    assert _bytes(_default("xlstm")) == 32 * 8 * (256 * 512 + 256 + 1) * 2 + 8 == 67_240_456


def test_minimax_lightning_state_is_heads_x_head_dim_squared_in_the_model_dtype():
    # 16 full layers x 8 KV heads x 128 x 2 x 1,000 x 2 B + 16 lightning layers x 32 x 128 x 128 x 2 B
    assert _bytes(_default("minimax")) == 16 * 8 * 128 * 2 * 1000 * 2 + 16 * 32 * 128 * 128 * 2 == 82_313_216


def test_zamba_mamba1_heads_leave_the_state_size_alone():
    # 13 hybrid layers of attention (16 KV heads x 464) + 76 Mamba-1 states: 7,424 x 4 x 2 B + 7,424 x 16 x 4 B
    assert _bytes(_default("zamba")) == 13 * 16 * 464 * 2 * 1000 * 2 + 76 * (7424 * 4 * 2 + 7424 * 16 * 4)


def test_zaya_cca_keeps_a_conv_and_a_delayed_value_state_beside_its_kv():
    # 40 layers x (2 KV heads x 128 x 2 x 1,000 x 2 B + (8 + 2) x 128 x 2 x 2 B + 128 x 2 B)
    assert _bytes(_default("zaya")) == 40 * (2 * 128 * 2 * 1000 * 2 + 1280 * 2 * 2 + 128 * 2) == 41_175_040


def test_hy_v4_shared_indexer_layers_cache_only_the_latent():
    # 34 layers x (512 + 64) + 10 "full" indexer layers x 128 index keys, x 1,000 tokens x 2 B
    assert _bytes(_default("hy_v4")) == (34 * (512 + 64) + 10 * 128) * 1000 * 2 == 41_728_000


def test_a_looped_decoder_caches_its_recurrent_layers_on_every_pass():
    model = kvplan.parse_config(_default("dory"), name="dory")
    assert model.num_layers == 16 + 2 * 40 + 16
    # the weights: DoryConfig's 36 DoryDecoderLayers (to_dict lists each as an attention and an "mlp" entry: 72)
    assert model.arch.num_layers == 36
    # 56 attention layers over the passes x 4 KV heads x 256 x 2 x 1,000 x 2 B, plus 42 sliding layers' 8 B counters
    assert _bytes(_default("dory")) == 56 * 4 * 256 * 2 * 1000 * 2 + 42 * 8


def test_mllama_cross_attention_layers_hold_no_text_tokens():
    model = kvplan.parse_config(_default("mllama"), name="mllama")
    cross = transformers.CONFIG_MAPPING["mllama"]().text_config.cross_attention_layers
    assert all(model.layers[i][0].kind == "none" for i in cross)
    # mllama's default text config: 40 layers less the cross-attention ones x 8 KV heads x 128 x 2 x 1,000 x 2 B
    assert _bytes(_default("mllama")) == (40 - len(cross)) * 8 * 128 * 2 * 1000 * 2 == 131_072_000
