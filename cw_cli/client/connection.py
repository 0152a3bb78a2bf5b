"""Connecting to the API server the way kubectl does: $KUBECONFIG, current context, --context.

Requests go through :mod:`cw_cli.client.transport` (``http.client`` and ``ssl``, imported by
:func:`connect`), so ``cw --help`` and dry runs load no network code at all, and a command that
talks to the cluster never loads the ``kubernetes`` package or ``urllib3``, unless the kubeconfig
needs the official client (see :func:`connect`).
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from msgspec import Struct
from msgspec import json as msgspec_json  # faster than json, and loaded with Struct anyway

from cw_cli.client import official
from cw_cli.client.api_errors import error_for_status
from cw_cli.client.resources import RESOURCES
from cw_cli.errors import ClusterUnreachable, ConfigError, CwError, NotFound, Rejected

if TYPE_CHECKING:  # http.client and ssl load only when connect() needs them
    from cw_cli.client.transport import Response, Transport

__all__ = ["CONNECT_TIMEOUT_S", "FIELD_MANAGER", "RESOURCES", "ClusterTarget", "Kube", "connect", "error_for_status", "request_timeout"]

FIELD_MANAGER = "cw"
#: Accept header for metadata-only lists (PartialObjectMetadataList), JSON as the fallback.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
#: The same for one object (PartialObjectMetadata).
OBJECT_METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
#: Seconds one request may take: to connect, and to read the answer. One attempt, no silent
#: retries (only a kept-alive connection the server closed meanwhile is opened again, once).
#: CW_REQUEST_TIMEOUT overrides the read part, e.g. for a slow link.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class ClusterTarget(Struct, frozen=True):
    """Which cluster and namespace to talk to (flags; None means the kubeconfig's choice)."""

    context: str | None = None
    namespace: str | None = None
    kubeconfig: str | None = None


class Kube:
    """A small dict-in, dict-out client for the API server, bound to a namespace.

    Args:
        transport: The HTTP client for the API server (:class:`~cw_cli.client.transport.Transport`).
        namespace: The namespace used for namespaced kinds.
    """

    def __init__(self, transport: Transport, namespace: str) -> None:
        self.transport = transport
        self.namespace = namespace
        self._served: dict[str, bool] = {}  # discovery answers (see serves)

    @property
    def host(self) -> str:
        """The API server's URL."""
        return str(self.transport.server)

    def helper_image(self, role: str, default: str) -> str:
        """The image of cw's ``role`` helper pod on this cluster: the kubeconfig context's choice
        (:data:`~cw_cli.client.credentials.HELPER_IMAGES_EXTENSION`), else ``default``."""
        return str(getattr(self.transport, "helper_images", {}).get(role, default))

    @property
    def simulated_gpus(self) -> bool:
        """Whether the cluster's GPUs are advertised without devices (the kubeconfig context's
        :data:`~cw_cli.client.credentials.SIMULATED_GPUS_EXTENSION`): servers run on CPU there."""
        return bool(getattr(self.transport, "simulated_gpus", False))

    def close(self) -> None:
        """Close the kept-alive connections."""
        self.transport.close()

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
        accept: str = "application/json",
        timeout: float | tuple[float, float | None] | None = None,
        stream: bool = False,
        what: str = "",
    ) -> Response:
        """Send one request; return the response on success (``.status``, ``.read()``, ``.stream()``).

        Args:
            method: HTTP method.
            path: URL path.
            body: JSON body.
            query: Query parameters (None values are left out).
            content_type: Content-Type of the body (JSON by default).
            accept: The Accept header.
            timeout: (connect, read) seconds, or one number for both; default :func:`request_timeout`.
            stream: Return before the body is read; the caller reads or closes the response.
            what: What is being done, for error messages.

        Raises:
            Rejected: ``body`` cannot be written as JSON (a key that is not a string or a number).
            ClusterUnreachable: No answer from the API server.
            CwError: The matching error for an HTTP error status.
        """
        from cw_cli.client.kubeconfig import KubeconfigError

        if not isinstance(timeout, tuple):
            timeout = request_timeout() if timeout is None else (float(timeout), float(timeout))
        headers = {"Accept": accept}
        data = None if body is None else _json_body(body, what or f"{method} {path}")
        if data is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = [(key, value) for key, value in (query or {}).items() if value is not None]
        try:
            response = self.transport.request(method, path, query=params, body=data, headers=headers, timeout=timeout, stream=stream)
        except OSError as exc:
            raise ClusterUnreachable(
                f"cannot reach the API server at {self.host}",
                hint="is the cluster up? check `kubectl cluster-info`, the context and your network",
                detail=str(exc),
            ) from None
        except KubeconfigError as exc:  # an expired exec credential that could not be renewed
            raise ClusterUnreachable(f"no usable credentials ({exc})", hint=exc.hint or "check the kubeconfig's user") from None
        if not 200 <= response.status <= 299:
            raise error_for_status(response.status, _error_body(response), what or f"{method} {path}")
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """Send one request and return the JSON body."""
        response = self.raw(method, path, **kwargs)
        try:
            data = response.read()
        except OSError as exc:
            raise ClusterUnreachable(f"the API server at {self.host} stopped answering", detail=str(exc)) from None
        try:
            return msgspec_json.decode(data) if data else {}
        except ValueError as exc:  # msgspec's DecodeError: cut short, or not an API server at all
            what = kwargs.get("what") or f"{method} {path}"
            raise ClusterUnreachable(f"the answer of {self.host} to {what} is not JSON ({exc})",
                                     hint="is the kubeconfig's server an API server?",
                                     detail=data[:300].decode(errors="replace")) from None  # fmt: skip

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """Return an object, or None when it does not exist."""
        try:
            return self.request("GET", self.path(kind, name), what=f"read {kind} {name}")
        except NotFound:
            return None

    def get_metadata(self, kind: str, name: str) -> dict[str, Any] | None:
        """Like :meth:`get`, but only the object's ``metadata`` (a PartialObjectMetadata)."""
        try:
            return self.request("GET", self.path(kind, name), accept=OBJECT_METADATA_ONLY, what=f"read {kind} {name}")
        except NotFound:
            return None

    def serves(self, group_version_path: str, timeout: tuple[float, float] | None = None) -> bool:
        """Whether the API server serves an API group version (e.g. a CRD's), by discovery.

        Asked once per connection (a sweep's runs share the answer).

        Args:
            group_version_path: e.g. ``/apis/jobset.x-k8s.io/v1alpha2``.
            timeout: (connect, read) seconds; default :func:`request_timeout`.
        """
        if group_version_path not in self._served:
            try:
                self.request("GET", group_version_path, what=f"discover {group_version_path}", timeout=timeout)
                self._served[group_version_path] = True
            except NotFound:
                self._served[group_version_path] = False
        return self._served[group_version_path]

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

    def list_metadata(
        self, kind: str, label_selector: str | None = None, field_selector: str | None = None, all_namespaces: bool = False
    ) -> builtins.list[dict[str, Any]]:  # `list` in this class body is the method above
        """Like :meth:`list`, but only each object's ``metadata`` (a PartialObjectMetadataList).

        Much less to send and parse than whole objects (pods carry their spec and status) when
        names, labels, annotations or owners are all that is needed. Each item has ``kind``
        PartialObjectMetadata, ``apiVersion`` meta.k8s.io/v1 and ``metadata``.
        """
        data = self.request(
            "GET",
            self.path(kind, namespaced=False if all_namespaces else None),
            query={"labelSelector": label_selector, "fieldSelector": field_selector},
            accept=METADATA_ONLY,
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
        timeout = (CONNECT_TIMEOUT_S, idle_timeout) if idle_timeout else None
        response = self.raw("GET", path, query=query, timeout=timeout, stream=True, what=what)
        buffer = b""
        try:
            for chunk in response.stream():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
        except OSError:
            pass  # idle or dropped: the caller decides whether to reconnect
        finally:
            response.close()
        if buffer:
            yield buffer.decode(errors="replace")

    def websocket(self, path: str, query: builtins.list[tuple[str, Any]], subprotocols: tuple[str, ...], what: str,
                  timeout: tuple[float, float | None] | None = None) -> Any:  # fmt: skip
        """Open a websocket stream (exec, port-forward) through the same transport and identity as
        every request; see :meth:`Transport.websocket <cw_cli.client.transport.Transport.websocket>`.

        Raises:
            ClusterUnreachable: No answer from the API server, or no usable credentials.
            CwError: The matching error for the status the API server refused the stream with
                (Forbidden for 403: exit 7, NotFound for 404).
        """
        import websocket

        from cw_cli.client.kubeconfig import KubeconfigError

        try:
            return self.transport.websocket(path, query=query, subprotocols=subprotocols, timeout=timeout or request_timeout())
        except websocket.WebSocketBadStatusException as refused:
            raise error_for_status(refused.status_code, refused.resp_body, what) from None
        except OSError as exc:
            raise ClusterUnreachable(f"{what}: cannot reach the API server at {self.host}",
                                     hint="is the cluster up? check the context and your network", detail=str(exc)) from None  # fmt: skip
        except KubeconfigError as exc:
            raise ClusterUnreachable(f"no usable credentials ({exc})", hint=exc.hint or "check the kubeconfig's user") from None


def _json_body(body: Any, what: str) -> bytes:
    """``body`` as JSON bytes.

    Raises:
        Rejected: It cannot be written as JSON (raised as a CwError, so a launch removes what it created).
    """
    try:
        return msgspec_json.encode(body)
    except TypeError as exc:
        raise Rejected(
            f"{what}: the object cannot be sent as JSON ({exc})",
            hint="a template wrote a key JSON cannot hold: YAML reads an unquoted on/off/yes/no/null as a "
            "boolean or null, so quote such keys",
        ) from None


def _error_body(response: Response) -> bytes:
    """The body of an error answer (a Kubernetes Status), or nothing when the connection broke."""
    try:
        return response.read()
    except OSError:
        return b""


def request_timeout() -> tuple[float, float]:
    """(connect, read) seconds for one API request; ``CW_REQUEST_TIMEOUT`` sets the read part."""

    try:
        read = float(os.environ.get("CW_REQUEST_TIMEOUT", READ_TIMEOUT_S))
    except ValueError:
        read = READ_TIMEOUT_S
    read = read if read > 0 else READ_TIMEOUT_S
    return (min(CONNECT_TIMEOUT_S, read), read)


def connect(target: ClusterTarget) -> Kube:
    """Load the kubeconfig (the target's, else ``$KUBECONFIG``, else ``~/.kube/config``) and bind to a namespace.

    The kubeconfig is read by :mod:`cw_cli.client.kubeconfig` with kubectl's rules; only what it
    does not support (``auth-provider``, ...) goes through the official ``kubernetes`` client's
    loader. Either way, requests go through :class:`~cw_cli.client.transport.Transport`, which picks
    the proxy as kubectl does (``proxy-url``, else ``HTTPS_PROXY`` / ``NO_PROXY``, never for
    loopback). ``$KUBECONFIG`` is read at each call, so a program that sets it later still gets
    the cluster it names.

    Raises:
        ClusterUnreachable: No kubeconfig, or the context does not exist.
    """
    from cw_cli.client import kubeconfig as kc
    from cw_cli.client.transport import Transport

    if target.namespace is not None:
        _check_namespace(target.namespace)  # a bad --namespace is the user's (exit 2), whatever the cluster
    try:
        credentials = kc.load(target.kubeconfig, target.context)
        kube_namespace = credentials.namespace
        transport = Transport(credentials)
    except kc.Unsupported:
        transport, kube_namespace = official.connect_with_official_client(target)
    except kc.UnknownContext as exc:
        raise ClusterUnreachable(str(exc), hint=f"contexts: {', '.join(exc.known) or 'none'}") from None
    except kc.KubeconfigError as exc:
        raise ClusterUnreachable(
            f"no usable kubeconfig ({exc})", hint=exc.hint or "set KUBECONFIG or run `cw cluster up` for the test cluster"
        ) from None
    except OSError as exc:
        raise ClusterUnreachable(f"cannot read the kubeconfig: {exc}", hint="set KUBECONFIG to a readable file") from None
    namespace = target.namespace or kube_namespace or "default"
    _check_namespace(namespace)
    return Kube(transport, namespace)


def _check_namespace(namespace: str) -> None:
    if not _NAMESPACE.fullmatch(namespace):  # it becomes part of every URL path
        raise ConfigError([f"namespace {namespace!r} is not a valid namespace name"], hint="use lower-case letters, digits and '-'")
