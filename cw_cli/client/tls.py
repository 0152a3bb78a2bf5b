"""The TLS and TCP side of a connection to the API server: the client context (the kubeconfig's CA
and client certificate, the key kept off the disk) and one keep-alive HTTP(S) connection."""

from __future__ import annotations

import http.client
import os
import ssl
from typing import Any

from cw_cli.client.credentials import Credentials, KubeconfigError


def ssl_context(credentials: Credentials) -> ssl.SSLContext:
    """A TLS client context that trusts the credentials' CA and presents their client certificate.

    Raises:
        KubeconfigError: The CA or the client certificate and key are not usable PEM.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif credentials.ca_data:
        try:
            context.load_verify_locations(cadata=credentials.ca_data.decode("latin-1"))
        except (ssl.SSLError, ValueError, TypeError) as exc:  # TypeError: not ASCII (binary, not PEM)
            raise KubeconfigError(f"the certificate authority data is not a PEM certificate ({exc})") from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if credentials.client_cert and credentials.client_key:
        _load_client_cert(context, credentials.client_cert, credentials.client_key)
    return context


def _load_client_cert(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads only files: on Linux an anonymous in-memory file, else a private temp file.

    The memory file keeps the private key off the disk (as kubectl, which reads it from memory)
    and spares importing ``tempfile`` (with shutil, bz2 and lzma: 3 ms of every command).
    """
    pem = cert.rstrip(b"\n") + b"\n" + key
    try:
        if hasattr(os, "memfd_create"):
            try:
                _load_from_memory(context, pem)
                return
            except FileNotFoundError:  # no /proc mounted: the temp file below
                pass
        _load_from_temp_file(context, pem)
    except (ssl.SSLError, ValueError) as exc:
        raise KubeconfigError(f"the client certificate or key is not usable ({exc})") from None


def _load_from_memory(context: ssl.SSLContext, pem: bytes) -> None:
    fd = os.memfd_create("cw-client-cert", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(fd), "wb") as handle:
            handle.write(pem)
        # A callable password: an encrypted key fails instead of prompting on the terminal.
        context.load_cert_chain(f"/proc/self/fd/{fd}", password=_no_password)
    finally:
        os.close(fd)


def _load_from_temp_file(context: ssl.SSLContext, pem: bytes) -> None:
    import tempfile  # here: only where there is no memfd (macOS)

    fd, path = tempfile.mkstemp(prefix="cw-client-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        context.load_cert_chain(path, password=_no_password)
    finally:
        os.unlink(path)


def _no_password() -> bytes:
    raise ValueError("the client key is encrypted")


def _ascii_host(host: str) -> str | bytes:
    """An ASCII host name as bytes, which ``socket`` and ``ssl`` take as they are.

    Given text they run it through the IDNA codec, whose import (with ``stringprep`` and
    ``unicodedata``) costs about as much as the API request of a `cw status`. A non-ASCII
    name still goes through IDNA.
    """
    return host.encode("ascii") if host.isascii() else host


def _create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
    import socket

    # getaddrinfo takes bytes too, though the stubs say str
    return socket.create_connection((_ascii_host(address[0]), address[1]), *args, **kwargs)  # type: ignore[arg-type]


class Connection(http.client.HTTPConnection):
    """One TCP (and TLS) connection; the connect timeout covers the TLS handshake too."""

    def __init__(self, host: str, port: int, timeout: float, tls: ssl.SSLContext | None, server_hostname: str) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = _create_connection
        self._tls = tls
        self._server_hostname = server_hostname

    def connect(self) -> None:
        super().connect()  # TCP, and the proxy's CONNECT tunnel when set_tunnel was called
        if self._tls is not None:
            hostname = _ascii_host(self._server_hostname)
            self.sock = self._tls.wrap_socket(self.sock, server_hostname=hostname)
