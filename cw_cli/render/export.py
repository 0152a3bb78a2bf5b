"""The objects of `cw export RUN`: a Job that runs cw_export.py against the run's checkpoint
volume, and the ConfigMap that carries the script.

Built from facts read off the run's trainer (its image, volume claims, the Secrets it reads,
where it may be scheduled), so the export pod sees the run's folder and credentials as the
trainer did. Only the run's own names and the validated choices reach the manifests; credentials
for ``--to`` come from Secrets as ``secretKeyRef`` entries, never as values.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from msgspec import Struct, field, structs

from cw_cli.errors import GateRefused
from cw_cli.frameworks.base import CHECKPOINT_MOUNT, CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import EXPORT_FILE, PIP_FILE, runtime_file, with_requirements
from cw_cli.labels import COMPONENT_LABEL, EXPORT, GPU_RESOURCE
from cw_cli.render.pod_parts import CONTAINER_SECURITY, POD_SECURITY
from cw_cli.render.scores import Gate, best_checkpoint, gate_refusal
from cw_cli.render.templates import render_manifest

# What `--to` may name, and fsspec's driver package per scheme: the pod-side script's own rules
# (stdlib only), so cw refuses before it creates the Job exactly what the pod would refuse after.
from cw_cli.runtime.cw_export import STORAGE_DRIVERS, destination_problem  # noqa: F401 - re-exported

#: A Hub repository id as huggingface_hub's validate_repo_id accepts it, in ASCII: ``name`` or
#: ``org/name``, each 1-96 of letters, digits, '-', '_', '.', starting and ending with a letter,
#: digit or '_'; and never '--', '..' or a '.git' ending (checked beside it).
_REPO_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"(?:{_REPO_PART}/)?{_REPO_PART}")
#: Hours a finished export Job (and its log) is kept.
EXPORT_TTL_HOURS = 72
#: ``VAR=SECRET`` or ``VAR=SECRET:KEY`` (``--secret``): an environment variable from a Secret's key.
_SECRET = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,127})=([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)(?::([-._A-Za-z0-9]{1,253}))?")
#: Longest Job name: its pods carry it in the ``batch.kubernetes.io/job-name`` label (63 at most).
MAX_JOB_NAME = 63


#: The export pod's size unless the user names one (at most the trainer's: render/helper_sizing.py):
#: a merge holds the base model in memory.
EXPORT_CPU, EXPORT_MEMORY = "8", "64Gi"


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
        gate: The export gate the run was launched with (its config's ``gate:``), if any.
        trainer_requests: What the trainer container asked for (cpu, memory): a helper pod's
            default size is capped at it (render/helper_sizing.py).
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
    gate: Gate | None = None
    trainer_requests: dict[str, Any] = field(default_factory=dict)


class ExportChoice(Struct, frozen=True):
    """What to export and how (`cw export` flags)."""

    checkpoint: str = "final"
    merge: bool = False
    push_to_hub: str | None = None
    private: bool = False
    overwrite: bool = False
    gpu: int = 0
    cpu: str = EXPORT_CPU
    memory: str = EXPORT_MEMORY
    to: str | None = None
    secrets: tuple[str, ...] = ()


def repo_id_problem(repo: str) -> str | None:
    """Why the Hub would refuse ``repo`` as a repository id (None when huggingface_hub accepts it)."""
    if not _REPO_ID.fullmatch(repo):
        return ("expected a Hub repository such as my-org/my-model: 1 to 96 letters, digits, '-', '_' or '.' "
                "on each side of one '/', starting and ending with a letter or digit")  # fmt: skip
    if "--" in repo or ".." in repo:
        return "the Hub refuses '--' and '..' in a repository id"
    if repo.endswith(".git"):
        return "the Hub refuses a repository id ending in '.git'"
    return None


def secret_refs(choice: ExportChoice) -> dict[str, tuple[str, str]]:
    """``--secret VAR=SECRET[:KEY]`` as variable -> (Secret, key); the key defaults to the variable.

    Only well-formed entries (:func:`check_choice` names the others).
    """
    refs = {}
    for text in choice.secrets:
        match = _SECRET.fullmatch(text)
        if match:
            refs[match.group(1)] = (match.group(2), match.group(4) or match.group(1))
    return refs


def check_choice(choice: ExportChoice) -> list[str]:
    """Problems with the flags, each naming the flag (empty when they are fine)."""
    problems = []
    if choice.checkpoint not in ("final", "latest", "best") and not re.fullmatch(r"[0-9]{1,11}", choice.checkpoint):
        problems.append(f"--checkpoint {choice.checkpoint[:40]!r}: expected final, latest, best or a step number such as 500")
    hub, to = choice.push_to_hub, choice.to
    problem = repo_id_problem(hub) if hub is not None else None
    if problem:
        problems.append(f"--push-to-hub {str(hub)[:100]!r}: {problem}")
    if choice.private and choice.push_to_hub is None:
        problems.append("--private is for --push-to-hub")
    problem = destination_problem(to) if to is not None else None
    if problem:
        problems.append(f"--to {str(to)[:100]!r}: {problem}")
    seen: set[str] = set()
    for text in choice.secrets:
        match = _SECRET.fullmatch(text)
        if not match:
            problems.append(f"--secret {text[:100]!r}: expected VARIABLE=SECRET or VARIABLE=SECRET:KEY, "
                            "e.g. AWS_SECRET_ACCESS_KEY=s3-credentials")  # fmt: skip
        elif match.group(1) in seen:
            problems.append(f"--secret {match.group(1)}: given twice")
        else:
            seen.add(match.group(1))
    if choice.secrets and not (choice.to or choice.push_to_hub):
        problems.append("--secret is for --to or --push-to-hub (the credentials of the upload)")
    if not 0 <= choice.gpu <= 64:
        problems.append(f"--gpu {choice.gpu}: expected 0 to 64")
    return problems


def export_name(run_name: str, choice: ExportChoice) -> str:
    """The export Job's name: one per run, checkpoint, form and destination
    (``RUN-export-final-merged``, ``RUN-export-500-to-1a2b3c``).

    A name over 63 characters (the longest a Job's pods can carry as a label) is cut and ends with
    six characters of its SHA-256, so it stays the same for the same export and differs between two.
    """
    name = f"{run_name}-{EXPORT}-{choice.checkpoint}" + ("-merged" if choice.merge else "")
    destination = "\n".join(filter(None, (choice.to, choice.push_to_hub)))
    if destination:
        name += "-to-" + hashlib.sha256(destination.encode()).hexdigest()[:6]
    if len(name) > MAX_JOB_NAME:
        name = name[: MAX_JOB_NAME - 7].rstrip("-") + "-" + hashlib.sha256(name.encode()).hexdigest()[:6]
    return name


def export_command(facts: ExportFacts, choice: ExportChoice) -> list[str]:
    """The export container's command."""
    command = ["python3", f"{CONFIG_MOUNT}/{EXPORT_FILE}", "--run-dir", facts.run_dir, "--checkpoint", choice.checkpoint]
    command += ["--merge"] if choice.merge else []
    command += ["--overwrite"] if choice.overwrite else []
    if choice.push_to_hub:
        command += ["--push-to-hub", choice.push_to_hub, *(["--private"] if choice.private else [])]
    if choice.to:
        command += ["--to", choice.to]
    return with_requirements(command, export_requirements(choice))


def export_requirements(choice: ExportChoice) -> list[str]:
    """What the export pod pip-installs first (cw_pip.py skips what the image has): fsspec and the
    driver of ``--to``'s scheme; nothing without ``--to``."""
    if not choice.to:
        return []
    return ["fsspec", STORAGE_DRIVERS[choice.to.partition("://")[0]]]


def export_env(facts: ExportFacts, choice: ExportChoice) -> list[dict[str, Any]]:
    """The trainer's entries the export takes over, then one ``secretKeyRef`` per ``--secret``
    (which wins over the trainer's entry of the same name)."""
    refs = secret_refs(choice)
    env = [entry for entry in facts.env if entry.get("name") not in refs]
    env += [{"name": variable, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}
            for variable, (name, key) in refs.items()]  # fmt: skip
    return env


def job_volumes(facts: ExportFacts, config_map: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) of an after-training Job: its files, the run's checkpoint volume and the
    Hugging Face cache where the run has one."""
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": config_map}},
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
    return volumes, mounts


def export_manifests(facts: ExportFacts, choice: ExportChoice, namespace: str | None = None) -> list[dict[str, Any]]:
    """The export's Job (first: it owns the rest) and ConfigMap."""
    name = export_name(facts.run_name, choice)
    labels = {**facts.labels, COMPONENT_LABEL: EXPORT}
    volumes, mounts = job_volumes(facts, name)
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
        "env": export_env(facts, choice),
        "resources": {"requests": dict(limits), "limits": limits},
        "volume_mounts": mounts,
        "volumes": volumes,
    }
    job = render_manifest("common/export-job.yaml.j2", values, [], "Job", name)
    files = {key: runtime_file(key) for key in (EXPORT_FILE, *([PIP_FILE] if export_requirements(choice) else []))}
    configmap_values = {"name": name, "namespace": namespace, "labels": labels, "files": files}
    configmap = render_manifest("common/export-configmap.yaml.j2", configmap_values, [], "ConfigMap", name)
    return [job, configmap]


