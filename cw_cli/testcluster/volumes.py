"""Checkpoint volumes for the test cluster: a PersistentVolume pre-bound to one claim.

The test cluster has no storage provisioner, so a claim would stay Pending and so would every
pod that mounts it. A PersistentVolume whose ``claimRef`` names the claim (and a claim whose
``volumeName`` names the volume) is bound by the real PV controller at once, and the real
scheduler then places pods that mount it. Nothing is ever written there: KWOK's pods do not run.
"""

from __future__ import annotations

from typing import Any

from .names import NAME

#: The claim `cw cluster up` creates in namespace default (configs/test-cluster-sft.yaml uses it).
DEFAULT_CLAIM = "checkpoints"
DEFAULT_NAMESPACE = "default"


def volume_manifests(namespace: str, claim: str, size: str = "500Gi") -> tuple[dict[str, Any], dict[str, Any]]:
    """A PersistentVolume and the PersistentVolumeClaim it is bound to (ReadWriteMany, no class)."""
    volume_name = f"{NAME}-{namespace}-{claim}"[:253]
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name, "labels": {"app.kubernetes.io/managed-by": f"{NAME}-cluster"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": f"/var/lib/{NAME}/{namespace}/{claim}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
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
