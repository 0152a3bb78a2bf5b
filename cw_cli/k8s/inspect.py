"""Reading a run back from the cluster: its objects, its state, and why a pod is stuck."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from typing import Any

from msgspec import Struct, field

from cw_cli.config.quantity import parse_quantity
from cw_cli.errors import ConfigError, Forbidden, NotFound
from cw_cli.k8s.connection import Kube
from cw_cli.k8s.diagnose import Explanation, diagnose, log_requests, summary
from cw_cli.labels import (
    COMPLETION_INDEX_ANNOTATION,
    COMPONENT_LABEL,
    GPU_RESOURCE,
    JOBSET_NAME_LABEL,
    KINDS_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    LIFETIME_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    RUN_LABEL,
    SWEEP_LABEL,
    TENSORBOARD_ANNOTATION,
    TRAINER,
    TYPE_LABEL,
    WANDB_URL_ANNOTATION,
    managed_selector,
    object_names,
)

WORKLOAD_JOB_UID = "kueue.x-k8s.io/job-uid"  # Kueue's label on the Workload of a Job
RUN_KINDS = ("JobSet", "Job", "Deployment", "Service", "ConfigMap", "NetworkPolicy", "RoleBinding", "Role", "ServiceAccount")
#: Kinds every run has one of, under a name fixed by the run's (:func:`object_names`): `cw status`
#: reads them by name, which the API server answers at once, where a label-selected list scans
#: every object of the kind in the namespace (one per run: +1.7-1.9 ms each at 1,000 runs).
NAMED_KINDS = {"ConfigMap": "config", "NetworkPolicy": "network"}


_LABEL_VALUE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def run_selector(run_name: str | None = None) -> str:
    """Label selector for cw's objects, optionally of one run only.

    Raises:
        ConfigError: ``run_name`` is not a run name; an empty or crafted one must never widen
            the selector to other runs (``cw delete ""`` would otherwise match every run).
    """
    selector = managed_selector()
    if run_name is None:
        return selector
    if not _LABEL_VALUE.fullmatch(run_name):
        raise ConfigError([f"{run_name!r} is not a run name"], hint="`cw list` shows the runs")
    return f"{selector},{RUN_LABEL}={run_name}"


class PodView(Struct):
    """One pod of a run, as shown by ``cw status``."""

    name: str
    role: str
    phase: str
    node: str | None
    rank: str | None
    ready: bool
    reason: str | None = None


class RunView(Struct):
    """A run as the cluster holds it."""

    name: str
    framework: str = ""
    training_type: str = ""
    state: str = "Unknown"
    gpus: int = 0
    created: datetime | None = None
    objects: list[str] = field(default_factory=list)
    pods: list[PodView] = field(default_factory=list)
    services: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    queue: str | None = None
    restarts: int | None = None
    namespace: str = ""
    #: Why the run failed, or what holds it (an image pull, a crash loop), in a few words.
    failure: str | None = None
    explanations: list[Explanation] = field(default_factory=list)
    #: The sweep the run belongs to.
    sweep: str | None = None
    #: Where to watch the training: ``wandb`` (the W&B run's page), ``tensorboard`` (the event files' folder).
    links: dict[str, str] = field(default_factory=dict)


#: Kinds whose API exists only where an add-on is installed: absent means no such object.
OPTIONAL_KINDS = ("JobSet",)


#: Kinds read whole (state, GPUs, servers); the other kinds of a run are read as metadata only
#: (names and labels: a ConfigMap alone carries cw's pod-side files, tens of KB per run).
WHOLE_KINDS = ("JobSet", "Job", "Deployment")
#: Reads in flight at once. Each worker pays for its own TLS handshake, so a round of ten reads
#: (a run's kinds and pods) is fastest on a few kept-alive connections: on the local cluster the
#: first `cw status` round took 40 ms on 10 connections, 27 on 4 and 35 on 1 (medians of 9).
MAX_PARALLEL_READS = 4


_in_parallel_section = threading.local()


@contextmanager
def sequential_reads() -> Iterator[None]:
    """Within this block, :func:`gather` on this thread reads one by one: for callers that
    already run many such commands at once (a sweep's launches), where fanning out again only
    opens more connections."""
    before = getattr(_in_parallel_section, "active", False)
    _in_parallel_section.active = True
    try:
        yield
    finally:
        _in_parallel_section.active = before


def gather(calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run independent API reads at once on the connection's pool, as ``{key: result}``.

    The reads of one command do not depend on each other, so their latencies overlap instead of
    adding up; the first error raised by any of them is raised here. Inside
    :func:`sequential_reads` they run in order.
    """
    if len(calls) <= 1 or getattr(_in_parallel_section, "active", False):
        return {key: call() for key, call in calls.items()}
    # Plain threads taking keys from a deque (its pops are thread-safe): concurrent.futures would
    # import logging on every command, a tenth of what `cw status` spends outside the network.
    pending = deque(calls)
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}

    def work() -> None:
        while True:
            try:
                key = pending.popleft()
            except IndexError:
                return
            try:
                with sequential_reads():  # a read that gathers again stays on this thread
                    results[key] = calls[key]()
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
                errors[key] = exc

    workers = [threading.Thread(target=work, daemon=True) for _ in range(min(MAX_PARALLEL_READS, len(calls)))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for key in calls:  # the first error in the callers' order, as sequential reads would raise it
        if key in errors:
            raise errors[key]
    return {key: results[key] for key in calls}


def _list_kind(kube: Kube, kind: str, selector: str, all_namespaces: bool, whole: bool) -> list[dict[str, Any]]:
    try:
        if whole:
            return kube.list(kind, selector, all_namespaces=all_namespaces)
        return kube.list_metadata(kind, selector, all_namespaces=all_namespaces)
    except (NotFound, Forbidden):
        if kind in OPTIONAL_KINDS:
            return []  # JobSet is not installed (or not readable): no run uses it here
        raise


def _object_calls(
    kube: Kube, selector: str, all_namespaces: bool, kinds: tuple[str, ...], whole: tuple[str, ...]
) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    return {kind: partial(_list_kind, kube, kind, selector, all_namespaces, kind in whole) for kind in kinds}


def run_objects(
    kube: Kube,
    run_name: str | None = None,
    all_namespaces: bool = False,
    kinds: tuple[str, ...] = RUN_KINDS,
    whole: tuple[str, ...] = WHOLE_KINDS,
) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) of every object cw labelled, of one run or of all, owners first.

    The kinds are listed at once; those not in ``whole`` come as metadata only.
    """
    listed = gather(_object_calls(kube, run_selector(run_name), all_namespaces, kinds, whole))
    return [(kind, obj) for kind in kinds for obj in listed[kind]]


def _created(obj: dict[str, Any]) -> datetime | None:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _pod_gpus(pod_spec: dict[str, Any]) -> int:
    return sum(
        int(c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0) or 0) for c in pod_spec.get("containers", [])
    )


#: cw releases a Job within seconds of creating it; one still suspended after this long (and not
#: held by Kueue) was left by a launcher that died half-way.
STALLED_AFTER_S = 60
STALLED = "Half-made (launcher stopped)"


def job_state(job: dict[str, Any], now: datetime | None = None) -> str:
    """Plain state of a trainer Job: Succeeded, Failed, Starting, Queued (Kueue), Pending, Running,
    or Half-made when the launcher that created it stopped before releasing it."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition["type"] in ("Complete", "SuccessCriteriaMet"):
            return "Succeeded"
        if condition["type"] in ("Failed", "FailureTarget"):
            return "Failed"
    if job.get("spec", {}).get("suspend"):
        queued = "kueue.x-k8s.io/queue-name" in (job["metadata"].get("labels") or {})
        if queued:
            return "Queued (Kueue)"
        created = _created(job)
        age = ((now or datetime.now(timezone.utc)) - created).total_seconds() if created else 0
        return STALLED if age > STALLED_AFTER_S else "Starting"
    if status.get("active"):
        return "Running" if status.get("ready", 0) else "Pending"
    return "Pending"


