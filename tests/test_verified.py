"""Never a silent guess: a figure kvplan has not verified against transformers says so in every face (API, CLI text
and JSON, plan notes, every app page that shows a number), and a figure the conformance sweep measured wrong is
refused with the class and the error named (kvplan/config/verified.py, data from validation/conformance.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.cli import main
from kvplan.config import verified
from kvplan.errors import UnsupportedArchitectureError
from kvplan.sources.files import read_config_file
from kvplan.sources.library import bundled_index

UNVERIFIED = "THUDM/chatglm3-6b"     # chatglm ships only as remote code: transformers has no class for it
VERIFIED = "meta-llama/Llama-3.1-8B"
LLAMA = read_config_file(bundled_index()["meta-llama/llama-3.1-8b"])


@pytest.fixture
def table(monkeypatch):
    """A conformance record that says llama's KV rule (or its parameter rule) was measured wrong."""
    def use(**llama):
        data = {"transformers": "5.24.0", "families": {"llama": {"kv": "exact", "params": "exact",
                                                                 "cls": "LlamaForCausalLM", **llama}}}
        monkeypatch.setattr(verified, "_table", lambda: data)
    return use


def test_api_marks_an_unverified_family_and_not_a_verified_one():
    est = kvplan.estimate(UNVERIFIED, 4096)
    assert est.verified is False and "'chatglm' is not one transformers" in est.warnings[0]
    good = kvplan.estimate(VERIFIED, 4096)
    assert good.verified is True and good.warnings == []
    assert kvplan.load_model(UNVERIFIED).verified is False


def test_a_family_measured_wrong_is_refused_naming_class_and_error(table):
    table(kv="wrong", kv_error="-35.7 %")
    with pytest.raises(UnsupportedArchitectureError, match=r"LlamaForCausalLM.*-35\.7 %"):
        kvplan.parse_config(LLAMA, name="llama")


def test_parameters_measured_wrong_leave_the_cache_but_refuse_the_plan(table):
    table(params="wrong", params_error="+26.9 %")
    model = kvplan.parse_config(LLAMA, name="llama")
    assert kvplan.estimate(model, 4096).kv_cache_bytes == 536_870_912   # the KV rule still stands
    assert model.arch is None and "+26.9 %" in model.arch_error
    with pytest.raises(kvplan.ConfigError, match=r"\+26\.9 %"):
        kvplan.plan(model, max_model_len=4096)


def test_an_unread_structural_field_is_named():
    # Nemotron-H's layer pattern on a llama config: kvplan does not read it for llama, so it must say so
    model = kvplan.parse_config({**LLAMA, "hybrid_override_pattern": "M-M*-"}, name="odd")
    assert any("hybrid_override_pattern" in w for w in model.warnings)
    assert kvplan.estimate(model, 1024).verified is False


def test_known_and_read_fields_are_not_named():
    assert kvplan.load_model(VERIFIED).warnings == ()
    assert kvplan.load_model("Qwen/Qwen3-30B-A3B").warnings == ()   # MoE keys: read by the weights count


def test_a_wrapped_text_config_knows_its_own_class_keys():
    # gemma-3-27b-it's text_config is a Gemma3TextConfig, whose keys (conformance.json gemma3_text) hold
    # attn_logit_softcapping; the wrapper's row (gemma3) names only its own top-level keys, so the key was called
    # unread inside the wrapper and not on the flat gemma-3-1b-it. A key neither class has is still named
    data = read_config_file(bundled_index()["google/gemma-3-27b-it"])
    soft = {**data, "text_config": {**data["text_config"], "attn_logit_softcapping": 50.0}}
    assert kvplan.parse_config(soft, name="g").warnings == ()
    moe = {**data, "text_config": {**data["text_config"], "num_experts": 8}}
    assert kvplan.parse_config(moe, name="g").warnings == (
        "config field(s) num_experts may change the cache or the weights and kvplan does not read them: the "
        "figures ignore them",)


def test_plan_notes_and_fields_carry_the_warning():
    p = kvplan.plan(UNVERIFIED, max_model_len=4096)
    assert p.verified is False and p.notes[0].startswith("not verified: model_type 'chatglm'")
    assert kvplan.plan(VERIFIED, max_model_len=4096).verified is True


@pytest.mark.parametrize("command", [["estimate", UNVERIFIED, "--seq-len", "4096"],
                                     ["plan", UNVERIFIED, "--max-model-len", "4096"]])
def test_cli_text_shows_the_warning_under_the_headline(capsys, command):
    assert main(command) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("WARNING: model_type 'chatglm'")


@pytest.mark.parametrize("command", [["estimate", UNVERIFIED, "--seq-len", "4096", "--json"],
                                     ["plan", UNVERIFIED, "--max-model-len", "4096", "--json"]])
def test_cli_json_carries_verified_and_warnings(capsys, command):
    assert main(command) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] is False and data["warnings"]


def test_every_app_page_with_a_number_shows_the_warning(offline_app):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    for page in ("app_pages/estimate.py", "app_pages/compare.py", "app_pages/capacity.py"):
        for model, shown in ((UNVERIFIED, True), (VERIFIED, False)):
            at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=30)
            at.query_params["model"] = model
            at.run()
            at.switch_page(page).run()
            assert not at.exception, page
            warned = any("Not verified" in w.value and "chatglm" in w.value for w in at.warning)
            assert warned is shown, (page, model)
