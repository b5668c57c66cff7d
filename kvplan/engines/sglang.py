"""SGLang's KV pool (`model_runner_kv_cache_mixin.py`, ~v0.5): a static fraction of the GPU for weights + KV.

    before          = free memory before the weights load      (SGLang's "total_gpu_memory")
    after           = before - weights - load extras           ("Load weight end. avail mem")
    rest            = after - before x (1 - mem_fraction_static) = before x fraction - weights - extras
    max_total_tokens = rest // cell_size, rounded down to whole pages
    cell_size       = KV heads per rank x (head_dim + v_head_dim) x layers x dtype bytes   (MLA: (R + rope) x layers)

mem_fraction_static default: (GPU memory - reserved) / GPU memory, reserved = 512 MB + max(chunked_prefill_size,
2048) x 1.5 MB + cuda_graph_max_bs x 2 MB + tp x pp / 8 x 1024 MB (server_args.py, as quoted by secondary sources).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import GiB, MiB
from .vllm_kv import VllmLayerSpec

# SGLang sizes the pool from free memory, not from the card's size. Before the weights, the CUDA context, NCCL
# and the custom all-reduce already hold some: "Load weight begin. avail mem=78.81 GB" on an H100 of
# 79.19 GiB (0.38), 21.63 on an L4 of 21.95 at TP4 (0.32), 23.08 on an RTX 4090 of 23.64 at TP4 (0.56;
# validation/sglang_calibration.csv). kvplan takes the H100 figure.
PRELOAD_BYTES = int(0.38 * GiB)
# Loading takes more than the parameters and RoPE tables: "mem usage" minus them is 0.10 GiB for
# Llama-3.1-8B, 0.13 for Qwen2.5-7B, 0.20 for Qwen3-14B at TP4 and 0.28 for a Qwen2.5-32B at TP4.
LOAD_EXTRA_BYTES = int(0.15 * GiB)


@dataclass(frozen=True)
class SglangSettings:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    mem_fraction_static: float | None = None
    page_size: int = 1
    chunked_prefill_size: int | None = None   # default 8192 on >= 70 GiB GPUs, else 2048 (server_args)
    cuda_graph_max_bs: int | None = None      # default 160 on big GPUs (varies by version)
    context_length: int | None = None
    swa_full_tokens_ratio: float = 0.8


def default_mem_fraction(total_bytes: int, s: SglangSettings) -> tuple[float, int]:
    """(mem_fraction_static, reserved bytes) as SGLang derives them when not given."""
    big = total_bytes >= 70 * 2**30
    chunk = s.chunked_prefill_size or (8192 if big else 2048)
    graph_bs = s.cuda_graph_max_bs or (160 if big else 48)
    reserved = int((512 + max(chunk, 2048) * 1.5 + graph_bs * 2
                    + s.tensor_parallel_size * s.pipeline_parallel_size / 8 * 1024) * MiB)
    return (total_bytes - reserved) / total_bytes, reserved


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
        fraction, _ = default_mem_fraction(total_bytes, s)
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