def jobset_state(jobset: dict[str, Any], now: datetime | None = None) -> str:
    """Plain state of a JobSet run, in the words of :func:`job_state`."""
    status = jobset.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition["type"] == "Completed":
            return "Succeeded"
        if condition["type"] == "Failed":
            return "Failed"
    if jobset.get("spec", {}).get("suspend"):
        return job_state({"metadata": jobset["metadata"], "spec": {"suspend": True}}, now)
    trainer: dict[str, Any] = next((s for s in status.get("replicatedJobsStatus") or [] if s.get("name") == TRAINER), {})
    if int(trainer.get("ready", 0)):
        return "Running"
    return "Pending"


def _jobset_gpus(jobset: dict[str, Any]) -> int:
    total = 0
    for replicated in jobset["spec"].get("replicatedJobs") or []:
        job_spec = replicated["template"]["spec"]
        pods = int(job_spec.get("parallelism", 1)) * int(replicated.get("replicas", 1))
        total += _pod_gpus(job_spec["template"]["spec"]) * pods
    return total


def state_of(kind: str, owner: dict[str, Any]) -> str:
    """State of a run from its owner object (a Job or a JobSet)."""
    return jobset_state(owner) if kind == "JobSet" else job_state(owner)


#: Log lines read per failed container: few for `cw list`, more for `cw status`.
LIST_LOG_LINES = 20
STATUS_LOG_LINES = 60
#: Containers whose log one run's diagnosis reads at most.
MAX_LOGS_PER_RUN = 4
OWNER_KINDS = ("JobSet", "Job")


