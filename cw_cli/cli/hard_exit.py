"""Leaving the `cw` process without tearing the interpreter down.

When a command is done, Python's shutdown still frees every module and object one by one: with
click, jinja2 and pydantic loaded that took 35-40 ms on the 2-core benchmark machine, a seventh
of a dry run, all of it after the output is complete. The operating system reclaims the same
memory at once. mypy exits the same way (``mypy.util.hard_exit``).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def _other_threads_to_join() -> bool:
    main = threading.main_thread()
    return any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate())


def exit_now(code: object) -> NoReturn:
    """End the process with ``code`` (a :class:`SystemExit` code) as soon as its output is out.

    What a normal exit does that matters is kept: the ``atexit`` handlers run (a plugin may have
    registered one) and stdout and stderr are flushed. When that cannot be done cleanly (a
    thread Python would wait for, a code that is a message, a closed pipe), the normal exit runs.
    """
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if not (code is None or isinstance(code, int)) or run_exitfuncs is None or _other_threads_to_join():
        raise SystemExit(code)
    run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or stream: let Python report it its usual way
        raise SystemExit(code) from None
    os._exit(code or 0)
