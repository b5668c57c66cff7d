"""kvplan's vLLM profile on published start-ups outside its calibration set (validation/vllm_holdout.csv), and
the rules those logs taught it: MXFP4 expert padding per kernel, the V0 engine's chunked prefill above 32K,
the versions whose sampler profile keeps more buffers, MLA block sizes off Hopper, RoPE table widths."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

import kvplan

from kvplan.config.load import load_model
from kvplan.dtypes import resolve_dtype
from kvplan.errors import WorkloadError
from kvplan.gpus import custom_gpu, resolve_gpu
from kvplan.planning.engines.vllm_mxfp4 import padding_bytes
from kvplan.planning.engines.vllm_profile import batch_defaults, parse_version
from kvplan.planning.planner import plan
from kvplan.units import GiB, MiB
from kvplan.weights.split import rope_cache_bytes as _rope_cache
from validation import vllm_holdout

REPO = Path(__file__).resolve().parents[1]
HOLDOUT = REPO / "validation" / "vllm_holdout.csv"


def _rows() -> dict[str, dict]:
    with HOLDOUT.open() as f:
        return {row["run_id"]: row for row in csv.DictReader(f)}


# ------------------------------------------------------------------------------------- MXFP4 padding


def test_gpt_oss_20b_on_an_a100_matches_the_published_log():
    """vLLM 0.19 on an A100 printed 'Model loading took 13.72 GiB' for gpt-oss-20b (util 0.65, 131,072 tokens)
    and 'Available KV cache memory: 36.56 GiB'; the checkpoint itself is 12.84 GiB. The Marlin MoE kernel pads
    the experts: intermediate 2880 -> 2944, hidden 2880 -> 3072, per layer 32 x (5888 x 1634 + 3072 x 1566)
    = 461,815,808 B against 32 x (5760 x 1532 + 2880 x 1532) = 423,567,360 B: +38,248,448 B x 24 layers."""
    p = plan("openai/gpt-oss-20b", gpu="A100", max_model_len=131072, gpu_memory_utilization=0.65)
    model = load_model("openai/gpt-oss-20b")

    extra, line = padding_bytes(model.require_arch(), resolve_gpu("A100"), 1, range(24))
    # 24 layers x the docstring's 38,248,448 B
    assert extra == 38_248_448 * 24 == 917_962_752
    assert "Marlin" in line and "2,880 -> 2,944" in line and "2,880 -> 3,072" in line
    assert p.weights_bytes / GiB == pytest.approx(13.72, rel=0.005)
    assert p.kv_pool_bytes / GiB == pytest.approx(36.56, rel=0.015)
    assert any("Marlin" in n for n in p.notes)


def test_mxfp4_padding_follows_the_kernel_of_the_gpu():
    model = load_model("openai/gpt-oss-20b")

    shape = model.require_arch()
    # B200 (SM100, FlashInfer): both to 256; TP2 gives 1440 per rank -> 1536, hidden 2880 -> 3072
    b200, _ = padding_bytes(shape, resolve_gpu("B200"), 2, range(24))
    assert b200 == 29_165_568 * 24
    # unknown kernels (AMD, a custom card) and unquantized models: nothing added
    assert padding_bytes(shape, resolve_gpu("MI300X"), 1, range(24)) == (0, "")
    assert padding_bytes(shape, custom_gpu(80), 1, range(24)) == (0, "")
    dense = load_model("meta-llama/Llama-3.1-8B").require_arch()
    assert padding_bytes(dense, resolve_gpu("A100"), 1, range(32)) == (0, "")
    # a pipeline stage pads its own layers only
    half, _ = padding_bytes(shape, resolve_gpu("A100"), 1, range(12))
    # 12 of 24 layers x 38,248,448 B = half of 917,962,752
    assert half * 2 == 917_962_752
    h100 = plan("openai/gpt-oss-20b", gpu="H100", max_model_len=8192)
    assert any("triton_kernels" in n for n in h100.notes)


# ------------------------------------------------------------------------------------- engine versions


def test_v0_engine_turns_chunked_prefill_on_above_32k():
    """Llama-3.2-1B at 105,088 tokens on vLLM 0.6.4 (a GTX 1080): the profile kept the sampler, not a
    105k-token forward (7.92 GiB x 0.95 - 2.32 weights - 0.44 non-torch - 3.60 KV = 1.16 GiB)."""
    v064 = parse_version("0.6.4")
    assert batch_defaults(8 * GiB, "GTX 1080", "api_server", v064, 105088) == (512, 256)
    # vLLM 0.6.4 (V0, vllm_profile.batch_defaults' docstring): above 32K chunked prefill, 512 tokens / 256
    # sequences; else max(max_model_len, 2,048) = 20,000 / 256
    assert batch_defaults(24 * GiB, "RTX-3090", "api_server", v064, 20000) == (20000, 256)
    row = _rows()["xlisp-jimw-vllm/llama-3.2-1b-gtx1080-fp16-105088"]
    result = vllm_holdout.check_row(row)
    measured, predicted, error = result["pool"]
    assert measured == 3.60 and abs(error) < 3


def test_vllm_0_10_sampler_profile_keeps_no_extra_buffers():
    """Qwen2-7B-Instruct on an A100 with vLLM 0.10.1.1 at utilisation 0.25 and 0.5 (TP1) and 0.5 (TP2): the KV
    pool comes within 1.5 % (it was 19 % low while the 0.14-0.16 sampler extra was applied to every version
    before 0.17)."""
    holdout = vllm_holdout
    for run_id, row in _rows().items():
        if run_id.startswith("dennislee22-vLLM-benchmarking/"):
            measured, predicted, error = holdout.check_row(row)["pool"]
            assert abs(error) < 1.5, (run_id, measured, predicted)


# ------------------------------------------------------------------------------------- KV accounting


def test_mla_blocks_are_16_tokens_off_hopper():
    """DeepSeek-V2-Lite on L4s (TP2 PP2) printed 807,792 tokens = 50,487 blocks of 16 (not a multiple of 64):
    FlashMLA (64-token blocks) needs SM90, Ada runs Triton MLA."""
    assert plan("deepseek-ai/DeepSeek-V2-Lite", gpu="L4", tp=2, pp=2, max_model_len=1024).block_size == 16
    assert plan("deepseek-ai/DeepSeek-V2-Lite", gpu="H100", max_model_len=1024).block_size == 64
    assert plan("meta-llama/Llama-3.1-8B", gpu="L4", max_model_len=1024).block_size == 16


def test_rope_tables_follow_the_rotating_width():
    bf16 = resolve_dtype("bf16")
    # Qwen3-Next rotates a quarter of its 256-wide heads: 262,144 x 64 x 2 B = 32 MiB, not 128
    assert _rope_cache(load_model("Qwen/Qwen3-Next-80B-A3B-Thinking"), bf16) == 32 * MiB
    # GPT-J: rotary_dim 64 of 256
    assert _rope_cache(load_model("EleutherAI/gpt-j-6b"), bf16) == 2048 * 64 * 2
    # Gemma 3 keeps a local and a global table: 2 x 32,768 x 256 x 2 B
    assert _rope_cache(load_model("google/gemma-3-1b-it"), bf16) == 2 * 32768 * 256 * 2
    # MLA: the 64-wide RoPE key over 163,840 positions
    assert _rope_cache(load_model("deepseek-ai/DeepSeek-V3"), bf16) == 163840 * 64 * 2
    # Llama-3.1-8B unchanged: 131,072 x 128 x 2 B = 32 MiB
    assert _rope_cache(load_model("meta-llama/Llama-3.1-8B"), bf16) == 32 * MiB
    assert _rope_cache(load_model("meta-llama/Llama-3.1-8B"), bf16, per_layer_type=True) == 32 * MiB


# gemma-4 config.json max_position_embeddings: 262,144 (31B), 131,072 (E4B)
@pytest.mark.parametrize("name, positions", [("google/gemma-4-31B-it", 262_144), ("google/gemma-4-E4B-it", 131_072)])
def test_gemma4_rope_tables_per_layer_type(name, positions):
    """vLLM builds a table per layer type: the sliding layers' default RoPE over the 256-wide head, and the full
    layers' proportional RoPE (partial_rotary_factor 0.25) as a Gemma4RotaryEmbedding over the whole 512-wide head
    (0.23.0 layers/rotary_embedding/gemma4_rope.py :48-50 'rotary_dim = head_size'), in the model dtype.
    gemma-4-31B-it: 262,144 x (256 + 512) x 2 B = 384 MiB, 256 MiB more than one 256-wide table; with it the Kaggle
    log's 58.99 GiB of weights is -0.62 % off, not -1.04 %."""
    bf16 = resolve_dtype("bf16")
    model = load_model(name)
    assert _rope_cache(model, bf16, per_layer_type=True) == positions * (256 + 512) * 2
    assert _rope_cache(model, bf16) == positions * 256 * 2     # SGLang's (its Gemma 4 tables not read)


