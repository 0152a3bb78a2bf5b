"""Where a run's metric records come from: a pod's log on the cluster, or a local path.

A local path is a folder holding ``checkpoint-*`` folders (the newest one's
``trainer_state.json`` is read), a checkpoint folder itself, a ``trainer_state.json`` file, or
a log file (the saved output of a ``--local`` run, or of ``cw logs``).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli.errors import ConfigError, NotFound
from cw_cli.metrics.parse import EVAL, MAX_RECORD_CHARS, Record, RecordParser, RunMetrics, records_from_log_history
from cw_cli.plain_files import pseudo_file

if TYPE_CHECKING:
    pass

STATE_FILE = "trainer_state.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
# How deep under the given folder checkpoints are looked for (a relative output_dir nests them).
_SEARCH_DEPTH = 3
#: The largest trainer_state.json read: a 100,000-step log_history is about 20 MiB.
MAX_STATE_BYTES = 64 * 2**20
#: The largest log file read (about ten million log lines).
MAX_LOG_BYTES = 2 * 2**30
#: A log line is read in pieces of this size; a longer line is split at its ``\r`` (tqdm's redraws).
MAX_LINE_BYTES = 2**20
# Integers longer than this in a trainer_state.json are read as floats: Python refuses to parse
# integers of over 4,300 digits, and no step or metric has more than 18.
_MAX_INT_DIGITS = 18
_SOURCE_HINT = "give a log file, a trainer_state.json, or an output or checkpoint folder"


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


def check_regular_file(path: Path, limit: int) -> None:
    """Refuse, from ``stat`` alone, what cannot be read as a file of at most ``limit`` bytes.

    Opening a FIFO blocks until a writer comes, a device such as ``/dev/zero`` never ends, and
    the files of ``/proc`` and ``/sys`` look regular but may block (``/proc/kmsg``): none is opened.

    Raises:
        NotFound: Nothing is at ``path``.
        ConfigError: A device, FIFO or socket, a file larger than ``limit``, or one that cannot
            be stat'ed.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise NotFound(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ConfigError([f"{path}: cannot read it ({exc})"], hint=_SOURCE_HINT) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError([f"{path}: cannot read it: not a regular file (a device, FIFO or socket)"], hint=_SOURCE_HINT)
    resolved = pseudo_file(path)
    if resolved is not None:  # "regular" with size 0: /proc/kmsg blocks on read, others describe this machine
        raise ConfigError([f"{path}: cannot read it: a file of the operating system ({resolved}), not a log"], hint=_SOURCE_HINT)
    if info.st_size > limit:
        raise ConfigError(
            [f"{path}: is {info.st_size / 2**20:,.1f} MiB, more than the {limit / 2**20:,.0f} MiB cw metrics reads"],
            hint="give the trainer_state.json of a checkpoint, or the end of the log (`tail -c 100M LOG > part.log`)",
        )


def _json_int(digits: str) -> int | float:
    """An integer of the JSON text; a longer one than any real step as a float (inf past 308 digits)."""
    return int(digits) if len(digits.lstrip("-")) <= _MAX_INT_DIGITS else float(digits)


def _parse_state(path: Path, content: bytes) -> Any:
    """The JSON of a trainer_state.json, refusing one nested too deep for the parser."""
    try:
        return json.loads(content, parse_int=_json_int)
    except RecursionError:  # a hand-made file nested thousands deep: never a trainer_state.json
        raise ConfigError(
            [f"{path}: nested too deep to be a trainer_state.json"], hint="give the trainer_state.json a trainer wrote"
        ) from None


def read_trainer_state(path: Path, name: str) -> RunMetrics:
    """The records of a ``trainer_state.json`` (its ``log_history``).

    Raises:
        NotFound: The file is missing, or not JSON with a ``log_history`` list.
        ConfigError: Not a regular file, larger than :data:`MAX_STATE_BYTES`, or nested too deep.
    """
    check_regular_file(path, MAX_STATE_BYTES)
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_STATE_BYTES + 1)  # bounded even if the file grows meanwhile
        if len(content) > MAX_STATE_BYTES:
            raise ConfigError([f"{path}: grew past the {MAX_STATE_BYTES // 2**20} MiB cw metrics reads"])
        state = _parse_state(path, content)
    except (OSError, ValueError) as exc:
        raise NotFound(f"{path}: not a readable trainer_state.json ({exc})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise NotFound(f"{path}: has no log_history list")
    return RunMetrics(name, str(path), "logged", records_from_log_history(history))


def eval_records(run_dir: Path) -> list[Record]:
    """The evaluation's scores of each checkpoint in ``run_dir`` (``checkpoint-N/cw-eval/scores.json``,
    docs/evaluation.md) as evaluation records at its step, each score named ``eval_<task>/<metric>``."""
    records = []
    for scores_file in run_dir.glob("checkpoint-*/cw-eval/scores.json"):
        match = _CHECKPOINT.fullmatch(scores_file.parent.parent.name)
        try:
            check_regular_file(scores_file, MAX_STATE_BYTES)
            document = json.loads(scores_file.read_text(encoding="utf-8"))
        except (OSError, ValueError, ConfigError):  # one unreadable scores file never hides the training curve
            continue
        scores = document.get("scores") if isinstance(document, dict) else None
        values = {f"eval_{k}": float(v) for k, v in (scores or {}).items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)} if isinstance(scores, dict) else {}  # fmt: skip
        if match and values:
            records.append(Record(int(match.group(1)), EVAL, values))
    return sorted(records, key=lambda record: record.step)


def log_file_lines(path: Path) -> Iterator[str]:
    """The lines of a log file split on ``\\n`` only (``\\r`` stays for the parser), read lazily.

    A line longer than :data:`MAX_LINE_BYTES` (a progress bar redrawn for hours) comes in
    pieces cut after a ``\\r``, so memory stays bounded and no record is cut in two.

    Raises:
        NotFound: The file is missing.
        ConfigError: Not a regular file, or larger than :data:`MAX_LOG_BYTES`.
    """
    check_regular_file(path, MAX_LOG_BYTES)
    try:
        with open(path, "rb") as fh:
            yield from _bounded_lines(fh)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read it ({exc.strerror or exc})"], hint=_SOURCE_HINT) from None


def _bounded_lines(fh: Any) -> Iterator[str]:
    """Lines of a binary file, each at most about two :data:`MAX_LINE_BYTES`, decoded leniently."""
    pending = b""
    while chunk := fh.readline(MAX_LINE_BYTES):
        data = pending + chunk
        if data.endswith(b"\n"):
            pending = b""
            yield data.decode("utf-8", errors="replace")
            continue
        cut = data.rfind(b"\r") + 1
        if cut:
            pending = data[cut:]
            yield data[:cut].decode("utf-8", errors="replace")
        else:  # no \r in a megabyte: only its end can start a record
            pending = data[-MAX_RECORD_CHARS:]
    if pending:
        yield pending.decode("utf-8", errors="replace")


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
        try:
            state = newest_trainer_state(path)
        except OSError as exc:  # a folder (or one below it) that cannot be listed
            raise ConfigError([f"{path}: cannot read it ({exc})"], hint=_SOURCE_HINT) from None
        if state is None:
            raise NotFound(f"{path}: no checkpoint-*/{STATE_FILE} in it or below it, nor a {STATE_FILE}")
        metrics = read_trainer_state(state, label)
        metrics.records += eval_records(state.parent.parent)  # the evaluation's curve, where it scored checkpoints
        return metrics
    if path.name == STATE_FILE or path.suffix == ".json":
        return read_trainer_state(path, label)
    return read_lines(log_file_lines(path), label, str(path))
