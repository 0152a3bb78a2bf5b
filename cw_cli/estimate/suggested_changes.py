"""A memory suggestion in the framework's own words: what to write in the config (or pass as a
flag) for a change that fits, in the keys its :class:`~cw_cli.estimate.words.ConfigWords` names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: the memory model loads when there is a model to count
    from cw_cli.estimate.fit import Suggestion
    from cw_cli.estimate.memory import TrainingSetup
    from cw_cli.estimate.vllm import VllmSetup
    from cw_cli.estimate.words import ConfigWords


def applies(suggestion: Suggestion, services_only: bool) -> bool:
    """Whether a suggestion concerns the roles checked (a servers-only run: its vLLM engine only)."""
    return suggestion.key.startswith("vllm_") if services_only else True


class _Lines:
    """The config lines of one suggestion, and whether one needed a setting the framework lacks."""

    def __init__(self) -> None:
        self.changes: list[str] = []
        self.missing = False

    def key(self, key: str | None, value: Any) -> None:
        """``key: value``, or missing when the framework has no such key."""
        if key is None:
            self.missing = True
        else:
            self.changes.append(f"{key}: {value}")

    def lines(self, written: tuple[str, ...] | str | None) -> None:
        """Lines the framework writes for a change, or missing when it writes none."""
        if not written:
            self.missing = True
        else:
            self.changes.extend([written] if isinstance(written, str) else written)


def config_changes(words: ConfigWords | None, training_type: str, setup: TrainingSetup, vllm: VllmSetup | None,
                   suggestion: Suggestion) -> list[str] | None:  # fmt: skip
    """What to write in the config (or pass as a flag) for a suggestion, in the framework's keys.

    Args:
        words: The framework's words; None (a framework that declares none) lists no change.
        training_type: The training type (GRPO's completion length).
        setup: The setup as read from the config.
        vllm: The vLLM engine as read.
        suggestion: A change that fits.

    Returns:
        The config lines; None when the suggestion needs a setting the framework does not have
        (verifiers' QLoRA or CPU offload), so it is not offered.
    """
    if words is None:
        return []
    out = _Lines()
    _trainer_changes(out, words, training_type, setup, suggestion.setup)
    if vllm is not None and suggestion.vllm is not None:
        if suggestion.vllm.max_model_len != vllm.max_model_len:
            out.key(words.vllm_max_model_len, suggestion.vllm.max_model_len)
        if suggestion.vllm.gpu_memory_utilization != vllm.gpu_memory_utilization:
            out.key(words.vllm_gpu_memory_utilization, suggestion.vllm.gpu_memory_utilization)
    return None if out.missing else out.changes


def _trainer_changes(out: _Lines, words: ConfigWords, training_type: str, old: TrainingSetup, new: TrainingSetup) -> None:
    """The trainer's side of a suggestion: each setting that differs, in the framework's keys."""
    if new.gradient_checkpointing and not old.gradient_checkpointing:
        out.key(words.checkpointing, "true")
    if new.weight_dtype != old.weight_dtype:
        out.lines(words.bf16_weights)
    if new.micro_batch != old.micro_batch:
        out.key(words.micro_batch, new.micro_batch)
        if words.accumulation is not None:  # without one (verifiers) the batch only gets smaller
            out.key(words.accumulation, new.gradient_accumulation)
    if new.seq_len != old.seq_len:
        out.key(words.length, new.seq_len)
    if training_type == "grpo" and new.max_completion_length != old.max_completion_length:
        out.key(words.completion, new.max_completion_length)
    if new.optimizer != old.optimizer:
        out.key(words.optimizer, new.optimizer)
    if new.method != old.method:
        out.lines(words.qlora if new.method == "qlora" else words.lora)
    sharding_changed = (new.zero_stage, new.offload_optimizer, new.offload_params) != (
        old.zero_stage, old.offload_optimizer, old.offload_params)  # fmt: skip
    if sharding_changed and new.zero_stage == 3:
        out.lines(words.zero3_offload if new.offload_optimizer or new.offload_params else words.zero3)
    if new.nodes != old.nodes:
        out.changes.append(f"--nodes {new.nodes}")
