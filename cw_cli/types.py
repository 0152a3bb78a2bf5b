"""Types every layer shares, at the bottom of the import graph: this module imports nothing of cw.

The flow is one way (docs/architecture.md): config -> frameworks -> render -> k8s -> api -> cli,
each step importing only the steps before it (tests/unit/test_layering.py checks). What two
steps both need lives here.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from msgspec import Struct, field

if TYPE_CHECKING:  # a type only: pydantic is heavy and config is a higher step
    from cw_cli.config.models import ClusterSpec


#: Where the trainer finds the run's own code (`code:`): an emptyDir that cw_code.py fills at start.
CODE_MOUNT = "/cw-code"


class TrainingType(str, Enum):
    """The training methods cw knows; a framework supports a subset."""

    SFT = "sft"
    DPO = "dpo"
    GRPO = "grpo"
    KTO = "kto"
    REWARD = "reward"
    RLOO = "rloo"
    DISTILLATION = "distillation"

    @property
    def generates(self) -> bool:
        """Whether the trainer generates completions online (and may use a vLLM server)."""
        return self in (TrainingType.GRPO, TrainingType.RLOO)


class RunConfig(Struct):
    """A validated config: cw's cluster fields and the framework's native config.

    Attributes:
        path: The config file.
        cluster: Cluster fields with defaults, `--set` and flags applied; ``cluster.gpu`` is
            the one GPU count per trainer node (the framework's default already applied).
        native: The framework's own config, cluster fields removed.
        notices: Decisions to show the user (e.g. a flag that overrides what the config says).
    """

    path: Path
    cluster: ClusterSpec
    native: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)


class ResourceDefaultsLike(Protocol):
    """A framework's default trainer resources (``frameworks.base.ResourceDefaults``), read-only."""

    @property
    def gpu(self) -> int: ...

    @property
    def cpu(self) -> str | None: ...

    @property
    def memory(self) -> str | None: ...


class NativeConfigRules(Protocol):
    """What the config loader asks of a framework about its native config.

    ``frameworks.base.BaseTrainingFramework`` implements it; the loader depends on this
    description only, so the config step never imports the framework step.
    """

    @property
    def resources(self) -> ResourceDefaultsLike: ...

    @property
    def script_reads_its_own_keys(self) -> bool: ...

    def claims_native_keys(self, data: dict[str, Any]) -> set[str]: ...

    def known_native_keys(self) -> frozenset[str]: ...

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]: ...

    def upgrade_config(self, native: dict[str, Any], training_type: TrainingType) -> tuple[dict[str, Any], list[str]]: ...

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]: ...

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]: ...

    def secrets_needed(self, native: dict[str, Any]) -> dict[str, str]: ...

    def trained_environment(self, native: dict[str, Any]) -> tuple[str, dict[str, Any]] | None: ...
