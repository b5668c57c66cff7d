"""Issue #26: tests for the survivors of kvplan/planning/engines/sglang_pool.py (SGLang's memory pool). Each calls
the pure function on a boundary (a card-memory class edge, a version edge, a ratio that floors exactly) and pins
the result by hand arithmetic written beside it, with the SGLang source the module cites."""

from __future__ import annotations


import pytest

from kvplan.errors import WorkloadError
from kvplan.planning.engines.sglang_pool import (
    _class_fraction, _draft_reserve, _graph_reserve, batch_defaults, budget_bytes, cell_size, default_mem_fraction,
    mamba_fixed, mamba_requests_ratio, mamba_split, max_running_requests, resolve_fraction, SglangSettings, sglang_pool,
    stage_pool, swa_floor_full_tokens, swa_full_tokens, vlm_factor)
from kvplan.planning.engines.vllm_kv import VllmLayerSpec

S = SglangSettings
V051 = (0, 5, 1)


# ------------------------------------------------------------------ _class_fraction (0.5.1 server_args.py:351-395)

def test_class_fraction_small_class_edge_at_35_gb_with_p_6():
    s = S(tensor_parallel_size=2, pipeline_parallel_size=3, version=V051)   # P = 2 x 3 = 6
    # 35 x 1024 - 1 = 35839 MB: (2.8 + 6 / 10) = 3.4 GB = 3481.6 MB; (35839 - 3481.6) / 35839 = 0.90285 -> 0.903
    f, r = _class_fraction(35839, s)
    assert f == 0.903
    assert r == pytest.approx(3481.6 * 1048576, abs=2)   # 3481.6 MB x 1,048,576 = 3,650,791,014.4 B
    # 35 x 1024 = 35840 MB: (9.5 + 6 / 2) = 12.5 GB = 12800 MB; 23040 / 35840 = 0.642857 -> 0.643
    f, r = _class_fraction(35840, s)
    assert f == 0.643
    assert r == 12800 * 1048576   # 12,800 x 1,048,576 = 13,421,772,800


def test_class_fraction_middle_class_edge_at_90_gb():
    s = S(tensor_parallel_size=2, pipeline_parallel_size=3, version=V051)   # P = 6
    # 90 x 1024 - 1 = 92159 MB: 12.5 GB = 12800 MB; 79359 / 92159 = 0.86111 -> 0.861
    f, r = _class_fraction(92159, s)
    assert (f, r) == (0.861, 12800 * 1048576)   # 12,800 MB x 1,048,576
    # 92160 MB: (12 + 6 / 2) = 15 GB = 15360 MB; 76800 / 92160 = 0.83333 -> 0.833
    f, r = _class_fraction(92160, s)
    assert (f, r) == (0.833, 15360 * 1048576)   # 15,360 MB x 1,048,576


def test_class_fraction_large_class_edge_at_160_gb():
    s = S(tensor_parallel_size=2, pipeline_parallel_size=3, version=V051)   # P = 6
    # 160 x 1024 - 1 = 163839 MB: 15 GB = 15360 MB; 148479 / 163839 = 0.906249 -> 0.906
    assert _class_fraction(163839, s) == (0.906, 15360 * 1048576)   # 15,360 MB x 1,048,576
    # 163840 MB: 32 GB = 32768 MB; 131072 / 163840 = 0.8 exactly
    assert _class_fraction(163840, s) == (0.8, 32768 * 1048576)   # 32,768 MB x 1,048,576


def test_class_fraction_speculative_and_dp_attention_extras_on_h100():
    # nvidia-smi's H100 81,559 MiB, TP1: 9.5 + 1 / 2 = 10 GB = 10240 MB (the module's docstring: 0.874)
    h100 = 81559   # MB, nvidia-smi memory.total of an H100 80GB
    assert _class_fraction(h100, S(version=V051)) == (0.874, 10240 * 1048576)   # 71319 / 81559 = 0.87445
    # +2048 MB for a speculative algorithm: 12288 MB; 69271 / 81559 = 0.84933 -> 0.849
    assert _class_fraction(h100, S(version=V051, speculative="EAGLE3")) == (0.849, 12288 * 1048576)  # 12,288 MB
    # +4096 MB for DP attention (N = 2 > 1): 14336 MB; 67223 / 81559 = 0.82422 -> 0.824
    assert _class_fraction(h100, S(version=V051, dp_attention=2)) == (0.824, 14336 * 1048576)  # 14,336 MB
    # both: 10240 + 2048 + 4096 = 16384 MB; 65175 / 81559 = 0.79911 -> 0.799
    assert _class_fraction(h100, S(version=V051, dp_attention=2, speculative="EAGLE3")) == \
        (0.799, 16384 * 1048576)  # 16,384 MB = 10,240 + 2,048 + 4,096


