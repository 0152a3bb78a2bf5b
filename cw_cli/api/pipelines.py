"""Pipelines: a pipeline file's stages planned as ordinary runs, the first ones created now and
the later ones created in the cluster by the pipeline keeper once the stages they wait for have
succeeded (docs/pipelines.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.api.planning import PlannedRun, Progress, _quiet, plan, read_config
from cw_cli.errors import ConfigError, CwError
from cw_cli.labels import READER, TRAINER

if TYPE_CHECKING:
    from cw_cli.api.run import Run
    from cw_cli.api.session import Session
    from cw_cli.client.connection import Kube
    from cw_cli.config.pipeline import Pipeline, Stage
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.render.pipeline import PlannedStage


class PlannedPipeline(Struct):
    """A pipeline rendered, not yet on the cluster.

    Attributes:
        name: The pipeline's name (its runs are ``<name>-<stage>``).
        stages: Each stage's plan, in an order where each comes after those it waits for.
        runs: Each training stage's planned run, by stage (an evaluation stage has its plan only).
        keeper: The pipeline keeper's objects (none when no stage waits for another).
        notices: What cw decided (stage references resolved, ...).
    """

    name: str
    stages: list[PlannedStage]
    runs: dict[str, PlannedRun]
    keeper: list[dict[str, Any]]
    notices: list[str]

    @property
    def first(self) -> list[str]:
        """The stages created at launch: those that wait for none."""
        return [stage.name for stage in self.stages if not stage.after]

    def to_yaml(self) -> str:
        """Every stage's manifests, then the keeper's, as multi-document YAML."""
        import yaml

        parts = [stage.plan.to_yaml() for stage in self.stages]
        if self.keeper:
            parts.append(yaml.safe_dump_all(self.keeper, sort_keys=False))
        return "---\n".join(part if part.endswith("\n") else part + "\n" for part in parts)


def _registry(registry: FrameworkRegistry | None) -> FrameworkRegistry:
    from cw_cli.frameworks.registry import FrameworkRegistry

    return registry or FrameworkRegistry().load_all()


def _stage_refs(pipeline: Pipeline, registry: FrameworkRegistry) -> tuple[Pipeline, dict[str, tuple[str, str]]]:
    """The stages whose model is another stage's (``run:STAGE`` in its config or ``set:``): each then waits for
    that stage. Returns the pipeline so ordered and stage -> (model key, referenced stage)."""
    from cw_cli.config.pipeline import with_dependency
    from cw_cli.render.run_refs import PREFIX, parse_ref

    names = {stage.name for stage in pipeline.stages}
    refs: dict[str, tuple[str, str]] = {}
    for stage in pipeline.stages:
        if stage.evaluation:
            continue
        try:
            loaded, _ = registry.resolve_type(stage.framework, stage.training_type)
        except CwError as exc:
            raise ConfigError([f"{pipeline.path}: stage {stage.name}: {exc.message}"], hint=exc.hint) from None
        key = loaded.framework.model_key
        value = stage.assignments[key] if key in stage.assignments else read_config(stage.config).data.get(key)  # `set:` wins
        if not (isinstance(value, str) and value.startswith(PREFIX)):
            continue
        ref = parse_ref(stage.config, key, value)
        if ref.run not in names:
            continue  # a run outside the pipeline: resolved at launch as any run: reference
        if ref.which != "final":
            raise ConfigError([f"{pipeline.path}: stage {stage.name}: {stage.config}: {key}: {value}: a stage of this pipeline "
                               "has only its final model known before it runs"], hint=f"{key}: run:{ref.run}")  # fmt: skip
        refs[stage.name] = (key, ref.run)
        pipeline = with_dependency(pipeline, stage.name, ref.run)
    return pipeline, refs


def _output_dir(planned: PlannedRun) -> tuple[str, str | None]:
    """(the run's output folder on its volume, its checkpoint volume) as the plan renders them."""
    from cw_cli.k8s.run_facts import claims_of, output_dir_of
    from cw_cli.render.workload import owner_kind

    owner = planned.manifests[0]
    template = owner_kind(owner["kind"]).trainer_template(owner)
    pod_spec: dict[str, Any] = template["spec"] if template else {}
    container: dict[str, Any] = next((c for c in pod_spec.get("containers", []) if c["name"] == TRAINER), {})
    objects = {(m["kind"], m["metadata"]["name"]): m for m in planned.manifests}

    class _Planned:  # output_dir_of reads the run's ConfigMap: here, the planned one
        namespace = None

        @staticmethod
        def get(kind: str, name: str) -> dict[str, Any] | None:
            return objects.get((kind, name))

    run_dir = output_dir_of(_Planned(), planned.name, container.get("workingDir") or f"/checkpoints/{planned.name}")  # type: ignore[arg-type]
    return run_dir, claims_of(pod_spec).get("checkpoints")


def _adapter_switch(planned: PlannedRun) -> str | None:
    """The config line that makes a planned run leave a LoRA adapter instead of a whole model (its
    framework's own words for LoRA and QLoRA, as cw's memory advice spells them), or None."""
    import yaml

    from cw_cli.estimate.values import truthy

    words = planned.request.framework.framework.words
    native = planned.request.config.native
    for line in (words.lora[:1] + words.qlora[:1]) if words else ():
        key, _, text = line.partition(":")
        value: Any = native
        for part in key.strip().split("."):  # a nested key is written dotted (trainer.args.use_lora)
            value = value.get(part) if isinstance(value, dict) else None
        wanted = yaml.safe_load(text)
        if (truthy(value) if wanted is True else value == wanted):
            return line
    return None


def _check_whole_model(path: Path, pipeline: Pipeline, stage: str, key: str, other: PlannedRun, other_stage: str) -> None:
    """A stage starts from another stage's final model only if that is a whole model: TRL's and
    Axolotl's loaders read the folder's config.json, which a LoRA adapter lacks (a single run's
    ``run:`` reference takes the adapter's merged export instead, which a pipeline has not made).

    Raises:
        ConfigError: The other stage trains a LoRA adapter, naming the line that turns it on.
    """
    switch = _adapter_switch(other)
    if switch is None:
        return
    switch_key, _, value = switch.partition(":")
    off = "false" if value.strip() == "true" else "null"
    raise ConfigError([f"{path}: stage {stage}: {key}: run:{other_stage} is stage {other_stage}'s final model, a LoRA adapter "
                       f"({switch.strip()} in {pipeline.stage(other_stage).config}), and a run starts from a whole model"],
                      hint=f"train stage {other_stage} in full: `set: {{{switch_key.strip()}: {off}}}` on it in {path}; or launch it "
                           "alone, merge it (cw export RUN --merge --wait) and start from run:RUN")  # fmt: skip


def _eval_stage(pipeline: Pipeline, stage: Stage, evaluated: PlannedRun, namespace: str | None) -> PlannedStage:
    """An evaluation stage: `cw eval RUN --checkpoint final` of the evaluated stage's planned run,
    a Job the keeper creates (suspended and released, as a run's) once that stage succeeded.

    Raises:
        ConfigError: Its settings (no tasks and no ``eval:`` block in the evaluated stage's config,
            an unknown task, ...), naming the file and the stage.
    """
    from cw_cli.after_training.stage_eval import stage_eval_manifests
    from cw_cli.render.pipeline import PlannedStage
    from cw_cli.render.plan import Plan
    from cw_cli.render.workload import Workload

    assert stage.evaluation is not None
    of = stage.evaluation.of
    where = f"{pipeline.path}: stage {stage.name}"
    try:
        manifests = stage_eval_manifests(evaluated.name, evaluated.manifests, stage.evaluation, pipeline.path.parent, namespace)
    except ConfigError as exc:
        if not stage.evaluation.tasks and any("without an eval: block" in issue for issue in exc.issues):
            raise ConfigError([f"{where}: evaluates stage {of}, whose config {pipeline.stage(of).config} has no eval: block, "
                               "and names no tasks"],
                              hint="tasks: [hellaswag] in the stage, or an eval: block in its config") from None  # fmt: skip
        issues = [f"{where}: {issue.replace('--tasks', 'tasks').replace('--metric', 'metric').replace('--limit', 'limit')}"
                  for issue in exc.issues]  # fmt: skip
        hint = "tasks: [hellaswag] and metric: hellaswag/acc_norm in the stage" if exc.hint and "cw eval" in exc.hint else exc.hint
        raise ConfigError(issues, hint=hint) from None
    name = manifests[0]["metadata"]["name"]
    # Labelled as `cw eval` labels it: part of the evaluated run (its pipeline and stage), so `cw
    # list` and `cw logs RUN --role eval` find it with that run; the keeper knows it by name.
    return PlannedStage(stage.name, stage.after, Plan(run_name=name, workload=Workload("Job"), manifests=manifests, owner_name=name))


def _helper_image(connect: Callable[[], Kube] | None, if_reachable: bool) -> str:
    """The cluster's helper image for the keeper (the kubeconfig context may name one: the test
    cluster's real nodes have only the images built there); the public default without a
    connection, or on a dry run whose kubeconfig cannot be read."""
    from cw_cli.render.helper_pods import READER_IMAGE

    if connect is None:
        return READER_IMAGE
    try:
        return connect().helper_image(READER, READER_IMAGE)
    except CwError:
        if if_reachable:
            return READER_IMAGE
        raise


def plan_pipeline(
    path: str | Path, *, namespace: str | None = None, registry: FrameworkRegistry | None = None,
    connect: Callable[[], Kube] | None = None, if_reachable: bool = False,
) -> PlannedPipeline:  # fmt: skip
    """Read a pipeline file and plan every stage (``cw pipeline FILE --dry-run`` prints the result).

    Raises:
        ConfigError: The file (unknown keys, an ``after:`` naming no stage, a cycle), a stage's
            config, or a stage reference (``run:STAGE@best``, another volume), each naming the
            file and the stage; nothing is created.
    """
    from cw_cli.config.pipeline import parse_pipeline
    from cw_cli.render.naming import is_run_name
    from cw_cli.render.pipeline import PlannedStage, keeper_manifests, keeper_name, label_stage

    path = Path(path)
    pipeline = parse_pipeline(path, read_config(path).data, is_run_name)
    registry = _registry(registry)
    pipeline, refs = _stage_refs(pipeline, registry)
    runs: dict[str, PlannedRun] = {}
    stages: list[PlannedStage] = []
    notices: list[str] = []
    for stage in pipeline.stages:
        if stage.evaluation:  # its stage is planned: each comes after those it waits for
            stages.append(_eval_stage(pipeline, stage, runs[stage.evaluation.of], namespace))
            notices.append(f"stage {stage.name}: {stages[-1].plan.run_name} evaluates stage {stage.evaluation.of}'s final model as "
                           f"`cw eval {runs[stage.evaluation.of].name} --checkpoint final` would, once it succeeded")  # fmt: skip
            continue
        assignments = dict(stage.assignments)
        if stage.name in refs:
            key, other = refs[stage.name]
            run_dir, volume = _output_dir(runs[other])
            assignments[key] = run_dir
            notices.append(f"stage {stage.name}: {key}: run:{other} is {run_dir}, stage {other}'s final model on volume {volume}")
        planned = plan(read_config(stage.config), stage.framework, stage.training_type, None, registry=registry,
                       connect=connect, if_reachable=if_reachable, name=stage.run, namespace=namespace,
                       set=assignments or None)  # fmt: skip
        if stage.name in refs:
            other = refs[stage.name][1]
            _check_whole_model(path, pipeline, stage.name, refs[stage.name][0], runs[other], other)
            theirs, ours = _output_dir(runs[other])[1], _output_dir(planned)[1]
            if theirs != ours or theirs is None:
                raise ConfigError([f"{path}: stage {stage.name} starts from stage {other}'s model, which is on volume {theirs}, "
                                   f"and its own checkpoint_volume is {ours}: both must use one volume"],
                                  hint=f"checkpoint_volume: {theirs} in {stage.config}")  # fmt: skip
        label_stage(planned.plan, pipeline.name, stage.name)
        runs[stage.name] = planned
        stages.append(PlannedStage(stage.name, stage.after, planned.plan))
        notices += [f"stage {stage.name}: {notice}" for notice in planned.notices]
    created = {stage.name for stage in stages if not stage.after}
    keeper: list[dict[str, Any]] = []
    if len(created) < len(stages):
        try:
            keeper = keeper_manifests(pipeline.name, stages, created, {}, image=_helper_image(connect, if_reachable))
        except ValueError as exc:
            raise ConfigError([f"{path}: {exc}: too much for the pipeline's ConfigMap"],
                              hint="ship large files in a volume instead of `files:`") from None  # fmt: skip
        notices.append(f"the later stages are created in the cluster by Job {keeper_name(pipeline.name)} once those they wait for succeed")
    return PlannedPipeline(pipeline.name, stages, runs, keeper, notices)


def submit_pipeline(session: Session, planned: PlannedPipeline, progress: Progress = _quiet) -> list[Run]:
    """Create the first stages' runs and the pipeline keeper, all or nothing.

    Raises:
        Conflict: A stage's run or the keeper exists already (nothing was created).
        CwError: Any other failure, after removing what was created.
    """
    from cw_cli.k8s.pipelines import check_names_free, create_keeper
    from cw_cli.render.pipeline import keeper_name

    later = [(s.name, s.plan.manifests[0]["kind"], s.plan.manifests[0]["metadata"]["name"]) for s in planned.stages if s.after]
    if planned.keeper:
        check_names_free(session.kube, later, keeper_name(planned.name))
    runs: list[Run] = []
    try:
        for stage in planned.first:
            runs.append(session.submit(planned.runs[stage], progress=progress))
        if planned.keeper:
            create_keeper(session.kube, planned.keeper)
            progress(f"created Job {keeper_name(planned.name)}: it creates {', '.join(s[0] for s in later)} in the cluster")
    except (CwError, KeyboardInterrupt):
        for run in runs:
            run.delete()
        raise
    return runs


def stage_states(session: Session, pipeline: str) -> dict[str, str]:
    """Each stage of a pipeline and its state as its keeper last recorded it (``Waiting``,
    ``Created``, ``Running``, ``Succeeded``, ``Failed``, ``Skipped``, ``Deleted``); empty once the
    keeper's objects are gone."""
    from cw_cli.k8s.pipelines import stage_states as read

    return read(session.kube, pipeline)