# ------------------------------------------------------------------------------------- the whole holdout set


def test_the_report_regenerates_byte_identical(tmp_path):
    """Every row's every check is pinned: validation/vllm_holdout.md and vllm_holdout_results.csv, written again by
    the script, equal the committed files byte for byte, so a rule changed for one log cannot move another unseen
    (regenerate with `python validation/vllm_holdout.py` and read the diff before committing it)."""
    assert vllm_holdout.main(["--out", str(tmp_path)]) == 0
    for name in ("vllm_holdout.md", "vllm_holdout_results.csv"):
        assert (tmp_path / name).read_bytes() == (REPO / "validation" / name).read_bytes(), name


def test_holdout_kv_accounting_is_exact_within_print_rounding():
    """From the KV pool a log printed, kvplan's tokens and concurrency, every usable row. The rows before vLLM 0.20
    are exact within print rounding but for an LMCache run; from 0.20 every token miss over 0.1 % is explained
    from its log (vllm_holdout.MISSES), and none is over 3.5 % (a KV dtype kvplan does not plan)."""
    results = [vllm_holdout.check_row(row) for row in _rows().values()]
    older = [r for r in results if not vllm_holdout.newer(r) and r.get("tokens")]
    assert len(older) >= 16 and statistics.median(abs(r["tokens"][2]) for r in older) < 0.1
    assert [r["run_id"] for r in older if abs(r["tokens"][2]) >= 0.1] == [
        "issue-vllm-21348/qwen3-235b-a22b-fp8-h100x4-tp4-lmcache"]   # an LMCache connector (MISSES)
    newer = [r for r in results if vllm_holdout.newer(r)]
    tokens = [r for r in newer if r.get("tokens")]
    # 44 rows: the two DeepSeek-V4-Flash logs (0.23.0 on H200 NVLs, 0731 at 0.31.1rc1 on H100s) are within print
    # rounding in packed layouts of their own (tests/test_vllm_dsv4_logs.py)
    assert len(tokens) == 44 and statistics.median(abs(r["tokens"][2]) for r in tokens) < 0.05
    assert max(abs(r["tokens"][2]) for r in tokens) < 3.5
    # over print rounding (a two-decimal GiB figure of a 3 GiB pool: 0.17 %), each miss is explained from its log,
    # or is MiniMax M2.7's pool read from the author's prose ("23.25 GiB KV cache is needed"), 0.9 %
    unexplained = [r["run_id"] for r in tokens if abs(r["tokens"][2]) > 0.2 and not any(
        part in r["run_id"] for part in vllm_holdout.MISSES)]
    assert unexplained == ["eugr-spark-396/minimax-m2.7-awq-2xgb10-tp2-196608-util0.85"]
    weights = [abs(r["weights"][2]) for r in results if r.get("weights") and r["weights"][2] is not None]
    assert len(weights) >= 30 and statistics.median(weights) < 0.5 and max(weights) < 3
    skipped = {r["run_id"] for r in results if r["reason"].startswith("no bundled config")}
    assert any("gpt-oss-120b" in s for s in skipped)


