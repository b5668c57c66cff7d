"""The int / bool fields a family's KV figure follows, and the refusal where it does not
(tools/gen_kv_field_probes.py writes kvplan/data/kv_field_probes.json; kvplan.config.verified `kv_fixed_refusal`).

The conformance sweep proves a cache rule at the class defaults; a field it never changes can move the cache
transformers builds while kvplan's figure stays put (CPM-Ant's `dim_head`). The probe changed each field alone and
measured transformers' cache after one prefill; here kvplan is re-run on those configs (config classes only, no
model built) against the figures the record stores: where it says `follows`, kvplan's raw KV bytes are
transformers'; where it says `kv_fixed`, the raw figure is still off (the record is not stale) and kvplan refuses the
KV figure naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.config import verified
from kvplan.errors import UnsupportedArchitectureError

transformers = pytest.importorskip("transformers")

from validation.conformance import config_dict, kvplan_figures, settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECORD = json.loads((ROOT / "kvplan" / "data" / "kv_field_probes.json").read_text())
FAMILIES = RECORD["families"]


@pytest.fixture(autouse=True)
def _enforce():
    yield
    verified.ENFORCE = True   # kvplan_figures turns the refusals off to read the raw rule


def _variant(mt: str, key: str, value) -> dict:
    return {**settings(mt, FAMILIES[mt].get("variant", "default")), key: value}


def _sample(kind: str, every: int) -> list[tuple[str, str]]:
    """Every `every`-th (family, key) of that kind, in name order: a spread over the record, the same each run."""
    pairs = sorted((mt, key) for mt, row in FAMILIES.items() if isinstance(row, dict) and isinstance(row.get(kind), dict)
                   for key in row[kind])
    return pairs[::every]


def test_the_record_covers_every_family_the_sweep_found_kv_exact():
    exact = {mt for mt, f in json.loads(Path(verified._DATA).read_text())["families"].items()
             if f.get("kv") == "exact" and mt in transformers.CONFIG_MAPPING}
    assert exact <= set(FAMILIES), sorted(exact - set(FAMILIES))[:10]
    assert RECORD["transformers"] == transformers.__version__
    for mt, row in FAMILIES.items():   # a family the run did not reach says so, in one line
        assert isinstance(row.get("not_probed"), str) or "follows" in row or "kv_fixed" in row, mt


@pytest.mark.parametrize("model_type,key", _sample("follows", 12))
def test_a_key_the_cache_rule_follows_is_sized_as_transformers_cached_it(model_type, key):
    truth = FAMILIES[model_type]["follows"][key]
    ours = kvplan_figures(config_dict(model_type, _variant(model_type, key, truth["value"])), truth["prompt"])
    assert ours.get("storage") == truth["storage"], (model_type, key, truth, ours.get("kv_refused"))
    if truth["device"] == "meta":
        assert ours["logical"] == truth["logical"]


FIXED = _sample("kv_fixed", 1)


@pytest.mark.parametrize("model_type,key", FIXED or [pytest.param("", "", marks=pytest.mark.skip("none fixed"))])
def test_a_key_the_cache_rule_does_not_follow_refuses_the_kv_figure(model_type, key):
    row = FAMILIES[model_type]["kv_fixed"][key]
    variant = _variant(model_type, key, row["value"])
    assert transformers.CONFIG_MAPPING[model_type]().to_dict()[key] == row["default"]
    raw = kvplan_figures(config_dict(model_type, variant), row["truth"]["prompt"])
    assert raw.get("storage") != row["truth"]["storage"]   # the record is not stale: the raw rule is off there
    verified.ENFORCE = True
    with pytest.raises(UnsupportedArchitectureError, match=f"does not follow this config's {key} "):
        kvplan.parse_config(config_dict(model_type, variant), name=model_type)
    assert kvplan.parse_config(config_dict(model_type, settings(model_type, FAMILIES[model_type].get(
        "variant", "default"))), name=model_type).layers   # the class default is what was proven


def test_a_synthetic_kv_fixed_key_refuses_only_a_moved_value(monkeypatch):
    """The refusal itself, on a record that says llama's cache rule does not follow `attention_bias` (it does): a
    config at the recorded value is sized, one off it names the key in one line."""
    monkeypatch.setattr(verified, "_kv_probes", lambda: {"llama": {"kv_fixed": {"attention_bias": {"default": False}}}})
    config = transformers.CONFIG_MAPPING["llama"]().to_dict()
    assert kvplan.parse_config(config, name="x").layers
    with pytest.raises(UnsupportedArchitectureError) as err:
        kvplan.parse_config({**config, "attention_bias": True}, name="x")
    assert str(err.value) == ("x: kvplan's cache rule for model_type 'llama' does not follow this config's "
                              "attention_bias True (proven at its class default False) as transformers "
                              f"{transformers.__version__} builds it, so it gives no KV figure: open an issue with "
                              "the model id")


def test_cpmant_reads_its_own_dim_head():
    """CPM-Ant's attention is `num_heads x dim_head` wide (transformers 5.24 modeling_cpmant.py CpmAntAttention,
    K/V viewed as (batch, len, num_heads, dim_head)), not hidden_size / heads. At dim_head 64 (default 128 =
    4096 / 32) transformers on meta caches 405,798,912 B after a 1,000-token prefill (the probe's measurement):
    48 layers x 2 (K, V) x 32 heads x 64 x (1,000 + 32 learned prompt tokens) x 2 B. kvplan read hidden / heads
    and said 811,597,824 B, twice that, with no warning."""
    for dim_head, truth in ((64, 405_798_912), (256, 48 * 2 * 32 * 256 * 1032 * 2)):   # transformers; hand
        ours = kvplan_figures(config_dict("cpmant", {"dim_head": dim_head}), 1000)
        assert ours["storage"] == ours["logical"] == truth
    probed = FAMILIES["cpmant"]["follows"]["dim_head"]   # the probe's own run: 5,000 tokens on meta
    assert (probed["value"], probed["prompt"]) == (64, 5000)
    assert probed["storage"] == 48 * 2 * 32 * 64 * 5032 * 2   # hand: as above, 5,000 + 32 tokens


def test_readme_quotes_the_kv_probe_record():
    """README's KV-probe sentence is the record's own count: keys that follow, families probed and not."""
    import re
    from pathlib import Path

    record = json.loads((Path(__file__).resolve().parents[1] / "kvplan" / "data" / "kv_field_probes.json").read_text())
    fams = record["families"]
    probed = [f for f, v in fams.items() if "variant" in v]
    follows = sum(len(v.get("follows", {})) for v in fams.values())
    fixed = sum(len(v.get("kv_fixed", {})) for v in fams.values())
    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    m = re.search(r"([\d,]+) keys of (\d+) families follow the cache transformers builds and (none|\d+) is refused; "
                  r"the other (\d+) KV-exact families", text)
    assert m, "README's KV-probe sentence is missing"
    assert (int(m[1].replace(",", "")), int(m[2]), 0 if m[3] == "none" else int(m[3]), int(m[4])) == (
        follows, len(probed), fixed, len(fams) - len(probed))
