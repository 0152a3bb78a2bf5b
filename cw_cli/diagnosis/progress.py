"""How far a running trainer is, from the last lines of its log: the Hugging Face Trainer's tqdm
bar (TRL, Axolotl and verifiers train with it), e.g. `` 45%|████▌     | 45/60 [00:20<00:06, 2.31it/s]``,
and the ``[cw-progress] {...}`` line cw's callback prints on each log and complete save
(cw_cli/runtime/cw_progress.py): samples and tokens per second, the last complete checkpoint.

The training bar is the one without a description (``Loading weights:``, ``Map:``, ``Writing
model shards:`` have one); tqdm redraws it with ``\\r`` on one line and, nested, moves the cursor
with ANSI codes, both removed here. An evaluation bar has no description either: while one runs,
its position is what the log shows last (the training bar returns at the next step). The bar
gives the step, rate and ETA where both are there (it is redrawn at every step, the line only at
each log); without a bar (``disable_tqdm``) the line gives them. Pure: log lines in, a
:class:`Progress` (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone

import msgspec
from msgspec import Struct

#: What starts cw's progress line (cw_progress.PREFIX: the pod's file imports nothing of cw).
LINE_PREFIX = "[cw-progress]"
#: A checkpoint path longer than this is no path cw printed.
_MAX_PATH = 4096

# tqdm's default format: "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
_BAR = re.compile(
    r"^(?P<desc>.*?)\s*\d+%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s+"
    r"\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:]+|\?),\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>it/s|s/it)"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Progress(Struct):
    """Where the training loop stands, as its progress bar last showed it.

    Attributes:
        step: Optimizer steps done.
        total: Steps in the whole run (``max_steps``).
        elapsed_s: Seconds since this process's bar started (a resumed run counts from its resume).
        eta_s: Seconds left as tqdm estimates them (None: not known yet).
        steps_per_s: Steps per second (None: not known yet).
        samples_per_s: Samples per second over the steps since the trainer's previous log (the
            global batch: per-device batch x gradient accumulation x world size).
        tokens_per_s: Tokens per second, where the trainer logs a token count (TRL's ``num_tokens``).
        checkpoint: The last checkpoint every rank finished (this pod saved it, or resumed from it).
        checkpoint_at: When it was completed (UTC, the pod's clock).
    """

    step: int
    total: int
    elapsed_s: int
    eta_s: int | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    checkpoint: str | None = None
    checkpoint_at: datetime | None = None

    def checkpoint_age_s(self, now: datetime | None = None) -> int | None:
        """Seconds since the last complete checkpoint (None: none known)."""
        if self.checkpoint_at is None:
            return None
        return max(0, int(((now or datetime.now(timezone.utc)) - self.checkpoint_at).total_seconds()))

    def eta(self) -> str:
        """``6s``, ``1h 15m``; empty when not known or done (`cw list`'s ETA column)."""
        from cw_cli.diagnosis.explanation import duration

        return duration(self.eta_s) if self.eta_s is not None and self.step < self.total else ""

    def checkpoint_line(self, now: datetime | None = None) -> str | None:
        """``/checkpoints/r/checkpoint-40, complete 3m 20s ago`` (None: no checkpoint known)."""
        from cw_cli.diagnosis.explanation import duration

        if self.checkpoint is None:
            return None
        age = self.checkpoint_age_s(now)
        return self.checkpoint if age is None else f"{self.checkpoint}, complete {duration(age)} ago"

    def line(self) -> str:
        """``45/60 steps (75%), 2.31 steps/s, ETA 6s`` (tqdm's it/s are optimizer steps)."""
        from cw_cli.diagnosis.explanation import duration

        parts = [f"{self.step}/{self.total} steps ({round(100 * self.step / max(self.total, 1))}%)"]
        if self.steps_per_s:
            rate = f"{self.steps_per_s:.3g} steps/s" if self.steps_per_s >= 1 else f"{1 / self.steps_per_s:.3g} s/step"
            parts.append(rate)
        if self.samples_per_s:
            parts.append(f"{_rate(self.samples_per_s)} samples/s")
        if self.tokens_per_s:
            parts.append(f"{_rate(self.tokens_per_s)} tokens/s")
        if self.eta_s is not None and self.step < self.total:
            parts.append(f"ETA {duration(self.eta_s)}")
        return ", ".join(parts)


def _rate(value: float) -> str:
    """``18.5``, ``9.2k``, ``1.3M``: three significant digits."""
    for size, unit in ((1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


class _Line(Struct):
    """The fields of cw's progress line (cw_progress.Reporter.record); others are ignored."""

    step: int
    total: int
    elapsed_s: int | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    checkpoint: str | None = None
    checkpoint_at: str | None = None


def _utc(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def cw_progress_line(log: Sequence[str]) -> _Line | None:
    """The last well-formed ``[cw-progress]`` line in a log tail (None: none there)."""
    decoder = msgspec.json.Decoder(_Line)
    for line in reversed(log):
        if LINE_PREFIX not in line:
            continue
        for segment in reversed(_ANSI.sub("", line).split("\r")):
            start = segment.rfind(LINE_PREFIX)
            if start < 0:
                continue
            try:
                found = decoder.decode(segment[start + len(LINE_PREFIX):].strip())
            except (msgspec.DecodeError, UnicodeError):
                continue  # cut short, or not cw's: look further back
            if found.step >= 0 and found.total >= 0 and (found.checkpoint is None or len(found.checkpoint) <= _MAX_PATH):
                return found
    return None


def _seconds(clock: str) -> int | None:
    """tqdm's ``MM:SS`` or ``H:MM:SS`` (``?``: None)."""
    if not re.fullmatch(r"\d+(:\d+){1,2}", clock):
        return None
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def training_progress(log: Sequence[str]) -> Progress | None:
    """How far the training is in a log tail: the bar's last state with what cw's last progress
    line adds (None: the tail shows neither)."""
    bar = training_bar(log)
    line = cw_progress_line(log)
    if line is None:
        return bar
    if bar is None:
        rate = line.steps_per_s or None
        eta = round((line.total - line.step) / rate) if rate and line.total >= line.step else None
        bar = Progress(line.step, line.total, line.elapsed_s or 0, eta, rate)
    bar.samples_per_s = _positive(line.samples_per_s)
    bar.tokens_per_s = _positive(line.tokens_per_s)
    bar.checkpoint = line.checkpoint or None
    bar.checkpoint_at = _utc(line.checkpoint_at) if bar.checkpoint else None
    return bar


def _positive(value: float | None) -> float | None:
    return value if value is not None and 0 < value < float("inf") else None


def training_bar(log: Sequence[str]) -> Progress | None:
    """The training bar's last state in a log tail (None: the tail shows none)."""
    for line in reversed(log):
        if "|" not in line:  # the fast path: no bar on this line
            continue
        for segment in reversed(_ANSI.sub("", line).split("\r")):
            match = _BAR.search(segment.strip())
            if match is None or match["desc"].strip():
                continue
            rate = None if match["rate"] == "?" else float(match["rate"])
            if rate is not None and match["unit"] == "s/it":
                rate = 1 / rate if rate else None
            return Progress(
                int(match["n"]), int(match["total"]), _seconds(match["elapsed"]) or 0, _seconds(match["remaining"]), rate or None
            )
    return None
