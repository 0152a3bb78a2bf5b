"""cw's two client paths give the same answers against the real API server, proxies included.

The light path reads the kubeconfig itself (cw_cli.client.kubeconfig); the fallback lets the official
``kubernetes`` client load the same kubeconfig (``official.connect_with_official_client``, what
``connect()`` does for an ``auth-provider``). Both send through cw's transport, which picks a proxy
as kubectl does: the kubeconfig's ``proxy-url``, else ``HTTPS_PROXY`` unless ``NO_PROXY`` names the
server, and never for a loopback server.

kubectl never proxies a loopback server, so the API server is reached here at this machine's own
non-loopback address: a small TCP forwarder on that address passes connections on to the API
server (which listens on 127.0.0.1), and ``tls-server-name`` names the host its certificate was
issued for. The proxy is a tiny CONNECT proxy in a thread of the test, counting its tunnels.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from test_cw_end_to_end import run_cw

from cw_cli.client import connection, official
from cw_cli.client import kubeconfig as kc
from cw_cli.client.connection import ClusterTarget, Kube
from cw_cli.errors import Conflict, NotFound

PATHS = ["light", "official"]
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy")


def _pipe(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes one way until either side closes."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _splice(one: socket.socket, other: socket.socket) -> None:
    threading.Thread(target=_pipe, args=(one, other), daemon=True).start()
    threading.Thread(target=_pipe, args=(other, one), daemon=True).start()


class Forwarder:
    """Listens on ``host`` and passes every connection on to ``target``, counting them."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.listener = socket.create_server((host, 0))
        self.address = f"{host}:{self.listener.getsockname()[1]}"
        self.port = self.listener.getsockname()[1]
        self.target = target
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            _splice(client, upstream)

    def close(self) -> None:
        self.listener.close()


class ConnectProxy:
    """An HTTP proxy that only does CONNECT, recording each tunnel's target and headers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.tunnels: list[str] = []
        self.headers: list[dict[str, str]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.tunnels.append(target)
        self.headers.append({key.strip().lower(): value.strip() for key, _, value in (line.partition(":") for line in lines[1:])})
        host, _, port = target.rpartition(":")
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        upstream.settimeout(None)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        _splice(client, upstream)

    def close(self) -> None:
        self.listener.close()


def non_loopback_address() -> str | None:
    """This machine's own IPv4 address on its default route, else any non-loopback one of its name."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # a UDP "connect" sends nothing: it only picks the route
        address = probe.getsockname()[0]
        if not address.startswith("127.") and address != "0.0.0.0":
            return address
    except OSError:
        pass
    finally:
        probe.close()
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        return None
    return next((info[4][0] for info in infos if not info[4][0].startswith("127.")), None)


@pytest.fixture(scope="module")
def admin(kube_cluster) -> kc.Credentials:
    return kc.load(str(kube_cluster.kubeconfig), kube_cluster.context)


