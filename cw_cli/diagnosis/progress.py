"""How far a running trainer is, from the last lines of its log: the Hugging Face Trainer's tqdm
bar (TRL, Axolotl and verifiers train with it), e.g. `` 45%|████▌     | 45/60 [00:20<00:06, 2.31it/s]``.

The training bar is the one without a description (``Loading weights:``, ``Map:``, ``Writing
model shards:`` have one); tqdm redraws it with ``\\r`` on one line and, nested, moves the cursor
with ANSI codes, both removed here. An evaluation bar has no description either: while one runs,
its position is what the log shows last (the training bar returns at the next step). Pure: log
lines in, a :class:`Progress` (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from msgspec import Struct

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
    """

    step: int
    total: int
    elapsed_s: int
    eta_s: int | None = None
    steps_per_s: float | None = None

    def line(self) -> str:
        """``45/60 steps (75%), 2.31 steps/s, ETA 6s`` (tqdm's it/s are optimizer steps)."""
        from cw_cli.diagnosis.explanation import duration

        parts = [f"{self.step}/{self.total} steps ({round(100 * self.step / max(self.total, 1))}%)"]
        if self.steps_per_s:
            rate = f"{self.steps_per_s:.3g} steps/s" if self.steps_per_s >= 1 else f"{1 / self.steps_per_s:.3g} s/step"
            parts.append(rate)
        if self.eta_s is not None and self.step < self.total:
            parts.append(f"ETA {duration(self.eta_s)}")
        return ", ".join(parts)


def _seconds(clock: str) -> int | None:
    """tqdm's ``MM:SS`` or ``H:MM:SS`` (``?``: None)."""
    if not re.fullmatch(r"\d+(:\d+){1,2}", clock):
        return None
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def training_progress(log: Sequence[str]) -> Progress | None:
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
