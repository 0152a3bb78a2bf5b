"""From a validated config and a framework to the list of manifests of one run (the plan).

The plan is what ``--dry-run`` prints and exactly what gets applied; building it is pure: no
cluster, no kubeconfig, no printing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from cw_cli import __version__
from cw_cli.config.loader import RunConfig
from cw_cli.config.quantity import parse_quantity
from cw_cli.errors import ConfigError
from cw_cli.frameworks.base import (
    CHECKPOINT_MOUNT,
    CONFIG_MOUNT,
    RunContext,
    ServiceDef,
    TrainingType,
)
from cw_cli.frameworks.launch import MASTER_ADDR_ENV, MASTER_PORT, MASTER_PORT_ENV, NODE_RANK_ENV, NUM_NODES_ENV
from cw_cli.frameworks.registry import LoadedFramework
from cw_cli.frameworks.runtime_files import PIP_FILE, runtime_file, user_file, with_requirements
from cw_cli.render.naming import object_names
from cw_cli.render.templates import render_manifest

MANAGED_BY = "cw"
RUN_LABEL = "cw-cli.dev/run"
TYPE_LABEL = "cw-cli.dev/training-type"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class RunRequest:
    """Everything needed to plan a run.

    Attributes:
        framework: The framework from the registry.
        training_type: The training method.
        config: The validated config.
        run_name: The run's name (already validated or generated).
        namespace: Namespace written into the manifests, or None to leave it to the cluster.
        services_only: Deploy only the services (``--services``).
    """

    framework: LoadedFramework
    training_type: TrainingType
    config: RunConfig
    run_name: str
    namespace: str | None = None
    services_only: bool = False


@dataclass
class Plan:
    """The manifests of one run, in an order that can be applied.

    Attributes:
        run_name: The run's name.
        manifests: Objects to create, the owner (trainer Job, or the ConfigMap with
            ``--services``) first.
        service_deployments: Names of the Deployments that must be Ready before the trainer starts.
        trainer_job: Name of the trainer Job, or None with ``--services``.
        managed_suspend: Whether cw releases the suspended Job itself (False under Kueue, which
            admits the Job instead).
    """

    run_name: str
    manifests: list[dict[str, Any]] = field(default_factory=list)
    service_deployments: list[str] = field(default_factory=list)
    trainer_job: str | None = None
    managed_suspend: bool = True

    def to_yaml(self) -> str:
        """The manifests as multi-document YAML."""
        return yaml.safe_dump_all(self.manifests, sort_keys=False, default_flow_style=False, width=1000)


def _labels(request: RunRequest) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": request.framework.name,
        "app.kubernetes.io/instance": request.run_name,
        "app.kubernetes.io/part-of": "cw",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": __version__,
        RUN_LABEL: request.run_name,
        TYPE_LABEL: request.training_type.value,
    }




def _resources(gpus: int, cpu: str | None, memory: str | None) -> dict[str, dict[str, str]]:
    amounts: dict[str, str] = {}
    if gpus:
        amounts["nvidia.com/gpu"] = str(gpus)
    if cpu:
        amounts["cpu"] = cpu
    if memory:
        amounts["memory"] = memory
    return {"requests": dict(amounts), "limits": dict(amounts)}


MAX_SHM = 64 * 2**30


def _shm_size(explicit: str | None, memory: str | None) -> str:
    """/dev/shm counts against the memory limit: default to half of it, at most 64Gi."""
    if explicit:
        return explicit
    if not memory:
        return "64Gi"
    half_gib = max(1, int(min(parse_quantity(memory) / 2, MAX_SHM) // 2**30))
    return f"{half_gib}Gi"


def _env(literal: dict[str, str], secret_refs: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in literal.items()]
    for variable, ref in secret_refs.items():
        env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def _multi_node_env(names: dict[str, str], nodes: int) -> list[dict[str, Any]]:
    master = f"{names['trainer']}-0.{names['nodes']}"
    rank_source = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    return [
        {"name": NODE_RANK_ENV, "valueFrom": rank_source},
        {"name": "NODE_RANK", "valueFrom": rank_source},
        {"name": NUM_NODES_ENV, "value": str(nodes)},
        {"name": "NNODES", "value": str(nodes)},
        {"name": MASTER_ADDR_ENV, "value": master},
        {"name": "MASTER_ADDR", "value": master},
        {"name": MASTER_PORT_ENV, "value": str(MASTER_PORT)},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def _wait_container(service: ServiceDef, service_name: str, image: str, pull_policy: str) -> dict[str, Any]:
    # Runs inside the cluster, where the Service name resolves; cw itself only reads object status.
    url = f"http://{service_name}:{service.port}{service.health_path}"
    script = (
        "import sys, time, urllib.request\n"
        "url = sys.argv[1]\n"
        "while True:\n"
        "    try:\n"
        "        urllib.request.urlopen(url, timeout=5)\n"
        "        break\n"
        "    except Exception as exc:\n"
        "        print(f'waiting for {url}: {exc}', flush=True)\n"
        "        time.sleep(5)\n"
    )
    return {
        "name": f"wait-{service.role}",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python3", "-c", script, url],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
    }


def _spread_affinity(labels: dict[str, str]) -> dict[str, Any]:
    selector = {key: labels[key] for key in ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by")}
    selector["app.kubernetes.io/component"] = "trainer"
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }


def _pack_services_affinity(labels: dict[str, str], roles: list[str]) -> dict[str, Any]:
    """Prefer putting a run's servers on one node, so whole nodes stay free for the trainer."""
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {
                            "matchLabels": {"app.kubernetes.io/instance": labels["app.kubernetes.io/instance"]},
                            "matchExpressions": [
                                {"key": "app.kubernetes.io/component", "operator": "In", "values": roles}
                            ],
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def build_plan(request: RunRequest) -> Plan:
    """Render every manifest of a run.

    Args:
        request: The framework, config, run name and mode.

    Returns:
        The plan: manifests in apply order plus what must be waited for.

    Raises:
        ConfigError: The framework cannot build this run (e.g. a missing reward file).
        TemplateError: A template is broken.
    """
    framework = request.framework.framework
    cluster = request.config.cluster
    names = object_names(request.run_name)
    gpus = cluster.gpu if cluster.gpu is not None else framework.resources.gpu
    context = RunContext(
        run_name=request.run_name,
        training_type=request.training_type,
        cluster=cluster,
        gpus=gpus,
        names=names,
        services_only=request.services_only,
    )
    native = request.config.native
    try:
        prepared = framework.prepare_config(native, context)
        config_text = framework.serialize_config(prepared)
        extra_files = dict(user_file(request.config.path.parent, path, "files") for path in cluster.files)
        framework_files = framework.config_files(native, context, request.config.path.parent)
        services = framework.services(native, context)
        requirements = [*framework.pip_packages(prepared, context), *cluster.pip]
    except (ValueError, KeyError) as exc:
        raise ConfigError([f"{request.config.path}: {exc}"]) from None
    if requirements:
        framework_files[PIP_FILE] = runtime_file(PIP_FILE)
    taken = sorted(set(extra_files) & ({framework.config_file_name} | set(framework_files)))
    if taken:
        raise ConfigError(
            [f"{request.config.path}: `files`: {', '.join(taken)} would replace a file cw mounts in /etc/cw"],
            hint="rename your file",
        )
    extra_files.update(framework_files)
    if request.services_only and not services:
        raise ConfigError(
            [f"`{request.framework.name} {request.training_type.value}` has no services to deploy"],
            hint="drop --services, or use a multi-service type such as grpo",
        )

    labels = _labels(request)
    pull_policy = "Always" if cluster.pull else "IfNotPresent"
    tolerations = [t.model_dump(by_alias=True, exclude_none=True) for t in cluster.tolerations]
    secret_refs = cluster.secret_refs()
    base_env = {**cluster.env, "PYTHONPATH": CONFIG_MOUNT}
    image = cluster.image or framework.default_image(request.training_type)
    files = {framework.config_file_name: config_text, **extra_files}
    common = {
        "namespace": request.namespace,
        "labels": labels,
        "names": names,
        "cluster": cluster.model_dump(),
        "tolerations": tolerations,
        "pull_policy": pull_policy,
        "config_mount": CONFIG_MOUNT,
        "checkpoint_mount": CHECKPOINT_MOUNT,
        "master_port": MASTER_PORT,
    }
    dirs = framework.template_dirs()
    templates = framework.templates(request.training_type)
    plan = Plan(run_name=request.run_name, managed_suspend=cluster.queue is None)

    if not request.services_only:
        trainer_env = _env({**base_env, **framework.trainer_env(context)}, secret_refs)
        if cluster.nodes > 1:
            trainer_env += _multi_node_env(names, cluster.nodes)
        job_labels = dict(labels, **{"app.kubernetes.io/component": "trainer"})
        if cluster.queue:
            job_labels[KUEUE_QUEUE_LABEL] = cluster.queue
        trainer = {
            "image": image,
            "command": with_requirements(framework.trainer_command(prepared, context), requirements),
            "env": trainer_env,
            "resources": _resources(gpus, cluster.cpu, cluster.memory),
        }
        plan.manifests.append(
            render_manifest(
                templates["job"],
                {
                    **common,
                    "job_labels": job_labels,
                    "nodes": cluster.nodes,
                    "shm_size": _shm_size(cluster.shm_size, cluster.memory),
                    "ttl_seconds": int(math.ceil(cluster.ttl_hours * 3600)),
                    "trainer": trainer,
                    "spread_affinity": _spread_affinity(labels),
                    "wait_containers": [
                        _wait_container(service, f"{request.run_name}-{service.role}", image, pull_policy)
                        for service in services
                    ],
                },
                dirs,
                "Job",
                names["trainer"],
            )
        )
        plan.trainer_job = names["trainer"]

    plan.manifests.append(
        render_manifest(templates["configmap"], {**common, "files": files}, dirs, "ConfigMap", names["config"])
    )
    if not request.services_only and cluster.nodes > 1:
        plan.manifests.append(
            render_manifest(templates["headless_service"], common, dirs, "Service", names["nodes"])
        )
    for service in services:
        service_name = f"{request.run_name}-{service.role}"
        service_view = {
            "name": service_name,
            "role": service.role,
            "image": service.image,
            "command": with_requirements(service.command, requirements),
            "port": service.port,
            "extra_ports": service.extra_ports,
            "headless": service.headless,
            "health_path": service.health_path,
            "env": _env({**base_env, **service.env}, secret_refs),
            "resources": _resources(service.gpus, service.cpu, service.memory),
            "shm_size": _shm_size(cluster.shm_size, service.memory),
            "affinity": _pack_services_affinity(labels, [s.role for s in services]),
            # Servers read the volume only to load a model kept there (a ReadWriteOnce claim
            # cannot follow them to other nodes otherwise).
            "checkpoint_volume": cluster.checkpoint_volume if f"{CHECKPOINT_MOUNT}/" in " ".join(service.command) else None,
        }
        plan.manifests.append(
            render_manifest(templates["deployment"], {**common, "service": service_view}, dirs, "Deployment", service_name)
        )
        plan.manifests.append(
            render_manifest(templates["service"], {**common, "service": service_view}, dirs, "Service", service_name)
        )
        plan.service_deployments.append(service_name)
    return plan
