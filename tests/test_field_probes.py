"""The structural fields a family's parameter rule follows, and the refusal where it does not
(tools/gen_field_probes.py writes kvplan/data/field_probes.json; kvplan.config.verified `fixed_field_refusal`).

The conformance sweep proves a rule at the class defaults and the traits generator at one resized config (hidden,
intermediate, vocabulary). A key neither changes can move transformers' model while kvplan's count stays put, so the
probes change each structural key alone and compare with transformers on meta. Here a slice of the record is
re-measured live (the whole probe takes ~40 minutes): for each sampled key, transformers' count at the probe value
is kvplan's where the record says `follows`, and kvplan refuses the count where it says `fixed`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.config import verified

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.gen_field_probes import changed, counts, probe_value  # noqa: E402

RECORD = json.loads((Path(__file__).resolve().parents[1] / "kvplan" / "data" / "field_probes.json").read_text())
FAMILIES = RECORD["families"]


def _sample(kind: str, every: int) -> list[tuple[str, str]]:
    """Every `every`-th (family, key) of that kind, in name order: a spread over the record, the same each run."""
    pairs = sorted((mt, key) for mt, row in FAMILIES.items() if isinstance(row, dict)
                   for key in (row.get(kind) or ()))
    return pairs[::every]


def test_the_record_covers_the_families_the_sweep_found_exact():
    exact = {mt for mt, f in json.loads((Path(verified._DATA)).read_text())["families"].items()
             if f.get("params") == "exact" and mt in transformers.CONFIG_MAPPING}
    assert exact <= set(FAMILIES), sorted(exact - set(FAMILIES))[:10]
    assert RECORD["transformers"] == transformers.__version__


@pytest.mark.parametrize("model_type,key", _sample("follows", 25))
def test_a_key_the_rule_follows_is_counted_as_transformers_builds_it(model_type, key):
    value = probe_value(key, transformers.CONFIG_MAPPING[model_type]().to_dict())
    truth, ours = counts(model_type, {key: value})
    assert ours == truth, (model_type, key, value)


FIXED = _sample("fixed", 2)


@pytest.mark.parametrize("model_type,key", FIXED or [pytest.param("", "", marks=pytest.mark.skip("none fixed"))])
def test_a_key_the_rule_does_not_follow_refuses_the_weights(model_type, key):
    default = FAMILIES[model_type]["fixed"][key]
    assert transformers.CONFIG_MAPPING[model_type]().to_dict()[key] == default   # a per-layer config refuses getattr
    value = probe_value(key, transformers.CONFIG_MAPPING[model_type]().to_dict())
    truth, raw = counts(model_type, {key: value})
    assert raw != truth                   # the record is not stale: the raw rule is off at this value
    config = transformers.CONFIG_MAPPING[model_type](**{key: value}).to_dict()
    spec = kvplan.parse_config(config, name=model_type)
    assert spec.arch is None and f"does not follow this config's {key} " in spec.arch_error
    at_default = kvplan.parse_config(transformers.CONFIG_MAPPING[model_type]().to_dict(), name=model_type)
    assert at_default.arch is not None    # the class default is what was proven


def test_a_synthetic_fixed_key_refuses_only_a_moved_value(monkeypatch):
    """The refusal itself, on a record that says llama's rule does not follow `attention_bias` (it does): a config
    at the recorded value plans, one off it names the key."""
    monkeypatch.setattr(verified, "_probes", lambda: {"llama": {"fixed": {"attention_bias": False}}})
    config = transformers.CONFIG_MAPPING["llama"]().to_dict()
    assert kvplan.parse_config(config, name="x").arch is not None
    spec = kvplan.parse_config({**config, "attention_bias": True}, name="x")
    assert spec.arch is None
    assert spec.arch_error == ("x: kvplan's parameter rule for model_type 'llama' does not follow this config's "
                               "attention_bias True (proven at its class default False) as transformers "
                               f"{transformers.__version__} builds it, so its weights are not counted and no plan "
                               "is made: open an issue with the model id")


def test_readme_quotes_the_record():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = [row for row in FAMILIES.values() if isinstance(row, dict)]
    follows = sum(len(row.get("follows", ())) for row in rows)
    fixed = [row["fixed"] for row in rows if row.get("fixed")]
    sentence = (f"the parameter count follows {follows} keys, and for {sum(map(len, fixed))} keys of\n"
                f"{len(fixed)} families it does not")
    assert sentence in readme


def test_the_record_probes_every_int_and_bool_field_of_each_family():
    """Every top-level int or bool of a probed family's class default (but the token ids and the sizes the sweep
    resizes) is in the record: followed, fixed, or not probed with the reason. The sweep's `keys` alone missed
    AXK2's qk_rope_head_dim and MiMo-V2-Flash's head_dim, both of which moved transformers' model silently."""
    from tools.gen_field_probes import SIZES, probed_keys

    assert "qk_rope_head_dim" in probed_keys([], transformers.CONFIG_MAPPING["axk2"]().to_dict())
    assert "bos_token_id" not in probed_keys([], transformers.CONFIG_MAPPING["llama"]().to_dict())
    for mt, row in FAMILIES.items():
        if not isinstance(row, dict) or isinstance(row.get("not_probed"), str):
            continue
        seen = set(row.get("follows", ())) | set(row.get("fixed", {})) | set(row.get("not_probed", {}))
        base = transformers.CONFIG_MAPPING[mt]().to_dict()
        want = {k for k in probed_keys([], base) if k not in SIZES and changed(base[k]) is not None}
        assert want <= seen, (mt, sorted(want - seen))