# the Qwen3.5 / 3.6 hybrids the rules of vllm_holdout.LEARNED reproduce to the token (float32 GDN state, the
# mamba_cache_mode's state blocks, Qwen's MTP layer and widened conv state), vLLM 0.20-0.24
GDN_EXACT = ("qwen3.6-27b-nvfp4-gb10", "qwen3.6-35b-a3b-nvfp4-rtx5090", "qwen3.6-35b-a3b-nvfp4-wsl",
             "qwen3.6-27b-text-nvfp4-mtp-wsl", "qwen3.6-35b-a3b-nvfp4-dgxspark", "qwen3.6-35b-a3b-nvfp4-mtp2",
             "prismaquant-4.75bit-mtp3")


# Every vLLM >= 0.20 row kvplan predicts from the card alone (its own budget, blocks and tokens): the tokens the
# log printed and kvplan's current error, pinned, so a rule changed for one log cannot move another unseen.
# (printed tokens, error % of kvplan's tokens); the version each is planned at is in the run id or its row.
FROM_THE_CARD = {
    "fs57923772900/qwen3-235b-a22b-instruct-2507-fp8-4xrtxpro6000-tp4-32768-util0.90-v0.27-inferred": (621392, +4.67),
    "fs59292590441/llama-3.1-8b-instruct-a40-tp1-4096-util0.90-v0.26.0": (195760, +2.38),
    "fs61464053627/qwen3-14b-fp8-rtx4090-wsl-tp1-8192-util0.90-v0.27.1": (29248, +27.95),
    "fs61464053627/qwen3-8b-fp8-rtx4090-wsl-tp1-2048-util0.90-v0.27.1": (90080, -1.40),
    "fs61510271682/qwen2.5-7b-instruct-bf16-rtx4090-wsl-tp1-8192-util0.92-v0.27.1": (102544, +31.25),
    "fs61510271682/qwen2.5-7b-instruct-fp8-dynamic-rtx4090-wsl-tp1-8192-util0.92-v0.27.1": (230352, +7.83),
    "fs62752965317/qwen2.5-7b-class-rtx5090-inferred-tp1-8192-util0.90-v0.24.0": (223152, +0.35),
    "fs61585879089/qwen3-8b-bf16-lora2-rtx4090-wsl-tp1-4096-util0.90-v0.27.1": (33712, +19.79),
    "fs61585879089/qwen3-8b-bf16-rtx4090-wsl-tp1-4096-util0.85-v0.27.1": (34032, -3.10),
    "fs61585879089/qwen3-8b-bf16-rtx4090-wsl-tp1-4096-util0.90-v0.27.1": (42768, -2.47),
    "fs61815222665/qwen2.5-0.5b-instruct-rtx4090-wsl-llmclass-util0.92-v0.27.1": (1793232, -0.29),
    "fs61918553602/qwen2.5-0.5b-instruct-rtx4090-wsl-tp1-2048-util0.85-v0.27.1": (1629520, +1.70),
    "fs65828810424/qwen2.5-1.5b-instruct-rtx-a4000-tp1-8192-util0.9-v0.26.0": (395264, +1.98),
    "fs67109588529/qwen2.5-1.5b-instruct-sm75-24gb-tp1-4096-util0.9-eager-fp16-v0.28.1rc1dev-fork": (650208, -0.20),
    "fs67126228976/qwen3-reranker-8b-rtxpro6000-colab-tp1-1024-util0.85-v0.20.x-inferred": (454016, -0.32),
    "fs67144197265/qwen2.5-7b-instruct-tp1-4096-util0.95-asyncengine-v0.22.0": (492912, +1.17),
    "fs69421856836/qwen2.5-0.5b-16gb-tp1-32768-util0.9-fp16-v2runner-v0.26.0": (1043072, -1.53),
    "fs70231782181/llama-3.1-8b-class-a100-80gb-tp1-131072-util0.92-v0.31.0": (460496, +0.42),
    "hzk-123-llm-infra-learning-lab/qwen2.5-0.5b-instruct-rtx4090-tp1-2048-util0.85-v0.24.0": (1579808, -0.39),
    "hzk-123-llm-infra-learning-lab/qwen2.5-7b-instruct-rtx4090-tp1-2048-util0.85-v0.24.0": (83376, -0.44),
    "kubesimplify-website/qwen3-32b-rtxpro6000-pp2-0.426": (56640, +10.93),
    "orbit-ai-mi300x-gemma-3-4b-it-tp1-8192-v0.23.0": (1217591, +0.39),
    "kubesimplify-website/qwen3-32b-rtxpro6000-tp2-0.426": (67296, -2.85),
    # one RunPod RTX 4090 worker, vLLM 0.27.1, three starts: the first compiled cold (Inductor's workspace in the
    # profile run: 1.18 against 0.19 GiB of peak activation), the other two reused its cache
    "fs58522340114/qwen3-8b-bf16-rtx4090-runpod-tp1-8192-cold-compile-v0.27.1": (35792, +19.80),
    "fs58522340114/qwen3-8b-bf16-rtx4090-runpod-tp1-8192-warm-compile-v0.27.1": (43040, -0.37),
    # one RTX 5090 server, vLLM 0.24.0: its first start, and a later one (the author: the cache state)
    "fs67163912157/qwen3-8b-bf16-rtx5090-tp1-32768-util0.92-first-start-v0.24.0": (89040, +6.79),
    "fs67163912157/qwen3-8b-bf16-rtx5090-tp1-32768-util0.92-later-start-v0.24.0": (95936, -0.88),
}


