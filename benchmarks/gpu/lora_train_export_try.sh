#!/usr/bin/env bash
# The device benchmark's entry: a LoRA SFT run as cw renders it, then its merge-export and a try.
#
# On the GPU machine, from the repository root (wheels of trl, datasets, dill and multiprocess in
# .whl/, see benchmarks/gpu/README.md):
#     bash benchmarks/gpu/lora_train_export_try.sh            # figures and logs to $OUT
# Here, on a CPU, with the project's venv (nothing installed, a 2-layer model, 2 steps):
#     PATH=$PWD/.venv/bin:$PATH SKIP_PIP=1 OUT=/tmp/bench-out bash benchmarks/gpu/lora_train_export_try.sh --tiny
set -euo pipefail
OUT=${OUT:-/tmp/cw-bench-out}
WORK=${WORK:-/tmp/cw-bench}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip_s=""
if [ -z "${SKIP_PIP:-}" ]; then
  t0=$(date +%s.%N)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
  # datasets 5.x wants pyarrow>=24 and fsspec<=2026.9; if the image's do not import with it, 4.8 (pyarrow>=21).
  if ! python3 -c "import datasets" 2>/dev/null; then
    echo "[bench] datasets $(ls .whl/*datasets*) does not import here; using .whl/fallback/"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fallback/*.whl
  fi
  pip_s=$(python3 -c "import time; print(round(time.time() - $t0, 3))")
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || true
python3 benchmarks/gpu/lora_train_export_try.py --work "$WORK" --out "$OUT" ${pip_s:+--pip-seconds $pip_s} "$@"