def test_class_fraction_rounds_to_three_places():
    # 81559 MB, TP1: 71319 / 81559 = 0.874447... -> 0.874 (not 0.8744, not 1)
    f, _ = _class_fraction(81559, S(version=V051))   # 81,559 MB H100
    assert f == 0.874 and isinstance(f, float)


# ------------------------------------------------------------------ mamba_fixed / mamba_requests_ratio

def test_mamba_fixed_version_edges():
    # 0.5.2-0.5.3 every hybrid; Mamba-2 through 0.5.6 (model_runner.py "disable radix cache")
    assert mamba_fixed("gdn", (0, 5, 3)) is True
    assert mamba_fixed("gdn", (0, 5, 4)) is False
    assert mamba_fixed("gdn", (0, 5, 5)) is False
    assert mamba_fixed("mamba2", (0, 5, 5)) is True
    assert mamba_fixed("mamba2", (0, 5, 6)) is True
    assert mamba_fixed("mamba2", (0, 5, 7)) is False


def test_mamba_requests_ratio_edges():
    assert mamba_requests_ratio("mamba2", (0, 5, 5)) == 1   # radix cache off: 1 slot a request
    assert mamba_requests_ratio("gdn", (0, 5, 5)) == 3      # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
    assert mamba_requests_ratio("gdn", (0, 5, 13)) == 3
    assert mamba_requests_ratio("gdn", (0, 5, 14)) == 5     # 3 + 2 (0.5.14 server_args.py extra_buffer)


# ------------------------------------------------------------------ mamba_split

def test_mamba_split_fixed_slots():
    per = 1000   # bytes a request (a round figure)
    # 0.5.3 (profile_max_num_token): 512 // attention DP = 512 // 3 = 170 slots, 170 x 1000 = 170,000 B
    assert mamba_split(10**9, per, 3, "gdn", S(version=(0, 5, 3))) == (170, 170000)   # 512 // 3 = 170
    # Mamba-2 at 0.5.4 and 0.5.5 (radix cache off through 0.5.6): 512 slots whatever the DP
    assert mamba_split(10**9, per, 3, "mamba2", S(version=(0, 5, 4))) == (512, 512000)   # 512 x 1000
    assert mamba_split(10**9, per, 3, "mamba2", S(version=(0, 5, 5))) == (512, 512000)   # 512 x 1000
    slots, _ = mamba_split(10**9, per, 3, "gdn", S(version=(0, 5, 3)))
    assert type(slots) is int


def test_mamba_split_budget_from_0_5_17_with_padding_slot():
    per = 1000
    # rest 19,500: budget = 19500 x 0.9 / 1.9 = 9236.8; K = (9236.8 - 1000) // 1000 = 8; pool (8 + 1) x 1000
    assert mamba_split(19500, per, 1, "gdn", S(version=(0, 5, 17))) == (8, 9000)   # 9 slots x 1,000 B
    # 0.5.16: K = 9236.8 // 1000 = 9, pool 9 x 1000
    assert mamba_split(19500, per, 1, "gdn", S(version=(0, 5, 16))) == (9, 9000)   # 9 x 1,000 B
    # rest 2,000: budget 947.4 < one request: K = max(0, -1) = 0 and no pool at all ("Not enough GPU memory")
    assert mamba_split(2000, per, 1, "gdn", S(version=(0, 5, 17))) == (0, 0)   # 2,000 x 0.9 / 1.9 = 947.4