def sweep_runs(kube: Kube, sweep: str) -> list[str]:
    """Names of the runs of a sweep in the namespace (its label on their ConfigMaps, which every run has).

    Raises:
        ConfigError: ``sweep`` is not a name (a crafted one must never widen the selector).
    """
    if not _LABEL_VALUE.fullmatch(sweep):
        raise ConfigError([f"{sweep!r} is not a sweep name"], hint="`cw list` shows the runs and their sweeps")
    selector = f"{run_selector()},{SWEEP_LABEL}={sweep}"
    return sorted({(o["metadata"].get("labels") or {}).get(RUN_LABEL, "") for o in kube.list("ConfigMap", selector)} - {""})


def _links(owner: dict[str, Any]) -> dict[str, str]:
    annotations = owner["metadata"].get("annotations") or {}
    found = {"wandb": annotations.get(WANDB_URL_ANNOTATION), "tensorboard": annotations.get(TENSORBOARD_ANNOTATION)}
    return {name: value for name, value in found.items() if value}


def _collect_runs(
    objects: list[tuple[str, dict[str, Any]]], namespace: str
) -> tuple[dict[tuple[str, str], RunView], dict[tuple[str, str], list[tuple[str, dict[str, Any]]]]]:
    """The runs' views, and each run's owners (Job or JobSet), keyed by (namespace, run)."""
    runs: dict[tuple[str, str], RunView] = {}
    owners: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for kind, obj in objects:
        labels = obj["metadata"].get("labels") or {}
        name = labels.get(RUN_LABEL)
        if not name:
            continue
        key = (obj["metadata"].get("namespace") or namespace, name)
        view = runs.setdefault(key, RunView(name=name, namespace=key[0]))
        view.framework = labels.get(NAME_LABEL, view.framework)
        view.training_type = labels.get(TYPE_LABEL, view.training_type)
        view.sweep = labels.get(SWEEP_LABEL, view.sweep)
        view.objects.append(f"{kind}/{obj['metadata']['name']}")
        created = _created(obj)
        if created and (view.created is None or created < view.created):
            view.created = created
        if kind in ("Job", "JobSet"):
            view.links.update(_links(obj))
        if kind == "JobSet":
            view.state = jobset_state(obj)
            view.gpus += _jobset_gpus(obj)
            view.restarts = int((obj.get("status") or {}).get("restarts", 0))
            owners.setdefault(key, []).append((kind, obj))
        elif kind == "Job":
            view.state = job_state(obj)
            spec = obj["spec"]
            view.gpus += _pod_gpus(spec["template"]["spec"]) * int(spec.get("parallelism", 1))
            owners.setdefault(key, []).append((kind, obj))
        elif kind == "Deployment":
            view.gpus += _pod_gpus(obj["spec"]["template"]["spec"]) * int(obj["spec"].get("replicas", 1))
    for view in runs.values():
        if not any(o.startswith(("Job/", "JobSet/")) for o in view.objects):
            view.state = "Services only"
    return runs, owners


