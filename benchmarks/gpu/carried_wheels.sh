# Sourced by the device benchmarks: installs the wheels carried in .whl/ (trl, datasets, dill,
# multiprocess; see README.md) into /tmp/site and puts them on PYTHONPATH and PATH. Sets pip_s to
# the seconds it took (empty with SKIP_PIP, e.g. on a CPU with the project's venv).
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
