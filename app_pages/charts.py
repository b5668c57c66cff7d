"""The web app's charts: a pure function builds each chart's data frame from kvplan's API, another draws it.

Tests check the frames (numbers equal `kvplan.estimate` / `kvplan.planning.planner` for the same inputs) and the
figures' traces; the pages only call `st.plotly_chart`. Imports pandas and plotly, never streamlit.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pandas as pd
import plotly.graph_objects as go

from kvplan.cache.estimate import MAX_TOKENS, Estimate, estimate
from kvplan.gpus import resolve_gpu
from kvplan.model.spec import ModelSpec
from kvplan.units import GiB, KiB, MiB, fmt_bytes, fmt_int

KIND_COLORS = {"full": "#2563eb", "sliding": "#f59e0b", "chunked": "#10b981", "mla": "#8b5cf6",
               "state": "#a16207", "none": "#9ca3af"}
PART_COLORS = {"weights": "#475569", "activation peak": "#f59e0b", "reserve (1 - mem_fraction_static)": "#f59e0b",
               "non-torch overhead": "#a855f7",
               "KV pool": "#2563eb", "held back (1 - utilization)": "#e5e7eb", "rest of the card": "#e5e7eb"}
GPU_LINE_COLORS = ("#dc2626", "#059669", "#7c3aed", "#ea580c", "#0891b2", "#be185d")
FONT = dict(family="Inter, Liberation Sans, Arial, sans-serif", size=13)
MAX_CHART_TOKENS = 1 << 24   # the context axis stops at 16M tokens (or the chosen context, if larger)


def unit_for(max_bytes: float) -> tuple[str, int]:
    """The binary unit that keeps an axis readable: ('GiB', 2**30) for anything from 1 GiB up."""
    for name, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if max_bytes >= size:
            return name, size
    return "B", 1


def _figure(data: list[dict], title: str, height: int, **layout) -> go.Figure:
    """A figure from plain dicts: plotly validates them once, in the constructor (about 5 ms, where
    `add_hline` and named templates cost 100+ ms a chart). Colours and fonts follow Streamlit's theme."""
    base = dict(title=dict(text=title, x=0, xanchor="left", y=0.985, yref="container", yanchor="top",
                           font=dict(size=15)),
                height=height, font=FONT, margin=dict(l=10, r=10, t=92, b=10),
                legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                uniformtext=dict(minsize=10, mode="hide"))
    return go.Figure(data=data, layout={**base, **layout})


def _axis(title: str, log: bool = False, **kw) -> dict:
    if log:
        kw.setdefault("dtick", 1)  # one tick per decade: no '2' and '5' minor labels
    return dict(title=dict(text=title), type="log" if log else "linear", **kw)


def token_label(n: int) -> str:
    """Context lengths as people say them: 131,072 -> '128k', 1,048,576 -> '1M', 100 -> '100'."""
    for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return fmt_int(n)


def _token_axis(title: str, values: Sequence[int]) -> dict:
    """A log axis with a tick at each power-of-four context (fewer labels when the range is wide)."""
    ticks = [v for v in values if v & (v - 1) == 0]
    while len(ticks) > 9:
        ticks = ticks[::2]
    return dict(title=dict(text=title), type="log", tickvals=ticks, ticktext=[token_label(v) for v in ticks])


def _rule(x: list, y: list, name: str, color: str, dash: str = "dash", hover: str | None = None) -> dict:
    """A reference line drawn as a two-point trace (shapes and annotations need log10 coordinates on log axes)."""
    return dict(type="scatter", x=x, y=y, mode="lines", name=name, line=dict(color=color, dash=dash, width=2),
                hovertemplate=(hover or name) + "<extra></extra>")


# ---------------------------------------------------------------------------------------------- KV vs context


def context_grid(seq_len: int, max_position: int | None = None) -> list[int]:
    """Powers of two from 128 to 4x the larger of the chosen context and the model's max position (capped at
    16M tokens unless the chosen context is larger), with the chosen context itself included."""
    top = max(4 * seq_len, 4 * (max_position or 0), 1024)
    top = min(top, max(MAX_CHART_TOKENS, seq_len), MAX_TOKENS)
    grid, n = [128], 128
    while n < top:  # up to the first power of two at or past `top`
        n *= 2
        grid.append(n)
    return sorted(set(grid) | {seq_len})


