"""SGLang's KV pool (kv-rules.md Part 2.2): cell size, page rounding, default mem_fraction_static, SWA split.

Expected values are derived by hand from SGLang's formulas in each test.
"""

from __future__ import annotations

import pytest

from kvplan.config.load import load_model
from kvplan.errors import KVPlanError
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.sglang_pool import (LOAD_EXTRA_BYTES, PRELOAD_BYTES, V053, V0523, SglangSettings,
                                                 batch_defaults, cell_size, default_mem_fraction, prefill_graph_sizes,
                                                 sglang_pool)
from kvplan.planning.engines.vllm_kv import rank_layer_specs
from kvplan.planning.planner import plan
from validation import sglang_calibration

MiB = 2**20
GiB = 2**30


def _rest(total: int, weights: int, fraction: float) -> int:
    """SGLang's pool: free memory before loading (the card less the context) x fraction, less what loading
    took (parameters and RoPE tables + the load extras)."""
    before = total - PRELOAD_BYTES
    return int(before - weights - LOAD_EXTRA_BYTES - before * (1 - fraction))


def _specs(name: str, tp: int = 1, kv_bytes: float = 2):
    model = load_model(name)
    return rank_layer_specs(model, range(model.num_layers), tp, kv_bytes, 2)


# ------------------------------------------------------------------------------------- cell size


@pytest.mark.parametrize("name, tp, expected", [
    # MHA/GQA: KV heads per rank x (head_dim + v_head_dim) x layers x bytes
    ("meta-llama/Llama-3.1-8B", 1, 8 * (128 + 128) * 32 * 2),        # 131,072
    ("meta-llama/Llama-3.1-8B", 2, 4 * (128 + 128) * 32 * 2),
    ("meta-llama/Llama-3.1-8B", 8, 1 * (128 + 128) * 32 * 2),
    ("meta-llama/Llama-3.1-8B", 16, 1 * (128 + 128) * 32 * 2),       # 8 KV heads on 16 ranks: replicated
    ("Qwen/Qwen3-30B-A3B", 8, 1 * (128 + 128) * 48 * 2),             # 24,576 (4 KV heads replicated)
    ("google/gemma-2-9b", 1, 8 * (256 + 256) * 42 * 2),
    # MLA: (kv_lora_rank + qk_rope_head_dim) x layers x bytes, the same on every rank
    ("deepseek-ai/DeepSeek-V3", 1, (512 + 64) * 61 * 2),             # 70,272
    ("deepseek-ai/DeepSeek-V3", 8, (512 + 64) * 61 * 2),
    ("deepseek-ai/DeepSeek-V2-Lite", 1, (512 + 64) * 27 * 2),
])
def test_cell_size(name, tp, expected):
    assert cell_size(_specs(name, tp)) == expected


def test_cell_size_fp8_halves():
    assert cell_size(_specs("meta-llama/Llama-3.1-8B", kv_bytes=1)) == 65_536
    assert cell_size(_specs("deepseek-ai/DeepSeek-V3", tp=8, kv_bytes=1)) == 576 * 61


def test_plan_reports_the_cell_size_per_rank():
    for name, tp, expected in (("meta-llama/Llama-3.1-8B", 2, 65_536), ("deepseek-ai/DeepSeek-V3", 8, 70_272)):
        p = plan(name, engine="sglang", gpu="H200", tp=tp, max_model_len=8192)
        assert p.kv_bytes_per_token == expected


# ------------------------------------------------------------------------------------- mem_fraction_static


@pytest.mark.parametrize("gpu, tp, chunk, graph_bs", [
    # ServerArgs._handle_gpu_memory_settings tiers: (chunked_prefill_size, cuda_graph_max_bs below TP4 / from TP4)
    ("T4", 1, 2048, 8), ("L4", 1, 2048, 24), ("L4", 4, 2048, 80), ("RTX 4090", 2, 2048, 24),
    ("L40S", 1, 4096, 32), ("L40S", 4, 4096, 160), ("H100-80GB", 1, 8192, 256), ("H100-80GB", 8, 8192, 512),
    ("A100-80GB", 4, 8192, 512), ("H200", 1, 8192, 256), ("B200", 2, 16384, 512), ("MI300X", 8, 16384, 512),
])
def test_default_mem_fraction_static(gpu, tp, chunk, graph_bs):
    """reserved = 512 + max(chunk, 2048) x 1.5 + graph_bs x 2 + tp / 8 x 1024 MB, at least 10 GB on cards over
    60 GB; fraction = round((memory - reserved) / memory, 3). H100 TP1: 512 + 12,288 + 512 + 128 = 13,440 MB of
    81,090 -> 0.834."""
    total = resolve_gpu(gpu).memory_bytes
    memory_mb = total / MiB
    assert batch_defaults(memory_mb, tp, V053) == (chunk, graph_bs)
    reserved_mb = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if memory_mb > 60 * 1024:
        reserved_mb = max(reserved_mb, 10 * 1024)
    fraction, reserved = default_mem_fraction(total, SglangSettings(tensor_parallel_size=tp, version=V053))
    assert reserved == int(reserved_mb * MiB)
    assert fraction == round((memory_mb - reserved_mb) / memory_mb, 3)
    if gpu == "H100-80GB" and tp == 1:
        assert reserved_mb == 13_440 and fraction == 0.834


