"""The run as one trainer Job (``<run>-trainer``, indexed over its nodes) with its servers as
Deployments that cw's keeper stops when the trainer ends; and servers only (``--services``), owned
by the run's ConfigMap. See :mod:`cw_cli.render.workloads.base` for the contract."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from cw_cli.labels import KUEUE_QUEUE_LABEL, TRAINER, object_names
from cw_cli.render.workloads.base import Layout, Parts, WorkloadKind, kept_layout, pod_gpus, suspended_state, true_conditions

if TYPE_CHECKING:
    from cw_cli.diagnosis.explanation import Explanation, FrameworkLookup


class JobOwner(WorkloadKind):
    """A run whose trainer is one (indexed) Job, `<run>-trainer`; servers are Deployments."""

    kind = "Job"

    def master_address(self, run_name: str, names: dict[str, str]) -> str:
        # The indexed Job's pods are named <job>-<index> under the run's headless Service.
        return f"{names[TRAINER]}-0.{names['nodes']}"

    def trainer_labels(self, labels: dict[str, str], queue: str | None) -> dict[str, str]:
        return {**labels, KUEUE_QUEUE_LABEL: queue} if queue else dict(labels)

    def layout(self, parts: Parts) -> Layout:
        return kept_layout(parts, self.name(parts.run_name) if parts.trainer is not None else None)

    def name(self, run_name: str) -> str:
        return object_names(run_name)[TRAINER]

    def state(self, owner: dict[str, Any], now: datetime | None = None) -> str:
        conditions = true_conditions(owner)
        if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
            return "Succeeded"
        if "Failed" in conditions or "FailureTarget" in conditions:
            return "Failed"
        if (owner.get("spec") or {}).get("suspend"):
            return suspended_state(owner, now)
        status = owner.get("status") or {}
        if status.get("active"):
            return "Running" if status.get("ready", 0) else "Pending"
        return "Pending"

    def templates(self, owner: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [(TRAINER, owner["spec"]["template"])]

    def gpus(self, owner: dict[str, Any]) -> int:
        spec = owner.get("spec") or {}
        return pod_gpus(spec["template"]["spec"]) * int(spec.get("parallelism", 1) or 1)

    def failure(self, owner: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
        from cw_cli.diagnosis.owners import job_failure

        return job_failure(owner, frameworks)


class ServersOnly(WorkloadKind):
    """``--services``: no trainer; the run's ConfigMap owns the servers, which stop at their lifetime."""

    kind = "ConfigMap"

    def layout(self, parts: Parts) -> Layout:
        return kept_layout(parts, None)