def kv_vs_context_frame(model: ModelSpec, contexts: Iterable[int], batch_size: int = 1, **workload) -> pd.DataFrame:
    """KV bytes of `batch_size` sequences at each context (same kwargs as `kvplan.estimate`).

    A static cache's max_cache_len follows the context (it must hold it); the prompt is the whole context.
    """
    rows = []
    for n in contexts:
        kw = dict(workload)
        if kw.get("max_cache_len") is not None and kw["max_cache_len"] < n:
            kw["max_cache_len"] = n
        kw["prompt_len"] = None
        est = estimate(model, n, batch_size, **kw)
        rows.append({"context": n, "kv_bytes": est.kv_cache_bytes, "kv_gib": est.kv_cache_bytes / GiB,
                     "size": fmt_bytes(est.kv_cache_bytes)})
    return pd.DataFrame(rows, columns=["context", "kv_bytes", "kv_gib", "size"])


def gpu_lines(names: Sequence[str]) -> pd.DataFrame:
    """Physical memory of each chosen GPU (what the runtime reports: an H100 is 79.19 GiB, not 80 GB)."""
    rows = []
    for name in names:
        gpu = resolve_gpu(name)
        rows.append({"gpu": gpu.name, "memory_bytes": gpu.memory_bytes, "memory_gib": gpu.memory_bytes / GiB})
    return pd.DataFrame(rows, columns=["gpu", "memory_bytes", "memory_gib"])


def kv_vs_context_figure(frame: pd.DataFrame, lines: pd.DataFrame, chosen: int | None = None) -> go.Figure:
    """KV GiB against context on log-log axes, a dashed line per GPU at its physical memory, a dotted marker
    at the chosen context."""
    x = [int(v) for v in frame["context"]]
    data = [dict(type="scatter", x=x, y=[float(v) for v in frame["kv_gib"]], mode="lines+markers", name="KV cache",
                 line=dict(color=KIND_COLORS["full"], width=3), marker=dict(size=6), customdata=list(frame["size"]),
                 hovertemplate="%{x:,} tokens: %{customdata}<extra></extra>")]
    ends = [min(x), max(x)] if x else [1, 2]
    for i, row in enumerate(lines.itertuples()):
        label = f"{row.gpu} · {fmt_bytes(row.memory_bytes)}"
        data.append(_rule(ends, [row.memory_gib] * 2, label, GPU_LINE_COLORS[i % len(GPU_LINE_COLORS)]))
    if chosen is not None and len(frame):
        gib = [float(v) for v in frame["kv_gib"] if v > 0] + [float(r.memory_gib) for r in lines.itertuples()]
        if gib:
            data.append(_rule([chosen, chosen], [min(gib), max(gib)], f"{fmt_int(chosen)} tokens", "#111827",
                              dash="dot"))
    return _figure(data, "KV cache against context length", 420,
                   xaxis=_token_axis("context length (tokens per sequence, log scale)", x),
                   yaxis=_axis("KV cache (GiB = 2³⁰ B, log scale)", log=True))


# ---------------------------------------------------------------------------------------------- per layer


