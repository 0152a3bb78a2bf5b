"""`cw download RUN DEST`: a run's model (or a checkpoint, or an export) copied to this machine."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import click

from cw_cli import api
from cw_cli.cli.artifacts import is_local_path
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import checkpoint_form, context_option, namespace_option, run_argument
from cw_cli.cli.output import err
from cw_cli.cli.plain import printable, say

#: Seconds between two progress lines when stderr is not a terminal.
LINE_EVERY_S = 30.0


@click.command("download")
@run_argument()
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--checkpoint", default="final", show_default=True, callback=checkpoint_form,
              help="final, latest (the newest complete checkpoint), best (the best evaluated one), a step number, or export:NAME.")
@click.option("--local", is_flag=True, help="RUN is a --local run: its folder ./cw-local/RUN (or a path to it).")
@namespace_option
@context_option
@handle_errors
def download_command(run: str, dest: Path, checkpoint: str, local: bool, namespace: str | None, context: str | None) -> None:
    """Copy a run's model, checkpoint or export to this machine, verified; run again to go on after a stop."""
    from cw_cli.cli.interrupts import termination_as_interrupt
    from cw_cli.cli.runs import check_run_argument

    local = local or is_local_path(run)  # a --local run's folder: cw_cli/localrun/artifacts.py
    if not local:
        check_run_argument(run)
        run_handle = api.Session(context=context, namespace=namespace).run(run)
    shown = _Shown()
    with termination_as_interrupt():
        try:
            if local:
                from cw_cli.localrun.artifacts import download_local

                done = download_local(run, checkpoint, dest, started=shown.start, progress=shown.advance)
            else:
                done = run_handle.download(dest, checkpoint=checkpoint, started=shown.start, progress=shown.advance)
        finally:
            shown.stop()
    resumed = f", {done['resumed_bytes'] / 2**20:.1f} MiB of them already there" if done["resumed_bytes"] else ""
    say(f"downloaded {printable(done['source'])}: {done['files']} files, {done['bytes'] / 2**20:.1f} MiB{resumed}, "
        f"verified (SHA-256) in {printable(str(dest))}", fg="green")  # fmt: skip


class _Shown:
    """The download's progress on stderr: a bar on a terminal, else a line every
    :data:`LINE_EVERY_S` seconds (a CI log or a pipe still sees it is alive, without a flood)."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._total = self._done = self._at_start = 0
        self._started = self._last_line = 0.0
        self._lock = threading.Lock()

    def start(self, total: int, have: int) -> None:
        self._total, self._done, self._at_start = total, have, have
        self._started = self._last_line = time.monotonic()
        if err().is_terminal:
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

            self._bar = Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                                 console=err(), transient=True)  # fmt: skip
            self._task = self._bar.add_task("download", total=total, completed=have)
            self._bar.start()
        else:
            say(f"downloading {total / 2**20:.1f} MiB ({have / 2**20:.1f} MiB already here)")

    def advance(self, size: int) -> None:  # from the download's threads
        with self._lock:
            self._done += size
            if self._bar is not None:
                self._bar.advance(self._task, size)
                return
            now = time.monotonic()
            if now - self._last_line < LINE_EVERY_S:
                return
            self._last_line = now
            done, total, elapsed = self._done, self._total, now - self._started
        rate = (done - self._at_start) / elapsed / 2**20 if elapsed > 0 else 0.0
        say(f"  {done / 2**20:.1f} of {total / 2**20:.1f} MiB after {elapsed:.0f}s ({rate:.1f} MiB/s)")

    def stop(self) -> None:
        """End the bar (nothing to do for lines)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
