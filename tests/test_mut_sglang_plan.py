"""Tests that kill the mutants tools/mutation.py left alive in kvplan/planning/engines/sglang.py's `plan_sglang`
(the plan's assembly: its defaults, the arguments it passes on, the Plan's figures), `_shortfall`, `_state_share`
and `_swa_window` (#26): the verdict at its boundaries (a pool of exactly max_model_len tokens fits, one token
short misses by its bytes), the Mamba hybrids' shortfall on both sides of its max(), the SWA floor, and the plain
figures of the Plan (batch tokens, EP size, fractions, the zero non-torch line), each worked by hand here.

The budget (sglang_pool.budget_bytes, as tests/test_mut_sglang.py _rest works it): rest = int(before - weights -
load extras - before x (1 - fraction)), before = the runtime's bytes - PRELOAD_BYTES (int(0.38 GiB) =
408,021,893 B), load extras LOAD_EXTRA_BYTES (int(0.15 GiB) = 161,061,273 B). A test that needs an exact rest
gives SGLang the fraction (rest + weights + extras + 0.5) / before (mem_fraction_static as given), half a byte
inside the wanted integer, and checks the formula's rest. Weights are kvplan's (the plan's weights_bytes, pinned
by their own tests); where a test only needs them as an input it pins the figure and checks it first.

Cards (kvplan/data/gpus.json): H100-SXM runtime 85,029,158,912 B, nvidia-smi 81,559 MiB; B200 runtime
191,514,017,792 B; L4 nvidia-smi about 22.5 GiB (the 20-35 GB tier of sglang_pool._TIERS).
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from kvplan import load_model
from kvplan.dtypes import resolve_dtype
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.model.layers import NoCacheSpec, StateSpec
from kvplan.planning.engines.sglang import plan_sglang
from kvplan.planning.engines.sglang_pool import LOAD_EXTRA_BYTES, PRELOAD_BYTES
from kvplan.planning.planner import plan

H100 = 85_029_158_912      # H100-SXM runtime bytes (gpus.json), 79.19 GiB
B200 = 191_514_017_792     # B200 runtime bytes (gpus.json), 178.36 GiB
LLAMA = "meta-llama/Llama-3.1-8B"
# 8,030,261,248 parameters x 2 B (bf16) + the RoPE cache of 131,072 positions x 128 x 2 B (33,554,432 B)
LLAMA_WEIGHTS = 8_030_261_248 * 2 + 131_072 * 128 * 2
LLAMA_CELL = 32 * 2 * 8 * 128 * 2   # 32 layers x K,V x 8 KV heads x 128 x 2 B = 131,072 B a token
NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"
NEXT_WEIGHTS_TP4 = 39_959_285_120   # kvplan's priced weights a rank at TP 4 (an input here: checked, not derived)
NEXT_PER_REQ = 36 * (8192 // 4 * 3 * 2 + 32 // 4 * 128 * 128 * 4)   # 19,316,736 B (tests/test_sglang.py)
NEXT_CELL = 12 * 1 * 256 * 2 * 2    # 12 full-attention layers x 1 KV head a rank (2 over TP 4) x 256 x K,V x 2 B
NEMOTRON = "nvidia/Nemotron-H-56B-Base-8K"
OSS20 = "openai/gpt-oss-20b"
OSS20_WEIGHTS = 13_791_313_024      # kvplan's priced gpt-oss-20b weights at TP 1 (an input here)
# gpt-oss-20b: 24 layers, 12 full + 12 sliding (window 128), each 2 x 8 KV heads x 64 x 2 B = 2,048 B a token:
# full 24,576 + 0.8 x 24,576 (the SWA pool's ratio) = 44,236.8 B as SGLang divides (0.5.11+ calculate_pool_sizes)
OSS20_DIVISOR = 12 * 2048 + 0.8 * 12 * 2048
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
SCOUT_WEIGHTS_TP4 = 57_011_894_528  # kvplan's priced Llama-4-Scout weights a rank at TP 4 (an input here)


def _sglang(name, **kwargs):
    return plan(name, engine="sglang", **kwargs)


def _before(total: int) -> int:
    return total - PRELOAD_BYTES


def _rest(total: int, weights: int, fraction: float, taken: int = 0) -> int:
    before = _before(total)
    return int(before - weights - LOAD_EXTRA_BYTES - taken - before * (1 - fraction))


def _fraction_for(rest: int, weights: int, total: int = H100) -> float:
    """The mem_fraction_static whose budget is `rest` B: before x f = rest + weights + extras, plus half a byte so
    the int() lands on `rest` (an H100's before is 8.5e10 B: a double's step in f is ~5e-6 B of budget)."""
    fraction = (rest + weights + LOAD_EXTRA_BYTES + 0.5) / _before(total)
    assert _rest(total, weights, fraction) == rest
    return fraction


def _shows_rest(p, rest: int) -> bool:
    return p.formula[0].endswith(f"({rest:,} B)")


# ----------------------------------------------------------------------------- the verdict at its boundary


def test_a_pool_of_exactly_max_model_len_tokens_fits():
    """rest = 100,000 x 131,072 + 65,536 = 13,107,265,536 B -> 100,000 tokens (// 131,072, page 1 on an H100).
    SGLang serves a context of max_total_num_tokens: fits is tokens >= max_model_len, so 100,000 fits (and is the
    longest that fits); 100,001 misses by 100,001 x 131,072 - 13,107,265,536 = 65,536 B.
    The fraction (13,107,265,536 + 16,094,076,928 + 161,061,273 + 0.5) / 84,621,137,019 = 0.3469858...: the plan
    and the command carry it to 4 places, 0.347."""
    rest = 100_000 * LLAMA_CELL + 65_536        # 13,107,265,536 B
    f = _fraction_for(rest, LLAMA_WEIGHTS)
    p = _sglang(LLAMA, gpu="H100", max_model_len=100_000, gpu_memory_utilization=f)
    assert p.weights_bytes == LLAMA_WEIGHTS and _shows_rest(p, rest)
    assert p.kv_cache_tokens == 100_000
    assert p.fits and p.shortfall_bytes == 0 and p.max_model_len_that_fits == 100_000
    assert p.gpu_memory_utilization == 0.347 and "--mem-fraction-static 0.347" in p.vllm_command
    over = _sglang(LLAMA, gpu="H100", max_model_len=100_001, gpu_memory_utilization=f)
    assert not over.fits and over.shortfall_bytes == 65_536
    assert over.max_model_len_that_fits == 100_000


def test_a_pool_one_byte_short_of_a_token_misses_by_one_byte():
    """rest = 100,000 x 131,072 - 1 = 13,107,199,999 B -> 99,999 tokens: 100,000 misses by 100,000 x 131,072 -
    13,107,199,999 = 1 B (one more byte of budget is the 100,000th token)."""
    rest = 100_000 * LLAMA_CELL - 1             # 13,107,199,999 B
    p = _sglang(LLAMA, gpu="H100", max_model_len=100_000, gpu_memory_utilization=_fraction_for(rest, LLAMA_WEIGHTS))
    assert _shows_rest(p, rest) and p.kv_cache_tokens == 99_999
    assert not p.fits and p.shortfall_bytes == 1 and p.max_model_len_that_fits == 99_999


def test_a_request_short_of_a_page_misses_by_the_whole_page():
    """A B200 pages SGLang's pool by 64 tokens (sglang_rules page_size: trtllm_mha on SM 10.x). rest =
    123,840 x 131,072 + 65,536 = 16,232,005,632 B holds 123,840 tokens (1,935 pages); a 123,841-token request takes
    1,936 pages, 123,904 tokens, so it misses by 123,904 x 131,072 - 16,232,005,632 = 8,323,072 B, not by
    123,841 x 131,072 - rest = 65,536 B, and not by the 1 B a byte count clamped to one gave where the budget
    already held the tokens."""
    rest = 123_840 * LLAMA_CELL + 65_536        # 16,232,005,632 B
    p = _sglang(LLAMA, gpu="B200", max_model_len=123_841,
                gpu_memory_utilization=_fraction_for(rest, LLAMA_WEIGHTS, B200))
    assert p.block_size == 64 and _shows_rest(p, rest) and p.kv_cache_tokens == 123_840   # 1,935 x 64
    assert not p.fits and p.shortfall_bytes == 123_904 * LLAMA_CELL - rest == 8_323_072   # worked above


def test_a_drafters_sliding_layers_hold_the_full_context_where_the_swa_pool_is_off():
    """SGLang 0.5.9 turns gpt-oss's SWA pool off with drafting (server_args.py): the target's and the draft's
    sliding layers then cache the full context. gpt-oss-120b at TP 2 (36 layers x K,V x 8 / 2 KV heads x 64 x 2 B =
    36,864 B a token) with gpt-oss-20b drafting (24 layers, 24,576 B): 61,440 B a token, every layer full, so
    39,072,421,097 B of budget (kvplan's, at fraction 0.85) hold 39,072,421,097 // 61,440 = 635,944 tokens; the
    draft's sliding layers in an SWA pool gave 662,441 and an SWA line."""
    p = _sglang("openai/gpt-oss-120b", gpu="H100", tp=2, max_model_len=8192, engine_version="0.5.9",
                gpu_memory_utilization=0.85,
                speculative={"method": "draft_model", "num_speculative_tokens": 3, "model": "openai/gpt-oss-20b"})
    assert p.kv_bytes_per_token == 36_864 + 24_576 and {x.kind for x in p.kv_layers} == {"full"}   # worked above
    assert p.formula[1] == "max_total_num_tokens = 39,072,421,097 // 61,440 = 635,944"
    assert p.kv_cache_tokens == 635_944                                                         # worked above


# ----------------------------------------------------------------------------- the Plan's plain figures


def test_the_plans_batch_and_memory_lines():
    """Llama-3.1-8B on an H100 (nvidia-smi 81,559 MiB, the 60-90 GB tier): chunked_prefill_size 8,192 is
    max_num_batched_tokens (cuda_graph_max_bs is 256 there, not the batch). SGLang has no non-torch line: the
    reserve holds it, 0 on the plan and on its stage. One DP rank, experts not split (no EP)."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192)
    assert p.max_num_batched_tokens == 8192
    assert p.non_torch_bytes == 0 and [s.non_torch_bytes for s in p.stages] == [0]
    assert p.data_parallel_size == 1 and p.expert_parallel_size == 1


@pytest.mark.parametrize("version, batch", [
    # 0.5.19 and before: the 20-35 GB tier chunks 2,048 tokens; from 0.5.20 4,096 (0.5.20 memory_hook.py:100-116)
    ("0.5.19", 2048), ("0.5.23", 4096),
])
def test_batch_tokens_follow_the_release(version, batch):
    p = _sglang("meta-llama/Llama-3.2-1B", gpu="L4", max_model_len=4096, engine_version=version)
    assert p.max_num_batched_tokens == batch


def test_dp_attention_splits_the_batch_tokens():
    """Qwen2.5-1.5B at TP 6 with DP attention 3 on H100s: chunked_prefill_size 8,192 // 3 = 2,730 a DP rank
    (a whole number of tokens, not 2,730.67)."""
    p = _sglang("Qwen/Qwen2.5-1.5B", gpu="H100", tp=6, dp=3, max_model_len=4096)
    assert p.max_num_batched_tokens == 2730
    assert "--tp-size 6 --attn-dp-size 3" in p.vllm_command


def test_expert_parallel_size_is_tp_with_ep_and_one_without():
    """--ep-size TP: Mixtral's 8 experts over TP 2 are 4 whole experts a rank, the Plan's expert_parallel_size 2;
    without EP the experts split by TP like the rest, size 1."""
    ep = _sglang("mistralai/Mixtral-8x7B-v0.1", gpu="H100", tp=2, max_model_len=8192, expert_parallel=True)
    assert ep.expert_parallel_size == 2 and "--ep-size 2" in ep.vllm_command
    plain = _sglang("mistralai/Mixtral-8x7B-v0.1", gpu="H100", tp=2, max_model_len=8192)
    assert plain.expert_parallel_size == 1 and "--ep-size" not in plain.vllm_command


def test_expert_parallelism_needs_routed_experts():
    """_check is given the EP switch: a dense model with --ep-size is refused, not planned."""
    with pytest.raises(WorkloadError) as err:
        _sglang(LLAMA, gpu="H100", max_model_len=8192, expert_parallel=True)
    assert str(err.value) == "meta-llama/Llama-3.1-8B has no routed experts: leave expert parallelism out"


def test_lora_slots_of_whole_experts_under_expert_parallelism():
    """The LoRA pool (lora.lora_bytes, rank 16, 4 slots, 2 B) of Mixtral at TP 2, a layer: attention 16 x (4 x
    4,096 + 2 x 4,096 / 2 + 2 x 4 x 128) = 344,064; experts with EP 4 whole ones 16 x 4 x (3 x 4,096 + 3 x 14,336)
    = 3,538,944, without EP all 8 at 14,336 / 2: 16 x 8 x (12,288 + 21,504) = 4,325,376. x 32 layers x 4 x 2 B:
    (344,064 + 3,538,944) x 256 = 994,050,048 B with EP, (344,064 + 4,325,376) x 256 = 1,195,376,640 B without."""
    lora = {"max_loras": 4, "max_lora_rank": 16}
    ep = _sglang("mistralai/Mixtral-8x7B-v0.1", gpu="H100", tp=2, max_model_len=8192, expert_parallel=True,
                 lora=lora)
    assert ep.extra["LoRA memory pool"] == (344_064 + 3_538_944) * 256 == 994_050_048
    plain = _sglang("mistralai/Mixtral-8x7B-v0.1", gpu="H100", tp=2, max_model_len=8192, lora=lora)
    assert plain.extra["LoRA memory pool"] == (344_064 + 4_325_376) * 256 == 1_195_376_640


def test_lora_turns_the_prefill_graphs_off_in_0_5_12():
    """0.5.10-0.5.14 turn the piecewise prefill graphs off with LoRA (server_args.py _handle_piecewise_cuda_graph),
    so the reserve is 512 + 8,192 x 1.5 + 256 x 2 + 1 / 8 x 1,024 = 13,440 MB of 81,559: (81,559 - 13,440) /
    81,559 = 0.83521 -> 0.835 (with the 58 graphs' 464 MB it would be 13,904 -> 0.830)."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, engine_version="0.5.12",
                lora={"max_loras": 4, "max_lora_rank": 16})
    assert p.gpu_memory_utilization == 0.835
    assert "prefill CUDA graphs off by default for these settings: nothing reserved for them" in p.notes


def test_plan_sglangs_defaults_are_no_dp_no_ep_and_the_given_kv():
    """plan_sglang called with its defaults: dp 1 (no --attn-dp-size), no expert parallelism (no --ep-size), and
    kv_default False: the KV dtype given is kept, even for a DSA model on Blackwell where --kv-cache-dtype auto
    would be fp8_e4m3 (sglang_layers.dsa_kv_dtype, 0.5.23 overrides.py _dsa_kv_cache_dtype_default)."""
    bf16 = resolve_dtype("bfloat16")
    mixtral = plan_sglang(load_model("mistralai/Mixtral-8x7B-v0.1"), resolve_gpu("H100"), tp=2, pp=1,
                          mem_fraction=None, max_len=8192, act=bf16, kv=bf16, quantization=None, version=(0, 5, 23),
                          image_limit=None)
    assert mixtral.vllm_command.startswith("python -m sglang.launch_server --model-path mistralai/Mixtral-8x7B-v0.1 "
                                           "--tp-size 2 --context-length 8192 --mem-fraction-static")
    assert mixtral.expert_parallel_size == 1
    v32 = plan_sglang(load_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("B200"), tp=8, pp=1, mem_fraction=0.9,
                      max_len=4096, act=bf16, kv=bf16, quantization=None, version=(0, 5, 23), image_limit=None)
    assert v32.kv_cache_dtype == "bfloat16" and "--kv-cache-dtype" not in v32.vllm_command


# ----------------------------------------------------------------------------- drafting and the SWA pool


def test_a_draft_model_of_another_vocabulary_is_refused():
    """SGLang 0.5.23 speculative/standalone_worker_v2.py `_validate_vocab_compatibility` raises when the draft's
    vocab_size is not the target's: Qwen3-0.6B's 151,936 tokens do not draft for gpt-oss-120b's 201,088 (the plan
    was sized at 414,746 tokens before)."""
    with pytest.raises(WorkloadError, match=re.escape(
            "the draft model Qwen/Qwen3-0.6B has a vocabulary of 151,936 tokens and openai/gpt-oss-120b one of "
            "201,088: vLLM and SGLang refuse a draft model whose vocab_size is not the target's, so use a draft of "
            "the same tokenizer")):
        _sglang("openai/gpt-oss-120b", gpu="H100", tp=2, max_model_len=8192, engine_version="0.5.9",
                speculative={"method": "draft_model", "num_speculative_tokens": 3, "model": "Qwen/Qwen3-0.6B"})


# ----------------------------------------------------------------------------- the SWA floor (0.5.19+)


def _oss20(rest: int, max_len: int):
    p = _sglang(OSS20, gpu="H100", max_model_len=max_len, gpu_memory_utilization=_fraction_for(rest, OSS20_WEIGHTS))
    assert p.weights_bytes == OSS20_WEIGHTS and _shows_rest(p, rest)
    return p


def test_a_pool_of_exactly_the_swa_floor_fits():
    """validate_swa_pool_size (0.5.23 pool_configurator.py) refuses when sliding_window + page >= swa_tokens:
    gpt-oss's 128-token window at page 1 needs an SWA pool of 130, so full tokens f with int(f x 0.8) >= 130:
    ceil(130 / 0.8) = 163 (int(163 x 0.8) = 130). rest 7,232,716 B // 44,236.8 = 163.5 -> 163 tokens, exactly the
    floor: it fits a 163-token context and 163 is the longest."""
    p = _oss20(7_232_716, 163)
    assert p.kv_cache_tokens == 163
    assert p.fits and p.shortfall_bytes == 0 and p.max_model_len_that_fits == 163
    assert p.formula[-1] == "SWA pool = int(163 x 0.8) = 130 tokens of the sliding layers"
    assert not [n for n in p.notes if "refuses to start" in n]


def test_a_pool_one_token_under_the_swa_floor_is_refused():
    """rest 7,188,480 B // 44,236.8 = 162.5 -> 162 tokens, SWA pool int(162 x 0.8) = 129 <= 128 + 1: SGLang refuses.
    A 100-token context misses by the floor's bytes, ceil(163 x 44,236.8) - 7,188,480 = 7,210,599 - 7,188,480 =
    22,119 B."""
    p = _oss20(7_188_480, 100)
    assert p.kv_cache_tokens == 162 and not p.fits and p.max_model_len_that_fits == 0
    assert p.shortfall_bytes == 22_119
    assert p.notes[-1] == ("SGLang 0.5.23 refuses to start: its SWA pool of 129 tokens cannot hold the 128-token "
                           "window plus a 1-token page (pool_configurator.py validate_swa_pool_size); it needs 163 "
                           "full tokens")


def test_a_budget_below_zero_is_short_of_its_context_not_of_the_swa_floor():
    """mem_fraction_static 0.16 leaves gpt-oss-20b a budget of 84,621,137,019 x 0.16 - 13,791,313,024 -
    161,061,273 = -412,992,373 B: no pool, so no SWA pool to check (the floor applies where there is one). A 100-token
    context misses by ceil(100 x 44,236.8) + 412,992,373 = 4,423,680 + 412,992,373 = 417,416,053 B."""
    p = _sglang(OSS20, gpu="H100", max_model_len=100, gpu_memory_utilization=0.16)
    assert _shows_rest(p, -412_992_373) and p.kv_cache_tokens == 0
    assert not p.fits and p.shortfall_bytes == 417_416_053
    assert not [n for n in p.notes if "refuses to start" in n]


def test_no_swa_floor_without_the_swa_pool():
    """Mistral-7B-v0.1's layers slide over 4,096 tokens, but MistralForCausalLM is not in SGLang's SWA list: one
    pool, every layer at full length, and no SWA check (which would want 5,123 full tokens). 7,241,732,096
    parameters x 2 B + RoPE 32,768 x 128 x 2 B = 14,491,852,800 B; rest 3,000 x 131,072 + 65,536 = 393,281,536 B ->
    3,000 tokens: a 2,048-token context fits."""
    weights = 7_241_732_096 * 2 + 32_768 * 128 * 2
    rest = 3000 * 131_072 + 65_536   # 393,281,536 B: 3,000 tokens of 131,072 B
    p = _sglang("mistralai/Mistral-7B-v0.1", gpu="H100", max_model_len=2048,
                gpu_memory_utilization=_fraction_for(rest, weights))
    assert p.weights_bytes == weights and _shows_rest(p, rest) and p.kv_cache_tokens == 3000
    assert p.fits and p.max_model_len_that_fits == 2048
    assert not [n for n in p.notes if "refuses to start" in n]


def test_chunked_layers_have_no_swa_window():
    """Llama 4's chunked layers are its SWA pool's layers, but the config has no sliding_window (model_config
    `_get_sliding_window_size`): no floor (an 8,192-token chunk taken for a window would want 10,243 full tokens).
    Scout at TP 4: 12 full layers x 2 KV heads x 128 x 2 x 2 B = 12,288 + 0.8 x 36 chunked x 1,024 = 41,779.2 B;
    rest 208,916,890 B // 41,779.2 = 5,000.5 -> 5,000 tokens: a 4,096-token context fits."""
    rest = 208_916_890   # 5,000.5 x 41,779.2 B
    p = _sglang(SCOUT, gpu="H100", tp=4, max_model_len=4096,
                gpu_memory_utilization=_fraction_for(rest, SCOUT_WEIGHTS_TP4))
    assert p.weights_bytes == SCOUT_WEIGHTS_TP4 and _shows_rest(p, rest)
    assert p.kv_cache_tokens == 5000 and p.fits and p.max_model_len_that_fits == 4096
    assert not [n for n in p.notes if "refuses to start" in n]


# ----------------------------------------------------------------------------- Mamba hybrids: state slots


def _next(rest: int, max_len: int):
    p = _sglang(NEXT, gpu="H100", tp=4, max_model_len=max_len,
                gpu_memory_utilization=_fraction_for(rest, NEXT_WEIGHTS_TP4))
    assert p.weights_bytes == NEXT_WEIGHTS_TP4 and _shows_rest(p, rest)
    return p


def test_one_request_of_state_slots_fits():
    """0.5.23 _handle_max_mamba_cache: budget = rest x 0.9 / 1.9, K = (budget - per request) // per request, and a
    request may hold 5 slots (ratio 3 + 2). rest 340,000,000 B: budget 161,052,631.6, K = 141,735,895.6 //
    19,316,736 = 7 -> 7 // 5 = 1 request; the pool 8 x 19,316,736 = 154,533,888 B, KV keeps 185,466,112 B //
    12,288 = 15,093 tokens. One request of 1,024 tokens fits, max_running_requests 1."""
    assert NEXT_PER_REQ == 19_316_736 and NEXT_CELL == 12_288
    p = _next(340_000_000, 1024)
    assert p.extra["Mamba state pool"] == 8 * NEXT_PER_REQ == 154_533_888
    assert p.kv_cache_tokens == (340_000_000 - 154_533_888) // NEXT_CELL == 15_093
    assert p.fits and p.max_model_len_that_fits == 1024 and p.max_num_seqs == 1


def test_too_few_state_slots_for_one_request():
    """rest 200,000,000 B: budget 94,736,842.1, K = 75,420,106.1 // 19,316,736 = 3 slots, 3 // 5 = 0 requests: it
    does not fit although the 9,988 tokens hold 1,024. The shortfall is the larger of the tokens' budget split
    (ceil(1,024 x 12,288 x 1.9) = 23,907,533) and a request's slots, ratio + the padding one, at 1.9 / 0.9 of
    them: ceil(6 x 19,316,736 x 1.9 / 0.9) = 244,678,656, less the rest: 44,678,656 B."""
    p = _next(200_000_000, 1024)
    assert p.extra["Mamba state pool"] == 4 * NEXT_PER_REQ
    assert p.kv_cache_tokens == (200_000_000 - 4 * NEXT_PER_REQ) // NEXT_CELL == 9988
    assert not p.fits and p.max_model_len_that_fits == 0
    assert p.shortfall_bytes == 6 * NEXT_PER_REQ * 19 // 9 - 200_000_000 == 44_678_656


def test_too_few_tokens_with_state_to_spare():
    """rest 2,000,000,000 B: K = (947,368,421 - 19,316,736) // 19,316,736 = 48 slots (9 requests), the pool 49 x
    19,316,736 = 946,520,064 B, KV 1,053,479,936 // 12,288 = 85,732 tokens < 262,144. Here the tokens bind: 262,144
    x 12,288 = 3,221,225,472 B at 1.9 / 1 of the budget (the KV's share is 1 / 1.9), ceil(x 1.9) = 6,120,328,397,
    less the rest: 4,120,328,397 B."""
    p = _next(2_000_000_000, 262_144)
    assert p.extra["Mamba state pool"] == 49 * NEXT_PER_REQ == 946_520_064
    assert p.kv_cache_tokens == 85_732 and p.max_model_len_that_fits == 85_732
    assert not p.fits and p.shortfall_bytes == 4_120_328_397


NEMOTRON_TP4_PER_REQ = 54 * (5120 * 3 * 2 + 64 * 64 * 256 * 4)   # 54 x 4,225,024 = 228,151,296 B at TP 4


def test_fixed_state_slots_add_to_the_shortfall():
    """Nemotron-H-56B at TP 4 in 0.5.5: a Mamba-2 model keeps 512 fixed slots through 0.5.6 (its radix cache off),
    54 x (5,120 conv channels x 3 x 2 B + 64 heads x 64 x 256 x 4 B) = 228,151,296 B a request, 512 x that =
    116,813,463,552 B, more than the budget: no KV. The shortfall is the context's tokens (8,192 x 10 attention
    layers x 2 KV heads x 128 x 2 x 2 B = 83,886,080) plus the whole state pool, less the rest."""
    p = _sglang(NEMOTRON, gpu="H100", tp=4, max_model_len=8192, engine_version="0.5.5", gpu_memory_utilization=0.8)
    rest = _rest(H100, p.weights_bytes, 0.8)
    assert _shows_rest(p, rest) and p.kv_bytes_per_token == 10 * 2 * 128 * 2 * 2
    assert p.extra["Mamba state pool"] == 512 * NEMOTRON_TP4_PER_REQ == 116_813_463_552
    assert p.kv_cache_tokens == 0 and not p.fits
    assert p.shortfall_bytes == 8192 * 10_240 + 116_813_463_552 - rest   # 83,886,080 B of tokens + the pool


def test_fixed_state_slots_cap_the_running_requests():
    """Nemotron-H-56B at TP 8 on B200s in 0.5.5: 512 fixed slots of 54 x (2,560 x 3 x 2 + 32 x 64 x 256 x 4) =
    114,075,648 B, one slot a request (ratio 1 with the radix cache off), so max_running_requests is 512 // 1 = 512,
    under the 4,096 the tokens would allow."""
    per_req = 54 * (2560 * 3 * 2 + 32 * 64 * 256 * 4)
    assert per_req == 114_075_648
    p = _sglang(NEMOTRON, gpu="B200", tp=8, max_model_len=8192, engine_version="0.5.5")
    assert p.extra["Mamba state pool"] == 512 * per_req
    # clamp(tokens / 8,192 x 512, 2,048, 4,096) is 4,096 from 65,536 tokens (and half the tokens is more): the
    # 512 slots bind
    assert p.fits and p.kv_cache_tokens >= 65_536 and p.max_num_seqs == 512


def test_a_lone_mamba_layer_is_charged_whole_under_pp():
    """_state_share: the largest stage's share of the Mamba layers, int(state x largest / layers). Nemotron-H-56B
    with one Mamba layer left (its other 53 made cache-less) at TP 2 x PP 2: the stage holding it has 1 of 1, so
    every stage is charged the whole 10,240 x 3 x 2 + 128 x 64 x 256 x 4 = 8,450,048 B a request."""
    model = load_model(NEMOTRON)
    first = next(i for i, layer in enumerate(model.layers) if any(isinstance(x, StateSpec) for x in layer))
    cacheless = NoCacheSpec("MLP-only layer (no attention, nothing cached)")
    layers = tuple(layer if i == first or not any(isinstance(x, StateSpec) for x in layer) else (cacheless,)
                   for i, layer in enumerate(model.layers))
    lone = dataclasses.replace(model, layers=layers)
    assert sum(any(isinstance(x, StateSpec) for x in layer) for layer in lone.layers) == 1
    p = plan(lone, engine="sglang", gpu="H100", tp=2, pp=2, max_model_len=8192)
    state = [line for line in p.formula if line.startswith("Mamba state")]
    assert len(state) == 1 and " x 8,450,048 B a request = " in state[0]