def parse_ranges(text: str) -> list[int]:
    """'0-3,5,7' -> [0, 1, 2, 3, 5, 7] (GroupRow.layer_indices)."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        start, _, end = part.partition("-")
        out.extend(range(int(start), int(end or start) + 1))
    return out


def per_layer_frame(est: Estimate) -> pd.DataFrame:
    """Bytes each layer holds, by cache kind (a hybrid layer with two specs gives two rows).

    A group's layers share one spec, so each holds group bytes / layers exactly; bookkeeping scalars are not
    per layer and are left out (the sum is `kv_cache_bytes - bookkeeping_bytes`).
    """
    rows = []
    for g in est.groups:
        share = g.bytes // g.layers if g.layers else 0
        for index in parse_ranges(g.layer_indices):
            rows.append({"layer": index, "kind": g.kind, "bytes": share, "detail": g.detail})
    frame = pd.DataFrame(rows, columns=["layer", "kind", "bytes", "detail"]).sort_values(["layer", "kind"])
    return frame.reset_index(drop=True)


def per_layer_figure(frame: pd.DataFrame) -> go.Figure:
    """Stacked bars per layer, coloured by kind (full / sliding / chunked / mla / state / none)."""
    unit, size = unit_for(frame["bytes"].max() if len(frame) else 0)
    data = []
    for kind in dict.fromkeys(frame["kind"]):
        part = frame[frame["kind"] == kind]
        data.append(dict(type="bar", x=[int(v) for v in part["layer"]], y=[v / size for v in part["bytes"]],
                         name=kind, marker=dict(color=KIND_COLORS.get(kind, "#6b7280")), customdata=list(part["detail"]),
                         hovertemplate="layer %{x}: %{y:,.2f} " + unit + "<br>%{customdata}<extra>" + kind + "</extra>"))
    return _figure(data, "KV cache per layer, by kind", 420, barmode="stack", bargap=0.15,
                   xaxis=_axis("layer"), yaxis=_axis(f"KV per layer ({unit})"))


# ---------------------------------------------------------------------------------------------- strategies


def strategies_figure(rows) -> go.Figure:
    """Horizontal bars: bytes on the GPU per strategy (grey: the MHA baseline, light: per-element estimates),
    and offloaded bytes in host memory."""
    shown = [r for r in rows if r.applies]
    unit, size = unit_for(max((max(r.device_bytes, r.host_bytes) for r in shown), default=0))
    names = [r.strategy for r in shown]
    colors = ["#9ca3af" if r.strategy == "MHA baseline" else ("#2563eb" if r.exact else "#93c5fd") for r in shown]
    data = [dict(type="bar", y=names, x=[r.device_bytes / size for r in shown], orientation="h", name="on the GPU",
                 marker=dict(color=colors), showlegend=False, text=[fmt_bytes(r.device_bytes) for r in shown], textposition="auto",
                 hovertemplate="%{y}: %{text}<extra>on the GPU</extra>")]
    if any(r.host_bytes for r in shown):
        data.append(dict(type="bar", y=names, x=[r.host_bytes / size for r in shown], orientation="h",
                         name="in host memory", marker=dict(color="#f59e0b"),
                         text=[fmt_bytes(r.host_bytes) if r.host_bytes else "" for r in shown], textposition="auto",
                         hovertemplate="%{y}: %{text}<extra>in host memory</extra>"))
    return _figure(data, "KV cache by strategy", 120 + 34 * len(shown), barmode="stack",
                   yaxis=dict(autorange="reversed"), xaxis=_axis(f"KV cache on the GPU ({unit})"))


def comparison_figure(rows) -> go.Figure:
    """Grouped bars per setup: requests of max_model_len the pool holds, and at the request mix where given."""
    shown = [r for r in rows if not r.error]
    names = [f"{r.setup.split('@')[0].split('/')[-1]} on {r.num_gpus} x {r.gpu}" for r in shown]
    data = [dict(type="bar", x=names, y=[r.max_concurrency for r in shown], name="requests of max length",
                 marker=dict(color="#2563eb"), text=[f"{r.max_concurrency:,.2f}" for r in shown],
                 textposition="auto")]
    if any(r.concurrent_requests is not None for r in shown):
        data.append(dict(type="bar", x=names, y=[r.concurrent_requests or 0 for r in shown],
                         name="requests at the mix", marker=dict(color="#93c5fd"),
                         text=[f"{r.concurrent_requests:,.1f}" if r.concurrent_requests else "" for r in shown],
                         textposition="auto"))
    return _figure(data, "Requests the KV pool holds at once, per setup", 420, barmode="group",
                   yaxis=_axis("requests at once"))


# ---------------------------------------------------------------------------------------------- capacity


def memory_stack_frame(plan) -> pd.DataFrame:
    """Per-GPU budget of the binding stage: weights, activation peak, non-torch overhead, KV pool and the rest of
    the card (vLLM: the 1 - utilization share; SGLang, whose activation figure already is its 1 - fraction
    reserve: the CUDA context and load extras), so the stack adds up to the card. A pool the weights overflow is
    drawn as 0; the verdict says by how much."""
    used = [(name, max(value, 0)) for name, value in plan.budget_lines()]
    rest = max(0, plan.gpu_memory_bytes - sum(v for _, v in used))
    parts = used + [("held back (1 - utilization)" if plan.engine == "vllm" else "rest of the card", rest)]
    return pd.DataFrame([{"part": k, "bytes": v, "gib": v / GiB, "size": fmt_bytes(v)} for k, v in parts])


def memory_stack_figure(frame: pd.DataFrame, plan) -> go.Figure:
    data = [dict(type="bar", y=["per GPU"], x=[row.gib], orientation="h", name=row.part,
                 marker=dict(color=PART_COLORS.get(row.part, "#6b7280")), text=[row.size], textposition="inside",
                 insidetextanchor="middle", hovertemplate=f"{row.part}: {row.size}<extra></extra>")
            for row in frame.itertuples()]
    total = plan.gpu_memory_bytes / GiB
    data.append(_rule([total, total], ["per GPU", "per GPU"], f"{plan.gpu} · {fmt_bytes(plan.gpu_memory_bytes)}",
                      "#111827"))
    return _figure(data, "Memory of one GPU (binding pipeline stage)", 250, barmode="stack",
                   xaxis=_axis("GiB (2³⁰ B)"), yaxis=dict(showticklabels=False))


def concurrency_frame(plan, model: ModelSpec, contexts: Iterable[int]) -> pd.DataFrame:
    """Requests of each context length the plan's KV pool holds at once (`kvplan.planning.engines.vllm.max_concurrency_at`)."""
    from kvplan.planning.engines.vllm import max_concurrency_at

    rows = [{"context": n, "max_concurrency": max_concurrency_at(plan, n, model)} for n in contexts]
    return pd.DataFrame(rows, columns=["context", "max_concurrency"])


