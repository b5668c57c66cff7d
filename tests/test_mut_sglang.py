"""Tests that kill the mutants tools/mutation.py left alive in kvplan/planning/engines/sglang_notes.py and
sglang_layers.py (#26): every note an SGLang plan carries, pinned word for word (the note's text is its contract),
for inputs that make kvplan emit it and inputs that must not, with the numbers inside worked by hand here.

Cards (kvplan/data/gpus.json): H100-SXM runtime 85,029,158,912 B / 2^30 = 79.19 GiB, nvidia-smi 81,559 MiB;
B200 191,514,017,792 B / 2^30 = 178.36 GiB, nvidia-smi 183,359 MiB; L40S 47,803,596,800 B / 2^30 = 44.52 GiB, no
nvidia-smi figure. Sizes are binary (kvplan.units.fmt_bytes: two decimals, KiB / MiB / GiB).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvplan import load_model
from kvplan.model.layers import NoCacheSpec, StateSpec
from kvplan.planning.engines.sglang_layers import pooled_layers, state_bytes_per_request
from kvplan.planning.engines.sglang_pool import LOAD_EXTRA_BYTES, PRELOAD_BYTES
from kvplan.planning.planner import plan

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20
GiB = 2**30

BASE = ["SGLang: activations and CUDA graphs live in the (1 - mem_fraction_static) reserve",
        "the command field holds the `sglang.launch_server` command for this engine"]
H100_CARD = ("default mem_fraction_static from nvidia-smi's memory.total, 81,559 MiB (what SGLang reads: utils "
             "get_nvgpu_memory_capacity), the pool from the runtime's 79.19 GiB")
B200_CARD = ("default mem_fraction_static from nvidia-smi's memory.total, 183,359 MiB (what SGLang reads: utils "
             "get_nvgpu_memory_capacity), the pool from the runtime's 178.36 GiB")
GIVEN = "mem_fraction_static as given; the pool sized from the runtime's free memory"
PREFILL_ON = "prefill CUDA graphs on by default here: their 8 MB a captured size (1.5 GiB for MLA) is in the reserve"
PREFILL_OFF = "prefill CUDA graphs off by default for these settings: nothing reserved for them"
EAGLE = {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
LLAMA = "meta-llama/Llama-3.1-8B"


def _req(pool: str, drafting: bool = False) -> str:
    """The ReqToTokenPool note, `pool` being its 'rows x context + 4 x 4 B = size' part."""
    return (f"the ReqToTokenPool, {pool}" + (" (+ the draft tokens a row)" if drafting else "")
            + ", is allocated after the budget is read: it sits in the reserve, and the KV pool is not reduced for it")


# 8,192 tokens: 8,196 a row; 4,097 x 8,196 x 4 = 134,316,048 B = 128 MiB + 98,320 B = 128.09 MiB (0.5.11+: the
# 4,096 requests + 1 padding row); 4,096 x 8,196 x 4 = 134,283,264 B = 128 MiB + 65,536 B = 128.06 MiB
REQ_4097 = _req("4,097 x 8,196 x 4 B = 128.09 MiB")
REQ_4096 = _req("4,096 x 8,196 x 4 B = 128.06 MiB")


def _sglang(name: str, **kwargs):
    return plan(name, engine="sglang", **kwargs)


# ----------------------------------------------------------------------------- plan_notes: the fixed notes


def test_a_plain_plan_carries_exactly_these_notes():
    """Llama-3.1-8B on an H100 at 8,192, SGLang 0.5.23's defaults: no PP, no sliding layers, no state, no DSA, no DP
    attention, no drafting, no LoRA, no tower, so five notes and no warning. max_running_requests is the clamp's
    4,096: the pool's 400,000-odd tokens / 8,192 x 512 > 4,096 (resolve_max_num_reqs)."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192)
    assert p.max_num_seqs == 4096 and p.kv_cache_tokens > 8 * 8192
    assert p.notes == BASE + [H100_CARD, REQ_4097, PREFILL_ON]
    assert p.warnings == []


