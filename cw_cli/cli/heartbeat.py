"""Showing that a long wait is alive, on a terminal and on a pipe alike.

A spinner shows nothing in a CI log or a pipe, so a wait of minutes (a cold build of the test
cluster, an export Job, a server becoming Ready) looked like a hang there. :class:`Heartbeat`
gives every wait the same two signals: a line for each stage, and, while a stage lasts, a line
every :data:`EVERY_S` seconds with the time elapsed; never more than that, so logs stay short.
On a terminal the same is a spinner whose text carries the stage and the elapsed time.

Usage::

    with Heartbeat("starting the test cluster") as beat:
        up(..., on_progress=beat.stage)      # "creating 3 fake nodes" -> its own line on a pipe
        beat.note("a line kept on a terminal too")
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from cw_cli.cli.output import err
from cw_cli.cli.plain import say

#: Seconds between two "still ..." lines while one stage lasts (not on a terminal).
EVERY_S = 30.0
#: Seconds between two updates of the spinner's elapsed time (on a terminal).
_TICK_S = 1.0


def elapsed_text(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``: short, and sortable by eye in a log."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class Heartbeat:
    """A context manager that shows a wait is alive until it ends.

    Args:
        what: What is being waited for, the first stage (``starting the test cluster``).
        every_s: Seconds between two "still" lines on a pipe (default :data:`EVERY_S`).
        terminal: Whether stderr is a terminal (default: asked of the stderr console).
        write: Where a line goes (default: stderr, as every progress line).
    """

    def __init__(self, what: str, *, every_s: float | None = None, terminal: bool | None = None,
                 write: Callable[[str], None] = say) -> None:  # fmt: skip
        self._stage = what
        self._every_s = EVERY_S if every_s is None else every_s
        self._terminal = terminal
        self._write = write
        self._started = self._stage_started = self._last_line = 0.0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._spinner: Any = None

    def __enter__(self) -> Heartbeat:
        self._started = self._stage_started = self._last_line = time.monotonic()
        if self._terminal is None:
            self._terminal = err().is_terminal
        if self._terminal:
            self._spinner = err().status(self._stage + " ...")
            self._spinner.start()
        else:
            self._write(f"{self._stage} ...")
        self._thread = threading.Thread(target=self._beat, name="cw-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._spinner is not None:
            self._spinner.stop()

    @property
    def elapsed(self) -> float:
        """Seconds since the wait began."""
        return time.monotonic() - self._started

    def stage(self, text: str) -> None:
        """A new stage: the spinner's text on a terminal, a line (with the time so far) elsewhere."""
        with self._lock:
            now = time.monotonic()
            self._stage, self._stage_started, self._last_line = text, now, now
            if self._spinner is not None:
                self._spinner.update(f"{text} ...")
            else:
                self._write(f"{text} ... ({elapsed_text(now - self._started)})")

    def note(self, text: str) -> None:
        """A line to keep, on a terminal too (above the spinner); it counts as a sign of life."""
        with self._lock:
            self._last_line = time.monotonic()
            if self._spinner is not None:
                    err().print(text, markup=False, highlight=False)
            else:
                self._write(text)

    def _beat(self) -> None:
        interval = _TICK_S if self._terminal else self._every_s
        while not self._done.wait(interval):
            with self._lock:
                now = time.monotonic()
                if self._spinner is not None:
                    self._spinner.update(f"{self._stage} ... {elapsed_text(now - self._stage_started)}")
                elif now - self._last_line >= self._every_s * 0.99:
                    self._last_line = now
                    self._write(f"  still {self._stage} ({elapsed_text(now - self._stage_started)} in this step, "
                                f"{elapsed_text(now - self._started)} in all)")  # fmt: skip
            if not self._terminal:
                interval = max(0.01, self._every_s - (time.monotonic() - self._last_line))
