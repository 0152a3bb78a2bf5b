"""`cw status` of a run whose trainer was restarted says why, on a real API server and Job
controller: after a stall (the pod exited 75; its log names the last step and the stacks) and
after a warned stop (exited 143 with a checkpoint; the Job ignores it and replaces the pod); and
how far the replacement is, from the progress bar of its log (TRL 1.16's real output).

The trainer pods end as a kubelet reports them (the container's terminated state, written like
test_failures_explained's eviction) with the log lines cw_fault.py's supervisor prints (a kwok
`Logs` object); cw reads both through the API server while the replacement pod runs.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw
from test_failures_explained import _give_log, _launch, _launched, _pods

STALL = """\
{'loss': 1.9231, 'grad_norm': 3.1, 'learning_rate': 2e-05, 'epoch': 0.01}
[cw-launch] stalled since 2026-11-27T13:38:11Z (no step for 600.0 s after step 6); stacks in /checkpoints/stall/.cw/stacks-20261127T134811Z; restarting from the last checkpoint
"""
STOP = """\
[cw-launch] SIGTERM: the ranks stop at the next step end and save a checkpoint
[cw-launch] rank 0: stop requested: saving a checkpoint at step 40
[cw-launch] rank 0: checkpoint /checkpoints/stop/checkpoint-40 is complete; exiting to be resumed
[cw-launch] stopped at step 40 with a complete checkpoint /checkpoints/stop/checkpoint-40 (complete 3.1 s after the signal, the command ended after 4.0 s); a relaunch resumes from it
"""


def test_status_says_a_trainer_was_restarted_after_a_stall_or_a_warned_stop(kube_api, namespace, cw_env, tmp_path, wait_for, explain_pods):
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    data = {**SFT_CONFIG, "backoff_limit": 2, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}}
    _launched({run: _launch(cw_env, tmp_path, namespace, run, data, "trl", "sft", "--gpu", "1") for run in ("stall", "stop")})

    for run, code, text in (("stall", 75, STALL), ("stop", 143, STOP)):
        pod = wait_for(lambda run=run: next((p for p in _pods(core, namespace, run) if p.status.phase == "Running"), None),
                       60, what=f"the pod of {run} to run")  # fmt: skip
        _give_log(custom, tmp_path, namespace, pod.metadata.name, "trainer", text)
        now = datetime.now(timezone.utc).isoformat()
        core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "image": pod.spec.containers[0].image, "imageID": "", "ready": False, "restartCount": 0,
                                   "state": {"terminated": {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}}}],
        }})  # fmt: skip
        # The Job retries a stall (counted) and ignores a warned stop: either way a new pod runs.
        wait_for(lambda run=run: sum(p.status.phase == "Running" for p in _pods(core, namespace, run)) == 1
                 and len(_pods(core, namespace, run)) == 2, 60, what=f"the replacement pod of {run}", explain=explain_pods)  # fmt: skip

    # The replacement resumed and trains: its log ends with TRL's progress bar at step 4 of 6.
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "trl-1.16.0-transformers-5.23.0-sft.log"
    resumed = next(p for p in _pods(core, namespace, "stall") if p.status.phase == "Running")
    _give_log(custom, tmp_path, namespace, resumed.metadata.name, "trainer", "\n".join(fixture.read_text(encoding="utf-8").split("\n")[:50]))

    def status(run: str) -> str:
        result = run_cw(cw_env, "status", run, "-n", namespace)
        assert result.returncode == 0, result.stderr
        return " ".join(result.stdout.split())  # rich wraps long lines

    text = status("stall")
    assert "restarted after a stall: no step since 2026-11-27T13:38:11Z after step 6; " in text
    assert "stacks in /checkpoints/stall/.cw/stacks-20261127T134811Z" in text and "failed:" not in text
    assert "progress: 4/6 steps (67%), 15 steps/s" in text
    text = status("stop")
    assert "restarted after a warned stop (checkpoint at step 40: /checkpoints/stop/checkpoint-40)" in text
    assert "failed:" not in text and "problem:" not in text

    detail = json.loads(run_cw(cw_env, "status", "stall", "-n", namespace, "-o", "json").stdout)
    assert detail["state"] == "Running" and detail["failure"] is None
    assert [e["kind"] for e in detail["explanations"]] == ["stall"]
    assert (detail["progress"]["step"], detail["progress"]["total"]) == (4, 6)
    listed = json.loads(run_cw(cw_env, "list", "-n", namespace, "-o", "json").stdout)["items"]
    assert {item["name"]: item["failure"] for item in listed} == {"stall": None, "stop": None}
