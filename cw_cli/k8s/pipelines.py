"""A pipeline on the cluster: the later stages' names checked free before anything is created,
and the pipeline keeper's objects created as a run's are (its Job first and suspended, the rest
owned by it, then released), all or nothing."""

from __future__ import annotations

import json
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.errors import Conflict, CwError


def check_names_free(kube: Kube, owners: list[tuple[str, str, str]], keeper: str) -> None:
    """Refuse a pipeline whose later stages' runs (or keeper) exist already: the keeper could not
    create them later.

    Args:
        owners: (stage, kind, name) of each later stage's owner.
        keeper: The keeper Job's name.

    Raises:
        Conflict: One exists, named.
    """
    for stage, kind, name in owners:
        if kube.get(kind, name) is not None:
            raise Conflict(f"stage {stage}: {kind} {name} exists already", hint="delete that run, or name the pipeline differently (name:)")
    if kube.get("Job", keeper) is not None:
        raise Conflict(f"a pipeline keeper {keeper} exists already", hint=f"delete it first: kubectl delete job {keeper}")


def create_keeper(kube: Kube, manifests: list[dict[str, Any]]) -> None:
    """Create the keeper's Job (suspended) and its other objects owned by it, then release it.

    Raises:
        CwError: Any failure, after removing what was created.
    """
    job, *rest = manifests
    made = kube.create({**job, "spec": {**job["spec"], "suspend": True}})
    reference = {"apiVersion": "batch/v1", "kind": "Job", "name": made["metadata"]["name"], "uid": made["metadata"]["uid"],
                 "controller": False, "blockOwnerDeletion": False}  # fmt: skip
    try:
        for manifest in rest:
            kube.create({**manifest, "metadata": {**manifest["metadata"], "ownerReferences": [reference]}})
        kube.merge_patch("Job", made["metadata"]["name"], {"spec": {"suspend": False}})
    except (CwError, KeyboardInterrupt):
        kube.delete("Job", made["metadata"]["name"])  # its objects go with it (owned)
        for manifest in rest:
            kube.delete(manifest["kind"], manifest["metadata"]["name"])
        raise


def stage_states(kube: Kube, pipeline: str) -> dict[str, str]:
    """Each stage's state as the pipeline's keeper last recorded it (``Waiting`` for a stage it has
    not looked at yet); empty when the pipeline's ConfigMap is gone (its keeper ended and was removed).
    """
    from cw_cli.render.pipeline import STATES_ANNOTATION, keeper_name

    config_map = kube.get("ConfigMap", keeper_name(pipeline))
    if config_map is None:
        return {}
    try:
        stages = json.loads((config_map.get("data") or {}).get("pipeline.json") or "{}").get("stages") or {}
        recorded = json.loads((config_map["metadata"].get("annotations") or {}).get(STATES_ANNOTATION) or "{}")
    except (ValueError, AttributeError):
        return {}
    return {name: str(recorded.get(name) or ("Created" if stage.get("created") else "Waiting")) for name, stage in stages.items()}