def test_holdout_from_the_card_for_todays_releases():
    """Issue #22's acceptance, as it stands: every vLLM >= 0.20 row predicted from the card, its printed tokens and
    kvplan's error pinned (FROM_THE_CARD); each miss over 5 % has its explanation recorded (vllm_holdout.MISSES),
    from its log or naming what kvplan does not model. These 27 rows: median 1.70 %, within the 2 % target; seven
    rows over 5 %, each with its reading: a cold torch.compile, read in one log (the RunPod worker's first start,
    +19.80 %, its cache-hit twin -0.37 %), in an RTX 5090 server's first start by its author (+6.79 %, a later
    start -0.88 %) and inferred from a new compile key in four (the WSL2 box's first --enable-lora start and its
    first starts at 8,192 tokens, whose box prints a first start's cost in its own logs:
    test_the_wsl2_box_prints_its_own_cold_and_warm_starts), and the PP2 start on RTX PRO 6000s (cold too: its first
    stage peaks as its TP1 start does, test_the_pp2_start_on_rtx_pro_6000s_peaks_as_its_tp1_start_not_as_a_forward). The
    Qwen2.5-VL row (one image per prompt, +62.6 % when it was predicted) is not: its plan warns that vLLM's encoder
    profile is not sized (kvplan.planning.engines.vllm_mm.unsized_profile), and the report makes no card check."""
    results = [vllm_holdout.check_row(row) for row in _rows().values()]
    newer = [r for r in results if vllm_holdout.newer(r)]
    card = {r["run_id"]: r["card_tokens"] for r in newer if r.get("card_tokens")}
    # rows added since (other collections) are pinned by the byte-identical report; these keep their figures
    assert set(FROM_THE_CARD) <= set(card), sorted(set(FROM_THE_CARD) - set(card))
    for run_id, (printed, error) in FROM_THE_CARD.items():
        assert card[run_id][0] == printed, run_id
        assert card[run_id][2] == pytest.approx(error, abs=0.005), (run_id, card[run_id])
    errors = sorted(abs(e) for _, e in FROM_THE_CARD.values())
    assert len(errors) == 27 and statistics.median(errors) == pytest.approx(1.70, abs=0.005)
    big = [run for run, (_, _, e) in card.items() if abs(e) > 5]
    assert all(any(part in run for part in vllm_holdout.MISSES) for run in big), big
    # the report lists every miss with its reading (validation/vllm_holdout.md), the card's over 5 % included
    listed = vllm_holdout.misses(results)
    assert {r["run_id"] for r, key, _, _ in listed if key == "card_tokens" and vllm_holdout.newer(r)} == set(big)
    assert all(why for _, _, _, why in listed)
    pool = [r for r in newer if r.get("pool")]
    assert len(pool) >= 17
    exact = [r for r in newer if r.get("tokens") and any(part in r["run_id"] for part in GDN_EXACT)]
    assert len(exact) == 11 and all(r["tokens"][0] == r["tokens"][1] for r in exact)   # 1,505,068 ... to the token


COLD = "fs58522340114/qwen3-8b-bf16-rtx4090-runpod-tp1-8192-cold-compile-v0.27.1"
WARM = "fs58522340114/qwen3-8b-bf16-rtx4090-runpod-tp1-8192-warm-compile-v0.27.1"


def test_a_cold_compile_is_the_gap_between_two_starts_of_one_worker():
    """One RunPod RTX 4090 worker started Qwen3-8B three times on vLLM 0.27.1 (--max-model-len 8192): the first
    compiled ('torch.compile took 38.96 s') and printed 35,792 tokens and 1.18 GiB of peak activation, the other
    two hit the cache (0.30 s) and printed 43,040 tokens and 0.19 GiB. Hand arithmetic: (43,040 - 35,792) tokens x
    147,456 B (36 layers x 8 KV heads x 128 x 2 x 2 B) = 0.995 GiB, the printed activation gap 1.18 - 0.19 = 0.99
    GiB within the prints' rounding: Inductor's workspace in the profile run is the whole difference. kvplan plans
    the warm start (-0.37 %), and the WSL2 box's first --enable-lora start of the same model misses as the cold one
    does (+19.79 % against +19.80 %), which is how vllm_holdout.MISSES reads it."""
    rows = _rows()
    cold, warm = vllm_holdout.check_row(rows[COLD]), vllm_holdout.check_row(rows[WARM])
    gap_tokens = warm["card_tokens"][0] - cold["card_tokens"][0]
    # the two starts' printed KV tokens: 43,040 - 35,792 (docstring)
    assert gap_tokens == 7_248 and gap_tokens * 147_456 / GiB == pytest.approx(1.18 - 0.19, abs=0.01)
    assert float(rows[COLD]["activation_peak_torch_gib"]) - float(rows[WARM]["activation_peak_torch_gib"]) == (
        pytest.approx(0.99))
    assert cold["card_tokens"][1] == warm["card_tokens"][1] == 42_880   # one plan: the card says nothing of a cache
    assert warm["card_tokens"][2] == pytest.approx(-0.37, abs=0.005)
    assert cold["tokens"] == (35_792, 35_824, pytest.approx(0.09, abs=0.005))   # 4.92 GiB // 2,359,296 B = 2,239
    lora_run = "fs61585879089/qwen3-8b-bf16-lora2-rtx4090-wsl-tp1-4096-util0.90-v0.27.1"
    lora = vllm_holdout.check_row(rows[lora_run])
    assert lora["card_tokens"][2] == pytest.approx(cold["card_tokens"][2], abs=0.05)
    assert all(any(part in run for part in vllm_holdout.MISSES) for run in (COLD, lora_run))


