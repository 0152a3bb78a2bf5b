"""The run's pods as every workload kind shares them: the trainer's Job, each server's Deployment
and Service, and the keepers' RBAC, rendered from the run's templates. How they are arranged
(a Job and Deployments, or one JobSet) is the workload kind's
(:meth:`cw_cli.render.workloads.base.WorkloadKind.layout`)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli import features
from cw_cli.frameworks.base import CHECKPOINT_MOUNT, CONFIG_MOUNT, RunContext, ServiceDef
from cw_cli.frameworks.runtime_files import IDENTITY_ENV, RESUME_CHANGED_ENV, with_entrypoint, with_requirements
from cw_cli.labels import COMPONENT_LABEL, EVAL, KEEPER, LIFETIME_ANNOTATION, TRAINER
from cw_cli.render.keeper import keeper_container, keeper_rules, keeper_subjects, token_volume
from cw_cli.render.pod_parts import (
    HELPER_SECURITY,
    NO_MESH_ANNOTATIONS,
    RDMA_ENV,
    env_list,
    helper_resources,
    multi_node_env,
    pack_services_affinity,
    resources,
    server_requests,
    shm_size,
    spread_affinity,
    wait_container,
)
from cw_cli.render.storage import pod_volumes
from cw_cli.render.templates import render_manifest
from cw_cli.render.tracking import tracking_env
from cw_cli.render.user_code import code_pythonpath, code_setup
from cw_cli.render.workloads.base import Server

if TYPE_CHECKING:
    from cw_cli.render.framework_output import FrameworkOutput
    from cw_cli.render.plan import RunRequest
    from cw_cli.render.workload import Workload


class Scope(Struct):
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


def keeper_rbac(scope: Scope, servers: list[str], account: str) -> list[dict[str, Any]]:
    """ServiceAccount (unless the user names one), Role and RoleBinding of the run's server keepers."""
    request = scope.request
    names = scope.context.names
    trainer_job = None if request.services_only else names[TRAINER]
    keeper = {"rules": keeper_rules(trainer_job, servers), "subjects": keeper_subjects(account, request.namespace)}
    values = {"keeper": keeper}
    manifests = []
    if not request.config.cluster.service_account:
        manifests.append(scope.render("keeper_serviceaccount", values, "ServiceAccount", names[KEEPER]))
    manifests.append(scope.render("keeper_role", values, "Role", names[KEEPER]))
    manifests.append(scope.render("keeper_rolebinding", values, "RoleBinding", names[KEEPER]))
    return manifests


