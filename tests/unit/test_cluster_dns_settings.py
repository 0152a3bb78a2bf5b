"""The real node's cluster DNS as cw_cli/testcluster/realnode/dns.py writes it, checked without
starting anything: the Corefile serves the cluster's zones and forwards nothing, it listens on the
veth's host end only, the kube-dns Service and EndpointSlice send pods there, and the CoreDNS that
tools/coredns builds has every plugin the Corefile names and no other that could reach outside.
CoreDNS itself answers in tests/cluster/test_cluster_dns_answers_from_the_api.py."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
from unit_helpers import REPO

from cw_cli.testcluster import argv
from cw_cli.testcluster.build import binary_paths
from cw_cli.testcluster.paths import load_versions
from cw_cli.testcluster.realnode import dns, network, settings

TOOLS = REPO / "tools"
VETH_HOST_END = "172.30.250.1"


def _listen(address: str = VETH_HOST_END) -> dns.Listen:
    return dns.Listen(address, 53, 40001, 40002)


def _directives(corefile: str) -> list[str]:
    """The first word of every line inside the server block: its plugins and their options."""
    lines = [line.split("#")[0].strip() for line in corefile.splitlines()]
    return [line.split()[0] for line in lines if line and line != "}" and not re.match(r"^\S+:\d+ ", line)]


def _server_block_keys(corefile: str) -> list[str]:
    opening = [line for line in corefile.splitlines() if re.match(r"^\S+:\d+ .*\{$", line)]
    assert len(opening) == 1, opening  # one server block: nothing else can answer
    return opening[0].rstrip("{").split()


def test_the_corefile_serves_the_cluster_zones_and_forwards_nothing(tmp_path: Path):
    text = dns.corefile(tmp_path / "coredns.kubeconfig", _listen())
    words = _directives(text)
    assert not {"forward", "proxy", "grpc", "etcd", "file", "auto", "secondary", "hosts", "template"} & set(words), words
    assert _server_block_keys(text) == ["cluster.local:53", "in-addr.arpa:53", "ip6.arpa:53"]
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in text
    assert f'kubeconfig "{tmp_path / "coredns.kubeconfig"}"' in text
    assert "\n    cache 30\n" in text
    assert "pods disabled" in text  # no watch of every pod: Services and EndpointSlices only


def test_corefile_plugins_are_the_ones_tools_coredns_builds_and_none_forwards():
    main = (TOOLS / "coredns" / "main.go").read_text(encoding="utf-8")
    imported = set(re.findall(r'_ "github\.com/coredns/coredns/plugin/([a-z0-9_]+)"', main))
    listed = re.findall(r'^\t"([a-z0-9_]+)",$', main, flags=re.M)
    assert imported == set(listed), (imported, listed)
    assert "forward" not in imported and "grpc" not in imported
    used = set(_directives(dns.corefile(Path("/k"), _listen()))) - {"kubeconfig", "pods", "class"}
    assert used <= imported, used - imported
    assert {"kubernetes", "cache", "health", "ready", "bind"} <= used
    # CoreDNS runs plugins in its directives' order: cache before kubernetes, or nothing is cached.
    assert listed.index("cache") < listed.index("kubernetes")
    assert listed.index("bind") < listed.index("ready") < listed.index("health") < listed.index("errors")


def test_coredns_listens_on_the_veth_host_end_only():
    address = ipaddress.IPv4Address(dns.listen_address())
    assert str(address) == VETH_HOST_END == network.NodeNet(0).host_ip == network.api_address()
    assert address in network.LINK_NET and not address.is_loopback and not address.is_unspecified
    text = dns.corefile(Path("/k"), _listen())
    bound = [line.split()[1:] for line in text.splitlines() if line.strip().startswith(("bind", "health", "ready"))]
    assert bound == [[VETH_HOST_END], [f"{VETH_HOST_END}:40001"], [f"{VETH_HOST_END}:40002"]]


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "not-an-address", "0.0.0.0:53"])
def test_every_interface_or_a_non_address_is_refused(address: str):
    with pytest.raises(ValueError):
        dns.corefile(Path("/k"), _listen(address))
    with pytest.raises(ValueError):
        dns.service_manifests(address)


def test_a_kubeconfig_path_a_corefile_cannot_hold_is_refused():
    with pytest.raises(ValueError):
        dns.corefile(Path('/tmp/a"b'), _listen())


class _Launcher:
    def __init__(self) -> None:
        self.spawned: list[tuple[str, list]] = []

    def spawn(self, name: str, command: list) -> None:
        self.spawned.append((name, command))


def test_start_defaults_to_the_veth_host_end_and_records_the_process(tmp_path: Path, monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(dns, "_free_ports", lambda address, count: asked.append(address) or [41001, 41002])
    launcher, files = _Launcher(), dns.DnsFiles(tmp_path)
    listen = dns.start(launcher, Path("/bin/coredns"), files)  # type: ignore[arg-type]
    assert listen == dns.Listen(VETH_HOST_END, 53, 41001, 41002) and asked == [VETH_HOST_END]
    assert launcher.spawned == [(dns.PROCESS, [Path("/bin/coredns"), "-conf", files.corefile])]
    assert f"bind {VETH_HOST_END}\n" in files.corefile.read_text()
    with pytest.raises(ValueError):
        dns.start(launcher, Path("/bin/coredns"), files, address="0.0.0.0")  # type: ignore[arg-type]
    assert len(launcher.spawned) == 1


def test_the_kube_dns_service_has_no_selector_and_its_endpoint_slice_points_at_coredns():
    service, endpoints = dns.service_manifests()
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == ("kube-system", "kube-dns")
    assert "selector" not in service["spec"]  # no pod serves it: the EndpointSlice below does
    ip = ipaddress.ip_address(service["spec"]["clusterIP"])
    assert str(ip) == "10.96.0.10" and ip in ipaddress.ip_network(argv.SERVICE_CIDR)
    assert str(ip) != "10.96.0.1"  # the kubernetes Service's
    ports = {(p["name"], p["protocol"], p["port"]) for p in service["spec"]["ports"]}
    assert ports == {("dns", "UDP", 53), ("dns-tcp", "TCP", 53)}

    assert endpoints["apiVersion"] == "discovery.k8s.io/v1" and endpoints["kind"] == "EndpointSlice"
    assert endpoints["metadata"]["namespace"] == "kube-system"
    labels = endpoints["metadata"]["labels"]
    assert labels["kubernetes.io/service-name"] == "kube-dns"
    # The EndpointSlice controller owns (and would delete) slices it manages; this one is ours.
    assert labels["endpointslice.kubernetes.io/managed-by"] != "endpointslice-controller.k8s.io"
    assert endpoints["addressType"] == "IPv4"
    assert endpoints["endpoints"] == [{"addresses": [VETH_HOST_END], "conditions": {"ready": True}}]
    # kube-proxy pairs a Service port with the slice's port of the same name and protocol.
    assert {(p["name"], p["protocol"], p["port"]) for p in endpoints["ports"]} == ports
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # the API server's rule
    for manifest in (service, endpoints):
        assert all(label_value.match(v) and len(v) <= 63 for v in manifest["metadata"]["labels"].values()), manifest


def test_a_dns_port_other_than_53_is_the_slices_and_the_services_target():
    service, endpoints = dns.service_manifests(VETH_HOST_END, 5353)
    assert {p["port"] for p in service["spec"]["ports"]} == {53}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {5353} == {p["port"] for p in endpoints["ports"]}


def test_the_kubelet_sends_pods_to_the_kube_dns_service():
    service, _ = dns.service_manifests()
    assert dns.kubelet_settings() == {"clusterDNS": [service["spec"]["clusterIP"]], "clusterDomain": "cluster.local"}
    config = settings.kubelet_config(network.NodeNet(0), ca=Path("/ca"), serving=(Path("/c"), Path("/k")),
                                     runtime_socket=Path("/s"), resolv_conf=Path("/r"))  # fmt: skip
    assert config["clusterDomain"] == dns.CLUSTER_DOMAIN == dns.ZONES[0]


def test_coredns_may_only_read_services_namespaces_and_endpoint_slices():
    role, binding = dns.rbac_manifests()
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}  # fmt: skip
    assert granted == {(g, r, v) for g, r in [("", "services"), ("", "namespaces"), ("discovery.k8s.io", "endpointslices")]
                       for v in ("list", "watch")}  # fmt: skip
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": dns.USER}]


def test_the_kubeconfig_names_a_certificate_of_the_coredns_user(tmp_path: Path):
    import yaml
    from cryptography import x509

    from cw_cli.testcluster.pki import generate_pki

    pki = generate_pki(tmp_path / "pki")
    files = dns.DnsFiles(tmp_path / "state")
    dns.write_kubeconfig(files, pki.dir, "https://172.30.250.1:6443")
    config = yaml.safe_load(files.kubeconfig.read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://172.30.250.1:6443"
    user = config["users"][0]["user"]
    cert = x509.load_pem_x509_certificate(Path(user["client-certificate"]).read_bytes())
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == dns.USER
    assert files.kubeconfig.stat().st_mode & 0o077 == 0  # it names a private key


def test_each_object_is_created_at_its_collection():
    paths = [dns._collection(m) for m in [*dns.rbac_manifests(), *dns.service_manifests()]]
    assert paths == ["/apis/rbac.authorization.k8s.io/v1/clusterroles", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                     "/api/v1/namespaces/kube-system/services", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"]  # fmt: skip


def test_the_build_pins_the_version_the_cluster_looks_for(tmp_path: Path, monkeypatch):
    go_mod = (TOOLS / "coredns" / "go.mod").read_text(encoding="utf-8")
    version = load_versions().coredns
    assert version and f"\nrequire github.com/coredns/coredns {version}\n" in go_mod
    build = (TOOLS / "build.sh").read_text(encoding="utf-8")
    all_line = next(line for line in build.splitlines() if line.strip().startswith("all)"))
    assert "build_coredns" in all_line  # CI's `tools/build.sh all` builds it
    assert '"${cache}/coredns-${COREDNS_VERSION}"' in build
    monkeypatch.setenv("CW_CACHE_DIR", str(tmp_path))
    assert binary_paths().coredns == tmp_path / "bin" / f"coredns-{version}" / "coredns"