def read_log_tail(kube: Kube, pod: dict[str, Any], container: str, lines: int, previous: bool = False) -> list[str]:
    """The last ``lines`` lines of a container's log, through the API server; [] when it has none
    (or it cannot be read: an explanation without log lines is still an explanation)."""
    from cw_cli.errors import CwError

    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta.get('namespace') or kube.namespace}/pods/{meta['name']}/log"
    query: dict[str, Any] = {"container": container, "tailLines": lines, "previous": "true" if previous else None}
    try:
        response = kube.raw("GET", path, query=query, what=f"read the log of {meta['name']}")
        return response.read().decode(errors="replace").splitlines()
    except CwError:
        return []


LogKey = tuple[str, str, str]  # (namespace, pod, container)


def _live_pods(view: RunView, pods: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """The pods that explain a run, and the disrupted ones among them.

    A failed run: all of them. A run still going: what holds its live pods, and the disruptions
    its Job or JobSet replaced (they say why it started over), not the attempts it retried.
    """
    if view.state == "Failed":
        return pods, set()
    disrupted = {p["metadata"]["name"] for p in pods if _disrupted(p) and _phase(p) not in ("Pending", "Running")}
    return [p for p in pods if _phase(p) in ("Pending", "Running") or p["metadata"]["name"] in disrupted], disrupted


def _wanted_logs(pods: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, bool]]:
    """(pod, container, previous) whose log tails explain a run, newest pods first, a few at most."""
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)
    return [(pod, container, previous) for pod in newest_first for container, previous in log_requests(pod)][:MAX_LOGS_PER_RUN]


def _read_logs(kube: Kube, wanted: list[tuple[dict[str, Any], str, bool]], lines: int) -> dict[LogKey, list[str]]:
    """The log tails of many containers at once; a previous (crashed) container's first."""

    def tail(pod: dict[str, Any], container: str, previous: bool) -> list[str]:
        found = read_log_tail(kube, pod, container, lines, previous)
        return found if found or not previous else read_log_tail(kube, pod, container, lines)

    read = gather({f"{index}": partial(tail, pod, container, previous) for index, (pod, container, previous) in enumerate(wanted)})
    return {
        (pod["metadata"].get("namespace") or kube.namespace, pod["metadata"]["name"], container): read[f"{index}"]
        for index, (pod, container, _) in enumerate(wanted)
    }


def _explain_run(
    view: RunView, owners: list[tuple[str, dict[str, Any]]], pods: list[dict[str, Any]], logs: dict[LogKey, list[str]]
) -> None:
    """Fill ``view.explanations`` and ``view.failure`` from the run's owners, pods and log tails."""
    if view.state == "Succeeded":
        return
    pods, disrupted = _live_pods(view, pods)
    mine = {(pod_name, container): tail for (namespace, pod_name, container), tail in logs.items() if namespace == view.namespace}
    view.explanations = diagnose(owners, pods, mine)
    view.failure = summary([e for e in view.explanations if e.pod not in disrupted])


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def _disrupted(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("reason") == "Evicted" or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []
    )


#: Above this many unfinished runs, `cw list` reads all of cw's pods instead of naming the runs.
MAX_NAMED_RUNS = 100


def list_runs(
    kube: Kube,
    all_namespaces: bool = False,
    run_name: str | None = None,
    log_lines: int = LIST_LOG_LINES,
    kinds: tuple[str, ...] = RUN_KINDS,
) -> list[RunView]:
    """Every cw run in the namespace (or in all of them), newest first, each with why it failed.

    Reads the runs' objects of ``kinds`` at once (names only for all but Jobs, JobSets and
    Deployments; :data:`WHOLE_KINDS` alone find every run, the other kinds only fill ``objects``),
    pods only of the runs not Succeeded, and logs only of failed runs' failed containers
    (``log_lines`` each, a few containers per run at most).
    """
    runs, owners = _collect_runs(run_objects(kube, run_name, all_namespaces, kinds), kube.namespace)
    unfinished = sorted({key[1] for key, view in runs.items() if view.state != "Succeeded"})
    if len(unfinished) > MAX_NAMED_RUNS:
        # Explaining hundreds of live runs would read every pod (MBs at 1,000 runs): explain the
        # failed ones, which `cw list` is for; `cw status RUN` explains any other.
        unfinished = sorted({key[1] for key, view in runs.items() if view.state == "Failed"})
    if unfinished:
        selector = run_selector(run_name)
        if run_name is None and len(unfinished) <= MAX_NAMED_RUNS:  # only their pods, whatever else is there
            selector += f",{RUN_LABEL} in ({','.join(unfinished)})"
        by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in kube.list("Pod", selector, all_namespaces=all_namespaces):
            labels = pod["metadata"].get("labels") or {}
            by_run.setdefault((pod["metadata"].get("namespace") or kube.namespace, labels.get(RUN_LABEL, "")), []).append(pod)
        explained = set(unfinished)
        wanted = []
        for key, view in runs.items():
            if view.state == "Failed" and key[1] in explained:
                wanted += _wanted_logs(_live_pods(view, by_run.get(key, []))[0])
        logs = _read_logs(kube, wanted, log_lines)
        for key, view in runs.items():
            if key[1] in explained:
                _explain_run(view, owners.get(key, []), by_run.get(key, []), logs)
    return sorted(
        runs.values(), key=lambda v: (v.created or datetime.min.replace(tzinfo=timezone.utc), v.namespace), reverse=True
    )