# Counts kvplan had wrong and printed without a word (the sweep's keys never moved them), each now read from the
# key: (model_type, key, probe value, transformers' parameters there, kvplan's count before the traits read it).
NOW_FOLLOWED = [
    # transformers 5.24 on meta, AXK2ForCausalLM(AXK2Config(qk_rope_head_dim=64)); kv_a_proj_with_mqa is
    # kv_lora_rank + qk_rope_head_dim rows, read as kv_lora_rank + num_attention_heads (32 = 32 at the default)
    ("axk2", "qk_rope_head_dim", 64, 20_355_389_440, 20_352_243_712),
    # transformers 5.24 on meta, JetMoeForCausalLM(JetMoeConfig(num_experts_per_tok=4)); kv_proj is
    # [2 x kv_dim, hidden], read as q_dim, which JetMoeConfig makes num_key_value_heads x num_experts_per_tok
    # heads (2 x 16 x 128 = 32 x 128 at the default top-2)
    ("jetmoe", "num_experts_per_tok", 4, 4_293_888_000, 4_394_551_296),
    # transformers 5.24 on meta, MiMoV2FlashForCausalLM(MiMoV2FlashConfig(head_dim=96)); the sliding layers' k_proj
    # is 2 x num_key_value_heads x head_dim rows (modeling_mimo_v2_flash: num_key_value_heads * 2 if is_swa),
    # read as the constant 1,536
    ("mimo_v2_flash", "head_dim", 96, 307_433_970_112, 307_556_653_504),
    # transformers 5.24 on meta, MiMoV2FlashForCausalLM(MiMoV2FlashConfig(num_experts_per_tok=16)); the sliding
    # v_proj had read num_experts_per_tok (8) for 2 x num_key_value_heads (8)
    ("mimo_v2_flash", "num_experts_per_tok", 16, 308_778_768_832, 308_942_346_688),
    # transformers 5.24 on meta, KimiLinearForCausalLM(KimiLinearConfig(head_dim=32)), the default's count: no
    # module reads head_dim; the MLA layers' kv_a_proj is kv_lora_rank + qk_rope_head_dim rows, read as
    # kv_lora_rank + head_dim (64 = 64 at the default)
    ("kimi_linear", "head_dim", 32, 49_133_074_464, 49_132_632_096),
    # transformers 5.24 on meta, KimiLinearForCausalLM(KimiLinearConfig(qk_rope_head_dim=32))
    ("kimi_linear", "qk_rope_head_dim", 32, 49_118_476_320, 49_132_632_096),
    # transformers 5.24 on meta, Qwen2MoeForCausalLM(Qwen2MoeConfig(decoder_sparse_step=2)); its dense layers are
    # Qwen2MoeMLP, gated, which the traits had read ungated off a default with no dense layer (12 x 2,048 x 5,632
    # fewer)
    ("qwen2_moe", "decoder_sparse_step", 2, 8_085_743_616, 7_947_331_584),
    # transformers 5.24 on meta, AfmoeForCausalLM(AfmoeConfig(num_dense_layers=2)); expert_bias is on the MoE
    # layers, read as "not the first" (the same layers at the default 1): 64 experts more
    ("afmoe", "num_dense_layers", 2, 18_699_267_968, 18_699_268_032),
    # the MLP layer-type lists with layer 1 and the last flipped to dense (gen_field_probes `changed`): the dense
    # MLP and the experts had been read on "the first layer" and "the others"
    # transformers 5.24 on meta, HYV4ForCausalLM(HYV4Config(mlp_layer_types=...))
    ("hy_v4", "mlp_layer_types", None, 55_058_671_597, 58_278_193_133),
    # transformers 5.24 on meta, Dots3NoteForCausalLM(Dots3NoteTextConfig(mlp_layer_types=...))
    ("dots3_note_text", "mlp_layer_types", None, 267_846_988_416, 279_551_718_016),
    # transformers 5.24 on meta, AXK1ForCausalLM(AXK1Config(mlp_layer_types=...)): post_attention_layernorm on the
    # MoE layers
    ("axk1", "mlp_layer_types", None, 502_773_494_784, 502_773_509_120),
    # transformers 5.24 on meta, AXK2ForCausalLM(AXK2Config(mlp_layer_types=...)): its gated norm's fc1 / fc2
    ("axk2", "mlp_layer_types", None, 19_565_156_352, 19_565_287_424),
]


