"""cw as a library: plan, submit and follow runs from Python. The ``cw`` CLI is a layer over this.

A notebook or a script::

    from cw_cli import api

    session = api.Session(namespace="team-a")          # one connection, reused
    planned = session.plan("configs/trl-sft.yaml", "trl", "sft", gpu=4, set={"learning_rate": 2e-5})
    print(planned.to_yaml())                            # what would be created
    run = session.submit(planned)                       # -> Run
    run.wait()                                          # raises RunFailed if the trainer fails
    for line in run.logs(tail=20):
        print(line)

Offline, :func:`plan` renders without a cluster (what ``--dry-run`` prints). Every error is a
:class:`cw_cli.errors.CwError` subclass (``ConfigError``, ``NotFound``, ``Conflict``, ``RunFailed``,
...), each carrying the exit code the CLI uses. Nothing here prints: progress goes to an optional
callback.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.errors import ClusterUnreachable, ConfigError, Conflict, CwError, Interrupted, RunFailed
from cw_cli.labels import SERVE, SERVER_ROLES, TRAINER

if TYPE_CHECKING:  # the kubernetes-backed modules load only when a call needs the cluster
    import threading

    from cw_cli.client.connection import Kube
    from cw_cli.config.models import ClusterSpec
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.estimate.from_config import RunEstimate
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.k8s.run_view import RunView
    from cw_cli.k8s.submit import LaunchResult
    from cw_cli.render.plan import Plan, RunRequest
    from cw_cli.render.workload import ClusterFacts

Progress = Callable[[str], None]
#: A config given as a mapping is read as if it were a file in this folder (relative paths in it,
#: e.g. ``files:``, resolve from there); messages name it like this.
DICT_CONFIG_NAME = "<config mapping>"
#: Runs of a sweep created at once: enough to hide request latency, few enough for the API
#: server's default in-flight limits and the client's connection pool (10).
SWEEP_PARALLEL = 8


def _quiet(_: str) -> None:
    return None


class PlannedRun(Struct):
    """A rendered run, not yet on the cluster: exactly what :meth:`Session.submit` creates.

    Attributes:
        plan: The manifests and what the launch must wait for.
        request: What the plan was made from, including the cluster facts its workload was
            chosen with (kept to plan again where those facts were not asked).
    """

    plan: Plan
    request: RunRequest

    @property
    def cluster_facts(self) -> bool:
        """Whether the plan knows everything about the cluster that its workload depends on.

        Most runs depend on nothing (a single-node run is a Job anywhere); a multi-node or
        queued run depends on whether the cluster serves JobSet and Kueue.
        """
        return _unasked(self.request) == ()

    @property
    def name(self) -> str:
        """The run's name."""
        return self.plan.run_name

    @property
    def manifests(self) -> list[dict[str, Any]]:
        """The objects, owner first."""
        return self.plan.manifests

    @property
    def notices(self) -> list[str]:
        """What cw decided for the user (moved outputs, shipped files, ...)."""
        return self.plan.notices

    def to_yaml(self) -> str:
        """The manifests as multi-document YAML (``--dry-run``'s output without its header)."""
        return self.plan.to_yaml()


def set_assignments(values: Mapping[str, Any] | list[str] | None) -> list[str]:
    """``--set`` assignments from a mapping (dotted keys nest; values keep their types) or a list."""
    if values is None:
        return []
    if isinstance(values, Mapping):
        bad = [str(key) for key in values if not isinstance(key, str) or "=" in key or not key.strip()]
        if bad:
            raise ConfigError([f"override key {key!r}: expected a config key such as learning_rate or a.b" for key in bad])
        # JSON is YAML: the loader parses each value back to the same type.
        import json  # only here: `cw status`, `list` and `logs` import this module and need no json

        return [f"{key}={json.dumps(value)}" for key, value in values.items()]
    return list(values)


def _unasked(request: RunRequest) -> tuple[str, ...]:
    """The APIs the request's workload depends on that its facts do not answer."""
    from cw_cli.render.workload import apis_to_ask

    apis = apis_to_ask(request.config.cluster, request.services_only, request.local)
    return tuple(api for api in apis if request.facts.serves(api) is None)


def _ask_cluster(kube: Kube, apis: tuple[str, ...], timeout: tuple[float, float] | None = None) -> ClusterFacts:
    """What the cluster serves of ``apis`` (discovery reads, cached by the connection)."""
    from cw_cli.render.workload import ClusterFacts

    return ClusterFacts(served={api: kube.serves(api, timeout=timeout) for api in apis})


#: (connect, read) seconds for a dry run's discovery reads: a dry run must not hang on a cluster
#: that is down; a launch waits as long as any request.
DRY_RUN_PROBE_TIMEOUT = (3.0, 5.0)


