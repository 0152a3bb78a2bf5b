"""Terminal line charts of metric series, drawn with Unicode braille dots and rich styles.

Each character cell holds a 2 x 4 grid of dots, so a 60 x 12 cell chart has 120 x 48 points.
Drawn here rather than with a plotting library: plotext 6 changed its whole API and ships a
compiled kernel, and a line chart needs no more than this. Pure except :func:`chart_text`,
which imports rich (a core dependency) to colour the cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# Dot bits of a braille cell by (column, row), column 0..1, row 0..3 (Unicode U+2800 block).
_DOT_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
COLORS = ("cyan", "magenta", "yellow", "green", "blue", "red")


class Canvas:
    """A braille canvas: which dots are set, and which series drew each cell last."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.bits = [[0] * self.width for _ in range(self.height)]
        self.owner: list[list[int | None]] = [[None] * self.width for _ in range(self.height)]

    def dot(self, x: int, y: int, series: int) -> None:
        """Set dot (x, y) in dot coordinates, y = 0 at the top."""
        if 0 <= x < self.width * 2 and 0 <= y < self.height * 4:
            row, col = y // 4, x // 2
            self.bits[row][col] |= _DOT_BITS[x % 2][y % 4]
            self.owner[row][col] = series

    def line(self, x0: int, y0: int, x1: int, y1: int, series: int) -> None:
        """A straight line of dots between two points."""
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            self.dot(x0 + round((x1 - x0) * i / steps), y0 + round((y1 - y0) * i / steps), series)

    def rows(self) -> list[str]:
        """The canvas as text rows (blank cells are spaces)."""
        return ["".join(chr(0x2800 + b) if b else " " for b in row) for row in self.bits]


def _finite(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


Bounds = tuple[float, float, float, float]


def _fraction(value: float, low: float, high: float) -> float:
    """Where ``value`` lies between ``low`` and ``high``, 0 to 1 (0.5 when they are equal).

    Halved first: ``high - low`` of two finite floats can overflow to infinity (1e308 - -1e308).
    """
    span = high / 2 - low / 2
    return (value / 2 - low / 2) / span if span > 0 else 0.5


def draw(series: Sequence[Sequence[tuple[float, float]]], width: int, height: int) -> tuple[Canvas, Bounds] | None:
    """Draw several ``[(step, value), ...]`` series on one canvas sharing both axes.

    Non-finite values are left out (the line joins the finite points around them).

    Returns:
        The canvas and the ranges ``(x_min, x_max, y_min, y_max)``; None when no series has a
        finite point.
    """
    finite = [_finite(s) for s in series]
    every = [p for s in finite for p in s]
    if not every:
        return None
    x_min, x_max = min(p[0] for p in every), max(p[0] for p in every)
    y_min, y_max = min(p[1] for p in every), max(p[1] for p in every)
    canvas = Canvas(width, height)
    dots_w, dots_h = width * 2 - 1, height * 4 - 1

    def to_dot(x: float, y: float) -> tuple[int, int]:
        return round(_fraction(x, x_min, x_max) * dots_w), round((1 - _fraction(y, y_min, y_max)) * dots_h)

    for index, points in enumerate(finite):
        previous = None
        for x, y in points:
            current = to_dot(x, y)
            if previous is None:
                canvas.dot(*current, index)
            elif current != previous:
                canvas.line(*previous, *current, index)
            previous = current
    return canvas, (x_min, x_max, y_min, y_max)


def _label(value: float) -> str:
    return f"{value:.4g}"


def chart_text(title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], width: int = 60,
               height: int = 10, colors: Sequence[str] = COLORS) -> Text:
    """A titled chart with a y axis (max, min) and x axis (first, last step) as rich Text.

    Args:
        title: The metric's name.
        series: ``(label, [(step, value), ...])`` per run, one colour each.
        width: Plot width in cells (axis labels come on top of it).
        height: Plot height in cells.
        colors: Rich colours, one per series (cycled).
    """
    from rich.text import Text

    text = Text()
    text.append(title, style="bold")
    if len(series) > 1:
        for index, (label, _) in enumerate(series):
            text.append("  ")
            text.append("━ " + label, style=colors[index % len(colors)])
    text.append("\n")
    drawn = draw([points for _, points in series], width, height)
    if drawn is None:
        text.append("(no finite values)\n", style="dim")
        return text
    canvas, (x_min, x_max, y_min, y_max) = drawn
    top, bottom = _label(y_max), _label(y_min)
    pad = max(len(top), len(bottom))
    for row_index, row in enumerate(canvas.rows()):
        label = top if row_index == 0 else bottom if row_index == canvas.height - 1 else ""
        text.append(f"{label:>{pad}} ┤", style="dim")
        for col_index, char in enumerate(row):
            owner = canvas.owner[row_index][col_index]
            text.append(char, style=colors[owner % len(colors)] if owner is not None else None)
        text.append("\n")
    left, right = _label(x_min), _label(x_max)
    text.append(" " * pad + " └" + "─" * width + "\n", style="dim")
    gap = max(width - len(left) - len(right) - len("step "), 1)
    text.append(" " * (pad + 2) + left + " " * gap + "step " + right + "\n", style="dim")
    return text
