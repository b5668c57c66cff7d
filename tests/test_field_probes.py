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
from tools.gen_field_probes import counts, probe_value  # noqa: E402

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
