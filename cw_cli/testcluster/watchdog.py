"""Stops a test cluster when the process that owns it dies (e.g. a pytest killed by a timeout).

Started by `up(owner_pid=...)` as `python -m cw_cli.testcluster.watchdog PID START_TIME STATE_DIR`.
Polls the owner once a second; when it is gone (or the state dir is), runs `down(STATE_DIR)`.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    owner_pid, owner_start, state = int(argv[0]), int(argv[1]), Path(argv[2])
    from .procs import ProcRecord, is_alive

    owner = ProcRecord("owner", owner_pid, owner_start, "", "")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    while not stop["now"]:
        if not (state / "pids").is_dir():
            return 0  # cluster already taken down
        if not is_alive(owner):
            from .cluster import down

            down(state)
            return 0
        time.sleep(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
