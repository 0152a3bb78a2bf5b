"""From a validated config and a framework to the list of manifests of one run (the plan).

The plan is what ``--dry-run`` prints and exactly what gets applied; building it is pure: no
cluster, no kubeconfig, no printing.
"""

from __future__ import annotations

from typing import Any

import yaml
from msgspec import Struct, field

from cw_cli import __version__
from cw_cli.config.loader import RunConfig
from cw_cli.frameworks.base import CHECKPOINT_MOUNT, CONFIG_MOUNT, BaseTrainingFramework, RunContext, TrainingType
from cw_cli.frameworks.distributed import MASTER_PORT
from cw_cli.frameworks.registry import LoadedFramework
from cw_cli.labels import (
    INSTANCE_LABEL,
    KEEPER,
    KINDS_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PART_OF,
    PART_OF_LABEL,
    ROLES,
    RUN_LABEL,
    SWEEP_LABEL,
    TENSORBOARD_ANNOTATION,
    TYPE_LABEL,
    VERSION_LABEL,
    WANDB_URL_ANNOTATION,
    object_names,
)
from cw_cli.render.framework_output import FrameworkOutput, check_modes, configmap_files, framework_output, volume_choice
from cw_cli.render.naming import validate_namespace
from cw_cli.render.pod_parts import CONTAINER_SECURITY, POD_SECURITY
from cw_cli.render.run_pods import Scope, evaluates_while_training, keeper_rbac, servers, trainer_job
from cw_cli.render.shipped_files import configmap_payload
from cw_cli.render.storage import storage_env
from cw_cli.render.tracking import tensorboard_dir, tracking_env, wandb_url
from cw_cli.render.workload import ClusterFacts, Workload, choose_workload
from cw_cli.render.workloads.base import Parts

#: Read from here by the helper pods (export, reader, server) too.
__all__ = ["CONTAINER_SECURITY", "POD_SECURITY", "Plan", "RunRequest", "build_plan"]

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
        manifests: Objects to create, the owner (trainer Job, JobSet, or the ConfigMap with
            ``--services``) first.
        owner_name: Name of the run's owner (the trainer Job, or the JobSet), or None with
            ``--services`` (the ConfigMap owns only servers).
        workload: The workload strategy the run was rendered for (Job or JobSet, queued or not).
        servers: Names (``<run>-<role>``) of the servers that must be Ready before the trainer
            starts, whatever owns them.
        notices: What cw changed or decided that the user should read before the run starts
            (a moved output folder, shipped files, outputs that will not be kept).
    """

    run_name: str
    workload: Workload
    manifests: list[dict[str, Any]] = field(default_factory=list)
    owner_name: str | None = None
    servers: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def owner_kind(self) -> str:
        """Kind of the run's owner object: ``Job``, ``JobSet`` or, with ``--services``, ``ConfigMap``."""
        return self.workload.owner_kind

    @property
    def managed_suspend(self) -> bool:
        """Whether cw releases the suspended owner itself (False under Kueue, which admits it)."""
        return self.workload.managed_suspend

    @property
    def service_deployments(self) -> list[str]:
        """Names of the run's server Deployments (none where its owner runs the servers as Jobs)."""
        return [m["metadata"]["name"] for m in self.manifests if m["kind"] == "Deployment"]

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




