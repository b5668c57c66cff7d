"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/planning/engines/vllm_profile.py (#26 item 5).

Each figure is hand arithmetic with its inputs written beside it, checked against a published log where one exists
(validation calibration: Llama-3.1-8B-Instruct on one H100 at vLLM 0.19 printed 1.89 GiB of peak activation and, at
TP 2, 2.06 GiB of non-torch memory), or against the engine source read from the wheel (pip download vllm==0.6.4
--no-deps: vllm/engine/arg_utils.py:996 `use_long_context = max_model_len > 32768`, vllm/config.py:1118
`max_num_batched_tokens = max(max_model_len, 2048)` without chunked prefill, :1114 512 with it)."""
from __future__ import annotations

import re

import pytest

from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm_profile import ActivationModel, activation_peak, batch_defaults, non_torch_bytes, \
    parse_version
from kvplan.units import GiB

# Llama-3.1-8B (config.json): hidden 4,096, intermediate 14,336, vocab 128,256, bf16 (2 B)
LLAMA_8B = ActivationModel(hidden_size=4096, intermediate_size=14336, moe_intermediate_size=0, experts_per_token=0,
                           vocab_size=128256, act_bytes=2)
V19 = (0, 19, 0)


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


# ----------------------------------------------------------------------------- activation_peak, its defaults

def test_llama_8b_profile_at_0_19_with_the_defaults():
    """N 8,192 tokens, 1,024 rows (H100 API-server defaults), the last stage; no entry_bytes, kept or receive given,
    so the defaults: bf16 + 12 B a sampler entry (logits, float32 copy, probabilities, noise), no encoder cache.
    Kills kept=1, b - 12, b + 13, and the formula's "XXXX" / always-shown tails."""
    got = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=True, version=V19)
    forward = 8192 * (3 * 14336 + 5 * 4096) * 2          # = 1,040,187,392 B: [N, 3I] + 5 [N, H], bf16
    sampler = 1024 * 128256 * (2 + 12) + 3 * 8192 * 4096 * 2   # = 1,838,678,016 + 201,326,592 B
    assert forward == 1_040_187_392     # 8,192 x 63,488 x 2 B
    assert sampler == 2_040_004_608     # 1.8999 GiB: the 0.19 H100 log printed 1.89 GiB of activation
    assert (got.forward_bytes, got.sampler_bytes, got.pp_buffer_bytes) == (forward, sampler, 0)
    assert got.total_bytes == sampler   # max(forward, sampler) + 0 receive buffers + 0 encoder cache
    assert got.formula == ("max(forward 8,192 x (43,008 + 5 x 4,096) x 2 B, "
                           "sampler 1,024 x 128,256 x 14 B + 3 x 8,192 x 4,096 x 2 B)")


def test_a_stage_without_the_sampler_has_no_sampler_term():
    """A non-last pipeline stage runs no sampler: its sampler term is 0 B, the total the forward alone."""
    got = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=False, version=V19)
    assert got.sampler_bytes == 0
    assert got.total_bytes == got.forward_bytes == 8192 * (3 * 14336 + 5 * 4096) * 2   # 1,040,187,392 B


def test_the_encoder_cache_is_added_and_named():
    """kept = a multimodal model's dummy encoder outputs: added to the total and written in the formula."""
    kept = 12_345_678                   # an input
    got = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=True, version=V19, kept=kept)
    assert got.total_bytes == 2_040_004_608 + kept    # the sampler of the test above + the encoder cache
    assert got.formula.endswith("x 2 B) + encoder cache 12,345,678 B")
    assert "PP receive buffers" not in got.formula


def test_the_pp_receive_buffers_are_named_only_when_there_are_some():
    receive = (2 * 8192 * 4096 * 2, "2 x 8,192 x 4,096 x 2 B")   # residual + hidden, bf16: 128 MiB
    got = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=True, version=V19, receive=receive)
    assert got.pp_buffer_bytes == 134_217_728    # 2 x 8,192 x 4,096 x 2 B
    assert got.total_bytes == 2_040_004_608 + 134_217_728    # sampler + buffers
    assert got.formula.endswith("x 2 B) + PP receive buffers 2 x 8,192 x 4,096 x 2 B")