WSL_COLD = "fs61918553602/qwen2.5-0.5b-instruct-rtx4090-wsl-tp1-2048-util0.85-v0.27.1"
WSL_BASE = "fs61585879089/qwen3-8b-bf16-rtx4090-wsl-tp1-4096-util0.90-v0.27.1"


def test_the_wsl2_box_prints_its_own_cold_and_warm_starts():
    """enginrect/llmso's WSL2 RTX 4090 (vLLM 0.27.1), the box of the rows from the card over 5 % at 8,192 tokens,
    shows the first start of a compile key in its own logs (the rows' notes quote the lines). Qwen2.5-0.5B at 2,048
    tokens, util 0.85: the row's start and the next one, whose key differed (CUDA_HOME, which vLLM's envs.py
    `compile_factors` hashes), printed 18.65 GiB; the two after, one key, 19.06 GiB and 1,665,392 tokens ('compilation:
    0.11 s'). Hand arithmetic: (1,665,392 - 1,629,520) tokens x 12,288 B (24 layers x 2 KV heads x 64 x 2 x 2 B) =
    0.41 GiB = 19.06 - 18.65 = (1.49 - 1.25) GiB of consumed + (0.25 - 0.08) GiB of peak memory. kvplan's 18.96 GiB
    is the warm start's within 0.5 %. Qwen3-8B-AWQ at 4,096 tokens (one key at util 0.90 and 0.85: CacheConfig does
    not hash the utilization): 0.90 x 23.99 - 5.71 - 14.43 = 1.45 GiB of non-KV memory on its first start, 0.85 x
    23.99 - 5.71 - 14.23 = 0.45 on a later one, the bf16 rows' 0.45 (0.90 x 23.99 - 15.27 - 5.87)."""
    rows = _rows()
    cold = rows[WSL_COLD]
    for line in ("Available KV cache memory: 19.06 GiB", "GPU KV cache size: 1,665,392 tokens",
                 "1.25 GiB for consumed memory (weights + non-torch), 0.08 GiB for peak activation",
                 "(compilation: 0.11 s)",
                 "Actual usage is 1.49 GiB for consumed memory (weights + non-torch), 0.25 GiB"):
        assert line in cold["notes"], line
    per_token = 24 * 2 * 64 * 2 * 2            # Qwen2-0.5B's layers x K, V x KV heads x head dim x 2 B
    gap = (1_665_392 - 1_629_520) * per_token / GiB   # the warm and cold starts' printed tokens (docstring)
    assert gap == pytest.approx(19.06 - float(cold["available_kv_cache_gib"]), abs=0.01)
    assert gap == pytest.approx((1.49 - 1.25) + (0.25 - 0.08), abs=0.01)
    pool = vllm_holdout.check_row(cold)["pool"]
    assert pool[:2] == (18.65, pytest.approx(18.965, abs=0.001)) and pool[2] == pytest.approx(1.69, abs=0.01)
    assert (pool[1] / 19.06 - 1) * 100 == pytest.approx(-0.50, abs=0.01)       # against the warm start
    base = rows[WSL_BASE]
    for line in ("Available KV cache memory: 14.43 GiB", "Available KV cache memory: 14.23 GiB",
                 "Model loading took 5.71 GiB"):
        assert line in base["notes"], line
    total = float(base["gpu_memory_total_gib"])
    first, later = 0.90 * total - 5.71 - 14.43, 0.85 * total - 5.71 - 14.23
    assert (first, later) == (pytest.approx(1.45, abs=0.005), pytest.approx(0.45, abs=0.005))
    assert first - later == pytest.approx(1.00, abs=0.01)
    assert 0.90 * total - float(base["weights_memory_gib"]) - float(base["available_kv_cache_gib"]) == (
        pytest.approx(later, abs=0.01))


def test_plans_say_they_size_a_warm_compile_cache():
    """The plan says which start it sizes (vllm.COLD_COMPILE), with the figures of the two rows above: a vLLM >= 0.20
    plan that compiles (not --enforce-eager, whose config sets the compilation mode to NONE; not a --kv-cache-memory
    pool, which a compile cannot move), and no plan of a release before the ones read."""
    from kvplan.planning.engines.vllm import COLD_COMPILE

    rows = _rows()
    for figure in (f"{int(rows[COLD]['gpu_kv_cache_tokens']):,}", f"{int(rows[WARM]['gpu_kv_cache_tokens']):,}",
                   "0.99 GiB", "0.27.1"):
        assert figure in COLD_COMPILE, figure
    base = dict(gpu="RTX 4090", max_model_len=8192)
    assert COLD_COMPILE in plan("Qwen/Qwen3-8B", engine_version="0.27.1", **base).notes
    assert COLD_COMPILE in plan("Qwen/Qwen3-8B", engine_version="0.20.1", **base).notes
    assert COLD_COMPILE not in plan("Qwen/Qwen3-8B", engine_version="0.27.1", enforce_eager=True, **base).notes
    assert COLD_COMPILE not in plan("Qwen/Qwen3-8B", engine_version="0.27.1", kv_cache_memory_bytes=4 * GiB,
                                    **base).notes
    assert COLD_COMPILE not in plan("Qwen/Qwen3-8B", engine_version="0.19.1", **base).notes


BLOG = "kubesimplify-website/qwen3-32b-rtxpro6000-"


