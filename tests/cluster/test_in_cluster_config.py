"""cw inside a pod (or a CI job on the cluster): with no kubeconfig, it uses the pod's service
account as kubectl does (KUBERNETES_SERVICE_HOST/PORT and the token, CA and namespace files),
proven with a real ServiceAccount token against the real API server and its RBAC."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client

from cw_cli.client import in_cluster as pod_identity
from cw_cli.client import kubeconfig as kc
from cw_cli.client.connection import ClusterTarget, Kube, connect
from cw_cli.client.transport import Transport
from cw_cli.errors import Forbidden


def _service_account_folder(api: client.ApiClient, namespace: str, kubeconfig, folder) -> dict[str, str]:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "runner"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "pods"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "pods"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": namespace}]})  # fmt: skip
    token = core.create_namespaced_service_account_token("runner", namespace, {"spec": {"expirationSeconds": 3600}})
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    folder.mkdir()
    (folder / "token").write_text(token.status.token + "\n")
    (folder / "namespace").write_text(namespace)
    import base64

    (folder / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    server = urlsplit(cluster["server"])
    return {"KUBERNETES_SERVICE_HOST": str(server.hostname), "KUBERNETES_SERVICE_PORT": str(server.port)}


def test_the_pods_service_account_is_used_when_there_is_no_kubeconfig(kube_cluster, kube_api, namespace, tmp_path,
                                                                      monkeypatch):  # fmt: skip
    env = _service_account_folder(kube_api, namespace, kube_cluster.kubeconfig, tmp_path / "sa")
    credentials = kc.in_cluster(env, tmp_path / "sa")
    assert credentials is not None and credentials.namespace == namespace and credentials.context == "in-cluster"
    kube = Kube(Transport(credentials), credentials.namespace)
    assert kube.list("Pod", "") == []  # what the Role grants
    with pytest.raises(Forbidden):
        kube.list("ConfigMap", "")  # and nothing more: the token is the ServiceAccount's, not the admin's

    # connect() picks it when no kubeconfig exists, as kubectl does.
    monkeypatch.setattr(pod_identity, "SERVICE_ACCOUNT_DIR", tmp_path / "sa")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    bound = connect(ClusterTarget())
    assert bound.namespace == namespace and bound.list("Pod", "") == []
