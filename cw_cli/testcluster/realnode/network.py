"""The real node's network: a network namespace per node, joined to the host by one veth pair.

Nothing here uses an address of an existing interface. Each node ``i`` gets:

- the namespace ``cw-real-<i>`` (its kubelet, containerd, kube-proxy and pods live there);
- the veth pair ``cwr<i>h`` (host end, ``172.30.250.<4i+1>/30``) and ``cwr<i>n`` (node end,
  ``.<4i+2>``): the API server listens on node 0's host end, which every node reaches by a route;
- its pods' range ``10.245.<i>.0/24`` on a bridge inside the namespace, routed from the host to the
  node end (the API server's answers to pods);
- with more than one node, a second veth pair into the *fabric*: a namespace of its own
  (``cw-real-fabric``) holding one bridge, where node ``i`` has ``172.30.251.<i+1>/24``. Each node
  routes the other nodes' pod ranges there, so pod-to-pod traffic between nodes (a multi-node run's
  rendezvous) never enters the host's namespace, whose forwarding stays as it was.

Rules: no default route in a node's or a pod's namespace, no masquerading, and blackhole routes on
the host for the ranges only KWOK's fake pods and the Services use, so a packet for a fake pod or
a ClusterIP never reaches a real interface. The commands are pure functions of the node's index
(:func:`setup_commands`, :func:`teardown_commands`), run by :func:`run_commands`.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Sequence

from msgspec import Struct

from ..argv import POD_CIDR as FAKE_POD_NET
from ..argv import SERVICE_CIDR as SERVICE_NET

CLUSTER_DOMAIN = "cluster.local"
#: The cluster DNS Service's address (realnode/dns.py): the tenth of the Services' range, as kubeadm
#: chooses (10.96.0.10). It lies in the range's low band, which the API server hands out only when
#: asked by address, so no Service takes it first.
CLUSTER_DNS_IP = str(ipaddress.ip_network(SERVICE_NET)[10])

#: The /24 the host ends and node ends of the veth pairs are cut from (one /30 per node).
LINK_NET = ipaddress.ip_network("172.30.250.0/24")
#: Real pods' addresses: one /24 per node, apart from KWOK's fake 10.244.0.0/16.
REAL_POD_NET = ipaddress.ip_network("10.245.0.0/16")
#: The nodes' addresses on the fabric (node ``i`` has the ``i+1``-th), which joins their namespaces.
FABRIC_NET = ipaddress.ip_network("172.30.251.0/24")
#: The fabric's namespace and the bridge in it.
FABRIC_NETNS = "cw-real-fabric"
FABRIC_BRIDGE = "cwfab"
#: Ranges only KWOK's fake pods and the Services use: blackholed on the host.
BLACKHOLES = (FAKE_POD_NET, SERVICE_NET)
#: Where network namespaces made by ``ip netns add`` are mounted.
NETNS_DIR = "/run/netns"


class NodeNet(Struct, frozen=True):
    """The names and addresses of real node ``index``."""

    index: int

    @property
    def netns(self) -> str:
        """The node's network namespace."""
        return f"cw-real-{self.index}"

    @property
    def netns_path(self) -> str:
        """The namespace's file (what ``nsenter --net=`` takes)."""
        return f"{NETNS_DIR}/{self.netns}"

    @property
    def host_if(self) -> str:
        """The host end of the veth pair."""
        return f"cwr{self.index}h"

    @property
    def node_if(self) -> str:
        """The node end of the veth pair (inside the namespace)."""
        return f"cwr{self.index}n"

    @property
    def _link(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(list(LINK_NET.subnets(new_prefix=30))[self.index])

    @property
    def host_ip(self) -> str:
        """The host end's address."""
        return str(self._link.network_address + 1)

    @property
    def node_ip(self) -> str:
        """The node's address (its InternalIP, where its kubelet serves)."""
        return str(self._link.network_address + 2)

    @property
    def fabric_if(self) -> str:
        """The node's end of its fabric link (inside the node's namespace)."""
        return f"cwf{self.index}n"

    @property
    def fabric_port(self) -> str:
        """The fabric's end of the node's link (a port of the fabric's bridge)."""
        return f"cwf{self.index}b"

    @property
    def fabric_ip(self) -> str:
        """The node's address on the fabric."""
        return str(FABRIC_NET.network_address + 1 + self.index)

    @property
    def pod_cidr(self) -> str:
        """This node's pods' range."""
        return str(list(REAL_POD_NET.subnets(new_prefix=24))[self.index])

    @property
    def pod_gateway(self) -> str:
        """The bridge's address in the node's namespace (its pods' next hop)."""
        return str(ipaddress.ip_network(self.pod_cidr).network_address + 1)


def api_address() -> str:
    """Where the API server listens when real nodes run: node 0's host end."""
    return NodeNet(0).host_ip


def setup_commands(node: NodeNet) -> list[list[str]]:
    """The ``ip`` and ``sysctl`` commands that make node ``node``'s namespace and link."""
    ns = ["ip", "netns", "exec", node.netns]
    commands = [
        ["ip", "netns", "add", node.netns],
        ["ip", "link", "add", node.host_if, "type", "veth", "peer", "name", node.node_if, "netns", node.netns],
        ["ip", "addr", "add", f"{node.host_ip}/30", "dev", node.host_if],
        ["ip", "link", "set", node.host_if, "up"],
        [*ns, "ip", "link", "set", "lo", "up"],
        [*ns, "ip", "addr", "add", f"{node.node_ip}/30", "dev", node.node_if],
        [*ns, "ip", "link", "set", node.node_if, "up"],
        # The node forwards between its pods' bridge and the link (its own namespace only).
        [*ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
        ["ip", "route", "replace", node.pod_cidr, "via", node.node_ip, "dev", node.host_if],
    ]
    if node.index > 0:  # the API server's address is node 0's host end
        commands.append([*ns, "ip", "route", "replace", f"{api_address()}/32", "via", node.host_ip])
    return commands


def fabric_commands() -> list[list[str]]:
    """Make the fabric: its namespace and the bridge the nodes' fabric links join."""
    fabric = ["ip", "-n", FABRIC_NETNS]
    return [
        ["ip", "netns", "add", FABRIC_NETNS],
        [*fabric, "link", "set", "lo", "up"],
        [*fabric, "link", "add", FABRIC_BRIDGE, "type", "bridge"],
        [*fabric, "link", "set", FABRIC_BRIDGE, "up"],
    ]


def join_fabric_commands(node: NodeNet, nodes: int) -> list[list[str]]:
    """Link node ``node`` to the fabric and route the other ``nodes - 1`` nodes' pods through it."""
    fabric, ns = ["ip", "-n", FABRIC_NETNS], ["ip", "-n", node.netns]
    commands = [
        [*fabric, "link", "add", node.fabric_port, "type", "veth", "peer", "name", node.fabric_if, "netns", node.netns],
        [*fabric, "link", "set", node.fabric_port, "master", FABRIC_BRIDGE, "up"],
        [*ns, "addr", "add", f"{node.fabric_ip}/{FABRIC_NET.prefixlen}", "dev", node.fabric_if],
        [*ns, "link", "set", node.fabric_if, "up"],
    ]
    for other in (NodeNet(i) for i in range(nodes) if i != node.index):
        commands.append([*ns, "route", "replace", other.pod_cidr, "via", other.fabric_ip, "dev", node.fabric_if])
    return commands


def fabric_teardown_commands() -> list[list[str]]:
    """Remove the fabric (its bridge and the nodes' fabric links go with its namespace)."""
    return [["ip", "netns", "del", FABRIC_NETNS]]


def fabric_exists() -> bool:
    """Whether the fabric's namespace is there."""
    return os.path.exists(f"{NETNS_DIR}/{FABRIC_NETNS}")


def blackhole_commands(add: bool) -> list[list[str]]:
    """Host routes that drop packets for the fake pods' and the Services' ranges (or remove them)."""
    return [["ip", "route", "replace" if add else "del", "blackhole", net] for net in BLACKHOLES]


def teardown_commands(node: NodeNet) -> list[list[str]]:
    """Remove node ``node``'s namespace (its veth pair goes with it) and its host route."""
    return [
        ["ip", "route", "del", node.pod_cidr],
        ["ip", "link", "del", node.host_if],
        ["ip", "netns", "del", node.netns],
    ]


def run_commands(commands: Sequence[Sequence[str]], check: bool = True) -> list[str]:
    """Run each command; the errors of those that failed (raised at the first when ``check``).

    Raises:
        subprocess.CalledProcessError: A command failed and ``check``.
    """
    errors = []
    for command in commands:
        done = subprocess.run(list(command), capture_output=True, text=True)
        if done.returncode != 0:
            if check:
                raise subprocess.CalledProcessError(done.returncode, list(command), done.stdout, done.stderr)
            errors.append(f"{' '.join(command)}: {done.stderr.strip()}")
    return errors


def namespace_exists(node: NodeNet) -> bool:
    """Whether node ``node``'s namespace is there (a cluster runs, or one was not cleaned up)."""
    return os.path.exists(node.netns_path)


__all__ = ["BLACKHOLES", "FABRIC_NET", "FAKE_POD_NET", "LINK_NET", "REAL_POD_NET", "SERVICE_NET", "NodeNet", "api_address"]
