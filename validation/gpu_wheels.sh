#!/usr/bin/env bash
# Wheels the gpu suite needs on a lent GPU machine that cannot reach a package registry (run it HERE, where
# PyPI answers; validation/gpu_run.sh installs them THERE). The GPU image (python 3.12, torch, numpy, tqdm,
# huggingface_hub, tokenizers, safetensors, accelerate, matplotlib, nvidia-ml-py) lacks pydantic and hqq's
# termcolor, and holds transformers 5.17: kvplan's rules are checked against 5.24, so 5.24 travels too.
#   bash validation/gpu_wheels.sh            -> .whl/ (about 17 MB, ignored by git; name it in the run's carry)
#   PY=3.11 WHEELS=/tmp/w bash validation/gpu_wheels.sh   (a local rehearsal on this machine's python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-3.12}
DEST=${WHEELS:-.whl}
mkdir -p "$DEST"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  "${platforms[@]}" -d "$DEST" \
  transformers==5.24.0 pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0 'regex>=2025.10.22' optimum-quanto==0.2.7 termcolor==3.3.0
# hqq publishes an sdist only: build its (pure-python) wheel here
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" hqq==0.2.8.post1
ls -1 "$DEST"
du -sh "$DEST"