def build_plan(request: RunRequest) -> Plan:
    """Render every manifest of a run, in steps: the framework's files and services, the
    ConfigMap, the trainer Job and the servers, then the workload kind arranges them (a Job and
    Deployments, or one JobSet) and the owner gets its links.

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
    output = framework_output(request, context)
    workload = choose_workload(
        request.config.path, cluster, services_only=request.services_only, local=request.local,
        has_services=bool(output.services), facts=request.facts,
    )  # fmt: skip
    files = configmap_files(request, output, workload)
    if evaluates_while_training(request, workload):  # each checkpoint evaluated while training goes on
        files += _eval_watch_files(request, context, workload, output)
    check_modes(request, output.services)
    data, binary_data, config_items = configmap_payload(files)
    scope = _scope(request, context, config_items)
    layout = workload.strategy.layout(_parts(scope, output, workload, data, binary_data))
    notices = [*request.config.notices, *volume_choice(request, request.framework.framework), *output.notices]
    if request.config.cluster.eval is not None:
        from cw_cli.render.evaluation import watch_notice

        notices += watch_notice(request.config, request.services_only, workload.strategy.eval_watcher)
    plan = Plan(request.run_name, workload, layout.manifests, layout.owner_name, layout.servers, [*notices, *workload.notes])
    if plan.owner_name is not None:
        _link_tracking(plan, request, context)
        if cluster.gate is not None:  # `cw export` of the run applies it without the config file
            from cw_cli.render.scores import gate_settings, record_gate

            gate = gate_settings(request.config.path, cluster.gate, cluster.eval)
            record_gate(plan.manifests[0], gate.metric, gate.max_drop, gate.higher_is_better)
    _record_kinds(plan)
    return plan


def _parts(scope: Scope, output: FrameworkOutput, workload: Workload, data: dict[str, str], binary_data: dict[str, str]) -> Parts:
    """Every piece of the run rendered, for its workload kind to arrange."""
    request = scope.request
    cluster = request.config.cluster
    names = scope.context.names
    trainer = None if request.services_only else trainer_job(scope, output, workload)
    multi_node = trainer is not None and cluster.nodes > 1
    keeper_account = cluster.service_account or names[KEEPER]
    server_names = [f"{request.run_name}-{service.role}" for service in output.services]
    kept = output.services and workload.strategy.server_keeper
    return Parts(
        run_name=request.run_name,
        labels=scope.labels,
        queue=workload.queue,
        max_restarts=cluster.max_restarts,
        trainer=trainer,
        configmap=scope.render("configmap", {"files": data, "binary_files": binary_data}, "ConfigMap", names["config"]),
        node_service=scope.render("headless_service", {}, "Service", names["nodes"]) if multi_node else None,
        keeper_rbac=[*(keeper_rbac(scope, server_names, keeper_account) if kept else []), *_eval_rbac(scope, workload)],
        network_policy=scope.render("networkpolicy", {}, "NetworkPolicy", names["network"]),
        servers=servers(scope, output, workload, keeper_account),
    )


def _eval_rbac(scope: Scope, workload: Workload) -> list[dict[str, Any]]:
    """The evaluation watcher's ServiceAccount, Role and RoleBinding, where the run has one."""
    request = scope.request
    if not evaluates_while_training(request, workload):
        return []
    from cw_cli.render.evaluation import watch_rbac

    return watch_rbac(request.run_name, scope.labels, request.namespace, request.config.cluster.service_account)


def _eval_watch_files(request: RunRequest, context: RunContext, workload: Workload, output: FrameworkOutput) -> list[Any]:
    """The per-checkpoint evaluation's files in the run's ConfigMap (render/evaluation.py)."""
    from cw_cli.render.evaluation import trainer_output_dir, watch_files
    from cw_cli.render.pod_parts import env_list

    cluster = request.config.cluster
    image = cluster.image or request.framework.framework.default_image(request.training_type)
    tracking = tracking_env(request.run_name, request.framework.framework.tracking(request.config.native), request.sweep)
    env = env_list({**tracking, **cluster.env, **storage_env(cluster)}, cluster.secret_refs())
    run_dir = trainer_output_dir(output.prepared, request.framework.framework.output_keys, context.output_dir)
    return watch_files(request.config, request.run_name, run_dir, _labels(request), image,
                       "Always" if cluster.pull else "IfNotPresent", env, workload.queue, request.namespace)  # fmt: skip


def _record_kinds(plan: Plan) -> None:
    """Name the kinds of the run's objects on its ConfigMap, which `cw status` reads first by name:
    it then lists those kinds only, not each of the nine a run may have (a plain run has three)."""
    kinds = sorted({manifest["kind"] for manifest in plan.manifests})
    name = object_names(plan.run_name)["config"]
    for manifest in plan.manifests:
        if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] == name:
            metadata = manifest["metadata"]
            metadata["annotations"] = {**(metadata.get("annotations") or {}), KINDS_ANNOTATION: ",".join(kinds)}


def _scope(request: RunRequest, context: RunContext, config_items: list[dict[str, Any]]) -> Scope:
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
    return Scope(
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
