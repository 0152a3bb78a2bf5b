"""cw's own kubeconfig loader against the official client's, and against kubectl's rules.

For every kubeconfig both loaders accept, the resolved server, CA, client certificate and key,
Authorization header and TLS verification must be the same as what
``kubernetes.config.load_kube_config(client_configuration=...)`` produces. Where kubectl and the
official client differ (current-context of merged files, paths of a user from another file),
cw follows kubectl and the test says so.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cw_cli.client import kubeconfig as kc

CA = b"-----BEGIN CERTIFICATE-----\nQ0EgY2VydA==\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\nY2xpZW50IGNlcnQ=\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nY2xpZW50IGtleQ==\n-----END PRIVATE KEY-----\n"
SERVER = "https://127.0.0.1:6443"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(path: Path, clusters: dict, users: dict, contexts: dict, current: str | None = None) -> Path:
    """Write a kubeconfig with the given name -> body maps."""
    data: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": c} for n, c in contexts.items()],
    }  # fmt: skip
    if current is not None:
        data["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def single(path: Path, cluster: dict, user: dict, namespace: str | None = None) -> Path:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    return kubeconfig(path, {"c": cluster}, {"u": user}, {"ctx": context}, "ctx")


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def official(config_file: str, context: str | None = None) -> dict[str, Any]:
    """What the official loader resolves (its file list given explicitly: it reads $KUBECONFIG at import)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=config_file, context=context, client_configuration=configuration, persist_config=False)
    return {
        "host": configuration.host,
        "ca": _read(configuration.ssl_ca_cert),
        "cert": _read(configuration.cert_file),
        "key": _read(configuration.key_file),
        "authorization": configuration.api_key.get("BearerToken"),
        "verify_ssl": configuration.verify_ssl,
        "tls_server_name": configuration.tls_server_name,
    }


def light(credentials: kc.Credentials) -> dict[str, Any]:
    return {
        "host": credentials.server,
        "ca": credentials.ca_data,
        "cert": credentials.client_cert,
        "key": credentials.client_key,
        "authorization": credentials.authorization,
        "verify_ssl": not credentials.insecure,
        "tls_server_name": credentials.tls_server_name,
    }


def same_as_official(path: Path | str, context: str | None = None) -> kc.Credentials:
    """Load with both loaders, assert they agree, return cw's credentials."""
    credentials = kc.load(str(path), context)
    assert light(credentials) == official(str(path), context)
    return credentials


