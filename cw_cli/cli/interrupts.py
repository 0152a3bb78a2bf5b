"""Ctrl-C that always acts: a watchdog for the phases where an interrupt needs no clean-up.

Python runs a signal's handler in the main thread, between two bytecodes. When the main thread
cannot get there (blocked in a call that does not return on a signal, or the signal was taken
by another thread), Ctrl-C would wait for that call. While :func:`interrupt_within` is active,
the signal's C-level handler also writes to a socket (``signal.set_wakeup_fd``) that a daemon
thread watches: if the process is still alive ``seconds`` after the signal, the thread says
``farewell`` and ends the process with exit code 130, as the normal path would have.

Only for phases where nothing is left half-done by stopping at any instant (waiting on a run
that is already whole); a launch rolls back instead and must not be cut short.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cw_cli.errors import ExitCode

#: Signals that mean "stop" to cw (SIGTERM and SIGHUP act as Ctrl-C: see cli/run.py).
STOP_SIGNALS = frozenset(
    number for name in ("SIGINT", "SIGTERM", "SIGHUP") if (number := getattr(signal, name, None)) is not None
)


@contextmanager
def interrupt_within(seconds: float, farewell: str) -> Iterator[None]:
    """End the process at most ``seconds`` after Ctrl-C, SIGTERM or SIGHUP while inside.

    The normal path (a ``KeyboardInterrupt`` in the main thread and its message) stays the
    first choice; the watchdog acts only if that has not ended the process in time.

    Args:
        seconds: How long the main thread gets to act on the signal itself.
        farewell: The line printed (on stderr) when the watchdog ends the process.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # set_wakeup_fd works from the main thread only; signals go there anyway
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    done = threading.Event()

    def watch() -> None:
        with reader:
            while not done.is_set():
                try:
                    received = reader.recv(64)
                except OSError:
                    return
                if not received or done.is_set():
                    return  # the writer closed on the way out
                if any(number in STOP_SIGNALS for number in received) and not done.wait(seconds):
                    os.write(2, f"{farewell}\n".encode("utf-8", "replace"))
                    os._exit(int(ExitCode.INTERRUPTED))

    watcher = threading.Thread(target=watch, name="cw-interrupt-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        writer.close()  # the watchdog reads the end of the stream and closes its side


@contextmanager
def termination_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, a CI job cancelled) act like Ctrl-C while inside: a
    launch rolls back, a download or `cw try` removes its helper pod, and the exit code is 130."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    saved = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None:
            saved[number] = signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
