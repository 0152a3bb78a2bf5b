"""Plain terminal output for the watching commands (list, status, logs), without rich.

`cw status` and `cw list` must answer about as fast as kubectl: importing rich and laying out a
rich Table cost more than the API requests themselves (57% of `cw list` at 1,000 runs). A table
here is what kubectl prints: left-aligned columns, three spaces apart. Colour comes from click
and is left out when the stream is not a terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under headers, each column as wide as its widest cell, the last column unpadded."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        padded = [str(cell).ljust(width) for cell, width in zip(cells[:-1], widths)]
        return "   ".join([*padded, str(cells[-1])]).rstrip()

    return "\n".join(line(cells) for cells in (headers, *rows)) + "\n"


def echo(text: str = "", *, err: bool = False, **style: object) -> None:
    """Print one line to stdout (or stderr), styled like :func:`click.style` (``fg``, ``bold``)."""
    click.echo(click.style(text, **style) if style else text, err=err)  # type: ignore[arg-type]


def say(text: str, **style: object) -> None:
    """Print one line of progress to stderr, styled like :func:`click.style` (``fg``, ``bold``).

    Launch output uses it rather than rich: importing and setting up a rich console was a tenth of
    a submit. Nothing in ``text`` is read as markup, so a user's value prints as it is.
    """
    echo(text, err=True, **style)
