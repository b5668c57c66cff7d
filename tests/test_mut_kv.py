"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/planning/engines/vllm_kv.py.

Every figure is hand arithmetic whose inputs are written here (hand-built VllmLayerSpec lists, or the bundled
config.json files in model_configs/), following the vLLM source the module cites, read from the wheels:
- 0.33.0 v1/core/kv_cache_planning.py `_approximate_gcd` (:879-911: d in range(max(1, lower_bound), max(values) + 1),
  least pad, ties to the larger d) and `_get_packed_kv_cache_groups` (:914-1049: buckets of one uniform type, a
  floor from the balanced buckets that mix pages, default 0, no repeats without one; round-robin
  `pattern_repeats[i::num_groups]`), `SlidingWindowSpec.is_uniform_with_collection` (kv_cache_interface.py :957:
  one window a bucket), the null block held back before the start-up check (kv_cache_planning.py :170-180);
- 0.22.0 v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_groups` (:1493-1580: the compressed (MLA) group
  first, each sliding layer's page padded to the nearest compressed page `min(x for x in all_page_sizes if x >=
  ps)` after `assert max(sm_page_sizes) <= max(all_page_sizes)`, equal layer counts per page size asserted) and
  `_get_kv_cache_config_deepseek_v4` (:1179-1233: the compressed group's distinct pages x the most layer tuples);
- 0.33.0 model_executor/models/deepseek_v2.py `DeepseekV32IndexerCache.get_kv_cache_spec` (:658: an
  MLAAttentionSpec, so the indexer keys share the latent's one full-attention group) and falcon.py :116-130
  (new_decoder_architecture: num_kv_heads KV heads, max(1, kv // tp) a rank).
Every refusal is asserted whole."""
from __future__ import annotations

import re

import pytest

from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm_dsv4 import dsv4_layer_specs
from kvplan.planning.engines.vllm_kv import (
    SLOTS, TUPLES, VllmLayerSpec, approximate_gcd, kv_groups, max_usage_bytes, packed_groups, packed_need_bytes,
    page_rule, pool_capacity, rank_layer_specs, tuple_block_bytes, tuple_groups, unify_page_sizes, vllm_ssm_dtype,
    with_ds_mla_layout)


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _mla(per_token: int, layer: int) -> VllmLayerSpec:
    """A packed compressed cache in the model's block: a 16-token block of `per_token` B a token."""
    return VllmLayerSpec("mla", per_token, packed=True, layer=layer)


def _window(per_token: int, window: int, layer: int) -> VllmLayerSpec:
    return VllmLayerSpec("sliding", per_token, window=window, packed=True, layer=layer)


def _layers(groups) -> list[list[int]]:
    return [[x.layer for x in g] for g in groups.groups]


# ----------------------------------------------------------------------------- approximate_gcd


@pytest.mark.parametrize("values, lower_bound, expected", [
    # the best d is max(values): d = 21 pads (21 - 22 % 21) + 0 = 20, d = 22 pads 0 + 1 = 1 (the range ends at max)
    ([22, 21], 21, 22),
    # ties to the larger d: d = 1 and d = 5 both pad 0 (d = 2, 3 pad 1 + 1, d = 4 pads 3 + 3)
    ([5, 5], 1, 5),
    # d = 1 is the one d padding nothing: d = 2 pads 0 + 1, d = 3 pads 1 + 0; a bound under 1 is raised to 1
    ([2, 3], 1, 1),
    ([2, 3], 0, 1),
    # a bound above every value is the answer (`if min_d > max_d: return min_d`)
    ([4, 3], 6, 6),
])
def test_approximate_gcd_by_hand(values, lower_bound, expected):
    assert approximate_gcd(values, lower_bound) == expected


# ----------------------------------------------------------------------------- packed_groups (0.31-0.33)


def test_packed_groups_split_balanced_buckets_round_robin_after_the_ones_before():
    """Block 16. Compressed caches of 100 and 50 B a token (pages 1,600 and 800 B) on layers 0-3, alternating: one
    bucket, 2 layers of each page: balanced and mixing pages, so the floor is 2. Windows of 8 tokens on layers 4-7
    (pages 1,600) and of 32 tokens on layers 8-9: two buckets, one window each. repeats = approximate_gcd([2, 4, 2],
    2): d = 2 pads 0, d = 3 pads 1 + 2 + 1 = 4, d = 4 pads 2 + 0 + 2 = 4: 2. The compressed bucket takes cdiv(2, 2)
    = 1 group, the 8-token windows cdiv(4, 2) = 2 round-robin (layers 4, 6 and 5, 7), the 32-token ones 1. A block
    id costs the widest group: 1,600 + 800 + 1,600 + 800 = 4,800 B (a window group 2 x 1,600 = 3,200)."""
    specs = [_mla(100, 0), _mla(50, 1), _mla(100, 2), _mla(50, 3),
             *(_window(100, 8, n) for n in range(4, 8)), _window(100, 32, 8), _window(100, 32, 9)]
    groups = packed_groups(specs, 16)
    assert _layers(groups) == [[0, 1, 2, 3], [4, 6], [5, 7], [8, 9]]
    assert [g[0].window for g in groups.groups] == [0, 8, 8, 32]
    assert groups.bytes_per_block == 4_800
    # packed groups are side by side, unequal, never padded with repeated layers
    assert (groups.packed, groups.uniform, groups.padding_layers, groups.layout) == (True, False, 0, "")
    assert kv_groups(specs, 16) == groups


def test_packed_groups_without_a_floor_keep_each_bucket_whole():
    """Compressed caches of 100 B a token: two in the model's 16-token block (1,600 B pages), two in blocks of their
    own 32 tokens (3,200 B): two buckets (one block size a bucket), each balanced but of one page size, so no floor
    and no repeats (vLLM: min_repeats_per_group 0, repeats_per_group None; two page sizes, so the packed grouping
    does run) and no sliding bucket to refuse: each bucket one group, the widest 2 x 3,200 = 6,400 B. Two of 1,600 B
    and one of 800 B in one bucket: unbalanced (2 : 1), no floor, one group of 1,600 + 1,600 + 800 = 4,000 B."""
    own = [VllmLayerSpec("mla", 100, own_block=32, packed=True, layer=n) for n in (2, 3)]
    groups = packed_groups([_mla(100, 0), _mla(100, 1), *own], 16)
    assert _layers(groups) == [[0, 1], [2, 3]]
    assert groups.bytes_per_block == 6_400
    assert (groups.uniform, groups.padding_layers) == (False, 0)
    unbalanced = packed_groups([_mla(100, 0), _mla(100, 1), _mla(50, 2)], 16)
    assert _layers(unbalanced) == [[0, 1, 2]] and unbalanced.bytes_per_block == 4_000


def test_packed_groups_refuse_windows_without_a_repeating_pattern():
    # two 8-token windows of one page: no bucket mixes pages, so no repeats; vLLM 0.33 would cap them as "state
    # buckets" (is_state_bucket), which kvplan has not read
    with pytest.raises(WorkloadError, match=_exact(
            "kvplan does not plan this DeepSeek-V4 layout (sliding caches without a repeating pattern): plan it with "
            "--engine hf")):
        packed_groups([_window(100, 8, 0), _window(100, 8, 1)], 16)


def test_packed_groups_refuse_a_mamba_state():
    with pytest.raises(WorkloadError, match=_exact(
            "kvplan does not pack Mamba states beside DeepSeek-V4's caches: plan it with --engine hf")):
        packed_groups([_mla(100, 0), VllmLayerSpec("mamba", 0, state_bytes=1_000)], 16)


def test_packed_need_bytes_holds_back_the_null_block_and_counts_batches_in_flight():
    """The groups of the round-robin test above (4,800 B a block id) for a 1,000-token request, 64 batched tokens,
    2 batches in flight: the compressed group cdiv(1,000, 16) = 63 blocks; an 8-token window min(7 + 2 x 64, 1,000)
    = 135 tokens, cdiv(135, 16) + 1 = 10 blocks (two such groups); the 32-token one min(31 + 128, 1,000) = 159,
    cdiv(159, 16) + 1 = 11. 63 + 10 + 10 + 11 = 94 blocks and the null block: 4,800 x 95 = 456,000 B. One batch in
    flight: 7 + 64 = 71 -> 5 + 1 = 6, 31 + 64 = 95 -> 6 + 1 = 7: 4,800 x (63 + 6 + 6 + 7 + 1) = 398,400 B."""
    specs = [_mla(100, 0), _mla(50, 1), _mla(100, 2), _mla(50, 3),
             *(_window(100, 8, n) for n in range(4, 8)), _window(100, 32, 8), _window(100, 32, 9)]
    groups = packed_groups(specs, 16)
    assert packed_need_bytes(groups, 1000, 64, 2) == 4_800 * 95 == 456_000
    assert packed_need_bytes(groups, 1000, 64, 1) == 4_800 * 83 == 398_400


# ----------------------------------------------------------------------------- tuple_groups (0.20.1-0.26)


def test_tuple_groups_pad_windows_of_the_models_block_to_a_compressed_page():
    """Block 16: compressed caches of 100 and 50 B a token (pages 1,600 and 800), 2 of each; two 8-token windows of
    60 B a token in the model's block (own_block 0: 16 x 60 = 960 B), padded to the nearest compressed page at or
    above it, 1,600 (800 is smaller). d = approximate_gcd([2, 2], 2) = 2: the windows cdiv(2, 2) = 1 group. TUPLES:
    (800 + 1,600) x 2 tuples = 4,800 B a block id; SLOTS: 2 x 1,600 + 2 x 800 = 4,800."""
    specs = [_mla(100, 0), _mla(50, 1), _mla(100, 2), _mla(50, 3), _window(60, 8, 4), _window(60, 8, 5)]
    groups = tuple_groups(specs, 16, TUPLES)
    assert _layers(groups) == [[0, 1, 2, 3], [4, 5]]
    assert [x.page_bytes(16) for x in groups.groups[1]] == [1_600, 1_600]
    assert tuple_block_bytes(groups) == 4_800
    assert tuple_block_bytes(tuple_groups(specs, 16, SLOTS)) == 4_800
    assert (groups.packed, groups.uniform, groups.padding_layers, groups.layout) == (True, False, 0, TUPLES)


def test_a_tuple_layout_request_by_hand():
    """The groups of the test above for a 1,000-token request, 64 batched tokens, 2 batches in flight: the compressed
    group cdiv(1,000, 16) = 63 blocks, the windows min(7 + 128, 1,000) = 135 tokens, cdiv(135, 16) + 1 = 10.
    0.22.0 `_max_memory_usage_bytes_from_groups` (kv_cache_utils.py :1768-1788): 2 tuples x (63 + 10) x (800 +
    1,600) = 350,400 B, no null block. `get_max_concurrency_for_kv_cache_config` (:877-895, a group's page the sum of
    its layers'): cdiv(63 x 4,800 + 10 x (1,600 + 1,600), 4,800) = cdiv(334,400, 4,800) = 70 blocks a request (69.67);
    a pool of 700 blocks of 4,800 B holds 10.0 requests."""
    specs = [_mla(100, 0), _mla(50, 1), _mla(100, 2), _mla(50, 3), _window(60, 8, 4), _window(60, 8, 5)]
    groups = tuple_groups(specs, 16, TUPLES)
    assert packed_need_bytes(groups, 1000, 64, 2) == 2 * 73 * 2_400 == 350_400  # the docstring's (63 + 10) blocks
    cap = pool_capacity(groups, 4_800 * 700, 1000, 64, inflight=2)
    assert (cap.num_blocks, cap.blocks_per_request, cap.max_concurrency, cap.kv_cache_tokens) == (700, 70, 10.0, 11_200)  # 700 / 70; 700 x 16 tokens


def test_tuple_groups_of_deepseek_v4_flash_by_hand():
    """Flash at block 256 (pages from test_vllm_dsv4.py::test_flash_pages_by_hand): the compressed group holds
    21 CSA entries (37,440 B), 20 HCA entries (1,728) and 21 indexer keys (8,640): 62 layers, 21 tuples. Windows
    (43, one page), CSA states (21 of 32,832 -> padded 37,440, 21 indexer states of 8,640: 21 tuples), HCA states
    (20 of 32,832 -> 37,440). d = approximate_gcd([21, 43, 21, 20], 21): d = 21 pads 0 + 20 + 0 + 1 = 21, d = 22
    pads 1 + 1 + 1 + 2 = 5, d = 23 pads 2 + 3 + 2 + 3 = 10: 22. Windows cdiv(43, 22) = 2 groups (22 + 21), the CSA
    state pairs cdiv(21, 22) = 1 group of 42, HCA's 1 of 20. TUPLES (0.20.1-0.22): the compressed group's pages
    (37,440 + 1,728 + 8,640) x the most tuples, 22 = 1,051,776 B; SLOTS (0.23-0.26): 22 x 37,440 + 20 x 1,728 +
    21 x 8,640 = 823,680 + 34,560 + 181,440 = 1,039,680 B."""
    model = load_model("deepseek-ai/DeepSeek-V4-Flash")
    specs = dsv4_layer_specs(model, range(model.num_layers))
    tuples = kv_groups(specs, 256, TUPLES)
    assert [len(g) for g in tuples.groups] == [62, 22, 21, 42, 20]
    assert tuple_block_bytes(tuples) == (37_440 + 1_728 + 8_640) * 22 == 1_051_776
    assert tuple_block_bytes(kv_groups(specs, 256, SLOTS)) == 1_039_680


def test_tuple_groups_refuse_a_window_wider_than_every_compressed_page():
    # a 960 B window page (16 x 60) beside compressed pages of 800 B alone: vLLM asserts max(sliding pages) <=
    # max(compressed pages)
    with pytest.raises(WorkloadError, match=_exact(
            "kvplan does not plan this DeepSeek-V4 layout on vLLM 0.20.1-0.26 (a sliding cache larger than every "
            "compressed page): plan it with --engine-version 0.33.0")):
        tuple_groups([_mla(50, 0), _window(60, 8, 1)], 16, TUPLES)


def test_tuple_groups_refuse_unequal_window_page_counts():
    # one bucket of 8-token windows: two of 60 B a token (960 -> padded 1,600), one of 40 (640 -> 800): 2 : 1
    with pytest.raises(WorkloadError, match=_exact(
            "kvplan does not plan this DeepSeek-V4 layout on vLLM 0.20.1-0.26 (unequal sliding page counts): plan it "
            "with --engine-version 0.33.0")):
        tuple_groups([_mla(100, 0), _mla(50, 1), _window(60, 8, 2), _window(60, 8, 3), _window(40, 8, 4)], 16,
                     SLOTS)


# ----------------------------------------------------------------------------- unify_page_sizes


def test_unify_pads_a_page_that_does_not_divide_where_the_release_does():
    """Block 16: full 4,096 B a token (page 65,536), sliding 2,048 (32,768: block x 2), a full layer of 1,500
    (24,000 B: 65,536 / 24,000 = 2.73, does not divide: padded to 65,536 from 0.24, its block still 16 tokens), a
    Mamba state of 16,384 B (divides 65,536, but a state's page does not grow with its block: padded to 65,536 from
    0.26, 0.26.0 kv_cache_utils.py :1098, its block_scale still 1)."""
    specs = [VllmLayerSpec("full", 4096), VllmLayerSpec("sliding", 2048, window=512), VllmLayerSpec("full", 1500),
             VllmLayerSpec("mamba", 0, state_bytes=16_384)]
    out = unify_page_sizes(page_rule(specs, (0, 26, 0)), 16)
    assert [x.block_scale for x in out] == [1, 2, 1, 1]
    marked = page_rule([*specs, VllmLayerSpec("full", 0)], (0, 26, 0))   # a layer of no bytes has no page to unify
    assert unify_page_sizes(marked, 16)[-1] is marked[-1]
    assert [x.page_bytes(16) for x in out] == [65_536] * 4   # 16 x 4,096; 32 x 2,048; padded; padded
    assert out[2].block_tokens(16) == 16


@pytest.mark.parametrize("version, kind, tail", [
    # 0.23.0 kv_cache_utils.py :1057 raises for any page that does not divide the largest
    ((0, 23, 0), "full", "vLLM before 0.24 cannot pad it and raises NotImplementedError at start-up: plan "
                         "--engine-version 0.24 or later"),
    # 0.29.0 :1186 pads any attention page but MLA's
    ((0, 29, 0), "mla", "vLLM 0.29+ pads only non-MLA pages and raises NotImplementedError for this one"),
    # an MLA page before 0.24 fails as any page does then
    ((0, 22, 1), "mla", "vLLM before 0.24 cannot pad it and raises NotImplementedError at start-up: plan "
                        "--engine-version 0.24 or later"),
])
def test_a_page_the_release_cannot_pad_is_refused(version, kind, tail):
    # full 4,096 B a token beside a 1,152 B layer (an MLA latent, 576 x 2 B) at block 16: 65,536 % 18,432 = 10,240
    specs = page_rule([VllmLayerSpec("full", 4096), VllmLayerSpec(kind, 1152)], version)
    with pytest.raises(WorkloadError) as err:
        unify_page_sizes(specs, 16)
    assert str(err.value) == (f"vLLM cannot put this model's KV layers in one block pool: a 18,432 B KV page of its "
                              f"{kind} layers does not divide the 65,536 B page of the others; {tail}")


def test_an_mla_page_beside_sliding_layers_names_033s_fallback():
    # 0.33 kv_cache_planning.py `_try_get_full_allocation_fallback_groups`: MLA next to regular sliding-window layers
    # is allocated as full attention, which kvplan does not plan. Sliding 4,096 B a token (65,536 at block 16)
    # beside an MLA latent of 1,152 (18,432)
    specs = page_rule([VllmLayerSpec("sliding", 4096, window=128), VllmLayerSpec("mla", 1152)], (0, 33, 0))
    with pytest.raises(WorkloadError, match=r"for this one \(beside sliding-window layers 0\.33 treats them as full "
                                            r"attention instead, which kvplan does not plan\)$"):
        unify_page_sizes(specs, 16)


def test_the_page_rule_by_release():
    # vLLM unify_kv_cache_spec_page_size: no padding through 0.23; 0.24-0.28 every attention page its backend reads by
    # block stride (all of the defaults, MLA's too); 0.29+ any attention page but MLA's; a Mamba state from 0.26
    # (0.25.1 has no MambaSpec branch, 0.26.0 kv_cache_utils.py :1098 has), a page of its type from 0.29 (0.28.0
    # MambaSpec.is_uniform_with_collection compares no page, 0.29.0 kv_cache_interface.py :915 does)
    specs = [VllmLayerSpec("full", 4096), VllmLayerSpec("mla", 1152), VllmLayerSpec("mamba", 0, state_bytes=10)]
    releases = ((0, 23, 9), (0, 24, 0), (0, 25, 1), (0, 26, 0), (0, 28, 0), (0, 29, 0))
    assert [[x.pads_page for x in page_rule(specs, v)] for v in releases] == [
        [False, False, False], [True, True, False], [True, True, False], [True, True, True], [True, True, True],
        [True, False, True]]
    assert [page_rule(specs, v)[2].typed_page for v in releases] == [False] * 5 + [True]
    assert not any(x.typed_page for v in releases for x in page_rule(specs, v)[:2])   # attention: never


# ----------------------------------------------------------------------------- rank_layer_specs and the MLA kinds


def test_falcon_new_decoder_architecture_caches_its_kv_heads():
    """falcon-40b-instruct: new_decoder_architecture, 128 heads of 8,192 / 128 = 64, num_kv_heads 8. transformers
    caches all 128 heads, vLLM the 8 (falcon.py :116-130): at TP 1 in bf16 8 x (64 + 64) x 2 = 2,048 B a token a
    layer (128 heads: 32,768); at TP 8 max(1, 8 // 8) = 1 head, 256 B."""
    model = load_model("tiiuae/falcon-40b-instruct")
    assert {(x.kind, x.bytes_per_token) for x in rank_layer_specs(model, range(60), 1, 2, 2)} == {("full", 2048)}
    assert len(rank_layer_specs(model, range(60), 1, 2, 2)) == 60
    assert {x.bytes_per_token for x in rank_layer_specs(model, range(60), 8, 2, 2)} == {256}


def test_deepseek_v32_indexer_keys_share_the_latent_group():
    """DeepSeek-V3.2 at fp8, 64-token blocks: 61 latents of 512 + 64 = 576 B and 61 indexer keys of 128 + 128 // 128
    x 4 = 132 B, all MLAAttentionSpec: one uniform group, 64 x 61 x (576 + 132) = 2,764,032 B a block. In the
    fp8_ds_mla layout the latents are 656 B: 64 x 61 x (656 + 132) = 3,076,352 B, still one group."""
    model = load_model("deepseek-ai/DeepSeek-V3.2")
    specs = rank_layer_specs(model, range(61), 8, 1, 2)
    assert sorted({x.bytes_per_token for x in specs}) == [132, 576] and len(specs) == 122
    groups = kv_groups(specs, 64)
    assert groups.uniform and len(groups.groups) == 1
    assert groups.bytes_per_block == 64 * 61 * (576 + 132) == 2_764_032
    ds = kv_groups(with_ds_mla_layout(specs, model, 8), 64)
    assert ds.uniform and len(ds.groups) == 1
    assert ds.bytes_per_block == 64 * 61 * (656 + 132) == 3_076_352


# ----------------------------------------------------------------------------- kv_groups of hand-built layers


def test_a_stage_of_shared_layers_only_is_refused_in_words():
    with pytest.raises(WorkloadError, match=_exact(
            "a pipeline stage would hold only layers that reuse other stages' KV caches (KV sharing), which kvplan "
            "does not plan: use fewer pipeline stages")):
        kv_groups([], 16)


def test_one_kind_is_one_uniform_group_without_padding():
    # two Mamba states of 4,096 and 2,048 B and no attention layer: nothing to pad them to (vLLM pads a state to the
    # attention page), so one uniform group of 4,096 + 2,048 = 6,144 B a block and no padding layers
    groups = kv_groups([VllmLayerSpec("mamba", 0, state_bytes=4096), VllmLayerSpec("mamba", 0, state_bytes=2048)], 16)
    assert groups.uniform is True and groups.padding_layers == 0 and groups.bytes_per_block == 6_144  # 4,096 + 2,048
    assert [x.padded_bytes for x in groups.groups[0]] == [0, 0]


def test_group_size_is_the_larger_count_only_under_one_and_a_half_times_the_smaller():
    # v1/core/kv_cache_utils.py (0.19-0.33): `if max_num_layers < min_num_layers * 1.5: group_size = max`. Block 16,
    # 64 B a token (1,024 B pages). 2 full + 3 sliding: 3 < 3.0 is false, so groups of 2: [2 full], [2 sliding],
    # [1 sliding + 1 padding]; 2 full + 2 sliding: 2 < 3, one group of each kind
    full, sliding = VllmLayerSpec("full", 64), VllmLayerSpec("sliding", 64, window=4)
    odd = kv_groups([full, full, sliding, sliding, sliding], 16)
    assert [len(g) for g in odd.groups] == [2, 2, 2] and odd.padding_layers == 1 and odd.uniform is False
    even = kv_groups([full, full, sliding, sliding], 16)
    assert [len(g) for g in even.groups] == [2, 2] and even.padding_layers == 0


def test_a_window_span_by_hand():
    # SlidingWindowSpec.max_memory_usage_bytes: (cdiv(min(W - 1 + batched, L), block) + 1) pages. W 4, 14 batched
    # tokens: 3 + 14 = 17 tokens, cdiv(17, 16) + 1 = 3 pages of 16 x 64 = 1,024 B (16 tokens would take 2)
    assert max_usage_bytes(VllmLayerSpec("sliding", 64, window=4), 16, 1000, 14) == 3 * 1024


def test_a_uniform_sliding_model_counts_its_batches_in_flight():
    # every layer sliding (one uniform group): blocks a request needs = cdiv(sum of spans, the block's bytes). W 4,
    # 16 batched tokens, 2 batches in flight: 3 + 2 x 16 = 35 tokens, cdiv(35, 16) + 1 = 4 pages a layer (one batch:
    # 19 tokens, 3 pages); two layers of 1,024 B pages: cdiv(2 x 4 x 1,024, 2,048) = 4 blocks; a pool of 40 blocks
    # serves 10 requests
    sliding = VllmLayerSpec("sliding", 64, window=4)
    groups = kv_groups([sliding, sliding], 16)
    cap = pool_capacity(groups, 40 * 2048, 1000, 16, inflight=2)
    assert (cap.num_blocks, cap.blocks_per_request, cap.max_concurrency, cap.kv_cache_tokens) == (40, 4, 10.0, 640)


def test_a_pool_of_layers_that_cache_nothing_has_no_blocks():
    # a layer of 0 B a token gives 0 B blocks: no blocks (no division by zero), no tokens, no concurrency
    cap = pool_capacity(kv_groups([VllmLayerSpec("full", 0)], 16), 1 << 30, 1000, 16)
    assert (cap.num_blocks, cap.kv_cache_tokens, cap.max_concurrency) == (0, 0, 0.0)


def test_a_request_of_no_tokens_reports_no_concurrency():
    # max_model_len 0: cdiv(0, 16) = 0 blocks a request, and the concurrency is reported 0.0, not a division by zero
    cap = pool_capacity(kv_groups([VllmLayerSpec("full", 64)], 16), 10 * 1024, 0, 16)
    assert (cap.num_blocks, cap.blocks_per_request, cap.max_concurrency) == (10, 0, 0.0)


def test_nemotron_h_ssm_state_dtype_by_release():
    # model_executor/models/config.py NemotronHForCausalLMConfig: float16 on 0.13-0.19 (0.19.0 :483), float32 from
    # 0.20 (0.20.1 :409); before 0.13 no such class: the model dtype (None). Nemotron-H-56B names no
    # mamba_ssm_cache_dtype
    model = load_model("nvidia/Nemotron-H-56B-Base-8K")
    assert [vllm_ssm_dtype(model, v) for v in [(0, 12, 0), (0, 13, 0), (0, 19, 0), (0, 20, 1)]] == [
        None, "float16", "float16", "float32"]


def test_sliding_layers_of_two_windows_are_two_types():
    # SlidingWindowSpec.is_uniform_with_collection (0.33 kv_cache_interface.py :957) asks one sliding_window: a
    # 512-token window beside a 1,024-token one is no uniform group but two buckets, one group of 2 layers each; two
    # layers of one window (64 B a token, 1,024 B pages at block 16) are one uniform group of 2 x 1,024 = 2,048 B
    short, long = VllmLayerSpec("sliding", 64, window=512), VllmLayerSpec("sliding", 64, window=1024)
    two = kv_groups([short, short, long, long], 16)
    assert two.uniform is False and [len(g) for g in two.groups] == [2, 2] and two.padding_layers == 0
    assert two.groups[0] == (short, short) and two.groups[1] == (long, long)
    one = kv_groups([short, short], 16)
    assert one.uniform is True and one.bytes_per_block == 2_048    # 2 x 16 x 64


def test_layers_of_one_kind_but_other_bytes_are_buckets_apart():
    # `same_type_layers` keys by the spec: full layers of 128 and 64 B a token (a target and its draft) beside 3
    # sliding ones are three buckets of 3, 1 and 1 (groups of 1: 3 < 1.5 x 1 is false), where one bucket per kind
    # had 2 and 3 (groups of 3 with one padding layer: 3 < 1.5 x 2). Pages at block 16: 2,048 B (full 128, the
    # largest), 1,024 (full 64 and sliding 64: each block twice as long)
    big, small = VllmLayerSpec("full", 128), VllmLayerSpec("full", 64)
    sliding = VllmLayerSpec("sliding", 64, window=256)
    groups = kv_groups([sliding, sliding, sliding, big, small], 16)
    assert [len(g) for g in groups.groups] == [1, 1, 1, 1, 1] and groups.padding_layers == 0
    assert [g[0].bytes_per_token for g in groups.groups] == [64, 64, 64, 128, 64]
    assert groups.bytes_per_block == 2_048   # one layer of 16 x 128; the 64 B layers' blocks are 32 tokens


def test_layers_of_equal_bytes_but_other_head_shapes_are_buckets_apart():
    # vLLM's AttentionSpec compares num_kv_heads, head_size, head_size_v and dtype (0.33 kv_cache_interface.py
    # :557-560), so 4 full layers of 8 KV heads x 64 and 6 of 4 x 128 (both 8 x 128 x 2 B = 2,048 B a token) beside
    # 10 sliding ones are buckets of 4, 6 and 10: groups of 4 (10 < 1.5 x 4 is false), 1 + 2 + 3 = 6 groups, the
    # 6-layer bucket's second group and the sliding bucket's third each padded by 2 layers. Keyed by bytes alone the
    # full layers were one bucket of 10 beside the 10 sliding: 2 groups of 10, no padding
    narrow = VllmLayerSpec("full", 2048, heads=(8, 64, 64, 2))
    wide = VllmLayerSpec("full", 2048, heads=(4, 128, 128, 2))
    sliding = VllmLayerSpec("sliding", 2048, window=4096, heads=(8, 64, 64, 2))
    groups = kv_groups([narrow] * 4 + [wide] * 6 + [sliding] * 10, 16)
    assert [len(g) for g in groups.groups] == [4] * 6 and groups.padding_layers == 4
    assert [g[0].heads[0] for g in groups.groups] == [8, 4, 4, 8, 8, 8]
    assert narrow == wide   # equal figures: only the buckets tell the shapes apart


def test_a_converted_layer_carries_its_head_shape():
    # Llama-3.2-1B: 8 KV heads x 64 (head_dim) at bf16, TP 1 -> (8, 64, 64, 2.0); at TP 16 one head a rank (replicated)
    model = load_model("meta-llama/Llama-3.2-1B")
    from kvplan.planning.engines.vllm_kv import rank_layer_specs
    assert rank_layer_specs(model, range(1), 1, 2.0, 2)[0].heads == (8, 64, 64, 2.0)
    assert rank_layer_specs(model, range(1), 16, 2.0, 2)[0].heads == (1, 64, 64, 2.0)