def run_names(kube: Kube) -> list[str]:
    """Names of the runs in the namespace, from their owners and servers only (for completion)."""
    names = {
        (obj["metadata"].get("labels") or {}).get(RUN_LABEL, "")
        for _, obj in run_objects(kube, kinds=("JobSet", "Job", "Deployment"), whole=())
    }
    return sorted(n for n in names if n)


def _node_capacity(kube: Kube) -> dict[str, list[tuple[str, float]]]:
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
    capacity = capacity if capacity is not None else _node_capacity(kube)
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


def explain_pods(kube: Kube, selector: str) -> list[str]:
    """One explanation per pod that is not running, for error hints."""
    pods = kube.list("Pod", selector)
    capacity = _node_capacity(kube) if pods else {}
    return [
        f"{pod['metadata']['name']}: {explain_pending(pod, kube, capacity)}"
        for pod in pods
        if (pod.get("status") or {}).get("phase") == "Pending"
    ]


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def _preemption_events(kube: Kube) -> list[dict[str, Any]]:
    """The namespace's Preempted events: a preempted pod is gone, its event says what happened."""
    try:
        return kube.list("Event", field_selector="reason=Preempted")
    except (Forbidden, NotFound):
        return []


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
        **{kind: partial(_named_object, kube, kind, names[suffix], run_name) for kind, suffix in NAMED_KINDS.items()},
        # Most runs are one trainer Job: read it by name with the first round, whole.
        "Job": partial(_named_object, kube, "Job", names["trainer"], run_name, whole=True),
        "Pod": lambda: kube.list("Pod", selector),
    })  # fmt: skip
    recorded = recorded_kinds(fetched["ConfigMap"])
    if recorded is None:  # launched by a cw that did not record them, or its ConfigMap is gone: every kind
        rest = tuple(kind for kind in RUN_KINDS if kind not in NAMED_KINDS)
    else:
        rest = tuple(kind for kind in RUN_KINDS if kind in recorded and kind not in fetched)
    fetched.update(gather(_object_calls(kube, selector, False, rest, WHOLE_KINDS)))
    objects = [(kind, obj) for kind in RUN_KINDS for obj in fetched.get(kind, [])]
    runs, owners = _collect_runs(objects, kube.namespace)
    view = runs.get((kube.namespace, run_name))
    if view is None:
        raise NotFound(
            f"no run {run_name!r} in namespace {kube.namespace!r}", hint="`cw list` shows the runs; -n picks a namespace"
        )
    from cw_cli.k8s.diagnose import preemption_events

    pods: list[dict[str, Any]] = fetched["Pod"]
    live, _ = _live_pods(view, pods)
    pending = [p for p in pods if _phase(p) == "Pending"]
    jobs = [obj for kind, obj in objects if kind == "Job"]
    gang = f"JobSet/{run_name}" in view.objects
    more: dict[str, Callable[[], Any]] = {}
    if _troubled(view, pods):
        # Events have no cache in the API server: selected by reason or object, each read still
        # scans every event of the namespace in etcd. Read them only for a run that needs
        # explaining, and FailedCreate only where a Job may lack its pods.
        more["preempted"] = lambda: _preemption_events(kube)
        if gang or any(may_lack_pods(job) for job in jobs):
            more["failed-create"] = lambda: failed_create_events(kube)
    if view.state != "Succeeded":
        wanted = _wanted_logs(live)
        more["logs"] = lambda: _read_logs(kube, wanted, STATUS_LOG_LINES)
    if pending:
        more["capacity"] = lambda: _node_capacity(kube)
    for job in jobs:
        more[f"queue/{job['metadata']['name']}"] = partial(queue_summary, kube, job)
    if gang:
        more["gang"] = lambda: _gang_objects(kube, run_name)
    later = gather(more)

    refusals: list[dict[str, Any]] | None = later.get("failed-create", [])
    _explain_run(view, owners.get((kube.namespace, run_name), []), pods, later.get("logs", {}))
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
            ready=_pod_ready(pod),
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


