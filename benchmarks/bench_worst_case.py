"""The worst case of an admitted config: how long kvplan takes on the deepest config its boundary admits.

    python benchmarks/bench_worst_case.py [--repeat 3]

Llama-3.1-8B's config with num_hidden_layers 10,000 (kvplan.config's MAX_LAYERS), read once, then per query the
median wall time of `repeat` runs: plan() on one H100, plan() and the nearest fixes, the fewest-GPU search (it
finds none: 4.4 TB of weights), a pipeline of 10,000 stages, and the estimate. Target (issue #25): every query
<= 2 s. Figures only: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 2.0


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    import kvplan
    from kvplan.config.load import load_model
    from kvplan.errors import WorkloadError
    from kvplan.planning.search import fewest_gpus, fixes

    config = json.loads((ROOT / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_text())
    config["num_hidden_layers"] = 10_000
    start = time.perf_counter()
    deep = load_model(config)
    load_s = time.perf_counter() - start

    def search():
        try:
            fewest_gpus(deep, gpu="H100", max_model_len=8192)
        except WorkloadError:
            pass

    def with_fixes():
        p = kvplan.plan(deep, gpu="H100", max_model_len=8192)
        fixes(deep, p, gpu="H100", max_model_len=8192)

    queries = [
        ("plan, 1 x H100", lambda: kvplan.plan(deep, gpu="H100", max_model_len=8192)),
        ("plan + nearest fixes", with_fixes),
        ("fewest-GPU search (none fits)", search),
        ("plan, PP 10,000", lambda: kvplan.plan(deep, gpu="H100", max_model_len=8192, pp=10_000)),
        ("estimate, 8,192 tokens", lambda: kvplan.estimate(deep, 8192)),
    ]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"Llama-3.1-8B at 10,000 layers: read in {load_s:.2f} s; median of {args.repeat} runs per query")
    worst = 0.0
    for name, fn in queries:
        seconds = _median_s(fn, args.repeat)
        worst = max(worst, seconds)
        print(f"  {name:32s} {seconds:7.3f} s")
    print(f"worst {worst:.3f} s; target <= {TARGET_S:.0f} s: {'ok' if worst <= TARGET_S else 'over'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
