"""Which proxy cw's transport uses: kubectl's rules (client-go and Go's http.ProxyFromEnvironment).

The table's expected answers are what Go's own ``net/http`` prints for the same environment and
URL; ``test_the_table_is_what_go_answers`` checks that against a tiny Go program when a Go
toolchain is installed. The official client's own choice differs (see
``Transport.from_configuration``); cw uses these rules on both of its client paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cw_cli.client import kubeconfig as kc
from cw_cli.client.transport import Transport, proxy_for

P = "http://p:3128"
# (environment, server, the proxy Go picks or None for a direct connection)
CASES: list[tuple[dict[str, str], str, str | None]] = [
    ({}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P}, "https://api.example.com:6443", P),
    ({"https_proxy": P}, "https://api.example.com", P),
    ({"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:1"}, "https://api.example.com", "http://upper:1"),
    ({"HTTPS_PROXY": "p:3128"}, "https://api.example.com", "http://p:3128"),
    ({"HTTPS_PROXY": "http://user:secret@p:3128"}, "https://api.example.com", "http://user:secret@p:3128"),
    ({"HTTP_PROXY": P}, "https://api.example.com", None),  # no fallback to HTTP_PROXY for https
    ({"HTTP_PROXY": P}, "http://api.example.com:8080", P),
    ({"HTTPS_PROXY": P}, "http://api.example.com:8080", None),
    ({"ALL_PROXY": P, "all_proxy": P}, "https://api.example.com", None),  # Go never reads ALL_PROXY
    ({"HTTPS_PROXY": P}, "https://127.0.0.1:6443", None),  # loopback: never proxied
    ({"HTTPS_PROXY": P}, "https://127.8.9.10:6443", None),
    ({"HTTPS_PROXY": P}, "https://localhost:6443", None),
    ({"HTTPS_PROXY": P}, "https://LOCALHOST:6443", P),  # Go compares the name as written
    ({"HTTPS_PROXY": P, "NO_PROXY": "LOCALHOST"}, "https://LOCALHOST:6443", None),
    ({"HTTPS_PROXY": P}, "https://[::1]:6443", None),
    ({"HTTPS_PROXY": P}, "https://[::ffff:127.0.0.1]:6443", None),
    ({"HTTPS_PROXY": P}, "https://localhost.example.com", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "api.example.com"}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "example.com"}, "https://api.example.com", None),  # and subdomains
    ({"HTTPS_PROXY": P, "NO_PROXY": "example.com"}, "https://notexample.com", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": ".example.com"}, "https://example.com", P),  # subdomains only
    ({"HTTPS_PROXY": P, "NO_PROXY": ".example.com"}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "*.example.com"}, "https://example.com", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "*.example.com"}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": " other.org , API.Example.COM "}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "no_proxy": "api.example.com"}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "other.org", "no_proxy": "api.example.com"}, "https://api.example.com", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "*"}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "api.example.com:443"}, "https://api.example.com", None),  # the default port
    ({"HTTPS_PROXY": P, "NO_PROXY": "api.example.com:443"}, "https://api.example.com:6443", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "api.example.com:6443"}, "https://api.example.com:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3"}, "https://10.1.2.3:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3:443"}, "https://10.1.2.3:6443", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, "https://10.1.2.3:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, "https://11.1.2.3:6443", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, "https://[::ffff:10.1.2.3]:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "::/0"}, "https://10.1.2.3", P),  # an IPv6 CIDR never holds IPv4
    ({"HTTPS_PROXY": P, "NO_PROXY": "fd00::/8"}, "https://[fd00::1]:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "fd00::1"}, "https://[fd00::1]:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "[fd00::1]:6443"}, "https://[fd00::1]:6443", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "[fd00::1]:443"}, "https://[fd00::1]:6443", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3"}, "https://api.example.com", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "api.example.com"}, "https://10.1.2.3", P),
    ({"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/33,10.0.0.0/x"}, "https://10.1.2.3", P),  # not CIDRs
]


def _proxy(env: dict[str, str], server: str) -> str | None:
    chosen = proxy_for(server, environ=env)
    return chosen[0] if chosen else None


@pytest.mark.parametrize("env,server,expected", CASES)
def test_the_proxy_is_chosen_as_kubectl_chooses_it(env, server, expected):
    assert _proxy(env, server) == expected


def test_the_source_is_named_and_proxy_url_wins_everywhere():
    env = {"HTTPS_PROXY": P, "NO_PROXY": "*"}
    assert proxy_for("https://api.example.com", environ={"https_proxy": P}) == (P, "https_proxy")
    assert proxy_for("https://api.example.com", "http://kubeconfig:1", env) == ("http://kubeconfig:1", "proxy-url")
    # client-go's proxy-url is used for every request, a loopback server included
    assert proxy_for("https://127.0.0.1:6443", "http://kubeconfig:1", {}) == ("http://kubeconfig:1", "proxy-url")


def test_http_proxy_is_not_used_in_a_cgi_environment():
    assert _proxy({"HTTP_PROXY": P}, "http://api.example.com") == P
    assert _proxy({"HTTP_PROXY": P, "REQUEST_METHOD": "GET"}, "http://api.example.com") is None


def test_the_environment_is_read_at_each_call(monkeypatch):
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    assert proxy_for("https://api.example.com") is None
    monkeypatch.setenv("HTTPS_PROXY", P)
    assert proxy_for("https://api.example.com") == (P, "HTTPS_PROXY")


@pytest.fixture(scope="module")
def go_probe(tmp_path_factory) -> Path:
    """A Go program printing the proxy net/http picks for its URL arguments (built once)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        pytest.skip("no Go toolchain: the table's answers are not checked against Go's net/http here")
    folder = tmp_path_factory.mktemp("go-proxy-probe")
    (folder / "main.go").write_text(GO_PROBE)
    done = subprocess.run([go, "build", "-o", str(folder / "probe"), str(folder / "main.go")], cwd=folder,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"the Go probe does not build: {done.stderr[-500:]}")
    return folder / "probe"


