"""Issue #26: tests for the survivors of engines/vllm_dsv4.py (DeepSeek-V4 on vLLM). Every note, warning and refusal
is pinned word for word (its text is the contract), every figure in it by hand from the bundled configs'
fields (model_configs/deepseek-ai/DeepSeek-V4-Flash, -Pro) and the page formulas test_vllm_dsv4.py derives from
vLLM 0.33.0's source (kv_cache_interface.py `_apply_alignment_padding`: 584 B fp8_ds_mla entries, 132 B indexer
keys, float32 compressor states, pages rounded up to 576 B)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvplan import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm_dsv4 import dsv4_layer_specs, packed_notes
from kvplan.planning.engines.vllm_kv import KVGroups, kv_groups, project_packed
from kvplan.planning.planner import plan

FLASH, PRO = "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"

# the second note, the same on every release and card
REPLICATED = ("every DeepSeek-V4 cache is one KV head that vLLM replicates on each TP rank (max_tp_shards=1), in "
              "DeepSeek's fp8_ds_mla layout whatever --kv-cache-dtype says ('auto' becomes fp8: attention.py "
              "`_resolve_dsv4_kv_cache_dtype`)")
TAIL = "blocks (each sliding cache holds its window plus the tokens in flight, capped at max_model_len)"

# Flash (43 layers: 2 window-only, then 21 CSA (ratio 4) and 20 HCA (ratio 128), window 128) on 0.31-0.33, its
# five groups (test_vllm_dsv4.py test_flash_groups_and_block_by_hand): windows 22 + 21 (round-robin of 43),
# 21 + 20 + 21 = 62 compressed caches, 21 + 21 = 42 CSA states, 20 HCA states
FLASH_GROUPS_033 = (
    # 22 x 37,440 = 823,680 B, / 64 = 12,870 B a token
    "window 128: 22 layers, 64-token blocks of 823,680 B (12,870 B a token), {w} blocks a request; "
    # 21 x 37,440 = 786,240 B, / 64 = 12,285
    "window 128: 21 layers, 64-token blocks of 786,240 B (12,285 B a token), {w} blocks a request; "
    # 21 x 37,440 + 20 x 1,728 + 21 x 8,640 = 1,002,240 B, / 256 = 3,915
    "compressed entries + indexer keys: 62 layers, 256-token blocks of 1,002,240 B (3,915 B a token), {e} blocks "
    "a request; "
    # 21 x (32,832 + 8,640) = 870,912 B, / 4 = 217,728
    "compressor state (window 8): 42 layers, 4-token blocks of 870,912 B (217,728 B a token), {c} blocks a "
    "request; "
    # 20 x 32,832 = 656,640 B, / 8 = 82,080
    "compressor state (window 128): 20 layers, 8-token blocks of 656,640 B (82,080 B a token), {h} blocks a "
    "request")


def _dsv4_notes(p) -> list[str]:
    i = next(i for i, n in enumerate(p.notes) if n.startswith("DeepSeek-V4 on vLLM"))
    return p.notes[i:i + 2]


def test_flash_033_packed_notes_word_for_word():
    """4,096 tokens, 8,192 batched: windows cdiv(min(127 + 8,192, 4,096), 64) + 1 = 65, entries cdiv(4,096, 256) =
    16, CSA states cdiv(4,096, 4) + 1 = 1,025, HCA states cdiv(4,096, 8) + 1 = 513; 1,684 in all. A plan always
    projects the groups onto its stage's layers (even at PP 1), so the block is 'the widest group on this stage'."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096)
    assert _dsv4_notes(p) == [
        "DeepSeek-V4 on vLLM 0.31-0.33: 5 KV-cache groups packed side by side in one block id of 1,002,240 B "
        "(the widest group on this stage; block-outermost layout): "
        + FLASH_GROUPS_033.format(w=65, e=16, c="1,025", h=513)   # the block counts above
        + "; a 4,096-token request takes 65 + 65 + 16 + 1,025 + 513 = 1,684 " + TAIL,
        REPLICATED]


