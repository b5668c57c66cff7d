"""vLLM engine rules, number by number (../shared/reference/kv-rules.md Part 2.1, peers.md).

Every expected value below is derived by hand from vLLM's formulas in the test itself, not copied from
kvplan's output: block rounding per request, KV-head replication when kv_heads < TP, the unsharded MLA
latent, sliding/chunked caps, hybrid-group concurrency as `_report_kv_cache_config` computes it, fp8
halving, and the measured calibration rows.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm import max_concurrency_at
from kvplan.planning.engines.vllm_kv import (VllmLayerSpec, cdiv, kv_groups, max_usage_bytes, pool_capacity,
                                             rank_layer_specs)
from kvplan.planning.engines.vllm_profile import non_torch_bytes, parse_version, pp_layer_split
from kvplan.planning.planner import plan
from validation import vllm_calibration

GiB = 2**30
CALIBRATION_CSV = Path(__file__).resolve().parents[1] / "validation" / "measured" / "vllm_runs_calibration.csv"


def _groups_for(name: str, tp: int = 1, kv_bytes: float = 2, block: int = 16):
    model = load_model(name)
    specs = rank_layer_specs(model, range(model.num_layers), tp, kv_bytes, 2)
    return specs, kv_groups(specs, block)


# ------------------------------------------------------------------------------------- block rounding


def test_full_attention_request_is_rounded_up_to_whole_blocks():
    spec = VllmLayerSpec("full", 4096)  # Llama-3.1-8B: 8 heads x 256 x 2 B per layer
    page = 16 * 4096
    assert cdiv(8193, 16) == 513
    assert max_usage_bytes(spec, 16, 8193, 8192) == 513 * page
    assert max_usage_bytes(spec, 16, 8192, 8192) == 512 * page
    assert max_usage_bytes(spec, 16, 1, 8192) == 1 * page


def test_full_attention_concurrency_counts_513_blocks_for_8193_tokens():
    specs, groups = _groups_for("meta-llama/Llama-3.1-8B")
    # 32 layers x a 16-token block x 4,096 B a layer-token (2 x 8 KV heads x 128 x 2 B): vLLM 0.33
    # kv_cache_interface.py AttentionSpec.page_size_bytes, one page per layer
    assert groups.uniform and groups.bytes_per_block == 32 * 16 * 4096
    cap = pool_capacity(groups, 10**10, 8193, 8192)
    # 10^10 B of pool over 2,097,152 B blocks of all 32 layers (the block above)
    assert cap.num_blocks == 10**10 // (32 * 16 * 4096)
    assert cap.blocks_per_request == 513
    assert cap.kv_cache_tokens == cap.num_blocks * 16
    assert cap.max_concurrency == pytest.approx(cap.num_blocks / 513)


def test_plan_concurrency_uses_block_rounded_requests():
    for length, blocks in ((8192, 512), (8193, 513)):
        p = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", max_model_len=length, engine_version="0.19.0")
        assert p.block_size == 16
        # the same 2,097,152 B per block: 32 layers x 16 tokens x 4,096 B
        assert p.num_blocks == p.kv_pool_bytes // (32 * 16 * 4096)
        assert p.kv_cache_tokens == p.num_blocks * 16
        assert p.max_concurrency == round(p.num_blocks / blocks, 4)


# ------------------------------------------------------------------------------------- KV-head replication


# Qwen3-30B-A3B: 48 layers x 2 (K, V) x 4 KV heads x 128 x 2 B = 98,304; TP 2: 2 heads a rank = 49,152; TP 4 and 8:
# one head a rank (replicated, vLLM 0.33 model_executor/layers/linear.py QKVParallelLinear) = 24,576
@pytest.mark.parametrize("tp, expected", [(1, 98_304), (2, 49_152), (4, 24_576), (8, 24_576)])
def test_qwen3_30b_kv_heads_replicated_when_fewer_than_tp(tp, expected):
    # 48 layers, 4 KV heads, head_dim 128, bf16: per rank max(1, 4 // tp) heads x 256 x 2 B x 48
    assert expected == 48 * max(1, 4 // tp) * 256 * 2
    p = plan("Qwen/Qwen3-30B-A3B", gpu="H200", tp=tp, max_model_len=8192)
    assert p.kv_bytes_per_token == expected
    if tp == 8:
        assert expected != 48 * 4 * 256 * 2 // 8  # what dividing by TP would say (12,288): peers.md mistake 5
        assert any("replicates" in note for note in p.notes)


def test_qwen3_coder_tp8_published_log_matches_replicated_heads():
    """peers.md: Qwen3-Coder-30B-A3B (same attention as Qwen3-30B-A3B), TP8, vLLM printed 12.22 GiB and
    534,064 tokens. A pool of 12.22 GiB at 24,576 B/token per rank holds those tokens (÷TP would say 2x)."""
    specs, groups = _groups_for("Qwen/Qwen3-30B-A3B", tp=8)
    assert sum(s.bytes_per_token for s in specs) == 24_576
    cap = pool_capacity(groups, int(12.22 * GiB), 262_144, 2048)
    assert cap.kv_cache_tokens == pytest.approx(534_064, rel=1e-3)


def test_kv_heads_that_cannot_be_split_or_replicated_are_refused():
    # Qwen3-14B: 40 heads, 8 KV heads. TP 5 divides the heads but neither divides nor is a multiple of 8.
    with pytest.raises(WorkloadError, match="KV heads"):
        plan("Qwen/Qwen3-14B", tp=5, max_model_len=4096)


# ------------------------------------------------------------------------------------- MLA


@pytest.mark.parametrize("tp", [1, 8])
def test_deepseek_v3_mla_latent_is_not_sharded(tp):
    p = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=tp, max_model_len=8192)
    # DeepSeek-V3: 61 layers x one latent of kv_lora_rank 512 + qk_rope_head_dim 64 x 2 B, on every rank
    # (vLLM 0.33 MLAAttentionSpec: no head to shard)
    assert p.kv_bytes_per_token == 61 * 576 * 2 == 70_272
    assert p.block_size == 64
    assert p.kv_cache_tokens % 64 == 0
    assert p.num_blocks == max(0, p.kv_pool_bytes) // (61 * 64 * 576 * 2)
    if tp == 8:
        assert any("MLA latent is replicated" in n for n in p.notes)


def test_mla_fp8_halves_the_latent():
    p = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=8192, kv_dtype="fp8")
    # 61 layers x 576 x 1 B (fp8)
    assert p.kv_bytes_per_token == 61 * 576 == 35_136


# ------------------------------------------------------------------------------------- sliding / chunked caps


def test_sliding_window_cap_is_w_minus_1_plus_batch_plus_one_block():
    gemma = VllmLayerSpec("sliding", 8192, window=4096)   # gemma-2-9b: 8 heads x 512 x 2 B
    page = 16 * 8192
    # min(4095 + 8192, 8192) = 8192 -> 512 blocks + 1
    assert max_usage_bytes(gemma, 16, 8192, 8192) == 513 * page
    # 4095 + 2049 = 6144 -> 384 + 1 = 385 (with W instead of W-1 it would be 386)
    assert max_usage_bytes(gemma, 16, 8192, 2049) == (cdiv(4096 - 1 + 2049, 16) + 1) * page == 385 * page
    oss = VllmLayerSpec("sliding", 2048, window=128)      # gpt-oss-20b: 8 heads x 128 x 2 B
    assert max_usage_bytes(oss, 16, 131_072, 8192) == (cdiv(127 + 8192, 16) + 1) * 16 * 2048 == 521 * 16 * 2048
    assert max_usage_bytes(oss, 16, 131_072, 2048) == 137 * 16 * 2048
    assert max_usage_bytes(oss, 16, 100, 8192) == (cdiv(100, 16) + 1) * 16 * 2048   # short requests: len caps


def test_chunked_attention_cap_is_chunk_plus_batch_without_extra_block():
    chunk = VllmLayerSpec("chunked", 2048, window=8192)   # Llama 4 Scout: chunk 8192
    page = 16 * 2048
    assert max_usage_bytes(chunk, 16, 131_072, 8192) == cdiv(8192 + 8192, 16) * page == 1024 * page
    assert max_usage_bytes(chunk, 16, 10_000, 8192) == cdiv(10_000, 16) * page == 625 * page


def test_model_specs_carry_the_configured_windows():
    gemma, _ = _groups_for("google/gemma-2-9b")
    # gemma-2-9b config.json: sliding_window 4096
    assert {s.window for s in gemma if s.kind == "sliding"} == {4096}
    oss, _ = _groups_for("openai/gpt-oss-20b")
    assert {s.window for s in oss if s.kind == "sliding"} == {128}
    scout, _ = _groups_for("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    # Llama-4-Scout config.json: attention_chunk_size 8192
    assert {s.window for s in scout if s.kind == "chunked"} == {8192}


# ------------------------------------------------------------------------------------- hybrid concurrency


def _report_kv_cache_config(num_blocks, groups_usage, layers_per_group, page, block, num_groups):
    """vLLM's `_report_kv_cache_config`, written out from kv-rules.md."""
    max_usage = layers_per_group * sum(groups_usage)
    per_block = page * layers_per_group
    return num_blocks // num_groups * block, num_blocks / cdiv(max_usage, per_block)


