"""SGLang's KV pool (`model_runner_kv_cache_mixin.py`, ~v0.5): a static fraction of the GPU for weights + KV.

    before          = free memory before the weights load      (SGLang's "total_gpu_memory")
    after           = before - weights - load extras           ("Load weight end. avail mem")
    rest            = after - before x (1 - mem_fraction_static) = before x fraction - weights - extras
    max_total_tokens = rest // cell_size, rounded down to whole pages
    cell_size       = KV heads per rank x (head_dim + v_head_dim) x layers x dtype bytes   (MLA: (R + rope) x layers)

mem_fraction_static when not given (`ServerArgs._handle_gpu_memory_settings`, read in sglang's server_args.py):
chunked_prefill_size and cuda_graph_max_bs by the card's memory (SGLang reads nvidia-smi's total, 0.3-0.6 GiB
above the runtime total kvplan's catalogue holds: the fraction can differ in its third decimal), then
reserved = 512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 MB, at least
10 GB on cards over 60 GB, and fraction = round((memory - reserved) / memory, 3). SGLang before 0.5 used a table
by TP size instead: 0.88 (TP1), 0.87 (TP2), 0.85 (TP4), 0.81 (TP8), 0.79 (TP16): the published 0.4.x logs in
validation/sglang_calibration.csv print 0.88 at TP1 and 0.85 at TP4.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import WorkloadError
from ..units import GiB, MiB, fmt_bytes
from .vllm_kv import VllmLayerSpec

# SGLang sizes the pool from free memory, not from the card's size. Before the weights, the CUDA context, NCCL
# and the custom all-reduce already hold some: "Load weight begin. avail mem=78.81 GB" on an H100 of
# 79.19 GiB (0.38), 21.63 on an L4 of 21.95 at TP4 (0.32), 23.08 on an RTX 4090 of 23.64 at TP4 (0.56;
# validation/sglang_calibration.csv). kvplan takes the H100 figure.
PRELOAD_BYTES = int(0.38 * GiB)
# Loading takes more than the parameters and RoPE tables: "mem usage" minus them is 0.10 GiB for
# Llama-3.1-8B, 0.13 for Qwen2.5-7B, 0.20 for Qwen3-14B at TP4 and 0.28 for a Qwen2.5-32B at TP4.
LOAD_EXTRA_BYTES = int(0.15 * GiB)


DEFAULT_VERSION = (0, 5, 0)
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


# (upper bound MB, chunked_prefill_size, cuda_graph_max_bs below TP4, from TP4): T4 / 4080; A10 / 4090 / 5090;
# A100-40GB / L40; H100 / A100-80GB; H200 / H20; B200 / MI300 above.
_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
          (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


def batch_defaults(memory_mb: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a card of `memory_mb`."""
    for limit, chunk, small_tp, big_tp in _TIERS:
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
    chunk, graph_bs = batch_defaults(memory_mb, s.tensor_parallel_size)
    chunk = s.chunked_prefill_size or chunk
    graph_bs = s.cuda_graph_max_bs or graph_bs
    reserved_mb = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + s.tensor_parallel_size * s.pipeline_parallel_size / 8 * 1024
    if memory_mb > 60 * 1024:
        reserved_mb = max(reserved_mb, 10 * 1024)
    return round((memory_mb - reserved_mb) / memory_mb, 3), int(reserved_mb * MiB)


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
                context_length: int) -> SglangPool:
    """KV tokens SGLang can hold. Hybrid sliding models (Gemma 2/3, gpt-oss) get a full pool and an
    SWA pool with swa_tokens = full_tokens x swa_full_tokens_ratio, solving
    swa x swa_cell + full x full_cell = rest."""
    fraction = s.mem_fraction_static
    if fraction is None:
        fraction, reserved = default_mem_fraction(total_bytes, s)
        fraction *= s.vlm_factor
        if fraction <= 0:  # a card under ~2.6 GiB: SGLang's reserve alone is larger (a 1 KiB card gave -3817471.0)
            raise WorkloadError(f"a GPU of {fmt_bytes(total_bytes)} is smaller than the {fmt_bytes(reserved)} SGLang "
                                "reserves for activations and CUDA graphs: pick a larger GPU")
    if not 0 < fraction <= 1:
        raise WorkloadError(f"mem_fraction_static must be in (0, 1], got {fraction!r}")
    before = total_bytes - PRELOAD_BYTES
    after = before - weights_bytes - LOAD_EXTRA_BYTES
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
    return SglangPool(fraction, rest, full_cell + swa_cell, full_tokens, full_tokens, swa_tokens, running)
