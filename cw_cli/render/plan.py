"""From a validated config and a framework to the list of manifests of one run (the plan).

The plan is what ``--dry-run`` prints and exactly what gets applied; building it is pure: no
cluster, no kubeconfig, no printing.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import yaml
from msgspec import Struct, field

from cw_cli import __version__
from cw_cli.config.loader import RunConfig
from cw_cli.config.models import NO_VOLUME
from cw_cli.config.quantity import parse_quantity
from cw_cli.errors import ConfigError
from cw_cli.frameworks.base import (
    CHECKPOINT_MOUNT,
    CONFIG_MOUNT,
    BaseTrainingFramework,
    RunContext,
    ServiceDef,
    TrainingType,
)
from cw_cli.frameworks.distributed import MASTER_ADDR_ENV, MASTER_PORT, MASTER_PORT_ENV, NODE_RANK_ENV, NUM_NODES_ENV
from cw_cli.frameworks.registry import LoadedFramework
from cw_cli.frameworks.runtime_files import (
    CODE_FILE,
    ENTRYPOINT_FILE,
    FAULT_FILE,
    IDENTITY_ENV,
    KEEPER_FILE,
    PIP_FILE,
    RESUME_CHANGED_ENV,
    WAIT_FILE,
    runtime_file,
    with_entrypoint,
    with_requirements,
)
from cw_cli.labels import (
    COMPLETION_INDEX_ANNOTATION,
    COMPONENT_LABEL,
    GPU_RESOURCE,
    INSTANCE_LABEL,
    KEEPER,
    KINDS_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    LIFETIME_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PART_OF,
    PART_OF_LABEL,
    ROLES,
    RUN_LABEL,
    SWEEP_LABEL,
    TENSORBOARD_ANNOTATION,
    TRAINER,
    TYPE_LABEL,
    VERSION_LABEL,
    WANDB_URL_ANNOTATION,
    object_names,
)
from cw_cli.render.dataset_check import check_datasets
from cw_cli.render.jobset import gang, trainer_address
from cw_cli.render.keeper import (
    keeper_container,
    keeper_rules,
    keeper_subjects,
    token_volume,
)
from cw_cli.render.naming import validate_namespace
from cw_cli.render.outputs import place_outputs
from cw_cli.render.shipped_files import (
    ShippedFile,
    check_size,
    configmap_payload,
    referenced_modules,
    ship_referenced,
    text_file,
    user_files,
)
from cw_cli.render.storage import pod_volumes, storage_env
from cw_cli.render.templates import render_manifest
from cw_cli.render.tracking import (
    tensorboard_dir,
    tracking_env,
    wandb_url,
)
from cw_cli.render.user_code import CODE_ARCHIVE, code_pythonpath, code_setup, script_in_pod, shipped_code
from cw_cli.render.workload import ClusterFacts, Workload, choose_workload

#: Seconds a run's trainer waits for its servers (and cw for them) unless --timeout says otherwise.
DEFAULT_SERVICES_TIMEOUT_S = 1800


class RunRequest(Struct, frozen=True):
    """Everything needed to plan a run.

    Attributes:
        framework: The framework from the registry.
        training_type: The training method.
        config: The validated config.
        run_name: The run's name (already validated or generated).
        namespace: Namespace written into the manifests, or None to leave it to the cluster.
        services_only: Deploy only the services (``--services``).
        local: The trainer runs on this machine (``--local``), whose folder stands in for the
            checkpoint volume, so no volume choice is needed.
        services_lifetime_s: With ``--services``: seconds after which the servers stop (``--ttl``).
        services_timeout_s: How long the trainer waits for its servers to answer before it fails.
        resume_changed_config: ``--resume``: continue the checkpoints in the run's folder even
            if they were written under another config.
        facts: What the cluster serves (JobSet, Kueue), as far as the workload choice needs it;
            empty when it was not asked (an offline plan).
        sweep: The sweep the run belongs to (its label, and the W&B group).
    """

    framework: LoadedFramework
    training_type: TrainingType
    config: RunConfig
    run_name: str
    namespace: str | None = None
    services_only: bool = False
    local: bool = False
    services_lifetime_s: int | None = None
    services_timeout_s: int = DEFAULT_SERVICES_TIMEOUT_S
    resume_changed_config: bool = False
    facts: ClusterFacts = ClusterFacts()
    sweep: str | None = None


class Plan(Struct):
    """The manifests of one run, in an order that can be applied.

    Attributes:
        run_name: The run's name.
        manifests: Objects to create, the owner (trainer Job, or the ConfigMap with
            ``--services``) first.
        service_deployments: Names of the Deployments that must be Ready before the trainer starts.
        trainer_job: Name of the trainer Job (or of the JobSet), or None with ``--services``.
        workload: The workload strategy the run was rendered for (Job or JobSet, queued or not).
        gang_servers: Replicated Jobs of the JobSet that are servers (Ready before the trainer).
        notices: What cw changed or decided that the user should read before the run starts
            (a moved output folder, shipped files, outputs that will not be kept).
    """

    run_name: str
    workload: Workload
    manifests: list[dict[str, Any]] = field(default_factory=list)
    service_deployments: list[str] = field(default_factory=list)
    trainer_job: str | None = None
    gang_servers: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def owner_kind(self) -> str:
        """Kind of the run's owner object: ``Job``, ``JobSet`` or, with ``--services``, ``ConfigMap``."""
        return self.workload.owner_kind

    @property
    def managed_suspend(self) -> bool:
        """Whether cw releases the suspended Job itself (False under Kueue, which admits it)."""
        return self.workload.managed_suspend

    def to_yaml(self) -> str:
        """The manifests as multi-document YAML."""
        # libyaml: ~10x faster, the same data (tests/unit/test_libyaml_dump_reads_back_the_same.py)
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump_all(self.manifests, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1000)