def _trainer_env(scope: Scope, output: FrameworkOutput, workload: Workload) -> list[dict[str, Any]]:
    """The trainer's environment: fabric, tracking, the run's own, the framework's, its identity, ranks."""
    request, context = scope.request, scope.context
    framework = request.framework.framework
    cluster = request.config.cluster
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
    env = env_list(
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
        env += multi_node_env(workload.strategy.master_address(request.run_name, context.names), cluster.nodes)
    return env + features.trainer_env(cluster, request.run_name)  # the trainer alone holds a notify Secret's keys


def trainer_job(scope: Scope, output: FrameworkOutput, workload: Workload) -> dict[str, Any]:
    """The trainer's Job (one pod per node), with init containers that wait for the servers."""
    request, context = scope.request, scope.context
    framework = request.framework.framework
    cluster = request.config.cluster
    shm = shm_size(cluster.shm_size, cluster.memory)
    volumes, mounts = pod_volumes(cluster, context.names["config"], scope.config_items, shm, trainer=True)
    command = output.script_command or framework.trainer_command(output.prepared, context)
    setup = [*code_setup(cluster.code), *framework.setup_commands(output.prepared, context)]
    trainer = {
        "image": scope.image,
        "command": with_requirements(
            with_entrypoint(command, resume=framework.entrypoint_resumes, setup=setup), output.requirements
        ),
        "env": _trainer_env(scope, output, workload),
        "resources": resources(context.gpus, cluster.cpu, cluster.memory, rdma=cluster.rdma),
        "annotations": {**NO_MESH_ANNOTATIONS, **cluster.annotations},
        # Relative output paths of the config land in the run's folder on the volume.
        "working_dir": context.output_dir,
        "volumes": volumes,
        "volume_mounts": mounts,
    }
    waits = [
        wait_container(service, f"{request.run_name}-{service.role}", scope.image, scope.pull_policy,
                       request.services_timeout_s, queued=workload.queue is not None)
        for service in output.services
    ]  # fmt: skip
    watched = evaluates_while_training(request, workload)
    if watched:  # the sidecar that creates one evaluation Job per complete checkpoint, with its own token
        from cw_cli.render.evaluation import trainer_output_dir

        run_dir = trainer_output_dir(output.prepared, framework.output_keys, context.output_dir)
        waits.append(_eval_watcher(scope, mounts, run_dir, context.output_dir, workload.queue is not None))
        trainer["volumes"] = [*volumes, token_volume()]
    values = {
        "job_labels": workload.strategy.trainer_labels({**scope.labels, COMPONENT_LABEL: TRAINER}, workload.queue),
        "nodes": cluster.nodes,
        "shm_size": shm,
        "ttl_seconds": int(math.ceil(cluster.ttl_hours * 3600)),
        "trainer": trainer,
        "spread_affinity": spread_affinity(scope.labels),
        "wait_containers": waits,
    }
    job = scope.render("job", values, "Job", context.names[TRAINER])
    if watched and not cluster.service_account:  # the pod runs as the watcher's account; only the sidecar mounts its token
        job["spec"]["template"]["spec"]["serviceAccountName"] = f"{request.run_name}-{EVAL}"
    return job


def evaluates_while_training(request: RunRequest, workload: Workload) -> bool:
    """Whether the run's checkpoints are evaluated while it trains (render/evaluation.py, which is
    imported only for a run with `eval:`)."""
    if request.config.cluster.eval is None:
        return False
    from cw_cli.render.evaluation import watches

    return watches(request.config, request.services_only, workload.strategy.eval_watcher)


def _eval_watcher(scope: Scope, mounts: list[dict[str, Any]], run_dir: str, working_dir: str, queued: bool) -> dict[str, Any]:
    """The trainer pod's evaluation watcher (render/evaluation.py), mounting the config and the volume read-only."""
    config = next(m for m in mounts if m["mountPath"] == CONFIG_MOUNT)
    checkpoints = next(m for m in mounts if m["mountPath"] == CHECKPOINT_MOUNT)
    from cw_cli.render.evaluation import watch_sidecar

    return watch_sidecar(scope.image, scope.pull_policy, run_dir, working_dir, config, checkpoints,
                         helper_resources(queued), HELPER_SECURITY)  # fmt: skip


def servers(scope: Scope, output: FrameworkOutput, workload: Workload, keeper_account: str) -> list[Server]:
    """Each server's Deployment and Service, with a keeper sidecar where the kind wants one."""
    return [_server(scope, output, workload, service, keeper_account) for service in output.services]


def _server(
    scope: Scope, output: FrameworkOutput, workload: Workload, service: ServiceDef, keeper_account: str
) -> Server:
    request = scope.request
    cluster = request.config.cluster
    name = f"{request.run_name}-{service.role}"
    cpu, memory = server_requests(service)
    shm = shm_size(cluster.shm_size, memory)
    reads_checkpoints = f"{CHECKPOINT_MOUNT}/" in " ".join(service.command)
    volumes, mounts = pod_volumes(
        cluster, scope.context.names["config"], scope.config_items, shm, trainer=False, reads_checkpoints=reads_checkpoints
    )
    kept = workload.strategy.server_keeper
    watched = None if request.services_only else scope.context.names[TRAINER]
    keeper = keeper_container(service.image, scope.pull_policy, name, watched, request.services_lifetime_s,
                              HELPER_SECURITY, helper_resources(workload.queue is not None))  # fmt: skip
    view = {
        "name": name,
        "role": service.role,
        "image": service.image,
        "command": with_requirements(service.command, output.requirements),
        "port": service.port,
        "extra_ports": service.extra_ports,
        "headless": service.headless,
        "health_path": service.health_path,
        "env": env_list({**scope.base_env, **service.env}, scope.secret_refs),
        "resources": resources(service.gpus, cpu, memory),
        "shm_size": shm,
        "affinity": pack_services_affinity(scope.labels, [s.role for s in output.services]),
        # For plugin templates written before `volumes`: the claim a server reads, else None.
        "checkpoint_volume": cluster.checkpoint_claim if reads_checkpoints else None,
        "volumes": [*volumes, token_volume()] if kept else volumes,
        "volume_mounts": mounts,
        "service_account": keeper_account if kept else cluster.service_account,
        "sidecars": [keeper] if kept else [],
        "annotations": {LIFETIME_ANNOTATION: str(request.services_lifetime_s)} if request.services_lifetime_s else {},
    }
    deployment = scope.render("deployment", {"service": view}, "Deployment", name)
    return Server(service.role, name, deployment, scope.render("service", {"service": view}, "Service", name))
