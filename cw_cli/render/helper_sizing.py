"""How big an after-training pod (export, evaluation, server) asks to be when the user gives no size.

cw's defaults are sized for a GPU cluster's nodes (a merge holds the base model: 64Gi). A pod that
asks for more than the run's own trainer asked for may fit on no node where the run fitted (the
test cluster's real node has 2 cores), while the trainer held the same model and more (optimizer
state, activations). So each default is capped at the trainer's request; a size the user names is
taken as given.
"""

from __future__ import annotations

from typing import Any

from cw_cli.config.quantity import parse_quantity


def capped(default: str, trainer: Any) -> str:
    """``default``, or the trainer's request where that is a valid quantity and smaller."""
    try:
        if trainer is not None and parse_quantity(trainer) < parse_quantity(default):
            return str(trainer)
    except ValueError:  # an odd value in someone's manifest: keep cw's default
        pass
    return default


def fit_to_trainer(cpu: str, memory: str, trainer_requests: dict[str, Any]) -> tuple[str, str]:
    """(cpu, memory) of a helper pod: cw's defaults capped at the trainer container's requests.

    Args:
        cpu: cw's default CPU for this kind of pod.
        memory: cw's default memory.
        trainer_requests: The trainer container's ``resources.requests`` (or limits where it set no requests).
    """
    return capped(cpu, trainer_requests.get("cpu")), capped(memory, trainer_requests.get("memory"))


def requests_of(container: dict[str, Any]) -> dict[str, Any]:
    """What a container asked for: its requests, else its limits (Kubernetes' own default)."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