def test_gemma2_9b_hybrid_concurrency_hand_derived():
    # L40S: < 70 GiB, so max_num_batched_tokens 2048. 21 sliding + 21 full layers -> 2 groups of 21.
    p = plan("google/gemma-2-9b", gpu="L40S", max_model_len=8192, engine_version="0.19.0")
    assert p.max_num_batched_tokens == 2048
    page = 16 * 8 * (256 + 256) * 2                     # 131,072 B per layer per block
    num_blocks = p.kv_pool_bytes // (page * 21)          # one block id = one page in each of 21 tensors
    sliding = (cdiv(min(4096 - 1 + 2048, 8192), 16) + 1) * page   # 385 pages
    full = cdiv(8192, 16) * page                                    # 512 pages
    tokens, concurrency = _report_kv_cache_config(num_blocks, [sliding, full], 21, page, 16, 2)
    assert sliding // page + full // page == 897
    assert p.num_blocks == num_blocks
    assert p.kv_cache_tokens == tokens == num_blocks // 2 * 16
    assert p.max_concurrency == round(concurrency, 4) == round(num_blocks / 897, 4)
    # ... higher than the naive full-attention figure (every layer 512 blocks)
    assert p.max_concurrency > num_blocks / 1024


def test_gpt_oss_20b_hybrid_concurrency_hand_derived():
    # H100: max_num_batched_tokens 8192, max_model_len 131,072 (config); 12 sliding (W 128) + 12 full layers.
    p = plan("openai/gpt-oss-20b", gpu="H100-80GB", engine_version="0.19.0")
    assert (p.max_model_len, p.max_num_batched_tokens, p.dtype) == (131_072, 8192, "bfloat16")
    page = 16 * 8 * (64 + 64) * 2                        # 32,768 B
    num_blocks = p.kv_pool_bytes // (page * 12)
    sliding = (cdiv(min(128 - 1 + 8192, 131_072), 16) + 1) * page  # 521 pages
    full = cdiv(131_072, 16) * page                                # 8,192 pages
    tokens, concurrency = _report_kv_cache_config(num_blocks, [sliding, full], 12, page, 16, 2)
    assert p.num_blocks == num_blocks
    assert p.kv_cache_tokens == tokens
    # 8,713 = 521 sliding + 8,192 full pages a request, the two worked in the comments above
    assert p.max_concurrency == round(concurrency, 4) == round(num_blocks / 8713, 4)
    assert p.kv_bytes_per_token == 24 * 8 * 128 * 2


