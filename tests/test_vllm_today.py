"""vLLM 0.20 -> 0.33 as read from its wheels (issue #11): the CUDA-graph estimate subtracted from the KV budget, the
"GPU KV cache size" from the concurrency, --kv-cache-memory-bytes and its suggestion, max_model_len auto, data and
expert parallelism, speculative decoding, LoRA slots, NVLS off, and the version eras."""

from __future__ import annotations

import math

import pytest

from kvplan.cli import main
from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm_cudagraph import capture_sizes
from kvplan.planning.engines.vllm_runner import uses_v2
from kvplan.planning.planner import plan
from kvplan.weights.split import stage_weight_bytes

GRAPHS = "CUDA graphs (estimate)"
LLAMA = "meta-llama/Llama-3.1-8B"
MiB, GiB = 2**20, 2**30


def test_default_is_vllm_0_33_and_its_pool_is_the_v2_runners_budget():
    """Acceptance: `kvplan plan meta-llama/Llama-3.1-8B --gpu H100-80GB` plans vLLM 0.33.0, where Llama runs on the
    V2 model runner (config/vllm.py: every model from 0.29). Its budget, by hand from the 0.33 source:

    - activation: the sampler's warm-up pass keeps bf16 logits and their float32 copy, 1,024 x 128,256 x 6 B, with
      the last hidden states 3 x 8,192 x 4,096 x 2 B: 989,331,456 B (the forward, 8,192 x (3 x 14,336 + 3 x 4,096)
      x 2 B = 905,969,664 B, is smaller);
    - the V2 sampler buffers, counted from 0.27: 1,024 x 4 x (128,256 + 2 x 4,008 + 4 x 1,024 + 2 x 128 + 129) B;
    - the CUDA-graph estimate of V2 (every PIECEWISE graph measured): 132 + 260 + 50 x 6 + 50 x 6 = 992 MiB."""
    new = plan(LLAMA, gpu="H100-80GB", max_model_len=8192)
    old = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.19.0", gpu_memory_utilization=0.92)
    assert new.engine_version == "0.33.0" and new.gpu_memory_utilization == 0.92
    buffers = 1024 * 4 * (128_256 + 2 * 4008 + 4 * 1024 + 2 * 128 + 129)
    assert old.extra == {} and new.extra == {"V2 sampler buffers": buffers, GRAPHS: 992 * MiB}
    assert new.activation_bytes == 1024 * 128_256 * 6 + 3 * 8192 * 4096 * 2 == 989_331_456
    assert new.kv_pool_bytes == (math.ceil(0.92 * new.gpu_memory_bytes) - new.weights_bytes - 989_331_456
                                 - new.non_torch_bytes - buffers - 992 * MiB)
    assert "CUDA graphs (estimate) 992.00 MiB" in new.formula[0] and "V2 sampler buffers" in new.formula[0]
    assert (GRAPHS, 992 * MiB) in new.budget_lines()
    # 0.22 still runs Llama on V1: V1's sampler (14 B an entry) and estimate (max of the two first captures)
    v1 = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.22.0", gpu_memory_utilization=0.92)
    assert v1.extra == {GRAPHS: 860 * MiB} and old.kv_pool_bytes - v1.kv_pool_bytes == 860 * MiB
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


# vLLM's config/vllm.py `use_v2_model_runner` / `_is_default_v2_model_runner_model` and
# DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, read in each release's wheel (0.21 envs.py: V2 only when asked)
@pytest.mark.parametrize("version, arch, moe, quantized, hybrid, v2", [
    ((0, 21, 0), "Qwen3ForCausalLM", False, False, False, False),
    ((0, 22, 0), "Qwen3ForCausalLM", False, False, False, True),
    ((0, 22, 0), "LlamaForCausalLM", False, False, False, False),       # 0.22: Qwen3 alone
    ((0, 23, 0), "Qwen3ForCausalLM", False, True, False, False),        # 0.22-0.23: not quantized, not MoE
    ((0, 23, 0), "LlamaForCausalLM", False, False, False, True),
    ((0, 24, 0), "Qwen2MoeForCausalLM", True, False, False, True),      # 0.24: the list alone, MoE or not
    ((0, 24, 0), "GemmaForCausalLM", False, False, False, False),
    ((0, 25, 0), "GemmaForCausalLM", False, False, False, True),        # 0.25: every dense non-hybrid model
    ((0, 25, 0), "Qwen3MoeForCausalLM", True, False, False, False),
    ((0, 26, 0), "Qwen3_5ForConditionalGeneration", False, False, True, False),   # hybrids stay on V1 ...
    ((0, 27, 0), "KimiK3ForConditionalGeneration", True, False, True, True),      # ... unless listed (0.27+)
    ((0, 28, 0), "Qwen3MoeForCausalLM", True, False, False, False),
    ((0, 29, 0), "Qwen3MoeForCausalLM", True, False, False, True),      # 0.29: every model
])
def test_which_runner_each_release_picks(version, arch, moe, quantized, hybrid, v2):
    assert uses_v2(version, arch, moe=moe, quantized=quantized, hybrid=hybrid, attention_free=False) is v2


