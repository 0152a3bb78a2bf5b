"""The credentials of the pod cw runs in (its service account), read as kubectl and client-go
read them when there is no kubeconfig."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from cw_cli.client.credentials import Credentials, KubeconfigError
from cw_cli.client.kubeconfig_values import header_safe, read_named

#: Where a pod finds its service account's token, CA and namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# What KUBERNETES_SERVICE_HOST may be: a DNS name, an IPv4 or an IPv6 address (client-go joins it
# with the port as it is; anything else makes a URL that is not one).
_SERVICE_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


def in_cluster(environ: Mapping[str, str] | None = None, folder: Path | None = None) -> Credentials | None:
    """The credentials of the pod cw runs in (its service account), as kubectl and client-go read
    them when there is no kubeconfig; None outside a pod.

    The token is read once: a command ends long before a projected token (rotated hourly) expires.

    Raises:
        KubeconfigError: ``KUBERNETES_SERVICE_HOST`` or ``_PORT`` is not a host or a port, or the
            pod's token, CA or namespace cannot be read (not a small regular text file).
    """
    env = os.environ if environ is None else environ
    folder = folder or SERVICE_ACCOUNT_DIR
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = folder / "token"
    if not host or not port or not os.path.lexists(token_file):
        return None
    if not _SERVICE_HOST.fullmatch(host):
        raise KubeconfigError(f"KUBERNETES_SERVICE_HOST={host!r} is not a host name or an IP address",
                              hint="unset it outside a pod, or use a kubeconfig (KUBECONFIG)")  # fmt: skip
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise KubeconfigError(f"KUBERNETES_SERVICE_PORT={port!r} is not a port (1-65535)",
                              hint="unset it outside a pod, or use a kubeconfig (KUBECONFIG)")  # fmt: skip
    host = f"[{host}]" if ":" in host else host  # an IPv6 address

    def text(path: Path, what: str) -> str:
        try:
            return read_named(str(path), f"the pod's service account {what}").decode("utf-8").strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"the pod's service account {what} {path} is not text (not UTF-8)") from None

    token = header_safe(text(token_file, "token"), f"the pod's service account token {token_file}", ascii_only=True)
    ca = read_named(str(folder / "ca.crt"), "the pod's service account CA") if os.path.lexists(folder / "ca.crt") else None
    namespace = text(folder / "namespace", "namespace") if os.path.lexists(folder / "namespace") else None
    if not token:
        raise KubeconfigError(f"the pod's service account token {token_file} is empty")
    return Credentials(server=f"https://{host}:{port}", context="in-cluster", namespace=namespace or None,
                       ca_data=ca, token=token)  # fmt: skip
