"""DeepSeek-V4 on vLLM 0.33.0 (issues #22, #23), every figure by hand from the engine's source formulas (the
profile run's peak and workspace: vllm_dsv4_peak.py names the line of the engine behind each tensor):
- pages: AttentionSpec.page_size_bytes = block // tokens_per_state x entry bytes, rounded up to `alignment`
  (v1/kv_cache_interface.py `_apply_alignment_padding`) with entry 584 B (fp8_ds_mla), 132 B (indexer keys:
  128 fp8 + 4 B scale), 2 x coff x head_dim x 4 B (float32 compressor states), alignment 576;
  blocks: the model's 256, the window's 64 (sparse_swa.py DeepseekV4SWACache), the states' 4 / 8 (compressor.py);
- groups: kv_cache_planning.py `_get_packed_kv_cache_groups` / `_approximate_gcd`;
- blocks a request: kv_cache_utils.py `get_max_concurrency_for_kv_cache_config`, each group max over its layers
  of cdiv(max_memory_usage_bytes, page), summed; SlidingWindowSpec.max_admission_blocks_per_request
  cdiv(min(W - 1 + in-flight tokens, max_model_len), block) + 1; full cdiv(max_model_len, block)."""

from __future__ import annotations

from math import ceil

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm import max_concurrency_at
from kvplan.planning.engines.vllm_dsv4 import dsv4_layer_specs
from kvplan.planning.engines.vllm_dsv4_peak import (compiled_margin, csa_moment, dsv4_activation, flashmla_request,
                                                    humming_request,
                                                    indexer_request, marlin_request, pad_moment, rank_dims)
from kvplan.planning.engines.vllm_kv import approximate_gcd, kv_groups, pool_capacity, project_packed
from kvplan.planning.planner import plan

FLASH, PRO = "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"


def _pages(name: str) -> dict[tuple, int]:
    model = load_model(name)
    specs = dsv4_layer_specs(model, range(model.num_layers))
    out: dict[tuple, int] = {}
    for x in specs:
        key = (x.kind, x.block_tokens(256), x.tokens_per_state, x.window, x.page_bytes(256))
        out[key] = out.get(key, 0) + 1
    return out


def test_flash_pages_by_hand():
    """Flash: 43 layers (compress_ratios: 2 x 0, then 4 / 128 in turn: 21 CSA, 20 HCA), window 128: 43 windows +
    41 x (entries + state) + 21 x (indexer keys + their state) = 167 caches."""
    assert sum(_pages(FLASH).values()) == 43 + 41 * 2 + 21 * 2 == 167
    assert _pages(FLASH) == {
        ("sliding", 64, 1, 128, 37_440): 43,        # 64 x 584 = 37,376 -> 65 x 576 = 37,440
        ("mla", 256, 4, 0, 37_440): 21,             # CSA entries: 256 // 4 = 64 x 584 = 37,376 -> 37,440
        ("mla", 256, 128, 0, 1_728): 20,            # HCA entries: 256 // 128 = 2 x 584 = 1,168 -> 3 x 576 = 1,728
        ("mla", 256, 4, 0, 8_640): 21,              # indexer keys: 64 x 132 = 8,448 -> 15 x 576 = 8,640
        ("sliding", 4, 1, 8, 32_832): 21,           # CSA state: 4 x (2 x 2 x 512) x 4 B = 32,768 -> 57 x 576 = 32,832
        ("sliding", 4, 1, 8, 8_640): 21,            # its indexer's: 4 x (2 x 2 x 128) x 4 B = 8,192 -> 8,640
        ("sliding", 8, 1, 128, 32_832): 20,         # HCA state: 8 x (2 x 1 x 512) x 4 B = 32,768 -> 32,832
    }


def test_approximate_gcd_by_hand():
    """Flash's balanced buckets hold 43 windows, 21 CSA state pairs, 20 HCA states, floor 21 (the CSA pairs mix two
    pages): d = 21 pads (21 - 43 % 21) + 0 + (21 - 20) = 20 + 0 + 1 = 21, d = 22 pads 1 + 1 + 2 = 4, d = 23 pads
    3 + 2 + 3 = 8: 22. Pro: 61 windows, 30 pairs, 31 HCA states from 30: d = 31 pads 1 + 1 + 0 = 2."""
    assert approximate_gcd([43, 21, 20], 21) == 22
    assert approximate_gcd([61, 30, 31], 30) == 31


