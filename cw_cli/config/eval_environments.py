"""An ``eval:`` block that names verifiers environments (``environments: [my-env]``): checked as
verifiers' own vf-eval will read them, before anything is created.

vf-eval imports an environment as a module: the last part of its id with ``-`` read as ``_``
(``primeintellect/vf-gsm8k`` -> ``vf_gsm8k``, verifiers/utils/env_utils.py). Its scores are what
vf-eval's saved metadata reports (``avg_reward`` and ``avg_metrics``: one per reward function of
the environment's rubric), named ``<env>/reward`` and ``<env>/<name>`` where ``<env>`` is the
environment as named here, without a hub owner. The reward functions are the environment's own
code, known only once it is loaded in the pod, so ``metric:`` is checked for its environment here
and its name when the scores come back (cw_vf_eval.py says which names there are).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cw_cli.config.evaluation import EvalSpec

#: An environment id as vf-eval takes it: a module-like name, or ``owner/name`` on the environment hub.
_ENVIRONMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]{0,99}/)?[A-Za-z_][A-Za-z0-9_\-]{0,99}")
#: Fields that only lm-eval reads, and the one only vf-eval reads.
_TASK_ONLY = ("num_fewshot",)
_ENVIRONMENT_ONLY = ("rollouts_per_example",)


def score_prefix(environment: str) -> str:
    """The name an environment's scores go under: its id without a hub owner (``owner/vf-x`` -> ``vf-x``)."""
    return environment.rsplit("/", 1)[-1]


def module_of(environment: str) -> str:
    """The module vf-eval imports for an environment id (verifiers' own rule)."""
    return environment.replace("-", "_").split("/")[-1]


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
        raise refuse("`eval.tasks` / `eval.environments`: name exactly one: lm-eval tasks (tasks: [hellaswag]) "
                     "or verifiers environments scored by vf-eval (environments: [my-env])")  # fmt: skip
    if spec.environments is None:
        for field in _ENVIRONMENT_ONLY:
            if getattr(spec, field) is not None:
                raise refuse(f"`eval.{field}`: only for environments (vf-eval); lm-eval tasks have no rollouts")
        return
    for field in _TASK_ONLY:
        if getattr(spec, field) is not None:
            raise refuse(f"`eval.{field}`: only for lm-eval tasks; vf-eval takes an environment's own prompts")
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
