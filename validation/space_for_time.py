"""Space for time, measured: what the KV cache buys.

A GPT-2-shaped model (GPT-2 small on CUDA; the same architecture narrowed on a CPU) generates the next token
at growing context lengths L, two ways:

- with the cache: one forward of 1 token over a cache already holding L tokens (the cost of a decode step);
- by full recomputation: one forward of the whole L + 1 tokens without a cache (what generation costs when
  nothing is kept).

Per-token time is fitted against L on a log-log scale (the exponent says how each grows), and so is the total
time to generate n tokens from an empty context (the integral of the per-token time). Without the cache every
token re-runs the whole sequence: per-token time ~ L, total ~ n^2 (more once attention dominates). With it a
step costs the weights once plus a read of the L cached tokens (and transformers' DynamicCache copies each
layer with torch.cat every step): per-token time flat while the weights dominate, then slowly rising, so the
total sits between n^1 and n^2 and approaches n^1 as the model grows. The cache's price is kvplan's KV bytes
at each L.
Writes space_for_time.json and space_for_time.png into the results folder.

    python -m validation --bench space-for-time [--device cpu|cuda] [--out DIR]
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

GPT2_SMALL = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}
GPT2_CPU = {"model_type": "gpt2", "n_layer": 6, "n_embd": 256, "n_head": 4, "vocab_size": 4096}


def _contexts(device_type: str) -> list[int]:
    top = 8192 if device_type == "cuda" else 1024
    out, c = [], 32
    while c <= top:
        out.append(c)
        c *= 2
    return out


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) against log(x)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return None if var == 0 else sum((p[0] - mx) * (p[1] - my) for p in pts) / var


def cumulative(xs: list[int], ys: list[float]) -> list[float]:
    """Total time to generate up to each context: the trapezoid integral of the per-token time from 0."""
    total, out, px, py = 0.0, [], 0, ys[0]
    for x, y in zip(xs, ys):
        total += (x - px) * (py + y) / 2
        out.append(total)
        px, py = x, y
    return out


def run_benchmark(out: Path, *, device, time_budget: float | None = None, progress: bool = True,
                  contexts: list[int] | None = None, repeats: int = 3, shape: dict | None = None) -> dict:
    import torch
    import transformers
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    import kvplan

    from .report import environment, write_atomic

    transformers.logging.set_verbosity_error()
    contexts = contexts or _contexts(device.type)
    shape = dict(shape or (GPT2_SMALL if device.type == "cuda" else GPT2_CPU))
    shape["n_positions"] = max(contexts) + 8
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    cfg = CONFIG_MAPPING["gpt2"].from_dict(shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    spec = kvplan.parse_config({**shape, "dtype": "bfloat16" if device.type == "cuda" else "float32"}, name="gpt2-shape")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    started = time.monotonic()
    points = []
    gen = torch.Generator().manual_seed(0)
    for L in contexts:
        if time_budget is not None and time.monotonic() - started > time_budget:
            break
        ids = torch.randint(0, shape["vocab_size"], (1, L + 1), generator=gen).to(device)
        with torch.no_grad():
            out_prefill = model(ids[:, :L], use_cache=True)          # the cache of L tokens (not timed)
            cache = out_prefill.cache
            cached, recompute = [], []
            for _ in range(repeats):
                step_cache = _copy_cache(cache)
                sync()
                t0 = time.perf_counter()
                model(ids[:, L:], cache=step_cache, use_cache=True)
                sync()
                cached.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                model(ids, use_cache=False)
                sync()
                recompute.append(time.perf_counter() - t0)
        est = kvplan.estimate(spec, seq_len=L)
        point = {"context": L, "cached_s": statistics.median(cached), "recompute_s": statistics.median(recompute),
                 "kv_bytes": est.kv_cache_bytes}
        point["speedup"] = point["recompute_s"] / point["cached_s"] if point["cached_s"] else None
        points.append(point)
        if progress:
            print(f"space-for-time L={L}: cached {point['cached_s'] * 1e3:.2f} ms, recompute "
                  f"{point['recompute_s'] * 1e3:.2f} ms, KV {est.kv_cache_bytes:,} B", file=sys.stderr)
    xs = [p["context"] for p in points]
    upper = len(points) // 2            # the asymptotic half: fixed per-call overheads dominate short contexts
    cached_y = [p["cached_s"] for p in points]
    recompute_y = [p["recompute_s"] for p in points]
    fits = {
        "cached_per_token_exponent": fit_exponent(xs[upper:], cached_y[upper:]),
        "recompute_per_token_exponent": fit_exponent(xs[upper:], recompute_y[upper:]),
        "cached_total_exponent": fit_exponent(xs[upper:], cumulative(xs, cached_y)[upper:]),
        "recompute_total_exponent": fit_exponent(xs[upper:], cumulative(xs, recompute_y)[upper:]),
    }
    result = {
        "benchmark": "space-for-time", "environment": environment(device),
        "model": {**shape, "dtype": str(dtype).replace("torch.", ""),
                  "params": sum(p.numel() for p in model.parameters())},
        "method": "median of %d timings per point; cached = one 1-token forward over an L-token cache (a fresh "
                  "copy each time), recompute = one forward over L + 1 tokens without a cache; exponents fitted "
                  "on the upper half of the contexts (log-log least squares); total = trapezoid integral of the "
                  "per-token time from 0 to L. A cached step still reads all L cached tokens and DynamicCache "
                  "copies each layer (torch.cat), so its time rises with L once those outweigh the weights" % repeats,
        "points": points, "fits": fits,
        "kv_bytes_per_token": spec and kvplan.estimate(spec, seq_len=1).kv_cache_bytes,
    }
    out = Path(out)
    write_atomic(out / "space_for_time.json", json.dumps(result, indent=1) + "\n")
    png = _plot(result)
    if png is not None:
        write_atomic(out / "space_for_time.png", png)
    if progress:
        print("space-for-time fits: " + ", ".join(f"{k} {v:.2f}" for k, v in fits.items() if v is not None),
              file=sys.stderr)
    return result


def _copy_cache(cache):
    """A fresh copy of a DynamicCache, so every timed step starts from the same L tokens."""
    import copy

    return copy.deepcopy(cache)


def _plot(result: dict) -> bytes | None:
    try:
        import io

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    pts = result["points"]
    if not pts:
        return None
    xs = [p["context"] for p in pts]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5))
    f = result["fits"]

    def label(name, key):
        value = f.get(key)
        return f"{name} (slope {value:.2f})" if value is not None else name

    ax.plot(xs, [p["cached_s"] * 1e3 for p in pts], "o-", label=label("with the KV cache", "cached_per_token_exponent"))
    ax.plot(xs, [p["recompute_s"] * 1e3 for p in pts], "s-",
            label=label("full recomputation", "recompute_per_token_exponent"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length L (tokens)")
    ax.set_ylabel("time for the next token (ms)")
    ax.set_title("per-token time")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8)
    ax2.plot(xs, cumulative(xs, [p["cached_s"] for p in pts]), "o-", label=label("with the cache", "cached_total_exponent"))
    ax2.plot(xs, cumulative(xs, [p["recompute_s"] for p in pts]), "s-",
             label=label("recomputation", "recompute_total_exponent"))
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("tokens generated from an empty context")
    ax2.set_ylabel("total time (s)")
    twin = ax2.twinx()
    twin.plot(xs, [p["kv_bytes"] / 2**20 for p in pts], "k:", label="KV cache (MiB, kvplan)")
    twin.set_yscale("log")
    twin.set_ylabel("KV cache MiB (the space paid)")
    ax2.set_title("total time to generate, and the cache it costs")
    ax2.grid(True, which="both", alpha=0.2)
    lines = ax2.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax2.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    m = result["model"]
    fig.suptitle(f"space for time: GPT-2 shape ({m['n_layer']} layers x {m['n_embd']}), "
                 f"{result['environment']['device']}, {m['dtype']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
