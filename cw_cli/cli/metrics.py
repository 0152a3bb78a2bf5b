"""`cw metrics`: the trainer's metrics of runs (from their pod logs) or of local paths."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import context_option, namespace_option
from cw_cli.cli.output import err, out
from cw_cli.errors import ConfigError, NotFound
from cw_cli.render.naming import validate_run_name

if TYPE_CHECKING:
    from rich.console import RenderableType

    from cw_cli.metrics.parse import RunMetrics

OUTPUTS = ("table", "json", "csv")
# While following, redraw at most this often: a fast trainer logs many records a second.
_REDRAW_S = 1.0


def _format(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else repr(value)


def _table(runs: list[RunMetrics]) -> RenderableType:
    """Latest value of each metric: one row per metric, one column per run."""
    from rich.table import Table

    table = Table("METRIC", *(run.name for run in runs), box=None)
    latest = [run.latest() for run in runs]
    names: dict[str, None] = {}
    for values in latest:
        names.update(dict.fromkeys(values))
    table.add_row("[dim]step[/]", *(str(max((s for s, _ in v.values()), default="-")) for v in latest))
    for name in names:
        table.add_row(name, *(_format(v[name][1]) if name in v else "-" for v in latest))
    return table


def _charts(runs: list[RunMetrics], metrics: list[str], width: int) -> RenderableType:
    from rich.console import Group

    from cw_cli.metrics.chart import chart_text

    plot_width = max(min(width - 14, 100), 20)
    parts = []
    for metric in metrics:
        series = [(run.name, run.series().get(metric, [])) for run in runs]
        if any(points for _, points in series):
            parts.append(chart_text(metric, series, width=plot_width, height=10))
    return Group(*parts)


def _view(runs: list[RunMetrics], metrics: list[str], width: int) -> RenderableType:
    from rich.console import Group

    return Group(_table(runs), "", _charts(runs, metrics, width))


def _resolve_metrics(runs: list[RunMetrics], asked: list[str]) -> list[str]:
    from cw_cli.metrics.parse import default_metrics

    if not asked:
        return default_metrics(runs)
    known: dict[str, None] = {}
    for run in runs:
        known.update(dict.fromkeys(run.latest()))
    missing = [m for m in asked if m not in known]
    if missing and any(run.records for run in runs):
        shown = ", ".join(known) or "none"
        raise ConfigError([f"--metric {m!r}: not logged by any of these runs" for m in missing], hint=f"logged: {shown}")
    return asked


def _load(target: str, rank: int | None, namespace: str | None, context: str | None) -> RunMetrics:
    """A run's metrics from its pod's log, or a path's when ``target`` is an existing path."""
    from cw_cli.metrics.sources import load_path, read_lines

    path = Path(target).expanduser()
    if path.exists() or path.is_symlink():
        return load_path(path, target)
    _check_run_name(target)
    from rich.markup import escape


    run = api.Session(context=context, namespace=namespace).run(target)
    lines = run.logs(rank=rank, notice=lambda m: err().print(escape(m)))
    return read_lines(lines, target, _pod_source(target, rank))


def _check_run_name(target: str) -> None:
    """A target that is neither an existing path nor a run name is a missing file: no cluster is asked."""

    try:
        validate_run_name(target)
    except ConfigError:
        raise NotFound(
            f"{target}: no such file or folder (nor a run name)", hint="check the path, or give a run name (`cw list`)"
        ) from None


def _pod_source(run: str, rank: int | None) -> str:
    return f"trainer log of run {run}, rank {rank or 0}"


def _follow(target: str, rank: int | None, namespace: str | None, context: str | None, asked: list[str],
            show: bool) -> RunMetrics:
    """Follow one run's log until its pod ends; with ``show``, keep the table and chart drawn."""
    from rich.live import Live
    from rich.markup import escape

    from cw_cli.metrics.parse import RecordParser, RunMetrics

    run = RunMetrics(target, _pod_source(target, rank))
    parser = RecordParser()
    console = out()
    source = api.Session(context=context, namespace=namespace).run(target)
    lines: Iterable[str] = source.logs(rank=rank, follow=True, notice=lambda m: err().print(escape(m)))

    def render() -> RenderableType:
        metrics = asked or _resolve_metrics([run], [])
        return _view([run], metrics, console.width)

    if not show:
        run.records.extend(parser.feed_all(lines))
    else:
        with Live(render(), console=console, auto_refresh=False, transient=False) as live:
            drawn = time.monotonic()
            for line in lines:
                new = parser.feed(line)
                run.records.extend(new)
                if new and time.monotonic() - drawn >= _REDRAW_S:
                    live.update(render(), refresh=True)
                    drawn = time.monotonic()
            live.update(render(), refresh=True)
    run.step_source = "logged" if parser.explicit_steps else "counted"
    return run


@click.command("metrics")
@click.argument("runs", nargs=-1, required=True, metavar="RUN|PATH...")
@click.option("--metric", "-m", multiple=True, help="Metric to chart (repeatable; default: reward if logged, else loss).")
@click.option("--rank", type=int, help="Node rank whose log is read (default 0).")
@click.option("--output", "-o", default="table", show_default=True, help="table, json or csv (the raw series).")
@click.option("--png", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write a PNG plot, one panel per metric (needs the 'plot' extra).")
@click.option("--follow", "-f", is_flag=True, help="Keep reading the run's log and redrawing until its pod ends.")
@namespace_option
@context_option
@handle_errors
def metrics_command(
    runs: tuple[str, ...],
    metric: tuple[str, ...],
    rank: int | None,
    output: str,
    png: Path | None,
    follow: bool,
    namespace: str | None,
    context: str | None,
) -> None:
    """Show a run's training metrics (loss, reward...) from its trainer log: a table and a chart.

    RUN|PATH: run names, or local paths (an output/checkpoint folder, a trainer_state.json, a log file).
    """

    if output not in OUTPUTS:
        raise ConfigError([f"-o {output!r}: expected table, json or csv"])
    if rank is not None and rank < 0:  # as `cw logs`: the user's value (exit 2), before any run is looked for
        raise ConfigError([f"--rank {rank}: expected 0 or more"])
    if follow and (len(runs) != 1 or Path(runs[0]).expanduser().exists()):
        raise ConfigError(["--follow reads one run on the cluster"], hint="give a single run name")
    asked = list(metric or [])
    if png is not None:
        from cw_cli.metrics.plot import check_png_path, require_matplotlib

        require_matplotlib()  # fail now, not after reading the logs
        check_png_path(png)

    if follow:
        loaded = [_follow(runs[0], rank, namespace, context, asked, show=output == "table" and png is None)]
    else:
        loaded = [_load(target, rank, namespace, context) for target in runs]
    chosen = _resolve_metrics(loaded, asked)

    for run in loaded:
        if not run.records:
            err().print(f"{run.name}: no metric records yet ({run.source})")
    if output == "json":
        from cw_cli.metrics.export import to_json

        out().file.write(to_json(loaded, asked or None))
    elif output == "csv":
        from cw_cli.metrics.export import to_csv

        out().file.write(to_csv(loaded, asked or None))
    elif not follow or png is not None:
        console = out()
        console.print(_view(loaded, chosen, console.width))
    if png is not None:
        from cw_cli.metrics.plot import write_png

        if not chosen:
            raise ConfigError(["--png: no metric records to plot"])
        write_png(loaded, chosen, png)
        err().print(f"wrote {png} ({', '.join(chosen)}; {len(loaded)} run{'s' if len(loaded) > 1 else ''})")