def test_flash_groups_and_block_by_hand():
    """Windows split cdiv(43, 22) = 2 ways round-robin (22 + 21); the full-attention bucket (CSA and HCA entries and
    indexer keys, 21 : 20 : 21, unbalanced) stays whole; so do the CSA states (cdiv(21, 22) = 1) and HCA's. One
    block id costs the widest group: 21 x 37,440 + 20 x 1,728 + 21 x 8,640 = 786,240 + 34,560 + 181,440 =
    1,002,240 B (the window groups: 22 x 37,440 = 823,680; CSA states 21 x (32,832 + 8,640) = 870,912)."""
    model = load_model(FLASH)
    groups = kv_groups(dsv4_layer_specs(model, range(model.num_layers)), 256)
    assert groups.packed and sorted(len(g) for g in groups.groups) == [20, 21, 22, 42, 62]
    assert groups.bytes_per_block == 1_002_240
    # a 4,096-token request, 8,192 batched tokens: windows 2 x (cdiv(min(127 + 8,192, 4,096), 64) + 1) = 2 x 65,
    # entries cdiv(4,096, 256) = 16, CSA states cdiv(4,096, 4) + 1 = 1,025, HCA states cdiv(4,096, 8) + 1 = 513
    cap = pool_capacity(groups, 1_002_240 * 16_840, 4096, 8192)
    assert cap.blocks_per_request == 2 * 65 + 16 + 1_025 + 513 == 1_684
    assert cap.num_blocks == 16_840 and cap.max_concurrency == 10.0
    # at 1,048,576 tokens, 8,192 batched, 2 batches in flight: windows cdiv(127 + 16,384, 64) + 1 = 259 each,
    # entries 4,096, CSA states cdiv(7 + 16,384, 4) + 1 = 4,099, HCA states cdiv(127 + 16,384, 8) + 1 = 2,065
    long = pool_capacity(groups, 0, 1_048_576, 8192, inflight=2)
    assert long.blocks_per_request == 2 * 259 + 4_096 + 4_099 + 2_065


def test_pro_groups_and_a_pipeline_stage_by_hand():
    """Pro: 61 layers, 30 CSA + 31 HCA, no plain window layer. Windows cdiv(61, 31) = 2 groups (31 + 30); the
    entries 30 x 37,440 + 31 x 1,728 + 30 x 8,640 = 1,123,200 + 53,568 + 259,200 = 1,435,968 B, the widest. A
    stage holding layers 0-30 (PP 2, 31 layers: layers 0, 2, .., 30 are HCA, 16 of them, 15 CSA) costs
    15 x 37,440 + 16 x 1,728 + 15 x 8,640 = 561,600 + 27,648 + 129,600 = 718,848 B a block (its windows:
    16 x 37,440 = 599,040; its CSA states 15 x 41,472 = 622,080; HCA states 16 x 32,832 = 525,312)."""
    model = load_model(PRO)
    groups = kv_groups(dsv4_layer_specs(model, range(model.num_layers)), 256)
    assert sorted(len(g) for g in groups.groups) == [30, 31, 31, 60, 91]
    assert groups.bytes_per_block == 1_435_968
    stage = project_packed(groups, range(31))
    assert stage.bytes_per_block == 718_848
    # every group still counts whole: a 4,096-token request's 65 + 65 + 16 + 1,025 + 513 = 1,684 blocks (above)
    assert pool_capacity(stage, 0, 4096, 8192).blocks_per_request == 1_684


