"""Time kvplan's planner: one `plan()` query (median over many) and a 1,000-point sweep.

    python benchmarks/bench_planner.py [--repeat N]

Prints figures only (milliseconds). Target: one query <= 5 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvplan.config import load  # noqa: E402
from kvplan.config.load import load_model  # noqa: E402
from kvplan.planning.planner import plan  # noqa: E402
from kvplan.weights import split as weights_split  # noqa: E402

MODELS = ("meta-llama/Llama-3.1-8B", "google/gemma-2-9b", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3",
          "meta-llama/Llama-4-Scout-17B-16E-Instruct")


def _median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (first call fills caches; the figure is the steady state)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _clear_caches() -> None:
    load._load_bundled.cache_clear()
    weights_split._stage_weight_bytes.cache_clear()
    weights_split._stage_parts.cache_clear()
    weights_split.priced_tensors.cache_clear()
    weights_split.whole_model.cache_clear()
    weights_split._priced.cache_clear()


def _cold_ms(fn, repeat: int) -> float:
    """Median of calls made with the planner's per-model caches emptied first (the first query for a model)."""
    times = []
    for _ in range(repeat):
        _clear_caches()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def single_queries(repeat: int) -> None:
    print(f"one plan() query, median of {repeat} (ms):")
    for name in MODELS:
        model = load_model(name)
        tp = 8 if "DeepSeek" in name else 1
        gpu = "H200" if "DeepSeek" in name else "H100-80GB"
        spec = _median_ms(lambda: plan(model, gpu=gpu, tp=tp, max_model_len=8192), repeat)
        by_name = _median_ms(lambda: plan(name, gpu=gpu, tp=tp, max_model_len=8192), repeat)
        sglang = _median_ms(lambda: plan(model, engine="sglang", gpu=gpu, tp=tp, max_model_len=8192), repeat)
        cold = _cold_ms(lambda: plan(name, gpu=gpu, tp=tp, max_model_len=8192), max(5, repeat // 10))
        print(f"  {name:<44} vllm {spec:7.3f}  vllm by name {by_name:7.3f}  sglang {sglang:7.3f}  "
              f"first query (cold caches) {cold:7.3f}")


def sweep() -> None:
    lengths = [1024 * (i + 1) for i in range(40)]            # 1k .. 40k tokens
    utils = [round(0.50 + 0.02 * i, 2) for i in range(25)]   # 0.50 .. 0.98
    print(f"1,000-point sweep (max_model_len x gpu_memory_utilization = {len(lengths)} x {len(utils)}), total ms:")
    for name, gpu, tp in (("meta-llama/Llama-3.1-8B", "H100-80GB", 1), ("google/gemma-2-9b", "L40S", 1),
                          ("deepseek-ai/DeepSeek-V3", "H200", 8)):
        model = load_model(name)
        start = time.perf_counter()
        points = 0
        for length in lengths:
            for util in utils:
                plan(model, gpu=gpu, tp=tp, max_model_len=length, gpu_memory_utilization=util)
                points += 1
        total = (time.perf_counter() - start) * 1e3
        print(f"  {name:<44} {points} points {total:9.1f} ms  ({total / points:.3f} ms per point)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    single_queries(args.repeat)
    sweep()
    return 0


if __name__ == "__main__":
    sys.exit(main())
