"""The contract of a workload kind, rendering half: what the plan asks a kind, and what it answers.

A run's pods are owned by one object whose kind the workload choice names
(:func:`cw_cli.render.workload.choose_workload`): a trainer Job, one JobSet, or, with
``--services``, the ConfigMap (servers only). Everything that differs between kinds is answered by
that kind's :class:`WorkloadKind`, and nowhere else (tests/unit/
test_only_the_strategy_branches_on_the_workload_kind.py):

Rendering (pure; :mod:`cw_cli.render.plan` renders the pieces every kind shares, the kind
arranges them):

* :attr:`WorkloadKind.server_keeper`: whether cw's keeper sidecar stops the servers when the
  trainer ends (else the owner stops them itself, as a JobSet does);
* :attr:`WorkloadKind.eval_watcher`: whether the trainer's evaluation watcher runs (render/evaluation.py);
* :meth:`~WorkloadKind.master_address`: the DNS name of rank 0 of a multi-node trainer;
* :meth:`~WorkloadKind.trainer_labels`: the trainer Job's labels (a queue label where Kueue
  admits that Job);
* :meth:`~WorkloadKind.layout`: the manifests in apply order, owner first, the owner's name
  and the servers cw waits for.

Reading back (for `cw status`, `cw list`, `--wait`, `cw export`, the preflight):
:meth:`~WorkloadKind.name`, :meth:`~WorkloadKind.state`, :meth:`~WorkloadKind.templates`,
:meth:`~WorkloadKind.gpus`, :meth:`~WorkloadKind.restarts`, :meth:`~WorkloadKind.failure`.

The cluster half (creating in order, releasing, waiting for servers, gathering status) is
:mod:`cw_cli.k8s.workloads`, keyed by the same kind. A new kind is a subclass here, one there,
and its entry in :data:`cw_cli.render.workload.KINDS`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from cw_cli.labels import GPU_RESOURCE, KUEUE_QUEUE_LABEL, TRAINER

if TYPE_CHECKING:
    from cw_cli.diagnosis.explanation import Explanation, FrameworkLookup

#: cw releases an owner within seconds of creating it; one still suspended after this long (and
#: not held by Kueue) was left by a launcher that died half-way.
STALLED_AFTER_S = 60
STALLED = "Half-made (launcher stopped)"


class Server(Struct):
    """One server as the plan rendered it: its Deployment (pod template and all) and its Service."""

    role: str
    name: str
    deployment: dict[str, Any]
    service: dict[str, Any]


class Parts(Struct):
    """Every rendered piece of a run, for its kind to arrange (:meth:`WorkloadKind.layout`).

    Attributes:
        run_name: The run's name.
        labels: The run's labels (the owner's, plus a queue label under Kueue).
        queue: The Kueue LocalQueue that admits the run, or None.
        max_restarts: The config's ``max_restarts`` (a gang's restarts).
        trainer: The trainer Job, or None with ``--services``.
        configmap: The run's ConfigMap.
        node_service: The headless Service of a multi-node trainer's pods, or None.
        keeper_rbac: The run's own ServiceAccounts, Roles and RoleBindings: the keepers' (where the
            kind keeps its servers) and the evaluation watcher's (where it runs).
        network_policy: The run's NetworkPolicy.
        servers: The servers, in start order.
    """

    run_name: str
    labels: dict[str, str]
    queue: str | None
    max_restarts: int
    trainer: dict[str, Any] | None
    configmap: dict[str, Any]
    node_service: dict[str, Any] | None
    keeper_rbac: list[dict[str, Any]]
    network_policy: dict[str, Any]
    servers: list[Server] = field(default_factory=list)


class Layout(Struct):
    """What a kind makes of the parts: manifests in apply order (the owner first), the owner's
    name (None: the ConfigMap owns servers only) and the servers' names cw waits for."""

    manifests: list[dict[str, Any]]
    owner_name: str | None
    servers: list[str]


def created(obj: dict[str, Any]) -> datetime | None:
    """When the API server created an object (None: not stamped)."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def true_conditions(obj: dict[str, Any]) -> list[str]:
    """The types of an object's conditions that are True."""
    return [c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]


def suspended_state(obj: dict[str, Any], now: datetime | None) -> str:
    """A suspended owner: queued by Kueue, being created, or left half-made by a launcher that died."""
    if KUEUE_QUEUE_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
        return "Queued (Kueue)"
    made = created(obj)
    age = ((now or datetime.now(timezone.utc)) - made).total_seconds() if made else 0
    return STALLED if age > STALLED_AFTER_S else "Starting"


def pod_gpus(pod_spec: dict[str, Any]) -> int:
    """GPUs a pod's containers ask for (their ``nvidia.com/gpu`` limits)."""
    return sum(
        int(c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0) or 0) for c in pod_spec.get("containers", [])
    )


def kept_layout(parts: Parts, owner_name: str | None) -> Layout:
    """The layout of a run whose servers are Deployments stopped by cw's keeper (a Job run, or
    servers only): the trainer (if any), the ConfigMap, the nodes' Service, the keeper's RBAC,
    the NetworkPolicy, then each server's Deployment and Service."""
    manifests = [parts.trainer] if parts.trainer is not None else []
    manifests.append(parts.configmap)
    manifests += [parts.node_service] if parts.node_service is not None else []
    manifests += [*parts.keeper_rbac, parts.network_policy]
    for server in parts.servers:
        manifests += [server.deployment, server.service]
    return Layout(manifests, owner_name, [server.name for server in parts.servers])


class WorkloadKind:
    """One kind of workload: how its objects are rendered and read back (see the module docstring)."""

    #: The owner object's kind (``Job``, ``JobSet``, ``ConfigMap``).
    kind = ""
    #: Whether cw's keeper stops the servers (a sidecar in each, with the RBAC to read the trainer).
    server_keeper = True
    #: Whether each checkpoint is evaluated while training goes on (the trainer's watcher sidecar,
    #: with the RBAC layout() keeps among the Parts' keeper_rbac).
    eval_watcher = True
    #: Whether the kind's API exists only where an add-on is installed (absent: no such object).
    add_on = False

    # --- rendering ---------------------------------------------------------------------------

    def master_address(self, run_name: str, names: dict[str, str]) -> str:
        """DNS name of rank 0 of a multi-node trainer."""
        raise NotImplementedError

    def trainer_labels(self, labels: dict[str, str], queue: str | None) -> dict[str, str]:
        """The trainer Job's labels."""
        return dict(labels)

    def layout(self, parts: Parts) -> Layout:
        """The run's manifests in apply order, the owner's name and the servers cw waits for."""
        raise NotImplementedError

    # --- reading back ------------------------------------------------------------------------

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

    def restarts(self, owner: dict[str, Any]) -> int | None:
        """Restarts of the whole run the owner counts (None: it restarts no gang)."""
        return None

    def failure(self, owner: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
        """Why the owner failed, from its conditions (empty when it has not)."""
        return []
