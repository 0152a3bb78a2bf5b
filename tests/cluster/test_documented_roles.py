"""The Roles shipped in docs/rbac-*.yaml are exactly what cw needs, proven against the real API
server's RBAC as a user bound to those files and nothing else (tests/cluster/conftest.py
`as_documented_roles`): the read-only Role lists, reads statuses and logs and may not launch; the
launch Role launches and deletes; the read-only Role alone is refused `cw artifacts` in one line
(exit 7). The after-training commands' own tests run under the after-training Role. Which verbs
the API server wants for a websocket exec and port-forward is measured here, not assumed."""

from __future__ import annotations

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/sft", "gpu": 1}


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_the_read_only_role_reads_runs_and_the_launch_role_launches_and_deletes(kube_api, namespace, tmp_path,
                                                                                 as_documented_roles):  # fmt: skip
    reader = as_documented_roles("read-only")
    launcher = as_documented_roles("read-only", "launch")
    config = str(write_config(tmp_path, SFT_CONFIG))
    refused = run_cw(reader, "trl", "sft", config, "--name", "ro", "-n", namespace)
    assert refused.returncode == 7, refused.stderr
    assert "forbidden" in _one_error_line(refused.stderr)

    launched = run_cw(launcher, "trl", "sft", config, "--name", "rw", "-n", namespace, "--wait", timeout=180)
    assert launched.returncode == 0, launched.stderr
    listed = run_cw(reader, "list", "-n", namespace)
    assert listed.returncode == 0 and "rw" in listed.stdout, listed.stderr
    status = run_cw(reader, "status", "rw", "-n", namespace)
    assert status.returncode == 0 and "Succeeded" in status.stdout + status.stderr, status.stderr
    logs = run_cw(reader, "logs", "rw", "-n", namespace)
    assert logs.returncode == 0, logs.stderr
    metrics = run_cw(reader, "metrics", "rw", "-n", namespace)
    assert metrics.returncode in (0, 4) and "forbidden" not in metrics.stderr, metrics.stderr  # kwok's pods log nothing
    assert run_cw(reader, "delete", "rw", "-n", namespace).returncode == 7
    deleted = run_cw(launcher, "delete", "rw", "-n", namespace)
    assert deleted.returncode == 0, deleted.stderr


def test_with_only_the_read_only_role_artifacts_is_forbidden_in_one_line(kube_api, namespace, tmp_path, cw_env,
                                                                         as_documented_roles):  # fmt: skip
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "arts", "-n", namespace,
                      "--wait", timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    for impersonate in (False, True):  # a ServiceAccount's token, and the admin acting `as:` the user
        refused = run_cw(as_documented_roles("read-only", impersonate=impersonate), "artifacts", "arts", "-n", namespace,
                         timeout=120)  # fmt: skip
        assert refused.returncode == 7, refused.stderr
        line = _one_error_line(refused.stderr)
        assert "forbidden" in line and "cannot get resource" in line, line  # the first request it may not make
        assert "docs/rbac.md" in refused.stderr
    # Nothing was left behind: the reader pod was never created.
    assert client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=reader").items == []


def _token_client(kube_cluster, admin: client.ApiClient, namespace: str, account: str, folder) -> client.ApiClient:
    """The official client acting with a ServiceAccount's token (its websocket streams honour it)."""
    import base64

    import yaml

    token = client.CoreV1Api(admin).create_namespaced_service_account_token(account, namespace, {"spec": {"expirationSeconds": 600}})
    cluster = yaml.safe_load(kube_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    ca = folder / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    configuration = client.Configuration()
    configuration.host = cluster["server"]
    configuration.ssl_ca_cert = str(ca)
    configuration.api_key = {"authorization": f"Bearer {token.status.token}"}
    return client.ApiClient(configuration)


@pytest.mark.parametrize("verbs", [["get"], ["create"], ["get", "create"]], ids="+".join)
def test_which_verbs_a_websocket_exec_and_port_forward_need(kube_cluster, kube_api, namespace, tmp_path, verbs, wait_for):
    """Kubernetes 1.36 (the test cluster's): a websocket upgrade (a GET) of pods/exec and
    pods/portforward is authorized as `get` and, with AuthorizePodWebsocketUpgradeCreatePermission
    (on by default since 1.35), as `create` too; docs/rbac-after-training.yaml grants both."""
    from kubernetes.stream import portforward, stream

    core, rbac = client.CoreV1Api(kube_api), client.RbacAuthorizationV1Api(kube_api)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "target"}, "spec": {
        "containers": [{"name": "c", "image": "python:3.12.12-slim-bookworm", "command": ["sleep", "600"]}]}})  # fmt: skip
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "kwok.x-k8s.io", "v1alpha1", namespace, "execs",
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec", "metadata": {"name": "target"},
         "spec": {"execs": [{"local": {"workDir": str(tmp_path)}}]}},
    )  # fmt: skip
    wait_for(lambda: core.read_namespaced_pod("target", namespace).status.phase == "Running", 60, what="pod Running")
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "streams"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "streams"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": verbs}]})  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "streams"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "streams"},
        "subjects": [{"kind": "ServiceAccount", "name": "streams", "namespace": namespace}]})  # fmt: skip
    api = _token_client(kube_cluster, kube_api, namespace, "streams", tmp_path)
    user = client.CoreV1Api(api)

    def execs() -> bool:
        try:
            out = stream(user.connect_get_namespaced_pod_exec, "target", namespace, command=["echo", "hi"],
                         stderr=True, stdin=False, stdout=True, tty=False)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the client's handshake error carries the status
            assert "403" in str(exc) or "Forbidden" in str(exc), exc
            return False
        return "hi" in out

    def forwards() -> bool:
        try:
            forward = portforward(user.connect_get_namespaced_pod_portforward, "target", namespace, ports="8000")
        except Exception as exc:  # noqa: BLE001
            assert "403" in str(exc) or "Forbidden" in str(exc), exc
            return False
        forward.close()
        return True

    allowed = (execs(), forwards())
    api.close()
    print(f"pods/exec and pods/portforward with {verbs}: exec {allowed[0]}, port-forward {allowed[1]}")
    assert allowed == ((True, True) if verbs == ["get", "create"] else (False, False))
