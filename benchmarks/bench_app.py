"""Server-side time of one rerun of each web-app page: `python benchmarks/bench_app.py [--model ID] [--reruns N]`.

Drives app.py with Streamlit's AppTest (the script runs in-process, as the server runs it; no browser) and prints,
per page, the first run, then the median / max of N reruns with the same inputs and of N reruns each after a new
context length (a visitor editing the sidebar). Model loading is cached (st.cache_data); every estimate, plan,
table and chart is recomputed on every rerun. AppTest adds ~5 ms of polling and recompiles the scripts each run,
which a running server does not. Target: <= 100 ms a rerun. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("app_pages/estimate.py", "app_pages/compare.py", "app_pages/capacity.py", "app_pages/validation.py",
         "app_pages/learn.py")
TARGET_MS = 100.0


def bench(model: str, ctx: int, reruns: int) -> list[tuple[str, float, list[float], list[float]]]:
    from streamlit.testing.v1 import AppTest

    results = []
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
        at.query_params["model"] = model
        at.query_params["ctx"] = str(ctx)
        at.run()
        started = time.perf_counter()
        at.switch_page(page).run()
        first = (time.perf_counter() - started) * 1e3
        if at.exception:
            raise SystemExit(f"{page}: {at.exception[0].message}")
        same, new = [], []
        for i in range(reruns):
            started = time.perf_counter()
            at.run()
            same.append((time.perf_counter() - started) * 1e3)
            at.number_input(key="ctx").set_value(ctx + 64 * (i + 1))
            started = time.perf_counter()
            at.run()
            new.append((time.perf_counter() - started) * 1e3)
            if at.exception:
                raise SystemExit(f"{page}: {at.exception[0].message}")
        results.append((page, first, same, new))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B", help="a bundled model id")
    parser.add_argument("--ctx", type=int, default=8192, help="context length in the sidebar")
    parser.add_argument("--reruns", type=int, default=15)
    args = parser.parse_args(argv)
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    sys.path.insert(0, str(ROOT))
    results = bench(args.model, args.ctx, args.reruns)
    print(f"{args.model}, context {args.ctx:,}: server-side time of one page run (AppTest, ms)")
    print(f"{'page':<26} {'first':>7} | {'same inputs':^17} | {'new context':^17} | target <= {TARGET_MS:.0f} ms")
    print(f"{'':<26} {'':>7} | {'median':>8} {'max':>8} | {'median':>8} {'max':>8} |")
    for page, first, same, new in results:
        worst = max(statistics.median(same), statistics.median(new))
        flag = "ok" if worst <= TARGET_MS else "SLOW"
        print(f"{page:<26} {first:7.1f} | {statistics.median(same):8.1f} {max(same):8.1f} | "
              f"{statistics.median(new):8.1f} {max(new):8.1f} | {flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
