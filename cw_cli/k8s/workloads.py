"""The workload kinds, cluster half: how each kind's objects are created, released, waited for
and read back for `cw status`.

The rendering half, the kinds' names and the reading of an owner's state are
:mod:`cw_cli.render.workloads` (contract in :mod:`cw_cli.render.workloads.base`); this module
holds what needs the cluster, keyed by the same kind (:func:`on_cluster`). Each kind answers:

* :meth:`~OnCluster.create_body`: the body its owner is created with (a Job or JobSet
  suspended, so no pod starts before the objects it mounts exist);
* :meth:`~OnCluster.release`: start the owner once every object is in place (not under Kueue,
  which admits it);
* :meth:`~OnCluster.wait_for_servers`: block until the servers are Ready, or refuse at once when
  the cluster refuses their pods;
* :meth:`~OnCluster.trainer_refused`: why the cluster refuses the trainer's pods (``--wait``);
* :meth:`~OnCluster.status_reads` and :meth:`~OnCluster.add_status`: what `cw status` reads
  beyond the run's labelled objects, and what it makes of it (queue, refused pods, servers).

No other module branches on the kind (tests/unit/test_only_the_strategy_branches_on_the_workload_kind.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from cw_cli.client.connection import Kube
from cw_cli.k8s.explanations import may_lack_pods, pods_refused, queue_summary
from cw_cli.k8s.queries import gather
from cw_cli.k8s.server_waits import Progress, wait_for_deployments, wait_until_ready
from cw_cli.labels import JOBSET_NAME_LABEL, TRAINER
from cw_cli.render.workload import JOB, JOBSET, SERVICES_ONLY, owner_kind
from cw_cli.render.workloads.jobset import child_job_name

if TYPE_CHECKING:
    from cw_cli.k8s.run_view import RunView
    from cw_cli.render.plan import Plan

#: Extra reads of `cw status`, by key (run together with the others).
Reads = dict[str, Callable[[], Any]]


class OnCluster:
    """One workload kind on the cluster; the defaults are a kind with no owner to release (servers only)."""

    kind = SERVICES_ONLY

    def create_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body the owner is created with."""
        return body

    def release(self, kube: Kube, plan: Plan, progress: Progress) -> bool:
        """Start the created owner where cw (not Kueue) releases it; whether it was released."""
        return False

    def wait_for_servers(self, kube: Kube, plan: Plan, timeout_s: float, progress: Progress) -> None:
        """Block until the run's servers are Ready (Deployments here; nothing where none)."""
        if plan.service_deployments:
            progress(f"waiting for {len(plan.service_deployments)} service(s) to be Ready")
            wait_for_deployments(kube, plan.run_name, plan.service_deployments, timeout_s, progress)

    def trainer_refused(self, kube: Kube, owner: dict[str, Any]) -> str | None:
        """Why the cluster refuses the trainer's pods (None: it does not, or cannot tell)."""
        return None

    def status_reads(self, kube: Kube, run_name: str, owners: list[dict[str, Any]]) -> Reads:
        """What `cw status` reads for this kind beyond the run's labelled objects."""
        return {}

    def may_lack_pods(self, owners: list[dict[str, Any]]) -> bool:
        """Whether the owners may have been refused their pods (worth reading FailedCreate events)."""
        return False

    def add_status(
        self, kube: Kube, view: RunView, owners: list[dict[str, Any]], found: dict[str, Any], refusals: list[dict[str, Any]] | None
    ) -> None:
        """Fill the view's queue, problems and servers from the owners and :meth:`status_reads`."""


class _Owned(OnCluster):
    """A kind whose owner (trainer Job or JobSet) is created suspended and released by cw."""

    def create_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "spec": dict(body["spec"], suspend=True)}

    def release(self, kube: Kube, plan: Plan, progress: Progress) -> bool:
        if plan.owner_name is None or not plan.managed_suspend:
            return False
        kube.merge_patch(self.kind, plan.owner_name, {"spec": {"suspend": False}})
        waits = " (its trainer waits in the cluster until the servers answer)" if plan.servers else ""
        progress(f"started {self.kind} {plan.owner_name}{waits}")
        return True


class JobOnCluster(_Owned):
    """A trainer Job: its servers are Deployments; Kueue (if any) admits the Job alone."""

    kind = JOB

    def wait_for_servers(self, kube: Kube, plan: Plan, timeout_s: float, progress: Progress) -> None:
        if plan.managed_suspend:  # under Kueue the run may wait in its queue for hours: cw does not wait with it
            super().wait_for_servers(kube, plan, timeout_s, progress)

    def trainer_refused(self, kube: Kube, owner: dict[str, Any]) -> str | None:
        return pods_refused(kube, JOB, owner)

    def status_reads(self, kube: Kube, run_name: str, owners: list[dict[str, Any]]) -> Reads:
        return {f"queue/{job['metadata']['name']}": partial(queue_summary, kube, job) for job in owners}

    def may_lack_pods(self, owners: list[dict[str, Any]]) -> bool:
        return any(may_lack_pods(job) for job in owners)

    def add_status(
        self, kube: Kube, view: RunView, owners: list[dict[str, Any]], found: dict[str, Any], refusals: list[dict[str, Any]] | None
    ) -> None:
        for job in owners:
            view.queue = found[f"queue/{job['metadata']['name']}"]
            refused = pods_refused(kube, JOB, job, refusals)
            if refused:
                view.problems.append(f"the cluster refuses to create the trainer's pods: {refused}")