def test_flash_packed_notes_of_the_whole_model_at_a_long_length():
    """The whole model's groups (held None: 'the widest group', no stage). 1,048,576 tokens, 8,192 batched, 2
    batches in flight: windows cdiv(127 + 16,384, 64) + 1 = 259, entries 1,048,576 / 256 = 4,096, CSA states
    cdiv(7 + 16,384, 4) + 1 = 4,099, HCA states cdiv(127 + 16,384, 8) + 1 = 2,065; 259 x 2 + 4,096 + 4,099 + 2,065 =
    10,778. One batch in flight would give windows cdiv(127 + 8,192, 64) + 1 = 131."""
    model = load_model(FLASH)
    groups = kv_groups(dsv4_layer_specs(model, range(model.num_layers)), 256)
    assert groups.held is None
    assert packed_notes(groups, 1_048_576, 8192, 2) == [   # 2**20 tokens; 8,192 batched
        "DeepSeek-V4 on vLLM 0.31-0.33: 5 KV-cache groups packed side by side in one block id of 1,002,240 B "
        "(the widest group; block-outermost layout): "
        + FLASH_GROUPS_033.format(w=259, e="4,096", c="4,099", h="2,065")   # the block counts above
        + "; a 1,048,576-token request takes 259 + 259 + 4,096 + 4,099 + 2,065 = 10,778 " + TAIL,
        REPLICATED]


def test_a_one_layer_group_notes_its_single_window():
    """One window cache alone (Flash's layer 0, compress ratio 0): one group of one layer, 64 x 584 = 37,376 ->
    65 x 576 = 37,440 B, 37,440 // 64 = 585 B a token; cdiv(min(127 + 8,192, 4,096), 64) + 1 = 65 blocks."""
    window = tuple(dsv4_layer_specs(load_model(FLASH), range(1)))
    groups = KVGroups(256, (window,), uniform=False, padding_layers=0, packed=True)
    assert packed_notes(groups, 4096, 8192, 1) == [
        "DeepSeek-V4 on vLLM 0.31-0.33: 1 KV-cache groups packed side by side in one block id of 37,440 B "
        "(the widest group; block-outermost layout): window 128: 1 layers, 64-token blocks of 37,440 B (585 B a "
        "token), 65 blocks a request; a 4,096-token request takes 65 = 65 " + TAIL,
        REPLICATED]


PRO_STAGE0 = (
    # Pro: 61 layers, 30 CSA (odd) + 31 HCA (even), window 128; stage 0 of PP 2 holds layers 0-30: 16 HCA, 15 CSA
    "DeepSeek-V4 on vLLM 0.31-0.33: 5 KV-cache groups packed side by side in one block id of 718,848 B "
    "(the widest group on this stage; block-outermost layout): "
    # windows 61 round-robin 31 (even layers) + 30 (odd): 16 x 37,440 = 599,040 (/ 64 = 9,360); 15 x 37,440 =
    # 561,600 (/ 64 = 8,775)
    "window 128: 16 layers, 64-token blocks of 599,040 B (9,360 B a token), 65 blocks a request; "
    "window 128: 15 layers, 64-token blocks of 561,600 B (8,775 B a token), 65 blocks a request; "
    # 15 x 37,440 + 16 x 1,728 + 15 x 8,640 = 718,848 (/ 256 = 2,808); 15 + 16 + 15 = 46 caches
    "compressed entries + indexer keys: 46 layers, 256-token blocks of 718,848 B (2,808 B a token), 16 blocks a "
    "request; "
    # 16 x 32,832 = 525,312 (/ 8 = 65,664)
    "compressor state (window 128): 16 layers, 8-token blocks of 525,312 B (65,664 B a token), 513 blocks a "
    "request; "
    # 15 x (32,832 + 8,640) = 622,080 (/ 4 = 155,520)
    "compressor state (window 8): 30 layers, 4-token blocks of 622,080 B (155,520 B a token), 1,025 blocks a "
    "request; "
    "a 4,096-token request takes 65 + 65 + 16 + 513 + 1,025 = 1,684 " + TAIL)


