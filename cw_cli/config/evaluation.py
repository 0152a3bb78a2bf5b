"""The evaluation of a config (``eval:``): which lm-evaluation-harness tasks (or verifiers
environments, scored by vf-eval: cw_cli/config/eval_environments.py) score each checkpoint, on how
many samples, with which generation settings, and which score decides ``best``.

Its own module (config/models.py holds only the field). The tasks are lm-eval's, by name, or the
user's own: a task YAML of the harness's format (a path ending in ``.yaml``, relative to the
config) whose ``dataset_kwargs.data_files`` name local files beside it; both travel with the run.
cw runs the harness as it is (cw_cli/runtime/cw_eval.py) and re-implements no metric.

Task names and the metrics they report are checked before anything is created against
``lm_eval_tasks.json.gz``, the harness's registry as tools/lm_eval_tasks.py lists it (importing
lm-eval and indexing its 14,000 task files takes a minute; the list loads in milliseconds). A user
task's metrics are read from its YAML.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cw_cli.config.eval_environments import check_environment_args, check_environment_names, check_harness_fields, with_default_metric

#: The registry list shipped with cw (tools/lm_eval_tasks.py writes it).
TASKS_FILE = Path(__file__).with_name("lm_eval_tasks.json.gz")
#: The lm-eval release the list was made from, and the one an evaluation pod installs when its image lacks it.
LM_EVAL_REQUIREMENT = "lm_eval==0.4.13"
#: A generation setting's name and value as lm-eval's ``--gen_kwargs k=v,k=v`` parses them.
_GEN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_GEN_VALUE = re.compile(r"[A-Za-z0-9_.+\-]{1,64}")
_TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")
_USER_TASK = re.compile(r"[A-Za-z0-9_.\-/]{1,250}\.ya?ml")


class EvalSpec(BaseModel):
    """``eval: {tasks: [hellaswag, my_task.yaml], metric: hellaswag/acc_norm, limit: 200}``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tasks: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="lm-evaluation-harness tasks (or groups) by name, or your own task: a path to its task YAML "
        "(relative to the config; the local data files its dataset_kwargs.data_files name travel with it). "
        "Exactly one of tasks and environments.",
    )
    environments: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="verifiers environments scored by vf-eval (a module shipped with `files:`, or an environment "
        "hub id such as primeintellect/gsm8k, installed in the evaluation pod); scores <env>/reward and "
        "<env>/<reward function>. Exactly one of tasks and environments; a verifiers run that names neither "
        "scores the environment it trains on.",
    )
    environment_args: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="For environments: the arguments of each one's load_environment (vf-eval's --env-args), by its "
        "name in environments. The environment a verifiers run trains on gets the trainer's environment.args "
        "unless given here.",
    )
    metric: str = Field(
        pattern=r"^[^/\s]{1,200}/[^/\s]{1,200}$",
        description="The score that decides `best`: <task>/<metric> as lm-eval reports it, e.g. hellaswag/acc_norm, "
        "or <task>/<metric>,<filter> for a task with filters (gsm8k/exact_match,strict-match); for environments "
        "<env>/reward or <env>/<reward function> (default <first env>/reward).",
    )
    higher_is_better: bool = Field(default=True, description="Whether a higher value of the metric is better.")
    limit: float | None = Field(
        default=None, gt=0, le=10_000_000, description="Samples per task (a fraction below 1: that share of each task); "
        "for environments, vf-eval's examples per environment (--num-examples, a whole number)."
    )
    rollouts_per_example: int | None = Field(
        default=None, ge=1, le=256, description="For environments: vf-eval's --rollouts-per-example (default its own)."
    )
    num_fewshot: int | None = Field(default=None, ge=0, le=100, description="Few-shot examples per prompt.")
    generation: dict[str, str | int | float | bool] = Field(
        default={},
        description="Generation settings of generating tasks, passed as lm-eval's --gen_kwargs, "
        "e.g. {temperature: 0, max_gen_toks: 512}.",
    )
    batch_size: int | Literal["auto"] = Field(default=8, description="lm-eval's --batch_size (a number or auto).")
    backend: Literal["auto", "hf", "vllm"] = Field(
        default="auto", description="lm-eval's model backend: vllm on a GPU, hf (transformers) on CPU; auto picks by gpu."
    )
    gpu: int | None = Field(
        default=None, ge=0, le=8, description="GPUs of the evaluation pod (default 1 when the trainer has GPUs, else 0)."
    )
    cpu: str = Field(default="4", pattern=r"^[0-9]+(\.[0-9]+)?m?$", description="CPU request and limit of the evaluation pod.")
    memory: str = Field(
        default="32Gi", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$", description="Memory of the evaluation pod."
    )
    image: str | None = Field(
        default=None,
        description=f"Image of the evaluation pod (default: the trainer's; {LM_EVAL_REQUIREMENT} is pip-installed "
        "when it lacks lm-eval).",
    )
    priority_class: str | None = Field(
        default="cw-eval",
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="The per-checkpoint evaluation pods' PriorityClass, below the trainer's (docs/evaluation.md ships "
        "cw-eval, value -10, for a cluster admin to apply once); on a queued run, the Kueue WorkloadPriorityClass.",
    )
    every_checkpoint: bool = Field(
        default=True,
        description="Evaluate each complete checkpoint while training goes on (at a lower priority than training).",
    )

    @field_validator("tasks")
    @classmethod
    def _task_forms(cls, tasks: list[str] | None) -> list[str] | None:
        for task in tasks or []:
            if not (_TASK_NAME.fullmatch(task) or _USER_TASK.fullmatch(task)) or ".." in task.split("/"):
                raise ValueError(
                    f"{task[:80]!r} is neither an lm-eval task name (letters, digits, '_', '-', '.') nor a relative "
                    "path to your task's YAML ending in .yaml"
                )
        if tasks is not None and len(set(tasks)) != len(tasks):
            raise ValueError("a task is named twice")
        return tasks

    @field_validator("environments")
    @classmethod
    def _environment_forms(cls, environments: list[str] | None) -> list[str] | None:
        return check_environment_names(environments)

    @field_validator("environment_args")
    @classmethod
    def _environment_args_json(cls, arguments: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
        return check_environment_args(arguments)

    @model_validator(mode="before")
    @classmethod
    def _metric_of_environments(cls, data: Any) -> Any:
        return with_default_metric(data)

    @model_validator(mode="after")
    def _one_harness(self) -> EvalSpec:
        check_harness_fields(self)
        return self

    @field_validator("generation")
    @classmethod
    def _generation_words(cls, generation: dict[str, Any]) -> dict[str, Any]:
        for key, value in generation.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if not _GEN_KEY.fullmatch(key) or not _GEN_VALUE.fullmatch(text):
                raise ValueError(
                    f"{key[:40]}: {text[:40]!r}: lm-eval reads settings as key=value,key=value, so a name is letters, "
                    "digits and '_', a value a number or a word"
                )
        return generation

    def user_tasks(self) -> list[str]:
        """The tasks given as paths to the user's task YAML."""
        return [task for task in self.tasks or [] if _USER_TASK.fullmatch(task)]

    def gen_kwargs(self) -> str:
        """The generation settings as lm-eval's ``--gen_kwargs`` text ('' when none)."""
        return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in self.generation.items())