def test_llama4_scout_chunked_groups_hand_derived():
    # 36 chunked + 12 full: 36 >= 1.5 x 12, so groups of 12 -> 3 chunked groups + 1 full group.
    p = plan("meta-llama/Llama-4-Scout-17B-16E-Instruct", gpu="H200", tp=4, max_model_len=131_072,
             engine_version="0.19.0")
    page = 16 * 2 * (128 + 128) * 2                      # 8 KV heads / TP4 = 2 heads per rank
    num_blocks = p.kv_pool_bytes // (page * 12)
    chunked = cdiv(min(8192 + 8192, 131_072), 16) * page  # 1,024 pages
    full = cdiv(131_072, 16) * page                       # 8,192 pages
    tokens, concurrency = _report_kv_cache_config(num_blocks, [chunked] * 3 + [full], 12, page, 16, 4)
    assert p.num_blocks == num_blocks
    assert p.kv_cache_tokens == tokens == num_blocks // 4 * 16
    # 3 chunked groups x 1,024 pages + 8,192 full pages (the comments above)
    assert p.max_concurrency == round(concurrency, 4) == round(num_blocks / (3 * 1024 + 8192), 4)


def test_unequal_layer_types_are_padded_into_equal_groups():
    specs = [VllmLayerSpec("sliding", 100, window=64)] * 5 + [VllmLayerSpec("full", 100)] * 3
    groups = kv_groups(specs, 16)
    assert not groups.uniform
    assert [len(g) for g in groups.groups] == [3, 3, 3]     # 5 sliding -> 3 + 2 (+1 padding), 3 full
    assert groups.padding_layers == 1
    assert groups.bytes_per_block == 3 * 16 * 100
    # max < 1.5 x min: one group per type, sized by the larger count
    close = kv_groups([VllmLayerSpec("sliding", 100, window=64)] * 4 + [VllmLayerSpec("full", 100)] * 3, 16)
    assert [len(g) for g in close.groups] == [4, 4] and close.padding_layers == 1


def test_max_concurrency_at_other_lengths():
    model = load_model("meta-llama/Llama-3.1-8B")
    p = plan(model, gpu="H100-80GB", max_model_len=8192)
    assert max_concurrency_at(p, 8192, model) == pytest.approx(p.max_concurrency, abs=1e-4)
    assert max_concurrency_at(p, 4096, model) == pytest.approx(p.num_blocks / 256)
    assert max_concurrency_at(p, 4097, model) == pytest.approx(p.num_blocks / 257)
    with pytest.raises(WorkloadError):
        max_concurrency_at(p, 0, model)


# ------------------------------------------------------------------------------------- fp8 KV


def test_fp8_kv_halves_bytes_and_doubles_tokens_as_measured():
    common = dict(gpu="H100-80GB", max_model_len=8192, gpu_memory_utilization=0.95, engine_version="0.19.0")
    fp16 = plan("meta-llama/Llama-3.1-8B", dtype="float16", **common)
    fp8 = plan("meta-llama/Llama-3.1-8B", dtype="bfloat16", kv_dtype="fp8", **common)
    # 32 x 2 x 8 x 128 x 2 B = 131,072 (fp16); x 1 B = 65,536 (fp8), as vLLM 0.19 measured 2x the tokens below
    assert fp16.kv_bytes_per_token == 131_072 and fp8.kv_bytes_per_token == 65_536
    # 32 layers x 16 tokens x 2,048 B (2 x 8 x 128 x 1 B) a page
    assert fp8.num_blocks == fp8.kv_pool_bytes // (32 * 16 * 2048)
    assert fp8.kv_cache_tokens / fp16.kv_cache_tokens == pytest.approx(2, rel=1e-4)
    # measured on vLLM v0.19.0 (calibration csv): 476,016 (fp16) and 952,032 (fp8 KV) tokens
    assert fp16.kv_cache_tokens == pytest.approx(476_016, rel=1e-3)
    assert fp8.kv_cache_tokens == pytest.approx(952_032, rel=1e-3)
    assert "--kv-cache-dtype fp8" in fp8.vllm_command
    assert "--kv-cache-dtype" not in fp16.vllm_command


def test_fp8_e5m2_command_and_bytes():
    p = plan("meta-llama/Llama-3.1-8B", kv_dtype="fp8_e5m2", max_model_len=8192)
    # 32 x 2 x 8 x 128 x 1 B (fp8_e5m2 is one byte too)
    assert p.kv_bytes_per_token == 65_536
    assert "--kv-cache-dtype fp8_e5m2" in p.vllm_command


# ------------------------------------------------------------------------------------- utilization


