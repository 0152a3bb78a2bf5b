"""cw runs as JobSets, through the real JobSet and Kueue controllers (the `kueue_cluster` of conftest.py).

On a cluster that serves JobSet, `jobset: auto` makes a multi-node run, and a queued run with
servers, one JobSet. Proven here against the controllers themselves: Kueue admits a GRPO run's
trainer and servers as one Workload (no server pod exists before that), JobSet deletes the servers
when the trainer ends (no cw process running), a failed rank restarts the whole gang and `cw status`
counts it, and a disruption restarts it without using up `max_restarts`.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from kubernetes import client
from test_cw_end_to_end import GRPO_CONFIG, SFT_CONFIG, run_cw, write_config

JOBSET = ("jobset.x-k8s.io", "v1alpha2")
KUEUE = ("kueue.x-k8s.io", "v1beta2")
INDEX = "batch.kubernetes.io/job-completion-index"


def _delay(seconds: int) -> dict:
    """Trainer pods complete this long after they run (KWOK); servers never do by themselves."""
    return {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": f"{seconds}s"}}


@pytest.fixture
def gang_namespace(queued_namespace):
    """(api client, env for cw, a fresh namespace with the LocalQueue `cw`)."""
    return queued_namespace


def _cw(env, namespace, *args, timeout: float = 120):
    return run_cw(env, *args, "-n", namespace, "--context", "cw-test", timeout=timeout)


def _jobset(api, namespace: str, name: str) -> dict | None:
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _condition(obj: dict | None, kind: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == kind and c["status"] == "True"), None)  # fmt: skip


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _workload_of(api, namespace: str, owner: str) -> dict | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    return next((w for w in items if w["metadata"]["ownerReferences"][0]["name"] == owner), None)


def _pods(api, namespace: str, run: str, role: str | None = None) -> list:
    selector = f"cw-cli.dev/run={run}" + (f",app.kubernetes.io/component={role}" if role else "")
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def test_a_queued_grpo_runs_trainer_and_servers_are_admitted_together_and_servers_stop_with_it(
    gang_namespace, tmp_path, wait_for
):
    api, env, namespace = gang_namespace
    # A holder takes 8 of the queue's 16 GPUs; the GRPO run needs 8 + 1 + 1 and must wait whole.
    holder = write_config(tmp_path, {**SFT_CONFIG, "queue": "cw", **_delay(25)}, "holder.yaml")
    assert _cw(env, namespace, "trl", "sft", str(holder), "--gpu", "8", "--name", "holder").returncode == 0
    wait_for(lambda: _condition(_workload_of(api, namespace, "holder-trainer"), "Admitted"), 30, what="the holder admitted")

    grpo = write_config(tmp_path, {**GRPO_CONFIG, "queue": "cw", **_delay(10)}, "grpo.yaml")
    launched = _cw(env, namespace, "trl", "grpo", str(grpo), "--gpu", "8", "--name", "gang")
    assert launched.returncode == 0, launched.stderr
    assert "created JobSet gang" in launched.stderr and "waits for Kueue" in launched.stderr

    workload = wait_for(lambda: _workload_of(api, namespace, "gang"), 30, what="the JobSet's Workload")
    # One Workload, one pod set per replicated Job: Kueue reserves all of it or none.
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["trainer", "server", "reward"]
    assert not _condition(workload, "Admitted")
    assert _pods(api, namespace, "gang") == []  # no server holds a GPU outside the quota
    status = wait_for(lambda: (r := _cw(env, namespace, "status", "gang")) and "position 1 of 1" in r.stdout and r,
                      20, interval=1, what="cw status to show the queue position")  # fmt: skip
    assert "Queued (Kueue)" in status.stdout and "ClusterQueue cw-gpus" in status.stdout, status.stdout
    listing = _cw(env, namespace, "list")
    assert "Queued" in next(line for line in listing.stdout.splitlines() if line.strip().startswith("gang"))

    admitted = wait_for(lambda: _condition(_workload_of(api, namespace, "gang"), "Admitted"), 90, interval=0.2,
                        what="the GRPO run to be admitted once the holder ends")  # fmt: skip
    holder_done = client.BatchV1Api(api).read_namespaced_job("holder-trainer", namespace).status.completion_time
    latency = (_stamp(admitted["lastTransitionTime"]) - holder_done).total_seconds()
    print(f"\nKueue admitted the queued JobSet {latency:.0f} s after the holder completed (1 s resolution)")
    assert latency < 10
    roles = wait_for(lambda: {p.metadata.labels["app.kubernetes.io/component"] for p in _pods(api, namespace, "gang")}
                     >= {"trainer", "server", "reward"} and True, 60, what="all three roles to get pods")  # fmt: skip
    assert roles

    # No cw runs from here on: the JobSet ends with its trainer and deletes the servers' Jobs.
    done = wait_for(lambda: _condition(_jobset(api, namespace, "gang"), "Completed"), 120, interval=0.5,
                    what="the JobSet to complete with its trainer")  # fmt: skip
    wait_for(lambda: not [p for p in _pods(api, namespace, "gang") if p.metadata.labels["app.kubernetes.io/component"]
                          in ("server", "reward") and p.metadata.deletion_timestamp is None], 120, interval=0.5,
             what="the server pods to be gone")  # fmt: skip
    freed = datetime.now(timezone.utc)
    trainer_job = client.BatchV1Api(api).read_namespaced_job("gang-trainer-0", namespace)
    ended = trainer_job.status.completion_time
    print(f"servers gone {(freed - ended).total_seconds():.1f} s after the trainer ended "
          f"(JobSet Completed {(_stamp(done['lastTransitionTime']) - ended).total_seconds():.0f} s after it)")  # fmt: skip
    assert (freed - ended).total_seconds() < 120
    final = _cw(env, namespace, "status", "gang")
    assert "state: Succeeded" in final.stdout, final.stdout
    assert "finished, quota released" in final.stdout and "service gang-server: stopped" in final.stdout
    assert trainer_job.status.succeeded == 1  # the trainer's record stays readable


def _rank_pod(api, namespace: str, run: str, rank: str, exclude: set[str] = frozenset()):
    pods = _pods(api, namespace, run, "trainer")
    return next((p for p in pods if (p.metadata.annotations or {}).get(INDEX) == rank and p.status.phase == "Running"
                 and p.metadata.name not in exclude and p.metadata.deletion_timestamp is None), None)  # fmt: skip


def _launch_two_nodes(env, namespace, tmp_path, name: str, max_restarts: int):
    data = {**SFT_CONFIG, "max_restarts": max_restarts, **_delay(15)}
    result = _cw(env, namespace, "trl", "sft", str(write_config(tmp_path, data, f"{name}.yaml")), "--gpu", "8",
                 "--nodes", "2", "--name", name)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"created JobSet {name}" in result.stderr


def test_a_failed_rank_restarts_the_whole_gang_and_status_counts_it(gang_namespace, tmp_path, wait_for):
    api, env, namespace = gang_namespace
    _launch_two_nodes(env, namespace, tmp_path, "ranks", max_restarts=2)
    victim = wait_for(lambda: _rank_pod(api, namespace, "ranks", "1"), 60, what="rank 1 to run")
    rank_zero = wait_for(lambda: _rank_pod(api, namespace, "ranks", "0"), 30, what="rank 0 to run")
    # Rank 1's trainer exits 1 (KWOK's pod-fail stage), while rank 0 still runs.
    client.CoreV1Api(api).patch_namespaced_pod(victim.metadata.name, namespace, {"metadata": {"annotations": {
        "kwok.cw/exit-code": "1", "pod-complete.stage.kwok.x-k8s.io/delay": "1s"}}})  # fmt: skip

    wait_for(lambda: (_jobset(api, namespace, "ranks")["status"].get("restarts") or 0) >= 1, 60, what="a gang restart")
    # The whole gang starts again: rank 0 too gets a new pod, though it never failed.
    wait_for(lambda: _rank_pod(api, namespace, "ranks", "0", exclude={rank_zero.metadata.name}), 60,
             what="rank 0 to run again in a new pod")  # fmt: skip
    status = _cw(env, namespace, "status", "ranks")
    assert "gang restarts: 1" in status.stdout, status.stdout
    wait_for(lambda: _condition(_jobset(api, namespace, "ranks"), "Completed"), 90, what="the restarted gang to finish")
    jobset = _jobset(api, namespace, "ranks")
    assert jobset["status"]["restarts"] == 1 and jobset["status"].get("restartsCountTowardsMax") == 1
    assert "state: Succeeded" in _cw(env, namespace, "status", "ranks").stdout


def _restart_then_end(api, namespace: str, name: str, wait_for, after: str) -> str:
    """Wait for the JobSet's gang to restart once, then for its end: ``Completed`` or ``Failed``."""
    wait_for(lambda: (_jobset(api, namespace, name)["status"].get("restarts") or 0) >= 1, 60,
             what=f"the gang to restart after {after}")  # fmt: skip
    return wait_for(lambda: next((kind for kind in ("Completed", "Failed")
                                  if _condition(_jobset(api, namespace, name), kind)), None), 90,
                    what="the run to finish")  # fmt: skip


