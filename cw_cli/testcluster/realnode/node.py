"""Start and stop the test cluster's real node: containerd, the kubelet and kube-proxy inside the
node's network namespace (:mod:`.network`), each started by PID like the control plane.

The kubelet authenticates as ``system:node:cw-real-<i>`` with a certificate from the cluster's CA
(the Node authorizer decides what it may read), serves logs, exec and port-forward on the node's
own address with a certificate the API server checks, and its node advertises GPUs through a
node-status patch, as a device plugin would (its containers get no device: they run on CPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from cw_cli.cache import cache_dir
from cw_cli.labels import GPU_RESOURCE

from .. import procs
from ..errors import StartError
from ..kubeconfig import component_kubeconfig, write_yaml
from ..pki import issue_from_ca
from . import image, network, settings

if TYPE_CHECKING:
    from cw_cli.client.connection import Kube

    from ..launcher import Launcher

#: The programs a real node needs besides the kubelet and kube-proxy built here, and the Debian
#: packages that bring them.
HOST_TOOLS = {"containerd": "containerd", "runc": "runc", "ctr": "containerd", "ip": "iproute2",
              "nsenter": "util-linux", "iptables": "iptables", "conntrack": "conntrack", "mmdebstrap": "mmdebstrap"}  # fmt: skip
APT_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "conntrack", "mmdebstrap", "iproute2")
#: Set to 0 to start the test cluster without its real node.
DISABLE_ENV = "CW_REAL_NODE"


def node_name(index: int) -> str:
    """The real node's Node name."""
    return f"cw-real-{index}"


def owner_file() -> Path:
    """Which cluster's state folder runs the real node (one per machine: its names are fixed)."""
    return cache_dir() / "real-node.owner"


def containerd_root(index: int = 0) -> Path:
    """Node ``index``'s containerd root (images, snapshots): kept across clusters, so an image is
    imported once. One per node: two containerds never share a root (its database is locked)."""
    return cache_dir() / ("containerd" if index == 0 else f"containerd-{index}")


def unavailable_reason() -> str | None:
    """Why this machine cannot run a real node (None when it can), with what to do about it."""
    if os.environ.get(DISABLE_ENV, "") == "0":
        return f"{DISABLE_ENV}=0"
    if not sys.platform.startswith("linux"):
        return "real pods need Linux"
    if os.geteuid() != 0:
        return "real pods need root (network namespaces, containerd, the kubelet): run `cw cluster up` as root"
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").is_file():
        return "real pods need cgroups (no /sys/fs/cgroup here)"
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if not shutil.which(tool)})
    if not Path(settings.CNI_BIN_DIR, "bridge").is_file():
        missing.append("containernetworking-plugins")
    if missing:
        return f"missing {', '.join(missing)}: run `apt-get install -y {' '.join(APT_PACKAGES)}`"
    if network.namespace_exists(network.NodeNet(0)):
        return f"another test cluster on this machine runs the real node ({network.NodeNet(0).netns_path} exists)"
    return None


class NodeFiles:
    """Where one real node keeps its files, inside the cluster's state folder."""

    def __init__(self, state: Path, index: int = 0) -> None:
        self.index = index
        self.dir = state / f"real-node-{index}"
        self.containerd_state = self.dir / "containerd"
        self.containerd_config = self.dir / "containerd.toml"
        self.socket = self.dir / "containerd.sock"
        self.cni_dir = self.dir / "cni"
        self.kubelet_root = self.dir / "kubelet"
        self.kubelet_config = self.dir / "kubelet.yaml"
        self.kubelet_kubeconfig = self.dir / "kubelet.kubeconfig"
        self.pod_logs = self.dir / "pod-logs"
        self.proxy_config = self.dir / "kube-proxy.yaml"
        self.proxy_kubeconfig = self.dir / "kube-proxy.kubeconfig"
        self.resolv_conf = self.dir / "resolv.conf"
        self.image_log = self.dir / "image-build.log"

    def ctr(self) -> list[str]:
        """``ctr`` talking to this node's containerd, in the CRI's namespace."""
        return ["ctr", "--address", str(self.socket), "--namespace", "k8s.io"]


