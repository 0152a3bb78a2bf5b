"""Axolotl's words for cw's memory suggestions and failure advice, its failure hints, and where
its training setup is read (``setup.py``)."""

from __future__ import annotations

from cw_cli.frameworks.base import Advice, FailureHint
from cw_cli.frameworks.words import ConfigWords

#: Axolotl's keys for what cw's memory suggestions and failure advice name.
AXOLOTL_WORDS = ConfigWords(
    micro_batch="micro_batch_size",
    accumulation="gradient_accumulation_steps",
    checkpointing="gradient_checkpointing",
    bf16_weights=("bf16: true",),
    length="sequence_len",
    completion="trl.max_completion_length",
    optimizer="optimizer",
    lora=("adapter: lora", "lora_target_linear: true"),
    qlora=("adapter: qlora", "load_in_4bit: true", "lora_target_linear: true"),
    zero3="deepspeed: deepspeed_configs/zero3_bf16.json",
    zero3_offload="deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json",
    vllm_max_model_len="vllm.max_model_len",
    vllm_gpu_memory_utilization="vllm.gpu_memory_utilization",
    max_steps="max_steps",
)


class AxolotlAdvice(Advice):
    """Axolotl's estimate reader, words and failure hints."""

    words = AXOLOTL_WORDS
    setup_module = "cw_cli.frameworks.axolotl.setup"

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """What only Axolotl's log says: a dataset ``type`` it has no strategy for (Axolotl 0.19,
        ``axolotl/utils/data/wrappers.py``). cw checks the data's columns before launch, but not
        a type naming the user's own loader, which only Axolotl can resolve."""
        return (
            FailureHint(
                kind="dataset-type",
                pattern=r"unhandled prompt tokenization strategy: ",
                summary="unknown dataset type",
                message="Axolotl has no prompt strategy for a dataset's `type`",
                fix="set `datasets[].type` to one of Axolotl's (e.g. `chat_template`, `alpaca`), or to your own "
                "`module.load_fn` shipped next to the config or with `code:`; `x:load_y` is written `x.load_y`",
            ),
        )