@pytest.mark.parametrize("util", [0, 0.0, -0.1, -1, 1.0001, 2, float("nan"), float("inf"), "0.9", "abc", True, [0.9]])
def test_utilization_outside_0_1_is_a_one_line_workload_error(util):
    with pytest.raises(WorkloadError) as info:
        plan("meta-llama/Llama-3.1-8B", max_model_len=8192, gpu_memory_utilization=util)
    message = str(info.value)
    assert "gpu_memory_utilization" in message and "\n" not in message


def test_utilization_one_is_allowed_and_scales_the_pool():
    full = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", max_model_len=8192, gpu_memory_utilization=1.0)
    base = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", max_model_len=8192)
    assert full.gpu_memory_utilization == 1.0 and base.gpu_memory_utilization == 0.92   # vLLM 0.20+'s default
    memory = full.gpu_memory_bytes
    assert full.kv_pool_bytes - base.kv_pool_bytes == math.ceil(1.0 * memory) - math.ceil(0.92 * memory)
    assert "--gpu-memory-utilization 1.0" in full.vllm_command


def test_pool_is_utilization_times_memory_minus_the_rest():
    # vllm 0.19 gpu_worker.py:417-421: ceil(utilization x memory) - non-KV memory; 0.33 subtracts its CUDA-graph
    # estimate too (one line of the budget, `extra`)
    old = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", max_model_len=8192, gpu_memory_utilization=0.95,
               engine_version="0.19.0")
    assert old.extra == {}
    assert old.kv_pool_bytes == (math.ceil(0.95 * old.gpu_memory_bytes) - old.weights_bytes - old.activation_bytes
                                 - old.non_torch_bytes)
    # 0.22 runs Llama on the V1 runner: max(first PIECEWISE 132, first FULL 260) + 50 x 6 + 50 x 6 MiB (vLLM 0.19,
    # which estimates the same way, logged "0.84 GiB total" for this start-up)
    v1 = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", max_model_len=8192, gpu_memory_utilization=0.95,
              engine_version="0.22.0")
    assert v1.extra == {"CUDA graphs (estimate)": 860 * 2**20}
    assert v1.kv_pool_bytes == (math.ceil(0.95 * v1.gpu_memory_bytes) - v1.weights_bytes - v1.activation_bytes
                                - v1.non_torch_bytes - 860 * 2**20)
    # 0.33 runs it on V2, which captures every PIECEWISE graph into one pool: 132 + 260 + 50 x 6 + 50 x 6 = 992 MiB
    # (v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory), and its sampler buffers count from 0.27:
    # 1,024 x 4 x (128,256 + 4,008 + 4,008 + 3,072 + 128 + 1,024 + 129 + 128) B = 576,524,288 B
    new = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", max_model_len=8192, gpu_memory_utilization=0.95)
    assert new.extra == {"V2 sampler buffers": 576_524_288, "CUDA graphs (estimate)": 992 * 2**20}
    assert new.kv_pool_bytes == (math.ceil(0.95 * new.gpu_memory_bytes) - new.weights_bytes - new.activation_bytes
                                 - new.non_torch_bytes - 576_524_288 - 992 * 2**20)


# ------------------------------------------------------------------------------------- engine constants


def test_non_torch_memory_by_tp_pp_and_gpu():
    """Each figure is what a start-up printed (non_torch_memory, ../shared/reference/measured/vllm_runs_calibration
    .csv): 0.25 GiB on v0.19 TP1 Llama-3.1-8B H100; 0.07 GiB per stage on the three v0.19 pipeline runs
    (Llama-3.1-8B PP2 and PP4, Qwen3-8B PP3); TP2 2.06 GiB = 0.25 + NCCL 1.75 + 2 x 0.0325 (Llama-3.1-8B,
    H100 SXM, NVLS on). The L40S's 0.25 GiB of NCCL (no NVLS) is kvplan's assumption, measured by no log in the
    calibration set, and every plan that uses it says so (test_plan_notes_the_unmeasured_nccl_assumption)."""
    v19 = (0, 19, 0)
    assert non_torch_bytes(1, 1, v19) == int(0.25 * GiB)
    assert non_torch_bytes(1, 1, (0, 17, 0)) == int(0.13 * GiB)
    for pp in (2, 3, 4):
        assert non_torch_bytes(1, pp, v19) == int(0.07 * GiB)
    assert non_torch_bytes(2, 1, v19, "H100-SXM") == int((0.25 + 1.75 + 2 * 0.0325) * GiB)
    assert non_torch_bytes(2, 1, v19, "L40S") == int((0.25 + 0.25) * GiB)


def test_pp_layer_split_matches_vllm_get_pp_indices():
    assert [len(r) for r in pp_layer_split(32, 4)] == [8, 8, 8, 8]
    assert [len(r) for r in pp_layer_split(36, 3)] == [12, 12, 12]
    assert [len(r) for r in pp_layer_split(10, 4)] == [2, 3, 3, 2]   # remainder to the stages before the last
    split = pp_layer_split(61, 4)
    assert sum(len(r) for r in split) == 61 and split[0].start == 0 and split[-1].stop == 61


def test_pp_stages_all_get_the_smallest_stage_blocks():
    p = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", pp=2, max_model_len=8192, gpu_memory_utilization=0.95,
             engine_version="0.19.0")
    assert p.num_blocks == min(s.num_blocks for s in p.stages)
    assert "--pipeline-parallel-size 2" in p.vllm_command
    assert p.kv_cache_tokens == pytest.approx(1_075_312, rel=5e-3)   # measured v0.19.0 PP2


