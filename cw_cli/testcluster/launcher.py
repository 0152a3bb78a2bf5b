"""Starting the test cluster's processes: each recorded for `down`, all polled until one deadline,
and a process that exits during start-up reported with the tail of its log."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cw_cli.errors import CwError

from . import argv, procs
from .errors import StartError, TestClusterError


def free_ports(n: int) -> list[int]:
    """``n`` TCP ports free on 127.0.0.1 now (the components bind them a moment later)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _tail(path: str | Path, n: int = 8) -> str:
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def wait_until(
    probe: Callable[[], bool],
    deadline: float,
    what: str,
    interval: float = 0.3,
    check: Callable[[], None] = lambda: None,
) -> None:
    """Poll ``probe`` until it is true; ``check`` raises if a process died meanwhile."""
    while True:
        check()
        try:
            if probe():
                return
        except TestClusterError:
            raise
        except (OSError, ValueError, CwError):
            pass  # not up yet: no answer, an error status, or a half-written object
        if time.monotonic() > deadline:
            raise StartError(f"timed out waiting for {what}")
        time.sleep(interval)


class Launcher:
    """Starts the cluster's processes (each recorded for `down`) and polls until one deadline.

    Args:
        state: The state folder (``logs/`` and ``pids/`` inside).
        timeout: Seconds the whole start may take.
    """

    def __init__(self, state: Path, timeout: float) -> None:
        self.state = state
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.env = argv.component_env(os.environ)
        self.started: dict[str, procs.ProcRecord] = {}

    def spawn(self, name: str, command: Sequence[str | os.PathLike[str]], env: dict[str, str] | None = None) -> None:
        """Start ``command`` as component ``name``, its output in ``logs/<name>.log``."""
        self.started[name] = procs.spawn(name, [str(a) for a in command], self.state / "logs" / f"{name}.log",
                                         self.state / "pids", env=env or self.env)  # fmt: skip

    def check_alive(self) -> None:
        """Raise StartError (with its log's tail) if a started process has exited."""
        for name, rec in self.started.items():
            if not procs.is_alive(rec):
                raise StartError(f"{name} exited during start-up; log {rec.log}: {_tail(rec.log)}", rec.log)

    def wait(self, what: str, probe: Callable[[], bool], interval: float = 0.2) -> None:
        """Poll ``probe`` until true; fail at the deadline or when a process died."""
        wait_until(probe, self.deadline, f"{what} (after {self.timeout:.0f}s)", interval, self.check_alive)
