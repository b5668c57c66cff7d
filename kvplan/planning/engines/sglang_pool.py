"""SGLang's KV pool (`model_runner_kv_cache_mixin.py`, ~v0.5): a static fraction of the GPU for weights + KV.

    before          = free memory before the weights load      (SGLang's "total_gpu_memory")
    after           = before - weights - load extras           ("Load weight end. avail mem")
    rest            = after - before x (1 - mem_fraction_static) = before x fraction - weights - extras
    max_total_tokens = rest // cell_size, rounded down to whole pages
    cell_size       = KV heads per rank x (head_dim + v_head_dim) x layers x dtype bytes   (MLA: (R + rope) x layers)

mem_fraction_static when not given, by version:
- from 0.5.3 (`ServerArgs._handle_gpu_memory_settings`; 0.5.23 arg_groups/memory_hook.py:281-344):
  chunked_prefill_size and cuda_graph_max_bs by the card's memory (SGLang reads nvidia-smi's total, 0.3-0.6 GiB
  above the runtime total kvplan's catalogue holds: the fraction can differ in its third decimal), then
  reserved = 512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 MB, at least
  10 GB on cards over 60 GB, and fraction = round((memory - reserved) / memory, 3); 0.5.23 adds the prefill CUDA
  graphs' 8 MB a size (1.5 GB for MLA) and DP attention's padding. H100 TP1: 13,440 MB -> 0.834 (0.5.3), 13,904 MB
  -> 0.829 (0.5.23).
- 0.5.0-0.5.2: a reserve by memory class (`_class_fraction`): H100 TP1 0.874.
- before 0.5: a table by TP size: 0.88 (TP1), 0.87 (TP2), 0.85 (TP4), 0.81 (TP8), 0.79 (TP16): the published 0.4.x
  logs in validation/sglang_calibration.csv print 0.88 at TP1 and 0.85 at TP4.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import WorkloadError, shown
from ...units import GiB, MiB, fmt_bytes
from .vllm_kv import VllmLayerSpec

# SGLang sizes the pool from free memory, not from the card's size. Before the weights, the CUDA context, NCCL
# and the custom all-reduce already hold some: "Load weight begin. avail mem=78.81 GB" on an H100 of
# 79.19 GiB (0.38), 21.63 on an L4 of 21.95 at TP4 (0.32), 23.08 on an RTX 4090 of 23.64 at TP4 (0.56;
# validation/sglang_calibration.csv). kvplan takes the H100 figure.
PRELOAD_BYTES = int(0.38 * GiB)
# Loading takes more than the parameters and RoPE tables: "mem usage" minus them is 0.10 GiB for
# Llama-3.1-8B, 0.13 for Qwen2.5-7B, 0.20 for Qwen3-14B at TP4 and 0.28 for a Qwen2.5-32B at TP4.
LOAD_EXTRA_BYTES = int(0.15 * GiB)


# The latest release whose source kvplan's rules were read from (pip download sglang==0.5.23 --no-deps).
DEFAULT_VERSION = (0, 5, 23)
# The start-up accounting read in the 0.5.23 wheel (arg_groups/memory_hook.py); the releases between 0.5.3 and
# 0.5.23 were not bisected, so kvplan keys the new terms on 0.5.23 and keeps 0.5.3's for the ones before.
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
    swa_full_tokens_ratio: float = 0.8
    version: tuple[int, int, int] = DEFAULT_VERSION
    vlm_factor: float = 1.0   # a vision-language model's default fraction is scaled by this (vlm_factor())
    dp_attention: int = 1     # --dp N --enable-dp-attention (0.5.23: attn_dp_size): attention TP = TP / N
    mla: bool = False         # MLA models reserve 1.5 GiB for prefill graphs from 0.5.23
    speculative: bool = False  # EAGLE / MTP: max_running_requests 48 unless set


# (upper bound MB, chunked_prefill_size, cuda_graph_max_bs below TP4, from TP4): T4 / 4080; A10 / 4090 / 5090;
# A100-40GB / L40; H100 / A100-80GB; H200 / H20; B200 / MI300 above.
_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
          (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


# 0.5.23 arg_groups/memory_hook.py:89-180: the same but for 20-35 GiB cards (RTX 4090 / 5090, A10, L4): 4096
# tokens, 48 graphs below TP4 and 160 from it
_TIERS_0523 = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
               (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


def batch_defaults(memory_mb: float, tp: int, version: tuple[int, int, int] = DEFAULT_VERSION) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a card of `memory_mb`."""
    for limit, chunk, small_tp, big_tp in (_TIERS_0523 if version >= V0523 else _TIERS):
        if limit is None or memory_mb < limit:
            return chunk, small_tp if tp < 4 else big_tp
    raise AssertionError("unreachable")


