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
