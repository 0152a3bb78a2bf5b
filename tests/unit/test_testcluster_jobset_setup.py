"""How the test cluster wires JobSet: its webhook manifests as released (kustomize patches
applied), reached on 127.0.0.1, and a configuration without in-cluster machinery (pure functions;
the controller itself runs in tests/cluster/test_jobset_controller.py)."""

from __future__ import annotations

import base64

import pytest

from cw_cli.testcluster.controllers import apply_json_patch
from cw_cli.testcluster.errors import StartError
from cw_cli.testcluster.jobset import configuration, webhook_configurations

# The shape of JobSet v0.10.1's config/components/webhook: manifests.yaml, kustomization.yaml, patches/.
MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}}
  failurePolicy: Fail
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  failurePolicy: Fail
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-jobset-x-k8s-io-v1alpha2-jobset}}
  failurePolicy: Fail
- name: vpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate--v1-pod}}
  failurePolicy: Fail
"""
KUSTOMIZATION = """
resources: [manifests.yaml, service.yaml]
patches:
- path: patches/mutating-patch.yaml
  target: {group: admissionregistration.k8s.io, version: v1, kind: MutatingWebhookConfiguration, name: mutating-webhook-configuration}
"""
POD_PATCH = """
- op: replace
  path: /webhooks/1
  value:
    name: mpod.kb.io
    clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
    failurePolicy: Fail
    objectSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
"""


def test_every_jobset_webhook_is_called_on_127_0_0_1_with_the_released_selectors(tmp_path):
    (tmp_path / "webhooks.yaml").write_text(MANIFESTS)
    patches = tmp_path / "webhook-patches"
    (patches / "patches").mkdir(parents=True)
    (patches / "kustomization.yaml").write_text(KUSTOMIZATION)
    (patches / "patches" / "mutating-patch.yaml").write_text(POD_PATCH)

    mutating, validating = webhook_configurations(tmp_path, 9444, b"PEM")
    assert mutating["metadata"] == {"name": "jobset-mutating-webhook-configuration"}
    assert validating["metadata"] == {"name": "jobset-validating-webhook-configuration"}
    hooks = {h["name"]: h for config in (mutating, validating) for h in config["webhooks"]}
    assert set(hooks) == {"mjobset.kb.io", "mpod.kb.io", "vjobset.kb.io", "vpod.kb.io"}
    assert hooks["mpod.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9444/mutate--v1-pod", "caBundle": base64.b64encode(b"PEM").decode()
    }
    assert hooks["mpod.kb.io"]["objectSelector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"
    assert "objectSelector" not in hooks["vpod.kb.io"]  # only the patches listed are applied
    assert {h["failurePolicy"] for h in hooks.values()} == {"Fail"}


def test_json_patches_refuse_what_does_not_apply():
    document = {"webhooks": [{"name": "a"}]}
    assert apply_json_patch(document, [{"op": "add", "path": "/webhooks/-", "value": {"name": "b"}}])["webhooks"][1] == {"name": "b"}
    assert document == {"webhooks": [{"name": "a"}]}  # the input is not changed
    with pytest.raises(StartError):
        apply_json_patch(document, [{"op": "replace", "path": "/webhooks/3", "value": {}}])
    with pytest.raises(StartError):
        apply_json_patch(document, [{"op": "move", "path": "/webhooks/0", "from": "/x"}])


def test_jobset_runs_without_its_own_certificates_or_leader_election_on_loopback(tmp_path):
    config = configuration(9444, 8082, 8444, tmp_path)
    assert config["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9444, "certDir": str(tmp_path)}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:8444", "certDir": str(tmp_path)}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:8082"}
