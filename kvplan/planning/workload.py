"""Capacity at a realistic workload: a request mix instead of every request at max_model_len, the throughput the
roofline allows at that concurrency, and what it costs.

    context        = prompt + output tokens a request holds when it finishes (its largest KV footprint)
    concurrency    = min(max_num_seqs, requests of the mean context the pool holds)        (vLLM's block rule)
    time per token = (active weights + KV of the running batch) / (bandwidth x TP x MBU)   (kvplan.planning.speed)
    output tok/s   = concurrency / time per token, per engine; x DP engines
    cost / 1M out  = GPUs x price per GPU-hour / (output tok/s x 3,600) x 10^6

Llama-3.1-70B on 4 x H100 (TP 4, vLLM 0.33, max_model_len 32,768) with 2,000-token prompts and 500-token outputs:
the pool holds 179.83 such requests at once where it holds 13.79 of 32,768 tokens (`kvplan plan ... --prompt-mean
2000 --output-mean 500`), and decodes them at 5,835 output tokens/s (tests/test_workload.py works it by hand). The throughput is a roofline (decode reads the active weights and the batch's KV once a
step; prefill and scheduling are not counted), so it is an upper bound, said in every result.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from ..cache.estimate import MAX_TOKENS
from ..config.load import as_model
from ..errors import WorkloadError, shown
from ..gpus import resolve_gpu
from .engines.vllm import max_concurrency_at
from .speed import plan_speed


@dataclass(frozen=True)
class RequestMix:
    """Prompt and output lengths of the requests served: means, and optionally the 95th percentiles."""

    prompt_mean: int
    output_mean: int
    prompt_p95: int | None = None
    output_p95: int | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_mean", "output_mean", "prompt_p95", "output_p95"):
            value = getattr(self, name)
            if value is None and name.endswith("p95"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
                raise WorkloadError(f"{name.replace('_', ' ')} must be a whole number of tokens from 1 to "
                                    f"{MAX_TOKENS:,}, got {shown(value)}")
        if self.prompt_p95 is not None and self.prompt_p95 < self.prompt_mean:
            raise WorkloadError("the p95 prompt is shorter than the mean prompt: give p95 >= mean")
        if self.output_p95 is not None and self.output_p95 < self.output_mean:
            raise WorkloadError("the p95 output is shorter than the mean output: give p95 >= mean")

    @property
    def mean_context(self) -> int:
        return self.prompt_mean + self.output_mean

    @property
    def p95_context(self) -> int | None:
        if self.prompt_p95 is None and self.output_p95 is None:
            return None
        return (self.prompt_p95 or self.prompt_mean) + (self.output_p95 or self.output_mean)


class WorkloadPlan(BaseModel):
    """A plan's capacity at a request mix, with the throughput and cost the roofline allows."""

    model_config = ConfigDict(frozen=True)

    prompt_mean: int
    output_mean: int
    mean_context: int
    p95_context: int | None
    concurrent_requests: float       # per engine, at the mean context (capped by max_num_seqs)
    concurrent_requests_p95: float | None   # if every request were p95-long
    limited_by: str                  # "KV pool" or "max_num_seqs"
    time_per_output_token_s: float   # at that concurrency
    ttft_s: float                    # one request's prefill of the mean prompt (batch 1)
    output_tokens_per_s: float       # all engines
    requests_per_s: float            # all engines, output-bound
    gpu_price_per_hour: float | None
    price_source: str
    cost_per_million_output_tokens: float | None
    formula: list[str]
    notes: list[str]


