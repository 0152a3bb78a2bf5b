"""`cw eval RUN` on the cluster: which model of the run to score (read off its volume in a reader
pod), with which settings (the run's own ``cw-eval.json``, or ``--tasks``), then the evaluation's
Job and its ConfigMap (owned by the Job, so the Job's TTL removes both). Bad input is refused
before anything is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from cw_cli.after_training.helper_pods import create_job_and_its_config_map
from cw_cli.client.connection import Kube
from cw_cli.config.eval_environments import score_prefix
from cw_cli.errors import ConfigError, Conflict
from cw_cli.labels import TRAINER, object_names
from cw_cli.render.evaluation import (
    EVAL_TTL_HOURS,
    SPEC_FILE,
    EvalResources,
    EvalTarget,
    eval_manifests,
    eval_name,
    eval_requirements,
    target,
)
from cw_cli.render.export import ExportChoice, ExportFacts

#: Keys of a run's native config that name the model it starts from (TRL, Axolotl, verifiers).
BASE_MODEL_KEYS = ("model_name_or_path", "base_model", "model")


def run_settings(kube: Kube, run_name: str) -> tuple[dict[str, Any] | None, str | None]:
    """The evaluation settings the run was launched with (its ConfigMap's ``cw-eval.json``; None
    without ``eval:``) and the model it started from (for ``base``)."""
    import json

    import yaml

    config_map = kube.get("ConfigMap", object_names(run_name)["config"]) or {}
    data = config_map.get("data") or {}
    settings = json.loads(data[SPEC_FILE]) if SPEC_FILE in data else None
    base = None
    try:
        native = yaml.safe_load(data.get("config.yaml") or "") or {}
    except yaml.YAMLError:
        native = {}
    if isinstance(native, dict):
        base = next((str(native[k]) for k in BASE_MODEL_KEYS if isinstance(native.get(k), str)), None)
    return settings, base


def flag_settings(tasks: list[str], metric: str | None, limit: float | None, gpu: int, run: dict[str, Any] | None,
                  task_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The settings of ``--tasks`` (each an lm-eval task or a local task YAML, relative to
    ``task_dir``, default here), checked as a config's ``eval:`` block is.

    Raises:
        ConfigError: An unknown task, a metric the tasks do not report; each naming the flag.
    """
    from pydantic import ValidationError

    from cw_cli.config.eval_tasks import check_eval, registry, score_name
    from cw_cli.config.evaluation import EvalSpec
    from cw_cli.render.evaluation import pod_spec

    chosen = metric or (run or {}).get("metric") or ""
    task = tasks[0] if tasks else ""
    if chosen.partition("/")[0] not in tasks and metric is None:  # the first score the first task reports
        known = registry()["tasks"].get(task)
        if known and known["metrics"]:  # a generation task reports its metric under its first filter only
            filtered = "none" if "none" in known["filters"] or not known["filters"] else known["filters"][0]
            chosen = score_name(task, f"{known['metrics'][0]},{filtered}")
        else:
            chosen = f"{task}/acc"
    try:
        spec = EvalSpec(tasks=tasks, metric=chosen, limit=limit, gpu=gpu,
                        higher_is_better=bool((run or {}).get("higher_is_better", True)))  # fmt: skip
    except ValidationError as exc:
        raise ConfigError([f"--tasks/--metric/--limit: {e['loc'][0] if e['loc'] else ''}: {e['msg']}" for e in exc.errors()]) from None
    problems, users = check_eval(spec, task_dir or Path.cwd())
    if problems:
        raise ConfigError([p.replace("`eval.tasks`", "--tasks").replace("`eval.metric`", "--metric") for p in problems],
                          hint="cw eval RUN --tasks hellaswag --metric hellaswag/acc_norm")  # fmt: skip
    return pod_spec(spec, users, gpu)


class RunEnvironments(msgspec.Struct, frozen=True):
    """What a run's ConfigMap says of the verifiers environments an evaluation of it may score."""

    #: The Python files the run shipped (not cw's own), by name -> text: an environment module among them travels.
    modules: dict[str, str]
    #: The environment a verifiers run trains on -> the arguments its trainer gives ``load_environment``.
    arguments: dict[str, dict[str, Any]]


