"""An ``eval:`` block that names verifiers environments (``environments: [my-env]``): checked as
verifiers' own vf-eval will read them, before anything is created.

vf-eval imports an environment as a module: the last part of its id with ``-`` read as ``_``
(``primeintellect/vf-gsm8k`` -> ``vf_gsm8k``, verifiers/utils/env_utils.py). Its scores are what
vf-eval's saved metadata reports (``avg_reward`` and ``avg_metrics``: one per reward function of
the environment's rubric), named ``<env>/reward`` and ``<env>/<name>`` where ``<env>`` is the
environment as named here, without a hub owner. The reward functions are the environment's own
code, known only once it is loaded in the pod, so ``metric:`` is checked for its environment here
and its name when the scores come back (cw_vf_eval.py says which names there are).

In a verifiers run, an ``eval:`` block that names neither tasks nor environments scores the
environment the run trains on, with the arguments the trainer gives its ``load_environment``
(vf-eval's ``--env-args``), and ``metric`` defaults to ``<env>/reward``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cw_cli.config.evaluation import EvalSpec

#: An environment id as vf-eval takes it: a module-like name, or ``owner/name`` on the environment hub.
_ENVIRONMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]{0,99}/)?[A-Za-z_][A-Za-z0-9_\-]{0,99}")
#: Fields that only lm-eval reads, and those only vf-eval reads.
_TASK_ONLY = ("num_fewshot",)
_ENVIRONMENT_ONLY = ("rollouts_per_example", "environment_args")
#: What an ``eval:`` block naming neither or both harnesses is told.
NAME_ONE = ("`eval.tasks` / `eval.environments`: name exactly one: lm-eval tasks (tasks: [hellaswag]) "
            "or verifiers environments scored by vf-eval (environments: [my-env])")  # fmt: skip
#: The most bytes of one environment's arguments (they travel as one command-line argument).
MAX_ENVIRONMENT_ARGS = 16_384


def score_prefix(environment: str) -> str:
    """The name an environment's scores go under: its id without a hub owner (``owner/vf-x`` -> ``vf-x``)."""
    return environment.rsplit("/", 1)[-1]


def module_of(environment: str) -> str:
    """The module vf-eval imports for an environment id (verifiers' own rule)."""
    return environment.replace("-", "_").split("/")[-1]


def with_trained_environment(block: Any, trained: tuple[str, dict[str, Any]] | None) -> Any:
    """The user's raw ``eval:`` block with the run's own environment filled in: scored when the block
    names neither tasks nor environments, with the trainer's arguments unless ``environment_args``
    gives it its own. Anything that is not a mapping is left for validation to refuse."""
    if not isinstance(block, dict) or trained is None:
        return block
    env_id, args = trained
    filled = dict(block)
    if filled.get("tasks") is None and filled.get("environments") is None:
        filled["environments"] = [env_id]
    given = filled.get("environment_args")
    named = filled.get("environments")
    if args and isinstance(named, list) and env_id in named and (given is None or (isinstance(given, dict) and env_id not in given)):
        filled["environment_args"] = {**(given or {}), env_id: args}
    return filled


def with_default_metric(data: Any) -> Any:
    """The raw ``eval:`` data with ``metric: <first env>/reward`` when it names environments and no metric.

    Raises:
        ValueError: It names neither tasks nor environments (said before any missing field).
    """
    if isinstance(data, dict) and data.get("tasks") is None and data.get("environments") is None:
        raise ValueError(NAME_ONE)
    if isinstance(data, dict) and data.get("metric") is None and isinstance(data.get("environments"), list):
        first = next(iter(data["environments"]), None)
        if isinstance(first, str) and _ENVIRONMENT.fullmatch(first):
            return {**data, "metric": f"{score_prefix(first)}/reward"}
    return data


def check_environment_args(arguments: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """``eval.environment_args``: each environment's arguments as JSON vf-eval's ``--env-args`` reads
    (a field validator: raises ValueError naming the environment)."""
    for name, args in (arguments or {}).items():
        try:
            text = json.dumps(args, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name[:80]!r}: its arguments are no JSON vf-eval can read ({str(exc)[:120]}); "
                             "write numbers, strings, booleans, lists and mappings") from None  # fmt: skip
        if len(text.encode()) > MAX_ENVIRONMENT_ARGS:
            raise ValueError(f"{name[:80]!r}: its arguments are {len(text.encode())} bytes as JSON, over "
                             f"{MAX_ENVIRONMENT_ARGS}: pass a path to a file shipped with `files:` instead")  # fmt: skip
    return arguments


def check_environment_names(environments: list[str] | None) -> list[str] | None:
    """``eval.environments`` as vf-eval reads ids (a field validator: raises ValueError naming the entry)."""
    if environments is None:
        return None
    for name in environments:
        if not _ENVIRONMENT.fullmatch(name):
            raise ValueError(
                f"{name[:80]!r} is no verifiers environment id: a module name (letters, digits, '_', '-') "
                "or owner/name of the environment hub"
            )
    prefixes = [score_prefix(name) for name in environments]
    if len(set(prefixes)) != len(prefixes):
        raise ValueError("an environment is named twice (scores go under its name without the hub owner)")
    return environments


def check_harness_fields(spec: EvalSpec) -> None:
    """Exactly one of ``tasks`` and ``environments``, and only the fields their harness reads.

    Raises:
        ValueError: Neither or both, a field of the other harness, a fractional ``limit``
            with environments; the message names ``eval.<field>``.
    """

    def refuse(text: str) -> ValueError:
        return ValueError(text)

    if (spec.tasks is None) == (spec.environments is None):
        raise refuse(NAME_ONE)
    if spec.environments is None:
        for field in _ENVIRONMENT_ONLY:
            if getattr(spec, field) is not None:
                raise refuse(f"`eval.{field}`: only for environments (vf-eval), not for lm-eval tasks")
        return
    for field in _TASK_ONLY:
        if getattr(spec, field) is not None:
            raise refuse(f"`eval.{field}`: only for lm-eval tasks; vf-eval takes an environment's own prompts")
    unknown = sorted(set(spec.environment_args or {}) - set(spec.environments))
    if unknown:
        raise refuse(f"`eval.environment_args`: {', '.join(repr(name[:80]) for name in unknown[:5])} is not in "
                     "eval.environments (arguments are given per environment, by its name there)")  # fmt: skip
    if spec.limit is not None and spec.limit != int(spec.limit):
        raise refuse(f"`eval.limit`: {spec.limit} is no whole number: with environments it is vf-eval's "
                     "--num-examples, the examples per environment")  # fmt: skip


def check_environments(spec: EvalSpec) -> list[str]:
    """Problems with the deciding metric of an ``eval:`` block naming environments (each naming ``eval.metric``)."""
    names = [score_prefix(name) for name in spec.environments or []]
    environment = spec.metric.partition("/")[0]
    if environment not in names:
        return [f"`eval.metric`: {spec.metric!r} names environment {environment!r}, which is not in eval.environments "
                f"(its scores: {', '.join(f'{n}/reward' for n in names)})"]  # fmt: skip
    return []