def test_flash_plans_on_h100s():
    """Issue #23's command no longer refuses: the pool's blocks are pool // 1,002,240, the concurrency
    blocks / 1,684, the token figure int(concurrency x 4,096) (0.20.1+)."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096)
    assert p.block_size == 256 and p.fits
    assert p.num_blocks == p.kv_pool_bytes // 1_002_240
    assert p.max_concurrency == round(p.num_blocks / 1_684, 4)   # 65 + 65 + 16 + 1,025 + 513 blocks a request
    assert p.kv_cache_tokens == int(p.num_blocks / 1_684 * 4096)
    # per token: 43 x 584 + 21 x (584 / 4 + 132 / 4 + 8,192 + 2,048) + 20 x (584 / 128 + 4,096) = 25,112 +
    # 218,799 + 82,011.25, rounded up
    assert p.kv_bytes_per_token == 325_923
    assert any("5 KV-cache groups" in n and "1,002,240 B" in n for n in p.notes)
    assert max_concurrency_at(p, 4096, load_model(FLASH)) == pytest.approx(p.num_blocks / 1_684)


def test_pro_plans_over_two_stages():
    """Pro needs PP on H100s: each stage's block is its own share of the widest group (stage 0 above: 718,848 B);
    the binding stage's pool // its bytes per block."""
    p = plan(PRO, gpu="H100", tp=8, pp=2, max_model_len=4096)
    head = min(p.stages, key=lambda s: s.num_blocks)
    assert p.num_blocks == head.num_blocks
    assert p.max_concurrency == round(p.num_blocks / 1_684, 4)   # 65 + 65 + 16 + 1,025 + 513 blocks a request
    assert p.stages[0].num_blocks == p.stages[0].kv_pool_bytes // 718_848


@pytest.mark.parametrize("settings, words", [
    ({"engine_version": "0.19.1"}, "has no DeepSeek-V4"),             # DeepseekV4ForCausalLM joined in 0.20.0
    ({"engine_version": "0.30.0"}, "groupings of 0.20.1-0.26 and 0.31-0.33 only"),  # 0.27-0.30 group otherwise
    ({"engine_version": "0.20.0"}, "0.20.0 not read"),               # the release it joined, not read
    ({"engine_version": "0.25.0"}, "pass --kv-cache-dtype fp8"),     # 0.23-0.26 'auto': a bf16 row, not read
    ({"engine_version": "0.22.0", "kv_dtype": "fp8", "num_gpus": None, "tp": 4, "pp": 2}, "without pipeline"),
    ({"gpu": "A100-80GB"}, "FlashMLA path"),                          # FlashMLA sparse needs SM 9.0+
    ({"block_size": 64}, "256-token blocks"),                         # kernels take [256]
    ({"speculative": {"method": "mtp", "num_speculative_tokens": 1}}, "MTP drafter"),
])
def test_dsv4_refusals_name_what_kvplan_does_not_size(settings, words):
    base = {"gpu": "H100", "num_gpus": 8, "max_model_len": 4096}
    with pytest.raises(WorkloadError, match=words) as info:
        plan(FLASH, **{**base, **settings})
    assert "\n" not in str(info.value)


def test_flash_csa_moment_by_hand():
    """vLLM 0.33.0's dummy forward on a CSA layer of Flash at TP 4, 8,192 tokens (vllm_dsv4_peak.py says which line
    of the engine holds each): N 8,192, H 4,096, hc_mult 4, 64 / 4 = 16 heads padded to 64, head_dim 512, q_lora
    1,024, an indexer of 64 heads x 128 picking 512."""
    d = rank_dims(load_model(FLASH), 8192, 4)
    assert (d.heads, d.padded_heads, d.expert_dim) == (16, 64, 512)   # 64 / 4; FlashMLA pads to 64; 2,048 / 4
    carried = 8192 * (4096 * 2 + 4 * 4096 * 2 + 4 * 4 + 4 * 4 * 4)   # output, residual (bf16), post / res mix (f32)
    assert carried == 336_199_680
    moment = csa_moment(d)
    assert moment == {
        "caller's output and residual": carried, "layer's residual and input": carried,
        "attention output buffer": 8192 * 64 * 512 * 2,       # 536,870,912: _alloc_attn_out at the padded heads
        "qr_kv": 8192 * (1024 + 512) * 2,                     # 25,165,824
        "normed qr, kv": 8192 * (1024 + 512) * 2,             # fused_q_kv_rmsnorm writes new tensors
        "compressor kv_score": 8192 * 2 * 2 * 512 * 4,        # 67,108,864 float32
        "indexer kv_score": 8192 * 2 * 2 * 128 * 4,           # 16,777,216
        "indexer weights": 8192 * 64 * 2,                     # 1,048,576
        "indexer fp8 q + weights": 8192 * 64 * (128 + 4),     # 69,206,016
        "q (padded heads)": 8192 * 64 * 512 * 2,              # F.pad to 64 heads
        "indexer logits stand-in": 512 * 2**20,               # VLLM_SPARSE_INDEXER_MAX_LOGITS_MB
        "top-k row exchange": 2 * 8192 * 512 * 4,             # 33,554,432, TP > 1
    }
    assert sum(moment.values()) == 2_521_038_848              # 2,404.25 MiB, the sum of the rows above
    # the q projection's moment: without the logits and the exchange, with the unpadded q 8,192 x 16 x 512 x 2
    assert pad_moment(d) == 2_521_038_848 - 536_870_912 - 33_554_432 + 8192 * 16 * 512 * 2
    # a stage's first layer: its caller holds the runner's buffers only
    assert sum(csa_moment(d, caller=False).values()) == 2_521_038_848 - carried


