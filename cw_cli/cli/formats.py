"""`-o json|yaml` of `cw list` and `cw status`: the stable fields of docs/output.md.

Adding a field is fine; renaming or removing one breaks scripts, so tests/unit pins the names.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from cw_cli.errors import ConfigError

if TYPE_CHECKING:
    from cw_cli.diagnosis.progress import Progress
    from cw_cli.k8s.run_view import RunView

API_VERSION = "cw-cli.dev/v1"
OUTPUTS = ("table", "json", "yaml")
#: Fields of every run, in `cw list -o json` (items[]) and `cw status -o json`.
RUN_FIELDS = (
    "name", "namespace", "framework", "type", "state", "gpus", "created", "age_seconds", "restarts", "failure", "objects",
    "sweep", "links", "progress", "pipeline",
)  # fmt: skip
#: Fields `cw status -o json` adds.
STATUS_FIELDS = ("pods", "services", "queue", "problems", "explanations")
POD_FIELDS = ("name", "role", "rank", "phase", "ready", "node", "reason")
PROGRESS_FIELDS = (
    "step", "total", "elapsed_s", "eta_s", "steps_per_s", "samples_per_s", "tokens_per_s", "checkpoint", "checkpoint_at",
    "checkpoint_age_s",
)  # fmt: skip
EXPLANATION_FIELDS = ("kind", "summary", "message", "fix", "pod", "container", "log")
#: `--state` values: the first word of a state, lower-case (`Queued (Kueue)` is `queued`).
STATES = ("pending", "starting", "queued", "running", "succeeded", "failed", "half-made", "services-only", "unknown")


def check_output(output: str) -> str:
    """The ``-o`` value, lower-case.

    Raises:
        ConfigError: Not one of :data:`OUTPUTS`.
    """
    value = output.lower()
    if value not in OUTPUTS:
        raise ConfigError([f"-o {output!r}: expected one of {', '.join(OUTPUTS)}"])
    return value


def state_key(state: str) -> str:
    """``Queued (Kueue)`` -> ``queued``, ``Services only`` -> ``services-only``."""
    return state.split(" (", 1)[0].strip().lower().replace(" ", "-")


def check_states(states: list[str]) -> set[str]:
    """The ``--state`` values, normalised.

    Raises:
        ConfigError: A value that is no state.
    """
    keys = {state_key(s) for s in states}
    unknown = sorted(keys - set(STATES))
    if unknown:
        raise ConfigError([f"--state {u!r}: expected one of {', '.join(STATES)}" for u in unknown])
    return keys


def run_dict(view: RunView, now: datetime | None = None) -> dict[str, Any]:
    """A run's :data:`RUN_FIELDS`."""
    now = now or datetime.now(timezone.utc)
    return {
        "name": view.name,
        "namespace": view.namespace,
        "framework": view.framework,
        "type": view.training_type,
        "state": view.state,
        "gpus": view.gpus,
        "created": view.created.isoformat().replace("+00:00", "Z") if view.created else None,
        "age_seconds": int((now - view.created).total_seconds()) if view.created else None,
        "restarts": view.restarts,
        "failure": view.failure,
        "objects": list(view.objects),
        "sweep": view.sweep,
        "links": dict(view.links),
        "progress": progress_dict(view.progress, now) if view.progress else None,
        "pipeline": {"name": view.pipeline, "stage": view.stage} if view.pipeline else None,
    }


def status_dict(view: RunView, now: datetime | None = None) -> dict[str, Any]:
    """A run's :data:`RUN_FIELDS` and :data:`STATUS_FIELDS`."""
    data = {"apiVersion": API_VERSION, "kind": "Run", **run_dict(view, now)}
    data["pods"] = [
        {"name": p.name, "role": p.role, "rank": p.rank, "phase": p.phase, "ready": p.ready, "node": p.node, "reason": p.reason}
        for p in view.pods
    ]
    data["services"] = [{"name": name, "status": status} for name, status in view.services]
    data["queue"] = view.queue
    data["problems"] = list(view.problems)
    data["explanations"] = [e.as_dict() for e in view.explanations]
    return data


def progress_dict(progress: Progress, now: datetime | None = None) -> dict[str, Any]:
    """The running trainer's progress: :data:`PROGRESS_FIELDS` (``checkpoint_at`` RFC 3339, UTC)."""
    data = {name: getattr(progress, name) for name in PROGRESS_FIELDS[:-2]}
    data["checkpoint_at"] = progress.checkpoint_at.isoformat().replace("+00:00", "Z") if progress.checkpoint_at else None
    data["checkpoint_age_s"] = progress.checkpoint_age_s(now)
    return data


def list_dict(views: list[RunView], now: datetime | None = None) -> dict[str, Any]:
    """``{"apiVersion", "kind": "RunList", "items": [...]}``."""
    return {"apiVersion": API_VERSION, "kind": "RunList", "items": [run_dict(v, now) for v in views]}


def dump(data: dict[str, Any], output: str) -> str:
    """``data`` as JSON (indented) or YAML, ending in a newline."""
    if output == "json":
        import json  # only for -o json: a table needs none

        return json.dumps(data, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