def test_mamba_split_gdn_divides_by_dp_before_0_5_7():
    per = 1000
    # 0.5.6 GDN: K = 9236.8 // 1000 = 9, // DP 2 = 4 slots, 4,000 B (handle_max_mamba_cache 0.5.4-0.5.6)
    assert mamba_split(19500, per, 2, "gdn", S(version=(0, 5, 6))) == (4, 4000)   # 19,500 x 0.9 / 1.9 = 9236.8
    # 0.5.7: no division: 9 slots
    assert mamba_split(19500, per, 2, "gdn", S(version=(0, 5, 7))) == (9, 9000)   # 19,500 rest -> 9 x 1,000
    # Mamba-2 from 0.5.7: no division either
    assert mamba_split(19500, per, 2, "mamba2", S(version=(0, 5, 10))) == (9, 9000)   # 9 x 1,000 B
    slots, _ = mamba_split(19500, per, 2, "gdn", S(version=(0, 5, 6)))
    assert type(slots) is int


# ------------------------------------------------------------------ _draft_reserve / _graph_reserve

def test_draft_reserve_by_algorithm_and_version():
    # 0.5.3 server_args.py:663-669: STANDALONE 6 GB, others 2 GB; 0.5.10-0.5.13: 4 GB
    assert _draft_reserve(S(speculative="STANDALONE", version=(0, 5, 3))) == 6144   # 6 x 1024
    assert _draft_reserve(S(speculative="EAGLE3", version=(0, 5, 9))) == 2048       # 2 x 1024
    assert _draft_reserve(S(speculative="EAGLE3", version=(0, 5, 10))) == 4096      # 4 x 1024
    assert _draft_reserve(S(speculative="STANDALONE", version=(0, 5, 14))) == 0


def test_graph_reserve_dp_padding_edges():
    v9 = (0, 5, 9)   # before the prefill graphs (0.5.10)
    assert _graph_reserve(8192, 300, S(dp_attention=2, version=v9)) == 1800    # 300 x 2 x 3 MB
    assert _graph_reserve(8192, 301, S(dp_attention=2, version=v9)) == 2709    # 301 x 2 x 4.5 MB
    assert _graph_reserve(8192, 256, S(dp_attention=2, version=v9)) == 1536    # 256 x 2 x 3 MB
    assert _graph_reserve(8192, 256, S(dp_attention=1, version=v9)) == 0


def test_graph_reserve_prefill_graphs_add_to_dp_padding():
    v10 = (0, 5, 10)
    # MLA: 1536 MB for the prefill graphs + 256 x 2 x 3 = 1536 MB padding = 3072
    assert _graph_reserve(8192, 256, S(dp_attention=2, version=v10, mla=True)) == 3072   # 1,536 + 1,536
    # 58 sizes up to 8,192 tokens x 8 MB = 464, + 1536 padding = 2000
    assert _graph_reserve(8192, 256, S(dp_attention=2, version=v10)) == 2000   # 464 + 1,536


# ------------------------------------------------------------------ default_mem_fraction

def test_default_fraction_before_0_5_reserve_is_card_times_0_12():
    card = 100 * 2**30   # 100 GiB = 107,374,182,400 B
    f, r = default_mem_fraction(card, S(version=(0, 4, 9)))
    assert f == 0.88
    assert r == pytest.approx(107374182400 * 0.12, abs=2)   # 0.12 x 107,374,182,400 = 12,884,901,888


def test_default_fraction_10_gb_floor_over_60_gb():
    small = dict(chunked_prefill_size=2048, cuda_graph_max_bs=8, version=(0, 5, 9))
    # reserve 512 + 2048 x 1.5 + 8 x 2 + 1 / 8 x 1024 = 512 + 3072 + 16 + 128 = 3728 MB (0.5.9: no prefill graphs)
    # exactly 60 GiB = 61440 MB: no floor (memory > 60 x 1024 is false): 57712 / 61440 = 0.93932 -> 0.939
    assert default_mem_fraction(60 * 2**30, S(**small)) == (0.939, 3728 * 1048576)   # 3,728 MB x 1,048,576
    # 61441 MB: floor 10240 MB: 51201 / 61441 = 0.83334 -> 0.833
    assert default_mem_fraction(61441 * 2**20, S(**small)) == (0.833, 10240 * 1048576)   # 10,240 MB floor


# ------------------------------------------------------------------ resolve_fraction

def test_resolve_fraction_refuses_a_default_of_exactly_zero():
    # 0.5.1, TP1 under 35 GB: (2.8 + 0.1) GB = 2969.6 MB; a card of 3,113,851,290 B (2969.6 x 1,048,576 rounded
    # up) leaves 0.4 B: round(1.3e-10, 3) = 0.0, refused as a reserve larger than the card
    with pytest.raises(WorkloadError) as e:
        resolve_fraction(3113851290, S(version=V051))   # 3,113,851,290 B = 2.90 GiB
    assert str(e.value) == ("a GPU of 2.90 GiB is smaller than the 2.90 GiB SGLang reserves for activations and "
                            "CUDA graphs: pick a larger GPU")


