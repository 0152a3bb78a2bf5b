"""cw's optional features, each one folder that plugs into the core run path through the hooks it
declares (:class:`~cw_cli.features.contract.Feature`): a config block, files for the trainer's
pods, the trainer's environment, checks at launch.

Adding a built-in feature is its folder and one line in :data:`BUILTIN_FEATURES`. The core asks
this module, never a feature's own modules (tests/unit/test_features_are_one_folder_each.py).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from cw_cli.features.contract import Feature, load_hook

#: The built-in features: the package of each, whose ``FEATURE`` declares it.
BUILTIN_FEATURES: tuple[str, ...] = (
    "cw_cli.features.notify",
)


@cache
def features() -> tuple[Feature, ...]:
    """Every feature, in :data:`BUILTIN_FEATURES`'s order (each package's ``FEATURE``)."""
    return tuple(importlib.import_module(package).FEATURE for package in BUILTIN_FEATURES)


def used_by(cluster: Any) -> list[tuple[Feature, Any]]:
    """The features a config uses (its block is set), each with its validated block."""
    return [(feature, block) for feature in features() if (block := getattr(cluster, feature.block, None)) is not None]


def trainer_env(cluster: Any, run_name: str) -> list[dict[str, Any]]:
    """The trainer container's env entries that the config's features add."""
    env: list[dict[str, Any]] = []
    for feature, block in used_by(cluster):
        if feature.trainer_env:
            env += load_hook(feature.trainer_env)(block, run_name)
    return env


def pod_files(cluster: Any) -> dict[str, str]:
    """ConfigMap key -> text of the files the config's features ship to the trainer's pods."""
    return {key: path.read_text(encoding="utf-8") for feature, _ in used_by(cluster) for key, path in feature.pod_files.items()}


def pod_file_keys() -> tuple[str, ...]:
    """The ConfigMap keys every feature may ship (a user's file may not take one)."""
    return tuple(key for feature in features() for key in feature.pod_files)


def before_launch(cluster: Any, config_path: Any) -> None:
    """Run the launch-only checks of the config's features.

    Raises:
        ConfigError: A feature's block fails its check, naming the file and the field.
    """
    for feature, block in used_by(cluster):
        if feature.before_launch:
            load_hook(feature.before_launch)(block, config_path)
