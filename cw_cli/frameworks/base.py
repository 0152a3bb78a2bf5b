"""The interface every training framework implements, built-in or plugin.

A framework knows its own native config, its images and commands, and which services a training
type needs; it knows nothing about the cluster client or the CLI: it describes, the renderer
turns descriptions into manifests. :class:`BaseTrainingFramework` is composed of six small parts
(:mod:`cw_cli.frameworks.parts`, one page in docs/plugins.md); a plugin subclasses it and
overrides what its framework says more about. The three built-ins implement each part in a
module of the same name (``cw_cli/frameworks/<name>/<part>.py``).

Plugins import everything they need from here.
"""

from __future__ import annotations

from cw_cli.frameworks.descriptions import (
    CHECKPOINT_MOUNT,
    CONFIG_FILE,
    CONFIG_MOUNT,
    DatasetNeed,
    FailureHint,
    ResourceDefaults,
    RunContext,
    ServiceDef,
    dataset_item_need,
)
from cw_cli.frameworks.parts.advice import Advice, AdviceFromFile
from cw_cli.frameworks.parts.identity import Identity
from cw_cli.frameworks.parts.launch import Launch
from cw_cli.frameworks.parts.mounted_config import MountedConfig
from cw_cli.frameworks.parts.native_config import NativeConfig
from cw_cli.frameworks.parts.services import Services
from cw_cli.types import TrainingType

__all__ = [
    "CHECKPOINT_MOUNT",
    "CONFIG_FILE",
    "CONFIG_MOUNT",
    "PARTS",
    "Advice",
    "AdviceFromFile",
    "BaseTrainingFramework",
    "DatasetNeed",
    "FailureHint",
    "Identity",
    "Launch",
    "MountedConfig",
    "NativeConfig",
    "ResourceDefaults",
    "RunContext",
    "ServiceDef",
    "Services",
    "TrainingType",
    "dataset_item_need",
]

#: The parts of the contract, in the order docs/plugins.md describes them.
PARTS: tuple[type, ...] = (Identity, NativeConfig, MountedConfig, Launch, Services, Advice)


class BaseTrainingFramework(Identity, NativeConfig, MountedConfig, Launch, Services, Advice):
    """A training backend: turns a native config into what the pods run.

    Subclasses set ``name`` and ``training_types`` (:class:`Identity`) and implement
    ``default_image`` and ``trainer_command`` (:class:`Launch`); every other hook has a default.
    Plugins subclass it exactly as the built-ins do.
    """