def test_resolve_fraction_given_bounds():
    with pytest.raises(WorkloadError) as e:
        resolve_fraction(2**30, S(mem_fraction_static=0.0))
    assert str(e.value) == "mem_fraction_static must be in (0, 1], got 0.0"
    with pytest.raises(WorkloadError) as e:
        resolve_fraction(2**30, S(mem_fraction_static=1.5))
    assert str(e.value) == "mem_fraction_static must be in (0, 1], got 1.5"
    assert resolve_fraction(2**30, S(mem_fraction_static=1.0)) == 1.0


# ------------------------------------------------------------------ max_running_requests (resolve_max_num_reqs)

def test_max_running_requests_context_one_and_old_version():
    old = S(version=(0, 4, 9))   # before 0.5: no half-the-tokens cap
    # 6 tokens / context 1 x 512 = 3072 in [2048, 4096]
    assert max_running_requests(6, 1, old) == 3072   # 6 x 512
    # 0.5.0: min(2048, 1000 // 2 = 500) = 500
    assert max_running_requests(1000, 1000, S(version=(0, 5, 0))) == 500   # 1,000 tokens // 2
    assert max_running_requests(1000, 1000, S(version=(0, 6, 0))) == 500   # 1,000 // 2 (a later minor too)
    # 2 tokens: 2 // 2 = 1 running request
    assert max_running_requests(2, 1, S()) == 1


# ------------------------------------------------------------------ swa_full_tokens / swa_floor_full_tokens

def test_swa_full_tokens_version_edge_0_5_11():
    # kv 1019, full cell 10, SWA cell 10, ratio 0.8: divisor 10 + 8 = 18
    # 0.5.11+: 1019 // 18 = 56; 0.5.10: plain 1019 // 20 = 50, int(50 x 20 / 18) = int(55.56) = 55
    assert swa_full_tokens(1019, 10, 10, S(version=(0, 5, 11))) == (56, 18.0)   # 1,019 // 18 = 56
    assert swa_full_tokens(1019, 10, 10, S(version=(0, 5, 10))) == (55, 18.0)   # 1,000 / 18 = 55.56


def test_swa_floor_version_edge_and_none():
    gpt_oss = dict(page_size=64)
    assert swa_floor_full_tokens(128, S(version=(0, 5, 19), **gpt_oss)) == 320   # docstring: int(320 x 0.8) = 256
    assert swa_floor_full_tokens(128, S(version=(0, 5, 18), **gpt_oss)) == 0
    assert swa_floor_full_tokens(None, S(**gpt_oss)) == 0


def test_swa_floor_window_not_a_page_multiple():
    # window 100, page 64: (164 // 64) x 64 + 64 = 192; ceil(192 / 0.8) = 240, int(240 x 0.8) = 192 -> 240 in
    # pages: 256
    assert swa_floor_full_tokens(100, S(page_size=64)) == 256


def test_swa_floor_ratio_above_one():
    # ratio 2, window 128, page 64: swa 256; ceil(256 / 2) = 128, int(128 x 2) = 256 >= 256 -> 128
    assert swa_floor_full_tokens(128, S(page_size=64, swa_full_tokens_ratio=2.0)) == 128


def test_swa_floor_float_ratio_steps_up_one_token():
    # ratio 0.7, window 61, page 1: swa 63; ceil(63 / 0.7) = 90 but 90 x 0.7 is 62.99999999999999 in floats
    # (int 62), 91 x 0.7 = 63.7 -> 91. (A mutant that makes this search loop for good is a timeout, i.e. killed, under
    # tools/mutation.py: no alarm here, whose SIGALRM would clash with mutmut's own timers)
    assert swa_floor_full_tokens(61, S(swa_full_tokens_ratio=0.7)) == 91


# ------------------------------------------------------------------ stage_pool / cell_size / budget_bytes