def run_environments(kube: Kube, run_name: str) -> RunEnvironments:
    """The modules and the trained environment's arguments of a run, from its ConfigMap."""
    from cw_cli.frameworks.runtime_files import is_runtime_file

    data = (kube.get("ConfigMap", object_names(run_name)["config"]) or {}).get("data") or {}
    modules = {key: text for key, text in data.items() if key.endswith(".py") and not is_runtime_file(key)}
    return RunEnvironments(modules, trained_arguments(data.get("config.toml")))


def trained_arguments(text: Any) -> dict[str, dict[str, Any]]:
    """``{env id: args}`` of the ``[env]`` section of a verifiers run's mounted ``config.toml``
    ({} where there is none, or the text does not read as one)."""
    from cw_cli.config.yaml_source import parse_toml

    if not isinstance(text, str):
        return {}
    try:
        env = parse_toml(Path("config.toml"), text).get("env")
    except ConfigError:
        return {}
    if not isinstance(env, dict) or not isinstance(env.get("id"), str) or not isinstance(env.get("args"), dict) or not env["args"]:
        return {}
    return {env["id"]: env["args"]}


def environment_flag_settings(environments: list[str], metric: str | None, limit: float | None, gpu: int,
                              shipped: RunEnvironments) -> dict[str, Any]:  # fmt: skip
    """The settings of ``--environments`` (verifiers environments scored by vf-eval), checked as a
    config's ``eval:`` block is; ``shipped``: the run's own modules and trained environment's
    arguments (:func:`run_environments`); an environment not among the modules is installed from
    the hub in the evaluation pod.

    Raises:
        ConfigError: A bad environment id, a metric of no environment named, a limit that is no
            whole number; each naming the flag.
    """
    from pydantic import ValidationError

    from cw_cli.config.eval_tasks import check_eval
    from cw_cli.config.evaluation import EvalSpec
    from cw_cli.render.evaluation import pod_spec

    hint = "cw eval RUN --environments primeintellect/reverse-text --limit 20"
    chosen = metric or f"{score_prefix(environments[0])}/reward"
    try:
        arguments = {env: args for env, args in shipped.arguments.items() if env in environments}
        spec = EvalSpec(environments=environments, metric=chosen, limit=limit, gpu=gpu, environment_args=arguments or None)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            if metric is None and error["loc"] == ("metric",):
                continue  # derived from a bad environment id, which is said already
            text = str(error["msg"]).removeprefix("Value error, ")
            where = f"`eval.{error['loc'][0]}`: " if error["loc"] else ""
            problems.append(_as_flags(where + text))
        raise ConfigError(problems, hint=hint) from None
    problems, _ = check_eval(spec, Path.cwd())
    if problems:
        raise ConfigError([_as_flags(problem) for problem in problems], hint=hint)
    return pod_spec(spec, [], gpu, shipped.modules)


def _as_flags(text: str) -> str:
    """An ``eval:`` block's message about its fields, in `cw eval`'s flags."""
    for field in ("environments", "metric", "limit", "tasks"):
        text = text.replace(f"`eval.{field}`", f"--{field}").replace(f"eval.{field}", f"--{field}")
    return text


