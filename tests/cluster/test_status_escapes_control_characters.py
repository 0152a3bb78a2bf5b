"""`cw status` prints what the cluster says without letting its control sequences reach the terminal.

A pod's log, a kubelet's message and a Job's events are text that anything running in the
namespace can write. An ESC (or CSI, U+009B) sequence in them would clear the screen, retitle the
window or hide lines once printed raw; cw writes each control character as ``\\xNN`` instead,
the way kubectl escapes them. The JSON output keeps the text as it is (JSON escapes it itself).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw
from test_failures_explained import CUDA_OOM, _give_log, _job_failed, _launch, _launched, _pods

# Set the window title, clear the screen, move the cursor up, a C1 CSI and a bell.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[1A\x9b31m\x07"
RAW = ("\x1b", "\x9b", "\x07")


def test_log_lines_and_messages_from_the_cluster_are_printed_escaped(kube_api, namespace, cw_env, tmp_path, wait_for):
    core, batch, custom = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api), client.CustomObjectsApi(kube_api)
    failing = {**SFT_CONFIG, "backoff_limit": 0,
               "annotations": {"kwok.cw/exit-code": "1", "pod-complete.stage.kwok.x-k8s.io/delay": "8s"}}  # fmt: skip
    evicted = {**SFT_CONFIG, "backoff_limit": 0, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}}
    _launched({
        "oomlog": _launch(cw_env, tmp_path, namespace, "oomlog", failing, "trl", "sft", "--gpu", "1"),
        "evicted": _launch(cw_env, tmp_path, namespace, "evicted", evicted, "trl", "sft", "--gpu", "1"),
    })  # fmt: skip

    pod = wait_for(lambda: next(iter(_pods(core, namespace, "oomlog")), None), 60, what="the pod of oomlog")
    _give_log(custom, tmp_path, namespace, pod.metadata.name, "trainer", HOSTILE + CUDA_OOM)
    running = wait_for(lambda: next((p for p in _pods(core, namespace, "evicted") if p.status.phase == "Running"), None),
                       60, what="the evicted run's pod to run")  # fmt: skip
    now = datetime.now(timezone.utc).isoformat()
    message = f"The node was low on resource: memory.{HOSTILE} "
    core.patch_namespaced_pod_status(running.metadata.name, namespace, {"status": {
        "phase": "Failed", "reason": "Evicted", "message": message,
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message,
                        "lastTransitionTime": now}],
        "containerStatuses": [{"name": "trainer", "image": running.spec.containers[0].image, "imageID": "", "ready": False,
                               "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": now,
                                                                           "finishedAt": now}}}],
    }})  # fmt: skip
    wait_for(lambda: _job_failed(batch, namespace, "oomlog"), 90, what="Job oomlog-trainer to fail")

    shown = run_cw(cw_env, "status", "oomlog", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "CUDA out of memory" in shown.stdout  # the log lines are there...
    assert not any(code in shown.stdout + shown.stderr for code in RAW)  # ...with no control character left raw
    assert r"\x1b]0;owned\x07\x1b[2J\x1b[1A\x9b31m\x07" in shown.stdout

    shown = wait_for(lambda: (r := run_cw(cw_env, "status", "evicted", "-n", namespace)) and "was evicted" in r.stdout and r,
                     60, what="status to report the eviction")  # fmt: skip
    assert not any(code in shown.stdout + shown.stderr for code in RAW)
    assert r"low on resource: memory.\x1b]0;owned" in shown.stdout

    # JSON keeps the text exactly (as \u001b escapes, which a terminal does not act on).
    detail = run_cw(cw_env, "status", "oomlog", "-n", namespace, "-o", "json")
    assert detail.returncode == 0 and "\x1b" not in detail.stdout
    logged = json.loads(detail.stdout)["explanations"][0]["log"]
    assert any(line.startswith(HOSTILE) for line in logged)
