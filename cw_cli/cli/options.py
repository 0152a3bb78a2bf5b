"""Options and arguments shared by several commands, and the cluster connection they select."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cw_cli.errors import ConfigError

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


F = TypeVar("F", bound=Callable[..., Any])


def namespace_option(function: F) -> F:
    """``--namespace/-n``: the namespace (default: the kubeconfig context's)."""
    return click.option("--namespace", "-n", help="Namespace (default: the context's).")(function)


def context_option(function: F) -> F:
    """``--context``: the kubeconfig context (default: the current one)."""
    return click.option("--context", help="kubeconfig context.")(function)


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
            from cw_cli import api

            params = ctx.params or {}
            names = api.Session(context=params.get("context"), namespace=params.get("namespace")).run_names()
        return [CompletionItem(name) for name in names if name.startswith(incomplete or "")]
    except Exception:  # noqa: BLE001 - completion must never fail loudly
        return []


def run_argument(required: bool = True) -> Callable[[F], F]:
    """The RUN argument of status, logs and delete: completes run names."""
    return click.argument("run", metavar="RUN", required=required, shell_complete=complete_run)


#: What ``--checkpoint`` may name (download, serve, try): final, latest, a step number, or
#: ``export:NAME`` (a folder of ``RUN/exported``, so one path component).
_CHECKPOINT_FORM = re.compile(r"final|latest|[0-9]{1,11}|export:(?!\.\.?$)[^/\x00-\x1f\x7f]{1,200}")


def checkpoint_form(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Click callback: refuse a ``--checkpoint`` of the wrong form while the flags are parsed
    (exit 2), before any cluster is asked; whether the run has it is the cluster's to say.

    Raises:
        click.BadParameter: Not final, latest, a step number or export:NAME.
    """
    if not _CHECKPOINT_FORM.fullmatch(value):
        raise click.BadParameter(f"{value[:40]!r}: expected final, latest, a step number or export:NAME")
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
