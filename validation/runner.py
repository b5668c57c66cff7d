"""Run one case: kvplan's prediction, the real `model.generate(...)`, the measurement, the comparison.

One generate call per case does the work: a logits processor (`Probe`) runs after every forward pass, so its
first call sees the cache exactly as the prefill left it (what `generate(max_new_tokens=1)` returns) and its
last call the final cache (`out.cache`, P + N - 1 tokens = kvplan's seq_len). The cache object generate
builds is caught by a forward pre-hook (the `cache=` keyword of the model call).

Predicted vs measured, per case:
- KV bytes after prefill and after decode: `Estimate.prefill_peak_bytes` / `kv_cache_bytes` against the unique
  storage bytes the walk finds (exact on every device); on CUDA also `memory_allocated` deltas (the caching
  allocator rounds every block to 512 bytes; right after the prefill the last position's logits are in flight).
- peak: `kvplan.planning.engines.hf_peak.hf_peak_for` against `max_memory_allocated` (CUDA, reset between phases) or the
  CPU allocator's events (torch profiler).
An out-of-memory error (real on CUDA, simulated with --memory-limit on CPU) is a result, set against the fit
kvplan predicted.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

import kvplan
from kvplan.errors import KVPlanError
from kvplan.planning.engines.hf_peak import CUDA_CONTEXT_BYTES, hf_peak_for

from .measure import CpuPeak, CudaMemory, allocator_bytes, free_memory, module_bytes, tensor_bytes, walk_cache
from .models import build_model, hf_config, local_weights
from .suites import DTYPE_NAMES, Case

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FINISHED = {"ok", "mismatch", "oom", "unsupported"}  # --resume skips these; errors and skips run again


class BudgetExceeded(Exception):
    """The --time-budget ran out in the middle of a case."""


class SimulatedOOM(torch.OutOfMemoryError):
    """Raised by the harness when a run would exceed --memory-limit on a device that cannot enforce it."""


@dataclass
class RunContext:
    device: torch.device
    suite: str
    time_budget: float | None = None
    memory_limit: int | None = None       # bytes; CUDA enforces it, CPU simulates it between steps
    pretrained: bool = False
    started: float = field(default_factory=time.monotonic)
    speed: float = 1.0                    # measured / estimated time, learned as cases finish
    _model_key: Any = None
    _model: Any = None
    _model_info: dict = field(default_factory=dict)

    @property
    def deadline(self) -> float | None:
        return None if self.time_budget is None else self.started + self.time_budget

    def remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def device_memory(self) -> int | None:
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            return min(total, self.memory_limit) if self.memory_limit else total
        return self.memory_limit

    # ------------------------------------------------------------ the model, reused by consecutive cases

    def model_for(self, case: Case, text: dict):
        key = (case.recipe, case.dtype, self.pretrained)
        if key == self._model_key:
            return self._model, self._model_info
        self.release_model()
        path = local_weights(case.recipe.source) if self.pretrained and case.recipe.source != "inline" \
            and not case.recipe.shrink else None
        t0 = time.monotonic()
        model = build_model(text, TORCH_DTYPES[case.dtype], self.device, seed=0, pretrained_path=path)
        info = {"weights": "pretrained" if path else "random", "build_seconds": round(time.monotonic() - t0, 3),
                "attn_implementation": getattr(model.config, "_attn_implementation", None) or "sdpa",
                "experts_implementation": getattr(model.config, "_experts_implementation", None) or "eager",
                "weights_bytes_measured": module_bytes(model)}
        if self.device.type == "cuda":
            _warm_up(model, self.device)
        self._model_key, self._model, self._model_info = key, model, info
        return model, info

    def release_model(self) -> None:
        self._model = None
        self._model_key = None
        self._model_info = {}
        free_memory(self.device)


def _warm_up(model, device) -> None:
    """One tiny generate so that cuBLAS workspaces and lazy buffers exist before any baseline is read."""
    ids = torch.full((1, 2), 3, dtype=torch.long, device=device)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, min_new_tokens=2,
                       do_sample=False, pad_token_id=0)
    if hasattr(model, "_previous_max_cache_length"):
        del model._previous_max_cache_length
    free_memory(device)


# ---------------------------------------------------------------- prediction


def predict(case: Case, text: dict, *, attn_implementation: str | None = None,
            experts_implementation: str | None = None, device_type: str = "cpu"):
    """(ModelSpec, Estimate, HFPeak) for a case. kvplan reads the very dict transformers gets."""
    spec = kvplan.parse_config(text, name=case.recipe.key)
    kwargs: dict[str, Any] = {"prompt_len": case.prompt_len, "dtype": case.dtype}
    if case.cache in ("static", "offloaded_static"):
        kwargs["max_cache_len"] = case.seq_len
    if case.quant is not None:
        kwargs.update(kv_dtype=case.quant.kv_dtype, quant_backend=case.quant.backend)
        if case.quant.backend != "fp8":
            kwargs.update(q_group_size=case.quant.group, residual_length=case.quant.residual)
    est = kvplan.estimate(spec, case.seq_len, case.batch_size, cache=case.cache, **kwargs)
    attn = attn_implementation or default_attn_implementation(text)
    experts = experts_implementation or ("grouped_mm" if device_type == "cuda" else "eager")
    peak = hf_peak_for(spec, est, attn_implementation=attn, experts_implementation=experts, device=device_type)
    return spec, est, peak


def device_need(peak, device_type: str) -> int:
    """What a case needs of the device: the predicted allocator peak, plus the CUDA context on a GPU."""
    return peak.peak_allocated_bytes + (CUDA_CONTEXT_BYTES if device_type == "cuda" else 0)


def default_attn_implementation(text: dict) -> str:
    """What transformers picks without flash-attn installed: sdpa when the class supports it, else eager."""
    from transformers import AutoModelForCausalLM

    cfg = hf_config(text)
    cls = AutoModelForCausalLM._model_mapping[type(cfg)]
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


# ---------------------------------------------------------------- running


class Probe:
    """A logits processor: `on_first` after the prefill, `on_step` after every forward (prefill included)."""

    def __init__(self, on_first, on_step):
        self.calls = 0
        self.on_first, self.on_step = on_first, on_step

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.calls == 1:
            self.on_first()
        self.on_step(self.calls)
        return scores


def _generate(model, ids, case: Case, new_tokens: int, probe: Probe | None, cache_holder: dict | None):
    from transformers import LogitsProcessorList

    if hasattr(model, "_previous_max_cache_length"):   # static caches grow to a previous call's size otherwise
        del model._previous_max_cache_length
    kwargs: dict[str, Any] = dict(
        attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
        num_beams=1, return_dict_in_generate=True, cache_implementation=case.cache, pad_token_id=0,
    )
    if case.cache in ("static", "offloaded_static"):
        kwargs["max_cache_len"] = case.seq_len          # the prefill-only call sizes the cache like the full one
    if case.quant is not None:
        kwargs["cache_config"] = case.quant.cache_config()
    if probe is not None:
        kwargs["logits_processor"] = LogitsProcessorList([probe])
    handle = None
    if cache_holder is not None:
        def hook(_module, _args, kw):
            if kw.get("cache") is not None:
                cache_holder["cache"] = kw["cache"]
        handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            return model.generate(ids, **kwargs)
    finally:
        if handle is not None:
            handle.remove()


def _prompt(case: Case, vocab: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case.batch_size * 100_003 + case.prompt_len)
    return torch.randint(3, max(4, vocab), (case.batch_size, case.prompt_len), generator=gen).to(device)


def base_record(case: Case, suite: str, device: torch.device) -> dict:
    return {
        "id": case.id, "suite": suite, "model": case.recipe.key, "source": case.recipe.source,
        "variant": case.recipe.variant, "model_type": None, "cache": case.cache,
        "quant_backend": case.quant.backend if case.quant else None,
        "kv_dtype": case.quant.kv_dtype if case.quant else None,
        "q_group_size": case.quant.group if case.quant and case.quant.backend != "fp8" else None,
        "residual_length": case.quant.residual if case.quant and case.quant.backend != "fp8" else None,
        "batch_size": case.batch_size, "prompt_len": case.prompt_len, "new_tokens": case.new_tokens,
        "seq_len": case.seq_len, "dtype": DTYPE_NAMES[case.dtype], "device": device.type, "note": case.note,
        "predicted_kv_bytes": None, "measured_kv_bytes": None, "kv_error_bytes": None,
        "predicted_prefill_kv_bytes": None, "measured_prefill_kv_bytes": None, "prefill_kv_error_bytes": None,
        "predicted_peak_bytes": None, "measured_peak_bytes": None, "peak_error_pct": None,
        "peak_method": None, "status": "error", "reason": "",
    }


def run_case(case: Case, ctx: RunContext) -> dict:
    rec = base_record(case, ctx.suite, ctx.device)
    t0 = time.monotonic()
    try:
        _run(case, ctx, rec)
    except BudgetExceeded as exc:
        rec.update(status="skipped", reason=f"time budget: {exc}")
    except torch.OutOfMemoryError as exc:
        _record_oom(rec, exc)
    except RuntimeError as exc:
        if "out of memory" in str(exc).lower() or "can't allocate memory" in str(exc).lower():
            _record_oom(rec, exc)
        else:
            rec.update(status="error", reason=_short(exc), traceback=traceback.format_exc(limit=6))
    except Exception as exc:  # noqa: BLE001 - a failing case is a result, the suite goes on
        rec.update(status="error", reason=_short(exc), traceback=traceback.format_exc(limit=6))
    finally:
        rec["seconds"] = round(time.monotonic() - t0, 3)
        if ctx.device.type == "cuda":        # CPU: refcounting frees the run; a full gc costs seconds here
            free_memory(ctx.device)
    return rec


def _record_oom(rec: dict, exc: BaseException) -> None:
    fits = rec.get("planner_fits")
    verdict = "kvplan predicted it would not fit" if fits is False else \
        "kvplan predicted it would fit" if fits else "no fit prediction"
    rec.update(status="oom", reason=f"{_short(exc)} ({verdict})", fit_agrees=fits is False if fits is not None
               else None)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _run(case: Case, ctx: RunContext, rec: dict) -> None:
    text = case.recipe.text_dict(keep_quantization=ctx.pretrained)
    rec["model_type"] = text["model_type"]
    try:
        spec, est, peak = predict(case, text, device_type=ctx.device.type)
    except KVPlanError as exc:
        rec.update(status="unsupported", reason=f"kvplan refuses the workload: {exc}")
        return
    limit = ctx.device_memory()
    predicted_total = device_need(peak, ctx.device.type)
    rec.update(
        predicted_kv_bytes=est.kv_cache_bytes, predicted_prefill_kv_bytes=est.prefill_peak_bytes,
        predicted_logical_bytes=est.logical_bytes, predicted_bookkeeping_bytes=est.bookkeeping_bytes,
        predicted_kv_device_bytes=est.device_bytes, predicted_kv_host_bytes=est.host_bytes,
        predicted_peak_bytes=peak.peak_allocated_bytes, predicted_prefill_peak_bytes=peak.prefill_bytes,
        predicted_decode_peak_bytes=peak.decode_bytes, predicted_weights_bytes=peak.weights_bytes,
        peak_formula=peak.formula, memory_limit_bytes=limit,
        planner_fits=None if limit is None else predicted_total <= limit,
    )
    if ctx.device.type == "cuda" and limit is not None and predicted_total > limit and not ctx.memory_limit:
        rec.update(status="skipped", reason=f"predicted peak {predicted_total:,} B (with CUDA context) exceeds the "
                                            f"device's {limit:,} B")
        return
    build_s, run_s = estimate_seconds(case, est, peak, ctx)
    estimate_s = build_s + run_s * ctx.speed
    rec["estimated_seconds"] = round(estimate_s, 2)
    if estimate_s + 5 > ctx.remaining():
        rec.update(status="skipped", reason=f"time budget: needs about {estimate_s:.0f} s, "
                                            f"{max(0.0, ctx.remaining()):.0f} s left")
        return
    built = (case.recipe, case.dtype, ctx.pretrained) != ctx._model_key
    model, info = ctx.model_for(case, text)
    run_started = time.monotonic()
    rec.update({k: v for k, v in info.items()})
    # the kernels the model really runs refine the peak prediction
    _, _, peak = predict(case, text, attn_implementation=info["attn_implementation"],
                         experts_implementation=info["experts_implementation"], device_type=ctx.device.type)
    rec.update(predicted_peak_bytes=peak.peak_allocated_bytes, predicted_prefill_peak_bytes=peak.prefill_bytes,
               predicted_decode_peak_bytes=peak.decode_bytes, peak_formula=peak.formula)
    if ctx.memory_limit and ctx.device.type == "cpu" and info["weights_bytes_measured"] > ctx.memory_limit:
        raise SimulatedOOM(f"simulated: weights {info['weights_bytes_measured']:,} B exceed the limit "
                           f"{ctx.memory_limit:,} B")
    vocab = hf_config(text).get_text_config(decoder=True).vocab_size
    ids = _prompt(case, vocab, ctx.device)
    if ctx.device.type == "cuda":
        _measure_cuda(case, ctx, rec, model, ids, est)
    else:
        _measure_cpu(case, ctx, rec, model, ids, est, info)
    _compare(rec, est)
    # learn how fast this machine runs cases compared with the estimate (model builds apart: the first one
    # also pays for importing the modeling code)
    ratio = (time.monotonic() - run_started) / max(run_s, 1e-3)
    ctx.speed = 0.6 * ctx.speed + 0.4 * min(max(ratio, 0.05), 20.0)
    rec["model_built"] = built


def _deadline_check(ctx: RunContext, step: int) -> None:
    if ctx.remaining() < 0:
        raise BudgetExceeded(f"stopped after {step} forward passes")


def _measure_cpu(case, ctx, rec, model, ids, est, info) -> None:
    holder: dict = {}
    state: dict = {}
    baseline = info["weights_bytes_measured"] + tensor_bytes(ids) * 2   # ids and the attention mask

    def on_first():
        CpuPeak.mark()
        state["prefill"] = walk_cache(holder["cache"])

    def on_step(step):
        _deadline_check(ctx, step)
        if ctx.memory_limit:
            held = baseline + walk_cache(holder["cache"]).storage
            if held > ctx.memory_limit:
                raise SimulatedOOM(f"simulated: weights + inputs + cache = {held:,} B exceed the limit "
                                   f"{ctx.memory_limit:,} B after {step} forward passes")

    probe = Probe(on_first, on_step)
    with CpuPeak() as tracker:
        out = _generate(model, ids, case, case.new_tokens, probe, holder)
    final = walk_cache(out.cache)
    rec.update(
        measured_kv_bytes=final.storage, measured_prefill_kv_bytes=state["prefill"].storage,
        measured_logical_bytes=final.logical, measured_bookkeeping_bytes=final.scalars,
        measured_kv_host_bytes=final.host_storage, cache_class=type(out.cache).__name__,
        layer_classes=final.layer_classes, cached_tokens=_cached_tokens(out.cache),
        generated_tokens=int(out.sequences.shape[1] - case.prompt_len), forward_passes=probe.calls,
        measured_peak_bytes=baseline + tracker.peak, measured_prefill_peak_bytes=baseline + tracker.prefill_peak,
        measured_decode_peak_bytes=None if tracker.decode_peak is None else baseline + tracker.decode_peak,
        peak_method="cpu: torch profiler allocation events (live tensor bytes) + weights + inputs",
        allocation_events=tracker.events,
    )
    del out


def _measure_cuda(case, ctx, rec, model, ids, est) -> None:
    """One generate call, probed after every forward. memory_allocated is read before the call (weights, inputs,
    cuBLAS workspace), right after the prefill (the cache plus the last position's logits in flight) and after
    the call (the cache plus the output ids); max_memory_allocated is reset after the prefill, so the prefill
    and decode peaks come apart."""
    mem = CudaMemory(ctx.device)
    if ctx.memory_limit:
        torch.cuda.set_per_process_memory_fraction(min(1.0, ctx.memory_limit / mem.total()), ctx.device)
    free_memory(ctx.device)
    holder: dict = {}
    state: dict = {}

    def on_first():
        state["prefill_peak"] = mem.peak()
        state["prefill_allocated"] = mem.allocated()
        state["prefill"] = walk_cache(holder["cache"])
        mem.reset_peak()

    def on_step(step):
        _deadline_check(ctx, step)

    base = mem.allocated()
    mem.reset_peak()
    probe = Probe(on_first, on_step)
    out = _generate(model, ids, case, case.new_tokens, probe, holder)
    decode_peak = mem.peak()
    after = mem.allocated()
    final = walk_cache(out.cache)
    alloc = after - base - allocator_bytes(out.sequences)
    prefill_peak = state.get("prefill_peak", decode_peak)
    b = 4 if case.dtype == "fp32" else 2
    vocab = model.config.get_text_config(decoder=True).vocab_size
    logits_in_flight = case.batch_size * vocab * (b + 8)          # lm_head output, float32 copy, processed scores
    rec.update(
        baseline_allocated_bytes=base,                              # weights + inputs + cuBLAS workspace
        measured_kv_bytes=final.storage, measured_prefill_kv_bytes=state["prefill"].storage,
        measured_logical_bytes=final.logical, measured_bookkeeping_bytes=final.scalars,
        measured_kv_alloc_bytes=alloc, measured_kv_device_bytes=final.device_storage,
        measured_kv_host_bytes=final.host_storage, measured_kv_allocator_rounded_bytes=final.allocator_storage,
        measured_prefill_alloc_delta_bytes=state["prefill_allocated"] - base,
        prefill_logits_in_flight_bytes=logits_in_flight,
        cache_class=type(out.cache).__name__, layer_classes=final.layer_classes,
        cached_tokens=_cached_tokens(out.cache), generated_tokens=int(out.sequences.shape[1] - case.prompt_len),
        forward_passes=probe.calls, measured_peak_bytes=max(prefill_peak, decode_peak),
        measured_prefill_peak_bytes=prefill_peak, measured_decode_peak_bytes=decode_peak,
        peak_method="cuda: torch.cuda.max_memory_allocated, reset after the prefill",
        reserved_peak_bytes=mem.reserved_peak(), nvml_process_bytes=mem.process_bytes(),
        device_used_bytes=mem.device_used(), device_total_bytes=mem.total(),
    )
    device_pred = est.device_bytes
    rec["kv_alloc_error_pct"] = None if not device_pred else round(100 * (alloc - device_pred) / device_pred, 4)
    del out


def repredict(case: Case, rec: dict) -> dict:
    """A stored result with kvplan's predictions computed again (the measurements are kept as they were)."""
    if rec.get("measured_kv_bytes") is None:
        return rec
    rec = dict(rec)
    text = case.recipe.text_dict(keep_quantization=rec.get("weights") == "pretrained")
    _, est, peak = predict(case, text, attn_implementation=rec.get("attn_implementation"),
                           experts_implementation=rec.get("experts_implementation"), device_type=rec["device"])
    rec.update(predicted_kv_bytes=est.kv_cache_bytes, predicted_prefill_kv_bytes=est.prefill_peak_bytes,
               predicted_logical_bytes=est.logical_bytes, predicted_bookkeeping_bytes=est.bookkeeping_bytes,
               predicted_kv_device_bytes=est.device_bytes, predicted_kv_host_bytes=est.host_bytes,
               predicted_peak_bytes=peak.peak_allocated_bytes, predicted_prefill_peak_bytes=peak.prefill_bytes,
               predicted_decode_peak_bytes=peak.decode_bytes, predicted_weights_bytes=peak.weights_bytes,
               peak_formula=peak.formula)
    _compare(rec, est)
    return rec


def _cached_tokens(cache) -> int | None:
    try:
        return int(cache.get_seq_length())
    except (ValueError, AttributeError):   # only linear-attention layers: no token count
        return None


def _compare(rec: dict, est) -> None:
    rec["kv_error_bytes"] = rec["measured_kv_bytes"] - rec["predicted_kv_bytes"]
    rec["prefill_kv_error_bytes"] = rec["measured_prefill_kv_bytes"] - rec["predicted_prefill_kv_bytes"]
    rec["logical_error_bytes"] = rec["measured_logical_bytes"] - rec["predicted_logical_bytes"]
    pred, meas = rec["predicted_peak_bytes"], rec["measured_peak_bytes"]
    rec["peak_error_pct"] = None if not meas else round(100 * (pred - meas) / meas, 3)
    problems = []
    for label, key in (("after decode", "kv_error_bytes"), ("after prefill", "prefill_kv_error_bytes"),
                       ("logical", "logical_error_bytes")):
        if rec[key]:
            problems.append(f"{label}: measured - predicted = {rec[key]:+,} B")
    if rec.get("cached_tokens") not in (None, rec["seq_len"]) and rec["cache"] not in ("static", "offloaded_static"):
        problems.append(f"cache holds {rec['cached_tokens']} tokens, kvplan assumed {rec['seq_len']}")
    if problems:
        rec.update(status="mismatch", reason="; ".join(problems))
    else:
        rec.update(status="ok", reason="")


# ---------------------------------------------------------------- planning a run (no model built)


def plan_cases(cases: list[Case], device_type: str, memory_bytes: int | None) -> list[dict]:
    """What a run of `cases` would do on a device of `memory_bytes`, decided as `_run` decides it: each case's
    predicted peak (plus the CUDA context on CUDA), whether it fits (a case that does not is skipped without a
    build), and the estimated build + run seconds, summed in running order (`speed` 1: before any case has
    taught the harness this machine's pace)."""
    ctx = RunContext(device=torch.device(device_type), suite="plan")
    rows, total = [], 0.0
    for case in cases:
        row = {"id": case.id, "predicted_peak_bytes": None, "fits": None, "seconds": 0.0, "cumulative_s": total,
               "reason": ""}
        rows.append(row)
        try:
            _, est, peak = predict(case, case.recipe.text_dict(), device_type=device_type)
        except KVPlanError as exc:
            row["reason"] = f"kvplan refuses the workload: {exc}"
            continue
        need = device_need(peak, device_type)
        row.update(predicted_peak_bytes=need, fits=memory_bytes is None or need <= memory_bytes)
        if not row["fits"]:
            row["reason"] = "skipped: predicted peak exceeds the device"
            continue
        build, run = estimate_seconds(case, est, peak, ctx)
        ctx._model_key = (case.recipe, case.dtype, ctx.pretrained)
        total += build + run
        row.update(seconds=round(build + run, 2), cumulative_s=round(total, 2))
    return rows


# ---------------------------------------------------------------- time estimates


def estimate_seconds(case: Case, est, peak, ctx: RunContext) -> tuple[float, float]:
    """Rough (model build, run) seconds: the run from prefill FLOPs and decode bytes, scaled by `ctx.speed`
    (learned as cases finish) by the caller."""
    cuda = ctx.device.type == "cuda"
    flops_rate, bandwidth, per_layer_step = (1.5e14, 2.0e12, 4e-4) if cuda else (1.5e10, 4e9, 2e-3)
    weights = peak.weights_bytes
    params = weights / (4 if case.dtype == "fp32" else 2)
    try:                                  # MoE: a token runs its top-k experts only
        from kvplan.config.parse import parse_dims
        from kvplan.weights.rule import param_count

        counts = param_count(parse_dims(case.recipe.text_dict()))
        if counts.active and counts.total:
            params *= counts.active / counts.total
    except Exception:  # noqa: BLE001 - an estimate; the plain count will do
        pass
    tokens = case.batch_size * case.prompt_len
    layers = max(1, sum(g.layers for g in est.groups))
    attention = 2 * layers * case.batch_size * case.prompt_len ** 2 * 4096   # 4 x P^2 / 2 x q_dim, q_dim ~ 4096
    prefill = (2 * params * tokens + attention) / flops_rate
    decode = case.new_tokens * ((weights + est.kv_cache_bytes) / bandwidth + layers * per_layer_step)
    build = 0.0
    if (case.recipe, case.dtype, ctx.pretrained) != ctx._model_key:
        build = weights / (2e10 if cuda else 1e9) + (3.0 if cuda else 1.0)
    return build, prefill + decode + 0.2
