"""`cw status`: one run read in a few rounds of reads that go out together, each pod's state, and
a plain reason for whatever holds the run."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.diagnosis.diagnose import preemption_events
from cw_cli.errors import NotFound
from cw_cli.k8s.explanations import (
    explain_pending,
    failed_create_events,
    may_lack_pods,
    node_capacity,
    pods_refused,
    queue_summary,
    read_preemption_events,
    server_lifetime,
)
from cw_cli.k8s.queries import (
    NAMED_KINDS,
    RUN_KINDS,
    WHOLE_KINDS,
    gather,
    named_object,
    object_calls,
    read_logs,
    recorded_kinds,
    run_selector,
)
from cw_cli.k8s.run_view import (
    STATUS_LOG_LINES,
    PodView,
    RunView,
    collect_runs,
    explain_run,
    live_pods,
    pod_phase,
    pod_ready,
    wanted_logs,
)
from cw_cli.labels import COMPLETION_INDEX_ANNOTATION, COMPONENT_LABEL, JOBSET_NAME_LABEL, TRAINER, object_names
from cw_cli.render.workload import JOBSET, OWNERS


def run_status(kube: Kube, run_name: str) -> RunView:
    """The run's Job, pods and services, with a reason for each pod that is stuck.

    Rounds of reads, each at once. First the run's ConfigMap, NetworkPolicy and trainer Job by
    name and its pods by label; then the other kinds the ConfigMap records (:func:`recorded_kinds`:
    none for a plain run; every kind a run may have where it records none); then only what those
    call for (log tails of failed containers, the nodes for Pending pods, the Kueue queue, a
    JobSet's Jobs and, for a run that needs explaining, the namespace's Preempted events and,
    where a Job may lack its pods, its FailedCreate events). Pods and other kinds are selected by
    the run's labels from the API server's cache. Events have no cache there: every events read
    scans the namespace's events in etcd, so a run that is running with every pod ready, or
    finished, reads none, a queued one reads no FailedCreate events, and a Pending pod is
    explained from its own PodScheduled condition.

    Raises:
        NotFound: No object of that run in the namespace.
    """
    selector = run_selector(run_name)
    names = object_names(run_name)
    fetched = gather({
        **{kind: partial(named_object, kube, kind, names[suffix], run_name) for kind, suffix in NAMED_KINDS.items()},
        # Most runs are one trainer Job: read it by name with the first round, whole.
        "Job": partial(named_object, kube, "Job", names[TRAINER], run_name, whole=True),
        "Pod": lambda: kube.list("Pod", selector),
    })  # fmt: skip
    recorded = recorded_kinds(fetched["ConfigMap"])
    if recorded is None:  # launched by a cw that did not record them, or its ConfigMap is gone: every kind
        rest = tuple(kind for kind in RUN_KINDS if kind not in NAMED_KINDS)
    else:
        rest = tuple(kind for kind in RUN_KINDS if kind in recorded and kind not in fetched)
    fetched.update(gather(object_calls(kube, selector, False, rest, WHOLE_KINDS)))
    objects = [(kind, obj) for kind in RUN_KINDS for obj in fetched.get(kind, [])]
    runs, owners = collect_runs(objects, kube.namespace)
    view = runs.get((kube.namespace, run_name))
    if view is None:
        raise NotFound(
            f"no run {run_name!r} in namespace {kube.namespace!r}", hint="`cw list` shows the runs; -n picks a namespace"
        )
    pods: list[dict[str, Any]] = fetched["Pod"]
    live, _ = live_pods(view, pods)
    pending = [p for p in pods if pod_phase(p) == "Pending"]
    jobs = [obj for kind, obj in objects if kind == "Job"]
    gang = f"JobSet/{run_name}" in view.objects
    more: dict[str, Callable[[], Any]] = {}
    if _troubled(view, pods):
        # Events have no cache in the API server: selected by reason or object, each read still
        # scans every event of the namespace in etcd. Read them only for a run that needs
        # explaining, and FailedCreate only where a Job may lack its pods.
        more["preempted"] = lambda: read_preemption_events(kube)
        if gang or any(may_lack_pods(job) for job in jobs):
            more["failed-create"] = lambda: failed_create_events(kube)
    if view.state != "Succeeded":
        wanted = wanted_logs(live)
        more["logs"] = lambda: read_logs(kube, wanted, STATUS_LOG_LINES)
    if pending:
        more["capacity"] = lambda: node_capacity(kube)
    for job in jobs:
        more[f"queue/{job['metadata']['name']}"] = partial(queue_summary, kube, job)
    if gang:
        more["gang"] = lambda: _gang_objects(kube, run_name)
    later = gather(more)

    refusals: list[dict[str, Any]] | None = later.get("failed-create", [])
    explain_run(view, owners.get((kube.namespace, run_name), []), pods, later.get("logs", {}))
    view.explanations += preemption_events(later.get("preempted", []), run_name, {e.pod for e in view.explanations if e.pod})
    explained = {e.pod for e in view.explanations}
    capacity = later.get("capacity", {})
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        labels = pod["metadata"].get("labels") or {}
        annotations = pod["metadata"].get("annotations") or {}
        phase = (pod.get("status") or {}).get("phase", "Unknown")
        pod_view = PodView(
            name=pod["metadata"]["name"],
            role=labels.get(COMPONENT_LABEL, "?"),
            phase=phase,
            node=(pod.get("spec") or {}).get("nodeName"),
            # A JobSet run's servers are one-pod Indexed Jobs too: only the trainer has ranks.
            rank=annotations.get(COMPLETION_INDEX_ANNOTATION) if labels.get(COMPONENT_LABEL) == TRAINER else None,
            ready=pod_ready(pod),
        )
        if phase == "Pending" and pod_view.name not in explained:
            pod_view.reason = explain_pending(pod, kube, capacity)
            view.problems.append(f"{pod_view.name} is Pending: {pod_view.reason}")
        elif pod_view.name in explained:
            pod_view.reason = next(e.summary for e in view.explanations if e.pod == pod_view.name)
        view.pods.append(pod_view)
    for job in jobs:
        view.queue = later[f"queue/{job['metadata']['name']}"]
        refused = pods_refused(kube, "Job", job, refusals)
        if refused:
            view.problems.append(f"the cluster refuses to create the trainer's pods: {refused}")
    view.problems += [e.line() for e in view.explanations]
    if gang:
        jobset, queue, jobset_jobs = later["gang"]
        _gang_status(run_name, view, jobset, queue, jobset_jobs, refusals, kube)
    has_trainer = any(o.startswith(("Job/", "JobSet/")) for o in view.objects)
    for deployment in (obj for kind, obj in objects if kind == "Deployment"):
        status = deployment.get("status") or {}
        ready = f"{status.get('readyReplicas', 0)}/{deployment['spec'].get('replicas', 1)} ready"
        view.services.append((deployment["metadata"]["name"], f"{ready}; {server_lifetime(deployment, has_trainer)}"))
        refused = pods_refused(kube, "Deployment", deployment)
        if refused:
            view.problems.append(f"the cluster refuses to create the pods of {deployment['metadata']['name']}: {refused}")
    return view


def _troubled(view: RunView, pods: list[dict[str, Any]]) -> bool:
    """Whether a run may need the namespace's events to be explained: not finished well, and not
    simply running with every pod ready (a preempted or refused pod leaves only an event)."""
    if view.state == "Succeeded":
        return False
    return not (view.state in ("Running", "Services only") and pods and all(pod_ready(p) for p in pods))


def _gang_objects(kube: Kube, run_name: str) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
    """A JobSet run's JobSet, its queue summary and its child Jobs (they carry JobSet's labels, not cw's)."""
    jobset = kube.get("JobSet", run_name)
    if jobset is None:
        return None, None, []
    found = gather({
        "queue": lambda: queue_summary(kube, jobset),
        "jobs": lambda: kube.list("Job", f"{JOBSET_NAME_LABEL}={run_name}"),
    })  # fmt: skip
    return jobset, found["queue"], found["jobs"]


def _gang_status(
    run_name: str,
    view: RunView,
    jobset: dict[str, Any] | None,
    queue: str | None,
    jobs: list[dict[str, Any]],
    refusals: list[dict[str, Any]] | None,
    kube: Kube,
) -> None:
    """Queue, refused pods and servers of a JobSet run, from :func:`_gang_objects`."""
    if jobset is None:
        return
    view.queue = queue
    for job in jobs:
        refused = pods_refused(kube, "Job", job, refusals)
        if refused:
            view.problems.append(f"the cluster refuses to create the pods of {job['metadata']['name']}: {refused}")
    statuses = {s["name"]: s for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []}
    finished = OWNERS[JOBSET].state(jobset) in ("Succeeded", "Failed")
    for replicated in jobset["spec"].get("replicatedJobs") or []:
        role = replicated["name"]
        if role == TRAINER:
            continue
        if finished:
            view.services.append((f"{run_name}-{role}", "stopped: the run has ended (JobSet deleted its Job)"))
            continue
        ready = int(statuses.get(role, {}).get("ready", 0))
        view.services.append((f"{run_name}-{role}", f"{ready}/{replicated.get('replicas', 1)} ready; stops when the trainer ends"))
