"""Users of a test cluster bound to exactly the Roles cw ships (docs/rbac-*.yaml, applied from
those very files, so a wrong doc fails its tests)."""

from __future__ import annotations

import os
from pathlib import Path

#: The shipped Roles (docs/rbac.md).
DOCS = Path(__file__).resolve().parents[2] / "docs"
#: The placeholder namespace of the shipped files, replaced by the test's namespace.
DOC_NAMESPACE = "ml-team"


def documented_rbac(role: str, namespace: str) -> list[dict]:
    """The objects of docs/rbac-<role>.yaml for ``namespace``: its placeholder namespace replaced
    wherever it appears (metadata, resourceNames), as the file tells its reader to do."""
    import yaml

    text = (DOCS / f"rbac-{role}.yaml").read_text(encoding="utf-8")
    documents = [doc for doc in yaml.safe_load_all(text) if doc]

    def replace(value):
        if isinstance(value, dict):
            return {k: replace(v) for k, v in value.items()}
        if isinstance(value, list):
            return [replace(v) for v in value]
        return namespace if value == DOC_NAMESPACE else value

    return [replace(doc) for doc in documents]


class DocumentedUsers:
    """Users bound to exactly the shipped Roles (docs/rbac-<role>.yaml, applied as written, with the
    namespace and the subject replaced), each with its own kubeconfig; :meth:`close` removes the
    cluster-scoped bindings (the namespace's objects go with it, or with the cluster)."""

    def __init__(self, api, kubeconfig: Path, namespace: str, folder: Path) -> None:
        self.api, self.kubeconfig, self.namespace, self.folder = api, kubeconfig, namespace, folder
        self.cluster_bindings: list[str] = []
        self.roles_made: set[str] = set()
        self.made = 0

    def make(self, *roles: str, impersonate: bool = False) -> dict[str, str]:
        """An environment for `cw` acting as a new user bound to ``roles``: a ServiceAccount with its
        own token, or (``impersonate``) the admin's certificate acting as the user through ``as:``."""
        import yaml
        from kubernetes import client

        rbac, core, namespace = client.RbacAuthorizationV1Api(self.api), client.CoreV1Api(self.api), self.namespace
        self.made += 1
        user = f"cw-user-{self.made}"
        if impersonate:
            subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
        else:
            core.create_namespaced_service_account(namespace, {"metadata": {"name": user}})
            subject = {"kind": "ServiceAccount", "name": user, "namespace": namespace}
        for role in roles:
            for obj in documented_rbac(role, namespace):
                kind, name = obj["kind"], obj["metadata"]["name"]
                if kind == "Role":
                    if name not in self.roles_made:
                        rbac.create_namespaced_role(namespace, obj)
                        self.roles_made.add(name)
                elif kind == "ClusterRole":
                    try:  # cluster-wide, shared by the tests: the first one creates it
                        rbac.create_cluster_role(obj)
                    except client.ApiException as e:
                        if e.status != 409:
                            raise
                elif kind == "RoleBinding":
                    obj["metadata"]["name"] = f"{name}-{user}"
                    rbac.create_namespaced_role_binding(namespace, {**obj, "subjects": [subject]})
                elif kind == "ClusterRoleBinding":
                    obj["metadata"]["name"] = f"{name}-{namespace}-{user}"
                    rbac.create_cluster_role_binding({**obj, "subjects": [subject]})
                    self.cluster_bindings.append(obj["metadata"]["name"])
                else:
                    raise AssertionError(f"docs/rbac-{role}.yaml holds a {kind}: only RBAC objects belong there")
        config = yaml.safe_load(self.kubeconfig.read_text())
        if impersonate:
            for entry in config["users"]:
                entry["user"]["as"] = user
        else:
            token = core.create_namespaced_service_account_token(user, namespace, {"spec": {"expirationSeconds": 3600}})
            config["users"] = [{"name": user, "user": {"token": token.status.token}}]
            for context in config["contexts"]:
                context["context"]["user"] = user
        path = self.folder / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        env = dict(os.environ)
        env["KUBECONFIG"] = str(path)
        env.pop("CW_TEST_KUBECONFIG", None)
        return env

    def close(self) -> None:
        from kubernetes import client

        for name in self.cluster_bindings:
            try:
                client.RbacAuthorizationV1Api(self.api).delete_cluster_role_binding(name)
            except client.ApiException as e:
                if e.status != 404:
                    raise
