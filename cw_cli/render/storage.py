"""The volumes of a run's pods: its ConfigMap, the checkpoint volume, shared memory, the Hugging
Face cache and the user's own volumes, as ``volumes`` and ``volumeMounts`` lists.

Built here rather than in the templates so the trainer and the servers cannot drift apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cw_cli.frameworks.base import CHECKPOINT_MOUNT, CONFIG_MOUNT
from cw_cli.types import CODE_MOUNT

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec

HF_CACHE_MOUNT = "/hf-cache"
HF_HOME_ENV = "HF_HOME"


def pod_volumes(
    cluster: ClusterSpec,
    config_map: str,
    config_items: list[dict[str, str]],
    shm_size: str,
    *,
    trainer: bool,
    reads_checkpoints: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``volumes`` and the main container's ``volumeMounts`` of one pod.

    Args:
        cluster: The run's cluster fields.
        config_map: Name of the run's ConfigMap, mounted read-only at /etc/cw.
        config_items: Its ``items`` (key -> path under /etc/cw), so shipped folders keep their layout.
        shm_size: Size of the memory-backed /dev/shm.
        trainer: The trainer writes /checkpoints (a scratch folder without a volume); a server
            mounts the checkpoint volume read-only, and only when ``reads_checkpoints``.
        reads_checkpoints: The server's command reads a path under /checkpoints.
    """
    source: dict[str, Any] = {"name": config_map, **({"items": config_items} if config_items else {})}
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": source}]
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}]
    claim = cluster.checkpoint_claim
    if trainer:
        source = {"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}
        volumes.append({"name": "checkpoints", **source})
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
    elif claim and reads_checkpoints:
        # A server only loads a model kept there; read-only, so a ReadWriteOnce claim is not taken.
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT, "readOnly": True})
    if trainer and cluster.code is not None:  # cw_code.py unpacks or clones the run's code here
        volumes.append({"name": "code", "emptyDir": {}})
        mounts.append({"name": "code", "mountPath": CODE_MOUNT})
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if cluster.hf_cache_volume:
        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": cluster.hf_cache_volume}})
        mounts.append({"name": "hf-cache", "mountPath": HF_CACHE_MOUNT})
    for index, (claim_name, mount) in enumerate(sorted(cluster.volumes.items(), key=lambda item: item[1].path)):
        name = f"user-{index}"  # volume names are DNS labels; a claim name may be longer or dotted
        volumes.append(
            {"name": name, "persistentVolumeClaim": {"claimName": claim_name, "readOnly": mount.read_only}}
        )
        mounts.append({"name": name, "mountPath": mount.path, "readOnly": mount.read_only})
    return volumes, mounts


def storage_env(cluster: ClusterSpec) -> dict[str, str]:
    """Variables every container gets because of the run's volumes (HF_HOME for the shared cache)."""
    return {HF_HOME_ENV: HF_CACHE_MOUNT} if cluster.hf_cache_volume else {}
