"""The memory estimate of a run before it is launched, and the refusal of one that cannot fit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli.api.planning import DICT_CONFIG_NAME, PlannedRun, _registry, set_assignments
from cw_cli.errors import ConfigError
from cw_cli.labels import TRAINER

if TYPE_CHECKING:
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.estimate.from_config import RunEstimate
    from cw_cli.frameworks.registry import FrameworkRegistry


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
