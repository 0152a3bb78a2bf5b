"""TRL's words for cw's memory suggestions and failure advice, its failure hints, and where its
training setup is read (``setup.py``)."""

from __future__ import annotations

from cw_cli.frameworks.base import Advice, FailureHint
from cw_cli.frameworks.words import ConfigWords

#: TRL's keys for what cw's memory suggestions and failure advice name.
TRL_WORDS = ConfigWords(
    micro_batch="per_device_train_batch_size",
    accumulation="gradient_accumulation_steps",
    checkpointing="gradient_checkpointing",
    bf16_weights=("dtype: bfloat16",),
    length="max_length",
    completion="max_completion_length",
    optimizer="optim",
    lora=("use_peft: true",),
    qlora=("use_peft: true", "load_in_4bit: true"),
    zero3="accelerate_config: zero3",
    zero3_offload="accelerate_config: <a DeepSpeed ZeRO-3 file with offload_optimizer_device: cpu and "
    "offload_param_device: cpu>",
    vllm_max_model_len="vllm_max_model_length",
    vllm_gpu_memory_utilization="vllm_gpu_memory_utilization",
    max_steps="max_steps",
)


class TrlAdvice(Advice):
    """TRL's estimate reader, words and failure hints."""

    words = TRL_WORDS
    setup_module = "cw_cli.frameworks.trl.setup"

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """What only TRL's log says: its vLLM client gave up on the generation server.

        The trainer starts only once its servers answer (cw's init containers), so this is a
        server that died or hung mid-run (TRL 1.16, ``trl/generation/vllm_client.py``).
        """
        return (
            FailureHint(
                kind="vllm-server-lost",
                pattern=r"The vLLM server can't be reached at \S+ after \S+ seconds",
                summary="vLLM server lost",
                message="the trainer's vLLM client could not reach the generation server (it answered at the start)",
                fix="see why it stopped: cw logs RUN --role server; a server that ran out of GPU memory needs a "
                "lower `vllm_gpu_memory_utilization` or a larger `services.server.gpu`",
            ),
        )