def _labels(request: RunRequest) -> dict[str, str]:
    return {
        NAME_LABEL: request.framework.name,
        INSTANCE_LABEL: request.run_name,
        PART_OF_LABEL: PART_OF,
        MANAGED_BY_LABEL: MANAGED_BY,
        VERSION_LABEL: __version__,
        RUN_LABEL: request.run_name,
        TYPE_LABEL: request.training_type.value,
        **({SWEEP_LABEL: request.sweep} if request.sweep else {}),
    }




#: `rdma: true`: CoreWeave's InfiniBand scheduling resource (a flag, not a device count) and the
#: NCCL/UCX settings its documentation gives for its fabrics.
RDMA_RESOURCE = "rdma/ib"
RDMA_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "ibp", "UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}
#: Keep service-mesh sidecars (Istio, Linkerd) out of the trainer: a sidecar that never exits keeps a
#: finished Job's pod running. The run's own `annotations` win.
NO_MESH_ANNOTATIONS = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}


def _resources(gpus: int, cpu: str | None, memory: str | None, rdma: bool = False) -> dict[str, dict[str, str]]:
    amounts: dict[str, str] = {}
    if gpus:
        amounts[GPU_RESOURCE] = str(gpus)
    if rdma:
        amounts[RDMA_RESOURCE] = "1"
    if cpu:
        amounts["cpu"] = cpu
    if memory:
        amounts["memory"] = memory
    return {"requests": dict(amounts), "limits": dict(amounts)}


#: Requests of a server that states none: a pod with only a GPU request is BestEffort, the
#: first evicted under memory pressure. Per GPU, with a floor for GPU-less servers.
SERVER_CPU_PER_GPU = 4
SERVER_MEMORY_GI_PER_GPU = 32
#: Every container: no privilege escalation, no Linux capabilities, the runtime's default seccomp
#: profile (what Pod Security "baseline" and most admission policies ask for).
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}
#: cw's own helpers (the wait-for-server init containers, the keeper) only run stdlib Python: they
#: need neither root nor a writable file system. The trainer and servers run as their images
#: want (root, writing caches and pip installs).
HELPER_SECURITY = {
    **CONTAINER_SECURITY,
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "readOnlyRootFilesystem": True,
}
HELPER_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "32Mi", "ephemeral-storage": "10Mi"},
    "limits": {"cpu": "200m", "memory": "128Mi", "ephemeral-storage": "100Mi"},
}
#: Under Kueue the helpers ask only for CPU and memory: Kueue does not admit a pod that requests a
#: resource its ClusterQueue does not cover, and ClusterQueues rarely cover ephemeral-storage.
QUEUED_HELPER_RESOURCES = {
    part: {name: amount for name, amount in amounts.items() if name != "ephemeral-storage"}
    for part, amounts in HELPER_RESOURCES.items()
}


