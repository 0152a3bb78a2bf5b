"""`cw export RUN` on the cluster: read what the export pod takes over from the run's trainer,
create the export's objects (the ConfigMap owned by the Job, so the Job's TTL removes both), and
refuse what cannot be exported before creating anything."""

from __future__ import annotations

from cw_cli.after_training.helper_pods import create_job_and_its_config_map
from cw_cli.client.connection import Kube
from cw_cli.errors import ConfigError, Conflict
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.k8s.run_facts import claims_of, output_dir_of, trainer_of
from cw_cli.labels import TRAINER
from cw_cli.render.export import EXPORT_TTL_HOURS, ExportChoice, ExportFacts, export_manifests, export_name
from cw_cli.render.helper_sizing import requests_of
from cw_cli.render.scores import gate_of
from cw_cli.render.workload import owner_kind

#: Environment entries of the trainer the export needs: the Hub token and where the cache is, and
#: the object-storage credentials the fsspec drivers read (a run's ``secrets:`` may give them, as
#: ``secretKeyRef`` entries: the values never pass through cw). ``--secret`` adds more.
EXPORT_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE",
              "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION",
              "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
              "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
              "AZURE_STORAGE_SAS_TOKEN", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")  # fmt: skip


def export_facts(kube: Kube, run_name: str, choice: ExportChoice) -> ExportFacts:
    """What the export pod takes over from the run's trainer, checked against the choice.

    Raises:
        NotFound: No such run.
        ConfigError: Its outputs are on no volume, or ``final`` while it has not succeeded.
    """
    kind, owner, template = trainer_of(kube, run_name)
    pod = template["spec"]
    container = next(c for c in pod["containers"] if c["name"] == TRAINER)
    claims = claims_of(pod)
    if not claims.get("checkpoints"):
        raise ConfigError([f"run {run_name!r} kept its outputs on no volume (checkpoint_volume: none): nothing to export"],
                          hint="launch with a checkpoint_volume to keep them")  # fmt: skip
    state = owner_kind(kind).state(owner)
    if choice.checkpoint == "final" and state != "Succeeded":
        raise ConfigError([f"run {run_name!r} is {state}: it has no final model yet"],
                          hint=f"export its newest complete checkpoint: cw export {run_name} --checkpoint latest")  # fmt: skip
    env = [entry for entry in container.get("env") or [] if entry.get("name") in EXPORT_ENV]
    labels = dict(owner["metadata"].get("labels") or {})
    return ExportFacts(
        run_name=run_name,
        run_dir=output_dir_of(kube, run_name, container.get("workingDir") or f"{CHECKPOINT_MOUNT}/{run_name}"),
        claim=str(claims["checkpoints"]),
        image=container["image"],
        labels={k: v for k, v in labels.items() if not k.startswith("kueue.x-k8s.io/")},
        env=env,
        hf_cache_claim=claims.get("hf-cache"),
        node_selector=pod.get("nodeSelector") or {},
        tolerations=pod.get("tolerations") or [],
        service_account=pod.get("serviceAccountName"),
        pull_policy=container.get("imagePullPolicy", "IfNotPresent"),
        gate=gate_of(owner),
        trainer_requests=requests_of(container),
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
    create_job_and_its_config_map(kube, job, config_map)
    return name
