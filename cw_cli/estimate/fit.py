"""Does a run fit its GPUs, and which concrete changes would make it fit.

``fits`` compares an :class:`~cw_cli.estimate.memory.Estimate` with one GPU's memory, role by
role; ``suggestions`` re-estimates the run with one change at a time (gradient checkpointing,
bf16 weights, LoRA, an 8-bit optimizer, ZeRO-3, more nodes, a smaller micro batch or max length)
and returns those that fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from cw_cli.estimate.memory import (
    GIB,
    Estimate,
    TrainingSetup,
    VllmSetup,
    estimate_memory,
)
from cw_cli.labels import TRAINER, VLLM

# A colocated engine that sleeps still keeps its CUDA context in the trainer's process.
_SLEEPING_VLLM_BYTES = 1 * GIB


class RoleVerdict(Struct, frozen=True):
    """Whether one role fits its GPU.

    Attributes:
        role: ``"trainer"`` or ``"vllm"``.
        fits: Whether ``required_bytes`` ≤ ``available_bytes``.
        required_bytes: What the role needs on one GPU.
        available_bytes: What it may use there.
        reason: One line explaining the comparison.
    """

    role: str
    fits: bool
    required_bytes: int
    available_bytes: int
    reason: str

    @property
    def ratio(self) -> float:
        """required / available (> 1 does not fit)."""
        return self.required_bytes / self.available_bytes if self.available_bytes else float("inf")


class Verdict(Struct, frozen=True):
    """The fit of every role of a run.

    Attributes:
        fits: Every role fits.
        gpu_memory_bytes: Memory of one GPU.
        roles: One verdict per role.
    """

    fits: bool
    gpu_memory_bytes: int
    roles: tuple[RoleVerdict, ...]

    @property
    def worst_ratio(self) -> float:
        """The largest required/available ratio over the roles."""
        return max(r.ratio for r in self.roles)


class Suggestion(Struct, frozen=True):
    """A change that makes the run fit.

    Attributes:
        key: Stable identifier: ``gradient_checkpointing``, ``bf16_weights``, ``lora``,
            ``qlora``, ``optimizer_8bit``, ``zero3``, ``offload``, ``nodes``, ``micro_batch``,
            ``max_length``, ``vllm_max_model_len``, ``vllm_gpu_memory_utilization``, or
            ``combined``.
        description: What to change, in words.
        setup: The changed training setup.
        vllm: The changed vLLM setup (or the unchanged one).
        per_gpu_bytes: The trainer's per-GPU bytes after the change.
        ratio: The worst required/available ratio after the change.
    """

    key: str
    description: str
    setup: TrainingSetup
    vllm: VllmSetup | None
    per_gpu_bytes: int
    ratio: float


def fits(estimate: Estimate, gpu_memory_bytes: int, headroom: float = 0.0) -> Verdict:
    """Compare each role's per-GPU need with one GPU's memory.

    The trainer needs ``per_gpu_bytes``, plus a colocated vLLM engine's share of the same GPU
    (with sleep mode, the larger of training beside a sleeping engine and generating beside
    the trainer's states). A vLLM engine needs its weights, overhead and the KV cache of one
    ``max_model_len`` sequence inside ``gpu_memory_utilization`` of the GPU, or it refuses to
    start.

    Args:
        estimate: What :func:`~cw_cli.estimate.memory.estimate_memory` returned.
        gpu_memory_bytes: Memory of one GPU.
        headroom: Fraction of the GPU to keep free (0.1 keeps 10% spare); a negative value
            tolerates that much over (a refusal that should only trigger when a run clearly
            cannot fit can use the estimate's error band, e.g. -0.15).

    Returns:
        The verdict, role by role.
    """
    usable = int(gpu_memory_bytes * (1 - headroom))
    t = estimate.trainer
    v = estimate.vllm
    roles = []
    need = t.per_gpu_bytes
    why = "trainer peak"
    if v is not None and v.mode == "colocate":
        share = int(v.gpu_memory_utilization * gpu_memory_bytes)
        states = (t.weights_bytes + t.master_weights_bytes + t.optimizer_states_bytes
                  + t.gradients_bytes + t.reference_model_bytes + t.overhead_bytes)
        if v.sleep_mode:
            need = max(t.per_gpu_bytes + _SLEEPING_VLLM_BYTES, states + share)
            why = "trainer beside a sleeping vLLM engine, or its states beside vLLM's share"
        else:
            need = t.per_gpu_bytes + share
            why = f"trainer peak + colocated vLLM's {v.gpu_memory_utilization:.0%} of the GPU"
    roles.append(RoleVerdict(TRAINER, need <= usable, need, usable, why))
    if v is not None:
        budget = int(v.gpu_memory_utilization * gpu_memory_bytes)
        roles.append(RoleVerdict(
            VLLM, v.min_per_gpu_bytes <= budget, v.min_per_gpu_bytes, budget,
            f"weights + overhead + KV cache of one {v.max_model_len}-token sequence within "
            f"gpu_memory_utilization={v.gpu_memory_utilization}",
        ))
    return Verdict(all(r.fits for r in roles), gpu_memory_bytes, tuple(roles))


def suggestions(
    config: Mapping[str, Any],
    setup: TrainingSetup,
    gpu_memory_bytes: int,
    vllm: VllmSetup | None = None,
    headroom: float = 0.0,
    max_nodes: int = 16,
) -> list[Suggestion]:
    """Concrete changes that make a run fit, each checked by re-estimating.

    Single changes are tried first; when none fits alone, they are stacked in the listed order
    until the run fits, and that combination is returned as ``key="combined"``.

    Args:
        config: The model's parsed config.json.
        setup: The run as configured.
        gpu_memory_bytes: Memory of one GPU.
        vllm: The vLLM engine beside the trainer, if any.
        headroom: As for :func:`fits`.
        max_nodes: The most nodes a suggestion may ask for.

    Returns:
        The changes that fit, smallest trainer footprint first; empty when nothing tried fits.
    """
    def check(s: TrainingSetup, v: VllmSetup | None) -> tuple[Verdict, Estimate]:
        est = estimate_memory(config, s, v, gpu_memory_bytes)
        return fits(est, gpu_memory_bytes, headroom), est

    found: list[Suggestion] = []
    tried = _CHANGES
    for key, text, change in tried:
        changed = change(setup, vllm)
        if changed is None:
            continue
        verdict, est = check(*changed)
        if verdict.fits:
            found.append(Suggestion(key, text, changed[0], changed[1],
                                    est.trainer.per_gpu_bytes, verdict.worst_ratio))
    more = _more_nodes(setup, vllm, max_nodes, check)
    if more is not None:
        found.append(more)
    if found:
        return sorted(found, key=lambda x: x.per_gpu_bytes)
    s, v, done = setup, vllm, []
    for _key, text, change in tried:
        changed = change(s, v)
        if changed is None:
            continue
        s, v = changed
        done.append(text)
        verdict, est = check(s, v)
        if verdict.fits:
            return [Suggestion("combined", "; ".join(done), s, v, est.trainer.per_gpu_bytes,
                               verdict.worst_ratio)]
    more = _more_nodes(s, v, max_nodes, check)
    if more is not None:
        return [replace(more, key="combined", description="; ".join(done + [more.description]))]
    return []


_Check = Callable[[TrainingSetup, "VllmSetup | None"], "tuple[Verdict, Estimate]"]


def _more_nodes(setup: TrainingSetup, vllm: VllmSetup | None, max_nodes: int,
                check: _Check) -> Suggestion | None:
    """The fewest nodes (sharded with ZeRO-3 unless already sharded) on which the run fits."""
    sharded = setup if (setup.zero_stage == 3 or setup.fsdp) else replace(setup, zero_stage=3)
    nodes = setup.nodes * 2
    while nodes <= max_nodes:
        s = replace(sharded, nodes=nodes)
        verdict, est = check(s, vllm)
        if verdict.fits:
            how = "" if sharded is setup else " with DeepSpeed ZeRO-3"
            return Suggestion("nodes", f"use {nodes} nodes{how}", s, vllm,
                              est.trainer.per_gpu_bytes, verdict.worst_ratio)
        nodes *= 2
    return None


_Changed = tuple[TrainingSetup, "VllmSetup | None"] | None
_Change = Callable[[TrainingSetup, "VllmSetup | None"], _Changed]


def _checkpointing(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    return None if s.gradient_checkpointing else (replace(s, gradient_checkpointing=True), v)


def _bf16_weights(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if s.weight_dtype.lower() not in ("fp32", "float32", "float"):
        return None
    return replace(s, weight_dtype="bf16"), v


def _lora(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    return None if s.method != "full" else (replace(s, method="lora"), v)


def _qlora(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if s.method == "qlora" or s.zero_stage or s.fsdp:
        return None
    return replace(s, method="qlora", weight_dtype="bf16"), v


def _optimizer_8bit(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if "8bit" in s.optimizer or s.zero_stage is not None or s.fsdp:
        return None
    return replace(s, optimizer="adamw_8bit"), v


def _zero3(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if s.zero_stage == 3 or s.fsdp or s.world_size < 2:
        return None
    return replace(s, zero_stage=3), v


def _offload(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if s.offload_optimizer:
        return None
    return replace(s, zero_stage=3 if not s.fsdp else None, offload_optimizer=True,
                   offload_params=True), v


def _halve_micro_batch(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if s.micro_batch < 2:
        return None
    return replace(s, micro_batch=s.micro_batch // 2,
                   gradient_accumulation=s.gradient_accumulation * 2), v


def _halve_length(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if s.grpo:
        if s.max_completion_length < 256:
            return None
        return replace(s, max_completion_length=s.max_completion_length // 2), v
    return None if s.seq_len < 512 else (replace(s, seq_len=s.seq_len // 2), v)


def _vllm_max_model_len(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if v is None:
        return None
    need = s.max_prompt_length + s.max_completion_length if s.grpo else s.seq_len
    if v.max_model_len is not None and v.max_model_len <= need:
        return None
    return s, replace(v, max_model_len=need)


def _vllm_gpu_memory_utilization(s: TrainingSetup, v: VllmSetup | None) -> _Changed:
    if v is None or v.mode != "server" or v.gpu_memory_utilization >= 0.95:
        return None
    return s, replace(v, gpu_memory_utilization=0.95)


# The changes suggestions tries, in the order they are stacked when none fits alone.
_CHANGES: tuple[tuple[str, str, _Change], ...] = (
    ("gradient_checkpointing", "enable gradient checkpointing", _checkpointing),
    ("bf16_weights", "load the weights in bf16 (model_init_kwargs dtype: bfloat16)", _bf16_weights),
    ("vllm_max_model_len", "set vLLM's max_model_len to the run's sequence length",
     _vllm_max_model_len),
    ("vllm_gpu_memory_utilization", "raise vLLM's gpu_memory_utilization to 0.95",
     _vllm_gpu_memory_utilization),
    ("micro_batch", "halve the micro batch (doubling gradient accumulation)", _halve_micro_batch),
    ("max_length", "halve the maximum length", _halve_length),
    ("optimizer_8bit", "use an 8-bit AdamW (optim: adamw_8bit)", _optimizer_8bit),
    ("lora", "train LoRA adapters instead of all weights", _lora),
    ("zero3", "shard with DeepSpeed ZeRO-3 across the GPUs", _zero3),
    ("qlora", "train QLoRA (4-bit base)", _qlora),
    ("offload", "offload optimizer states and parameters to CPU (ZeRO-3)", _offload),
)