def test_the_v2_runner_makes_no_estimate_before_0_29():
    dense = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version="0.25.0")
    assert dense.extra == {} and "V2 model runner for this model, which makes no CUDA-graph estimate" in dense.notes[0]
    moe = plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", max_model_len=8192, engine_version="0.25.0")
    assert moe.extra[GRAPHS] > 0
    # eager: no graphs at all; the 0.33 V2 runner's sampler buffers remain
    assert list(plan(LLAMA, gpu="H100-80GB", max_model_len=8192, enforce_eager=True).extra) == ["V2 sampler buffers"]


def test_estimate_off_and_eager_commands():
    off = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, cudagraph_estimate=False)
    assert list(off.extra) == ["V2 sampler buffers"]
    assert off.vllm_command.startswith("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve")
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
    """0.26 kv_cache_interface.py `max_admission_blocks_per_request`: W - 1 + max_concurrent_batches x
    max_num_batched_tokens, 2 batches with async scheduling (config/vllm.py, PP 1); before 0.26, one batch.
    gemma-2-9b on an L40S: 2,048-token steps, a 4,096 window, 16-token blocks, 21 sliding + 21 full layers in two
    groups: a request takes cdiv(4,095 + 2 x 2,048, 16) + 1 = 513 sliding blocks from 0.26, cdiv(4,095 + 2,048,
    16) + 1 = 385 before, beside cdiv(8,192, 16) = 512 full ones."""
    late = plan("google/gemma-2-9b", gpu="L40S", max_model_len=8192, engine_version="0.26.0")
    early = plan("google/gemma-2-9b", gpu="L40S", max_model_len=8192, engine_version="0.25.0")
    assert late.kv_rules.inflight == 2 and early.kv_rules.inflight == 1
    assert late.max_concurrency == round(late.num_blocks / (513 + 512), 4)
    assert early.max_concurrency == round(early.num_blocks / (385 + 512), 4)


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
    # from 0.27 an applied estimate is counted twice (non-KV memory holds it, then the capture again); 0.33's V2
    # estimate is 992 MiB for this start-up
    new = plan(LLAMA, gpu="H100-80GB", max_model_len=8192)
    assert new.suggested_kv_cache_memory_bytes == new.kv_pool_bytes - 992 * MiB - 150 * MiB


def test_max_model_len_auto_is_the_longest_one_request_fits(capsys):
    p = plan(LLAMA, gpu="L4", max_model_len="auto")
    # bounds: past the 8,192 default a card must hold, short of the config's 131,072
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
    whole = stage_weight_bytes(shape, shape.dtype, 1, range(61), True, True, moe_ranks=10**9)   # ~0 experts
    rank = stage_weight_bytes(shape, shape.dtype, 8, range(61), True, True, moe_ranks=10**9)
    # what TP 8 splits of the rest, less q_a / kv_a, their norms and the routers, which every TP rank holds whole:
    # 14.62 GiB, not 7/8 of the rest (15.72 GiB); q_a_layernorm [1,536] and kv_a_layernorm [512] whole are
    # 61 x 3,584 B = 218,624 B less than when TP 8 split them (deepseek_v2.py:1082/1098 RMSNorm)
    assert dep8.weights_bytes - tp8.weights_bytes == whole - rank == 15_700_835_136 - 61 * 3584 == 15_700_616_512
    assert whole - rank < whole * 7 / 8
    assert dep8.kv_bytes_per_token == tp8.kv_bytes_per_token == 61 * 1152   # MLA latent whole on every rank
    with pytest.raises(WorkloadError, match="no routed experts"):
        plan(LLAMA, dp=2, expert_parallel=True, max_model_len=8192)


def test_mtp_speculative_decoding_adds_the_draft_layer_and_its_kv():
    base = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=32768)
    mtp = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=32768,
               speculative={"method": "mtp", "num_speculative_tokens": 1})
    # 62 MLA layers (61 + MTP) x 576 x 2 B = 71,424
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
    norms = 2 * 4096 * 2   # hidden_norm over the target's hidden states and the final norm (llama_eagle3.py)
    expected = layer + wider + 3 * 4096 * 4096 * 2 + 32000 * 4096 * 2 + 32000 * 8 + norms
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


