"""`cw export RUN` on the cluster: read what the export pod takes over from the run's trainer,
create the export's objects (the ConfigMap owned by the Job, so the Job's TTL removes both), and
refuse what cannot be exported before creating anything."""

from __future__ import annotations

import posixpath
from typing import Any

from cw_cli.errors import ConfigError, Conflict, NotFound
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.k8s.connection import Kube
from cw_cli.k8s.inspect import state_of
from cw_cli.render.export import EXPORT_TTL_HOURS, ExportChoice, ExportFacts, export_manifests, export_name
from cw_cli.render.jobset import TRAINER

#: Environment entries of the trainer the export needs: the Hub token and where the cache is.
EXPORT_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE")


def _trainer(kube: Kube, run_name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(kind, owner, the trainer's pod spec) of a run.

    Raises:
        NotFound: No run of that name (or one with servers only).
    """
    job = kube.get("Job", f"{run_name}-trainer")
    if job is not None:
        return "Job", job, job["spec"]["template"]
    jobset = kube.get("JobSet", run_name)
    for replicated in (jobset or {}).get("spec", {}).get("replicatedJobs") or []:
        if replicated.get("name") == TRAINER:
            return "JobSet", jobset or {}, replicated["template"]["spec"]["template"]
    raise NotFound(f"run {run_name!r} has no trainer here: nothing to export", hint="`cw list` shows the runs")


def _output_dir(kube: Kube, run_name: str, working_dir: str) -> str:
    """The trainer's output folder: the mounted config's ``output_dir`` (relative ones start at the
    trainer's working folder, the run's folder on the volume), else that working folder."""
    config_map = kube.get("ConfigMap", f"{run_name}-config")
    data = (config_map or {}).get("data") or {}
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "output_dir" and isinstance(item, str) and item:
                    found.append(item if item.startswith("/") else f"{working_dir.rstrip('/')}/{item}")
                walk(item)

    for key, text in data.items():
        try:
            if key == "config.yaml":
                import yaml

                walk(yaml.safe_load(text))
            elif key == "config.toml":
                import tomllib

                walk(tomllib.loads(text))
        except ValueError:
            continue
    on_volume = [path for path in found if path.startswith(CHECKPOINT_MOUNT + "/")]
    return posixpath.normpath(on_volume[0]) if on_volume else working_dir


def export_facts(kube: Kube, run_name: str, choice: ExportChoice) -> ExportFacts:
    """What the export pod takes over from the run's trainer, checked against the choice.

    Raises:
        NotFound: No such run.
        ConfigError: Its outputs are on no volume, or ``final`` while it has not succeeded.
    """
    kind, owner, template = _trainer(kube, run_name)
    pod = template["spec"]
    container = next(c for c in pod["containers"] if c["name"] == TRAINER)
    claims = {v["name"]: (v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod.get("volumes") or []}
    if not claims.get("checkpoints"):
        raise ConfigError([f"run {run_name!r} kept its outputs on no volume (checkpoint_volume: none): nothing to export"],
                          hint="launch with a checkpoint_volume to keep them")  # fmt: skip
    state = state_of(kind, owner)
    if choice.checkpoint == "final" and state != "Succeeded":
        raise ConfigError([f"run {run_name!r} is {state}: it has no final model yet"],
                          hint=f"export its newest complete checkpoint: cw export {run_name} --checkpoint latest")  # fmt: skip
    env = [entry for entry in container.get("env") or [] if entry.get("name") in EXPORT_ENV]
    labels = dict(owner["metadata"].get("labels") or {})
    return ExportFacts(
        run_name=run_name,
        run_dir=_output_dir(kube, run_name, container.get("workingDir") or f"{CHECKPOINT_MOUNT}/{run_name}"),
        claim=str(claims["checkpoints"]),
        image=container["image"],
        labels={k: v for k, v in labels.items() if not k.startswith("kueue.x-k8s.io/")},
        env=env,
        hf_cache_claim=claims.get("hf-cache"),
        node_selector=pod.get("nodeSelector") or {},
        tolerations=pod.get("tolerations") or [],
        service_account=pod.get("serviceAccountName"),
        pull_policy=container.get("imagePullPolicy", "IfNotPresent"),
    )


def create_export(kube: Kube, facts: ExportFacts, choice: ExportChoice) -> str:
    """Create the export's Job and its ConfigMap (owned by the Job); returns the Job's name.

    Raises:
        Conflict: An export of this checkpoint and form exists (running, or kept after it ended).
    """
    name = export_name(facts.run_name, choice)
    if kube.get("Job", name) is not None:
        raise Conflict(f"an export {name} exists already (running, or kept {EXPORT_TTL_HOURS} h after it ended)",
                       hint=f"follow it with cw logs {facts.run_name} --role export, or delete it: kubectl delete job {name}")  # fmt: skip
    job, config_map = export_manifests(facts, choice)
    created = kube.create(job)
    config_map["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": created["metadata"]["uid"],
         "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    kube.create(config_map)
    return name
