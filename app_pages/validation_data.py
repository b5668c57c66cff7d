"""The committed measurement files the web app's Validation and Learn pages show: the harness's
validation/results/*/report.json, the serving-engine start-up tables (vllm_calibration.csv, vllm_holdout_results.csv,
sglang_calibration_results.csv) and the space-for-time benchmark. Readers are named `read_*`; the rest is pure.
Imports pandas, never streamlit.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kvplan.sources.files import MAX_CONFIG_BYTES


@dataclass(frozen=True)
class Reports:
    """Predicted-vs-measured rows from validation/results/*/report.json, plus the files that could not be read."""

    rows: pd.DataFrame
    runs: pd.DataFrame          # one row per report: folder, device, library versions
    problems: tuple[str, ...]


REPORT_COLUMNS = ["run", "model", "variant", "cache", "kv_dtype", "seq_len", "batch_size", "predicted_bytes",
                  "measured_bytes", "error_bytes", "error_pct", "status", "device"]
_ALIASES = {  # the harness's names (validation/report.py) first, then plausible others
    "model": ("source", "model", "model_id", "name"),
    "variant": ("variant",),
    "cache": ("cache", "cache_strategy", "cache_implementation", "strategy"),
    "kv_dtype": ("kv_dtype", "cache_dtype", "dtype"),
    "seq_len": ("seq_len", "tokens", "context", "cached_tokens"),
    "batch_size": ("batch_size", "batch"),
    "predicted_bytes": ("predicted_kv_bytes", "predicted_bytes", "kvplan_bytes", "predicted"),
    "measured_bytes": ("measured_kv_bytes", "measured_bytes", "actual_bytes", "measured"),
    "status": ("status",),
}
_ROW_LISTS = ("cases", "results", "rows", "records", "measurements", "points")
_VERSION_KEYS = ("kvplan", "torch", "transformers", "optimum_quanto", "hqq", "vllm", "sglang", "cuda", "driver",
                 "python")


def read_reports(results_dir: Path) -> Reports:
    """Read every `<results_dir>/*/report.json` the validation harness writes; no folder is 'no results yet'.

    The harness's shape (validation/report.py): `{"environment": {"device", "gpu", "torch", "transformers", ...},
    "cases": [{"source", "model", "variant", "cache", "kv_dtype", "seq_len", "batch_size", "predicted_kv_bytes",
    "measured_kv_bytes", "status", ...}]}`. A bare list of cases, and the field aliases in `_ALIASES`, are read too.
    Cases without both numbers (skipped, out of memory) are left out.
    """
    rows, runs, problems = [], [], []
    for path in sorted(Path(results_dir).glob("*/report.json")) if Path(results_dir).is_dir() else []:
        try:
            data = json.loads(path.read_bytes()[:MAX_CONFIG_BYTES * 16])
        except (OSError, ValueError) as exc:
            problems.append(f"{path.parent.name}/report.json could not be read ({exc.__class__.__name__})")
            continue
        run, meta, records = _split_report(path.parent.name, data)
        kept = [row for row in (_report_row(run, r, meta["device"]) for r in records) if row]
        runs.append({**meta, "measured": len(kept)})
        rows.extend(kept)
    return Reports(pd.DataFrame(rows, columns=REPORT_COLUMNS), pd.DataFrame(runs), tuple(problems))


def _split_report(run: str, data: Any) -> tuple[str, dict, list]:
    meta = data if isinstance(data, dict) else {}
    records = data if isinstance(data, list) else next(
        (meta[k] for k in _ROW_LISTS if isinstance(meta.get(k), list)), [])
    env = next((meta[k] for k in ("environment", "env") if isinstance(meta.get(k), dict)), {})
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    versions = {**{k: env[k] for k in _VERSION_KEYS if env.get(k) is not None}, **versions}
    device = env.get("gpu") or meta.get("gpu") or meta.get("device") or env.get("device") or ""
    info = {"run": run, "device": str(device), "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
            "cases": len(records), "updated": str(meta.get("updated") or "")}
    return run, info, records


def _first(record: dict, keys: tuple[str, ...]):
    return next((record[k] for k in keys if k in record and record[k] is not None), None)


def _report_row(run: str, record: Any, device: str) -> dict | None:
    if not isinstance(record, dict):
        return None
    row = {field: _first(record, keys) for field, keys in _ALIASES.items()}
    predicted, measured = _number(row["predicted_bytes"]), _number(row["measured_bytes"])
    if predicted is None or measured is None:
        return None
    row.update(run=run, predicted_bytes=predicted, measured_bytes=measured, error_bytes=predicted - measured,
               error_pct=100.0 * (predicted - measured) / measured if measured else None,
               device=device or str(record.get("device") or ""))
    texts = ("model", "variant", "cache", "kv_dtype", "status")
    return {k: (str(v) if k in texts and v is not None else v) for k, v in row.items()}


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def report_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Error by model and cache strategy: count, exact matches, median and max |error| %."""
    if rows.empty:
        return pd.DataFrame(columns=["model", "cache", "runs", "exact", "median |error| %", "max |error| %"])
    out = []
    for (model, cache), g in rows.groupby(["model", "cache"], dropna=False, sort=True):
        errors = [abs(e) for e in g["error_pct"] if e is not None and e == e]
        out.append({"model": model, "cache": cache, "runs": len(g),
                    "exact": int((g["predicted_bytes"] == g["measured_bytes"]).sum()),
                    "median |error| %": statistics.median(errors) if errors else None,
                    "max |error| %": max(errors) if errors else None})
    return pd.DataFrame(out)


def read_calibration(csv_path: Path) -> pd.DataFrame:
    """validation/vllm_calibration.csv: run_id, metric, measured, predicted, error_pct (GiB or tokens)."""
    if not Path(csv_path).is_file():
        return pd.DataFrame(columns=["run_id", "metric", "measured", "predicted", "error_pct"])
    frame = pd.read_csv(csv_path)
    for column in ("measured", "predicted", "error_pct"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame.dropna(subset=["measured", "predicted"])


def calibration_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per metric: rows, median / mean / max absolute error %, as validation/vllm_calibration.md prints it."""
    out = []
    for metric in dict.fromkeys(frame["metric"]):
        errors = [abs(e) for e in frame.loc[frame["metric"] == metric, "error_pct"] if e == e]
        if errors:
            out.append({"metric": metric, "rows": len(errors), "median |error| %": round(statistics.median(errors), 2),
                        "mean |error| %": round(statistics.fmean(errors), 2), "max |error| %": round(max(errors), 2)})
    return pd.DataFrame(out, columns=["metric", "rows", "median |error| %", "mean |error| %", "max |error| %"])


def calibration_metric(frame: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, str]:
    """The rows of one metric and the unit its values are in."""
    unit = {"tokens": "tokens", "printed": "tokens", "blocks": "blocks", "concurrency": "requests"}.get(metric, "GiB")
    return frame[frame["metric"] == metric], unit


def calibration_intro(md_path: Path) -> str:
    """The first paragraph of validation/vllm_calibration.md (its source line), or '' when absent."""
    if not Path(md_path).is_file():
        return ""
    for block in Path(md_path).read_text(encoding="utf-8", errors="replace").split("\n\n"):
        text = block.strip()
        if text and not text.startswith(("#", "|")):
            return text
    return ""


def read_space_for_time(results_dir: Path) -> list[tuple[str, Any]]:
    """(run folder, parsed JSON) for every validation/results/*/space_for_time.json that parses."""
    found = []
    for path in sorted(Path(results_dir).glob("*/space_for_time.json")) if Path(results_dir).is_dir() else []:
        try:
            found.append((path.parent.name, json.loads(path.read_bytes()[:MAX_CONFIG_BYTES * 16])))
        except (OSError, ValueError):
            continue
    return found


def space_for_time_frame(data: Any) -> pd.DataFrame | None:
    """The benchmark's points as a table (validation/space_for_time.py writes `{"points": [{"context",
    "cached_s", "recompute_s", "kv_bytes", "speedup"}], "fits": {...}, "environment": {...}}`)."""
    records = data if isinstance(data, list) else next(
        (data[k] for k in (*_ROW_LISTS, "series") if isinstance(data, dict) and isinstance(data.get(k), list)),
        None)
    if not records or not all(isinstance(r, dict) for r in records):
        return None
    return pd.DataFrame(records)


def space_for_time_facts(data: Any) -> list[str]:
    """One line per fitted exponent, the model and the device, as the Learn page quotes them."""
    if not isinstance(data, dict):
        return []
    lines = []
    fits = data.get("fits") if isinstance(data.get("fits"), dict) else {}
    labels = {"cached_per_token_exponent": "time per token with the cache",
              "recompute_per_token_exponent": "time per token recomputing",
              "cached_total_exponent": "total time for L tokens with the cache",
              "recompute_total_exponent": "total time for L tokens recomputing"}
    for key, label in labels.items():
        if isinstance(fits.get(key), (int, float)):
            lines.append(f"{label} grows as L^{fits[key]:.2f}")
    env = data.get("environment") if isinstance(data.get("environment"), dict) else {}
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    if env or model:
        where = env.get("gpu") or env.get("device") or "?"
        shape = ", ".join(f"{k} {model[k]:,}" if isinstance(model[k], int) else f"{k} {model[k]}"
                          for k in ("model_type", "n_layer", "n_embd", "n_head", "params", "dtype") if k in model)
        lines.append(f"measured on {where}" + (f" with {shape}" if shape else "") +
                     (f"; torch {env['torch']}, transformers {env['transformers']}"
                      if env.get("torch") and env.get("transformers") else ""))
    return lines
