"""`cw artifacts RUN`: the run's checkpoints, final model and exports on its volume."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.formats import check_output, dump
from cw_cli.cli.options import context_option, namespace_option, output_option, run_argument
from cw_cli.cli.plain import printable, table

#: Metrics shown in the table, first found first (all of them are in -o json).
SHOWN_METRICS = ("loss", "train_loss", "reward", "eval_loss")


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


def deciding_metric(listing: dict[str, Any]) -> str | None:
    """The evaluation's deciding score (its scores files' ``metric``), or None where nothing was evaluated."""
    documents = [item.get("scores") for item in listing.get("artifacts") or []] + [listing.get("base_scores")]
    return next((str(d["metric"]) for d in documents if isinstance(d, dict) and d.get("metric")), None)


def _score(document: Any, metric: str) -> str:
    value = (document.get("scores") or {}).get(metric) if isinstance(document, dict) else None
    return f"{value:.4g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def _row(item: dict[str, Any]) -> list[str]:
    metrics = item.get("metrics") or {}
    shown = next((f"{key} {metrics[key]:.4g}" for key in SHOWN_METRICS if isinstance(metrics.get(key), (int, float))), "")
    when = dt.datetime.fromtimestamp(item["modified"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M") if item["modified"] else ""
    kind = item["kind"] + (" (adapter)" if item.get("adapter") else "")
    return [printable(kind), str(item["step"] if item["step"] is not None else ""), "yes" if item["complete"] else "no",
            _size(int(item["size"])), when, printable(shown), printable(item["path"])]  # fmt: skip


def is_local_path(run: str) -> bool:
    """Whether RUN is a path to a local run's folder rather than a run's name (`cw artifacts
    ./cw-local/my-sft`): it names a folder and cannot be a run's name."""
    from cw_cli.render.naming import is_run_name

    return not is_run_name(run) and Path(run).expanduser().is_dir()


@click.command("artifacts")
@run_argument()
@click.option("--local", is_flag=True,
              help="RUN is a --local run: its folder ./cw-local/RUN (or RUN is a path to that folder).")
@namespace_option
@context_option
@output_option
@handle_errors
def artifacts_command(run: str, local: bool, namespace: str | None, context: str | None, output: str) -> None:
    """List a run's checkpoints, final model and exports on its volume (step, size, time, metrics)."""
    from cw_cli.cli.runs import check_run_argument

    output = check_output(output)
    if local or is_local_path(run):
        from cw_cli.localrun.artifacts import list_local_artifacts

        listing = list_local_artifacts(run)
    else:
        check_run_argument(run)
        from cw_cli.cli.heartbeat import Heartbeat
        from cw_cli.cli.interrupts import termination_as_interrupt

        # SIGTERM removes the reader pod as Ctrl-C does; a line every 30 s on a pipe while it starts.
        with termination_as_interrupt(), Heartbeat(f"reading run {run}'s volume in a reader pod"):
            listing = api.Session(context=context, namespace=namespace).run(run).artifacts()
    if output != "table":
        click.echo(dump(listing, output), nl=False)
        return
    if not listing["artifacts"]:
        click.echo(f"{printable(listing['run_dir'])}: no checkpoint, model or export yet", err=True)
        return
    header = ["KIND", "STEP", "COMPLETE", "SIZE", "MODIFIED (UTC)", "METRICS", "PATH"]
    rows = [_row(item) for item in listing["artifacts"]]
    metric = deciding_metric(listing)
    if metric is not None:  # the evaluation's deciding score beside each model, the base model's first
        header.insert(-1, printable(metric).upper())
        for row, item in zip(rows, listing["artifacts"]):
            row.insert(-1, _score(item.get("scores"), metric))
        base = listing.get("base_scores")
        if isinstance(base, dict):
            rows.insert(0, ["base model", "", "", "", "", "", _score(base, metric), printable(str(base.get("model", "")))])
    click.echo(table(header, rows), nl=False)
