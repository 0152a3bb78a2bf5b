"""A session: one cluster connection and namespace, reused by every call."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli import features
from cw_cli.api import sweeps
from cw_cli.api.memory import WontFit, estimate_run
from cw_cli.api.planning import PlannedRun, Progress, _quiet, _registry, plan
from cw_cli.api.run import Run
from cw_cli.api.sweeps import SWEEP_PARALLEL, PlannedSweep, plan_sweep
from cw_cli.config.options import EstimateOptions, LaunchOptions
from cw_cli.errors import ConfigError

if TYPE_CHECKING:
    from cw_cli.client.connection import Kube
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.estimate.from_config import RunEstimate
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.k8s.run_view import RunView


class Session:
    """One cluster connection and namespace, reused by every call (a sweep pays for it once).

    Args:
        context: kubeconfig context (default: the current one).
        namespace: Namespace (default: the context's).
        kubeconfig: kubeconfig file (default: ``$KUBECONFIG``, else ``~/.kube/config``).
        registry: Frameworks (default: built-in and plugins, loaded once).
    """

    def __init__(
        self,
        context: str | None = None,
        namespace: str | None = None,
        registry: FrameworkRegistry | None = None,
        kubeconfig: str | Path | None = None,
    ) -> None:
        self.context = context
        self.kubeconfig = str(kubeconfig) if kubeconfig else None
        self._namespace = namespace
        self._registry = registry
        self._kube: Kube | None = None
        self._nodes: list[dict[str, Any]] | None = None

    @property
    def kube(self) -> Kube:
        """The connection, made on first use.

        Raises:
            ClusterUnreachable: No kubeconfig, or the API server does not answer.
        """
        if self._kube is None:
            from cw_cli.client.connection import ClusterTarget, connect

            self._kube = connect(ClusterTarget(context=self.context, namespace=self._namespace, kubeconfig=self.kubeconfig))
        return self._kube

    @property
    def namespace(self) -> str:
        """The namespace runs go to."""
        return self.kube.namespace

    @property
    def registry(self) -> FrameworkRegistry:
        """The frameworks runs are planned with."""
        if self._registry is None:
            self._registry = _registry()
        return self._registry

    def plan(
        self, config: str | Path | Mapping[str, Any] | YamlSource, framework: str, training_type: str,
        options: LaunchOptions | None = None, **flags: Any,
    ) -> PlannedRun:  # fmt: skip
        """:func:`~cw_cli.api.plan` with this session's registry and the cluster's facts (see there
        for the options and ``if_reachable``)."""
        return plan(config, framework, training_type, options, registry=self.registry, connect=lambda: self.kube, **flags)

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's nodes (read once per session): their GPU labels size the memory check.

        Raises:
            Forbidden: The credentials may not list nodes.
        """
        if self._nodes is None:
            self._nodes = self.kube.list("Node")
        return self._nodes

    def check_memory(
        self, planned: PlannedRun, *, gpu_memory: str | int | None = None, force: bool = False,
        dry_run: bool = False, progress: Progress = _quiet, command: str | None = None,
    ) -> RunEstimate:  # fmt: skip
        """The pre-launch memory check: estimate the run and refuse one that clearly cannot fit.

        Offline apart from one node list (only when the model's config.json is found here and
        no GPU size was given). A run it cannot estimate (a plugin framework, a model not in the
        local Hugging Face cache, an unknown architecture, unknown GPU memory) passes, with a note
        to ``progress``.

        Args:
            planned: The run.
            gpu_memory: One GPU's memory (``--gpu-memory``).
            force: Report, never refuse (``--force``).
            dry_run: Report, never refuse (``--server-dry-run``).
            progress: Gets the one-line verdict (or why there is none).
            command: The ``cw estimate ...`` command the refusal's hint names.

        Raises:
            WontFit: A role needs more than its GPU even within the estimate's error band.
        """
        quick = EstimateOptions(gpu_memory=gpu_memory, suggest=False, allow_meta_device=False)
        if planned.request.local:
            return estimate_run(planned, quick)
        result = estimate_run(planned, quick, nodes=self.nodes)
        if result.clearly_too_big and not force and not dry_run:
            result = estimate_run(planned, quick.with_(suggest=True), nodes=self.nodes)  # with the changes that fit
            request = planned.request
            shown = command or f"cw estimate {request.framework.name} {request.training_type.value} {request.config.path}"
            raise WontFit(result, planned.name, shown)
        why = " (a dry run: not refused)" if dry_run else " (--force: launching anyway)" if force else ""
        progress(result.summary() + (why if result.clearly_too_big else ""))
        for note in result.gpu.notes if result.estimate is not None and result.gpu.memory is None else ():
            progress(f"note: {note}")
        return result

    def submit(
        self,
        planned: PlannedRun,
        *,
        server_dry_run: bool = False,
        progress: Progress = _quiet,
        check_memory: bool = False,
        force: bool = False,
        gpu_memory: str | int | None = None,
    ) -> Run:
        """Create a planned run on the cluster, all or nothing (see :func:`cw_cli.k8s.submit.launch`).

        What is created is ``planned.plan`` itself, the plan :meth:`plan` rendered (and
        ``--dry-run`` printed): nothing is rendered again here. A plan made without asking the
        cluster what its workload depends on (``api.plan`` without a connection, for a multi-node
        or queued run) is refused instead of being made again: plan it with :meth:`plan`.

        Args:
            planned: The run.
            server_dry_run: The API server validates everything and persists nothing.
            progress: Gets each step.
            check_memory: Run :meth:`check_memory` first: refuse a run that clearly cannot fit
                its GPUs (a server dry run only reports). The CLI's launches do.
            force: With ``check_memory``, report but never refuse (``--force``).
            gpu_memory: One GPU's memory for the check (``--gpu-memory``).

        Raises:
            ConfigError: The plan lacks the cluster's facts its workload depends on (nothing was created).
            WontFit: ``check_memory`` and the run clearly cannot fit (nothing was created).
            Conflict: A run of that name exists (nothing was created).
            NotFound: The namespace, a Secret or a claim the run names is missing.
            Interrupted: Ctrl-C or a termination signal; what was created is removed.
            CwError: Any other failure, after removing what was created.
        """
        from cw_cli.k8s.submit import launch

        if not planned.cluster_facts:
            raise ConfigError(
                [f"run {planned.name} was planned without asking the cluster what it serves, and its workload depends "
                 "on it (a multi-node or queued run: a Job or a JobSet, queued by Kueue or not)"],
                hint="plan it with Session.plan (as cw does) and submit that plan: submit never renders a plan again",
            )  # fmt: skip
        if check_memory:
            self.check_memory(planned, gpu_memory=gpu_memory, force=force, dry_run=server_dry_run, progress=progress)
        features.before_launch(planned.request.config.cluster, planned.request.config.path)  # notify's Apprise: only a launch pays
        result = launch(
            self.kube,
            planned.plan,
            server_dry_run=server_dry_run,
            services_timeout_s=planned.request.services_timeout_s,
            progress=progress,
        )
        return Run(planned.name, self, planned.plan.owner_kind, result, planned.plan)

    def plan_sweep(
        self, config: str | Path | Mapping[str, Any] | YamlSource, framework: str, training_type: str,
        options: LaunchOptions | None = None, **flags: Any,
    ) -> PlannedSweep:  # fmt: skip
        """:func:`~cw_cli.api.plan_sweep` with this session's registry and connection."""
        return plan_sweep(config, framework, training_type, options, registry=self.registry, connect=lambda: self.kube,
                          **flags)  # fmt: skip

    def submit_sweep(
        self, planned: PlannedSweep, *, resume: bool = False, progress: Progress = _quiet, parallel: int = SWEEP_PARALLEL,
        check_memory: bool = False, force: bool = False, gpu_memory: str | int | None = None,
    ) -> list[Run]:  # fmt: skip
        """Create every run of a sweep, or none.

        Runs are created ``parallel`` at a time on this session's connection pool, each
        all-or-nothing as :meth:`submit`. If one fails, the runs this call created are deleted
        again before the error propagates, unless ``resume``: then what exists stays, and a later
        call with ``resume`` skips the runs already on the cluster and creates the rest. With
        ``check_memory`` every run is checked (:meth:`check_memory`) before any is created.

        Raises:
            WontFit: ``check_memory`` and a run clearly cannot fit (nothing was created).
            CwError: The first failure (its hint says what was removed).
            Interrupted: Ctrl-C; the sweep's runs created so far are removed.
        """
        return sweeps.submit_sweep(self, planned, resume=resume, progress=progress, parallel=parallel,
                                   check_memory=check_memory, force=force, gpu_memory=gpu_memory)  # fmt: skip

    def run(self, name: str) -> Run:
        """The handle of an existing run. Nothing is read here: each call on it reads what it needs
        (:meth:`Run.wait` reads whether the run is a Job, a JobSet or servers only), so a
        ``session.run(name).status()`` costs no more requests than the status itself.
        """
        return Run(name, self)

    def runs(self, *, all_namespaces: bool = False, objects: bool = True) -> list[RunView]:
        """Every cw run in the namespace (or in all of them), newest first, each with why it failed.

        Args:
            all_namespaces: The runs of every namespace the credentials may list.
            objects: Fill each run's :attr:`RunView.objects` (``Kind/name``). False lists only the
                owners and servers, which find every run, its state and GPUs in fewer reads.

        Returns:
            The runs; a failed run's ``failure`` says why, from its pods and its log tails.
        """
        from cw_cli.k8s.queries import RUN_KINDS, WHOLE_KINDS
        from cw_cli.k8s.run_view import list_runs

        return list_runs(self.kube, all_namespaces=all_namespaces, kinds=RUN_KINDS if objects else WHOLE_KINDS)

    def run_names(self) -> list[str]:
        """Names of the runs in the namespace, read from their owners and servers as metadata only
        (what shell completion of a RUN argument needs)."""
        from cw_cli.k8s.queries import run_names

        return run_names(self.kube)

    def delete_sweep(self, sweep: str) -> list[str]:
        """Delete every run of a sweep (the runs labelled with it), each as :meth:`Run.delete`.

        Returns:
            The names of the runs deleted.

        Raises:
            ConfigError: ``sweep`` is not a sweep name.
            NotFound: No run of that sweep in the namespace.
        """
        from cw_cli.k8s.operations import delete_sweep

        return delete_sweep(self.kube, sweep)
