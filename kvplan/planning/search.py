"""Fixes for a plan that does not fit: the nearest changes that do, each one planned
(`kvplan.planning.planner.plan`): more GPUs in a deployable layout (`layouts`), an fp8 KV cache, fp8 weights, a
higher --gpu-memory-utilization, fewer --max-num-seqs, a shorter context."""

from __future__ import annotations

from contextlib import suppress
from math import ceil

from ..config.load import as_model
from ..errors import WorkloadError
from ..model.spec import ModelSpec
from ..units import fmt_bytes
from .layouts import deployable, fewest_gpus
from .planner import plan
from .result import Plan

__all__ = ["MAX_UTILIZATION", "UTILIZATION_MARGIN_BYTES", "fewest_gpus", "fixes"]   # fewest_gpus: its old home


def _more_gpus(p: Plan, any_layout: Plan | None) -> tuple[str, str]:
    """The fix 'more GPUs' in the layout found, with the fewest in any layout beside it when that is fewer."""
    dp, ep = p.data_parallel_size, p.expert_parallel_size > 1
    layout = f"TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}" + (f" x DP {dp}" if dp > 1 else "")
    beside = ""
    if any_layout is not None and any_layout.num_gpus < p.num_gpus:
        beside = (f"; the fewest in any layout is {any_layout.num_gpus} (TP {any_layout.tensor_parallel_size} x PP "
                  f"{any_layout.pipeline_parallel_size}, not a layout people deploy)")
    flag = (f"--tp {p.tensor_parallel_size} --pp {p.pipeline_parallel_size}" + (f" --dp {dp}" if dp > 1 else "")
            + (" --enable-expert-parallel" if ep else ""))
    return (f"{p.num_gpus} x {p.gpu} ({layout}{', experts over every rank' if ep else ''}) fits: "
            f"{p.max_concurrency:,.2f} requests of {p.max_model_len:,} tokens{beside}", flag)


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


def _reserved(p: Plan) -> int:
    """What the plan sets aside besides weights and KV: the activation peak and the extras (sampler buffers, CUDA
    graphs), which max_num_seqs sizes."""
    return p.activation_bytes + sum(p.extra.values())


def _fewer_seqs(model: ModelSpec, p: Plan, settings: dict) -> tuple[str, str] | None:
    """Where activations bind: the largest power of two below this plan's --max-num-seqs that fits, with the
    memory it frees. vLLM sizes its sampler's profile run by max_num_seqs (v1/worker/gpu/model_runner.py
    `_dummy_sampler_run`, 0.33: one dummy request per sequence, the logits of all of them), and the V2 runner's
    sampler buffers too, and captures CUDA graphs up to it: gpt-oss-120b at 131,072 tokens on one H100 is 1.73 GiB
    short at 1,024 sequences and fits at 64. None when fewer sequences free nothing or none fits. Fewer sequences
    never take more memory, so one plan at 1 says whether any fits, and a bisection over the powers of two finds
    the largest (5 plans from 1,024, not 11)."""
    powers = [2 ** k for k in range(p.max_num_seqs.bit_length()) if 2 ** k < p.max_num_seqs]   # 1, 2, ..., 512

    def tried(seqs: int) -> Plan | None:
        with suppress(WorkloadError):
            return plan(model, **{**settings, "max_num_seqs": seqs})
        return None

    least = tried(1) if powers else None
    if least is None or not least.fits or _reserved(least) >= _reserved(p):
        return None   # max_num_seqs does not size what binds here (the weights, the KV of one request)
    low, high, best = 0, len(powers) - 1, least   # powers[low] fits; find the last that does
    while low < high:
        mid = (low + high + 1) // 2
        candidate = tried(powers[mid])
        if candidate is not None and candidate.fits:
            low, best = mid, candidate
        else:
            high = mid - 1
    seqs = powers[low]
    return (f"--max-num-seqs {seqs} (from {p.max_num_seqs:,}) fits: the activation peak, sampler buffers and CUDA "
            f"graphs it sizes take {fmt_bytes(_reserved(p) - _reserved(best))} less per GPU, leaving "
            f"{best.max_concurrency:,.2f} requests of {best.max_model_len:,} tokens; at most {seqs} requests run at "
            "once", f"--max-num-seqs {seqs}")


def fixes(model: ModelSpec | str, current: Plan | None = None, *, fewest: Plan | bool | None = None,
          gpus_per_node: int | None = None, **settings) -> list[tuple[str, str]]:
    """For a plan that does not fit: the nearest changes that do, each checked by planning it, as (sentence, the
    CLI flag that makes it). More GPUs (the fewest, any layout), an fp8 KV cache, online fp8 weights (vLLM,
    unquantized checkpoints), the longest context that fits. Mixtral-8x7B on one H100: 2 GPUs, or fp8 weights.
    Not part of plan(): fewest_gpus plans many layouts that do not fit. `current`: the plan of these settings,
    when the caller has it already; `fewest`: what fewest_gpus gave for them (its plan, or False when none fits),
    when the caller searched already (the Capacity page shows both: one search, not two). More GPUs are offered in
    a deployable layout (`layouts.deployable`: TP inside a node of `gpus_per_node`, PP over whole nodes), with the
    fewest in any layout beside it."""
    model = as_model(model)
    p = current or plan(model, **settings)
    if p.fits:
        return []
    base = {k: v for k, v in settings.items() if k not in ("num_gpus", "tp", "pp")}
    out = []
    any_layout = None
    if fewest is None:
        try:
            choice = deployable(model, gpus_per_node=gpus_per_node, **base)
            fewest, any_layout = choice.plan, choice.fewest
        except WorkloadError:
            fewest = False
    if isinstance(fewest, Plan):
        out.append(_more_gpus(fewest, any_layout))
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
    if p.engine == "vllm" and (fewer := _fewer_seqs(model, p, settings)):
        out.append(fewer)
    if 0 < p.max_model_len_that_fits < p.max_model_len:
        out.append((f"a context of {p.max_model_len_that_fits:,} tokens fits on these GPUs",
                    f"--max-model-len {p.max_model_len_that_fits}"))
    return out

