"""The objects of an evaluation: a Job that runs cw_eval.py (lm-evaluation-harness) on one model of
a run against its checkpoint volume, and the ConfigMap that carries the script and the settings.

Built from the same facts `cw export` reads off the run's trainer (render/export.py's
:class:`ExportFacts`: image, volume claims, Secrets, scheduling), so the evaluation pod sees the
run's folder as the trainer did. Where the scores go is the shared contract of docs/evaluation.md:
``<run>/checkpoint-N/cw-eval/scores.json``, ``<run>/cw-eval/final/`` and ``<run>/cw-eval/base/``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.frameworks.base import CHECKPOINT_MOUNT, CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import EVAL_FILE, PIP_FILE, runtime_file, with_requirements
from cw_cli.labels import COMPONENT_LABEL, EVAL, GPU_RESOURCE
from cw_cli.render.export import MAX_JOB_NAME, ExportFacts
from cw_cli.render.pod_parts import CONTAINER_SECURITY, POD_SECURITY
from cw_cli.render.templates import render_manifest

if TYPE_CHECKING:
    from cw_cli.config.eval_tasks import UserTask
    from cw_cli.config.evaluation import EvalSpec
    from cw_cli.render.shipped_files import ShippedFile
    from cw_cli.types import RunConfig

#: The evaluation's settings in its ConfigMap (and in the run's, for `cw eval RUN` and the per-checkpoint pods).
SPEC_FILE = "cw-eval.json"
#: Hours a finished evaluation Job (and its log) is kept.
EVAL_TTL_HOURS = 72
#: Where an evaluation writes, in the model's folder (a checkpoint) or the run's (``final``, ``base``).
EVAL_DIR = "cw-eval"


class EvalTarget(Struct, frozen=True):
    """One model to evaluate.

    Attributes:
        label: ``checkpoint-N``, ``final`` or ``base`` (recorded in scores.json, part of the Job's name).
        step: The checkpoint's step (None for ``final`` and ``base``).
        model: The model's folder on the volume, or the base model's name.
        out: The folder scores.json goes to.
    """

    label: str
    step: int | None
    model: str
    out: str


def target(run_dir: str, which: str, base_model: str | None = None) -> EvalTarget:
    """The model ``which`` names (``base``, ``final`` or a step number) in the run's folder."""
    if which == "base":
        return EvalTarget("base", None, str(base_model), f"{run_dir}/{EVAL_DIR}/base")
    if which == "final":
        return EvalTarget("final", None, run_dir, f"{run_dir}/{EVAL_DIR}/final")
    step = int(which)
    return EvalTarget(f"checkpoint-{step}", step, f"{run_dir}/checkpoint-{step}", f"{run_dir}/checkpoint-{step}/{EVAL_DIR}")


def pod_spec(spec: EvalSpec, users: list[UserTask], gpu: int) -> dict[str, Any]:
    """The settings cw_eval.py reads (``cw-eval.json``): tasks by the names lm-eval reports them
    under, the user's task files, and the backend for ``gpu`` GPUs."""
    names = {user.path: user.name for user in users}
    files: dict[str, str] = {}
    for user in users:
        files.update(user.files)
    backend = spec.backend if spec.backend != "auto" else ("vllm" if gpu else "hf")
    return {
        "harness": "lm-eval", "tasks": [names.get(task, task) for task in spec.tasks], "task_files": files,
        "limit": spec.limit, "num_fewshot": spec.num_fewshot, "gen_kwargs": spec.gen_kwargs(),
        "batch_size": spec.batch_size, "backend": backend, "device": "cuda" if gpu else "cpu", "gpu": gpu,
        "metric": spec.metric, "higher_is_better": spec.higher_is_better,
    }  # fmt: skip


def eval_gpu(spec: EvalSpec, trainer_gpu: int | None) -> int:
    """The evaluation pod's GPUs: ``eval.gpu``, else one where the trainer has GPUs (vLLM), else none (CPU)."""
    return spec.gpu if spec.gpu is not None else (1 if trainer_gpu else 0)


def settings_of(spec: EvalSpec, config_dir: Path, trainer_gpu: int | None) -> dict[str, Any]:
    """:func:`pod_spec` of a checked ``eval:`` block, its user tasks read from ``config_dir``.

    Raises:
        ConfigError: A user task changed since the config was read (or the block was never checked).
    """
    from cw_cli.config.eval_tasks import check_eval
    from cw_cli.errors import ConfigError

    problems, users = check_eval(spec, config_dir)
    if problems:
        raise ConfigError(problems, hint="fix the eval: block (docs/evaluation.md)")
    return pod_spec(spec, users, eval_gpu(spec, trainer_gpu))


def run_eval_file(config: RunConfig) -> ShippedFile:
    """``cw-eval.json`` for the run's ConfigMap: the settings `cw eval RUN` and each checkpoint's
    evaluation pod use."""
    from cw_cli.render.shipped_files import text_file

    assert config.cluster.eval is not None
    settings = settings_of(config.cluster.eval, config.path.parent, config.cluster.gpu)
    return text_file(SPEC_FILE, json.dumps(settings, indent=1, sort_keys=True))


def eval_command(target: EvalTarget, spec_dir: str = CONFIG_MOUNT, requirements: list[str] | None = None) -> list[str]:
    """The evaluation container's command (``cw_eval.py`` after cw's package step when the image
    may lack lm-eval)."""
    command = ["python3", f"{spec_dir}/{EVAL_FILE}", "--spec", f"{spec_dir}/{SPEC_FILE}", "--model", target.model,
               "--out", target.out, "--checkpoint", target.label]  # fmt: skip
    if target.step is not None:
        command += ["--step", str(target.step)]
    return with_requirements(command, requirements or [])


def eval_name(run_name: str, target: EvalTarget) -> str:
    """The evaluation Job's name: ``RUN-eval-40``, ``RUN-eval-final``, ``RUN-eval-base``; cut with a
    hash suffix past 63 characters (a Job's pods carry its name as a label)."""
    which = str(target.step) if target.step is not None else target.label
    name = f"{run_name}-{EVAL}-{which}"
    if len(name) > MAX_JOB_NAME:
        name = name[: MAX_JOB_NAME - 7].rstrip("-") + "-" + hashlib.sha256(name.encode()).hexdigest()[:6]
    return name


class EvalResources(Struct, frozen=True):
    """The evaluation pod's size, image and priority."""

    gpu: int = 0
    cpu: str = "4"
    memory: str = "32Gi"
    image: str | None = None
    priority_class: str | None = None


def eval_manifests(
    facts: ExportFacts, pod_settings: dict[str, Any], target: EvalTarget, resources: EvalResources,
    namespace: str | None = None, requirements: list[str] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The evaluation's Job (first: it owns the rest) and ConfigMap."""
    name = eval_name(facts.run_name, target)
    labels = {**facts.labels, COMPONENT_LABEL: EVAL}
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
    limits: dict[str, Any] = {"cpu": resources.cpu, "memory": resources.memory}
    if resources.gpu:
        limits[GPU_RESOURCE] = resources.gpu
    values = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "roles": {EVAL: EVAL},
        "ttl_seconds": EVAL_TTL_HOURS * 3600,
        "pod_security": POD_SECURITY,
        "container_security": CONTAINER_SECURITY,
        "priority_class": resources.priority_class,
        "service_account": facts.service_account,
        "node_selector": facts.node_selector,
        "tolerations": facts.tolerations,
        "image": resources.image or facts.image,
        "pull_policy": facts.pull_policy,
        "command": eval_command(target, requirements=requirements),
        "env": facts.env,
        "resources": {"requests": dict(limits), "limits": limits},
        "volume_mounts": mounts,
        "volumes": volumes,
    }
    job = render_manifest("common/eval-job.yaml.j2", values, [], "Job", name)
    files = {EVAL_FILE: runtime_file(EVAL_FILE), SPEC_FILE: json.dumps(pod_settings, indent=1, sort_keys=True)}
    if requirements:
        files[PIP_FILE] = runtime_file(PIP_FILE)
    configmap_values = {"name": name, "namespace": namespace, "labels": labels, "files": files}
    configmap = render_manifest("common/eval-configmap.yaml.j2", configmap_values, [], "ConfigMap", name)
    return [job, configmap]