def helper_resources(queued: bool) -> dict[str, dict[str, str]]:
    """Requests and limits of cw's helper containers (wait-for-server init containers, keeper)."""
    return QUEUED_HELPER_RESOURCES if queued else HELPER_RESOURCES


def server_requests(service: ServiceDef) -> tuple[str, str]:
    """CPU and memory of a server: its own settings, else a default sized by its GPUs."""
    cpu = service.cpu or str(max(2, SERVER_CPU_PER_GPU * service.gpus))
    memory = service.memory or f"{max(16, SERVER_MEMORY_GI_PER_GPU * service.gpus)}Gi"
    return cpu, memory


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


def _multi_node_env(master: str, nodes: int) -> list[dict[str, Any]]:
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


def _wait_container(
    service: ServiceDef, service_name: str, image: str, pull_policy: str, timeout_s: int, queued: bool
) -> dict[str, Any]:
    # Runs inside the cluster, where the Service name resolves; cw itself only reads object status.
    url = f"http://{service_name}:{service.port}{service.health_path}"
    script = runtime_file(WAIT_FILE)  # inline (-c): init containers do not mount the ConfigMap
    return {
        "name": f"wait-{service.role}",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python3", "-c", script, url, str(timeout_s)],
        "resources": helper_resources(queued),
        "securityContext": HELPER_SECURITY,
    }


def _spread_affinity(labels: dict[str, str]) -> dict[str, Any]:
    selector = {key: labels[key] for key in (INSTANCE_LABEL, MANAGED_BY_LABEL)}
    selector[COMPONENT_LABEL] = TRAINER
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
                            "matchLabels": {INSTANCE_LABEL: labels[INSTANCE_LABEL]},
                            "matchExpressions": [
                                {"key": COMPONENT_LABEL, "operator": "In", "values": roles}
                            ],
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def _keeper_rbac(
    request: RunRequest,
    common: dict[str, Any],
    dirs: list[Any],
    templates: dict[str, str],
    servers: list[str],
    account: str,
) -> list[dict[str, Any]]:
    """ServiceAccount (unless the user names one), Role and RoleBinding of the run's server keepers."""
    names = common["names"]
    trainer_job = None if request.services_only else names[TRAINER]
    keeper = {
        "rules": keeper_rules(trainer_job, servers),
        "subjects": keeper_subjects(account, request.namespace),
    }
    view = {**common, "keeper": keeper}
    manifests = []
    if not request.config.cluster.service_account:
        manifests.append(
            render_manifest(templates["keeper_serviceaccount"], view, dirs, "ServiceAccount", names[KEEPER])
        )
    manifests.append(render_manifest(templates["keeper_role"], view, dirs, "Role", names[KEEPER]))
    manifests.append(render_manifest(templates["keeper_rolebinding"], view, dirs, "RoleBinding", names[KEEPER]))
    return manifests


def _volume_choice(request: RunRequest, framework: BaseTrainingFramework) -> list[str]:
    """Refuse a run whose outputs would silently die with its pod; warn when the user chose that."""
    cluster = request.config.cluster
    if cluster.keeps_outputs or request.local or request.services_only:
        return []
    if cluster.checkpoint_volume == NO_VOLUME:
        return [
            "`checkpoint_volume: none`: checkpoints and the final model are written to the pod's own disk and are "
            "LOST when the pod ends; nothing resumes after a failure"
        ]
    if framework.pushes_to_hub(request.config.native):
        return [
            "no `checkpoint_volume`: only what the trainer pushes to the Hugging Face Hub is kept; intermediate "
            "checkpoints are lost with the pod and a failed run cannot resume"
        ]
    raise ConfigError(
        [
            f"{request.config.path}: `checkpoint_volume` is not set, so the run's checkpoints and final model would "
            "be lost when its pod ends"
        ],
        hint="set `checkpoint_volume: <PersistentVolumeClaim>` (outputs go to /checkpoints/<run>), or "
        "`checkpoint_volume: none` to accept losing them (e.g. --set checkpoint_volume=none)",
    )


#: cw's pod-side files a run's ConfigMap may carry: a user's file may not take their names.
RUNTIME_KEYS = (PIP_FILE, ENTRYPOINT_FILE, FAULT_FILE, KEEPER_FILE, CODE_FILE, CODE_ARCHIVE)