def test_stage_pool_chunked_layers_join_the_full_pool():
    specs = [VllmLayerSpec("chunked", 100), VllmLayerSpec("full", 100)]
    p = stage_pool(10000, specs, S())   # 10,000 B / (100 + 100) = 50 tokens
    assert (p.tokens, p.cell_bytes, p.swa_tokens, p.state_slots, p.state_bytes) == (50, 200, 0, 0, 0)


def test_stage_pool_all_sliding_model_is_its_swa_pool():
    specs = [VllmLayerSpec("sliding", 100, window=512)]
    p = stage_pool(10000, specs, S())   # 10,000 / 100 = 100 tokens, all SWA
    assert (p.tokens, p.full_tokens, p.swa_tokens, p.divisor) == (100, 100, 100, 100)


def test_stage_pool_no_attention_layers_has_no_tokens():
    p = stage_pool(10000, [], S())   # 10,000 B, divisor 0
    assert (p.tokens, p.swa_tokens, p.divisor) == (0, 0, 0)


def test_cell_size_skips_mamba_layers():
    specs = [VllmLayerSpec("full", 100), VllmLayerSpec("mamba", 7, state_bytes=5000)]   # 5,000 B state
    assert cell_size(specs) == 100


def test_budget_bytes_default_taken_is_zero():
    # fraction 1: rest = 8e9 - 408,021,893 (int(0.38 GiB)) - 1e9 - 161,061,273 (int(0.15 GiB)) = 6,430,916,834
    assert budget_bytes(8 * 10**9, 1.0, 10**9) == 6430916834   # 8,000,000,000 - ... = 6,430,916,834


def test_batch_defaults_20_gb_edge():
    # exactly 20 x 1024 MB is the 20-35 GB tier (memory_mb < 20480 is false): 24 graphs below TP4 in 0.5.5-0.5.19
    assert batch_defaults(20 * 1024, 1, (0, 5, 10)) == (2048, 24)   # 20,480 MB (0.5.10 server_args.py)
    assert batch_defaults(20 * 1024 - 1, 1, (0, 5, 10)) == (2048, 8)   # 20,479 MB: T4 / 4080 tier


# ------------------------------------------------------------------ sglang_pool

def test_sglang_pool_fraction_from_card_and_extra_bytes():
    specs = [VllmLayerSpec("full", 1000)]
    total = 80 * 2**30   # 85,899,345,920 B
    # the fraction given: pinned on the result
    p = sglang_pool(total, 0, specs, S(mem_fraction_static=0.5), 1000)
    assert p.mem_fraction_static == 0.5
    # card_bytes 81,559 MiB (nvidia-smi H100) at 0.5.1: 0.874 (the docstring), not the 80 GiB total's
    # (81920 - 10240) / 81920 = 0.875
    p = sglang_pool(total, 0, specs, S(version=V051), 1000, card_bytes=81559 * 2**20)   # 81,559 MiB
    assert p.mem_fraction_static == 0.874
    p = sglang_pool(total, 0, specs, S(version=V051), 1000)
    assert p.mem_fraction_static == 0.875   # 71,680 / 81,920
    # extra bytes come off the rest: fraction 1, weights 0, extra 1,000,000
    a = sglang_pool(total, 0, specs, S(mem_fraction_static=1.0), 1000)
    b = sglang_pool(total, 0, specs, S(mem_fraction_static=1.0), 1000, extra_bytes=10**6)
    assert a.rest_bytes - b.rest_bytes == 10**6   # 1,000,000 B of draft weights


# ------------------------------------------------------------------ vlm_factor

def test_vlm_factor_clamps_at_1_05():
    # 1 layer x 1024^2 / (24 x 1024^2) = 1/24: 1 - 0.1 x (1/24 - 1) = 1.0958 -> clamp 1.05; 0.95 x 1.05 = 0.9975
    assert vlm_factor(("LlavaLlamaForCausalLM", 1, 1024), (0, 5, 1)) == pytest.approx(0.9975)   # hidden 1024


def test_swa_full_tokens_floors_in_floats_as_sglang_does():
    # 0.5.11+ calculate_pool_sizes: int(kv // (full + ratio x swa)); 1 + 0.8 is 1.8000000000000000444 in floats,
    # so 9 // 1.8 is 4.0 (5 x 1.8000000000000000444 > 9) while 9 / 1.8 rounds to 5.0
    assert swa_full_tokens(9, 1, 1, S(version=(0, 5, 11))) == (4, 1.8)