def test_pro_stage_notes_count_the_stage_share_only():
    """Each group counts the stage's layers, not the model's 31 / 30 / 91 / 31 / 60 (the blocks a request stay
    the whole group's)."""
    model = load_model(PRO)
    groups = kv_groups(dsv4_layer_specs(model, range(model.num_layers)), 256)
    assert packed_notes(project_packed(groups, range(31)), 4096, 8192, 1) == [PRO_STAGE0, REPLICATED]
    p = plan(PRO, gpu="H100", tp=8, pp=2, max_model_len=4096)
    assert _dsv4_notes(p) == [PRO_STAGE0, REPLICATED]


# 0.20.1-0.26's layer tuples (vllm_kv.tuple_groups): the compressed group first, the sliding buckets after; the
# CSA and HCA states' 32,832 B pages padded to the nearest compressed page, 37,440 B (the indexer states' 8,640 stay)
TUPLE_GROUPS = (
    "compressed entries + indexer keys: 62 layers, 256-token blocks of 1,002,240 B (3,915 B a token), 16 blocks a "
    "request; "
    "window 128: 22 layers, 64-token blocks of 823,680 B (12,870 B a token), 65 blocks a request; "
    "window 128: 21 layers, 64-token blocks of 786,240 B (12,285 B a token), 65 blocks a request; "
    # 21 x (37,440 + 8,640) = 967,680 B, / 4 = 241,920
    "compressor state (window 8): 42 layers, 4-token blocks of 967,680 B (241,920 B a token), 1,025 blocks a "
    "request; "
    # 20 x 37,440 = 748,800 B, / 8 = 93,600
    "compressor state (window 128): 20 layers, 8-token blocks of 748,800 B (93,600 B a token), 513 blocks a request; "
    "a 4,096-token request takes 16 + 65 + 65 + 1,025 + 513 = 1,684 " + TAIL
    # cdiv(16 x 1,002,240 + 65 x (823,680 + 786,240) + 1,025 x 967,680 + 513 x 748,800, 1,002,240) =
    # cdiv(16,035,840 + 104,644,800 + 991,872,000 + 384,134,400 = 1,496,687,040, 1,002,240) = 1,494 (1,493.3)
    + ", which the concurrency counts as 1,494 (each group's blocks x its pages over the first group's pages)")