@pytest.mark.parametrize("tp, fraction", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_sglang_before_0_5_picks_the_fraction_by_tp(tp, fraction):
    """The 0.4.x logs in validation/sglang_calibration.csv print 0.88 at TP1 (Llama-3.1-8B, Qwen2.5-7B, Qwen3-0.6B)
    and 0.85 at TP4 (QwQ-32B on L4s), whatever the card."""
    for gpu in ("L4", "H100-80GB"):
        got, _ = default_mem_fraction(resolve_gpu(gpu).memory_bytes,
                                      SglangSettings(tensor_parallel_size=tp, version=(0, 4, 6)))
        assert got == fraction
    p = plan("Qwen/Qwen2.5-32B", engine="sglang", gpu="L4", tp=4, max_model_len=8192, engine_version="0.4.3")
    assert p.gpu_memory_utilization == 0.85 and p.engine_version == "0.4.3"
    assert plan("Qwen/Qwen2.5-32B", engine="sglang", gpu="L4", tp=4, max_model_len=8192).engine_version == "0.5.23"


def test_plan_uses_the_default_fraction_and_the_budget():
    p = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-80GB", max_model_len=8192, engine_version="0.5.3")
    total = p.gpu_memory_bytes
    fraction = round((total / MiB - 13_440) / (total / MiB), 3)             # 0.834
    assert p.gpu_memory_utilization == fraction
    rest = _rest(total, p.weights_bytes, fraction)
    assert p.kv_pool_bytes == rest
    assert p.kv_cache_tokens == rest // 131_072
    assert p.max_concurrency == round(p.kv_cache_tokens / 8192, 4)
    assert p.fits and p.shortfall_bytes == 0
    assert p.vllm_command.startswith("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B")
    assert f"--mem-fraction-static {round(fraction, 4)}" in p.vllm_command
    assert "--context-length 8192" in p.vllm_command and "--tp-size 1" in p.vllm_command


def test_explicit_fraction_is_used_even_when_it_is_0_9():
    for util in (0.9, 0.75, 1.0):
        p = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-80GB", max_model_len=8192,
                 gpu_memory_utilization=util)
        assert p.gpu_memory_utilization == util
        total = p.gpu_memory_bytes
        assert p.kv_pool_bytes == _rest(total, p.weights_bytes, util)


def test_sglang_fp8_command_and_tokens():
    base = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-80GB", max_model_len=8192)
    fp8 = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-80GB", max_model_len=8192, kv_dtype="fp8")
    assert fp8.kv_cache_tokens == base.kv_pool_bytes // 65_536
    assert "--kv-cache-dtype fp8_e4m3" in fp8.vllm_command


def test_sglang_bad_utilization_is_a_kvplan_error():
    for util in (0, -1, 1.5, "x"):
        with pytest.raises(KVPlanError):
            plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu_memory_utilization=util)


# ------------------------------------------------------------------------------------- page rounding


@pytest.mark.parametrize("page", [1, 16, 64])
def test_tokens_round_down_to_whole_pages(page):
    specs = _specs("meta-llama/Llama-3.1-8B")
    total, weights = resolve_gpu("H100-80GB").memory_bytes, 16 * GiB
    pool = sglang_pool(total, weights, specs, SglangSettings(mem_fraction_static=0.85, page_size=page), 8192)
    rest = _rest(total, weights, 0.85)
    raw = rest // 131_072
    assert pool.rest_bytes == rest
    assert pool.max_total_tokens == raw - raw % page
    assert pool.max_total_tokens % page == 0


def test_max_running_requests_default_is_clamped():
    specs = _specs("meta-llama/Llama-3.1-8B")
    total = resolve_gpu("H100-80GB").memory_bytes
    pool = sglang_pool(total, 16 * GiB, specs, SglangSettings(mem_fraction_static=0.85), 8192)
    assert pool.max_running_requests == min(4096, max(2048, int(pool.max_total_tokens / 8192 * 512)))
    tiny = sglang_pool(total, 16 * GiB, specs, SglangSettings(mem_fraction_static=0.85), 10**7)
    assert tiny.max_running_requests == 2048


