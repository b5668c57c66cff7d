"""`python -m validation` / `kvplan validate`: run a suite, write the results folder.

    python -m validation --suite smoke                      # tiny models, CPU, seconds
    python -m validation --suite cpu                        # every bundled family, shrunk, CPU
    python -m validation --suite gpu --time-budget 480      # real-size models on one GPU
    python -m validation --bench space-for-time             # decode with the cache vs full recomputation
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import sys
import time
from datetime import date
from pathlib import Path
from typing import Sequence

from .report import ReportError

RESULTS = Path(__file__).resolve().parent / "results"   # the committed runs; a run writes under DEFAULT_OUT
DEFAULT_OUT = Path("kvplan-validation-results")         # in the current folder, never inside the package
GPU_DEFAULT_BUDGET_S = 480.0   # the gpu suite fits in 8 minutes of one H200 unless told otherwise


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation",
                                description="kvplan's predictions against real transformers generate() runs.")
    p.add_argument("--suite", choices=("smoke", "cpu", "gpu"), help="which cases (default: gpu on CUDA, else cpu)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--out", type=Path, help="results folder (default ./kvplan-validation-results/<date>-<device>/)")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="stop starting cases (and stop a running one) when this much time has passed")
    p.add_argument("--resume", dest="resume", action="store_true", default=True,
                   help="skip cases the folder's report.json already finished (default)")
    p.add_argument("--no-resume", dest="resume", action="store_false", help="run every case again")
    p.add_argument("--cases", action="append", metavar="SUBSTRING",
                   help="only cases whose id contains this (repeatable; any match counts)")
    p.add_argument("--pretrained", action="store_true",
                   help="load real weights when the model's files are already on disk (never downloads)")
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="device memory to allow, GiB (CUDA: enforced; CPU: simulated between steps)")
    p.add_argument("--list", action="store_true", help="print the suite's case ids and exit")
    p.add_argument("--plan", action="store_true",
                   help="print what a run would do (predicted peak, fit, estimated seconds per case) without "
                        "building a model; sized for --memory-limit, else the CUDA device, else an H200 for "
                        "the gpu suite")
    p.add_argument("--no-progress", action="store_true", help="no progress bar: one line per finished case")
    p.add_argument("--bench", choices=("space-for-time",), help="run a benchmark instead of a suite")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--repredict", action="store_true",
                   help="recompute kvplan's predictions for the cases already in --out (measurements kept) and "
                        "rewrite the reports: re-checks stored runs against a changed kvplan without a GPU")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()           # the time budget counts from here: imports and model builds included
    args = build_parser().parse_args(argv)
    problem = bad_numbers(args)
    if problem:
        return _fail(problem)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("validation: error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = args.out or DEFAULT_OUT / f"{date.today().isoformat()}-{device.type}"
    suite = args.suite or ("gpu" if device.type == "cuda" else "cpu")
    runs = not (args.list or args.plan)
    if runs and not args.bench and suite == "gpu" and device.type != "cuda":   # refused before anything is written
        print("validation: error: the gpu suite needs CUDA (use --suite cpu or smoke)", file=sys.stderr)
        return 2
    if runs:
        problem = unwritable(out)   # creates the folder: only for a run that will write into it
        if problem:
            return _fail(problem)
    if args.bench:
        from .space_for_time import run_benchmark

        run_benchmark(out, device=device, time_budget=args.time_budget, progress=not args.no_progress)
        return 0
    if suite == "gpu" and args.time_budget is None:
        args.time_budget = GPU_DEFAULT_BUDGET_S
    from .suites import suite_cases

    cases = suite_cases(suite)
    if args.cases:
        cases = [c for c in cases if any(s in c.id for s in args.cases)]
    if args.list:
        try:
            print("\n".join(c.id for c in cases))
        except BrokenPipeError:   # `--list | head`
            pass
        return 0
    if args.plan:
        return print_plan(suite, cases, device, args.memory_limit, args.time_budget)
    try:
        return _run(args, suite, cases, out, device, started)
    except ReportError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail(f"interrupted: every finished case is in {out}/report.json; run the same command again to "
                     "resume", code=130)


def _run(args, suite, cases, out, device, started) -> int:
    if args.repredict:
        from .report import load_report, write_all
        from .runner import repredict

        report = load_report(out)
        if report is None:
            print(f"validation: error: no report.json in {out}", file=sys.stderr)
            return 2
        by_id = {c.id: c for c in cases}
        report["cases"] = [repredict(by_id[c["id"]], c) if c["id"] in by_id else c for c in report["cases"]]
        write_all(out, report)
        s = report["summary"]
        print(f"re-predicted {sum(c['id'] in by_id for c in report['cases'])} cases: "
              + ", ".join(f"{n} {k}" for k, n in sorted(s["statuses"].items())) + f" -> {out}", file=sys.stderr)
        return 1 if s["mismatches"] else 0
    limit = int(args.memory_limit * 2**30) if args.memory_limit else None
    report = run_suite(suite, cases, out, device=device, time_budget=args.time_budget, resume=args.resume,
                       pretrained=args.pretrained, memory_limit=limit, progress=not args.no_progress,
                       started=started)
    s = report["summary"]
    print(f"{s['cases']} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(s["statuses"].items()))
          + f" -> {out}", file=sys.stderr)
    return 1 if s["mismatches"] or s["statuses"].get("error") else 0


def _fail(message: str, code: int = 2) -> int:
    print(f"validation: error: {message}", file=sys.stderr)
    return code


def bad_numbers(args) -> str | None:
    """The numeric options, checked before torch is imported: one sentence, or None."""
    for flag, value in (("--memory-limit", args.memory_limit), ("--time-budget", args.time_budget)):
        if value is not None and not (math.isfinite(value) and value > 0):
            example = 8 if flag == "--memory-limit" else 480
            return f"{flag} must be a positive number, got {value}: pass e.g. {flag} {example}"
    if args.threads is not None and args.threads < 1:
        return f"--threads must be 1 or more, got {args.threads}: pass e.g. --threads 1"
    return None


def unwritable(out: Path) -> str | None:
    """Why results cannot be written to `out` (checked before the first case), or None."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except FileExistsError:
        return f"--out {out} is not a folder: pass a folder to write the results in"
    except OSError as exc:
        return f"cannot write the results to --out {out} ({exc.strerror or exc}): pass a folder you can write to"
    return None


