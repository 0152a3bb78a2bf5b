"""``run:NAME`` references: a config whose model is another run's (``model_name_or_path:
run:my-sft``, ``run:my-sft@best``, ``@final``, ``@40``) starts from that run's model on the same
checkpoint volume.

This module is the pure half: finding the references in a config and saying what is wrong with
them. after_training/run_refs.py reads the referenced run off the cluster and turns each into
the in-pod path of that model (``/checkpoints/<its folder>``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.errors import ConfigError
from cw_cli.render.naming import is_run_name

#: The prefix that makes a model value a reference to a run.
PREFIX = "run:"
_WHICH = re.compile(r"best|final|latest|[0-9]{1,11}")


class RunRef(Struct, frozen=True):
    """A reference to another run's model.

    Attributes:
        key: The config key that holds it (the framework's model key).
        text: The value as written (``run:my-sft@best``).
        run: The referenced run's name.
        which: ``final`` (the default), ``best``, ``latest`` or a step number.
    """

    key: str
    text: str
    run: str
    which: str = "final"


def parse_ref(path: Path, key: str, text: str) -> RunRef:
    """``run:NAME[@best|@final|@latest|@N]`` as a :class:`RunRef`.

    Raises:
        ConfigError: Not a run name, or an unknown ``@`` part (naming the file and key).
    """
    body = text[len(PREFIX):]
    name, at, which = body.partition("@")
    if not is_run_name(name):
        raise ConfigError([f"{path}: {key}: {text[:80]!r}: {name[:60]!r} is not a run name (lowercase letters, digits and '-')"],
                          hint=f"{key}: run:NAME, run:NAME@best, run:NAME@final or run:NAME@STEP")  # fmt: skip
    if at and not _WHICH.fullmatch(which):
        raise ConfigError([f"{path}: {key}: {text[:80]!r}: expected @best, @final, @latest or a step number after the run's name"],
                          hint=f"{key}: run:{name}@best")  # fmt: skip
    return RunRef(key=key, text=text, run=name, which=which if at else "final")


def find_refs(path: Path, native: dict[str, Any], model_key: str) -> list[RunRef]:
    """The references in a native config: its model key when its value starts with ``run:``.

    Raises:
        ConfigError: A malformed reference.
    """
    value = native.get(model_key)
    if isinstance(value, str) and value.startswith(PREFIX):
        return [parse_ref(path, model_key, value)]
    return []


def check_volume(path: Path, ref: RunRef, theirs: str | None, ours: str | None) -> None:
    """Refuse a reference to a run whose outputs are not on this run's checkpoint volume.

    Raises:
        ConfigError: Different volumes (or none), naming both.
    """
    if not theirs:
        raise ConfigError([f"{path}: {ref.key}: {ref.text}: run {ref.run!r} kept its outputs on no volume: no model to start from"])
    if theirs != ours:
        here = f"this run's checkpoint_volume is {ours}" if ours and ours != "none" else "this run has no checkpoint_volume"
        raise ConfigError([f"{path}: {ref.key}: {ref.text}: run {ref.run!r} lives on volume {theirs} and {here}: "
                           "a run starts from another's model on the same volume only"],
                          hint=f"set checkpoint_volume: {theirs}")  # fmt: skip


def check_finished(path: Path, ref: RunRef, state: str) -> None:
    """Refuse a reference to a run that has not succeeded.

    Raises:
        ConfigError: It is running, pending or failed.
    """
    if state != "Succeeded":
        raise ConfigError([f"{path}: {ref.key}: {ref.text}: run {ref.run!r} is {state}, not finished: "
                           "a run starts from a run that succeeded"],
                          hint=f"wait until `cw status {ref.run}` says Succeeded, then launch again")  # fmt: skip