def test_pp_receive_buffers_sit_on_the_later_stages_only_v1():
    """vLLM 0.19's V1 runner makes a later stage's receive buffers in the profile run (v1/worker/gpu_model_runner.py
    `_dummy_run` :5437-5447: `make_empty_intermediate_tensors(max_num_tokens, model dtype)` unless
    `is_first_rank`), alive through the forward and the sampler. Llama-3.1-8B (hidden 4,096, MLP 14,336, vocabulary
    128,256) at 8,192 tokens, bf16, PP4, hand arithmetic:
      PP0       forward 8,192 x (3 x 14,336 + 5 x 4,096) x 2 B = 1,040,187,392 (0.97 GiB; the log: 1.10)
      PP1, PP2  + hidden_states + residual 2 x 8,192 x 4,096 x 2 B = 134,217,728 -> 1,174,405,120 (1.09; log 1.05)
      PP3       sampler 1,024 x 128,256 x 14 B + 3 x 8,192 x 4,096 x 2 B + 134,217,728 = 2,174,222,336 (2.02; 2.01)
    (the log: validation/measured/vllm_runs_calibration.csv, the PP4 row's notes; per stage in vllm_calibration.md)."""
    p = plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", pp=4, max_model_len=8192, gpu_memory_utilization=0.95,
             engine_version="0.19.0")
    assert [s.activation_bytes for s in p.stages] == [1_040_187_392, 1_174_405_120, 1_174_405_120, 2_174_222_336]
    assert "PP receive buffers" not in p.extra   # in the peak, not a line of its own
    assert "PP receive buffers hidden_states + residual 2 x [8,192, 4,096] x 2 B" in p.formula[1]


def test_pp_receive_buffers_by_runner_and_version():
    """The V2 runner makes them in `load_model` (v1/worker/gpu/model_runner.py 0.24 :365, 0.27.1 :395), before the
    profile: 0.22-0.26's budget (weights + peak increase + non-torch increase, utils/mem_utils.py 0.26 :311) misses
    them, 0.27+'s (free memory fallen since the snapshot, 0.27.1 :326) counts them once. Qwen3-32B (hidden 5,120),
    8,192 tokens, bf16: 2 x 8,192 x 5,120 x 2 B = 167,772,160 B on PP1."""
    from kvplan.planning.engines.vllm_runner import receive_buffer_term

    assert [receive_buffer_term(v, v2) for v, v2 in (((0, 10, 1), False), ((0, 19, 0), False), ((0, 33, 0), False),
                                                      ((0, 22, 0), True), ((0, 26, 0), True), ((0, 27, 1), True),
                                                      ((0, 33, 0), True))] == [
        "peak", "peak", "peak", "uncounted", "uncounted", "persistent", "persistent"]
    common = dict(gpu="H100-80GB", pp=2, max_model_len=32768, gpu_memory_utilization=0.9)
    late = plan("Qwen/Qwen3-32B", engine_version="0.27.1", **common)     # V2 (Qwen3ForCausalLM from 0.22)
    assert late.num_blocks == late.stages[1].num_blocks < late.stages[0].num_blocks   # PP1 binds: its lines shown
    assert late.extra["PP receive buffers"] == 167_772_160   # 2 x 8,192 x 5,120 x 2 B
    assert late.stages[0].activation_bytes == late.stages[1].activation_bytes   # no buffer in either peak
    early = plan("Qwen/Qwen3-32B", engine_version="0.24.0", **common)
    assert "PP receive buffers" not in early.extra
    pp0, pp1 = early.stages
    assert pp0.activation_bytes == pp1.activation_bytes   # no term for the buffers: the pools differ by PP1's
    assert pp0.kv_pool_bytes - pp1.kv_pool_bytes == pp1.weights_bytes - pp0.weights_bytes == 10_240  # norm 5,120 x 2 B
    assert any("160.00 MiB of receive buffers" in n and "headroom" in n for n in early.notes)
    assert not any("receive buffers" in n for n in late.notes)


def test_pp_receive_buffer_shapes_per_model():
    """`make_empty_intermediate_tensors` as each model file writes it, at 8,192 tokens in bf16 (hand arithmetic):
    GPT-2 hidden_states alone (gpt2.py:217): 8,192 x 768 x 2 B = 12,582,912; DeepSeek-V4-Flash one [N, hc_mult 4,
    4,096] (deepseek_v4/nvidia/model.py :930-946, 0.33): 268,435,456; Gemma-4-E2B hidden_states + per_layer_inputs
    [N, 35 layers, 256] (gemma4.py :1176-1196, 0.33): 8,192 x (1,536 + 35 x 256) x 2 B = 171,966,464, and 0.19-0.20
    add a residual [N, 1,536] (0.20.1 gemma4.py `_make_empty_intermediate_tensors`): 197,132,288."""
    from kvplan.planning.engines.vllm_runner import receive_buffers

    assert receive_buffers(load_model("openai-community/gpt2"), (0, 33, 0), 8192, 2)[0] == 12_582_912
    assert receive_buffers(load_model("deepseek-ai/DeepSeek-V4-Flash"), (0, 33, 0), 8192, 2) == (
        268_435_456, "hidden_states [8,192, 4, 4,096] x 2 B")
    e2b = load_model("google/gemma-4-E2B-it")
    assert receive_buffers(e2b, (0, 33, 0), 8192, 2)[0] == 171_966_464
    assert receive_buffers(e2b, (0, 20, 1), 8192, 2)[0] == 197_132_288
    assert receive_buffers(e2b, (0, 21, 0), 8192, 2)[0] == 171_966_464   # 0.21.0 gemma4.py: the residual gone
    assert receive_buffers(load_model("Qwen/Qwen3-32B"), (0, 33, 0), 8192, 2)[0] == 167_772_160  # 2 x 8,192 x 5,120 x 2