def listing_problems(choice: ExportChoice, listing: dict[str, Any]) -> list[str]:
    """What the run's folder (cw_artifacts.py's listing, read before any Job is created) lacks for
    ``choice``: the final model, a complete checkpoint, the one asked for, or an adapter to merge."""
    items = [item for item in listing.get("artifacts") or [] if isinstance(item, dict)]
    run_dir = str(listing.get("run_dir", "the run's folder"))
    complete = [item for item in items if item.get("kind") == "checkpoint" and item.get("complete")]
    there = ", ".join(f"checkpoint {item.get('step')}" for item in complete) or "none"
    if not listing.get("exists", True):
        return [f"{run_dir} is not on the run's volume: the trainer saved nothing there"]
    chosen: dict[str, Any] | None
    if choice.checkpoint == "final":
        chosen = next((item for item in items if item.get("kind") == "final"), None)
        missing = (f"{run_dir} holds no final model (complete checkpoints: {there}); "
                   "export one with --checkpoint latest or --checkpoint N")  # fmt: skip
    elif choice.checkpoint == "latest":
        chosen = complete[-1] if complete else None
        missing = f"{run_dir} holds no complete checkpoint yet: --checkpoint latest has nothing to export"
    else:
        chosen = next((item for item in complete if str(item.get("step")) == str(int(choice.checkpoint))), None)
        missing = f"{run_dir} has no complete checkpoint-{int(choice.checkpoint)}; complete checkpoints: {there}"
    if chosen is None:
        return [missing]
    if choice.merge and not chosen.get("adapter"):
        return [f"{chosen.get('path', run_dir)} holds a full model, not a LoRA adapter: there is nothing to merge; "
                "drop --merge"]  # fmt: skip
    return []