class _FrameworkOutput(Struct):
    """What the framework makes of the run's native config: the files, services and packages."""

    prepared: dict[str, Any]
    config_text: str
    files: list[ShippedFile]
    services: list[ServiceDef]
    requirements: list[str]
    notices: list[str]
    #: The trainer's command when it runs the user's own script (`script:`); None: the framework's.
    script_command: list[str] | None = None


class _Scope(Struct):
    """What every manifest of one run is rendered with."""

    request: RunRequest
    context: RunContext
    common: dict[str, Any]
    dirs: list[Path]
    templates: dict[str, str]
    labels: dict[str, str]
    image: str
    pull_policy: str
    base_env: dict[str, str]
    secret_refs: dict[str, Any]
    config_items: list[dict[str, Any]]

    def render(self, template: str, values: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
        """One manifest from one of the run's templates, with the common values."""
        return render_manifest(self.templates[template], {**self.common, **values}, self.dirs, kind, name)


def build_plan(request: RunRequest) -> Plan:
    """Render every manifest of a run, in steps: the framework's files and services, the
    ConfigMap, the trainer Job, the servers, then the owner (Job or JobSet) and its links.

    Args:
        request: The framework, config, run name and mode.

    Returns:
        The plan: manifests in apply order plus what must be waited for.

    Raises:
        ConfigError: The framework cannot build this run (e.g. a missing reward file).
        TemplateError: A template is broken.
    """
    cluster = request.config.cluster
    if request.namespace is not None:
        validate_namespace(request.namespace)  # as a launch: a dry run prints nothing it would refuse
    context = RunContext(
        run_name=request.run_name,
        training_type=request.training_type,
        cluster=cluster,
        names=object_names(request.run_name),
        services_only=request.services_only,
    )
    output = _framework_output(request, context)
    workload = choose_workload(
        request.config.path, cluster, services_only=request.services_only, local=request.local,
        has_services=bool(output.services), facts=request.facts,
    )  # fmt: skip
    files = _configmap_files(request, output, workload)
    _check_modes(request, output.services)
    plan = Plan(
        run_name=request.run_name,
        workload=workload,
        notices=[*request.config.notices, *_volume_choice(request, request.framework.framework), *output.notices, *workload.notes],
    )
    data, binary_data, config_items = configmap_payload(files)
    scope = _scope(request, context, config_items)
    names = context.names
    trainer_job = None if request.services_only else _trainer_job(scope, output, workload)
    if trainer_job is not None and not workload.gang:
        plan.manifests.append(trainer_job)
        plan.trainer_job = names[TRAINER]
    plan.manifests.append(scope.render("configmap", {"files": data, "binary_files": binary_data}, "ConfigMap", names["config"]))
    if not request.services_only and cluster.nodes > 1 and not workload.gang:
        plan.manifests.append(scope.render("headless_service", {}, "Service", names["nodes"]))
    server_names = [f"{request.run_name}-{service.role}" for service in output.services]
    keeper_account = cluster.service_account or names[KEEPER]
    if output.services and not workload.gang:
        plan.manifests += _keeper_rbac(request, scope.common, scope.dirs, scope.templates, server_names, keeper_account)
    plan.manifests.append(scope.render("networkpolicy", {}, "NetworkPolicy", names["network"]))
    gang_servers = _servers(scope, plan, output, workload, keeper_account)
    if workload.gang and trainer_job is not None:
        jobset_labels = {**scope.labels, COMPONENT_LABEL: TRAINER}
        if workload.queue:
            jobset_labels[KUEUE_QUEUE_LABEL] = workload.queue
        plan.manifests.insert(0, gang(request.run_name, jobset_labels, trainer_job, gang_servers, cluster.max_restarts))
        plan.trainer_job = request.run_name
        plan.gang_servers = [role for role, _ in gang_servers]
    if plan.trainer_job is not None:
        _link_tracking(plan, request, context)
    _record_kinds(plan)
    return plan


def _record_kinds(plan: Plan) -> None:
    """Name the kinds of the run's objects on its ConfigMap, which `cw status` reads first by name:
    it then lists those kinds only, not each of the nine a run may have (a plain run has three)."""
    kinds = sorted({manifest["kind"] for manifest in plan.manifests})
    name = object_names(plan.run_name)["config"]
    for manifest in plan.manifests:
        if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] == name:
            metadata = manifest["metadata"]
            metadata["annotations"] = {**(metadata.get("annotations") or {}), KINDS_ANNOTATION: ",".join(kinds)}


