"""Mutation-survivor tests for kvplan/planning/engines/vllm_dsv4_peak.py (issue #26): the small pure functions of
DeepSeek-V4's vLLM profile-run peak, pinned on their boundaries by hand arithmetic written beside each figure."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm_dsv4_peak import (Dsv4Rank, _largest, csa_moment, flashmla_request,
                                                    humming_request, indexer_request, pad_moment, padded_heads,
                                                    rank_dims, release, workspace_bytes)
from kvplan.units import MiB

FLASH = "deepseek-ai/DeepSeek-V4-Flash"


def _tiny(**kw) -> Dsv4Rank:
    """A rank of ones (64 heads padded to 64), so every tensor's bytes are easy to count by hand."""
    base = dict(tokens=1, hidden=1, hc=1, heads=64, padded_heads=64, head_dim=1, q_lora=1, index_heads=1,
                index_dim=1, topk=1, window=1, expert_dim=1, experts_per_token=1, tp=1)
    base.update(kw)
    return Dsv4Rank(**base)


# ---- release -------------------------------------------------------------------------------------------------

def test_release_humming_input_bytes_by_version():
    assert release((0, 33, 0)).humming_input_bytes == 1   # 0.33: block-FP8 inputs, 1 B
    assert release((0, 34, 0)).humming_input_bytes == 1   # later than 0.33: still 1 B
    assert release((0, 32, 0)).humming_input_bytes == 2   # 0.32: bf16, 2 B
    assert release((0, 32, 9)).humming_input_bytes == 2   # any 0.32 patch: 2 B


def test_release_older_flags_are_false_not_none():
    for v in ((0, 31, 0), (0, 26, 0), (0, 21, 0)):
        rel = release(v)
        assert rel.row_exchange is False   # no TP top-k row exchange before 0.32
        assert rel.humming is False        # Marlin's MoE before 0.32
        assert rel.flat_indexer is True


# ---- padded_heads ------------------------------------------------------------------------------------------------

def test_padded_heads_boundaries():
    assert padded_heads(1) == 64
    assert padded_heads(64) == 64     # <= 64: 64
    assert padded_heads(65) == 128    # above 64: 128
    assert padded_heads(128) == 128   # 128 is still taken, no refusal


def test_padded_heads_refusal_text():
    text = ("vLLM's DeepSeek-V4 FlashMLA takes at most 128 query heads a rank, not 129: use a "
            "larger tensor-parallel size")
    with pytest.raises(WorkloadError, match="^" + re.escape(text) + "$"):
        padded_heads(129)   # 129 > 128


# ---- _largest ------------------------------------------------------------------------------------------------

def test_largest_top_four_descending():
    moment = {"a": 1 * MiB, "b": 5 * MiB, "c": 3 * MiB, "d": 2 * MiB, "e": 1536 * MiB}   # 1,536 MiB prints 1,536.0
    assert _largest(moment) == "e 1,536.0, b 5.0, c 3.0, d 2.0 MiB, ..."


# ---- flashmla_request ------------------------------------------------------------------------------------------

def test_flashmla_request_rounds_compressed_up():
    d = _tiny(head_dim=512)   # tokens 1, window 1, topk 1
    # L 4,097 at ratio 4: cdiv = 1,025; gather 4 x (1,025 + 1 + 1) x 512 x 2 = 4,206,592 (256-aligned)
    # indices [1, round_up(1 + 1, 128) = 128] x 4 = 512; lengths 4 -> 256
    assert flashmla_request(d, 4097, 4) == 4206592 + 512 + 256   # 4 x 1,027 x 1,024; 128 x 4; 4 rounded up


def test_flashmla_request_ratio_two_is_compressed():
    d = _tiny(topk=200)
    # ratio 2 > 1: compressed cdiv(4,096, 2) = 2,048; gather 4 x (2,048 + 1 + 1) x 2 = 16,400 -> 16,640 (256 x 65)
    # width round_up(200 + 1, 128) = 256 (top-k counts at ratio 2): 256 x 4 = 1,024; lengths 4 -> 256
    assert flashmla_request(d, 4096, 2) == 16640 + 1024 + 256   # 16,400 rounded up; 256 x 4; 4 rounded up


