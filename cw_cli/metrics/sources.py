"""Where a run's metric records come from: a pod's log on the cluster, or a local path.

A local path is a folder holding ``checkpoint-*`` folders (the newest one's
``trainer_state.json`` is read), a checkpoint folder itself, a ``trainer_state.json`` file, or
a log file (the saved output of a ``--local`` run, or of ``cw logs``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cw_cli.errors import NotFound
from cw_cli.labels import TRAINER
from cw_cli.metrics.parse import RecordParser, RunMetrics, records_from_log_history

if TYPE_CHECKING:
    from cw_cli.k8s.connection import Kube

STATE_FILE = "trainer_state.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
# How deep under the given folder checkpoints are looked for (a relative output_dir nests them).
_SEARCH_DEPTH = 3


def newest_trainer_state(folder: Path) -> Path | None:
    """The ``trainer_state.json`` of the newest checkpoint in or under ``folder``.

    Newest is the highest step in ``checkpoint-<step>`` (then the latest modified); a
    ``trainer_state.json`` in the folder itself is used when it has no checkpoint.
    """
    candidates: list[Path] = []
    level = [folder]
    for _ in range(_SEARCH_DEPTH):
        candidates = [p / STATE_FILE for d in level for p in d.glob("checkpoint-*") if (p / STATE_FILE).is_file()]
        if candidates:
            break
        level = [p for d in level for p in sorted(d.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    if candidates:
        def order(path: Path) -> tuple[int, float]:
            match = _CHECKPOINT.fullmatch(path.parent.name)
            return (int(match.group(1)) if match else -1, path.stat().st_mtime)

        return max(candidates, key=order)
    own = folder / STATE_FILE
    return own if own.is_file() else None


def read_trainer_state(path: Path, name: str) -> RunMetrics:
    """The records of a ``trainer_state.json`` (its ``log_history``).

    Raises:
        NotFound: The file is not JSON with a ``log_history`` list.
    """
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NotFound(f"{path}: not a readable trainer_state.json ({exc})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise NotFound(f"{path}: has no log_history list")
    return RunMetrics(name, str(path), "logged", records_from_log_history(history))


def log_file_lines(path: Path) -> Iterator[str]:
    """The lines of a log file split on ``\\n`` only (``\\r`` stays for the parser), read lazily."""
    with open(path, "rb") as fh:
        for raw in fh:
            yield raw.decode("utf-8", errors="replace")


def read_lines(lines: Iterable[str], name: str, source: str) -> RunMetrics:
    """The records of log lines (a log file, or a pod's log)."""
    parser = RecordParser()
    records = list(parser.feed_all(lines))
    return RunMetrics(name, source, "logged" if parser.explicit_steps else "counted", records)


def load_path(path: Path, name: str | None = None) -> RunMetrics:
    """The records of a local path: a checkpoint/output folder, a trainer_state.json or a log file.

    Raises:
        NotFound: A folder with no trainer_state.json in or under it.
    """
    label = name or str(path)
    if path.is_dir():
        state = newest_trainer_state(path)
        if state is None:
            raise NotFound(f"{path}: no checkpoint-*/{STATE_FILE} in it or below it, nor a {STATE_FILE}")
        return read_trainer_state(state, label)
    if path.name == STATE_FILE or path.suffix == ".json":
        return read_trainer_state(path, label)
    return read_lines(log_file_lines(path), label, str(path))


def pod_log_lines(
    kube: Kube, run: str, rank: int | None, follow: bool = False, notice: Callable[[str], None] = lambda _: None
) -> Iterator[str]:
    """The trainer's log lines of a run (rank 0 unless ``rank``), through the API server."""
    from cw_cli.k8s.operations import stream_logs

    return stream_logs(kube, run, TRAINER, rank, follow, None, notice=notice)
