"""vLLM 0.20 -> 0.33 as read from its wheels (issue #11): the CUDA-graph estimate subtracted from the KV budget, the
"GPU KV cache size" from the concurrency, --kv-cache-memory-bytes and its suggestion, max_model_len auto, data and
expert parallelism, speculative decoding, LoRA slots, NVLS off, and the version eras."""

from __future__ import annotations

import math

import pytest

from kvplan.cli import main
from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm_cudagraph import capture_sizes, v2_runner
from kvplan.planning.planner import plan
from kvplan.weights.split import stage_weight_bytes

GRAPHS = "CUDA graphs (estimate)"
LLAMA = "meta-llama/Llama-3.1-8B"
MiB, GiB = 2**20, 2**30


def test_default_is_vllm_0_33_and_its_pool_is_0_19s_less_the_graph_estimate():
    """Acceptance: `kvplan plan meta-llama/Llama-3.1-8B --gpu H100-80GB` plans vLLM 0.33.0; at the same utilisation
    its pool is 0.19's less the CUDA-graph estimate, a line of its own in the budget and the formula."""
    new = plan(LLAMA, gpu="H100-80GB", max_model_len=8192)
    old = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.19.0", gpu_memory_utilization=0.92)
    assert new.engine_version == "0.33.0" and new.gpu_memory_utilization == 0.92
    assert old.extra == {} and new.extra[GRAPHS] == 860 * MiB
    assert old.kv_pool_bytes - new.kv_pool_bytes == new.extra[GRAPHS]
    assert "CUDA graphs (estimate) 860.00 MiB" in new.formula[0]
    assert ("CUDA graphs (estimate)", 860 * MiB) in new.budget_lines()
    # 0.19 computes the estimate but leaves it in the headroom, and says so
    assert any("does not subtract it" in n and "0.20" in n for n in old.notes)


def test_default_capture_sizes():
    """config/vllm.py `_set_cudagraph_sizes`: min(2 x max_num_seqs x (1 + k), 512) tokens at most, 1024 on
    SM10x from 0.28; 1, 2, 4, then steps of 8 to 248 and of 16 from 256."""
    h100 = capture_sizes(1024, 8192, (0, 33, 0))
    assert len(h100) == 51 and h100[:5] == (1, 2, 4, 8, 16) and h100[-2:] == (496, 512)
    assert len(capture_sizes(1024, 16384, (0, 33, 0), sm100=True)) == 83
    assert capture_sizes(1024, 16384, (0, 27, 0), sm100=True)[-1] == 512
    assert 100 in capture_sizes(100, 2048, (0, 31, 0)) and 100 not in capture_sizes(100, 2048, (0, 30, 0))
    spec = capture_sizes(1024, 8192, (0, 29, 0), spec_tokens=2)     # n x 3 decode batches from 0.29
    assert {3, 6, 12, 504} <= set(spec) and 9 not in spec and spec[-1] == 512
    assert 3 not in capture_sizes(1024, 8192, (0, 28, 0), spec_tokens=2)
    assert capture_sizes(16, 64, (0, 33, 0)) == (1, 2, 4, 8, 16, 24, 32)    # capped by the tokens per step


def test_the_v2_runner_makes_no_estimate_before_0_29():
    assert v2_runner((0, 22, 0), "qwen3", moe=False, quantized=False, hybrid=False, attention_free=False)
    assert not v2_runner((0, 22, 0), "llama", moe=False, quantized=False, hybrid=False, attention_free=False)
    assert v2_runner((0, 25, 0), "llama", moe=False, quantized=False, hybrid=False, attention_free=False)
    assert not v2_runner((0, 28, 0), "qwen3_moe", moe=True, quantized=False, hybrid=False, attention_free=False)
    assert v2_runner((0, 29, 0), "qwen3_moe", moe=True, quantized=False, hybrid=False, attention_free=False)
    dense = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.25.0")
    assert dense.extra == {} and any("V2 model runner makes no CUDA-graph estimate" in n for n in dense.notes)
    moe = plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", max_model_len=8192, engine_version="0.25.0")
    assert moe.extra[GRAPHS] > 0
    assert plan(LLAMA, gpu="H100-80GB", max_model_len=8192, enforce_eager=True).extra == {}