def test_pp_plan_notes_an_architecture_whose_receive_buffers_were_not_read():
    import dataclasses

    odd = dataclasses.replace(load_model("meta-llama/Llama-3.1-8B"), architecture="SomeNewForCausalLM")
    notes = plan(odd, gpu="H100-80GB", pp=2, max_model_len=8192).notes
    assert any(n.startswith("receive buffers of SomeNewForCausalLM not read from vLLM") for n in notes)
    assert not any("not read from vLLM" in n
                   for n in plan("meta-llama/Llama-3.1-8B", gpu="H100-80GB", pp=2, max_model_len=8192).notes)


def test_version_parsing():
    assert parse_version("v0.19.0") == (0, 19, 0)
    assert parse_version("0.17") == (0, 17, 0)
    assert parse_version("0.19.0rc1") == (0, 19, 0)
    assert parse_version("0.8.5.post1") == (0, 8, 5)
    assert parse_version(None) == (0, 33, 0)   # the latest release kvplan read
    for bad in ("banana", ".1", "x0.19", "9" * 20):
        with pytest.raises(WorkloadError):
            parse_version(bad)


def test_engine_version_drops_the_sampler_activation_at_v017():
    """Qwen3-14B, H100, TP1, 8192, util 0.95: vLLM printed a 5.64 GiB torch peak on v0.16 and 2.23 GiB on v0.17,
    and 274,848 vs 297,152 tokens."""
    common = dict(gpu="H100-80GB", max_model_len=8192, gpu_memory_utilization=0.95)
    v16 = plan("Qwen/Qwen3-14B", engine_version="0.16.0", **common)
    v17 = plan("Qwen/Qwen3-14B", engine_version="0.17.0", **common)
    assert v16.activation_bytes / GiB == pytest.approx(5.64, rel=0.05)
    assert v17.activation_bytes / GiB == pytest.approx(2.23, rel=0.05)
    assert (v16.activation_bytes - v17.activation_bytes) / GiB > 3
    assert v16.kv_cache_tokens == pytest.approx(274_848, rel=0.01)
    assert v17.kv_cache_tokens == pytest.approx(297_152, rel=0.01)
    assert v16.engine_version == "0.16.0"


# ------------------------------------------------------------------------------------- measured calibration


@pytest.mark.skipif(not CALIBRATION_CSV.is_file(), reason="measured calibration csv not present")
def test_measured_calibration_kv_tokens_within_2_percent_median_and_5_percent_max():
    calibration = vllm_calibration
    errors = []
    with CALIBRATION_CSV.open() as f:
        for row in csv.DictReader(f):
            result = calibration.run_row(row)
            if result is None or not result["measured"]["tokens"]:
                continue
            measured, predicted = result["measured"]["tokens"], result["predicted"]["tokens"]
            errors.append((abs(predicted - measured) / measured * 100, row["run_id"]))
    assert len(errors) >= 20
    worst = max(errors)
    assert statistics.median(e for e, _ in errors) <= 2.0
    assert worst[0] <= 5.0, f"{worst[1]}: {worst[0]:.2f} % off"


def test_cdiv():
    # cdiv(8,193, 16) = 512 + 1 = 513: a 8,193-token request straddles one more block
    assert [cdiv(a, 16) for a in (0, 1, 16, 17, 8193)] == [0, 1, 1, 2, 513]
    assert cdiv(8193, 16) == math.ceil(8193 / 16)


def test_plan_notes_the_unmeasured_nccl_assumption():
    """The 0.25 GiB of NCCL without NVLink SHARP has no log behind it: every plan that spends it says so; a plan on
    NVSwitch H100s (the 2.06 GiB TP2 log) does not."""
    pcie = plan("meta-llama/Llama-3.1-8B", gpu="L40S", tp=2, max_model_len=8192)
    sxm = plan("meta-llama/Llama-3.1-8B", gpu="H100-SXM", tp=2, max_model_len=8192)
    said = "NCCL memory without NVLink SHARP is an assumption (0.25 GiB), not a measurement"
    assert any(said in n for n in pcie.notes) and not any(said in n for n in sxm.notes)


# ------------------------------------------------------------------------------------- sparse MLA fp8 layout


@pytest.mark.parametrize("gpu, kv, version, latent", [
    ("H100", "fp8", None, 656),          # FLASHMLA_SPARSE: fp8 -> fp8_ds_mla
    ("H100", "fp8", "0.20.0", 656),      # 0.20-0.23: MLAAttention.__init__'s conversion
    ("H100", "auto", None, 576 * 2),     # bf16 stays bf16 (FLASH_ATTN_MLA_SPARSE / FLASHMLA_SPARSE)
    ("B200", "fp8", None, 576),          # SM100: FLASHINFER_MLA_SPARSE keeps the standard fp8 row
    ("B200", "auto", None, 576 * 2),
    ("RTX-PRO-6000-Blackwell", "auto", None, 656),        # SM120's one sparse backend quantizes even 'auto'
    ("RTX-PRO-6000-Blackwell", "fp8", "0.24.0", 656),
    ("RTX-PRO-6000-Blackwell", "auto", "0.23.0", 576 * 2),  # no FLASHINFER_MLA_SPARSE_SM120 before 0.24
    ("A100", "fp8", None, 576),          # no sparse backend sets a layout on Ampere
])
def test_sparse_mla_latent_layout_by_backend(gpu, kv, version, latent):
    """DeepSeek-V3.2 (61 MLA layers, each with 128 + 4 B of fp8 indexer keys): vLLM's sparse backend on the GPU decides
    the latent's bytes: DeepSeek's fp8_ds_mla row is 512 fp8 + 512 / 128 x 4 B scales + 64 x 2 B RoPE = 656 B, the
    standard fp8 latent 576 x 1 B, bf16 576 x 2 B (platforms/cuda.py `_get_backend_priorities`, mla_attention.py
    `_canonicalize_sparse_mla_kv_cache_dtype`, kv_cache_interface.py `real_page_size_bytes`: `block_size * 656`)."""
    p = plan("deepseek-ai/DeepSeek-V3.2", gpu=gpu, tp=8, max_model_len=8192, kv_dtype=kv, engine_version=version)
    assert p.kv_bytes_per_token == 61 * (latent + 128 + 4)
    assert any("fp8_ds_mla" in n for n in p.notes) == (latent == 656)


