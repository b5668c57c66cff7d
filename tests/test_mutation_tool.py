"""tools/mutation.py's bookkeeping (#26 item 5): how a survivor is keyed, which reasons a finished run drops, and how
the report marks a survivor with no reason. The mutmut run itself is opt-in and never runs here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "tools" / "mutation.py")
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)

MOD = "kvplan/planning/engines/lora.py"


def test_a_key_is_the_module_and_its_lines_with_spaces_squeezed():
    diff = ["-        if a  and b:", "+        if a or b:"]
    assert mutation.reason_key(MOD, diff) == MOD + " | - if a and b: / + if a or b:"


def _shard(survivors: dict, seconds=12.5) -> dict:
    return {"module": MOD, "tests": [], "seconds": seconds, "survivors": survivors,
            "statuses": {**{n: "survived" for n in survivors}, "x_f__mutmut_9": "killed"}}


@pytest.fixture
def reasons_file(tmp_path, monkeypatch):
    path = tmp_path / "reasons.json"
    monkeypatch.setattr(mutation, "REASONS", path)
    return path


def test_a_finished_run_drops_the_reasons_no_survivor_uses_and_the_claims_it_contradicts(reasons_file):
    standing = ["-    x = 1", "+    x = 2"]
    claimed = ["-    y = 1", "+    y = 0"]
    reasons = {mutation.reason_key(MOD, standing): "equivalent: x is never read",
               mutation.reason_key(MOD, claimed): "killed since this shard ran: test_a.py::test_y fails on it",
               mutation.reason_key(MOD, ["-    z = 1", "+    z = 3"]): "killed since this shard ran: test_z",
               "kvplan/planning/engines/hf.py | - a / + b": "equivalent: another module's reason stays"}
    reasons_file.write_text(json.dumps(reasons))
    dropped = mutation.prune_reasons(MOD, _shard({"x_f__mutmut_1": standing, "x_f__mutmut_2": claimed}))
    # z's mutant was killed (no survivor uses it); y survived although a reason said a test kills it: both go
    assert sorted(dropped) == sorted([mutation.reason_key(MOD, claimed), mutation.reason_key(MOD, ["-    z = 1",
                                                                                                   "+    z = 3"])])
    assert json.loads(reasons_file.read_text()) == {
        mutation.reason_key(MOD, standing): "equivalent: x is never read",
        "kvplan/planning/engines/hf.py | - a / + b": "equivalent: another module's reason stays"}


def test_a_run_stopped_midway_drops_nothing(reasons_file):
    reasons = {mutation.reason_key(MOD, ["-    z = 1", "+    z = 3"]): "killed since this shard ran: test_z"}
    reasons_file.write_text(json.dumps(reasons))
    assert mutation.prune_reasons(MOD, _shard({}, seconds=None)) == []
    assert json.loads(reasons_file.read_text()) == reasons


def test_the_report_scores_a_shard_and_marks_a_survivor_without_a_reason():
    shard = _shard({"kvplan.planning.engines.lora.x_f__mutmut_1": ["-    x = 1", "+    x = 2"]})
    shard["statuses"]["x_f__mutmut_3"] = "timeout"
    shard["statuses"]["x_f__mutmut_4"] = "segfault"
    report = mutation.write_report({MOD: shard}, {})
    # 2 killed (one a timeout) of 3 decided = 66.7 %; 1 of 3 without the timeout = 33.3 %; the segfault apart
    assert f"| `{MOD}` | 4 | 2 (1) | 1 | 1 | 66.7 | 5 | 33.3 | 12.5 |" in report
    assert "- `x_f__mutmut_1` (kvplan/planning/engines/lora.py): `-    x = 1` `+    x = 2` — **no reason" in report