def default_mem_fraction(total_bytes: int, s: SglangSettings) -> tuple[float, int]:
    """(mem_fraction_static, reserved bytes) as SGLang derives them when not given."""
    if s.version[:2] < (0, 5):
        tp = s.tensor_parallel_size
        fraction = next(f for size, f in OLD_TP_FRACTIONS if tp >= size)
        return fraction, int(total_bytes * (1 - fraction))
    memory_mb = total_bytes / MiB
    if s.version < V053:
        return _class_fraction(memory_mb, s)
    chunk, graph_bs = batch_defaults(memory_mb, s.tensor_parallel_size, s.version)
    chunk = s.chunked_prefill_size or chunk
    graph_bs = s.cuda_graph_max_bs or graph_bs
    reserved_mb = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + s.tensor_parallel_size * s.pipeline_parallel_size / 8 * 1024
    if s.version >= V0523:
        reserved_mb += _graph_reserve_0523(chunk, graph_bs, s)
    if memory_mb > 60 * 1024:
        reserved_mb = max(reserved_mb, 10 * 1024)
    return round((memory_mb - reserved_mb) / memory_mb, 3), int(reserved_mb * MiB)


def _class_fraction(memory_mb: float, s: SglangSettings) -> tuple[float, int]:
    """0.5.0-0.5.2 (read in 0.5.1 server_args.py:351-395): a reserve by the card's memory class and P = TP x PP:
    (2.8 + P / 10) GB under 35 GB, (9.5 + P / 2) under 90, (12 + P / 2) under 160, 32 GB above; +2 GB for a
    speculative algorithm, +4 GB for DP attention. H100 TP1: 10,240 MB of 81,090 -> 0.874."""
    p = s.tensor_parallel_size * s.pipeline_parallel_size
    gb = 2.8 + p / 10 if memory_mb < 35 * 1024 else 9.5 + p / 2 if memory_mb < 90 * 1024 else \
        12 + p / 2 if memory_mb < 160 * 1024 else 32
    reserved_mb = gb * 1024 + (2048 if s.speculative else 0) + (4096 if s.dp_attention > 1 else 0)
    return round((memory_mb - reserved_mb) / memory_mb, 3), int(reserved_mb * MiB)


