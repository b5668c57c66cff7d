"""SGLang's version-keyed rules (kvplan.planning.engines.sglang_rules) at each release boundary, and their texts
whole (#26). The boundaries are the ones sglang_rules.py cites from the released wheels (`sglang/srt/`):
configs/model_config.py `is_hybrid_swa_model` (SWA pool lists from 0.5.8), server_args.py :1278-1290 of 0.5.8
(gpt-oss's pool off with trtllm_mha or drafting until 0.5.10), `get_default_attn_backend` / overrides.py (SM100
pages: 64 from 0.5.9, fa4's 128 for asymmetric K / V from 0.5.19), `multimodal_model_archs` (Qwen3.5 from 0.5.9),
and the prefill CUDA-graph switches of 0.5.10-0.5.23 listed in `prefill_graphs_reserved`'s docstring."""
from __future__ import annotations

import pytest

from kvplan import load_model, plan
from kvplan.planning.engines.sglang_rules import multimodal, prefill_graphs_reserved, sm100_page, swa_pool

FULL = "every layer holds the full context"
POOL = ("sliding layers in SGLang's SWA pool, which holds swa_full_tokens_ratio x the full pool's tokens "
        "(model_config.is_hybrid_swa_model)")


# ----------------------------------------------------------------------------- the SWA pool

@pytest.mark.parametrize("architecture, version, sm, speculative, expected", [
    ("Gemma2ForCausalLM", (0, 5, 23), 9, False,
     (False, "SGLang disables its SWA pool for Gemma2ForCausalLM in every 0.5.x (disable_hybrid_swa_memory, "
             "model_overrides/gemma2_gemma3.py): " + FULL)),
    ("GptOssForCausalLM", (0, 5, 7), 9, False,
     (False, "SGLang 0.5.7 has no SWA pool by default (0.5.1-0.5.7 model_runner: only Gemma and gpt-oss ask for one "
             "and both are disabled): " + FULL)),
    ("GptOssForCausalLM", (0, 5, 8), 9, False, (True, POOL)),
    ("GptOssForCausalLM", (0, 5, 8), 10, False,
     (False, "SGLang 0.5.8 disables gpt-oss's SWA pool with trtllm_mha, Blackwell's default backend (server_args.py): "
             + FULL)),
    ("GptOssForCausalLM", (0, 5, 9), 9, True,
     (False, "SGLang 0.5.9 disables gpt-oss's SWA pool with speculative decoding (server_args.py): " + FULL)),
    ("GptOssForCausalLM", (0, 5, 10), 10, True, (True, POOL)),       # 0.5.10 keeps it on with either
    ("Step3p5ForCausalLM", (0, 5, 9), 9, False, (True, POOL)),        # listed from 0.5.9
    ("Step3p5ForCausalLM", (0, 5, 8), 9, False,
     (False, "Step3p5ForCausalLM is not in SGLang 0.5.8's SWA list (model_config.is_hybrid_swa_model): " + FULL)),
    ("", (0, 5, 23), 9, False,
     (False, "this architecture is not in SGLang 0.5.23's SWA list (model_config.is_hybrid_swa_model): " + FULL)),
])
def test_swa_pool_by_release(architecture, version, sm, speculative, expected):
    assert swa_pool(architecture, version, sm, speculative) == expected


# ----------------------------------------------------------------------------- Blackwell pages

def _page(version, architecture="LlamaForCausalLM", *, asymmetric=False, hybrid=False, speculative=False):
    return sm100_page(architecture, version, 10, mla=False, asymmetric=asymmetric, hybrid=hybrid,
                      speculative=speculative)


def test_sm100_pages_by_release():
    assert _page((0, 5, 9)) == 64                                     # trtllm_mha: page_size None -> 64
    assert _page((0, 5, 9), speculative=True) is None                 # drafting: not modelled, page 1
    assert _page((0, 5, 19), "FalconH1ForCausalLM", hybrid=True) is None   # Falcon-H1 keeps triton
    assert _page((0, 5, 18), "Qwen3NextForCausalLM", hybrid=True) is None  # hybrids read from 0.5.19
    assert _page((0, 5, 19), "Qwen3NextForCausalLM", hybrid=True) == 64
    assert _page((0, 5, 18), asymmetric=True) == 64                   # trtllm_mha until 0.5.19
    assert _page((0, 5, 19), asymmetric=True) == 128                  # fa4: page 128 for non-MLA models


