"""`cw pipeline FILE`: launch a pipeline's stages (SFT -> DPO -> evaluation...) at once."""

from __future__ import annotations

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import context_option, namespace_option
from cw_cli.cli.plain import printable, say


@click.command("pipeline")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print every stage's objects and the keeper's; create nothing.")
@namespace_option
@context_option
@handle_errors
def pipeline_command(file: str, dry_run: bool, namespace: str | None, context: str | None) -> None:
    """Launch a pipeline: each stage an ordinary run, each later one started in the cluster when those it waits for succeeded."""
    from cw_cli.api.pipelines import plan_pipeline, submit_pipeline

    session = api.Session(context=context, namespace=namespace)
    planned = plan_pipeline(file, namespace=namespace, registry=session.registry, connect=lambda: session.kube,
                            if_reachable=dry_run)  # fmt: skip
    for notice in planned.notices:
        say(f"note: {printable(notice)}", fg="yellow")
    if dry_run:
        click.echo(planned.to_yaml(), nl=False)
        return
    submit_pipeline(session, planned, lambda line: say(f"  {printable(line)}"))
    for stage in planned.stages:
        what = f"run {stage.plan.run_name}" if stage.name in planned.runs else f"evaluation {stage.plan.run_name}"
        when = "started" if not stage.after else f"created in the cluster once {', '.join(stage.after)} succeeded"
        say(f"stage {click.style(stage.name, bold=True)}: {what} {when}")
    say(f"next: cw list   (the pipeline's runs are grouped under {planned.name})")
