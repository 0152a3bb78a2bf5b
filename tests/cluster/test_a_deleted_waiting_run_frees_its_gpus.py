"""A run whose pods never started (an image still being pulled, init containers still running) is gone, GPUs and all, once `cw delete` or its namespace's deletion removes it, on
a real API server and Job controller.

A Job's pod carries the `batch.kubernetes.io/job-tracking` finalizer until the Job controller has
counted it, and it counts a deleted pod only once the kubelet reports it ended. A kubelet ends a
Pending pod that is deleted as it ends a Running one; the test cluster's pod-terminate stage did so
for Running pods only, so such a pod stayed Terminating for the rest of the session, holding its
node's GPUs, and a later test found too few GPUs to place its pods (CI of stop 39).
"""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config


def _pods_of(core: client.CoreV1Api, namespace: str) -> list:
    return core.list_namespaced_pod(namespace).items


def _waiting(core: client.CoreV1Api, namespace: str, run: str) -> bool:
    pods = core.list_namespaced_pod(namespace, label_selector=f"cw-cli.dev/run={run},app.kubernetes.io/component=trainer").items
    return any(s.state.waiting for p in pods for s in p.status.container_statuses or [])


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "PodInitializing"])
def test_cw_delete_removes_a_run_whose_pods_never_started(kube_api, namespace, cw_env, tmp_path, wait_for, reason):
    core = client.CoreV1Api(kube_api)
    data = {**SFT_CONFIG, "gpu": 8, "annotations": {"kwok.cw/waiting-reason": reason}}
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data)), "--name", "stuck", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    wait_for(lambda: _waiting(core, namespace, "stuck"), 60, what=f"the trainer to wait ({reason})")

    deleted = run_cw(cw_env, "delete", "stuck", "-n", namespace)
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: not _pods_of(core, namespace), 60, what=f"the {reason} pod to be gone after cw delete")


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "PodInitializing"])
def test_a_deleted_namespace_leaves_no_waiting_pod_behind(kube_api, cw_env, tmp_path, wait_for, reason):
    core = client.CoreV1Api(kube_api)
    namespace = f"cw-test-{secrets.token_hex(4)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels={"cw-test": "true"})))
    wait_for(lambda: core.list_namespaced_service_account(namespace).items, 30, what="the default ServiceAccount")
    data = {**SFT_CONFIG, "gpu": 8, "annotations": {"kwok.cw/waiting-reason": reason}}
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data)), "--name", "waits", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    wait_for(lambda: _waiting(core, namespace, "waits"), 60, what=f"the trainer to wait ({reason})")

    core.delete_namespace(namespace, propagation_policy="Background")

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except client.ApiException as e:
            return e.status == 404
        return False

    wait_for(gone, 90, what=f"namespace {namespace} and its {reason} pod to be deleted")