# ----------------------------------------------------------------------------- multimodal classes

def test_qwen35_is_multimodal_from_0_5_9():
    assert multimodal("Qwen3_5ForConditionalGeneration", (0, 5, 9)) is True
    assert multimodal("Qwen3_5ForConditionalGeneration", (0, 5, 8)) is False


# ----------------------------------------------------------------------------- prefill CUDA graphs

def _graphs(version, architecture="LlamaForCausalLM", *, pp=1, dp_attention=1, lora=False, speculative=False,
            mla=False, dsa=False) -> bool:
    return prefill_graphs_reserved(version, architecture=architecture, pp=pp, dp_attention=dp_attention, lora=lora,
                                   speculative=speculative, mla=mla, dsa=dsa)


@pytest.mark.parametrize("version, settings, reserved", [
    ((0, 5, 9), {}, False), ((0, 5, 10), {}, True),                                   # opt-in before 0.5.10
    # 0.5.10-0.5.14: torch.compile piecewise graphs
    ((0, 5, 12), {"dp_attention": 2}, False), ((0, 5, 12), {"pp": 2}, False),
    ((0, 5, 12), {"architecture": "Qwen3NextForCausalLM"}, False),
    ((0, 5, 12), {"mla": True, "dsa": True}, False), ((0, 5, 13), {"mla": True, "dsa": True}, True),
    ((0, 5, 10), {"speculative": True}, False), ((0, 5, 11), {"speculative": True}, True),
    # 0.5.15-0.5.18: breakable graphs, which ignore PP
    ((0, 5, 15), {"pp": 2}, True),
    ((0, 5, 16), {"mla": True, "dsa": True}, False), ((0, 5, 17), {"mla": True, "dsa": True}, True),
    ((0, 5, 17), {"mla": True}, False), ((0, 5, 18), {"mla": True}, True),
    ((0, 5, 16), {"lora": True}, False), ((0, 5, 16), {"dp_attention": 2}, False),
    ((0, 5, 17), {"lora": True}, True),
    ((0, 5, 17), {"architecture": "NemotronHForCausalLM"}, False),
    ((0, 5, 18), {"architecture": "NemotronHForCausalLM"}, True),
    ((0, 5, 17), {}, True),
    # Qwen3.5 joins the breakable multimodal list in 0.5.16
    ((0, 5, 15), {"architecture": "Qwen3_5ForConditionalGeneration"}, False),
    ((0, 5, 16), {"architecture": "Qwen3_5ForConditionalGeneration"}, True),
    # 0.5.19-0.5.23: off at PP > 1
    ((0, 5, 19), {"pp": 2}, False), ((0, 5, 19), {"lora": True}, True),
])
def test_prefill_graphs_by_release(version, settings, reserved):
    assert _graphs(version, **settings) is reserved


# ----------------------------------------------------------------------------- releases outside the ones read

def test_a_release_outside_the_ones_read_is_said():
    llama = load_model("meta-llama/Llama-3.2-1B")
    newer = plan(llama, engine="sglang", gpu="H100", max_model_len=8192, engine_version="0.5.24")
    # one warning (unread.newer_release), at the head of the notes, and no second "newer than" note beside it
    assert newer.warnings == ["SGLang 0.5.24 is newer than 0.5.23, the newest release kvplan read: its figures follow "
                              "0.5.23's rules, not checked against 0.5.24; plan --engine-version 0.5.23 for a release "
                              "kvplan has read"]
    assert newer.notes[0] == f"not verified: {newer.warnings[0]}"
    assert [n for n in newer.notes if "newer than" in n] == newer.notes[:1]
    older = plan(llama, engine="sglang", gpu="H100", max_model_len=8192, engine_version="0.4.3")
    assert ("SGLang 0.4.3 is older than 0.5.1, the oldest release kvplan's pool rules were read from: "
            "mem_fraction_static follows the 0.4.x start-up logs, the rest is planned with 0.5.1's rules"
            ) in older.notes
    for version in ("0.5.1", "0.5.23"):
        notes = plan(llama, engine="sglang", gpu="H100", max_model_len=8192, engine_version=version).notes
        assert not any("kvplan's rules were read from" in n or "pool rules were read from" in n for n in notes)
