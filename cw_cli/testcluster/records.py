"""The test cluster's records: what `up` started (kept as <state_dir>/cluster.json), what
`status` and `down` report, and the marker that says a folder is a cluster's state."""

from __future__ import annotations

from pathlib import Path

import msgspec
from msgspec import Struct, field

from cw_cli.labels import GPU_RESOURCE
from cw_cli.plain_files import read_plain_file

from .errors import TestClusterError
from .names import LEGACY_NAME, NAME

#: The file that marks a folder as the state of a cluster `up` made (so `down` may delete it).
MARKER = f".{NAME}-cluster"
#: The marker's name before the test cluster was called cw-test: an earlier cluster's folder.
LEGACY_MARKER = f".{LEGACY_NAME}-cluster"
STATE_FILE = "cluster.json"
# Start order; stop order is the reverse (a real node's containerd starts first and stops last:
# the kubelet stops before it, and its containers are removed through it).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
COMPONENTS = ("containerd-0", *CONTROL_PLANE, "coredns", "kubelet-0", "kube-proxy-0")
#: The most real nodes a test cluster runs: each is a kubelet, containerd and kube-proxy sharing
#: this machine's CPUs, and a second one is what a multi-node run needs.
MAX_REAL_NODES = 4
#: A real node's processes are named ``<kind>-<node index>``.
NODE_PROCESS_KINDS = ("containerd", "kubelet", "kube-proxy")


def start_rank(name: str) -> int:
    """Where process ``name`` comes in the start order: a real node's by its kind (every node's
    containerd first, every kubelet after the control plane); unknown names (the watchdog) last."""
    kind, _, index = name.rpartition("-")
    base = f"{kind}-0" if kind in NODE_PROCESS_KINDS and index.isdigit() else name
    return COMPONENTS.index(base) if base in COMPONENTS else len(COMPONENTS)


class RealNodeImages(Struct, frozen=True):
    """The images a real node's containerd holds: its sandbox (pause) image and the runtime image."""

    pause: str
    runtime: str
    count: int = 1  # how many real nodes hold them


class ClusterInfo(Struct):
    """What `up` started (also stored as <state_dir>/cluster.json)."""

    state_dir: str
    server: str
    kubeconfig: str  # the user kubeconfig the cw-test context was merged into
    admin_kubeconfig: str  # a kubeconfig inside the state dir (file-referenced certs)
    context: str
    ports: dict[str, int]
    versions: dict[str, str]
    nodes: list[str]
    pids: dict[str, int]
    build_seconds: float = 0.0
    built: list[str] = field(default_factory=list)
    start_seconds: float = 0.0
    already_running: bool = False
    real_nodes: list[str] = field(default_factory=list)  # nodes whose pods really run
    runtime_image: str = ""  # the image built for them (configs/test-cluster-sft.yaml names it)
    real_node_skipped: str = ""  # why this cluster has no real node


class ProcessStatus(Struct):
    """One recorded process of the cluster: its pid, whether it still runs, its log."""

    name: str
    pid: int
    alive: bool
    log: str


class NodeStatus(Struct):
    """One node as `cw cluster status` shows it: Ready, allocatable GPUs, CPU and memory, taints."""

    name: str
    ready: bool
    gpus: str
    cpu: str
    memory: str
    taints: list[str]


class ClusterStatus(Struct):
    """What `status` found: the state folder, the processes, whether the API answers, the nodes."""

    state_dir: str
    exists: bool  # a state dir with a cluster record exists
    api_ready: bool
    server: str | None
    kubeconfig: str | None
    processes: list[ProcessStatus]
    nodes: list[NodeStatus]
    error: str | None = None  # why the API could not be queried

    @property
    def running(self) -> bool:
        """Whether the cluster is up: a record, every process alive, the API ready."""
        return self.exists and self.api_ready and bool(self.processes) and all(
            p.alive for p in self.processes)


class DownResult(Struct):
    """What `down` did: each component stopped, the state folder removed, the kubeconfig cleaned."""

    state_dir: str
    stopped: dict[str, str]  # component -> "stopped" | "killed" | "not running"
    removed_state: bool
    kubeconfig_cleaned: str | None
    leftovers: list[str] = field(default_factory=list)  # what of a real node could not be removed


def load_info(state: Path) -> ClusterInfo | None:
    """The cluster's record, or None when there is none or it is not one `up` wrote (corrupt,
    fields of the wrong type, not a regular file): `status` and `down` then go by the pid records."""
    try:
        return msgspec.json.decode(read_plain_file(state / STATE_FILE, 2**20), type=ClusterInfo)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def is_cluster_state(state: Path) -> bool:
    """Whether ``state`` holds a cluster's state (its marker, or the marker's earlier name)."""
    return (state / MARKER).exists() or (state / LEGACY_MARKER).exists()


def check_state_dir(state: Path) -> None:
    """Refuse a folder that holds anything but a cluster's state.

    Raises:
        TestClusterError: It is not empty and has no marker.
    """
    if state.exists() and any(state.iterdir()) and not is_cluster_state(state):
        raise TestClusterError(
            f"{state} is not empty and was not made by cw; refusing to use it as cluster state dir")


def node_status(n: dict) -> NodeStatus:
    """A Node object as a :class:`NodeStatus`."""
    st = n.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    alloc = st.get("allocatable") or {}
    taints = [f"{t.get('key')}:{t.get('effect')}" for t in n.get("spec", {}).get("taints", []) or []]
    return NodeStatus(n["metadata"]["name"], conds.get("Ready") == "True",
                      alloc.get(GPU_RESOURCE, "0"), alloc.get("cpu", "?"),
                      alloc.get("memory", "?"), taints)
