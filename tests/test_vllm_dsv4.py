"""DeepSeek-V4 on vLLM 0.33.0 (issues #22, #23), every figure by hand from the engine's source formulas:
- pages: AttentionSpec.page_size_bytes = block // tokens_per_state x entry bytes, rounded up to `alignment`
  (v1/kv_cache_interface.py `_apply_alignment_padding`) with entry 584 B (fp8_ds_mla), 132 B (indexer keys:
  128 fp8 + 4 B scale), 2 x coff x head_dim x 4 B (float32 compressor states), alignment 576;
  blocks: the model's 256, the window's 64 (sparse_swa.py DeepseekV4SWACache), the states' 4 / 8 (compressor.py);
- groups: kv_cache_planning.py `_get_packed_kv_cache_groups` / `_approximate_gcd`;
- blocks a request: kv_cache_utils.py `get_max_concurrency_for_kv_cache_config`, each group max over its layers
  of cdiv(max_memory_usage_bytes, page), summed; SlidingWindowSpec.max_admission_blocks_per_request
  cdiv(min(W - 1 + in-flight tokens, max_model_len), block) + 1; full cdiv(max_model_len, block)."""

from __future__ import annotations

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm import max_concurrency_at
from kvplan.planning.engines.vllm_dsv4 import dsv4_layer_specs
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


def test_the_workspace_warning_sizes_flashmla_gather_by_hand():
    """nvidia/flashmla.py `forward_mqa` (0.33.0), the dummy run: (PREFILL_CHUNK_SIZE 4, M, 512) bf16 with
    M = cdiv(4,096, 4) + 128 + 8,192 = 9,344 rows: 4 x 9,344 x 512 x 2 B = 38,273,024 B = 36.5 MiB; gone with a
    given pool (--kv-cache-memory-bytes)."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096)
    assert p.max_num_batched_tokens == 8192
    # by hand: 4 x 9,344 x 512 x 2 = 38,273,024 (gather) + 8,192 x round_up(512 + 128, 128) 640 x 4 = 20,971,520
    # (top-k indices) + 8,192 x 4 = 32,768 (lengths) + 8,192 x 512 x 4 = 16,777,216 (the model's top-k buffer)
    # = 76,054,528 B = 72.5 MiB
    assert any("4 x 9,344 rows x 512 x 2 B + 8,192 x 640 x 4 B of top-k indices + 8,192 x 4 B of lengths, and the "
               "model's 8,192 x 512 x 4 B top-k buffer = 72.5 MiB" in w for w in p.warnings)
    given = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, kv_cache_memory_bytes=20 * 2**30)
    assert not any("workspaces" in w for w in given.warnings)
    # Flash's block: 21 x 37,440 + 20 x 1,728 + 21 x 8,640 = 1,002,240 B (test_flash_groups' arithmetic)
    assert given.num_blocks == 20 * 2**30 // 1_002_240


def test_032_groups_as_033():
    """0.32.0's `_get_packed_kv_cache_groups` and page specs are 0.33.0's (vllm_dsv4.py says which functions were
    compared): the same 1,002,240 B block and 1,684 blocks a request; only the profile around them is 0.32's."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, engine_version="0.32.0")
    assert p.num_blocks == p.kv_pool_bytes // 1_002_240
    assert p.max_concurrency == round(p.num_blocks / 1_684, 4)   # 65 + 65 + 16 + 1,025 + 513 blocks a request
