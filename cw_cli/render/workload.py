"""The run's workload strategy: a Job, a JobSet, Kueue-queued or not, chosen once.

The choice depends on the config (``nodes``, ``queue``, ``jobset``), on whether the framework
starts servers, and on what the cluster serves (:class:`ClusterFacts`). It is made once, before
anything is rendered, and the plan, the launch and ``--dry-run`` all use the same
:class:`Workload`, so the printed plan is the applied one. Pure: the facts are asked by the
caller (:mod:`cw_cli.api`), never here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.errors import ConfigError
from cw_cli.labels import GPU_RESOURCE, KUEUE_QUEUE_LABEL, TRAINER, object_names
from cw_cli.render.jobset import GROUP_VERSION_PATH as JOBSET_API

if TYPE_CHECKING:  # annotations only: `cw status` reads owners through this module without pydantic
    from cw_cli.config.models import ClusterSpec

#: Kueue's API group version (the Workload and LocalQueue kinds cw reads).
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"

JOB = "Job"
JOBSET = "JobSet"
SERVICES_ONLY = "ConfigMap"  # `--services`: the ConfigMap owns the servers


class ClusterFacts(Struct, frozen=True):
    """What the cluster serves, as far as the workload choice needs it.

    Attributes:
        served: API group version path -> whether the API server serves it, for each one asked.
        not_asked: Why the cluster was not asked (a dry run without a reachable cluster), or
            None when it was asked or did not need to be.
    """

    served: dict[str, bool] = {}
    not_asked: str | None = None

    def serves(self, group_version_path: str) -> bool | None:
        """Whether the cluster serves an API (None: not asked)."""
        return self.served.get(group_version_path)


class Workload(Struct, frozen=True):
    """How the run's pods are owned and admitted.

    Attributes:
        owner_kind: ``Job``, ``JobSet``, or ``ConfigMap`` for ``--services`` (no trainer).
        queue: The Kueue LocalQueue that admits the run, or None (cw releases the Job itself).
        notes: What the user should know about the choice (printed with the plan).
    """

    owner_kind: str
    queue: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def gang(self) -> bool:
        """Whether the run is one JobSet (trainer and servers admitted and stopped together)."""
        return self.owner_kind == JOBSET

    @property
    def managed_suspend(self) -> bool:
        """Whether cw releases the suspended Job itself (not under Kueue, which admits it)."""
        return self.queue is None

    @property
    def owner(self) -> OwnerKind | None:
        """The owner's strategy (None with ``--services``: the ConfigMap owns only servers)."""
        return OWNERS.get(self.owner_kind)


def apis_to_ask(cluster: ClusterSpec, services_only: bool, local: bool) -> tuple[str, ...]:
    """The API group versions whose presence changes this run's workload (none for most runs).

    Args:
        cluster: The run's cluster fields.
        services_only: ``--services``.
        local: ``--local`` (no cluster at all).
    """
    if services_only or local:
        return ()
    asks = []
    if cluster.jobset is True or (cluster.jobset == "auto" and (cluster.nodes > 1 or cluster.queue is not None)):
        asks.append(JOBSET_API)
    if cluster.queue is not None:
        asks.append(KUEUE_API)
    return tuple(asks)


def choose_workload(
    path: Path, cluster: ClusterSpec, *, services_only: bool, local: bool, has_services: bool, facts: ClusterFacts
) -> Workload:
    """The run's workload, from its config and the cluster's facts.

    Args:
        path: The config file (named in errors).
        cluster: The run's cluster fields.
        services_only: ``--services``: only the servers, owned by the run's ConfigMap.
        local: ``--local``: the trainer runs here (the plan's Job only describes it).
        has_services: The framework starts servers for this run.
        facts: What the cluster serves (empty when not asked).

    Raises:
        ConfigError: The config asks for what the cluster does not serve (``jobset: true``
            without JobSet, ``queue`` without Kueue).
    """
    if services_only:
        return Workload(SERVICES_ONLY)
    if local:
        return Workload(JOB)
    queue = cluster.queue
    if queue is not None and facts.serves(KUEUE_API) is False:
        raise ConfigError(
            [f"{path}: `queue: {queue}`, but this cluster does not serve Kueue ({KUEUE_API}): the run would wait "
             "suspended forever"],
            hint="install Kueue (https://kueue.sigs.k8s.io) or remove `queue` (e.g. --set queue=null)",
        )  # fmt: skip
    if cluster.jobset is True:
        if facts.serves(JOBSET_API) is False:
            raise ConfigError(
                [f"{path}: `jobset: true`, but this cluster does not serve JobSet ({JOBSET_API})"],
                hint="install JobSet (https://jobset.sigs.k8s.io), or set `jobset: auto`",
            )
        return Workload(JOBSET, queue)
    if cluster.jobset is False:
        return Workload(JOB, queue)
    wanted = cluster.nodes > 1 or (queue is not None and has_services)
    if not wanted:
        return Workload(JOB, queue)
    served = facts.serves(JOBSET_API)
    if served:
        return Workload(JOBSET, queue)
    if served is None:
        why = f" ({facts.not_asked})" if facts.not_asked else ""
        return Workload(JOB, queue, (
            f"`jobset: auto`: the cluster was not asked whether it serves JobSet{why}, so this shows the run as a "
            "Job and Deployments; a launch on a cluster that serves JobSet makes it one JobSet (set `jobset: true` "
            "to print that form)",
        ))  # fmt: skip
    notes = []
    if cluster.nodes > 1:
        notes.append("JobSet is not installed: the nodes run as an indexed Job, and a failed rank fails the run")
    if queue is not None and has_services:
        notes.append(
            "JobSet is not installed: Kueue admits only the trainer, and the servers take their GPUs outside the "
            "queue's quota"
        )
    return Workload(JOB, queue, tuple(notes))