def setup_network(index: int = 0, nodes: int = 1) -> None:
    """Create node ``index``'s namespace and link, and the host's blackhole routes; with ``nodes``
    above one, the fabric that joins the nodes (made with node 0) and node ``index``'s link to it.

    Raises:
        StartError: A command failed (a namespace of that name exists, say).
    """
    node = network.NodeNet(index)
    try:
        network.run_commands(network.setup_commands(node))
        if index == 0:
            network.run_commands(network.blackhole_commands(add=True))
        if nodes > 1:
            if index == 0:
                network.run_commands(network.fabric_commands())
            network.run_commands(network.join_fabric_commands(node, nodes))
    except subprocess.CalledProcessError as e:
        network.run_commands(network.teardown_commands(node), check=False)
        raise StartError(f"setting up the real node's network failed: {' '.join(e.cmd)}: {e.stderr.strip()}") from None


def _in_netns(index: int, command: list[str]) -> list[str]:
    """``command`` run in node ``index``'s network namespace only (mounts stay the host's, so the
    kubelet's volume mounts are the ones containerd bind-mounts into containers)."""
    return [shutil.which("nsenter") or "/usr/bin/nsenter", f"--net={network.NodeNet(index).netns_path}", "--", *command]


def start_containerd(files: NodeFiles, pause_ref: str) -> procs.ProcRecord:
    """Write containerd's and the CNI's configs and start containerd in the node's namespace."""
    node = network.NodeNet(files.index)
    root = containerd_root(files.index)
    for folder in (files.containerd_state, files.cni_dir, root):
        folder.mkdir(parents=True, exist_ok=True)
    (files.cni_dir / "10-cw.conflist").write_text(settings.cni_config(node))
    files.containerd_config.write_text(
        settings.containerd_config(root, files.containerd_state, files.socket, files.cni_dir, pause_ref))
    containerd = shutil.which("containerd") or "containerd"
    return procs.spawn(f"containerd-{files.index}", _in_netns(files.index, [containerd, "--config", str(files.containerd_config)]),
                       files.dir.parent / "logs" / f"containerd-{files.index}.log", files.dir.parent / "pids")  # fmt: skip


def wait_containerd(files: NodeFiles, record: procs.ProcRecord, timeout: float = 60.0) -> None:
    """Wait until containerd answers on its socket.

    Raises:
        StartError: It exited, or did not answer in ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.is_alive(record):
            raise StartError(f"containerd exited during start-up; see {record.log}", record.log)
        if files.socket.exists() and subprocess.run([*files.ctr(), "version"], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    raise StartError(f"containerd did not answer on {files.socket} in {timeout:.0f}s; see {record.log}", record.log)


def has_image(files: NodeFiles, ref: str) -> bool:
    """Whether the node's containerd holds image ``ref``."""
    done = subprocess.run([*files.ctr(), "images", "ls", "-q", f"name=={ref}"], capture_output=True, text=True)
    return done.returncode == 0 and ref in done.stdout.split()


def ensure_images(files: NodeFiles, pause_binary: Path, pause_ref: str, say: Callable[[str], None],
                  first: NodeFiles | None = None) -> str:  # fmt: skip
    """Import the pause image and build the runtime image where the node lacks them; the runtime's ref.

    Args:
        files: The node's files (its containerd runs).
        pause_binary: The pause program the sandbox image is made of.
        pause_ref: The sandbox image's name.
        say: Progress.
        first: Another node whose containerd runs and holds the runtime image: copied from there
            instead of built again.
    """
    if not has_image(files, pause_ref):
        image.import_pause(files.ctr(), pause_ref, pause_binary, files.image_log)
    ref = image.runtime_image()
    if not has_image(files, ref):
        if first is not None:
            say(f"copying the runtime image to real node {files.index} (once: it is kept in {containerd_root(files.index)})")
            image.copy_image(first.ctr(), files.ctr(), ref, containerd_root(first.index), containerd_root(files.index),
                             files.image_log)  # fmt: skip
        else:
            image.build_runtime(files.ctr(), cache_dir() / "images" / "build", files.image_log, say)
        _remove_older_runtimes(files, ref)
    return ref


