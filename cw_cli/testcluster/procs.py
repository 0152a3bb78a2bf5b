"""Start and stop background processes by their own PID (never by name).

Each process gets a JSON record <state>/pids/<name>.json with its pid, the kernel start time
of that pid (so a recycled pid is never signalled) and the binary path.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import msgspec
from msgspec import Struct
from msgspec.structs import asdict

from cw_cli.plain_files import read_plain_file


class ProcRecord(Struct, frozen=True):
    name: str
    pid: int
    start_time: int  # field 22 of /proc/<pid>/stat (clock ticks since boot)
    exe: str
    log: str


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a pid, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces/parens: split after the last ')'
    rest = raw[raw.rfind(")") + 2:].split()
    return rest[0], int(rest[19])


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our own child (avoids zombies)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    except OSError:
        pass


def is_alive(rec: ProcRecord) -> bool:
    """True if the recorded process still runs (same pid *and* same start time, not a zombie)."""
    _reap(rec.pid)
    st = _stat(rec.pid)
    return st is not None and st[1] == rec.start_time and st[0] not in ("Z", "X")


def spawn(name: str, argv: list[str], log_path: Path, pid_dir: Path,
          env: dict[str, str] | None = None) -> ProcRecord:
    """Start argv[0] detached (own session), stdout+stderr to log_path; record its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        actions = [
            (os.POSIX_SPAWN_DUP2, devnull, 0),
            (os.POSIX_SPAWN_DUP2, fd, 1),
            (os.POSIX_SPAWN_DUP2, fd, 2),
        ]
        pid = os.posix_spawn(argv[0], argv, env if env is not None else dict(os.environ),
                             file_actions=actions, setsid=True)
    finally:
        os.close(fd)
        os.close(devnull)
    st = _stat(pid)
    rec = ProcRecord(name, pid, st[1] if st else 0, argv[0], str(log_path))
    (pid_dir / f"{name}.json").write_text(json.dumps(asdict(rec)))
    return rec


#: The largest pid Linux gives (pid_max is at most 2**22).
_MAX_PID = 2**22
#: The largest process record read (one is about 200 bytes).
_MAX_RECORD_BYTES = 64 * 1024


def read_record(path: Path) -> ProcRecord | None:
    """One process record, or None when it is not one `spawn` wrote: unreadable, not a regular
    file, not JSON, a field of the wrong type, or a pid no process can have (a corrupt record must
    neither crash `cw cluster status/down` nor make them signal another process)."""
    try:
        record = msgspec.json.decode(read_plain_file(path, _MAX_RECORD_BYTES), type=ProcRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not 0 < record.pid <= _MAX_PID or record.start_time < 0:
        return None
    return record


def load_records(pid_dir: Path) -> list[ProcRecord]:
    """All process records of a state dir (unreadable or corrupt files are skipped, see :func:`read_record`)."""
    if not pid_dir.is_dir():
        return []
    return [record for p in sorted(pid_dir.glob("*.json")) if (record := read_record(p)) is not None]


def stop(rec: ProcRecord, timeout: float = 10.0) -> str:
    """SIGTERM the recorded process, SIGKILL after `timeout`; returns what happened."""
    if not is_alive(rec):
        return "not running"
    try:
        os.kill(rec.pid, signal.SIGTERM)
    except ProcessLookupError:
        return "not running"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(rec):
            return "stopped"
        time.sleep(0.05)
    if is_alive(rec):
        try:
            os.kill(rec.pid, signal.SIGKILL)
        except ProcessLookupError:
            return "stopped"
        for _ in range(100):
            if not is_alive(rec):
                break
            time.sleep(0.05)
        return "killed"
    return "stopped"