def test_the_pp2_start_on_rtx_pro_6000s_peaks_as_its_tp1_start_not_as_a_forward():
    """One blog's three starts of Qwen3-32B on RTX PRO 6000s (vLLM 0.27.1, torch 2.13, util 0.426 of 95.01 GiB =
    40.474 GiB, 32,768 tokens, each in a fresh container: a cold compile). Hand arithmetic from the printed lines:
    PP0 3.03 GiB of non-KV memory (40.474 - 30.52 weights - 6.92 pool), TP1 3.86 (40.474 - 61.03 + 24.42). The engine
    takes the smallest worker's blocks: 56,640 tokens = 3,540 blocks of 16 x 131,072 B (32 layers x 8 KV heads x 128
    x 2 x 2 B) = 6.914 GiB, so PP1 counted at most 40.474 - 30.52 - 6.914 = 3.04 GiB, 0.02 more than PP0, though the
    0.27.1 source gives it 0.79 GiB of buffers PP0 lacks: the V2 sampler's 1,024 x 4 x (151,936 + 2 x 4,748 + 3,072
    + 1,409) B = 679,579,648 B and two [8,192, 5,120] bf16 receive buffers (160 MiB, made in V2's `load_model` on
    non-first ranks only: vllm_runner.receive_buffer_term). Beside kvplan's other terms PP0 and TP1 leave 2.96 and
    2.98 GiB of peak and PP1 at most 3.04 - 0.07 - 0.633 - 0.156 = 2.18, where the three forwards are the same
    8,192 x (3 x 25,600 + 3 x 5,120) x 2 B = 1.41 GiB (the first stage holds no receive buffer): the compile's
    high-water mark (compilation/decorators.py `aot_compile` in the profiling window), the same for the two
    first-rank graphs and lower for PP1's, which kvplan cannot know (vllm_holdout.MISSES). The row's +10.93 % from
    the card is PP1's 387 blocks (0.76 GiB)."""
    from validation.vllm_calibration import gpu_for

    rows = _rows()
    budget = 0.426 * 95.01
    pp0_non_kv, tp1_non_kv = budget - 30.52 - 6.92, budget - 61.03 + 24.42
    pp1_non_kv_max = budget - 30.52 - 3_540 * 16 * 131_072 / GiB
    assert (pp0_non_kv, tp1_non_kv, pp1_non_kv_max) == (pytest.approx(3.034, abs=1e-3), pytest.approx(3.864, abs=1e-3),
                                                         pytest.approx(3.040, abs=1e-3))
    sampler = 1_024 * 4 * (151_936 + 2 * 4_748 + 3 * 1_024 + 128 + 1_024 + 129 + 128)
    receive = 2 * 8_192 * 5_120 * 2
    assert sampler == 679_579_648 and (sampler + receive) / GiB == pytest.approx(0.789, abs=1e-3)
    assert pp1_non_kv_max - pp0_non_kv < 0.02 and (sampler + receive) / GiB > 0.78
    gpu = gpu_for(rows[BLOG + "pp2-0.426"])
    common = dict(engine="vllm", gpu=gpu, max_model_len=32768, gpu_memory_utilization=0.426, engine_version="0.27.1")
    pp, tp1 = plan("Qwen/Qwen3-32B", pp=2, **common), plan("Qwen/Qwen3-32B", **common)
    assert pp.extra["V2 sampler buffers"] == tp1.extra["V2 sampler buffers"] == sampler
    pp0, pp1, one = pp.stages[0], pp.stages[1], tp1.stages[0]
    assert pp.extra["PP receive buffers"] == receive    # PP1's, the binding stage's: persistent from 0.27
    # kvplan's binding stage is PP1, the one with the sampler and receive buffers: 3,927 blocks against PP0's
    # 4,331 (PP0: 0.426 x 94.97 GiB, the catalog's card, - 30.52 weights - 1.406 forward - 0.07 non-torch = 8.46
    # GiB // 2 MiB)
    assert (pp0.num_blocks, pp1.num_blocks, pp.kv_cache_tokens) == (4_331, 3_927, 3_927 * 16)
    forward = 8_192 * (3 * 25_600 + 3 * 5_120) * 2   # V2's forward: gate+up+act 3 x I, 3 x H (docstring)
    assert pp0.activation_bytes == pp1.activation_bytes == one.activation_bytes == forward == 1_509_949_440
    left_pp0 = pp0_non_kv - pp0.non_torch_bytes / GiB
    left_tp1 = tp1_non_kv - (one.non_torch_bytes + sampler) / GiB
    left_pp1_max = pp1_non_kv_max - (pp1.non_torch_bytes + sampler + receive) / GiB
    assert (left_pp0, left_tp1, left_pp1_max) == (pytest.approx(2.96, abs=0.01), pytest.approx(2.98, abs=0.01),
                                                  pytest.approx(2.18, abs=0.01))   # docstring's arithmetic
    assert abs(left_pp0 - left_tp1) < 0.03 and left_pp0 - left_pp1_max > 0.75   # one forward, unequal peaks
    result = vllm_holdout.check_row(rows[BLOG + "pp2-0.426"])
    predicted = 3_927 * 16   # kvplan's PP1 blocks (7.67 GiB // 2 MiB, asserted above) x 16 tokens
    assert result["card_tokens"] == (56_640, predicted, pytest.approx(10.93, abs=0.005))
    # 387 blocks of 16 x 131,072 B (docstring): what PP1 held beyond kvplan's plan of it
    assert (predicted - 56_640) // 16 * 16 * 131_072 / GiB == pytest.approx(0.756, abs=1e-3)
    # the whole budget compares PP0's printed pool with kvplan's PP0, not PP1's extras subtracted from PP0's terms:
    # 8.459 GiB (0.426 x 94.97 - 30.522 weights - 1.406 forward - 0.07 non-torch, no receive buffers) against 6.92:
    # +22.25 %
    assert result["pool"] == (6.92, pytest.approx(pp0.kv_pool_bytes / GiB), pytest.approx(22.25, abs=0.005))
    assert any(part in BLOG + "pp2-0.426" for part in vllm_holdout.MISSES)


