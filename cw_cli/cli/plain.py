"""Plain terminal output for the watching commands (list, status, logs), without rich.

`cw status` and `cw list` must answer about as fast as kubectl: importing rich and laying out a
rich Table cost more than the API requests themselves (57% of `cw list` at 1,000 runs). A table
here is what kubectl prints: left-aligned columns, three spaces apart. Colour comes from click
and is left out when the stream is not a terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

#: C0 controls, DEL and C1 controls -> a visible escape. ESC, CSI (U+009B) and OSC sequences in
#: an event message, a termination message or an annotation would otherwise reach the terminal,
#: which acts on them (rewrite the screen, set the title, write a link); kubectl escapes them too.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROLS_KEEPING_LINES = {code: text for code, text in _CONTROLS.items() if code not in (0x09, 0x0A)}


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character written as ``\\xNN``, for a terminal.

    Args:
        text: A value read from the cluster (a message, a name, a log line).
        lines: Keep newlines and tabs (a multi-line message); otherwise they are escaped too, so
            the value stays on its line or in its table cell.
    """
    if text.isprintable():  # the usual case, in C
        return text
    return text.translate(_CONTROLS_KEEPING_LINES if lines else _CONTROLS)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under headers, each column as wide as its widest cell, the last column unpadded.

    Cells are made :func:`printable`: they come from the cluster.
    """
    rows = [[printable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]

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
