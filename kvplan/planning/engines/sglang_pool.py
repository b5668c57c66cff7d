"""SGLang's KV pool (0.5.23 `mem_cache/kv_cache_configurator.py`, `model_executor/pool_configurator.py`; 0.5.1
`model_executor/model_runner.py`): a static fraction of the GPU for weights + KV.

    before          = free memory before the weights load      (SGLang's "pre_model_load_memory", MIN over ranks)
    after           = before - weights - load extras           ("Load weight end. avail mem", MIN over ranks)
    rest            = after - before x (1 - mem_fraction_static) [- 100 MiB image cache, multimodal, 0.5.18+]
                    [- the Mamba state pool, hybrids: rest x 0.9 / 1.9 in whole per-request slots]
    max_total_tokens = rest // cell_size, rounded down to whole pages
    cell_size       = KV heads per rank x (head_dim + v_head_dim) x layers x dtype bytes   (MLA: (R + rope) x layers)

mem_fraction_static when not given, by version (the card's size is nvidia-smi's memory.total):
- from 0.5.3 (`ServerArgs._handle_gpu_memory_settings`; 0.5.23 arg_groups/memory_hook.py:281-344):
  chunked_prefill_size and cuda_graph_max_bs by the card's memory, then reserved = 512 + max(chunked_prefill_size,
  2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 MB (+ DP attention's padding, + the prefill CUDA graphs
  where on by default: 8 MB a size, 1.5 GiB for MLA, from 0.5.10), at least 10 GB on cards over 60 GB (+ 2-6 GB for
  drafting after the floor, until 0.5.13), and fraction = round((memory - reserved) / memory, 3). H100 TP1:
  13,440 MB -> 0.835 (0.5.3), 13,904 MB -> 0.830 (0.5.23) of nvidia-smi's 81,559 MiB.
- 0.5.0-0.5.2: a reserve by memory class (`_class_fraction`): H100 TP1 0.874.
- before 0.5: a table by TP size: 0.88 (TP1), 0.87 (TP2), 0.85 (TP4), 0.81 (TP8), 0.79 (TP16): the published 0.4.x
  logs in validation/sglang_calibration.csv print 0.88 at TP1 and 0.85 at TP4.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ...errors import WorkloadError, shown
from ...units import GiB, MiB, fmt_bytes
from .sglang_rules import multimodal
from .vllm_kv import VllmLayerSpec

# SGLang sizes the pool from free memory, not from the card's size. Before the weights, the CUDA context, NCCL
# and the custom all-reduce already hold some: "Load weight begin. avail mem=78.81 GB" on an H100 of
# 79.19 GiB (0.38), 21.63 on an L4 of 21.95 at TP4 (0.32), 23.08 on an RTX 4090 of 23.64 at TP4 (0.56;
# validation/sglang_calibration.csv). kvplan takes the H100 figure.
PRELOAD_BYTES = int(0.38 * GiB)
# Loading takes more than the parameters and RoPE tables: "mem usage" minus them is 0.10 GiB for
# Llama-3.1-8B, 0.13 for Qwen2.5-7B, 0.20 for Qwen3-14B at TP4 and 0.28 for a Qwen2.5-32B at TP4.
LOAD_EXTRA_BYTES = int(0.15 * GiB)
# 0.5.18+ kv_cache_configurator.py `mm_runtime_reservation_gb`: SGLANG_VLM_CACHE_SIZE_MB (100, environ.py) of the
# KV budget held back for a multimodal model's embedding cache
VLM_CACHE_BYTES = 100 * MiB


# The latest release whose source kvplan's rules were read from (pip download sglang==0.5.23 --no-deps).
DEFAULT_VERSION = (0, 5, 23)
V0523 = (0, 5, 23)
V053 = (0, 5, 3)   # the additive reserve (512 + 1.5 x chunk + 2 x graphs + TP x PP / 8 GB) starts here
OLD_TP_FRACTIONS = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))  # before 0.5: by TP size


@dataclass(frozen=True)
class SglangSettings:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    mem_fraction_static: float | None = None
    page_size: int = 1
    chunked_prefill_size: int | None = None   # default by GPU memory (batch_defaults)
    cuda_graph_max_bs: int | None = None      # default by GPU memory and TP (batch_defaults)
    context_length: int | None = None
    # --swa-full-tokens-ratio: 0.8 in every 0.5.x (0.5.9 server_args.py:339; 0.5.23 arg_groups/fields/schedule.py,
    # fallback 0.8); Inkling and DeepSeek-V4 get 0.1 (model_overrides/inkling.py, deepseek_v4.py), both refused
    # before planning (engines/unread.py)
    swa_full_tokens_ratio: float = 0.8
    version: tuple[int, int, int] = DEFAULT_VERSION
    vlm_factor: float = 1.0   # a vision-language model's default fraction is scaled by this (vlm_factor())
    dp_attention: int = 1     # --attn-dp-size N (before 0.5.22 --dp N --enable-dp-attention): attention TP = TP / N
    mla: bool = False         # MLA models reserve 1.5 GiB for the prefill graphs instead of 8 MB a size
    speculative: str = ""     # SGLang's --speculative-algorithm (NEXTN, EAGLE3, STANDALONE); "" for none
    prefill_graphs: bool = True   # the prefill CUDA graphs on by default here (sglang_rules.prefill_graphs_reserved)
    mamba_ratio: float = 0.9  # --mamba-full-memory-ratio (arg_groups/fields/schedule.py:216-227, fallback 0.9)


# (upper bound MB, chunked_prefill_size, cuda_graph_max_bs below TP4, from TP4): T4 / 4080; A10 / 4090 / 5090;
# A100-40GB / L40; H100 / A100-80GB; H200 / H20; B200 / MI300 above (0.5.10 server_args.py:1165-1222)
_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
          (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


def batch_defaults(memory_mb: float, tp: int, version: tuple[int, int, int] = DEFAULT_VERSION) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a card of `memory_mb`. The 20-35 GB tier (RTX
    4090 / 5090, A10, L4) had 16 graphs below TP4 in 0.5.3-0.5.4 (0.5.3 server_args.py:578-586), 24 in 0.5.5-0.5.19,
    and from 0.5.20 4,096-token chunks with 48 / 160 graphs (0.5.20 arg_groups/memory_hook.py:100-116)."""
    for limit, chunk, small_tp, big_tp in _TIERS:
        if limit is None or memory_mb < limit:
            if limit == 35 * 1024 and version >= (0, 5, 20):
                chunk, small_tp, big_tp = 4096, 48, 160
            elif limit == 35 * 1024 and V053 <= version < (0, 5, 5):
                small_tp = 16
            return chunk, small_tp if tp < 4 else big_tp
    raise AssertionError("unreachable")


