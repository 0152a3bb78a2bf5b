"""`cw status` and `cw list` show progress at a glance on a real API server and Job controller
(issue 34 item 5): a trainer pod that stopped with a checkpoint (exit 143) is replaced by the Job
(a restart), the replacement's log ends with the lines cw's callback really printed in a CPU TRL
SFT (tests/fixtures/progress, given to the pod as a kwok `Logs` object, as
test_a_restarted_trainer_says_why does); both commands show step / total, ETA, samples and
tokens per second, the last complete checkpoint and its age, and the restart, in the table and
in `-o json`.

``CW_COMPARE_TREE=<a copy of cw before this change>`` also times that tree's `cw list` against
the same runs (the cost of one log read per running run), printed with this one's (or with
``CW_THIS_TREE``'s, a copy of this tree placed like the other).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw
from test_failures_explained import _give_log, _launch, _launched, _pods

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "progress" / "trl-sft-cw-progress.log"


def _tail_at_step_4() -> str:
    lines = FIXTURE.read_text(encoding="utf-8").split("\n")
    upto = next(i for i, line in enumerate(lines) if '"step":4,' in line)
    return "\n".join(lines[upto - 19 : upto + 1])  # what a 20-line tail of the pod's log holds


def _list_seconds(env: dict[str, str], namespace: str, tree: str | None) -> float:
    """Seconds one `cw list -n NAMESPACE` takes (from ``tree`` when given)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cw_cli", "list", "-n", namespace], env={**env, "PYTHONPATH": tree} if tree else env,
                          capture_output=True, text=True, timeout=120, cwd=tree or None, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - started


def test_status_and_list_show_step_rates_checkpoint_and_restarts(kube_api, namespace, cw_env, tmp_path, wait_for, explain_pods):
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    data = {**SFT_CONFIG, "backoff_limit": 2, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}}
    runs = ("glance", "plain")
    _launched({run: _launch(cw_env, tmp_path, namespace, run, data, "trl", "sft", "--gpu", "1") for run in runs})
    running = lambda run: next((p for p in _pods(core, namespace, run) if p.status.phase == "Running"), None)  # noqa: E731

    pod = wait_for(lambda: running("glance"), 60, what="the pod of glance to run")
    now = datetime.now(timezone.utc).isoformat()
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
        "phase": "Failed",
        "containerStatuses": [{"name": "trainer", "image": pod.spec.containers[0].image, "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 143, "reason": "Error", "startedAt": now, "finishedAt": now}}}],
    }})  # fmt: skip
    wait_for(lambda: running("glance") is not None and len(_pods(core, namespace, "glance")) == 2, 60, what="the replacement pod",
             explain=explain_pods)  # fmt: skip
    _give_log(custom, tmp_path, namespace, running("glance").metadata.name, "trainer", _tail_at_step_4())
    wait_for(lambda: running("plain"), 60, what="the pod of plain to run")

    result = run_cw(cw_env, "status", "glance", "-n", namespace)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # rich wraps long lines
    assert "restarts: 1 (trainer pods replaced; each resumes from the last complete checkpoint)" in text, text
    assert "progress: 4/6 steps (67%), 2.39 steps/s, 8.71 samples/s, 164 tokens/s" in text, text
    assert "last checkpoint: /tmp/t/volume/t-progress/checkpoint-3, complete " in text, text

    detail = json.loads(run_cw(cw_env, "status", "glance", "-n", namespace, "-o", "json").stdout)
    assert detail["restarts"] == 1 and detail["failure"] is None
    progress = detail["progress"]
    assert (progress["step"], progress["total"], progress["samples_per_s"], progress["tokens_per_s"]) == (4, 6, 8.71, 164.0)
    assert progress["checkpoint"] == "/tmp/t/volume/t-progress/checkpoint-3" and progress["checkpoint_at"] == "2026-11-27T15:20:53Z"
    age = (datetime.now(timezone.utc) - datetime(2026, 11, 27, 15, 20, 53, tzinfo=timezone.utc)).total_seconds()
    assert abs(progress["checkpoint_age_s"] - age) < 60, (progress, age)

    def listed_running():  # the Job's own status (ready pods) may lag its new pod by a sync
        shown = run_cw(cw_env, "list", "-n", namespace)
        rows = [row.split() for row in shown.stdout.splitlines()[1:]]
        return shown if shown.returncode == 0 and all(r[3] == "Running" for r in rows if r[0] in runs) else None

    table = wait_for(listed_running, 30, interval=1, what="cw list to show both runs Running", explain=explain_pods)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:8] == ["RUN", "FRAMEWORK", "TYPE", "STATE", "GPUS", "STEP", "ETA", "RESTARTS"]
    shown = {row.split()[0]: row.split() for row in rows}
    assert shown["glance"][3:8] == ["Running", "1", "4/6", "0s", "1"], table.stdout + explain_pods()
    assert shown["plain"][3:6] == ["Running", "1", "0"], table.stdout  # no log from kwok: no step, no restart
    items = {item["name"]: item for item in json.loads(run_cw(cw_env, "list", "-n", namespace, "-o", "json").stdout)["items"]}
    assert items["glance"]["progress"]["checkpoint"] == progress["checkpoint"] and items["glance"]["restarts"] == 1
    assert items["plain"]["progress"] is None and items["plain"]["restarts"] == 0

    before_tree = os.environ.get("CW_COMPARE_TREE")
    after, before = [], []
    for _ in range(11):  # interleaved: the machine's load falls on both alike
        after.append(_list_seconds(cw_env, namespace, os.environ.get("CW_THIS_TREE")))
        if before_tree:
            before.append(_list_seconds(cw_env, namespace, before_tree))
    said = f"; before this change {statistics.median(before):.3f} s" if before else ""
    print(f"\ncw list, 2 running runs: {statistics.median(after):.3f} s median of 11{said}")
