#!/usr/bin/env bash
# The gpu suite end to end on a lent GPU machine, as one command (validation/README.md, "On a lent GPU").
#   bash validation/gpu_run.sh                  # there: OUT is the folder that comes back
# Installs the wheels carried in .whl/ (validation/gpu_wheels.sh), records the machine, runs
#   python -m validation --suite gpu --time-budget <what is left of BUDGET>
# into $OUT/<device>/ and leaves 6 files: cuda/{report.json,report.csv,summary.md,predicted_vs_measured.png},
# environment.txt, log.txt. RESUME=<folder with a report.json> carries on from an earlier run's results.
# Settings: BUDGET (seconds for the whole script, default 480), SUITE (gpu; smoke or cpu to rehearse),
# DEVICE (cuda; cpu to rehearse here), PYTHON (python3), BENCH (seconds for the space-for-time benchmark
# after the suite, into the same folder: 2 more files; default 0, off), ARGS (more options for python -m validation, e.g.
# ARGS="--cases llama-3.1-8b" to run a subset).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
OUT=${OUT:-/tmp/kvplan-gpu-run}
BUDGET=${BUDGET:-480}
SUITE=${SUITE:-gpu}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
RESULTS="$OUT/$DEVICE"
mkdir -p "$RESULTS"
export PYTHONPATH="$PWD"
# Big cases sit near the card's size (Qwen3-30B-A3B at 8 x 32k: 118 GiB predicted on a 140 GiB H200):
# expandable segments keep fragmentation from turning a fit into an OOM; max_memory_allocated is unchanged.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
if compgen -G ".whl/*.whl" >/dev/null; then
  site=$(mktemp -d /tmp/kvplan-site.XXXX)
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || { echo "gpu_run: installing the carried wheels failed" >&2; exit 3; }
  export PYTHONPATH="$site:$PWD"
fi
if [ -n "${RESUME:-}" ] && [ -f "$RESUME/report.json" ]; then
  cp "$RESUME/report.json" "$RESULTS/report.json"
fi
{
  date -u; uname -a; nvidia-smi 2>&1 || true
  "$PYTHON" - <<'PY'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "transformers", "pydantic", "optimum.quanto", "hqq", "huggingface_hub", "numpy", "kvplan"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "?"), getattr(mod, "__file__", ""))
    except Exception as exc:  # noqa: BLE001 - a line of the record, not a failure
        print(name, "MISSING", type(exc).__name__, exc)
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
left=$(( BUDGET - ($(date +%s) - start) ))
echo "gpu_run: $left s left of $BUDGET for the $SUITE suite" >&2
PYTHONUNBUFFERED=1 "$PYTHON" -m validation --suite "$SUITE" --device "$DEVICE" --time-budget "$left" \
  --out "$RESULTS" --no-progress ${ARGS:-} 2>&1 | tee "$OUT/log.txt"
rc=${PIPESTATUS[0]}
echo "gpu_run: validation exited $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
if [ "${BENCH:-0}" -gt 0 ]; then    # opt-in: the space-for-time benchmark, BENCH seconds at most
  "$PYTHON" -m validation --bench space-for-time --device "$DEVICE" --time-budget "$BENCH" --out "$RESULTS" \
    --no-progress 2>&1 | tee -a "$OUT/log.txt"
  echo "gpu_run: benchmark done after $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
fi
exit "$rc"