def _framework_output(request: RunRequest, context: RunContext) -> _FrameworkOutput:
    """The framework's mounted config, its files and the user's, its services and packages."""
    framework = request.framework.framework
    cluster = request.config.cluster
    path = request.config.path
    try:
        native, moved = place_outputs(request.config.native, framework.output_keys, context.output_dir)
        native, referenced, shipped_notes = ship_referenced(native, framework.file_keys, path.parent, in_place=request.local)
        # The data's columns against what the type reads; a script of the user's reads it its own way.
        own_reader = request.services_only or cluster.script is not None
        needs = [] if own_reader else framework.dataset_needs(request.config.native, request.training_type)
        data_notes = check_datasets(needs, path.parent)
        prepared = framework.prepare_config(native, context)
        script_command, prepared = _own_script(framework, prepared, context)
        config_text = framework.serialize_config(prepared)
        user_shipped = user_files(path.parent, cluster.files)
        code, code_notes = shipped_code(cluster, path.parent)
        modules, module_notes = referenced_modules(
            native, framework.module_keys, path.parent, {f.key for f in user_shipped}
        )
        framework_files = framework.config_files(native, context, path.parent)
        services = framework.services(native, context)
        requirements = [*framework.pip_packages(prepared, context), *cluster.pip]
    except (ValueError, KeyError) as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    user_shipped += modules
    taken = sorted({f.key for f in user_shipped} & {framework.config_file_name, *framework_files, *RUNTIME_KEYS})
    if taken:
        raise ConfigError(
            [f"{path}: `files`: {', '.join(taken)} would replace a file cw mounts in /etc/cw"],
            hint="rename your file",
        )
    files = [
        text_file(framework.config_file_name, config_text),
        *user_shipped,
        *code,
        *(text_file(key, text) for key, text in framework_files.items()),
        *referenced,
    ]
    notices = [*moved, *shipped_notes, *data_notes, *module_notes, *code_notes]
    return _FrameworkOutput(prepared, config_text, files, services, requirements, notices, script_command)


def _own_script(
    framework: BaseTrainingFramework, prepared: dict[str, Any], context: RunContext
) -> tuple[list[str] | None, dict[str, Any]]:
    """The trainer's command for the run's own script and the config as mounted for it
    (None and the config unchanged without `script:`).

    Raises:
        ValueError: The framework runs no script of the user's.
    """
    script = script_in_pod(context.cluster)
    if script is None:
        return None, prepared
    ran = framework.script_command(prepared, context, script)
    if ran is None:
        raise ValueError(
            f"`script`: `{framework.name}` runs its own command and has no way to run yours; use `code` alone "
            "(your modules are importable in the pods), or `cw trl <type>` with `script`"
        )
    return ran


def _configmap_files(request: RunRequest, output: _FrameworkOutput, workload: Workload) -> list[ShippedFile]:
    """The ConfigMap's files: the framework's and the user's, plus cw's pod-side files the run uses."""
    runtime = []
    if output.requirements:
        runtime.append(PIP_FILE)
    if not request.services_only:
        runtime += [ENTRYPOINT_FILE, FAULT_FILE]  # cw_fault.py: the entrypoint's supervisor (issue 34)
    if output.services and not workload.gang:  # a JobSet stops its servers itself
        runtime.append(KEEPER_FILE)
    if request.config.cluster.code is not None and not request.services_only:
        runtime.append(CODE_FILE)
    files = [*output.files, *(text_file(key, runtime_file(key)) for key in runtime)]
    try:
        check_size(files, request.config.path)
    except ValueError as exc:
        raise ConfigError([f"{request.config.path}: {exc}"]) from None
    return files


def _check_modes(request: RunRequest, services: list[ServiceDef]) -> None:
    """--services and --ttl only where they make sense."""
    if request.services_only and not services:
        raise ConfigError(
            [f"`{request.framework.name} {request.training_type.value}` has no services to deploy"],
            hint="drop --services, or use a multi-service type such as grpo",
        )
    if request.services_only and not request.services_lifetime_s:
        raise ConfigError(
            ["--services starts servers without a trainer, so nothing would ever stop them and free their GPUs"],
            hint="give them a lifetime, e.g. --ttl 6h (they scale to zero then; `cw delete` removes them sooner)",
        )
    if request.services_lifetime_s and not request.services_only:
        raise ConfigError(
            ["--ttl is for --services: with a trainer, the servers stop when the trainer Job ends"],
            hint="drop --ttl, or add --services",
        )


