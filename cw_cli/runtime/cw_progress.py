"""cw's progress line in the trainer's log: how far, how fast, and the last complete checkpoint.

Shipped verbatim into the run's ConfigMap (key ``cw_progress.py``, beside ``cw_fault.py``, whose
callback calls it), so it is one file of the standard library with no cw imports.

Rank 0 prints one line on each of the Trainer's logs, at the start of training (a resumed run
names the checkpoint it resumed from) and after each complete save::

    [cw-progress] {"step":40,"total":100,"elapsed_s":81,"steps_per_s":0.5,"samples_per_s":16.0,
                   "tokens_per_s":8120.0,"checkpoint":"/checkpoints/r/checkpoint-40",
                   "checkpoint_at":"2026-11-27T13:38:11Z","time":"2026-11-27T13:39:02Z"}

(on one line). Rates are over the steps since the previous log; samples per second come from the
global batch the Trainer's arguments give (per-device batch x gradient accumulation x world
size); tokens per second from the cumulative token count the trainer logs (TRL's
``num_tokens``, Trainer's ``num_input_tokens_seen``), absent where it logs none. `cw status`
and `cw list` read the last such line from the log's last lines
(``cw_cli.diagnosis.progress``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

PREFIX = "[cw-progress]"
#: Name of the file cw_fault writes in a checkpoint all ranks finished (``cw_fault.COMPLETE_MARKER``).
COMPLETE_MARKER = ".cw-complete"
#: Cumulative token counts trainers log, in the order they are looked for.
TOKEN_KEYS = ("num_tokens", "num_input_tokens_seen")


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _rounded(value: float) -> float:
    """Three significant digits: a rate, not a measurement to the microsecond."""
    return float(f"{value:.3g}")


def _number(value: Any) -> float | None:
    """A logged number (transformers 5 prints some as strings), None when it is not one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None


def global_batch(args: Any) -> int | None:
    """Samples per optimizer step: per-device batch x gradient accumulation x world size."""
    try:
        size = int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps) * int(args.world_size)
    except (AttributeError, TypeError, ValueError):
        return None
    return size if size > 0 else None


def checkpoint_time(folder: str) -> float | None:
    """When a checkpoint was completed: its marker's mtime, else the folder's (None: unreadable)."""
    for path in (os.path.join(folder, COMPLETE_MARKER), folder):
        try:
            return os.stat(path).st_mtime
        except OSError:
            continue
    return None


class Reporter:
    """One trainer process's progress: the previous log's time, step and token count, and the
    last complete checkpoint."""

    def __init__(self, stream: Any = None, clock: Any = time.monotonic) -> None:
        self.stream = stream
        self.clock = clock
        self.began: float | None = None
        self.last: tuple[float, int, float | None] | None = None
        self.rates: dict[str, float] = {}
        self.checkpoint: str | None = None
        self.checkpoint_at: str | None = None

    def train_begin(self, args: Any, state: Any) -> None:
        """Start the clocks; a resumed run's first line names the checkpoint it resumed from."""
        now = self.clock()
        self.began = now
        step = int(state.global_step or 0)
        self.last = (now, step, 0.0 if step == 0 else None)
        if step:
            folder = os.path.join(str(args.output_dir), f"checkpoint-{step}")
            if os.path.isdir(folder):
                self._checkpoint(folder)
        self._emit(state)

    def log(self, args: Any, state: Any, logs: dict[str, Any] | None) -> None:
        """The rates since the previous log, printed with the step and the last checkpoint."""
        now = self.clock()
        step = int(state.global_step or 0)
        tokens = next((t for t in (_number((logs or {}).get(key)) for key in TOKEN_KEYS) if t is not None), None)
        if self.last is not None:
            then, last_step, last_tokens = self.last
            seconds = now - then
            if step > last_step and seconds > 0:
                self.rates = {"steps_per_s": _rounded((step - last_step) / seconds)}
                batch = global_batch(args)
                if batch:
                    self.rates["samples_per_s"] = _rounded((step - last_step) * batch / seconds)
                if tokens is not None and last_tokens is not None and tokens >= last_tokens:
                    self.rates["tokens_per_s"] = _rounded((tokens - last_tokens) / seconds)
            if step <= last_step:  # an evaluation's log, or the final summary: no new steps to time
                self._emit(state)
                return
        self.last = (now, step, tokens)
        self._emit(state)

    def saved(self, state: Any, folder: str) -> None:
        """A checkpoint every rank finished writing: named from now on."""
        self._checkpoint(folder)
        self._emit(state)

    def _checkpoint(self, folder: str) -> None:
        self.checkpoint = folder
        stamp = checkpoint_time(folder)
        self.checkpoint_at = _utc(stamp) if stamp is not None else None

    def record(self, state: Any) -> dict[str, Any]:
        """The line's fields (only those known)."""
        found: dict[str, Any] = {"step": int(state.global_step or 0), "total": int(state.max_steps or 0)}
        if self.began is not None:
            found["elapsed_s"] = int(self.clock() - self.began)
        found.update(self.rates)
        if self.checkpoint:
            found["checkpoint"] = self.checkpoint
            if self.checkpoint_at:
                found["checkpoint_at"] = self.checkpoint_at
        found["time"] = _utc(time.time())
        return found

    def _emit(self, state: Any) -> None:
        if not getattr(state, "is_world_process_zero", True):
            return
        line = f"{PREFIX} {json.dumps(self.record(state), separators=(',', ':'))}"
        write(line, self.stream)


def write(line: str, stream: Any = None) -> None:
    """``line`` on a line of its own, even while a progress bar is drawn on stderr: through
    tqdm's ``write`` (it clears the bar and draws it again after) where tqdm is there."""
    target = stream or sys.stderr
    try:
        from tqdm import tqdm
    except ImportError:
        print(line, file=target, flush=True)
        return
    try:
        tqdm.write(line, file=target)
        target.flush()
    except Exception:  # noqa: BLE001 - a progress line never stops training
        print(line, file=target, flush=True)


_REPORTER: Reporter | None = None


def reporter() -> Reporter:
    """This process's reporter (one per process, shared by its Trainers' callbacks)."""
    global _REPORTER
    if _REPORTER is None:
        _REPORTER = Reporter()
    return _REPORTER
