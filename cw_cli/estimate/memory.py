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
from msgspec.structs import replace

from cw_cli.estimate import activations as act
from cw_cli.estimate.params import (
    ALL_LINEAR,
    Architecture,
    architecture,
    count_parameters,
    lora_trainable_parameters,
)
from cw_cli.estimate.shapes import ModelShape, model_shape, tied_embeddings
from cw_cli.estimate.vllm import GIB, VllmMemory, VllmSetup, kv_bytes_per_token, vllm_memory
from cw_cli.labels import TRAINER

__all__ = [
    "GIB", "Estimate", "TrainerMemory", "TrainingSetup", "VllmMemory", "VllmSetup",
    "estimate_memory", "kv_bytes_per_token",
]

DTYPE_BYTES: dict[str, int] = {
    "fp32": 4, "float32": 4, "float": 4,
    "bf16": 2, "bfloat16": 2,
    "fp16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}

# bitsandbytes storage per quantised weight element (QLoRA base): 4-bit packs two per byte,
# with one absmax per 64-element block (fp32, or 8-bit plus an fp32 per 256 blocks when
# double-quantised); LLM.int8 keeps one byte and an fp32 scale per output row (negligible).
QUANT_BYTES: dict[str, float] = {
    "nf4": 0.5 + 4 / 64,
    "fp4": 0.5 + 4 / 64,
    "nf4-double": 0.5 + 1 / 64 + 4 / (64 * 256),
    "fp4-double": 0.5 + 1 / 64 + 4 / (64 * 256),
    "int8": 1.0,
}

# Optimizer (Hugging Face ``optim`` names): state bytes per trainable element given the
# parameter's bytes p, and whether the step allocates a state-sized temporary (torch's
# foreach AdamW takes sqrt(v) of the whole parameter list at once; the fused kernel does not).
_OPTIMIZERS: dict[str, tuple[str, bool]] = {
    "adamw_torch_fused": ("2p", False),
    "adamw_torch": ("2p", True),
    "adamw": ("2p", True),
    "adam": ("2p", True),
    "adamw_8bit": ("2", False),
    "adamw_bnb_8bit": ("2", False),
    "paged_adamw_8bit": ("2", False),
    "adamw_torch_4bit": ("1", False),
    "paged_adamw_32bit": ("8", False),
    "adamw_bnb_32bit": ("8", False),
    "sgd": ("0", False),
    "adafactor": ("0", False),
    "lion_8bit": ("1", False),
    "paged_lion_8bit": ("1", False),
    "lion_32bit": ("4", False),
}

# CUDA context, cuBLAS/cuDNN workspaces and kernels: outside torch's allocator, so not in
# torch.cuda.max_memory_allocated, but they take GPU memory (0.5-0.8 GiB on recent GPUs).
CUDA_CONTEXT_BYTES = int(0.75 * GIB)
# NCCL's communicator buffers when there is more than one process.
NCCL_BYTES = int(0.5 * GIB)
# The caching allocator reserves more than it hands out (block rounding, fragmentation).
FRAGMENTATION = 0.05

# DeepSpeed ZeRO-3 converts gradients to fp32 per optimizer sub-group (sub_group_size).
_DS_SUB_GROUP = 1_000_000_000


class TrainingSetup(Struct, frozen=True):
    """How a run trains, as read from the framework's config and the launch options.

    Attributes:
        method: ``"full"``, ``"lora"`` or ``"qlora"``.
        lora_rank: LoRA rank r.
        lora_targets: PEFT ``target_modules``: leaf names or ``"all-linear"``.
        lora_dropout: PEFT ``lora_dropout``.
        train_embeddings: Embedding and LM head trained beside LoRA (``modules_to_save``,
            which keeps a trainable copy next to the frozen original).
        weight_dtype: Dtype the (non-quantised) weights are loaded in: ``"fp32"``,
            ``"bf16"``, ``"fp16"``. TRL loads in fp32 unless ``model_init_kwargs.dtype`` says
            otherwise; Axolotl loads in bf16 with ``bf16: true``.
        quantization: QLoRA base format: ``"nf4"``, ``"fp4"`` or ``"int8"`` (``"nf4"`` when
            ``method="qlora"`` and unset).
        double_quant: bitsandbytes ``bnb_4bit_use_double_quant``.
        adapter_dtype: Dtype of LoRA weights; None means PEFT's default, fp32 (it upcasts
            bf16/fp16 adapters), except under ZeRO-3 where TRL keeps the base dtype.
        mixed_precision: ``"bf16"``, ``"fp16"`` or ``"no"`` (the Trainer's ``bf16``/``fp16``).
        optimizer: Hugging Face ``optim`` name (``adamw_torch_fused`` is the Trainer default
            with torch >= 2.8); unknown names are counted as AdamW with a note.
        zero_stage: DeepSpeed ZeRO stage 0-3, or None when DeepSpeed is not used.
        fsdp: FSDP full shard (counted like ZeRO-3 with fp32 sharded parameters).
        offload_optimizer: Optimizer states (and DeepSpeed's fp32 master) live on the CPU.
        offload_params: ZeRO-3/FSDP parameters live on the CPU between uses.
        gpus_per_node: GPUs (processes) per node.
        nodes: Nodes.
        micro_batch: Sequences per GPU per forward (``per_device_train_batch_size``).
        gradient_accumulation: Micro-batches per optimizer step.
        seq_len: Tokens per sequence (``max_length``; padded batches are counted at the max).
        packing: Sequences are packed (or padding-free): no padding mask.
        padding_free: The micro batch is flattened into one row (TRL's padding-free collator,
            its default with ``packing``), so attention sees one sequence of all its tokens.
        gradient_checkpointing: Recompute each layer in backward (TRL's default is True).
        attention: ``"sdpa"``, ``"flash_attention_2"`` or ``"eager"``.
        preference_pairs: Each example is a chosen/rejected pair run together (DPO).
        reference_model: A frozen copy of the model is kept (DPO, or GRPO with ``beta > 0``,
            without PEFT).
        num_generations: GRPO completions per prompt (None when not GRPO).
        generation_batch_size: GRPO completions per generation round, all processes together
            (TRL's default: micro batch × processes × gradient accumulation).
        max_prompt_length: GRPO prompt length.
        max_completion_length: GRPO completion length (the logits are computed for these).
        fused_lm_head: The trainer scores tokens through TRL's fused LM head (TRL >= 1.16:
            SFT, DPO, GRPO, RLOO, KTO), or another kernel that never materialises the logits
            (Axolotl's cut-cross-entropy plugin, Liger's fused linear cross-entropy); otherwise
            the loss is transformers' (fp32 logits, log-softmax and their gradients).
        tensor_parallel: Tensor-parallel degree: each rank holds 1/tp of the attention heads,
            of the MLP's width and of the linear weights (and their gradients and states).
        context_parallel: Context-parallel degree: each rank holds 1/cp of every sequence's
            tokens (ring attention), so its activations and logits.
        shard_group: Ranks a ZeRO / FSDP shard spans when fewer than the data-parallel ranks
            (HSDP's ``dp_shard_size``, or the data x context ranks under tensor parallelism);
            None: every rank outside tensor parallelism.
        tiled_mlp: The MLP runs in tiles along the sequence and recomputes them in backward
            (Arctic's TiledMLP, Axolotl's ``tiled_mlp``): only one tile's intermediates live.
        tiled_mlp_shards: Tiles per sequence (None: ``ceil(seq / hidden)``, Axolotl's default).
        score_labels: The head is a classifier of this many labels (a reward model: 1, a
            process reward model: 2) instead of the vocabulary-sized LM head.
    """

    method: str = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] | str = ALL_LINEAR
    lora_dropout: float = 0.0
    train_embeddings: bool = False
    weight_dtype: str = "bf16"
    quantization: str | None = None
    double_quant: bool = True
    adapter_dtype: str | None = None
    mixed_precision: str = "bf16"
    optimizer: str = "adamw_torch_fused"
    zero_stage: int | None = None
    fsdp: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False
    gpus_per_node: int = 1
    nodes: int = 1
    micro_batch: int = 1
    gradient_accumulation: int = 1
    seq_len: int = 2048
    packing: bool = False
    padding_free: bool = False
    gradient_checkpointing: bool = False
    attention: str = "sdpa"
    preference_pairs: bool = False
    reference_model: bool = False
    num_generations: int | None = None
    generation_batch_size: int | None = None
    max_prompt_length: int = 512
    max_completion_length: int = 256
    fused_lm_head: bool = False
    tensor_parallel: int = 1
    context_parallel: int = 1
    shard_group: int | None = None
    tiled_mlp: bool = False
    tiled_mlp_shards: int | None = None
    score_labels: int | None = None

    @property
    def world_size(self) -> int:
        """Processes (GPUs) training together."""
        return self.gpus_per_node * self.nodes

    @property
    def data_shards(self) -> int:
        """Ranks ZeRO / FSDP shard parameters, gradients and states over (Accelerate's
        ``dp_shard_cp`` mesh: the data and context ranks, not the tensor-parallel ones)."""
        if self.shard_group:
            return self.shard_group
        return max(1, self.world_size // max(1, self.tensor_parallel))

    @property
    def grpo(self) -> bool:
        """Whether this is a GRPO run (generation, then training on the completions)."""
        return self.num_generations is not None


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


# --- parameter groups -------------------------------------------------------------------------


class _Params(Struct, frozen=True):
    """Parameter counts by what they are, for dtypes and sharding."""

    total: int
    linear: int  # decoder nn.Linear weights (what bitsandbytes quantises)
    matmul: int  # everything multiplied in a matmul under autocast: linears, routers, head
    experts: int  # fused routed experts (3-D tensors)
    embedding: int
    lm_head: int
    largest_module: int  # DeepSpeed's "largest layer": the biggest single module
    largest_layer: int  # the biggest decoder layer (FSDP's wrap unit)
    lora_experts: bool  # PEFT's all-linear adapts fused experts
    lora_experts_per_rank: int = 0  # their adapter parameters per unit of rank


def _param_groups(config: Mapping[str, Any], arch: Architecture | None, total: int,
                  shape: ModelShape, targets: set[str]) -> _Params:
    embed = shape.vocab * shape.hidden
    head = 0 if tied_embeddings(config) else embed
    if arch is None:  # unknown family: a Llama-like reading of the config
        per_layer = (2 * shape.hidden * shape.q_dim + 2 * shape.hidden * shape.kv_dim
                     + 3 * shape.hidden * shape.intermediate)
        linear = per_layer * shape.layers
        return _Params(total, linear, linear + embed, 0, embed, head,
                       max(embed, shape.hidden * shape.intermediate), per_layer, False)
    linear = sum(lin.in_features * lin.out_features for layer in arch.layers
                 for lin in layer.linears)
    experts = sum(layer.experts_total for layer in arch.layers)
    routers = sum(shape.experts * shape.hidden for i in range(len(arch.layers))
                  if i in shape.moe_layers)
    biggest_linear = max(
        (lin.parameters for layer in arch.layers for lin in layer.linears), default=0
    )
    biggest_experts = max((layer.experts_total for layer in arch.layers), default=0)
    lora_experts = ALL_LINEAR in targets and any(layer.all_linear_per_rank for layer in arch.layers)
    return _Params(
        total=total,
        linear=linear,
        matmul=linear + routers + embed,  # the head's matmul uses V·H whether tied or not
        experts=experts,
        embedding=embed,
        lm_head=head,
        largest_module=max(embed, biggest_linear, biggest_experts),
        largest_layer=max(layer.total for layer in arch.layers),
        lora_experts=lora_experts,
        lora_experts_per_rank=sum(layer.all_linear_per_rank for layer in arch.layers)
        if lora_experts else 0,
    )


def _dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError as err:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(DTYPE_BYTES)})") from err