def test_flashmla_request_width_rounds_to_128():
    # window 100, ratio 1 (no top-k): width round_up(100, 128) = 128; tokens 256 so views are 256-aligned already
    d = _tiny(tokens=256, window=100)
    # gather 4 x (0 + 100 + 256) x 1 x 2 = 2,848 -> 3,072; indices 256 x 128 x 4 = 131,072; lengths 256 x 4 = 1,024
    assert flashmla_request(d, 4096, 1) == 3072 + 131072 + 1024   # 2,848 rounded up; 256 x 128 x 4; 256 x 4
    # window 129: width round_up(129, 128) = 256 (not 128)
    d = _tiny(tokens=256, window=129)
    # gather 4 x (129 + 256) x 2 = 3,080 -> 3,328; indices 256 x 256 x 4 = 262,144; lengths 1,024
    assert flashmla_request(d, 4096, 1) == 3328 + 262144 + 1024   # 3,080 rounded up; 256 x 256 x 4; 256 x 4


# ---- indexer_request -------------------------------------------------------------------------------------------

def test_indexer_request_factor_boundary_at_256k():
    d = rank_dims(load_model(FLASH), 8192, 4)   # 0.33: not flat; index_head_dim 128
    # L 262,144 = 256 x 1,024: factor 5; T = 262,144 x 8 x 5 // 4 = 2,621,440
    # keys 2,621,440 x 128 = 335,544,320; scales x 4 = 10,485,760; radix 1,048,576
    assert indexer_request(d, 262144, 4) == 335544320 + 10485760 + 1048576   # 2,621,440 x 128; x 4; 1,024 x 1,024
    # L 262,145: factor 2; T = 262,145 x 16 // 4 = 1,048,580; keys x 128 = 134,218,240; scales 4,194,320 -> 4,194,560
    assert indexer_request(d, 262145, 4) == 134218240 + 4194560 + 1048576   # 1,048,580 x 128; x 4 rounded; radix


def test_indexer_request_floors_rows():
    d = _tiny(index_dim=128)
    # L 4,097 at ratio 128: T = 4,097 x 40 // 128 = 163,880 // 128 = 1,280; keys 1,280 x 128 = 163,840;
    # scales 1,280 x 4 = 5,120; radix 1,048,576
    assert indexer_request(d, 4097, 128) == 163840 + 5120 + 1048576   # 1,280 x 128; 1,280 x 4; 1,024 x 1,024


# ---- humming_request -------------------------------------------------------------------------------------------

def test_humming_request_gate_up_output_wins():
    d = _tiny(tokens=8, hidden=4096, expert_dim=4096, experts_per_token=6)   # rows 8 x 6 = 48
    # first max(8 x 4,096 x 2 = 65,536, 48 x 4,096 x 1 = 196,608, 8 x 4,096 x 1 = 32,768) = 196,608
    # second max(48 x 4,096 x 2 = 393,216, 48 x 2 x 4,096 x 2 = 786,432) = 786,432
    assert humming_request(d, 1) == 196608 + 786432   # 48 x 4,096; 48 x 2 x 4,096 x 2


def test_humming_request_gate_up_input_in_a_wide_dtype():
    d = _tiny(tokens=8, hidden=4096, expert_dim=512, experts_per_token=6)   # rows 48
    # act 4 B: first max(8 x 4,096 x 2 = 65,536, 48 x 512 x 4 = 98,304, 8 x 4,096 x 4 = 131,072) = 131,072
    # second max(48 x 4,096 x 2 = 393,216, 48 x 1,024 x 2 = 98,304) = 393,216
    assert humming_request(d, 4) == 131072 + 393216   # 8 x 4,096 x 4; 48 x 4,096 x 2


# ---- workspace_bytes -------------------------------------------------------------------------------------------

def test_workspace_bytes_window_only_stage_has_no_indexer():
    model = load_model(FLASH)   # layers 0, 1 are window-only (ratio 1)
    d = rank_dims(model, 8192, 4)
    # FlashMLA ratio 1: gather 4 x (0 + 128 + 8,192) x 512 x 2 = 34,078,720; indices 8,192 x 128 x 4 = 4,194,304;
    # lengths 8,192 x 4 = 32,768. The indexer (ratio 4 only) is absent, though at L 65,536 a ratio-1 gather would be
    # 65,536 x 40 x 132 + 1,048,576 = 347,078,656
    assert workspace_bytes(model, d, 65536, range(0, 2), 0) == 34078720 + 4194304 + 32768   # 38,305,792
    assert workspace_bytes(model, d, 65536, range(0, 2), 10**9) == 10**9   # the MoE's 10^9 B request wins


