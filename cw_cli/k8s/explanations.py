"""Why a run's pods are not running, in plain words: a Pending pod's reason (requests against the
nodes' capacity, the scheduler's message), pods the cluster refuses to create, Preempted events,
where a queued run stands in Kueue, and when a server stops by itself.

Events are read only here, and only when asked: the API server keeps no cache of them, so every
events read scans the namespace's events in etcd.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.errors import Forbidden, NotFound
from cw_cli.k8s.queries import creation_time
from cw_cli.labels import GPU_RESOURCE, KUEUE_QUEUE_LABEL, LIFETIME_ANNOTATION

WORKLOAD_JOB_UID = "kueue.x-k8s.io/job-uid"  # Kueue's label on the Workload of a Job


def node_capacity(kube: Kube) -> dict[str, list[tuple[str, float]]]:
    """Each resource's allocatable amount per node, as ``{resource: [(node, amount), ...]}``; empty
    where nodes are not readable (listing them is optional)."""
    # Imported where a quantity is read: its regex compiles at import, which `cw status` of a run
    # with no Pending pod and no queue would pay for nothing.
    from cw_cli.config.quantity import parse_quantity

    capacity: dict[str, list[tuple[str, float]]] = {}
    try:
        nodes = kube.list("Node")
    except Forbidden:  # listing nodes is optional (a ClusterRole); explanations fall back to events
        return capacity
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, amount in allocatable.items():
            try:
                capacity.setdefault(resource, []).append((node["metadata"]["name"], parse_quantity(amount)))
            except ValueError:
                continue
    return capacity


def _format_amount(resource: str, value: float) -> str:
    if resource == "memory":
        return f"{value / 2**30:g}Gi"
    return f"{value:g}"


def explain_pending(
    pod: dict[str, Any],
    kube: Kube,
    capacity: dict[str, list[tuple[str, float]]] | None = None,
) -> str:
    """Say in plain words why a pod is not running yet.

    Compares the pod's requests with the largest node first ("needs 16 nvidia.com/gpu, the
    largest node has 8"), then gives the scheduler's own message: the one it writes on the pod's
    ``PodScheduled`` condition, else that of its FailedScheduling events. The condition comes
    first because events are read from etcd, not from the API server's cache: a scan of every
    event of the namespace.
    """
    from cw_cli.config.quantity import parse_quantity

    capacity = capacity if capacity is not None else node_capacity(kube)
    spec = pod.get("spec") or {}
    for container in spec.get("containers", []):
        for resource, amount in (container.get("resources", {}).get("requests") or {}).items():
            try:
                wanted = parse_quantity(amount)
            except ValueError:
                continue
            nodes = capacity.get(resource, [])
            largest = max((value for _, value in nodes), default=0.0)
            if capacity and wanted > largest:
                if not nodes:
                    return f"needs {amount} {resource}, and no node has any"
                return f"needs {amount} {resource}, the largest node has {_format_amount(resource, largest)}"
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or ""
            if not message:  # a scheduler that only records an event
                events = _scheduling_events(kube, pod)
                message = (events[-1].get("message") if events else None) or ""
            return f"cannot be scheduled: {message}".strip() if message else "waiting for the scheduler"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return f"container {status['name']}: {waiting.get('reason')} {waiting.get('message', '')}".strip()
    return "starting"


def _scheduling_events(kube: Kube, pod: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return kube.list("Event", field_selector=f"involvedObject.name={pod['metadata']['name']},reason=FailedScheduling")
    except Forbidden:
        return []


def explain_pods(kube: Kube, selector: str) -> list[str]:
    """One explanation per pod that is not running, for error hints."""
    pods = kube.list("Pod", selector)
    capacity = node_capacity(kube) if pods else {}
    return [
        f"{pod['metadata']['name']}: {explain_pending(pod, kube, capacity)}"
        for pod in pods
        if (pod.get("status") or {}).get("phase") == "Pending"
    ]


def may_lack_pods(job: dict[str, Any]) -> bool:
    """Whether a Job may be refused its pods: resumed, unfinished and without an active pod.

    Only such a Job is worth asking :func:`pods_refused` about, which reads events (a scan of
    the namespace's events in etcd): a queued (suspended) Job has no pods by design.
    """
    status = job.get("status") or {}
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in status.get("conditions") or [])
    return not (status.get("active") or (job.get("spec") or {}).get("suspend") or finished)


def failed_create_events(kube: Kube) -> list[dict[str, Any]] | None:
    """The namespace's FailedCreate events (None when events are not readable)."""
    try:
        return kube.list("Event", field_selector="reason=FailedCreate")
    except (Forbidden, NotFound):
        return None


def pods_refused(kube: Kube, kind: str, obj: dict[str, Any], events: list[dict[str, Any]] | None = None) -> str | None:
    """Why the cluster refuses to create an object's pods (Pod Security, quota, a webhook), or None.

    A Deployment carries it as its ``ReplicaFailure`` condition; a Job only as a ``FailedCreate``
    event (``events``: the namespace's, from :func:`failed_create_events`; read here when not
    given), read only for a Job that may lack its pods (:func:`may_lack_pods`). Either way no pod
    will ever appear, so waiting longer is pointless.
    """
    if kind == "Deployment":
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
                return str(condition.get("message") or condition.get("reason") or "ReplicaFailure")
        return None
    if not may_lack_pods(obj):  # running, finished or queued: no events read (each read scans the namespace's)
        return None
    uid = obj["metadata"].get("uid")
    if events is None:
        try:
            events = kube.list("Event", field_selector=f"involvedObject.uid={uid},reason=FailedCreate")
        except (Forbidden, NotFound):
            return None
    events = [e for e in events if (e.get("involvedObject") or {}).get("uid") == uid]
    newest = max(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "", default=None)
    return str(newest.get("message") or "FailedCreate") if newest else None


def read_preemption_events(kube: Kube) -> list[dict[str, Any]]:
    """The namespace's Preempted events: a preempted pod is gone, its event says what happened."""
    try:
        return kube.list("Event", field_selector="reason=Preempted")
    except (Forbidden, NotFound):
        return []


def _admitted(workload: dict[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("QuotaReserved", "Admitted") and c["status"] == "True" for c in conditions)


def _finished(workload: dict[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Finished" and c["status"] == "True" for c in conditions)


def queue_summary(kube: Kube, job: dict[str, Any]) -> str | None:
    """Where a Job or JobSet with ``queue:`` stands in Kueue: admitted, or its place in line and the quota in use.

    The position counts the LocalQueue's pending Workloads ahead of this one (higher priority,
    then older), the order Kueue's FIFO strategies admit them in.
    """
    queue = (job["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    if not queue:
        return None
    try:  # Kueue labels a Job's Workload with the Job's UID: read that one first
        found = kube.list("Workload", f"{WORKLOAD_JOB_UID}={job['metadata'].get('uid')}")
    except NotFound:
        return f"queue {queue}: Kueue is not installed (no Workload API on this cluster)"
    except Forbidden:
        return f"queue {queue}: Kueue's Workloads are not readable with your credentials"
    mine = found[0] if found else None
    if mine is None:
        return f"queue {queue}: no Workload yet (Kueue has not seen the Job)"
    local = kube.get("LocalQueue", queue) or {}
    cluster_queue = (local.get("spec") or {}).get("clusterQueue", "?")
    head = f"queue {queue} -> ClusterQueue {cluster_queue}"
    if _finished(mine):
        return f"{head}: finished, quota released"
    if _admitted(mine):
        return f"{head}: admitted"

    def order(w: dict[str, Any]) -> tuple[int, str]:
        return (-int((w.get("spec") or {}).get("priority") or 0), w["metadata"]["creationTimestamp"])

    workloads = kube.list("Workload")  # queued: its place in line needs the others
    pending = sorted(
        (w for w in workloads if (w.get("spec") or {}).get("queueName") == queue and not _admitted(w) and not _finished(w)),
        key=order,
    )
    position = next(i for i, w in enumerate(pending, 1) if w["metadata"]["uid"] == mine["metadata"]["uid"])
    return f"{head}: Queued, position {position} of {len(pending)}; {_gpu_usage(kube, cluster_queue)}"


def _gpu_usage(kube: Kube, name: str) -> str:
    from cw_cli.config.quantity import parse_quantity

    try:
        cq = kube.get("ClusterQueue", name)
    except Forbidden:
        return "ClusterQueue usage not readable with your credentials"
    if cq is None:
        return f"ClusterQueue {name} not found"
    def gpus(resources: list[dict[str, Any]], key: str) -> float:
        # parse_quantity refuses zero (a request of 0 is a mistake); usage of 0 is normal here.
        return sum(parse_quantity(str(r[key])) for r in resources if r["name"] == GPU_RESOURCE and str(r.get(key, "0")) != "0")

    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    quota = sum(gpus(f.get("resources", []), "nominalQuota") for g in groups for f in g.get("flavors") or [])
    # Reserved quota is what keeps a run waiting (usage follows once the holders are admitted).
    held = sum(gpus(f.get("resources", []), "total") for f in (cq.get("status") or {}).get("flavorsReservation") or [])
    return f"GPUs reserved {held:g} of {quota:g}"


def server_lifetime(deployment: dict[str, Any], has_trainer: bool) -> str:
    """When a server stops by itself: at the end of its ``--ttl``, or when its trainer ends."""
    lifetime = (deployment["metadata"].get("annotations") or {}).get(LIFETIME_ANNOTATION)
    born = creation_time(deployment)
    if lifetime and born:

        stops = born + timedelta(seconds=int(lifetime))
        return f"stops at {stops:%Y-%m-%d %H:%M} UTC (--ttl {int(lifetime)} s)"
    return "stops when the trainer ends" if has_trainer else "no lifetime: `cw delete` it"
