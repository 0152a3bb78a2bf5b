"""`cw status`: one run read in a few rounds of reads that go out together, each pod's state, and
a plain reason for whatever holds the run."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.diagnosis.pods import preemption_events
from cw_cli.diagnosis.progress import training_progress
from cw_cli.errors import NotFound
from cw_cli.k8s.explanations import (
    explain_pending,
    failed_create_events,
    node_capacity,
    pods_refused,
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
    read_log_tail,
    read_logs,
    recorded_kinds,
    run_selector,
)
from cw_cli.k8s.run_view import (
    PROGRESS_LOG_LINES,
    STATUS_LOG_LINES,
    PodView,
    RunView,
    collect_runs,
    count_restarts,
    explain_run,
    live_pods,
    pod_phase,
    pod_ready,
    progress_pod,
    wanted_logs,
)
from cw_cli.k8s.workloads import on_cluster
from cw_cli.labels import COMPLETION_INDEX_ANNOTATION, COMPONENT_LABEL, TRAINER, object_names
from cw_cli.render.workload import OWNERS

__all__ = ["PROGRESS_LOG_LINES", "run_status"]  # the tail read for the progress, with the function that reads it

#: The run's owners, by kind (only the kinds it has).
Owners = dict[str, list[dict[str, Any]]]


def run_status(kube: Kube, run_name: str) -> RunView:
    """The run's owner, pods and services, with a reason for each pod that is stuck.

    Rounds of reads, each at once. First the run's ConfigMap, NetworkPolicy and trainer Job by
    name and its pods by label; then the other kinds the ConfigMap records (:func:`recorded_kinds`:
    none for a plain run; every kind a run may have where it records none); then only what those
    call for (log tails of failed containers, the nodes for Pending pods, what the owner's kind
    reads: the Kueue queue, a JobSet's Jobs; and, for a run that needs explaining, the namespace's
    Preempted events and, where an owner may lack its pods, its FailedCreate events). Pods and
    other kinds are selected by the run's labels from the API server's cache. Events have no
    cache there: every events read scans the namespace's events in etcd, so a run that is running
    with every pod ready, or finished, reads none, a queued one reads no FailedCreate events, and
    a Pending pod is explained from its own PodScheduled condition.

    Raises:
        NotFound: No object of that run in the namespace.
    """
    objects, pods = _read_run(kube, run_name)
    runs, owner_list = collect_runs(objects, kube.namespace)
    view = runs.get((kube.namespace, run_name))
    if view is None:
        raise NotFound(
            f"no run {run_name!r} in namespace {kube.namespace!r}", hint="`cw list` shows the runs; -n picks a namespace"
        )
    owners: Owners = {}
    for kind, obj in objects:
        if kind in OWNERS:
            owners.setdefault(kind, []).append(obj)
    later = gather(_second_reads(kube, run_name, view, pods, owners))
    refusals: list[dict[str, Any]] | None = later.get("failed-create", [])
    explain_run(view, owner_list.get((kube.namespace, run_name), []), pods, later.get("logs", {}))
    count_restarts(view, owner_list.get((kube.namespace, run_name), []), pods)
    view.explanations += preemption_events(later.get("preempted", []), run_name, {e.pod for e in view.explanations if e.pod})
    _add_pods(kube, view, pods, later.get("capacity", {}))
    view.progress = training_progress(later.get("progress", []))
    for kind, found in owners.items():
        on_cluster(kind).add_status(kube, view, found, later, refusals)
    view.problems += [e.line() for e in view.explanations]  # after the owners' refused pods: why none exist
    _add_deployments(kube, view, [obj for kind, obj in objects if kind == "Deployment"], has_owner=bool(owners))
    return view


def _read_run(kube: Kube, run_name: str) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """(kind, object) of every object of the run, and its pods: the first two rounds of reads."""
    selector = run_selector(run_name)
    names = object_names(run_name)
    common = next(iter(OWNERS.values()))  # most runs are one trainer Job: read it by name with the first round, whole
    fetched = gather({
        **{kind: partial(named_object, kube, kind, names[suffix], run_name) for kind, suffix in NAMED_KINDS.items()},
        common.kind: partial(named_object, kube, common.kind, common.name(run_name), run_name, whole=True),
        "Pod": lambda: kube.list("Pod", selector),
    })  # fmt: skip
    recorded = recorded_kinds(fetched["ConfigMap"])
    if recorded is None:  # launched by a cw that did not record them, or its ConfigMap is gone: every kind
        rest = tuple(kind for kind in RUN_KINDS if kind not in NAMED_KINDS)
    else:
        rest = tuple(kind for kind in RUN_KINDS if kind in recorded and kind not in fetched)
    fetched.update(gather(object_calls(kube, selector, False, rest, WHOLE_KINDS)))
    return [(kind, obj) for kind in RUN_KINDS for obj in fetched.get(kind, [])], fetched["Pod"]


def _second_reads(
    kube: Kube, run_name: str, view: RunView, pods: list[dict[str, Any]], owners: Owners
) -> dict[str, Callable[[], Any]]:
    """What the first rounds call for: events, log tails, node capacity, and the owners' kinds' reads."""
    more: dict[str, Callable[[], Any]] = {}
    if _troubled(view, pods):
        # Events have no cache in the API server: selected by reason or object, each read still
        # scans every event of the namespace in etcd. Read them only for a run that needs
        # explaining, and FailedCreate only where an owner may lack its pods.
        more["preempted"] = lambda: read_preemption_events(kube)
        if any(on_cluster(kind).may_lack_pods(found) for kind, found in owners.items()):
            more["failed-create"] = lambda: failed_create_events(kube)
    if view.state != "Succeeded":
        wanted = wanted_logs(live_pods(view, pods)[0])
        more["logs"] = lambda: read_logs(kube, wanted, STATUS_LOG_LINES)
    if any(pod_phase(p) == "Pending" for p in pods):
        more["capacity"] = lambda: node_capacity(kube)
    trainer = progress_pod(pods)
    if trainer is not None:
        more["progress"] = partial(read_log_tail, kube, trainer, TRAINER, PROGRESS_LOG_LINES)
    for kind, found in owners.items():
        more.update(on_cluster(kind).status_reads(kube, run_name, found))
    return more


def _add_pods(kube: Kube, view: RunView, pods: list[dict[str, Any]], capacity: dict[str, Any]) -> None:
    """Each pod's line, with why it is Pending or what explains it."""
    explained = {e.pod for e in view.explanations}
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


def _add_deployments(kube: Kube, view: RunView, deployments: list[dict[str, Any]], has_owner: bool) -> None:
    """Each server Deployment's readiness and lifetime, and whether the cluster refuses its pods."""
    for deployment in deployments:
        status = deployment.get("status") or {}
        ready = f"{status.get('readyReplicas', 0)}/{deployment['spec'].get('replicas', 1)} ready"
        view.services.append((deployment["metadata"]["name"], f"{ready}; {server_lifetime(deployment, has_owner)}"))
        refused = pods_refused(kube, "Deployment", deployment)
        if refused:
            view.problems.append(f"the cluster refuses to create the pods of {deployment['metadata']['name']}: {refused}")


def _troubled(view: RunView, pods: list[dict[str, Any]]) -> bool:
    """Whether a run may need the namespace's events to be explained: not finished well, and not
    simply running with every pod ready (a preempted or refused pod leaves only an event)."""
    if view.state == "Succeeded":
        return False
    return not (view.state in ("Running", "Services only") and pods and all(pod_ready(p) for p in pods))
