"""How a framework's config spells the settings cw suggests changing.

A framework (built-in or plugin) describes its own keys once, as a :class:`ConfigWords` (the
``words`` of its advice part, :class:`cw_cli.frameworks.parts.advice.Advice`); the
memory estimate writes its suggestions with them (:func:`cw_cli.estimate.from_config.config_changes`)
and ``cw status`` its advice for a failed run (:mod:`cw_cli.diagnosis.diagnose`: a CUDA out-of-memory
error, a deadline). Neutral on purpose: nothing here knows a framework by name.
"""

from __future__ import annotations

from msgspec import Struct

#: Said of a setting a framework whose words are unknown (a plugin that declares none) has.
GENERIC_SHARDING = "a DeepSpeed ZeRO-3 / FSDP config"


class ConfigWords(Struct, frozen=True, kw_only=True):
    """The keys of a framework's config that cw's suggestions and failure advice name.

    A key is written as the user writes it in the config (dotted for a nested one:
    ``trainer.args.micro_batch_size``). A field left None (or an empty tuple) says the framework
    has no such setting: the estimate then offers no suggestion that needs it (verifiers: no
    QLoRA, no CPU offload), and the advice leaves it out.

    Attributes:
        micro_batch: Sequences per GPU and step (``per_device_train_batch_size``).
        accumulation: Gradient accumulation steps, raised when the micro batch is lowered.
        checkpointing: Gradient checkpointing, a boolean.
        bf16_weights: Config lines that load the weights in bf16 (``("dtype: bfloat16",)``).
        length: Tokens per training sequence.
        completion: Tokens per generated completion (GRPO).
        optimizer: The optimizer's name.
        lora: Config lines that turn LoRA on.
        qlora: Config lines that turn QLoRA on (empty: the framework has none).
        zero3: The config line that shards the model with DeepSpeed ZeRO-3 (or FSDP).
        zero3_offload: The config line for ZeRO-3 with CPU offload (None: no offload).
        vllm_max_model_len: The vLLM engine's longest sequence.
        vllm_gpu_memory_utilization: The vLLM engine's share of its GPU.
        max_steps: The number of training steps (a deadline's advice).
        gpus: The setting of the trainer's GPUs per node (cw's own ``gpu`` unless the native
            config sizes the trainer itself, as verifiers' ``trainer.gpus``).
    """

    micro_batch: str
    accumulation: str | None = None
    checkpointing: str | None = None
    bf16_weights: tuple[str, ...] = ()
    length: str | None = None
    completion: str | None = None
    optimizer: str | None = None
    lora: tuple[str, ...] = ()
    qlora: tuple[str, ...] = ()
    zero3: str | None = None
    zero3_offload: str | None = None
    vllm_max_model_len: str | None = None
    vllm_gpu_memory_utilization: str | None = None
    max_steps: str | None = None
    gpus: str = "gpu"


def cuda_oom_fix(words: ConfigWords | None) -> str:
    """What to change after a CUDA out-of-memory error, in the framework's keys.

    Args:
        words: The framework's words; None (a framework that declares none) gives the advice in
            plain words instead of keys some other framework uses.
    """
    if words is None:
        return ("lower the batch size per GPU (raise gradient accumulation to keep the same batch), turn on "
                "gradient checkpointing, shorten the sequences, or spread the model over more GPUs "
                f"(gpu:, nodes:, or {GENERIC_SHARDING})")  # fmt: skip
    parts = [f"lower {words.micro_batch}"
             + (f" (raise {words.accumulation} to keep the same batch)" if words.accumulation else "")]  # fmt: skip
    if words.checkpointing:
        parts.append(f"set {words.checkpointing}: true")
    if words.length:
        parts.append(f"shorten {words.length}")
    sharding = f"{GENERIC_SHARDING}: `{words.zero3}`" if words.zero3 else GENERIC_SHARDING
    parts.append(f"spread the model over more GPUs ({words.gpus}:, nodes:, or {sharding})")
    return ", ".join(parts[:-1]) + ", or " + parts[-1]


def shorter_run(words: ConfigWords | None) -> str:
    """How to make a run shorter (a deadline's advice), in the framework's keys."""
    if words is None or words.max_steps is None:
        return "fewer training steps"
    return words.max_steps