# --- the owner objects the strategies create: their names, states, GPUs and pod templates ----------
#
# What a run's owner object is called, what state it is in and which pods it holds is answered
# here, once per kind, for everything that reads a run back (`cw status`, `cw list`, `--wait`,
# `cw export`, the preflight): no other module branches on Job versus JobSet.

#: cw releases a Job within seconds of creating it; one still suspended after this long (and not
#: held by Kueue) was left by a launcher that died half-way.
STALLED_AFTER_S = 60
STALLED = "Half-made (launcher stopped)"


def _created(obj: dict[str, Any]) -> datetime | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _true_conditions(obj: dict[str, Any]) -> list[str]:
    return [c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]


def _suspended_state(obj: dict[str, Any], now: datetime | None) -> str:
    """A suspended owner: queued by Kueue, being created, or left half-made by a launcher that died."""
    if KUEUE_QUEUE_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
        return "Queued (Kueue)"
    created = _created(obj)
    age = ((now or datetime.now(timezone.utc)) - created).total_seconds() if created else 0
    return STALLED if age > STALLED_AFTER_S else "Starting"


def pod_gpus(pod_spec: dict[str, Any]) -> int:
    """GPUs a pod's containers ask for (their ``nvidia.com/gpu`` limits)."""
    return sum(
        int(c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0) or 0) for c in pod_spec.get("containers", [])
    )


class OwnerKind:
    """What cw knows of one kind of run owner (a trainer Job, or the run's JobSet)."""

    kind = ""

    def name(self, run_name: str) -> str:
        """The owner's object name for a run."""
        raise NotImplementedError

    def state(self, owner: dict[str, Any], now: datetime | None = None) -> str:
        """The run's plain state: Succeeded, Failed, Starting, Queued (Kueue), Pending, Running or
        :data:`STALLED`."""
        raise NotImplementedError

    def templates(self, owner: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """(role, pod template) of every pod the owner creates, the trainer first."""
        raise NotImplementedError

    def gpus(self, owner: dict[str, Any]) -> int:
        """GPUs the owner's pods ask for in all."""
        raise NotImplementedError

    def trainer_template(self, owner: dict[str, Any]) -> dict[str, Any] | None:
        """The trainer's pod template (None: the owner has none)."""
        return next((template for role, template in self.templates(owner) if role == TRAINER), None)


class JobOwner(OwnerKind):
    """A run whose trainer is one (indexed) Job, `<run>-trainer`; servers are Deployments."""

    kind = JOB

    def name(self, run_name: str) -> str:
        return object_names(run_name)[TRAINER]

    def state(self, owner: dict[str, Any], now: datetime | None = None) -> str:
        conditions = _true_conditions(owner)
        if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
            return "Succeeded"
        if "Failed" in conditions or "FailureTarget" in conditions:
            return "Failed"
        if (owner.get("spec") or {}).get("suspend"):
            return _suspended_state(owner, now)
        status = owner.get("status") or {}
        if status.get("active"):
            return "Running" if status.get("ready", 0) else "Pending"
        return "Pending"

    def templates(self, owner: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [(TRAINER, owner["spec"]["template"])]

    def gpus(self, owner: dict[str, Any]) -> int:
        spec = owner.get("spec") or {}
        return pod_gpus(spec["template"]["spec"]) * int(spec.get("parallelism", 1) or 1)


class JobSetOwner(OwnerKind):
    """A run that is one JobSet named after it: the trainer and each server a replicated Job."""

    kind = JOBSET

    def name(self, run_name: str) -> str:
        return run_name

    def state(self, owner: dict[str, Any], now: datetime | None = None) -> str:
        conditions = _true_conditions(owner)
        if "Completed" in conditions:
            return "Succeeded"
        if "Failed" in conditions:
            return "Failed"
        if (owner.get("spec") or {}).get("suspend"):
            return _suspended_state(owner, now)
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


#: Every owner kind, in the order a run is looked for by name (a Job run is the common case).
OWNERS: dict[str, OwnerKind] = {JOB: JobOwner(), JOBSET: JobSetOwner()}


def owner_kind(kind: str) -> OwnerKind:
    """The strategy of an owner kind (``Job`` or ``JobSet``).

    Raises:
        KeyError: Not a kind that owns a run's pods (e.g. ``ConfigMap`` for ``--services``).
    """
    return OWNERS[kind]