GO_PROBE = """package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	req, _ := http.NewRequest("GET", os.Args[1], nil)
	u, err := http.ProxyFromEnvironment(req)
	if err != nil {
		fmt.Println("error")
	} else if u == nil {
		fmt.Println("direct")
	} else {
		fmt.Println(u.String())
	}
}
"""


def test_the_table_is_what_go_answers(go_probe):
    differ = []
    for env, server, expected in CASES:
        # ProxyFromEnvironment reads the environment once per process: one process per case
        done = subprocess.run([str(go_probe), server], env=env, capture_output=True, text=True, timeout=30, check=True)
        answer = done.stdout.strip()
        if answer != (expected or "direct"):
            differ.append((env, server, expected, answer))
    assert differ == []


# --- the transport and the kubeconfig's proxy-url ---------------------------------------------


def _kubeconfig(path: Path, server: str, **cluster: object) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    return path


@pytest.fixture(autouse=True)
def clean_proxy_environment(monkeypatch, tmp_path):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy",
                 "REQUEST_METHOD", "KUBECONFIG"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_the_transport_tunnels_through_the_environments_proxy(monkeypatch):
    credentials = kc.Credentials(server="https://api.example.com:6443", insecure=True)
    assert Transport(credentials)._proxy is None
    monkeypatch.setenv("HTTPS_PROXY", "http://user:p%40ss@proxy.corp:3128")
    host, port, headers = Transport(credentials)._proxy
    assert (host, port, headers) == ("proxy.corp", 3128, {"Proxy-Authorization": "Basic dXNlcjpwQHNz"})
    monkeypatch.setenv("NO_PROXY", ".example.com")
    assert Transport(credentials)._proxy is None
    assert Transport(kc.Credentials(server="https://127.0.0.1:6443", insecure=True, proxy="http://pp:1"))._proxy[:2] == ("pp", 1)


@pytest.mark.parametrize("value,message", [
    ("socks5://user:secret@proxy:1080", "HTTPS_PROXY proxy socks5://proxy: cw connects through http:// proxies only, not socks5"),
    ("https://proxy:3128", "HTTPS_PROXY proxy https://proxy: cw connects through http:// proxies only, not https"),
    ("http://user:secret@proxy:port", "HTTPS_PROXY proxy http://proxy...: not a proxy URL"),
])  # fmt: skip
def test_an_environment_proxy_cw_cannot_use_is_an_error_naming_the_variable(monkeypatch, value, message):
    monkeypatch.setenv("HTTPS_PROXY", value)
    with pytest.raises(kc.KubeconfigError) as caught:
        Transport(kc.Credentials(server="https://api.example.com", insecure=True))
    assert str(caught.value) == message  # and never the proxy's password
    assert "NO_PROXY" in (caught.value.hint or "")


