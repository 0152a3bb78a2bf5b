"""Planning a run: a config (file, mapping or already read) validated and rendered into a
:class:`PlannedRun`, with what the cluster serves where the run's workload depends on it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.errors import ClusterUnreachable, ConfigError, CwError

if TYPE_CHECKING:  # the kubernetes-backed modules load only when a call needs the cluster
    from cw_cli.client.connection import Kube
    from cw_cli.config.models import ClusterSpec
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.render.plan import Plan, RunRequest
    from cw_cli.render.workload import ClusterFacts

Progress = Callable[[str], None]
#: A config given as a mapping is read as if it were a file in this folder (relative paths in it,
#: e.g. ``files:``, resolve from there); messages name it like this.
DICT_CONFIG_NAME = "<config mapping>"
#: Runs of a sweep created at once: enough to hide request latency, few enough for the API

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
