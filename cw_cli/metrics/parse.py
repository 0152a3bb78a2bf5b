"""Metric records from a trainer's log, and the series built from them.

The Hugging Face Trainer (under TRL, Axolotl and verifiers) prints one Python dict per logging
step, e.g. ``{'loss': '2.31', 'grad_norm': '1.2', 'learning_rate': '2e-05', 'epoch': '0.5'}``
(transformers 5 formats floats as strings with 4 significant digits; older versions print the
floats themselves, ``nan`` and ``inf`` included). Those lines are mixed with tqdm progress bars
(``\\r`` updates), warnings and anything else the program prints.

Parsing is safe (:func:`ast.literal_eval`, never ``eval``) and tolerant: a line that is not such
a dict, or a dict with no metric in it, is skipped.

Step inference: a printed record carries no step. A record that has ``global_step`` or ``step``
uses it. Otherwise each *training* record advances a counter by one, so the step is the record's
ordinal: the optimizer step when ``logging_steps`` is 1, and ``logging_steps`` times smaller
otherwise. Evaluation records (only ``eval_*`` keys besides ``epoch``) and the end-of-training
summary (``train_runtime``...) take the step of the training record before them, as in
``trainer_state.json``'s ``log_history``, which has real steps and is used as is.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from msgspec import Struct, field

from cw_cli.runtime.cw_progress import PREFIX as PROGRESS_PREFIX

# A dict is a trainer record only if it has one of these (Trainer.log always adds `epoch`);
# this keeps a printed config or other dicts of numbers out.
MARKER_KEYS = frozenset(
    {"loss", "train_loss", "eval_loss", "epoch", "step", "global_step", "learning_rate", "grad_norm", "reward",
     "train_runtime"}
)
STEP_KEYS = ("global_step", "step")
SUMMARY_KEYS = frozenset({"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos"})
# A record is a few hundred characters; longer candidates (a dumped dataset row...) are not parsed.
MAX_RECORD_CHARS = 64 * 1024

TRAIN, EVAL, SUMMARY = "train", "eval", "summary"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Bare nan/inf (Python's repr of non-finite floats) are not literals; quote them first.
_BARE_NONFINITE = re.compile(r"(:\s*)(-?)(nan|inf)(?=\s*[,}])")
# The usual record, `{'name': 'value' or number, ...}`, is read by these two patterns, 3-4 times
# faster than literal_eval on 10,000-step logs; anything else (escapes, double quotes, nesting)
# goes to literal_eval. Neither can run code.
_ENTRY = r"""'([^'\\\n]*)'\s*:\s*(?:'([^'\\\n]*)'|([-+.\w]+))"""
_SIMPLE_DICT = re.compile(r"\{\s*(?:" + _ENTRY + r"\s*,\s*)*(?:" + _ENTRY + r")?\s*\}")
_SIMPLE_ENTRY = re.compile(_ENTRY)


class Record(Struct, frozen=True):
    """One logged record: its step, kind (train, eval or summary) and numeric values."""

    step: int
    kind: str
    values: dict[str, float]


def to_number(value: Any) -> float | None:
    """A metric value as a float: ints, floats, and numeric strings (``'2e-05'``, ``'nan'``).

    Returns:
        None for anything else (booleans, text, lists, None); an integer too large for a float
        is infinite.
    """
    kind = type(value)  # exact types first: this runs for every value of a long log
    if kind is float:
        return value
    if kind is str:
        try:
            return float(value)
        except ValueError:
            return None
    if kind is int or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        try:
            return float(value)
        except OverflowError:  # an integer past the largest float: infinite, as float('9' * 400) is
            return math.inf if value > 0 else -math.inf
    return None


def parse_record(text: str) -> dict[str, float] | None:
    """The metric dict in one line segment, or None when it holds no trainer record.

    Args:
        text: One line (or one ``\\r``-separated part of a line) of log output; text before the
            dict (a timestamp, a logger prefix) is allowed.

    Returns:
        Metric name -> value, non-numeric entries dropped; None when the segment has no dict
        literal, the dict has no numeric value, or it has none of :data:`MARKER_KEYS`.
    """
    # The dict starts at the first brace that opens a quoted key of either kind: a key may hold
    # the other kind's opening ("{'" inside a double-quoted key), which is no start.
    starts = [at for at in (text.find("{'"), text.find('{"')) if at >= 0]
    if not starts:
        return None
    start = min(starts)
    end = text.rfind("}")
    if end < start or end - start > MAX_RECORD_CHARS:
        return None
    literal = text[start : end + 1]
    pairs: list[tuple[Any, Any]]
    if _SIMPLE_DICT.fullmatch(literal):
        pairs = [(key, quoted or bare) for key, quoted, bare in _SIMPLE_ENTRY.findall(literal)]
    else:
        try:
            parsed = ast.literal_eval(_BARE_NONFINITE.sub(r"\1'\2\3'", literal))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        if not isinstance(parsed, dict):
            return None
        pairs = list(parsed.items())
    if not any(type(key) is str and key in MARKER_KEYS for key, _ in pairs):
        return None
    values = {}
    for key, value in pairs:
        number = to_number(value)
        if number is not None and type(key) is str:
            values[key] = number
    return values or None


def kind_of(values: Mapping[str, float]) -> str:
    """Whether a record is a training step, an evaluation or the end-of-training summary."""
    if SUMMARY_KEYS & values.keys():
        return SUMMARY
    names = [k for k in values if k != "epoch" and k not in STEP_KEYS]
    if names and all(k.startswith(("eval_", "test_")) for k in names):
        return EVAL
    return TRAIN


class RecordParser(Struct):
    """Turns log lines into :class:`Record` s, one line at a time (so ``--follow`` can feed it).

    Attributes:
        step: The step of the latest training record (0 before the first).
        explicit_steps: Whether any record carried its own step.
    """

    step: int = 0
    explicit_steps: bool = False

    def feed(self, line: str) -> list[Record]:
        """The records in one log line (usually none or one)."""
        if "{" not in line:  # the fast path: most lines of a long log
            return []
        found = []
        for segment in _ANSI.sub("", line).split("\r"):  # tqdm redraws a bar with \r on the same line
            if PROGRESS_PREFIX in segment:  # cw's own progress line (its step and rates), not a trainer's record
                continue
            values = parse_record(segment)
            if values is not None:
                found.append(self._record(values))
        return found

    def feed_all(self, lines: Iterable[str]) -> Iterator[Record]:
        """The records of many lines, in order."""
        for line in lines:
            yield from self.feed(line)

    def _record(self, values: dict[str, float]) -> Record:
        kind = kind_of(values)
        explicit = next((values.pop(k) for k in STEP_KEYS if k in values and math.isfinite(values[k])), None)
        for k in STEP_KEYS:
            values.pop(k, None)
        if explicit is not None:
            self.explicit_steps = True
            self.step = int(explicit)
        elif kind == TRAIN:
            self.step += 1
        return Record(self.step, kind, values)


def records_from_log_history(history: Iterable[Mapping[str, Any]]) -> list[Record]:
    """Records of a ``trainer_state.json`` ``log_history`` (each entry has its own ``step``)."""
    records = []
    for entry in history:
        if not isinstance(entry, Mapping):
            continue
        values = {k: v for k, v in ((k, to_number(v)) for k, v in entry.items() if isinstance(k, str)) if v is not None}
        step = values.pop("step", None)
        values.pop("global_step", None)
        if step is None or not math.isfinite(step) or not values:
            continue
        records.append(Record(int(step), kind_of(values), values))
    return records


class RunMetrics(Struct):
    """The records of one run (or path), and where they came from.

    Attributes:
        name: The label: a run name, or the path as given.
        source: Where the records were read (``pod NAME``, a file path).
        step_source: ``logged`` (records or trainer_state.json carried steps) or ``counted``.
        records: The records, in log order.
    """

    name: str
    source: str
    step_source: str = "counted"
    records: list[Record] = field(default_factory=list)

    def series(self) -> dict[str, list[tuple[int, float]]]:
        """Metric -> ``[(step, value), ...]`` in log order, every kind of record included."""
        out: dict[str, list[tuple[int, float]]] = {}
        for record in self.records:
            for name, value in record.values.items():
                out.setdefault(name, []).append((record.step, value))
        return out

    def latest(self) -> dict[str, tuple[int, float]]:
        """Metric -> ``(step, value)`` of its last record."""
        out: dict[str, tuple[int, float]] = {}
        for record in self.records:
            for name, value in record.values.items():
                out[name] = (record.step, value)
        return out


def default_metrics(runs: Iterable[RunMetrics]) -> list[str]:
    """What to chart when no ``--metric`` is given: ``reward`` (GRPO) if logged, else ``loss``.

    Falls back to ``train_loss``, then ``eval_loss``, then the first metric logged.
    """
    names: dict[str, None] = {}
    for run in runs:
        for record in run.records:
            names.update(dict.fromkeys(record.values))
    for preferred in ("reward", "loss", "train_loss", "eval_loss"):
        if preferred in names:
            return [preferred]
    return [next(iter(names))] if names else []