def default_mem_fraction(card_bytes: int, s: SglangSettings) -> tuple[float, int]:
    """(mem_fraction_static, reserved bytes) as SGLang derives them when not given; `card_bytes` is the size it
    reads (nvidia-smi's memory.total where kvplan has it)."""
    if s.version[:2] < (0, 5):
        tp = s.tensor_parallel_size
        fraction = next(f for size, f in OLD_TP_FRACTIONS if tp >= size)
        return fraction, int(card_bytes * (1 - fraction))
    memory_mb = card_bytes / MiB
    if s.version < V053:
        return _class_fraction(memory_mb, s)
    chunk, graph_bs = batch_defaults(memory_mb, s.tensor_parallel_size, s.version)
    chunk = s.chunked_prefill_size or chunk
    graph_bs = s.cuda_graph_max_bs or graph_bs
    reserved_mb = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + s.tensor_parallel_size * s.pipeline_parallel_size / 8 * 1024
    reserved_mb += _graph_reserve(chunk, graph_bs, s)
    if memory_mb > 60 * 1024:
        reserved_mb = max(reserved_mb, 10 * 1024)
    reserved_mb += _draft_reserve(s)
    return round((memory_mb - reserved_mb) / memory_mb, 3), int(reserved_mb * MiB)


def _class_fraction(memory_mb: float, s: SglangSettings) -> tuple[float, int]:
    """0.5.0-0.5.2 (read in 0.5.1 server_args.py:351-395): a reserve by the card's memory class and P = TP x PP:
    (2.8 + P / 10) GB under 35 GB, (9.5 + P / 2) under 90, (12 + P / 2) under 160, 32 GB above; +2 GB for a
    speculative algorithm, +4 GB for DP attention. H100 TP1: 10,240 MB of 81,559 -> 0.874."""
    p = s.tensor_parallel_size * s.pipeline_parallel_size
    gb = 2.8 + p / 10 if memory_mb < 35 * 1024 else 9.5 + p / 2 if memory_mb < 90 * 1024 else \
        12 + p / 2 if memory_mb < 160 * 1024 else 32
    reserved_mb = gb * 1024 + (2048 if s.speculative else 0) + (4096 if s.dp_attention > 1 else 0)
    return round((memory_mb - reserved_mb) / memory_mb, 3), int(reserved_mb * MiB)


