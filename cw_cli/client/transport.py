"""A small HTTP(S) client for the API server, on the standard library.

``http.client`` and ``ssl`` load in a fraction of the time of ``urllib3`` and the ``kubernetes``
package. One :class:`Transport` keeps its connections alive between requests (a few, so threads
can share it), sends the credentials of a :class:`~cw_cli.client.kubeconfig.Credentials`, and
re-runs an exec plugin once when the API server answers 401. It goes through an HTTP proxy as
kubectl does (:func:`proxy_for`): the kubeconfig's ``proxy-url``, else ``HTTPS_PROXY`` /
``HTTP_PROXY`` unless ``NO_PROXY`` names the server, and never for a loopback server.
"""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

from cw_cli import __version__
from cw_cli.client.credentials import Credentials, KubeconfigError
from cw_cli.client.exec_plugin import expired, refresh
from cw_cli.client.kubeconfig_values import MAX_NAMED_FILE_BYTES, header_problem
from cw_cli.client.proxy import proxy_address, proxy_for
from cw_cli.client.tls import Connection, ssl_context
from cw_cli.plain_files import NotAPlainFile, read_plain_file

__all__ = ["DEFAULT_TIMEOUT", "IDEMPOTENT", "MAX_IDLE", "Response", "Transport", "TransportError", "proxy_for", "ssl_context"]

#: Methods safe to send again when a kept-alive connection turns out to be closed.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Idle connections kept for reuse; more threads than this open and close their own.
MAX_IDLE = 8
DEFAULT_TIMEOUT: tuple[float, float | None] = (10.0, 30.0)


class TransportError(OSError):
    """The HTTP exchange failed (a broken or garbled answer); an OSError like a socket error."""