@pytest.mark.parametrize("version, tail", [
    # before 0.5.10 no prefill-graph note and rows max(4,096, 2,048) = 4,096; 0.5.10 the note, rows still 4,096
    # (the padding row from 0.5.11); 0.5.11 4,096 + 1
    ("0.5.9", [REQ_4096]), ("0.5.10", [REQ_4096, PREFILL_ON]), ("0.5.11", [REQ_4097, PREFILL_ON]),
])
def test_prefill_note_and_padding_row_by_release(version, tail):
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, engine_version=version)
    assert p.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert p.notes == BASE + [H100_CARD] + tail


def test_an_explicit_fraction_and_a_card_without_nvidia_smi():
    given = _sglang(LLAMA, gpu="H100", max_model_len=8192, gpu_memory_utilization=0.8)
    assert given.notes == BASE + [GIVEN, REQ_4097, PREFILL_ON]
    l40s = _sglang(LLAMA, gpu="L40S", max_model_len=8192)
    assert l40s.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert l40s.notes == BASE + [
        "no nvidia-smi total in kvplan's catalog for L40S: the default mem_fraction_static is computed from the "
        "runtime's 44.52 GiB, 0.3-0.9 GiB below what SGLang reads on the cards kvplan has both for, so its third "
        "decimal may be one low", REQ_4097, PREFILL_ON]


# ----------------------------------------------------------------------------- drafting: ReqToTokenPool, the note

SPEC_NOTE = ("speculative decoding (eagle3): the draft's KV layers join the cell, its pool holds as many tokens as the "
             "target's (0.5.23 model_runner; SGLang sizes it as target x (1 + draft layers / target layers), exact "
             "where the draft's layers match the target's); max_running_requests 48 unless set")
SPEC_EARLY = "; before 0.5.14 the draft loads into the reserve, which holds 2-6 GiB more for it"


@pytest.mark.parametrize("version, tail", [
    # 48 requests with drafting (speculative_hook.py); 1,024 + 4 = 1,028 a row
    # 0.5.23 / 0.5.14 / 0.5.13: 48 + 1 = 49 rows, 49 x 1,028 x 4 = 201,488 B = 196.765625 KiB
    ("0.5.23", [_req("49 x 1,028 x 4 B = 196.77 KiB", True), PREFILL_ON, SPEC_NOTE]),
    ("0.5.14", [_req("49 x 1,028 x 4 B = 196.77 KiB", True), PREFILL_ON, SPEC_NOTE]),
    ("0.5.13", [_req("49 x 1,028 x 4 B = 196.77 KiB", True), PREFILL_ON, SPEC_NOTE + SPEC_EARLY]),
    # 0.5.10: 48 rows (no padding row before 0.5.11), 48 x 1,028 x 4 = 197,376 B = 192.75 KiB; 0.5.10 turns the
    # prefill graphs off with drafting
    ("0.5.10", [_req("48 x 1,028 x 4 B = 192.75 KiB", True), PREFILL_OFF, SPEC_NOTE + SPEC_EARLY]),
    # 0.5.9: the 2,048-4,096 estimate, max(48, 2,048) = 2,048 rows, 2,048 x 1,028 x 4 = 8,421,376 B = 8.03 MiB
    ("0.5.9", [_req("2,048 x 1,028 x 4 B = 8.03 MiB", True), SPEC_NOTE + SPEC_EARLY]),
])
def test_drafting_notes_by_release(version, tail):
    p = _sglang(LLAMA, gpu="H100", max_model_len=1024, speculative=EAGLE, engine_version=version)
    assert p.max_num_seqs == 48
    assert p.notes == BASE + [H100_CARD] + tail


# ----------------------------------------------------------------------------- DP attention, LoRA


