"""Published DeepSeek-V4-Flash start-ups on vLLM (issues #22, #23), each figure as the log printed it, with its URL.

vLLM 0.22.0-0.26.0 register the caches 0.33 does but group them in layer tuples (v1/core/kv_cache_utils.py
`group_and_unify_kv_cache_specs`, `_get_kv_cache_groups_uniform_groups`), pad the compressor states' 32,832 B pages
to the 37,440 B compressed-entry page, price a block id as the compressed group's pages x the most tuples (0.22.0
`_get_kv_cache_config_deepseek_v4`) or each page size x its most layers in one group (0.23.0-0.26.0
`_get_kv_cache_config_packed`), check one request as `_max_memory_usage_bytes_from_groups` (no null block), and count
the concurrency as `get_max_concurrency_for_kv_cache_config` (cdiv of each group's blocks x its pages over the first
group's pages). Flash: 5 groups of 62, 22, 21, 42 and 20 layers; the compressed group's pages 37,440 + 1,728 + 8,640 =
47,808 B, 22 tuples at most (the first window group).

A request's blocks (SlidingWindowSpec.max_admission_blocks_per_request, +1 for a window straddling blocks):
windows cdiv(min(127 + T, L), 64) + 1, compressed entries cdiv(L, 256), CSA states cdiv(min(7 + T, L), 4) + 1, HCA
states cdiv(min(127 + T, L), 8) + 1, with T the tokens in flight (max_num_batched_tokens, x 2 under 0.26's async
scheduling). The compressor states dominate below ~100K tokens, which is why the thread of #51041 finds "per-token
KV" figures from 7 B to 385 KiB: available / tokens is not a rate (kezboard233's comment there says as much).
"""

from __future__ import annotations

import dataclasses

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm import max_concurrency_at
from kvplan.planning.engines.vllm_dsv4 import dsv4_layer_specs
from kvplan.planning.engines.vllm_kv import SLOTS, TUPLES, kv_groups, pool_capacity
from kvplan.planning.planner import plan

GiB = 2**30
FLASH, PRO = "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"
SIMONWALO = "https://github.com/vllm-project/vllm/issues/44376 (simonwalo, 2026-06-03)"
H20_ROWS = "https://github.com/vllm-project/vllm/issues/51041 (Burlesque1, 2026-08-04)"


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"   # vLLM's format_gib


# SIMONWALO: LLM(model="DeepSeek-V4-Flash", tensor_parallel_size=2, enable_expert_parallel=True, max_model_len=30_000,
# enable_prefix_caching=True, gpu_memory_utilization=0.95, kv_cache_dtype="fp8", block_size=256) on 2 x GH200 96 GB:
# "To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache is needed, which is larger
# than the available KV cache memory (5.44 GiB). Based on the available memory, the estimated maximum model length is
# 13528." The thread is "[v0.22]"; the comment names no version: the message is 0.22's wording ("model's"; 0.21 prints
# "models's"), and only 0.22-0.25 give these figures (below). LLM() takes 16,384 batched tokens on a GPU of 70 GiB and
# more (engine/arg_utils.py 0.22.0 `default_max_num_batched_tokens`, LLM_CLASS).
LOG_44376 = dict(gpu="GH200", tp=2, max_model_len=30000, kv_dtype="fp8", block_size=256, usage_context="llm_class",
                 expert_parallel=True, enable_prefix_caching=True)
# the pools the printed 13,528 allows: 13,528 tokens take 2 x 213 + 53 + 3,383 + 1,692 = 5,554 blocks x 22 x 47,808 =
# 5,841,563,904 B, 13,529 take 5,556 (cdiv(13,529, 4) + 1 = 3,384, cdiv(13,529, 8) + 1 = 1,693): 5,843,667,456 B
POOLS_44376 = (5_841_563_904, 5_843_667_455)