def test_pro_csa_moment_by_hand():
    """Pro at TP 8: H 7,168, 128 / 8 = 16 heads padded to 64, q_lora 1,536, index_topk 1,024."""
    d = rank_dims(load_model(PRO), 8192, 8)
    carried = 8192 * (7168 * 2 + 4 * 7168 * 2 + 4 * 4 + 16 * 4)   # 587,857,920
    attention = 8192 * (64 * 512 * 2 * 2 + (1536 + 512) * 2 * 2 + 2048 * 4 + 512 * 4 + 64 * 2 + 64 * 132)
    assert sum(csa_moment(d).values()) == 2 * carried + attention + 512 * 2**20 + 2 * 8192 * 1024 * 4 == 3_074_686_976


def test_workspace_requests_by_hand():
    """The shared workspace's requests (workspace.py get_simultaneous, views rounded up to 256 B), Flash at 4,096 /
    8,192, TP 4; the MoE's with Humming's indexed GEMM (M 8,192, top-k 6, K 4,096, I 512)."""
    d = rank_dims(load_model(FLASH), 8192, 4)
    # FlashMLA: (4, cdiv(4,096, r) + 128 + 8,192, 512) bf16 + [8,192, round_up(512 + 128, 128)] + [8,192] int32
    assert flashmla_request(d, 4096, 4) == 4 * 9344 * 512 * 2 + 8192 * 640 * 4 + 8192 * 4 == 59_277_312
    assert flashmla_request(d, 4096, 128) == 4 * 8352 * 512 * 2 + 8192 * 640 * 4 + 8192 * 4   # cdiv(4,096, 128) 32
    assert flashmla_request(d, 4096, 1) == 4 * 8320 * 512 * 2 + 8192 * 128 * 4 + 8192 * 4      # window only: no top-k
    # indexer: T = 4,096 x 8 x 5 // 4 = 40,960 keys of 128 fp8 + 4 B scales, and the 1 MiB radix scratch
    assert indexer_request(d, 4096, 4) == 40960 * 128 + 40960 * 4 + 2**20 == 6_455_296
    # Humming: max(output 8,192 x 4,096 x 2, down input 49,152 x 512 x 1, gate-up input 8,192 x 4,096 x 1) +
    # max(down output 49,152 x 4,096 x 2, gate-up output 49,152 x 1,024 x 2)
    assert humming_request(d, 1) == 67_108_864 + 402_653_184 == 469_762_048
    assert humming_request(d, 2) == 469_762_048      # 0.32's bf16 input: the output still the widest at TP 4
    # TP 1 (I 2,048): the down input 49,152 x 2,048 x a B passes the output, so 0.32 and 0.33 part
    one = rank_dims(load_model(FLASH), 8192, 1)
    assert humming_request(one, 1) == 49152 * 2048 * 1 + 402_653_184
    assert humming_request(one, 2) == 49152 * 2048 * 2 + 402_653_184
    # Marlin: [49,152, max(512, 4,096)] + [49,152 x max(1,024, 4,096)] bf16
    assert marlin_request(d) == 2 * 49152 * 4096 * 2 == 805_306_368


