"""The cheapest setup for a workload: every catalog GPU, every deployable layout (`layouts`), a batch cap and a
replica count, kept where the roofline serves the request rate within the latency targets.

Per replica, at a batch cap b (vLLM --max-num-seqs b), with the mix's mean prompt P and mean output O:

    step(b)   = (active weights + KV bytes per token x mean context x b) / (bandwidth x TP x MBU)   (speed.roofline)
    prefill   = (2 x active params x P + attention) / (FLOP/s x TP x MFU)                          (speed.roofline)
    rate(b)   = b / (O x step(b) + b x prefill)      requests/s per engine (x DP engines): each finished
                                                     request is replaced by a prefill, and a prefill pauses
                                                     the whole batch's decode (no chunking)
    TPOT(b)   = step(b) + b x prefill / O            a token's wait: its step and its share of the b prefills
                                                     that run while it is generated (at the full rate(b))
    TTFT      = prefill of the p95 prompt (the mean without a p95), batch 1: no queueing
    replicas  = ceil(rate asked / rate(b)); cost per hour = replicas x GPUs x price per GPU-hour

b is the largest cap that meets the TPOT target, no larger than the requests of the mean context the KV pool
holds (vLLM's block rule, `workload._held`) or vLLM's max_num_seqs. Llama-3.1-8B at 2,000 + 500 tokens, 10
requests/s: `kvplan recommend meta-llama/Llama-3.1-8B --prompt-mean 2000 --output-mean 500 --rate 10`.

Pruning: once the node's TP (8 on H100s) fits, larger TP x PP replicas are not tried: more stages read the same
weights one after another (step(b) does not fall), so replicas of the smaller layout serve the same rate for no
more (exact under this model; tests/test_recommend.py checks it by brute force for a dense model). A MoE's TP x DP
layouts with expert parallelism are tried up to that count too, not past it: an approximation, said in the
assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, floor

from pydantic import BaseModel, ConfigDict

from ..config.load import as_model
from ..errors import WorkloadError, shown
from ..gpus import GPU, list_gpus, resolve_gpu
from ..model.spec import ModelSpec
from .layouts import candidate_layouts, layout_name, node_size, tp_sizes
from .planner import plan
from .result import Plan
from .speed import SpeedAssumptions, gpu_flops, kv_bytes_per_token, model_compute, roofline
from .workload import RequestMix, _held, check_price

MAX_REPLICAS = 1024   # past this the rate is a fleet, not a setup
MAX_GPUS_PER_REPLICA = 64


class Targets(BaseModel):
    """The workload and what it must meet: requests/s, and optionally TTFT / TPOT in seconds and a budget in USD
    per hour."""

    model_config = ConfigDict(frozen=True)

    prompt_mean: int
    output_mean: int
    prompt_p95: int | None = None
    output_p95: int | None = None
    rate_per_s: float
    ttft_s: float | None = None
    tpot_s: float | None = None
    budget_per_hour: float | None = None


class Setup(BaseModel):
    """One way to serve the workload: a GPU, a layout per replica, a batch cap and the replicas."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    expert_parallel: bool
    layout: str
    gpus_per_replica: int
    nodes_per_replica: int
    replicas: int
    total_gpus: int
    max_model_len: int
    max_num_seqs: int                 # the batch cap b
    limited_by: str                   # what set b: "TPOT target", "KV pool" or "max_num_seqs"
    kv_requests_at_mean: float        # requests of the mean context one replica's pool holds
    requests_per_s_per_replica: float
    requests_per_s: float             # all replicas
    load: float                       # rate asked / requests_per_s
    step_time_s: float
    tpot_s: float
    ttft_s: float
    e2e_latency_s: float              # TTFT + mean output x TPOT
    price_per_gpu_hour: float | None
    price_source: str
    cost_per_hour: float | None
    cost_per_million_output_tokens: float | None
    command: str                      # one replica's serve command, the engine's own
    engine: str
    verified: bool
    formula: list[str]
    plan: dict = {}                   # one replica's plan at its batch cap: the figures `kvplan plan` prints
    warnings: list[str] = []          # the plan's: what kvplan has not verified for this model


