"""The test cluster's admin client: cw's own :class:`~cw_cli.client.connection.Kube`, not a second one.

Built straight from the cluster's PKI (admin client certificate and CA), so it needs no
kubeconfig file. Requests that probe readiness use short timeouts: a component that is not up
yet must not hold a start-up poll for the default 30 s. Its errors are cw's
(:mod:`cw_cli.errors`); what ``cw cluster up`` cannot recover from becomes a
:class:`~.errors.StartError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from cw_cli.client.connection import Kube
from cw_cli.client.kubeconfig import Credentials
from cw_cli.client.transport import Transport
from cw_cli.errors import Conflict, CwError, NotFound

from .errors import StartError
from .pki import Pki

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODES = "/api/v1/nodes"
#: (connect, read) seconds of a readiness probe.
PROBE_TIMEOUT = (2.0, 2.0)
#: Seconds of any other request while the cluster starts (not Kube's 30 s default).
REQUEST_TIMEOUT = 5.0
#: Seconds of a create: webhooks of a controller that just started can be slow to answer.
CREATE_TIMEOUT = 30.0


def admin_client(server: str, pki: Pki, namespace: str = "default") -> Kube:
    """A :class:`Kube` for ``server`` as the cluster admin (system:masters).

    Raises:
        OSError: A PKI file cannot be read.
        cw_cli.client.kubeconfig.KubeconfigError: The certificates are not usable PEM.
    """
    credentials = Credentials(
        server=server,
        namespace=namespace,
        ca_data=pki.ca.cert.read_bytes(),
        client_cert=pki.admin.cert.read_bytes(),
        client_key=pki.admin.key.read_bytes(),
    )
    return Kube(Transport(credentials), namespace)


def endpoint(url: str, ca_pem: bytes | None = None) -> Transport:
    """A bare transport (no client certificate) for a controller's own http(s) endpoint."""
    return Transport(Credentials(server=url.rstrip("/"), ca_data=ca_pem))


def ready(kube: Kube, timeout: float | tuple[float, float] = PROBE_TIMEOUT) -> bool:
    """Whether the API server's /readyz answers 2xx (any error means not yet)."""
    try:
        kube.raw("GET", "/readyz", accept="text/plain", timeout=timeout, what="read /readyz")
    except CwError:
        return False
    return True


def exists(kube: Kube, path: str) -> bool:
    """Whether GET ``path`` finds an object (404: not yet).

    Raises:
        CwError: Any other failure (a start-up poll treats it as not yet too).
    """
    try:
        kube.request("GET", path, timeout=REQUEST_TIMEOUT, what=f"read {path}")
    except NotFound:
        return False
    return True


def nodes(kube: Kube) -> list[dict[str, Any]]:
    """Every node object."""
    return list(kube.request("GET", NODES, timeout=REQUEST_TIMEOUT, what="list nodes").get("items") or [])


def create(kube: Kube, path: str, body: dict[str, Any], *, attempts: int = 2, pause_s: float = 0.5) -> None:
    """POST one object; one that exists already (409) counts as created.

    Sending again is safe because a 409 counts as done; a second try covers a kept-alive
    connection the server closed meanwhile (the transport resends only idempotent methods by
    itself) and a webhook that does not answer yet.

    Args:
        kube: The admin client.
        path: The collection's URL path.
        body: The object.
        attempts: Tries in all, ``pause_s`` apart.
        pause_s: Seconds between tries.

    Raises:
        StartError: The API server refused it every time.
    """
    what = f"create {body['kind']} {body['metadata']['name']}"
    for attempt in range(1, attempts + 1):
        try:
            kube.request("POST", path, body=body, timeout=CREATE_TIMEOUT, what=what)
            return
        except Conflict:
            return
        except CwError as exc:
            if attempt == attempts:
                raise StartError(f"{what} failed: {exc}") from None
        time.sleep(pause_s)


def established(kube: Kube, name: str) -> bool:
    """Whether the CRD ``name`` serves its kind (condition Established)."""
    crd = kube.request("GET", f"{CRDS}/{name}", timeout=REQUEST_TIMEOUT, what=f"read CRD {name}")
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def install_crds(kube: Kube, folder: Path, wait: Callable[[str, Callable[[], bool]], None]) -> list[str]:
    """Create every CRD in ``folder/*.yaml`` and wait until all are Established.

    Controllers look their kinds up when they start: a CRD that is not served yet by then makes
    Kueue defer (and back off on) that integration, JobSet's watches fail, and kwok does not
    watch its Logs.

    Returns:
        The CRDs' names.
    """
    names = []
    for path in sorted(folder.glob("*.yaml")):
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        create(kube, CRDS, body)
        names.append(body["metadata"]["name"])
    for name in names:
        wait(f"CRD {name} to be established", partial(established, kube, name))
    return names