@pytest.mark.parametrize("dp, note", [
    (1, []),
    # TP 8 // 2 = 4, TP 8 // 8 = 1
    (2, ["DP attention: 2 ranks of attention TP 4, each with its own pool (the figures are one rank's); requests "
         "spread over the 2 ranks"]),
    (8, ["DP attention: 8 ranks of attention TP 1, each with its own pool (the figures are one rank's); requests "
         "spread over the 8 ranks"]),
])
def test_dp_attention_note(dp, note):
    p = _sglang("Qwen/Qwen3-30B-A3B", gpu="H100", tp=8, dp=dp, max_model_len=8192)
    assert p.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert p.notes == BASE + [H100_CARD, REQ_4097, PREFILL_ON] + note


def test_lora_note():
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, lora={"max_lora_rank": 16})
    assert p.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert p.notes == BASE + [H100_CARD, REQ_4097, PREFILL_ON,
                              "LoRA: 8 adapter slots (--max-loras-per-batch) of rank 16 for every linear layer, no "
                              "embed_tokens / lm_head (--lora-target-modules all adds them)"]


# ----------------------------------------------------------------------------- _pp_note, engine_warnings


def _pp(split: str, rule: str, head: str, tokens: str, stage: int, tower: str = "") -> str:
    return (f"pipeline stages of {split} layers (distributed/utils.py get_pp_indices: {rule}); embeddings on the "
            f"first, the lm_head {head}{tower}; every stage's budget is what the most loaded leaves (free memory "
            f"MIN-reduced over the ranks), and {tokens}; the figures are stage {stage}'s")


NEW_SPLIT = "the last L % pp stages one more"
OLD_SPLIT = "the last stage the remainder"
MIN_TOKENS = "every stage holds the fewest tokens of any stage (all_reduce MIN, 0.5.2+)"
OWN_TOKENS = "each stage keeps its own quotient (0.5.1): the plan reports the smallest"


@pytest.mark.parametrize("version, note", [
    # Llama-3.1-8B's 32 layers over 3 stages: 0.5.6+ 10 / 11 / 11 (the last 32 % 3 = 2 stages one more), before 10 /
    # 10 / 12; the lm_head on every stage (llama.py). All stages get the same budget, so the stage with the most
    # layers holds the fewest tokens: stage 2 (with 11 / 11 the tie goes to the heavier, stage 2 with the final norm)
    ("0.5.23", _pp("10/11/11", NEW_SPLIT, "on every stage", MIN_TOKENS, 2)),
    ("0.5.6", _pp("10/11/11", NEW_SPLIT, "on every stage", MIN_TOKENS, 2)),
    ("0.5.5", _pp("10/10/12", OLD_SPLIT, "on every stage", MIN_TOKENS, 2)),
    ("0.5.2", _pp("10/10/12", OLD_SPLIT, "on every stage", MIN_TOKENS, 2)),
    ("0.5.1", _pp("10/10/12", OLD_SPLIT, "on every stage", OWN_TOKENS, 2)),
])
def test_pp_note_by_release(version, note):
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, pp=3, engine_version=version)
    assert p.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    # before 0.5.10 no prefill-graph note and 4,096 rows; 0.5.23 turns the prefill graphs off at PP > 1
    middle = [REQ_4097, PREFILL_OFF] if version == "0.5.23" else [REQ_4096]
    assert p.notes == BASE + [H100_CARD] + middle + [note]
    assert p.warnings == []


