"""The real node's cluster DNS: CoreDNS (built from ``tools/coredns``) as a host process, and the
``kube-dns`` Service that sends pods to it.

CoreDNS runs beside the control plane, recorded by PID like it, and listens on node 0's host end of
its veth pair (:func:`listen_address`, the API server's address too): an address the cluster
creates itself, never ``0.0.0.0`` or an address of an interface that was there before. The Service
``kube-system/kube-dns`` has no selector; an EndpointSlice written here points it at that address,
so kube-proxy in the node's namespace DNATs ``10.96.0.10:53`` there, as it does the ``kubernetes``
Service's traffic to the API server.

CoreDNS serves the cluster's zones only, through its kubernetes plugin, as ``system:coredns`` (a
certificate from the cluster's CA, the same few read rights as a real cluster's CoreDNS). It has no
forward plugin: a name outside those zones (a hub's) is answered REFUSED at once, so a lookup fails
fast and no query leaves the machine.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from .. import api
from ..kubeconfig import component_kubeconfig, write_yaml
from ..pki import issue_from_ca
from .network import CLUSTER_DNS_IP, CLUSTER_DOMAIN, api_address

if TYPE_CHECKING:
    from cw_cli.client.connection import Kube

    from ..launcher import Launcher

#: What CoreDNS answers for: Service names and the reverse zones (Services' PTR records).
ZONES = (CLUSTER_DOMAIN, "in-addr.arpa", "ip6.arpa")
NAMESPACE = "kube-system"
SERVICE = "kube-dns"
DNS_PORT = 53
#: The user CoreDNS reads Services, EndpointSlices and Namespaces as.
USER = "system:coredns"
#: Its process record's name (``<state>/pids/coredns.json``, so ``down()`` stops it by PID).
PROCESS = "coredns"
#: Who writes the EndpointSlice: a value of our own, so the EndpointSlice controller leaves it alone.
MANAGED_BY = "cw-test-cluster"


class Listen(Struct, frozen=True):
    """Where one CoreDNS answers: DNS on ``address:port``, ``/health`` and ``/ready`` on their ports."""

    address: str
    port: int
    health_port: int
    ready_port: int


class DnsFiles:
    """Where CoreDNS keeps its files, inside the cluster's state folder."""

    def __init__(self, state: Path) -> None:
        self.dir = state / "coredns"
        self.corefile = self.dir / "Corefile"
        self.kubeconfig = self.dir / "coredns.kubeconfig"


def listen_address() -> str:
    """Where the cluster's CoreDNS listens: node 0's host end of its veth pair (172.30.250.1)."""
    return api_address()


def kubelet_settings() -> dict[str, Any]:
    """The KubeletConfiguration fields that give ClusterFirst pods this DNS and its search domains."""
    return {"clusterDNS": [CLUSTER_DNS_IP], "clusterDomain": CLUSTER_DOMAIN}


def _check_address(address: str) -> str:
    """``address`` if CoreDNS may bind it: an IPv4 address, never the unspecified one (every
    interface of the machine).

    Raises:
        ValueError: It is not an IPv4 address, or it is 0.0.0.0.
    """
    ip = ipaddress.IPv4Address(address)
    if ip.is_unspecified:
        raise ValueError("CoreDNS must not listen on 0.0.0.0: that is every interface of the machine")
    return str(ip)


def _quoted(text: str) -> str:
    """``text`` (a path, a context's name) as one Corefile token.

    Raises:
        ValueError: It holds a character a Corefile cannot quote.
    """
    if any(c in text for c in '"\\\n\r'):
        raise ValueError(f"a Corefile cannot name {text!r}")
    return f'"{text}"'


def corefile(kubeconfig: Path, listen: Listen, context: str | None = None) -> str:
    """The Corefile: the cluster's zones on ``listen``, answered from the API server.

    Args:
        kubeconfig: The kubeconfig CoreDNS reads the API with.
        listen: Its address and ports (:func:`_check_address` rules apply).
        context: A context of ``kubeconfig`` (None: its current one).

    Raises:
        ValueError: The address may not be bound, or the path cannot be written in a Corefile.
    """
    address = _check_address(listen.address)
    keys = " ".join(f"{zone}:{listen.port}" for zone in ZONES)
    return f"""# cw's test cluster DNS (cw_cli/testcluster/realnode/dns.py). No forward plugin: a name outside
# these zones is answered REFUSED at once, so a lookup of a hub's name fails fast and stays here.
{keys} {{
    bind {address}
    errors
    # Failures only (SERVFAIL and the like): with ndots:5 every name meets NXDOMAINs first, as it should.
    log . {{
        class error
    }}
    health {address}:{listen.health_port}
    ready {address}:{listen.ready_port}
    loadbalance
    cache 30
    kubernetes {" ".join(ZONES)} {{
        kubeconfig {_quoted(str(kubeconfig))}{f" {_quoted(context)}" if context else ""}
        pods disabled
    }}
}}
"""