def workload_plan(model, plan, mix: RequestMix, gpu_price_per_hour: float | None = None,
                  price_source: str = "") -> WorkloadPlan:
    """The plan's capacity at `mix`: concurrency from the plan's own KV accounting (vLLM's blocks, SGLang's
    tokens), throughput from kvplan.planning.speed, cost from the price per GPU-hour (the catalog's when None).
    `model`: the planned ModelSpec, or its name as plan() takes it."""
    model = as_model(model)
    if plan.engine == "hf":
        raise WorkloadError("a workload plan is for serving engines (vLLM, SGLang): transformers' generate runs one "
                            "batch, see its plan")
    if not plan.fits:
        raise WorkloadError(f"{plan.model} does not fit on these GPUs: find a plan that fits first, then its workload")
    if mix.mean_context > plan.max_model_len:
        raise WorkloadError(f"a mean request of {mix.mean_context:,} tokens (prompt + output) is longer than the "
                            f"plan's context of {plan.max_model_len:,} tokens: plan a longer context or shorten the mix")
    held = _held(model, plan, mix.mean_context)
    concurrency = min(held, float(plan.max_num_seqs))
    p95 = mix.p95_context
    held_p95 = None if p95 is None else min(_held(model, plan, min(p95, plan.max_model_len)),
                                            float(plan.max_num_seqs))
    batch = max(1, int(concurrency))
    speed = plan_speed(model, plan, mix.prompt_mean, batch, context_len=mix.mean_context)
    ttft = plan_speed(model, plan, mix.prompt_mean, 1, context_len=mix.mean_context).ttft_s   # one new request
    engines = plan.data_parallel_size
    tokens_per_s = speed.tokens_per_s_total * engines
    requests_per_s = tokens_per_s / mix.output_mean
    price, source = _price(plan.gpu, gpu_price_per_hour, price_source)
    cost = None if price is None else plan.num_gpus * price / (tokens_per_s * 3600) * 1e6
    formula = [
        f"concurrency = min(max_num_seqs {plan.max_num_seqs:,}, requests of {mix.mean_context:,} tokens "
        f"({mix.prompt_mean:,} prompt + {mix.output_mean:,} output) the pool holds {held:,.2f}) = {concurrency:,.2f}",
        f"time per output token at batch {batch:,} = {speed.decode_bytes_per_step:,} B read per step / "
        f"(bandwidth x TP {plan.tensor_parallel_size} x MBU {speed.assumptions.mbu}) = "
        f"{speed.time_per_output_token_s * 1e3:,.2f} ms",
        f"output tokens/s = {batch:,} / {speed.time_per_output_token_s:.5f} s"
        + (f" x {engines} DP engines" if engines > 1 else "") + f" = {tokens_per_s:,.0f}",
    ]
    if cost is not None:
        formula.append(f"cost per 1M output tokens = {plan.num_gpus} GPUs x ${price:,.2f} per GPU-hour / "
                       f"({tokens_per_s:,.0f} tokens/s x 3,600) x 10^6 = ${cost:,.3f}")
    notes = [*speed.notes, "a roofline: prefill, scheduling and sampling are not counted, so throughput is an "
             "upper bound and cost a lower bound",
             "a request holds its prompt and output when it finishes: concurrency is for requests at the end of "
             "their output (the pool holds more while they are younger)"]
    if held_p95 is not None:
        notes.append(f"if every request were p95-long ({p95:,} tokens): {held_p95:,.2f} at once")
    return WorkloadPlan(prompt_mean=mix.prompt_mean, output_mean=mix.output_mean, mean_context=mix.mean_context,
                        p95_context=p95, concurrent_requests=round(concurrency, 4),
                        concurrent_requests_p95=None if held_p95 is None else round(held_p95, 4),
                        limited_by="max_num_seqs" if held > plan.max_num_seqs else "KV pool",
                        time_per_output_token_s=speed.time_per_output_token_s, ttft_s=ttft,
                        output_tokens_per_s=tokens_per_s, requests_per_s=requests_per_s, gpu_price_per_hour=price,
                        price_source=source, cost_per_million_output_tokens=cost, formula=formula, notes=notes)


def _held(model, plan, context: int) -> float:
    """Requests of `context` tokens the plan's pool holds: vLLM's block rule, SGLang's tokens."""
    if plan.engine == "vllm":
        return max_concurrency_at(plan, context, model)
    return plan.kv_cache_tokens / context


# A cent per GPU-hour is below any cloud's price: 5e-324 was taken and printed as $0.000 per million tokens.
MIN_PRICE, MAX_PRICE = 0.01, 10_000


def check_price(given) -> float:
    """A GPU price in dollars per GPU-hour, from MIN_PRICE to below MAX_PRICE, or the WorkloadError that says so."""
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not MIN_PRICE <= given < MAX_PRICE:
        raise WorkloadError(f"the GPU price must be dollars per GPU-hour from {MIN_PRICE} to below {MAX_PRICE:,}, "
                            f"got {shown(given)}")
    return float(given)


def _price(gpu_name: str, given: float | None, source: str) -> tuple[float | None, str]:
    if given is not None:
        return check_price(given), source or "given"
    gpu = resolve_gpu(gpu_name)
    if gpu.price_per_hour is None:
        return None, "no price in the catalog for this GPU: give one per GPU-hour"
    return gpu.price_per_hour, gpu.price_source