# The Gemma 4 and Nemotron 3 Nano start-ups, from the pool each printed: (check, printed, kvplan's error %). Before
# their rules: E4B -40 % (an L40S planned as an H100's 8,192 batched tokens, and the sliding layers' 16-token
# blocks), Nemotron-3-Nano -79 % (tokens counted by 0.20.0's formula at '0.20.x', and its SSM state in bf16);
# gemma-4-31B-it's weights -1.04 % before its 512-wide full-attention RoPE table (0.36 GiB still unexplained).
GEMMA4_NEMOTRON3 = {
    "fs60491628666/gemma-4-e4b-it-bf16-l40s-tp1-16384-util0.85-v0.25.1": (
        ("tokens", 1_033_831, -0.02), ("concurrency", 63.10, -0.02)),   # 22.01 GiB printed: +-0.023 % rounding
    "fs55685126685/nemotron-3-nano-30b-a3b-bf16-gb10-tp1-262144-util0.80-v0.20.x-inferred": (
        ("tokens", 5_769_184, 0.0), ("concurrency", 22.01, -0.01)),
    "fs63102470423/gemma-4-31b-it-kaggle-tp1-32768-util0.94-v0.23.0": (
        ("weights", 58.99, -0.62), ("tokens", 97_541, 0.0), ("concurrency", 2.98, -0.11)),
}


def test_gemma4_and_nemotron3_nano_from_the_printed_pool():
    """Each row's figures against its log, pinned. Hand check of Nemotron-3-Nano on 0.20.1: the SSM state in
    float32 (NemotronHForCausalLMConfig) is 36,864 + 2,097,152 = 2,134,016 B a layer, the block 16 x cdiv(2,134,016,
    16 x 1,024) = 2,096 tokens, six layers a group, 34.32 GiB // (6 x 2,096 x 1,024 B) = 2,861 blocks, a request
    cdiv(262,144, 2,096) = 126 attention blocks + 4 Mamba groups x 1 state = 130: 2,861 / 130 = 22.01x, as printed."""
    rows = _rows()
    for run_id, checks in GEMMA4_NEMOTRON3.items():
        result = vllm_holdout.check_row(rows[run_id])
        for key, printed, error in checks:
            assert result[key][0] == printed, (run_id, key)
            assert result[key][2] == pytest.approx(error, abs=0.005), (run_id, key, result[key])
    nano = vllm_holdout.check_row(rows["fs55685126685/nemotron-3-nano-30b-a3b-bf16-gb10-tp1-262144-util0.80-v0.20.x-"
                                       "inferred"])
    assert nano["tokens"][1] == int(2_861 / 130 * 262_144)   # 0.20.1: int(concurrency x max_model_len)
    assert nano["engine_version"] == "0.20.1"   # read from its source lines (vllm_holdout.LINE_DATED)


def test_holdout_predicts_no_pool_where_the_encoder_profile_is_not_sized():
    """Qwen2.5-VL (dynamic resolution) and Llama 4 (tiles) have no fixed image token count: vLLM's profile run
    sends dummy items of the largest size through the vision encoder first, which kvplan cannot size, so the plan
    warns and the hold-out makes no whole-budget check. Published: Qwen2.5-VL-7B on vLLM 0.27.1 with one image
    per prompt printed 62,736 tokens on an RTX 4090, 21.59 - 15.67 - 62,736 x 57,344 B = 2.49 GiB of non-KV
    memory where kvplan's terms come to 0.67 (+62.6 % tokens when it was predicted); Llama-4-Scout at TP 4 on
    vLLM 0.19 +11.6 %; the 0.23 A100 start-up that one video drove to -14.28 GiB +103.6 % of its pool."""
    from kvplan.planning.engines.vllm_mm import UNSIZED

    rows = _rows()
    for part in ("qwen2.5-vl-7b-instruct-rtx4090-wsl", "qwen2.5-vl-7b-instruct-a100-80gb", "llama-4-scout-17b-16e"):
        (run,) = [r for r in rows if part in r]
        out = vllm_holdout.check_row(rows[run])
        assert "pool" not in out and "card_tokens" not in out, run
        assert out["skipped"]["pool"] == out["skipped"]["card_tokens"] == (
            "the plan leaves out vLLM's encoder profiling (its warning)"), run
    served = kvplan.plan("Qwen/Qwen2.5-VL-7B-Instruct", max_model_len=8192, images_per_prompt=1,
                         engine_version="0.27.1")
    assert not served.verified and sum(w.startswith(UNSIZED) for w in served.warnings) == 1
    assert any(n.startswith("not verified: " + UNSIZED) for n in served.notes)
    text = kvplan.plan("Qwen/Qwen2.5-VL-7B-Instruct", max_model_len=8192, images_per_prompt=0,
                       engine_version="0.27.1")
    assert not any(w.startswith(UNSIZED) for w in text.warnings)
    # a tower whose image is sized (Gemma 3: 256 soft tokens) keeps its prediction and carries no such warning
    gemma = kvplan.plan("google/gemma-3-4b-it", max_model_len=8192, engine_version="0.27.1")
    assert not any(w.startswith(UNSIZED) for w in gemma.warnings)
    assert not any(w.startswith(UNSIZED) for w in kvplan.plan("Qwen/Qwen3-8B", max_model_len=8192).warnings)