def test_estimate_off_and_eager_commands():
    off = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, cudagraph_estimate=False)
    assert off.extra == {} and off.vllm_command.startswith("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve")
    on = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.19.0", cudagraph_estimate=True)
    assert on.extra[GRAPHS] == 860 * MiB and on.vllm_command.startswith("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1")
    eager = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, enforce_eager=True)
    assert "--enforce-eager" in eager.vllm_command and eager.kv_pool_bytes == off.kv_pool_bytes


def test_kv_cache_tokens_come_from_the_concurrency_from_0_20_1():
    """kv_cache_utils.py `get_kv_cache_capacity` (0.24; inline from 0.20.1): int(max_concurrency x max_model_len)."""
    for length in (8192, 8193):
        p = plan(LLAMA, gpu="H100-80GB", max_model_len=length)
        assert p.kv_cache_tokens == int(p.num_blocks / math.ceil(length / 16) * length)
        old = plan(LLAMA, gpu="H100-80GB", max_model_len=length, engine_version="0.20.0")
        assert old.kv_cache_tokens == old.num_blocks * 16
    assert plan(LLAMA, gpu="H100-80GB", max_model_len=8193).kv_cache_tokens < p.num_blocks * 16


def test_sliding_windows_hold_two_steps_from_0_26():
    """0.26 kv_cache_interface.py: W - 1 + 2 x max_num_batched_tokens with async scheduling (gemma-2-9b on an
    L40S: 2,048-token steps, a 4,096 window)."""
    late = plan("google/gemma-2-9b", gpu="L40S", max_model_len=8192, engine_version="0.26.0")
    early = plan("google/gemma-2-9b", gpu="L40S", max_model_len=8192, engine_version="0.25.0")
    assert late.max_concurrency < early.max_concurrency


def test_kv_cache_memory_bytes_sets_the_pool_and_vllm_suggests_one():
    given = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, kv_cache_memory_bytes=20 * GiB)
    assert given.kv_pool_bytes == 20 * GiB and given.kv_cache_memory_bytes == 20 * GiB
    assert "--kv-cache-memory-bytes 21474836480" in given.vllm_command
    assert "--gpu-memory-utilization" not in given.vllm_command and given.fits
    too_big = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, kv_cache_memory_bytes=70 * GiB)
    assert not too_big.fits and too_big.shortfall_bytes > 0          # weights + pool + graphs exceed the card
    # v0.19 logged "--kv-cache-memory=61256980480 (57.05 GiB) to fit requested memory" for this start-up
    # (calibration csv, llm-d-planner): the pool less the captured graphs and a 150 MiB margin
    old = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.19.0", gpu_memory_utilization=0.95)
    assert old.suggested_kv_cache_memory_bytes == old.kv_pool_bytes - 860 * MiB - 150 * MiB
    assert old.suggested_kv_cache_memory_bytes == pytest.approx(61_256_980_480, rel=2e-3)
    # from 0.27 an applied estimate is counted twice (non-KV memory holds it, then the capture again)
    new = plan(LLAMA, gpu="H100-80GB", max_model_len=8192)
    assert new.suggested_kv_cache_memory_bytes == new.kv_pool_bytes - 860 * MiB - 150 * MiB


def test_max_model_len_auto_is_the_longest_one_request_fits(capsys):
    p = plan(LLAMA, gpu="L4", max_model_len="auto")
    assert p.fits and 8192 < p.max_model_len < 131_072
    assert p.max_model_len == p.max_model_len_that_fits and "max_model_len auto" in p.notes[0]
    longer = plan(LLAMA, gpu="L4", max_model_len=p.max_model_len + 64)
    assert not longer.fits
    assert plan(LLAMA, gpu="H100-80GB", max_model_len=-1).max_model_len == 131_072   # the config's length fits
    assert main(["plan", LLAMA, "--gpu", "L4", "--max-model-len", "auto"]) == 0
    assert f"--max-model-len {p.max_model_len}" in capsys.readouterr().out
    with pytest.raises(WorkloadError, match="SGLang has no automatic context length"):
        plan(LLAMA, engine="sglang", max_model_len="auto")


