"""`cw download RUN DEST`: a run's model (or a checkpoint, or an export) copied to this machine."""

from __future__ import annotations

from pathlib import Path

import click

from cw_cli.cli.artifacts import is_local_path
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import checkpoint_form, context_option, namespace_option, run_argument
from cw_cli.cli.plain import printable, say


@click.command("download")
@run_argument()
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--checkpoint", default="final", show_default=True, callback=checkpoint_form,
              help="final, latest (the newest complete checkpoint), a step number, or export:NAME.")
@click.option("--local", is_flag=True, help="RUN is a --local run: its folder ./cw-local/RUN (or a path to it).")
@namespace_option
@context_option
@handle_errors
def download_command(run: str, dest: Path, checkpoint: str, local: bool, namespace: str | None, context: str | None) -> None:
    """Copy a run's model, checkpoint or export to this machine, verified; run again to go on after a stop."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from cw_cli import api
    from cw_cli.cli.runs import check_run_argument

    local = local or is_local_path(run)  # a --local run's folder: cw_cli/localrun/artifacts.py
    if not local:
        check_run_argument(run)
        run_handle = api.Session(context=context, namespace=namespace).run(run)
    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("download", total=None)

        def started(total: int, have: int) -> None:
            bar.update(task, total=total, completed=have)

        if local:
            from cw_cli.localrun.artifacts import download_local

            done = download_local(run, checkpoint, dest, started=started, progress=lambda size: bar.advance(task, size))
        else:
            done = run_handle.download(dest, checkpoint=checkpoint, started=started,
                                       progress=lambda size: bar.advance(task, size))  # fmt: skip
    resumed = f", {done['resumed_bytes'] / 2**20:.1f} MiB of them already there" if done["resumed_bytes"] else ""
    say(f"downloaded {printable(done['source'])}: {done['files']} files, {done['bytes'] / 2**20:.1f} MiB{resumed}, "
        f"verified (SHA-256) in {printable(str(dest))}", fg="green")  # fmt: skip
