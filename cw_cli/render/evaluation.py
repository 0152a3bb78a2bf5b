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
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.errors import ConfigError
from cw_cli.frameworks.base import CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import EVAL_FILE, PIP_FILE, VF_EVAL_FILE, runtime_file, with_requirements
from cw_cli.labels import COMPONENT_LABEL, EVAL, GPU_RESOURCE
from cw_cli.render.pod_parts import CONTAINER_SECURITY, POD_SECURITY
from cw_cli.render.templates import render_manifest

if TYPE_CHECKING:
    from cw_cli.config.eval_tasks import UserTask
    from cw_cli.config.evaluation import EvalSpec
    from cw_cli.render.export import ExportFacts
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


def pod_spec(spec: EvalSpec, users: list[UserTask], gpu: int, shipped: dict[str, str] | None = None) -> dict[str, Any]:
    """The settings cw_eval.py reads (``cw-eval.json``): tasks by the names lm-eval reports them
    under, the user's task files, and the backend for ``gpu`` GPUs; or, for environments, vf-eval's
    (render/eval_environments.py; ``shipped``: the run's Python ``files:`` by name -> text)."""
    if spec.environments is not None:
        from cw_cli.render.eval_environments import environment_settings

        return environment_settings(spec, gpu, shipped or {})
    names = {user.path: user.name for user in users}
    files: dict[str, str] = {}
    for user in users:
        files.update(user.files)
    backend = spec.backend if spec.backend != "auto" else ("vllm" if gpu else "hf")
    return {
        "harness": "lm-eval", "tasks": [names.get(task, task) for task in spec.tasks or []], "task_files": files,
        "limit": spec.limit, "num_fewshot": spec.num_fewshot, "gen_kwargs": spec.gen_kwargs(),
        "batch_size": spec.batch_size, "backend": backend, "device": "cuda" if gpu else "cpu", "gpu": gpu,
        "metric": spec.metric, "higher_is_better": spec.higher_is_better,
    }  # fmt: skip


def eval_gpu(spec: EvalSpec, trainer_gpu: int | None) -> int:
    """The evaluation pod's GPUs: ``eval.gpu``, else one where the trainer has GPUs (vLLM), else none (CPU)."""
    return spec.gpu if spec.gpu is not None else (1 if trainer_gpu else 0)


def eval_size(spec: EvalSpec, trainer_cpu: Any, trainer_memory: Any) -> dict[str, str]:
    """The evaluation pod's cpu and memory: the ``eval:`` block's where it names them, else cw's
    defaults capped at the trainer's request (render/helper_sizing.py)."""
    from cw_cli.render.helper_sizing import capped

    named = spec.model_fields_set
    return {"cpu": spec.cpu if "cpu" in named else capped(spec.cpu, trainer_cpu),
            "memory": spec.memory if "memory" in named else capped(spec.memory, trainer_memory)}  # fmt: skip


def eval_requirements(settings: dict[str, Any]) -> list[str]:
    """What the evaluation pod pip-installs when its image lacks it: the settings' own list (vf-eval's),
    else lm-eval at cw's pin."""
    from cw_cli.config.evaluation import LM_EVAL_REQUIREMENT

    listed = settings.get("requirements")
    return [str(r) for r in listed] if isinstance(listed, list) else [LM_EVAL_REQUIREMENT]


def settings_of(spec: EvalSpec, config_dir: Path, trainer_gpu: int | None, files: list[str] | None = None) -> dict[str, Any]:
    """:func:`pod_spec` of a checked ``eval:`` block, its user tasks read from ``config_dir`` (and, for
    environments, the run's Python ``files:``, among which an environment may be).

    Raises:
        ConfigError: A user task changed since the config was read (or the block was never checked).
    """
    from cw_cli.config.eval_tasks import check_eval

    problems, users = check_eval(spec, config_dir)
    if problems:
        raise ConfigError(problems, hint="fix the eval: block (docs/evaluation.md)")
    shipped = None
    if spec.environments is not None:
        from cw_cli.render.eval_environments import shipped_texts

        shipped = shipped_texts(config_dir, files or [])
    return pod_spec(spec, users, eval_gpu(spec, trainer_gpu), shipped)


