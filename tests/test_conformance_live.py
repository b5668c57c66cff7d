"""Issue #26 (item 1): live conformance. kvplan against every transformers figure the sweep stored in
docs/coverage.json, on every run of the tests, from config classes only (no model is built: ~20 s in all).

`python -m validation.conformance` built each architecture in transformers and stored what transformers measured
(KV storage and logical bytes after the prefill, the whole model's and its language model's parameters) beside
kvplan's figures. Here each row's config dict is rebuilt as the sweep built it (`conformance.config_for`: the
config class, the variant and its repair, `to_dict()`; its sha256 equals the row's, so it is that dict), kvplan
is run on it again (`conformance.kvplan_figures`, the sweep's own) and judged again (`conformance.judge`):

- where the row says exact, kvplan's figures equal transformers' stored ones, so a rule that drifts fails here
  naming its family, long before the next sweep;
- where it says wrong, kvplan's figure still differs (a family fixed silently fails too: re-run the sweep, so
  the record and kvplan's refusal of it are lifted together); where it says refused, kvplan still refuses;
- kvplan/data/conformance.json, which decides at run time what is verified and what is refused
  (kvplan.config.verified), is exactly the verdicts of these rows.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from kvplan.config import verified  # noqa: E402
from validation import conformance  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ROWS = json.loads((ROOT / "docs" / "coverage.json").read_text())
DATA = json.loads((ROOT / "kvplan" / "data" / "conformance.json").read_text())
MEASURED = [r for r in ROWS if r["kv_measured"] is not None]
# transformers' side of a row, as the sweep stored it; judge() fills kvplan's side again
TRUTH = ("model_type", "variant", "cls", "device", "prompt", "kv_measured", "kv_logical_measured",
         "params_whole_measured", "params_text_measured", "params_cls")


def _judged(row: dict) -> tuple[conformance.Row, dict]:
    config = conformance.config_for(row["model_type"], row["variant"])
    assert conformance.config_sha(config) == row["config_sha"], (
        f"{row['model_type']} {row['variant']}: the config class no longer builds the config the sweep measured: "
        "re-run python -m validation.conformance --write-data")
    ours = conformance.kvplan_figures(config, row["prompt"])
    again = conformance.Row(**{k: row[k] for k in TRUTH})
    conformance.judge(again, ours)
    return again, ours


@pytest.fixture(autouse=True)
def _refusals_back_on(monkeypatch):
    """kvplan_figures measures the raw rules (verified.ENFORCE off); the rest of the run keeps the refusals."""
    monkeypatch.setattr(verified, "ENFORCE", True)


def test_every_built_row_has_transformers_figures():
    assert len(MEASURED) > 150 and all(r["kv_status"] != "no-build" for r in MEASURED)
    assert all(r["params_whole_measured"] and r["config_sha"] for r in MEASURED)


@pytest.mark.parametrize("row", MEASURED, ids=[f"{r['model_type']}-{r['variant']}" for r in MEASURED])
def test_kvplan_equals_the_stored_transformers_figures(row):
    again, ours = _judged(row)
    name = f"{row['model_type']} ({row['variant']})"
    if row["kv_status"] == "exact":
        assert (ours.get("storage"), ours.get("logical") if row["device"] == "meta" else None) == (
            row["kv_measured"], row["kv_logical_measured"] if row["device"] == "meta" else None), (
            f"{name}: kvplan's KV bytes are no longer transformers' ({ours.get('kv_refused', '')})")
    elif row["kv_status"] == "wrong":
        assert again.kv_status == "wrong", f"{name}: the KV rule measured wrong now gives transformers' figure"
    else:
        assert "kv_refused" in ours, f"{name}: kvplan now sizes a cache it refused when measured"
    assert again.params_text_only == row["params_text_only"], f"{name}: kvplan counts other towers than measured"
    truth = row["params_text_measured"] if row["params_text_only"] else row["params_whole_measured"]
    assert truth == row["params_measured"]
    if row["params_status"] == "exact":
        assert ours.get("params") == truth, (
            f"{name}: kvplan's parameter count {ours.get('params')} is no longer transformers' {truth} "
            f"({ours.get('params_refused', '')})")
    elif row["params_status"] == "wrong":
        assert ours["params"] != truth, f"{name}: the parameter rule measured wrong now gives transformers' figure"
    elif row["params_status"] == "refused":
        assert "params_refused" in ours, f"{name}: kvplan now counts parameters it refused when measured"
    assert (again.kv_status, again.params_status) == (row["kv_status"], row["params_status"]), name


def test_the_run_time_record_is_the_verdict_of_these_rows():
    """What `verified` means at run time is what the rows above prove, family by family."""
    assert conformance.families(ROWS) == DATA["families"]
    assert DATA["transformers"] == transformers.__version__


def test_rows_carry_every_field_the_sweep_writes():
    """A row written by an older sweep (before the whole-model and config-sha fields) fails here, not above."""
    names = {f.name for f in fields(conformance.Row)}
    assert all(set(r) == names for r in ROWS)
