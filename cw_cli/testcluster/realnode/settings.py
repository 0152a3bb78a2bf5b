"""The real node's settings files, as pure functions: containerd's config, the CNI network, the
kubelet's and kube-proxy's configurations. Every choice that departs from a default says why.

Where a setting differs from what kubeadm writes for a real cluster, it is because of this kind of
machine: cgroup v1 (kept, with ``failCgroupV1: false``), no CAP_SYS_RESOURCE (so runc may only
raise ``oom_score_adj``), a small disk, images that can be imported but never pulled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .network import CLUSTER_DNS_IP, CLUSTER_DOMAIN, SERVICE_NET, NodeNet

#: The taint and label of a real node: only pods that tolerate it run there (the KWOK tests'
#: pods, whose images are never pulled, stay on the fake nodes).
REAL_NODE_LABEL = "cw.dev/real-node"
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
#: GPUs a real node advertises (a node-status patch, as a device plugin would): GPU runs schedule
#: there, and its containers get no device (they train on CPU).
REAL_NODE_GPUS = 8
KUBELET_PORT = 10250
CNI_BIN_DIR = "/usr/lib/cni"


def containerd_config(root: Path, state: Path, socket: Path, cni_conf_dir: Path, sandbox_image: str) -> str:
    """containerd 1.6's config (version 2) for one node.

    ``root`` (images and their unpacked snapshots) outlives the cluster, so an imported image is
    imported once; ``state`` and the socket live in the cluster's folder.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/opt"

[{cri}]
  # The pause image is built and imported here: no registry answers.
  sandbox_image = "{sandbox_image}"
  # No CAP_SYS_RESOURCE on these machines: runc may not lower a process's oom_score_adj, and
  # every sandbox failed ("can't get final child's PID from pipe") until this was set.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  # Imported images only: a pull of anything else fails at once instead of retrying a registry.
  discard_unpacked_layers = false

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{cni_conf_dir}"
"""


def cni_config(node: NodeNet) -> str:
    """The pods' network: a bridge in the node's namespace, addresses from the node's range.

    No default route (pods reach the Services' range and the API server's link, nothing else) and
    no masquerading: a pod's packets keep its address, and none can leave the machine.
    """
    routes = [{"dst": SERVICE_NET}, {"dst": "172.30.250.0/24"}, {"dst": "10.245.0.0/16"}]
    conf = {
        "cniVersion": "0.4.0",
        "name": "cw-real",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cw0",
                "isGateway": True,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                         "routes": routes},  # fmt: skip
            },
            {"type": "loopback"},
        ],
    }
    return json.dumps(conf, indent=2)


def kubelet_config(node: NodeNet, *, ca: Path, serving: tuple[Path, Path], runtime_socket: Path,
                   resolv_conf: Path) -> dict[str, Any]:  # fmt: skip
    """The kubelet's KubeletConfiguration (v1beta1)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        # As on a real cluster: the API server's client certificate, checked against the CA, and
        # every other caller through TokenReview/SubjectAccessReview.
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},  # fmt: skip
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        # This kernel mounts cgroup v1; the kubelet refuses it unless told otherwise.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        # No QoS cgroup tree (it needs every controller the kubelet expects on v1); pods' own
        # cgroups still enforce their limits, so an OOMKilled container is one.
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        # The kernel defaults the kubelet would require (vm.overcommit_memory and friends) are the
        # host's: a test cluster does not change them.
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        # Imported images cannot be pulled again: never collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "87600h",
        # A small disk: evict only when almost nothing is left.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                         "imagefs.available": "1%"},  # fmt: skip
        "serializeImagePulls": False,
        "resolvConf": str(resolv_conf),
        # Cluster DNS: CoreDNS on the veth's host end, through the kube-dns Service (realnode/dns.py).
        "clusterDNS": [CLUSTER_DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "maxPods": 32,
        "podPidsLimit": -1,
        "registerWithTaints": [REAL_NODE_TAINT],
        "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "1m",
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
    }


def kube_proxy_config(node: NodeNet, kubeconfig: Path) -> dict[str, Any]:
    """kube-proxy in iptables mode, inside the node's namespace (its rules never touch the host's)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": f"cw-real-{node.index}",
        "bindAddress": node.node_ip,
        "clusterCIDR": "10.245.0.0/16",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # conntrack table sizes are host-wide settings: leave them.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {"masqueradeAll": False, "localhostNodePorts": False},
        "nodePortAddresses": [f"{node.node_ip}/32"],
    }


def resolv_conf() -> str:
    """The node's own resolv.conf, which pods with ``dnsPolicy: Default`` get: no server, so a
    lookup of any name (a hub's, say) fails at once instead of waiting on an address outside the
    machine. ``ClusterFirst`` pods (the default) get the cluster's DNS instead (kubelet's clusterDNS)."""
    return "# cw test cluster: no name server outside the cluster\noptions timeout:1 attempts:1\n"
