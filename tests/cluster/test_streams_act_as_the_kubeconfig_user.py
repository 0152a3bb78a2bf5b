"""Exec and port-forward streams go through cw's one client, as the kubeconfig's user: a user
impersonated by the kubeconfig (`as:`) whose Role lacks `pods/exec` gets exit 7 from `cw artifacts`
and `cw download` (before, the official client's stream dropped the impersonation and read the
volume as the admin); granting that one subresource makes the same commands work. The same for
`pods/portforward` and `cw try`. A stream refused or cut is a one-line error, never a traceback."""

from __future__ import annotations

import yaml
from kubernetes import client
from test_cw_end_to_end import run_cw
from test_try_and_serve_on_the_cluster import _launch, _route_port_forward, chat_server  # noqa: F401 - a fixture

#: What `cw artifacts`, `download` and `try` need besides the streams themselves.
BESIDES_STREAMS = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps", "persistentvolumeclaims"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "create", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
]


def _as(kube_cluster, tmp_path, user: str):
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    for entry in config["users"]:
        entry["user"]["as"] = user
    path = tmp_path / f"{user}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _settled(api, namespace: str, user: str, rules: list[dict]) -> None:
    """Wait until the API server's authorizer (an informer cache) judges ``user`` by ``rules``."""
    import time

    authorization = client.AuthorizationV1Api(api)
    checks = [(rule["apiGroups"][0], *rule["resources"][0].partition("/")[::2], rule["verbs"][0]) for rule in rules]
    deadline = time.monotonic() + 30
    while True:
        answers = [authorization.create_subject_access_review({"spec": {"user": user, "resourceAttributes": {
            "namespace": namespace, "group": group, "resource": resource, "subresource": sub, "verb": verb}}}).status.allowed
            for group, resource, sub, verb in checks]  # fmt: skip
        if all(answers):
            return
        assert time.monotonic() < deadline, f"{user} is still refused {checks} after 30 s"
        time.sleep(0.2)


def _role(api, namespace: str, user: str, rules: list[dict]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    body = {"metadata": {"name": user}, "rules": rules}
    if any(role.metadata.name == user for role in rbac.list_namespaced_role(namespace).items):
        rbac.replace_namespaced_role(user, namespace, body)  # (a PUT would also create a Role: RBAC allows it)
    else:
        rbac.create_namespaced_role(namespace, body)
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        })  # fmt: skip
    _settled(api, namespace, user, rules)


def test_exec_goes_as_the_impersonated_user(kube_cluster, kube_api, namespace, cw_env, tmp_path):
    _launch(kube_api, namespace, cw_env, tmp_path)
    _role(kube_api, namespace, "bob", BESIDES_STREAMS)
    bob = {**cw_env, "KUBECONFIG": str(_as(kube_cluster, tmp_path, "bob"))}
    for args in (["artifacts", "arts"], ["download", "arts", str(tmp_path / "dl"), "--checkpoint", "latest"]):
        refused = run_cw(bob, *args, "-n", namespace, timeout=180)
        assert refused.returncode == 7, refused.stderr
        assert "forbidden" in refused.stderr and "bob" in refused.stderr and "pods/exec" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert not any(p.name.endswith(".partial") or p.suffix == ".safetensors" for p in (tmp_path / "dl").rglob("*"))
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=reader")
    assert all(p.metadata.deletion_timestamp is not None for p in pods.items)  # removed even after the refusal

    _role(kube_api, namespace, "bob", [*BESIDES_STREAMS, {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}])
    allowed = run_cw(bob, "artifacts", "arts", "-o", "json", "-n", namespace, timeout=180)
    assert allowed.returncode == 0, allowed.stderr
    done = run_cw(bob, "download", "arts", str(tmp_path / "dl"), "--checkpoint", "latest", "-n", namespace, timeout=180)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dl" / "model.safetensors").stat().st_size == 1000


def test_port_forward_goes_as_the_impersonated_user(kube_cluster, kube_api, namespace, cw_env, tmp_path, chat_server):  # noqa: F811 - the fixture imported above
    _launch(kube_api, namespace, cw_env, tmp_path)
    _route_port_forward(kube_api, namespace, chat_server.server_address[1])
    exec_rule = {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}
    _role(kube_api, namespace, "carol", [*BESIDES_STREAMS, exec_rule])
    carol = {**cw_env, "KUBECONFIG": str(_as(kube_cluster, tmp_path, "carol"))}
    refused = run_cw(carol, "try", "arts", "What is 2 + 2?", "--engine", "vllm", "-n", namespace, "--timeout", "120", timeout=240)
    assert refused.returncode == 7, refused.stderr
    assert "forbidden" in refused.stderr and "pods/portforward" in refused.stderr and "Traceback" not in refused.stderr
    assert client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serve").items == [] or all(
        p.metadata.deletion_timestamp for p in client.CoreV1Api(kube_api).list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=serve").items)  # fmt: skip

    _role(kube_api, namespace, "carol", [*BESIDES_STREAMS, exec_rule,
                                         {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create", "get"]}])  # fmt: skip
    answered = run_cw(carol, "try", "arts", "What is 2 + 2?", "--engine", "vllm", "-n", namespace, "--timeout", "120", timeout=240)
    assert answered.returncode == 0, answered.stderr
    assert "four, said the model" in answered.stdout


def test_an_exec_into_a_pod_that_is_gone_is_one_line_with_its_exit_code(kube_cluster, namespace, tmp_path):
    """The stream's failures through cw's api, without a reader pod: no such pod is exit 4."""
    from cw_cli import api
    from cw_cli.client.channels import exec_in_pod
    from cw_cli.errors import NotFound

    session = api.Session(kubeconfig=str(kube_cluster.kubeconfig), namespace=namespace)
    try:
        exec_in_pod(session.kube, "no-such-pod", "reader", ["true"])
    except NotFound as error:
        assert "no-such-pod" in error.message and error.exit_code == 4
    else:
        raise AssertionError("an exec into a pod that does not exist succeeded")