@pytest.mark.parametrize("model_type,key,value,truth,before", NOW_FOLLOWED)
def test_a_key_that_was_silently_wrong_is_counted_as_transformers_builds_it(model_type, key, value, truth, before):
    assert key in FAMILIES[model_type]["follows"]
    if value is None:   # a layer-type list: the probe's own change of the default
        value = changed(transformers.CONFIG_MAPPING[model_type]().to_dict()[key])
    config = transformers.CONFIG_MAPPING[model_type](**{key: value}).to_dict()
    spec = kvplan.parse_config(config, name=model_type)   # the record's refusal on: it plans
    assert spec.arch is not None, spec.arch_error
    from kvplan.weights.rule import param_count

    assert param_count(spec.arch).total == truth != before
    assert counts(model_type, {key: value}) == (truth, truth)   # and transformers builds that many today


def test_a_multimodal_tie_is_probed_as_its_checkpoint_class_ties():
    """AutoModelForCausalLM builds a multimodal config's language model from its text config, which ties by its
    own flag; Qwen3_5ForConditionalGeneration, the class the checkpoints load into, ties by the top-level one, as
    kvplan reads it. So the probe counts the tie as that class does, and a tied Qwen3.5 plans."""
    # transformers 5.24 on meta, Qwen3_5ForConditionalGeneration(Qwen3_5Config(tie_word_embeddings=True)) without
    # its visual tower: 7,936,684,544 (8,953,803,264 untied, the default: its 248,320 x 4,096 lm_head less)
    assert counts("qwen3_5", {"tie_word_embeddings": True}) == (7_936_684_544, 7_936_684_544)
    assert 8_953_803_264 - 7_936_684_544 == 248_320 * 4_096   # Qwen3_5TextConfig's vocab x hidden
    assert "tie_word_embeddings" in FAMILIES["qwen3_5"]["follows"]
    # Llama4ForConditionalGeneration ties by its text config's flag: the top-level one kvplan reads is refused
    assert FAMILIES["llama4"]["fixed"] == {"tie_word_embeddings": False}


def test_a_wrapper_key_probed_at_the_top_level_is_refused_there():
    """Emu3's record was probed at Emu3Config's top level, where kvplan reads tie_word_embeddings; its text config
    (emu3_text_model, the type kvplan counts) keeps false, so the refusal reads the top level too."""
    assert FAMILIES["emu3"]["fixed"] == {"tie_word_embeddings": False}
    spec = kvplan.parse_config(transformers.CONFIG_MAPPING["emu3"](tie_word_embeddings=True).to_dict(), name="emu3")
    assert spec.arch is None and "does not follow this config's tie_word_embeddings True " in spec.arch_error
    assert kvplan.parse_config(transformers.CONFIG_MAPPING["emu3"]().to_dict(), name="emu3").arch is not None
