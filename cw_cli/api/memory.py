"""The memory estimate of a run before it is launched, and the refusal of one that cannot fit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli.api.planning import PlannedRun, _registry, load_config
from cw_cli.config.options import EstimateOptions, LaunchOptions, split_options
from cw_cli.errors import ConfigError
from cw_cli.labels import TRAINER

if TYPE_CHECKING:
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.estimate.describes_training import DescribesTraining
    from cw_cli.estimate.from_config import RunEstimate
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.types import RunConfig, TrainingType


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
    options: EstimateOptions | None = None,
    *,
    nodes: Callable[[], list[dict[str, Any]]] | None = None,
    **choices: Any,
) -> RunEstimate:
    """The memory estimate of a planned run, as ``cw estimate`` prints it (see docs/estimate.md).

    Args:
        planned: What :func:`~cw_cli.api.plan` returned.
        options: How to estimate (:class:`~cw_cli.config.options.EstimateOptions`: ``gpu_memory``,
            ``hub``, ``suggest``, ``allow_meta_device``).
        nodes: Lists the cluster's nodes (their GPU labels); None never asks (offline).
        **choices: Fields of ``options`` as keywords (``gpu_memory="80GB"``), over ``options``.

    Raises:
        ConfigError: ``gpu_memory`` is not a memory size.
    """
    request = planned.request
    how = (options or EstimateOptions()).with_(**choices)
    return _estimate(request.framework.framework, request.training_type, request.config, how, nodes,
                     services_only=request.services_only)  # fmt: skip


def estimate(
    config: str | Path | Mapping[str, Any] | YamlSource, framework: str, training_type: str,
    options: LaunchOptions | None = None, how: EstimateOptions | None = None, *,
    registry: FrameworkRegistry | None = None, base_dir: Path | None = None,
    list_nodes: Callable[[], list[dict[str, Any]]] | None = None, **flags: Any,
) -> RunEstimate:  # fmt: skip
    """A config's memory estimate, as ``cw estimate`` prints it, without what only a launch needs.

    The config is validated as for a launch, except for what the pods alone need: a
    ``checkpoint_volume`` and the Secrets its settings need.

    Args:
        config: As for :func:`~cw_cli.api.plan`.
        framework: The framework.
        training_type: Its training type.
        options: The launch's options, as for :func:`~cw_cli.api.plan` (its sizing fields count).
        how: How to estimate, as for :func:`estimate_run`.
        registry: Frameworks to pick from.
        base_dir: As for :func:`~cw_cli.api.plan`.
        list_nodes: Lists the cluster's nodes; None never asks.
        **flags: Fields of ``options`` or ``how`` as keywords (``gpu=2, gpu_memory="80GB"``).

    Raises:
        ConfigError: Every problem of the config, or ``gpu_memory`` is not a memory size.
    """
    options, how = split_options(options, how, flags)
    loaded, kind = (registry or _registry()).resolve_type(framework, training_type)
    run_config = load_config(config, loaded, kind, options, base_dir, launch=False)
    return _estimate(loaded.framework, kind, run_config, how, list_nodes, services_only=False)


def _estimate(
    framework: DescribesTraining, kind: TrainingType, run_config: RunConfig, how: EstimateOptions,
    nodes: Callable[[], list[dict[str, Any]]] | None, *, services_only: bool,
) -> RunEstimate:  # fmt: skip
    from cw_cli.estimate.from_config import estimate_run as estimate_config

    try:
        return estimate_config(framework, kind, run_config.native, run_config.cluster, run_config.path.parent, how,
                               nodes=nodes, services_only=services_only)  # fmt: skip
    except ValueError as exc:
        raise ConfigError([f"--gpu-memory {how.gpu_memory!r}: {exc}"], hint="e.g. --gpu-memory 80GB") from None