@pytest.fixture(autouse=True)
def no_user_kubeconfig(tmp_path, monkeypatch):
    """Neither the machine's ~/.kube/config nor its $KUBECONFIG leak into a test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)


# --- credentials equal the official client's ---------------------------------------------


def test_token_and_ca_data(tmp_path):
    credentials = same_as_official(single(tmp_path / "config", {"server": SERVER + "/", "certificate-authority-data": b64(CA)}, {"token": "abc.def"}))
    assert credentials.server == SERVER and credentials.ca_data == CA and credentials.authorization == "Bearer abc.def"
    assert "abc.def" not in repr(credentials)  # secrets stay out of logs and tracebacks


def test_token_file_relative_to_the_kubeconfig(tmp_path, monkeypatch):
    (tmp_path / "conf" / "secrets").mkdir(parents=True)
    (tmp_path / "conf" / "secrets" / "token").write_text("from-a-file")
    path = single(tmp_path / "conf" / "config", {"server": SERVER, "certificate-authority": "ca.crt"}, {"tokenFile": "secrets/token"})
    (tmp_path / "conf" / "ca.crt").write_bytes(CA)
    monkeypatch.chdir(tmp_path)  # relative to the file, not to the working directory
    assert same_as_official(path).token == "from-a-file"


def test_token_file_whitespace_is_trimmed_like_kubectl(tmp_path):
    (tmp_path / "token").write_text("  padded\n")
    path = single(tmp_path / "config", {"server": SERVER}, {"tokenFile": str(tmp_path / "token")})
    assert kc.load(str(path)).token == "padded"  # the official client would send "Bearer   padded\n"


def test_a_token_wins_over_a_token_file(tmp_path):
    (tmp_path / "token").write_text("from-file")
    assert same_as_official(single(tmp_path / "config", {"server": SERVER}, {"token": "inline", "tokenFile": "token"})).token == "inline"


def test_client_certificate_files_relative_to_the_kubeconfig(tmp_path, monkeypatch):
    pki = tmp_path / "conf" / "pki"
    pki.mkdir(parents=True)
    (pki / "ca.crt").write_bytes(CA)
    (pki / "me.crt").write_bytes(CERT)
    (pki / "me.key").write_bytes(KEY)
    path = single(tmp_path / "conf" / "config", {"server": SERVER, "certificate-authority": "pki/ca.crt"},
                  {"client-certificate": "pki/me.crt", "client-key": "./pki/me.key"})  # fmt: skip
    monkeypatch.chdir(tmp_path)
    credentials = same_as_official(path)
    assert (credentials.client_cert, credentials.client_key, credentials.authorization) == (CERT, KEY, None)


def test_client_certificate_data(tmp_path):
    path = single(tmp_path / "config", {"server": SERVER, "certificate-authority-data": b64(CA)},
                  {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)})  # fmt: skip
    assert (same_as_official(path).client_cert, kc.load(str(path)).client_key) == (CERT, KEY)


def test_basic_auth(tmp_path):
    credentials = same_as_official(single(tmp_path / "config", {"server": SERVER}, {"username": "ann", "password": "s3cret:x"}))
    assert credentials.authorization == "Basic " + b64(b"ann:s3cret:x")


def test_insecure_skip_tls_verify_and_tls_server_name(tmp_path):
    same_as_official(single(tmp_path / "a", {"server": SERVER, "insecure-skip-tls-verify": True}, {"token": "t"}))
    credentials = same_as_official(single(tmp_path / "b", {"server": SERVER, "certificate-authority-data": b64(CA), "tls-server-name": "kubernetes.default"}, {}))
    assert credentials.tls_server_name == "kubernetes.default" and not credentials.insecure


def test_plain_http_ignores_tls_material(tmp_path):
    path = single(tmp_path / "config", {"server": "http://127.0.0.1:8080", "certificate-authority": "missing.crt"},
                  {"token": "t", "client-certificate": "missing.crt", "client-key": "missing.key"})  # fmt: skip
    assert same_as_official(path).client_cert is None


def test_a_context_without_a_user_is_anonymous(tmp_path):
    path = kubeconfig(tmp_path / "config", {"c": {"server": SERVER}}, {}, {"ctx": {"cluster": "c"}}, "ctx")
    assert same_as_official(path).authorization is None


# --- exec credential plugins ------------------------------------------------------------


PLUGIN = """#!{python}
import json, os, sys
request = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open({record!r}, "a") as log:
    log.write(json.dumps({{"request": request, "argv": sys.argv[1:], "env": os.environ.get("PLUGIN_ENV"), "cwd": os.getcwd()}}) + "\\n")
status = json.loads({status!r})
if request["spec"].get("cluster"):
    status["token"] = "for-" + request["spec"]["cluster"]["server"]