class WontFit(ConfigError):
    """A launch refused because the trainer or a server clearly cannot fit its GPUs' memory.

    Nothing was created. ``issues`` carry the breakdown and the changes that would fit;
    ``estimate`` is the whole :class:`~cw_cli.estimate.from_config.RunEstimate`. ``force=True``
    (``--force``) launches anyway.
    """

    def __init__(self, estimate: RunEstimate, run_name: str, command: str) -> None:
        self.estimate = estimate
        issues = refusal_lines(estimate)
        super().__init__(
            issues,
            hint=f"make one of the changes above (`{command}` with the launch's options shows the whole estimate), "
            "or launch anyway with --force",
        )
        self.message = f"run {run_name} would run out of GPU memory: {estimate.summary().removeprefix('memory estimate: ')}"
        self.args = (self.message,)


def refusal_lines(estimate: RunEstimate) -> list[str]:
    """The breakdown of each role that does not fit, then the suggestions that fit."""
    from cw_cli.estimate.vllm import GIB

    est = estimate.estimate
    lines: list[str] = []
    if est is None or estimate.verdict is None:
        return [estimate.summary()]
    for role in estimate.verdict.roles:  # against the GPU itself, not the refusal's band
        if role.fits or role.role not in estimate.roles:
            continue
        if role.role == TRAINER:
            t = est.trainer
            terms = [("weights", t.weights_bytes), ("gradients", t.gradients_bytes),
                     ("optimizer states", t.optimizer_states_bytes), ("master weights", t.master_weights_bytes),
                     ("gathered layers", t.gathered_weights_bytes), ("weight copies", t.weight_copies_bytes),
                     ("activations", t.activations_bytes), ("logits", t.logits_bytes),
                     ("reference model", t.reference_model_bytes), ("generation", t.generation_bytes),
                     ("overhead", t.overhead_bytes), ("colocated vLLM", t.colocated_vllm_bytes)]  # fmt: skip
            shown = ", ".join(f"{name} {value / GIB:.1f}" for name, value in terms if value)
            lines.append(f"trainer needs {role.required_bytes / GIB:.1f} GiB per GPU of {role.available_bytes / GIB:.1f} "
                         f"({role.reason}; peak at {t.peak_phase}): {shown} GiB")
        else:
            lines.append(f"vLLM needs {role.required_bytes / GIB:.1f} GiB per GPU of {role.available_bytes / GIB:.1f} "
                         f"({role.reason})")
    for suggestion, changes in zip(estimate.suggestions[:4], estimate.changes):
        how = f": {'; '.join(changes)}" if changes else ""
        lines.append(f"fits with: {suggestion.description} -> {suggestion.per_gpu_bytes / GIB:.1f} GiB per GPU{how}")
    if not estimate.suggestions:
        lines.append("no single change tried (checkpointing, LoRA/QLoRA, ZeRO-3, offload, more nodes, a smaller "
                     "batch or length) makes it fit")
    return lines


