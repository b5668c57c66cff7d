"""Family traits and extras (kvplan/config/traits.py, data from tools/gen_family_traits.py): the tensors a family adds
to the standard block are counted from the config's own sizes, so a resized checkpoint is counted right."""

from __future__ import annotations

import pytest

import kvplan
from kvplan.config import traits as config_traits
from kvplan.config.reader import ConfigReader
from kvplan.errors import ConfigError
from kvplan.weights.rule import inventory, param_count

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_extra_dimensions_are_sizes_fields_multiples_and_constants():
    reader = ConfigReader({"type_vocab_size": 2}, "bert")
    size = {"hidden": 768, "inter": 3072, "rec0*rec2": 5760, "vocab": lambda: 30522, "_reader": reader}
    # the size table's own entries (inputs): numel multiplies them
    assert config_traits.numel(["hidden", "inter"], size) == 768 * 3072
    assert config_traits.numel(["2*inter"], size) == 6144
    assert config_traits.numel(["rec0*rec2", "hidden"], size) == 5760 * 768
    assert config_traits.numel(["field:type_vocab_size", "hidden"], size) == 2 * 768
    assert config_traits.numel([1], size) == 1
    # the table's vocab entry (an input)
    assert config_traits.numel(["vocab"], size) == 30522
    with pytest.raises(ConfigError, match="experts"):
        config_traits.numel(["experts"], size)


def _truth(model_type: str, **changes) -> tuple[int, int]:
    cfg = transformers.CONFIG_MAPPING[model_type](**changes)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    spec = kvplan.parse_config(cfg.to_dict(), name=model_type)
    return sum(p.numel() for p in model.parameters()), param_count(spec.require_arch()).total


# one family per way extras are read: an attention output gate on every layer and an expert bias on MoE layers
# (AFMoE), top-level tables and a non-gated MLP with biases (BERT as a decoder), a hybrid whose linear-attention
# mixers are its own tensors (Kimi-Linear), tensors only on full-attention layers (MiMo-V2-Flash)
@pytest.mark.parametrize("model_type,changes", [
    ("afmoe", {}), ("bert", {"is_decoder": True}), ("kimi_linear", {}), ("mimo_v2_flash", {}),
])
def test_extras_make_the_count_exact_at_the_default_and_a_resized_config(model_type, changes):
    assert config_traits.traits_for(model_type) is not None
    truth, ours = _truth(model_type, **changes)
    assert ours == truth
    cfg = transformers.CONFIG_MAPPING[model_type](**changes)
    bigger = {"hidden_size": cfg.hidden_size * 2, "vocab_size": cfg.vocab_size + 64}
    truth, ours = _truth(model_type, **changes, **bigger)
    assert ours == truth


def test_extras_land_in_the_groups_and_layers_the_planner_splits():
    spec = kvplan.parse_config(transformers.CONFIG_MAPPING["afmoe"]().to_dict(), name="afmoe")
    gates = [t for t in inventory(spec.arch) if t.group == "attention" and t.numel == 2048 * 2048 and t.layer == 5]
    assert len(gates) == 5   # q, k, v, o and the output gate [q_dim 2,048, hidden 2,048]
    assert any("self_attn.gate_proj.weight [q_dim x hidden] (all)" in n for n in spec.arch.notes)


# Families whose class has a flag that switches the q/k norms, each counted with the flag flipped from its class
# default against transformers on meta (tools/gen_family_traits.py finds them by flipping): GLM-4.5 sets use_qk_norm
# true where Glm4MoeConfig defaults to false (+92 x 2 x 128 = 23,552 parameters), Command R+ use_qk_norm true
# (Cohere's [heads, head_dim] LayerNorm weights), StableLM-2-12B qk_layernorm true (one LayerNorm per head),
# Persimmon qk_layernorm false (its per-head LayerNorms with biases gone), Sarvam-MoE use_qk_norm false.
QK_FLAGS = {"glm4_moe": "use_qk_norm", "cohere": "use_qk_norm", "stablelm": "qk_layernorm",
            "persimmon": "qk_layernorm", "sarvam_moe": "use_qk_norm"}


def test_every_family_with_a_qk_norm_flag_reads_it():
    found = {mt: t["qk_norm_flag"]["flag"] for mt, t in config_traits._table().items() if t.get("qk_norm_flag")}
    assert found == QK_FLAGS


@pytest.mark.parametrize("model_type", sorted(QK_FLAGS))
def test_a_qk_norm_flag_flipped_from_its_default_is_counted(model_type):
    flag = QK_FLAGS[model_type]
    default = getattr(transformers.CONFIG_MAPPING[model_type](), flag)
    on, off = _truth(model_type, **{flag: True}), _truth(model_type, **{flag: False})
    assert on[0] != off[0]                     # transformers builds different models: the flag matters
    assert on[1] == on[0] and off[1] == off[0], (model_type, flag, default)
