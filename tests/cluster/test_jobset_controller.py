"""The real JobSet controller on the test cluster (`cw cluster up --kueue`), alone and under Kueue.

On the `kueue_cluster` of conftest.py (shared with test_kueue.py): JobSet v0.10 and Kueue v0.15,
built from their Go modules, each serving its webhooks on 127.0.0.1 for the real API server. KWOK
completes the pods of the Jobs JobSet creates (they are owned by a Job).
"""

from __future__ import annotations

import pytest
from kubernetes import client

GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
#: KWOK's pod-complete stage ends a Job's pod this long after it became Ready (default ~3 s).
QUICK = {"pod-complete.stage.kwok.x-k8s.io/delay": "1s"}


@pytest.fixture
def jobsets(queued_namespace):
    """(api client, a fresh namespace with the LocalQueue `cw`)."""
    api, _, namespace = queued_namespace
    return api, namespace


def _jobset(name: str, replicas: int, labels: dict[str, str] | None = None) -> dict:
    """A JobSet of one replicated Job (one pod each), with nothing JobSet's webhook would default."""
    pod = {
        "metadata": {"annotations": QUICK},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"],
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
    }  # fmt: skip
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": {"template": pod}}}]},
    }


def _condition(obj: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def test_a_jobset_is_defaulted_by_its_webhook_and_completes_when_kwok_ends_its_pods(jobsets, wait_for):
    api, namespace = jobsets
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobsets", _jobset("plain", 2))

    # Filled in by JobSet's mutating webhook (the CRD schema has no defaults for these).
    spec = created["spec"]
    assert spec["successPolicy"]["operator"] == "All"
    assert spec["startupPolicy"]["startupPolicyOrder"] == "AnyOrder"
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    template = spec["replicatedJobs"][0]["template"]["spec"]
    assert template["completionMode"] == "Indexed" and template["template"]["spec"]["restartPolicy"] == "OnFailure"
    # Without a queue label Kueue leaves it alone.
    assert not spec.get("suspend")

    done = wait_for(lambda: _condition(js := custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobsets", "plain"),
                                       "Completed") and js, 45, interval=0.5, what="JobSet plain to complete")  # fmt: skip
    assert done["status"]["terminalState"] == "Completed"
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector="jobset.sigs.k8s.io/jobset-name=plain").items
    assert sorted(j.metadata.name for j in jobs) == ["plain-workers-0", "plain-workers-1"]
    pods = core.list_namespaced_pod(namespace, label_selector="jobset.sigs.k8s.io/jobset-name=plain").items
    assert len(pods) == 2 and {p.status.phase for p in pods} == {"Succeeded"}
    assert {p.spec.subdomain for p in pods} == {"plain"}
    # The headless Service behind the pods' DNS names is named after the JobSet.
    assert core.read_namespaced_service("plain", namespace).spec.cluster_ip == "None"


def test_a_jobset_with_a_queue_label_gets_a_kueue_workload_and_is_admitted(jobsets, wait_for):
    api, namespace = jobsets
    custom = client.CustomObjectsApi(api)
    body = _jobset("queued", 2, labels={"kueue.x-k8s.io/queue-name": "cw"})
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobsets", body)
    assert created["spec"]["suspend"] is True  # Kueue's JobSet webhook holds it until admission

    def workload() -> dict | None:
        items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
        return next((w for w in items if w["metadata"]["ownerReferences"][0]["kind"] == "JobSet"), None)

    admitted = wait_for(lambda: _condition(w := workload() or {}, "Admitted") and w, 30, interval=0.5,
                        what="the JobSet's Workload to be admitted")  # fmt: skip
    assert admitted["metadata"]["name"].startswith("jobset-queued-")
    assert admitted["status"]["admission"]["clusterQueue"] == "cw-gpus"
    assert [p["count"] for p in admitted["spec"]["podSets"]] == [2]
    wait_for(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobsets", "queued")["spec"]["suspend"]
             is False, 30, interval=0.5, what="Kueue to unsuspend the JobSet")  # fmt: skip
    wait_for(lambda: _condition(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobsets", "queued"),
                                "Completed"), 45, interval=0.5, what="the admitted JobSet to complete")  # fmt: skip
