"""vLLM's CUDA-graph memory estimate, which it subtracts from the KV budget by default since v0.20.

    KV pool = ceil(utilization x memory) - non-KV memory - CUDA-graph estimate     (when the estimate is applied)

(vllm 0.33 v1/worker/gpu_worker.py:725-757 `determine_available_memory`; the switch is
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, absent before 0.18, "0" in 0.18-0.19.1 envs.py:1654, "1" from 0.20.0
envs.py:1724; the log's "default since v0.21.0" is one release late.)

vLLM measures the estimate at start-up: per capture mode it captures the two largest graphs and extrapolates
(v1/worker/gpu_model_runner.py:5861-5960 at 0.19, :6267-6414 at 0.33):

    estimate = max over modes (first capture) + sum over modes max(second capture, 1 MiB) x (graphs - 1)

Llama-3.1-8B on an H100 at v0.19: max(138, 260 MiB) + 50 x 6 + 50 x 6 MiB = 860 MiB ("0.84 GiB total"). kvplan
cannot capture a graph, so it sizes the two captures from the model's dimensions, calibrated on the 58 start-ups
whose DEBUG lines print them (validation/measured/vllm_cudagraph_v0190.csv, llm-d-planner's v0.19.0 campaign on
H100s; `python validation/vllm_cudagraph.py` prints the fit):

- FULL first capture: FlashAttention's split-KV scratch for the largest size, M tokens x the per-rank attention
  output width x 130 B (Llama-3.1-8B: 512 x 32 heads x 128 x 130 B = 260 MiB; TP2 130, TP4 65; MLA's width is
  heads x kv_lora_rank: DeepSeek-V2-Lite 512 x 16 x 512 x 130 B = 520 MiB, measured 522). Where vLLM runs another
  backend the capture is a few MiB (float32, attention sinks, Gemma 3: 4-8 MiB measured).
- PIECEWISE first capture: the largest size's activations through one layer, kept twice:
  2 x M x (3 x intermediate per rank + 6 x hidden) x dtype bytes (Llama-3.1-8B: 132 MiB, measured 124-138).
- Each further graph: ~0.19 MiB (PIECEWISE) and ~0.17 MiB (FULL) per layer on the rank, in 2 MiB allocator
  pages, at least 1 MiB (Llama-3.1-8B: 6 and 6 MiB measured; Llama-3.3-70B TP2 20 and 12).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...model.arch import AttentionDims, MLPDims, MoEDims
from ...units import MiB

# From 0.20.0 the estimate is subtracted unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0; 0.18-0.19 compute it
# (and log it) but subtract it only with the variable set to 1; before 0.18 there is no estimate.
ESTIMATE_FROM = (0, 18)
APPLIED_BY_DEFAULT_FROM = (0, 20)
ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"

SPLIT_KV_BYTES = 130          # per token x attention output width, FULL first capture (FlashAttention backends)
OTHER_BACKEND_FIRST = 6 * MiB  # FULL first capture elsewhere: 4-8 MiB measured (fp32 Llama, Gemma 3, gpt-oss)
PIECEWISE_PER_LAYER = 0.19 * MiB
FULL_PER_LAYER = 0.17 * MiB
PAGE = 2 * MiB
MIN_PER_GRAPH = 1 * MiB       # vLLM's floor: `max(mem_samples[1], 1 << 20)`


@lru_cache(maxsize=1024)
def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, version: tuple[int, int, int], *,
                  spec_tokens: int = 0, sm100: bool = False, max_capture: int | None = None) -> tuple[int, ...]:
    """vLLM's default cudagraph_capture_sizes (config/vllm.py `_set_cudagraph_sizes`, 0.19 :1343-1503, 0.33
    :2398-2656). H100 API server (1024 seqs, 8192 tokens): 1, 2, 4, 8 ... 248, 256 ... 512, 51 sizes.
    `max_capture`: a model's own cap (gpt-oss sets 1024)."""
    q, S, T = 1 + spec_tokens, max_num_seqs, max_num_batched_tokens
    ceiling = 1024 if sm100 and version[:2] >= (0, 28) else 512   # 0.28: 1024 on the SM10x family (B200, B300)
    top = max_capture or min(2 * S * q, ceiling)
    M = min(T, top)
    sizes = _grid(M)
    if version[:3] >= (0, 20, 1) and T <= M:
        sizes.append(T)
    if max_capture is None and q > 1 and version[:2] >= (0, 29):   # spec decode: n x q decode batches
        sizes += [n * q for n in _grid(min(S, ceiling)) + [min(S, ceiling)] if n * q <= top]
    elif max_capture is None and q == 1 and version[:2] >= (0, 31) and S <= top:
        sizes.append(S)
    return tuple(sorted({s for s in sizes if s <= T}))   # cached: a planner sweep asks for the same sizes


def _grid(M: int) -> list[int]:
    return [i for i in (1, 2, 4) if i <= M] + list(range(8, min(M + 1, 256), 8)) + list(range(256, M + 1, 16))


@dataclass(frozen=True)
class GraphDims:
    """What the captures scale with, per rank: layers on the stage, hidden, intermediate (dense or the routed
    experts' top-k total, whichever is wider), attention output width (MLA: heads x kv_lora_rank)."""

    layers: int
    hidden: int
    intermediate: int
    attention_width: int
    act_bytes: int
    split_kv: bool          # FlashAttention's split-KV scratch in FULL graphs (16-bit, no sinks, not Gemma 3)