def _graph_reserve_0523(chunk: int, graph_bs: int, s: SglangSettings) -> float:
    """What 0.5.23's `reserve_for_graph_mb` (memory_hook.py:357-399) adds beyond 2 x max_bs: DP attention's
    padding, max_bs x DP x 3 MB (x 4.5 above 300), and the prefill CUDA graphs, on by default on CUDA: 8 MB per
    captured size (`generate_prefill_cuda_graph_batch_sizes`: 58 sizes up to 8,192 tokens, 464 MB), 1.5 GiB for
    MLA backends."""
    extra = 0.0
    if s.dp_attention > 1:
        extra += graph_bs * s.dp_attention * (4.5 if graph_bs > 300 else 3)
    return extra + (1536 if s.mla else 8 * len(prefill_graph_sizes(chunk)))


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """SGLang 0.5.23 arg_groups/cuda_graph_hook.py:480 `generate_prefill_cuda_graph_batch_sizes`."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [x for x in sizes if x <= max_bs]


# sglang 0.5.1 srt/configs/model_config.py `multimodal_model_archs` (the vision-language ones), and the models
# whose multimodal input is off unless --enable-multimodal (`mm_disabled_models`): no fraction change for those
MULTIMODAL_ARCHS = frozenset({"DeepseekVL2ForCausalLM", "Gemma3ForConditionalGeneration",
                              "Gemma3nForConditionalGeneration", "Glm4vForConditionalGeneration",
                              "Glm4vMoeForConditionalGeneration", "Grok1VForCausalLM", "LlavaLlamaForCausalLM",
                              "Llama4ForConditionalGeneration", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM",
                              "LlavaForConditionalGeneration", "LlavaVidForCausalLM", "MiniCPMV",
                              "Mistral3ForConditionalGeneration", "MllamaForConditionalGeneration",
                              "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                              "KimiVLForConditionalGeneration", "InternVLChatModel", "InternS1ForConditionalGeneration",
                              "VILAForConditionalGeneration", "Step3VLForConditionalGeneration"})
MM_DISABLED = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                         "Step3VLForConditionalGeneration"})


def vlm_factor(vit: tuple[str, int, int] | None, version: tuple[int, int, int]) -> float:
    """SGLang's `adjust_mem_fraction_for_vlm` (0.5.1 server_args.py 2297-2336), applied to a default fraction:
    0.95 x clamp(1 - 0.1 x (layers x hidden^2 / (24 x 1024^2) - 1), 0.8, 1.05). Mistral-Small-3.x's Pixtral
    (24 x 1024): x0.95; SigLIP (27 x 1152) x0.9097 where multimodal is on. Not before 0.5 (kvplan's table)."""
    if vit is None or version[:2] < (0, 5) or vit[0] not in MULTIMODAL_ARCHS or vit[0] in MM_DISABLED:
        return 1.0
    ratio = vit[1] * vit[2] ** 2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def cell_size(specs: list[VllmLayerSpec]) -> int:
    """Bytes per token across this rank's attention layers (SGLang `get_cell_size_per_token`)."""
    return sum(s.bytes_per_token for s in specs if s.kind != "mamba")


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
                context_length: int, extra_bytes: int = 0) -> SglangPool:
    """KV tokens SGLang can hold. Hybrid sliding models (Gemma 2/3, gpt-oss) get a full pool and an
    SWA pool with swa_tokens = full_tokens x swa_full_tokens_ratio, solving
    swa x swa_cell + full x full_cell = rest. `specs` hold a drafter's layers too (0.5.23: its pool has as many
    tokens as the target's); `extra_bytes`: draft weights and LoRA slots, resident before the budget is read."""
    fraction = s.mem_fraction_static
    if fraction is None:
        fraction, reserved = default_mem_fraction(total_bytes, s)
        fraction *= s.vlm_factor
        if fraction <= 0:  # a card under ~2.6 GiB: SGLang's reserve alone is larger (a 1 KiB card gave -3817471.0)
            raise WorkloadError(f"a GPU of {fmt_bytes(total_bytes)} is smaller than the {fmt_bytes(reserved)} SGLang "
                                "reserves for activations and CUDA graphs: pick a larger GPU")
    if not 0 < fraction <= 1:
        raise WorkloadError(f"mem_fraction_static must be in (0, 1], got {shown(fraction)}")
    before = total_bytes - PRELOAD_BYTES
    after = before - weights_bytes - LOAD_EXTRA_BYTES - extra_bytes
    rest = int(after - before * (1 - fraction))
    full_cell = sum(x.bytes_per_token for x in specs if x.kind in ("full", "mla", "chunked"))
    swa_cell = sum(x.bytes_per_token for x in specs if x.kind == "sliding")
    if swa_cell and full_cell:
        full = max(0, rest) / (full_cell + s.swa_full_tokens_ratio * swa_cell)
        full_tokens, swa_tokens = int(full), int(full * s.swa_full_tokens_ratio)
    else:
        cell = full_cell + swa_cell
        full_tokens = max(0, rest) // cell if cell else 0
        swa_tokens = 0
    page = max(1, s.page_size)
    full_tokens -= full_tokens % page
    swa_tokens -= swa_tokens % page
    running = min(4096, max(2048, int(full_tokens / max(1, context_length) * 512)))
    if s.speculative:   # EAGLE / MTP: 48 unless set (0.5.23 arg_groups/speculative_hook.py:1086-1094)
        running = 48
    if s.version >= V0523:   # never more than half the tokens (kv_cache_configurator.py:3119-3172)
        running = max(1, min(running, full_tokens // 2))
    return SglangPool(fraction, rest, full_cell + swa_cell, full_tokens, full_tokens, swa_tokens, running)