class JobSetOnCluster(_Owned):
    """One JobSet: trainer and servers are its replicated Jobs (``<run>-<role>-0``), stopped with it."""

    kind = JOBSET

    def wait_for_servers(self, kube: Kube, plan: Plan, timeout_s: float, progress: Progress) -> None:
        if not (plan.servers and plan.managed_suspend and plan.owner_name):
            return
        progress(f"waiting for {len(plan.servers)} server(s) of JobSet {plan.owner_name} to be Ready")
        wait_for_gang_servers(kube, plan.owner_name, plan.servers, timeout_s, progress)

    def trainer_refused(self, kube: Kube, owner: dict[str, Any]) -> str | None:
        job = kube.get(JOB, child_job_name(owner["metadata"]["name"], TRAINER))
        return pods_refused(kube, JOB, job) if job is not None else None

    def status_reads(self, kube: Kube, run_name: str, owners: list[dict[str, Any]]) -> Reads:
        return {"gang": partial(_gang_objects, kube, run_name)}

    def may_lack_pods(self, owners: list[dict[str, Any]]) -> bool:
        return bool(owners)  # its child Jobs carry JobSet's labels: not read before the events

    def add_status(
        self, kube: Kube, view: RunView, owners: list[dict[str, Any]], found: dict[str, Any], refusals: list[dict[str, Any]] | None
    ) -> None:
        jobset, queue, jobs = found["gang"]
        if jobset is None:
            return
        view.queue = queue
        for job in jobs:
            refused = pods_refused(kube, JOB, job, refusals)
            if refused:
                view.problems.append(f"the cluster refuses to create the pods of {job['metadata']['name']}: {refused}")
        statuses = {s["name"]: s for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []}
        finished = owner_kind(JOBSET).state(jobset) in ("Succeeded", "Failed")
        for replicated in jobset["spec"].get("replicatedJobs") or []:
            role, name = replicated["name"], f"{view.name}-{replicated['name']}"
            if role == TRAINER:
                continue
            if finished:
                view.services.append((name, "stopped: the run has ended (JobSet deleted its Job)"))
                continue
            ready = int(statuses.get(role, {}).get("ready", 0))
            view.services.append((name, f"{ready}/{replicated.get('replicas', 1)} ready; stops when the trainer ends"))


def _gang_objects(kube: Kube, run_name: str) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
    """A JobSet run's JobSet, its queue summary and its child Jobs (they carry JobSet's labels, not cw's)."""
    jobset = kube.get(JOBSET, run_name)
    if jobset is None:
        return None, None, []
    found = gather({
        "queue": lambda: queue_summary(kube, jobset),
        "jobs": lambda: kube.list(JOB, f"{JOBSET_NAME_LABEL}={run_name}"),
    })  # fmt: skip
    return jobset, found["queue"], found["jobs"]


def wait_for_gang_servers(
    kube: Kube, jobset_name: str, names: list[str], timeout_s: float, progress: Progress, poll_s: float = 2.0
) -> None:
    """Block until the server Jobs of a JobSet run (``<run>-<role>``) have their pods Ready.

    Raises:
        Rejected: The cluster refuses to create a server's pods.
        WaitTimeout: Not all Ready within the timeout.
    """

    def read(wanted: list[str]) -> dict[str, tuple[bool, str | None]]:
        jobset = kube.get(JOBSET, jobset_name) or {}
        statuses = {s["name"]: s for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []}
        states: dict[str, tuple[bool, str | None]] = {}
        for name in wanted:
            role = name.removeprefix(f"{jobset_name}-")
            if int(statuses.get(role, {}).get("ready", 0)) >= 1:
                states[name] = (True, None)
                continue
            job = kube.get(JOB, child_job_name(jobset_name, role))
            states[name] = (False, pods_refused(kube, JOB, job) if job else None)
        return states

    wait_until_ready(kube, jobset_name, names, read, timeout_s, progress, poll_s)


#: Every kind's cluster half, by the kind's name (as :data:`cw_cli.render.workload.KINDS`).
KINDS: dict[str, OnCluster] = {JOB: JobOnCluster(), JOBSET: JobSetOnCluster(), SERVICES_ONLY: OnCluster()}


def on_cluster(kind: str) -> OnCluster:
    """The cluster half of a workload kind (``Job``, ``JobSet``, ``ConfigMap`` for servers only)."""
    return KINDS[kind]