def test_pp_note_lm_head_on_the_last_stage_and_stage_0_binding():
    """Qwen3-32B (qwen3.py: the lm_head on the last rank alone) at PP 2: 32 / 32 layers; embed_tokens on stage 0 and
    the lm_head on stage 1 are the same size, stage 1 holds the final norm too, so it is the heavier of two equal
    token counts. Llama-3.1-8B at PP 2: 16 / 16, stage 0 holds embed_tokens (128,256 x 4,096 x 2 B) against stage
    1's final norm (4,096 x 2 B): stage 0's figures."""
    qwen = _sglang("Qwen/Qwen3-32B", gpu="H100", pp=2, max_model_len=8192)
    assert qwen.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert qwen.notes == BASE + [H100_CARD, REQ_4097, PREFILL_OFF,
                                 _pp("32/32", NEW_SPLIT, "on the last stage", MIN_TOKENS, 1)]
    llama = _sglang(LLAMA, gpu="H100", pp=2, max_model_len=8192)
    assert llama.notes == BASE + [H100_CARD, REQ_4097, PREFILL_OFF,
                                  _pp("16/16", NEW_SPLIT, "on every stage", MIN_TOKENS, 0)]


MISTRAL_WARNING = ("SGLang's lm_head placement under pipeline parallelism was not read for MistralForCausalLM: planned "
                   "on every stage, as Llama builds it (the larger)")
MISTRAL_SWA = ("MistralForCausalLM is not in SGLang 0.5.23's SWA list (model_config.is_hybrid_swa_model): every layer "
               "holds the full context")


def test_an_unread_lm_head_placement_is_planned_on_every_stage_with_a_warning():
    """Mistral-7B (sliding window 4,096, not on SGLang's SWA list) at PP 2: 16 / 16, the placement not read, so the
    lm_head on every stage; stage 0 (embed_tokens) is the heavier. At PP 1 no warning."""
    two = _sglang("mistralai/Mistral-7B-v0.1", gpu="H100", pp=2, max_model_len=8192)
    assert two.warnings == [MISTRAL_WARNING]
    assert two.notes == [f"not verified: {MISTRAL_WARNING}"] + BASE + [
        H100_CARD, REQ_4097, PREFILL_OFF, _pp("16/16", NEW_SPLIT, "on every stage", MIN_TOKENS, 0), MISTRAL_SWA]
    one = _sglang("mistralai/Mistral-7B-v0.1", gpu="H100", max_model_len=8192)
    assert one.warnings == []
    assert one.notes == BASE + [H100_CARD, REQ_4097, PREFILL_ON, MISTRAL_SWA]


def test_a_tied_lm_head_under_pp_is_warned_about():
    tied = ("meta-llama/Llama-3.2-1B ties its lm_head to embed_tokens, which SGLang's LlamaForCausalLM builds on the "
            "first stage only (a PPMissingLayer elsewhere): whether it serves under PP was not read")
    assert _sglang("meta-llama/Llama-3.2-1B", gpu="H100", pp=2, max_model_len=8192).warnings == [tied]
    assert _sglang("meta-llama/Llama-3.2-1B", gpu="H100", pp=3, max_model_len=8192).warnings == [tied]
    assert _sglang("meta-llama/Llama-3.2-1B", gpu="H100", max_model_len=8192).warnings == []


def test_pp_note_names_qwen3_5s_tower_on_every_stage():
    """Qwen3.5-27B at PP 2 (0.5.23): 64 layers, 32 / 32, the lm_head on the last (qwen3_5.py from 0.5.19), the vision
    tower on every stage (qwen3_vl.py); stage 1 (the final norm more) binds."""
    p = _sglang("Qwen/Qwen3.5-27B", gpu="H100", pp=2, max_model_len=32768)
    tower = "; its vision tower on every stage (qwen3_vl.py builds it on every rank)"
    assert [n for n in p.notes if n.startswith("pipeline stages")] == [
        _pp("32/32", NEW_SPLIT, "on the last stage", MIN_TOKENS, 1, tower)]


# ----------------------------------------------------------------------------- the SWA pool note (sglang_rules text)

GPT_OSS_SWA = ("sliding layers in SGLang's SWA pool, which holds swa_full_tokens_ratio x the full pool's tokens "
               "(model_config.is_hybrid_swa_model)")


