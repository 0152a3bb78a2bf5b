"""The objects of `cw export RUN`: a Job that runs cw_export.py against the run's checkpoint
volume, and the ConfigMap that carries the script.

Built from facts read off the run's trainer (its image, volume claims, the Secrets it reads,
where it may be scheduled), so the export pod sees the run's folder and credentials as the
trainer did. Only the run's own names and the validated choices reach the manifests.
"""

from __future__ import annotations

import re
from typing import Any

from msgspec import Struct, field

from cw_cli.frameworks.base import CHECKPOINT_MOUNT, CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import EXPORT_FILE, runtime_file
from cw_cli.labels import COMPONENT_LABEL, EXPORT, GPU_RESOURCE
from cw_cli.render.plan import CONTAINER_SECURITY, POD_SECURITY
from cw_cli.render.templates import render_manifest

#: A Hub repository id: `name` or `org/name` (letters, digits, '-', '_', '.').
_REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")
#: Hours a finished export Job (and its log) is kept.
EXPORT_TTL_HOURS = 72


class ExportFacts(Struct, frozen=True):
    """What the export pod takes over from the run's trainer.

    Attributes:
        run_name: The run.
        run_dir: The trainer's output folder on the checkpoint volume.
        claim: The checkpoint volume's PersistentVolumeClaim.
        image: The trainer's image (it has transformers and peft).
        labels: The run's labels (the component is set to ``export``).
        env: The trainer's environment entries the export needs (HF_TOKEN, HF_HOME, ...).
        hf_cache_claim: The run's shared Hugging Face cache, if any (the base model is there).
        node_selector: Where the trainer may run.
        tolerations: The trainer's tolerations.
        service_account: The trainer's ServiceAccount, if any.
        pull_policy: The trainer's imagePullPolicy.
    """

    run_name: str
    run_dir: str
    claim: str
    image: str
    labels: dict[str, str]
    env: list[dict[str, Any]] = field(default_factory=list)
    hf_cache_claim: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    service_account: str | None = None
    pull_policy: str = "IfNotPresent"


class ExportChoice(Struct, frozen=True):
    """What to export and how (`cw export` flags)."""

    checkpoint: str = "final"
    merge: bool = False
    push_to_hub: str | None = None
    private: bool = False
    overwrite: bool = False
    gpu: int = 0
    cpu: str = "8"
    memory: str = "64Gi"


def check_choice(choice: ExportChoice) -> list[str]:
    """Problems with the flags, each naming the flag (empty when they are fine)."""
    problems = []
    if choice.checkpoint not in ("final", "latest") and not re.fullmatch(r"[0-9]{1,11}", choice.checkpoint):
        problems.append(f"--checkpoint {choice.checkpoint[:40]!r}: expected final, latest or a step number such as 500")
    if choice.push_to_hub is not None and not _REPO_ID.fullmatch(choice.push_to_hub):
        problems.append(f"--push-to-hub {choice.push_to_hub[:100]!r}: expected a Hub repository such as my-org/my-model")
    if choice.private and choice.push_to_hub is None:
        problems.append("--private is for --push-to-hub")
    if not 0 <= choice.gpu <= 64:
        problems.append(f"--gpu {choice.gpu}: expected 0 to 64")
    return problems


def export_name(run_name: str, choice: ExportChoice) -> str:
    """The export Job's name: one per run, checkpoint and form (``RUN-export-final-merged``)."""
    return f"{run_name}-{EXPORT}-{choice.checkpoint}" + ("-merged" if choice.merge else "")


def export_command(facts: ExportFacts, choice: ExportChoice) -> list[str]:
    """The export container's command."""
    command = ["python3", f"{CONFIG_MOUNT}/{EXPORT_FILE}", "--run-dir", facts.run_dir, "--checkpoint", choice.checkpoint]
    command += ["--merge"] if choice.merge else []
    command += ["--overwrite"] if choice.overwrite else []
    if choice.push_to_hub:
        command += ["--push-to-hub", choice.push_to_hub, *(["--private"] if choice.private else [])]
    return command


def export_manifests(facts: ExportFacts, choice: ExportChoice, namespace: str | None = None) -> list[dict[str, Any]]:
    """The export's Job (first: it owns the rest) and ConfigMap."""
    name = export_name(facts.run_name, choice)
    labels = {**facts.labels, COMPONENT_LABEL: EXPORT}
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": name}},
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": facts.claim}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT},
    ]
    if facts.hf_cache_claim:
        from cw_cli.render.storage import HF_CACHE_MOUNT

        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": facts.hf_cache_claim}})
        mounts.append({"name": "hf-cache", "mountPath": HF_CACHE_MOUNT})
    limits: dict[str, Any] = {"cpu": choice.cpu, "memory": choice.memory}
    if choice.gpu:
        limits[GPU_RESOURCE] = choice.gpu
    values = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "roles": {EXPORT: EXPORT},
        "ttl_seconds": EXPORT_TTL_HOURS * 3600,
        "pod_security": POD_SECURITY,
        "container_security": CONTAINER_SECURITY,
        "service_account": facts.service_account,
        "node_selector": facts.node_selector,
        "tolerations": facts.tolerations,
        "image": facts.image,
        "pull_policy": facts.pull_policy,
        "command": export_command(facts, choice),
        "env": facts.env,
        "resources": {"requests": dict(limits), "limits": limits},
        "volume_mounts": mounts,
        "volumes": volumes,
    }
    job = render_manifest("common/export-job.yaml.j2", values, [], "Job", name)
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels, **({"namespace": namespace} if namespace else {})},
        "data": {EXPORT_FILE: runtime_file(EXPORT_FILE)},
    }
    return [job, configmap]