def test_a_disruption_restarts_the_gang_without_using_up_max_restarts(gang_namespace, tmp_path, wait_for):
    api, env, namespace = gang_namespace
    _launch_two_nodes(env, namespace, tmp_path, "drained", max_restarts=0)  # any counted failure would end it
    victim = wait_for(lambda: _rank_pod(api, namespace, "drained", "1"), 60, what="rank 1 to run")
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace=namespace))
    client.CoreV1Api(api).create_namespaced_pod_eviction(victim.metadata.name, namespace, eviction)

    finished = _restart_then_end(api, namespace, "drained", wait_for, after="the eviction")
    assert finished == "Completed"  # "Failed" if the disruption had counted against max_restarts: 0
    assert not _jobset(api, namespace, "drained")["status"].get("restartsCountTowardsMax")


def test_failures_beyond_max_restarts_fail_the_run_and_cw_wait_says_so(gang_namespace, tmp_path, wait_for):
    api, env, namespace = gang_namespace
    data = {**SFT_CONFIG, "max_restarts": 1, "annotations": {"kwok.cw/exit-code": "3"}}
    started = time.monotonic()
    result = _cw(env, namespace, "trl", "sft", str(write_config(tmp_path, data)), "--gpu", "8", "--nodes", "2",
                 "--name", "doomed", "--wait", timeout=180)  # fmt: skip
    assert result.returncode != 0 and "run failed" in result.stderr, result.stderr
    jobset = _jobset(api, namespace, "doomed")
    assert _condition(jobset, "Failed") and jobset["status"]["restarts"] == 1
    status = _cw(env, namespace, "status", "doomed")
    assert "state: Failed" in status.stdout and "failed after 1 gang restart(s)" in status.stdout, status.stdout
    print(f"\n2-node gang failed twice (1 restart) in {time.monotonic() - started:.0f} s")