def _graph_reserve(chunk: int, graph_bs: int, s: SglangSettings) -> float:
    """What the reserve adds beyond 2 x max_bs (0.5.3-0.5.15 server_args.py, 0.5.16+ `reserve_for_graph_mb`,
    0.5.23 memory_hook.py:357-399): DP attention's padding, max_bs x DP x 3 MB (x 4.5 above 300), from 0.5.3; the
    prefill CUDA graphs where on by default (from 0.5.10): 8 MB per captured size
    (`generate_prefill_cuda_graph_batch_sizes`: 58 sizes up to 8,192 tokens, 464 MB), 1.5 GiB for MLA backends."""
    extra = 0.0
    if s.dp_attention > 1:
        extra += graph_bs * s.dp_attention * (4.5 if graph_bs > 300 else 3)
    if s.version >= (0, 5, 10) and s.prefill_graphs:
        extra += 1536 if s.mla else 8 * len(prefill_graph_sizes(chunk))
    return extra


def _draft_reserve(s: SglangSettings) -> int:
    """MB reserved for drafting after the 10 GB floor, until 0.5.13 (0.5.3 server_args.py:663-669, 0.5.13:1627-1633):
    STANDALONE 6 GB, other algorithms 2 GB (0.5.3-0.5.9) or 4 GB (0.5.10-0.5.13); from 0.5.14 the draft's weights
    are resident before the budget is read and nothing is reserved."""
    if not s.speculative or s.version >= (0, 5, 14):
        return 0
    if s.speculative == "STANDALONE":
        return 6 * 1024
    return 4 * 1024 if s.version >= (0, 5, 10) else 2 * 1024


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """SGLang 0.5.23 arg_groups/cuda_graph_hook.py:480 `generate_prefill_cuda_graph_batch_sizes` (0.5.10
    server_args.py `_generate_piecewise_cuda_graph_tokens`, the same list)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [x for x in sizes if x <= max_bs]


def vlm_factor(vit: tuple[str, int, int] | None, version: tuple[int, int, int]) -> float:
    """SGLang's `adjust_mem_fraction_for_vlm` (0.5.1 server_args.py 2297-2336; 0.5.23 memory_hook.py:417-462),
    applied to a default fraction of a model SGLang treats as multimodal (sglang_rules.multimodal):
    0.95 x clamp(1 - 0.1 x (layers x hidden^2 / (24 x 1024^2) - 1), 0.8, 1.05). Mistral-Small-3.x's Pixtral
    (24 x 1024): x0.95; SigLIP (27 x 1152) x0.9097. Not before 0.5 (kvplan's table)."""
    if vit is None or version[:2] < (0, 5) or not multimodal(vit[0], version):
        return 1.0
    ratio = vit[1] * vit[2] ** 2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def cell_size(specs: list[VllmLayerSpec]) -> int:
    """Bytes per token across this rank's attention layers (SGLang `get_cell_size_per_token`)."""
    return sum(s.bytes_per_token for s in specs if s.kind != "mamba")


def resolve_fraction(card_bytes: int, s: SglangSettings) -> float:
    """The fraction SGLang runs with: the one given, or its default for this card (scaled for a VLM)."""
    fraction = s.mem_fraction_static
    if fraction is None:
        fraction, reserved = default_mem_fraction(card_bytes, s)
        fraction *= s.vlm_factor
        if fraction <= 0:  # a card under ~2.6 GiB: SGLang's reserve alone is larger (a 1 KiB card gave -3817471.0)
            raise WorkloadError(f"a GPU of {fmt_bytes(card_bytes)} is smaller than the {fmt_bytes(reserved)} SGLang "
                                "reserves for activations and CUDA graphs: pick a larger GPU")
    if not 0 < fraction <= 1:
        raise WorkloadError(f"mem_fraction_static must be in (0, 1], got {shown(fraction)}")
    return fraction


def budget_bytes(total_bytes: int, fraction: float, weights_bytes: int, taken_bytes: int = 0) -> int:
    """rest = free after loading - free before x (1 - fraction); `weights_bytes` is the most loaded rank's (SGLang
    MIN-reduces free memory over every TP x PP rank), `taken_bytes` what else is resident or held back (drafts,
    adapters, the image cache)."""
    before = total_bytes - PRELOAD_BYTES
    after = before - weights_bytes - LOAD_EXTRA_BYTES - taken_bytes
    return int(after - before * (1 - fraction))


@dataclass(frozen=True)
class StagePool:
    """One pipeline stage's pool: `divisor` is the cell as SGLang divides by it (SWA hybrids: full + ratio x SWA,
    a float), `kv_bytes` the budget left for KV after the Mamba state pool (`state_slots` usable slots of
    `state_per_request` bytes, `state_bytes` with the padding slot)."""

    tokens: int
    full_tokens: int
    swa_tokens: int
    cell_bytes: int
    divisor: float
    kv_bytes: int
    state_slots: int = 0
    state_bytes: int = 0
    state_per_request: int = 0


def stage_pool(rest: int, specs: list[VllmLayerSpec], s: SglangSettings, state: tuple[int, int, str] | None = None
               ) -> StagePool:
    """The stage's max_total_num_tokens from `rest` bytes; "sliding" specs go to the SWA pool, every other
    attention layer to the full one (sglang_layers.cell_specs decides which). `state`: (per-request Mamba state
    bytes, attention DP, "gdn" or "mamba2") for a hybrid whose state SGLang keeps in its MambaPool, split off first
    (`mamba_split`)."""
    full_cell = sum(x.bytes_per_token for x in specs if x.kind in ("full", "mla", "chunked"))
    swa_cell = sum(x.bytes_per_token for x in specs if x.kind == "sliding")
    slots, state_bytes = mamba_split(max(0, rest), *state, s) if state else (0, 0)
    kv = max(0, rest - state_bytes)
    page = max(1, s.page_size)
    if swa_cell and full_cell:
        full, divisor = swa_full_tokens(kv, full_cell, swa_cell, s)
        full -= full % page
        swa = int(full * s.swa_full_tokens_ratio)
        swa -= swa % page
    else:   # one pool (an all-SWA model's tokens are its SWA pool's, with no ratio)
        divisor = full_cell + swa_cell
        full = kv // divisor if divisor else 0
        full -= full % page
        swa = full if swa_cell else 0
    return StagePool(full, full, swa, full_cell + swa_cell, divisor, kv, slots, state_bytes, state[0] if state else 0)


def swa_full_tokens(kv: int, full_cell: int, swa_cell: int, s: SglangSettings) -> tuple[int, float]:
    """(full tokens, the divisor) of the SWA split: solve full x full_cell + ratio x full x swa_cell = kv.
    0.5.11+ `HybridSWAPoolConfigurator.calculate_pool_sizes`: int(kv // (full + ratio x swa)). 0.5.8-0.5.10
    (`set_num_tokens_hybrid_swa`, model_runner_kv_cache_mixin.py): first tokens = kv // (full + swa), then
    int(tokens x (full + swa) / (full + ratio x swa)), which can land a token lower."""
    divisor = full_cell + s.swa_full_tokens_ratio * swa_cell
    if s.version >= (0, 5, 11):
        return int(kv // divisor), divisor
    plain = kv // (full_cell + swa_cell)
    return int(plain * (full_cell + swa_cell) / divisor), divisor


def swa_floor_full_tokens(window: int | None, s: SglangSettings) -> int:
    """The fewest full-pool tokens whose SWA pool SGLang starts with, 0 where it checks none. From 0.5.19
    `HybridSWAPoolConfigurator._solve_pool_sizes` (0.5.23 pool_configurator.py `validate_swa_pool_size`) refuses
    "SWA pool (N tokens) cannot hold even one request" when sliding_window + page_size >= swa_tokens, swa_tokens =
    int(full x swa_full_tokens_ratio) in whole pages: gpt-oss's 128-token window at page 64 needs an SWA pool of
    193+ tokens, 256 in pages, so 320 full tokens (int(320 x 0.8) = 256). Llama 4's chunked layers have no
    sliding_window in the config (model_config `_get_sliding_window_size`): no check."""
    if window is None or s.version < (0, 5, 19):
        return 0
    page = max(1, s.page_size)
    swa = (window + page) // page * page + page      # the first whole-page SWA pool above window + page
    full = ceil(swa / s.swa_full_tokens_ratio)
    while (int(full * s.swa_full_tokens_ratio) // page * page) < swa:
        full += 1                                        # float ratios: step to the first full count that reaches it
    return -(-full // page) * page


def mamba_fixed(mixer: str, version: tuple[int, int, int]) -> bool:
    """SGLang turned the radix cache off for these hybrids and gave them 512 state slots: every hybrid in
    0.5.2-0.5.3 (model_runner.py "Hybrid GDN model detected, disable radix cache"), Mamba-2 models through 0.5.6
    ("{class_name} model detected, disable radix cache")."""
    return version < (0, 5, 4) or (mixer == "mamba2" and version < (0, 5, 7))


def mamba_split(rest: int, per_req: int, attn_dp: int, mixer: str, s: SglangSettings) -> tuple[int, int]:
    """(state slots K, bytes of the Mamba state pool) SGLang takes out of `rest` before the KV pool.
    - 0.5.2-0.5.3 (model_runner.py `profile_max_num_token`), and Mamba-2 models through 0.5.6 (whose radix cache
      SGLang turned off): 512 slots (--max-running-requests when set) per attention-DP rank;
    - from 0.5.4 (`handle_max_mamba_cache`; 0.5.23 kv_cache_configurator.py:3229-3409): budget = rest x r / (1 + r),
      r = mamba_full_memory_ratio 0.9, K = budget // per request (0.5.4-0.5.6 then // DP attention for GDN); from
      0.5.17 one padding slot more: K = (budget - per request) // per request, the pool (K + 1) slots.
    Qwen3-Next at TP4 (19,316,736 B a request) with 27.3 GiB of rest: 12.93 GiB -> K = 717."""
    if mamba_fixed(mixer, s.version):
        slots = 512 // attn_dp if s.version < (0, 5, 4) else 512
        return slots, slots * per_req
    budget = rest * s.mamba_ratio / (1 + s.mamba_ratio)
    if s.version >= (0, 5, 17):   # K <= 0 is SGLang's "Not enough GPU memory for hybrid ... state cache"
        slots = max(0, int((budget - per_req) // per_req))
        return slots, (slots + 1) * per_req if slots else 0
    slots = int(budget // per_req)
    if mixer == "gdn" and s.version < (0, 5, 7):
        slots //= attn_dp
    return slots, slots * per_req


def mamba_requests_ratio(mixer: str, version: tuple[int, int, int]) -> int:
    """State slots a running request may hold (`_calculate_mamba_ratio`): 1 with the radix cache off (0.5.2-0.5.3;
    Mamba-2 through 0.5.6), 3 (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO) through 0.5.13, 3 + 2 from 0.5.14,
    whose `mamba_radix_cache_strategy` auto resolves to extra_buffer with the overlap scheduler (0.5.14
    server_args.py `_handle_mamba_radix_cache`, +2 MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP)."""
    if mamba_fixed(mixer, version):
        return 1
    return 5 if version >= (0, 5, 14) else 3


def max_running_requests(tokens: int, context_length: int, s: SglangSettings, state_cap: int | None = None) -> int:
    """`resolve_max_num_reqs` (0.5.23 kv_cache_configurator.py:3119-3172; 0.5.1 model_runner.py:1190 and
    tp_worker.py:128-135): clamp(tokens / context x 512, 2048, 4096), never more than half the tokens, for a
    hybrid never more than its state slots // ratio (`state_cap`); 48 with drafting
    (0.5.23 arg_groups/speculative_hook.py:1086-1094)."""
    running = 48 if s.speculative else min(4096, max(2048, int(tokens / max(1, context_length) * 512)))
    if s.version[:2] >= (0, 5):
        running = min(running, tokens // 2)
    if state_cap is not None:
        running = min(running, state_cap)
    return max(1, running)   # 0 slots is SGLang's "too small to serve any requests": the plan does not fit


@dataclass(frozen=True)
class SglangPool:
    mem_fraction_static: float
    rest_bytes: int
    cell_bytes: int
    max_total_tokens: int
    full_tokens: int
    swa_tokens: int
    max_running_requests: int


def sglang_pool(total_bytes: int, weights_bytes: int, specs: list[VllmLayerSpec], s: SglangSettings,
                context_length: int, extra_bytes: int = 0, card_bytes: int | None = None) -> SglangPool:
    """KV tokens SGLang holds on one stage (no Mamba state): the fraction from `card_bytes` (the size SGLang
    reads; `total_bytes` when None), the budget from `total_bytes`, then `stage_pool`. Hybrid sliding models
    with `s.swa_pool` get a full pool and an SWA pool with swa_tokens = full_tokens x swa_full_tokens_ratio.
    `specs` hold a drafter's layers too (0.5.23: its pool has as many tokens as the target's); `extra_bytes`:
    draft weights and LoRA slots, resident before the budget is read."""
    fraction = resolve_fraction(card_bytes or total_bytes, s)
    rest = budget_bytes(total_bytes, fraction, weights_bytes, extra_bytes)
    pool = stage_pool(rest, specs, s)
    return SglangPool(fraction, rest, pool.cell_bytes, pool.tokens, pool.full_tokens, pool.swa_tokens,
                      max_running_requests(pool.tokens, context_length, s))
