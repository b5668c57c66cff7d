"""Two to four models or setups side by side: each planned with the same engine settings, one row each.

A setup is `MODEL`, `MODEL@GPU` or `MODEL@GPUxN` (`meta-llama/Llama-3.1-70B@H100-80GBx4`,
`Qwen/Qwen2.5-72B@H200x2`); the GPU and the count default to the shared ones. Each row is the plan's own figures
(kvplan.planning.planner.plan) and, with a request mix, its workload (kvplan.planning.workload): nothing is computed here that the
plan does not compute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from ..errors import KVPlanError, WorkloadError, shown
from ..model.spec import ModelSpec
from . import defaults

MAX_SETUPS = 4
_COUNT = re.compile(r"^(?P<gpu>.+?)x(?P<n>\d+)$")


@dataclass(frozen=True)
class Setup:
    model: str | ModelSpec          # a name plan() reads, or a model read already (the app's sidebar model)
    gpu: str | None = None
    num_gpus: int | None = None

    @property
    def name(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.name

    @property
    def label(self) -> str:
        where = f"@{self.gpu}" if self.gpu else ""
        return f"{self.name}{where}{f'x{self.num_gpus}' if self.num_gpus else ''}"


def parse_setup(text: str) -> Setup:
    """'MODEL[@GPU[xN]]' -> Setup; a GPU name may hold 'x' (custom GPUs), only a trailing xN is a count."""
    text = str(text).strip()
    if not text:
        raise WorkloadError("an empty setup: write MODEL, MODEL@GPU or MODEL@GPUxN")
    model, at, where = text.partition("@")
    if not at:
        return Setup(model)
    if not model or not where:
        raise WorkloadError(f"setup {shown(text)} is not MODEL@GPU or MODEL@GPUxN: name both sides of the @")
    match = _COUNT.match(where)
    if match is None:
        return Setup(model, where)
    if not 1 <= len(match.group("n")) <= 4 or int(match.group("n")) < 1:  # @H100x0 was a GPU named "H100x0"
        raise WorkloadError(f"setup {shown(text)} counts {shown(match.group('n'))} GPUs: write MODEL@GPUxN with N from "
                            "1 to 9,999")
    return Setup(model, match.group("gpu"), int(match.group("n")))


class ComparisonRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    setup: str
    model: str
    gpu: str
    num_gpus: int | None        # None for a setup that could not be planned (it was -1 for --num-gpus -1)
    layout: str
    fits: bool
    weights_bytes: int          # per GPU
    kv_pool_bytes: int          # per GPU
    kv_bytes_per_token: int     # per GPU
    kv_cache_tokens: int
    max_concurrency: float      # requests of max_model_len
    max_model_len: int
    verified: bool
    error: str | None = None    # why this setup could not be planned (the others still are)
    concurrent_requests: float | None = None     # at the request mix
    output_tokens_per_s: float | None = None
    cost_per_million_output_tokens: float | None = None
    command: str = ""


def compare(setups: list[Setup | str], *, gpu: str = defaults.GPU, num_gpus: int | None = None,
            mix=None, gpu_price_per_hour: float | None = None, **settings) -> list[ComparisonRow]:
    """One row per setup, planned with the shared `settings` (kvplan.planning.planner.plan's keywords); a setup kvplan
    cannot plan is a row with its one-line error, so the others are still compared."""
    from ..config.load import load_cached
    from .planner import plan
    from .workload import workload_plan

    parsed = [s if isinstance(s, Setup) else parse_setup(s) for s in setups]
    if not 2 <= len(parsed) <= MAX_SETUPS:
        raise WorkloadError(f"compare takes 2 to {MAX_SETUPS} setups, got {len(parsed)}: name each as MODEL, "
                            "MODEL@GPU or MODEL@GPUxN")
    shared_settings(gpu, num_gpus, gpu_price_per_hour, **settings)
    rows = []
    for setup in parsed:
        try:
            model = load_cached(setup.model) if isinstance(setup.model, str) else setup.model
            p = plan(model, gpu=setup.gpu or gpu, num_gpus=setup.num_gpus or num_gpus, **settings)
            load = workload_plan(model, p, mix, gpu_price_per_hour) if mix is not None and p.fits else None
        except KVPlanError as exc:
            rows.append(ComparisonRow(setup=setup.label, model=setup.name, gpu=setup.gpu or gpu,
                                      num_gpus=None, layout="", fits=False,
                                      weights_bytes=0, kv_pool_bytes=0, kv_bytes_per_token=0, kv_cache_tokens=0,
                                      max_concurrency=0.0, max_model_len=0, verified=False,
                                      error=str(exc)))
            continue
        layout = f"TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}" + (
            f" x DP {p.data_parallel_size}" if p.data_parallel_size > 1 else "")
        rows.append(ComparisonRow(
            setup=setup.label, model=p.model, gpu=p.gpu, num_gpus=p.num_gpus, layout=layout, fits=p.fits,
            weights_bytes=p.weights_bytes, kv_pool_bytes=p.kv_pool_bytes, kv_bytes_per_token=p.kv_bytes_per_token,
            kv_cache_tokens=p.kv_cache_tokens, max_concurrency=p.max_concurrency, max_model_len=p.max_model_len,
            verified=p.verified, command=p.vllm_command,
            concurrent_requests=load.concurrent_requests if load else None,
            output_tokens_per_s=load.output_tokens_per_s if load else None,
            cost_per_million_output_tokens=load.cost_per_million_output_tokens if load else None))
    return rows


def shared_settings(gpu, num_gpus, gpu_price_per_hour, *, engine: str = "vllm", max_model_len=None,
                    gpu_memory_utilization=None, engine_version=None, kv_dtype="auto", **_) -> None:
    """The settings every setup shares, checked before any is planned: a bad one (`--max-model-len 0`,
    `--gpu-memory-utilization nan`, `--engine-version abc`, `--num-gpus -1`) is bad input, one WorkloadError, not
    a row per setup that "does not fit"."""
    from ..dtypes import resolve_dtype
    from ..gpus import resolve_gpu
    from .engines.vllm_profile import parse_version
    from .inputs import positive, resolve_utilization
    from .planner import ENGINES
    from .workload import check_price

    if engine not in ENGINES:
        raise WorkloadError(f"unknown engine {shown(engine)}: use one of {', '.join(ENGINES)}")
    resolve_gpu(gpu)
    positive("num_gpus", num_gpus)
    if max_model_len not in (-1, "auto"):
        positive("max_model_len", max_model_len)
    resolve_utilization(gpu_memory_utilization)
    parse_version(engine_version)
    if kv_dtype not in (None, "auto"):
        resolve_dtype(kv_dtype)
    if gpu_price_per_hour is not None:
        check_price(gpu_price_per_hour)