def test_without_a_queue_cw_releases_the_jobset_and_waits_for_its_servers(gang_namespace, tmp_path):
    api, env, namespace = gang_namespace
    data = {**GRPO_CONFIG, "jobset": True, **_delay(5)}
    result = _cw(env, namespace, "trl", "grpo", str(write_config(tmp_path, data)), "--name", "released", "--wait",
                 "--timeout", "120", timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "started JobSet released" in result.stderr
    assert "service released-server is Ready" in result.stderr and "service released-reward is Ready" in result.stderr
    assert _condition(_jobset(api, namespace, "released"), "Completed")


def test_a_rank_that_stopped_with_a_checkpoint_restarts_the_gang_without_using_up_max_restarts(
    gang_namespace, tmp_path, wait_for
):
    """Exit 143 (cw_fault: every rank stopped on SIGTERM after a complete checkpoint) counts as a
    disruption: the gang restarts, and with max_restarts 0 the run still completes."""
    api, env, namespace = gang_namespace
    _launch_two_nodes(env, namespace, tmp_path, "stopped", max_restarts=0)
    victim = wait_for(lambda: _rank_pod(api, namespace, "stopped", "1"), 60, what="rank 1 to run")
    client.CoreV1Api(api).patch_namespaced_pod(victim.metadata.name, namespace, {"metadata": {"annotations": {
        "kwok.cw/exit-code": "143", "pod-complete.stage.kwok.x-k8s.io/delay": "1s"}}})  # fmt: skip
    finished = _restart_then_end(api, namespace, "stopped", wait_for, after="the stop")
    assert finished == "Completed"  # "Failed" if the stop had counted against max_restarts: 0
    assert not _jobset(api, namespace, "stopped")["status"].get("restartsCountTowardsMax")
