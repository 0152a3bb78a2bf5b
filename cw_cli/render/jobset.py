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
"""

from __future__ import annotations

import copy
from typing import Any

from cw_cli.labels import TRAINER

API_VERSION = "jobset.x-k8s.io/v1alpha2"
GROUP_VERSION_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
#: The Job's own failure reason when a pod failure policy rule fails it: here only disruptions do.
DISRUPTION_REASON = "PodFailurePolicy"
#: The DisruptionTarget rule every replicated Job carries: a disrupted pod fails its Job at once
#: (with reason PodFailurePolicy), and the JobSet restarts the gang without counting it.
_DISRUPTION_FAILS_JOB = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


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
