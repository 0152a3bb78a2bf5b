"""The fault campaign stays runnable (issue 34): ``benchmarks/faults.py`` with one warned fault.

The benchmark renders cw's TRL SFT run, runs the trainer container's command through cw's local
runner (cw_entrypoint -> cw_fault supervisor -> trl sft) on a tiny random Llama, sends SIGTERM to
the entrypoint at a seeded-random step, starts the same command again on the same run folder (what
the restarted pod runs) and measures what the fault cost. The full campaign's figures are in
benchmarks/README.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.training

ROOT = Path(__file__).resolve().parents[2]


def test_the_fault_campaign_recovers_a_sigterm_losing_at_most_one_step(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="needs the 'train' extra (trl)")
    out = tmp_path / "faults.json"
    args = [sys.executable, str(ROOT / "benchmarks" / "faults.py"), "--cpu-faults", "1", "--cpu-kinds", "sigterm",
            "--cluster-faults", "0", "--no-healthy-run", "--json", str(out), "--work", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "recovered 1/1" in proc.stdout, proc.stdout[-2000:]
    result = json.loads(out.read_text())
    [row] = result["rows"]
    assert row["part"] == "cpu" and row["fault"] == "sigterm" and row["warned"], row
    assert row["recovered"] and row["exit_code"] == 143, row  # stopped with a checkpoint, restarted
    assert row["steps_lost"] is not None and row["steps_lost"] <= 1, row
    assert row["detail"]["resumed_from"] == row["detail"]["checkpoint"] > 0, row
    assert row["to_next_s"] > 0, row
    assert result["summary"]["false_stall_alarms"] == 0, result["summary"]
    # With cw's notifications (`notify:`, cw_notify.py) the restarted pod says so to the webhook.
    assert row["notified"] == "n/a (not yet)" or row["notified"].startswith("yes: restarted"), row