def _remove_older_runtimes(files: NodeFiles, keep: str) -> None:
    """Remove the runtime images of earlier pins (each is several GB), and the ``sha256:<id>``
    names the CRI gives them, so containerd frees their content."""
    listed = subprocess.run([*files.ctr(), "images", "ls"], capture_output=True, text=True).stdout.splitlines()[1:]
    rows = [line.split() for line in listed if len(line.split()) >= 3]
    kept = {row[2] for row in rows if not row[0].startswith(("sha256:", image.RUNTIME_REPO + ":")) or row[0] == keep}
    older = [row[0] for row in rows if row[2] not in kept]
    if older:
        subprocess.run([*files.ctr(), "images", "rm", *older], capture_output=True)


def write_node_files(files: NodeFiles, pki_dir: Path, server: str) -> None:
    """The kubelet's and kube-proxy's certificates, kubeconfigs and configurations."""
    node = network.NodeNet(files.index)
    name = node_name(files.index)
    ca = pki_dir / "ca.crt"
    client = issue_from_ca(pki_dir, f"kubelet-{name}", f"system:node:{name}", "system:nodes")
    serving = issue_from_ca(pki_dir, f"kubelet-{name}-serving", name, server=True, dns=(name,), ips=(node.node_ip,))
    proxy = issue_from_ca(pki_dir, f"kube-proxy-{name}", "system:kube-proxy")
    write_yaml(files.kubelet_kubeconfig, component_kubeconfig(server, ca, client.cert, client.key, f"system:node:{name}"))
    write_yaml(files.proxy_kubeconfig, component_kubeconfig(server, ca, proxy.cert, proxy.key, "system:kube-proxy"))
    files.resolv_conf.write_text(settings.resolv_conf())
    config = settings.kubelet_config(node, ca=ca, serving=(serving.cert, serving.key), runtime_socket=files.socket,
                                     resolv_conf=files.resolv_conf)  # fmt: skip
    config["podLogsDir"] = str(files.pod_logs)
    files.kubelet_config.write_text(yaml.safe_dump(config, sort_keys=False))
    files.proxy_config.write_text(yaml.safe_dump(settings.kube_proxy_config(node, files.proxy_kubeconfig), sort_keys=False))


def start_node_agents(launcher: Launcher, files: NodeFiles, kubelet: Path, kube_proxy: Path) -> None:
    """Start the kubelet and kube-proxy in the node's namespace."""
    node = network.NodeNet(files.index)
    launcher.spawn(f"kubelet-{files.index}", _in_netns(files.index, [
        str(kubelet), f"--config={files.kubelet_config}", f"--kubeconfig={files.kubelet_kubeconfig}",
        f"--root-dir={files.kubelet_root}", f"--hostname-override={node_name(files.index)}",
        f"--node-ip={node.node_ip}", f"--node-labels={settings.REAL_NODE_LABEL}=true", "--v=1",
    ]))  # fmt: skip
    launcher.spawn(f"kube-proxy-{files.index}", _in_netns(files.index, [str(kube_proxy), f"--config={files.proxy_config}"]))


def advertise_gpus(kube: Kube, index: int, count: int = settings.REAL_NODE_GPUS) -> None:
    """Give the node ``count`` GPUs in its status (capacity and allocatable), as a device plugin would."""
    body = {"status": {"capacity": {GPU_RESOURCE: str(count)}, "allocatable": {GPU_RESOURCE: str(count)}}}
    kube.raw("PATCH", f"/api/v1/nodes/{node_name(index)}/status", body=body,
             content_type="application/merge-patch+json", what="advertise the real node's GPUs")  # fmt: skip


def gpus_advertised(kube: Kube, index: int) -> bool:
    """Whether the node is registered and its allocatable GPUs are there."""
    node = kube.request("GET", f"/api/v1/nodes/{node_name(index)}", what="read the real node")
    return GPU_RESOURCE in ((node.get("status") or {}).get("allocatable") or {})