@pytest.mark.parametrize("pool", POOLS_44376)
def test_44376_needed_bytes_and_estimated_length_at_022(pool):
    """At 30,000 tokens, 16,384 batched: windows cdiv(16,511, 64) + 1 = 259 (x 2 groups), entries cdiv(30,000, 256) =
    118, CSA states cdiv(16,391, 4) + 1 = 4,099, HCA states cdiv(16,511, 8) + 1 = 2,065: 6,800 blocks x 22 x 47,808 B
    = 7,152,076,800 B, printed 6.66 GiB; the binary search then stops at 13,528 (error 0 on both)."""
    assert _gib(pool) == "5.44"   # both ends of the range print as the log's 5.44 GiB
    p = plan(FLASH, engine_version="0.22.0", kv_cache_memory_bytes=pool, **LOG_44376)
    assert p.max_num_batched_tokens == 16384 and not p.fits
    need = p.kv_pool_bytes + p.shortfall_bytes
    assert need == (2 * 259 + 118 + 4_099 + 2_065) * 22 * (37_440 + 1_728 + 8_640) == 7_152_076_800
    assert _gib(need) == "6.66"
    assert p.max_model_len_that_fits == 13528
    assert p.num_blocks == pool // 1_051_776   # (37,440 + 1,728 + 8,640) x 22 a block id on 0.22
    assert any("1,051,776 B" in n and "6,800 blocks" in n for n in p.notes)
    # the concurrency's count: cdiv(118 x 1,002,240 + 259 x (823,680 + 786,240) + 4,099 x 967,680 + 2,065 x 748,800,
    # 1,002,240) = cdiv(6,048,025,920, 1,002,240) = 6,035 blocks
    assert any("counts as 6,035" in n for n in p.notes) and p.max_concurrency == round(p.num_blocks / 6_035, 4)
    # vLLM started at the estimated 13,528 would print 5,554 / 4,926 = 1.13x: blocks [53, 213, 213, 3,383, 1,692],
    # cdiv(53 x 1,002,240 + 213 x (823,680 + 786,240) + 3,383 x 967,680 + 1,692 x 748,800, 1,002,240) = 4,926
    assert max_concurrency_at(p, 13528, load_model(FLASH)) == pytest.approx((pool // 1_051_776) / 4_926)


def test_the_layer_tuple_groups_of_pro_by_hand():
    """Pro (61 layers: 30 CSA, 31 HCA, no plain window): compressed pages 37,440 x 30, 1,728 x 31, 8,640 x 30, so 31
    tuples; [31, 61, 30, 31] from 31 -> 31 (pads 0 + 1 + 1 + 0); windows split 31 + 30. A block id: TUPLES (37,440 +
    1,728 + 8,640) x 31 = 1,482,048 B; SLOTS 31 x 37,440 (a window group; the padded HCA states too) + 31 x 1,728 +
    30 x 8,640 = 1,160,640 + 53,568 + 259,200 = 1,473,408 B."""
    model = load_model(PRO)
    specs = dsv4_layer_specs(model, range(model.num_layers))
    tuples, slots = kv_groups(specs, 256, TUPLES), kv_groups(specs, 256, SLOTS)
    assert sorted(len(g) for g in tuples.groups) == [30, 31, 31, 60, 91]
    assert tuples.bytes_per_block == 1_482_048 and slots.bytes_per_block == 1_473_408
    # the HCA states' 32,832 B page padded to 37,440; the CSA indexer states' 8,640 kept
    assert {x.page_bytes(256) for g in tuples.groups[1:] for x in g} == {37_440, 8_640}


@pytest.mark.parametrize("version, needed, longest", [
    ("0.21.0", "6.66", 13528),    # 0.22's functions, but its message reads "models's" where the log's has "model's"
    ("0.23.0", "6.66", 13528), ("0.25.0", "6.66", 13528),    # the same check; their block id is priced otherwise
    ("0.26.0", "12.06", 13528),   # 2 x 16,384 tokens in flight (async scheduling): 6.66 is not 0.26's
    ("0.33.0", "11.49", 14192),   # 0.32-0.33's grouping (null block, unpadded pages) would print neither figure
])
def test_44376_at_each_candidate_version(version, needed, longest):
    """The log pins its release to 0.22-0.25 (0.21 words its message otherwise): 0.26 (4,099 -> 8,195 CSA state blocks with 32,768 tokens in flight)
    and 0.33's layout miss both printed figures."""
    # 0.32+ refuse EP (Humming's grouped MoE, vllm_dsv4.py `_check_profile`); the KV check does not depend on it
    settings = {**LOG_44376, "expert_parallel": version < "0.32"}
    p = plan(FLASH, engine_version=version, kv_cache_memory_bytes=POOLS_44376[0], **settings)
    assert _gib(p.kv_pool_bytes + p.shortfall_bytes) == needed
    assert p.max_model_len_that_fits == longest


def test_44376_from_the_card():
    """The whole budget: 2 x GH200 (95 GiB in kvplan's table) at 0.95, expert parallel at TP 2 (planned: Marlin's
    MoE with whole experts, vllm_dsv4_peak.py). 16,384 tokens, 32 of 64 heads a rank padded to 64: the pad moment
    (0.22's aux-stream indexer op runs before q) holds the two streams 2 x 16,384 x 41,040 = 1,344,798,720, the
    attention output 1,073,741,824, qr_kv and its norm 2 x 50,331,648, the kv scores 134,217,728 + 33,554,432, the
    indexer weights 2,097,152, the padded q 1,073,741,824 and the unpadded 536,870,912 = 4,299,685,888 B, over the
    stand-in's 3,364,356,096; plus Marlin's 1,610,612,736 B workspace: activation 5,910,298,624 B. The pool is
    8,679,961,424 B = 8.08 GiB where vLLM measured 5.44 GiB and refused: kvplan is still high, by 2.64 GiB (49 %;
    6.08 GiB, 112 %, with the generic activation figure), and its plan fits where vLLM's did not. The compiled-model
    warning bounds the profile the other way (0.22 may hold up to 641.2 MiB less than the eager figure), so the
    2.6 GiB lies outside the activation figure (GH200's usable memory, non-torch memory at EP, the CUDA graphs of
    the compiled model: not read); the warning points at --kv-cache-memory-bytes, which the tests above take."""
    p = plan(FLASH, engine_version="0.22.0", gpu_memory_utilization=0.95, **LOG_44376)
    assert p.activation_bytes == 4_299_685_888 + 1_610_612_736   # pad moment + Marlin's workspace (docstring)
    error = p.kv_pool_bytes - 5.44 * GiB   # the log's 5.44 GiB; 6.08 GiB over it before the profile was read
    assert error / GiB == pytest.approx(2.64, abs=0.05)   # kvplan's 8.08 GiB against the log's 5.44 (SIMONWALO)
    assert any("compiles the model" in w and "kv-cache-memory-bytes" in w for w in p.warnings)


def _with_mtp_window() -> list:
    """Flash's 167 caches plus the MTP layer's: DeepSeek-V4's drafter is a DeepseekV4DecoderLayer at layer 43
    (0.26.0 models/deepseek_v4/nvidia/mtp.py), compress_ratio max(1, compress_ratios[43] = 0) = 1 (attention.py):
    one more 128-token window cache, 44 windows in 2 groups of 22."""
    model = load_model(FLASH)
    specs = dsv4_layer_specs(model, range(model.num_layers))
    window = next(x for x in specs if x.kind == "sliding" and x.own_block == 64)
    return specs + [dataclasses.replace(window, layer=model.num_layers)]


# H20_ROWS: 2 x H20, TP 2, vLLM 0.26.0, --kv-cache-dtype fp8 --block-size 256 --gpu-memory-utilization 0.95, MTP
# speculative, the preview checkpoint and DeepSeek-V4-Flash-0731 (the same compress_ratios for the 43 layers, the
# issue says; 0731's config is not bundled here, and its blocks below agree with the preview's layers):
#   preview: "KV pool 7.01 GiB", "GPU KV cache size 1,009,661 tokens", max_model_len 912,128 at 1.11x;
#   0731: 7.71 GiB, 150,992 tokens, max_model_len 121,344 at 1.24x.
@pytest.mark.parametrize("length, in_flight, blocks, per_request, tokens, gib, concurrency", [
    (912_128, 8_192, 7_236, 6_537, 1_009_661, "7.01", "1.11"),     # preview
    (121_344, 16_384, 7_965, 6_401, 150_992, "7.71", "1.24"),      # 0731
])
def test_51041_arithmetic_from_the_printed_pool(length, in_flight, blocks, per_request, tokens, gib, concurrency):
    """0.23-0.26 price a block id at 22 x 37,440 + 20 x 1,728 + 21 x 8,640 = 1,039,680 B (the padded states share the
    37,440 B slots). The only block counts in each printed pool's rounding range that give the printed token figure
    exactly: 7,236 (7,523,124,480 B) with one 8,192-token batch in flight, and 7,965 (8,281,051,200 B) with 16,384
    tokens in flight (0.26's two async batches of 8,192): the 0731 run is not "8x the KV a token", it holds twice the
    tokens in flight, so each request's compressor states take 4,099 + 2,065 blocks instead of 2,051 + 1,041."""
    groups = kv_groups(_with_mtp_window(), 256, SLOTS)
    assert sorted(len(g) for g in groups.groups) == [20, 22, 22, 42, 62]
    assert groups.bytes_per_block == 22 * 37_440 + 20 * 1_728 + 21 * 8_640 == 1_039_680
    pool = blocks * 1_039_680
    assert _gib(pool) == gib
    cap = pool_capacity(groups, pool, length, in_flight, tokens_from_concurrency=True)
    assert cap.blocks_per_request == per_request and cap.num_blocks == blocks
    assert cap.kv_cache_tokens == tokens and f"{cap.max_concurrency:.2f}" == concurrency   # error 0 on both
    matching = [n for n in range(int((float(gib) - 0.005) * GiB) // 1_039_680,
                                 int((float(gib) + 0.005) * GiB) // 1_039_680 + 1)
                if int(n / per_request * length) == tokens]
    assert matching == [blocks]


# the two logged max_model_len values (H20_ROWS), each with the other row's in-flight tokens
@pytest.mark.parametrize("length, in_flight", [(912_128, 16_384), (121_344, 8_192)])
def test_51041_the_other_in_flight_count_misses(length, in_flight):
    """Swapped: the preview at 16,384 in flight would print 0.76x, the 0731 run at 8,192 2.31x."""
    groups = kv_groups(_with_mtp_window(), 256, SLOTS)
    printed = {912_128: (7_236, 1.11), 121_344: (7_965, 1.24)}[length]
    cap = pool_capacity(groups, printed[0] * 1_039_680, length, in_flight)
    assert abs(cap.max_concurrency - printed[1]) > 0.3


def test_51041_plans_refuse_the_mtp_drafter():
    """kvplan's plans do not take the drafter (its extra_retained_tokens and profile are not read), so these rows are
    arithmetic checks only, from the printed pools; the same settings without MTP plan at 0.26 with 43 windows."""
    base = dict(gpu="H20", tp=2, max_model_len=121_344, kv_dtype="fp8", block_size=256, engine_version="0.26.0")
    with pytest.raises(WorkloadError, match="MTP drafter"):
        plan(FLASH, speculative={"method": "mtp", "num_speculative_tokens": 1}, **base)
    p = plan(FLASH, kv_cache_memory_bytes=7_965 * 1_039_680, **base)
    assert p.num_blocks == 7_965 and p.kv_rules.inflight == 2   # the 0731 pool given (H20_ROWS); 0.26: 2 batches
    # 43 windows, the second group 21 x 37,440 = 786,240 B: cdiv(474 x 1,002,240 + 259 x (823,680 + 786,240) +
    # 4,099 x 967,680 + 2,065 x 748,800, 1,002,240) = cdiv(6,404,823,360, 1,002,240) = 6,391 blocks a request (the
    # MTP window adds 259 x 37,440 B: 6,401 above)
    assert p.max_concurrency == round(7_965 / 6_391, 4)


# H200_NVL: find_string id 63344308021 (a committed note, 'vLLM Remote H200 128K Context Health Probe'; repository not
# returned by the index): 2 x H200 NVL, vLLM 0.23.0, vllm serve DeepSeek-V4-Flash --max-model-len 131072
# --tensor-parallel-size 2 --dtype bfloat16 --quantization deepseek_v4_fp8 --kv-cache-dtype fp8
# --gpu-memory-utilization 0.78 --enforce-eager: "Model loading took 74.08 GiB", "Available KV cache memory: 32.08
# GiB", "GPU KV cache size: 1,247,687 tokens", "Maximum concurrency for 131,072 tokens per request: 9.52x"
H200_NVL = dict(gpu="H200 NVL", tp=2, max_model_len=131072, kv_dtype="fp8", engine_version="0.23.0",
                gpu_memory_utilization=0.78, enforce_eager=True)


def test_h200_nvl_at_023_from_the_printed_pool():
    """0.23's SLOTS block id, 1,039,680 B; a 131,072-token request at 8,192 batched tokens: cdiv(512 x 1,002,240 +
    131 x (823,680 + 786,240) + 2,051 x 967,680 + 1,041 x 748,800, 1,002,240) = cdiv(3,488,258,880, 1,002,240) = 3,481
    blocks. 33,136 blocks (34,450,836,480 B, 32.08 GiB) give 9.5191x and 1,247,687 tokens, the printed figures (error
    0), and no other count the printed pool rounds from does."""
    p = plan(FLASH, kv_cache_memory_bytes=33_136 * 1_039_680, **H200_NVL)
    assert p.block_size == 256 and p.max_num_batched_tokens == 8192   # the command sets neither
    assert _gib(p.kv_pool_bytes) == "32.08" and p.num_blocks == 33_136
    assert p.kv_cache_tokens == 1_247_687 and f"{p.max_concurrency:.2f}" == "9.52"
    assert p.max_concurrency == round(33_136 / 3_481, 4)
    matching = [n for n in range(int(32.075 * GiB) // 1_039_680, int(32.085 * GiB) // 1_039_680 + 1)
                if int(n / 3_481 * 131072) == 1_247_687]
    assert matching == [33_136]


def test_h200_nvl_at_023_from_the_card():
    """The whole budget at 0.78 of an H200 NVL (the catalog's H200-NVL: 143,156 MiB = 150,109,945,856 B, Unsloth's
    'NVIDIA H200 NVL ... Max memory: 139.801 GB'): weights 73.70 GiB against the printed 74.08 (-0.5 %). The profile
    run read from 0.23's source, 8,192 tokens, 32 heads a rank padded to 64: the pad moment (the aux-stream indexer op
    ran before q: vllm_dsv4_peak.py) holds 2 x 336,199,680 of stream, the attention output 536,870,912, qr_kv and its
    norm 2 x 25,165,824, the kv scores 67,108,864 + 16,777,216, the indexer weights 1,048,576, the padded q
    536,870,912 and the unpadded 268,435,456 = 2,149,842,944 B, and Marlin's workspace 805,306,368 B: 2,955,149,312 B.
    The NVL pair has NVLink bridges, no NVSwitch, so no NVLS buffers (vllm_profile.NVLS_GPUS): non-torch 0.25 + 0.25
    GiB at TP 2, 32.07 GiB of pool against the printed 32.08 and tokens -0.03 %. Planned as the SXM H200 (NVSwitch,
    NCCL's NVLS buffers: 0.25 + 1.75 + 2 x 0.0325 = 2.07 GiB of non-torch memory) it was 30.51 GiB and -4.91 %."""
    p = plan(FLASH, **H200_NVL)
    assert p.gpu == "H200-NVL" and p.gpu_memory_bytes == 143_156 * 2**20
    assert (p.weights_bytes / GiB - 74.08) / 74.08 * 100 == pytest.approx(-0.51, abs=0.1)
    assert p.activation_bytes == 2_149_842_944 + 805_306_368   # pad moment + Marlin workspace (docstring)
    assert _gib(p.kv_pool_bytes) == "32.07"                     # the log's 32.08
    assert (p.kv_cache_tokens / 1_247_687 - 1) * 100 == pytest.approx(-0.03, abs=0.05)   # the log's 1,247,687
    sxm = plan(FLASH, **{**H200_NVL, "gpu": "H200"})
    assert p.kv_pool_bytes - sxm.kv_pool_bytes == int(2.065 * GiB) - int(0.5 * GiB)   # the NVLS buffers, 1.565 GiB
    assert (sxm.kv_cache_tokens / 1_247_687 - 1) * 100 == pytest.approx(-4.91, abs=0.05)


# H100_0731: find_string id 71464252074 ('Per-model setup guide (8xH100, vLLM)', observations of 2026-10-07; its
# links point at github.com/tant2tls/Deepseek-serving): DeepSeek-V4-Flash-0731 on vLLM 0.31.1rc1.dev50+g554340f3d,
# --tensor-parallel-size 8 --enable-expert-parallel --gpu-memory-utilization 0.90 --max-model-len 262144
# --max-num-seqs 64 --max-num-batched-tokens 8192 --no-enable-prefix-caching: "Setting kv cache block size to 256",
# "Model loading took 19.79 GiB", "Available KV cache memory: 47.43 GiB", "GPU KV cache size: 1,728,531 tokens"
H100_0731 = dict(gpu="H100", tp=8, expert_parallel=True, max_model_len=262144, max_num_seqs=64,
                 max_num_batched_tokens=8192, enable_prefix_caching=False, gpu_memory_utilization=0.90,
                 engine_version="0.31.1")


def test_0731_on_h100s_at_031_from_the_printed_pool():
    """0.31.0 groups and prices DeepSeek-V4 as 0.32-0.33 (vllm_dsv4.py): 1,002,240 B a block id; with 2 batches of
    8,192 in flight a 262,144-token request takes 2 x (cdiv(127 + 16,384, 64) + 1) + cdiv(262,144, 256) + cdiv(7 +
    16,384, 4) + 1 + cdiv(127 + 16,384, 8) + 1 = 518 + 1,024 + 4,099 + 2,065 = 7,706 blocks; 50,812 blocks (47.43 GiB)
    give 1,728,531 tokens, the printed figure (error 0), the only count in the pool's rounding range that does."""
    p = plan(FLASH, kv_cache_memory_bytes=50_812 * 1_002_240, **H100_0731)
    assert _gib(p.kv_pool_bytes) == "47.43" and p.kv_rules.inflight == 2
    assert p.kv_cache_tokens == 1_728_531 and p.max_concurrency == round(50_812 / 7_706, 4)
    matching = [n for n in range(int(47.425 * GiB) // 1_002_240, int(47.435 * GiB) // 1_002_240 + 1)
                if int(n / 7_706 * 262144) == 1_728_531]
    assert matching == [50_812]


def test_layer_tuple_layouts_refuse_what_vllm_asserts():
    """`_get_kv_cache_groups_uniform_groups` (0.22.0) asserts max(sliding pages) <= max(compressed pages) and as many
    sliding layers of each padded page size: a 64-token window of 1,024 B entries (65,536 B, over the 37,440 B
    compressed page) and a bucket of 2 + 1 layers are refused in one line, not planned."""
    model = load_model(FLASH)
    specs = dsv4_layer_specs(model, range(model.num_layers))
    window = next(x for x in specs if x.kind == "sliding" and x.own_block == 64)
    wide = dataclasses.replace(window, bytes_per_token=1024)   # 64 x 1,024 = 65,536 B a page
    with pytest.raises(WorkloadError, match="larger than every compressed page"):
        kv_groups(specs + [wide], 256, TUPLES)
    state = next(x for x in specs if x.kind == "sliding" and x.own_block == 4)   # CSA state, 32,832 -> 37,440 B
    lone = [x for x in specs if x.kind == "mla"] + [state, state, dataclasses.replace(state, bytes_per_token=1024)]
    with pytest.raises(WorkloadError, match="unequal sliding page counts"):
        kv_groups(lone, 256, SLOTS)   # 2 layers padded to 37,440 B, 1 of 4 x 1,024 = 4,096 (4,608 aligned) -> 8,640