@pytest.fixture(scope="module")
def forwarder(admin) -> Iterator[Forwarder]:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address: kubectl (and cw) never proxy a loopback API server")
    server = urlsplit(admin.server)
    forward = Forwarder(address, (server.hostname or "127.0.0.1", server.port or 443))
    yield forward
    forward.close()


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    server = ConnectProxy()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch):
    """The machine's own proxy settings stay out; each test sets what it checks."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def write_kubeconfig(path: Path, admin: kc.Credentials, server: str, namespace: str, **cluster: Any) -> Path:
    """The admin's client certificate for ``server``, its certificate checked as the real server's name."""
    body = {
        "server": server, "certificate-authority-data": base64.b64encode(admin.ca_data or b"").decode(),
        "tls-server-name": admin.tls_server_name or urlsplit(admin.server).hostname, **cluster,
    }  # fmt: skip
    user = {"client-certificate-data": base64.b64encode(admin.client_cert or b"").decode(),
            "client-key-data": base64.b64encode(admin.client_key or b"").decode()}  # fmt: skip
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": body}],
        "users": [{"name": "admin", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin", "namespace": namespace}}],
    }))  # fmt: skip
    return path


def open_kube(path: str, kubeconfig: Path, monkeypatch) -> Kube:
    """A client for ``kubeconfig`` through one of the two paths, checked to be that path."""
    target = ClusterTarget(kubeconfig=str(kubeconfig))
    if path == "official":
        transport, namespace = official.connect_with_official_client(target)
        assert transport._authorization is not None  # the official loader's Configuration drives it
        return Kube(transport, namespace or "default")

    def refuse(target: ClusterTarget) -> None:
        raise AssertionError("connect() fell back to the official client")

    with monkeypatch.context() as patch:
        patch.setattr(official, "connect_with_official_client", refuse)
        kube = connection.connect(target)
    assert kube.transport._authorization is None  # cw's own loader
    return kube


@pytest.fixture
def via_address(admin, forwarder, namespace, tmp_path) -> Path:
    """A kubeconfig reaching the API server at this machine's non-loopback address."""
    if admin.client_cert is None or admin.client_key is None:
        pytest.skip("the test cluster's kubeconfig has no client certificate to reuse")
    return write_kubeconfig(tmp_path / "via-address", admin, f"https://{forwarder.address}", namespace)


def config_map(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": name}}


@pytest.mark.parametrize("path", PATHS)
def test_get_list_create_delete_and_errors_are_the_same(path, via_address, forwarder, namespace, monkeypatch):
    kube = open_kube(path, via_address, monkeypatch)
    before = forwarder.connections
    try:
        assert kube.namespace == namespace
        created = kube.create(config_map("one", tier="a"))
        assert created["metadata"]["uid"] and created["data"] == {"k": "one"}
        kube.create(config_map("two", tier="b"))
        got = kube.get("ConfigMap", "one")
        assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
        assert kube.get("ConfigMap", "missing") is None
        with pytest.raises(NotFound, match="not found"):  # the 404 itself, as an error
            kube.request("GET", kube.path("ConfigMap", "missing"), what="read ConfigMap missing")
        with pytest.raises(Conflict, match="already exists"):
            kube.create(config_map("one", tier="a"))
        assert [item["metadata"]["name"] for item in kube.list("ConfigMap", label_selector="tier=a")] == ["one"]
        metadata = kube.list_metadata("ConfigMap", label_selector="tier in (a,b)")
        assert sorted(item["metadata"]["name"] for item in metadata) == ["one", "two"]
        assert {item["kind"] for item in metadata} == {"PartialObjectMetadata"} and "data" not in metadata[0]
        assert kube.delete("ConfigMap", "one") is True
        assert kube.delete("ConfigMap", "one") is False  # already gone: a 404 answered as False
        assert kube.get("ConfigMap", "one") is None
    finally:
        kube.close()
    assert forwarder.connections > before  # it went to the non-loopback address


@pytest.mark.parametrize("path", PATHS)
def test_https_proxy_is_used_unless_no_proxy_names_the_server(path, via_address, forwarder, proxy, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("http://", "http://cw:s%40cret@"))
    kube = open_kube(path, via_address, monkeypatch)
    try:
        assert kube.list("ConfigMap") is not None
    finally:
        kube.close()
    assert proxy.tunnels and set(proxy.tunnels) == {forwarder.address}
    assert proxy.headers[0].get("proxy-authorization") == "Basic " + base64.b64encode(b"cw:s@cret").decode()

    host, port = forwarder.address.rsplit(":", 1)
    for no_proxy in (host, f"{host}/32", f"example.invalid, {host}:{port}", ".invalid,*"):
        monkeypatch.setenv("NO_PROXY", no_proxy)
        tunnels, connections = len(proxy.tunnels), forwarder.connections
        kube = open_kube(path, via_address, monkeypatch)
        try:
            assert kube.list("ConfigMap") is not None
        finally:
            kube.close()
        assert len(proxy.tunnels) == tunnels, f"NO_PROXY={no_proxy} was not honoured"
        assert forwarder.connections > connections  # direct, to the same address

    monkeypatch.setenv("NO_PROXY", f"{host}:1,example.invalid")  # names neither this port nor this host
    kube = open_kube(path, via_address, monkeypatch)
    try:
        kube.list("ConfigMap")
    finally:
        kube.close()
    assert len(proxy.tunnels) > tunnels


@pytest.mark.parametrize("path", PATHS)
def test_a_loopback_server_is_never_proxied_but_a_proxy_url_always_is(path, admin, namespace, proxy, monkeypatch, tmp_path):
    if not (urlsplit(admin.server).hostname or "").startswith("127."):
        pytest.skip(f"the test cluster's API server {admin.server} is not on a loopback address")
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    loopback = write_kubeconfig(tmp_path / "loopback", admin, admin.server, namespace)
    kube = open_kube(path, loopback, monkeypatch)
    try:
        assert kube.list("ConfigMap") is not None
    finally:
        kube.close()
    assert proxy.tunnels == []

    # kubectl's proxy-url wins over the environment: used for every request, loopback and NO_PROXY or not
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # nothing listens: it must not be used
    monkeypatch.setenv("NO_PROXY", "*")
    pinned = write_kubeconfig(tmp_path / "proxy-url", admin, admin.server, namespace, **{"proxy-url": proxy.url})
    kube = open_kube(path, pinned, monkeypatch)
    try:
        assert kube.list("ConfigMap") is not None
    finally:
        kube.close()
    assert proxy.tunnels and set(proxy.tunnels) == {urlsplit(admin.server).netloc}


@pytest.fixture
def sa_token(via_address, namespace, monkeypatch) -> str:
    """A token of a ServiceAccount that may edit the test namespace (the TokenRequest API)."""
    kube = open_kube("light", via_address, monkeypatch)
    try:
        kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "cw-paths"}})
        kube.create({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "cw-paths"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "cw-paths", "namespace": namespace}],
        })  # fmt: skip
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
        answer = kube.request("POST", kube.path("ServiceAccount", "cw-paths") + "/token", body=request)
    finally:
        kube.close()
    return str(answer["status"]["token"])


