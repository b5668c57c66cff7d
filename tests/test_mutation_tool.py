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
    assert f"| `{MOD}` | 4 | 2 (1) | 1 | 1 | 66.7 | 5 | 33.3 | 12.5 | older |" in report  # a record without a blob
    shard["blob"] = mutation.blob(MOD)
    assert f"| 12.5 | warm caches |" in mutation.write_report({MOD: shard}, {})   # no `isolated`: before 7594ed7
    shard["isolated"] = True
    # its timeout comes from a run that forked mutants from mutmut's main process: possibly a hang of the fork
    assert f"| 12.5 | forked timeouts |" in mutation.write_report({MOD: shard}, {})
    shard["forkserver"] = True
    assert f"| 12.5 | current |" in mutation.write_report({MOD: shard}, {})
    del shard["statuses"]["x_f__mutmut_3"], shard["forkserver"]
    assert f"| current |" in mutation.write_report({MOD: shard}, {})   # no timeout: the fork could not hang it
    assert "- `x_f__mutmut_1` (kvplan/planning/engines/lora.py): `-    x = 1` `+    x = 2` — **no reason" in report


def test_a_rerun_names_what_was_not_killed_and_keeps_the_kills():
    old = {"module": MOD, "tests": ["a"], "seconds": None, "timeout_multiplier": 15, "blob": "b1",
           "statuses": {"x_f__mutmut_1": "killed", "x_f__mutmut_2": "survived", "x_f__mutmut_3": "not checked",
                        "x_f__mutmut_4": "timeout", "x_g__mutmut_1": "no tests"},
           "survivors": {"x_f__mutmut_2": ["- a", "+ b"], "x_g__mutmut_1": ["- c", "+ d"]}}
    names = mutation.rerun_names(old)
    # killed and timeout stand; a mutant with no tests is a pattern (mutmut's exact lookup raises KeyError on it)
    assert names == ["x_f__mutmut_2", "x_f__mutmut_3", "x_g__mutmut_1*"]
    # the fresh copy lists every mutant, those it did not run "not checked"; it killed _2, _3 survived, _g1 killed
    new = {**old, "seconds": 40.0, "statuses": {"x_f__mutmut_1": "not checked", "x_f__mutmut_2": "killed",
                                                "x_f__mutmut_3": "survived", "x_f__mutmut_4": "not checked",
                                                "x_g__mutmut_1": "killed"},
           "survivors": {"x_f__mutmut_3": ["- e", "+ f"]}}
    merged = mutation.merge_again(old, new, names)
    assert merged["statuses"] == {"x_f__mutmut_1": "killed", "x_f__mutmut_2": "killed", "x_f__mutmut_3": "survived",
                                  "x_f__mutmut_4": "timeout", "x_g__mutmut_1": "killed"}
    assert merged["survivors"] == {"x_f__mutmut_3": ["- e", "+ f"]}
    assert merged["again"] == {"seconds": None, "tests": ["a"], "rerun": 3, "kills_kept": 2}
    assert merged["isolated"] is False   # the kills kept come from a run without isolated tests
    assert mutation.merge_again({**old, "isolated": True}, {**new, "isolated": True}, names)["isolated"] is True
    # the timeout kept (x_f__mutmut_4) is the old run's: forked from the main process unless that run was not
    assert merged["forkserver"] is False
    assert mutation.merge_again({**old, "forkserver": True}, {**new, "forkserver": True}, names)["forkserver"] is True
    assert mutation.counts(merged) == {"mutants": 5, "killed": 4, "survived": 1, "other": 0, "timeouts": 1}
    assert "40.0: a rerun of the 3 mutants a run stopped midway did not kill (2 kills kept from it)" \
        in mutation.write_report({MOD: merged}, {})


def test_a_rerun_is_refused_once_the_module_changed(monkeypatch, capsys):
    monkeypatch.setattr(mutation, "blob", lambda module, tree=None: "new")
    monkeypatch.setattr(mutation, "run_shard", lambda *a: pytest.fail("ran a changed module"))
    assert mutation.again({MOD: {"blob": "old"}}, ["lora.py"], 2) == 2
    assert "changed since its recorded run" in capsys.readouterr().err


def test_a_run_that_left_mutants_unchecked_is_not_recorded(monkeypatch, capsys, tmp_path):
    """mutmut stopped by a signal (or failing its clean run) leaves mutants "not checked": the whole record stays."""
    results = tmp_path / "mutation.json"
    old = {MOD: {**_shard({}), "blob": "b"}}
    results.write_text(json.dumps(old))
    monkeypatch.setattr(mutation, "RESULTS", results)
    monkeypatch.setattr(mutation, "REPORT", tmp_path / "mutation.md")
    monkeypatch.setattr(mutation, "REASONS", tmp_path / "reasons.json")
    stopped = _shard({})
    stopped["statuses"]["x_f__mutmut_10"] = "not checked"
    monkeypatch.setattr(mutation, "run_shard", lambda *a: stopped)
    assert mutation.main(["--only", "lora.py"]) == 0
    assert json.loads(results.read_text()) == old
    assert "1 mutants not checked (mutmut stopped, or its clean test run failed): nothing recorded" in \
        capsys.readouterr().err


def test_a_run_stopped_before_its_mutants_were_listed_is_not_recorded(monkeypatch, capsys, tmp_path):
    """mutmut stopped while it generated the mutants reports none: 0 / 0 is not a finished run (vllm_kv.py's was
    recorded so, its survivors' reasons pruned)."""
    results = tmp_path / "mutation.json"
    old = {MOD: {**_shard({"x_f__mutmut_1": ["- a", "+ b"]}), "blob": "b"}}
    results.write_text(json.dumps(old))
    reasons = {f"{MOD} | - a / + b": "equivalent: a test-only line"}
    (tmp_path / "reasons.json").write_text(json.dumps(reasons))
    monkeypatch.setattr(mutation, "RESULTS", results)
    monkeypatch.setattr(mutation, "REPORT", tmp_path / "mutation.md")
    monkeypatch.setattr(mutation, "REASONS", tmp_path / "reasons.json")
    monkeypatch.setattr(mutation, "run_shard", lambda *a: {**_shard({}), "statuses": {}})
    assert mutation.main(["--only", "lora.py"]) == 0
    assert json.loads(results.read_text()) == old
    assert json.loads((tmp_path / "reasons.json").read_text()) == reasons
    assert "no mutants (mutmut stopped before it generated them): nothing recorded" in capsys.readouterr().err


def test_every_test_a_shard_names_or_leaves_out_exists():
    """A shard's list names test files and `--deselect=tests/FILE::TEST` ids: a test renamed without its deselect
    joins the shard unseen (the 12 s, 10,000-layer checkpoint test, renamed "bounded_work", ran again in each
    checkpoint mutant it covers), and a deselect or file that names nothing is a stale line."""
    for module, tests in mutation.SHARDS.items():
        for entry in tests:
            path, _, test = entry.removeprefix("--deselect=").partition("::")
            assert (ROOT / path).is_file(), (module, entry)
            if test:
                assert f"def {test}(" in (ROOT / path).read_text(), (module, entry)
