"""TRL's framework class: its identity, composed of the parts in the modules beside it."""

from __future__ import annotations

from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType
from cw_cli.frameworks.trl.advice import TrlAdvice
from cw_cli.frameworks.trl.launch import TrlLaunch
from cw_cli.frameworks.trl.mounted_config import TrlMountedConfig
from cw_cli.frameworks.trl.native_config import TrlNativeConfig
from cw_cli.frameworks.trl.services import TrlServices


class TRLFramework(TrlNativeConfig, TrlMountedConfig, TrlLaunch, TrlServices, TrlAdvice, BaseTrainingFramework):
    """Hugging Face TRL through its own command line."""

    name = "trl"
    description = "Hugging Face TRL: SFT, DPO, GRPO, KTO, reward models, RLOO and distillation through the `trl` command line"
    #: Every training command of `trl` 1.16 (trl/cli/commands/__init__.py).
    training_types = (
        TrainingType.SFT,
        TrainingType.DPO,
        TrainingType.GRPO,
        TrainingType.KTO,
        TrainingType.REWARD,
        TrainingType.RLOO,
        TrainingType.DISTILLATION,
    )
    aliases = {"rlhf": TrainingType.GRPO}
    model_revision_key = "model_revision"