@pytest.mark.parametrize("path", PATHS)
def test_cw_list_goes_through_https_proxy(path, via_address, forwarder, proxy, namespace, cw_env, sa_token, tmp_path):
    """The real CLI in its own process: the light path with the admin's certificate, the fallback
    with an ``auth-provider`` user (which makes ``connect()`` take it) holding a ServiceAccount token."""
    config = yaml.safe_load(via_address.read_text())
    if path == "official":  # the official client sends an unexpired OIDC id-token as it is; a SA token is a JWT
        config["users"][0]["user"] = {
            "auth-provider": {"name": "oidc", "config": {"id-token": sa_token, "idp-issuer-url": "https://idp.invalid"}}
        }
    kubeconfig = tmp_path / f"{path}.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    with pytest.raises(kc.Unsupported) if path == "official" else contextlib.nullcontext():
        kc.load(str(kubeconfig))  # the CLI takes the path this test is about
    env = {key: value for key, value in cw_env.items() if key not in PROXY_VARIABLES}
    env.update(KUBECONFIG=str(kubeconfig), HTTPS_PROXY=proxy.url)
    listed = run_cw(env, "list", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    assert proxy.tunnels and set(proxy.tunnels) == {forwarder.address}

    tunnels, connections = len(proxy.tunnels), forwarder.connections
    listed = run_cw({**env, "NO_PROXY": forwarder.address.rsplit(":", 1)[0]}, "list", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    assert len(proxy.tunnels) == tunnels and forwarder.connections > connections