def test_flash_activation_holds_the_profile_run():
    """Issue #23's command: activation = max(forward 2,521,038,848, sampler 1,024 x 129,280 x 6 + 3 x 8,192 x 4,096 x
    2 = 995,622,912) + the workspace, Humming's 469,762,048 B (the largest request above) = 2,990,800,896 B; the
    model's top-k buffer 8,192 x 512 x 4 = 16,777,216 B is its own line. Was 995,622,912 (the generic forward)."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096)
    assert p.activation_bytes == 2_521_038_848 + 469_762_048 == 2_990_800_896
    assert p.extra["DeepSeek-V4 top-k index buffer"] == 8192 * 512 * 4
    rest = sum(v for k, v in p.extra.items() if k != "CUDA graphs (captured after)")
    assert p.kv_pool_bytes == ceil(0.92 * p.gpu_memory_bytes) - p.weights_bytes - p.activation_bytes \
        - p.non_torch_bytes - rest     # 0.92: vLLM 0.33's default utilization
    # the Marlin fallback asks for 805,306,368 - 469,762,048 = 335,544,320 B = 320 MiB more: the warning's bound
    warning = next(w for w in p.warnings if "profile run" in w)
    assert "the profile run takes 0 to 320.0 MiB more than kvplan's activation figure" in warning
    assert "workspaces" not in " ".join(p.warnings)   # the old unbounded warning is gone
    given = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, kv_cache_memory_bytes=20 * 2**30)
    assert not any("profile run" in w for w in given.warnings)
    # Flash's block: 21 x 37,440 + 20 x 1,728 + 21 x 8,640 = 1,002,240 B (test_flash_groups' arithmetic)
    assert given.num_blocks == 20 * 2**30 // 1_002_240


def test_pro_activation_per_stage():
    """Pro on H100s at TP 8, PP 2: each stage max(forward 3,074,686,976, the sampler) + Humming's
    max(8,192 x 7,168 x 2, 49,152 x 384, 8,192 x 7,168) + max(49,152 x 7,168 x 2, 49,152 x 768 x 2) = 117,440,512
    + 704,643,072 = 822,083,584 B. The second stage also holds its receive buffer, one [8,192, 4, 7,168] bf16 =
    469,762,048 B (not the generic figure's 2 x [8,192, 7,168]), which the V2 runner makes in `load_model` before
    the profile (v1/worker/gpu/model_runner.py, 0.33 :541-551): persistent memory, a line of its own beside the
    activation, taken from the pool once."""
    p = plan(PRO, gpu="H100", tp=8, pp=2, max_model_len=4096)
    assert p.stages[0].activation_bytes == 3_074_686_976 + 822_083_584
    # stage 1 also runs the sampler, 1,024 x 129,280 x 6 + 3 x 8,192 x 7,168 x 2 = 1,146,617,856, below the forward
    assert p.stages[1].activation_bytes == 3_074_686_976 + 822_083_584
    # the buffer moved from the activation to a persistent line; the stage's pool is what it was when kvplan
    # (148f818) counted it inside the activation: 17,622,206,076 B, its blocks 24,573
    assert (p.stages[1].kv_pool_bytes, p.stages[1].num_blocks) == (17_622_206_076, 24_573)
    # Marlin: 2 x 49,152 x 7,168 x 2 x 2 = 1,409,286,144 - 822,083,584 = 587,202,560 B = 560 MiB
    assert any("takes 0 to 560.0 MiB more" in w for w in p.warnings)


def test_032_profile_as_033_at_tp4():
    """0.32.0's profile path is 0.33.0's (the same flashmla.py, sparse_attn_indexer profile branch, mhc kernels,
    workspace.py) but for Humming's input dtype, which does not move Flash at TP 4 (test_workspace_requests)."""
    new = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096)
    old = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, engine_version="0.32.0")
    # 2,521,038,848 (forward) + 469,762,048 (Humming's workspace), as test_flash_activation sums them
    assert old.activation_bytes == new.activation_bytes == 2_990_800_896


def test_032_and_033_part_at_tp1():
    """At TP 1 (I 2,048) Humming's down input 49,152 x 2,048 x a B is its first buffer's widest, and the input dtype
    a is 1 B on 0.33 (block FP8 on Hopper) and 2 B on 0.32: stage 0 of PP 2 (no sampler, no receive buffer) holds
    the CSA moment 2 x 336,199,680 + 536,870,912 x 3 + 25,165,824 x 2 + 67,108,864 + 16,777,216 + 1,048,576 +
    69,206,016 (no row exchange at TP 1) = 2,487,484,416 B and the workspace 100,663,296 x a + 402,653,184 B."""
    new = plan(FLASH, gpu="H100", tp=1, pp=2, max_model_len=4096)
    old = plan(FLASH, gpu="H100", tp=1, pp=2, max_model_len=4096, engine_version="0.32.0")
    assert new.stages[0].activation_bytes == 2_487_484_416 + 100_663_296 + 402_653_184
    assert old.stages[0].activation_bytes == 2_487_484_416 + 2 * 100_663_296 + 402_653_184


