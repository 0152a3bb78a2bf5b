"""Why a run died (or is stuck), in plain words, with the fix and the log lines that show it.

The explainers live by what they read: :mod:`~cw_cli.diagnosis.pods` (pods and containers),
:mod:`~cw_cli.diagnosis.logs` (log tails), :mod:`~cw_cli.diagnosis.owners` (a failed Job or
JobSet, each named by its workload strategy); this module puts their answers in order.

Pure functions: pod, Job and JobSet dicts as the API server returns them, plus log tails the
caller read (through the API server), in; a list of :class:`Explanation` out. Nothing here
talks to the cluster or prints.

The texts matched in logs are the real ones: torch's ``torch.OutOfMemoryError: CUDA out of
memory. Tried to allocate ...`` (c10/cuda/CUDACachingAllocator.cpp), ProcessGroupNCCL's
``Watchdog caught collective operation timeout: WorkNCCL(...) ran for ... milliseconds before
timing out.``, huggingface_hub's ``401 Client Error. ... Repository Not Found for url`` and
``GatedRepoError`` / ``Cannot access gated repo for url`` (utils/_http.py), transformers'
``You are trying to access a gated repo``; on the Kubernetes side the kubelet's reasons
(``OOMKilled``, ``ImagePullBackOff``, ``CrashLoopBackOff``, ``Evicted``), the ``DisruptionTarget``
pod condition and the Job controller's ``BackoffLimitExceeded`` / ``DeadlineExceeded`` /
``PodFailurePolicy`` and JobSet's ``ReachedMaxRestarts``.

What only a framework knows comes from the framework the run's ``app.kubernetes.io/name`` label
names (:func:`cw_cli.frameworks.registry.framework_named`, loaded only when a log or a deadline
is explained): its keys in the advice (``BaseTrainingFramework.words``: Axolotl's CUDA-OOM fix
says ``micro_batch_size``, not TRL's ``per_device_train_batch_size``) and the failures its
trainer's log shows (``BaseTrainingFramework.failure_hints``). A framework that declares no
words gets the advice in plain words.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cw_cli.diagnosis.explanation import PRIORITY, Explanation, FrameworkLookup, framework_of
from cw_cli.diagnosis.logs import explain_log
from cw_cli.diagnosis.pods import PREEMPTED_FIX, explain_pod, log_requests, preemption_events

__all__ = [
    "PREEMPTED_FIX",
    "Explanation",
    "diagnose",
    "explain_log",
    "explain_owner",
    "explain_pod",
    "framework_of",
    "log_requests",
    "preemption_events",
    "summary",
]


def explain_owner(kind: str, obj: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
    """Why a run's owner (a trainer Job, a JobSet) failed, as its workload strategy explains it
    (empty when it has not failed).

    Args:
        kind: The owner's kind (``Job``, ``JobSet``).
        obj: The object, as the API server returns it.
        frameworks: Finds the framework its label names (default :func:`framework_of`).
    """
    from cw_cli.render.workload import owner_kind

    return owner_kind(kind).failure(obj, frameworks)


def diagnose(
    owners: list[tuple[str, dict[str, Any]]],
    pods: list[dict[str, Any]],
    logs: dict[tuple[str, str], list[str]] | None = None,
    now: datetime | None = None,
    frameworks: FrameworkLookup | None = None,
) -> list[Explanation]:
    """Every explanation of a run, most telling first, one per cause and container role.

    Args:
        owners: (kind, object) of the run's Job(s) and JobSet.
        pods: The run's pods (any order; the newest pod's explanation wins a tie).
        logs: (pod name, container) -> log tail.
        now: The current time.
        frameworks: Finds the framework the objects' label names (default :func:`framework_of`).
    """
    logs = logs or {}
    found: list[Explanation] = []
    newest_first = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
    for pod in newest_first:
        pod_name = (pod.get("metadata") or {}).get("name", "")
        pod_logs = {container: lines for (p, container), lines in logs.items() if p == pod_name}
        found += explain_pod(pod, pod_logs, now, frameworks)
    for kind, obj in owners:
        found += explain_owner(kind, obj, frameworks)
    seen: set[tuple[str, str | None, str]] = set()
    unique = []
    for explanation in found:
        key = (explanation.kind, explanation.container, explanation.summary)
        if key not in seen:
            seen.add(key)
            unique.append(explanation)
    rank = {kind: i for i, kind in enumerate(PRIORITY)}
    # a framework's own cause explains a failed container better than its exit code does
    framework_cause = rank["exit-code"] - 0.5
    return sorted(unique, key=lambda e: rank.get(e.kind, framework_cause))


def summary(explanations: list[Explanation]) -> str | None:
    """The few words of the most telling explanation, for `cw list` (None when there is none)."""
    return explanations[0].summary if explanations else None
