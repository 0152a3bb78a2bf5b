"""Runs with `queue:` through the real Kueue controller (`cw cluster up --kueue`).

On the `kueue_cluster` of conftest.py (shared with test_jobset_controller.py): the local control
plane plus Kueue v0.15 and JobSet (built from their Go modules by tools/build.sh), whose webhooks
the real API server calls on 127.0.0.1. The ClusterQueue `cw-gpus` holds the two fake nodes' 16 GPUs.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config

#: Trainer pods run this long under KWOK, so three 8-GPU runs overlap on 16 GPUs.
RUNNING = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "20s"}}


@pytest.fixture
def queued(queued_namespace):
    """(api client, env for cw, a fresh namespace with its LocalQueue `cw`)."""
    return queued_namespace


def _launch(env, tmp_path: Path, namespace: str, name: str, extra: dict | None = None):
    config = write_config(tmp_path, {**SFT_CONFIG, "queue": "cw", **RUNNING, **(extra or {})}, f"{name}.yaml")
    result = run_cw(env, "trl", "sft", str(config), "--gpu", "8", "--name", name, "-n", namespace, "--context", "cw-test")
    assert result.returncode == 0, result.stderr
    assert "waits for Kueue to admit it" in result.stderr


def _workload(api, namespace: str, run: str) -> dict | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
    return next((w for w in items if w["metadata"]["ownerReferences"][0]["name"] == f"{run}-trainer"), None)


def _admitted_at(workload: dict | None) -> datetime | None:
    for condition in (workload or {}).get("status", {}).get("conditions", []):
        if condition["type"] == "Admitted" and condition["status"] == "True":
            return datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))
    return None


def test_quota_admits_two_8_gpu_runs_and_queues_the_third_until_one_ends(queued, tmp_path, wait_for):
    api, env, namespace = queued
    for name in ("first", "second", "third"):
        _launch(env, tmp_path, namespace, name)
    wait_for(lambda: _admitted_at(_workload(api, namespace, "first")) and _admitted_at(_workload(api, namespace, "second")),
             30, what="the first two runs to be admitted")  # fmt: skip
    assert _admitted_at(_workload(api, namespace, "third")) is None

    listing = run_cw(env, "list", "-n", namespace, "--context", "cw-test")
    third = next(line for line in listing.stdout.splitlines() if line.strip().startswith("third"))
    assert "Queued" in third, listing.stdout
    expected = "queue cw -> ClusterQueue cw-gpus: Queued, position 1 of 1; GPUs reserved 16 of 16"
    # Kueue publishes the ClusterQueue's status a moment after admitting.
    status = wait_for(lambda: (r := run_cw(env, "status", "third", "-n", namespace, "--context", "cw-test"))
                      and expected in r.stdout and r, 20, interval=1, what=f"cw status to say {expected!r}")  # fmt: skip
    assert status.returncode == 0

    batch = client.BatchV1Api(api)
    admitted = wait_for(lambda: _admitted_at(_workload(api, namespace, "third")), 90, interval=0.2,
                        what="the third run to be admitted once a GPU node frees")  # fmt: skip
    first_done = min(
        j.status.completion_time for j in batch.list_namespaced_job(namespace).items if j.status.completion_time
    )
    latency = (admitted - first_done).total_seconds()
    print(f"\nKueue admitted the queued run {latency:.0f} s after the first run completed (1 s resolution)")
    assert latency < 10
    wait_for(lambda: batch.read_namespaced_job("third-trainer", namespace).status.succeeded == 1, 90,
             what="the third run to succeed")  # fmt: skip


def test_deleting_a_queued_run_frees_its_place(queued, tmp_path, wait_for):
    api, env, namespace = queued
    long_running = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "120s"}}
    for name in ("hold-a", "hold-b", "waiting"):
        _launch(env, tmp_path, namespace, name, long_running)
    wait_for(lambda: _workload(api, namespace, "waiting"), 30, what="the queued run's Workload")
    assert _admitted_at(_workload(api, namespace, "waiting")) is None
    deleted = run_cw(env, "delete", "waiting", "-n", namespace, "--context", "cw-test")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: _workload(api, namespace, "waiting") is None, 30, what="the Workload to go with the run")
    custom = client.CustomObjectsApi(api)

    def pending_matches_what_is_left():
        # The LocalQueue counts only what still waits: the two holders, if the shared ClusterQueue
        # is still busy with another test's runs, and never the deleted run.
        left = [w for w in custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
                if not _admitted_at(w)]  # fmt: skip
        local = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "localqueues", "cw")
        return local["status"].get("pendingWorkloads", 0) == len(left) <= 2

    wait_for(pending_matches_what_is_left, 30, what="the LocalQueue to stop counting the deleted run")


def test_a_higher_priority_run_preempts_a_lower_one_which_is_admitted_again_later(queued, tmp_path, wait_for):
    api, env, namespace = queued
    scheduling = client.SchedulingV1Api(api)
    for name, value in ((f"{namespace}-low", 100), (f"{namespace}-high", 1000)):
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    try:
        low = {"priority_class": f"{namespace}-low", "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "15s"}}
        for name in ("low-a", "low-b"):
            _launch(env, tmp_path, namespace, name, low)
        wait_for(lambda: _admitted_at(_workload(api, namespace, "low-a")) and _admitted_at(_workload(api, namespace, "low-b")),
                 30, what="both low-priority runs to be admitted")  # fmt: skip
        _launch(env, tmp_path, namespace, "high", {"priority_class": f"{namespace}-high"})
        wait_for(lambda: _admitted_at(_workload(api, namespace, "high")), 60, what="the high-priority run to be admitted")

        def evicted(run: str) -> bool:
            conditions = (_workload(api, namespace, run) or {}).get("status", {}).get("conditions", [])
            return any(c["type"] == "Preempted" and c["status"] == "True" for c in conditions)

        victims = [run for run in ("low-a", "low-b") if evicted(run)]
        assert len(victims) == 1, "exactly one low-priority run makes room"
        batch = client.BatchV1Api(api)
        wait_for(lambda: batch.read_namespaced_job(f"{victims[0]}-trainer", namespace).status.succeeded == 1, 120,
                 what="the preempted run to be admitted again and finish")  # fmt: skip
        assert batch.read_namespaced_job("high-trainer", namespace).status.succeeded == 1
    finally:
        for name in (f"{namespace}-low", f"{namespace}-high"):
            scheduling.delete_priority_class(name)
