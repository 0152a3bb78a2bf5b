"""A kubeconfig user with `as` / `as-groups` acts as that identity against the real API server:
cw's transport sends one Impersonate-User line and one Impersonate-Group line per group, so RBAC
judges the impersonated user (before, the official-client fallback dropped them and cw acted as
the admin, silently)."""

from __future__ import annotations

import yaml
from kubernetes import client
from test_cw_end_to_end import run_cw


def _kubeconfig_as(source, target, **impersonation) -> None:
    config = yaml.safe_load(source.read_text())
    for user in config["users"]:
        user["user"].update(impersonation)
    target.write_text(yaml.safe_dump(config))


def test_cw_acts_as_the_impersonated_user_and_groups(kube_cluster, kube_api, namespace, cw_env, tmp_path):
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "readers"}, "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]})  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "readers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "readers"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "cw-readers"}],
    })  # fmt: skip
    alone = tmp_path / "alice.kubeconfig"
    _kubeconfig_as(kube_cluster.kubeconfig, alone, **{"as": "alice"})
    refused = run_cw({**cw_env, "KUBECONFIG": str(alone)}, "list", "-n", namespace)
    assert refused.returncode == 7, refused.stderr  # forbidden: alice may not list here
    assert "alice" in refused.stderr

    grouped = tmp_path / "alice-reader.kubeconfig"
    _kubeconfig_as(kube_cluster.kubeconfig, grouped, **{"as": "alice", "as-groups": ["devs", "cw-readers"]})
    allowed = run_cw({**cw_env, "KUBECONFIG": str(grouped)}, "list", "-n", namespace)
    assert allowed.returncode == 0, allowed.stderr  # the second group line made her a reader


def test_a_non_ascii_user_and_group_reach_rbac_as_kubectl_sends_them(kube_cluster, kube_api, namespace, cw_env, tmp_path):
    """Go's client sends header values as UTF-8 bytes; http.client would send Latin-1 (or fail on
    anything beyond it), which the API server reads as another name."""
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "readers"}, "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]})  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "readers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "readers"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "lecteurs-é"}],
    })  # fmt: skip
    config = tmp_path / "zoe.kubeconfig"
    _kubeconfig_as(kube_cluster.kubeconfig, config, **{"as": "zoé-用户", "as-groups": ["lecteurs-é"]})
    allowed = run_cw({**cw_env, "KUBECONFIG": str(config)}, "list", "-n", namespace)
    assert allowed.returncode == 0, allowed.stderr
    alone = tmp_path / "zoe-alone.kubeconfig"
    _kubeconfig_as(kube_cluster.kubeconfig, alone, **{"as": "zoé-用户"})
    refused = run_cw({**cw_env, "KUBECONFIG": str(alone)}, "list", "-n", namespace)
    assert refused.returncode == 7 and "zoé-用户" in refused.stderr, refused.stderr  # the server names her as written


def test_a_token_with_a_line_break_never_reaches_the_api_server(kube_cluster, namespace, cw_env, tmp_path):
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": "abc\r\n\tImpersonate-User: system:admin"}
    path = tmp_path / "injected.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    refused = run_cw({**cw_env, "KUBECONFIG": str(path)}, "list", "-n", namespace)
    assert refused.returncode == 3, refused.stderr
    assert "token holds a line break" in refused.stderr and "Traceback" not in refused.stderr
