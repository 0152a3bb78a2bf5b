"""How the test cluster wires Kueue: its own webhook manifests, reached on 127.0.0.1, and a
ClusterQueue sized by the fake nodes (pure functions; the controller itself runs in
tests/cluster/test_kueue.py)."""

from __future__ import annotations

import base64

from cw_cli.testcluster.kueue import capacity_of, configuration, queue_manifests, webhook_configurations

MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  failurePolicy: Fail
- name: mdeployment.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-apps-v1-deployment}}
  failurePolicy: Fail
- name: mclusterqueue.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-clusterqueue}}
  failurePolicy: Fail
- name: mjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}}
  failurePolicy: Fail
"""


def test_kueues_webhooks_for_jobs_jobsets_and_its_own_objects_are_called_on_127_0_0_1_with_the_cluster_ca():
    (config,) = webhook_configurations(MANIFESTS, 9443, b"PEM")
    assert config["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert set(hooks) == {"mjob.kb.io", "mclusterqueue.kb.io", "mjobset.kb.io"}  # none for an integration that is off
    assert hooks["mjob.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job", "caBundle": base64.b64encode(b"PEM").decode()
    }
    assert hooks["mjob.kb.io"]["failurePolicy"] == "Fail"  # as shipped: nothing is made optional


def test_the_cluster_queue_holds_what_the_fake_nodes_offer():
    nodes = [{"status": {"allocatable": {"cpu": "64", "memory": "1Ti", "nvidia.com/gpu": "8"}}}] * 2
    nodes.append({"status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}})
    assert capacity_of(nodes) == ("144", "2112Gi", 16)
    flavor, cluster_queue, local_queue = queue_manifests("144", "2112Gi", 16)
    quota = cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r["nominalQuota"] for r in quota} == {"cpu": "144", "memory": "2112Gi", "nvidia.com/gpu": "16"}
    assert local_queue["spec"] == {"clusterQueue": "cw-gpus"} and local_queue["metadata"]["namespace"] == "default"
    assert flavor["kind"] == "ResourceFlavor"


def test_kueue_runs_without_its_own_certificates_and_serves_webhooks_on_loopback(tmp_path):
    config = configuration(9443, 8081, 8443, tmp_path)
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path)}
    assert config["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]
