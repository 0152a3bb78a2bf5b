"""The files `up` writes into the state folder before starting anything: kwok's config and fake
container log, the fake nodes, and one kubeconfig per component."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import yaml

from . import argv
from .kubeconfig import component_kubeconfig, write_yaml
from .paths import cluster_resources_dir
from .pki import CertPair, Pki

STAGES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-waiting", "pod-complete",
          "pod-fail", "pod-terminate", "pod-delete")
FAKE_LOG_LINES = (
    "cw test cluster: this pod runs on a KWOK fake node; no container was started.",
    "cw test cluster: every container of every pod shows this same log (kwok ClusterLogs).",
)


def node_manifests(gpu_nodes: int, cpu_nodes: int) -> list[dict]:
    """The fake nodes: ``cw-gpu-N`` and ``cw-cpu-N`` from kubeconfigs/cluster/nodes, named in order."""
    res = cluster_resources_dir() / "nodes"
    gpu = yaml.safe_load((res / "gpu-node.yaml").read_text())
    cpu = yaml.safe_load((res / "cpu-node.yaml").read_text())
    out = []
    for template, prefix, count in ((gpu, "cw-gpu", gpu_nodes), (cpu, "cw-cpu", cpu_nodes)):
        for i in range(count):
            node = copy.deepcopy(template)
            name = f"{prefix}-{i}"
            node["metadata"]["name"] = name
            node["metadata"]["labels"]["kubernetes.io/hostname"] = name
            for addr in node["status"]["addresses"]:
                if addr["type"] == "Hostname":
                    addr["address"] = name
            out.append(node)
    return out


def _kwok_config(log_file: Path) -> str:
    """Multi-document kwok --config: the stages and a ClusterLogs for all pods."""
    stage_dir = cluster_resources_dir() / "stages"
    # No KwokConfiguration document: a partial one replaces kwok's defaults (parallelism 0 fails).
    text = [(stage_dir / f"{s}.yaml").read_text() for s in STAGES]
    text.append(yaml.safe_dump({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "cw-all-pods"},
        "spec": {"selector": {}, "logs": [{"logsFile": str(log_file), "follow": False}]},
    }, sort_keys=False))
    return "\n---\n".join(t.strip() + "\n" for t in text)


def _write_fake_log(path: Path) -> None:
    """A CRI-format container log file (what kwok's log endpoint reads)."""
    ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
    path.write_text("".join(f"{ts} stdout F {line}\n" for line in FAKE_LOG_LINES))


def write_kwok_files(state: Path) -> None:
    """kwok's folder: its --config and the fake container log its ClusterLogs serves."""
    folder = argv.kwok_dir(state)
    folder.mkdir()
    fake_log = folder / "container.log"
    _write_fake_log(fake_log)
    argv.kwok_config_path(state).write_text(_kwok_config(fake_log))


def client_certs(pki: Pki) -> dict[str, CertPair]:
    """The client certificate of each of :data:`argv.KUBECONFIG_USERS`."""
    return {"kube-controller-manager": pki.controller_manager, "kube-scheduler": pki.scheduler,
            "kwok": pki.kwok_client, "admin": pki.admin}  # fmt: skip


def write_kubeconfigs(state: Path, server: str, pki: Pki) -> None:
    """One kubeconfig per component (and admin), referencing the PKI's files by path."""
    certs = client_certs(pki)
    for user in argv.KUBECONFIG_USERS:
        pair = certs[user]
        write_yaml(argv.kubeconfig_path(state, user), component_kubeconfig(server, pki.ca.cert, pair.cert, pair.key, user))