def eval_settings(run_name: str, settings: dict[str, Any] | None, tasks: list[str], metric: str | None, limit: float | None,
                  gpu: int | None, task_dir: Path | None = None, environments: list[str] | None = None,
                  shipped: RunEnvironments | None = None) -> dict[str, Any]:  # fmt: skip
    """The evaluation's settings (``cw-eval.json``): the run's own (``settings``, from its
    ``eval:`` block), changed by the flags; ``tasks``, ``environments`` (with the run's
    ``shipped`` modules), ``metric`` or ``limit`` make new ones.

    Raises:
        ConfigError: No tasks (the run had no ``eval:`` and none given), both tasks and
            environments, an unknown task or environment, a metric they do not report.
    """
    if environments:
        if tasks:
            raise ConfigError(["--tasks and --environments: name one (lm-eval tasks, or verifiers environments for vf-eval)"])
        run_gpu = int((settings or {}).get("gpu") or 0)
        return environment_flag_settings(environments, metric, limit, run_gpu if gpu is None else gpu,
                                          shipped or RunEnvironments({}, {}))  # fmt: skip
    if settings is not None and settings.get("harness") == "vf-eval" and not tasks and (metric or limit is not None):
        from cw_cli.render.eval_environments import with_flags  # the run's environments, scored by vf-eval

        settings = with_flags(settings, metric, limit)
        metric, limit = None, None
    if tasks or metric or limit is not None:
        run_gpu = int((settings or {}).get("gpu") or 0)
        return flag_settings(tasks or list((settings or {}).get("tasks") or []), metric,
                             limit if limit is not None else (settings or {}).get("limit"),
                             run_gpu if gpu is None else gpu, settings, task_dir)  # fmt: skip
    if settings is None:
        raise ConfigError([f"run {run_name!r} was launched without an eval: block: name the tasks"],
                          hint=f"cw eval {run_name} --tasks hellaswag --metric hellaswag/acc_norm")  # fmt: skip
    if gpu is not None and gpu != settings.get("gpu"):
        if settings.get("harness") == "vf-eval":  # another server, and what it needs installed
            from cw_cli.render.eval_environments import with_gpu

            return with_gpu(settings, gpu)
        backend = "vllm" if gpu else "hf"
        return {**settings, "gpu": gpu, "backend": backend, "device": "cuda" if gpu else "cpu"}
    return settings


def choose_target(kube: Kube, run_name: str, run_dir: str, which: str, base: str | None) -> EvalTarget:
    """The model ``which`` names: ``base`` (the model the run started from), or ``final``,
    ``latest``, ``best`` or a step number, read off the run's folder in a reader pod.

    Raises:
        ConfigError: Nothing of that name (the message lists what is), a checkpoint still being
            written, or ``base`` of a run whose config names no model.
    """
    if which == "base":
        if not base:
            raise ConfigError([f"run {run_name!r}: its config names no model to evaluate as the base"])
        return target(run_dir, "base", base)
    from cw_cli.after_training.artifacts import read_artifacts
    from cw_cli.render.artifact_choice import choose_source

    source = choose_source(read_artifacts(kube, run_name), which)
    if source.top:
        return target(run_dir, "final")
    return target(run_dir, Path(source.folder).name.removeprefix("checkpoint-"))


def create_eval(kube: Kube, facts: ExportFacts, settings: dict[str, Any], chosen: EvalTarget, resources: EvalResources) -> str:
    """Create the evaluation's Job and its ConfigMap (owned by the Job); returns the Job's name.

    Raises:
        Conflict: An evaluation of this model exists (running, or kept after it ended).
    """
    name = eval_name(facts.run_name, chosen)
    existing = kube.get("Job", name)
    if existing is not None:
        conditions = (existing.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions):
            # Typically the run's own evaluation of its final model (eval: every_checkpoint).
            raise Conflict(f"{chosen.label} of run {facts.run_name} is scored already (evaluation {name} succeeded)",
                           hint=f"its scores: cw artifacts {facts.run_name}; to score it again: kubectl delete job {name}")  # fmt: skip
        raise Conflict(f"an evaluation {name} exists already (running, or kept {EVAL_TTL_HOURS} h after it ended)",
                       hint=f"follow it with cw logs {facts.run_name} --role eval, or delete it: kubectl delete job {name}")  # fmt: skip
    job, config_map = eval_manifests(facts, settings, chosen, resources, requirements=eval_requirements(settings))
    create_job_and_its_config_map(kube, job, config_map)
    return name


def eval_facts(kube: Kube, run_name: str) -> ExportFacts:
    """What the evaluation pod takes over from the run's trainer (as an export does).

    Raises:
        NotFound: No such run.
        ConfigError: Its outputs are on no volume.
    """
    from cw_cli.after_training.export import export_facts
    from cw_cli.k8s.run_facts import trainer_of
    from cw_cli.render.evaluation import eval_env

    facts = export_facts(kube, run_name, ExportChoice(checkpoint="latest"))
    template = trainer_of(kube, run_name)[2]["spec"]
    trainer = next(c for c in template["containers"] if c["name"] == TRAINER)
    return msgspec.structs.replace(facts, env=eval_env(trainer.get("env") or [], run_name))