def resolve_best(choice: ExportChoice, listing: dict[str, Any]) -> ExportChoice:
    """``--checkpoint best`` as the step of the run's best evaluated checkpoint; other choices as they are.

    Raises:
        ConfigError: No checkpoint has scores.
    """
    if choice.checkpoint != "best":
        return choice
    return structs.replace(choice, checkpoint=str(best_checkpoint(listing)["step"]))


def chosen_artifact(choice: ExportChoice, listing: dict[str, Any]) -> dict[str, Any] | None:
    """The artifact of the listing ``choice`` names (``best`` resolved already), or None."""
    items = [item for item in listing.get("artifacts") or [] if isinstance(item, dict)]
    complete = [item for item in items if item.get("kind") == "checkpoint" and item.get("complete")]
    if choice.checkpoint == "final":
        return next((item for item in items if item.get("kind") == "final"), None)
    if choice.checkpoint == "latest":
        return complete[-1] if complete else None
    return next((item for item in complete if str(item.get("step")) == str(int(choice.checkpoint))), None)


def check_gate(gate: Gate, choice: ExportChoice, listing: dict[str, Any]) -> None:
    """Refuse the export where the run's gate refuses the chosen checkpoint.

    Raises:
        GateRefused: It scores worse than the base model by more than the gate allows, or a score
            the gate needs is missing; the message names both scores.
    """
    chosen = chosen_artifact(choice, listing)
    refusal = gate_refusal(gate, chosen or {}, listing.get("base_scores"))
    if refusal:
        raise GateRefused(refusal, hint="export it anyway with --force, or choose another: --checkpoint best or N")