def test_workspace_bytes_indexer_wins_at_256k():
    model = load_model(FLASH)   # layer 2 is CSA (ratio 4)
    d = rank_dims(model, 8192, 4)
    # FlashMLA ratio 4 at L 262,144: M = 65,536; gather 4 x (65,536 + 128 + 8,192) x 1,024 = 302,514,176;
    # indices 8,192 x 640 x 4 = 20,971,520; lengths 32,768: 323,518,464.
    # indexer: T = 2,621,440: 335,544,320 + 10,485,760 + 1,048,576 = 347,078,656, the larger
    assert workspace_bytes(model, d, 262144, range(2, 3), 0) == 347078656   # 2,621,440 x 132 + 1,048,576


# ---- csa_moment / pad_moment -----------------------------------------------------------------------------------

def test_csa_moment_unpadded_q_row_and_row_exchange_at_tp2():
    d = _tiny(heads=16, rel=release((0, 21, 0)))   # 0.21: q unpadded at the stand-in
    rows = csa_moment(d)
    assert rows["q (unpadded)"] == 32   # 1 token x 16 heads x 1 x 2 B
    d = _tiny(tp=2)   # 0.33, TP 2 > 1: the row exchange 2 x 1 x 1 x 4 = 8
    assert csa_moment(d)["top-k row exchange"] == 8


def test_pad_moment_by_hand_on_a_tiny_rank():
    d = _tiny()   # 64 heads = padded 64: no unpadded copy
    # carried 1 x (2 + 2 + 4 + 4) = 12 (x 2 with the caller); out buf 64 x 2 = 128; qr_kv 4; normed 4;
    # kv scores 16 + 16; weights 2; fp8 q + weights 1 x (1 + 4) = 5; padded q 128: 12 + 12 + 128 + 4 + 4 + 16 + 16
    # + 2 + 5 + 128 = 327
    assert pad_moment(d) == 327
    assert pad_moment(d, caller=False) == 315   # 327 - 12
    d = _tiny(heads=16)   # 16 < 64: + the unpadded q 16 x 2 = 32
    assert pad_moment(d) == 327 + 32


# ---- rank_dims / moe_request / marlin_margin -------------------------------------------------------------------

def _with_fields(**changes):
    model = load_model(FLASH)
    fields = {k: v for k, v in model.fields.items() if k not in changes or changes[k] is not None}
    fields.update({k: v for k, v in changes.items() if v is not None})
    return replace(model, fields=fields)


def test_rank_dims_floor_divides_at_tp3():
    d = rank_dims(load_model(FLASH), 8192, 3)
    assert d.heads == 21            # 64 // 3
    assert d.expert_dim == 682      # 2,048 // 3
    assert type(d.heads) is int and type(d.expert_dim) is int


def test_rank_dims_pads_the_floored_heads():
    d = rank_dims(_with_fields(num_attention_heads=129), 8192, 2)
    assert (d.heads, d.padded_heads) == (64, 64)   # 129 // 2 = 64 <= 64: padded to 64


def test_rank_dims_refusal_names_the_missing_field():
    model = _with_fields(hc_mult=None)
    text = ("kvplan sizes DeepSeek-V4's vLLM profile run from its config's 'hc_mult' field, which "
            "deepseek-ai/DeepSeek-V4-Flash lacks: plan it with --engine hf")
    with pytest.raises(WorkloadError, match="^" + re.escape(text) + "$"):
        rank_dims(model, 8192, 4)


def test_moe_request_sm10_is_zero():
    from kvplan.planning.engines.vllm_dsv4_peak import moe_request
    assert moe_request(rank_dims(load_model(FLASH), 8192, 4), (0, 33, 0), 10) == 0   # TRTLLM: (0,), (0,)


def test_marlin_margin_zero_before_032():
    from kvplan.planning.engines.vllm_dsv4_peak import marlin_margin
    model = load_model(FLASH)
    assert marlin_margin(model, 4096, 8192, 4, (0, 31, 0)) == 0   # 0.31 holds Marlin already
    # 0.33: Marlin 49,152 x 4,096 x 2 x 2 = 805,306,368 - Humming 469,762,048 = 335,544,320
    assert marlin_margin(model, 4096, 8192, 4, (0, 33, 0)) == 335544320   # 805,306,368 - 469,762,048


# ---- dsv4_activation -------------------------------------------------------------------------------------------

def _base(sampler: int, received: int):
    from kvplan.planning.engines.vllm_profile import ActivationBreakdown
    return ActivationBreakdown(0, sampler, received, 0, "")