def concurrency_contexts(max_model_len: int) -> list[int]:
    """Powers of two from 256 up to max_model_len, and max_model_len itself."""
    grid, n = [], 256
    while n < max_model_len:
        grid.append(n)
        n *= 2
    return grid + [max_model_len]


def concurrency_figure(frame: pd.DataFrame, max_model_len: int) -> go.Figure:
    x = [int(v) for v in frame["context"]]
    y = [float(v) for v in frame["max_concurrency"]]
    data = [dict(type="scatter", x=x, y=y, mode="lines+markers", name="max concurrency",
                 line=dict(color=KIND_COLORS["full"], width=3),
                 hovertemplate="%{x:,} tokens: %{y:,.2f} requests<extra></extra>")]
    if x:
        data.append(_rule([min(x), max(x)], [1, 1], "1 request", "#dc2626"))
    return _figure(data, f"Max concurrency against context (max_model_len {fmt_int(max_model_len)})", 380,
                   xaxis=_token_axis("tokens per request (log scale)", x),
                   yaxis=_axis("concurrent requests (log scale)", log=True))


# ---------------------------------------------------------------------------------------------- validation


def validation_figure(frame: pd.DataFrame, x: str, y: str, color: str, unit: str = "bytes",
                      title: str = "Predicted vs measured", log: bool = False) -> go.Figure:
    """Scatter of predicted (y) against measured (x) with the y = x line; one colour per `color` value.
    `log`: log-log axes, for byte counts spanning orders of magnitude."""
    data = []
    for i, (key, part) in enumerate(frame.groupby(color, sort=True)):
        data.append(dict(type="scatter", x=[float(v) for v in part[x]], y=[float(v) for v in part[y]],
                         mode="markers", name=str(key),
                         marker=dict(size=10, color=GPU_LINE_COLORS[i % len(GPU_LINE_COLORS)],
                                     line=dict(width=1, color="white")),
                         hovertemplate="measured %{x:,.4g}<br>predicted %{y:,.4g}<extra>" + str(key) + "</extra>"))
    values = [float(v) for v in pd.concat([frame[x], frame[y]])] if len(frame) else [0.0, 1.0]
    ends = [min(values), max(values)]
    data.append(_rule(ends, ends, "predicted = measured", "#9ca3af"))
    scale = " (log scale)" if log else ""
    return _figure(data, title, 420, xaxis=_axis(f"measured ({unit}){scale}", log=log, dtick=None),
                   yaxis=_axis(f"predicted ({unit}){scale}", log=log, dtick=None))


# ---------------------------------------------------------------------------------------------- learn


