"""Tests that kill the mutants tools/mutation.py left alive in kvplan/planning/engines/vllm.py (#26): vLLM's plan
arithmetic (the budget, the KV pool, blocks, concurrency, the longest length that fits), its formula text and its
notes.

Figures come from hand arithmetic on the inputs written beside them; a note or refusal text is pinned word for word
(the note's text is the contract). Llama-3.2-1B, the workhorse here: 16 layers x 8 KV heads x 64 x (K + V) x 2 B =
32,768 B of KV a token, 16-token blocks of 16 x 32,768 = 524,288 B, a 4,096-token request 4,096 / 16 = 256 blocks."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from kvplan import load_model
from kvplan.config.load import as_model
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.planner import plan
from kvplan.units import fmt_bytes

GiB = 2**30
MiB = 2**20
BLOCK = 524_288          # 16 tokens x 32,768 B (Llama-3.2-1B)
REQUEST = 256 * BLOCK    # 4,096 tokens / 16 = 256 blocks: 134,217,728 B
LLAMA = "meta-llama/Llama-3.2-1B"


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _card(memory: int, name: str = "test card"):
    """An L4 (compute capability 8.9) with `memory` bytes: not an NVSwitch GPU (no NVLS)."""
    return dataclasses.replace(resolve_gpu("L4"), name=name, memory_bytes=memory)


def _pool(kv_bytes: int, **kw):
    """Llama-3.2-1B at 4,096 tokens on a 24 GiB card with --kv-cache-memory-bytes `kv_bytes`."""
    kw = {"max_model_len": 4096, **kw}
    return plan(LLAMA, engine="vllm", gpu=_card(24 * GiB), kv_cache_memory_bytes=kv_bytes, **kw)


# ----------------------------------------------------------------------------- the pool's boundaries

def test_a_pool_of_exactly_one_request_fits_to_the_byte():
    # 256 blocks x 524,288 B = 134,217,728 B: the start-up check `need <= pool` passes with nothing over
    p = _pool(REQUEST)
    assert (p.fits, p.shortfall_bytes, p.num_blocks, p.max_concurrency) == (True, 0, 256, 1.0)
    assert p.kv_pool_bytes == 134_217_728 and p.max_model_len_that_fits == 4096    # 256 x 524,288
    assert p.stages[0].layers == "0-15" and p.stages[0].num_blocks == 256   # 16 layers: 0 .. 15
    assert p.formula[0] == "KV pool = --kv-cache-memory-bytes 134,217,728 B = 128.00 MiB"   # 256 x 524,288
    assert p.formula[2] == ("blocks = 134,217,728 // 524,288 B per block = 256; "          # 256 x 524,288
                            "tokens = int(1.0000 x 4,096) = 4,096")
    assert p.formula[3] == "max concurrency = 256 / 256 blocks per 4,096-token request = 1.00"
    assert not any(n.startswith("vLLM starts") for n in p.notes) and "" not in p.notes


def test_a_pool_one_byte_short_fails_by_one_byte():
    # 134,217,727 B = 255 blocks + 524,287 B: the need is 134,217,728 B, 1 B more; the longest request 255 x 16
    p = _pool(REQUEST - 1)
    assert (p.fits, p.shortfall_bytes, p.num_blocks) == (False, 1, 255)
    assert p.max_model_len_that_fits == 4080                           # 255 blocks x 16 tokens
    # the bytes check fails, so no "starts with a max concurrency of ..." note (that is for a pool past the bytes)
    assert not any(n.startswith("vLLM starts") for n in p.notes) and "" not in p.notes


def test_the_shortfall_is_in_bytes_not_whole_blocks():
    # 200 blocks + 1,000 B = 104,858,600 B (200 x 524,288 = 104,857,600): short 134,217,728 - 104,858,600 B
    p = _pool(200 * BLOCK + 1000)                                      # 200 x 524,288 + 1,000
    assert p.shortfall_bytes == 29_359_128                             # 134,217,728 - 104,858,600
    assert p.max_model_len_that_fits == 3200 and not p.fits           # 200 blocks x 16 tokens
    assert not any(n.startswith("vLLM starts") for n in p.notes)


def test_a_pool_under_one_block_holds_no_request():
    # 524,287 B < one 524,288-B block: no length fits, not even 1 token
    p = _pool(BLOCK - 1)
    assert (p.num_blocks, p.max_model_len_that_fits, p.fits) == (0, 0, False)
    assert p.shortfall_bytes == REQUEST - (BLOCK - 1)                  # 134,217,728 - 524,287


@pytest.mark.parametrize("tokens", [1, 2, 3])
def test_one_token_blocks_fit_to_the_token(tokens):
    # --block-size 1: a block is one token's 32,768 B; a pool of k tokens holds a k-token request, no more
    p = _pool(tokens * 32_768, block_size=1)                           # k x 32,768 B
    assert p.max_model_len_that_fits == tokens and p.num_blocks == tokens and p.block_size == 1


def test_the_longest_length_is_exact_inside_a_block():
    # 100 blocks = 52,428,800 B hold 1,600 tokens (100 x 16); 1,601 would take a 101st block
    p = _pool(100 * BLOCK)                                             # 100 x 524,288
    assert p.max_model_len_that_fits == 1600


# ----------------------------------------------------------------------------- the formula's text

def test_the_tokens_line_by_version():
    # vLLM through 0.20.0 logs blocks x block size (16-token blocks); 0.20.1+ int(concurrency x max_model_len)
    old = _pool(REQUEST, engine_version="0.20.0")
    new = _pool(REQUEST, engine_version="0.20.1")
    assert old.formula[2] == "blocks = 134,217,728 // 524,288 B per block = 256; tokens = 4,096 (16-token blocks)"
    assert new.formula[2] == ("blocks = 134,217,728 // 524,288 B per block = 256; "       # 256 x 524,288
                              "tokens = int(1.0000 x 4,096) = 4,096")
    wide = _pool(REQUEST, engine_version="0.20.0", block_size=32)       # 128 blocks of 32 x 32,768 = 1,048,576 B
    assert wide.formula[2] == "blocks = 134,217,728 // 1,048,576 B per block = 128; tokens = 4,096 (32-token blocks)"


def test_the_budget_line_names_each_term_spent():
    # the pool = ceil(0.9 x 24 GiB) - weights - activation - non-torch - 256 x 4 x 140,753 B of V2 sampler buffers
    # (256 sequences x 4 B x (128,256 + 4,008 + 4,008 + 3,072 + 128 + 1,024 + 129 + 128) a row = 144,131,072 B, the
    # rows of tests/test_vllm_rules.py's 1,024-sequence figure) - the CUDA-graph estimate 72 + 130 + 50 x 4 + 34 x 2 =
    # 470 MiB (the plan's own CUDA-graph note)
    p = plan(LLAMA, engine="vllm", gpu=_card(24 * GiB), max_model_len=4096, gpu_memory_utilization=0.9)
    assert p.extra == {"V2 sampler buffers": 144_131_072, "CUDA graphs (estimate)": 470 * MiB}   # 256 x 4 x 140,753
    pool = math.ceil(0.9 * 24 * GiB) - p.weights_bytes - p.activation_bytes - p.non_torch_bytes - 144_131_072 - 470 * MiB
    assert p.kv_pool_bytes == pool
    assert p.formula[0] == (f"KV pool = ceil(0.9 x 24.00 GiB) - weights {fmt_bytes(p.weights_bytes)} - activation "
                            f"{fmt_bytes(p.activation_bytes)} - non-torch {fmt_bytes(p.non_torch_bytes)} - V2 sampler "
                            f"buffers 137.45 MiB - CUDA graphs (estimate) 470.00 MiB = {fmt_bytes(pool)}")
    blocks = pool // BLOCK
    assert p.num_blocks == blocks and p.formula[2].startswith(f"blocks = {pool:,} // 524,288 B per block = {blocks:,}; ")


def test_a_negative_pool_prints_as_zero_blocks():
    # a 1 GiB card: 0.9 GiB cannot hold Llama-3.2-1B's 2.3 GiB of weights; the pool shows as 0
    p = plan(LLAMA, engine="vllm", gpu=_card(GiB), max_model_len=4096, gpu_memory_utilization=0.9)
    assert p.kv_pool_bytes == 0 and p.num_blocks == 0 and not p.fits and p.max_model_len_that_fits == 0
    assert p.formula[2] == "blocks = 0 // 524,288 B per block = 0; tokens = int(0.0000 x 4,096) = 0"


# ----------------------------------------------------------------------------- a fixed pool past the card

def test_a_fixed_pool_may_fill_the_card_to_the_byte():
    # with --kv-cache-memory-bytes the card must hold weights + activation + non-torch + every extra + the pool
    probe = _pool(REQUEST)
    parts = probe.weights_bytes + probe.activation_bytes + probe.non_torch_bytes + sum(probe.extra.values())
    exact = plan(LLAMA, engine="vllm", gpu=_card(parts + REQUEST), max_model_len=4096, kv_cache_memory_bytes=REQUEST)
    short = plan(LLAMA, engine="vllm", gpu=_card(parts + REQUEST - 1), max_model_len=4096,
                 kv_cache_memory_bytes=REQUEST)
    for p in (exact, short):   # the same parts on both cards
        assert (p.weights_bytes, p.activation_bytes, p.non_torch_bytes, p.extra) == (
            probe.weights_bytes, probe.activation_bytes, probe.non_torch_bytes, probe.extra)
    assert exact.fits and exact.shortfall_bytes == 0
    assert not short.fits and short.shortfall_bytes == 1


# ----------------------------------------------------------------------------- the command

def test_a_text_model_command_carries_no_image_flag():
    p = plan(LLAMA, engine="vllm", gpu=_card(24 * GiB), max_model_len=4096, gpu_memory_utilization=0.9)
    assert p.vllm_command == ("vllm serve meta-llama/Llama-3.2-1B --tensor-parallel-size 1 --max-model-len 4096 "
                              "--max-num-seqs 256 --gpu-memory-utilization 0.9")


# ----------------------------------------------------------------------------- MXFP4 padding (gpt-oss-20b)

# gpt-oss-20b: 24 MoE layers of 32 experts, intermediate 2,880, hidden 2,880, MXFP4 (4 bits + an 8-bit scale per 32:
# 17 / 32 B a weight), gate_up + down = 3 x intermediate x hidden weights an expert. Marlin on Hopper pads the
# intermediate to a multiple of 64 (2,880 -> 2,944, 1,440 -> 1,536) and the hidden to 256 (2,880 -> 3,072), and
# the bf16 biases with them (2 x intermediate + hidden values):
#   whole experts:   3 x (2,944 x 3,072 - 2,880 x 2,880) x 17 / 32 + (2 x 64 + 192) x 2 = 1,194,624 + 640
#                    = 1,195,264 B an expert
#   halved (TP 2):   3 x (1,536 x 3,072 - 1,440 x 2,880) x 17 / 32 + (2 x 96 + 192) x 2 = 910,656 + 768
#                    = 911,424 B an expert
def _padding(per_expert: int, experts: int, layers: int, inter: int, inter_p: int) -> str:
    total = per_expert * experts * layers
    return (f"MXFP4 experts padded for vLLM's Marlin MoE kernel on H100-SXM: intermediate per rank {inter:,} -> "
            f"{inter_p:,}, hidden 2,880 -> 3,072: +{fmt_bytes(total)} ({total:,} B)")


@pytest.mark.parametrize("kwargs, lines", [
    ({}, [_padding(1_195_264, 32, 24, 2880, 2944)]),                       # 917,962,752 B (1,195,264 x 32 x 24)
    ({"tp": 2}, [_padding(911_424, 32, 24, 1440, 1536)]),                  # 699,973,632 B (911,424 x 32 x 24)
    ({"dp": 2, "num_gpus": 2}, [_padding(911_424, 32, 24, 1440, 1536)]),   # DP 2: experts over TP x DP = 2 ranks
    ({"tp": 2, "expert_parallel": True}, [_padding(1_195_264, 16, 24, 2880, 2944)]),   # EP: 16 whole experts a rank
    ({"pp": 2}, ["stage 0: " + _padding(1_195_264, 32, 12, 2880, 2944),    # 12 layers a stage: 458,981,376 B (1,195,264 x 32 x 12)
                 "stage 1: " + _padding(1_195_264, 32, 12, 2880, 2944)]),
])
def test_mxfp4_padding_lines_by_parallelism(kwargs, lines):
    p = plan("openai/gpt-oss-20b", engine="vllm", gpu="H100", max_model_len=4096, **kwargs)
    assert [n for n in p.notes if "MXFP4 experts padded" in n] == lines
    if kwargs == {"pp": 2}:
        assert [s.layers for s in p.stages] == ["0-11", "12-23"]   # 24 layers / 2


HOPPER_MXFP4 = ("Hopper: sized for the Marlin MoE kernel (published H100 logs of gpt-oss); a vLLM with OpenAI's "
                "triton_kernels uses the Triton layout instead, with less padding")


def test_the_hopper_mxfp4_note_is_for_mxfp4_on_hopper_only():
    oss = plan("openai/gpt-oss-20b", engine="vllm", gpu="H100", max_model_len=4096)
    llama = plan(LLAMA, engine="vllm", gpu="H100", max_model_len=4096)
    assert HOPPER_MXFP4 in oss.notes and HOPPER_MXFP4 not in llama.notes


# ----------------------------------------------------------------------------- FP8 weights without FP8 tensor cores

MARLIN = ("FP8 weights on the {} (compute capability {}, no FP8 tensor cores) run through vLLM's weight-only Marlin "
          "kernel: stored in fp8 as planned, computed in 16-bit")


@pytest.mark.parametrize("gpu, cc, noted", [
    ("T4", "7.5", True), ("A100", "8.0", True),
    ("L4", "8.9", False), ("H100", "9.0", False),   # 8.9 and newer have FP8 tensor cores
])
def test_the_marlin_fp8_note_below_compute_capability_8_9(gpu, cc, noted):
    p = plan("Qwen/Qwen3-8B", engine="vllm", gpu=gpu, max_model_len=4096, quantization="fp8")
    said = [n for n in p.notes if n.startswith("FP8 weights on the")]
    assert said == ([MARLIN.format(p.gpu, cc)] if noted else [])
    assert not any(n.startswith("FP8 weights on the") for n in
                   plan("Qwen/Qwen3-8B", engine="vllm", gpu=gpu, max_model_len=4096).notes)   # bf16: no note


# ----------------------------------------------------------------------------- NCCL without NVLink SHARP

NCCL = "NCCL memory without NVLink SHARP is an assumption (0.25 GiB), not a measurement"


@pytest.mark.parametrize("gpu, tp, nvls, said", [
    ("L40S", 2, None, [NCCL]),                                            # no NVSwitch: the assumption
    ("L40S", 2, False, [NCCL + " (NVLS off: run with NCCL_NVLS_ENABLE=0)"]),
    ("H100", 2, False, [NCCL + " (NVLS off: run with NCCL_NVLS_ENABLE=0)"]),   # NVSwitch, NVLS turned off
    ("H100", 2, None, []),                                                # NVSwitch: measured NVLS buffers
    ("L40S", 1, None, []),                                                # TP 1: no NCCL at all
])
def test_the_nccl_assumption_note(gpu, tp, nvls, said):
    p = plan(LLAMA, engine="vllm", gpu=gpu, tp=tp, max_model_len=4096, nvls=nvls)
    assert [n for n in p.notes if n.startswith("NCCL memory")] == said


def test_the_data_parallel_note_word_for_word():
    # 2 engines of TP 2 (4 GPUs): the concurrency printed once per engine, doubled for the whole
    p = plan(LLAMA, engine="vllm", gpu="H100", tp=2, dp=2, num_gpus=4, max_model_len=4096)
    c = p.num_blocks / 256                                                # blocks / 256 blocks a 4,096-token request
    assert [n for n in p.notes if "data-parallel" in n] == [
        f"2 data-parallel engines, each with its own KV pool: the figures are one engine's, 2 x {c:,.2f} = "
        f"{2 * c:,.2f} requests in all; the DP group's NCCL buffers (and DeepEP's, with --all2all-backend "
        "deepep_*) are not modelled"]


# ----------------------------------------------------------------------------- sparse MLA's fp8_ds_mla layout

SPARSE = ("sparse MLA on the {}: vLLM's {} backend caches the latent in DeepSeek's fp8_ds_mla layout, 656 B a token "
          "a layer (512 fp8 + 4 fp32 scales + 64 bf16 RoPE), not 576{}")


@pytest.mark.parametrize("gpu, kv, note", [
    ("H100", "fp8", SPARSE.format("H100-SXM", "FLASHMLA_SPARSE", " B")),
    ("RTX-PRO-6000-Blackwell", "auto", SPARSE.format("RTX-PRO-6000-Blackwell", "FLASHINFER_MLA_SPARSE_SM120",
                                                     " x 2 B: it quantizes even an 'auto' cache")),
    ("RTX-PRO-6000-Blackwell", "fp8", SPARSE.format("RTX-PRO-6000-Blackwell", "FLASHINFER_MLA_SPARSE_SM120", " B")),
    ("B200", "fp8", None),                                                # SM100 keeps the standard fp8 latent
])
def test_the_sparse_mla_layout_note(gpu, kv, note):
    p = plan("deepseek-ai/DeepSeek-V3.2", engine="vllm", gpu=gpu, tp=8, max_model_len=8192, kv_dtype=kv)
    assert [n for n in p.notes if n.startswith("sparse MLA")] == ([note] if note else [])


# ----------------------------------------------------------------------------- refusals word for word

def test_a_version_before_0_6_is_refused_word_for_word():
    with pytest.raises(WorkloadError, match=_exact("kvplan plans vLLM from 0.6 on, not 0.5.4: pick a newer engine "
                                                   "version")):
        plan(LLAMA, engine="vllm", gpu="H100", max_model_len=4096, engine_version="0.5.4")


@pytest.mark.parametrize("model, tail", [
    (LLAMA, ", or leave --quantization fp8 out"),                           # bf16 checkpoint, fp8 asked online
])
def test_fp8_below_7_5_is_refused_word_for_word(model, tail):
    # vLLM 0.19+ Fp8Config.get_min_capability 75: a V100 (7.0) never runs it
    with pytest.raises(WorkloadError, match=_exact("vLLM 0.33 runs FP8 weights on compute capability 7.5 and newer, "
                                                   "and the V100-SXM2-16GB has 7.0: pick a newer card" + tail)):
        plan(model, engine="vllm", gpu="V100", max_model_len=4096, quantization="fp8")


def _llama_with_qwen2_vocab():
    # Llama-3.1-8B's config.json with 48 heads / 24 KV heads of 128 (TP 3 divides both) and Qwen2's vocabulary
    import json
    from pathlib import Path

    from kvplan import parse_config
    data = json.loads((Path(__file__).resolve().parents[1] / "model_configs" / "meta-llama__Llama-3.1-8B.json")
                      .read_text())
    return parse_config({**data, "num_attention_heads": 48, "num_key_value_heads": 24, "head_dim": 128,
                         "vocab_size": 151_936})                          # Qwen2's 151,936 rows


def test_a_vocabulary_tp_does_not_divide_is_refused_word_for_word():
    # 151,936 rows = 2,374 x 64 need no padding, and 151,936 / 3 = 50,645.33: vLLM's divide() asserts
    with pytest.raises(WorkloadError, match=_exact(
            "custom's vocabulary of 151,936 rows pads to 151,936 (a multiple of 64), which TP 3 does "
            "not divide: vLLM's VocabParallelEmbedding asserts it does at start-up (vocab_parallel_embedding.py, "
            "divide()); use a TP that divides it")):
        plan(_llama_with_qwen2_vocab(), engine="vllm", gpu="H100", tp=3, max_model_len=4096)


# ----------------------------------------------------------------------------- the weights' vocabulary and experts

def test_the_vocabulary_is_padded_to_64_rows_in_the_weights():
    # gpt-j-6b: vocab 50,400 -> 50,432 (a multiple of 64): 32 more rows of 4,096 x 2 B in embed_tokens and in the
    # untied lm_head (2 x 262,144 B), and 32 more of its bias (64 B); the rotary cos / sin cache 2,048 positions x 64
    # rotary dims x 2 B = 262,144 B (vllm rotary_embedding: [max_position, rotary_dim])
    p = plan("EleutherAI/gpt-j-6b", engine="vllm", gpu="H100", max_model_len=2048)
    assert p.weights_bytes - p.weights_rule_bytes == 2 * 262_144 + 64 + 262_144     # 2 x 32 x 4,096 x 2 + 32 x 2 + ...


def test_expert_parallel_puts_whole_experts_on_the_heaviest_rank():
    # Qwen1.5-MoE-A2.7B: 24 layers of 60 experts (intermediate 1,408, hidden 2,048) over 8 ranks: TP shards each
    # expert (60 / 8 = 7.5 experts' bytes a rank), EP gives the heaviest rank ceil(60 / 8) = 8 whole ones:
    # 0.5 x 24 x 3 x 2,048 x 1,408 x 2 B = 207,618,048 B more
    tp = plan("Qwen/Qwen1.5-MoE-A2.7B-Chat", engine="vllm", gpu="H100", tp=8, max_model_len=4096)
    ep = plan("Qwen/Qwen1.5-MoE-A2.7B-Chat", engine="vllm", gpu="H100", tp=8, max_model_len=4096, expert_parallel=True)
    assert ep.weights_bytes - tp.weights_bytes == 207_618_048      # 12 x 3 x 2,048 x 1,408 x 2


# ----------------------------------------------------------------------------- multimodal: towers and encoder cache

QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"
MISTRAL3 = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"   # Mistral3ForConditionalGeneration


def _weights(model, version, text_only):
    kw = {"language_model_only": True} if text_only else {}
    return plan(model, engine="vllm", gpu="H100", max_model_len=4096, engine_version=version, **kw).weights_bytes


def test_a_text_only_start_skips_the_tower_from_0_15():
    # vLLM 0.15 `_mark_tower_model`: a zero image limit loads no vision tower, for every model; before 0.15 only
    # Mistral 3 skipped it (0.11 mistral3.py: no vision tower when every limit is 0)
    whole, text = _weights(QWEN_VL, None, False), _weights(QWEN_VL, None, True)
    assert whole > text
    assert _weights(QWEN_VL, "0.15.0", True) == text                     # 0.15.0 itself skips it
    assert _weights(QWEN_VL, "0.14.0", True) == whole                    # 0.14 loads it, text-only or not
    m_whole, m_text = _weights(MISTRAL3, None, False), _weights(MISTRAL3, None, True)
    assert m_whole > m_text
    assert _weights(MISTRAL3, "0.14.0", True) == m_text                  # Mistral 3 skipped it already
    assert _weights(MISTRAL3, "0.14.0", False) == m_whole


# Mistral-Small-3.1: 3,025-token images (a 1,540 px square in 28 px patches: 55 x 55), hidden 5,120, bf16
ENCODER = ("encoder cache of the profile run: {n} dummy images (budget 8,192 // 3,025 tokens, at most {seqs} sequences "
           "x {per} per prompt) x 3,025 x 5,120 x 2 B = {total:,} B, unpadded (vLLM >= 0.13)")


@pytest.mark.parametrize("kwargs, n, seqs, per", [
    ({}, 2, "1,024", 1),                                                  # 4,096 // 3,025 = 1 image a prompt
    ({"max_num_seqs": 1, "max_model_len": 32768}, 2, "1", 10),            # 32,768 // 3,025 = 10 a prompt
    ({"max_num_seqs": 1, "max_model_len": 32768, "images_per_prompt": 1}, 1, "1", 1),   # the limit binds: 1 x 1
])
def test_the_encoder_cache_kept_by_the_profile(kwargs, n, seqs, per):
    kw = {"max_model_len": 4096, **kwargs}
    p = plan(MISTRAL3, engine="vllm", gpu="H100", **kw)
    total = n * 3025 * 5120 * 2                                          # n x 3,025 x 5,120 x 2 B
    assert [x for x in p.notes if x.startswith("encoder cache")] == [ENCODER.format(n=n, seqs=seqs, per=per,
                                                                                    total=total)]
    kw.pop("images_per_prompt", None)
    text = plan(MISTRAL3, engine="vllm", gpu="H100", language_model_only=True, **kw)
    assert p.activation_bytes == text.activation_bytes + total
    assert not any(x.startswith("encoder cache") for x in text.notes) and "" not in text.notes


def test_the_encoder_cache_sits_on_the_first_stage_only():
    # PP 2: the first stage runs the tower and keeps 2 x 3,025 x 5,120 x 2 B = 61,952,000 B; the second none
    p = plan(MISTRAL3, engine="vllm", gpu="H100", max_model_len=4096, pp=2)
    text = plan(MISTRAL3, engine="vllm", gpu="H100", max_model_len=4096, pp=2, language_model_only=True)
    assert p.stages[0].activation_bytes == text.stages[0].activation_bytes + 61_952_000   # 2 x 3,025 x 5,120 x 2
    assert p.stages[1].activation_bytes == text.stages[1].activation_bytes


@pytest.mark.parametrize("kwargs, tail", [
    ({}, "--max-num-seqs 1024 --gpu-memory-utilization 0.92"),           # no limit given: no flag
    ({"language_model_only": True}, "--max-num-seqs 1024 --gpu-memory-utilization 0.92 --language-model-only"),
    ({"images_per_prompt": 1}, "--max-num-seqs 1024 --gpu-memory-utilization 0.92 --limit-mm-per-prompt "
                               "'{\"image\": 1}'"),
])
def test_a_multimodal_command_carries_the_limit_given(kwargs, tail):
    p = plan(QWEN_VL, engine="vllm", gpu="H100", max_model_len=4096, **kwargs)
    assert p.vllm_command == "vllm serve Qwen/Qwen2.5-VL-7B-Instruct --tensor-parallel-size 1 --max-model-len 4096 " + tail


# ----------------------------------------------------------------------------- a sliding window's in-flight batches

# gpt-oss-20b: 24 layers, 12 sliding (128-token window) and 12 full, 8 KV heads x 64 x (K + V) x 2 B = 2,048 B a token
# a layer: two KV groups of 12 layers, 16 x 2,048 = 32,768 B pages, 12 x 32,768 = 393,216 B a block. At 256 batched
# tokens and vLLM 0.33's 2 batches in flight (V2, PP 1: pp + 1), a sliding layer holds min(127 + 2 x 256, 4,096) = 639
# tokens: cdiv(639, 16) + 1 = 41 blocks (0.33 kv_cache_interface.py `max_admission_blocks_per_request`), a full layer
# 4,096 / 16 = 256: a request needs 12 x (256 + 41) x 32,768 = 116,785,152 B, 297 blocks
OSS_NEED = 12 * 297 * 32_768                                              # 116,785,152 B


def _oss(kv_bytes: int, **kw):
    return plan("openai/gpt-oss-20b", engine="vllm", gpu="H100", max_model_len=4096, max_num_batched_tokens=256,
                max_num_seqs=128, kv_cache_memory_bytes=kv_bytes, **kw)


def test_a_sliding_window_holds_its_in_flight_batches():
    exact, short = _oss(OSS_NEED), _oss(OSS_NEED - 1)
    assert (exact.fits, exact.shortfall_bytes, exact.num_blocks, exact.max_model_len_that_fits) == (True, 0, 297, 4096)
    assert exact.formula[3] == "max concurrency = 297 / 297 blocks per 4,096-token request = 1.00"
    # 1 B short: 296 blocks; the longest request cdiv(L, 16) + 41 <= 296 blocks: 255 x 16 = 4,080 tokens
    assert (short.fits, short.shortfall_bytes, short.num_blocks, short.max_model_len_that_fits) == (False, 1, 296, 4080)
    assert not any(n.startswith("vLLM starts") for n in short.notes)


def test_max_concurrency_at_another_length_counts_the_window():
    # at 2,048 tokens: full 2,048 / 16 = 128 blocks + sliding 41 = 169 a request; 297 / 169 requests
    from kvplan.planning.engines.vllm import max_concurrency_at
    model = load_model("openai/gpt-oss-20b")
    p = _oss(OSS_NEED)
    assert max_concurrency_at(p, 2048, model) == 297 / 169
    # a plan without its layers (one read back from JSON): the model's layers, the same rules
    assert max_concurrency_at(p.model_copy(update={"kv_layers": ()}), 2048, model) == 297 / 169
    # no rules recorded: vLLM's defaults (1 batch in flight): sliding min(127 + 256, 2,048) = 383 tokens, 24 + 1 = 25
    # blocks, 128 + 25 = 153 a request
    assert max_concurrency_at(p.model_copy(update={"kv_rules": None}), 2048, model) == 297 / 153
    with pytest.raises(WorkloadError, match=_exact("context_len must be a positive whole number, got 0")):
        max_concurrency_at(p, 0, model)


def test_max_concurrency_at_without_layers_counts_the_models_bytes():
    # Llama-3.2-1B, 256 blocks of 524,288 B: 1,024-token requests take 64 blocks, 256 / 64 = 4 at once
    from kvplan.planning.engines.vllm import max_concurrency_at
    model = load_model(LLAMA)
    p = _pool(REQUEST).model_copy(update={"kv_layers": ()})
    assert max_concurrency_at(p, 1024, model) == 4.0
    # fp8 KV: 16,384 B a token, 262,144 B blocks: the same 134,217,728 B hold 512 of them, 512 / 64 = 8
    fp8 = _pool(REQUEST, kv_dtype="fp8").model_copy(update={"kv_layers": ()})
    assert fp8.num_blocks == 512 and max_concurrency_at(fp8, 1024, model) == 8.0


def test_max_concurrency_at_without_layers_counts_the_mamba_state():
    # mamba-2.8b: 64 Mamba layers, d_inner 2 x 2,560 = 5,120, d_state 16, conv kernel 4: a layer's state
    # (5,120 x 16 + 3 x 5,120) x 2 B = 194,560 B, one page per request: 64 x 194,560 = 12,451,840 B a request
    from kvplan.planning.engines.vllm import max_concurrency_at
    model = load_model("state-spaces/mamba-2.8b-hf")
    p = plan(model, engine="vllm", gpu="H100", max_model_len=8192, kv_cache_memory_bytes=100 * 12_451_840 + 5)
    assert max_concurrency_at(p.model_copy(update={"kv_layers": ()}), 4096, model) == 100.0   # 64 x 194,560 a page
    f32 = plan(model, engine="vllm", gpu="H100", max_model_len=8192, dtype="float32",
               kv_cache_memory_bytes=100 * 12_451_840 + 5)                # 4 B states: 50 requests
    assert max_concurrency_at(f32.model_copy(update={"kv_layers": ()}), 4096, model) == 50.0


# ----------------------------------------------------------------------------- plan_vllm's own defaults

def test_plan_vllms_defaults_are_vllms():
    # no DP (1 engine), no expert parallelism, CUDA graphs on (no --enforce-eager), the length as given (not auto)
    from kvplan.dtypes import resolve_dtype
    from kvplan.planning.engines.vllm import plan_vllm
    bf16 = resolve_dtype("bfloat16")
    p = plan_vllm(load_model(LLAMA), _card(24 * GiB), tp=1, pp=1, util=0.9, max_len=4096, act=bf16, kv=bf16,
                  quantization=None, version=(0, 33, 0), max_num_batched_tokens=None, max_num_seqs=None,
                  block_size=None, usage_context="api_server", limit=None)
    assert (p.num_gpus, p.data_parallel_size, p.expert_parallel_size, p.max_model_len) == (1, 1, 1, 4096)
    assert p.vllm_command == ("vllm serve meta-llama/Llama-3.2-1B --tensor-parallel-size 1 --max-model-len 4096 "
                              "--max-num-seqs 256 --gpu-memory-utilization 0.9")
    assert not any(n.startswith("max_model_len auto") for n in p.notes)


# ----------------------------------------------------------------------------- DeepSeek-V4's packed groups

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
# Flash (tests/test_vllm_dsv4.py by hand): 1,002,240 B a block id; a 4,096-token request at 8,192 batched tokens takes
# windows 2 x (cdiv(4,096, 64) + 1) + entries 4,096 / 256 + CSA states cdiv(4,096, 4) + 1 + HCA states
# cdiv(4,096, 8) + 1 = 130 + 16 + 1,025 + 513 = 1,684 blocks; vLLM 0.33's check holds back the null block: the
# pool must hold 1,685 x 1,002,240 = 1,688,774,400 B
FLASH_NEED = 1685 * 1_002_240                                             # 1,688,774,400 B


def _flash(kv_bytes: int, **kw):
    kw = {"max_model_len": 4096, **kw}
    return plan(FLASH, engine="vllm", gpu="H100", num_gpus=4, kv_cache_memory_bytes=kv_bytes, **kw)


def test_a_packed_pool_of_one_request_and_the_null_block_fits():
    p = _flash(FLASH_NEED)
    assert (p.fits, p.shortfall_bytes, p.num_blocks, p.max_model_len_that_fits) == (True, 0, 1685, 4096)   # 1,684 + the null block
    assert p.formula[2] == ("blocks = 1,688,774,400 // 1,002,240 B per block = 1,685; "   # 1,685 x 1,002,240
                            "tokens = int(1.0006 x 4,096) = 4,098")                       # 1,685 / 1,684 x 4,096
    # 1 B short: 1,684 blocks, one short of request + null block; the longest request then takes 1,683 blocks:
    # 4,092 tokens (CSA cdiv(4,092, 4) + 1 = 1,024, HCA cdiv(4,092, 8) + 1 = 513, windows 65 each, entries 16);
    # 4,093 would take cdiv(4,093, 4) + 1 = 1,025 CSA blocks again
    short = _flash(FLASH_NEED - 1)
    assert (short.fits, short.shortfall_bytes, short.num_blocks, short.max_model_len_that_fits) == (False, 1, 1684,
                                                                                                   4092)


def test_packed_blocks_count_the_batches_in_flight():
    # 65,536 tokens, 8,192 batched, 2 batches in flight (0.33 V2): windows cdiv(127 + 16,384, 64) + 1 = 259 each,
    # entries 65,536 / 256 = 256, CSA states cdiv(7 + 16,384, 4) + 1 = 4,099, HCA cdiv(127 + 16,384, 8) + 1 = 2,065
    p = plan(FLASH, engine="vllm", gpu="H100", num_gpus=4, max_model_len=65536)
    note = next(n for n in p.notes if "KV-cache groups" in n)
    assert note.endswith("a 65,536-token request takes 259 + 259 + 256 + 4,099 + 2,065 = 6,938 blocks (each sliding "
                         "cache holds its window plus the tokens in flight, capped at max_model_len)")
    assert p.formula[3] == (f"max concurrency = {p.num_blocks:,} / 6,938 blocks per 65,536-token request = "
                            f"{p.num_blocks / 6938:.2f}")


def test_max_concurrency_at_reads_the_plans_packed_layout():
    # vLLM 0.22's layer-tuple layout: the plan's own blocks per request (printed), counted again from its version
    from kvplan.planning.engines.vllm import max_concurrency_at
    p = plan(FLASH, engine="vllm", gpu="H100", num_gpus=4, max_model_len=4096, engine_version="0.22.0",
             kv_dtype="fp8")
    per_request = int(re.fullmatch(r"max concurrency = [\d,]+ / ([\d,]+) blocks per 4,096-token request = [\d.]+",
                                   p.formula[3]).group(1).replace(",", ""))
    assert per_request == 1494                                            # 0.22's tuples (printed by the plan)
    assert max_concurrency_at(p, 4096, load_model(FLASH)) == p.num_blocks / 1494
    latest = plan(FLASH, engine="vllm", gpu="H100", num_gpus=4, max_model_len=4096)
    assert max_concurrency_at(latest, 4096, load_model(FLASH)) == latest.num_blocks / 1684   # 0.33: 1,684 (above)


def test_v2_with_pipeline_stages_holds_pp_plus_one_batches():
    # vLLM 0.33 config/vllm.py `max_concurrent_batches`: async scheduling on the V2 runner, pp + 1 = 3 batches at PP 2;
    # gpt-oss-20b's sliding layers then hold min(127 + 3 x 256, 4,096) = 895 tokens: cdiv(895, 16) + 1 = 57 blocks,
    # + 256 full = 313 a request. A stage holds 12 layers (6 + 6): 10 GiB / (6 x 32,768 B) = 54,613 blocks
    p = plan("openai/gpt-oss-20b", engine="vllm", gpu="H100", max_model_len=4096, pp=2, max_num_batched_tokens=256,
             max_num_seqs=128, kv_cache_memory_bytes=10 * GiB)
    assert p.kv_rules.inflight == 3
    assert p.formula[3] == "max concurrency = 54,613 / 313 blocks per 4,096-token request = 174.48"   # 54,613 / 313
    # 0.25: one batch (before 0.26): min(127 + 256, 4,096) = 383 tokens, 24 + 1 = 25 blocks, 281 a request
    old = plan("openai/gpt-oss-20b", engine="vllm", gpu="H100", max_model_len=4096, pp=2, max_num_batched_tokens=256,
               max_num_seqs=128, kv_cache_memory_bytes=10 * GiB, engine_version="0.25.0")
    assert old.formula[3] == "max concurrency = 54,613 / 281 blocks per 4,096-token request = 194.35"  # 54,613 / 281


@pytest.mark.parametrize("gpu, caching, block", [
    ("H100", None, 832), ("H100", True, 832),   # 0.33 'align' with FlashInfer's GDN prefill: lcm(16, 64) = 64
    ("H100", False, 784),                       # prefix caching off: mode 'none', FlashAttention's 16
    ("L40S", None, 784),                        # no FlashInfer GDN prefill on SM 8.9: 16
])
def test_the_gdn_checkpoint_alignment_sets_qwen35s_block(gpu, caching, block):
    # Qwen3.5-27B: a GDN state of 3 x 20,480 B conv + 48 heads x 128 x 128 x 4 B = 3,207,168 B beside 4 KV heads x 256
    # x (K + V) x 2 B = 4,096 B a token of attention (vLLM platforms/interface.py `_align_hybrid_block_size`):
    # alignment 16: 16 x cdiv(3,207,168, 16 x 4,096) = 16 x 49 = 784; alignment 64: 64 x cdiv(3,207,168, 262,144)
    # = 64 x 13 = 832
    p = plan("Qwen/Qwen3.5-27B", engine="vllm", gpu=gpu, max_model_len=8192, enable_prefix_caching=caching)
    assert p.block_size == block


def _gemma4_unequal_pages():
    # gemma-4-E4B-it's config with its full layers' head_dim 512 -> 384: full 2 KV heads x 384 x (K + V) x 2 B =
    # 3,072 B a token, sliding 2 x 256 x 2 x 2 = 2,048; 3,072 / 2,048 is no whole number, so vLLM pads each sliding
    # page to the full one (unify_kv_cache_spec_page_size, 0.24+; through 0.23 it raises NotImplementedError)
    import json
    from pathlib import Path

    from kvplan import parse_config
    data = json.loads((Path(__file__).resolve().parents[1] / "model_configs" / "google__gemma-4-E4B-it.json")
                      .read_text())
    return parse_config({**data, "text_config": {**data["text_config"], "global_head_dim": 384}})


@pytest.mark.parametrize("version", [None, "0.26.0"])
def test_a_page_that_does_not_divide_is_padded_to_the_largest(version):
    # 24 KV layers (18 more share caches): 20 sliding, 4 full, groups of 4: 5 sliding groups + 1 full; 16-token
    # pages of 49,152 B (full, 16 x 3,072) and the sliding 32,768 padded to 49,152: a block 4 x 49,152 = 196,608 B,
    # 2**30 // 196,608 = 5,461 blocks. A 4,096-token request, 512 batched tokens x 2 in flight: sliding min(511 +
    # 1,024, 4,096) = 1,535 tokens, cdiv(1,535, 16) + 1 = 97 pages; full 4,096 / 16 = 256; 5 x 97 + 256 = 741 blocks.
    # With every page equal, 0.27+'s rounding per group (0.33 get_max_concurrency_for_kv_cache_config) and 0.26's
    # one rounding over the sum (cdiv(4 x 741 x 49,152, 4 x 49,152)) agree
    model = _gemma4_unequal_pages()
    p = plan(model, engine="vllm", gpu="H100", max_model_len=4096, kv_cache_memory_bytes=GiB,
             max_num_batched_tokens=512, max_num_seqs=64, engine_version=version)
    assert p.num_blocks == 5461                                           # 2**30 // 196,608
    assert p.formula[3] == f"max concurrency = 5,461 / 741 blocks per 4,096-token request = {5461 / 741:.2f}"
    from kvplan.planning.engines.vllm import max_concurrency_at
    assert max_concurrency_at(p, 4096, model) == 5461 / 741   # the plan's layers and rules


def test_a_page_that_does_not_divide_is_refused_before_024():
    # 0.23.0 v1/core/kv_cache_utils.py :1057 (unify_kv_cache_spec_page_size) raises NotImplementedError: the
    # 32,768 B sliding page (16 x 2,048) does not divide the 49,152 B full one (16 x 3,072)
    with pytest.raises(WorkloadError, match=re.escape(
            "vLLM cannot put this model's KV layers in one block pool: a 32,768 B KV page of its sliding layers does "
            "not divide the 49,152 B page of the others; vLLM before 0.24 cannot pad it and raises "
            "NotImplementedError at start-up: plan --engine-version 0.24 or later")):
        plan(_gemma4_unequal_pages(), engine="vllm", gpu="H100", max_model_len=4096, engine_version="0.23.0")


# DeepSeek-V4-Flash's config with moe_intermediate_size 2,048 -> 4,096 (hidden 4,096): vLLM 0.31's Marlin MoE
# workspace (marlin_moe.py MarlinExperts.workspace_shapes) is [M x top-k, max(I, K)] + [M x top-k, max(2I, K)] bf16
# with M x top-k = 8,192 batched x 6 = 49,152 rows: TP 2 slices I to 2,048, 49,152 x (4,096 + 4,096) x 2 B =
# 805,306,368 B = 768 MiB; expert parallelism keeps I = 4,096 whole, 49,152 x (4,096 + 8,192) x 2 B =
# 1,207,959,552 B = 1,152 MiB
def test_expert_parallel_widens_dsv4s_marlin_workspace():
    import json
    from pathlib import Path

    from kvplan import parse_config
    data = json.loads((Path(__file__).resolve().parents[1] / "model_configs" / "deepseek-ai__DeepSeek-V4-Flash.json")
                      .read_text())
    model = parse_config({**data, "moe_intermediate_size": 4096})
    tp, ep = (plan(model, engine="vllm", gpu="H100", tp=2, max_model_len=4096, engine_version="0.31.0",
                   expert_parallel=e) for e in (False, True))
    assert " + shared workspace 768.0 MiB (" in tp.formula[1] and " + shared workspace 1,152.0 MiB (" in ep.formula[1]
    assert ep.activation_bytes - tp.activation_bytes == 402_653_184       # 1,207,959,552 - 805,306,368


def test_a_pool_that_passes_the_bytes_check_can_still_be_blocks_short():
    # gemma-3-1b-it: 26 layers, 1 KV head x 256 x (K + V) x 2 B = 1,024 B a token a layer, 16-token pages of
    # 16,384 B; 22 sliding (window 512) and 4 full layers, grouped by 4: 6 sliding groups (2 padding layers) + 1 full,
    # a block 4 x 16,384 = 65,536 B. A 4,096-token request at 512 batched tokens x 2 in flight: sliding
    # min(511 + 1,024, 4,096) = 1,535 tokens, cdiv(1,535, 16) + 1 = 97 pages; full 256.
    #   bytes (vLLM's check): (22 x 97 + 4 x 256) x 16,384 = 3,158 x 16,384 = 51,740,672 B
    #   blocks (0.27+, per group): 6 x 97 + 256 = 838, and 51,740,672 // 65,536 = 789 in the pool
    p = plan("google/gemma-3-1b-it", engine="vllm", gpu="H100", max_model_len=4096, max_num_batched_tokens=512,
             max_num_seqs=64, kv_cache_memory_bytes=51_740_672)                 # 3,158 x 16,384
    assert p.num_blocks == 789 and not p.fits and p.max_model_len_that_fits == 4096
    assert p.shortfall_bytes == 49 * 65_536                                      # (838 - 789) x 65,536 = 3,211,264
    assert [n for n in p.notes if n.startswith("vLLM starts")] == [
        "vLLM starts (its check is in bytes) with a max concurrency of 0.94: one 4,096-token request takes 838 blocks "
        "and the pool holds 789, so it needs 3.06 MiB more, or a shorter max_model_len"]   # 789 / 838; 3,211,264 B


# ----------------------------------------------------------------------------- plan_vllm: max_model_len auto

_AUTO_LLAMA = "meta-llama/Llama-3.1-8B"       # 131,072 positions: on an L4 far more than one request fits


@pytest.mark.parametrize("settings", [
    {"quantization": "fp8"},                  # online fp8 weights: a larger pool, a longer auto length
    {"lora": {"max_loras": 2}},               # LoRA slots: a smaller pool
    {"usage_context": "llm_class"},           # the LLM class's batch defaults (8,192 tokens on a card < 70 GiB)
])
def test_max_model_len_auto_plans_the_settings_it_was_given(settings):
    # vLLM 0.14+ `_maybe_auto_fit_max_model_len`: plan the config's length, then the longest one request fits, with
    # the same settings both times: the auto plan is the explicit plan at that length, and differs from the plan
    # without the settings
    model = load_model(_AUTO_LLAMA)
    auto = plan(model, engine="vllm", gpu="L4", max_model_len=-1, **settings)
    config = plan(model, engine="vllm", gpu="L4", max_model_len=131_072, **settings)   # its positions
    explicit = plan(model, engine="vllm", gpu="L4", max_model_len=auto.max_model_len, **settings)
    bare = plan(model, engine="vllm", gpu="L4", max_model_len=-1)
    assert auto.max_model_len == config.max_model_len_that_fits != bare.max_model_len
    assert (auto.weights_bytes, auto.kv_cache_tokens, auto.max_num_batched_tokens) == (
        explicit.weights_bytes, explicit.kv_cache_tokens, explicit.max_num_batched_tokens)
    assert auto.notes[0] == (f"max_model_len auto: {auto.max_model_len:,} tokens, the longest one request fits (of "
                             "the config's 131,072)")


def test_max_model_len_auto_keeps_the_image_limit():
    # Qwen2.5-VL-7B language-model-only: no vision tower loaded, no encoder cache, a longer auto length than with it
    model = load_model("Qwen/Qwen2.5-VL-7B-Instruct")
    auto = plan(model, engine="vllm", gpu="L4", max_model_len=-1, language_model_only=True)
    explicit = plan(model, engine="vllm", gpu="L4", max_model_len=auto.max_model_len,
                            language_model_only=True)
    assert (auto.weights_bytes, auto.kv_cache_tokens) == (explicit.weights_bytes, explicit.kv_cache_tokens)
    assert auto.max_model_len > plan(model, engine="vllm", gpu="L4", max_model_len=-1).max_model_len


def test_max_model_len_auto_returns_the_first_plan_when_nothing_fits():
    # Llama-3.1-70B in bf16 (about 141 GB of weights) on one L4: no length fits, the config's plan comes back as is
    model = load_model("meta-llama/Llama-3.1-70B")
    auto = plan(model, engine="vllm", gpu="L4", max_model_len=-1)
    assert not auto.fits and auto.max_model_len_that_fits == 0 and auto.max_model_len == 131_072   # its positions
    assert not any(n.startswith("max_model_len auto") for n in auto.notes)


def test_speculative_decoding_is_refused_under_pipeline_parallelism():
    with pytest.raises(WorkloadError, match=_exact("kvplan sizes speculative decoding without pipeline parallelism: "
                                                   "use PP 1")):
        plan(load_model(_AUTO_LLAMA), engine="vllm", gpu="H100", pp=2,
                     speculative={"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"})


def test_the_drafting_note_counts_the_drafted_tokens():
    p = plan(load_model(_AUTO_LLAMA), engine="vllm", gpu="H100", max_model_len=8192,
                     speculative={"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                  "num_speculative_tokens": 3})
    assert any(n.startswith("speculative decoding (eagle3, 3 drafted per step): ") for n in p.notes)


def test_max_model_len_auto_of_a_one_position_config():
    # the smallest length that fits is still planned and named: a Llama-3.2-1B config cut to 1 position on an H100
    folder = Path(__file__).resolve().parents[1] / "model_configs"
    data = json.loads((folder / "meta-llama__Llama-3.2-1B.json").read_text())
    p = plan(as_model({**data, "max_position_embeddings": 1}), engine="vllm", gpu="H100", max_model_len=-1)
    assert p.max_model_len == 1
    assert p.notes[0] == "max_model_len auto: 1 tokens, the longest one request fits (of the config's 1)"


def test_a_draft_models_layers_are_buckets_of_their_own():
    # vLLM 0.33 kv_cache_planning.py `_get_kv_cache_groups_uniform_page_size`: buckets of equal specs. gemma-2-27b
    # (23 sliding + 23 full layers of 16 KV heads x 128 x 2 x 2 B = 8,192 B a token) with gemma-2-2b-it as draft
    # model (13 + 13 of 4 x 256 x 2 x 2 = 4,096 B; both vocabularies 256,000, windows 4,096): 4 buckets of 23, 23, 13
    # and 13, so groups of 13 (23 >= 1.5 x 13 = 19.5): 2 + 2 + 1 + 1 = 6 groups, 3 + 3 = 6 padding layers. At
    # 16-token blocks the target's page is 131,072 B and the draft's 65,536, which divides it: the draft's block is
    # 32 tokens; a block id costs 13 x 131,072 = 1,703,936 B, so a 2**30 B pool is 630 blocks. An 8,192-token
    # request at 8,192 batched tokens x 2 in flight (H200): every sliding layer holds min(4,095 + 16,384, 8,192) =
    # 8,192 tokens, target cdiv(8,192, 16) + 1 = 513 pages, draft cdiv(8,192, 32) + 1 = 257; full 512 and 256:
    # 2 x 513 + 2 x 512 + 257 + 256 = 2,563 blocks. Buckets by kind alone (36 sliding, 36 full) gave 2 groups of 36
    p = plan("google/gemma-2-27b", engine="vllm", gpu="H200", max_model_len=8192, kv_cache_memory_bytes=GiB,
             speculative={"method": "draft_model", "num_speculative_tokens": 3, "model": "google/gemma-2-2b-it"})
    assert p.num_blocks == 630                                            # 2**30 // 1,703,936
    assert p.formula[3] == f"max concurrency = 630 / 2,563 blocks per 8,192-token request = {630 / 2563:.2f}"


def test_mla_and_full_layers_are_one_uniform_group():
    # UniformTypeKVCacheSpecs.is_uniform_type (0.33 kv_cache_interface.py :1348, 0.19 :397): MLAAttentionSpec is a
    # FullAttentionSpec, so DeepSeek-V2-Lite's 27 MLA latents (512 + 64 = 576 x 2 B = 1,152 B a token) and a
    # Llama-3.2-1B draft's 16 full layers (8 KV heads x 64 x 2 x 2 B = 2,048 B) are one group at the MLA block of 64:
    # 64 x (27 x 1,152 + 16 x 2,048) = 1,990,656 + 2,097,152 = 4,087,808 B a block, no page padded
    from kvplan.planning.engines.vllm_kv import kv_groups, rank_layer_specs
    target, draft = load_model("deepseek-ai/DeepSeek-V2-Lite"), load_model("meta-llama/Llama-3.2-1B")
    specs = rank_layer_specs(target, range(27), 1, 2, 2) + rank_layer_specs(draft, range(16), 1, 2, 2)
    groups = kv_groups(specs, 64)
    assert groups.uniform and groups.padding_layers == 0 and groups.bytes_per_block == 4_087_808   # 64 x 63,872
