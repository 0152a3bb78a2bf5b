"""A run as the cluster holds it: its state and GPUs (read by its owner's strategy,
:mod:`cw_cli.render.workload`), objects, pods and why it failed; and `cw list`, every run of a
namespace read at once."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import partial
from typing import Any

from msgspec import Struct, field

from cw_cli.client.connection import Kube
from cw_cli.diagnosis.diagnose import Explanation, diagnose, log_requests, summary
from cw_cli.diagnosis.pods import restart_exit
from cw_cli.diagnosis.progress import Progress, training_progress
from cw_cli.diagnosis.restarts import run_restarts
from cw_cli.k8s.queries import RUN_KINDS, LogKey, creation_time, gather, read_log_tail, read_logs, run_objects, run_selector
from cw_cli.labels import (
    COMPLETION_INDEX_ANNOTATION,
    COMPONENT_LABEL,
    NAME_LABEL,
    PIPELINE_LABEL,
    RUN_LABEL,
    STAGE_LABEL,
    SWEEP_LABEL,
    TENSORBOARD_ANNOTATION,
    TRAINER,
    TYPE_LABEL,
    WANDB_URL_ANNOTATION,
)
from cw_cli.render.workload import OWNERS
from cw_cli.render.workloads.base import STALLED, pod_gpus

#: Log lines read per failed container: few for `cw list`, more for `cw status`.
LIST_LOG_LINES = 20
STATUS_LOG_LINES = 60
#: Containers whose log one run's diagnosis reads at most.
MAX_LOGS_PER_RUN = 4
#: Above this many unfinished runs, `cw list` reads all of cw's pods instead of naming the runs.
MAX_NAMED_RUNS = 100
#: Log lines of a running trainer read for its progress (the tqdm bar, cw's [cw-progress] line).
PROGRESS_LOG_LINES = 20
#: Running runs whose progress `cw list` reads (one log request each, at once), the newest first.
MAX_PROGRESS_READS = 20


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
    #: Times the trainer started again (a JobSet's gang restarts; a Job's replaced rank-0 pods); None: no trainer.
    restarts: int | None = None
    #: The kind of owner that counted ``restarts`` itself (a gang's restarts), None where cw counted the replaced pods.
    restarts_counted_by: str | None = None
    namespace: str = ""
    #: Why the run failed, or what holds it (an image pull, a crash loop), in a few words.
    failure: str | None = None
    explanations: list[Explanation] = field(default_factory=list)
    #: The sweep the run belongs to.
    sweep: str | None = None
    #: The pipeline the run is a stage of, and its stage (`cw pipeline`).
    pipeline: str | None = None
    stage: str | None = None
    #: Where to watch the training: ``wandb`` (the W&B run's page), ``tensorboard`` (the event files' folder).
    links: dict[str, str] = field(default_factory=dict)
    #: How far the running trainer is, from its log's last lines (None: not known, or not running).
    progress: Progress | None = None

    @property
    def stalled(self) -> bool:
        """Whether the launcher that created the run stopped before starting it
        (:data:`~cw_cli.render.workloads.base.STALLED`)."""
        return self.state == STALLED


def _links(owner: dict[str, Any]) -> dict[str, str]:
    annotations = owner["metadata"].get("annotations") or {}
    found = {"wandb": annotations.get(WANDB_URL_ANNOTATION), "tensorboard": annotations.get(TENSORBOARD_ANNOTATION)}
    return {name: value for name, value in found.items() if value}


def collect_runs(
    objects: list[tuple[str, dict[str, Any]]], namespace: str
) -> tuple[dict[tuple[str, str], RunView], dict[tuple[str, str], list[tuple[str, dict[str, Any]]]]]:
    """The runs' views, and each run's owners (Job or JobSet), keyed by (namespace, run)."""
    runs: dict[tuple[str, str], RunView] = {}
    owners: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    trained: set[tuple[str, str]] = set()  # runs whose trainer owner was seen: it alone says their state
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
        view.pipeline, view.stage = labels.get(PIPELINE_LABEL, view.pipeline), labels.get(STAGE_LABEL, view.stage)
        view.objects.append(f"{kind}/{obj['metadata']['name']}")
        created = creation_time(obj)
        if created and (view.created is None or created < view.created):
            view.created = created
        owner = OWNERS.get(kind)
        if owner is not None:
            view.gpus += owner.gpus(obj)
            # An evaluation or export Job carries the run's labels too; it never speaks for the run
            # (only where the trainer's owner is gone, e.g. deleted after its TTL).
            if labels.get(COMPONENT_LABEL, TRAINER) != TRAINER and (key in trained or _has_trainer(objects, key, namespace)):
                continue
            trained.add(key)
            view.links.update(_links(obj))
            view.state = owner.state(obj)
            restarts = owner.restarts(obj)  # only a kind that restarts the whole gang counts them
            if restarts is not None:
                view.restarts, view.restarts_counted_by = restarts, owner.kind
            owners.setdefault(key, []).append((kind, obj))
        elif kind == "Deployment":
            view.gpus += pod_gpus(obj["spec"]["template"]["spec"]) * int(obj["spec"].get("replicas", 1))
    for key, view in runs.items():
        if not any(o.split("/", 1)[0] in OWNERS for o in view.objects):
            view.state = "Services only"
        count_restarts(view, owners.get(key, []), None)  # a Job's from its own count until its pods are read
    return runs, owners


def _has_trainer(objects: list[tuple[str, dict[str, Any]]], key: tuple[str, str], namespace: str) -> bool:
    """Whether the run ``key`` has a trainer owner among ``objects``."""
    for kind, obj in objects:
        labels = obj["metadata"].get("labels") or {}
        if (kind in OWNERS and labels.get(RUN_LABEL) == key[1] and labels.get(COMPONENT_LABEL, TRAINER) == TRAINER
                and (obj["metadata"].get("namespace") or namespace) == key[0]):
            return True
    return False


def progress_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The running trainer pod whose log shows the training's progress: rank 0 (the only one of a
    single-node run) with its trainer container started (a pod still waiting for its servers has
    no log), the newest if a replacement runs beside a pod still stopping."""
    running = [
        p for p in pods
        if (p["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == TRAINER and pod_phase(p) == "Running"
        and (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION, "0") == "0"
        and any(c.get("name") == TRAINER and (c.get("state") or {}).get("running") for c in p["status"].get("containerStatuses") or [])
    ]  # fmt: skip
    return max(running, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)


def pod_phase(pod: dict[str, Any]) -> str:
    """A pod's phase (``Pending``, ``Running``, ...), empty when it has none yet."""
    return str((pod.get("status") or {}).get("phase", ""))


def pod_ready(pod: dict[str, Any]) -> bool:
    """Whether a pod's ``Ready`` condition is true."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def _disrupted(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("reason") == "Evicted" or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def live_pods(view: RunView, pods: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """The pods that explain a run, and the disrupted ones among them.

    A failed run: all of them. A run still going: what holds its live pods, and the disruptions
    its Job or JobSet replaced and the trainer pod that last ended to be restarted after a stall or
    a warned stop (they say why it started over), not the attempts it retried.
    """
    if view.state == "Failed":
        return pods, set()
    disrupted = {p["metadata"]["name"] for p in pods if _disrupted(p) and pod_phase(p) not in ("Pending", "Running")}
    # The trainer pod that last ended to be restarted (a stall, a warned stop) says why the run started over.
    restarted = [p for p in pods if restart_exit(p) is not None]
    if restarted:
        disrupted.add(max(restarted, key=lambda p: p["metadata"].get("creationTimestamp") or "")["metadata"]["name"])
    return [p for p in pods if pod_phase(p) in ("Pending", "Running") or p["metadata"]["name"] in disrupted], disrupted


def wanted_logs(pods: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, bool]]:
    """(pod, container, previous) whose log tails explain a run, newest pods first, a few at most."""
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)
    return [(pod, container, previous) for pod in newest_first for container, previous in log_requests(pod)][:MAX_LOGS_PER_RUN]


def explain_run(
    view: RunView, owners: list[tuple[str, dict[str, Any]]], pods: list[dict[str, Any]], logs: dict[LogKey, list[str]]
) -> None:
    """Fill ``view.explanations`` and ``view.failure`` from the run's owners, pods and log tails."""
    if view.state == "Succeeded":
        return
    pods, disrupted = live_pods(view, pods)
    mine = {(pod_name, container): tail for (namespace, pod_name, container), tail in logs.items() if namespace == view.namespace}
    view.explanations = diagnose(owners, pods, mine)
    view.failure = summary([e for e in view.explanations if e.pod not in disrupted])


def count_restarts(view: RunView, owners: list[tuple[str, dict[str, Any]]], pods: list[dict[str, Any]] | None) -> None:
    """``view.restarts`` from the run's owners and, once read, its pods: what an owner that
    restarts the whole gang counts itself (a JobSet), else its trainer pods (a Job)."""
    counted = [(kind, OWNERS[kind].restarts(obj)) for kind, obj in owners if kind in OWNERS]
    gang = next(((kind, n) for kind, n in counted if n is not None), None)
    uncounted = [obj for kind, obj in owners if kind in OWNERS and OWNERS[kind].restarts(obj) is None]
    view.restarts = run_restarts(uncounted, pods, gang[1] if gang else None)
    view.restarts_counted_by = OWNERS[gang[0]].kind if gang else None


def read_progress(kube: Kube, pods: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], Progress | None]:
    """Each run's progress from its running trainer's last lines: one log request per run, at once."""
    keys = list(pods)
    tails = gather({str(i): partial(read_log_tail, kube, pods[key], TRAINER, PROGRESS_LOG_LINES) for i, key in enumerate(keys)})
    return {key: training_progress(tails[str(i)]) for i, key in enumerate(keys)}


def list_runs(
    kube: Kube,
    all_namespaces: bool = False,
    run_name: str | None = None,
    log_lines: int = LIST_LOG_LINES,
    kinds: tuple[str, ...] = RUN_KINDS,
) -> list[RunView]:
    """Every cw run in the namespace (or in all of them), newest first, each with why it failed.

    Reads the runs' objects of ``kinds`` at once (names only for all but Jobs, JobSets and
    Deployments; :data:`cw_cli.k8s.queries.WHOLE_KINDS` alone find every run, the other kinds only fill ``objects``),
    pods only of the runs not Succeeded, logs only of failed runs' failed containers
    (``log_lines`` each, a few containers per run at most), and the last
    :data:`PROGRESS_LOG_LINES` of the running trainer of each Running run, the newest
    :data:`MAX_PROGRESS_READS` (one request each, at once; the others' progress stays None).
    """
    runs, owners = collect_runs(run_objects(kube, run_name, all_namespaces, kinds), kube.namespace)
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
                wanted += wanted_logs(live_pods(view, by_run.get(key, []))[0])
        logs = read_logs(kube, wanted, log_lines)
        running = sorted((key for key, view in runs.items() if view.state == "Running" and key[1] in explained),
                         key=lambda key: runs[key].created or datetime.min.replace(tzinfo=timezone.utc), reverse=True)  # fmt: skip
        trainers = {key: found for key in running if (found := progress_pod(by_run.get(key, []))) is not None}
        progress = read_progress(kube, dict(list(trainers.items())[:MAX_PROGRESS_READS]))
        for key, view in runs.items():
            if key[1] in explained:
                explain_run(view, owners.get(key, []), by_run.get(key, []), logs)
                count_restarts(view, owners.get(key, []), by_run.get(key, []))
                view.progress = progress.get(key)
    return sorted(
        runs.values(), key=lambda v: (v.created or datetime.min.replace(tzinfo=timezone.utc), v.namespace), reverse=True
    )