def step_cost_frame(model: ModelSpec, lengths: Iterable[int]) -> pd.DataFrame:
    """FLOPs for the n-th generated token with and without a KV cache (`app_pages.support.step_cost`)."""
    from kvplan.planning.speed import model_compute, step_cost

    mc = model_compute(model)
    rows = []
    for n in lengths:
        c = step_cost(model, n, mc)
        rows.append({"tokens": n, "with KV cache": c.flops_with_cache, "without KV cache": c.flops_without_cache,
                     "kv_bytes": c.kv_bytes})
    return pd.DataFrame(rows, columns=["tokens", "with KV cache", "without KV cache", "kv_bytes"])


def step_cost_figure(frame: pd.DataFrame) -> go.Figure:
    x = [int(v) for v in frame["tokens"]]
    data = [dict(type="scatter", x=x, y=[v / 1e12 for v in frame[name]],
                 mode="lines+markers", name=name, line=dict(color=color, width=3),
                 hovertemplate="token %{x:,}: %{y:,.3f} TFLOP<extra>" + name + "</extra>")
            for name, color in (("without KV cache", "#dc2626"), ("with KV cache", "#2563eb"))]
    return _figure(data, "Compute to produce the n-th token", 380,
                   xaxis=_token_axis("n: position of the generated token (log scale)", x),
                   yaxis=_axis("TFLOP (10¹² FLOP, log scale)", log=True))


def naive_vs_real_figure(frame: pd.DataFrame, naive_label: str = "naive MHA", real_label: str = "real",
                         title: str = "Naive MHA formula against the real cache") -> go.Figure:
    labels = [fmt_int(n) for n in frame["tokens"]]
    data = [dict(type="bar", x=labels, y=[b / GiB for b in frame[column]], name=name, marker=dict(color=color),
                 text=[fmt_bytes(b) for b in frame[column]], textposition="outside",
                 hovertemplate="%{x} tokens: %{text}<extra>" + name + "</extra>")
            for column, name, color in (("naive MHA bytes", naive_label, "#9ca3af"), ("real bytes", real_label, "#2563eb"))]
    return _figure(data, title, 380, barmode="group",
                   xaxis=dict(title=dict(text="tokens"), type="category"), yaxis=_axis("KV cache (GiB = 2³⁰ B)"))


def space_for_time_figure(frame: pd.DataFrame) -> go.Figure | None:
    """The harness's space-for-time points: seconds per generated token with the cache and recomputing, against
    the context (log-log). None when the file lacks those columns."""
    if not {"context", "cached_s", "recompute_s"} <= set(frame.columns):
        return None
    x = [int(v) for v in frame["context"]]
    data = [dict(type="scatter", x=x, y=[float(v) * 1e3 for v in frame[column]], mode="lines+markers", name=name,
                 line=dict(color=color, width=3), hovertemplate="%{x:,} tokens: %{y:,.3f} ms<extra>" + name + "</extra>")
            for column, name, color in (("recompute_s", "recompute the prefix", "#dc2626"),
                                        ("cached_s", "with the KV cache", "#2563eb"))]
    return _figure(data, "Measured time for the next token", 380,
                   xaxis=_token_axis("context L (tokens, log scale)", x),
                   yaxis=_axis("milliseconds (log scale)", log=True))


# ---------------------------------------------------------------------------------------------- recommend


def recommend_figure(result) -> go.Figure:
    """Cost per hour against end-to-end latency: every priced setup listed (the cheapest per GPU), with the Pareto
    front as a line."""
    def points(setups, name, color, mode):
        return dict(type="scatter", mode=mode, name=name, x=[s.cost_per_hour for s in setups],
                    y=[s.e2e_latency_s for s in setups], marker=dict(color=color, size=10),
                    text=[f"{s.replicas} x {s.gpus_per_replica} {s.gpu}, {s.layout}" for s in setups],
                    hovertemplate="%{text}<br>$%{x:,.2f}/h, %{y:,.2f} s<extra></extra>")

    data = [points(result.cheapest, "cheapest per GPU", "#93c5fd", "markers"),
            points(result.pareto, "Pareto front", "#2563eb", "lines+markers")]
    return _figure(data, "Cost against latency (a request's prefill and decode)", 420,
                   xaxis=_axis("USD per hour"), yaxis=_axis("end-to-end latency (s)"))