def write_kubeconfig(files: DnsFiles, pki_dir: Path, server: str) -> None:
    """CoreDNS's certificate (``system:coredns``, from the cluster's CA) and its kubeconfig."""
    pair = issue_from_ca(pki_dir, "coredns", USER)
    write_yaml(files.kubeconfig, component_kubeconfig(server, pki_dir / "ca.crt", pair.cert, pair.key, USER))


def _free_ports(address: str, count: int) -> list[int]:
    """``count`` TCP ports free on ``address`` now (for /health and /ready, which CoreDNS binds next)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind((address, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start(launcher: Launcher, binary: Path, files: DnsFiles, address: str | None = None, port: int = DNS_PORT,
          context: str | None = None) -> Listen:  # fmt: skip
    """Write the Corefile and start CoreDNS, recorded as :data:`PROCESS`; where it listens.

    Args:
        launcher: The cluster's launcher (records the process for ``down()``).
        binary: The CoreDNS built by ``tools/build.sh coredns`` (:func:`binary_path`).
        files: Its files; the kubeconfig written already (:func:`write_kubeconfig`).
        address: Where to listen; None: :func:`listen_address`, the veth's host end.
        port: The DNS port (the kube-dns EndpointSlice must name the same).
        context: A context of the kubeconfig (None: its current one).

    Raises:
        ValueError: ``address`` is 0.0.0.0 or not IPv4.
    """
    address = _check_address(address or listen_address())
    health, ready = _free_ports(address, 2)
    listen = Listen(address, port, health, ready)
    files.dir.mkdir(parents=True, exist_ok=True)
    files.corefile.write_text(corefile(files.kubeconfig, listen, context))
    launcher.spawn(PROCESS, [binary, "-conf", files.corefile])
    return listen


def is_ready(listen: Listen, timeout: float = 2.0) -> bool:
    """Whether CoreDNS says ready: its kubernetes plugin has read the Services (``/ready`` is 200).

    Raises:
        OSError: Nothing answers there yet.
    """
    # http.client, not urllib: a proxy from the environment must never see this request.
    conn = http.client.HTTPConnection(listen.address, listen.ready_port, timeout=timeout)
    try:
        conn.request("GET", "/ready")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def rbac_manifests() -> list[dict[str, Any]]:
    """The ClusterRole ``system:coredns`` (what the kubernetes plugin lists and watches) and its binding."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": USER},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    return [role, binding]


def service_manifests(address: str | None = None, port: int = DNS_PORT) -> list[dict[str, Any]]:
    """The ``kube-dns`` Service (no selector: no pod serves it) and the EndpointSlice that points it
    at CoreDNS on ``address:port`` (None: :func:`listen_address`).

    Raises:
        ValueError: ``address`` is 0.0.0.0 or not IPv4.
    """
    address = _check_address(address or listen_address())
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                     "labels": {"k8s-app": SERVICE, "kubernetes.io/name": "CoreDNS"}},  # fmt: skip
        "spec": {
            "type": "ClusterIP",
            "clusterIP": CLUSTER_DNS_IP,
            "ports": [{"name": name, "protocol": proto, "port": DNS_PORT, "targetPort": port} for name, proto in ports],
        },
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                     "labels": {"kubernetes.io/service-name": SERVICE, "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},  # fmt: skip
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": name, "protocol": proto, "port": port} for name, proto in ports],
    }
    return [service, endpoints]


def _collection(manifest: dict[str, Any]) -> str:
    """The URL path an object is created at."""
    group_version, kind = manifest["apiVersion"], manifest["kind"]
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    namespace = manifest["metadata"].get("namespace")
    plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Service": "services",
              "EndpointSlice": "endpointslices"}[kind]  # fmt: skip
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def create_objects(kube: Kube, address: str | None = None, port: int = DNS_PORT) -> None:
    """Create CoreDNS's RBAC, the kube-dns Service and its EndpointSlice (each that exists counts as made).

    Raises:
        StartError: The API server refused one.
    """
    for manifest in [*rbac_manifests(), *service_manifests(address, port)]:
        api.create(kube, _collection(manifest), manifest)


__all__ = [
    "CLUSTER_DNS_IP", "CLUSTER_DOMAIN", "DNS_PORT", "PROCESS", "USER", "ZONES", "DnsFiles", "Listen",
    "corefile", "create_objects", "is_ready", "kubelet_settings", "listen_address", "rbac_manifests",
    "service_manifests", "start", "write_kubeconfig",
]  # fmt: skip
