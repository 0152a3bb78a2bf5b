"""Part 1 of the framework contract: who the framework is and which training types it runs."""

from __future__ import annotations

from typing import ClassVar

from cw_cli.frameworks.descriptions import ResourceDefaults
from cw_cli.types import TrainingType


class Identity:
    """The framework's name, its training types and its default sizing: class attributes only.

    ``cw <name> <type>`` is the command of each type (and alias); ``model_key`` (with the
    framework and type) identifies a run's outputs, so a reused run name never resumes from
    another model's checkpoints.
    """

    #: Command name (``cw <name> ...``); letters, digits, ``-`` and ``_``. Required.
    name: ClassVar[str]
    #: One line shown in help and ``cw frameworks``.
    description: ClassVar[str] = ""
    #: The training methods offered as commands; at least one. Required.
    training_types: ClassVar[tuple[TrainingType, ...]] = ()
    #: Extra command names accepted for a type, e.g. ``{"rlhf": TrainingType.GRPO}``.
    aliases: ClassVar[dict[str, TrainingType]] = {}
    #: The trainer's resources when neither the config nor a flag sets them.
    resources: ClassVar[ResourceDefaults] = ResourceDefaults()
    #: Native key of the model trained.
    model_key: ClassVar[str] = "model_name_or_path"
    #: Native key of the model's revision (branch, tag or commit), so the estimate reads the
    #: config.json of that snapshot; None when the framework has none.
    model_revision_key: ClassVar[str | None] = None