print(json.dumps({{"apiVersion": request["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def write_plugin(path: Path, record: Path, status: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PLUGIN.format(python=sys.executable, record=str(record), status=json.dumps(status)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def records(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def exec_user(command: str, api_version: str = "client.authentication.k8s.io/v1", **extra: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": api_version, "command": command, "interactiveMode": "IfAvailable", **extra}}


def test_exec_v1_token_with_args_env_and_a_relative_command(tmp_path, monkeypatch):
    record = tmp_path / "calls.jsonl"
    write_plugin(tmp_path / "conf" / "bin" / "plugin", record, {"token": "exec-token"})
    user = exec_user("./bin/plugin", args=["--flag", "x"], env=[{"name": "PLUGIN_ENV", "value": "set"}])
    path = single(tmp_path / "conf" / "config", {"server": SERVER, "certificate-authority-data": b64(CA)}, user)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    credentials = same_as_official(path)
    assert credentials.token == "exec-token" and credentials.exec_plugin is not None
    assert credentials.exec_plugin.command == str(tmp_path / "conf" / "bin" / "plugin")
    ours = records(record)[0]  # cw ran it first
    assert ours["request"] == {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "spec": {"interactive": False}}
    assert ours["argv"] == ["--flag", "x"] and ours["env"] == "set"
    assert ours["cwd"] == str(tmp_path / "elsewhere")  # kubectl leaves the working directory alone


def test_exec_v1beta1_client_certificate(tmp_path):
    record = tmp_path / "calls.jsonl"
    plugin = write_plugin(tmp_path / "plugin", record, {"clientCertificateData": CERT.decode(), "clientKeyData": KEY.decode(),
                                                       "expirationTimestamp": "2999-01-02T03:04:05.123456789Z"})  # fmt: skip
    path = single(tmp_path / "config", {"server": SERVER, "certificate-authority-data": b64(CA)},
                  exec_user(str(plugin), "client.authentication.k8s.io/v1beta1"))  # fmt: skip
    credentials = same_as_official(path)
    assert (credentials.client_cert, credentials.client_key, credentials.token) == (CERT, KEY, None)
    assert credentials.expires is not None and not kc.expired(credentials)
    assert records(record)[0]["request"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"


def test_exec_provide_cluster_info(tmp_path):
    record = tmp_path / "calls.jsonl"
    plugin = write_plugin(tmp_path / "plugin", record, {})
    cluster = {"server": SERVER, "certificate-authority-data": b64(CA), "tls-server-name": "api.internal",
               "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "cw"}}]}  # fmt: skip
    path = single(tmp_path / "config", cluster, exec_user(str(plugin), provideClusterInfo=True))
    assert same_as_official(path).token == f"for-{SERVER}"
    sent = records(record)[0]["request"]["spec"]["cluster"]
    # kubectl's ExecCredential Cluster: the CA as data even when the kubeconfig names a file.
    assert sent == {"server": SERVER, "certificate-authority-data": b64(CA), "tls-server-name": "api.internal", "config": {"audience": "cw"}}


def test_exec_refresh_runs_the_plugin_again(tmp_path):
    record = tmp_path / "calls.jsonl"
    plugin = write_plugin(tmp_path / "plugin", record, {"token": "t"})
    credentials = kc.load(str(single(tmp_path / "config", {"server": SERVER}, exec_user(str(plugin)))))
    assert kc.refresh(credentials).token == "t" and len(records(record)) == 2


def test_a_missing_exec_command_names_the_install_hint(tmp_path):
    path = single(tmp_path / "config", {"server": SERVER}, exec_user("no-such-plugin-cw", installHint="brew install no-such-plugin"))
    with pytest.raises(kc.KubeconfigError, match="executable no-such-plugin-cw not found") as caught:
        kc.load(str(path))
    assert caught.value.hint == "brew install no-such-plugin"


def test_a_failing_exec_plugin_says_why(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!{sys.executable}\nimport sys\nprint('token expired, run login', file=sys.stderr)\nsys.exit(3)\n")
    plugin.chmod(0o755)
    with pytest.raises(kc.KubeconfigError, match="exit code 3: token expired, run login"):
        kc.load(str(single(tmp_path / "config", {"server": SERVER}, exec_user(str(plugin)))))


@pytest.mark.parametrize("output,message", [
    ("not json", "did not print an ExecCredential"),
    ('{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {"token": "t"}}', "returned version"),
    ('{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {}}', "neither a token"),
    ('{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"clientKeyData": "k"}}', "not both"),
])  # fmt: skip
def test_bad_exec_output_is_an_error(tmp_path, output, message):
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!{sys.executable}\nprint({output!r})\n")
    plugin.chmod(0o755)
    with pytest.raises(kc.KubeconfigError, match=message):
        kc.load(str(single(tmp_path / "config", {"server": SERVER}, exec_user(str(plugin)))))


# --- files, merging, contexts ------------------------------------------------------------


def two_files(tmp_path: Path) -> tuple[Path, Path]:
    """Two kubeconfigs in different folders, defining some names twice, differently."""
    (tmp_path / "b" / "creds").mkdir(parents=True)
    (tmp_path / "b" / "creds" / "token").write_text("b-file-token")
    first = kubeconfig(
        tmp_path / "a" / "config",
        {"shared": {"server": "https://first:6443", "certificate-authority-data": b64(CA)}},
        {"shared-user": {"token": "first-token"}},
        {"ctx-a": {"cluster": "shared", "user": "shared-user", "namespace": "team-a"}},
    )
    second = kubeconfig(
        tmp_path / "b" / "config",
        {"shared": {"server": "https://second:6443", "insecure-skip-tls-verify": True}, "only-b": {"server": "https://b:6443"}},
        {"shared-user": {"token": "second-token"}, "b-user": {"tokenFile": "creds/token"}},
        {"ctx-a": {"cluster": "only-b", "user": "b-user"}, "ctx-b": {"cluster": "shared", "user": "b-user", "namespace": "team-b"}},
        current="ctx-b",
    )
    return first, second


def test_merged_files_first_definition_of_a_name_wins(tmp_path, monkeypatch):
    first, second = two_files(tmp_path)
    files = os.pathsep.join([str(tmp_path / "missing"), str(first), str(second)])
    monkeypatch.setenv("KUBECONFIG", files)
    for context, server, authorization, namespace in [
        ("ctx-a", "https://first:6443", "Bearer first-token", "team-a"),  # ctx-a, shared, shared-user of the first file
        ("ctx-b", "https://first:6443", "Bearer b-file-token", "team-b"),  # the second's context, the first's cluster
    ]:
        credentials = kc.load(None, context)
        assert light(credentials) == official(files, context)
        assert (credentials.server, credentials.authorization, credentials.namespace) == (server, authorization, namespace)
        assert credentials.context == context


def test_current_context_comes_from_the_first_file_that_sets_it(tmp_path, monkeypatch):
    first, second = two_files(tmp_path)
    third = kubeconfig(tmp_path / "c" / "config", {}, {}, {}, current="ctx-a")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second), str(third)]))
    assert kc.load().context == "ctx-b"  # the first sets none, the second does; the third's is ignored
    # (the official client takes the last file's current-context: "ctx-a" here)


def test_a_users_paths_are_relative_to_its_own_file(tmp_path, monkeypatch):
    (tmp_path / "users" / "pki").mkdir(parents=True)
    (tmp_path / "users" / "pki" / "me.crt").write_bytes(CERT)
    (tmp_path / "users" / "pki" / "me.key").write_bytes(KEY)
    clusters = kubeconfig(tmp_path / "clusters" / "config", {"c": {"server": SERVER}}, {}, {"ctx": {"cluster": "c", "user": "me"}}, "ctx")
    users = kubeconfig(tmp_path / "users" / "config", {}, {"me": {"client-certificate": "pki/me.crt", "client-key": "pki/me.key"}}, {})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(clusters), str(users)]))
    assert kc.load().client_cert == CERT  # kubectl; the official client looks next to the cluster's file


