"""The objects of a pipeline (`cw pipeline FILE`): every stage's run rendered at launch and
labelled with the pipeline, the later stages kept in the pipeline's ConfigMap (``pipeline.json``),
and the pipeline keeper (``cw_pipeline.py``: a Job with its own ServiceAccount and a Role that
allows reading the stages' owners, creating the later stages' kinds and recording progress on the
ConfigMap) that creates each later stage in the cluster once the stages it waits for succeeded.

Pure: the plans are made by api/pipelines.py; nothing here asks a cluster. Manifests are built as
data (no text templates): user values are only ever values.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import Struct

from cw_cli.client.resources import RESOURCES
from cw_cli.frameworks.base import CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import POD_API_FILE, RUNTIME_DIR
from cw_cli.labels import MANAGED_BY, MANAGED_BY_LABEL, PART_OF, PART_OF_LABEL, PIPELINE_LABEL, STAGE_LABEL
from cw_cli.render.helper_pods import READER_IMAGE
from cw_cli.render.plan import Plan
from cw_cli.render.pod_parts import CONTAINER_SECURITY, POD_SECURITY

__all__ = ["PIPELINE_LABEL", "STAGE_LABEL"]  # labels.py's, used with the rest here
#: On the pipeline's ConfigMap: each stage's state as the keeper last saw it (JSON).
STATES_ANNOTATION = "cw-cli.dev/pipeline-stages"
#: The keeper's file, shipped in the pipeline's ConfigMap.
PIPELINE_FILE = "cw_pipeline.py"
#: Seconds between the keeper's looks at the stages.
POLL_S = 20
#: Hours the finished keeper Job (and its log) is kept.
KEEPER_TTL_HOURS = 72
#: The largest pipeline.json a ConfigMap holds with room to spare (the API server's limit is 1 MiB).
MAX_DOCUMENT = 900 * 1024


class PlannedStage(Struct):
    """A stage rendered: its name in the file, what it waits for, and its run's plan."""

    name: str
    after: tuple[str, ...]
    plan: Plan


def keeper_name(pipeline: str) -> str:
    """The name of the keeper's Job, ServiceAccount, Role, RoleBinding and ConfigMap."""
    return f"{pipeline}-pipeline"


def label_stage(plan: Plan, pipeline: str, stage: str) -> None:
    """Label every object of a stage's run (and its pods) with the pipeline and the stage."""
    for manifest in plan.manifests:
        for metadata in _metadatas(manifest):
            metadata["labels"] = {**(metadata.get("labels") or {}), PIPELINE_LABEL: pipeline, STAGE_LABEL: stage}


