"""A pipeline file (`cw pipeline FILE`): stages, each an ordinary run (a config file, its
framework and training type, ``--set`` values), and which stages each waits for (``after:``).

::

    name: rlhf                  # optional; default: the file's name. Stage runs are <name>-<stage>
    stages:
      sft:  {framework: trl, type: sft, config: sft.yaml}
      dpo:  {framework: trl, type: dpo, config: dpo.yaml, after: [sft]}   # dpo.yaml: model_name_or_path: run:sft
      eval: {evaluate: dpo, tasks: [gsm8k]}   # `cw eval rlhf-dpo --checkpoint final`, once dpo succeeded

Read and checked here, before anything is rendered: the keys, the names, every ``after:`` and
``evaluate:`` naming a stage of the file, and no cycle (stdlib ``graphlib`` orders the stages and
finds one). Every problem names the file and the stage.
"""

from __future__ import annotations

import graphlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from cw_cli.errors import ConfigError

_STAGE_KEYS = {"framework", "type", "config", "after", "set"}
#: An evaluation stage's keys: `cw eval RUN`'s flags (docs/pipelines.md).
_EVAL_KEYS = {"evaluate", "checkpoint", "tasks", "environments", "metric", "limit", "gpu", "cpu", "memory", "after"}
_TOP_KEYS = {"name", "stages"}


class StageEval(Struct, frozen=True):
    """What an evaluation stage scores and how: `cw eval RUN --checkpoint final`'s flags.

    Attributes:
        of: The stage whose final model it scores.
        tasks: lm-eval tasks or local task YAMLs (relative to the pipeline file); none: the
            evaluated stage's own ``eval:`` tasks.
        environments: verifiers environments scored by vf-eval instead of ``tasks``
            (`cw eval --environments`).
        metric: The deciding ``task/metric`` (default as `cw eval`'s).
        limit: Samples per task.
        gpu: GPUs of the evaluation pod (default: the evaluated stage's ``eval:`` choice).
        cpu: Its CPU.
        memory: Its memory.
    """

    of: str
    tasks: tuple[str, ...] = ()
    environments: tuple[str, ...] = ()
    metric: str | None = None
    limit: float | None = None
    gpu: int | None = None
    cpu: str = "4"
    memory: str = "32Gi"


class Stage(Struct, frozen=True):
    """One stage: an ordinary run, or the evaluation of another stage's final model (``evaluation``).

    Attributes:
        name: The stage's name in the file.
        run: Its run's name (``<pipeline>-<stage>``).
        framework: ``trl``, ``axolotl``, ``verifiers`` or a plugin.
        training_type: ``sft``, ``dpo``, ...
        config: Its config file (relative paths start at the pipeline file's folder).
        after: The stages it waits for.
        assignments: ``--set`` values.
        evaluation: For an evaluation stage (``evaluate: STAGE``), what it scores; then
            framework, type and config are the evaluated stage's.
    """

    name: str
    run: str
    framework: str
    training_type: str
    config: Path
    after: tuple[str, ...] = ()
    assignments: dict[str, Any] = field(default_factory=dict)
    evaluation: StageEval | None = None


class Pipeline(Struct, frozen=True):
    """A checked pipeline file: its stages in an order where each comes after those it waits for."""

    path: Path
    name: str
    stages: tuple[Stage, ...]

    def stage(self, name: str) -> Stage:
        """The stage of that name."""
        return next(stage for stage in self.stages if stage.name == name)