def _gpt_oss_head(tmp_path) -> dict:
    """An EAGLE-3 head as wide as gpt-oss (hidden 2,880; yuhuili's Llama-3.1-8B head reads 4,096-wide states and is
    refused on it): yuhuili's config with gpt-oss-20b's hidden size, heads and head_dim."""
    config = json.loads((REPO / "model_configs" / "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    config.update(hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64)  # gpt-oss-20b's
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return {**EAGLE, "model": str(path)}


def test_gpt_oss_swa_note_by_card_and_drafting(tmp_path):
    """0.5.9 server_args.py:1278-1290: gpt-oss keeps the SWA pool on Hopper, not with trtllm_mha (the SM 10.x
    default) or drafting. The B200's SM major is 10 (compute capability 10.0)."""
    name = "openai/gpt-oss-20b"
    h100 = _sglang(name, gpu="H100", max_model_len=8192, engine_version="0.5.9")
    assert h100.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert h100.notes == BASE + [H100_CARD, REQ_4096, GPT_OSS_SWA]
    b200 = _sglang(name, gpu="B200", max_model_len=8192, engine_version="0.5.9")
    assert b200.notes == BASE + [B200_CARD, REQ_4096,
                                 "SGLang 0.5.9 disables gpt-oss's SWA pool with trtllm_mha, Blackwell's default "
                                 "backend (server_args.py): every layer holds the full context"]
    drafted = _sglang(name, gpu="H100", max_model_len=8192, engine_version="0.5.9", speculative=_gpt_oss_head(tmp_path))
    # 0.5.9 drafting: max(48, 2,048) = 2,048 rows x 8,196 x 4 = 67,141,632 B = 64 MiB + 32,768 B = 64.03 MiB
    assert drafted.notes == BASE + [
        H100_CARD, _req("2,048 x 8,196 x 4 B = 64.03 MiB", True),
        "SGLang 0.5.9 disables gpt-oss's SWA pool with speculative decoding (server_args.py): every layer holds the "
        "full context", SPEC_NOTE + SPEC_EARLY]


def test_llama4_chunked_layers_get_the_swa_note_and_its_tower_a_not_multimodal_note():
    """Llama 4's chunked-attention layers are its SWA layers (0.5.8+); Llama4ForConditionalGeneration is on SGLang's
    mm_disabled_models list, so at its defaults it is not multimodal."""
    p = _sglang("meta-llama/Llama-4-Scout-17B-16E-Instruct", gpu="H200", tp=8, max_model_len=8192,
                gpu_memory_utilization=0.85)
    assert p.notes[-2:] == [GPT_OSS_SWA,
                            "Llama4ForConditionalGeneration is not multimodal to SGLang 0.5.23 at its defaults: its "
                            "tower loads, the fraction is not scaled and no image cache is held back"]
    assert p.notes[1:-2] == BASE + [GIVEN, REQ_4097, PREFILL_ON]


# ----------------------------------------------------------------------------- _vlm_note

VLM_HEAD = ("SGLang loads the vision tower with the language model and scales a default mem_fraction_static by 0.9500 "
            "for it (adjust_mem_fraction_for_vlm); ")


@pytest.mark.parametrize("version, cache", [
    ("0.5.18", "its 100 MiB image cache (SGLANG_VLM_CACHE_SIZE_MB) comes out of the KV budget"),
    ("0.5.17", "its image cache is not taken from the KV budget before 0.5.18"),
])
def test_vlm_note_by_release(version, cache):
    """Mistral-Small-3.1 (Mistral3ForConditionalGeneration, multimodal, x 0.95: adjust_mem_fraction_for_vlm; off the
    breakable prefill-graph list, so no prefill graphs); 114,000-odd tokens / 8,192 x 512 > 4,096 requests."""
    p = _sglang("mistralai/Mistral-Small-3.1-24B-Instruct-2503", gpu="H100", max_model_len=8192,
                engine_version=version)
    assert p.max_num_seqs == 4096   # resolve_max_num_reqs: the 4,096 ceiling
    assert p.notes == BASE + [H100_CARD, REQ_4097, PREFILL_OFF, VLM_HEAD + cache]


# ----------------------------------------------------------------------------- _state_note (Mamba / GDN hybrids)


def _rest(total: int, weights: int, fraction: float) -> int:
    """SGLang's pool budget as tests/test_sglang.py _rest works it: free memory before loading (the card less the
    context) x fraction, less the weights and the load extras."""
    before = total - PRELOAD_BYTES
    return int(before - weights - LOAD_EXTRA_BYTES - before * (1 - fraction))


def _state(how: str, slots: int, per_req: str, pool: str, ratio: int) -> str:
    return (f"Mamba state in SGLang's MambaPool, {how}: {slots:,} slots of {per_req} a request ({pool}), the KV cell "
            f"counting the full-attention layers alone; max_running_requests at most {slots:,} // {ratio}")


FIXED = "512 slots (its radix cache off for this model)"
NEXT = "Qwen/Qwen3-Next-80B-A3B-Thinking"
NEXT_PER_REQ = 19_316_736   # Qwen3-Next at TP 4: 36 x (2,048 x 3 x 2 + 8 x 128 x 128 x 4); / 2^20 = 18.42 MiB


def test_qwen3_next_state_note_with_its_radix_cache_off():
    """0.5.3: 512 fixed slots (model_runner.py "Hybrid GDN model detected, disable radix cache"), ratio 1:
    512 x 19,316,736 = 9,890,168,832 B = 9.21 GiB. max_running_requests min(.., 512 // 1) = 512, so the ReqToTokenPool
    holds max(512, 2,048) = 2,048 rows (before 0.5.10) of 262,148: 2,048 x 262,148 x 4 = 2,147,516,416 B = 2.00 GiB."""
    assert 36 * (2048 * 3 * 2 + 8 * 128 * 128 * 4) == NEXT_PER_REQ
    p = _sglang(NEXT, gpu="H100", tp=4, max_model_len=262_144, gpu_memory_utilization=0.82, engine_version="0.5.3")
    assert p.max_num_seqs == 512
    assert p.notes == BASE + [GIVEN, _req("2,048 x 262,148 x 4 B = 2.00 GiB"),
                              _state(FIXED, 512, "18.42 MiB", "9.21 GiB", 1)]


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17"])
def test_qwen3_next_state_note_from_the_ratio_split(version):
    """0.5.4+ handle_max_mamba_cache: K = int(rest x 0.9 / 1.9 // per request), the pool K slots; from 0.5.17 K =
    (budget - per request) // per request and one padding slot more. Ratio 5 from 0.5.14."""
    p = _sglang(NEXT, gpu="H100", tp=4, max_model_len=262_144, gpu_memory_utilization=0.82, engine_version=version)
    rest = _rest(p.gpu_memory_bytes, p.weights_bytes, 0.82)
    if version == "0.5.16":
        slots = int(rest * 0.9 / 1.9 // NEXT_PER_REQ)
        state, how = slots * NEXT_PER_REQ, "rest x 0.9 / 1.9 in whole slots"
        assert slots == 717      # the formula's value for this rest
    else:
        slots = int((rest * 0.9 / 1.9 - NEXT_PER_REQ) // NEXT_PER_REQ)
        state, how = (slots + 1) * NEXT_PER_REQ, "rest x 0.9 / 1.9 in whole slots plus one padding slot"
        assert slots == 716
    assert f"{state / GiB:.2f}" == "12.90"   # 717 x 19,316,736 B = 13,850,099,712 B / 2^30
    note = _state(how, slots, "18.42 MiB", "12.90 GiB", 5)
    assert [n for n in p.notes if n.startswith("Mamba state")] == [note]
    assert p.notes[-1] == note


def test_nemotron_h_mamba2_state_note_through_0_5_6():
    """A Mamba-2 hybrid keeps the 512 fixed slots through 0.5.6 ("NemotronHForCausalLM model detected, disable radix
    cache"), a GDN one only through 0.5.3. Nemotron-H-56B at TP 2: 54 Mamba layers x (10,240 conv channels x 3 x 2 B
    + 128 x 64 x 256 x 4 B) = 54 x 8,450,048 = 456,302,592 B = 435.16 MiB; 512 x that = 233,626,927,104 B = 217.58
    GiB, past the card: the plan does not fit but says so."""
    assert 10_240 * 3 * 2 + 128 * 64 * 256 * 4 == 8_450_048
    p = _sglang("nvidia/Nemotron-H-56B-Base-8K", gpu="H100", tp=2, max_model_len=8192, engine_version="0.5.5")
    assert [n for n in p.notes if n.startswith("Mamba state")] == [_state(FIXED, 512, "435.16 MiB", "217.58 GiB", 1)]


def test_pipeline_state_note_charges_the_largest_stage():
    """Nemotron-H-56B at TP 2 x PP 2 (0.5.23): 27 of its 54 Mamba layers on each stage, 27 x 8,450,048 =
    228,151,296 B = 217.58 MiB a request; K = int((rest x 0.9 / 1.9 - share) // share), K + 1 slots (as
    tests/test_sglang.py test_nemotron_h_pipeline_charges_the_largest_stage_state works it); ratio 5."""
    p = _sglang("nvidia/Nemotron-H-56B-Base-8K", gpu="H100", tp=2, pp=2, max_model_len=8192)
    share = 27 * 8_450_048
    rest = _rest(p.gpu_memory_bytes, max(x.weights_bytes for x in p.stages), p.gpu_memory_utilization)
    slots = int((rest * 0.9 / 1.9 - share) // share)
    assert slots == 86 and f"{(slots + 1) * share / GiB:.2f}" == "18.49"   # 87 x 228,151,296 B / 2^30
    note = _state("rest x 0.9 / 1.9 in whole slots plus one padding slot", 86, "217.58 MiB", "18.49 GiB", 5) + (
        "; every stage is charged the largest stage's share of a request's state, so all size the same pool "
        "(kv_cache_configurator.py _handle_max_mamba_cache pp_layer_scale)")
    assert [n for n in p.notes if n.startswith("Mamba state")] == [note]


# ----------------------------------------------------------------------------- _dsa_note (DeepSeek-V3.2 / GLM-5)

RAW = "the latent counted raw (kv_lora_rank + rope)"
SCALED = ("the fp8 latent counted as 656 B a layer (per-block scales: flashmla_kv, or GLM's flashinfer_sparse_mla on "
          "SM 12.x)")
EARLY = (" (before 0.5.17 the cell counts the raw latent while an fp8 pool on a scaled-layout backend allocates 656 B "
         "a layer: the pool outgrows its budget by 80 B a layer a token)")


def _dsa(kv: str, layout: str, early: str = "") -> str:
    return (f"DeepSeek sparse attention: KV {kv} (auto is fp8 on SM 10.x and newer, bfloat16 below), {layout}{early}, "
            "132 B of index keys a layer on every rank, 64-token pages")


@pytest.mark.parametrize("name, gpu, version, kv_dtype, note", [
    # bf16 on Hopper (auto below SM 10): the raw 512 + 64 latent in 2 B
    ("deepseek-ai/DeepSeek-V3.2", "H100", "0.5.23", "auto", _dsa("bfloat16", RAW)),
    ("deepseek-ai/DeepSeek-V3.2", "H100", "0.5.16", "auto", _dsa("bfloat16", RAW)),
    # fp8 on Hopper (flashmla_kv): 512 + 512 / 128 x 4 + 64 x 2 = 656 B > 576, counted from 0.5.17
    ("deepseek-ai/DeepSeek-V3.2", "H100", "0.5.23", "fp8", _dsa("float8_e4m3", SCALED)),
    ("deepseek-ai/DeepSeek-V3.2", "H100", "0.5.17", "fp8", _dsa("float8_e4m3", SCALED)),
    # 0.5.16: the cell counts 576 while the pool allocates 656: 80 B a layer more
    ("deepseek-ai/DeepSeek-V3.2", "H100", "0.5.16", "fp8", _dsa("float8_e4m3", RAW, EARLY)),
    # Blackwell: auto is fp8 and trtllm keeps the raw 576 (not more than 512 + 64)
    ("deepseek-ai/DeepSeek-V3.2", "B200", "0.5.23", "auto", _dsa("float8_e4m3", RAW)),
    # GLM-5 on SM 12.x with fp8: flashinfer_sparse_mla, the scaled row (overrides.py is_glm_sm12_fp8)
    ("zai-org/GLM-5", "RTX PRO 6000", "0.5.23", "auto", _dsa("float8_e4m3", SCALED)),
])
def test_dsa_note(name, gpu, version, kv_dtype, note):
    """Pages of 64 tokens (model_overrides/deepseek_v2.py); DSA index keys 128 + 128 / 128 x 4 = 132 B a layer."""
    p = _sglang(name, gpu=gpu, tp=8, max_model_len=4096, kv_dtype=kv_dtype, engine_version=version,
                gpu_memory_utilization=0.95)
    assert p.block_size == 64
    assert [n for n in p.notes if n.startswith("DeepSeek sparse attention")] == [note]
    assert p.notes[-1] == note


# ----------------------------------------------------------------------------- sglang_layers: pools and state


def test_pooled_layers_keeps_a_model_without_pool_rows_as_it_is():
    """pooled_layers turns only MLP-only / MoE-only / KV-shared layers into pool rows: a plain model comes back as
    it is, and a cross-attention layer (it caches image tokens, not text) is left a NoCacheSpec, so the pool does not
    count a row for it."""
    llama = load_model("meta-llama/Llama-3.2-1B")
    assert pooled_layers(llama) is llama
    cross = NoCacheSpec("cross-attention layer (caches image tokens, not text)")
    layers = list(llama.layers)
    layers[3] = (cross,)
    mixed = dataclasses.replace(llama, layers=tuple(layers))
    pooled = pooled_layers(mixed)
    assert pooled is mixed and pooled.layers[3] == (cross,)
    # 15 attention layers a row each: the layer kept as is


def _conv_less(tp_groups: int = 0):
    """Qwen3-Next with its 36 GDN layers' conv state taken away (a mixer with no conv state, as MiniMax's lightning
    attention has none), optionally Mamba-2 groups of 128-wide state."""
    model = load_model(NEXT)
    layers = tuple(tuple(dataclasses.replace(x, conv_shape=(), groups=tp_groups, group_state=128 if tp_groups else 0)
                         if isinstance(x, StateSpec) else x for x in layer) for layer in model.layers)
    return dataclasses.replace(model, layers=layers)


def test_a_state_layer_without_conv_state_holds_only_its_ssm_state():
    """configs/mamba_utils.py mamba_cache_per_req: no conv state, no conv bytes. 36 layers x 32 x 128 x 128 x 4 B
    (float32 before 0.5.9) = 75,497,472 at TP 1; with one Mamba-2 group at TP 2 (replicated: 2 x (2 - 1) x 128 / 2
    = 128 channels a rank) still no conv bytes, kernel - 1 = 0 columns: 36 x 16 x 128 x 128 x 4 = 37,748,736."""
    assert state_bytes_per_request(_conv_less(), range(48), 1, (0, 5, 8)) == 36 * 32 * 128 * 128 * 4 == 75_497_472
    assert state_bytes_per_request(_conv_less(1), range(48), 2, (0, 5, 8)) == 36 * 16 * 128 * 128 * 4 == 37_748_736
