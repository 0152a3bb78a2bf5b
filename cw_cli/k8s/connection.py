"""Connecting to the API server the way kubectl does: $KUBECONFIG, current context, --context.

The ``kubernetes`` package is imported here, inside functions, so ``cw --help`` and dry runs
never load it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator

from cw_cli.errors import ClusterUnreachable, ConfigError, Conflict, CwError, Forbidden, NotFound, Rejected

#: kind -> (API path prefix, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Job": ("/apis/batch/v1", "jobs", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Pod": ("/api/v1", "pods", True),
    "Event": ("/api/v1", "events", True),
    "Secret": ("/api/v1", "secrets", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    # A gang run (render/jobset.py); the API exists only where JobSet is installed.
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
    # Kueue's objects, read for `cw status` of a run with `queue:`.
    "Workload": ("/apis/kueue.x-k8s.io/v1beta2", "workloads", True),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    "ClusterQueue": ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
}
FIELD_MANAGER = "cw"
#: Seconds one request may take: to connect, and to read the answer. One attempt, no silent
#: retries (urllib3 would otherwise try a GET 4 times: 2 minutes against a frozen server).
#: CW_REQUEST_TIMEOUT overrides the read part, e.g. for a slow link.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ClusterTarget:
    """Which cluster and namespace to talk to (flags; None means the kubeconfig's choice)."""

    context: str | None = None
    namespace: str | None = None
    kubeconfig: str | None = None


def _status_message(body: bytes | str | None) -> str:
    try:
        status = json.loads(body or b"{}")
        return str(status.get("message") or "").strip()
    except (ValueError, AttributeError):
        return (body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")).strip()


def error_for_status(status: int, body: bytes | str | None, what: str) -> CwError:
    """Turn an HTTP error from the API server into cw's error, with a hint.

    Args:
        status: HTTP status code.
        body: Response body (a Kubernetes Status object).
        what: What was being done, e.g. ``create Job foo``.
    """
    full = _status_message(body) or f"HTTP {status}"
    message = " ".join(full.split())
    if len(message) > 300:
        message = message[:297] + "..."
    if status == 401:
        return Forbidden(f"{what}: not authenticated ({message})", hint="refresh your credentials in the kubeconfig")
    if status == 403:
        return Forbidden(f"{what}: forbidden ({message})", hint="ask for the Role in docs/rbac.md, or use another --namespace")
    if status == 404:
        return NotFound(f"{what}: not found ({message})")
    if status == 409:
        return Conflict(f"{what}: already exists or changed meanwhile ({message})", hint="choose another --name")
    if status in (400, 413, 422):
        return Rejected(f"{what}: rejected by the API server: {message}", hint="check the field it names; --dry-run shows the manifest")
    return CwError(f"{what}: API server answered {status}: {message}", detail=full)


class Kube:
    """A small dict-in, dict-out client over the official one, bound to a namespace.

    Args:
        api_client: A configured ``kubernetes.client.ApiClient``.
        namespace: The namespace used for namespaced kinds.
    """

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.api_client = api_client
        self.namespace = namespace

    @property
    def host(self) -> str:
        """The API server's URL."""
        return str(self.api_client.configuration.host)

    def path(self, kind: str, name: str | None = None, namespaced: bool | None = None) -> str:
        """URL path of a kind (collection) or of one object."""
        if kind not in RESOURCES:
            raise CwError(f"cw cannot manage objects of kind {kind!r}")
        prefix, plural, is_namespaced = RESOURCES[kind]
        scope = f"/namespaces/{self.namespace}" if is_namespaced and namespaced is not False else ""
        return f"{prefix}{scope}/{plural}" + (f"/{name}" if name else "")

    def raw(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
        what: str = "",
    ) -> Any:
        """Send one request; return the urllib3 response (body not read) on success.

        Args:
            method: HTTP method.
            path: URL path.
            body: JSON body.
            query: Query parameters (None values are left out).
            content_type: Content-Type of the body.
            timeout: (connect, read) seconds; default :func:`request_timeout`.
            what: What is being done, for error messages.

        Raises:
            ClusterUnreachable: No answer from the API server.
            CwError: The matching error for an HTTP error status.
        """
        import urllib3

        timeout = timeout if timeout is not None else request_timeout()
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        params = [(key, value) for key, value in (query or {}).items() if value is not None]
        try:
            method_, url, headers_, body_, _ = self.api_client.param_serialize(
                method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = self.api_client.call_api(method_, url, header_params=headers_, body=body_, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnreachable(
                f"cannot reach the API server at {self.host}",
                hint="is the cluster up? check `kubectl cluster-info`, the context and your network",
                detail=str(exc),
            ) from None
        if not 200 <= response.status <= 299:
            raise error_for_status(response.status, response.read(), what or f"{method} {path}")
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """Send one request and return the JSON body."""
        response = self.raw(method, path, **kwargs)
        data = response.read()
        return json.loads(data) if data else {}

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """Return an object, or None when it does not exist."""
        try:
            return self.request("GET", self.path(kind, name), what=f"read {kind} {name}")
        except NotFound:
            return None

    def serves(self, group_version_path: str) -> bool:
        """Whether the API server serves an API group version (e.g. a CRD's), by discovery."""
        try:
            self.request("GET", group_version_path, what=f"discover {group_version_path}")
        except NotFound:
            return False
        return True

    def list(
        self, kind: str, label_selector: str | None = None, field_selector: str | None = None, all_namespaces: bool = False
    ) -> list[dict[str, Any]]:
        """List objects of a kind in the namespace (or cluster-wide for cluster kinds, or with ``all_namespaces``)."""
        data = self.request(
            "GET",
            self.path(kind, namespaced=False if all_namespaces else None),
            query={"labelSelector": label_selector, "fieldSelector": field_selector},
            what=f"list {RESOURCES[kind][1]}",
        )
        return list(data.get("items") or [])

    def create(self, manifest: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Create one object; the API server's 409 (Conflict) means the name is taken.

        Unlike apply, create never takes over an object another launch made a moment earlier:
        of two launches racing for one run name, exactly one gets each object.
        """
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        return self.request(
            "POST",
            self.path(kind),
            body=manifest,
            query={"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None},
            what=f"create {kind} {name}",
        )

    def apply(self, manifest: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply one manifest with field manager ``cw``."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        return self.request(
            "PATCH",
            self.path(kind, name),
            body=manifest,
            query={"fieldManager": FIELD_MANAGER, "force": "true", "dryRun": "All" if dry_run else None},
            content_type="application/apply-patch+yaml",
            what=f"apply {kind} {name}",
        )

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """JSON merge-patch one object."""
        return self.request(
            "PATCH",
            self.path(kind, name),
            body=patch,
            query={"fieldManager": FIELD_MANAGER},
            content_type="application/merge-patch+json",
            what=f"update {kind} {name}",
        )

    def delete(self, kind: str, name: str, uid: str | None = None) -> bool:
        """Delete one object (dependents in the background); False when it was already gone.

        Args:
            kind: The object's kind.
            name: Its name.
            uid: Delete only the object with this UID (a precondition the API server checks):
                an object of the same name that someone else created meanwhile is left alone.

        Raises:
            Conflict: ``uid`` was given and the object there now is another one.
        """
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", self.path(kind, name), body=options, what=f"delete {kind} {name}")
            return True
        except NotFound:
            return False

    def stream_lines(
        self, path: str, query: dict[str, Any], what: str, idle_timeout: float | None = None
    ) -> Iterator[str]:
        """Yield the lines of a streaming response (e.g. a followed pod log).

        Args:
            path: URL path.
            query: Query parameters.
            what: What is being read, for error messages.
            idle_timeout: End the stream quietly after this many seconds without data, so the
                caller can check whether to go on (None waits forever).
        """
        import urllib3

        response = self.raw("GET", path, query=query, timeout=(10, idle_timeout) if idle_timeout else None, what=what)
        raw = response.response
        buffer = b""
        try:
            for chunk in raw.stream(4096, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            pass  # idle or dropped: the caller decides whether to reconnect
        finally:
            raw.release_conn()
        if buffer:
            yield buffer.decode(errors="replace")


def request_timeout() -> tuple[float, float]:
    """(connect, read) seconds for one API request; ``CW_REQUEST_TIMEOUT`` sets the read part."""
    import os

    try:
        read = float(os.environ.get("CW_REQUEST_TIMEOUT", READ_TIMEOUT_S))
    except ValueError:
        read = READ_TIMEOUT_S
    read = read if read > 0 else READ_TIMEOUT_S
    return (min(CONNECT_TIMEOUT_S, read), read)


def connect(target: ClusterTarget) -> Kube:
    """Load the kubeconfig (the target's, else ``$KUBECONFIG``, else ``~/.kube/config``) and bind to a namespace.

    ``$KUBECONFIG`` is read at each call (the kubernetes package reads it once, at import), so a
    program that sets it later still gets the cluster it names.

    Raises:
        ClusterUnreachable: No kubeconfig, or the context does not exist.
    """
    from kubernetes import config as kube_config
    from kubernetes.config.config_exception import ConfigException

    import os

    config_file = target.kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        contexts, active = kube_config.list_kube_config_contexts(config_file=config_file)
        chosen = active
        if target.context:
            chosen = next((c for c in contexts if c["name"] == target.context), None)
            if chosen is None:
                known = ", ".join(c["name"] for c in contexts) or "none"
                raise ClusterUnreachable(f"no context {target.context!r} in the kubeconfig", hint=f"contexts: {known}")
        from kubernetes import client as kube_client

        configuration = kube_client.Configuration()
        kube_config.load_kube_config(
            config_file=config_file, context=chosen["name"] if chosen else None, client_configuration=configuration
        )
        # Before the client exists: its connection pool reads this once, when it is built.
        configuration.retries = False
        api_client = kube_client.ApiClient(configuration)
    except ConfigException as exc:
        raise ClusterUnreachable(
            f"no usable kubeconfig ({exc})",
            hint="set KUBECONFIG or run `cw cluster up` for a local test cluster",
        ) from None
    except OSError as exc:
        raise ClusterUnreachable(f"cannot read the kubeconfig: {exc}", hint="set KUBECONFIG to a readable file") from None
    namespace = target.namespace or ((chosen or {}).get("context") or {}).get("namespace") or "default"
    if not _NAMESPACE.match(namespace):  # it becomes part of every URL path
        raise ConfigError([f"namespace {namespace!r} is not a valid namespace name"], hint="use lower-case letters, digits and '-'")
    return Kube(api_client, namespace)