class Response:
    """An answer of the API server.

    Attributes:
        status: The HTTP status code.
        headers: The response headers.
    """

    def __init__(self, status: int, headers: Any, data: bytes | None = None, stream: Callable[[int], bytes] | None = None,
                 close: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.status = status
        self.headers = headers
        self._data = data
        self._read1 = stream
        self._close = close

    def read(self) -> bytes:
        """The whole body (read now for a streamed response)."""
        if self._data is None:
            self._data = b"".join(self.stream())
        return self._data

    @property
    def data(self) -> bytes:
        """The whole body, like urllib3's ``data``."""
        return self.read()

    def stream(self, amount: int = 65536) -> Iterator[bytes]:
        """Yield the body as it arrives; closes the response at the end.

        Raises:
            OSError: The connection broke or stayed silent past the read timeout.
        """
        if self._read1 is None:
            if self._data:
                yield self._data
            return
        try:
            while True:
                try:
                    chunk = self._read1(amount)
                except http.client.HTTPException as exc:
                    raise TransportError(f"the answer broke off: {exc!r}") from None
                if not chunk:
                    break
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        """Release the connection (to reuse when the body was read whole, else closed)."""
        close, self._close, self._read1 = self._close, None, None
        if close is not None:
            close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class Transport:
    """Requests to one API server with one set of credentials, over kept-alive connections.

    Args:
        credentials: The server and how to authenticate.
        authorization: Returns the Authorization header for each request, instead of the
            credentials' token or basic auth (the official client's refresh hooks use this).
        proxy_headers: Headers for the proxy's CONNECT request.

    Raises:
        KubeconfigError: The TLS material is not usable, or the proxy (``proxy-url``, else
            ``HTTPS_PROXY`` / ``HTTP_PROXY``, see :func:`proxy_for`) is not an http:// one.
    """

    def __init__(self, credentials: Credentials, authorization: Callable[[], str | None] | None = None,
                 proxy_headers: dict[str, str] | None = None) -> None:  # fmt: skip
        url = urlsplit(credentials.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise KubeconfigError(f"server {credentials.server!r} is not an http(s) URL")
        self.server = credentials.server
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._base_path = url.path.rstrip("/")
        self._credentials = credentials
        self.helper_images = dict(credentials.helper_images)
        self.simulated_gpus = credentials.simulated_gpus
        self._authorization = authorization
        chosen = proxy_for(credentials.server, credentials.proxy)  # the environment is read here, once
        self._proxy = proxy_address(*chosen, proxy_headers) if chosen else None
        self._tls = ssl_context(credentials) if self._https else None
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

        self._user_agent = f"cw/{__version__}"

    @classmethod
    def from_configuration(cls, configuration: Any) -> Transport:
        """A transport with the settings of the official client's ``Configuration``.

        The official kubeconfig loader fills it (the fallback for what :mod:`~cw_cli.client.kubeconfig`
        does not handle); its ``refresh_api_key_hook`` still runs before each request.

        Its ``proxy`` is taken as the kubeconfig's ``proxy-url``; the environment's proxy is chosen
        by :func:`proxy_for`, as on the light path, never the one the official client read itself:
        ``kubernetes.client.Configuration`` (37.0.2) takes ``urllib.request.getproxies()``, where
        ``https_proxy`` wins over ``HTTPS_PROXY``, ``ALL_PROXY`` is a fallback, loopback servers are
        proxied, ``.example.com`` in ``NO_PROXY`` matches example.com itself and ``host:443`` does
        not match a URL without a port, and its ``NO_PROXY`` check also drops a ``proxy-url``. kubectl
        does none of that, and neither does cw on either path. Set ``configuration.proxy = None``
        before loading the kubeconfig so only ``proxy-url`` fills it (that also clears the
        environment's); a proxy the client took from the environment is dropped here as well.
        """

        def read(path: str | None) -> bytes | None:
            if not path:
                return None
            try:  # a FIFO or a device named as a CA or key file would block, or never end
                return read_plain_file(path, MAX_NAMED_FILE_BYTES)
            except NotAPlainFile as exc:
                raise KubeconfigError(f"cannot read {path}, which the kubeconfig names: {exc}") from None

        credentials = Credentials(
            server=str(configuration.host).rstrip("/"),
            ca_data=read(configuration.ssl_ca_cert),
            insecure=not configuration.verify_ssl,
            tls_server_name=getattr(configuration, "tls_server_name", None) or None,
            client_cert=read(configuration.cert_file),
            client_key=read(configuration.key_file),
            # 37.x marks a proxy it read from the environment; older versions read none
            proxy=None if getattr(configuration, "_proxy_from_env", False) else configuration.proxy or None,
        )
        api_key = configuration.api_key or {}

        def authorization() -> str | None:
            if "BearerToken" not in api_key and "authorization" not in api_key:
                return None
            try:  # runs the official loader's refresh hook (an expired exec or OIDC token)
                return configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
            except Exception as exc:  # noqa: BLE001 - its ConfigException, or whatever a provider raises
                raise KubeconfigError(f"cannot renew the credentials: {exc}") from None

        return cls(credentials, authorization, dict(getattr(configuration, "proxy_headers", None) or {}))

    @property
    def credentials(self) -> Credentials:
        """The credentials in use (an exec plugin's refreshed ones after a 401)."""
        return self._credentials

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | dict[str, Any] | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: tuple[float, float | None] | None = None,
        stream: bool = False,
    ) -> Response:
        """Send one request and return its answer, whatever the status.

        Args:
            method: HTTP method.
            path: URL path (the server URL's own path is put in front).
            query: Query parameters.
            body: The encoded body.
            headers: Extra headers.
            timeout: (connect, read) seconds; the read one bounds each wait for data (None: no bound).
            stream: Return before reading the body; the response holds its connection until
                :meth:`Response.close` or the end of :meth:`Response.stream`.

        Raises:
            OSError: The server could not be reached or the answer broke off.
            KubeconfigError: An expired exec credential could not be renewed.
        """
        target = self._base_path + path + (f"?{urlencode(query)}" if query else "")
        credentials = self._credentials
        if expired(credentials):
            credentials = self._refresh(credentials)
        response = self._send(method, target, body, headers, timeout or DEFAULT_TIMEOUT, stream, credentials)
        if response.status == 401 and credentials.exec_plugin is not None:
            try:
                fresh = self._refresh(credentials)
            except KubeconfigError:
                return response  # as kubectl: the 401 stands
            response.close()
            response = self._send(method, target, body, headers, timeout or DEFAULT_TIMEOUT, stream, fresh)
        return response

    def websocket(self, path: str, *, query: list[tuple[str, Any]], subprotocols: tuple[str, ...],
                  timeout: tuple[float, float | None] | None = None) -> Any:  # fmt: skip
        """Open a websocket to the API server (exec, port-forward) as every other request goes:
        the same server, TLS, proxy, credentials and impersonation headers.

        The connection is made here (:meth:`_new_connection`: TCP, the proxy's CONNECT, TLS) and
        handed to websocket-client, which does the upgrade and the framing. An exec plugin's
        credentials are renewed once on a 401, as for plain requests.

        Args:
            path: URL path (the server URL's own path is put in front).
            query: Query parameters (repeated keys allowed: ``command``).
            subprotocols: The channel protocols offered, preferred first.
            timeout: (connect, read) seconds; the read one bounds each wait for a frame.

        Returns:
            A connected ``websocket.WebSocket``; its ``subprotocol`` is the one the server chose.

        Raises:
            OSError: The server could not be reached.
            KubeconfigError: An expired exec credential could not be renewed.
            websocket.WebSocketBadStatusException: The server refused the upgrade (its status and body).
        """
        import websocket  # websocket-client: only the commands that stream load it

        connect_timeout, read_timeout = timeout or DEFAULT_TIMEOUT
        target = self._base_path + path + (f"?{urlencode(query)}" if query else "")
        scheme = "wss" if self._https else "ws"
        url = f"{scheme}://{urlsplit(self.server).netloc.rpartition('@')[2]}{target}"
        credentials = self._credentials
        if expired(credentials):
            credentials = self._refresh(credentials)
        for attempt in (1, 2):
            connection = self._new_connection(connect_timeout)
            connection.connect()
            sock, connection.sock = connection.sock, None  # the websocket owns the socket from here
            headers = [f"{name}: {value}" for name, value in [*self._headers(credentials, None).items(), *credentials.impersonate]]
            socket_ = websocket.WebSocket(skip_utf8_validation=True)
            try:
                socket_.connect(url, socket=sock, header=headers, subprotocols=list(subprotocols),
                                suppress_origin=True, timeout=read_timeout)  # fmt: skip
                sock.settimeout(read_timeout)  # for the frames read straight from the socket too
                return socket_
            except websocket.WebSocketBadStatusException as refused:
                sock.close()
                if refused.status_code != 401 or credentials.exec_plugin is None or attempt == 2:
                    raise
                credentials = self._refresh(credentials)
            except websocket.WebSocketException as exc:
                sock.close()
                raise TransportError(f"the API server's websocket answer is broken: {exc}") from None
            except BaseException:
                sock.close()
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _refresh(self, used: Credentials) -> Credentials:
        """Run the exec plugin again, unless another thread did since ``used`` was taken."""
        with self._lock:
            if self._credentials is not used:
                return self._credentials
            fresh = refresh(used)
            if (fresh.client_cert, fresh.client_key) != (used.client_cert, used.client_key):
                self._tls = ssl_context(fresh)
                idle, self._idle = self._idle, []  # they present the old certificate
                for connection in idle:
                    connection.close()
            self._credentials = fresh
            return fresh

    def _headers(self, credentials: Credentials, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"User-Agent": self._user_agent}
        authorization = self._authorization() if self._authorization else credentials.authorization
        if authorization:
            problem = header_problem(authorization)  # the official client's token is checked only here
            if problem is None and not authorization.isascii():  # a bearer token and base64 are ASCII
                problem = "holds a character that is not ASCII"
            if problem:
                raise KubeconfigError(f"the kubeconfig's credentials give an Authorization header that {problem}; "
                                      "cw does not send it", hint="check the token the kubeconfig's user gives")  # fmt: skip
            headers["Authorization"] = authorization
        headers.update(extra or {})
        return headers

    def _send(self, method: str, target: str, body: bytes | None, extra: dict[str, str] | None,
              timeout: tuple[float, float | None], stream: bool, credentials: Credentials) -> Response:  # fmt: skip
        headers = self._headers(credentials, extra)
        connection, reused = self._acquire(timeout[0])
        try:
            try:
                answer = self._exchange(connection, method, target, body, headers, timeout, credentials.impersonate)
            except (ConnectionError, http.client.BadStatusLine, ssl.SSLEOFError):
                connection.close()
                if not reused or method not in IDEMPOTENT:
                    raise
                # The server closed the kept-alive connection meanwhile: once more on a new one.
                connection = self._new_connection(timeout[0])
                answer = self._exchange(connection, method, target, body, headers, timeout, credentials.impersonate)
            if stream:
                return Response(answer.status, answer.msg, stream=answer.read1, close=lambda: self._finish(connection, answer))
            data = answer.read()
        except http.client.HTTPException as exc:
            connection.close()
            raise TransportError(f"bad answer from {self.server}: {exc!r}") from None
        except BaseException:
            connection.close()
            raise
        self._finish(connection, answer)
        return Response(answer.status, answer.msg, data=data)

    def _exchange(self, connection: Connection, method: str, target: str, body: bytes | None,
                  headers: dict[str, str], timeout: tuple[float, float | None],
                  repeated: tuple[tuple[str, str], ...] = ()) -> http.client.HTTPResponse:  # fmt: skip
        if connection.sock is None:
            connection.timeout = timeout[0]
            connection.connect()
        connection.sock.settimeout(timeout[1])
        if not repeated:
            connection.request(method, target, body=body, headers=headers)
            return connection.getresponse()
        # Header lines a dict cannot hold (one Impersonate-Group line per group), in the order given.
        connection.putrequest(method, target)
        for name, value in [*headers.items(), *repeated]:
            connection.putheader(name, value.encode())  # UTF-8, as kubectl sends a user or group name
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        return connection.getresponse()

    def _acquire(self, connect_timeout: float) -> tuple[Connection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new_connection(connect_timeout), False

    def _new_connection(self, connect_timeout: float) -> Connection:
        server_hostname = self._credentials.tls_server_name or self._host
        if self._proxy is None:
            return Connection(self._host, self._port, connect_timeout, self._tls, server_hostname)
        host, port, headers = self._proxy
        connection = Connection(host, port, connect_timeout, self._tls, server_hostname)
        connection.set_tunnel(self._host, self._port, headers=headers)
        return connection

    def _finish(self, connection: Connection, answer: http.client.HTTPResponse) -> None:
        """Keep the connection for the next request if its answer was read whole."""
        whole = answer.isclosed() or (not answer.chunked and answer.length == 0)
        if whole and not answer.will_close and connection.sock is not None:
            answer.close()  # http.client sends nothing more on a connection with an open answer
            with self._lock:
                if len(self._idle) < MAX_IDLE:
                    self._idle.append(connection)
                    return
        connection.close()
