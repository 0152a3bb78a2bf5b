"""verifiers' framework class: its identity, composed of the parts in the modules beside it."""

from __future__ import annotations

from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType
from cw_cli.frameworks.verifiers.advice import VerifiersAdvice
from cw_cli.frameworks.verifiers.launch import VerifiersLaunch
from cw_cli.frameworks.verifiers.mounted_config import VerifiersMountedConfig
from cw_cli.frameworks.verifiers.native_config import VerifiersNativeConfig
from cw_cli.frameworks.verifiers.pins import VERIFIERS_VERSION
from cw_cli.frameworks.verifiers.services import VerifiersServices


class VerifiersFramework(
    VerifiersNativeConfig,
    VerifiersMountedConfig,
    VerifiersLaunch,
    VerifiersServices,
    VerifiersAdvice,
    BaseTrainingFramework,
):
    """verifiers' RLTrainer (async GRPO) against its weight-syncing vLLM server."""

    name = "verifiers"
    description = f"verifiers {VERIFIERS_VERSION}: vf-vllm inference server + vf-train under accelerate"
    training_types = (TrainingType.GRPO,)
    aliases = {"rlhf": TrainingType.GRPO}
    model_key = "model"
