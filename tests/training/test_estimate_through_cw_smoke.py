"""The benchmark that trains through cw stays runnable: its CPU mode (issue 13).

``benchmarks/estimate_through_cw.py --cpu-smoke`` writes a user's TRL SFT config per setting,
asks the real ``cw estimate`` for it, plans the run with ``cw_cli.api.plan`` and runs the trainer
container's command through cw's local runner; a ``sitecustomize.py`` on ``PYTHONPATH`` records
each process's peak at exit. On CPU the peak is RSS, not comparable with the estimate: this test
proves the pipeline (estimate, rendered command, ConfigMap config, the hook) works, not the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.training

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_smoke_trains_through_cw_and_records_peaks(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="needs the 'train' extra (trl)")
    out = tmp_path / "rows.json"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "estimate_through_cw.py"), "--cpu-smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "est/meas" in proc.stdout
    result = json.loads(out.read_text())
    assert result["device"] == "cpu"
    rows = result["rows"]
    assert [r["setting"] for r in rows] == ["full bf16", "lora bf16 ckpt"]
    for row in rows:
        # cw estimate read the user's config and the model's config.json from the private cache
        assert row["estimate_allocated_bytes"] > 0, row
        assert row["estimate_per_gpu_bytes"] > row["estimate_allocated_bytes"], row
        assert row["estimate_setup"]["seq_len"] == row["max_length"], row
        assert row["estimate_setup"]["micro_batch"] == row["batch"], row
        assert row["estimate_setup"]["method"] == row["method"], row
        assert row["estimate_setup"]["gradient_checkpointing"] == row["checkpointing"], row
        assert "/models--cw-bench--" in row["model_config"], row
        # the trainer ran cw's rendered command and trained
        assert row["returncode"] == 0, row.get("log_tail")
        assert row["trained"], row
        assert row["command"][1].endswith("/cw_entrypoint.py") and row["command"][3:5] == ["trl", "sft"], row
        # the hook measured the training process, which read the ConfigMap's config.yaml
        assert row["measured_kind"] == "rss" and row["measured_bytes"] > 0, row
        assert row["processes"] >= 2, row  # the trl launcher and its accelerate child
        assert row["config_file"].endswith("/etc-cw/config.yaml"), row
        assert row["config_file"] in row["measured_argv"], row
        assert row["measured_argv"][0].endswith("sft.py"), row
        assert row["config_max_length"] == row["max_length"], row
        assert row["config_batch"] == row["batch"], row
        assert row["ratio"] is None, row  # RSS is no GPU figure
    print(f"\ncpu smoke through cw: {elapsed:.1f}s")