# ------------------------------------------------------------------------------------- SWA split


def test_gemma2_swa_split():
    """21 sliding + 21 full layers, 8 heads x 512 x 2 B each: swa_tokens = 0.8 x full_tokens and
    full x full_cell + swa x swa_cell fills the rest."""
    specs = _specs("google/gemma-2-9b")
    full_cell = swa_cell = 21 * 8 * 512 * 2                       # 172,032 B per token each
    total = resolve_gpu("H100-80GB").memory_bytes
    weights = 18 * GiB
    pool = sglang_pool(total, weights, specs, SglangSettings(mem_fraction_static=0.88), 8192)
    rest = _rest(total, weights, 0.88)
    full = int(rest / (full_cell + 0.8 * swa_cell))
    assert pool.full_tokens == pool.max_total_tokens == full
    assert pool.swa_tokens == int(full * 0.8)
    assert pool.full_tokens * full_cell + pool.swa_tokens * swa_cell <= rest
    assert (pool.full_tokens + 1) * full_cell + int((pool.full_tokens + 1) * 0.8) * swa_cell > rest
    assert pool.cell_bytes == full_cell + swa_cell


def test_swa_ratio_setting():
    specs = _specs("openai/gpt-oss-20b")                            # 12 sliding + 12 full, 8 x 128 x 2 B
    cell = 12 * 8 * 128 * 2
    pool = sglang_pool(80 * GiB, 14 * GiB, specs, SglangSettings(mem_fraction_static=0.9, swa_full_tokens_ratio=0.5),
                       131_072)
    rest = _rest(80 * GiB, 14 * GiB, 0.9)
    assert pool.full_tokens == int(rest / (cell + 0.5 * cell))
    assert pool.swa_tokens == int(pool.full_tokens * 0.5)


def test_plan_for_a_sliding_hybrid_and_its_shortfall():
    p = plan("google/gemma-2-9b", engine="sglang", gpu="H100-80GB", max_model_len=8192)
    cell = 21 * 8 * 512 * 2
    assert p.kv_cache_tokens == int(p.kv_pool_bytes / (cell + 0.8 * cell))
    short = plan("google/gemma-2-9b", engine="sglang", gpu="L4", max_model_len=8192, engine_version="0.5.3")
    assert not short.fits
    assert short.shortfall_bytes == pytest.approx(8192 * (cell + 0.8 * cell) - short.kv_pool_bytes, abs=1)


def test_sglang_does_not_fit_counts_the_weights_overflow():
    p = plan("meta-llama/Llama-3.1-405B", engine="sglang", gpu="L4", max_model_len=8192)
    assert not p.fits and p.kv_cache_tokens == 0 and p.kv_pool_bytes == 0  # never a negative figure
    rest = _rest(p.gpu_memory_bytes, p.weights_bytes, p.gpu_memory_utilization)
    assert rest < 0 and p.shortfall_bytes == 8192 * p.kv_bytes_per_token - rest  # the weights' overflow counted


# ------------------------------------------------------------------------------------- published start-ups


def test_published_sglang_start_ups(tmp_path):
    """validation/sglang_calibration.csv: SGLang's printed K + V sizes equal the printed token count x kvplan's
    bytes per token (no constant involved); max_total_num_tokens of the dense runs with a known GPU and
    mem_fraction_static within 2 % (Llama-3.1-8B on an H100 444,500; Qwen2.5-32B-architecture QwQ on 4 L4s
    46,611; Qwen3-14B on 4 RTX 4090s 298,447; before the free-memory rule: +0.9 %, +19.5 %, +5.7 %)."""
    import csv

    module = sglang_calibration
    assert module.main(["--out", str(tmp_path)]) == 0
    with module.DEFAULT_CSV.open() as f:
        results = {row["run_id"]: module.check_row(row) for row in csv.DictReader(f)}
    cells = [r["cell"] for r in results.values() if r.get("cell")]
    assert len(cells) >= 8
    for printed, predicted in cells:
        assert predicted == pytest.approx(printed, abs=0.011)       # two printed decimals per K and V
    for run_id in ("sgl_docs_send_request_llama31_8b_20250123", "didierdurand_qwq32b_4xL4_20250308",
                   "kuiperinfer_qwen3_14b_4x4090_tp4_20260614"):
        printed, predicted = results[run_id]["tokens"]
        assert predicted == pytest.approx(printed, rel=0.02), run_id
    assert "| max_total_num_tokens |" in (tmp_path / "sglang_calibration.md").read_text()


