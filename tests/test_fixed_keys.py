"""Keys kvplan's parameter count once held fixed (kvplan/data/field_probes.json `fixed`, refused off their class
default) and now follows as transformers 5.24 builds them: a bool that switches tensors on or off is read through
the traits' conditional extras and overrides (tools/gen_family_traits.py `_conditional`), and the sizes hand-written
rules had taken as constants are read from their fields (OPT's word_embed_proj_dim, Zamba's attention_hidden_size,
Zamba2's attention_head_dim, LFM2's block_auto_adjust_ff_dim, GPT-NeoX-Japanese's intermediate_multiple_size, GPT-2's
add_cross_attention).

Each pin is `sum(p.numel() for p in model.parameters())` of AutoModelForCausalLM.from_config on the meta device,
transformers 5.24.0, for the class default with the one change shown; the live test rebuilds each one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.weights.rule import param_count

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROBES = json.loads((Path(__file__).resolve().parents[1] / "kvplan" / "data" / "field_probes.json").read_text())

# (model_type, the change, transformers 5.24's parameters on meta)
CASES = [
    # HeliumConfig(attention_bias=True): q/k/v biases [2,560] on 24 layers, 24 x 3 x 2,560 = 184,320 over the
    # default's 2,172,643,840
    ("helium", {"attention_bias": True}, 2_172_828_160),
    # SeedOssConfig(attention_out_bias=True): o_proj.bias [4,096] on 64 layers, 262,144 over 28,921,040,896
    ("seed_oss", {"attention_out_bias": True}, 28_921_303_040),
    # PhimoeConfig(lm_head_bias=True): lm_head.bias [32,064] over 41,872,793,600
    ("phimoe", {"lm_head_bias": True}, 41_872_825_664),
    # OPTConfig(layer_norm_elementwise_affine=False): 25 LayerNorms of 768 weights and biases fewer:
    # 125,239,296 - 25 x 1,536 = 125,200,896
    ("opt", {"layer_norm_elementwise_affine": False}, 125_200_896),
    # OPTConfig(do_layer_norm_before=False): no final_layer_norm, 125,239,296 - 1,536
    ("opt", {"do_layer_norm_before": False}, 125_237_760),
    # TrOCRConfig(layernorm_embedding=False): 253,559,808 - 2 x 1,024
    ("trocr", {"layernorm_embedding": False}, 253_557_760),
    # XGLMConfig(add_cross_attention=True): encoder_attn q/k/v/out [1,024 x 1,024] + biases and its LayerNorm on
    # 24 layers, 24 x (4 x 1,049,600 + 2,048) = 100,810,752 over 564,463,616
    ("xglm", {"add_cross_attention": True}, 665_274_368),
    # GPT2Config(add_cross_attention=True): 12 x (4 x 768^2 + 6 x 768) = 28,366,848 over 124,439,808
    ("gpt2", {"add_cross_attention": True}, 152_806_656),
    # Lfm3Config(use_attention_gate=False): no g_proj [16, 2,048] on its 11 attention layers, -360,448
    ("lfm3", {"use_attention_gate": False}, 1_728_441_088),
    # Lfm3Config(conv_bias=True): conv, in_proj, out_proj biases (2,048 + 6,144 + 2,048) on 13 short-conv layers
    ("lfm3", {"conv_bias": True}, 1_728_934_656),
    # FalconH1Config(mamba_conv_bias=False): no conv1d.bias [1,536] on 32 layers, -49,152
    ("falcon_h1", {"mamba_conv_bias": False}, 8_514_912_256),
    # FalconH1Config(mamba_rms_norm=True): mamba.norm [1,024] on 32 layers, +32,768
    ("falcon_h1", {"mamba_rms_norm": True}, 8_514_994_176),
    # Lfm2Config(block_auto_adjust_ff_dim=False): the MLP at intermediate_size 12,288, not the adjusted 8,192
    ("lfm2", {"block_auto_adjust_ff_dim": False}, 3_712_130_560),
    # GPTNeoXJapaneseConfig(intermediate_multiple_size=8): MLP 2,560 x 8 = 20,480 wide, not 4 x 2,560
    ("gpt_neox_japanese", {"intermediate_multiple_size": 8}, 4_276_559_360),
    # ZambaConfig(attention_hidden_size=3712): q/k/v [7,424, 3,712] and the input norm [3,712], not 2 x hidden
    ("zamba", {"attention_hidden_size": 3712}, 7_149_813_120),
    # Zamba2Config(attention_head_dim=80): q/k/v [2,560, 5,120], o [2,560, 2,560]
    ("zamba2", {"attention_head_dim": 80}, 2_435_973_136),
    # Zamba2Config(attention_hidden_size=2560): q/k/v [5,120, 2,560], the input norm [2,560]
    ("zamba2", {"attention_hidden_size": 2560}, 2_442_524_176),
    # Zamba2Config(mamba_headdim=320): the mixer is sized by mamba_expand x hidden, so nothing moves
    ("zamba2", {"mamba_headdim": 320}, 2_481_848_336),
    # BailingHybridConfig(linear_head_dim=64): the KDA layers' q/k/v/g/f projections [2,048, 2,560] (32 x 64),
    # while the MLA layers' o_proj stays [2,560, 32 x v_head_dim 128]; kvplan had read both o_proj as one
    # [hidden, linear heads x linear head_dim] tensor and said 123,275,552,032
    ("bailing_hybrid", {"linear_head_dim": 64}, 123_312_252_192),
    # BailingHybridConfig(v_head_dim=64): kv_b_proj [32 x (128 + 64), 512] and o_proj [2,560, 2,048] on 7 MLA layers
    ("bailing_hybrid", {"v_head_dim": 64}, 124_370_150_880),
    # DogeConfig(is_moe=True): DogeCDMoE adds router_gate [2 x floor(sqrt(16,384)) = 256, 1,024] and up_embed /
    # down_embed [16,384, 1,024] on 32 layers, 32 x (262,144 + 2 x 16,777,216) = 1,082,130,432 over 403,055,872
    ("doge", {"is_moe": True}, 1_485_186_304),
    # and at num_experts 4,096: router [2 x 64, 1,024], embeddings [4,096, 1,024]
    ("doge", {"is_moe": True, "num_experts": 4096}, 675_685_632),
    # Dots3NoteTextConfig(q_lora_rank=512): q_a_proj, q_a_layernorm, q_b_proj and the indexer's wq_b at rank 512 on
    # the 13 indexed layers; the 33 sliding layers keep their own rank 1,024 (per_layer_config, swa_q_lora_rank)
    ("dots3_note_text", {"q_lora_rank": 512}, 279_299_528_832),
    # Dots3NoteTextConfig(v_head_dim=64): kv_b_proj [128 x (128 + 64), 512] and o_proj [5,120, 8,192] on the
    # indexed layers only
    ("dots3_note_text", {"v_head_dim": 64}, 278_951_932_544),
    # HeliumConfig(num_key_value_heads=10): k/v projections [10 x 128, 2,560], not [q_dim, hidden] as the traits read
    # them while the default's 20 KV heads equalled its 20 heads (kvplan said 2,172,643,840, +7.8 %)
    ("helium", {"num_key_value_heads": 10}, 2_015_357_440),
    # DogeConfig(num_key_value_heads=4): dt_proj [4, 4 x 128] and A [4] follow the KV heads, not the 8 heads the
    # traits had read while the default's KV heads equalled them (kvplan said 369,501,440)
    ("doge", {"num_key_value_heads": 4}, 369_304_704),
    # facebook/opt-350m's config.json (hidden 1,024, 24 layers, 16 heads, ffn_dim 4,096, word_embed_proj_dim 512,
    # do_layer_norm_before false): embed_tokens [50,272, 512], project_in and project_out [1,024 x 512]; kvplan
    # counted [50,272, 1,024] and no projections, 355,887,104 (+7.5 %, 50,272 x 512 - 2 x 524,288 = 24,690,688 over)
    ("opt", {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "ffn_dim": 4096,
             "word_embed_proj_dim": 512, "do_layer_norm_before": False}, 331_196_416),
]


def _config(model_type: str, changes: dict) -> dict:
    return transformers.CONFIG_MAPPING[model_type](**changes).to_dict()


@pytest.mark.parametrize("model_type,changes,truth", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_kvplan_counts_the_changed_key_as_transformers_builds_it(model_type, changes, truth):
    spec = kvplan.parse_config(_config(model_type, changes), name=model_type)
    assert spec.arch is not None, spec.arch_error
    assert param_count(spec.arch).total == truth


@pytest.mark.parametrize("model_type,changes,truth", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_the_pins_are_transformers_on_meta(model_type, changes, truth):
    cfg = transformers.CONFIG_MAPPING[model_type](**changes)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == truth


@pytest.mark.parametrize("model_type,changes", [(m, c) for m, c, _ in CASES if len(c) == 1])
def test_the_record_lists_the_key_as_followed(model_type, changes):
    (key,) = changes
    row = PROBES["families"][model_type]
    assert key not in row.get("fixed", {}) and key in row.get("follows", ())


def test_olmo_hybrid_off_its_default_kv_heads_is_refused_not_guessed():
    """OLMo-Hybrid's k/v projections are read at hidden, which its default's 30 KV heads of 30 cannot tell from
    kv_dim: at 15 transformers builds 7,312,890,528 and the rule says 7,430,870,688, so the probe records the key
    fixed and a config that moves it gets the one-line refusal."""
    spec = kvplan.parse_config(_config("olmo_hybrid", {"num_key_value_heads": 15}), name="o")
    assert spec.arch is None and "num_key_value_heads 15 (proven at its class default 30)" in spec.arch_error
    assert kvplan.parse_config(_config("olmo_hybrid", {}), name="o").arch is not None


def test_the_dimension_forms_the_new_extras_use():
    """Doge's router rows 2 x floor(sqrt(num_experts)) and MLA's kv_b rows heads x (nope + v), as
    kvplan.config.traits sizes them from the config's fields."""
    from kvplan.config import traits
    from kvplan.config.reader import ConfigReader

    size = {"_reader": ConfigReader({"num_experts": 16384, "heads": 128, "nope": 128, "v": 64}, "x")}
    assert traits.numel(["2*isqrt:field:num_experts"], size) == 256   # 2 x 128
    assert traits.numel(["field:heads*(field:nope+field:v)"], size) == 128 * 192
    size = {"_reader": ConfigReader({"num_experts": 8192}, "x")}
    assert traits.numel(["2*isqrt:field:num_experts"], size) == 180   # floor(90.5) = 90


def test_a_conditional_extra_counts_only_where_its_key_holds():
    """Helium's q/k/v biases are extras with `when` {"attention_bias": true}: the default (false, unset in the
    config) leaves them out, the set key puts them in, 24 x 3 x 2,560 = 184,320 parameters."""
    base = _config("helium", {})
    off = param_count(kvplan.parse_config(base, name="h").arch).total
    on = param_count(kvplan.parse_config({**base, "attention_bias": True}, name="h").arch).total
    absent = param_count(kvplan.parse_config({k: v for k, v in base.items() if k != "attention_bias"},
                                             name="h").arch).total
    assert on - off == 24 * 3 * 2560
    assert absent == off
