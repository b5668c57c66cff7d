"""Conformance against transformers itself (validation/conformance.py).

The whole sweep over every causal-LM architecture transformers ships takes ~15 minutes on 2 cores, so it runs as
`python -m validation.conformance --write-data` and its record is committed (docs/coverage.md,
kvplan/data/conformance.json). The default test run:

- re-runs a fast subset, one architecture per kind of rule (GQA, a sliding variant, gated DeltaNet hybrid, MLA with
  indexer keys, a Mamba-2 pattern, per-layer head dims, MoE counted from traits, an encoder-decoder's decoder,
  extras, lightning and CCA states, state held on modules), against the real model built on the meta device (CPU, shrunk, where meta
  cannot run it): KV bytes and parameter count must be exact;
- checks the committed record: made with the installed transformers, the markdown's counts equal the data's, and
  every family it measured wrong is refused by kvplan (so no face ever shows that number).

- re-runs one family through the sweep's own worker subprocess (test_sweep_slice_through_the_worker_processes).

`KVPLAN_CONFORMANCE_FULL=1` re-runs the whole sweep here and fails on any "wrong" that kvplan does not refuse;
tests/test_conformance_live.py re-runs kvplan (config classes only) on every row the sweep stored.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

import kvplan  # noqa: E402
from kvplan.config import verified  # noqa: E402
from validation import conformance  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "kvplan" / "data" / "conformance.json").read_text())

# (model_type, variant, parameters exact?): where the count is not exact yet, kvplan must refuse it instead
FAST = [
    ("llama", "default", True),            # GQA, the generic builder's baseline
    ("qwen2", "sliding", True),            # use_sliding_window on: max_window_layers
    ("qwen3_5_text", "default", True),     # gated DeltaNet hybrid: conv + recurrent state, q gate
    ("deepseek_v32", "default", True),     # MLA latent + lightning-indexer keys, MoE from first_k_dense_replace
    ("olmoe", "default", True),            # MoE without a hand-written rule: traits read off transformers' modules
    ("nemotron_h", "default", True),       # layers_block_type: Mamba-2 state, attention, MLP and MoE blocks
    ("gemma4_text", "default", True),      # per-layer head dims (per_layer_config): 512 on full layers
    ("mimo_v2_flash", "default", True),    # a family rule: sliding layers with 2x KV heads, V head dim 128
    ("bart", "default", True),             # an encoder-decoder's causal LM: decoder_* keys, cross-attention weights
    ("bert", "decoder", True),             # BERT as a decoder: top-level extras (token types, the LM head transform)
    ("kimi_linear", "default", True),      # KDA hybrid: MLA on attention layers, its linear mixers as extras
    ("minimax", "default", True),          # lightning attention state in the model dtype
    ("zaya", "default", True),             # CCA: a conv and a delayed-value state beside the KV cache
    ("deepseek_v4", "default", True),      # compressed attention: window K = V, CSA / HCA; hyper-connections
    ("inkling_text", "default", True),     # attention + four float32 short-conv states per layer, hybrid_sliding
    ("dots3_note_text", "default", True),  # float32 indexer keys beside a bf16 MLA latent
    ("recurrent_gemma", "default", True),  # window K / V in generate's cache, conv and RG-LRU states on the modules
]


@pytest.mark.slow
@pytest.mark.parametrize("model_type,variant,params_exact", FAST)
def test_fast_subset_is_exact_against_transformers(model_type, variant, params_exact):
    settings = dict(conformance.variants(model_type))[variant]
    row = conformance.run_one(model_type, variant, settings)
    verified.ENFORCE = True   # run_one measures the raw rules; leave the refusals on for later tests
    assert row.kv_status == "exact", (row.kv_measured, row.kv_kvplan, row.reason)
    assert row.kv_measured > 0
    if params_exact:
        assert row.params_status == "exact", (row.params_measured, row.params_kvplan, row.reason)
    else:   # not exact yet (Mamba-2 mixers, per-layer heads, attention sinks): refused at run time, never shown
        assert DATA["families"][model_type]["params"] != "exact"
        model = kvplan.parse_config(transformers.CONFIG_MAPPING[model_type]().to_dict(), name=model_type)
        assert model.arch is None


def test_record_is_for_the_installed_transformers():
    assert DATA["transformers"] == transformers.__version__


def test_markdown_counts_equal_the_data():
    text = (ROOT / "docs" / "coverage.md").read_text()
    counts = _counts(DATA["families"])
    for aspect, label in (("kv", "KV bytes"), ("params", "parameters")):
        line = next(l for l in text.splitlines() if l.startswith(f"- {label}:"))
        numbers = [int(n) for n in re.findall(r"(\d+) (?:exact|refused|wrong)", line)]
        assert numbers == [counts[aspect][s] for s in ("exact", "refused", "wrong")], line


def _counts(families: dict) -> dict:
    built = [f for f in families.values() if f["kv"] != "no-build"]
    return {a: {s: sum(1 for f in built if f[a] == s) for s in ("exact", "refused", "wrong")}
            for a in ("kv", "params")}


WRONG_KV = sorted(mt for mt, f in DATA["families"].items() if f["kv"] == "wrong")
WRONG_PARAMS = sorted(mt for mt, f in DATA["families"].items() if f["params"] == "wrong" and f["kv"] != "wrong")
# beside the families the record measured wrong (there may be none), one it measured exact, marked wrong in a
# synthetic record: the refusal is exercised on every run, whatever the record holds
SYNTHETIC = "llama (synthetic record)"


def _as_measured_wrong(monkeypatch, model_type: str, aspect: str) -> str:
    """The committed record with `model_type`'s `aspect` ("kv" or "params") measured wrong by +12.5 %."""
    families = {**DATA["families"], model_type: {**DATA["families"][model_type], aspect: "wrong",
                                                 f"{aspect}_error": "+12.5 %"}}
    monkeypatch.setattr(verified, "_table", lambda: {"transformers": DATA["transformers"], "families": families})
    return model_type