def test_llama_4_chunked_layers_hold_the_batches_in_flight_from_0_26():
    """vLLM 0.26+ v1/kv_cache_interface.py ChunkedLocalAttentionSpec `max_admission_blocks_per_request`:
    cdiv(min(attention_chunk_size + max_in_flight_tokens, max_model_len), block) (0.33 :861-890), with
    max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens (config/vllm.py :588-609: 2 at PP 1 with
    async scheduling; Llama 4 is MoE, on the V1 runner until 0.29); 0.25: chunk + one batch. Llama-4-Scout at TP 4
    and 32,768 tokens on H100s (8,192 batched tokens, 16-token blocks): 36 chunked layers (chunk 8,192) and 12
    full ones in four groups of 12; a request takes 3 x cdiv(8,192 + 2 x 8,192, 16) + cdiv(32,768, 16) = 3 x 1,536 +
    2,048 = 6,656 blocks from 0.26, 3 x 1,024 + 2,048 = 5,120 before (30 % more requests)."""
    scout = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    late = plan(scout, gpu="H100-80GB", tp=4, max_model_len=32768, engine_version="0.26.0")
    early = plan(scout, gpu="H100-80GB", tp=4, max_model_len=32768, engine_version="0.25.0")
    assert late.kv_rules.inflight == 2 and early.kv_rules.inflight == 1
    assert late.max_concurrency == round(late.num_blocks / 6656, 4)
    assert early.max_concurrency == round(early.num_blocks / 5120, 4)
    # V2 from 0.29: pp + 1 batches in flight, 2 at PP 1 as well
    assert plan(scout, gpu="H100-80GB", tp=4, max_model_len=32768).max_concurrency == round(
        plan(scout, gpu="H100-80GB", tp=4, max_model_len=32768).num_blocks / 6656, 4)


@pytest.mark.parametrize("model, version, caching, gpu, expected", [
    # prefix caching off (hybrids before 0.26 by default: config/model.py is_prefix_caching_supported): 1 + k
    ("Qwen/Qwen3.5-27B", "0.24.0", None, "H100-80GB", ("none", 1)),
    ("Qwen/Qwen3.5-27B", "0.24.0", True, "H100-80GB", ("align", 2)),     # asked for: 'align', 2 + k
    ("Qwen/Qwen3.5-27B", "0.26.0", None, "H100-80GB", ("align", 2)),     # hybrids default on from 0.26
    ("Qwen/Qwen3.5-27B", "0.32.0", None, "H100-80GB", ("align", 2)),
    # 0.33 qwen_gdn_linear_attn.py: a prefill checkpoint block with FlashInfer's GDN prefill, which Hopper runs
    ("Qwen/Qwen3.5-27B", "0.33.0", None, "H100-80GB", ("align", 3)),
    ("Qwen/Qwen3.5-27B", "0.33.0", None, "A100-SXM-80GB", ("align", 2)),  # Triton prefill: no checkpoint
    # Jamba declares SupportsMambaPrefixCaching: 'all' (a state per block) through 0.28, 'align' from 0.29
    ("ai21labs/AI21-Jamba-1.5-Mini", "0.28.0", True, "H100-80GB", ("all", 0)),
    ("ai21labs/AI21-Jamba-1.5-Mini", "0.29.0", None, "H100-80GB", ("align", 2)),
    ("ai21labs/AI21-Jamba-1.5-Mini", "0.11.0", True, "H100-80GB", ("none", 1)),   # 0.11: one page per request
])
def test_mamba_cache_mode_by_version_model_and_card(model, version, caching, gpu, expected):
    from kvplan.gpus import resolve_gpu
    from kvplan.planning.engines.vllm_extras import mamba_states
    from kvplan.planning.engines.vllm_profile import parse_version

    assert mamba_states(load_model(model), parse_version(version), 0, caching, resolve_gpu(gpu)) == expected