def _optimizer_bytes(optimizer: str, param_bytes: int, notes: list[str]) -> tuple[float, bool]:
    """State bytes per trainable element and whether the step needs a state-sized temporary."""
    kind, temp = _OPTIMIZERS.get(optimizer.lower(), ("2p", False))
    if optimizer.lower() not in _OPTIMIZERS:
        notes.append(f"optimizer {optimizer!r} is counted as AdamW (two states per parameter)")
    per = 2 * param_bytes if kind == "2p" else float(kind)
    if optimizer.lower() in ("adafactor",):
        notes.append("adafactor's factored states are counted as 0 (rows + columns per matrix)")
    return per, temp


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
    arch = architecture(config)
    method = setup.method.lower()
    if method not in ("full", "lora", "qlora"):
        raise ValueError(f"unknown method {setup.method!r} (full, lora or qlora)")
    lora = method != "full"
    targets = ({setup.lora_targets} if isinstance(setup.lora_targets, str)
               else set(setup.lora_targets))
    groups = _param_groups(config, arch, counts.total_parameters, shape, targets if lora else set())
    if setup.score_labels:
        groups = _score_head(groups, shape, setup.score_labels)
    trainable = groups.total
    if lora:
        trainable = lora_trainable_parameters(config, setup.lora_rank, setup.lora_targets,
                                              setup.train_embeddings)
    trainer = _trainer(setup, shape, groups, trainable, lora, notes, vllm, gpu_memory_bytes)
    engine = None
    if vllm is not None:
        engine = vllm_memory(
            vllm, shape, counts.total_parameters, gpu_memory_bytes,
            generation_sequences=_generation_batch(setup) if setup.grpo else 0,
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


def _trainer(
    s: TrainingSetup,
    shape: ModelShape,
    p: _Params,
    trainable: int,
    lora: bool,
    notes: list[str],
    vllm: VllmSetup | None,
    gpu_memory_bytes: int | None,
) -> TrainerMemory:
    world = s.world_size
    ds = s.zero_stage is not None
    stage = s.zero_stage or 0
    mixed = s.mixed_precision.lower() in ("bf16", "fp16", "bfloat16", "float16")
    w = _dtype_bytes(s.weight_dtype)
    b = 2 if mixed else w  # what matmuls produce
    dp = s.data_shards
    shard_params = dp if (ds and stage >= 3) or s.fsdp else 1
    shard_grads = dp if (ds and stage >= 2) or s.fsdp else 1
    shard_states = dp if (ds and stage >= 1) or s.fsdp else 1
    # tensor parallelism: each rank keeps its slice of the linears (and their gradients and states)
    tp_share = _tensor_parallel_share(p, s.tensor_parallel)

    # storage of the trainable and of the frozen parameters
    if ds and mixed:  # DeepSpeed casts the module to the compute dtype, keeps fp32 masters
        w_frozen, w_train = b, b
    elif s.fsdp and mixed:  # Accelerate upcasts trainable parameters to fp32 under FSDP
        w_frozen, w_train = w, 4
    else:
        w_frozen, w_train = w, w
    if lora:
        adapter = s.adapter_dtype or (s.weight_dtype if ds and stage >= 3 else "fp32")
        w_train = 4 if s.fsdp and mixed else _dtype_bytes(adapter)
    frozen = p.total if lora else 0
    quant = s.quantization or ("nf4" if s.method.lower() == "qlora" else None)
    if quant:
        key = f"{quant}-double" if s.double_quant and quant in ("nf4", "fp4") else quant
        q_bytes = QUANT_BYTES[key]
        frozen_bytes = p.linear * q_bytes + (frozen - p.linear) * w_frozen
        notes.append(f"base linear weights in {quant} ({q_bytes:.3f} bytes per weight); "
                     "fused MoE experts, embeddings and norms are not quantised")
    else:
        frozen_bytes = frozen * w_frozen
    if lora and s.train_embeddings:
        frozen_bytes += (p.embedding + p.lm_head) * w_frozen  # modules_to_save keeps originals
    weights = (frozen_bytes + trainable * w_train) / shard_params
    cpu = 0.0
    if s.offload_params and shard_params > 1:
        cpu += weights
        weights = 0.0

    # gradients, optimizer states, master weights
    grad_bytes = w_train
    grads = trainable * grad_bytes / shard_grads
    buckets = trainable * grad_bytes if not ds and not s.fsdp and world > 1 else 0.0
    states_per, foreach_temp = _optimizer_bytes(s.optimizer, 4 if (ds and mixed) else w_train,
                                                notes)
    states = trainable * states_per / shard_states
    master = trainable * 4.0 / shard_states if ds and mixed else 0.0
    if ds and mixed:  # fp32 gradient partition for the optimizer step
        part = trainable / shard_states
        step_temp = 4.0 * (min(part, _DS_SUB_GROUP) if stage >= 3 else part)
    else:
        step_temp = trainable * w_train / shard_states if foreach_temp else 0.0
    if s.offload_optimizer:
        cpu += states + master + trainable * 4.0 / shard_states
        states = master = step_temp = 0.0
        if ds:
            grads = 0.0  # reduced gradients are copied to the CPU optimizer
    weights, grads, buckets, states, master, step_temp, cpu = (
        x * tp_share for x in (weights, grads, buckets, states, master, step_temp, cpu))
    gradients = grads + buckets
    persistent_grads = buckets + (grads if s.gradient_accumulation > 1 else 0.0)

    # ZeRO-3/FSDP: layers gathered for compute, and their gradients before reduce-scatter
    gathered = 0.0
    if ds and stage >= 3:
        gathered = 2.0 * b * p.largest_module
    elif s.fsdp:
        gathered = b * (p.embedding + p.lm_head + 2 * p.largest_layer)
    gathered *= tp_share

    # activations and logits
    setup_c = _compute_setup(s, shape, lora, targets_of(s), mixed, w, b, ds, p, w_train)
    seqs = s.micro_batch * (2 if s.preference_pairs else 1)
    seq = s.max_prompt_length + s.max_completion_length if s.grpo else s.seq_len
    cp = max(1, s.context_parallel)
    tokens = math.ceil(seqs * seq / cp)  # context parallelism: each rank holds 1/cp of the tokens
    setup_c = replace(setup_c, seq_len=seq)
    rank_shape = _rank_shape(shape, s, seq)  # one rank's heads and MLP width (TP, tiled MLP)
    head_shape = replace(shape, vocab=s.score_labels) if s.score_labels else shape
    layer = [act.layer_bytes_per_token(rank_shape, setup_c, i) for i in range(shape.layers)]
    head = act.head_bytes_per_token(head_shape, setup_c)
    bias = 0.0 if shape.eager_attention else _sdpa_mask_bias_bytes(s, seqs, seq, b) / cp  # per layer
    no_ckpt = tokens * (sum(layer) + head) + shape.layers * bias
    ckpt = tokens * (shape.layers * act.checkpointed_layer_input_bytes(shape, setup_c)
                     + max(layer) + head) + bias
    activations = ckpt if s.gradient_checkpointing else no_ckpt
    logit_tokens = math.ceil(seqs * (s.max_completion_length + 1 if s.grpo else seq) / cp)
    if s.score_labels:  # a classifier head: labels-wide logits, nothing vocabulary-sized
        logits = logit_tokens * act.logits_bytes_per_token(head_shape, setup_c)
    elif s.fused_lm_head:
        # a full fine-tune trains the head in the trainable dtype; modules_to_save copies the original's
        head_weight = w_train if not lora else (w_frozen if s.train_embeddings else None)
        logits = act.fused_head_bytes(shape, setup_c, logit_tokens, head_weight)
    else:
        logits = logit_tokens * act.logits_bytes_per_token(shape, setup_c)

    copies = _weight_copies(s, p, lora, mixed, w, b, ds, trainable, shape)
    reference = 0.0
    if s.reference_model:
        reference = p.total * (b if ds and mixed else w) / shard_params * tp_share

    # generation inside the trainer (GRPO without vLLM): HF generate's KV cache and logits
    generation = 0.0
    if s.grpo and vllm is None:
        per_rank = math.ceil(_generation_batch(s) / world)
        generation = per_rank * seq * kv_bytes_per_token(shape, b) + per_rank * shape.vocab * 4
        if shard_params > 1:
            generation += p.total * b  # ZeRO-3 gathers the whole model to generate

    # The loss's backward (logits buffers) and a layer's backward (its recomputed activations
    # with checkpointing, and the gradients flowing through it) do not coexist.
    recomputed = tokens * max(layer) + bias if s.gradient_checkpointing else 0.0
    layer_backward = tokens * act.backward_transient_bytes_per_token(rank_shape, setup_c) + recomputed
    transient = max(logits, layer_backward)
    at_loss = activations - recomputed
    base = weights + master + states + reference
    phases = {
        "forward_backward": (base + gathered + copies + persistent_grads + at_loss
                             + transient),
        # the first layer's backward: every gradient exists, its activations still do
        "backward_end": (base + gathered + copies + gradients + layer_backward
                         + (0.0 if s.gradient_checkpointing else tokens * layer[0] + bias)),
        "optimizer_step": base + gradients + step_temp,
        "generation": base + persistent_grads + generation if generation else 0.0,
    }
    peak_phase = max(phases, key=lambda k: phases[k])
    allocated = phases[peak_phase]
    overhead = CUDA_CONTEXT_BYTES + (NCCL_BYTES if world > 1 else 0) + FRAGMENTATION * allocated
    colocated = 0
    if vllm is not None and vllm.mode == "colocate" and gpu_memory_bytes:
        colocated = int(vllm.gpu_memory_utilization * gpu_memory_bytes)
    return TrainerMemory(
        role=TRAINER,
        world_size=world,
        weights_bytes=int(weights),
        gradients_bytes=int(gradients),
        optimizer_states_bytes=int(states),
        master_weights_bytes=int(master),
        gathered_weights_bytes=int(gathered),
        weight_copies_bytes=int(copies),
        activations_bytes=int(activations),
        activations_no_checkpointing_bytes=int(no_ckpt),
        activations_checkpointing_bytes=int(ckpt),
        logits_bytes=int(logits),
        optimizer_step_bytes=int(step_temp),
        reference_model_bytes=int(reference),
        generation_bytes=int(generation),
        overhead_bytes=int(overhead),
        allocated_bytes=int(allocated),
        per_gpu_bytes=int(allocated + overhead),
        peak_phase=peak_phase,
        cpu_offload_bytes=int(cpu),
        colocated_vllm_bytes=colocated,
        tokens_per_micro_batch=tokens,
    )


def _score_head(p: _Params, shape: ModelShape, labels: int) -> _Params:
    """A sequence / token classifier (reward and process reward models): the vocabulary-sized LM
    head is replaced by a ``hidden x labels`` score layer (AutoModelFor*Classification)."""
    score = shape.hidden * labels
    total = p.total - p.lm_head + score
    return replace(p, total=total, matmul=p.matmul - p.embedding + score, lm_head=score)


def _tensor_parallel_share(p: _Params, tp: int) -> float:
    """The share of the parameters one tensor-parallel rank holds.

    transformers' TP plans shard every decoder linear, the fused experts and the LM head
    (column- or row-wise), and transformers 5 adds the input embedding (row-wise over the
    vocabulary) to every plan; norms and routers stay whole on every rank. Measured on 2 gloo
    ranks: tests/training/test_tensor_parallel_shapes.py.
    """
    if tp <= 1 or p.total <= 0:
        return 1.0
    sharded = min(p.total, p.linear + p.experts + p.lm_head + p.embedding)
    return (p.total - sharded * (1 - 1 / tp)) / p.total


def _rank_shape(shape: ModelShape, s: TrainingSetup, seq: int) -> ModelShape:
    """The layer one rank computes: 1/tp of the heads and of the MLP's width, and under a
    tiled MLP only one tile's intermediates at a time (``ceil(seq / hidden)`` tiles by default)."""
    tp = max(1, s.tensor_parallel)
    tiles = 1
    if s.tiled_mlp:
        tiles = max(1, s.tiled_mlp_shards or math.ceil(seq / max(1, shape.hidden)))
    if tp == 1 and tiles == 1:
        return shape

    def part(width: int, by: int) -> int:
        return max(1, math.ceil(width / by)) if width else 0

    return replace(
        shape,
        heads=part(shape.heads, tp),
        kv_heads=part(shape.kv_heads, tp),
        intermediate=part(shape.intermediate, tp * tiles),
        expert_intermediate=part(shape.expert_intermediate, tp * tiles),
        shared_intermediate=part(shape.shared_intermediate, tp * tiles),
    )


def _sdpa_mask_bias_bytes(s: TrainingSetup, seqs: int, seq: int, b: int) -> float:
    """The attention bias one layer keeps for backward under SDPA with an explicit mask.

    Packed rows (a block-diagonal mask from their position ids) and padded batches of several
    sequences reach SDPA with a boolean mask; torch turns it into an additive bias in the
    compute dtype on every call and the memory-efficient kernel saves that bias for backward:
    ``rows × S²`` elements per layer. A padding-free batch is one row of ``seqs × seq`` tokens.
    Flash attention and a lone unpadded sequence (``is_causal``) take no mask.
    """
    if s.attention != "sdpa":
        return 0.0
    if s.padding_free:
        return float(seqs * seq) ** 2 * b
    return float(seqs * seq * seq * b) if s.packing or seqs > 1 else 0.0


def targets_of(s: TrainingSetup) -> frozenset[str]:
    """The LoRA targets of a setup as a set of names."""
    if isinstance(s.lora_targets, str):
        return frozenset({s.lora_targets})
    return frozenset(s.lora_targets)


def _compute_setup(s: TrainingSetup, shape: ModelShape, lora: bool, targets: frozenset[str],
                   mixed: bool, w: int, b: int, ds: bool, p: _Params,
                   w_train: int) -> act.ComputeSetup:
    # DeepSpeed casts the model and FSDP gathers it in the compute dtype: no autocast copies,
    # a residual stream in the compute dtype. Plain torch runs the Trainer's autocast.
    autocast = mixed and not ds and not s.fsdp
    residual = w if autocast else b
    return act.ComputeSetup(
        compute_bytes=b,
        weight_bytes=residual,
        autocast=autocast,
        full=not lora,
        train_head=lora and s.train_embeddings,
        lora_targets=targets if lora else frozenset(),
        lora_experts=lora and p.lora_experts,
        lora_rank=s.lora_rank if lora else 0,
        lora_dropout=s.lora_dropout if lora else 0.0,
        adapter_bytes=w_train,
        repeat_kv=s.attention == "sdpa" and not s.packing and s.micro_batch > 1,
        eager_attention=s.attention == "eager",
    )


def _weight_copies(s: TrainingSetup, p: _Params, lora: bool, mixed: bool, w: int, b: int,
                   ds: bool, trainable: int, shape: ModelShape) -> float:
    """Weight-sized tensors kept for backward beside the weights themselves."""
    copies = 0.0
    per_layer = 1.0 / max(shape.layers, 1)
    if mixed and not ds and not s.fsdp:
        # autocast casts each wider weight to the compute dtype and the matmul keeps the cast
        base = p.matmul - (p.linear if s.quantization or s.method == "qlora" else 0)
        wide = base * b if w > b else 0.0
        adapters = trainable * b if lora else 0.0
        if s.gradient_checkpointing and lora:
            # frozen casts are not cached: only the layer being recomputed holds them
            wide = (p.embedding + (base - p.embedding) * per_layer) * b if w > b else 0.0
        copies += wide + adapters
    if lora and p.lora_experts:
        # PEFT 0.21 merges W + BA for fused experts (its A and B cast to the experts' dtype)
        # and the grouped matmul keeps the merged weight
        merged = (p.experts + s.lora_rank * p.lora_experts_per_rank) * b
        copies += merged * per_layer if s.gradient_checkpointing else merged
    if shape.norm == "gemma" and not lora:
        # Gemma's RMSNorm multiplies by (1 + weight) in fp32 and keeps that vector
        per = shape.norms_per_layer * shape.hidden + (2 * shape.head_dim if shape.qk_norm else 0)
        copies += 4 * per * (1 if s.gradient_checkpointing else shape.layers)
    return copies


def _generation_batch(s: TrainingSetup) -> int:
    if s.generation_batch_size:
        return s.generation_batch_size
    return s.micro_batch * s.world_size * s.gradient_accumulation


