"""The run's workload strategy: a Job, a JobSet, Kueue-queued or not, chosen once.

The choice depends on the config (``nodes``, ``queue``, ``jobset``), on whether the framework
starts servers, and on what the cluster serves (:class:`ClusterFacts`). It is made once, before
anything is rendered, and the plan, the launch and ``--dry-run`` all use the same
:class:`Workload`, so the printed plan is the applied one. Pure: the facts are asked by the
caller (:mod:`cw_cli.api`), never here.

What differs between the kinds is each kind's strategy: :data:`KINDS` here, the rendering
half in :mod:`cw_cli.render.workloads` (the contract is :mod:`cw_cli.render.workloads.base`),
the cluster half in :mod:`cw_cli.k8s.workloads`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from cw_cli.errors import ConfigError
from cw_cli.render.workloads.base import WorkloadKind
from cw_cli.render.workloads.job import JobOwner, ServersOnly
from cw_cli.render.workloads.jobset import GROUP_VERSION_PATH as JOBSET_API
from cw_cli.render.workloads.jobset import JobSetOwner

if TYPE_CHECKING:  # annotations only: `cw status` reads owners through this module without pydantic
    from cw_cli.config.models import ClusterSpec

#: Kueue's API group version (the Workload and LocalQueue kinds cw reads).
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"

JOB = JobOwner.kind
JOBSET = JobSetOwner.kind
SERVICES_ONLY = ServersOnly.kind  # `--services`: the ConfigMap owns the servers
#: A kind that owns a run's trainer (its reading half is all most callers need).
OwnerKind = WorkloadKind


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
    def managed_suspend(self) -> bool:
        """Whether cw releases the suspended Job itself (not under Kueue, which admits it)."""
        return self.queue is None

    @property
    def owner(self) -> OwnerKind | None:
        """The owner's strategy (None with ``--services``: the ConfigMap owns only servers)."""
        return OWNERS.get(self.owner_kind)

    @property
    def strategy(self) -> WorkloadKind:
        """The kind's strategy, servers only included: it renders and reads back the run's objects."""
        return KINDS[self.owner_kind]


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


# --- the kinds: each answers for itself (render/workloads/) -------------------------------------
#
# What a run's owner object is called, how its objects are laid out, what state it is in, which pods
# it holds and why it failed is answered once per kind, by its strategy; the cluster half of each
# kind is cw_cli/k8s/workloads.py. No other module branches on the kind
# (tests/unit/test_only_the_strategy_branches_on_the_workload_kind.py).

#: The kinds that own a run's trainer, in the order a run is looked for by name (a Job run is the
#: common case).
OWNERS: dict[str, OwnerKind] = {JOB: JobOwner(), JOBSET: JobSetOwner()}
#: Every workload kind, servers only (``--services``) included.
KINDS: dict[str, WorkloadKind] = {**OWNERS, SERVICES_ONLY: ServersOnly()}


def owner_kind(kind: str) -> OwnerKind:
    """The strategy of an owner kind (``Job`` or ``JobSet``).

    Raises:
        KeyError: Not a kind that owns a run's pods (e.g. ``ConfigMap`` for ``--services``).
    """
    return OWNERS[kind]