def test_dense_mla_keeps_the_standard_fp8_latent():
    """DeepSeek-V3 has no indexer: FLASHMLA (dense) on an H100 keeps 576 fp8 bytes a token a layer."""
    p = plan("deepseek-ai/DeepSeek-V3", gpu="H100", tp=8, max_model_len=8192, kv_dtype="fp8")
    assert p.kv_bytes_per_token == 61 * 576
@pytest.mark.parametrize("model_type, engine", [
    ("inkling_text", "vllm"), ("dots3_note_text", "vllm"),   # DeepSeek-V4 plans on vLLM: test_vllm_dsv4.py
    ("deepseek_v4", "sglang"), ("inkling2_text", "sglang"), ("dots3_note_text", "sglang"),
    ("rwkv", "vllm"), ("rwkv", "sglang"),   # neither engine has an RWKV model
    ("recurrent_gemma", "vllm"), ("recurrent_gemma", "sglang"),   # nor a RecurrentGemma one
])
def test_engines_refuse_the_caches_kvplan_has_not_read(model_type, engine):
    """DeepSeek-V4, Inkling and Dots3-Note: transformers' cache is exact (test_truth_meta.test_zoo_family_on_meta), but
    vLLM 0.33 and SGLang 0.5.23 keep each in a layout of their own (vllm/models/deepseek_v4/attention.py's
    DeepseekV4SWACache and tokens_per_state pages, ...), so a plan from the generic rules would be a guess: one line
    refuses it and names --engine hf, which plans."""
    pytest.importorskip("transformers")
    from validation.conformance import config_for

    import kvplan

    model = kvplan.parse_config(config_for(model_type, "default"), name=model_type)
    with pytest.raises(WorkloadError, match="does not plan .*--engine hf") as info:
        # RecurrentGemma-2B's 10 heads take TP 2 (TP 8 is refused first, for its heads)
        plan(model, engine=engine, gpu="H100-80GB", num_gpus=2 if model_type == "recurrent_gemma" else 8,
             max_model_len=4096)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------- unequal pages, Nemotron-H's SSM dtype


def test_unequal_attention_pages_give_the_smaller_longer_blocks():
    """`unify_kv_cache_spec_page_size` (0.25.1 v1/core/kv_cache_utils.py): gemma-4-E4B-it's 24 KV-owning layers
    (18 of 42 share a target's cache) are 4 full layers of 2 KV heads x 512 x 2 x 2 B = 4,096 B/token and 20
    sliding of 2,048: the sliding blocks hold 32 tokens so every page is 16 x 4,096 = 65,536 B. The shared layers
    have no spec at all (0.25.1 gemma4.py :457-480 names their kv_sharing_target_layer_name; gpu_model_runner.py
    `get_kv_cache_spec` :7575 skips such a layer: 'doesn't allocate KV cache for the layer')."""
    specs, groups = _groups_for("google/gemma-4-E4B-it")
    assert sorted((s.kind, s.bytes_per_token) for s in set(specs)) == [("full", 4096), ("sliding", 2048)]
    assert len(specs) == 24 and len(groups.groups) == 6 and groups.padding_layers == 0   # 5 sliding + 1 full of 4
    assert {s.page_bytes(16) for g in groups.groups for s in g} == {65_536}
    assert groups.bytes_per_block == 4 * 65_536
    # the L40S's 2,048 batched tokens at 16,384: a sliding group cdiv(511 + 2,048, 32) + 1 = 81 blocks, the full
    # group 16,384 / 16 = 1,024; one rounding over the groups (before 0.27): 5 x 81 + 1,024 = 1,429
    pool = int(22.01 * GiB)
    cap = pool_capacity(groups, pool, 16_384, 2_048, tokens_from_concurrency=True)
    assert cap.blocks_per_request == 5 * 81 + 1_024
    assert cap.num_blocks == pool // 262_144 == 90_152   # 23,633,057,546 B / 262,144 = 90,152.96
    assert round(cap.max_concurrency, 2) == round(90_152 / 1_429, 2) == 63.09   # vLLM 0.25.1 printed 63.10x


def test_unequal_pages_where_the_full_layers_are_smaller():
    # gemma-4-31B-it: sliding 16 KV heads x 256 x 2 x 2 B = 16,384 B/token, full 4 x 512 x 2 x 2 = 8,192 (keys
    # are values, attention_k_eq_v, but vLLM still allocates both): the full layers' blocks hold 32 tokens
    specs, groups = _groups_for("google/gemma-4-31B-it")
    full = next(s for g in groups.groups for s in g if s.kind == "full")
    assert (full.bytes_per_token, full.block_scale) == (8_192, 2)
    # 32,768 tokens at 32 a block (block_scale 2 x 16) = 1,024 blocks x 32 x 8,192 B
    assert max_usage_bytes(full, 16, 32_768, 8_192) == 32_768 // 32 * 32 * 8_192


