"""Planning a run: a config (file, mapping or already read) validated and rendered into a
:class:`PlannedRun`, with what the cluster serves where the run's workload depends on it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct, structs

from cw_cli.config.options import LaunchOptions, launch_options
from cw_cli.errors import ClusterUnreachable, ConfigError, CwError

if TYPE_CHECKING:  # the kubernetes-backed modules load only when a call needs the cluster
    from cw_cli.client.connection import Kube
    from cw_cli.config.models import ClusterSpec
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.frameworks.registry import FrameworkRegistry, LoadedFramework
    from cw_cli.render.plan import Plan, RunRequest
    from cw_cli.render.workload import ClusterFacts
    from cw_cli.types import RunConfig, TrainingType

Progress = Callable[[str], None]
#: A config given as a mapping is read as if it were a file in this folder (relative paths in it,
#: e.g. ``files:``, resolve from there); messages name it like this.
DICT_CONFIG_NAME = "<config mapping>"

def _quiet(_: str) -> None:
    return None


class PlannedRun(Struct):
    """A rendered run, not yet on the cluster: exactly what :meth:`Session.submit` creates.

    Attributes:
        plan: The manifests and what the launch must wait for.
        request: What the plan was made from, including the cluster facts its workload was
            chosen with.
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
    options: LaunchOptions | None = None,
    *,
    registry: FrameworkRegistry | None = None,
    connect: Callable[[], Kube] | None = None,
    if_reachable: bool = False,
    base_dir: Path | None = None,
    sweep: str | None = None,
    **flags: Any,
) -> PlannedRun:
    """Validate a config and render its run, as ``cw FRAMEWORK TYPE CONFIG --dry-run`` does.

    Args:
        config: A config file, the same content as a mapping, or a file already read by
            :func:`read_config`.
        framework: A framework of the registry (``trl``, ``axolotl``, ``verifiers``, a plugin).
        training_type: Its training type (``sft``, ``dpo``, ``grpo``, ...).
        options: The launch's options (:class:`~cw_cli.config.options.LaunchOptions`: ``gpu``,
            ``nodes``, ``set``, ``name``, ``namespace``, ``services``, ...).
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
        sweep: The sweep the run belongs to (see :func:`~cw_cli.api.plan_sweep`).
        **flags: Fields of ``options`` as keywords (``gpu=4, set={"learning_rate": 2e-5}``),
            over ``options``.

    Returns:
        The planned run.

    Raises:
        ConfigError: Every problem of the config, naming the file, the field and a fix.
    """
    from cw_cli.render.naming import generate_run_name, validate_run_name
    from cw_cli.render.plan import build_plan

    options = launch_options(options, flags)
    loaded, kind = (registry or _registry()).resolve_type(framework, training_type)
    run_config = load_config(config, loaded, kind, options, base_dir)
    run_config = _resolve_run_refs(run_config, loaded, options, connect, if_reachable)
    _check_timeout(options.timeout)
    # `--name ""` is a mistake to report, not a request for a generated name.
    run_name = validate_run_name(options.name) if options.name is not None else (
        generate_run_name(framework, kind.value, run_config.path.stem))  # fmt: skip
    facts, unreachable = _facts_for(run_config.cluster, options.services, options.local, connect, if_reachable)
    request = _request(loaded, kind, run_config, run_name, options, facts, sweep)
    rendered = build_plan(request)  # the only rendering: the printed plan is the applied one
    if unreachable is not None:
        raise unreachable  # only now: every config problem is reported before the network's
    if connect is not None and not options.local and not if_reachable:
        connect()  # a launch needs it next anyway: a missing kubeconfig fails here
    return PlannedRun(rendered, request)


def config_source(config: str | Path | Mapping[str, Any] | YamlSource, base_dir: Path | None) -> tuple[Path, YamlSource | None]:
    """A config argument as (its path, what was read of it; None for a file not read yet).

    A mapping is read as if it were a file named :data:`DICT_CONFIG_NAME` in ``base_dir``.
    """
    from cw_cli.config.yaml_source import YamlSource

    if isinstance(config, YamlSource):  # read once (a sweep's runs, the CLI)
        return config.path, config
    if isinstance(config, Mapping):
        path = (base_dir or Path.cwd()) / DICT_CONFIG_NAME
        return path, YamlSource(path=path, data=dict(config))
    return Path(config), None