def run_eval_file(config: RunConfig) -> ShippedFile:
    """``cw-eval.json`` for the run's ConfigMap: the settings `cw eval RUN` and each checkpoint's
    evaluation pod use."""
    from cw_cli.render.shipped_files import text_file

    assert config.cluster.eval is not None
    settings = settings_of(config.cluster.eval, config.path.parent, config.cluster.gpu, list(config.cluster.files))
    # The size `cw eval RUN` reuses, as the run's own evaluations have it.
    settings["resources"] = eval_size(config.cluster.eval, config.cluster.cpu, config.cluster.memory)
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
    from cw_cli.render.export import MAX_JOB_NAME

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
    namespace: str | None = None, requirements: list[str] | None = None, run_config_map: str | None = None,
    extra_labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The evaluation's Job (first: it owns the rest) and ConfigMap; the Job alone where it mounts
    the run's ConfigMap (``run_config_map``: the per-checkpoint evaluations, whose files it holds)."""
    from cw_cli.render.export import job_volumes

    name = eval_name(facts.run_name, target)
    labels = {**facts.labels, COMPONENT_LABEL: EVAL, **(extra_labels or {})}
    volumes, mounts = job_volumes(facts, run_config_map or name)
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
    if run_config_map:
        return [job]
    files = {EVAL_FILE: runtime_file(EVAL_FILE), SPEC_FILE: json.dumps(pod_settings, indent=1, sort_keys=True)}
    if pod_settings.get("harness") == "vf-eval":  # cw_eval.py hands an evaluation by environments to it
        files[VF_EVAL_FILE] = runtime_file(VF_EVAL_FILE)
    if requirements:
        files[PIP_FILE] = runtime_file(PIP_FILE)
    configmap_values = {"name": name, "namespace": namespace, "labels": labels, "files": files}
    configmap = render_manifest("common/eval-configmap.yaml.j2", configmap_values, [], "ConfigMap", name)
    return [job, configmap]


#: The step the per-checkpoint Job is rendered for at launch; cw_eval_watch.py puts each checkpoint's in its place.
TEMPLATE_STEP = 987654321
#: The per-checkpoint evaluation Job as rendered at launch, in the run's ConfigMap.
JOB_FILE = "cw-eval-job.json"
#: The final model's evaluation Job as rendered at launch: the watcher creates it once the trainer succeeded.
FINAL_JOB_FILE = "cw-eval-final-job.json"
#: The trainer's record of a successful end, in its working folder (cw_entrypoint.FINISHED_FILE).
FINISHED_FILE = ".cw/finished.json"
#: The watcher sidecar of the trainer pod.
WATCH_CONTAINER = "eval-watch"
#: The trainer environment entries an evaluation pod takes over (the Hub token, the cache, pip's index).
EVAL_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
            "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_BASE_URL",
            "WANDB_MODE", "WANDB_DISABLED")  # fmt: skip


def eval_env(trainer_env: list[dict[str, Any]], run_name: str) -> list[dict[str, Any]]:
    """The trainer's environment entries an evaluation pod takes over, and, where the trainer reports
    to W&B (cw gave it ``WANDB_RUN_ID``), the evaluation's own W&B run in the run's group."""
    env = [entry for entry in trainer_env if entry.get("name") in EVAL_ENV]
    if any(entry.get("name") == "WANDB_RUN_ID" for entry in trainer_env):
        env += [{"name": "CW_EVAL_WANDB_RUN", "value": f"{run_name}-{EVAL}"}, {"name": "CW_EVAL_WANDB_GROUP", "value": run_name}]
    return env
#: Kueue's label naming a queued workload's WorkloadPriorityClass.
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def trainer_output_dir(prepared: dict[str, Any], output_keys: tuple[tuple[str, ...], ...], working_dir: str) -> str:
    """Where the trainer saves its checkpoints: the mounted config's output folder (a relative one
    starts at the trainer's working folder, the run's folder on the volume), else that folder."""
    for key_path in output_keys:
        value: Any = prepared
        for key in key_path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            return posixpath.normpath(value if value.startswith("/") else f"{working_dir}/{value}")
    return working_dir


def watches(config: RunConfig, services_only: bool, kind_watches: bool = True) -> bool:
    """Whether the run evaluates each checkpoint while it trains (``eval.every_checkpoint`` on a
    run whose outputs are on a volume the evaluation pods can mount, whose trainer is a Job: a
    JobSet run has no objects of its own besides the JobSet for the watcher's identity yet)."""
    spec = config.cluster.eval
    wanted = spec is not None and spec.every_checkpoint and config.cluster.keeps_outputs and not services_only
    return wanted and kind_watches


def watch_notice(config: RunConfig, services_only: bool, kind_watches: bool) -> list[str]:
    """What the user should know where ``eval.every_checkpoint`` cannot be kept."""
    spec = config.cluster.eval
    if spec is None or not spec.every_checkpoint or services_only or watches(config, services_only, kind_watches):
        return []
    return ["eval: checkpoints are not evaluated while training goes on, since its outputs are on no volume; "
            "evaluate them with cw eval RUN"]