def print_plan(suite: str, cases, device, memory_limit_gib: float | None, time_budget: float | None) -> int:
    """`--plan`: the run's decisions, case by case, and whether the estimated total fits the time budget."""
    import torch

    from .runner import plan_cases

    device_type = "cuda" if suite == "gpu" else device.type
    if memory_limit_gib:
        memory, where = int(memory_limit_gib * 2**30), f"--memory-limit {memory_limit_gib:g} GiB"
    elif device_type == "cuda" and torch.cuda.is_available():
        memory = torch.cuda.get_device_properties(device).total_memory
        where = torch.cuda.get_device_name(device)
    elif device_type == "cuda":
        from kvplan.gpus import resolve_gpu

        gpu = resolve_gpu("H200")
        memory, where = gpu.memory_bytes, f"{gpu.name} (kvplan's catalogue; no CUDA device here)"
    else:
        memory, where = None, "no memory limit"
    rows = plan_cases(cases, device_type, memory)
    print(f"{suite} suite on {device_type}, {where}" + (f": {memory:,} B" if memory else ""))
    for r in rows:
        peak = "-" if r["predicted_peak_bytes"] is None else f"{r['predicted_peak_bytes'] / 2**30:9.2f} GiB"
        print(f"  {r['id']:<62} {peak:>13}  {r['seconds']:7.1f} s  {r['cumulative_s']:8.1f} s  {r['reason']}")
    total = rows[-1]["cumulative_s"] if rows else 0.0
    runs = sum(r["fits"] is True for r in rows)
    verdict = "" if time_budget is None else \
        f" (budget {time_budget:.0f} s: {'fits' if total <= time_budget else 'the last cases would be skipped'})"
    print(f"{runs} of {len(rows)} cases would run, about {total:.0f} s{verdict}; estimates assume this machine's "
          "pace is the harness's default until cases finish")
    return 0


