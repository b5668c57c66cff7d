"""The results folder: report.json, report.csv, summary.md, predicted_vs_measured.png, all written atomically
(a temporary file in the same folder, then `os.replace`), so an interrupted run never leaves a torn file and
`--resume` can always read what the last finished case wrote."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import statistics
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

CSV_COLUMNS = [
    "id", "suite", "model", "variant", "model_type", "cache", "quant_backend", "kv_dtype", "batch_size", "prompt_len",
    "new_tokens", "seq_len", "dtype", "device", "predicted_kv_bytes", "measured_kv_bytes", "kv_error_bytes",
    "predicted_prefill_kv_bytes", "measured_prefill_kv_bytes", "prefill_kv_error_bytes", "measured_kv_alloc_bytes",
    "kv_alloc_error_pct", "predicted_peak_bytes", "measured_peak_bytes", "peak_error_pct", "planner_fits",
    "status", "reason", "seconds",
]


PEAK_TARGET_PCT = 5.0   # predicted generate() peak against CUDA's max_memory_allocated


def write_atomic(path: Path, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # mkstemp makes 0600; results are meant to be read and committed
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def environment(device) -> dict[str, Any]:
    import torch
    import transformers

    import kvplan

    env: dict[str, Any] = {
        "device": device.type, "torch": torch.__version__, "transformers": transformers.__version__,
        "kvplan": kvplan.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(), "cuda": torch.version.cuda, "driver": None, "gpu": None,
        "gpu_memory_bytes": None, "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    for name, module in (("optimum_quanto", "optimum.quanto"), ("hqq", "hqq")):
        try:
            mod = __import__(module, fromlist=["__version__"])
            env[name] = getattr(mod, "__version__", "installed")
        except Exception:  # noqa: BLE001
            env[name] = None
    if device.type == "cuda":
        from .measure import driver_version

        props = torch.cuda.get_device_properties(device)
        env.update(driver=driver_version(), gpu=props.name, gpu_memory_bytes=props.total_memory,
                   capability=f"{props.major}.{props.minor}")
    return env


class ReportError(Exception):
    """The folder holds a report.json this harness cannot have written: it is left as it is."""


def load_report(out_dir: Path) -> dict | None:
    """The folder's report.json, None when there is none; ReportError (one line) for anything else in its place:
    a resume must never overwrite a corrupt, truncated or foreign file with a fresh report."""
    path = Path(out_dir) / "report.json"
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except IsADirectoryError:
        raise ReportError(_refusal(path, "it is a folder")) from None
    except OSError as exc:
        raise ReportError(_refusal(path, f"it cannot be read: {exc.strerror or exc}")) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
        raise ReportError(_refusal(path, "it is not JSON: truncated, binary or another tool's")) from None
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in cases):
        raise ReportError(_refusal(path, "it is not a report with a list of cases, each with an id"))
    return data


def _refusal(path: Path, why: str) -> str:
    return f"{path} is not a report this harness wrote ({why}): move it away, or pass another --out"


def write_all(out_dir: Path, report: dict, *, plot: bool = True) -> None:
    out_dir = Path(out_dir)
    report["summary"] = summarise(report["cases"])
    report["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_atomic(out_dir / "report.json", json.dumps(report, indent=1, default=str) + "\n")
    write_atomic(out_dir / "report.csv", to_csv(report["cases"]))
    write_atomic(out_dir / "summary.md", to_markdown(report))
    if plot:
        png = plot_png(report["cases"])
        if png is not None:
            write_atomic(out_dir / "predicted_vs_measured.png", png)


def to_csv(cases: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for case in cases:
        writer.writerow({k: ("" if case.get(k) is None else case.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()


def _stats(values: list[float]) -> dict:
    if not values:
        return {"count": 0, "max": None, "median": None}
    return {"count": len(values), "max": max(values), "median": statistics.median(values)}


def summarise(cases: list[dict]) -> dict:
    statuses: dict[str, int] = {}
    for c in cases:
        statuses[c.get("status", "?")] = statuses.get(c.get("status", "?"), 0) + 1
    measured = [c for c in cases if c.get("measured_kv_bytes") is not None]
    kv_abs = [abs(c["kv_error_bytes"]) for c in measured]
    kv_pct = [abs(c["kv_error_bytes"]) / c["predicted_kv_bytes"] * 100 for c in measured if c["predicted_kv_bytes"]]
    prefill_abs = [abs(c["prefill_kv_error_bytes"]) for c in measured if c.get("prefill_kv_error_bytes") is not None]
    peak = [abs(c["peak_error_pct"]) for c in measured if c.get("peak_error_pct") is not None]
    alloc = [abs(c["kv_alloc_error_pct"]) for c in measured if c.get("kv_alloc_error_pct") is not None]
    ooms = [c for c in cases if c.get("status") == "oom"]
    return {
        "cases": len(cases), "statuses": statuses, "measured": len(measured),
        "mismatches": statuses.get("mismatch", 0),
        "kv_error_bytes": _stats(kv_abs), "kv_error_pct": _stats(kv_pct),
        "prefill_kv_error_bytes": _stats(prefill_abs), "peak_error_pct": _stats(peak),
        "kv_alloc_error_pct": _stats(alloc),
        "peak_within_5pct": sum(1 for x in peak if x <= PEAK_TARGET_PCT),
        "oom": len(ooms), "oom_predicted": sum(1 for c in ooms if c.get("planner_fits") is False),
        "seconds": round(sum(c.get("seconds") or 0 for c in cases), 1),
    }


def _b(n) -> str:
    if n is None:
        return ""
    return f"{n:,}" if isinstance(n, int) or not float(n).is_integer() else f"{int(n):,}"


def _pct(x) -> str:
    return "" if x is None else f"{x:+.2f} %"


def to_markdown(report: dict) -> str:
    s, env, cases = report["summary"], report.get("environment", {}), report["cases"]
    lines = [f"# kvplan validation: {', '.join(report.get('suites', []))} on {env.get('device')}", "",
             f"{s['cases']} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(s["statuses"].items())) + ". "
             f"Updated {report.get('updated')}; {s['seconds']} s of case time.", "",
             "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None), "",
             "## Errors", "",
             "| quantity | cases | max | median |", "|---|---:|---:|---:|"]
    for label, key, fmt in (("KV after decode, abs bytes", "kv_error_bytes", _b),
                            ("KV after decode, abs %", "kv_error_pct", lambda x: "" if x is None else f"{x:.4f} %"),
                            ("KV after prefill, abs bytes", "prefill_kv_error_bytes", _b),
                            ("KV from memory_allocated (CUDA), abs %", "kv_alloc_error_pct",
                             lambda x: "" if x is None else f"{x:.4f} %"),
                            ("peak, abs %", "peak_error_pct", lambda x: "" if x is None else f"{x:.2f} %")):
        st = s[key]
        lines.append(f"| {label} | {st['count']} | {fmt(st['max'])} | {fmt(st['median'])} |")
    lines += ["", f"Peak within {PEAK_TARGET_PCT:g} % of the measured peak (the target on CUDA): "
              f"{s['peak_within_5pct']} of {s['peak_error_pct']['count']} measured cases.", "",
              f"Out-of-memory results: {s['oom']} ({s['oom_predicted']} of them predicted by kvplan).", ""]
    bad = [c for c in cases if c.get("status") not in ("ok",)]
    if bad:
        lines += ["## Cases that are not ok", ""]
        lines += [f"- `{c['id']}`: **{c.get('status')}** {c.get('reason', '')}" for c in bad]
        lines.append("")
    lines += ["## Every case", "",
              "Bytes are exact unless noted. KV: storage the cache holds after decode (P + N - 1 tokens); prefill: "
              "right after the prefill; peak: predicted vs measured (CPU: profiler allocation events; CUDA: "
              "max_memory_allocated).", "",
              "| case | status | KV predicted | KV measured | error | prefill predicted | prefill measured | "
              "peak predicted | peak measured | peak error |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        lines.append(f"| `{c['id']}` | {c.get('status')} | {_b(c.get('predicted_kv_bytes'))} | "
                     f"{_b(c.get('measured_kv_bytes'))} | {_b(c.get('kv_error_bytes'))} | "
                     f"{_b(c.get('predicted_prefill_kv_bytes'))} | {_b(c.get('measured_prefill_kv_bytes'))} | "
                     f"{_b(c.get('predicted_peak_bytes'))} | {_b(c.get('measured_peak_bytes'))} | "
                     f"{_pct(c.get('peak_error_pct'))} |")
    return "\n".join(lines) + "\n"


def plot_png(cases: list[dict]) -> bytes | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    colours = {"ok": "tab:green", "mismatch": "tab:red", "oom": "tab:purple", "error": "tab:orange"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, pred_key, meas_key, title in (
            (axes[0], "predicted_kv_bytes", "measured_kv_bytes", "KV cache bytes after decode"),
            (axes[1], "predicted_peak_bytes", "measured_peak_bytes", "peak memory bytes")):
        points = [(c[pred_key], c[meas_key], c.get("status")) for c in cases
                  if c.get(pred_key) and c.get(meas_key)]
        for status, colour in colours.items():
            xs = [p for p, m, s in points if s == status]
            ys = [m for p, m, s in points if s == status]
            if xs:
                ax.scatter(xs, ys, s=14, c=colour, label=f"{status} ({len(xs)})", alpha=0.8)
        if points:
            lo = min(min(p, m) for p, m, _ in points)
            hi = max(max(p, m) for p, m, _ in points)
            ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--", label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("predicted (kvplan)")
        ax.set_ylabel("measured")
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
