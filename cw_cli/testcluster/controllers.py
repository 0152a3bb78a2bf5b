"""What Kueue and JobSet share on the test cluster: controllers run as local processes.

Both ship a controller-runtime manager, CRDs and admission webhooks meant for a Deployment behind
a Service. Here the API server must reach a process on 127.0.0.1, so their own webhook manifests
are installed with ``clientConfig.url: https://127.0.0.1:<port><path>`` and the cluster CA as
``caBundle`` (a Service in front of a local process is not an address the API server can reach);
everything else in them (rules, selectors, ``failurePolicy``) stays as shipped.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml
from msgspec import Struct

from . import api
from .errors import StartError

if TYPE_CHECKING:
    from cw_cli.client.connection import Kube
    from cw_cli.client.transport import Transport


def _pointer(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for token in path.lstrip("/").split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    return parts


def apply_json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``document`` with RFC 6902 ``add``/``replace``/``remove`` operations applied.

    Enough for the kustomize patches controllers ship for their webhook manifests.

    Raises:
        StartError: An operation this does not know, or a path that is not there.
    """
    result = copy.deepcopy(document)
    for operation in operations:
        *parents, last = _pointer(operation["path"])
        try:
            target: Any = result
            for part in parents:
                target = target[part]
            if operation["op"] == "replace":
                target[last]  # noqa: B018 - replace needs an existing member
                target[last] = operation["value"]
            elif operation["op"] == "add":
                if isinstance(target, list):
                    target.insert(len(target) if last == "-" else int(last), operation["value"])
                else:
                    target[last] = operation["value"]
            elif operation["op"] == "remove":
                del target[last]
            else:
                raise StartError(f"unsupported patch operation {operation['op']!r}")
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise StartError(f"patch {operation['op']} {operation['path']} does not apply: {e}") from None
    return result


