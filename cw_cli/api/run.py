"""A run on the cluster: its state, logs, the wait for it, its servers, its deletion."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from msgspec import Struct

from cw_cli.api.after_training import AfterTraining
from cw_cli.api.planning import Progress, _quiet
from cw_cli.errors import ConfigError, CwError, RunFailed
from cw_cli.labels import COMPONENT_LABEL, RUN_LABEL, SERVER_ROLES, TRAINER

#: The annotation KWOK's simulated nodes carry (their pods never start a container).
SIMULATED_NODE_ANNOTATION = "kwok.x-k8s.io/node"

if TYPE_CHECKING:
    from cw_cli.api.session import Session
    from cw_cli.k8s.run_view import RunView
    from cw_cli.k8s.submit import LaunchResult
    from cw_cli.render.plan import Plan


class Run(AfterTraining, Struct):
    """A run on the cluster: read its state and logs, wait for it, delete it.

    Attributes:
        name: The run's name.
        session: The session (connection and namespace) it lives in.
        owner_kind: ``Job``, ``JobSet`` or, for servers only, ``ConfigMap``; None for a run found
            by name until a call needs it (:meth:`wait` reads it from the cluster).
        launch: What the submit created (None for a run found by name).
    """

    name: str
    session: Session
    owner_kind: str | None = None
    launch: LaunchResult | None = None
    _plan: Plan | None = None

    def __repr__(self) -> str:  # the plan's manifests would fill a screen
        return f"Run(name={self.name!r}, session={self.session!r}, owner_kind={self.owner_kind!r}, launch={self.launch!r})"

    def status(self) -> RunView:
        """The run's state, pods, servers and why anything is stuck.

        Raises:
            NotFound: The run has no object in the namespace.
        """
        from cw_cli.k8s.status import run_status

        return run_status(self.session.kube, self.name)

    def logs(
        self, *, role: str = TRAINER, rank: int | None = None, follow: bool = False, tail: int | None = None,
        notice: Progress = _quiet,
    ) -> Iterator[str]:  # fmt: skip
        """Log lines of one pod (the trainer's rank 0 by default), through the API server.

        Nothing is read until the first line is asked for.

        Args:
            role: ``trainer``, ``server``, ``reward`` or ``export`` (:data:`cw_cli.labels.LOG_ROLES`).
            rank: Node rank of a multi-node trainer (default: rank 0).
            follow: Stream new lines until the pod ends: a Pending pod is waited for (``notice``
                says why it waits), and a dropped or idle stream is resumed without repeating lines.
            tail: Only the last ``tail`` lines.
            notice: Called with what the wait for a Pending pod is waiting on.

        Raises:
            NotFound: The run has no pod of that role (and rank) yet.
        """
        from cw_cli.k8s.operations import stream_logs

        return stream_logs(self.session.kube, self.name, role=role, rank=rank, follow=follow, tail=tail, notice=notice)

    def wait(self, timeout: float | None = None, progress: Progress = _quiet) -> str:
        """Block until the trainer ends; then stop the run's servers (their GPUs come back at once).

        Returns:
            ``"Succeeded"``.

        Raises:
            RunFailed: The trainer failed (the message carries its reason).
            WaitTimeout: Still running after ``timeout`` seconds.
        """
        from cw_cli.k8s.operations import wait_for_run

        kind = self._owner_kind()
        if kind == "ConfigMap":
            raise ConfigError([f"run {self.name!r} has only servers (--services): no trainer to wait for"],
                              hint="wait_for_servers() waits until they are Ready")  # fmt: skip
        from cw_cli.render.workload import owner_kind

        owner = owner_kind(kind).name(self.name)
        try:
            state = wait_for_run(self.session.kube, owner, timeout, progress, kind=kind)
        except RunFailed:
            self.stop_servers(progress)
            raise
        self.stop_servers(progress)
        return state

    def simulated_nodes(self) -> list[str]:
        """The KWOK simulated nodes the trainer's pods were placed on: there no container starts, so
        a run "succeeds" without training. Empty on a real cluster, or where nodes cannot be read."""
        kube = self.session.kube
        try:
            pods = kube.list("Pod", label_selector=f"{RUN_LABEL}={self.name},{COMPONENT_LABEL}={TRAINER}")
            names = {p.get("spec", {}).get("nodeName") for p in pods} - {None, ""}
            nodes = [kube.get_metadata("Node", n) for n in sorted(names)]
        except CwError:  # no right to read nodes: say nothing rather than guess
            return []
        return [(n.get("metadata") or {}).get("name", "") for n in nodes
                if n and ((n.get("metadata") or {}).get("annotations") or {}).get(SIMULATED_NODE_ANNOTATION) == "fake"]

    def wait_for_servers(self, timeout: float | None = None, progress: Progress = _quiet) -> None:
        """Block until the run's servers are Ready (a ``--services`` run)."""
        from cw_cli.k8s.submit import wait_for_deployments
        from cw_cli.render.plan import DEFAULT_SERVICES_TIMEOUT_S

        names = self._plan.service_deployments if self._plan else [
            f"{self.name}-{role}" for role in SERVER_ROLES
        ]  # fmt: skip
        wait_for_deployments(self.session.kube, self.name, names, timeout or DEFAULT_SERVICES_TIMEOUT_S, progress)

    def stop_servers(self, progress: Progress = _quiet) -> list[str]:
        """Scale the run's server Deployments to zero (a JobSet run's servers stop by themselves)."""
        from cw_cli.k8s.operations import stop_services

        stopped = stop_services(self.session.kube, self.name)
        if stopped:
            progress(f"stopped {', '.join(stopped)} (scaled to 0; `cw delete {self.name}` removes the rest)")
        return stopped

    def delete(self) -> list[str]:
        """Delete every object of the run (every kind is listed first, so the report names them all).

        Returns:
            ``Kind/name`` of each object deleted; pods go with their Job and Deployments.

        Raises:
            NotFound: The run has no object in the namespace.
        """
        from cw_cli.k8s.operations import delete_run

        return delete_run(self.session.kube, self.name)

    def _owner_kind(self) -> str:
        """:attr:`owner_kind`, read from the cluster the first time a call needs it."""
        if self.owner_kind is None:
            from cw_cli.render.workload import OWNERS, SERVICES_ONLY

            kube = self.session.kube
            found = (kind for kind, owner in reversed(OWNERS.items()) if kube.get(kind, owner.name(self.name)))
            self.owner_kind = next(found, SERVICES_ONLY)  # a JobSet first: its child Jobs are not the owner
        return self.owner_kind
