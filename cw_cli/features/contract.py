"""What an optional feature declares to plug into the core run path (config -> plan -> launch).

A feature is one folder (``cw_cli/features/<name>/``, or a plugin's package) whose ``FEATURE``
is a :class:`Feature`. Each hook is a ``"module:attribute"`` string, imported only when a run
uses the feature, so a feature costs nothing to a command or a config that does not use it. The
core never imports a feature's modules: it asks :mod:`cw_cli.features` for the hooks.

Built-in features are listed in :data:`cw_cli.features.BUILTIN_FEATURES` and declared exactly
as a third-party one would be.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from msgspec import Struct, field


class Feature(Struct, frozen=True, kw_only=True):
    """An optional feature: its config block and the hooks the core calls when a config has it.

    Attributes:
        name: The feature's name (a folder name: lowercase, no dots).
        block: The config's top-level key that turns it on (``notify:``).
        spec: ``"module:Class"``: the pydantic model that validates the block, built the first
            time a config has it. A field of cw's config model, so ``cw schema`` shows it and a
            misspelt key under it gets "did you mean".
        description: The block's one-paragraph help (``cw schema``).
        pod_files: ConfigMap key -> the file shipped to the trainer's pods (beside cw's own, so
            importable by that name there) when the block is set and the run has a trainer.
        trainer_env: ``"module:function"``, ``(block, run_name) -> env entries`` of the trainer
            container (Kubernetes ``EnvVar`` dicts).
        before_launch: ``"module:function"``, ``(block, config_path) -> None``: the checks only a
            launch pays for (raising :class:`~cw_cli.errors.ConfigError`), never on a dry run.
    """

    name: str
    block: str
    spec: str
    description: str
    pod_files: dict[str, Path] = field(default_factory=dict)
    trainer_env: str | None = None
    before_launch: str | None = None


def load_hook(target: str) -> Any:
    """The object a ``"module:attribute"`` hook names, imported now."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
