"""`grace_period` and `stall_timeout` reach the trainer pods the cluster itself creates: the Job
controller copies terminationGracePeriodSeconds and CW_STALL_TIMEOUT into the pod (real API server
and controller-manager of the test cluster), so the kubelet gives the ranks that long to save."""

from __future__ import annotations

import pytest
from test_cw_end_to_end import SFT_CONFIG

from cw_cli import api


@pytest.fixture
def session(kube_cluster, namespace):
    return api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)


def test_the_trainer_pod_gets_the_grace_period_and_the_stall_timeout(session, tmp_path, wait_for):
    config = {**SFT_CONFIG, "grace_period": 120, "stall_timeout": 900}
    planned = session.plan(config, "trl", "sft", name="graceful", gpu=1, base_dir=tmp_path)
    session.submit(planned)
    pods = wait_for(lambda: session.kube.list("Pod", "cw-cli.dev/run=graceful"), timeout=60, what="the trainer pod")
    spec = pods[0]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 120
    trainer = next(c for c in spec["containers"] if c["name"] == "trainer")
    assert {e["name"]: e.get("value") for e in trainer["env"]}["CW_STALL_TIMEOUT"] == "900"
    data = session.kube.get("ConfigMap", "graceful-config")["data"]
    assert {"cw_entrypoint.py", "cw_fault.py"} <= set(data)


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_pod_that_stopped_with_a_checkpoint_is_replaced_without_failing_the_job(session, tmp_path, wait_for, nodes):
    """Exit 143 (every rank stopped on SIGTERM after a complete checkpoint) is replaced and not
    counted, even with backoff_limit 0 and in a multi-node Job, where any other exit fails the Job;
    the real Job controller applies the rendered podFailurePolicy (KWOK fails the pods with 143)."""
    name = f"stopped-{nodes}"
    config = {**SFT_CONFIG, "backoff_limit": 0, "jobset": False, "nodes": nodes,
              "annotations": {"kwok.cw/exit-code": "143"}}  # fmt: skip
    session.submit(session.plan(config, "trl", "sft", name=name, gpu=1, base_dir=tmp_path))
    kube = session.kube

    def replaced() -> bool:
        pods = kube.list("Pod", f"cw-cli.dev/run={name}")
        return sum(p["status"].get("phase") == "Failed" for p in pods) >= nodes and len(pods) > nodes

    wait_for(replaced, timeout=90, what=f"the {nodes} stopped pod(s) failed with 143 and replaced")
    job = kube.get("Job", f"{name}-trainer")
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"].get("conditions") or []), job["status"]
    assert not job["status"].get("failed"), job["status"]  # ignored: not counted against backoffLimit


def test_a_stalled_multi_node_job_retries_every_node_once_each(session, tmp_path, wait_for):
    """Exit 75 (a stall: every rank's entrypoint gives up) in a 2-node Job retries both pods,
    counted once per node (backoffLimitPerIndex), where any other exit fails the Job at once; past
    the per-node limit the Job fails and cw status says which node. The real Job controller
    applies the rendered policy (KWOK fails every pod with 75)."""
    name = "stalled-2"
    config = {**SFT_CONFIG, "backoff_limit": 1, "jobset": False, "nodes": 2,
              "annotations": {"kwok.cw/exit-code": "75"}}  # fmt: skip
    session.submit(session.plan(config, "trl", "sft", name=name, gpu=1, base_dir=tmp_path))
    kube = session.kube
    wait_for(lambda: len(kube.list("Pod", f"cw-cli.dev/run={name}")) > 2, timeout=90,
             what="the stalled pods retried")  # fmt: skip
    job = wait_for(lambda: _failed(kube.get("Job", f"{name}-trainer")), timeout=120, what="the Job failed past its per-node limit")
    reason = next(c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert reason == "MaxFailedIndexesExceeded", job["status"]
    # a node's second stall used its one retry: the Job failed then (the other node's retry may still wait out its back-off)
    assert job["status"].get("failedIndexes"), job["status"]
    view = session.run(name).status()
    assert any(e.kind == "backoff-limit" and "per node" in e.message for e in view.explanations), view.explanations


def _failed(job: dict) -> dict | None:
    conditions = job["status"].get("conditions") or []
    return job if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions) else None