def test_prefix_caching_is_a_plan_setting_with_its_flag(capsys):
    on = plan("Qwen/Qwen3.5-27B", gpu="H100-80GB", max_model_len=32768, engine_version="0.24.0",
              enable_prefix_caching=True)
    off = plan("Qwen/Qwen3.5-27B", gpu="H100-80GB", max_model_len=32768, engine_version="0.24.0")
    assert "--enable-prefix-caching" in on.vllm_command and "prefix-caching" not in off.vllm_command
    assert on.max_concurrency < off.max_concurrency     # 2 GDN states a request, not 1
    assert any("mamba_cache_mode 'align'" in n for n in on.notes)
    assert any("mamba_cache_mode 'none', prefix caching off, vLLM's default" in n for n in off.notes)
    assert main(["plan", "Qwen/Qwen3.5-27B", "--max-model-len", "32768", "--no-enable-prefix-caching"]) == 0
    assert "--no-enable-prefix-caching" in capsys.readouterr().out
    with pytest.raises(WorkloadError, match="no enable_prefix_caching setting"):
        plan("Qwen/Qwen3.5-27B", engine="sglang", max_model_len=32768, enable_prefix_caching=True)


@pytest.mark.parametrize("version, v2, entry", [
    ((0, 22, 0), False, 14),   # V1 sampler.py: bf16 logits, float32 copy, probabilities, exponential noise
    ((0, 23, 0), True, 6),     # V2 0.20-0.25 sample/sampler.py: an unconditional float32 copy
    ((0, 26, 0), True, 2),     # 0.26-0.32: no copy for the dummy batch, whose requests set no parameter
    ((0, 32, 0), True, 2),
    ((0, 33, 0), True, 6),     # 0.33: the warm-up pass with every parameter set pays the float32 copy again
])
def test_sampler_bytes_per_entry_by_runner(version, v2, entry):
    from kvplan.planning.engines.vllm_runner import sampler_entry_bytes

    assert sampler_entry_bytes(version, v2, 2) == entry


def test_the_v2_forward_holds_three_hidden_rows_per_token():
    """Qwen2.5-0.5B in fp16 at 32,768 batched tokens on vLLM 0.26 (V2) printed 1.06 GiB of peak activation
    (validation/vllm_holdout.csv): 32,768 x (3 x 4,864 + 3 x 896) x 2 B = 1,132,462,080 B = 1.055 GiB."""
    from kvplan.planning.engines.vllm_profile import ActivationModel, activation_peak

    dims = ActivationModel(896, 4864, 0, 0, 151_936, 2)
    v2 = activation_peak(dims, 32768, 256, has_sampler=True, version=(0, 26, 0), v2=True,
                         entry_bytes=2)
    v1 = activation_peak(dims, 32768, 256, has_sampler=True, version=(0, 26, 0))
    assert v2.forward_bytes == 32768 * (3 * 4864 + 3 * 896) * 2 == 1_132_462_080
    assert v1.forward_bytes == 32768 * (3 * 4864 + 5 * 896) * 2


def test_a_pool_that_passes_vllms_bytes_check_but_holds_under_one_request_says_how_short():
    """Qwen3.5-27B over 2 RTX 5090s at an auto length and --gpu-memory-utilization 0.908 (0.33): the bytes check
    (kv_cache_planning.py check_enough_kv_cache_memory) passes at 30,784 tokens, but per-group rounding (0.27+) makes
    a request 46 blocks and stage 0 holds 45: one block short, 27,262,976 B (26 MiB), said in the plan; no fix offers
    the same length. (At the default 0.92 this model fits since its RoPE table is priced 64 wide, 96 MiB less; at
    0.91, since the first stage holds no PP receive buffers, 40 MiB less: vllm_runner.receive_buffer_term.)"""
    p = plan("Qwen/Qwen3.5-27B", gpu="RTX-5090", max_model_len="auto", pp=2, gpu_memory_utilization=0.908)
    assert (p.fits, p.max_model_len, p.num_blocks) == (False, 30_784, 45)
    # a block: 832 tokens x 2 x 4 KV heads x 256 x 2 B = 3,407,872 B a layer, x 8 layers a group = 27,262,976 B;
    # a request: cdiv(30,784, 832) = 37 blocks of the full-attention group + 3 GDN groups x 3 states ('align' 2 +
    # FlashInfer's prefill checkpoint on SM 12.0 with linear_key_head_dim 128) = 46
    assert p.block_size == 832 and p.shortfall_bytes == 832 * 2 * 4 * 256 * 2 * 8 == 27_262_976
    assert any("one 30,784-token request takes 46 blocks and the pool holds 45" in n for n in p.notes)
    assert p.max_concurrency == pytest.approx(45 / 46, abs=1e-4)
    from kvplan.planning.search import fixes
    offered = [flag for _, flag in fixes("Qwen/Qwen3.5-27B", gpu="RTX-5090", max_model_len="auto", pp=2,
                                         gpu_memory_utilization=0.908)]
    assert "--max-model-len 30784" not in offered
