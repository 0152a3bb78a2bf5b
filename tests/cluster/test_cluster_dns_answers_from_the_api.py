"""The CoreDNS that tools/build.sh builds, started as cw_cli/testcluster/realnode/dns.py starts it,
answers Service names from a real API server and refuses every other name at once.

It listens on 127.0.0.1 at a free port here (the session's cluster has no real node, so no veth to
bind), reads the API as ``system:coredns`` with only the RBAC the module grants (on a cluster this
session started: CoreDNS is ready only once it has listed what it serves, so the fixture's wait
proves that RBAC enough), and is asked with a DNS client built from the standard library. The kube-dns
Service and EndpointSlice the module writes are created on that cluster too, as a real node's
cluster gets them, and removed again.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import struct
import time

import pytest

from cw_cli.testcluster import api, procs
from cw_cli.testcluster.build import binary_paths
from cw_cli.testcluster.launcher import Launcher, free_ports
from cw_cli.testcluster.pki import load_pki
from cw_cli.testcluster.realnode import dns

NOERROR, NXDOMAIN, REFUSED = 0, 3, 5
A, AAAA = 1, 28


def _skip_name(data: bytes, pos: int) -> int:
    """The offset after the (possibly compressed) name at ``pos``."""
    while True:
        length = data[pos]
        if length & 0xC0 == 0xC0:
            return pos + 2
        pos += 1 + length
        if length == 0:
            return pos


def query(server: tuple[str, int], name: str, qtype: int = A, tcp: bool = False, timeout: float = 3.0) -> tuple[int, list[str]]:
    """One recursive-desired query for ``name``: the answer's RCODE and its A records."""
    qid = secrets.randbits(16)
    qname = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        if tcp:
            s.connect(server)
            s.sendall(struct.pack("!H", len(packet)) + packet)
            size = struct.unpack("!H", s.recv(2, socket.MSG_WAITALL))[0]
            data = s.recv(size, socket.MSG_WAITALL)
        else:
            s.sendto(packet, server)
            data = s.recv(4096)
    rid, flags, questions, answers, _, _ = struct.unpack("!HHHHHH", data[:12])
    assert rid == qid and flags & 0x8000, data
    pos = 12
    for _ in range(questions):
        pos = _skip_name(data, pos) + 4
    ips = []
    for _ in range(answers):
        pos = _skip_name(data, pos)
        rtype, _, _, size = struct.unpack("!HHIH", data[pos:pos + 10])
        pos += 10
        if rtype == A and size == 4:
            ips.append(socket.inet_ntoa(data[pos:pos + 4]))
        pos += size
    return flags & 0xF, ips


@pytest.fixture(scope="module")
def coredns(kube_cluster, tmp_path_factory):
    """(server address, whether it reads the API as system:coredns on a cluster this session owns)."""
    binary = binary_paths().coredns
    if not os.access(binary, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI builds CoreDNS (tools/build.sh all) but {binary} is not there", pytrace=False)
        pytest.skip(f"CoreDNS is not built ({binary}): run `bash tools/build.sh coredns`")
    state = tmp_path_factory.mktemp("coredns")
    files = dns.DnsFiles(state)
    kube = None
    if kube_cluster.local:
        # Its own certificate, signed by a copy of the cluster's CA (the cluster's folder is left as is).
        (state / "pki").mkdir()
        for name in ("ca.crt", "ca.key"):
            shutil.copy(kube_cluster.state_dir / "pki" / name, state / "pki" / name)
        dns.write_kubeconfig(files, state / "pki", kube_cluster.server)
        kube = api.admin_client(kube_cluster.server, load_pki(kube_cluster.state_dir / "pki"))
        dns.create_objects(kube)
        context = None
    else:
        files.dir.mkdir(parents=True)
        shutil.copy(kube_cluster.kubeconfig, files.kubeconfig)
        context = kube_cluster.context
    launcher = Launcher(state, timeout=60.0)
    try:
        listen = dns.start(launcher, binary, files, address="127.0.0.1", port=free_ports(1)[0], context=context)
        launcher.wait("CoreDNS /ready", lambda: dns.is_ready(listen))
        yield (listen.address, listen.port), kube_cluster.local
    finally:
        for record in launcher.started.values():
            procs.stop(record)
        if kube is not None:
            for manifest in reversed([*dns.rbac_manifests(), *dns.service_manifests()]):
                kube.raw("DELETE", f"{dns._collection(manifest)}/{manifest['metadata']['name']}", what="remove a test object")
            kube.close()


def test_service_names_resolve_to_their_cluster_ips_over_udp_and_tcp(coredns, kube_api, namespace, wait_for):
    from kubernetes import client

    server, _ = coredns
    core = client.CoreV1Api(kube_api)
    kubernetes_ip = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert query(server, "kubernetes.default.svc.cluster.local") == (NOERROR, [kubernetes_ip])
    assert query(server, "kubernetes.default.svc.cluster.local", tcp=True) == (NOERROR, [kubernetes_ip])

    made = core.create_namespaced_service(namespace, {"metadata": {"name": "web"},
                                                      "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}})  # fmt: skip
    wait_for(lambda: query(server, f"web.{namespace}.svc.cluster.local") == (NOERROR, [made.spec.cluster_ip]), 30,
             what="CoreDNS to answer for a Service created after it started")  # fmt: skip

    # A pod's resolver tries `web` with its search domains first (ndots:5, as the kubelet writes
    # them): the wrong expansions must be NXDOMAIN, so it goes on to the next one.
    search = [f"{namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    answers = [query(server, f"web.{domain}") for domain in search]
    assert answers == [(NOERROR, [made.spec.cluster_ip]), (NXDOMAIN, []), (NXDOMAIN, [])]
    answers = [query(server, f"web.{namespace}.{domain}") for domain in search]
    assert answers == [(NXDOMAIN, []), (NOERROR, [made.spec.cluster_ip]), (NXDOMAIN, [])]


def test_a_hub_name_is_refused_at_once_and_never_forwarded(coredns):
    server, _ = coredns
    for name, qtype in [("huggingface.co", A), ("huggingface.co", AAAA), ("cdn-lfs.hf.co", A), ("pypi.org", A)]:
        started = time.monotonic()
        rcode, ips = query(server, name, qtype)
        assert (rcode, ips) == (REFUSED, []), name
        assert time.monotonic() - started < 1.0, name
    # The same name with a pod's search domains appended is the cluster's to answer: NXDOMAIN, fast.
    started = time.monotonic()
    assert query(server, "huggingface.co.default.svc.cluster.local") == (NXDOMAIN, [])
    assert time.monotonic() - started < 1.0


def test_the_kube_dns_service_takes_its_address_and_resolves(coredns, kube_api):
    from kubernetes import client

    server, owned = coredns
    if not owned:
        pytest.skip("an external cluster (CW_TEST_KUBECONFIG): its kube-system is not this test's to change")
    service = client.CoreV1Api(kube_api).read_namespaced_service(dns.SERVICE, dns.NAMESPACE)
    assert service.spec.cluster_ip == dns.CLUSTER_DNS_IP and not service.spec.selector
    slices = client.DiscoveryV1Api(kube_api).list_namespaced_endpoint_slice(
        dns.NAMESPACE, label_selector=f"kubernetes.io/service-name={dns.SERVICE}").items
    assert [[a for e in s.endpoints for a in e.addresses] for s in slices] == [[dns.listen_address()]]
    assert query(server, "kube-dns.kube-system.svc.cluster.local") == (NOERROR, [dns.CLUSTER_DNS_IP])