def test_holdout_reads_lora_and_image_limits_from_the_notes():
    """`--enable-lora --max-loras 2` plans 2 adapter slots of vLLM's default rank 16; `--limit-mm-per-prompt
    '{"image": 1}'` plans one image per prompt."""
    holdout = vllm_holdout
    assert holdout.settings_in_notes("vllm serve m --enable-lora --max-loras 2 --lora-modules a=b") == {
        "lora": {"max_loras": 2, "max_lora_rank": 16}}
    assert holdout.settings_in_notes("'enable_lora': True, 'max_lora_rank': 64")["lora"] == {
        "max_loras": 1, "max_lora_rank": 64}
    assert holdout.settings_in_notes("""--limit-mm-per-prompt '{"image": 1}'""") == {"images_per_prompt": 1}
    assert holdout.settings_in_notes('--limit-mm-per-prompt "{\\"image\\":4}"') == {"images_per_prompt": 4}


def test_holdout_reads_versions_and_settings_from_the_notes():
    holdout = vllm_holdout
    row = {"run_id": "x", "vllm_version": ">=0.21 (inferred only from context)"}
    assert holdout.engine_version(row) == ("0.21", "a lower bound only: planned at the bound")
    assert holdout.engine_version({**row, "vllm_version": "0.23.1rc1.dev531+ga65f93fb2"})[0] == "0.23.1rc1.dev531"
    assert holdout.engine_version({**row, "vllm_version": "0.27.1+aeon.sm121a.dspark"}) == ("0.27.1", "printed")
    assert holdout.engine_version({**row, "vllm_version": "0.30 (stated in doc header)"})[0] == "0.30"
    assert holdout.engine_version({**row, "vllm_version": "0.28.0 (inferred: banner)"}) == (
        "0.28.0", "inferred (not printed)")
    assert holdout.engine_version({**row, "vllm_version": "ROCm nightly newer than 0.27.1"})[0] == "0.27.1"
    # a log with no version at all: the release current on the day it was posted (issue #22: never the default)
    undated = {"run_id": "issue-vllm-21348/qwen3-235b-a22b-fp8-h100x4-tp4-lmcache", "vllm_version": ""}
    assert holdout.engine_version(undated)[0] == "0.9.2" and "2025-07-22" in holdout.engine_version(undated)[1]
    assert all(holdout.engine_version({"run_id": run, "vllm_version": ""})[0] != "0.19.0" for run in holdout.UNDATED)
    notes = ("SpeculativeConfig(method='mtp', model='m', num_spec_tokens=3) || max_num_seqs=8, "
             "'max_num_batched_tokens': 65536 || enforce_eager=False || To disable, set "
             "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0. || --kv-cache-memory=4536913634 (4.23 GiB) to fit")
    assert holdout.settings_in_notes(notes) == {
        # the settings the notes above write out
        # from the notes text above: 'max_num_batched_tokens': 65536, max_num_seqs=8
        "max_num_batched_tokens": 65536, "max_num_seqs": 8,
        "speculative": {"method": "mtp", "num_speculative_tokens": 3}}
    off = holdout.settings_in_notes("cudagraph_estimate_applied=no || --kv-cache-memory 9663676416 = 9 GiB "
                                    "|| 'enforce_eager': True")
    # the settings the note above writes out
    # from the note text above: --kv-cache-memory 9663676416
    assert off == {"kv_cache_memory_bytes": 9663676416, "enforce_eager": True}
    assert holdout.settings_in_notes("cudagraph_estimate_applied=no")["cudagraph_estimate"] is False
    assert holdout.settings_in_notes("speculative: EAGLE-3 num_spec_tokens=3")["speculative"] == {
        "method": "eagle3", "num_speculative_tokens": 3}


def test_default_gpu_memory_utilization_follows_the_version():
    """0.9 through v0.19 (the calibration logs), 0.92 from v0.20 (vllm/config/cache.py); an explicit value wins."""
    assert plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192).gpu_memory_utilization == 0.92
    assert plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192,
                engine_version="0.19.1").gpu_memory_utilization == 0.9
    newer = plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192, engine_version="0.20.0")
    assert newer.gpu_memory_utilization == 0.92 and "--gpu-memory-utilization 0.92" in newer.vllm_command
    assert plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192, engine_version="0.25.0",
                gpu_memory_utilization=0.8).gpu_memory_utilization == 0.8
    assert plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=8192).gpu_memory_utilization == 0.9
    with pytest.raises(WorkloadError, match="transformers' generate has no engine_version setting"):
        plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=8192, engine_version="not a version")


def test_llm_d_text_models_at_each_candidate_version():
    """Issue #22: llm-d's table (one H100, 16,000 tokens, util 0.9, 128-token blocks) names no version per row; its
    first commit (2026-01-27) ran `vllm/vllm-openai:latest`, which PyPI's upload dates make 0.14.1, and later copies
    say 0.11.0. Planned at both: the four text models at TP 1 are within 2 % of the printed KV pool at 0.14.1 and
    over 5 % off at 0.11.0, whose FlashInfer sampler (the image ships FlashInfer) keeps no native top-k buffers; the
    Mistral-Small-3.2 row the doc does date 0.11.0 keeps its figure."""
    rows = _rows()
    errors = {}
    for run_id, row in rows.items():
        if run_id.startswith("llmd-bench-") and "@" in run_id and "tp1" in run_id:
            errors[run_id] = vllm_holdout.check_row(row)["pool"][2]
    late = {k: v for k, v in errors.items() if k.endswith("@0.14.1")}
    early = {k: v for k, v in errors.items() if k.endswith("@0.11.0")}
    assert len(late) == len(early) == 4
    assert all(abs(e) < 2 for e in late.values()), late
    assert all(e > 5 for e in early.values()), early
    mistral = vllm_holdout.check_row(rows["llmd-bench-mistral-small-3.2-24b-2506-h100-tp1-v0.11.0"])
    assert mistral["engine_version"] == "0.11.0" and abs(mistral["pool"][2]) < 0.5
