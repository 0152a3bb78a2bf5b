"""What a kubeconfig resolves to: the :class:`Credentials` of one context (with the exec plugin
that made them), and the errors of reading one."""

from __future__ import annotations

import base64
from typing import ClassVar

from msgspec import Struct

from cw_cli.labels import READER

#: The exec plugin API versions kubectl still speaks.
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class KubeconfigError(Exception):
    """The kubeconfig cannot be used (kubectl would refuse it too).

    Args:
        message: What is wrong, naming the file or entry.
        hint: How to fix it, when there is more to say than the message.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class Unsupported(KubeconfigError):
    """The kubeconfig uses something only the official client handles: fall back to it."""


class UnknownContext(KubeconfigError):
    """``--context`` names a context no kubeconfig file defines.

    Args:
        context: The name asked for.
        known: The names the kubeconfig defines.
    """

    def __init__(self, context: str, known: list[str]) -> None:
        super().__init__(f"no context {context!r} in the kubeconfig")
        self.context = context
        self.known = known


class ExecPlugin(Struct, frozen=True):
    """A resolved ``users[].user.exec`` section, to run again when its credential is refused.

    Attributes:
        command: The program; made absolute when it contains a path separator.
        args: Its arguments.
        env: Extra environment variables, in order (later ones win).
        api_version: The ExecCredential API version it speaks.
        install_hint: What to tell the user when the command is missing.
        cluster: ``spec.cluster`` to send (provideClusterInfo), else None.
        where: The kubeconfig file and user that define it, for error messages.
    """

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    cluster: str | None = None  # JSON text, so the dataclass stays hashable
    where: str = ""


#: The kubeconfig context extension (``extensions: [{name: ..., extension: {ROLE: IMAGE}}]``, kept by
#: kubectl) that names the images of cw's helper pods on that cluster.
HELPER_IMAGES_EXTENSION = "cw-cli.dev/helper-images"
#: The helper pods' roles an extension may name an image for.
HELPER_IMAGE_ROLES = (READER,)
#: The kubeconfig context extension (``extension: true``) saying that the cluster's GPUs are
#: advertised without devices (cw's test cluster): model servers run transformers on CPU there.
SIMULATED_GPUS_EXTENSION = "cw-cli.dev/simulated-gpus"


class Credentials(Struct, frozen=True):
    """Everything needed to talk to one API server as one user.

    Attributes:
        server: The API server's URL, without a trailing slash.
        context: The context's name ("" when not from a kubeconfig).
        namespace: The context's namespace, or None.
        ca_data: PEM bytes of the CAs to trust; None trusts the system's.
        insecure: Skip verifying the server's certificate (insecure-skip-tls-verify).
        tls_server_name: The name to verify the server's certificate against (and send as SNI).
        client_cert: PEM client certificate.
        client_key: PEM client key.
        token: Bearer token.
        username: Basic auth user.
        password: Basic auth password.
        exec_plugin: The plugin that made ``token`` or the client certificate.
        expires: When the plugin's credential expires (epoch seconds), or None.
        proxy: The cluster's ``proxy-url``, an http:// proxy used for every request, whatever
            ``HTTPS_PROXY`` and ``NO_PROXY`` say (kubectl's rule); without one the transport
            takes the environment's proxy (:func:`cw_cli.client.transport.proxy_for`).
        impersonate: The Impersonate-* headers of the user's ``as``, ``as-groups``, ``as-uid`` and
            ``as-user-extra`` (kubectl's), one pair per header line: a group is one line each.
        helper_images: The images cw's helper pods use on this context's cluster, by role
            (``reader``), from the context's extension :data:`HELPER_IMAGES_EXTENSION`: a cluster
            without a registry (the test cluster's real node) names the images it holds.
        simulated_gpus: The context's :data:`SIMULATED_GPUS_EXTENSION` says its GPUs have no devices.
    """

    server: str
    context: str = ""
    namespace: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    token: str | None = None
    username: str | None = None
    password: str | None = None
    exec_plugin: ExecPlugin | None = None
    expires: float | None = None
    proxy: str | None = None
    impersonate: tuple[tuple[str, str], ...] = ()
    helper_images: tuple[tuple[str, str], ...] = ()
    simulated_gpus: bool = False

    #: Fields whose values never appear in a repr (logs and tracebacks).
    _SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset({"ca_data", "client_cert", "client_key", "token", "password"})

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self.__struct_fields__ if name not in self._SECRET_FIELDS
        )
        return f"Credentials({shown})"

    @property
    def authorization(self) -> str | None:
        """The Authorization header these credentials send, if any."""
        if self.token:
            return f"Bearer {self.token}"
        if self.username is not None and self.password is not None:
            pair = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None