def _scope(request: RunRequest, context: RunContext, config_items: list[dict[str, Any]]) -> _Scope:
    framework = request.framework.framework
    cluster = request.config.cluster
    labels = _labels(request)
    pull_policy = "Always" if cluster.pull else "IfNotPresent"
    common = {
        "namespace": request.namespace,
        "labels": labels,
        "names": context.names,
        # The roles by name, so a template never spells one (labels.py owns them).
        "roles": {role: role for role in (*ROLES, KEEPER)},
        "cluster": cluster.model_dump(),
        "tolerations": [t.model_dump(by_alias=True, exclude_none=True) for t in cluster.tolerations],
        "pull_policy": pull_policy,
        "config_mount": CONFIG_MOUNT,
        "container_security": CONTAINER_SECURITY,
        "pod_security": POD_SECURITY,
        "checkpoint_mount": CHECKPOINT_MOUNT,
        "master_port": MASTER_PORT,
    }
    # A plugin's own templates() may predate newer objects: the built-in ones fill the gaps.
    templates = {
        **BaseTrainingFramework.templates(framework, request.training_type),
        **framework.templates(request.training_type),
    }
    return _Scope(
        request=request,
        context=context,
        common=common,
        dirs=framework.template_dirs(),
        templates=templates,
        labels=labels,
        image=cluster.image or framework.default_image(request.training_type),
        pull_policy=pull_policy,
        base_env={**cluster.env, **storage_env(cluster), "PYTHONPATH": CONFIG_MOUNT},
        secret_refs=cluster.secret_refs(),
        config_items=config_items,
    )


def _trainer_job(scope: _Scope, output: _FrameworkOutput, workload: Workload) -> dict[str, Any]:
    """The trainer's Job (one pod per node), with init containers that wait for the servers."""
    request, context = scope.request, scope.context
    framework = request.framework.framework
    cluster = request.config.cluster
    names = context.names
    identity = {
        "framework": request.framework.name,
        "type": request.training_type.value,
        # As the user wrote it: a shipped path is rewritten, the model it names is the same.
        "model": str(request.config.native.get(framework.model_key, "")),
        # What the pods are given; cw_entrypoint refuses to resume under another one without --resume.
        "config": hashlib.sha256(output.config_text.encode("utf-8")).hexdigest()[:16],
    }
    resume_env = {RESUME_CHANGED_ENV: "1"} if request.resume_changed_config else {}
    fabric = RDMA_ENV if cluster.rdma else {}  # before base_env: the run's own `env` wins
    tracking = framework.tracking(request.config.native)
    trainer_env = _env(
        {
            **fabric,
            **tracking_env(request.run_name, tracking, group=request.sweep),
            **scope.base_env,
            "PYTHONPATH": ":".join([scope.base_env["PYTHONPATH"], *code_pythonpath(cluster.code)]),
            **framework.trainer_env(context),
            IDENTITY_ENV: json.dumps(identity, sort_keys=True),
            **resume_env,
        },
        scope.secret_refs,
    )
    if cluster.nodes > 1:
        master = trainer_address(request.run_name) if workload.gang else f"{names[TRAINER]}-0.{names['nodes']}"
        trainer_env += _multi_node_env(master, cluster.nodes)
    job_labels = {**scope.labels, COMPONENT_LABEL: TRAINER}
    if workload.queue and not workload.gang:
        job_labels[KUEUE_QUEUE_LABEL] = workload.queue
    shm_size = _shm_size(cluster.shm_size, cluster.memory)
    volumes, mounts = pod_volumes(cluster, names["config"], scope.config_items, shm_size, trainer=True)
    command = output.script_command or framework.trainer_command(output.prepared, context)
    setup = [*code_setup(cluster.code), *framework.setup_commands(output.prepared, context)]
    trainer = {
        "image": scope.image,
        "command": with_requirements(
            with_entrypoint(command, resume=framework.entrypoint_resumes, setup=setup), output.requirements
        ),
        "env": trainer_env,
        "resources": _resources(context.gpus, cluster.cpu, cluster.memory, rdma=cluster.rdma),
        "annotations": {**NO_MESH_ANNOTATIONS, **cluster.annotations},
        # Relative output paths of the config land in the run's folder on the volume.
        "working_dir": context.output_dir,
        "volumes": volumes,
        "volume_mounts": mounts,
    }
    waits = [
        _wait_container(service, f"{request.run_name}-{service.role}", scope.image, scope.pull_policy,
                        request.services_timeout_s, queued=workload.queue is not None)
        for service in output.services
    ]  # fmt: skip
    values = {
        "job_labels": job_labels,
        "nodes": cluster.nodes,
        "shm_size": shm_size,
        "ttl_seconds": int(math.ceil(cluster.ttl_hours * 3600)),
        "trainer": trainer,
        "spread_affinity": _spread_affinity(scope.labels),
        "wait_containers": waits,
    }
    return scope.render("job", values, "Job", names[TRAINER])


