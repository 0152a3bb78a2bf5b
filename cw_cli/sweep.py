"""Sweeps: many runs from one config, as a grid of values and/or a list of variants.

A config's ``sweep:`` block, or ``--sweep key=v1,v2`` on the command line::

    sweep:
      grid:                       # every combination, in key order
        learning_rate: [1.0e-5, 2.0e-5, 5.0e-5]
        lora_r: [8, 16]
      variants:                   # and these, after the grid
        - {learning_rate: 1.0e-4, lora_r: 64}

Each run gets the overrides of one point, applied like ``--set`` (dotted keys nest). Pure: no
cluster, no printing.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from msgspec import Struct, field

from cw_cli.errors import ConfigError

SWEEP_KEY = "sweep"
#: Room left in a run name (40 characters) for the sweep's "-<index>".
MAX_SWEEP_NAME = 34
MAX_RUNS = 1000


class SweepSpec(Struct, frozen=True):
    """The points of a sweep.

    Attributes:
        grid: Key -> the values to try; every combination is a run.
        variants: Explicit runs, each a mapping of overrides.
        where: Where it was written (``file:line: `sweep```, ``--sweep``), for messages.
    """

    grid: dict[str, list[Any]] = field(default_factory=dict)
    variants: list[dict[str, Any]] = field(default_factory=list)
    where: str = ""

    def count(self) -> int:
        """How many runs the sweep has, from the axes' lengths alone (nothing is materialised)."""
        return (math.prod(len(values) for values in self.grid.values()) if self.grid else 0) + len(self.variants)

    def points(self) -> list[dict[str, Any]]:
        """The overrides of every run: the grid's combinations, then the variants."""
        points: list[dict[str, Any]] = []
        if self.grid:
            keys = list(self.grid)
            points += [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]
        points += [dict(variant) for variant in self.variants]
        return points


def parse_flag(assignment: str) -> tuple[str, list[Any]]:
    """``--sweep key=v1,v2,...`` -> (key, values), each value typed as YAML (``1e-5`` is a float).

    Raises:
        ConfigError: No ``=``, an empty key, no values, or a value YAML a config may not hold
            (nested too deep, a recursive alias).
    """
    from cw_cli.config.yaml_source import parse_scalar

    key, sep, values = assignment.partition("=")
    key = key.strip()
    hint = "e.g. --sweep learning_rate=1e-5,2e-5"
    if not sep or not key or not values.strip():
        raise ConfigError([f"--sweep {_short(assignment)}: expected key=value1,value2,..."], hint=hint)
    texts = [value.strip() for value in values.split(",")]
    empty = [str(index + 1) for index, text in enumerate(texts) if not text]
    if empty:  # `seed=,,,` would be 4 runs of `seed: null`; write null to mean it
        raise ConfigError(
            [f"--sweep {_short(assignment)}: value {', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''} "
             f"of {len(texts)} is empty"],
            hint=f"{hint} (write `null` for a run without the key's value)",
        )  # fmt: skip
    try:
        parsed = [parse_scalar(text) for text in texts]
    except ValueError as exc:
        raise ConfigError([f"--sweep {key[:40]}=...: refused: {exc}"], hint=hint) from None
    _refuse_repeats(parsed, f"--sweep {key[:40]}", hint)
    return key, parsed


def _shown(value: Any) -> str:
    """A value as a message quotes it: at most 60 characters."""
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _identity(value: Any) -> str:
    """A value's identity for finding repeats: its type and its YAML spelling (``1`` and ``1.0``
    and ``true`` differ, as they do in the config a run gets)."""
    import json

    return f"{type(value).__name__}:{json.dumps(value, sort_keys=True, default=repr)}"


def _refuse_repeats(values: list[Any], where: str, hint: str) -> None:
    """Refuse a list of sweep values that holds one twice: two runs would be the same run.

    Raises:
        ConfigError: Naming the repeated value and its positions.
    """
    first: dict[str, int] = {}
    for index, value in enumerate(values):
        seen = first.setdefault(_identity(value), index)
        if seen != index:
            shown = _shown(value)
            raise ConfigError(
                [f"{where}: value {index + 1} ({shown}) repeats value {seen + 1}: two runs of the sweep would be the same"],
                hint=f"give each value once; {hint}",
            )


