"""Why a run's owner failed, from its conditions: the Job controller's ``BackoffLimitExceeded`` /
``DeadlineExceeded`` / ``PodFailurePolicy``, and JobSet's ``ReachedMaxRestarts``.

One function per owner kind; the workload strategy of that kind
(:mod:`cw_cli.render.workloads`) names its own, so nothing here asks which kind an object is.
Pure: the object in, :class:`Explanation` out.
"""

from __future__ import annotations

import re
from typing import Any

from cw_cli.diagnosis.explanation import Explanation, FrameworkLookup, duration, framework_in
from cw_cli.frameworks.words import shorter_run


def _failed_condition(obj: dict[str, Any], types: tuple[str, ...]) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") in types and condition.get("status") == "True":
            return condition
    return None


def jobset_failure(obj: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
    """Why a JobSet failed (empty when it has not): its restarts ran out, or another reason."""
    condition = _failed_condition(obj, ("Failed",))
    if condition is None:
        return []
    restarts = int((obj.get("status") or {}).get("restarts", 0))
    limit = ((obj.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts")
    message = str(condition.get("message") or condition.get("reason") or "failed")
    if condition.get("reason") == "ReachedMaxRestarts":
        return [Explanation(
            "max-restarts", "max restarts",
            f"the JobSet failed after {restarts} gang restart(s), its limit (max_restarts {limit}): {message}",
            "the cause is in the pods' explanations and logs; raise `max_restarts` only for flaky nodes",
        )]  # fmt: skip
    return [Explanation(
        "failed", "failed", f"the JobSet failed after {restarts} gang restart(s): {message}",
        "see the pods' explanations and `cw logs RUN`",
    )]  # fmt: skip


def job_failure(obj: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
    """Why a trainer Job failed (empty when it has not).

    Args:
        obj: The Job, as the API server returns it.
        frameworks: Finds the framework its label names (default
            :func:`~cw_cli.diagnosis.explanation.framework_of`), asked only for a deadline's advice.
    """
    condition = _failed_condition(obj, ("Failed", "FailureTarget"))
    if condition is None:
        return []
    name = (obj.get("metadata") or {}).get("name")
    spec = obj.get("spec") or {}
    reason = condition.get("reason") or ""
    message = str(condition.get("message") or reason)
    if reason == "BackoffLimitExceeded":
        failed = int((obj.get("status") or {}).get("failed", 0))
        return [Explanation(
            "backoff-limit", "backoff limit",
            f"{name} failed {failed} time(s) and reached its backoff limit ({spec.get('backoffLimit', 6)} retries): {message}",
            "the cause is the pods' failure (above, and `cw logs RUN`); `backoff_limit:` sets the retries",
        )]  # fmt: skip
    if reason in ("MaxFailedIndexesExceeded", "FailedIndexes"):  # a multi-node Job: backoffLimitPerIndex
        failed_indexes = (obj.get("status") or {}).get("failedIndexes") or "?"
        return [Explanation(
            "backoff-limit", "backoff limit",
            f"{name}: the pod of node(s) {failed_indexes} failed more than its backoff limit "
            f"({spec.get('backoffLimitPerIndex', '?')} retries per node): {message}",
            "the cause is the pods' failure (above, and `cw logs RUN --rank N`); `backoff_limit:` sets the retries",
        )]  # fmt: skip
    if reason == "DeadlineExceeded":
        deadline = spec.get("activeDeadlineSeconds")
        limit = f" ({duration(deadline)})" if deadline else ""
        framework = framework_in(obj, frameworks)
        shorter = shorter_run(framework.words if framework is not None else None)
        return [Explanation(
            "deadline", "deadline",
            f"{name} ran longer than its deadline{limit} and was stopped: {message}",
            f"raise the Job's activeDeadlineSeconds, or make the run shorter ({shorter}); it resumes from the last checkpoint",
        )]  # fmt: skip
    if reason == "PodFailurePolicy":
        code = re.search(r"failed with exit code (\d+)", message)
        summary = f"rank failed (exit {code.group(1)})" if code else "disrupted" if "DisruptionTarget" in message else "rank failed"
        return [Explanation(
            "rank-failed", summary,
            f"{name} failed at once by its pod failure policy: {message}",
            "a multi-node run cannot go on without a rank: the cause is in that pod's log (`cw logs RUN --rank N`)",
        )]  # fmt: skip
    return [Explanation("failed", reason or "failed", f"{name} failed: {message}", "see `cw logs RUN`")]