class Recommendation(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    engine: str
    targets: Targets
    cheapest: list[Setup]             # priced setups that meet every target, cheapest first
    pareto: list[Setup]               # cost against end-to-end latency: no setup is both cheaper and faster
    unpriced: list[Setup]             # GPUs without a price: their setup with the fewest GPUs, shown without cost
    skipped: list[str]                # GPUs where nothing fits or meets the targets, with why
    assumptions: list[str]
    searched: dict


@dataclass(frozen=True)
class _Rates:
    """One replica's roofline terms: step(b) = fixed_s + per_request_s x b; prefill_s per request."""

    fixed_s: float
    per_request_s: float
    prefill_s: float
    ttft_s: float


def recommend(model: ModelSpec | str, mix: RequestMix, rate_per_s: float, *, ttft_s: float | None = None,
              tpot_s: float | None = None, budget_per_hour: float | None = None, engine: str = "vllm",
              gpus: list[str | GPU] | None = None, prices: dict[str, float] | None = None,
              max_model_len: int | None = None, gpus_per_node: int | None = None, top: int = 5,
              engine_version: str | None = None, kv_dtype: str = "auto") -> Recommendation:
    """The cheapest setups over `gpus` (the whole catalog when None) that serve `rate_per_s` requests of `mix`
    within `ttft_s`, `tpot_s` (seconds) and `budget_per_hour` (USD), and the Pareto front of cost against
    latency. `prices`: USD per GPU-hour by catalog name, over the catalog's; `max_model_len`: default the mix's
    longest request (p95 prompt + p95 output, else the means) rounded up to 1,024 tokens."""
    model = as_model(model)
    if engine not in ("vllm", "sglang"):
        raise WorkloadError(f"recommend plans serving engines: use vllm or sglang, not {shown(engine)}")
    targets = _targets(mix, rate_per_s, ttft_s, tpot_s, budget_per_hour)
    limit = (model.dims.max_position_embeddings if model.dims else None) or 2**40
    length = max_model_len or min(_round_up(mix.p95_context or mix.mean_context), limit)
    if length < mix.mean_context:
        raise WorkloadError(f"max_model_len {length:,} is shorter than the mean request ({mix.mean_context:,} "
                            "tokens): give a longer one")
    cards = [g if isinstance(g, GPU) else resolve_gpu(g) for g in gpus] if gpus else list(list_gpus())
    priced = {resolve_gpu(k).name: check_price(v) for k, v in (prices or {}).items()}
    settings = dict(engine=engine, max_model_len=length, engine_version=engine_version, kv_dtype=kv_dtype)
    found, skipped, planned, memo = [], [], 0, {}
    for card in cards:
        setups, why, n = _setups_on(model, card, mix, targets, settings, gpus_per_node, priced.get(card.name), memo)
        found += setups
        planned += n
        if not setups:
            skipped.append(f"{card.name}: {why}")
    cheapest, front, unpriced, over = _rank(found, budget_per_hour, top)
    if over:
        skipped.append(f"{over} setups cost more than the budget of ${budget_per_hour:,.2f}/h")
    answers = {id(s): _with_command(model, s, settings) for s in [*cheapest, *front, *unpriced]}
    return Recommendation(model=model.name, engine=engine, targets=targets,
                          cheapest=[answers[id(s)] for s in cheapest], pareto=[answers[id(s)] for s in front],
                          unpriced=[answers[id(s)] for s in unpriced], skipped=skipped,
                          assumptions=_assumptions(length, mix, engine, model.arch is not None
                                                   and model.require_arch().has_experts),
                          searched={"gpus": len(cards), "plans": planned, "setups": len(found)})


def _rank(found: list[Setup], budget: float | None, top: int) -> tuple[list, list, list, int]:
    """(cheapest per GPU, the Pareto front, the unpriced GPUs' fewest-GPU setups, how many the budget dropped)."""
    within = [s for s in found if budget is None or s.cost_per_hour is None or s.cost_per_hour <= budget]
    with_cost = sorted((s for s in within if s.cost_per_hour is not None), key=_cheapest)
    unpriced = _best_per_gpu(sorted((s for s in within if s.cost_per_hour is None),
                                    key=lambda s: (s.total_gpus, s.e2e_latency_s)))
    return _best_per_gpu(with_cost)[:top], _pareto(with_cost), unpriced, len(found) - len(within)


def parse_prices(items: list[str]) -> dict[str, float]:
    """'H100=2.99' items (the CLI's repeated --gpu-price, the app's comma-separated field) as {GPU: USD per
    GPU-hour}; one WorkloadError naming the first bad item."""
    out = {}
    for item in (i.strip() for i in items if i.strip()):
        name, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise WorkloadError(f"a GPU price is GPU=USD per GPU-hour (H100=2.99), got {item[:40]!r}")
        out[resolve_gpu(name.strip()).name] = check_price(price)
    return out


def _cheapest(s: Setup) -> tuple:
    return (s.cost_per_hour, s.e2e_latency_s, s.total_gpus)


def _best_per_gpu(ordered: list[Setup]) -> list[Setup]:
    """The first setup of each GPU in `ordered`: the cheapest list names a GPU once (its best layout)."""
    seen, out = set(), []
    for s in ordered:
        if s.gpu not in seen:
            seen.add(s.gpu)
            out.append(s)
    return out


def _pareto(ordered: list[Setup]) -> list[Setup]:
    """Cost against end-to-end latency, cheapest first: each setup is faster than every cheaper one."""
    front, best = [], float("inf")
    for s in ordered:
        if s.e2e_latency_s < best - 1e-12:
            front.append(s)
            best = s.e2e_latency_s
    return front


def _targets(mix: RequestMix, rate, ttft, tpot, budget) -> Targets:
    def _positive(name, value, unit):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
            raise WorkloadError(f"{name} must be a positive number of {unit}, got {shown(value)}")
        return float(value)

    rate = _positive("the request rate", rate, "requests per second")
    if rate is None:
        raise WorkloadError("recommend needs a request rate: give --rate N (requests per second)")
    return Targets(prompt_mean=mix.prompt_mean, output_mean=mix.output_mean, prompt_p95=mix.prompt_p95,
                   output_p95=mix.output_p95, rate_per_s=rate, ttft_s=_positive("the TTFT target", ttft, "seconds"),
                   tpot_s=_positive("the TPOT target", tpot, "seconds"),
                   budget_per_hour=_positive("the budget", budget, "USD per hour"))


def _round_up(tokens: int, step: int = 1024) -> int:
    return -(-tokens // step) * step


def _setups_on(model: ModelSpec, card: GPU, mix: RequestMix, targets: Targets, settings: dict,
               gpus_per_node: int | None, price: float | None, memo: dict) -> tuple[list[Setup], str, int]:
    """Every setup on `card` that meets the targets, why there is none, and the plans made."""
    if not card.bandwidth_bytes_per_s:
        return [], "no memory bandwidth in the catalog (no speed estimate)", 0
    per_node = node_size(card, gpus_per_node)
    moe = model.arch is not None and model.require_arch().has_experts
    node_tp = max((t for t in tp_sizes(model, per_node) if per_node % t == 0), default=0)
    out, why, planned, widest_fits = [], "fits in no deployable layout up to 64 GPUs", 0, False
    for _, options, ep_options in candidate_layouts(model, per_node, MAX_GPUS_PER_REPLICA,
                                                    ep_variants=moe and settings["engine"] == "vllm"):
        if widest_fits:
            break   # the node's TP fits: more GPUs per replica only add PP stages or engines (module docstring)
        for option in options + ep_options:
            planned += 1
            try:
                p = plan(model, gpu=card, **settings, **option)
            except WorkloadError as exc:
                why = str(exc)
                continue
            if not p.fits:
                continue
            widest_fits = widest_fits or p.tensor_parallel_size == node_tp
            setup, reason = _setup(model, p, card, mix, targets, price, per_node, memo)
            if setup is None:
                why = reason
            else:
                out.append(setup)
    return out, why, planned


def _rates(model: ModelSpec, p: Plan, card: GPU, mix: RequestMix, prompt_for_ttft: int, memo: dict) -> _Rates:
    """The roofline's terms for one replica of `p` (speed.roofline at batch 1 and 2: step(b) is linear in b).
    `memo`: the model's parameters and KV bytes per token by dtype, the same for every GPU and layout."""
    if ("compute", p.dtype) not in memo:
        memo["compute", p.dtype] = model_compute(model, p.dtype)
    compute = memo["compute", p.dtype]
    context = min(mix.mean_context, p.max_model_len)
    if ("kv", context, p.kv_cache_dtype) not in memo:
        memo["kv", context, p.kv_cache_dtype] = kv_bytes_per_token(model, context, p.kv_cache_dtype)
    per_token = memo["kv", context, p.kv_cache_dtype]

    def run(batch: int, prompt: int):
        return roofline(active_params=compute.active_params, weight_bytes=compute.active_weight_bytes,
                        kv_bytes_per_token=per_token, prompt_len=prompt, context_len=mix.mean_context, batch=batch,
                        attn_flops_per_token_pair=compute.attn_flops_per_token_pair,
                        flops=gpu_flops(card, p.dtype), bandwidth=float(card.bandwidth_bytes_per_s),
                        tp=p.tensor_parallel_size, moe=compute.active_params < compute.total_params)

    one, two = run(1, mix.prompt_mean), run(2, mix.prompt_mean)
    slope = two.time_per_output_token_s - one.time_per_output_token_s
    return _Rates(fixed_s=one.time_per_output_token_s - slope, per_request_s=slope, prefill_s=one.ttft_s,
                  ttft_s=run(1, prompt_for_ttft).ttft_s)


def _batch_cap(r: _Rates, out_mean: int, tpot_target: float | None) -> int | None:
    """The largest b with TPOT(b) = fixed + (per_request + prefill / O) x b within the target; None: no target."""
    if tpot_target is None:
        return None
    return floor((tpot_target - r.fixed_s) / (r.per_request_s + r.prefill_s / out_mean) + 1e-9)


def _setup(model: ModelSpec, p: Plan, card: GPU, mix: RequestMix, targets: Targets, price: float | None,
           per_node: int, memo: dict) -> tuple[Setup | None, str]:
    prompt_for_ttft = min(mix.prompt_p95 or mix.prompt_mean, p.max_model_len)
    r = _rates(model, p, card, mix, prompt_for_ttft, memo)
    if targets.ttft_s is not None and r.ttft_s > targets.ttft_s:
        return None, f"TTFT {r.ttft_s * 1e3:,.0f} ms over the target at best (a {prompt_for_ttft:,}-token prefill)"
    held = _held(model, p, mix.mean_context)
    cap = _batch_cap(r, mix.output_mean, targets.tpot_s)
    limits = [(floor(held), "KV pool"), (p.max_num_seqs, "max_num_seqs")] + (
        [(cap, "TPOT target")] if cap is not None else [])
    b, limited_by = min(limits, key=lambda x: x[0])
    if b < 1:
        return None, ("the KV pool holds no whole request of the mean context" if limited_by == "KV pool" else
                      f"TPOT over the target even at batch 1 ({(r.fixed_s + r.per_request_s) * 1e3:,.1f} ms)")
    step = r.fixed_s + r.per_request_s * b
    engines = p.data_parallel_size   # vLLM's DP engines each run b requests (--max-num-seqs is per engine)
    per_replica = engines * b / (mix.output_mean * step + b * r.prefill_s)
    replicas = ceil(targets.rate_per_s / per_replica - 1e-9)
    if replicas > MAX_REPLICAS:
        return None, f"{replicas:,} replicas needed (over {MAX_REPLICAS:,})"
    tpot = step + b * r.prefill_s / mix.output_mean
    cost = None if price is None and card.price_per_hour is None else (price or card.price_per_hour)
    total = replicas * p.num_gpus
    per_hour = None if cost is None else total * cost
    served = replicas * per_replica
    tokens_per_s = targets.rate_per_s * mix.output_mean   # the tokens asked for, not the capacity
    formula = [
        f"step(b={b:,}) = {r.fixed_s * 1e3:,.3f} ms + {r.per_request_s * 1e3:,.4f} ms x {b:,} = {step * 1e3:,.3f} ms",
        f"rate per replica = {f'{engines} DP engines x ' if engines > 1 else ''}{b:,} / ({mix.output_mean:,} x "
        f"{step * 1e3:,.3f} ms + {b:,} x prefill {r.prefill_s * 1e3:,.2f} ms) = {per_replica:,.3f} requests/s",
        f"replicas = ceil({targets.rate_per_s:,g} / {per_replica:,.3f}) = {replicas:,}",
        f"TPOT = {step * 1e3:,.3f} ms + {b:,} x {r.prefill_s * 1e3:,.2f} ms / {mix.output_mean:,} = {tpot * 1e3:,.2f} ms",
    ]
    if per_hour is not None:
        formula.append(f"cost = {replicas:,} x {p.num_gpus} GPUs x ${cost:,.2f} = ${per_hour:,.2f} per hour")
    return Setup(
        gpu=card.name, tensor_parallel_size=p.tensor_parallel_size, pipeline_parallel_size=p.pipeline_parallel_size,
        data_parallel_size=p.data_parallel_size, expert_parallel=p.expert_parallel_size > 1, layout=layout_name(p),
        gpus_per_replica=p.num_gpus, nodes_per_replica=-(-p.num_gpus // per_node), replicas=replicas,
        total_gpus=total, max_model_len=p.max_model_len, max_num_seqs=b, limited_by=limited_by,
        kv_requests_at_mean=round(held, 4), requests_per_s_per_replica=per_replica, requests_per_s=served,
        load=targets.rate_per_s / served, step_time_s=step, tpot_s=tpot, ttft_s=r.ttft_s,
        e2e_latency_s=r.ttft_s + mix.output_mean * tpot, price_per_gpu_hour=cost,
        price_source="given" if price is not None else (card.price_source or "no price: give one per GPU-hour"),
        cost_per_hour=per_hour,
        cost_per_million_output_tokens=None if per_hour is None else per_hour / (tokens_per_s * 3600) * 1e6,
        command="", engine=p.engine, verified=p.verified, formula=formula), ""


def _with_command(model: ModelSpec, s: Setup, settings: dict) -> Setup:
    """The setup with its serve command: the layout re-planned at its batch cap (vLLM --max-num-seqs; SGLang's
    --max-running-requests added to its command), so the command is the engine's own."""
    option = {"tp": s.tensor_parallel_size, "pp": s.pipeline_parallel_size}
    if s.data_parallel_size > 1:
        option |= {"dp": s.data_parallel_size, "expert_parallel": s.expert_parallel}
    if s.engine == "sglang":   # its cap is --max-running-requests (srt/server_args.py `max_running_requests`,
        p = plan(model, gpu=s.gpu, **settings, **option)   # 0.5.23), which kvplan's SGLang pool does not depend on
        command = f"{p.vllm_command} --max-running-requests {s.max_num_seqs}"
        cap = ""
    else:
        p = plan(model, gpu=s.gpu, max_num_seqs=s.max_num_seqs, **settings, **option)
        command, cap = p.vllm_command, f" --max-num-seqs {s.max_num_seqs}"
    if s.replicas > 1:
        command = f"{command}   # x {s.replicas} replicas behind a load balancer"
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in option.items() if k != "expert_parallel")
    summary = {k: getattr(p, k) for k in _PLAN_FIELDS} | {
        "kvplan_command": f"kvplan plan {model.name} --engine {p.engine} --gpu {s.gpu} {flags} --max-model-len "
                          f"{p.max_model_len}{cap}"
                          + (" --enable-expert-parallel" if s.expert_parallel else "")}
    return s.model_copy(update={"command": command, "plan": summary, "warnings": p.warnings})


_PLAN_FIELDS = ("dtype", "kv_cache_dtype", "gpu_memory_utilization", "weights_bytes", "activation_bytes",
                "kv_pool_bytes", "kv_bytes_per_token", "kv_cache_tokens", "max_concurrency", "block_size",
                "max_num_batched_tokens", "engine_version")


def _assumptions(length: int, mix: RequestMix, engine: str, moe: bool) -> list[str]:
    a = SpeedAssumptions()
    return [*(["a MoE's expert-parallel layouts (TP x DP engines with --enable-expert-parallel) are searched up to "
               "the GPU count where the node's TP first fits, not past it; each engine is a TP-sized roofline"]
              if moe and engine == "vllm" else []),
        f"a roofline: decode at {a.mbu:.0%} of peak bandwidth, prefill at {a.mfu:.0%} of peak dense FLOP/s, "
        "tensor parallelism scaling ideally (all-reduce time not counted), pipeline stages not overlapped",
        "each finished request is replaced by a prefill that pauses the batch (no chunked prefill): rate(b) = b / "
        "(output x step + b x prefill); TPOT counts that pause",
        "TTFT is one prefill of the p95 prompt (the mean without one), with no queueing: under load add the wait",
        f"max_model_len {length:,}: the mix's longest request ({mix.p95_context or mix.mean_context:,} tokens) "
        "rounded up to 1,024; a longer request is refused by the engine",
        "every request is counted at its largest KV (prompt + output) for the concurrency the pool holds",
        f"replicas are independent {engine} engines behind a load balancer, each as its command says",
        "prices: on-demand USD per GPU-hour (kvplan gpus; kvplan/data/gpu_prices.json), or as given",
    ]
