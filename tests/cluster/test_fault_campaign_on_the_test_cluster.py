"""The fault campaign's cluster part stays runnable (issue 34): ``benchmarks/faults.py`` on the
Kueue test cluster of conftest.py, with an eviction of a Job's pod and a failed JobSet rank.

The benchmark launches each run with the real ``cw`` CLI, injects the fault through the API server
and waits for the new trainer pods. An eviction (a warned disruption) must not count against the
Job's ``backoff_limit``; a rank that exits 1 restarts the gang and counts against ``max_restarts``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_fault_campaign_sees_new_pods_after_an_eviction_and_a_failed_rank(kueue_cluster, tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    args = [sys.executable, str(ROOT / "benchmarks" / "faults.py"), "--cpu-faults", "0", "--cluster-faults", "2",
            "--cluster-kinds", "job-evict,jobset-fail", "--kubeconfig", str(kueue_cluster), "--json", str(out),
            "--work", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "recovered 2/2" in proc.stdout, proc.stdout[-2000:]
    rows = {row["fault"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"job-evict", "jobset-fail"}
    evicted, failed = rows["job-evict"], rows["jobset-fail"]
    assert evicted["recovered"] and evicted["counted"] == "no" and evicted["detail"]["job_failed"] == 0, evicted
    assert failed["recovered"] and failed["counted"] == "yes" and failed["detail"]["restarts_counted"] == 1, failed
    for row in (evicted, failed):
        assert row["steps_lost"] is None  # KWOK pods run no code
        assert 0 <= row["to_created_s"] <= row["to_next_s"] + 1, row  # creationTimestamp is truncated to 1 s
        assert row["to_next_s"] < 60, row