def test_a_proxy_url_is_read_by_the_light_loader_and_wins_over_the_environment(tmp_path, monkeypatch):
    path = _kubeconfig(tmp_path / "config", "https://127.0.0.1:6443", **{"proxy-url": "http://kubeconfig-proxy:8080"},
                       **{"insecure-skip-tls-verify": True})  # fmt: skip
    credentials = kc.load(str(path))
    assert credentials.proxy == "http://kubeconfig-proxy:8080"
    monkeypatch.setenv("HTTPS_PROXY", P)
    monkeypatch.setenv("NO_PROXY", "*")
    assert Transport(credentials)._proxy[:2] == ("kubeconfig-proxy", 8080)


@pytest.mark.parametrize("value,message", [
    ("socks5://proxy:1080", "cw connects through http:// proxies only, not socks5"),
    ("https://proxy:3128", "cw connects through http:// proxies only, not https"),
    ("proxy:3128", "is not a proxy URL"),
    ("http://proxy:port", "is not a proxy URL"),
])  # fmt: skip
def test_a_proxy_url_cw_cannot_use_is_an_error_naming_the_file_and_field(tmp_path, value, message):
    path = _kubeconfig(tmp_path / "config", "https://api.example.com", **{"proxy-url": value})
    with pytest.raises(kc.KubeconfigError, match=message) as caught:
        kc.load(str(path))
    assert not isinstance(caught.value, kc.Unsupported)  # no silent fallback to the official client
    assert f"{path}: cluster 'c' proxy-url" in str(caught.value)
    assert caught.value.hint


def test_an_exec_plugin_with_cluster_info_gets_the_proxy_url(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': info['spec']['cluster'].get('proxy-url', 'none')}}))\n"
    )
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": "https://api.example.com", "proxy-url": "http://pp:1"}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                                  "args": [str(plugin)], "provideClusterInfo": True}}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    assert kc.load(str(path)).token == "http://pp:1"


# --- both client paths choose the same proxy --------------------------------------------------


def _both_paths(path: Path) -> tuple[Transport, Transport]:
    from cw_cli.client import connection, official

    target = connection.ClusterTarget(kubeconfig=str(path))
    light = connection.connect(target).transport
    fallback, _ = official.connect_with_official_client(target)
    return light, fallback


@pytest.mark.parametrize("env,server,cluster,expected", [
    ({}, "https://api.example.com", {}, None),
    ({"HTTPS_PROXY": P}, "https://api.example.com", {}, ("p", 3128)),
    ({"https_proxy": P, "HTTPS_PROXY": "http://upper:1"}, "https://api.example.com", {}, ("upper", 1)),
    ({"HTTPS_PROXY": P}, "https://127.0.0.1:6443", {}, None),
    ({"HTTPS_PROXY": P, "NO_PROXY": ".example.com"}, "https://api.example.com", {}, None),
    ({"ALL_PROXY": P}, "https://api.example.com", {}, None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "*"}, "https://127.0.0.1:6443", {"proxy-url": "http://kc:8080"}, ("kc", 8080)),
])  # fmt: skip
def test_both_client_paths_choose_the_same_proxy(tmp_path, monkeypatch, env, server, cluster, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    light, official = _both_paths(_kubeconfig(tmp_path / "config", server, **{"insecure-skip-tls-verify": True}, **cluster))
    assert (light._proxy or (None, None))[:2] == (official._proxy or (None, None))[:2] == (expected or (None, None))


def test_the_official_client_alone_would_choose_otherwise(monkeypatch):
    """Why cw does not take the official client's proxy: it would proxy a loopback server, where
    kubectl connects directly (if this starts failing, the official client follows kubectl now)."""
    from kubernetes import client

    monkeypatch.setenv("HTTPS_PROXY", P)
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:6443"
    assert configuration.proxy == P
    assert Transport.from_configuration(configuration)._proxy is None  # cw: kubectl's rule


def test_proxy_rules_import_nothing_heavy(tmp_path):
    path = _kubeconfig(tmp_path / "config", "https://api.example.com", **{"insecure-skip-tls-verify": True})
    code = (
        "import sys; from cw_cli.client.connection import connect, ClusterTarget\n"
        f"kube = connect(ClusterTarget(kubeconfig={str(path)!r}))\n"
        "print(kube.transport._proxy[:2], sorted(m for m in ('kubernetes', 'urllib3', 'urllib.request', 'requests')"
        " if m in sys.modules))"
    )
    env = {**os.environ, "HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8,other.org:443", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.strip() == "('p', 3128) []", done.stderr
