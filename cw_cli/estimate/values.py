"""Lenient readers of a hand-written config's values: YAML's booleans, counts, numbers, sections.

A value of the wrong type or out of range reads as the caller's default (never raises): a
config the framework would accept must still get an estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The strings that read as true (``"yes"``, ``"1"``...), case and spaces ignored.
TRUE = ("1", "true", "yes", "on")


def truthy(value: Any) -> bool:
    """Whether a flag is on: a true-looking string (:data:`TRUE`), else Python's truth."""
    if isinstance(value, str):
        return value.strip().lower() in TRUE
    return bool(value)


def as_count(value: Any, default: int) -> int:
    """A positive integer, else ``default`` (None, a bool, zero, negative or not a number)."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number >= 1 else default


def as_number(value: Any, default: float) -> float:
    """A float, else ``default`` (None, a bool or not a number)."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def as_mapping(value: Any) -> Mapping[str, Any]:
    """A config section as a mapping; anything else as an empty one."""
    return value if isinstance(value, Mapping) else {}