def watch_files(config: RunConfig, run_name: str, run_dir: str, labels: dict[str, str], image: str, pull_policy: str,
                env: list[dict[str, Any]], queue: str | None, namespace: str | None) -> list[ShippedFile]:  # fmt: skip
    """The run's ConfigMap's files for the per-checkpoint evaluations: the Job cw_eval_watch.py
    creates for each checkpoint (rendered here, from the template, for :data:`TEMPLATE_STEP`),
    the final model's Job, the watcher, cw_eval.py and cw_pip.py (cw-eval.json is there already)."""
    from cw_cli.frameworks.runtime_files import EVAL_WATCH_FILE, POD_API_FILE
    from cw_cli.render.export import ExportFacts
    from cw_cli.render.shipped_files import text_file

    spec = config.cluster.eval
    assert spec is not None
    cluster = config.cluster
    facts = ExportFacts(
        run_name=run_name, run_dir=run_dir, claim=str(cluster.checkpoint_claim), image=image, labels=labels,
        env=eval_env(env, run_name), hf_cache_claim=cluster.hf_cache_volume,
        node_selector=dict(cluster.node_selector),
        tolerations=[t.model_dump(by_alias=True, exclude_none=True) for t in cluster.tolerations],
        service_account=cluster.service_account, pull_policy=pull_policy,
    )  # fmt: skip
    # Below the trainer: a PriorityClass, or on a queued run Kueue's WorkloadPriorityClass (same queue).
    queued = {KUEUE_QUEUE_LABEL: str(queue), **({KUEUE_PRIORITY_LABEL: spec.priority_class} if spec.priority_class else {})}
    requirements = eval_requirements(settings_of(spec, config.path.parent, cluster.gpu, list(cluster.files)))
    size = eval_size(spec, cluster.cpu, cluster.memory)
    resources = EvalResources(gpu=eval_gpu(spec, cluster.gpu), cpu=size["cpu"], memory=size["memory"], image=spec.image,
                              priority_class=None if queue else spec.priority_class)  # fmt: skip
    jobs = {
        name: eval_manifests(facts, {}, target(run_dir, which), resources, namespace, requirements=requirements,
                             run_config_map=f"{run_name}-config", extra_labels=queued if queue else None)[0]
        for name, which in ((JOB_FILE, str(TEMPLATE_STEP)), (FINAL_JOB_FILE, "final"))
    }  # fmt: skip
    return [*(text_file(name, json.dumps(job, sort_keys=True)) for name, job in jobs.items()),
            *(text_file(key, runtime_file(key)) for key in (EVAL_WATCH_FILE, POD_API_FILE, EVAL_FILE, PIP_FILE)),
            *([text_file(VF_EVAL_FILE, runtime_file(VF_EVAL_FILE))] if spec.environments is not None else [])]  # fmt: skip


def watch_sidecar(image: str, pull_policy: str, run_dir: str, working_dir: str, config_mount: dict[str, Any],
                  checkpoint_mount: dict[str, Any], resources: dict[str, Any], security: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The trainer pod's native sidecar (an init container that restarts: it ends with the trainer)
    that runs cw_eval_watch.py with the watcher's token, mounted into it alone; ``working_dir`` is
    the trainer's, where it records a successful end."""
    from cw_cli.frameworks.runtime_files import EVAL_WATCH_FILE
    from cw_cli.render.keeper import SA_DIR, TOKEN_VOLUME

    return {
        "name": WATCH_CONTAINER, "image": image, "imagePullPolicy": pull_policy, "restartPolicy": "Always",
        "command": ["python3", f"{CONFIG_MOUNT}/{EVAL_WATCH_FILE}"],
        "env": [{"name": "CW_EVAL_RUN_DIR", "value": run_dir}, {"name": "CW_EVAL_JOB_FILE", "value": f"{CONFIG_MOUNT}/{JOB_FILE}"},
                {"name": "CW_EVAL_FINAL_JOB_FILE", "value": f"{CONFIG_MOUNT}/{FINAL_JOB_FILE}"},
                {"name": "CW_EVAL_FINISHED_FILE", "value": posixpath.join(working_dir, FINISHED_FILE)}],
        "resources": resources, "securityContext": security,
        "volumeMounts": [{**config_mount, "readOnly": True}, {**checkpoint_mount, "readOnly": True},
                         {"name": TOKEN_VOLUME, "mountPath": SA_DIR, "readOnly": True}],
    }  # fmt: skip


def watch_rbac(run_name: str, labels: dict[str, str], namespace: str | None, service_account: str | None) -> list[dict[str, Any]]:
    """The watcher's ServiceAccount (unless the config names one), Role and RoleBinding: create and get Jobs."""
    name = f"{run_name}-{EVAL}"
    labels = {**labels, COMPONENT_LABEL: EVAL}
    subject: dict[str, Any] = {"kind": "ServiceAccount", "name": service_account or name}
    if namespace:
        subject["namespace"] = namespace
    values = {"name": name, "namespace": namespace, "labels": labels, "subjects": [subject],
              "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]}  # fmt: skip
    manifests = [] if service_account else [render_manifest("common/eval-serviceaccount.yaml.j2", values, [], "ServiceAccount", name)]
    manifests.append(render_manifest("common/eval-role.yaml.j2", values, [], "Role", name))
    manifests.append(render_manifest("common/eval-rolebinding.yaml.j2", values, [], "RoleBinding", name))
    return manifests
