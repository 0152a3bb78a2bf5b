"""A launch's options, written once: the flags of ``cw FRAMEWORK TYPE`` and ``cw estimate``, the
keywords of :func:`cw_cli.api.plan`, :func:`cw_cli.api.plan_sweep` and :func:`cw_cli.api.estimate`,
and what :func:`cw_cli.estimate.from_config.estimate_run` is asked.

The CLI maps its flags into these structures (``cw_cli/cli/options.py`` has the click option of
each field, ``LAUNCH_FLAGS``, and builds both commands from it), the API takes them (or the
same names as keywords), and the estimate takes :class:`EstimateOptions`: a new launch option
is added here and given its flag there (tests/unit/test_one_set_of_launch_options.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct, structs

from cw_cli.errors import ConfigError

#: The launch flags that override the cluster field of the same name (precedence: flags last).
CLUSTER_FLAGS = ("gpu", "cpu", "memory", "image", "nodes", "pull")


class LaunchOptions(Struct, frozen=True, kw_only=True):
    """What a launch may set besides the config (each field is the flag of the same name).

    Attributes:
        name: Run name (``--name``; default generated and unique; a sweep's name for a sweep).
        namespace: Written into the manifests (``--namespace``; None leaves it to the cluster).
        services: Only the servers (``--services``; needs ``ttl``).
        ttl: The servers' lifetime with ``services``, e.g. ``"6h"``.
        gpu: GPUs per trainer node (``--gpu``).
        cpu: CPU per trainer pod (``--cpu``).
        pull: Always pull the image (``--pull``).
        memory: Memory per trainer pod (``--memory``).
        image: Trainer image (``--image``).
        nodes: Trainer nodes (``--nodes``).
        set: Overrides of any config key (``--set``): a mapping ``{"learning_rate": 2e-5}``
            (dotted keys nest) or ``["key=value", ...]``.
        timeout: Seconds the trainer waits for its servers (``--timeout``).
        resume: Continue the run folder's checkpoints under a changed config (``--resume``).
        local: Plan for a local trainer process (``--local``): the files the config names are
            used in place, and the variables a setting needs may come from this environment.
    """

    name: str | None = None
    namespace: str | None = None
    services: bool = False
    ttl: str | None = None
    gpu: int | None = None
    cpu: str | None = None
    pull: bool = False
    memory: str | None = None
    image: str | None = None
    nodes: int | None = None
    set: Mapping[str, Any] | Sequence[str] | None = None
    timeout: float | None = None
    resume: bool = False
    local: bool = False

    def cluster_overrides(self) -> dict[str, Any]:
        """The flags given that set a cluster field of the same name, applied over the config."""
        given = {name: getattr(self, name) for name in CLUSTER_FLAGS}
        return {name: value for name, value in given.items() if value is not None and value is not False}

    def assignments(self) -> list[str]:
        """``set`` as ``--set`` assignments (see :func:`set_assignments`)."""
        return set_assignments(self.set)

    def with_(self, **changes: Any) -> LaunchOptions:
        """A copy with ``changes`` (field names; unknown ones raise ``TypeError``)."""
        return structs.replace(self, **changes) if changes else self


class EstimateOptions(Struct, frozen=True, kw_only=True):
    """How a run's memory is estimated (``cw estimate``'s flags, and the pre-launch check's choices).

    Attributes:
        gpu_memory: One GPU's memory (``--gpu-memory``); else the config's ``gpu_memory`` or
            ``gpu_type``, else the nodes' labels.
        hub: Allow downloading the model's config.json from the hub when it is not local (``--hub``).
        suggest: Compute the changes that would fit when something does not (~50 ms).
        allow_meta_device: Count an unknown architecture with transformers on the meta device
            (seconds); the launch path passes False and skips instead.
    """

    gpu_memory: str | int | None = None
    hub: bool = False
    suggest: bool = True
    allow_meta_device: bool = True

    def with_(self, **changes: Any) -> EstimateOptions:
        """A copy with ``changes`` (field names; unknown ones raise ``TypeError``)."""
        return structs.replace(self, **changes) if changes else self


#: The fields of :class:`LaunchOptions` that size and place a run: ``cw estimate`` takes these
#: flags as a launch does (a run is estimated as it would be launched).
SIZING_FIELDS = ("gpu", "cpu", "memory", "image", "nodes", "name", "pull", "set", "namespace")
#: The other fields: only a launch has them.
LAUNCH_ONLY_FIELDS = ("services", "ttl", "timeout", "resume", "local")


def launch_options(options: LaunchOptions | None, changes: Mapping[str, Any]) -> LaunchOptions:
    """``options`` (default: none set) with ``changes``, the API's keyword form of the same fields.

    Raises:
        TypeError: A keyword that is no launch option (the message names it).
    """
    return (options or LaunchOptions()).with_(**changes)


def split_options(
    options: LaunchOptions | None, estimate: EstimateOptions | None, changes: Mapping[str, Any]
) -> tuple[LaunchOptions, EstimateOptions]:
    """Keyword options sorted into a launch's and an estimate's (``api.estimate(..., gpu=2, gpu_memory="80GB")``).

    Raises:
        TypeError: A keyword that is neither.
    """
    estimating = set(EstimateOptions.__struct_fields__)
    launch = {key: value for key, value in changes.items() if key not in estimating}
    how = {key: value for key, value in changes.items() if key in estimating}
    return launch_options(options, launch), (estimate or EstimateOptions()).with_(**how)


def set_assignments(values: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    """``--set`` assignments from a mapping (dotted keys nest; values keep their types) or a list.

    Raises:
        ConfigError: A mapping key that is no config key (``"a=b"``, ``""``, ``3``).
    """
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
