"""How many times a run's trainer started again, from the objects `cw status` and `cw list`
already read (no extra request): a JobSet counts its gang restarts (``status.restarts``); a Job
keeps the trainer pods it replaced (a stall or crash it retried, a warned stop or disruption its
``podFailurePolicy`` ignored), and a container restarted in place counts its ``restartCount``.

Pure: owner and pod dicts in, a count out.
"""

from __future__ import annotations

from typing import Any

from cw_cli.labels import COMPLETION_INDEX_ANNOTATION, COMPONENT_LABEL, TRAINER


def _rank_zero_trainers(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trainer pods of rank 0 (a single-node run's only rank): one per start of the trainer."""
    return [
        p for p in pods
        if (p["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == TRAINER
        and (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION, "0") == "0"
    ]  # fmt: skip


def _in_place(pod: dict[str, Any]) -> int:
    """Restarts of the trainer container inside its pod (0 under ``restartPolicy: Never``)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if s.get("name") == TRAINER)


def job_restarts(job: dict[str, Any], pods: list[dict[str, Any]] | None) -> int:
    """Times a Job's trainer started again.

    Args:
        job: The trainer Job.
        pods: The run's pods as the cluster still has them (None: not read, as `cw list` reads
            none of a finished run's).

    Returns:
        With the pods: the rank-0 trainer pods beyond the first, plus in-place container restarts.
        Without: the failures the Job counted (``status.failed`` per completion index), which
        leave out the restarts its ``podFailurePolicy`` ignored (a warned stop, a disruption).
    """
    if pods is not None:
        trainers = _rank_zero_trainers(pods)
        return max(0, len(trainers) - 1) + sum(_in_place(p) for p in trainers)
    status, spec = job.get("status") or {}, job.get("spec") or {}
    try:
        return int(status.get("failed") or 0) // max(1, int(spec.get("completions") or 1))
    except (TypeError, ValueError):
        return 0


def run_restarts(owners: list[dict[str, Any]], pods: list[dict[str, Any]] | None, counted: int | None) -> int | None:
    """A run's restarts: ``counted`` where its owner counts them itself (a JobSet's gang restarts),
    else those of its owner that counts none (its trainer Job: :func:`job_restarts`); None for a
    run without an owner (services only)."""
    if counted is not None:
        return counted
    return job_restarts(owners[0], pods) if owners else None
