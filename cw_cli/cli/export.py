"""`cw export RUN`: a checkpoint of a run turned into a model ready to use, by a Job on the cluster."""

from __future__ import annotations

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import cluster_options, run_argument
from cw_cli.cli.plain import printable, say
from cw_cli.errors import ConfigError


@click.command("export")
@run_argument()
@click.option("--checkpoint", default="final", show_default=True,
              help="final (the model saved at the end), latest (the newest complete checkpoint), best (the best evaluated one) "
                   "or a step number.")
@click.option("--merge", is_flag=True, help="Merge a LoRA adapter into its base model.")
@click.option("--push-to-hub", "push_to_hub", metavar="REPO", help="Also upload it to this Hub repository (the run's HF_TOKEN).")
@click.option("--private", is_flag=True, help="With --push-to-hub: create the repository private.")
@click.option("--to", "to", metavar="URL",
              help="Also copy it to object storage from the pod: s3://BUCKET/PATH (or gs://, az://, abfs://).")
@click.option("--secret", "secrets", metavar="VAR=SECRET[:KEY]", multiple=True,
              help="An environment variable of the export pod from a Secret's key (the upload's credentials); repeatable.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier export of the same checkpoint.")
@click.option("--force", is_flag=True, help="Export even where the run's export gate refuses the checkpoint (worse than the base model).")
@click.option("--gpu", type=int, default=0, show_default=True, help="GPUs for the export pod.")
@click.option("--cpu", default=None, help="CPU of the export pod (default 8, at most the run's trainer's).")
@click.option("--memory", default=None,
              help="Memory of the export pod: a merge holds the base model (default 64Gi, at most the run's trainer's).")
@click.option("--wait", is_flag=True, help="Wait until the export ends; exit 1 if it fails.")
@click.option("--timeout", type=float, help="With --wait: seconds to wait.")
@cluster_options
@handle_errors
def export_command(
    run: str, checkpoint: str, merge: bool, push_to_hub: str | None, private: bool, to: str | None,
    secrets: tuple[str, ...], overwrite: bool, force: bool, gpu: int, cpu: str | None, memory: str | None, wait: bool,
    timeout: float | None, namespace: str | None, context: str | None,
) -> None:  # fmt: skip
    """Export a run's model to RUN/exported/ on its checkpoint volume (merged, or pushed to the Hub)."""
    from cw_cli.cli.runs import check_run_argument
    from cw_cli.config.quantity import MAX_DURATION_S

    check_run_argument(run)
    if timeout is not None and not (wait and 0 < timeout <= MAX_DURATION_S):  # checked before any Job exists
        problem = "--timeout is for --wait" if not wait else f"--timeout {timeout:g}: expected a positive number of seconds, at most a year"
        raise ConfigError([problem], hint="e.g. --wait --timeout 3600")
    session = api.Session(context=context, namespace=namespace)
    started = session.run(run).export(checkpoint=checkpoint, merge=merge, push_to_hub=push_to_hub, private=private,
                                      overwrite=overwrite, force=force, gpu=gpu, cpu=cpu, memory=memory, to=to,
                                      secrets=secrets)  # fmt: skip
    say(f"export {click.style(started.name, bold=True)} started: {printable(started.run_dir)}/exported/ on the run's volume"
        + (f", then {printable(to)}" if to else ""))
    say(f"next: cw logs {run} --role export -f   cw status {run}")
    if wait:
        from cw_cli.cli.heartbeat import Heartbeat

        with Heartbeat(f"waiting for export {started.name}") as beat:  # a line every 30 s on a pipe: not a hang
            started.wait(timeout, lambda line: beat.note(f"  {printable(line)}"))
        say(f"export {started.name} succeeded", fg="green")