def test_default_path_and_explicit_path(tmp_path, monkeypatch):
    home = single(tmp_path / "home" / ".kube" / "config", {"server": "https://home:6443"}, {"token": "t"})
    explicit = single(tmp_path / "explicit", {"server": "https://explicit:6443"}, {"token": "t"})
    assert kc.load().server == "https://home:6443" == official(str(home))["host"]
    monkeypatch.setenv("KUBECONFIG", str(single(tmp_path / "env", {"server": "https://env:6443"}, {"token": "t"})))
    assert kc.load().server == "https://env:6443"
    assert kc.load(str(explicit)).server == "https://explicit:6443"
    with pytest.raises(OSError):
        kc.load(str(tmp_path / "no-such-file"))  # an explicit file must exist


def test_no_kubeconfig_at_all(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(kc.KubeconfigError, match="no kubeconfig file"):
        kc.load()


def test_context_flag_namespace_and_unknown_context(tmp_path):
    path = kubeconfig(tmp_path / "config", {"c": {"server": SERVER}, "d": {"server": "https://other:6443"}}, {"u": {"token": "t"}},
                      {"one": {"cluster": "c", "user": "u", "namespace": "ns-one"}, "two": {"cluster": "d", "user": "u"}}, "one")  # fmt: skip
    assert kc.load(str(path)).namespace == "ns-one"
    two = same_as_official(path, "two")
    assert (two.server, two.namespace, two.context) == ("https://other:6443", None, "two")
    with pytest.raises(kc.UnknownContext) as caught:
        kc.load(str(path), "three")
    assert caught.value.known == ["one", "two"]


@pytest.mark.parametrize("user,cluster", [
    ({"auth-provider": {"name": "oidc", "config": {"id-token": "x"}}}, {}),
    ({"token": "t", "username": "u", "password": "p"}, {}),
    ({"token": "t", "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}}, {}),
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}}, {}),
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "interactiveMode": "Always"}}, {}),
    ({"client-certificate-data": b64(CERT)}, {}),
    ({"token": "t"}, {"certificate-authority-data": b64(CA), "insecure-skip-tls-verify": True}),
])  # fmt: skip
def test_what_only_the_official_client_handles_is_unsupported(tmp_path, user, cluster):
    with pytest.raises(kc.Unsupported):
        kc.load(str(single(tmp_path / "config", {"server": SERVER, **cluster}, user)))


