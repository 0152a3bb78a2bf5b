"""The GPU memory benchmark stays runnable: its CPU mode trains a tiny shape (issue 13).

``benchmarks/estimate_gpu.py --cpu-smoke`` builds a tiny Llama-shaped model, trains full and
LoRA settings with and without gradient checkpointing on CPU, and measures the peak of live
tensors with the profiler's allocation events. The estimate must stay within 15% of it (the
issue's goal on GPU); on CPU it has been within 5% (docs/estimate.md has the table).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.training

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_smoke_runs_and_stays_close(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "estimate_gpu.py"), "--cpu-smoke",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "est/meas" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {r["setting"] for r in rows} >= {"full bf16", "full bf16 ckpt", "lora bf16"}
    for row in rows:
        assert 0.85 <= row["ratio"] <= 1.15, row
    by_name = {r["setting"]: r for r in rows}
    # checkpointing must lower the measured peak at the same length
    assert by_name["full bf16 ckpt"]["measured_bytes"] < by_name["full bf16"]["measured_bytes"]