@pytest.mark.parametrize("model_type", WRONG_KV + [SYNTHETIC])
def test_a_family_measured_wrong_for_kv_is_refused(model_type, monkeypatch):
    error = DATA["families"].get(model_type, {}).get("kv_error")
    if model_type == SYNTHETIC:
        model_type, error = _as_measured_wrong(monkeypatch, "llama", "kv"), "+12.5 %"
    config = transformers.CONFIG_MAPPING[model_type]().to_dict()
    with pytest.raises(kvplan.KVPlanError, match=re.escape(f"({error} on its default config)")):
        kvplan.parse_config(config, name=model_type)


@pytest.mark.parametrize("model_type", WRONG_PARAMS + [SYNTHETIC])
def test_a_family_measured_wrong_for_parameters_gets_no_weights(model_type, monkeypatch):
    error = DATA["families"].get(model_type, {}).get("params_error")
    if model_type == SYNTHETIC:
        model_type, error = _as_measured_wrong(monkeypatch, "llama", "params"), "+12.5 %"
    config = transformers.CONFIG_MAPPING[model_type]().to_dict()
    if DATA["families"][model_type]["kv"] == "refused":   # kvplan cannot size its cache either: refused whole
        with pytest.raises(kvplan.KVPlanError):
            kvplan.parse_config(config, name=model_type)
        return
    model = kvplan.parse_config(config, name=model_type)   # its cache, measured exact, still stands
    assert model.arch is None and "does not match transformers" in model.arch_error
    assert f"({error} on its default config)" in model.arch_error
    with pytest.raises(kvplan.KVPlanError, match="does not match transformers"):
        model.require_arch()


@pytest.mark.slow
def test_sweep_slice_through_the_worker_processes(tmp_path):
    """The default-run slice of the whole sweep (issue #26 item 6): gpt2 (Conv1D projections, learned positions,
    tied head) through the same path, a worker subprocess writing rows that `families` folds into the record's
    statuses, and the same check as the full run; its statuses equal the committed record's (exact, exact)."""
    rows = conformance.sweep(["gpt2"], workers=1, scratch=tmp_path)
    fam = conformance.families(rows)["gpt2"]
    assert (fam["kv"], fam["params"]) == (DATA["families"]["gpt2"]["kv"], DATA["families"]["gpt2"]["params"])
    assert (fam["kv"], fam["params"]) == ("exact", "exact") and fam["cls"] == "GPT2LMHeadModel"


@pytest.mark.skipif(not os.environ.get("KVPLAN_CONFORMANCE_FULL"), reason="the whole sweep: ~15 min on 2 cores")
def test_whole_sweep_has_no_unrefused_wrong(tmp_path):
    rows = conformance.sweep(scratch=tmp_path)
    families = conformance.families(rows)
    recorded = DATA["families"]
    for mt, fam in families.items():
        for aspect in ("kv", "params"):
            if fam[aspect] == "wrong":
                assert recorded.get(mt, {}).get(aspect) == "wrong", f"{mt} {aspect}: wrong and not refused"
