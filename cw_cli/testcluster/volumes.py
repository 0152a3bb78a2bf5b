"""Checkpoint volumes for the test cluster: a PersistentVolume pre-bound to one claim.

The test cluster has no storage provisioner, so a claim would stay Pending and so would every
pod that mounts it. A PersistentVolume whose ``claimRef`` names the claim (and a claim whose
``volumeName`` names the volume) is bound by the real PV controller at once, and the real
scheduler then places pods that mount it. KWOK's pods never write there; a real node's do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .names import NAME

#: The claim `cw cluster up` creates in namespace default (configs/test-cluster-sft.yaml uses it).
DEFAULT_CLAIM = "checkpoints"
DEFAULT_NAMESPACE = "default"


#: The label and taint key of a real node (kept equal to realnode.settings.REAL_NODE_LABEL).
REAL_NODE_KEY = "cw.dev/real-node"


def real_node_namespace() -> dict[str, Any]:
    """A merge patch that puts every pod of a namespace on the real nodes: a toleration of their
    taint (the API server's PodTolerationRestriction adds it) and a node selector for their label
    (its PodNodeSelector adds that). So cw's pods that mount no volume (the pipeline keeper, a
    server, a notification receiver) never land on a KWOK fake node, where nothing would run."""
    toleration = [{"key": REAL_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"annotations": {"scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(toleration),
                                         "scheduler.alpha.kubernetes.io/node-selector": f"{REAL_NODE_KEY}=true"}}}


def volume_manifests(namespace: str, claim: str, size: str = "500Gi",
                     real_node_dir: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """A PersistentVolume and the PersistentVolumeClaim it is bound to (ReadWriteMany, no class).

    With ``real_node_dir`` (a folder of the cluster's state), the volume is a folder of the real
    nodes' disk there (created by the kubelet, removed with the cluster, so a new cluster never
    resumes an old one's runs), and the scheduler places every pod that mounts it on a real node.
    """
    volume_name = f"{NAME}-{namespace}-{claim}"[:253]
    folder = f"{real_node_dir}/{namespace}/{claim}" if real_node_dir else f"/var/lib/{NAME}/{namespace}/{claim}"
    host_path: dict[str, str] = {"path": folder}
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "hostPath": host_path,
        "claimRef": {"namespace": namespace, "name": claim},
    }
    if real_node_dir:
        host_path["type"] = "DirectoryOrCreate"
        term = {"matchExpressions": [{"key": REAL_NODE_KEY, "operator": "In", "values": ["true"]}]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name, "labels": {"app.kubernetes.io/managed-by": f"{NAME}-cluster"}},
        "spec": spec,
    }
    claim_manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume_name,
            "resources": {"requests": {"storage": size}},
        },
    }
    return volume, claim_manifest
