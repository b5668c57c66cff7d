"""Searching plans: the fewest GPUs a model fits on (every TP x PP with TP inside a node, then the layout with the
most KV capacity), and for a plan that does not fit, the nearest changes that do, each one planned
(`kvplan.planning.planner.plan`)."""

from __future__ import annotations

from contextlib import suppress
from math import ceil

from ..config.load import load_cached
from ..errors import WorkloadError
from ..gpus import GPU, resolve_gpu
from ..model.spec import ModelSpec
from ..units import fmt_bytes
from .inputs import positive
from .planner import plan
from .result import Plan

GPUS_PER_NODE = 8  # an HGX / DGX node: tensor parallelism stays inside one, pipeline stages may cross nodes


TP_SIZES = (1, 2, 4, 8)


def fewest_gpus(model: ModelSpec | str, *, max_gpus: int = 64, gpus_per_node: int = GPUS_PER_NODE,
                **kwargs) -> Plan:
    """The fewest GPUs that fit, over every TP x PP with TP inside one node (TP 1, 2, 4, 8: TP across nodes
    would run its all-reduces over the network); at that count, the layout with the most KV capacity (vLLM's
    max concurrency, then KV tokens, then fewer stages). Qwen2.5-72B on L4s: 10 (TP 2 x PP 5), not TP 16;
    DeepSeek-V3 on H100s: 11 (TP 1 x PP 11), where at 16 TP 8 x PP 2 holds twice TP 16's requests (the MLA latent is
    replicated on every TP rank). A layout over one node says so in its notes.

    Bounded work: a layout whose stages cannot hold the weights is never planned (`_too_few_stages`), so a model
    that fits nowhere costs a plan per TP and the layouts near the weights' bound, not all 120 layouts up to 64 GPUs
    (a 10,000-layer config took 27 s)."""
    if isinstance(model, str):
        model = load_cached(model)
    per_node = positive("gpus_per_node", gpus_per_node)
    last_error = None
    # vLLM's DP engines multiply the GPUs: search TP x PP per engine, count in all
    dp = (positive("data parallel size", kwargs.get("dp")) or 1) if kwargs.get("engine", "vllm") == "vllm" else 1
    card = _card_bytes(kwargs)
    one_stage: dict[int, int] = {}   # TP -> one GPU's weights with every layer on it (PP 1)
    for count in range(dp, positive("max_gpus", max_gpus) + 1, dp):
        fitting = []
        per_engine = count // dp
        for tp in (t for t in TP_SIZES if t <= per_node and per_engine % t == 0):
            if _too_few_stages(one_stage.get(tp), per_engine // tp, card):
                continue
            try:
                candidate = plan(model, tp=tp, pp=per_engine // tp, **kwargs)
            except WorkloadError as exc:
                last_error = exc
                continue
            if candidate.pipeline_parallel_size == 1:
                one_stage[tp] = candidate.weights_bytes
            if candidate.fits:
                fitting.append(candidate)
        if fitting:
            best = max(fitting, key=lambda p: (p.max_concurrency, p.kv_cache_tokens, -p.pipeline_parallel_size))
            return best.model_copy(update={"notes": best.notes + _node_notes(best, per_node, fitting)})
    raise WorkloadError(f"{model.name} does not fit on {max_gpus} GPUs with these settings"
                        + (f" ({last_error})" if last_error else "") + ": use a larger GPU or a smaller max_model_len")


def _card_bytes(settings) -> int | None:
    """The card's memory, which no GPU's weights can reach in a plan that fits (vLLM, SGLang); None for
    transformers, whose layout kvplan does not split by stage."""
    if settings.get("engine", "vllm") not in ("vllm", "sglang"):
        return None
    gpu = settings.get("gpu", "H100-80GB")
    return (gpu if isinstance(gpu, GPU) else resolve_gpu(gpu)).memory_bytes


def _too_few_stages(weights_one_stage: int | None, pp: int, card: int | None) -> bool:
    """True when PP stages cannot hold the weights one stage holds at this TP: each layer's tensors sit on one
    stage (the embeddings on the first, the head on the last, a tied head on both), so the fullest stage holds at
    least weights / PP, and a plan fits only when every stage's weights stay under the card (its pool is
    positive)."""
    return weights_one_stage is not None and card is not None and pp > 1 and weights_one_stage >= pp * card


def _node_notes(best: Plan, per_node: int, fitting: list[Plan]) -> list[str]:
    """Why this layout among those of its size, and whether it spans nodes."""
    notes = []
    if len(fitting) > 1:
        others = ", ".join(f"TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}: "
                           f"{p.max_concurrency:,.2f}x" for p in fitting if p is not best)
        notes.append(f"fewest GPUs: {best.num_gpus}; of the layouts that fit there, TP {best.tensor_parallel_size} x "
                     f"PP {best.pipeline_parallel_size} holds the most requests ({best.max_concurrency:,.2f}x; {others})")
    if best.num_gpus > per_node:
        nodes = -(-best.num_gpus // per_node)
        notes.append(f"{best.num_gpus} GPUs span {nodes} nodes of {per_node}: the {best.pipeline_parallel_size} "
                     "pipeline stages pass activations between nodes (TP stays inside each node)")
    return notes


# The highest --gpu-memory-utilization a fix offers: vLLM refuses to start when the card's free memory at start-up
# is under utilization x total (v1/worker/utils.py `request_memory`, 0.33: 'Free memory on device ... is less than
# desired GPU memory utilization'), and the CUDA context alone is ~0.5 GiB of it: a fix leaves at least
# UTILIZATION_MARGIN_BYTES of the card outside the budget, and never offers more than MAX_UTILIZATION.
MAX_UTILIZATION = 0.98
UTILIZATION_MARGIN_BYTES = 2**30


def _higher_utilization(model: ModelSpec, p: Plan, settings: dict) -> tuple[str, str] | None:
    """vLLM's own first suggestion for a pool too small: the lowest --gpu-memory-utilization above this plan's,
    in hundredths, that fits, with the margin it leaves (gpt-oss-120b at 131,072 tokens on one H100 at vLLM 0.33:
    1.73 GiB short at 0.92, fits at 0.95, which leaves 3.96 GiB of the card's 79.19 outside vLLM). None when none
    up to the cap fits."""
    card = p.gpu_memory_bytes
    cap = min(MAX_UTILIZATION, int((1 - UTILIZATION_MARGIN_BYTES / card) * 100) / 100)
    step = int(round(p.gpu_memory_utilization * 100)) + 1
    for hundredths in range(step, int(round(cap * 100)) + 1):
        util = hundredths / 100
        with suppress(WorkloadError):
            tried = plan(model, **{**settings, "gpu_memory_utilization": util})
            if tried.fits:
                return (f"a GPU memory utilization of {util:.2f} (from {p.gpu_memory_utilization:.2f}) fits: "
                        f"{tried.max_concurrency:,.2f} requests of {tried.max_model_len:,} tokens, leaving "
                        f"{fmt_bytes(card - ceil(card * util))} of each {fmt_bytes(card)} GPU outside vLLM "
                        "(the CUDA context, other processes): vLLM refuses to start if less is free",
                        f"--gpu-memory-utilization {util:.2f}")
    return None


def fixes(model: ModelSpec | str, current: Plan | None = None, *, fewest: Plan | bool | None = None,
          **settings) -> list[tuple[str, str]]:
    """For a plan that does not fit: the nearest changes that do, each checked by planning it, as (sentence, the
    CLI flag that makes it). More GPUs (the fewest, any layout), an fp8 KV cache, online fp8 weights (vLLM,
    unquantized checkpoints), the longest context that fits. Mixtral-8x7B on one H100: 2 GPUs, or fp8 weights.
    Not part of plan(): fewest_gpus plans many layouts that do not fit. `current`: the plan of these settings,
    when the caller has it already; `fewest`: what fewest_gpus gave for them (its plan, or False when none fits),
    when the caller searched already (the Capacity page shows both: one search, not two)."""
    if isinstance(model, str):
        model = load_cached(model)
    p = current or plan(model, **settings)
    if p.fits:
        return []
    base = {k: v for k, v in settings.items() if k not in ("num_gpus", "tp", "pp")}
    out = []
    if fewest is None:
        try:
            fewest = fewest_gpus(model, **base)
        except WorkloadError:
            fewest = False
    if isinstance(fewest, Plan):
        out.append((f"{fewest.num_gpus} x {fewest.gpu} (TP {fewest.tensor_parallel_size} x PP "
                    f"{fewest.pipeline_parallel_size}) fits: {fewest.max_concurrency:,.2f} requests of "
                    f"{fewest.max_model_len:,} tokens",
                    f"--tp {fewest.tensor_parallel_size} --pp {fewest.pipeline_parallel_size}"))
    trials = []
    if p.kv_cache_dtype not in ("float8_e4m3", "float8_e5m2") and p.engine != "hf":
        trials.append(("an fp8 KV cache", {"kv_dtype": "fp8"}, "--kv-dtype fp8"))
    if p.engine == "vllm" and model.arch is not None and model.arch.quant is None and not settings.get("quantization"):
        trials.append(("weights quantized to fp8 at load", {"quantization": "fp8"}, "--quantization fp8"))
    for what, change, flag in trials:
        with suppress(WorkloadError):
            tried = plan(model, **{**settings, **change})
            if tried.fits:
                out.append((f"{what} fits on these GPUs: {tried.max_concurrency:,.2f} requests of "
                            f"{tried.max_model_len:,} tokens", flag))
    if p.engine == "vllm" and p.kv_cache_memory_bytes is None and (higher := _higher_utilization(model, p, settings)):
        out.append(higher)
    if 0 < p.max_model_len_that_fits < p.max_model_len:
        out.append((f"a context of {p.max_model_len_that_fits:,} tokens fits on these GPUs",
                    f"--max-model-len {p.max_model_len_that_fits}"))
    return out

