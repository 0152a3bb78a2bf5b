"""The settings of an evaluation by verifiers' own vf-eval (``eval: {environments: [...]}``), as the
evaluation pod's cw_vf_eval.py reads them from ``cw-eval.json``.

The pod serves the model with a maintained OpenAI-compatible server (vLLM's ``vllm serve`` on a
GPU, as `cw serve` does; ``transformers serve`` on CPU) and runs ``vf-eval`` against it. An
environment shipped with the run (``files:``, as the verifiers trainer imports it) travels in the
settings; any other is installed from the environment hub as the trainer installs it
(frameworks/verifiers/launch.py). What is pip-installed when the image lacks it is listed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli.config.eval_environments import module_of, score_prefix
from cw_cli.errors import ConfigError
from cw_cli.frameworks.verifiers.launch import environment_install
from cw_cli.frameworks.verifiers.pins import PRIME_CLI, VERIFIERS_VERSION

if TYPE_CHECKING:
    from cw_cli.config.evaluation import EvalSpec

#: verifiers' core (vf-eval needs no trainer stack), at cw's pin.
VF_EVAL_REQUIREMENT = f"verifiers=={VERIFIERS_VERSION}"
#: ``transformers serve`` answers a non-streaming chat completion with one JSON object from 5.0 on
#: (4.57, which verifiers' trainer stack pins, answers every request as an SSE stream, which vf-eval's
#: OpenAI client cannot read). 5.x needs huggingface-hub 1.x; verifiers' datasets needs it below 2.
CPU_SERVER_REQUIREMENTS = ("transformers[serving]==5.24.0", "huggingface-hub>=1.3,<2")


def environment_settings(spec: EvalSpec, gpu: int, shipped: dict[str, str]) -> dict[str, Any]:
    """``cw-eval.json`` of an ``eval:`` block naming environments.

    Args:
        spec: The checked block (``environments`` set).
        gpu: The evaluation pod's GPUs (a GPU: vLLM; none: ``transformers serve``).
        shipped: The run's ``files:`` by name -> text (the environments among them travel).
    """
    environments = list(spec.environments or [])
    files = {f"{module_of(env)}.py": shipped[f"{module_of(env)}.py"] for env in environments
             if f"{module_of(env)}.py" in shipped}  # fmt: skip
    install = [environment_install(env) for env in environments if f"{module_of(env)}.py" not in files]
    server = spec.backend if spec.backend != "auto" else ("vllm" if gpu else "hf")
    requirements = [VF_EVAL_REQUIREMENT, *([PRIME_CLI] if install else [])]
    if server == "hf":
        requirements += CPU_SERVER_REQUIREMENTS
    return {
        "harness": "vf-eval", "environments": environments, "environment_files": files, "install": install,
        "environment_args": {env: args for env, args in (spec.environment_args or {}).items() if env in environments},
        "num_examples": int(spec.limit) if spec.limit is not None else None,
        "rollouts_per_example": spec.rollouts_per_example, "sampling_args": dict(spec.generation),
        "serve_with": "vllm" if server == "vllm" else "transformers", "gpu": gpu, "metric": spec.metric,
        "higher_is_better": spec.higher_is_better, "requirements": requirements,
    }  # fmt: skip


def shipped_texts(base_dir: Path, relatives: list[str]) -> dict[str, str]:
    """The run's ``files:`` that are Python modules, by name -> text (an environment among them travels)."""
    from cw_cli.render.shipped_files import user_files

    python = [name for name in relatives if name.endswith(".py")]
    return {f.key: f.content.decode("utf-8", errors="replace") for f in user_files(base_dir, python)}


def with_gpu(settings: dict[str, Any], gpu: int) -> dict[str, Any]:
    """vf-eval's settings for an evaluation pod with ``gpu`` GPUs (`cw eval RUN --gpu N`): its server
    (vLLM on a GPU, ``transformers serve`` on CPU) and what that server needs installed."""
    requirements = [r for r in settings.get("requirements") or [] if r not in CPU_SERVER_REQUIREMENTS]
    return {**settings, "gpu": gpu, "serve_with": "vllm" if gpu else "transformers",
            "requirements": requirements if gpu else [*requirements, *CPU_SERVER_REQUIREMENTS]}  # fmt: skip


def with_flags(settings: dict[str, Any], metric: str | None, limit: float | None) -> dict[str, Any]:
    """vf-eval's settings of a run with ``cw eval RUN --metric ENV/NAME --limit N`` (no ``--tasks``).

    Raises:
        ConfigError: A metric of no environment of the run, a limit that is no whole number.
    """
    names = [score_prefix(str(env)) for env in settings.get("environments") or []]
    problems = []
    if metric is not None and (metric.count("/") != 1 or metric.partition("/")[0] not in names or not metric.partition("/")[2]):
        problems.append(f"--metric: {metric!r} is no <environment>/<score> of this run's environments "
                        f"(their scores: {', '.join(f'{n}/reward' for n in names)}, ...)")  # fmt: skip
    if limit is not None and (limit < 1 or limit != int(limit)):
        problems.append(f"--limit: {limit} is no whole number of examples per environment (vf-eval's --num-examples)")
    if problems:
        raise ConfigError(problems, hint=f"cw eval RUN --metric {names[0] if names else 'ENV'}/reward --limit 20")
    changed = {**settings}
    if metric is not None:
        changed["metric"] = metric
    if limit is not None:
        changed["num_examples"] = int(limit)
    return changed
