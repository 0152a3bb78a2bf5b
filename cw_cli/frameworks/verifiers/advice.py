"""verifiers' words for cw's memory suggestions and failure advice, its failure hints, and where
its training setup is read (``setup.py``)."""

from __future__ import annotations

from cw_cli.frameworks.base import Advice, FailureHint
from cw_cli.frameworks.words import ConfigWords

#: verifiers' keys for what cw's memory suggestions and failure advice name. RLConfig has no
#: gradient accumulation, no QLoRA and no CPU offload: the estimate suggests none of them.
VERIFIERS_WORDS = ConfigWords(
    micro_batch="trainer.args.micro_batch_size",
    checkpointing="trainer.args.gradient_checkpointing",
    bf16_weights=("trainer.args.bf16: true",),
    length="trainer.args.max_seq_len",
    completion="trainer.args.max_tokens",
    optimizer="trainer.args.optim",
    lora=("trainer.args.use_lora: true",),
    zero3="accelerate_config: zero3",
    vllm_max_model_len="inference.args.max_model_len",
    vllm_gpu_memory_utilization="inference.args.gpu_memory_utilization",
    max_steps="trainer.args.max_steps",
    gpus="trainer.gpus",
)


class VerifiersAdvice(Advice):
    """verifiers' estimate reader, words and failure hints."""

    words = VERIFIERS_WORDS
    setup_module = "cw_cli.frameworks.verifiers.setup"

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """What only verifiers' log says: the environment cannot be imported in the pod (verifiers
        0.1.9, ``verifiers/utils/env_utils.py``). cw installs a hub environment with
        ``prime env install`` first, which needs the network; a module next to the config is
        shipped instead."""
        return (
            FailureHint(
                kind="environment-missing",
                pattern=r"Could not import '[^']+' environment\. Ensure the package",
                summary="environment not installed",
                message="verifiers could not import the run's environment in the trainer pod",
                fix="check `env.id` against the Environments Hub and that the pods reach it (cw runs "
                "`prime env install ID` first), or put the environment's module (with `load_environment`) "
                "next to the config so cw ships it",
            ),
        )
