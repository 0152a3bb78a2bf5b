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
# shellcheck source=benchmarks/gpu/carried_wheels.sh
source "$(dirname "$0")/carried_wheels.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || true
python3 benchmarks/gpu/lora_train_export_try.py --work "$WORK" --out "$OUT" ${pip_s:+--pip-seconds $pip_s} "$@"