def test_the_sampler_extra_starts_at_0_12():
    """ENGINE_CONSTANTS sampler_extra_versions [0.12, 0.17): 0.12 and 0.13 are kept with 0.14's measured +24 B an
    entry (the half-open range starts at its first version): 14 + 24 = 38 B."""
    got = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=True, version=(0, 12, 0))
    assert got.sampler_bytes == 1024 * 128256 * 38 + 3 * 8192 * 4096 * 2   # 4,990,697,472 + 201,326,592 B
    assert "x 38 B" in got.formula
    before = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=True, version=(0, 11, 0))
    assert "x 14 B" in before.formula   # 0.11.0 has none (FlashInfer sampling)


def test_the_v1_forward_width_starts_at_0_8():
    """vLLM 0.8 made V1 the default engine: its forward holds 5 [N, H] tensors (V0 and 0.7: 3)."""
    v1 = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=False, version=(0, 8, 0))
    v0 = activation_peak(LLAMA_8B, 8192, 1024, has_sampler=False, version=(0, 7, 3))
    assert v1.forward_bytes == 8192 * (43008 + 5 * 4096) * 2     # 1,040,187,392 B
    assert v0.forward_bytes == 8192 * (43008 + 3 * 4096) * 2     # 905,969,664 B
    assert v1.forward_bytes - v0.forward_bytes == 2 * 8192 * 4096 * 2   # 134,217,728 B: two more [N, H] bf16


# ----------------------------------------------------------------------------- batch_defaults at the V0 / V1 edges

def test_v0_batches_a_whole_prompt_up_to_32k_tokens():
    """0.6.4 arg_utils.py:996 turns chunked prefill on only above 32,768 tokens: at exactly 32,768 the whole prompt
    is batched (config.py:1118 max(max_model_len, 2048)); one token more and it is 512-token chunks (:1114)."""
    v064 = (0, 6, 4)
    assert batch_defaults(80 * GiB, "H100-SXM", "api_server", v064, max_model_len=32768) == (32768, 256)
    assert batch_defaults(80 * GiB, "H100-SXM", "api_server", v064, max_model_len=32769) == (512, 256)


def test_v0_batches_at_least_2048_tokens():
    """0.6.4 config.py:1116-1118: "If max_model_len is too short, use 2048": a 1,024-token model batches 2,048."""
    assert batch_defaults(24 * GiB, "L4", "api_server", (0, 6, 4), max_model_len=1024) == (2048, 256)


def test_0_8_takes_the_v1_defaults():
    """0.8 is V1: a 24 GiB L4 serving a 4,096-token model batches 2,048 tokens and 1,024 sequences (0.8.0
    arg_utils.py `_set_default_args_v1` :1693 2048 for a name without h100/h200, :1715 1024 sequences for every
    GPU), where the V0 rule would batch the whole 4,096-token prompt with 256."""
    assert batch_defaults(24 * GiB, "L4", "api_server", (0, 8, 0), max_model_len=4096) == (2048, 1024)
    assert batch_defaults(24 * GiB, "L4", "api_server", (0, 7, 3), max_model_len=4096) == (4096, 256)


# ----------------------------------------------------------------------------- non_torch_bytes' default GPU

def test_non_torch_defaults_to_an_nvswitch_h100():
    """No GPU named: an H100-SXM, so TP 2 pays NCCL's NVLS buffers: 0.25 + 1.75 + 2 x 0.0325 = 2.065 GiB (the 0.19
    TP 2 log printed 2.06 GiB), not the 0.25 GiB no-NVLS assumption."""
    assert non_torch_bytes(2, 1, V19) == int((0.25 + 1.75 + 2 * 0.0325) * GiB)
    assert non_torch_bytes(2, 1, V19) == 2_217_276_866   # int(2.065 x 1,073,741,824 B)


# ----------------------------------------------------------------------------- parse_version's refusals

def test_a_version_that_is_not_text_is_refused_in_one_line():
    """A workload file's `version: 0.19` reads as the float 0.19: refused by name, not an AttributeError."""
    with pytest.raises(WorkloadError, match=_exact("engine version 0.19 is not a version number: write it like "
                                                   "0.19.0")):
        parse_version(0.19)  # type: ignore[arg-type]


def test_the_refusal_quotes_the_text_given():
    with pytest.raises(WorkloadError, match=_exact("engine version '0.19garbage' is not a version number: write it "
                                                   "like 0.19.0")):
        parse_version("0.19garbage")


def test_a_part_of_nine_digits_is_read_and_one_of_ten_refused():
    """parse_version refuses a part of more than 9 digits (len(g) > 9): nine are read, ten refused."""
    assert parse_version("0.123456789.0") == (0, 123456789, 0)   # the input's nine-digit part, read back
    with pytest.raises(WorkloadError, match="'0.1234567890.0' is not a version number"):
        parse_version("0.1234567890.0")