def _metadatas(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    found = [manifest["metadata"]]
    template = (manifest.get("spec") or {}).get("template")
    if isinstance(template, dict):
        found.append(template.setdefault("metadata", {}))
    return found


def collection_path(kind: str) -> str:
    """Where objects of ``kind`` are created, ``{ns}`` standing for the namespace."""
    prefix, plural, _ = RESOURCES[kind]
    return f"{prefix}/namespaces/{{ns}}/{plural}"


def _group(kind: str) -> tuple[str, str]:
    prefix, plural, _ = RESOURCES[kind]
    return ("" if prefix == "/api/v1" else prefix.split("/")[2]), plural


def document(pipeline: str, stages: list[PlannedStage], created: set[str]) -> dict[str, Any]:
    """``pipeline.json``: every stage, its owner, and the objects of those cw does not create now."""
    body: dict[str, Any] = {"name": pipeline, "configmap": keeper_name(pipeline), "stages": {},
                            "order": [stage.name for stage in stages]}  # JSON objects have no order  # fmt: skip
    for stage in stages:
        owner = stage.plan.manifests[0]
        entry: dict[str, Any] = {
            "run": stage.plan.run_name, "after": list(stage.after), "created": stage.name in created,
            "suspend": stage.plan.managed_suspend,
            "owner": {"kind": owner["kind"], "name": owner["metadata"]["name"], "path": collection_path(owner["kind"])},
        }  # fmt: skip
        if stage.name not in created:
            entry["objects"] = [{"path": collection_path(m["kind"]), "body": m} for m in stage.plan.manifests]
        body["stages"][stage.name] = entry
    return body


def _rule(group: str, resource: str, verb: str, names: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": [resource], "resourceNames": sorted(names), "verbs": [verb]}


def keeper_rules(pipeline: str, stages: list[PlannedStage], created: set[str]) -> list[dict[str, Any]]:
    """The keeper's Role: read every stage's owner and release the later ones (by name), create the
    later stages' kinds, read and annotate the pipeline's ConfigMap; and whatever Roles a later
    stage creates allow (the API server lets a Role be created only by one who holds its rules)."""
    owners: dict[tuple[str, str], list[str]] = {}
    later: dict[tuple[str, str], list[str]] = {}
    kinds: set[tuple[str, str]] = set()
    extra: list[dict[str, Any]] = []
    for stage in stages:
        owner = stage.plan.manifests[0]
        owners.setdefault(_group(owner["kind"]), []).append(owner["metadata"]["name"])
        if stage.name in created:
            continue
        later.setdefault(_group(owner["kind"]), []).append(owner["metadata"]["name"])
        for manifest in stage.plan.manifests:
            kinds.add(_group(manifest["kind"]))
            if manifest["kind"] == "Role":
                extra += manifest.get("rules") or []
    rules = [_rule(g, r, "get", names) for (g, r), names in sorted(owners.items())]
    rules += [_rule(g, r, "patch", names) for (g, r), names in sorted(later.items())]
    rules += [{"apiGroups": [g], "resources": [r], "verbs": ["create"]} for g, r in sorted(kinds)]
    rules.append({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [keeper_name(pipeline)], "verbs": ["get", "patch"]})
    return rules + extra


def keeper_manifests(pipeline: str, stages: list[PlannedStage], created: set[str], labels: dict[str, str],
                     image: str = READER_IMAGE) -> list[dict[str, Any]]:  # fmt: skip
    """The keeper's Job (first: it owns the rest), ConfigMap, ServiceAccount, Role and RoleBinding;
    ``image`` is the cluster's helper image (any with ``python3`` runs the keeper).

    Raises:
        ValueError: pipeline.json is over :data:`MAX_DOCUMENT` (the caller names the file).
    """
    name = keeper_name(pipeline)
    labels = {**labels, MANAGED_BY_LABEL: MANAGED_BY, PART_OF_LABEL: PART_OF, PIPELINE_LABEL: pipeline}
    text = json.dumps(document(pipeline, stages, created), sort_keys=True)
    if len(text.encode()) > MAX_DOCUMENT:
        raise ValueError(f"the later stages' objects take {len(text.encode()) // 1024} KiB, over {MAX_DOCUMENT // 1024} KiB")
    meta = {"name": name, "labels": labels}
    container = {
        "name": "pipeline", "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{CONFIG_MOUNT}/{PIPELINE_FILE}"],
        "env": [{"name": "CW_PIPELINE_FILE", "value": f"{CONFIG_MOUNT}/pipeline.json"},
                {"name": "CW_PIPELINE_POLL_S", "value": str(POLL_S)}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
        "securityContext": {**CONTAINER_SECURITY, "runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                            "readOnlyRootFilesystem": True},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
    }  # fmt: skip
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": dict(meta),
        "spec": {"backoffLimit": 20, "ttlSecondsAfterFinished": KEEPER_TTL_HOURS * 3600,
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "serviceAccountName": name, "restartPolicy": "OnFailure", "securityContext": POD_SECURITY,
                     "containers": [container], "volumes": [{"name": "config", "configMap": {"name": name}}]}}},
    }  # fmt: skip
    shipped = {key: (RUNTIME_DIR / key).read_text(encoding="utf-8") for key in (PIPELINE_FILE, POD_API_FILE)}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(meta), "data": {"pipeline.json": text, **shipped}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
            "rules": keeper_rules(pipeline, stages, created)}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name}]}  # fmt: skip
    return [job, config_map, account, role, binding]
