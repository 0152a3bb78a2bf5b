"""What the memory estimate needs of a framework: the :class:`DescribesTraining` protocol."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cw_cli.types import TrainingType

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.native_setup import RunSetup
    from cw_cli.estimate.words import ConfigWords


class DescribesTraining(Protocol):
    """What the estimate needs of a framework (``BaseTrainingFramework`` has all of it).

    The estimate never imports a framework: the caller hands it one (``cw_cli.api``).
    """

    @property
    def name(self) -> str:
        """The framework's name."""
        ...

    @property
    def model_key(self) -> str:
        """Native key of the model."""
        ...

    @property
    def model_revision_key(self) -> str | None:
        """Native key of the model's revision, if the framework has one."""
        ...

    @property
    def words(self) -> ConfigWords | None:
        """How the config spells what a suggestion changes (None: no changes listed)."""
        ...

    @property
    def describes_training(self) -> bool:
        """Whether ``training_setup`` gives a setup (False: no estimate, said at once)."""
        ...

    def training_setup(self, native: Mapping[str, Any], training_type: TrainingType, cluster: ClusterSpec,
                       base_dir: Path | None, model_config: Mapping[str, Any] | None) -> RunSetup | None:
        """The run's training and vLLM setup (None: no estimate)."""
        ...