def _text(problems: list[str], where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: expected a non-empty string, got {value!r:.60}")
        return ""
    return value


def parse_pipeline(path: Path, data: Any, is_run_name: Callable[[str], bool]) -> Pipeline:
    """Check a pipeline file's content (already read as YAML).

    Args:
        path: The file (messages name it).
        data: Its content.
        is_run_name: Whether a name can be a run's (render/naming.py's rule: config comes first).

    Raises:
        ConfigError: Every problem, each naming the file and the stage: unknown keys, bad names, an
            ``after:`` naming no stage, a cycle.
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping with `stages:`"], hint="see docs/pipelines.md")
    problems += [f"{path}: unknown key {key!r} (expected name, stages)" for key in data if key not in _TOP_KEYS]
    name = data.get("name", path.stem.lower().replace("_", "-"))
    if not isinstance(name, str) or not is_run_name(name):
        problems.append(f"{path}: name: {name!r:.60} is not usable as a run name prefix (lowercase letters, digits and '-')")
        name = "pipeline"
    stages_data = data.get("stages")
    if not isinstance(stages_data, dict) or not stages_data:
        raise ConfigError([*problems, f"{path}: stages: expected a mapping of stage name to {{framework, type, config}}"],
                          hint="see docs/pipelines.md")  # fmt: skip
    stages: dict[str, Stage] = {}
    evaluations: dict[str, StageEval] = {}
    for stage_name, body in stages_data.items():
        where = f"{path}: stage {stage_name!s:.40}"
        run = f"{name}-{stage_name}"
        if not isinstance(stage_name, str) or not is_run_name(run):
            problems.append(f"{where}: {run!r:.80} (pipeline name + stage) is not a run name: lowercase letters, digits and '-', "
                            "63 characters at most")  # fmt: skip
            continue
        if not isinstance(body, dict):
            problems.append(f"{where}: expected a mapping with framework, type and config")
            continue
        after = body.get("after", [])
        after = [after] if isinstance(after, str) else after
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            problems.append(f"{where}: after: expected a stage name or a list of them")
            after = []
        if "evaluate" in body:  # waits for the stage it evaluates
            evaluation = evaluations[stage_name] = _evaluation(problems, where, body)
            stages[stage_name] = Stage(name=stage_name, run=run, framework="", training_type="", config=path,
                                       after=tuple(dict.fromkeys([*after, evaluation.of])), evaluation=evaluation)  # fmt: skip
            continue
        problems += [f"{where}: unknown key {key!r} (expected {', '.join(sorted(_STAGE_KEYS))}, or evaluate: STAGE)"
                     for key in body if key not in _STAGE_KEYS]  # fmt: skip
        missing = [key for key in ("framework", "type", "config") if key not in body]
        problems += [f"{where}: {key} is missing" for key in missing]
        assignments = body.get("set", {})
        if not isinstance(assignments, dict):
            problems.append(f"{where}: set: expected a mapping of config key to value")
            assignments = {}
        config = _text(problems, f"{where}: config", body.get("config", "x"))
        stages[stage_name] = Stage(
            name=stage_name, run=run, framework=_text(problems, f"{where}: framework", body.get("framework", "x")),
            training_type=_text(problems, f"{where}: type", body.get("type", "x")),
            config=(path.parent / config) if config else path, after=tuple(after), assignments=dict(assignments),
        )  # fmt: skip
    for stage_name, evaluation in evaluations.items():
        where = f"{path}: stage {stage_name}: evaluate: {evaluation.of!r:.40}"
        if evaluation.of and evaluation.of not in stages:
            problems.append(f"{where} is no stage of the file; stages: {', '.join(stages)}")
        elif evaluation.of in evaluations:
            problems.append(f"{where} is an evaluation, not a run: name a training stage")
    for stage in stages.values():
        for other in stage.after:
            if stage.evaluation and other == stage.evaluation.of:
                continue  # its evaluate: was checked above
            if other not in stages:
                problems.append(f"{path}: stage {stage.name}: after: {other!r:.40} is no stage of the file; stages: {', '.join(stages)}")
            elif other == stage.name:
                problems.append(f"{path}: stage {stage.name}: after: a stage cannot wait for itself")
    if problems:
        raise ConfigError(problems, hint="see docs/pipelines.md")
    return Pipeline(path=path, name=name, stages=tuple(stages[n] for n in _order(path, stages)))


def _evaluation(problems: list[str], where: str, body: dict[str, Any]) -> StageEval:
    """An evaluation stage's settings, each checked for its type (the tasks and the metric are
    checked against lm-eval's when the stage is rendered)."""
    problems += [f"{where}: unknown key {key!r} in an evaluation stage (expected {', '.join(sorted(_EVAL_KEYS))})"
                 for key in body if key not in _EVAL_KEYS]  # fmt: skip
    of = _text(problems, f"{where}: evaluate", body["evaluate"])
    checkpoint = body.get("checkpoint", "final")
    if checkpoint != "final":
        problems.append(f"{where}: checkpoint: {checkpoint!r:.40}: a pipeline evaluates the final model only (the others are not "
                        f"known before the stage runs); evaluate another later with cw eval RUN --checkpoint best")  # fmt: skip
    tasks = _names(problems, f"{where}: tasks", body.get("tasks", []), "lm-eval tasks or task YAMLs")
    environments = _names(problems, f"{where}: environments", body.get("environments", []), "verifiers environments")
    if tasks and environments:
        problems.append(f"{where}: tasks and environments: name one (lm-eval tasks, or verifiers environments for vf-eval)")
    metric = body.get("metric")
    if metric is not None:
        metric = _text(problems, f"{where}: metric", metric) or None
    limit = body.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0):
        problems.append(f"{where}: limit: expected a positive number of samples (or a fraction below 1), got {limit!r:.40}")
        limit = None
    gpu = body.get("gpu")
    if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= 8):
        problems.append(f"{where}: gpu: expected 0 to 8, got {gpu!r:.40}")
        gpu = None
    sizes = {key: str(body.get(key, default)) for key, default in (("cpu", "4"), ("memory", "32Gi"))}
    return StageEval(of=of, tasks=tuple(tasks), environments=tuple(environments), metric=metric, limit=limit, gpu=gpu, **sizes)


def _names(problems: list[str], where: str, value: Any, what: str) -> list[str]:
    """A list of names (or one comma-separated text) of an evaluation stage; [] and a problem otherwise."""
    names = [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        problems.append(f"{where}: expected a list of {what}")
        return []
    return names


def _order(path: Path, stages: dict[str, Stage]) -> list[str]:
    """The stages with each after those it waits for.

    Raises:
        ConfigError: A cycle, named stage by stage.
    """
    sorter = graphlib.TopologicalSorter({stage.name: stage.after for stage in stages.values()})
    try:
        return list(sorter.static_order())
    except graphlib.CycleError as exc:
        cycle = list(reversed(exc.args[1]))
        raise ConfigError([f"{path}: the stages wait for each other in a cycle: {' -> '.join(cycle)}"],
                          hint="remove one of these `after:` entries") from None  # fmt: skip


def with_dependency(pipeline: Pipeline, stage: str, on: str) -> Pipeline:
    """The pipeline with ``stage`` also waiting for ``on`` (a stage whose model it starts from).

    Raises:
        ConfigError: That makes a cycle.
    """
    from msgspec import structs

    stages = {s.name: (structs.replace(s, after=(*s.after, on)) if s.name == stage and on not in s.after else s)
              for s in pipeline.stages}  # fmt: skip
    return structs.replace(pipeline, stages=tuple(stages[n] for n in _order(pipeline.path, stages)))
