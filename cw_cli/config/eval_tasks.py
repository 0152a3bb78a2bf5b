"""What an ``eval:`` block's tasks are and report: lm-eval's registry (the shipped list) and the
user's own task YAMLs, read with their data files so they can travel with the run.

A score's name is ``<task>/<metric>`` for lm-eval's unfiltered result (its key ``<metric>,none``)
and ``<task>/<metric>,<filter>`` otherwise (``gsm8k/exact_match,strict-match``): the names
cw_eval.py writes into scores.json, and the names ``metric:`` is checked against.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.config.eval_environments import check_environments
from cw_cli.config.evaluation import TASKS_FILE, EvalSpec

#: lm-eval's metrics of a task that names none, by output type (lm_eval.api.registry.DEFAULT_METRIC_REGISTRY).
DEFAULT_METRICS = {
    "loglikelihood": ["perplexity", "acc"],
    "loglikelihood_rolling": ["word_perplexity", "byte_perplexity", "bits_per_byte"],
    "multiple_choice": ["acc", "acc_norm"],
    "generate_until": ["exact_match"],
}
#: The largest task YAML or data file shipped (the run's ConfigMap holds 1 MiB in all).
MAX_TASK_FILE = 900 * 1024


class UserTask(Struct, frozen=True):
    """A task of the user's own, read from its YAML.

    Attributes:
        path: The YAML as the config names it.
        name: Its ``task:`` name (what lm-eval reports it under).
        scores: The score names it reports (``<metric>,<filter>``).
        files: Relative path -> text of the YAML (under its own name) and each data file it names.
    """

    path: str
    name: str
    scores: list[str]
    files: dict[str, str]


@functools.cache
def registry() -> dict[str, Any]:
    """lm-eval's tasks, groups and tags as tools/lm_eval_tasks.py listed them."""
    import gzip
    import json

    with gzip.open(TASKS_FILE, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _scores(metrics: list[str], filters: list[str]) -> list[str]:
    return [f"{metric},{name}" for metric in metrics for name in filters]


def _task_yaml(path: Path) -> dict[str, Any]:
    """A task YAML as data, its ``!function`` tags read as their text (cw does not run them)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: f"!{suffix}")
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    if not isinstance(data, dict):
        raise ValueError("is not a task YAML (a mapping with task:, dataset_path:, ...)")
    return data


def _data_files(data: dict[str, Any]) -> list[str]:
    kwargs = data.get("dataset_kwargs") or {}
    files = kwargs.get("data_files") if isinstance(kwargs, dict) else None
    if files is None:
        return []
    if isinstance(files, str):
        return [files]
    if isinstance(files, list):
        return [str(f) for f in files]
    if isinstance(files, dict):
        out: list[str] = []
        for value in files.values():
            out += [value] if isinstance(value, str) else [str(f) for f in value or []]
        return out
    raise ValueError("dataset_kwargs.data_files: expected a path, a list of paths or {split: path}")


def read_user_task(path: Path, named: str) -> UserTask:
    """Read the user's task YAML and the data files it names (relative to it).

    Raises:
        ValueError: Unreadable, not a task, ``include:`` (not shipped), a data file missing, absolute,
            outside the YAML's folder or too large; the message says which.
    """
    from cw_cli.config.local_files import check_shippable

    check_shippable(path, "eval.tasks")
    data = _task_yaml(path)
    name = data.get("task")
    if not isinstance(name, str) or not name:
        raise ValueError("has no `task:` name (lm-eval reports the task's scores under it)")
    if "include" in data:
        raise ValueError("uses `include:`, which cw does not ship; write the included keys into this file")
    files = {path.name: path.read_text(encoding="utf-8")}
    for relative in _data_files(data):
        parts = Path(relative).parts
        if Path(relative).is_absolute() or ".." in parts or "://" in relative:
            raise ValueError(f"dataset_kwargs.data_files: {relative[:80]!r} must be a path relative to the task's YAML, "
                             "inside its folder (the files travel with the run)")  # fmt: skip
        data_path = path.parent / relative
        if check_shippable(data_path, "eval.tasks").st_size > MAX_TASK_FILE:
            raise ValueError(f"{relative}: larger than {MAX_TASK_FILE // 1024} KiB, too large to travel with the run; "
                             "put the data on a volume and name its path there")  # fmt: skip
        files[relative] = data_path.read_text(encoding="utf-8")
    listed = data.get("metric_list")
    if isinstance(listed, list) and listed:
        metrics = [str(m.get("metric")) for m in listed if isinstance(m, dict)]
    else:
        metrics = DEFAULT_METRICS.get(str(data.get("output_type", "generate_until")), [])
    filter_list = data.get("filter_list")
    filters = [str(f.get("name", "none")) for f in filter_list if isinstance(f, dict)] if isinstance(filter_list, list) else []
    return UserTask(path=named, name=name, scores=_scores(metrics, filters or ["none"]), files=files)


def score_name(task: str, key: str) -> str:
    """A score's name from lm-eval's result key: ``acc,none`` -> ``task/acc``, ``em,strict`` -> ``task/em,strict``."""
    metric, _, filtered = key.partition(",")
    return f"{task}/{metric}" if filtered in ("", "none") else f"{task}/{metric},{filtered}"


def check_eval(spec: EvalSpec, config_dir: Path) -> tuple[list[str], list[UserTask]]:
    """Problems with the tasks and the deciding metric (each naming ``eval.<field>``), and the user's tasks read.

    Args:
        spec: The validated ``eval:`` block.
        config_dir: The config's folder (a user task's path is relative to it).
    """
    if spec.environments is not None:  # verifiers environments, scored by vf-eval: no lm-eval registry
        return check_environments(spec), []
    known = registry()
    problems: list[str] = []
    users: list[UserTask] = []
    reported: dict[str, list[str] | None] = {}  # task -> its score keys (None: a tag, no score of its own)
    for task in spec.tasks or []:
        if task in spec.user_tasks():
            try:
                user = read_user_task(config_dir / task, task)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                problems.append(f"`eval.tasks`: {task}: {str(exc)[:300]}")
                continue
            users.append(user)
            reported[user.name] = user.scores
        elif task in known["tasks"]:
            reported[task] = _scores(known["tasks"][task]["metrics"], known["tasks"][task]["filters"])
        elif task in known["groups"]:
            reported[task] = known["groups"][task]
        elif task in known["tags"]:
            reported[task] = None
        else:
            from difflib import get_close_matches  # only for a config with a mistake

            close = get_close_matches(task, [*known["tasks"], *known["groups"], *known["tags"]], n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else "; see `lm_eval ls tasks` for the names"
            problems.append(f"`eval.tasks`: {task!r} is no lm-eval {known['lm_eval']} task{hint}")
    task, _, wanted = spec.metric.partition("/")
    metric, _, filtered = wanted.partition(",")
    key = f"{metric},{filtered or 'none'}"
    if task not in reported:
        if not problems:
            problems.append(f"`eval.metric`: {spec.metric!r} names task {task!r}, which is not in eval.tasks "
                            f"(their names: {', '.join(reported)})")  # fmt: skip
    elif reported[task] is None or not reported[task]:
        problems.append(f"`eval.metric`: {task!r} is a tag or a group with no score of its own; name one of its tasks")
    elif key not in (reported[task] or []):
        shown = ", ".join(score_name(task, k) for k in reported[task] or [])
        problems.append(f"`eval.metric`: {task} does not report {spec.metric!r}; it reports {shown}")
    return problems, users
