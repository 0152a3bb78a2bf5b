"""A run as one JobSet: the trainer (one Job per gang of nodes) and its servers, restarted and queued together.

The trainer Job and the server Deployments are rendered from their usual templates first; this
module folds their pod templates into the replicated Jobs of one JobSet, so what runs in a pod is
the same either way. What changes is who owns the lifecycle:

* the JobSet succeeds when the trainer's Job does, and JobSet then deletes the servers' Jobs,
  so their GPUs come back without a keeper;
* any failed Job restarts the whole gang (``maxRestarts``), every rank resuming from the last
  checkpoint; a Job failed by a disruption (preemption, node drain) restarts it without counting;
* Kueue admits the JobSet as one Workload, one pod set per replicated Job: trainer and servers
  take their quota together or wait together.

See :mod:`cw_cli.render.workloads.base` for the contract a kind answers.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cw_cli.labels import COMPONENT_LABEL, KUEUE_QUEUE_LABEL, TRAINER
from cw_cli.render.workloads.base import Layout, Parts, WorkloadKind, pod_gpus, suspended_state, true_conditions

if TYPE_CHECKING:
    from cw_cli.diagnosis.explanation import Explanation, FrameworkLookup

API_VERSION = "jobset.x-k8s.io/v1alpha2"
GROUP_VERSION_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
#: The Job's own failure reason when a pod failure policy rule fails it: here only disruptions do.
DISRUPTION_REASON = "PodFailurePolicy"
#: The DisruptionTarget rule every replicated Job carries: a disrupted pod fails its Job at once
#: (with reason PodFailurePolicy), and the JobSet restarts the gang without counting it.
_DISRUPTION_FAILS_JOB = {
    "rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
        # Exit 143: a trainer stopped on SIGTERM with a complete checkpoint (cw_fault.py, issue 34), as
        # the ranks of a disrupted pod's gang do; a server ended by SIGTERM. The same uncounted restart.
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [143]}},
    ]
}


def trainer_address(run_name: str) -> str:
    """DNS name of rank 0 of a JobSet run: ``<jobset>-<replicated job>-<job index>-<pod index>.<subdomain>``."""
    return f"{run_name}-{TRAINER}-0-0.{run_name}"


def _replicated_job(name: str, job_spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(job_spec)
    for key in ("suspend", "ttlSecondsAfterFinished", "selector", "manualSelector"):
        spec.pop(key, None)
    # Retries are the gang's (maxRestarts): one failed pod fails its Job, and the JobSet restarts all.
    spec["backoffLimit"] = 0
    spec["podFailurePolicy"] = copy.deepcopy(_DISRUPTION_FAILS_JOB)
    pod = spec["template"]["spec"]
    pod["restartPolicy"] = "Never"
    pod.pop("subdomain", None)  # JobSet's own headless Service names the pods
    return {"name": name, "replicas": 1, "template": {"spec": spec}}


def _server_job_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(deployment["spec"]["template"])
    return {"completions": 1, "parallelism": 1, "template": template}


def gang(
    run_name: str,
    labels: dict[str, str],
    job: dict[str, Any],
    servers: list[tuple[str, dict[str, Any]]],
    max_restarts: int,
) -> dict[str, Any]:
    """The JobSet of a run.

    Args:
        run_name: The run's name, which is the JobSet's (and its pods' DNS subdomain).
        labels: The JobSet's own labels (the run's, plus a queue label under Kueue).
        job: The rendered trainer Job.
        servers: (role, rendered Deployment) of each server, in start order.
        max_restarts: Restarts of the gang after failures that are not disruptions.

    Returns:
        The JobSet manifest, unsuspended (cw creates it suspended and releases it, as with a Job).
    """
    replicated = [_replicated_job(TRAINER, job["spec"])]
    replicated += [_replicated_job(role, _server_job_spec(deployment)) for role, deployment in servers]
    metadata: dict[str, Any] = {"name": run_name, "labels": dict(labels)}
    if job["metadata"].get("namespace"):
        metadata["namespace"] = job["metadata"]["namespace"]
    spec: dict[str, Any] = {
        "suspend": False,
        "replicatedJobs": replicated,
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        # Done when the trainer is: the servers' Jobs are then deleted, and their GPUs freed.
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [TRAINER]},
        "failurePolicy": {
            "maxRestarts": max_restarts,
            "rules": [
                {
                    "name": "DisruptionRestartsWithoutCounting",
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": [DISRUPTION_REASON],
                }
            ],
        },
    }
    ttl = job["spec"].get("ttlSecondsAfterFinished")
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata, "spec": spec}


def child_job_name(jobset_name: str, replicated_job: str, index: int = 0) -> str:
    """Name JobSet gives the ``index``-th Job of a replicated Job."""
    return f"{jobset_name}-{replicated_job}-{index}"


class JobSetOwner(WorkloadKind):
    """A run that is one JobSet named after it: the trainer and each server a replicated Job."""

    kind = "JobSet"
    server_keeper = False  # the JobSet ends its servers' Jobs when the trainer's succeeds
    eval_watcher = True  # every node's trainer pod runs the watcher (creating a Job twice is a no-op)
    add_on = True

    def master_address(self, run_name: str, names: dict[str, str]) -> str:
        return trainer_address(run_name)

    def layout(self, parts: Parts) -> Layout:
        if parts.trainer is None:
            raise ValueError("a JobSet run has a trainer")
        labels = {**parts.labels, COMPONENT_LABEL: TRAINER}
        if parts.queue:
            labels[KUEUE_QUEUE_LABEL] = parts.queue
        servers = [(server.role, _without_account(server.deployment)) for server in parts.servers]
        jobset = gang(parts.run_name, labels, parts.trainer, servers, parts.max_restarts)
        # JobSet's own headless Service names the pods; the servers keep their Services.
        # keeper_rbac holds no keeper's here (server_keeper is False): the evaluation watcher's, if any.
        manifests = [jobset, parts.configmap, *parts.keeper_rbac, parts.network_policy,
                     *(server.service for server in parts.servers)]  # fmt: skip
        return Layout(manifests, self.name(parts.run_name), [server.name for server in parts.servers])

    def name(self, run_name: str) -> str:
        return run_name

    def state(self, owner: dict[str, Any], now: datetime | None = None) -> str:
        conditions = true_conditions(owner)
        if "Completed" in conditions:
            return "Succeeded"
        if "Failed" in conditions:
            return "Failed"
        if (owner.get("spec") or {}).get("suspend"):
            return suspended_state(owner, now)
        statuses = (owner.get("status") or {}).get("replicatedJobsStatus") or []
        trainer: dict[str, Any] = next((s for s in statuses if s.get("name") == TRAINER), {})
        return "Running" if int(trainer.get("ready", 0)) else "Pending"

    def templates(self, owner: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        replicated = (owner.get("spec") or {}).get("replicatedJobs") or []
        return [(job["name"], job["template"]["spec"]["template"]) for job in replicated]

    def gpus(self, owner: dict[str, Any]) -> int:
        total = 0
        for replicated in (owner.get("spec") or {}).get("replicatedJobs") or []:
            job_spec = replicated["template"]["spec"]
            pods = int(job_spec.get("parallelism", 1)) * int(replicated.get("replicas", 1))
            total += pod_gpus(job_spec["template"]["spec"]) * pods
        return total

    def restarts(self, owner: dict[str, Any]) -> int | None:
        return int((owner.get("status") or {}).get("restarts", 0))

    def failure(self, owner: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
        from cw_cli.diagnosis.owners import jobset_failure

        return jobset_failure(owner, frameworks)


def _without_account(deployment: dict[str, Any]) -> dict[str, Any]:
    """A server's Deployment whose pods use the namespace's default account (no keeper to run as),
    unless the run names its own (the template then wrote it)."""
    spec = deployment["spec"]["template"]["spec"]
    if spec.get("serviceAccountName") is None:
        spec.pop("serviceAccountName", None)
    return deployment