def _short(text: str) -> str:
    """A flag as a message quotes it: at most 60 characters."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


def from_config(block: Any, where: str) -> SweepSpec:
    """The ``sweep:`` block of a config file.

    Args:
        block: The block's value.
        where: ``file:line`` of the block, for messages.

    Raises:
        ConfigError: Not a mapping of ``grid`` (key -> list) and ``variants`` (list of mappings).
    """
    hint = "write `sweep: {grid: {learning_rate: [1.0e-5, 2.0e-5]}, variants: [{lora_r: 64}]}`"
    if not isinstance(block, dict) or set(block) - {"grid", "variants"}:
        raise ConfigError([f"{where}: `sweep` must be a mapping with `grid` and/or `variants`"], hint=hint)
    grid = block.get("grid") or {}
    variants = block.get("variants") or []
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError([f"{where}: `sweep.grid` must map each key to a non-empty list of values"], hint=hint)
    if not isinstance(variants, list) or not all(isinstance(v, dict) and v for v in variants):
        raise ConfigError([f"{where}: `sweep.variants` must be a list of non-empty mappings"], hint=hint)
    for key, values in grid.items():
        _refuse_repeats(values, f"{where}: `sweep.grid.{key}`", hint)
    return SweepSpec(
        grid={str(k): list(v) for k, v in grid.items()}, variants=[dict(v) for v in variants], where=f"{where}: `sweep`"
    )


def _refuse_oversized(spec: SweepSpec) -> None:
    """Refuse more than :data:`MAX_RUNS` runs, counted from the axes' lengths before any point exists.

    Raises:
        ConfigError: The count, how it is made, and how to cut it.
    """
    count = spec.count()
    if count <= MAX_RUNS:
        return
    shown = [f"{len(values)} {key}" for key, values in itertools.islice(spec.grid.items(), 6)]
    axes = " x ".join(shown + (["..."] if len(spec.grid) > len(shown) else []))
    made = f"grid {axes}" if axes else ""
    if spec.variants:
        made += f"{' + ' if made else ''}{len(spec.variants)} variants"
    raise ConfigError(
        [f"{spec.where or 'the sweep'} has {count:,} runs ({made}), more than the {MAX_RUNS:,} a sweep may have"],
        hint="drop values or axes, or split it into several sweeps",
    )


def combine(from_file: SweepSpec | None, flags: list[str]) -> SweepSpec | None:
    """The file's sweep with ``--sweep`` flags over it (a flag replaces the file's values of its key)."""
    if not flags:
        return from_file
    grid = dict(from_file.grid) if from_file else {}
    for assignment in flags:
        key, values = parse_flag(assignment)
        grid[key] = values
    where = f"{from_file.where} with --sweep" if from_file else "--sweep"
    return SweepSpec(grid=grid, variants=list(from_file.variants) if from_file else [], where=where)


def run_names(sweep_name: str, count: int) -> list[str]:
    """``<sweep>-<index>``, the index zero-padded so the names sort in sweep order."""
    width = len(str(count - 1)) if count > 1 else 1
    return [f"{sweep_name}-{index:0{width}d}" for index in range(count)]


def check_size(spec: SweepSpec, sweep_name: str) -> list[dict[str, Any]]:
    """The sweep's points, refusing an empty or oversized sweep and a name with no room for indexes.

    Raises:
        ConfigError: No points, more than :data:`MAX_RUNS` (refused before any is made), or a
            sweep name too long.
    """
    _refuse_oversized(spec)  # before points(): a grid of 10^10 would fill the memory
    points = spec.points()
    if not points:
        raise ConfigError(["the sweep has no runs"], hint="give `grid` values or `variants`")
    first: dict[str, int] = {}
    for index, point in enumerate(points):  # a variant may repeat a grid point or another variant
        seen = first.setdefault(_identity(point), index)
        if seen != index:
            raise ConfigError(
                [f"{spec.where or 'the sweep'}: run {index} ({_shown(point)}) is the same as run {seen}"],
                hint="drop the repeated variant or value",
            )
    longest = len(run_names(sweep_name, len(points))[-1])
    if longest > 40:
        raise ConfigError(
            [f"sweep name {sweep_name!r} leaves no room for the run index (run names are at most 40 characters)"],
            hint=f"use a sweep name of at most {40 - (longest - len(sweep_name))} characters",
        )
    return points
