"""One reason a run failed or is stuck (:class:`Explanation`), and what every explainer shares:
the order of causes, clipped log lines, durations, and the run's framework (for its words)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import asdict

from cw_cli.labels import NAME_LABEL

if TYPE_CHECKING:
    from cw_cli.frameworks.base import BaseTrainingFramework

#: Finds the framework a run's label names (None: no such framework); see :func:`framework_of`.
FrameworkLookup = Callable[[str], "BaseTrainingFramework | None"]

#: Lines of a container's log shown with an explanation.
SHOWN_LINES = 5
#: Longest log line kept (a tokenizer dump or a progress bar can be one huge line).
MAX_LINE = 300

#: The order in which causes explain a run: the most specific root cause first. A backoff limit
#: or a deadline is only the last step of something a pod shows better.
PRIORITY = (
    "cuda-oom",
    "oom-killed",
    "hf-auth",
    "nccl-timeout",
    "image-pull",
    "config-error",
    "evicted",
    "preempted",
    "stall",
    "warned-stop",
    "crash-loop",
    "init-waiting",
    "exit-code",
    "deadline",
    "max-restarts",
    "rank-failed",
    "backoff-limit",
    "failed",
)

class Explanation(Struct):
    """One reason a run failed or is stuck.

    Attributes:
        kind: Stable code (see :data:`PRIORITY` and docs/output.md).
        summary: A few words for `cw list`, e.g. ``OOMKilled (trainer)``.
        message: What happened, in plain words.
        fix: What to change.
        pod: The pod it is about (None for the Job or JobSet).
        container: The container it is about.
        log: The last relevant lines of that container's log.
    """

    kind: str
    summary: str
    message: str
    fix: str = ""
    pod: str | None = None
    container: str | None = None
    log: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line: where, and what happened."""
        where = f"{self.pod}: " if self.pod else ""
        return f"{where}{self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The fields of docs/output.md (`explanations[]`)."""
        return asdict(self)


def _clip(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def last_lines(log: Iterable[str], count: int = SHOWN_LINES) -> list[str]:
    """The last ``count`` non-blank lines of a log."""
    lines = [_clip(line) for line in log if line.strip()]
    return lines[-count:]


def around(lines: list[str], index: int, count: int = SHOWN_LINES) -> list[str]:
    """Up to ``count`` non-blank lines ending a little after line ``index`` (a traceback's end)."""
    start = max(0, index - count + 2)
    return [_clip(line) for line in lines[start : index + 2] if line.strip()][-count:]


def last_match(lines: list[str], pattern: str) -> int | None:
    """Index of the last line that matches ``pattern`` (None: no line does)."""
    search = re.compile(pattern).search
    for index in range(len(lines) - 1, -1, -1):
        if search(lines[index]):
            return index
    return None


def framework_of(name: str) -> BaseTrainingFramework | None:
    """The framework of a run's label, loaded on first use (as ``cw <name>`` loads it)."""
    from cw_cli.frameworks.registry import framework_named

    return framework_named(name)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def framework_in(obj: dict[str, Any], lookup: FrameworkLookup | None) -> BaseTrainingFramework | None:
    """The framework an object's label names, or None (no label, no such framework)."""
    name = _labels(obj).get(NAME_LABEL)
    return (lookup or framework_of)(name) if name else None


def parse_time(stamp: str | None) -> datetime | None:
    """An API server timestamp (None: absent or not one)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration(seconds: float) -> str:
    """``1h 5m``, ``3m 20s``, ``12s``."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