def estimate_run(
    planned: PlannedRun,
    *,
    gpu_memory: str | int | None = None,
    nodes: Callable[[], list[dict[str, Any]]] | None = None,
    hub: bool = False,
    suggest: bool = True,
    allow_meta_device: bool = True,
) -> RunEstimate:
    """The memory estimate of a planned run, as ``cw estimate`` prints it (see docs/estimate.md).

    Args:
        planned: What :func:`plan` returned.
        gpu_memory: One GPU's memory (``--gpu-memory``); else the config's ``gpu_memory`` or
            ``gpu_type``, else ``nodes``.
        nodes: Lists the cluster's nodes (their GPU labels); None never asks (offline).
        hub: Allow downloading the model's config.json from the hub when it is not local.
        suggest: Compute the changes that would fit when something does not.
        allow_meta_device: Count an unknown architecture with transformers (slow).

    Raises:
        ConfigError: ``gpu_memory`` is not a memory size.
    """
    from cw_cli.estimate.from_config import estimate_run as estimate

    request = planned.request
    try:
        return estimate(
            request.framework.framework, request.training_type, request.config.native, request.config.cluster,
            request.config.path.parent, gpu_memory=gpu_memory, nodes=nodes, hub=hub, suggest=suggest,
            services_only=request.services_only, allow_meta_device=allow_meta_device,
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError([f"--gpu-memory {gpu_memory!r}: {exc}"], hint="e.g. --gpu-memory 80GB") from None


def estimate(
    config: str | Path | Mapping[str, Any] | YamlSource,
    framework: str,
    training_type: str,
    *,
    gpu: int | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    image: str | None = None,
    nodes: int | None = None,
    set: Mapping[str, Any] | list[str] | None = None,  # noqa: A002 - the CLI's --set
    registry: FrameworkRegistry | None = None,
    base_dir: Path | None = None,
    gpu_memory: str | int | None = None,
    list_nodes: Callable[[], list[dict[str, Any]]] | None = None,
    hub: bool = False,
    suggest: bool = True,
    allow_meta_device: bool = True,
) -> RunEstimate:
    """A config's memory estimate, as ``cw estimate`` prints it, without what only a launch needs.

    The config is validated as for a launch, except for what the pods alone need: a
    ``checkpoint_volume`` and the Secrets its settings need. Options are :func:`plan`'s and
    :func:`estimate_run`'s (``list_nodes`` lists the cluster's nodes; None never asks).

    Raises:
        ConfigError: Every problem of the config, or ``gpu_memory`` is not a memory size.
    """
    from cw_cli.config.loader import FlagOverrides, load_run_config
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.estimate.from_config import estimate_run as estimate_config

    loaded, kind = (registry or _registry()).resolve_type(framework, training_type)
    flags = FlagOverrides(gpu=gpu, cpu=cpu, memory=memory, image=image, nodes=nodes)
    if isinstance(config, Mapping):
        config = YamlSource(path=(base_dir or Path.cwd()) / DICT_CONFIG_NAME, data=dict(config))
    source = config if isinstance(config, YamlSource) else None
    path = config.path if isinstance(config, YamlSource) else Path(config)
    run_config = load_run_config(path, loaded.framework, kind, set_assignments(set), flags, source=source, launch=False)
    try:
        return estimate_config(
            loaded.framework, kind, run_config.native, run_config.cluster, path.parent, gpu_memory=gpu_memory,
            nodes=list_nodes, hub=hub, suggest=suggest, allow_meta_device=allow_meta_device,
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError([f"--gpu-memory {gpu_memory!r}: {exc}"], hint="e.g. --gpu-memory 80GB") from None


def _registry() -> FrameworkRegistry:
    from cw_cli.frameworks.registry import FrameworkRegistry

    return FrameworkRegistry().load_all()


def read_config(path: str | Path) -> YamlSource:
    """Read a config file once (YAML, or verifiers' TOML); :func:`plan` and :func:`plan_sweep` take the result.

    Raises:
        ConfigError: The file is missing, unreadable, not valid YAML/TOML or over a size limit.
    """
    from cw_cli.config.yaml_source import load_config_file

    return load_config_file(Path(path))


def has_sweep(config: YamlSource) -> bool:
    """Whether a config read by :func:`read_config` has a ``sweep:`` block (then it is a sweep)."""
    from cw_cli.sweep import SWEEP_KEY

    return SWEEP_KEY in config.data


def plan(
    config: str | Path | Mapping[str, Any] | YamlSource,
    framework: str,
    training_type: str,
    *,
    name: str | None = None,
    namespace: str | None = None,
    gpu: int | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    image: str | None = None,
    nodes: int | None = None,
    pull: bool | None = None,
    set: Mapping[str, Any] | list[str] | None = None,  # noqa: A002 - the CLI's --set
    services: bool = False,
    ttl: str | None = None,
    timeout: float | None = None,
    resume: bool = False,
    local: bool = False,
    registry: FrameworkRegistry | None = None,
    connect: Callable[[], Kube] | None = None,
    if_reachable: bool = False,
    base_dir: Path | None = None,
    sweep: str | None = None,
) -> PlannedRun:
    """Validate a config and render its run, as ``cw FRAMEWORK TYPE CONFIG --dry-run`` does.

    Args:
        config: A config file, the same content as a mapping, or a file already read by
            :func:`read_config`.
        framework: A framework of the registry (``trl``, ``axolotl``, ``verifiers``, a plugin).
        training_type: Its training type (``sft``, ``dpo``, ``grpo``, ...).
        name: Run name; default generated and unique.
        namespace: Written into the manifests (None leaves it to the cluster).
        gpu: GPUs per trainer node (``--gpu``).
        cpu: CPU per trainer pod (``--cpu``).
        memory: Memory per trainer pod (``--memory``).
        image: Trainer image (``--image``).
        nodes: Trainer nodes (``--nodes``).
        pull: Always pull the image (``--pull``).
        set: Overrides of any config key (``--set``): a mapping ``{"learning_rate": 2e-5}``
            (dotted keys nest) or ``["key=value", ...]``.
        services: Only the servers (``--services``; needs ``ttl``).
        ttl: The servers' lifetime with ``services``, e.g. ``"6h"``.
        timeout: Seconds the trainer waits for its servers (``--timeout``).
        resume: Continue the run folder's checkpoints under a changed config (``--resume``).
        local: Plan for a local trainer process (``--local``): the files the config names are
            used in place, and the variables a setting needs may come from this environment.
        registry: Frameworks to pick from (default: built-in and plugins).
        connect: Gives the connection: the run's workload (Job or JobSet, Kueue-queued) is
            chosen once, with what the cluster serves where the config depends on it (a
            multi-node or queued run), so the plan is what a launch there creates. Without it
            the plan is offline (``jobset: auto`` renders Jobs, with a note saying so). A bad
            config is reported before an unreachable cluster.
        if_reachable: With ``connect``: a cluster that cannot be reached (or asked) gives an
            offline plan with a note instead of an error, and the discovery reads time out
            quickly (what ``--dry-run`` does).
        base_dir: With a mapping: the folder its relative paths resolve from (default: cwd).
        sweep: The sweep the run belongs to (see :func:`plan_sweep`).

    Returns:
        The planned run.

    Raises:
        ConfigError: Every problem of the config, naming the file, the field and a fix.
    """
    from cw_cli.config.loader import FlagOverrides, load_run_config
    from cw_cli.config.quantity import MAX_DURATION_S, parse_duration
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.render.naming import generate_run_name, validate_run_name
    from cw_cli.render.plan import DEFAULT_SERVICES_TIMEOUT_S, RunRequest, build_plan

    loaded, kind = (registry or _registry()).resolve_type(framework, training_type)
    flags = FlagOverrides(gpu=gpu, cpu=cpu, memory=memory, image=image, nodes=nodes, pull=pull or None)
    host_env = os.environ if local else None  # a local trainer inherits this environment
    if isinstance(config, YamlSource):  # read once (a sweep's runs, the CLI)
        path = config.path
        run_config = load_run_config(path, loaded.framework, kind, set_assignments(set), flags, source=config, host_env=host_env)
    elif isinstance(config, Mapping):
        path = (base_dir or Path.cwd()) / DICT_CONFIG_NAME
        source = YamlSource(path=path, data=dict(config))
        run_config = load_run_config(path, loaded.framework, kind, set_assignments(set), flags, source=source, host_env=host_env)
    else:
        path = Path(config)
        run_config = load_run_config(path, loaded.framework, kind, set_assignments(set), flags, host_env=host_env)
    if timeout is not None and not (0 < timeout <= MAX_DURATION_S):
        raise ConfigError([f"--timeout {timeout:g}: expected a positive number of seconds, at most a year"],
                          hint="e.g. --timeout 3600")  # fmt: skip
    # `--name ""` is a mistake to report, not a request for a generated name.
    run_name = validate_run_name(name) if name is not None else generate_run_name(framework, kind.value, path.stem)
    facts, unreachable = _facts_for(run_config.cluster, services, local, connect, if_reachable)
    request = RunRequest(
        loaded,
        kind,
        run_config,
        run_name,
        namespace=namespace,
        services_only=services,
        local=local,
        services_lifetime_s=parse_duration(ttl, "--ttl") if ttl else None,
        services_timeout_s=int(math.ceil(timeout)) if timeout else DEFAULT_SERVICES_TIMEOUT_S,
        resume_changed_config=resume,
        facts=facts,
        sweep=sweep,
    )
    rendered = build_plan(request)  # the only rendering: the printed plan is the applied one
    if unreachable is not None:
        raise unreachable  # only now: every config problem is reported before the network's
    if connect is not None and not local and not if_reachable:
        connect()  # a launch needs it next anyway: a missing kubeconfig fails here
    return PlannedRun(rendered, request)


def _facts_for(
    cluster: ClusterSpec, services: bool, local: bool, connect: Callable[[], Kube] | None, if_reachable: bool
) -> tuple[ClusterFacts, CwError | None]:
    """What the cluster serves of what this run's workload depends on, and a deferred error.

    Returns:
        The facts (empty when nothing needs asking or there is no connection), and the
        cluster's error when it could not be asked and the caller is a launch (raised once
        the config is known to be valid).
    """
    from cw_cli.render.workload import ClusterFacts, apis_to_ask

    apis = apis_to_ask(cluster, services, local)
    if connect is None or not apis:
        return ClusterFacts(), None
    try:
        return _ask_cluster(connect(), apis, DRY_RUN_PROBE_TIMEOUT if if_reachable else None), None
    except ConfigError:
        raise  # a bad namespace is the user's, whatever the cluster
    except ClusterUnreachable as exc:
        return ClusterFacts(not_asked=exc.message), None if if_reachable else exc
    except CwError as exc:
        if not if_reachable:
            raise
        return ClusterFacts(not_asked=exc.message), None


class PlannedSweep(Struct):
    """The runs of a sweep, all planned (so all valid) before any is submitted.

    Attributes:
        name: The sweep's name (its label; each run is ``<name>-<index>``).
        runs: One planned run per point.
        points: The overrides of each run, in the same order.
    """

    name: str
    runs: list[PlannedRun]
    points: list[dict[str, Any]]

    def to_yaml(self) -> str:
        """Every run's manifests, one YAML stream."""
        return "---\n".join(run.to_yaml() for run in self.runs)


def plan_sweep(
    config: str | Path | Mapping[str, Any] | YamlSource,
    framework: str,
    training_type: str,
    *,
    sweep: list[str] | None = None,
    name: str | None = None,
    set: Mapping[str, Any] | list[str] | None = None,  # noqa: A002 - the CLI's --set
    registry: FrameworkRegistry | None = None,
    connect: Callable[[], Kube] | None = None,
    if_reachable: bool = False,
    base_dir: Path | None = None,
    **options: Any,
) -> PlannedSweep:
    """Plan every run of a sweep: the config's ``sweep:`` block and/or ``--sweep key=v1,v2`` flags.

    Each run is the config with one point's overrides applied after ``set`` (see
    :mod:`cw_cli.sweep`), named ``<sweep name>-<index>``, labelled with the sweep, writing to its
    own folder, grouped in W&B under the sweep's name. All are validated before this returns:
    one invalid point refuses the whole sweep, naming it.

    Args:
        config: A config file, a mapping or a file read by :func:`read_config` (with or without a
            ``sweep`` block).
        framework: The framework.
        training_type: Its training type.
        sweep: ``key=v1,v2,...`` grid axes over the file's (a flag replaces the file's values of
            its key).
        name: The sweep's name (default: generated, unique).
        set: Overrides common to every run.
        registry: Frameworks to pick from.
        connect: See :func:`plan` (the cluster is asked once for the whole sweep).
        if_reachable: See :func:`plan`.
        base_dir: See :func:`plan`.
        **options: Any other option of :func:`plan` (``gpu``, ``namespace``, ...).

    Raises:
        ConfigError: The sweep or one of its runs is invalid (every problem, by run).
    """
    from cw_cli import sweep as sweeps
    from cw_cli.config.yaml_source import YamlSource, load_config_file
    from cw_cli.render.naming import generate_run_name, validate_run_name

    if isinstance(config, YamlSource):
        source = config
    elif isinstance(config, Mapping):
        source = YamlSource(path=(base_dir or Path.cwd()) / DICT_CONFIG_NAME, data=dict(config))
    else:
        source = load_config_file(Path(config))
    data = dict(source.data)
    block = data.pop(sweeps.SWEEP_KEY, None)
    spec = sweeps.from_config(block, source.where((sweeps.SWEEP_KEY,))) if block is not None else None
    spec = sweeps.combine(spec, sweep or [])
    if spec is None:
        raise ConfigError([f"{source.path}: no `sweep` block and no --sweep"], hint="e.g. --sweep learning_rate=1e-5,2e-5")
    if name is not None:
        sweep_name = validate_run_name(name)
    else:
        kind = training_type
        sweep_name = generate_run_name(framework, kind, source.path.stem)[: sweeps.MAX_SWEEP_NAME].rstrip("-")
    points = sweeps.check_size(spec, sweep_name)
    stripped = YamlSource(path=source.path, data=data, lines=source.lines, yaml11_numbers=source.yaml11_numbers)
    registry = registry or _registry()
    runs: list[PlannedRun] = []
    problems: list[str] = []
    common = set_assignments(set)
    for run_name, point in zip(sweeps.run_names(sweep_name, len(points)), points):
        try:
            runs.append(
                plan(
                    stripped, framework, training_type, name=run_name, set=[*common, *set_assignments(point)],
                    registry=registry, sweep=sweep_name, connect=connect, if_reachable=True, **options,
                )
            )  # fmt: skip
        except ConfigError as exc:
            shown = ", ".join(f"{key}={value!r}" for key, value in point.items())
            problems += [f"run {run_name} ({shown}): {issue}" for issue in exc.issues]
    if problems:
        raise ConfigError(problems, hint="fix the sweep's values; no run of it was created")
    if connect is not None and not if_reachable:  # a submit follows: fail before anything is created

        for run in runs:
            if run.request.facts.not_asked:
                raise ClusterUnreachable(run.request.facts.not_asked, hint="is the cluster up? check `kubectl cluster-info`")
        connect()
    return PlannedSweep(sweep_name, runs, points)


class Export(Struct):
    """An export Job of a run (:meth:`Run.export`).

    Attributes:
        name: The export Job's name.
        run: The run it exports.
        run_dir: The run's folder on its checkpoint volume (the export lands in ``exported/``).
    """

    name: str
    run: Run
    run_dir: str

    def wait(self, timeout: float | None = None, progress: Progress = _quiet) -> str:
        """Block until the export ends.

        Returns:
            ``"Succeeded"``.

        Raises:
            RunFailed: The export failed (its log says why: ``cw logs RUN --role export``).
            WaitTimeout: Still running after ``timeout`` seconds.
        """
        from cw_cli.k8s.operations import wait_for_run

        try:
            return wait_for_run(self.run.session.kube, self.name, timeout, progress)
        except RunFailed as failed:
            raise RunFailed(f"export {self.name} failed: {failed.message.removeprefix('run failed: ')}",
                            hint=f"see its log: cw logs {self.run.name} --role export") from None  # fmt: skip


class Run(Struct):
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

    def artifacts(self) -> dict[str, Any]:
        """What the run left on its checkpoint volume: each checkpoint (step, size, time, complete or
        not, the metrics logged at its step), the final model and the exports, read in a short-lived
        pod that mounts the volume read-only.

        Raises:
            NotFound: No such run.
            ConfigError: The run kept its outputs on no volume.
        """
        from cw_cli.after_training.artifacts import read_artifacts

        return read_artifacts(self.session.kube, self.name)

    def download(
        self, dest: str | Path, *, checkpoint: str = "final", started: Callable[[int, int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Copy the final model, a checkpoint or an export of the run to ``dest`` on this machine,
        through the API server; verified file by file, and going on where an interrupted call stopped.

        Args:
            dest: A new or empty folder (or one an earlier call of the same download started).
            checkpoint: ``final``, ``latest`` (the newest complete checkpoint), a step number or
                ``export:NAME`` (a folder of ``RUN/exported``).
            started: Called with the total bytes and those already there.
            progress: Called with each chunk's size as it is written.

        Raises:
            NotFound: No such run, or its volume is gone.
            ConfigError: Nothing of that name, or a checkpoint still being written.
            Conflict: ``dest`` holds other files.
        """
        from cw_cli.after_training.download import check_destination, download

        check_destination(Path(dest))  # a bad destination is the user's (exit 2), before the cluster is asked
        return download(self.session.kube, self.name, str(checkpoint), Path(dest).expanduser(),
                        started or (lambda total, have: None), progress or (lambda size: None))  # fmt: skip

    def serve(self, *, checkpoint: str = "final", ttl: str = "2h", gpu: int = 1) -> str:
        """Start a vLLM server on the run's model (``checkpoint`` as for :meth:`download`) that the
        kubelet ends after ``ttl``; returns the server pod's name (its Service has the same).

        Raises:
            NotFound: No such run, or its volume is gone.
            ConfigError: No such model, a bad ``ttl`` or ``gpu``.
            Conflict: The run's server is up already.
        """
        from cw_cli.after_training.serving import start_server
        from cw_cli.config.quantity import parse_duration

        if not 0 <= gpu <= 64:
            raise ConfigError([f"--gpu {gpu}: expected 0 to 64"])
        return start_server(self.session.kube, self.name, str(checkpoint), parse_duration(ttl, "--ttl"), gpu)

    def server_manifests(self, *, checkpoint: str = "final", ttl: str = "2h", gpu: int = 1) -> list[dict[str, Any]]:
        """The server Pod and Service :meth:`serve` would create (``cw serve --dry-run``), created
        nowhere; what the run left is read in a reader pod, as :meth:`artifacts` does.

        Raises:
            NotFound: No such run, or its volume is gone.
            ConfigError: No such model, an adapter the server cannot load, a bad ``ttl`` or ``gpu``.
        """
        from cw_cli.after_training.serving import server_manifests
        from cw_cli.config.quantity import parse_duration

        if not 0 <= gpu <= 64:
            raise ConfigError([f"--gpu {gpu}: expected 0 to 64"])
        lifetime = parse_duration(ttl, "--ttl")
        return server_manifests(self.session.kube, self.name, str(checkpoint), lifetime, gpu)

    def try_(self, question: str, *, checkpoint: str = "final", gpu: int = 1, max_tokens: int = 256,
             timeout: float = 900, progress: Progress = _quiet) -> str:  # fmt: skip
        """Ask the run's model one question through its chat template: a server is started on it,
        asked through a port-forward of the API server, and stopped, whatever happens.

        Returns:
            The model's answer.
        """
        from cw_cli.after_training.serving import ask, stop_server, wait_ready

        if not question.strip():
            raise ConfigError(["the question is empty"], hint='cw try RUN "What is 2 + 2?"')
        name = self.serve(checkpoint=checkpoint, ttl=f"{int(timeout) + 600}s", gpu=gpu)
        try:
            progress(f"server {name} started; waiting until it is Ready")
            wait_ready(self.session.kube, name, timeout)
            progress(f"asking {name} through a port-forward")
            return ask(self.session.kube, name, self.name, question, max_tokens)
        finally:
            stop_server(self.session.kube, name)

    def forward(
        self, local_port: int = 8000, *, timeout: float = 900, stop: threading.Event | None = None,
        progress: Progress = _quiet, listening: Callable[[int], None] = lambda port: None,
    ) -> None:  # fmt: skip
        """Make the run's server (started by :meth:`serve`) reachable on ``127.0.0.1:local_port``
        until ``stop`` is set, through port-forwards of the API server (one per connection, as
        ``kubectl port-forward``); waits for the server to be Ready first.

        Args:
            local_port: The local port; 0 picks a free one (``listening`` is told which).
            timeout: Seconds to wait for the server to be Ready.
            stop: Ends the forwarding (default: never; Ctrl-C ends it from the CLI).
            progress: Gets what is being waited for.
            listening: Called with the port once connections are accepted.

        Raises:
            WaitTimeout: The server is not Ready in time (or it ended).
            CwError: The local port is taken.
        """
        import threading

        from cw_cli.after_training.serving import forward, wait_ready

        name = f"{self.name}-{SERVE}"
        progress(f"waiting until server {name} is Ready")
        wait_ready(self.session.kube, name, timeout)
        forward(self.session.kube, name, local_port, stop or threading.Event(), listening)

    def export(
        self, *, checkpoint: str = "final", merge: bool = False, push_to_hub: str | None = None, private: bool = False,
        overwrite: bool = False, gpu: int = 0, cpu: str = "8", memory: str = "64Gi", to: str | None = None,
        secrets: Sequence[str] = (),
    ) -> Export:  # fmt: skip
        """Start a Job that turns a checkpoint of the run into a model ready to use, on its volume.

        Args:
            checkpoint: ``final`` (the model saved at the end; the run must have succeeded),
                ``latest`` (its newest complete checkpoint) or a step number.
            merge: Merge a LoRA adapter into its base model.
            push_to_hub: Also upload it to this Hub repository (with the run's ``HF_TOKEN``).
            private: Create that repository private.
            overwrite: Replace an earlier export of the same checkpoint and form.
            gpu: GPUs for the export pod (merging is CPU work by default).
            cpu: Its CPU request and limit.
            memory: Its memory request and limit (a merge holds the base model in memory).
            to: Also copy it to object storage (``s3://BUCKET/PATH``, ``gs://``, ``az://``) from the pod.
            secrets: ``VAR=SECRET[:KEY]``: environment variables of the export pod taken from Secrets
                (the upload's credentials, e.g. ``AWS_SECRET_ACCESS_KEY=s3-credentials``).

        Returns:
            The export, to wait for (``RUN/exported/<final|checkpoint-N>[-merged]`` on the volume).

        Raises:
            ConfigError: A bad choice, outputs on no volume, ``final`` before the run succeeded, or
                what the run's folder lacks for the choice (read in a reader pod first).
            NotFound: No such run.
            Conflict: The same export exists already.
        """
        from cw_cli.after_training.export import create_export, export_facts
        from cw_cli.config.quantity import MIN_CPU, MIN_MEMORY, normalize_quantity
        from cw_cli.render.export import ExportChoice, check_choice, listing_problems

        try:
            cpu, memory = normalize_quantity(cpu, MIN_CPU, "cpu"), normalize_quantity(memory, MIN_MEMORY, "memory")
        except ValueError as exc:
            raise ConfigError([f"--cpu/--memory: {exc}"]) from None
        choice = ExportChoice(checkpoint=str(checkpoint), merge=merge, push_to_hub=push_to_hub, private=private,
                              overwrite=overwrite, gpu=gpu, cpu=cpu, memory=memory, to=to, secrets=tuple(secrets))  # fmt: skip
        problems = check_choice(choice)
        if problems:
            raise ConfigError(problems, hint="cw export --help")
        facts = export_facts(self.session.kube, self.name, choice)
        problems = listing_problems(choice, self.artifacts())  # what the Job would fail on, before it exists
        if problems:
            raise ConfigError(problems, hint=f"`cw artifacts {self.name}` lists what the run left")
        return Export(create_export(self.session.kube, facts, choice), self, facts.run_dir)

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
        self, config: str | Path | Mapping[str, Any] | YamlSource, framework: str, training_type: str, **options: Any
    ) -> PlannedRun:
        """:func:`plan` with this session's registry and the cluster's facts (see there for options)."""
        return plan(config, framework, training_type, registry=self.registry, connect=lambda: self.kube, **options)

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
        if planned.request.local:
            return estimate_run(planned, gpu_memory=gpu_memory, suggest=False, allow_meta_device=False)
        result = estimate_run(planned, gpu_memory=gpu_memory, nodes=self.nodes, suggest=False, allow_meta_device=False)
        if result.clearly_too_big and not force and not dry_run:
            result = estimate_run(planned, gpu_memory=gpu_memory, nodes=self.nodes, allow_meta_device=False)
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

        A plan made offline whose workload depends on the cluster (a multi-node or queued run)
        is made again with the cluster's facts first (it may become a JobSet), and ``progress``
        says so; plan with :meth:`plan` to submit exactly what was printed.

        Args:
            planned: The run.
            server_dry_run: The API server validates everything and persists nothing.
            progress: Gets each step.
            check_memory: Run :meth:`check_memory` first: refuse a run that clearly cannot fit
                its GPUs (a server dry run only reports). The CLI's launches do.
            force: With ``check_memory``, report but never refuse (``--force``).
            gpu_memory: One GPU's memory for the check (``--gpu-memory``).

        Raises:
            WontFit: ``check_memory`` and the run clearly cannot fit (nothing was created).
            Conflict: A run of that name exists (nothing was created).
            NotFound: The namespace, a Secret or a claim the run names is missing.
            Interrupted: Ctrl-C or a termination signal; what was created is removed.
            CwError: Any other failure, after removing what was created.
        """
        from msgspec.structs import replace

        from cw_cli.k8s.submit import launch
        from cw_cli.render.plan import build_plan

        if check_memory:
            self.check_memory(planned, gpu_memory=gpu_memory, force=force, dry_run=server_dry_run, progress=progress)
        if not planned.cluster_facts:  # planned offline (api.plan without a connection): plan with the facts
            asked = _ask_cluster(self.kube, _unasked(planned.request))
            request = replace(planned.request, facts=replace(asked, served={**planned.request.facts.served, **asked.served}))
            planned = PlannedRun(build_plan(request), request)
            progress(f"planned again with what the cluster serves: a {planned.plan.owner_kind}")
        result = launch(
            self.kube,
            planned.plan,
            server_dry_run=server_dry_run,
            services_timeout_s=planned.request.services_timeout_s,
            progress=progress,
        )
        return Run(planned.name, self, planned.plan.owner_kind, result, planned.plan)

    def plan_sweep(
        self, config: str | Path | Mapping[str, Any] | YamlSource, framework: str, training_type: str, **options: Any
    ) -> PlannedSweep:
        """:func:`plan_sweep` with this session's registry and connection."""
        return plan_sweep(config, framework, training_type, registry=self.registry, connect=lambda: self.kube, **options)

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
        from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait


        total = len(planned.runs)
        self.kube  # noqa: B018 - connect once, before the threads share the connection pool
        if check_memory:
            said: set[str] = set()

            def once(line: str) -> None:  # runs that differ only in, say, the learning rate say it once
                if line not in said:
                    said.add(line)
                    progress(line)

            for run in planned.runs:  # every run before any is created; one node list for all
                self.check_memory(run, gpu_memory=gpu_memory, force=force, progress=once)

        from cw_cli.k8s.queries import sequential_reads

        def create(index: int, run: PlannedRun) -> tuple[Run, bool]:
            try:
                with sequential_reads():  # the runs already go in parallel
                    made = self.submit(run)
            except Conflict:
                if not resume:
                    raise
                progress(f"[{index}/{total}] {run.name} exists: kept")
                return self.run(run.name), False
            progress(f"[{index}/{total}] created {run.name}")
            return made, True

        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            futures = [pool.submit(create, index, run) for index, run in enumerate(planned.runs, 1)]
            try:
                done, pending = wait(futures, return_when=FIRST_EXCEPTION)
                failure = next((f.exception() for f in futures if f.done() and f.exception()), None)
            except KeyboardInterrupt as exc:
                failure = exc
            if failure is not None:
                for future in futures:
                    future.cancel()
                wait(futures)  # let the runs being created finish (or roll themselves back)
        created = [f.result()[0] for f in futures if not f.cancelled() and not f.exception() and f.result()[1]]
        if failure is None:
            return [f.result()[0] for f in futures]
        if resume and not isinstance(failure, KeyboardInterrupt):
            raise failure
        left = []
        for made in reversed(created):
            try:
                made.delete()
            except CwError:
                left.append(made.name)
        note = f"removed the sweep's {len(created)} run(s) it had created" if not left else (
            f"could not remove: {', '.join(left)}"
        )  # fmt: skip
        if isinstance(failure, KeyboardInterrupt):
            raise Interrupted(f"interrupted; {note}") from None
        if isinstance(failure, CwError):
            failure.hint = f"{failure.hint}; {note}" if failure.hint else f"{note}; --resume-sweep keeps what was created instead"
        raise failure

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
