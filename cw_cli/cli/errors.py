"""Turning cw's errors into one-line messages and documented exit codes."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cw_cli.cli.output import err
from cw_cli.errors import ConfigError, CwError, ExitCode

F = TypeVar("F", bound=Callable[..., Any])


def debug_enabled() -> bool:
    """Whether ``--debug`` (or ``CW_DEBUG=1``) asked for details and tracebacks."""
    return os.environ.get("CW_DEBUG", "") not in ("", "0")


def report(error: CwError) -> None:
    """Print an error: its line(s), a hint, and the detail under --debug."""
    from rich.markup import escape as markup_escape

    from cw_cli.cli.plain import printable

    def escape(text: str) -> str:  # a message may quote the cluster or a file: no markup, no control sequences
        return markup_escape(printable(text, lines=True))

    console = err()
    if isinstance(error, ConfigError) and len(error.issues) > 1:
        console.print(f"[bold red]error:[/] {escape(error.message)}")
        for issue in error.issues:
            console.print(f"  - {escape(issue)}")
    else:
        console.print(f"[bold red]error:[/] {escape(error.message)}")
    if error.hint:
        console.print(f"[yellow]hint:[/] {escape(error.hint)}")
    if error.detail and debug_enabled():
        console.print(escape(error.detail))


def handle_errors(function: F) -> F:
    """Run a command, mapping cw errors and Ctrl-C to messages and exit codes (no tracebacks)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except CwError as error:
            if debug_enabled():
                import traceback

                traceback.print_exc()
            report(error)
            raise click.exceptions.Exit(int(error.exit_code)) from None
        except KeyboardInterrupt:
            err().print("interrupted")
            raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None

    return wrapper  # type: ignore[return-value]