# ------------------------------------------------------------------------------------- 0.5.23 and 0.5.1


def test_sglang_0_5_23_reserves_the_prefill_graphs():
    """0.5.23 arg_groups/memory_hook.py reserve_for_graph_mb: 2 x max_bs + 8 MB per prefill graph size (58 up to
    8,192 tokens); H100 TP1: 512 + 12,288 + 128 + 512 + 464 = 13,904 MB of 81,090 -> 0.829; MLA models 1.5 GB."""
    assert len(prefill_graph_sizes(8192)) == 58 and prefill_graph_sizes(8192)[-1] == 8192
    total = resolve_gpu("H100-80GB").memory_bytes
    fraction, reserved = default_mem_fraction(total, SglangSettings(version=V0523))
    assert reserved == int(13_904 * MiB) and fraction == round((total / MiB - 13_904) / (total / MiB), 3) == 0.829
    mla, _ = default_mem_fraction(total, SglangSettings(version=V0523, mla=True))
    assert mla == round((total / MiB - (13_440 + 1536)) / (total / MiB), 3)
    p = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-80GB", max_model_len=8192)
    assert p.engine_version == "0.5.23" and p.gpu_memory_utilization == 0.829
    # the 20-35 GB tier changed: 4,096-token chunks and 48 decode graphs below TP4 (160 from it)
    assert batch_defaults(resolve_gpu("L4").memory_bytes / MiB, 1, V0523) == (4096, 48)
    assert batch_defaults(resolve_gpu("L4").memory_bytes / MiB, 4, V0523) == (4096, 160)


def test_sglang_0_5_1_reserves_by_memory_class():
    """0.5.1 server_args.py:351-395: (9.5 + TP x PP / 2) GB under 90 GB: H100 TP1 10,240 MB -> 0.874."""
    total = resolve_gpu("H100-80GB").memory_bytes
    fraction, reserved = default_mem_fraction(total, SglangSettings(version=(0, 5, 1)))
    assert reserved == 10_240 * MiB and fraction == 0.874
    tp4, _ = default_mem_fraction(resolve_gpu("L4").memory_bytes, SglangSettings(tensor_parallel_size=4,
                                                                                 version=(0, 5, 1)))
    assert tp4 == round((resolve_gpu("L4").memory_bytes / MiB - 3.2 * 1024) / (resolve_gpu("L4").memory_bytes / MiB), 3)


def test_sglang_dp_attention_splits_attention_and_keeps_a_pool_per_rank():
    """--tp 8 --dp 8 --enable-dp-attention: attention TP 1 on each of the 8 GPUs, so every rank holds all
    attention weights and all KV heads (MHA) of its own requests; experts stay split over the 8."""
    base = plan("Qwen/Qwen3-30B-A3B", engine="sglang", gpu="H100-80GB", tp=8, max_model_len=8192)
    dp = plan("Qwen/Qwen3-30B-A3B", engine="sglang", gpu="H100-80GB", tp=8, dp=8, max_model_len=8192)
    assert dp.num_gpus == 8 and base.kv_bytes_per_token == 48 * 2 * 1 * 128 * 2     # 4 KV heads over TP 8: 1 each
    assert dp.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2                            # all 4 on every rank
    assert dp.weights_bytes > base.weights_bytes                                     # attention replicated
    assert "--dp-size 8 --enable-dp-attention" in dp.vllm_command
    with pytest.raises(KVPlanError, match="must divide TP"):
        plan("Qwen/Qwen3-30B-A3B", engine="sglang", gpu="H100-80GB", tp=4, dp=3, max_model_len=8192)


def test_sglang_mtp_and_lora_take_memory_before_the_pool():
    base = plan("deepseek-ai/DeepSeek-V3", engine="sglang", gpu="H200", tp=8, max_model_len=8192)
    mtp = plan("deepseek-ai/DeepSeek-V3", engine="sglang", gpu="H200", tp=8, max_model_len=8192,
               speculative={"method": "mtp", "num_speculative_tokens": 1})
    assert mtp.kv_bytes_per_token == base.kv_bytes_per_token * 62 // 61 == 71_424
    drafted = mtp.extra["draft model weights"]
    assert mtp.kv_pool_bytes == base.kv_pool_bytes - drafted
    assert mtp.max_num_seqs == 48 and "--speculative-algorithm NEXTN" in mtp.vllm_command
    lora = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-80GB", max_model_len=8192,
                lora={"max_lora_rank": 16})
    # 8 slots (max_loras_per_batch) x 32 layers x 16 x 81,920 elements x 2 B, no embed / lm_head
    assert lora.extra == {"LoRA memory pool": 8 * 32 * 16 * 81_920 * 2}
