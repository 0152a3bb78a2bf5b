"""How a config's values were written, where cw's own fields refuse the form of a valid value.

A number written in a YAML-1.1-only form (``0x10``, ``010``, ``1:30``, ``1_000``) is read one way
by PyYAML and another by YAML 1.2, JSON and TOML readers; a ``--set gpu=`` makes a field null,
which would silently mean the framework's default. cw refuses both in its own fields, with the
plain value to write; the framework's keys pass on as PyYAML reads them.
"""

from __future__ import annotations

from typing import Any, get_args

from msgspec import Struct
from pydantic import BaseModel

from cw_cli.config.models import ClusterSpec
from cw_cli.config.yaml_source import KeyPath, parse_scalar, yaml11_number


class WrittenForms(Struct):
    """How values were written, where cw's fields refuse the form although the value is valid.

    Attributes:
        odd_numbers: Key path -> (text, where) of each number in a YAML-1.1-only form
            (``0x10``, ``010``, ``1:30``, ``1_000``); where is ``file:line`` or ``--set ...``.
        nulls: (key path, assignment) of each ``--set`` that gave null (``--set gpu=``).
    """

    odd_numbers: dict[KeyPath, tuple[str, str]]
    nulls: list[tuple[list[str], str]]

    def note_set(self, parts: list[str], value: Any, assignment: str) -> None:
        """Record a ``--set``: it replaces what the file wrote at and under its key."""
        self.odd_numbers = {key: odd for key, odd in self.odd_numbers.items() if not _under(key, parts)}
        raw = assignment.partition("=")[2]
        if yaml11_number(raw):
            self.odd_numbers[tuple(parts)] = (raw.strip(), f"--set {assignment}")
        if value is None:
            self.nulls.append((parts, assignment))

    def problems(self, cluster_part: dict[str, Any], flagged: set[str]) -> tuple[list[str], set[KeyPath]]:
        """One issue per refused form in cw's own fields, and the key paths they name.

        Args:
            cluster_part: cw's fields of the config (the framework's keys and those it claims left out).
            flagged: The fields a flag sets (``--gpu`` replaces whatever the file wrote).
        """
        issues: list[str] = []
        reported: set[KeyPath] = set()
        for parts, assignment in self.nulls:
            if problem := _null_problem(parts, cluster_part):
                issues.append(f"--set {assignment}: {problem}")
                reported.add(tuple(parts))
        for key, (text, where) in self.odd_numbers.items():
            if str(key[0]) in cluster_part and key[0] not in flagged:
                issues.append(f"{where}: {_yaml11_problem(key, text, where.startswith('--set'))}")
                reported.add(key)
        return issues, reported


def _under(key: KeyPath, parts: list[str]) -> bool:
    """Whether ``key`` is the path ``parts`` or inside it (a ``--set`` there replaced it)."""
    return [str(part) for part in key[: len(parts)]] == parts


def _yaml11_problem(key: KeyPath, text: str, from_set: bool) -> str:
    """Why a cw field's number written as ``0x10``, ``010``, ``0b1``, ``1:30`` or ``1_000`` is refused, and the fix."""
    value = parse_scalar(text)
    lowered = text.lower().lstrip("+-")
    kind = (
        "a hexadecimal" if lowered.startswith("0x") else "a binary" if lowered.startswith("0b")
        else "a base-60" if ":" in text else "an underscored" if "_" in text else "an octal"
    )  # fmt: skip
    dotted = ".".join(str(part) for part in key)
    fix = f"--set {dotted}={value}" if from_set else f"`{key[-1]}: {value}`"
    quoted = f"--set {dotted}=\"'{text}'\"" if from_set else f"'{text}'"
    return (
        f"`{dotted}`: {text} is {kind} number ({value}) only in YAML 1.1; YAML 1.2, JSON and TOML readers "
        f"take it otherwise. Write the plain decimal number {fix} (or quote it, {quoted}, if it is text)"
    )


#: cw fields the loader fills with the framework's default when they are null: a `--set gpu=`
#: that made one null would launch with the default, never what it says.
_DEFAULTED_WHEN_NULL = frozenset({"gpu", "cpu", "memory"})
_EXAMPLES = {"gpu": "8", "cpu": "16", "memory": "64Gi", "nodes": "2"}


def _null_problem(parts: list[str], cluster_part: dict[str, Any]) -> str | None:
    """Why a ``--set`` that makes a cw field null is refused (None when null is fine there).

    Refused where the field takes no null (``nodes``), or where null means the framework's
    default (``gpu``, ``cpu``, ``memory``): an empty ``--set gpu=`` is a value left out, not a
    request for the default.
    """
    if parts[0] not in cluster_part:
        return None  # the framework's key, or one it claims
    from cw_cli.config.models import ServiceResources

    if len(parts) == 1:
        model: type[BaseModel] = ClusterSpec
    elif len(parts) == 3 and parts[0] == "services":
        model = ServiceResources
    else:
        return None
    info = model.model_fields.get(parts[-1])
    if info is None or (parts[-1] not in _DEFAULTED_WHEN_NULL and type(None) in get_args(info.annotation)):
        return None
    key = ".".join(parts)
    example = f" such as --set {key}={_EXAMPLES[parts[-1]]}" if parts[-1] in _EXAMPLES else ""
    return f"`{key}` cannot be null (an empty value is null); give a value{example}, or leave the --set out"