def run_suite(suite: str, cases, out: Path, *, device, time_budget=None, resume=True, pretrained=False,
              memory_limit=None, progress=True, plot=True, started: float | None = None) -> dict:
    """Run `cases`, writing the folder after every case. Returns the report dict."""
    import transformers

    from .report import environment, load_report, write_all
    from .runner import FINISHED, RunContext, run_case
    from .suites import unsupported_records

    transformers.logging.set_verbosity_error()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gc

    gc.collect()
    gc.freeze()      # the imported world is permanent: later collections (between models) scan only new objects
    out = Path(out)
    previous = load_report(out)          # kept either way: --no-resume re-runs the selected cases only
    done: dict[str, dict] = {c["id"]: c for c in (previous or {}).get("cases", [])}
    report = {"environment": environment(device), "suites": sorted({suite, *(previous or {}).get("suites", [])}),
              "cases": []}
    if device.type == "cuda":
        from .quanto_cuda import use_torch_unpack

        if use_torch_unpack():
            report["environment"]["quanto_unpack"] = "torch (validation/quanto_cuda.py; CUDA extension not built)"
    for rec in unsupported_records(suite):
        done.setdefault(rec["id"], rec)
    order = [c.id for c in cases]
    results: dict[str, dict] = dict(done)
    todo = [c for c in cases if not (resume and c.id in done and done[c.id].get("status") in FINISHED)]
    ctx = RunContext(device=device, suite=suite, time_budget=time_budget, memory_limit=memory_limit,
                     pretrained=pretrained, started=started if started is not None else time.monotonic())
    bar = _progress(len(todo), progress)
    started = time.monotonic()
    try:
        for n, case in enumerate(todo, 1):
            bar.set_postfix_str(case.id[:60], refresh=False)
            rec = run_case(case, ctx)
            results[case.id] = rec
            report["cases"] = _ordered(results, order)
            report["run"] = {"suite": suite, "device": device.type, "time_budget_s": time_budget,
                             "elapsed_s": round(time.monotonic() - started, 1)}
            write_all(out, report, plot=False)      # the plot once at the end: it costs more than a tiny case
            bar.update(1)
            if not progress:
                print(case_line(rec, n, len(todo)), file=sys.stderr, flush=True)
    finally:
        bar.close()
        ctx.release_model()
    report["cases"] = _ordered(results, order)
    report["run"] = {"suite": suite, "device": device.type, "time_budget_s": time_budget,
                     "elapsed_s": round(time.monotonic() - started, 1)}
    write_all(out, report, plot=plot)
    return report


def _ordered(results: dict[str, dict], order: list[str]) -> list[dict]:
    """The suite's cases in suite order, then any other case the folder already held."""
    seen = set(order)
    return [results[i] for i in order if i in results] + [r for i, r in results.items() if i not in seen]


def case_line(rec: dict, done: int, total: int) -> str:
    """One line per finished case for logs (--no-progress): id, status, KV and peak error, seconds."""
    parts = [f"[{done}/{total}] {rec['id']}: {rec['status']}"]
    if rec.get("kv_error_bytes") is not None:
        parts.append(f"kv {rec['kv_error_bytes']:+,} B")
    if rec.get("peak_error_pct") is not None:
        parts.append(f"peak {rec['peak_error_pct']:+.2f} %")
    if rec.get("reason"):
        parts.append(rec["reason"][:160])
    parts.append(f"{rec.get('seconds', 0):.1f} s")
    return ", ".join(parts)


class _NoBar:
    def set_postfix_str(self, *a, **k):
        pass

    def update(self, n=1):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="case", dynamic_ncols=True, file=sys.stderr)
