"""Per-GPU memory of a training run (and of its vLLM servers), from config.json and the setup.

Pure Python and cheap (no torch import): the launch path calls it before a run takes a queue
slot. The formulas, their sources and how close they came to measurements are in
docs/estimate.md. Byte counts are per GPU (per process) unless a name says otherwise.

The trainer's peak is the largest of four moments, not the sum of every term:

- forward/backward, at the loss: weights, master weights, optimizer states, gathered
  ZeRO-3/FSDP layers, weight copies, gradients that persist (accumulation, DDP buckets), the
  saved activations, and the larger of the logits/loss buffers and one layer's backward;
- end of backward: every gradient, plus the first layer's activations and backward buffers;
- optimizer step: weights, master weights, optimizer states, all gradients and the step's
  temporaries (activations are gone);
- generation (GRPO without vLLM): weights, states and the KV cache of ``model.generate``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import Struct, field

from cw_cli.estimate.activation_memory import ActivationMemory, activation_memory
from cw_cli.estimate.architectures import architecture
from cw_cli.estimate.model_states import Layout, ModelStates, layout, model_states
from cw_cli.estimate.param_groups import ParamGroups, param_groups, score_head
from cw_cli.estimate.params import ParamCounts, count_parameters, lora_trainable_parameters
from cw_cli.estimate.shapes import ModelShape, model_shape
from cw_cli.estimate.training_setup import TrainingSetup, targets_of
from cw_cli.estimate.vllm import GIB, VllmMemory, VllmSetup, kv_bytes_per_token, vllm_memory
from cw_cli.labels import TRAINER

__all__ = [
    "GIB", "Estimate", "TrainerMemory", "TrainingSetup", "VllmMemory", "VllmSetup",
    "estimate_memory", "kv_bytes_per_token",
]

# CUDA context, cuBLAS/cuDNN workspaces and kernels: outside torch's allocator, so not in
# torch.cuda.max_memory_allocated, but they take GPU memory (0.5-0.8 GiB on recent GPUs).
CUDA_CONTEXT_BYTES = int(0.75 * GIB)
# NCCL's communicator buffers when there is more than one process.
NCCL_BYTES = int(0.5 * GIB)
# The caching allocator reserves more than it hands out (block rounding, fragmentation).
FRAGMENTATION = 0.05


class TrainerMemory(Struct, frozen=True):
    """Per-GPU bytes of the trainer (``role="trainer"``).

    Attributes:
        role: Always ``"trainer"``.
        world_size: Processes training together.
        weights_bytes: Parameters held on the GPU (sharded under ZeRO-3/FSDP; quantised
            base for QLoRA).
        gradients_bytes: Gradients of the trainable parameters (sharded from ZeRO-2), plus
            DDP's bucket copy when there is more than one process.
        optimizer_states_bytes: Optimizer states (sharded from ZeRO-1; 0 when offloaded).
        master_weights_bytes: fp32 master copy DeepSpeed keeps under mixed precision.
        gathered_weights_bytes: ZeRO-3/FSDP layers all-gathered for compute, and their
            unreduced gradients.
        weight_copies_bytes: Copies of weights kept for backward: autocast's low-precision
            casts of wider weights, PEFT's merged expert weights.
        activations_bytes: Activations as configured (with or without checkpointing).
        activations_no_checkpointing_bytes: Activations without gradient checkpointing.
        activations_checkpointing_bytes: Activations with gradient checkpointing.
        logits_bytes: Logits and loss buffers at their peak (fp32 upcast and gradients).
        optimizer_step_bytes: Temporaries of the optimizer step.
        reference_model_bytes: Frozen reference model (DPO, GRPO with a KL term).
        generation_bytes: KV cache and logits of ``model.generate`` (GRPO without vLLM).
        overhead_bytes: CUDA context, NCCL buffers and allocator fragmentation.
        allocated_bytes: Peak of live tensors (comparable with
            ``torch.cuda.max_memory_allocated``).
        per_gpu_bytes: ``allocated_bytes`` + ``overhead_bytes``: what the GPU must hold.
        peak_phase: ``"forward_backward"`` (at the loss), ``"backward_end"`` (all gradients
            and the first layer's backward), ``"optimizer_step"`` or ``"generation"``.
        cpu_offload_bytes: Bytes per process moved to CPU memory by offloading.
        colocated_vllm_bytes: GPU memory a colocated vLLM engine takes beside the trainer
            (``gpu_memory_utilization`` × GPU memory; 0 without one or without a GPU size).
        tokens_per_micro_batch: Tokens one forward sees.
    """

    role: str
    world_size: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_states_bytes: int
    master_weights_bytes: int
    gathered_weights_bytes: int
    weight_copies_bytes: int
    activations_bytes: int
    activations_no_checkpointing_bytes: int
    activations_checkpointing_bytes: int
    logits_bytes: int
    optimizer_step_bytes: int
    reference_model_bytes: int
    generation_bytes: int
    overhead_bytes: int
    allocated_bytes: int
    per_gpu_bytes: int
    peak_phase: str
    cpu_offload_bytes: int
    colocated_vllm_bytes: int
    tokens_per_micro_batch: int


class Estimate(Struct, frozen=True):
    """The whole estimate: model size and one breakdown per role.

    Attributes:
        model_type: The config's ``model_type``.
        parameters: Total parameters.
        active_parameters: Parameters one token uses (MoE), else the total.
        trainable_parameters: Parameters the optimizer updates.
        counting: How the parameters were counted (``"formula"`` or ``"meta-device"``).
        gpu_memory_bytes: Memory of one GPU when known.
        trainer: The trainer's breakdown.
        vllm: The vLLM engine's breakdown, or None.
        notes: Caveats (approximations, assumptions).
    """

    model_type: str
    parameters: int
    active_parameters: int
    trainable_parameters: int
    counting: str
    gpu_memory_bytes: int | None
    trainer: TrainerMemory
    vllm: VllmMemory | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with stable keys, for ``-o json`` (the breakdowns as dicts, tuples as lists)."""
        return msgspec.to_builtins(self)


# --- the estimate -----------------------------------------------------------------------------


def estimate_memory(
    config: Mapping[str, Any],
    setup: TrainingSetup,
    vllm: VllmSetup | None = None,
    gpu_memory_bytes: int | None = None,
) -> Estimate:
    """Estimate per-GPU memory of the trainer (and of a vLLM engine) for a run.

    Args:
        config: The model's parsed config.json.
        setup: How the run trains.
        vllm: The vLLM engine beside the trainer, if any.
        gpu_memory_bytes: Memory of one GPU, when known: needed for vLLM's KV cache budget
            and for the share a colocated engine takes.

    Returns:
        The estimate; ``to_dict()`` gives its JSON form.

    Raises:
        ValueError: Unknown dtype or method, or a config without the fields needed.
        UnknownArchitectureError: See :func:`cw_cli.estimate.count_parameters`.
    """
    notes: list[str] = []
    counts = count_parameters(config)
    notes.extend(counts.notes)
    shape = model_shape(config)
    if not shape.known:
        notes.append(f"activations of model_type {shape.model_type!r} are estimated as for a "
                     "Llama-style decoder")
    groups, trainable, lora = _trained_parameters(config, setup, shape, counts)
    trainer = _trainer(setup, shape, groups, trainable, lora, notes, vllm, gpu_memory_bytes)
    engine = None
    if vllm is not None:
        engine = vllm_memory(
            vllm, shape, counts.total_parameters, gpu_memory_bytes,
            generation_sequences=setup.generation_batch if setup.grpo else 0,
            sequence_tokens=setup.max_prompt_length + setup.max_completion_length,
            world_size=setup.world_size,
        )
    return Estimate(
        model_type=counts.model_type,
        parameters=groups.total,  # a classifier head in place of the LM head changes the count
        active_parameters=counts.active_parameters - (counts.total_parameters - groups.total),
        trainable_parameters=trainable,
        counting=counts.method,
        gpu_memory_bytes=gpu_memory_bytes,
        trainer=trainer,
        vllm=engine,
        notes=tuple(notes),
    )


def _trained_parameters(config: Mapping[str, Any], setup: TrainingSetup, shape: ModelShape,
                        counts: ParamCounts) -> tuple[ParamGroups, int, bool]:
    """(The model's parameter groups, how many of them train, whether only LoRA adapters do).

    Raises:
        ValueError: An unknown method.
    """
    arch = architecture(config)
    method = setup.method.lower()
    if method not in ("full", "lora", "qlora"):
        raise ValueError(f"unknown method {setup.method!r} (full, lora or qlora)")
    lora = method != "full"
    groups = param_groups(config, arch, counts.total_parameters, shape,
                          targets_of(setup) if lora else frozenset())
    if setup.score_labels:
        groups = score_head(groups, shape, setup.score_labels)
    trainable = groups.total
    if lora:
        trainable = lora_trainable_parameters(config, setup.lora_rank, setup.lora_targets,
                                              setup.train_embeddings)
    return groups, trainable, lora


def _trainer(
    s: TrainingSetup,
    shape: ModelShape,
    p: ParamGroups,
    trainable: int,
    lora: bool,
    notes: list[str],
    vllm: VllmSetup | None,
    gpu_memory_bytes: int | None,
) -> TrainerMemory:
    """The trainer's per-GPU bytes at the largest of its phases."""
    lay = layout(s, p, lora)
    states = model_states(s, shape, p, trainable, lora, lay, notes)
    acts = activation_memory(s, shape, p, lora, lay)
    generation = _generation_bytes(s, shape, p, lay) if vllm is None else 0.0
    phases = _phases(s, states, acts, generation)
    peak_phase = max(phases, key=lambda k: phases[k])
    allocated = phases[peak_phase]
    overhead = CUDA_CONTEXT_BYTES + (NCCL_BYTES if s.world_size > 1 else 0) + FRAGMENTATION * allocated
    colocated = 0
    if vllm is not None and vllm.mode == "colocate" and gpu_memory_bytes:
        colocated = int(vllm.gpu_memory_utilization * gpu_memory_bytes)
    return TrainerMemory(
        role=TRAINER,
        world_size=s.world_size,
        # what is kept for the parameters
        weights_bytes=int(states.weights),
        gradients_bytes=int(states.gradients),
        optimizer_states_bytes=int(states.optimizer_states),
        master_weights_bytes=int(states.master_weights),
        gathered_weights_bytes=int(states.gathered),
        weight_copies_bytes=int(states.weight_copies),
        optimizer_step_bytes=int(states.optimizer_step),
        reference_model_bytes=int(states.reference_model),
        cpu_offload_bytes=int(states.cpu_offload),
        # what forward keeps for backward
        tokens_per_micro_batch=acts.tokens,
        activations_bytes=int(acts.activations),
        activations_no_checkpointing_bytes=int(acts.no_checkpointing),
        activations_checkpointing_bytes=int(acts.checkpointing),
        logits_bytes=int(acts.logits),
        # the peak and what the GPU holds beside it
        generation_bytes=int(generation),
        peak_phase=peak_phase,
        allocated_bytes=int(allocated),
        overhead_bytes=int(overhead),
        per_gpu_bytes=int(allocated + overhead),
        colocated_vllm_bytes=colocated,
    )


def _phases(s: TrainingSetup, m: ModelStates, a: ActivationMemory, generation: float) -> dict[str, float]:
    """Live bytes at each of the four moments the trainer can peak in (see the module's docstring)."""
    # The loss's backward (logits buffers) and a layer's backward (its recomputed activations
    # with checkpointing, and the gradients flowing through it) do not coexist.
    transient = max(a.logits, a.layer_backward)
    at_loss = a.activations - a.recomputed
    base = m.weights + m.master_weights + m.optimizer_states + m.reference_model
    return {
        "forward_backward": (base + m.gathered + m.weight_copies + m.persistent_gradients + at_loss
                             + transient),
        # the first layer's backward: every gradient exists, its activations still do
        "backward_end": (base + m.gathered + m.weight_copies + m.gradients + a.layer_backward
                         + (0.0 if s.gradient_checkpointing else a.first_layer)),
        "optimizer_step": base + m.gradients + m.optimizer_step,
        "generation": base + m.persistent_gradients + generation if generation else 0.0,
    }


def _generation_bytes(s: TrainingSetup, shape: ModelShape, p: ParamGroups, lay: Layout) -> float:
    """HF generate's KV cache and logits inside the trainer (GRPO without vLLM; 0 otherwise)."""
    if not s.grpo:
        return 0.0
    seq = s.max_prompt_length + s.max_completion_length
    per_rank = math.ceil(s.generation_batch / s.world_size)
    generation = per_rank * seq * kv_bytes_per_token(shape, lay.compute) + per_rank * shape.vocab * 4
    if lay.shard_params > 1:
        generation += p.total * lay.compute  # ZeRO-3 gathers the whole model to generate
    return generation
