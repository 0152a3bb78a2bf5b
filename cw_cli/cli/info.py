"""`cw frameworks`, `cw schema` and `cw completion`: what cw knows, for people and editors."""

from __future__ import annotations

import click

from cw_cli.cli.errors import handle_errors
from cw_cli.cli.output import err, out


@click.command("frameworks")
@click.pass_context
@handle_errors
def frameworks_command(ctx: click.Context) -> None:
    """List the frameworks (built-in and plugins) and the plugins that failed to load."""
    from rich.markup import escape
    from rich.table import Table

    registry = ctx.find_root().command.registry  # type: ignore[attr-defined]
    table = Table("FRAMEWORK", "TYPES", "VERSION", "SOURCE", "DESCRIPTION", box=None)
    for loaded in registry.all():
        table.add_row(loaded.name, ", ".join(loaded.types), loaded.plugin.version, loaded.source, loaded.plugin.description)
    out().print(table)
    for failure in [] if registry.reported else registry.failures:  # else warned of as it loaded
        err().print(f"[red]failed to load[/] {escape(failure.source)}: {escape(failure.error)}")
    for note in registry.notes:
        err().print(f"note: {escape(note)}")


@click.command("schema")
def schema_command() -> None:
    """Print the JSON Schema of cw's config fields (for editors)."""
    import json

    from cw_cli.config.models import ClusterSpec

    schema = ClusterSpec.model_json_schema()
    schema["title"] = "cw run config"
    schema["description"] = "cw's cluster fields; any other top-level key is the framework's own config."
    schema["additionalProperties"] = True
    out().file.write(json.dumps(schema, indent=2) + "\n")


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_command(shell: str) -> None:
    """Print the shell completion script; e.g. add `eval "$(cw completion bash)"` to ~/.bashrc.

    Commands, options and run names (read through the API server) complete.
    """
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root()
    completion = get_completion_class(shell)
    assert completion is not None  # the Choice allows only shells click knows
    out().file.write(completion(root.command, {}, "cw", "_CW_COMPLETE").source() + "\n")
