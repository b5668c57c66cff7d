"""How fast kvplan answers: CLI cold start and in-process estimates per second.

    python benchmarks/bench_estimate.py [--runs 9] [--seconds 1.0] [--json]

1. Cold start: the median wall time of `python -m kvplan estimate meta-llama/Llama-3.1-8B --seq-len 8192`
   over --runs fresh interpreters (after one unmeasured run that warms the OS file cache), next to the
   bare `python -c pass` floor. Target <= 0.3 s.
2. Throughput: `kvplan.estimate(spec, seq_len)` on a preloaded ModelSpec, seq_len cycling over 1,000
   distinct values so no call repeats the previous one's workload. Target >= 100,000 estimates/s for
   Llama-3.1-8B; a few other layouts are printed for comparison.

Each figure comes as wall time (what the targets mean) and CPU time (user + sys of the process), with the
load average: on a shared machine the wall figures inflate with the load while the CPU ones mostly do not.
Figures only: nothing here fails on a slow machine (tests never assert timings).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kvplan  # noqa: E402

COLD_TARGET_S = 0.3
RATE_TARGET = 100_000
CLI = ["-m", "kvplan", "estimate", "meta-llama/Llama-3.1-8B", "--seq-len", "8192"]
THROUGHPUT_CASES = [
    # (label, model id, estimate kwargs)
    ("Llama-3.1-8B dynamic", "meta-llama/Llama-3.1-8B", {}),
    ("gemma-2-9b dynamic (sliding + full)", "google/gemma-2-9b", {}),
    ("DeepSeek-V3 dynamic (MLA, 61 layers)", "deepseek-ai/DeepSeek-V3", {}),
    ("Llama-3.1-405B static (126 layers)", "meta-llama/Llama-3.1-405B", {"cache": "static"}),
    ("Jamba-1.5-Mini dynamic (attention + Mamba)", "ai21labs/AI21-Jamba-1.5-Mini", {}),
    ("Llama-3.1-8B quantized int4", "meta-llama/Llama-3.1-8B", {"cache": "quantized", "kv_dtype": "int4"}),
]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_times(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of `runs` fresh `python *argv` processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
        wall.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - start_cpu)
    return wall, cpu


def estimates_per_second(model_id: str, kwargs: dict, seconds: float) -> tuple[float, float]:
    """(estimates per wall second, estimates per CPU second)."""
    spec = kvplan.load_model(model_id)
    lengths = [4096 + 7 * i for i in range(1000)]  # 1,000 distinct seq_lens, all >= any prompt default
    estimate = kvplan.estimate
    for seq_len in lengths[:200]:  # warm up
        estimate(spec, seq_len, **kwargs)
    calls, start, start_cpu = 0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - start) < seconds:
        for seq_len in lengths:
            estimate(spec, seq_len, **kwargs)
        calls += len(lengths)
    return calls / elapsed, calls / (time.process_time() - start_cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh interpreters per cold-start figure (>= 7)")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per throughput case")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)

    floor, floor_cpu = run_times(["-c", "pass"], args.runs)
    cold, cold_cpu = run_times(CLI, args.runs)
    rates = {label: estimates_per_second(model_id, kwargs, args.seconds)
             for label, model_id, kwargs in THROUGHPUT_CASES}
    result = {
        "python": sys.version.split()[0],
        "load_average_1min": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "cold_start_median_s": statistics.median(cold),
        "cold_start_min_s": min(cold),
        "cold_start_max_s": max(cold),
        "cold_start_cpu_median_s": statistics.median(cold_cpu),
        "python_floor_median_s": statistics.median(floor),
        "python_floor_cpu_median_s": statistics.median(floor_cpu),
        "estimates_per_s": {label: wall for label, (wall, _) in rates.items()},
        "estimates_per_cpu_s": {label: cpu for label, (_, cpu) in rates.items()},
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"python {result['python']}, {result['cpus']} CPUs, load average {result['load_average_1min']:.2f}")
    cold_ok = "ok" if result["cold_start_median_s"] <= COLD_TARGET_S else "ABOVE TARGET"
    print(f"CLI cold start  `python {' '.join(CLI)}`")
    print(f"  wall median {result['cold_start_median_s']:.3f} s over {args.runs} runs (min {min(cold):.3f}, "
          f"max {max(cold):.3f}); target <= {COLD_TARGET_S} s: {cold_ok}")
    print(f"  CPU median {result['cold_start_cpu_median_s']:.3f} s")
    print(f"  interpreter floor (`python -c pass`): wall median {result['python_floor_median_s']:.3f} s, "
          f"CPU {result['python_floor_cpu_median_s']:.3f} s")
    print("in-process kvplan.estimate on a preloaded ModelSpec (per wall second / per CPU second)")
    for label, (wall, cpu) in rates.items():
        print(f"  {label:<44} {wall:>10,.0f} /s  {cpu:>10,.0f} /CPU s")
    first = rates[THROUGHPUT_CASES[0][0]][0]
    print(f"  target >= {RATE_TARGET:,}/s for {THROUGHPUT_CASES[0][0]}: "
          f"{'ok' if first >= RATE_TARGET else 'BELOW TARGET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
