"""cw's standard-library transport (cw_cli.client.transport) against the real API server.

The kubeconfigs here are written by the tests: the cluster's own (client certificate), a
ServiceAccount token from the TokenRequest API (as ``token``, ``tokenFile``, an exec plugin, and
an ``auth-provider`` only the official client handles), a wrong CA, a wrong TLS server name.
The last tests run the transport against a tiny local HTTP server, to drop kept-alive
connections on purpose.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from cw_cli.client import kubeconfig as kc
from cw_cli.client import official
from cw_cli.client.connection import ClusterTarget, Kube, connect
from cw_cli.client.transport import Transport
from cw_cli.errors import ClusterUnreachable, Conflict, Forbidden, NotFound

SA = "cw-light"
OFFICIAL_FALLBACK = official.connect_with_official_client


@pytest.fixture(scope="module")
def admin_credentials(kube_cluster) -> kc.Credentials:
    return kc.load(str(kube_cluster.kubeconfig), kube_cluster.context)


@pytest.fixture
def no_fallback(monkeypatch):
    """Fail the test if connect() uses the official client."""

    def refuse(target):
        raise AssertionError("connect() fell back to the official client")

    monkeypatch.setattr(official, "connect_with_official_client", refuse)


@pytest.fixture
def kube(kube_cluster, namespace, no_fallback) -> Kube:
    kube = connect(ClusterTarget(context=kube_cluster.context, namespace=namespace, kubeconfig=str(kube_cluster.kubeconfig)))
    yield kube
    kube.close()


def write_kubeconfig(path: Path, admin: kc.Credentials, user: dict[str, Any], **cluster: Any) -> Path:
    """A kubeconfig for the test cluster with the given user (and cluster fields over the defaults)."""
    body = {"server": admin.server, "certificate-authority-data": base64.b64encode(admin.ca_data).decode(), **cluster}
    body = {key: value for key, value in body.items() if value is not None}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": body}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": "default"}}],
    }))  # fmt: skip
    return path


def connect_to(path: Path, namespace: str) -> Kube:
    return connect(ClusterTarget(namespace=namespace, kubeconfig=str(path)))


def whoami(kube: Kube) -> str:
    """The user name the API server authenticated the request as."""
    review = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})  # fmt: skip
    return review["status"]["userInfo"]["username"]


@pytest.fixture
def sa_token(kube) -> str:
    """A token of ServiceAccount cw-light, which may edit the test namespace (TokenRequest API)."""
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA}})
    kube.create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": SA},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": kube.namespace}],
    })  # fmt: skip
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    return kube.request("POST", kube.path("ServiceAccount", SA) + "/token", body=request, what="request a token")["status"]["token"]


def sa_name(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{SA}"


# --- the cluster's own kubeconfig (client certificate) ---------------------------------------


def test_the_cluster_kubeconfig_resolves_like_the_official_client(kube_cluster, admin_credentials):
    configuration = client.Configuration()
    from kubernetes import config

    config.load_kube_config(config_file=str(kube_cluster.kubeconfig), context=kube_cluster.context,
                            client_configuration=configuration, persist_config=False)  # fmt: skip
    assert admin_credentials.server == configuration.host
    assert admin_credentials.ca_data == Path(configuration.ssl_ca_cert).read_bytes()
    assert admin_credentials.client_cert == Path(configuration.cert_file).read_bytes()
    assert admin_credentials.client_key == Path(configuration.key_file).read_bytes()
    assert admin_credentials.insecure is (not configuration.verify_ssl)


def _whoami(credentials: kc.Credentials) -> str:
    kube = Kube(Transport(credentials), namespace="default")
    try:
        return whoami(kube)
    finally:
        kube.close()


def test_a_client_certificate_is_read_from_memory_and_never_written_to_disk(admin_credentials, monkeypatch, tmp_path):
    import tempfile

    from cw_cli.client import tls

    def no_file(*args):
        raise AssertionError("the client key was written to a temp file")

    monkeypatch.setattr(tls, "_load_from_temp_file", no_file)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    user = _whoami(admin_credentials)
    assert user and user != "system:anonymous"  # the certificate, not anonymous access, authenticated
    assert list(tmp_path.iterdir()) == []


def test_without_memfd_the_client_certificate_goes_through_a_private_temp_file_removed_at_once(
    admin_credentials, monkeypatch, tmp_path
):
    import tempfile

    from cw_cli.client import tls

    from_memory = _whoami(admin_credentials)
    monkeypatch.delattr(tls.os, "memfd_create")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    modes: list[int] = []
    real_load = tls.ssl.SSLContext.load_cert_chain

    def spy(context, path, *args, **kwargs):
        modes.append(stat.S_IMODE(Path(path).stat().st_mode))
        return real_load(context, path, *args, **kwargs)

    monkeypatch.setattr(tls.ssl.SSLContext, "load_cert_chain", spy)
    assert _whoami(admin_credentials) == from_memory
    assert modes == [0o600]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("memfd", [True, False], ids=["memory", "temp-file"])
def test_a_client_key_that_is_not_a_key_is_a_kubeconfig_error(admin_credentials, monkeypatch, memfd):
    from msgspec.structs import replace

    from cw_cli.client.transport import ssl_context

    if not memfd:
        monkeypatch.delattr("os.memfd_create")
    broken = replace(admin_credentials, client_key=b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    with pytest.raises(kc.KubeconfigError, match="client certificate or key is not usable"):
        ssl_context(broken)


def test_create_get_list_apply_patch_delete(kube, kube_api, namespace):
    core = client.CoreV1Api(kube_api)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "light", "labels": {"cw-test": "light"}}, "data": {"a": "1"}}
    created = kube.create(manifest)
    assert created["metadata"]["uid"] and core.read_namespaced_config_map("light", namespace).data == {"a": "1"}
    with pytest.raises(Conflict):
        kube.create(manifest)
    assert kube.get("ConfigMap", "light")["data"] == {"a": "1"} and kube.get("ConfigMap", "nope") is None
    assert [m["metadata"]["name"] for m in kube.list("ConfigMap", label_selector="cw-test=light")] == ["light"]
    metadata = kube.list_metadata("ConfigMap", label_selector="cw-test=light")
    assert [(m["kind"], m["metadata"]["name"]) for m in metadata] == [("PartialObjectMetadata", "light")]
    assert "data" not in metadata[0]
    kube.apply({**manifest, "data": {"a": "2", "b": "3"}})
    kube.merge_patch("ConfigMap", "light", {"data": {"b": None}})
    assert core.read_namespaced_config_map("light", namespace).data == {"a": "2"}
    dry = kube.create({**manifest, "metadata": {"name": "dry"}}, dry_run=True)
    assert dry["metadata"]["name"] == "dry" and kube.get("ConfigMap", "dry") is None
    with pytest.raises(Conflict):  # a UID precondition that no longer holds
        kube.delete("ConfigMap", "light", uid="00000000-0000-0000-0000-000000000000")
    assert kube.delete("ConfigMap", "light", uid=created["metadata"]["uid"]) is True
    assert kube.delete("ConfigMap", "light") is False
    with pytest.raises(NotFound):
        kube.request("GET", kube.path("ConfigMap", "light"))
    assert kube.serves("/apis/batch/v1") and not kube.serves("/apis/nope.example.com/v1")


def test_one_connection_is_kept_alive_across_requests(kube, monkeypatch):
    opened = []
    new_connection = Transport._new_connection

    def counting(self, timeout):
        opened.append(timeout)
        return new_connection(self, timeout)

    monkeypatch.setattr(Transport, "_new_connection", counting)
    kube.close()
    for _ in range(5):
        kube.list("ConfigMap")
        kube.get("ServiceAccount", "default")
    assert len(opened) == 1


def test_pod_logs_are_read_and_followed_with_an_idle_timeout(kube, kube_cluster, namespace, wait_for, tmp_path):
    if not kube_cluster.local:
        pytest.skip("needs kwok on this machine to read the log file")
    kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "streamer"},
                 "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}})  # fmt: skip
    log = tmp_path / "main.log"
    log.write_text("2026-01-01T00:00:00.000000000Z stdout F step 1 loss 2.0\n")
    kube.request("POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{namespace}/logs", body={
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": "streamer"},
        "spec": {"logs": [{"containers": ["main"], "logsFile": str(log), "follow": True}]},
    })  # fmt: skip
    wait_for(lambda: (kube.get("Pod", "streamer").get("status") or {}).get("phase") == "Running", 30, what="pod running")
    path = f"/api/v1/namespaces/{namespace}/pods/streamer/log"
    wait_for(lambda: "step 1 loss 2.0" in kube.raw("GET", path).read().decode(), 30, what="own log file served")
    assert list(kube.stream_lines(path, {"container": "main"}, what="read")) == ["step 1 loss 2.0"]

    def append_later():
        time.sleep(1.5)
        with log.open("a") as handle:
            handle.write("2026-01-01T00:00:01.000000000Z stdout F step 2 loss 1.5\n")

    writer = threading.Thread(target=append_later)
    writer.start()
    started = time.monotonic()
    lines = list(kube.stream_lines(path, {"container": "main", "follow": "true"}, what="follow", idle_timeout=4))
    writer.join()
    # The stream stays open (kwok follows the file) until 4 s pass without a line: then it ends quietly.
    assert lines == ["step 1 loss 2.0", "step 2 loss 1.5"]
    assert 5 <= time.monotonic() - started < 20
    assert kube.get("Pod", "streamer") is not None  # the connection pool still works after a cut stream


# --- tokens, exec plugins, errors --------------------------------------------------------------


def test_a_service_account_token_authenticates(admin_credentials, sa_token, namespace, tmp_path, no_fallback):
    kube = connect_to(write_kubeconfig(tmp_path / "token", admin_credentials, {"token": sa_token}), namespace)
    assert whoami(kube) == sa_name(namespace)
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "by-token"}})
    assert [m["metadata"]["name"] for m in kube.list_metadata("ConfigMap") if m["metadata"]["name"] == "by-token"] == ["by-token"]
    with pytest.raises(Forbidden, match="forbidden"):  # 403: the ServiceAccount may not list nodes
        kube.list("Node")
    (tmp_path / "token-file").write_text(sa_token + "\n")
    from_file = connect_to(write_kubeconfig(tmp_path / "token-file.yaml", admin_credentials, {"tokenFile": "token-file"}), namespace)
    assert whoami(from_file) == sa_name(namespace)


def test_a_bad_token_is_401_not_authenticated(admin_credentials, namespace, tmp_path, no_fallback):
    kube = connect_to(write_kubeconfig(tmp_path / "bad", admin_credentials, {"token": "not-a-token"}), namespace)
    with pytest.raises(Forbidden, match="not authenticated") as caught:
        kube.list("ConfigMap")
    assert caught.value.exit_code == 7


PLUGIN = """#!{python}
import json, os
state = {state!r}
calls = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(calls + 1))
outputs = json.loads({outputs!r})
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["spec"]["interactive"] is False
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": outputs[min(calls, len(outputs) - 1)]}}))
"""


def exec_plugin(directory: Path, *outputs: dict[str, Any]) -> tuple[Path, Path]:
    """A plugin that prints ``outputs[n]`` on its n-th run (the last one after), and its run counter."""
    plugin, state = directory / "plugin.py", directory / "plugin-runs"
    plugin.write_text(PLUGIN.format(python=sys.executable, state=str(state), outputs=json.dumps(outputs)))
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    return plugin, state


def exec_user(plugin: Path, api_version: str = "client.authentication.k8s.io/v1") -> dict[str, Any]:
    return {"exec": {"apiVersion": api_version, "command": f"./{plugin.name}", "interactiveMode": "Never"}}


def test_an_exec_plugin_token_authenticates(admin_credentials, sa_token, namespace, tmp_path, no_fallback):
    plugin, runs = exec_plugin(tmp_path, {"token": sa_token})
    kube = connect_to(write_kubeconfig(tmp_path / "exec", admin_credentials, exec_user(plugin)), namespace)
    assert whoami(kube) == sa_name(namespace) and kube.list("ConfigMap") is not None
    assert runs.read_text() == "1"  # run once, at connect


def test_an_exec_plugin_is_run_again_after_a_401(admin_credentials, sa_token, namespace, tmp_path, no_fallback):
    plugin, runs = exec_plugin(tmp_path, {"token": "stale"}, {"token": sa_token})
    kube = connect_to(write_kubeconfig(tmp_path / "exec", admin_credentials, exec_user(plugin)), namespace)
    assert whoami(kube) == sa_name(namespace)
    assert runs.read_text() == "2" and kube.transport.credentials.token == sa_token


def test_an_exec_plugin_that_keeps_failing_gets_one_retry(admin_credentials, namespace, tmp_path, no_fallback):
    plugin, runs = exec_plugin(tmp_path, {"token": "stale"})
    kube = connect_to(write_kubeconfig(tmp_path / "exec", admin_credentials, exec_user(plugin)), namespace)
    with pytest.raises(Forbidden, match="not authenticated"):
        kube.list("ConfigMap")
    assert runs.read_text() == "2"


def test_an_expired_exec_credential_is_renewed_before_the_request(admin_credentials, sa_token, namespace, tmp_path, no_fallback):
    past = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plugin, runs = exec_plugin(tmp_path, {"token": sa_token, "expirationTimestamp": past}, {"token": sa_token})
    kube = connect_to(write_kubeconfig(tmp_path / "exec", admin_credentials, exec_user(plugin)), namespace)
    assert whoami(kube) == sa_name(namespace) and runs.read_text() == "2"


def test_an_exec_plugin_client_certificate_authenticates(admin_credentials, namespace, tmp_path, no_fallback):
    plugin, _ = exec_plugin(tmp_path, {"clientCertificateData": admin_credentials.client_cert.decode(),
                                       "clientKeyData": admin_credentials.client_key.decode()})  # fmt: skip
    path = write_kubeconfig(tmp_path / "exec", admin_credentials, exec_user(plugin, "client.authentication.k8s.io/v1beta1"))
    admin = connect(ClusterTarget(namespace=namespace, kubeconfig=str(write_kubeconfig(
        tmp_path / "admin", admin_credentials, {"client-certificate-data": base64.b64encode(admin_credentials.client_cert).decode(),
                                                "client-key-data": base64.b64encode(admin_credentials.client_key).decode()}))))  # fmt: skip
    assert whoami(connect_to(path, namespace)) == whoami(admin)


def self_signed_ca() -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not-the-cluster-ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM)


def test_a_wrong_ca_or_server_name_is_cluster_unreachable(admin_credentials, sa_token, namespace, tmp_path, no_fallback):
    wrong_ca = base64.b64encode(self_signed_ca()).decode()
    user = {"token": sa_token}
    for name, cluster in [("wrong-ca", {"certificate-authority-data": wrong_ca}), ("wrong-name", {"tls-server-name": "wrong.example.com"})]:
        kube = connect_to(write_kubeconfig(tmp_path / name, admin_credentials, user, **cluster), namespace)
        with pytest.raises(ClusterUnreachable, match="cannot reach the API server") as caught:
            kube.list("ConfigMap")
        assert "CERTIFICATE_VERIFY_FAILED" in (caught.value.detail or ""), caught.value.detail
    # The serving certificate's other names, and no verification at all, do work.
    for name, cluster in [("sni", {"tls-server-name": "kubernetes.default"}),
                          ("insecure", {"certificate-authority-data": None, "insecure-skip-tls-verify": True})]:  # fmt: skip
        assert whoami(connect_to(write_kubeconfig(tmp_path / name, admin_credentials, user, **cluster), namespace)) == sa_name(namespace)


def test_an_ascii_server_name_reaches_the_api_server_without_the_idna_codec(admin_credentials, sa_token, namespace, tmp_path):
    """socket and ssl run text host names through the IDNA codec, whose import costs about what a
    whole `cw status` request does; an ASCII name is passed as bytes, by IP and by DNS name alike."""
    import subprocess

    port = admin_credentials.server.rsplit(":", 1)[1]
    for name, server in [("ip", f"https://127.0.0.1:{port}"), ("dns", f"https://localhost:{port}")]:
        path = write_kubeconfig(tmp_path / name, admin_credentials, {"token": sa_token}, server=server,
                                **({"tls-server-name": "kubernetes.default"} if name == "dns" else {}))  # fmt: skip
        probe = (
            "import sys; from cw_cli.client.connection import ClusterTarget, connect; "
            f"kube = connect(ClusterTarget(namespace={namespace!r}, kubeconfig={str(path)!r})); "
            "kube.list('ConfigMap'); print(sorted(m for m in sys.modules if 'idna' in m))"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]", f"{name}: {done.stdout}"


def test_an_auth_provider_falls_back_to_the_official_client_and_works(admin_credentials, sa_token, namespace, tmp_path, monkeypatch):
    fallbacks = []
    monkeypatch.setattr(official, "connect_with_official_client", lambda target: fallbacks.append(target) or OFFICIAL_FALLBACK(target))
    # The official client sends an unexpired OIDC id-token as it is: a ServiceAccount token is a JWT too.
    user = {"auth-provider": {"name": "oidc", "config": {"id-token": sa_token, "idp-issuer-url": "https://idp.invalid"}}}
    path = write_kubeconfig(tmp_path / "oidc", admin_credentials, user)
    with pytest.raises(kc.Unsupported):
        kc.load(str(path))
    kube = connect_to(path, namespace)
    assert len(fallbacks) == 1 and isinstance(kube.transport, Transport)
    assert whoami(kube) == sa_name(namespace) and kube.list("ConfigMap") is not None


# --- against a local HTTP server that drops kept-alive connections -------------------------------


class DroppingServer:
    """Answers each request with 200 and ``{}``, then closes the connection without saying so."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(head.split(b" ")[0].decode())
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                time.sleep(0.1)  # closed only after the client has put the connection back

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def dropping_server():
    server = DroppingServer()
    yield server
    server.close()


def test_a_dropped_keep_alive_connection_is_reopened_once_for_a_get(dropping_server):
    kube = Kube(Transport(kc.Credentials(server=f"http://127.0.0.1:{dropping_server.port}")), "default")
    assert kube.request("GET", "/api/v1/namespaces") == {}
    time.sleep(0.3)
    assert kube.request("GET", "/api/v1/namespaces") == {}  # the kept connection is dead: a new one
    assert dropping_server.requests == ["GET", "GET"] and dropping_server.connections == 2


def test_a_post_on_a_dropped_connection_is_not_sent_again(dropping_server):
    kube = Kube(Transport(kc.Credentials(server=f"http://127.0.0.1:{dropping_server.port}")), "default")
    kube.request("POST", "/api/v1/namespaces", body={})
    time.sleep(0.3)
    with pytest.raises(ClusterUnreachable, match="cannot reach the API server"):
        kube.request("POST", "/api/v1/namespaces", body={})
    assert dropping_server.requests == ["POST"]  # the second never reached a server that could act on it
