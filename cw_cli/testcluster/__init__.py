"""The test cluster: a real Kubernetes control plane on 127.0.0.1, for tests and demos.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built from their Go modules,
pinned in tools/versions.env) plus KWOK, which plays the kubelets of fake GPU nodes.
Pure library: functions return data or raise TestClusterError; nothing is printed.

    from cw_cli import testcluster
    info = testcluster.up(kubeconfig="/tmp/kc")   # builds missing binaries first
    testcluster.status().running
    testcluster.down()
"""

from .build import Binaries, binary_paths, ensure_binaries, missing_components
from .cluster import (
    ClusterInfo,
    ClusterStatus,
    DownResult,
    NodeStatus,
    ProcessStatus,
    down,
    status,
    up,
)
from .errors import BuildError, StartError, TestClusterError
from .kubeconfig import CONTEXT, default_user_kubeconfig
from .paths import Versions, cache_dir, default_cluster_dir, load_versions

__all__ = [
    "Binaries", "BuildError", "CONTEXT", "ClusterInfo", "ClusterStatus", "DownResult",
    "TestClusterError", "NodeStatus", "ProcessStatus", "StartError", "Versions",
    "binary_paths", "cache_dir", "default_cluster_dir", "default_user_kubeconfig", "down",
    "ensure_binaries", "load_versions", "missing_components", "status", "up",
]