def test_022_tuple_notes_word_for_word():
    """0.22 (TUPLES): the compressed group's distinct pages x the most layer tuples, (37,440 + 1,728 + 8,640) x 22 =
    47,808 x 22 = 1,051,776 B."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, engine_version="0.22.0", kv_dtype="fp8")
    assert _dsv4_notes(p) == [
        "DeepSeek-V4 on vLLM 0.20.1-0.26: 5 KV-cache groups packed side by side in one block id of 1,051,776 B "
        "(0.20.1-0.22: the compressed group's pages x the most layer tuples; block-outermost layout): "
        + TUPLE_GROUPS, REPLICATED]


def test_025_slot_notes_word_for_word():
    """0.25 (SLOTS): each page size x the most layers of it in one group: 22 x 37,440 + 20 x 1,728 + 21 x 8,640 =
    823,680 + 34,560 + 181,440 = 1,039,680 B."""
    p = plan(FLASH, gpu="H100", num_gpus=4, max_model_len=4096, engine_version="0.25.0", kv_dtype="fp8")
    assert _dsv4_notes(p) == [
        "DeepSeek-V4 on vLLM 0.20.1-0.26: 5 KV-cache groups packed side by side in one block id of 1,039,680 B "
        "(0.23-0.26: each page size x the most layers of it in a group; block-outermost layout): "
        + TUPLE_GROUPS, REPLICATED]


BASE = {"gpu": "H100", "num_gpus": 8, "max_model_len": 4096}   # test_vllm_dsv4.py refusals: 8 H100s, 4,096 tokens


def _refusal(**settings) -> str:
    with pytest.raises(WorkloadError) as info:
        plan(FLASH, **{**BASE, **settings})
    return str(info.value)


def test_a_release_before_deepseek_v4_is_refused_word_for_word():
    # DeepseekV4ForCausalLM joined vLLM in 0.20.0 (model_executor/models/registry.py; not in 0.19.1)
    assert _refusal(engine_version="0.19.1") == ("vLLM 0.19.1 has no DeepSeek-V4 (DeepseekV4ForCausalLM joined in "
                                                 "0.20.0): pick vLLM 0.33")


def test_unread_groupings_are_refused_word_for_word():
    words = ("kvplan sizes DeepSeek-V4's vLLM cache from the groupings of 0.20.1-0.26 and 0.31-0.33 only (0.27-0.30 "
             "group its pages otherwise; 0.20.0 not read), not {}: pick --engine-version 0.33.0, or --engine hf")
    assert _refusal(engine_version="0.30.0") == words.format("0.30.0")
    assert _refusal(engine_version="0.20.0", kv_dtype="fp8") == words.format("0.20.0")


def test_0201_the_first_read_release_plans():
    """0.20.1 is TUPLES_FROM itself: planned, in the layer tuples (0.20.1-0.22's block, 1,051,776 B)."""
    p = plan(FLASH, **BASE, engine_version="0.20.1", kv_dtype="fp8")
    assert _dsv4_notes(p)[0].startswith("DeepSeek-V4 on vLLM 0.20.1-0.26: 5 KV-cache groups packed side by side in "
                                        "one block id of 1,051,776 B (0.20.1-0.22: ")   # 47,808 x 22


def test_a_tuple_release_wants_an_fp8_cache_word_for_word():
    assert _refusal(engine_version="0.25.0") == ("kvplan sizes DeepSeek-V4 on vLLM 0.25 with an fp8 cache (fp8_ds_mla) "
                                                 "only: pass --kv-cache-dtype fp8")
    # 0.31-0.33 take 'auto' (it becomes fp8_ds_mla): planned
    assert plan(FLASH, **BASE, engine_version="0.31.0").block_size == 256


def test_a_tuple_release_refuses_pipeline_stages_word_for_word():
    assert _refusal(engine_version="0.22.0", kv_dtype="fp8", num_gpus=None, tp=4, pp=2) == (
        "kvplan plans DeepSeek-V4 on vLLM 0.22 without pipeline parallelism only: use --pp 1, or --engine-version "
        "0.33.0")
    # 0.31 (packed groups) plans the stages
    assert len(plan(FLASH, **{**BASE, "num_gpus": None}, tp=4, pp=2, engine_version="0.31.0").stages) == 2


def test_check_dsv4_defaults_one_stage_and_no_given_pool():
    """Called without pp / pool_given: one stage (0.22, whose tuples refuse PP, passes) and no pool (SM 10.0
    refuses: its MoE scratch is FlashInfer's)."""
    from kvplan.planning.engines.vllm_dsv4 import check_dsv4
    model = load_model(FLASH)
    assert check_dsv4(model, (0, 22, 0), (9, 0), 8, None, None) is None
    with pytest.raises(WorkloadError, match=r"^kvplan sizes DeepSeek-V4's vLLM profile run on Hopper, "):
        check_dsv4(model, (0, 33, 0), (10, 0), 8, None, None)
    assert check_dsv4(model, (0, 33, 0), (10, 0), 8, None, None, pool_given=True) is None


FLASHMLA_ONLY = ("kvplan sizes DeepSeek-V4 on vLLM's FlashMLA path (Hopper or Blackwell SM 10.x GPUs) only: pick an "
                 "H100 / H200 / B200-class GPU, or --engine hf")


def test_a_card_off_flashmla_is_refused_word_for_word():
    assert _refusal(gpu="A100-80GB") == FLASHMLA_ONLY    # SM 8.0: FlashMLA does not run
    assert _refusal(gpu="RTX 5090") == FLASHMLA_ONLY     # SM 12.0: FLASHINFER_MLA_SPARSE_DSV4, not read


def test_a_float32_cache_is_refused_word_for_word():
    assert _refusal(kv_dtype="float32") == ("DeepSeek-V4 on vLLM's FlashMLA path caches fp8_ds_mla: use "
                                            "--kv-cache-dtype auto or fp8")


def test_the_mtp_drafter_is_refused_word_for_word():
    assert _refusal(speculative={"method": "mtp", "num_speculative_tokens": 1}) == (
        "kvplan does not plan DeepSeek-V4's MTP drafter on vLLM: plan it without speculative decoding")


def test_profile_refusals_word_for_word():
    assert _refusal(dtype="float16") == ("vLLM's DeepSeek-V4 hyper-connection kernels take bfloat16 activations: use "
                                         "--dtype auto or bfloat16")
    ep = ("kvplan sizes DeepSeek-V4's vLLM {} profile run without expert parallelism (it picks Humming's grouped MoE "
          "kernel, not read): leave out --enable-expert-parallel, or plan vLLM 0.31")
    assert _refusal(expert_parallel=True) == ep.format("0.33")
    assert _refusal(expert_parallel=True, engine_version="0.32.0") == ep.format("0.32")


def _spec(x) -> tuple:
    return (x.kind, x.bytes_per_token, x.window, x.own_block, x.tokens_per_state, x.alignment, x.packed, x.layer)


def test_flash_layer_specs_whole():
    """Flash's layers 1 (window only), 2 (CSA, ratio 4) and 3 (HCA, ratio 128), every cache packed and tagged with
    its layer (attention.py / compressor.py / sparse_swa.py, 0.33.0): window 584 B a token in 64-token blocks;
    entries 584 B a compressed token; states 2 x coff x head_dim x 4 B with window coff x ratio, blocks 4 / 8;
    indexer keys 128 + 128 // 128 x 4 = 132 B."""
    got = [_spec(x) for x in dsv4_layer_specs(load_model(FLASH), range(1, 4))]
    window = ("sliding", 584, 128, 64, 1, 576, True)
    assert got == [
        (*window, 1),
        (*window, 2),
        ("mla", 584, 0, 0, 4, 576, True, 2),
        ("sliding", 2 * 2 * 512 * 4, 8, 4, 1, 576, True, 2),        # 8,192 B, window 2 x 4
        ("mla", 132, 0, 0, 4, 576, True, 2),
        ("sliding", 2 * 2 * 128 * 4, 8, 4, 1, 576, True, 2),        # 2,048 B
        (*window, 3),
        ("mla", 584, 0, 0, 128, 576, True, 3),
        ("sliding", 2 * 1 * 512 * 4, 128, 8, 1, 576, True, 3),      # 4,096 B, window 1 x 128
    ]


def _layers(spec) -> SimpleNamespace:
    return SimpleNamespace(layers=[(spec,)])


def test_a_compressor_ratio_vllm_lacks_is_refused_word_for_word():
    import dataclasses
    csa = load_model(FLASH).layers[2][0]
    for bad, ratio in ((dataclasses.replace(csa, overlap=False), 4),          # ratio 4 must overlap
                       (dataclasses.replace(csa, compress_rate=16, overlap=False), 16)):   # only 4 and 128
        with pytest.raises(WorkloadError) as info:
            dsv4_layer_specs(_layers(bad), range(1))
        assert str(info.value) == (f"vLLM's DeepSeek-V4 compressor takes ratios 4 (overlapping) and 128, not {ratio}: "
                                   "plan it with --engine hf")


def test_a_window_head_other_than_512_is_refused_word_for_word():
    import dataclasses
    window = load_model(FLASH).layers[0][0]
    with pytest.raises(WorkloadError) as info:
        dsv4_layer_specs(_layers(dataclasses.replace(window, k_head_dim=256)), range(1))
    assert str(info.value) == ("kvplan sizes DeepSeek-V4's fp8_ds_mla entries for head_dim 512, not 256: plan it with "
                               "--engine hf")


def test_dsv4_layout_names_each_release_as_documented():
    """'' (a str, as its signature says) for 0.31-0.33's packed groups; 0.20-0.22 TUPLES, 0.23-0.26 SLOTS."""
    from kvplan.planning.engines.vllm_dsv4 import dsv4_layout
    from kvplan.planning.engines.vllm_kv import SLOTS, TUPLES
    assert [dsv4_layout((0, minor, 0)) for minor in (22, 23, 26, 31, 33)] == [TUPLES, SLOTS, SLOTS, "", ""]


H100_4 = {"gpu": "H100", "num_gpus": 4, "max_model_len": 4096}   # issue #23's command: 4 H100s, 4,096 tokens

HUMMING = ("vLLM's DeepSeek-V4 profile run is sized from vLLM 0.33.0's source, no start-up log checks it: kvplan's "
           "activation figure holds a CSA layer's live set at the indexer's logits stand-in "
           "(VLLM_SPARSE_INDEXER_MAX_LOGITS_MB at its 512 default) and the shared workspace with the buffers of "
           "Humming's MoE kernel, which vLLM picks on Hopper; if it falls back to Marlin's ('Using 'MARLIN' Mxfp4 "
           "MoE backend' in its log) the workspace is {0} MiB larger: the profile run takes 0 to {0} MiB more than "
           "kvplan's activation figure and the pool is high by as much (the CUDA-graph estimate beside it is "
           "kvplan's generic one, not read for DeepSeek-V4's breakable graphs); pass vLLM's 'Available KV cache "
           "memory' as --kv-cache-memory-bytes to plan the KV from it")


def test_humming_warning_word_for_word():
    """Flash TP 4: Marlin's 2 x 49,152 x 4,096 x 2 = 805,306,368 B less Humming's 469,762,048 = 335,544,320 B =
    320 x 2**20 (test_vllm_dsv4.py test_workspace_requests_by_hand); Pro TP 8: 1,409,286,144 - 822,083,584 =
    587,202,560 B = 560 x 2**20."""
    assert plan(FLASH, **H100_4).warnings == [HUMMING.format("320.0")]
    assert plan(PRO, gpu="H100", tp=8, pp=2, max_model_len=4096).warnings == [HUMMING.format("560.0")]
    # a given pool is vLLM's own: nothing to bound on Hopper
    assert plan(FLASH, **H100_4, kv_cache_memory_bytes=20 * 2**30).warnings == []   # 20 GiB


def test_sm10_warning_word_for_word():
    """B200 plans only from a given pool (the refusal otherwise); its warning does not depend on the release."""
    words = ("vLLM's DeepSeek-V4 MoE on SM 10.x runs FlashInfer's TRTLLM kernel, whose scratch kvplan has not read: "
             "the activation figure leaves it out, so the check that weights, activation and the given pool fit the "
             "card passes by up to that much too easily; compare with vLLM's start-up log")
    assert plan(FLASH, **{**H100_4, "gpu": "B200"}, kv_cache_memory_bytes=20 * 2**30).warnings == [words]   # 20 GiB


MARLIN_HEAD = ("vLLM {0}'s DeepSeek-V4 profile run is sized from its source (a CSA layer's largest live set, at the "
               "indexer's 512 MiB logits stand-in or at the pad of q, and the shared workspace with Marlin's MoE "
               "buffers, the one Hopper MXFP4 kernel of this release)")
MARLIN_TAIL = ("; the CUDA-graph estimate beside it is kvplan's generic one; pass vLLM's 'Available KV cache memory' "
               "as --kv-cache-memory-bytes to plan the KV from it")


def test_marlin_warning_of_an_eager_release_word_for_word():
    """0.23-0.31 run eagerly and their Hopper MoE is Marlin's alone: the head and the tail, no range."""
    assert plan(FLASH, **H100_4, engine_version="0.31.0").warnings == [MARLIN_HEAD.format("0.31") + MARLIN_TAIL]
    assert plan(FLASH, **H100_4, engine_version="0.23.0", kv_dtype="fp8").warnings == [
        MARLIN_HEAD.format("0.23") + MARLIN_TAIL]


def test_marlin_warning_of_a_compiled_release_word_for_word():
    """0.20.1-0.22 compile the model: the previous layer's output and residual, 8,192 tokens x (4,096 x 2 + 4 x
    4,096 x 2 + 4 x 4 + 16 x 4) = 8,192 x 41,040 = 336,199,680 B = 320.625 MiB -> '320.6' (Flash at TP 4)."""
    for version, v in (("0.22.0", "0.22"), ("0.20.1", "0.20")):
        p = plan(FLASH, **H100_4, engine_version=version, kv_dtype="fp8")
        assert p.warnings == [
            MARLIN_HEAD.format(v) + f"; {v} compiles the model (@support_torch_compile) around the attention's eager "
            "custom op: kvplan holds the eager live set, and inductor may free the previous layer's output and "
            "residual before the indexer's moment, so the profile run takes 0 to 320.6 MiB less than kvplan's "
            "activation figure and the pool is low by up to as much" + MARLIN_TAIL]