def kustomize_json_patches(documents: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """Apply the JSON 6902 patches a kustomization.yaml in ``folder`` lists (``path`` + ``target``).

    Inline strategic-merge patches (``patch:``) are not applied; the webhooks they touch must be
    left out by the caller.
    """
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8")) or {}
    result = documents
    for entry in kustomization.get("patches") or []:
        if "path" not in entry or "target" not in entry:
            continue
        target = entry["target"]
        operations = yaml.safe_load((folder / entry["path"]).read_text(encoding="utf-8"))
        result = [
            apply_json_patch(d, operations)
            if d.get("kind") == target.get("kind") and d["metadata"]["name"] == target.get("name")
            else d
            for d in result
        ]
    return result


def webhook_configurations(
    documents: Iterable[dict[str, Any] | None],
    port: int,
    ca_pem: bytes,
    prefix: str,
    keep: Callable[[str], bool] = lambda _path: True,
) -> list[dict[str, Any]]:
    """Webhook configurations reached at https://127.0.0.1:<port><path> instead of a Service.

    Args:
        documents: The controller's Mutating/ValidatingWebhookConfigurations.
        port: Where the controller serves its webhooks on 127.0.0.1.
        ca_pem: The CA that signed the controller's serving certificate.
        prefix: Put before each configuration's name (``mutating-webhook-configuration`` is
            every kubebuilder project's name; kustomize's namePrefix does the same upstream).
        keep: Which webhooks to install, by path.
    """
    bundle = base64.b64encode(ca_pem).decode()
    configurations = []
    for document in documents:
        if not document:
            continue
        hooks = []
        for hook in document["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if keep(path):
                hooks.append({**hook, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}})
        metadata = {"name": f"{prefix}-{document['metadata']['name']}"}
        configurations.append({**document, "metadata": metadata, "webhooks": hooks})
    return configurations


def install_webhooks(kube: Kube, configurations: list[dict[str, Any]]) -> None:
    """Create the webhook configurations (already pointed at 127.0.0.1)."""
    for webhook in configurations:
        plural = "mutatingwebhookconfigurations" if webhook["kind"].startswith("Mutating") else "validatingwebhookconfigurations"
        api.create(kube, f"/apis/admissionregistration.k8s.io/v1/{plural}", webhook)


def serving_cert_dir(folder: Path, serving_cert: tuple[Path, Path]) -> Path:
    """``folder/certs`` with tls.crt and tls.key (controller-runtime's names) from ``serving_cert``."""
    certs = folder / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    cert, key = serving_cert
    (certs / "tls.crt").write_bytes(cert.read_bytes())
    (certs / "tls.key").write_bytes(key.read_bytes())
    return certs


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 2xx (a controller's /readyz on its health port)."""
    parts = urlsplit(url)
    transport = api.endpoint(f"{parts.scheme}://{parts.netloc}")
    try:
        return 200 <= transport.request("GET", parts.path, timeout=api.PROBE_TIMEOUT).status <= 299
    except OSError:
        return False
    finally:
        transport.close()


def webhooks_served(configurations: list[dict[str, Any]], ca_cert: Path) -> bool:
    """Whether the controller answers on every webhook path of ``configurations`` (over TLS, as
    the API server will).

    controller-runtime managers register webhook handlers from a goroutine while the server
    starts, so /readyz can be true a moment before a path exists; an unknown path is a 404, which
    the API server would turn into a refused object (``failurePolicy: Fail``). A registered path
    answers an empty POST with 200 and an AdmissionReview error.
    """
    urls = sorted({hook["clientConfig"]["url"] for config in configurations for hook in config["webhooks"]})
    ca_pem = ca_cert.read_bytes()
    transports: dict[str, Transport] = {}  # one per origin, so its connection is kept alive
    try:
        for url in urls:
            parts = urlsplit(url)
            origin = f"{parts.scheme}://{parts.netloc}"
            if origin not in transports:
                transports[origin] = api.endpoint(origin, ca_pem)
            transport = transports[origin]
            answer = transport.request("POST", parts.path, body=b"", headers={"Content-Type": "application/json"},
                                       timeout=api.PROBE_TIMEOUT)  # fmt: skip
            if answer.status == 404:
                return False
    except OSError:
        return False
    finally:
        for transport in transports.values():
            transport.close()
    return True


class Host(Struct, frozen=True):
    """The test cluster, as a controller process started beside it needs it.

    Attributes:
        kube: The cluster's admin client.
        state: The cluster's state folder (each controller gets ``state/<name>``).
        admin_kubeconfig: Kubeconfig the controllers run with.
        serving_cert: (certificate, key) valid for 127.0.0.1, where they serve their webhooks.
        ca_cert: The cluster CA (what the API server checks the webhooks against).
        spawn: Starts a recorded process ``(name, argv, env)``; ``cw cluster down`` stops it.
        wait: Polls a probe until true or the start deadline.
        say: Progress.
    """

    kube: Kube
    state: Path
    admin_kubeconfig: Path
    serving_cert: tuple[Path, Path]
    ca_cert: Path
    spawn: Callable[[str, list[str], dict], None]
    wait: Callable[[str, Callable[[], bool]], None]
    say: Callable[[str], None]


def controller_folder(host: Host, name: str, configuration: Callable[[Path], dict[str, Any]]) -> tuple[Path, Path]:
    """``state/<name>`` with its serving certificate and ``config.yaml`` (made from the certs folder).

    Returns:
        (the folder, its certs folder).
    """
    folder = host.state / name
    certs = serving_cert_dir(folder, host.serving_cert)
    (folder / "config.yaml").write_text(yaml.safe_dump(configuration(certs)), encoding="utf-8")
    return folder, certs


def run_controller(
    host: Host, label: str, name: str, argv: list[str], env: dict[str, str], webhooks: list[dict[str, Any]], health_port: int
) -> None:
    """Install a controller's webhooks, start it, and wait until /readyz and every webhook path answer."""
    install_webhooks(host.kube, webhooks)
    host.say(f"starting {label}")
    host.spawn(name, argv, {**env, "KUBECONFIG": str(host.admin_kubeconfig)})
    host.wait(f"{label} to be ready", lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"))
    # /readyz is true once the webhook server listens; its handlers may come a moment later.
    host.wait(f"{label} to serve its webhooks", lambda: webhooks_served(webhooks, host.ca_cert))