def test_expert_parallel_divides_the_experts_over_tp_x_dp():
    """vLLM FusedMoE: --enable-expert-parallel puts E / (TP x DP) whole experts on each rank (Qwen3-30B-A3B over
    DP 2: 64 of 128), attention and the rest whole on every DP rank; each DP engine keeps its own pool."""
    one = plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", max_model_len=32768)
    ep = plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", max_model_len=32768, dp=2, expert_parallel=True)
    expert = 3 * 2048 * 768 * 2                                       # gate, up, down of one expert, bf16
    assert one.weights_bytes - ep.weights_bytes == 64 * 48 * expert
    assert (ep.num_gpus, ep.data_parallel_size, ep.expert_parallel_size) == (2, 2, 2)
    assert ep.kv_bytes_per_token == one.kv_bytes_per_token            # attention is not split over DP
    assert ep.kv_pool_bytes > one.kv_pool_bytes
    assert "--data-parallel-size 2 --enable-expert-parallel" in ep.vllm_command
    assert any("2 data-parallel engines" in n for n in ep.notes)
    # DeepSeek-V3 on 8 H200s: DP 8 with EP holds the experts as TP 8 does, but every rank the whole of the rest
    tp8 = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=32768)
    dep8 = plan("deepseek-ai/DeepSeek-V3", gpu="H200", dp=8, expert_parallel=True, max_model_len=32768)
    shape = load_model("deepseek-ai/DeepSeek-V3").require_arch()
    rest = stage_weight_bytes(shape, shape.dtype, 1, range(61), True, True, moe_ranks=10**9)   # ~0 experts
    assert dep8.weights_bytes - tp8.weights_bytes == pytest.approx(rest * 7 / 8, rel=0.01)
    assert dep8.kv_bytes_per_token == tp8.kv_bytes_per_token == 61 * 1152   # MLA latent whole on every rank
    with pytest.raises(WorkloadError, match="no routed experts"):
        plan(LLAMA, dp=2, expert_parallel=True, max_model_len=8192)


def test_mtp_speculative_decoding_adds_the_draft_layer_and_its_kv():
    base = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=32768)
    mtp = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=32768,
               speculative={"method": "mtp", "num_speculative_tokens": 1})
    assert mtp.kv_bytes_per_token == 62 * 1152 == 71_424              # one more MLA layer in every block
    drafted = mtp.extra["draft model weights"]
    assert 1.4 * GiB < drafted < 1.7 * GiB                             # layer 61 over TP 8 + eh_proj whole
    assert mtp.kv_pool_bytes < base.kv_pool_bytes - drafted + 64 * MiB
    assert '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 1}\'' in mtp.vllm_command
    with pytest.raises(WorkloadError, match="declares no MTP layers"):
        plan(LLAMA, speculative={"method": "mtp", "num_speculative_tokens": 1}, max_model_len=8192)