@pytest.mark.parametrize("settings, words", [
    ({"gpu": "B200"}, "FlashInfer's TRTLLM kernel"),          # SM 10.x: the MoE scratch is FlashInfer's, not read
    ({"expert_parallel": True}, "without expert parallelism"),   # 0.33: EP picks Humming's grouped GEMM
    ({"dp": 2}, "without data parallelism"),                  # DP shards the MoE's tokens (_use_sequence_parallel)
    ({"dtype": "float16"}, "take bfloat16"),                  # kernels/mhc/tilelang.py asserts bfloat16
])
def test_dsv4_profile_refusals(settings, words):
    base = {"gpu": "H100", "num_gpus": 4, "max_model_len": 4096}
    with pytest.raises(WorkloadError, match=words) as info:
        plan(FLASH, **{**base, **settings})
    assert "\n" not in str(info.value)


def test_b200_plans_from_a_given_pool():
    """With --kv-cache-memory-bytes the pool is vLLM's; the activation figure leaves FlashInfer's MoE scratch out,
    which the warning says (only the over-the-card check uses it): no Humming workspace, the FlashMLA request is the
    largest, 59,277,312 B (test_workspace_requests)."""
    p = plan(FLASH, gpu="B200", num_gpus=4, max_model_len=4096, kv_cache_memory_bytes=20 * 2**30)
    # Flash's block: 21 x 37,440 + 20 x 1,728 + 21 x 8,640 = 1,002,240 B (test_flash_groups)
    assert p.num_blocks == 20 * 2**30 // 1_002_240
    assert any("FlashInfer's TRTLLM kernel" in w for w in p.warnings)
    assert p.max_num_batched_tokens == 16384           # B200's 0.28+ default
    d = rank_dims(load_model(FLASH), 16384, 4)
    assert p.activation_bytes == sum(csa_moment(d).values()) + flashmla_request(d, 4096, 4)


def test_a_stage_without_a_csa_layer_is_refused():
    """Flash's layers 0-1 are window-only (compress_ratios 0, 0): no indexer, a peak kvplan has not read."""
    from kvplan.planning.engines.vllm_profile import ActivationBreakdown

    base = ActivationBreakdown(0, 0, 0, 0)
    with pytest.raises(WorkloadError, match="CSA"):
        dsv4_activation(load_model(FLASH), base, 4096, 8192, 4, range(0, 2), (0, 33, 0), 9)


