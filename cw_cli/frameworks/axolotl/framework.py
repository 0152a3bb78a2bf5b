"""Axolotl's framework class: its identity, composed of the parts in the modules beside it."""

from __future__ import annotations

from cw_cli.frameworks.axolotl.advice import AxolotlAdvice
from cw_cli.frameworks.axolotl.launch import AxolotlLaunch
from cw_cli.frameworks.axolotl.mounted_config import AxolotlMountedConfig
from cw_cli.frameworks.axolotl.native_config import AxolotlNativeConfig
from cw_cli.frameworks.axolotl.pins import ONLINE_METHODS, PREFERENCE_METHODS
from cw_cli.frameworks.axolotl.services import AxolotlServices
from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType


class AxolotlFramework(
    AxolotlNativeConfig, AxolotlMountedConfig, AxolotlLaunch, AxolotlServices, AxolotlAdvice, BaseTrainingFramework
):
    """Axolotl through its own command line and YAML config."""

    name = "axolotl"
    description = "Axolotl: SFT, DPO/IPO/KTO/ORPO/SimPO and GRPO with `axolotl train` (vLLM server for GRPO)"
    training_types = (TrainingType.SFT, TrainingType.DPO, TrainingType.GRPO)
    # `rl:` in the config picks the preference method; each has its own command name too.
    aliases = {
        "rlhf": TrainingType.GRPO,
        **{method: TrainingType.DPO for method in PREFERENCE_METHODS if method != "dpo"},
        **{method: TrainingType.GRPO for method in ONLINE_METHODS if method != "grpo"},
    }
    model_key = "base_model"
    model_revision_key = "revision_of_model"