def load_config(
    config: str | Path | Mapping[str, Any] | YamlSource, loaded: LoadedFramework, kind: TrainingType,
    options: LaunchOptions, base_dir: Path | None, *, launch: bool = True,
) -> RunConfig:  # fmt: skip
    """The run's validated config: the file (or mapping) with ``set`` and the sizing flags applied.

    Args:
        launch: False for an estimate: a checkpoint volume and the pods' Secrets are not needed.

    Raises:
        ConfigError: Every problem of the config.
    """
    from cw_cli.config.loader import load_run_config

    path, source = config_source(config, base_dir)
    host_env = os.environ if options.local else None  # a local trainer inherits this environment
    return load_run_config(path, loaded.framework, kind, options.assignments(), options, source=source,
                           host_env=host_env, launch=launch)  # fmt: skip


def _resolve_run_refs(
    run_config: RunConfig, loaded: LoadedFramework, options: LaunchOptions, connect: Callable[[], Kube] | None,
    if_reachable: bool,
) -> RunConfig:  # fmt: skip
    """The config with its ``run:NAME`` model replaced by that run's model on the volume
    (docs/pipelines.md): resolved at launch; a dry run checks the run without reading its folder
    (no reader pod), an offline plan keeps the reference and says so.

    Raises:
        ConfigError: A malformed reference, no such run, one that did not succeed, lives on another
            volume or lacks the model named; a ``--local`` run.
    """
    from cw_cli.render.run_refs import find_refs

    refs = find_refs(run_config.path, run_config.native, loaded.framework.model_key)
    if not refs:
        return run_config
    if options.local:
        raise ConfigError([f"{run_config.path}: {refs[0].key}: {refs[0].text}: a --local run cannot start from a run on the cluster"],
                          hint="download its model first (cw download RUN DEST) and name that folder")  # fmt: skip
    notices = list(run_config.notices)
    native = dict(run_config.native)
    for ref in refs:
        try:
            if connect is None:
                raise ClusterUnreachable("no cluster connection")
            from cw_cli.after_training.run_refs import resolve_ref

            path = resolve_ref(connect(), run_config.path, ref, run_config.cluster.checkpoint_volume, look=not if_reachable)
        except ConfigError:
            raise
        except CwError as exc:
            if connect is not None and not if_reachable:
                raise
            notices.append(f"{ref.key}: {ref.text} is resolved at launch (the cluster was not asked: {exc.message})")
            continue
        native[ref.key] = path
        notices.append(f"{ref.key}: {ref.text} is {path} on volume {run_config.cluster.checkpoint_volume}"
                       + ("" if not if_reachable else " (its folder is read at launch)"))  # fmt: skip
    return structs.replace(run_config, native=native, notices=notices)


def _check_timeout(timeout: float | None) -> None:
    from cw_cli.config.quantity import MAX_DURATION_S

    if timeout is not None and not (0 < timeout <= MAX_DURATION_S):
        raise ConfigError([f"--timeout {timeout:g}: expected a positive number of seconds, at most a year"],
                          hint="e.g. --timeout 3600")  # fmt: skip


def _request(
    loaded: LoadedFramework, kind: TrainingType, run_config: RunConfig, run_name: str, options: LaunchOptions,
    facts: ClusterFacts, sweep: str | None,
) -> RunRequest:  # fmt: skip
    """What the plan is rendered from."""
    from cw_cli.config.quantity import parse_duration
    from cw_cli.render.plan import DEFAULT_SERVICES_TIMEOUT_S, RunRequest

    return RunRequest(
        loaded,
        kind,
        run_config,
        run_name,
        namespace=options.namespace,
        services_only=options.services,
        local=options.local,
        services_lifetime_s=parse_duration(options.ttl, "--ttl") if options.ttl else None,
        services_timeout_s=int(math.ceil(options.timeout)) if options.timeout else DEFAULT_SERVICES_TIMEOUT_S,
        resume_changed_config=options.resume,
        facts=facts,
        sweep=sweep,
    )


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