def test_eagle3_head_weights_and_kv():
    """yuhuili's EAGLE-3 head for Llama-3.1-8B: one layer whose q/k/v read 2 x 4,096, fc [4,096, 12,288], an
    lm_head over 32,000 tokens and d2t; its 8 KV heads x 128 add one layer to every token (135,168 B)."""
    p = plan(LLAMA, gpu="H100-80GB", max_model_len=8192,
             speculative={"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"})
    layer = (4096 * 4096 * 2 + 2 * 1024 * 4096 + 3 * 4096 * 14336) * 2 + 2 * 4096 * 2   # + 2 norms
    wider = (4096 + 2 * 1024) * 4096 * 2
    expected = layer + wider + 3 * 4096 * 4096 * 2 + 32000 * 4096 * 2 + 32000 * 8
    assert p.extra["draft model weights"] == expected
    assert p.kv_bytes_per_token == 33 * 4096 == 135_168
    with pytest.raises(WorkloadError, match="not an EAGLE-3 head"):
        plan(LLAMA, speculative={"method": "eagle3", "model": "meta-llama/Llama-3.2-1B"}, max_model_len=8192)
    draft = plan(LLAMA, speculative={"method": "draft_model", "model": "meta-llama/Llama-3.2-1B",
                                     "num_speculative_tokens": 4}, max_model_len=8192)
    # a whole Llama-3.2-1B: its 16 layers of 8 KV heads x 64 join the target's 32 of 8 x 128
    assert draft.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2 + 16 * 2 * 8 * 64 * 2 == 163_840
    one_b = load_model("meta-llama/Llama-3.2-1B").require_arch()
    assert draft.extra["draft model weights"] == stage_weight_bytes(one_b, one_b.dtype, 1, range(16), True, True)


def test_lora_slots_follow_vllm_shapes():
    """lora/layers: 4 adapters of rank 16 on Llama-3.1-8B, TP 1, bf16: 4 x (32 x 16 x 81,920 + 2 x 16 x 132,352)
    x 2 B = 369,426,432 B; CUDA graphs are captured with and without adapters."""
    p = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, lora={"max_loras": 4, "max_lora_rank": 16})
    assert p.extra["LoRA adapter slots"] == 369_426_432
    assert p.extra[GRAPHS] > plan(LLAMA, gpu="H100-80GB", max_model_len=8192).extra[GRAPHS]
    assert "--enable-lora --max-loras 4 --max-lora-rank 16" in p.vllm_command
    with pytest.raises(WorkloadError, match="MLA"):
        plan("deepseek-ai/DeepSeek-V3", tp=8, gpu="H200", max_model_len=8192, lora={"max_loras": 1})


def test_nvls_off_uses_the_pcie_assumption():
    on = plan("meta-llama/Llama-3.1-70B", gpu="H100-80GB", tp=4, max_model_len=32768)
    off = plan("meta-llama/Llama-3.1-70B", gpu="H100-80GB", tp=4, max_model_len=32768, nvls=False)
    assert on.non_torch_bytes - off.non_torch_bytes == int((0.25 + 1.75 + 4 * 0.0325) * GiB) - int(0.5 * GiB)
    assert off.vllm_command.startswith("NCCL_NVLS_ENABLE=0 vllm serve")


def test_version_eras_and_refusals(capsys):
    assert "V2 model runner; CUDA-graph estimate subtracted by default" in plan(LLAMA, max_model_len=8192).notes[0]
    future = plan(LLAMA, max_model_len=8192, engine_version="0.40.0")
    assert any("newer than 0.33.0" in n for n in future.notes)
    assert future.kv_pool_bytes == plan(LLAMA, max_model_len=8192).kv_pool_bytes
    with pytest.raises(WorkloadError, match="from 0.6 on"):
        plan(LLAMA, max_model_len=8192, engine_version="0.5.4")
    assert main(["plan", LLAMA, "--engine-version", "0.4.0"]) == 2
    assert "from 0.6 on" in capsys.readouterr().err
    for flag in (["--enforce-eager"], ["--kv-cache-memory-bytes", "1000"], ["--no-nvls"]):
        assert main(["plan", LLAMA, "--engine", "sglang", *flag]) == 2
        assert "SGLang has no" in capsys.readouterr().err


def test_fewest_gpus_counts_the_data_parallel_engines():
    from kvplan.planning.search import fewest_gpus

    p = fewest_gpus("Qwen/Qwen3-235B-A22B", gpu="H100-80GB", max_model_len=32768, dp=2, expert_parallel=True)
    assert p.fits and p.num_gpus == 2 * p.tensor_parallel_size * p.pipeline_parallel_size and p.num_gpus % 2 == 0
    alone = fewest_gpus("Qwen/Qwen3-235B-A22B", gpu="H100-80GB", max_model_len=32768)
    assert alone.num_gpus <= p.num_gpus