def _servers(
    scope: _Scope, plan: Plan, output: _FrameworkOutput, workload: Workload, keeper_account: str
) -> list[tuple[str, dict[str, Any]]]:
    """Each server's Deployment (or, in a JobSet, its pod template) and Service; the JobSet's servers."""
    request = scope.request
    cluster = request.config.cluster
    gang_servers: list[tuple[str, dict[str, Any]]] = []
    for service in output.services:
        service_name = f"{request.run_name}-{service.role}"
        service_cpu, service_memory = server_requests(service)
        service_shm = _shm_size(cluster.shm_size, service_memory)
        reads_checkpoints = f"{CHECKPOINT_MOUNT}/" in " ".join(service.command)
        volumes, mounts = pod_volumes(
            cluster, scope.context.names["config"], scope.config_items, service_shm, trainer=False,
            reads_checkpoints=reads_checkpoints,
        )  # fmt: skip
        service_view = {
            "name": service_name,
            "role": service.role,
            "image": service.image,
            "command": with_requirements(service.command, output.requirements),
            "port": service.port,
            "extra_ports": service.extra_ports,
            "headless": service.headless,
            "health_path": service.health_path,
            "env": _env({**scope.base_env, **service.env}, scope.secret_refs),
            "resources": _resources(service.gpus, service_cpu, service_memory),
            "shm_size": service_shm,
            "affinity": _pack_services_affinity(scope.labels, [s.role for s in output.services]),
            # For plugin templates written before `volumes`: the claim a server reads, else None.
            "checkpoint_volume": cluster.checkpoint_claim if reads_checkpoints else None,
            "volumes": volumes if workload.gang else [*volumes, token_volume()],
            "volume_mounts": mounts,
            "service_account": cluster.service_account if workload.gang else keeper_account,
            "sidecars": [] if workload.gang else [
                keeper_container(
                    service.image,
                    scope.pull_policy,
                    service_name,
                    plan.trainer_job,
                    request.services_lifetime_s,
                    HELPER_SECURITY,
                    helper_resources(workload.queue is not None),
                )
            ],
            "annotations": (
                {LIFETIME_ANNOTATION: str(request.services_lifetime_s)} if request.services_lifetime_s else {}
            ),
        }
        deployment = scope.render("deployment", {"service": service_view}, "Deployment", service_name)
        if workload.gang:
            if not cluster.service_account:
                deployment["spec"]["template"]["spec"].pop("serviceAccountName", None)
            gang_servers.append((service.role, deployment))
        else:
            plan.manifests.append(deployment)
            plan.service_deployments.append(service_name)
        plan.manifests.append(scope.render("service", {"service": service_view}, "Service", service_name))
    return gang_servers


def _link_tracking(plan: Plan, request: RunRequest, context: RunContext) -> None:
    """Where to watch the run (W&B page, TensorBoard folder), as annotations on its owner."""
    cluster = request.config.cluster
    tracking = request.framework.framework.tracking(request.config.native)
    links = {
        WANDB_URL_ANNOTATION: wandb_url(request.run_name, tracking, cluster.env),
        TENSORBOARD_ANNOTATION: tensorboard_dir(context.output_dir, tracking, cluster.env),
    }
    owner = plan.manifests[0]["metadata"]
    owner["annotations"] = {**(owner.get("annotations") or {}), **{k: v for k, v in links.items() if v}}
    if not owner["annotations"]:
        del owner["annotations"]
