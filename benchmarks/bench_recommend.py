"""How long `kvplan recommend` takes over the whole GPU catalog (issue #24: under a second for a bundled model).

    python benchmarks/bench_recommend.py [--repeat 3]

Per model, the median wall time of `repeat` calls of kvplan.recommend at 2,000 + 500 tokens and 10 requests/s
(the model read once, before timing: the CLI reads it once too), then the CLI's acceptance command end to end in a
fresh process (interpreter start included). Figures only: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 1.0
MODELS = ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from kvplan.config.load import load_model
    from kvplan.gpus import list_gpus
    from kvplan.planning.recommend import recommend
    from kvplan.planning.workload import RequestMix

    mix = RequestMix(2000, 500)
    print(f"kvplan recommend over {len(list_gpus())} catalog GPUs, 2,000 + 500 tokens at 10 requests/s "
          f"(target {TARGET_S:.0f} s)")
    for name in MODELS:
        model = load_model(name)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            found = recommend(model, mix, 10)
            times.append(time.perf_counter() - start)
        best = found.cheapest[0] if found.cheapest else None
        answer = (f"{best.replicas} x {best.gpus_per_replica} {best.gpu} {best.layout}, ${best.cost_per_hour:,.2f}/h"
                  if best else "none priced")
        print(f"  {name:<28} {statistics.median(times):6.3f} s  ({found.searched['plans']} plans; {answer})")
    command = [sys.executable, "-m", "kvplan", "recommend", MODELS[0], "--prompt-mean", "2000", "--output-mean", "500",
               "--rate", "10", "--json"]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    print(f"  CLI, fresh process: {time.perf_counter() - start:.3f} s  ({' '.join(command[1:])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
