#!/usr/bin/env bash
# The cost of a warned fault (and, for comparison, of the same without cw's fault tolerance and of
# an unwarned one) on a real 1-GPU LoRA SFT through cw's rendered trainer command: warned_fault.py.
#
# On the GPU machine, from the repository root, after render_run.py here (wheels in .whl/):
#     bash benchmarks/gpu/warned_fault.sh                     # figures and logs to $OUT
# Here, on a CPU, with the project's venv (a 2-layer model, 12 steps, the signal at step 9):
#     PATH=$PWD/.venv/bin:$PATH SKIP_PIP=1 OUT=/tmp/wf-out bash benchmarks/gpu/warned_fault.sh --tiny --at 9
set -euo pipefail
OUT=${OUT:-/tmp/cw-bench-out}
WORK=${WORK:-/tmp/cw-bench-faults}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# shellcheck source=benchmarks/gpu/carried_wheels.sh
source "$(dirname "$0")/carried_wheels.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
python3 benchmarks/gpu/warned_fault.py --work "$WORK" --out "$OUT" "$@"