def test_dsv4_activation_flash_033_full_stage_by_hand():
    from kvplan.planning.engines.vllm_dsv4_peak import dsv4_activation
    model = load_model(FLASH)
    got = dsv4_activation(model, _base(100 * MiB, 3 * MiB), 4096, 8192, 4, range(43), (0, 33, 0), 9)
    forward = 2521038848   # csa_moment docstring: 2,404.2 MiB (2,521,038,848 / 1,048,576 = 2,404.21875)
    workspace = 469762048   # Humming: 67,108,864 + 402,653,184 = 448.0 MiB
    assert got.forward_bytes == forward
    assert got.sampler_bytes == 100 * MiB
    assert got.pp_buffer_bytes == 3 * MiB
    assert got.total_bytes == forward + 3 * MiB + workspace   # max(2,404.2, 100) + 3 + 448 MiB
    # top four at the stand-in: out buffer 8,192 x 64 x 512 x 2 = 512 MiB, padded q 512, logits 512, the caller's
    # stream 336,199,680 = 320.6 MiB (ties keep their order)
    assert got.formula == (
        "max(DeepSeek-V4 forward 2,404.2 MiB (a CSA layer at the indexer's 512 MiB logits stand-in; at the stand-in: "
        "attention output buffer 512.0, q (padded heads) 512.0, indexer logits stand-in 512.0, caller's output and "
        "residual 320.6 MiB, ...), sampler 100.0 MiB) + shared workspace 448.0 MiB (the largest of FlashMLA's "
        "prefill gather, the indexer's key gather and the MoE kernel's buffers) + PP receive buffers 3.0 MiB")


def test_dsv4_activation_first_layer_csa_has_no_caller_stream():
    from kvplan.planning.engines.vllm_dsv4_peak import dsv4_activation
    model = load_model(FLASH)   # layers 2 (CSA) and 3 (ratio 128): the CSA layer is the stage's first
    got = dsv4_activation(model, _base(0, 0), 4096, 8192, 4, range(2, 4), (0, 33, 0), 9)
    assert got.forward_bytes == 2521038848 - 336199680   # 2,184,839,168: no caller-held 336,199,680
    assert got.formula.endswith("the MoE kernel's buffers)")   # no receive buffers: nothing after


def test_dsv4_activation_026_peaks_at_the_pad():
    from kvplan.planning.engines.vllm_dsv4_peak import dsv4_activation
    model = load_model(FLASH)
    got = dsv4_activation(model, _base(10 * MiB, 0), 4096, 8192, 4, range(43), (0, 26, 0), 9)
    # pad 2,015,625,216 = 1,922.25 MiB > the stand-in's 1,950,613,504 = 1,860.25 MiB (pad_moment docstring)
    assert got.forward_bytes == 2015625216   # 1,413,742,592 - 69,206,016 + 536,870,912 + 134,217,728
    assert got.total_bytes == 2015625216 + 805306368   # + Marlin's 805,306,368
    assert got.formula == (
        "max(DeepSeek-V4 forward 1,922.2 MiB (a CSA layer while F.pad copies q to the padded heads, after the indexer "
        "op; at the stand-in: attention output buffer 512.0, indexer logits stand-in 512.0, caller's output and "
        "residual 320.6, layer's residual and input 320.6 MiB, ...), sampler 10.0 MiB) + shared workspace 768.0 MiB "
        "(the largest of FlashMLA's prefill gather, the indexer's key gather and the MoE kernel's buffers)")


def test_dsv4_activation_refuses_a_stage_without_csa():
    from kvplan.planning.engines.vllm_dsv4_peak import dsv4_activation
    text = ("kvplan sizes DeepSeek-V4's vLLM profile run on stages that hold a CSA (ratio 4) layer: "
            "use fewer pipeline stages")
    with pytest.raises(WorkloadError, match="^" + re.escape(text) + "$"):
        dsv4_activation(load_model(FLASH), _base(0, 0), 4096, 8192, 4, range(0, 2), (0, 33, 0), 9)


def test_dsv4_activation_026_first_layer_pad_has_no_caller_stream():
    from kvplan.planning.engines.vllm_dsv4_peak import dsv4_activation
    model = load_model(FLASH)   # layers 2 (CSA, the stage's first) and 3
    got = dsv4_activation(model, _base(0, 0), 4096, 8192, 4, range(2, 4), (0, 26, 0), 9)
    # pad 2,015,625,216 - 336,199,680 = 1,679,425,536 > the stand-in's 1,950,613,504 - 336,199,680 = 1,614,413,824
    assert got.forward_bytes == 1679425536   # 2,015,625,216 - 336,199,680