@pytest.mark.parametrize("name, version, ssm_bytes", [
    # NVIDIA-Nemotron-3-Nano-30B-A3B sets mamba_ssm_cache_dtype float32: 64 heads x 64 x 128 x 4 B
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", (0, 20, 1), 64 * 64 * 128 * 4),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", (0, 12, 0), 64 * 64 * 128 * 2),   # no NemotronH class yet
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", (0, 13, 0), 64 * 64 * 128 * 4),   # the config's, from 0.13
    # Nemotron-H-56B sets none: float32 from 0.20 (DEFAULT_MAMBA_SSM_CACHE_DTYPE), float16 0.13-0.19
    ("nvidia/Nemotron-H-56B-Base-8K", (0, 20, 0), 256 * 64 * 256 * 4),
    ("nvidia/Nemotron-H-56B-Base-8K", (0, 19, 0), 256 * 64 * 256 * 2),
    ("nvidia/Nemotron-H-56B-Base-8K", (0, 33, 0), 256 * 64 * 256 * 4),
])
def test_nemotron_h_ssm_state_dtype_by_version(name, version, ssm_bytes):
    """model_executor/models/config.py `NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype`: the config's
    mamba_ssm_cache_dtype, else float16 (0.13.0-0.19.0) / float32 (0.20.0-0.33.0); none in 0.12.0 (the model
    dtype); the conv state stays bf16."""
    model = load_model(name)
    (spec,) = {x for x in rank_layer_specs(model, range(model.num_layers), 1, 2, 2, version) if x.kind == "mamba"}
    state = model.fields["mamba_num_heads"] * 64 * model.fields["ssm_state_size"]
    conv = (model.fields["mamba_num_heads"] * 64 + 2 * 8 * model.fields["ssm_state_size"]) * 3 * 2
    assert spec.state_bytes == conv + ssm_bytes and ssm_bytes in (state * 2, state * 4)


def test_nemotron3_nano_block_and_concurrency_hand_derived():
    # float32 state 36,864 + 2,097,152 = 2,134,016 B; block 16 x cdiv(2,134,016, 16 x 1,024) = 2,096 tokens;
    # 23 Mamba layers in groups of 6 (1 padding layer: vLLM 'Add 1 padding layers, may waste at most 4.35%' = 1/23)
    p = plan("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", engine="vllm", gpu="H100", max_model_len=262_144,
             engine_version="0.20.1", max_num_seqs=8)
    assert p.block_size == 2_096
    groups = kv_groups(list(p.kv_layers), p.block_size)
    assert groups.padding_layers == 1 and len(groups.groups) == 5 and len(groups.groups[0]) == 6
    # 6 layers a group x a 2,096-token block x 1,024 B (2,134,016 B of state / 2,096 rounded, the comment above)
    assert groups.bytes_per_block == 6 * 2_096 * 1_024
    assert max_concurrency_at(p, 262_144, load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")) == pytest.approx(
        # the pool over 6 x 2,096 x 1,024 B blocks, over cdiv(262,144, 2,096) = 126 blocks + 4 a request
        (p.kv_pool_bytes // (6 * 2_096 * 1_024)) / (cdiv(262_144, 2_096) + 4))


def test_plan_notes_say_which_layers_have_longer_blocks_and_how_tokens_are_counted():
    new = plan("google/gemma-4-E4B-it", engine="vllm", gpu="L40S", max_model_len=16_384, engine_version="0.25.1")
    assert "sliding layers' blocks hold 32 tokens, the others 16" in " ".join(new.notes)
    assert "'GPU KV cache size' is max concurrency x max_model_len" in " ".join(new.notes)   # 0.20.1+
    old = plan("google/gemma-4-E4B-it", engine="vllm", gpu="L40S", max_model_len=16_384, engine_version="0.20.0")
    assert "'GPU KV cache size' is per group" in " ".join(old.notes)   # 0.20.0: num_blocks // groups x block


@pytest.mark.parametrize("model_id, positions", [("Qwen/Qwen3.5-27B", 262_144), ("Qwen/Qwen3.5-397B-A17B", 262_144),
                                                 ("Qwen/Qwen3-Next-80B-A3B-Instruct", 262_144)])
def test_the_rope_table_rotates_a_quarter_of_the_head_wherever_the_config_says_it(model_id, positions):
    """vLLM 0.33 get_rope (layers/rotary_embedding/__init__.py) builds a cos/sin table of
    int(head_size x rope_parameters["partial_rotary_factor"]) per position, once transformers'
    standardize_rope_params has moved a top-level partial_rotary_factor there. Qwen3.5 sets 0.25 only inside
    rope_parameters (Qwen3-Next only at the top level): max_position_embeddings 262,144 x int(256 x 0.25) x 2 B =
    32 MiB. Read at the top level only, Qwen3.5's table was priced 256 wide, 128 MiB, 96 MiB too much per GPU."""
    from kvplan.dtypes import resolve_dtype
    from kvplan.weights.split import rope_cache_bytes

    model = load_model(model_id)
    # by hand: 262,144 positions x int(256 x 0.25) x 2 B (vLLM 0.33 get_rope)
    assert rope_cache_bytes(model, resolve_dtype("bfloat16")) == positions * (256 // 4) * 2 == 33_554_432