def test_impersonation_becomes_one_header_line_per_value(tmp_path):
    user = {"token": "t", "as": "alice", "as-groups": ["devs", "ops"], "as-uid": "42", "as-user-extra": {"scopes/x": ["a", "b"]}}
    credentials = kc.load(str(single(tmp_path / "config", {"server": SERVER}, user)))
    assert credentials.impersonate == (
        ("Impersonate-User", "alice"), ("Impersonate-Group", "devs"), ("Impersonate-Group", "ops"),
        ("Impersonate-Uid", "42"), ("Impersonate-Extra-scopes%2Fx", "a"), ("Impersonate-Extra-scopes%2Fx", "b"),
    )  # fmt: skip
    assert credentials.authorization == "Bearer t"


@pytest.mark.parametrize("user,message", [
    ({"token": "t", "as-groups": ["admins"]}, "without `as`"),
    ({"token": "t", "as": "a\nb"}, "holds a line break"),
    ({"auth-provider": {"name": "oidc"}, "as": "alice"}, "which cw's fallback would drop"),
])  # fmt: skip
def test_impersonation_cw_cannot_honour_is_an_error_not_a_silent_fallback(tmp_path, user, message):
    with pytest.raises(kc.KubeconfigError, match=message) as caught:
        kc.load(str(single(tmp_path / "config", {"server": SERVER}, user)))
    assert not isinstance(caught.value, kc.Unsupported)


def test_broken_kubeconfigs_are_errors(tmp_path):
    (tmp_path / "bad.yaml").write_text("clusters: [\n")
    with pytest.raises(kc.KubeconfigError, match="not valid YAML"):
        kc.load(str(tmp_path / "bad.yaml"))
    no_current = kubeconfig(tmp_path / "nocurrent", {"c": {"server": SERVER}}, {}, {"ctx": {"cluster": "c"}})
    with pytest.raises(kc.KubeconfigError, match="no current-context"):
        kc.load(str(no_current))
    no_cluster = kubeconfig(tmp_path / "nocluster", {}, {}, {"ctx": {"cluster": "gone"}}, "ctx")
    with pytest.raises(kc.KubeconfigError, match="cluster 'gone'"):
        kc.load(str(no_cluster))
    with pytest.raises(kc.KubeconfigError, match="cannot read user 'u' tokenFile"):
        kc.load(str(single(tmp_path / "config", {"server": SERVER}, {"tokenFile": "nope"})))