def test_032_groups_as_033():
    """0.32.0's `_get_packed_kv_cache_groups` and page specs are 0.33.0's (vllm_dsv4.py says which functions were
    compared): the same 1,002,240 B block and 1,684 blocks a request; only the profile around them is 0.32's."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, engine_version="0.32.0")
    assert p.num_blocks == p.kv_pool_bytes // 1_002_240
    assert p.max_concurrency == round(p.num_blocks / 1_684, 4)   # 65 + 65 + 16 + 1,025 + 513 blocks a request


@pytest.mark.parametrize("version, csa, pad, gather", [
    # 0.31 = 0.32's attention (the op runs after the pad, q padded at the stand-in) less the TP row exchange:
    # 2,521,038,848 - 2 x 8,192 x 512 x 4; its flashmla.py is 0.32's (gather + int32 indices and lengths)
    ("0.31.0", 2_487_484_416, 2_487_484_416 - 536_870_912 + 134_217_728, 59_277_312),
    # 0.22-0.26: the aux-stream indexer op runs before q exists (no 536,870,912 B padded q at the stand-in); by the
    # pad its fp8 q and weights (69,206,016) are gone: 1,950,613,504 - 536,870,912 - 69,206,016 + 536,870,912 +
    # 134,217,728; FlashMLA's profile branch reserves the (4, M, 512) gather alone, 4 x 9,344 x 512 x 2
    ("0.26.0", 1_950_613_504, 2_015_625_216, 38_273_024),
    ("0.22.0", 1_950_613_504, 2_015_625_216, 38_273_024),
    # 0.20.1-0.21: the default q projection runs first, so the unpadded q (134,217,728) is live at the stand-in;
    # the dummy run returns before the pad, so the pad moment is the stand-in's less it and the exchange (none)
    ("0.21.0", 1_950_613_504 + 134_217_728, 1_950_613_504 + 134_217_728 - 536_870_912, 38_273_024),
])
def test_older_releases_peak_by_hand(version, csa, pad, gather):
    """Before 0.32 the indexer has no TP top-k row exchange and the Hopper MoE is Marlin's (oracle/mxfp4.py
    `_get_priority_backends`: TRTLLM, DeepGEMM (both SM 10 only), Marlin). Flash TP 4, 4,096 tokens, 8,192 batched;
    the workspace is Marlin's 2 x 49,152 x 4,096 x 2 = 805,306,368 B (over FlashMLA's request)."""
    v = tuple(int(x) for x in version.split("."))
    d = rank_dims(load_model(FLASH), 8192, 4, v)
    assert sum(csa_moment(d).values()) == csa and pad_moment(d) == pad
    assert flashmla_request(d, 4096, 4) == gather
    # 64 sequences: the sampler's peak stays under the forward's (1,024 would put 0.23-0.26's over it)
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, engine_version=version, kv_dtype="fp8",
             max_num_seqs=64)
    assert p.max_num_batched_tokens == 8192
    assert p.activation_bytes == max(csa, pad) + 805_306_368
    assert not any("Humming" in w for w in p.warnings) and any("Marlin's MoE" in w for w in p.warnings)


def test_indexer_gather_before_032_is_flat():
    """<= 0.31 mla/indexer.py `get_max_prefill_buffer_size` is max_model_len x 40 at any length; 0.32 drops the
    factor 5 to 2 past 256K. At 300,000 tokens, ratio 4: 0.31 T = 3,000,000 (384,000,000 + 12,000,000 + 1 MiB),
    0.32 T = 1,200,000 (153,600,000 + 4,800,000 + 1 MiB)."""
    model = load_model(FLASH)
    assert indexer_request(rank_dims(model, 8192, 4, (0, 31, 0)), 300_000, 4) == 3_000_000 * 132 + 2**20
    assert indexer_request(rank_dims(model, 8192, 4, (0, 32, 0)), 300_000, 4) == 1_200_000 * 132 + 2**20


def test_expert_parallel_before_032_gives_marlin_whole_experts():
    """EP without DP: each of TP 2 ranks holds 128 whole experts of I = 2,048, not 256 slices of 1,024; Marlin's
    buffers [M x 6, max(I, 4,096)] + [M x 6 x max(2I, 4,096)] are 4,096 wide either way: 16,384 x 6 x 4,096 x 2 x 2 =
    1,610,612,736 B. On 0.33 EP picks Humming's grouped GEMM, refused."""
    model = load_model(FLASH)
    ep, tp = rank_dims(model, 16384, 2, (0, 22, 0), True), rank_dims(model, 16384, 2, (0, 22, 0))
    assert (ep.expert_dim, tp.expert_dim) == (2048, 1024)
    assert marlin_request(ep) == marlin_request(tp) == 1_610_612_736
    p = plan(FLASH, gpu="H100", tp=2, max_model_len=4096, engine_version="0.31.0", expert_parallel=True)
    assert p.activation_bytes > 1_610_612_736
    with pytest.raises(WorkloadError, match="Humming's grouped"):
        plan(FLASH, gpu="H100", tp=2, max_model_len=4096, expert_parallel=True)


def test_compiled_releases_bound_the_eager_figure():
    """0.20.1-0.22 compile the model around the attention's eager custom op: kvplan plans the eager live set, and
    the previous layer's output and residual are what inductor may free first. Flash TP 2 at 16,384 tokens (the GH200
    log's settings): 16,384 x (4,096 x 2 + 4 x 4,096 x 2 + 4 x 4 + 16 x 4) = 672,399,360 B (641.2 MiB); 0.23 runs
    eagerly: no such range."""
    assert compiled_margin(load_model(FLASH), 16384, 2, (0, 22, 0)) == 672_399_360
    assert compiled_margin(load_model(FLASH), 16384, 2, (0, 23, 0)) == 0
    p = plan(FLASH, gpu="H100", tp=2, max_model_len=30000, max_num_batched_tokens=16384, engine_version="0.22.0",
             kv_dtype="fp8", expert_parallel=True)
    (w,) = [w for w in p.warnings if "compiles the model" in w]
    assert "takes 0 to 641.2 MiB less" in w   # 672,399,360 B above
