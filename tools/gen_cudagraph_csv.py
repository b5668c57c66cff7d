"""Collect vLLM's own CUDA-graph memory figures from the llm-d-planner v0.19.0 start-up logs into
validation/measured/vllm_cudagraph_v0190.csv (the data kvplan.planning.engines.vllm_cudagraph is calibrated on).

Each log prints, per capture mode, what `profile_cudagraph_memory` measured (v1/worker/gpu_model_runner.py:5928,
DEBUG): "Estimated PIECEWISE CUDA graph memory: 138.00 MiB first-capture + (51-1) x 6.00 MiB per-graph", the
total ("Estimated CUDA graph memory: 0.84 GiB total") and, after the real capture, "CUDA graph pool memory: X GiB
(actual), Y GiB (estimated)".

    python tools/gen_cudagraph_csv.py /work/.mirror/llm-d-incubation+llm-d-planner/repo 56dc5b7
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "validation" / "measured" / "vllm_cudagraph_v0190.csv"
FIELDS = ["log", "model", "architecture", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "dtype",
          "kv_cache_dtype", "quantization", "enforce_eager", "piecewise_graphs", "piecewise_largest",
          "full_graphs", "full_largest", "piecewise_first_mib", "piecewise_per_graph_mib", "full_first_mib",
          "full_per_graph_mib", "estimated_gib", "actual_gib", "source"]
PATTERNS = {
    "model": r"Initializing a V1 LLM engine \(v[\d.]+\) with config: model='([^']+)'",
    "architecture": r"Resolved architecture: (\w+)",
    "tensor_parallel_size": r"tensor_parallel_size=(\d+)",
    "pipeline_parallel_size": r"pipeline_parallel_size=(\d+)",
    "max_model_len": r"max_seq_len=(\d+)",
    "dtype": r"with config: .*?dtype=(torch\.\w+)",
    "kv_cache_dtype": r"kv_cache_dtype=(\w+)",
    "quantization": r"quantization=([\w-]+)",
    "enforce_eager": r"enforce_eager=(\w+)",
    "estimated_gib": r"Estimated CUDA graph memory: ([\d.]+) GiB total",
    "actual_gib": r"CUDA graph pool memory: ([\d.]+) GiB \(actual\)",
}
MODES = r"Profiling CUDA graph memory: PIECEWISE=(\d+) \(largest=(\d+)\), FULL=(\d+) \(largest=(\d+)\)"
PER_MODE = r"Estimated (PIECEWISE|FULL) CUDA graph memory: ([\d.]+) MiB first-capture \+ \(\d+-1\) . ([\d.]+) MiB"


def row(text: str, name: str, source: str) -> dict | None:
    out = {"log": name, "source": source}
    for key, pattern in PATTERNS.items():
        m = re.search(pattern, text)
        out[key] = m.group(1) if m else ""
    modes = re.search(MODES, text)
    if not modes or not out["estimated_gib"]:
        return None
    out.update(zip(("piecewise_graphs", "piecewise_largest", "full_graphs", "full_largest"), modes.groups()))
    for mode, first, per in re.findall(PER_MODE, text):
        out[f"{mode.lower()}_first_mib"], out[f"{mode.lower()}_per_graph_mib"] = first, per
    return out


def main(repo: str, commit: str) -> None:
    names = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", commit], check=True,
                           capture_output=True, text=True).stdout.split()
    rows = []
    for name in sorted(n for n in names if "/v0.19.0/logs/" in n and n.endswith(".log") and "FAILED" not in n):
        text = subprocess.run(["git", "-C", repo, "show", f"{commit}:{name}"], check=True, capture_output=True,
                              text=True, errors="replace").stdout
        found = row(text, name.rsplit("/", 1)[-1],
                    f"github.com/llm-d-incubation/llm-d-planner @{commit} {name}")
        if found:
            rows.append(found)
    with OUT.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