def graph_dims(shape, model_type: str, tp: int, layers: range, act_bytes: int) -> GraphDims:
    """The capture dimensions of one rank of the stage owning `layers` (kvplan.model.arch shape)."""
    return GraphDims(len(layers), shape.hidden, *_widths(shape, model_type, tp, act_bytes))


@lru_cache(maxsize=1024)
def _widths(shape, model_type: str, tp: int, act_bytes: int) -> tuple[int, int, int, bool]:
    """(FFN width, attention width per rank, dtype bytes, split-KV scratch): the widest layer of the whole model,
    whichever stage asks, so walked once per shape and TP (it was once per stage: PP 10,000 walked 10^8 layers)."""
    ffn, width, sinks = 0, 0, False
    for layer in shape.layers:
        if isinstance(layer.ffn, MoEDims):
            ffn = max(ffn, layer.ffn.expert.intermediate * layer.ffn.top_k, getattr(layer.ffn.shared, "intermediate", 0))
        elif isinstance(layer.ffn, MLPDims):
            ffn = max(ffn, layer.ffn.intermediate)
        m = layer.mixer
        if isinstance(m, AttentionDims):
            per_head = m.kv_lora_rank or m.v_head_dim
            width = max(width, -(-m.heads // tp) * per_head)
            sinks = sinks or m.sinks
    # Gemma 3 and float32 run attention backends without the split-KV scratch (4-8 MiB FULL first captures)
    split = act_bytes == 2 and not sinks and not model_type.startswith("gemma3")
    return -(-ffn // tp), width, act_bytes, split


@dataclass(frozen=True)
class GraphEstimate:
    piecewise_graphs: int
    full_graphs: int
    piecewise_first: int
    piecewise_per_graph: int
    full_first: int
    full_per_graph: int
    total_bytes: int
    formula: str


@lru_cache(maxsize=1024)
def estimate(d: GraphDims, sizes: tuple[int, ...], max_num_seqs: int, spec_tokens: int = 0,
             full_graphs: bool = True, v2: bool = False) -> GraphEstimate:
    """vLLM's estimate for these capture sizes: PIECEWISE graphs for every size, FULL decode graphs for the sizes
    from 1 + spec tokens to (1 + spec tokens) x max_num_seqs (cudagraph_dispatcher.py:203-229);
    `full_graphs=False` where the attention backend supports none (the mode falls back to PIECEWISE).

    The V1 runner (gpu_model_runner.py `profile_cudagraph_memory`, 0.19-0.33) captures the two largest graphs of
    each mode and extrapolates: max(first FULL, first PIECEWISE) + the rest at the second's size. The V2 runner
    (0.29+, v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory`, 0.33 :922-1039) captures every PIECEWISE
    graph into one pool and extrapolates only the FULL ones, so both first captures count (`v2`)."""
    if not sizes:
        return GraphEstimate(0, 0, 0, 0, 0, 0, 0, "no CUDA graphs (--enforce-eager)")
    q = 1 + spec_tokens
    M = sizes[-1]
    n_pw = len(sizes)
    n_full = sum(1 for s in sizes if q <= s <= q * max_num_seqs) if full_graphs else 0
    pw_first = 2 * M * (3 * d.intermediate + 6 * d.hidden) * d.act_bytes
    pw_per = _per_graph(d.layers * PIECEWISE_PER_LAYER)
    full_first = (M * d.attention_width * SPLIT_KV_BYTES if d.split_kv else OTHER_BACKEND_FIRST) if n_full else 0
    full_per = _per_graph(d.layers * FULL_PER_LAYER) if n_full else 0
    firsts = pw_first + full_first if v2 else max(pw_first, full_first)
    total = firsts + pw_per * (n_pw - 1) + full_per * max(0, n_full - 1)
    head = (f"PIECEWISE first {pw_first / MiB:,.0f} MiB + FULL first {full_first / MiB:,.0f} MiB" if v2 else
            f"max(PIECEWISE first {pw_first / MiB:,.0f} MiB, FULL first {full_first / MiB:,.0f} MiB)")
    formula = (f"CUDA graphs = {head} + {n_pw - 1} x {pw_per / MiB:,.0f} MiB"
               + (f" + {n_full - 1} x {full_per / MiB:,.0f} MiB" if n_full else "")
               + f" = {total / MiB:,.0f} MiB ({n_pw} PIECEWISE and {n_full} FULL graphs, largest {M} tokens"
               + (", V2 runner" if v2 else "") + ")")
    return GraphEstimate(n_pw, n_full, pw_first, pw_per, full_first, full_per, total, formula)


def _per_graph(raw: float) -> int:
    """The allocator hands graph pools whole 2 MiB pages: round to the nearest page, at least vLLM's 1 MiB floor."""
    return max(MIN_PER_GRAPH, round(raw / PAGE) * PAGE)


def computed(version: tuple[int, int, int], enforce_eager: bool) -> bool:
    """vLLM computes (and logs) the estimate: from 0.18, unless CUDA graphs are off."""
    return version[:2] >= ESTIMATE_FROM and not enforce_eager


def applied_by_default(version: tuple[int, int, int]) -> bool:
    return version[:2] >= APPLIED_BY_DEFAULT_FROM