def may_lack_pods(job: dict[str, Any]) -> bool:
    """Whether a Job may be refused its pods: resumed, unfinished and without an active pod.

    Only such a Job is worth asking :func:`pods_refused` about, which reads events (a scan of
    the namespace's events in etcd): a queued (suspended) Job has no pods by design.
    """
    status = job.get("status") or {}
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in status.get("conditions") or [])
    return not (status.get("active") or (job.get("spec") or {}).get("suspend") or finished)


def _named_object(kube: Kube, kind: str, name: str, run_name: str, whole: bool = False) -> list[dict[str, Any]]:
    """The run's object of ``kind`` read by name (metadata only unless ``whole``), as a list like a
    selected list's: empty when it is missing or does not carry the labels :func:`run_selector` selects."""
    obj = kube.get(kind, name) if whole else kube.get_metadata(kind, name)
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    if obj is None or labels.get(RUN_LABEL) != run_name or labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return []
    return [obj]


def recorded_kinds(config_map: list[dict[str, Any]]) -> frozenset[str] | None:
    """The kinds of a run's objects as its ConfigMap records them (:data:`KINDS_ANNOTATION`), or
    None where there is no such record to trust: no ConfigMap, or one from an older cw."""
    if not config_map:
        return None
    value = (config_map[0]["metadata"].get("annotations") or {}).get(KINDS_ANNOTATION)
    if not isinstance(value, str) or not value:
        return None
    return frozenset(value.split(","))


def _troubled(view: RunView, pods: list[dict[str, Any]]) -> bool:
    """Whether a run may need the namespace's events to be explained: not finished well, and not
    simply running with every pod ready (a preempted or refused pod leaves only an event)."""
    if view.state == "Succeeded":
        return False
    return not (view.state in ("Running", "Services only") and pods and all(_pod_ready(p) for p in pods))


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
    finished = jobset_state(jobset) in ("Succeeded", "Failed")
    for replicated in jobset["spec"].get("replicatedJobs") or []:
        role = replicated["name"]
        if role == TRAINER:
            continue
        if finished:
            view.services.append((f"{run_name}-{role}", "stopped: the run has ended (JobSet deleted its Job)"))
            continue
        ready = int(statuses.get(role, {}).get("ready", 0))
        view.services.append((f"{run_name}-{role}", f"{ready}/{replicated.get('replicas', 1)} ready; stops when the trainer ends"))


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
    created = _created(deployment)
    if lifetime and created:
        from datetime import timedelta

        stops = created + timedelta(seconds=int(lifetime))
        return f"stops at {stops:%Y-%m-%d %H:%M} UTC (--ttl {int(lifetime)} s)"
    return "stops when the trainer ends" if has_trainer else "no lifetime: `cw delete` it"


def find_pod(kube: Kube, run_name: str, role: str, rank: int | None) -> dict[str, Any]:
    """The newest pod of a run with a role (and completion index, for multi-node trainers).

    Raises:
        NotFound: No such pod (yet).
    """
    selector = f"{run_selector(run_name)},app.kubernetes.io/component={role}"
    pods = kube.list("Pod", selector)
    def index(pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)

    if rank is not None:
        pods = [p for p in pods if index(p) == str(rank)]
    elif any(index(p) is not None for p in pods):
        pods = [p for p in pods if index(p) == "0"] or pods  # a multi-node trainer: rank 0 by default
    if not pods:
        which = f"{role} rank {rank}" if rank is not None else role
        raise NotFound(f"run {run_name!r} has no {which} pod yet", hint=f"`cw status {run_name}` says why")
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
