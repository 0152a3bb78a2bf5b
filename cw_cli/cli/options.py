"""Options and arguments shared by several commands, and the cluster connection they select."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cw_cli import api
from cw_cli.errors import ConfigError

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from cw_cli.config.options import LaunchOptions


F = TypeVar("F", bound=Callable[..., Any])


def namespace_option(function: F) -> F:
    """``--namespace/-n``: the namespace (default: the kubeconfig context's)."""
    return click.option("--namespace", "-n", help="Namespace (default: the context's).")(function)


def context_option(function: F) -> F:
    """``--context``: the kubeconfig context (default: the current one)."""
    return click.option("--context", help="kubeconfig context.")(function)


def cluster_options(function: F) -> F:
    """``--namespace/-n`` and ``--context``: where a command acts (every command that reads or writes a run)."""
    return namespace_option(context_option(function))


#: The click option of each :class:`~cw_cli.config.options.LaunchOptions` field, by field name:
#: ``cw FRAMEWORK TYPE`` and ``cw estimate`` are built from this one table (``launch_flags``).
LAUNCH_FLAGS: dict[str, Callable[[Any], Any]] = {
    "gpu": click.option("--gpu", type=int, help="GPUs per trainer node."),
    "cpu": click.option("--cpu", help="CPU per trainer pod, e.g. 32."),
    "memory": click.option("--memory", help="Memory per trainer pod, e.g. 256Gi."),
    "image": click.option("--image", help="Trainer image."),
    "nodes": click.option("--nodes", type=int, help="Trainer nodes (one pod each)."),
    "name": click.option("--name", help="Run name (default: generated, unique)."),
    "pull": click.option("--pull", is_flag=True, help="Always pull the image."),
    "set": click.option("--set", "set", multiple=True, metavar="KEY=VALUE",
                        help="key=value for any config key, dotted keys nest, value typed as YAML; repeatable."),
    "namespace": namespace_option,
    "services": click.option("--services", is_flag=True, help="Deploy only the services of a multi-service type."),
    "ttl": click.option("--ttl", help="With --services: how long the servers live, e.g. 6h, 90m."),
    "timeout": click.option("--timeout", type=float, help="Seconds to wait for services (and with --wait, the run)."),
    "local": click.option("--local", is_flag=True, help="Run the trainer's command here as a local process (debugging)."),
    "resume": click.option("--resume", is_flag=True,
                           help="Continue the checkpoints in the run's folder even though the config changed."),
}  # fmt: skip


def launch_flags(fields: tuple[str, ...]) -> Callable[[F], F]:
    """CONFIG, the flags of ``fields`` of :data:`LAUNCH_FLAGS` (in that order) and ``--context``.

    The command receives each flag under its field's name; :func:`take_launch_options` makes
    them a :class:`~cw_cli.config.options.LaunchOptions`.
    """

    def decorate(function: F) -> F:
        from pathlib import Path  # with urllib.parse and ipaddress: only the commands that take a CONFIG need it

        decorators = [click.argument("config", type=click.Path(path_type=Path)),
                      *(LAUNCH_FLAGS[field] for field in fields), context_option]  # fmt: skip
        for decorator in reversed(decorators):  # as if stacked above the function, first on top
            function = decorator(function)
        return function

    return decorate


def take_launch_options(params: dict[str, Any]) -> LaunchOptions:
    """The launch options among a command's parameters, removed from ``params`` (``--set`` as a list)."""
    from cw_cli.config.options import LaunchOptions

    given = {field: params.pop(field) for field in LAUNCH_FLAGS if field in params}
    if "set" in given:
        given["set"] = list(given["set"])
    return LaunchOptions(**given)


def gpu_memory_option(function: F) -> F:
    """``--gpu-memory``: one GPU's memory for the memory estimate."""
    return click.option(
        "--gpu-memory", metavar="SIZE",
        help="Memory of one GPU for the memory estimate, e.g. 80GB or 141GB (default: gpu_memory / gpu_type in the "
        "config, else the nodes' nvidia.com/gpu.memory labels).",
    )(function)  # fmt: skip


def output_option(function: F) -> F:
    """``--output/-o``: table, json or yaml; checked by the command (so the message lists the choices)."""
    return click.option(
        "--output", "-o", default="table", show_default=True, metavar="FORMAT",
        help="table, json or yaml (fields: docs/output.md).",
    )(function)  # fmt: skip


def check_gpu_memory_flag(value: str | None) -> str | None:
    """``--gpu-memory``, checked as the config's ``gpu_memory`` is (``0``, ``-1`` and ``abc`` are refused).

    Args:
        value: The flag as typed, or None when it was not given.

    Returns:
        The size, stripped (None when not given).

    Raises:
        ConfigError: Not a memory size greater than zero; the message names the flag.
    """
    if value is None:
        return None
    from cw_cli.config.models import gpu_memory_size

    try:
        return gpu_memory_size(value)
    except ValueError as exc:
        raise ConfigError([f"--gpu-memory: {exc}"], hint="e.g. --gpu-memory 80GB, 80Gi or 141GB") from None


def complete_run(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a RUN argument: the runs in the namespace, read through the API server.

    Fast (a short request timeout) and silent: no cluster, no kubeconfig or no permission means
    no candidates, never a traceback in the middle of the user's command line.
    """
    try:
        import warnings

        from click.shell_completion import CompletionItem

        os.environ.setdefault("CW_REQUEST_TIMEOUT", "3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

            params = ctx.params or {}
            names = api.Session(context=params.get("context"), namespace=params.get("namespace")).run_names()
        return [CompletionItem(name) for name in names if name.startswith(incomplete or "")]
    except Exception:  # noqa: BLE001 - completion must never fail loudly
        return []


def run_argument(required: bool = True) -> Callable[[F], F]:
    """The RUN argument of status, logs and delete: completes run names."""
    return click.argument("run", metavar="RUN", required=required, shell_complete=complete_run)


#: What ``--checkpoint`` may name (download, serve, try): final, latest, best, a step number, or
#: ``export:NAME`` (a folder of ``RUN/exported``, so one path component).
_CHECKPOINT_FORM = re.compile(r"final|latest|best|[0-9]{1,11}|export:(?!\.\.?$)[^/\x00-\x1f\x7f]{1,200}")


def checkpoint_form(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Click callback: refuse a ``--checkpoint`` of the wrong form while the flags are parsed
    (exit 2), before any cluster is asked; whether the run has it is the cluster's to say.

    Raises:
        click.BadParameter: Not final, latest, best, a step number or export:NAME.
    """
    if not _CHECKPOINT_FORM.fullmatch(value):
        raise click.BadParameter(f"{value[:40]!r}: expected final, latest, best, a step number or export:NAME")
    return value


def duration_form(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback: refuse a duration flag (``--ttl``) that is not one (``90m``, ``6h``, ``2d``;
    at most a year) while the flags are parsed (exit 2), before any cluster is asked.

    Raises:
        click.BadParameter: Not a duration, or longer than a year.
    """
    if value is None:
        return None
    from cw_cli.config.quantity import parse_duration

    try:
        parse_duration(value, f"--{param.name}")
    except ConfigError as exc:
        raise click.BadParameter(exc.message.removeprefix(f"--{param.name} ")) from None
    return value