# --- connect(): the light path by default, the official client only as the fallback --------


def test_connect_imports_neither_kubernetes_nor_urllib3(tmp_path):
    path = single(tmp_path / "config", {"server": "http://127.0.0.1:1"}, {"token": "t"}, namespace="team")
    code = (
        "import sys; from cw_cli.client.connection import connect, ClusterTarget\n"
        f"kube = connect(ClusterTarget(kubeconfig={str(path)!r}))\n"
        "print(kube.namespace, kube.host, 'kubernetes' in sys.modules, 'urllib3' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["team", "http://127.0.0.1:1", "False", "False"], done.stderr


def test_importing_the_connection_module_loads_no_network_code():
    code = "import sys, cw_cli.client.connection; print(sorted(m for m in ('kubernetes', 'urllib3', 'ssl', 'http.client', 'yaml') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_connect_falls_back_to_the_official_client_for_an_auth_provider(tmp_path):
    from cw_cli.client.connection import ClusterTarget, connect

    header = base64.urlsafe_b64encode(b'{"alg":"none"}').decode().rstrip("=")
    claims = base64.urlsafe_b64encode(b'{"exp":32503680000,"sub":"me"}').decode().rstrip("=")
    id_token = f"{header}.{claims}.c2ln"  # a JWT that expires in 3000: no refresh, no network
    user = {"auth-provider": {"name": "oidc", "config": {"id-token": id_token, "idp-issuer-url": "https://idp"}}}
    path = single(tmp_path / "config", {"server": "http://127.0.0.1:1"}, user, namespace="oidc-ns")
    kube = connect(ClusterTarget(kubeconfig=str(path)))
    assert (kube.host, kube.namespace) == ("http://127.0.0.1:1", "oidc-ns")
    assert kube.transport._headers(kube.transport.credentials, None)["Authorization"] == f"Bearer {id_token}"


def test_connect_errors_keep_their_messages(tmp_path):
    from cw_cli.client.connection import ClusterTarget, connect
    from cw_cli.errors import ClusterUnreachable

    path = single(tmp_path / "config", {"server": SERVER}, {"token": "t"})
    with pytest.raises(ClusterUnreachable, match="no context 'nope' in the kubeconfig") as caught:
        connect(ClusterTarget(kubeconfig=str(path), context="nope"))
    assert caught.value.hint == "contexts: ctx"
    with pytest.raises(ClusterUnreachable, match="cannot read the kubeconfig"):
        connect(ClusterTarget(kubeconfig=str(tmp_path)))  # a directory
    plugin = single(tmp_path / "exec", {"server": SERVER}, exec_user("no-such-plugin-cw", installHint="install it"))
    with pytest.raises(ClusterUnreachable, match="no usable kubeconfig") as caught:
        connect(ClusterTarget(kubeconfig=str(plugin)))
    assert caught.value.hint == "install it"


def test_in_cluster_credentials_come_from_the_pods_service_account(tmp_path):
    folder = tmp_path / "sa"
    folder.mkdir()
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert kc.in_cluster(env, folder) is None  # no token: not in a pod
    assert kc.in_cluster({}, folder) is None
    (folder / "token").write_text("abc\n")
    (folder / "namespace").write_text("team-a")
    credentials = kc.in_cluster(env, folder)
    assert credentials is not None
    assert (credentials.server, credentials.namespace, credentials.token) == ("https://[fd00::1]:443", "team-a", "abc")
    (folder / "token").write_text("\n")
    with pytest.raises(kc.KubeconfigError, match="is empty"):
        kc.in_cluster(env, folder)
