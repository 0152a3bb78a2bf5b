"""A PNG of metric series with matplotlib (``cw metrics --png FILE``): one panel per metric,
one line per run. matplotlib is the optional extra ``plot`` and is imported only here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cw_cli.errors import ConfigError
from cw_cli.metrics.parse import RunMetrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'cw-cli[plot]'"


def require_matplotlib() -> None:
    """Check matplotlib can be imported (before any log is read).

    Raises:
        ConfigError: It cannot; the message names the extra to install.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError([f"--png needs matplotlib, which is not installed: {INSTALL_HINT}"], hint=INSTALL_HINT) from None


def build_figure(runs: Sequence[RunMetrics], metrics: Sequence[str]) -> Figure:
    """The figure: one panel per metric (shared step axis), one line per run that logged it.

    Raises:
        ConfigError: matplotlib is not installed.
    """
    require_matplotlib()
    # The Figure API directly (no pyplot): no GUI backend, no global state.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.0, 2.6 * max(len(metrics), 1) + 0.6), dpi=100, layout="constrained")
    axes = figure.subplots(max(len(metrics), 1), 1, sharex=True, squeeze=False)[:, 0]
    for ax, metric in zip(axes, metrics):
        for index, run in enumerate(runs):
            points = [(s, v) for s, v in run.series().get(metric, []) if math.isfinite(v)]
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, color=f"C{index}", label=run.name, linewidth=1.5,
                        marker="o" if len(points) < 30 else None, markersize=3)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        if len(runs) > 1:
            ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("step")
    return figure


def check_png_path(path: Path) -> None:
    """Refuse, before any log is read, a ``--png`` path that cannot be written.

    Raises:
        ConfigError: Its folder does not exist (or is not a folder).
    """
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError([f"--png {path}: the folder {folder} does not exist"], hint=f"create it first: mkdir -p {folder}")


def write_png(runs: Sequence[RunMetrics], metrics: Sequence[str], path: Path) -> Figure:
    """Write the figure of :func:`build_figure` to ``path`` as PNG; returns the figure.

    Raises:
        ConfigError: matplotlib is not installed, or the file cannot be written.
    """
    figure = build_figure(runs, metrics)
    try:
        figure.savefig(path, format="png")
    except OSError as exc:  # the folder went away, no permission, a full disk
        raise ConfigError([f"--png {path}: cannot write it ({exc.strerror or exc})"], hint="give another path") from None
    return figure
