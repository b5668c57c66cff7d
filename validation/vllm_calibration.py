"""Compare kvplan's vLLM profile with real vLLM start-ups (validation/measured/, copied from the project's
shared reference set ../shared/reference/measured/).

Runs every row of vllm_runs_calibration.csv with its settings through `kvplan.planning.planner.plan` and prints, per
row and in summary, the error of weights, activation, non-torch, KV pool and KV tokens. Writes the table to
validation/vllm_calibration.md (and .csv) next to this script.

    python validation/vllm_calibration.py [--csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kvplan.config.load import load_model  # noqa: E402
from kvplan.planning.planner import plan  # noqa: E402

# a copy of ../shared/reference/measured/vllm_runs_calibration.csv (its README beside it), so a fresh clone runs
DEFAULT_CSV = HERE / "measured" / "vllm_runs_calibration.csv"
GiB = 2**30

# Instruct checkpoints share their base model's architecture; kvplan bundles the base config.
SAME_ARCHITECTURE = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B",
}


def bundled_model(model_id: str):
    """The bundled config for a measured model id: itself, or the base model it names in SAME_ARCHITECTURE."""
    return load_model(SAME_ARCHITECTURE.get(model_id, model_id))


def gpu_for(row: dict):
    """The row's GPU from kvplan's catalogue; a card it lacks, by the total memory the log printed."""
    from kvplan.errors import KVPlanError
    from kvplan.gpus import custom_gpu, resolve_gpu

    try:
        return resolve_gpu(row["gpu"])
    except KVPlanError:
        total = _num(row.get("gpu_memory_total_gib", ""))
        if total is None:
            raise
        return custom_gpu(total, name=f"{row['gpu']} ({total:g} GiB printed)")


def _num(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _dtype(text: str) -> str:
    text = (text or "auto").replace("torch.", "")
    return {"bf16": "bfloat16", "": "auto"}.get(text, text)


def _assumed_version(row: dict) -> str:
    """Rows whose log did not print a version: what their notes say, stated in the table."""
    notes = row["notes"]
    if "V0-engine" in notes:
        return "0.6.4 (assumed: V0 log format)"
    if "Jan 2026" in notes:
        return "0.14.0 (assumed: 'latest' in Jan 2026)"
    return "0.19.0 (assumed: campaign image)"


def run_row(row: dict) -> dict | None:
    if row["status"] != "ok":
        return None
    model = bundled_model(row["model"])
    quant = row["quantization"] if row["quantization"] not in ("", "None") else None
    kv = "fp8" if row["kv_cache_dtype"] == "fp8" else "auto"
    util = _num(row["gpu_memory_utilization"]) or 0.9
    version = row["vllm_version"] or _assumed_version(row)
    p = plan(model, engine="vllm", gpu=gpu_for(row), tp=int(row["tensor_parallel_size"] or 1),
             pp=int(row["pipeline_parallel_size"] or 1), max_model_len=int(row["max_model_len"]),
             gpu_memory_utilization=util, kv_dtype=kv, dtype=_dtype(row["dtype"]), quantization=quant,
             engine_version=version.split(" ")[0], block_size=int(row["block_size"]) if row["block_size"] else None)
    measured = {
        "weights": _num(row["weights_memory_gib"]), "activation": _num(row["activation_peak_torch_gib"]),
        "non_torch": _num(row["non_torch_memory_gib"]), "kv_pool": _num(row["available_kv_cache_gib"]),
        "tokens": _num(row["gpu_kv_cache_tokens"]), "concurrency": _num(row["max_concurrency_x"]),
    }
    stage0 = p.stages[0]  # the CSV reports the rank-0 worker (TP0/PP0)
    predicted = {
        "weights": stage0.weights_bytes / GiB, "activation": stage0.activation_bytes / GiB,
        "non_torch": stage0.non_torch_bytes / GiB, "kv_pool": stage0.kv_pool_bytes / GiB,
        "tokens": float(p.kv_cache_tokens), "concurrency": p.max_concurrency,
    }
    return {"run_id": row["run_id"], "model": row["model"], "version": version, "tp": p.tensor_parallel_size,
            "pp": p.pipeline_parallel_size, "max_len": p.max_model_len, "dtype": p.dtype, "kv": p.kv_cache_dtype,
            "quant": quant or "", "measured": measured, "predicted": predicted,
            "stages": _stage_rows(row["notes"], p.stages)}


# the per-worker values a PP row's notes give: "torch_peak PP0=1.1/PP1=1.05/PP2=1.05/PP3=2.01"
STAGE_METRICS = {"weights": "weights_bytes", "torch_peak": "activation_bytes", "kv_in_use": "kv_pool_bytes"}


def _stage_rows(notes: str, stages) -> list[str]:
    """Each pipeline stage's printed weights / activation / pool against kvplan's stage (first, middle, last)."""
    printed = {}
    for name in STAGE_METRICS:
        match = re.search(rf"\b{name} ((?:PP\d+=[\d.]+/?)+)", notes)
        if match:
            printed[name] = [float(v.split("=")[1]) for v in match.group(1).split("/")]
    if len(stages) < 2 or not printed:
        return []
    cells = []
    for i, st in enumerate(stages):
        part = []
        for name, attr in STAGE_METRICS.items():
            if name in printed and i < len(printed[name]):
                m, k = printed[name][i], getattr(st, attr) / GiB
                part.append(f"{name} {m:.2f} / {k:.2f} / {_err(k, m):+.2f}")
        cells.append(f"PP{i}: " + ", ".join(part))
    return cells


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas in (None, 0):
        return None
    return (pred - meas) / abs(meas) * 100


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    rows = [r for r in (run_row(row) for row in csv.DictReader(args.csv.open())) if r]
    keys = ("weights", "activation", "non_torch", "kv_pool", "tokens", "concurrency")
    lines = ["| run | ver | TP | PP | len | dtype | kv | quant | "
             + " | ".join(f"{k} meas / pred / err %" for k in keys) + " |",
             "|" + "---|" * (8 + len(keys))]
    errors: dict[str, list[float]] = {k: [] for k in keys}
    table = []
    for r in rows:
        cells = []
        for k in keys:
            m, p = r["measured"][k], r["predicted"][k]
            e = _err(p, m)
            if e is not None:
                errors[k].append(abs(e))
            fmt = (lambda v: f"{v:,.0f}") if k == "tokens" else (lambda v: f"{v:.2f}")
            cells.append("-" if m is None else f"{fmt(m)} / {fmt(p)} / {e:+.2f}")
            table.append({"run_id": r["run_id"], "metric": k, "measured": m, "predicted": p, "error_pct": e})
        lines.append(f"| {r['run_id'].split('/')[-1][:48]} | {r['version']} | {r['tp']} | {r['pp']} | {r['max_len']} "
                     f"| {r['dtype']} | {r['kv']} | {r['quant']} | " + " | ".join(cells) + " |")
    summary = ["", "| metric | rows | median abs err % | mean abs err % | max abs err % |", "|---|---|---|---|---|"]
    for k in keys:
        e = errors[k]
        if e:
            summary.append(f"| {k} | {len(e)} | {statistics.median(e):.2f} | {statistics.mean(e):.2f} | {max(e):.2f} |")
    staged = [f"- {r['run_id'].split('/')[-1]}: " + "; ".join(r["stages"]) for r in rows if r["stages"]]
    stages = ["", "Pipeline stages (each worker's printed value from the row's notes / kvplan's stage / error %; "
              "a non-first stage holds the buffers it receives into, the first none: "
              "kvplan/planning/engines/vllm_runner.py `receive_buffer_term`):", "", *staged] if staged else []
    text = "\n".join(["# kvplan vLLM profile vs measured vLLM start-ups", "",
                      f"Source: `{args.csv.name}` ({len(rows)} rows with status ok). Generated by "
                      "`python validation/vllm_calibration.py`.", "", *lines, *summary, *stages, ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vllm_calibration.md").write_text(text)
    with (args.out / "vllm_calibration.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["run_id", "metric", "measured", "predicted", "error_pct"])
        w.writeheader()
        w.writerows(table)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
