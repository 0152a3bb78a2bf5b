"""A pipeline's evaluation stage (``evaluate: STAGE``): `cw eval RUN --checkpoint final` of a
stage's run, rendered at launch from that stage's planned objects instead of the cluster's.

The very functions `cw eval` uses read the run (its trainer's facts, its ``cw-eval.json``, its
output folder) off the planned objects, and render/evaluation.py renders the Job and its
ConfigMap: the keeper creates exactly what `cw eval RUN --checkpoint final` would create, once
the evaluated stage has succeeded. No cluster is asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.config.pipeline import StageEval
from cw_cli.errors import ConfigError


class _PlannedObjects:
    """The reads `cw eval` makes of a run (``get`` by kind and name), answered from its planned objects."""

    def __init__(self, manifests: list[dict[str, Any]], namespace: str | None) -> None:
        self.namespace = namespace
        self._objects = {(m["kind"], m["metadata"]["name"]): m for m in manifests}

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((kind, name))


def stage_eval_manifests(run_name: str, manifests: list[dict[str, Any]], evaluation: StageEval, task_dir: Path,
                         namespace: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The evaluation Job (first: it owns the rest) and its ConfigMap for the final model of the
    planned run ``run_name`` (``manifests``: its objects as rendered).

    Args:
        run_name: The evaluated stage's run.
        manifests: Its planned objects.
        evaluation: The stage's settings; no tasks: the run's own ``eval:`` settings.
        task_dir: Where local task YAMLs are read from (the pipeline file's folder).
        namespace: The namespace, for messages.

    Raises:
        ConfigError: No tasks and no ``eval:`` block, an unknown task or metric, a bad size, a run
            keeping its outputs on no volume (messages as `cw eval`'s; the caller names the stage).
    """
    from cw_cli.after_training.evaluation import eval_facts, eval_settings, run_environments, run_settings
    from cw_cli.config.quantity import MIN_CPU, MIN_MEMORY, normalize_quantity
    from cw_cli.render.evaluation import EvalResources, eval_manifests, eval_requirements, target

    try:
        cpu, memory = normalize_quantity(evaluation.cpu, MIN_CPU, "cpu"), normalize_quantity(evaluation.memory, MIN_MEMORY, "memory")
    except ValueError as exc:
        raise ConfigError([f"cpu/memory: {exc}"]) from None
    kube: Any = _PlannedObjects(manifests, namespace)
    settings, _ = run_settings(kube, run_name)
    shipped = run_environments(kube, run_name) if evaluation.environments else None
    settings = eval_settings(run_name, settings, list(evaluation.tasks), evaluation.metric, evaluation.limit, evaluation.gpu,
                             task_dir, environments=list(evaluation.environments), shipped=shipped)  # fmt: skip
    facts = eval_facts(kube, run_name)
    resources = EvalResources(gpu=int(settings.get("gpu") or 0), cpu=cpu, memory=memory)
    return eval_manifests(facts, settings, target(facts.run_dir, "final"), resources, requirements=eval_requirements(settings))
