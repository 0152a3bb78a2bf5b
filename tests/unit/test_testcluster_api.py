"""The test cluster's admin client (cw_cli/testcluster/api.py) over a fake transport: what a
create does with 201, 409 and refusals, what the readiness probes make of errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cw_cli.client.connection import Kube
from cw_cli.client.transport import Response
from cw_cli.testcluster import api
from cw_cli.testcluster.errors import StartError

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cw-gpu-0"}}


class FakeTransport:
    """Answers requests from a list of (status, body) or exceptions, and records them."""

    server = "https://127.0.0.1:6443"

    def __init__(self, *answers: tuple[int, Any] | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        self.sent.append((method, path, kwargs.get("timeout")))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return Response(status, {}, data=data)

    def close(self) -> None:
        pass


def kube(*answers: tuple[int, Any] | Exception) -> Kube:
    return Kube(FakeTransport(*answers), "default")  # type: ignore[arg-type]


def test_create_posts_once_when_created():
    client = kube((201, NODE))
    api.create(client, api.NODES, NODE)
    assert [(m, p) for m, p, _ in client.transport.sent] == [("POST", "/api/v1/nodes")]


def test_create_takes_an_existing_object_as_done():
    client = kube((409, {"message": "nodes \"cw-gpu-0\" already exists"}))
    api.create(client, api.NODES, NODE)
    assert len(client.transport.sent) == 1


def test_create_tries_again_after_a_dropped_connection():
    client = kube(ConnectionResetError("closed"), (201, NODE))
    api.create(client, api.NODES, NODE, pause_s=0)
    assert len(client.transport.sent) == 2


def test_create_refused_is_a_start_error_naming_the_object():
    client = kube((422, {"message": "bad name"}), (422, {"message": "bad name"}))
    with pytest.raises(StartError, match="create Node cw-gpu-0 failed: .*bad name"):
        api.create(client, api.NODES, NODE, pause_s=0)


def test_create_retries_while_a_webhook_is_not_ready():
    refused = (500, {"message": "failed calling webhook"})
    client = kube(refused, refused, (201, NODE))
    api.create(client, api.NODES, NODE, attempts=5, pause_s=0)
    assert len(client.transport.sent) == 3


def test_ready_is_false_on_errors_and_uses_a_short_timeout():
    assert api.ready(kube((200, b"ok")))
    assert not api.ready(kube((500, b"[-]etcd failed")))
    assert not api.ready(kube(ConnectionRefusedError()))
    client = kube((200, b"ok"))
    api.ready(client)
    assert client.transport.sent == [("GET", "/readyz", api.PROBE_TIMEOUT)]


def test_exists_is_false_only_for_not_found():
    assert api.exists(kube((200, {"kind": "ServiceAccount"})), "/api/v1/namespaces/default/serviceaccounts/default")
    assert not api.exists(kube((404, {"message": "not found"})), "/x")
    with pytest.raises(Exception):  # noqa: B017 - any other failure is the caller's to judge
        api.exists(kube((403, {"message": "forbidden"})), "/x")


def test_established_reads_the_crd_condition():
    crd = {"status": {"conditions": [{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]}}
    assert api.established(kube((200, crd)), "logs.kwok.x-k8s.io")
    assert not api.established(kube((200, {"status": {}})), "logs.kwok.x-k8s.io")


def test_nodes_lists_items():
    assert api.nodes(kube((200, {"items": [NODE]}))) == [NODE]
    assert api.nodes(kube((200, {"items": None}))) == []


# --------------------------------------------------------------------------- real TLS, on loopback


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from cw_cli.testcluster.pki import generate_pki

    return generate_pki(tmp_path_factory.mktemp("pki"))


def test_admin_client_presents_the_admin_certificate_and_trusts_the_ca(pki):
    client = api.admin_client("https://127.0.0.1:6443", pki)
    credentials = client.transport.credentials
    assert client.namespace == "default"
    assert credentials.ca_data == pki.ca.cert.read_bytes()
    assert (credentials.client_cert, credentials.client_key) == (pki.admin.cert.read_bytes(), pki.admin.key.read_bytes())
    assert not credentials.insecure


@pytest.fixture
def webhook_server(pki):
    """An HTTPS server on 127.0.0.1 with the cluster's loopback serving certificate: /known answers."""
    import http.server
    import ssl
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200 if self.path == "/known" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.kwok_serving.cert, pki.kwok_serving.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _configurations(port: int, *paths: str) -> list[dict[str, Any]]:
    return [{"webhooks": [{"clientConfig": {"url": f"https://127.0.0.1:{port}{path}"}} for path in paths]}]


def test_webhooks_served_over_tls_with_the_cluster_ca(pki, webhook_server):
    from cw_cli.testcluster.controllers import webhooks_served

    assert webhooks_served(_configurations(webhook_server, "/known"), pki.ca.cert)
    assert not webhooks_served(_configurations(webhook_server, "/known", "/missing"), pki.ca.cert)


def test_webhooks_not_served_when_nothing_listens(pki):
    import socket

    from cw_cli.testcluster.controllers import http_ok, webhooks_served

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert not webhooks_served(_configurations(port, "/known"), pki.ca.cert)
    assert not http_ok(f"http://127.0.0.1:{port}/readyz")


def test_webhooks_checked_against_the_given_ca(webhook_server, tmp_path):
    from cw_cli.testcluster.controllers import webhooks_served
    from cw_cli.testcluster.pki import generate_pki

    other = generate_pki(tmp_path / "other")
    assert not webhooks_served(_configurations(webhook_server, "/known"), other.ca.cert)
