"""The model states of a trainer, per GPU: weights, gradients, optimizer states, master weights.

How a setup stores each kind of parameter (dtype, quantisation), which of them ZeRO / FSDP
shard and over how many ranks, what the optimizer keeps and allocates for its step, what is
offloaded to the CPU, and the weight-sized copies kept for backward. Activations are in
:mod:`cw_cli.estimate.activation_memory`; the phases they peak in, in
:mod:`cw_cli.estimate.memory`.
"""

from __future__ import annotations

from msgspec import Struct

from cw_cli.estimate.param_groups import ParamGroups, tensor_parallel_share
from cw_cli.estimate.shapes import ModelShape
from cw_cli.estimate.training_setup import TrainingSetup

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

# DeepSpeed ZeRO-3 converts gradients to fp32 per optimizer sub-group (sub_group_size).
_DS_SUB_GROUP = 1_000_000_000


class Layout(Struct, frozen=True):
    """How a setup stores and shards its parameters.

    Attributes:
        deepspeed: DeepSpeed is used (``zero_stage`` is set).
        stage: The ZeRO stage (0 without DeepSpeed).
        mixed: bf16 / fp16 mixed precision.
        weight: Bytes of a weight as loaded (``weight_dtype``).
        compute: Bytes of what matmuls produce (the compute dtype).
        frozen: Bytes of a frozen parameter as stored.
        trainable: Bytes of a trainable parameter (and of its gradient) as stored.
        shard_params: Ranks the parameters are sharded over (ZeRO-3, FSDP).
        shard_grads: Ranks the gradients are sharded over (from ZeRO-2, FSDP).
        shard_states: Ranks the optimizer states are sharded over (from ZeRO-1, FSDP).
        tp_share: The share of the parameters one tensor-parallel rank holds.
    """

    deepspeed: bool
    stage: int
    mixed: bool
    weight: int
    compute: int
    frozen: int
    trainable: int
    shard_params: int
    shard_grads: int
    shard_states: int
    tp_share: float


class ModelStates(Struct, frozen=True):
    """Per-GPU bytes of the parameters and of what is kept for them (floats, before rounding).

    Attributes:
        weights: Parameters held on the GPU.
        gradients: Every gradient, plus DDP's bucket copy.
        persistent_gradients: Gradients that live through forward (DDP buckets, accumulation).
        optimizer_states: Optimizer states.
        master_weights: DeepSpeed's fp32 master copy.
        optimizer_step: Temporaries of the optimizer step.
        gathered: ZeRO-3/FSDP layers gathered for compute, and their unreduced gradients.
        weight_copies: Weight-sized tensors kept for backward beside the weights.
        reference_model: A frozen reference model.
        cpu_offload: Bytes moved to CPU memory by offloading.
    """

    weights: float
    gradients: float
    persistent_gradients: float
    optimizer_states: float
    master_weights: float
    optimizer_step: float
    gathered: float
    weight_copies: float
    reference_model: float
    cpu_offload: float


def dtype_bytes(name: str) -> int:
    """Bytes of one element of a dtype name (``bf16``, ``float32``...).

    Raises:
        ValueError: An unknown dtype.
    """
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError as err:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(DTYPE_BYTES)})") from err


def layout(s: TrainingSetup, p: ParamGroups, lora: bool) -> Layout:
    """The dtypes and shard counts of a setup (``lora``: only adapters are trained)."""
    ds = s.zero_stage is not None
    stage = s.zero_stage or 0
    mixed = s.mixed_precision.lower() in ("bf16", "fp16", "bfloat16", "float16")
    w = dtype_bytes(s.weight_dtype)
    b = 2 if mixed else w  # what matmuls produce
    dp = s.data_shards
    # storage of the trainable and of the frozen parameters
    if ds and mixed:  # DeepSpeed casts the module to the compute dtype, keeps fp32 masters
        w_frozen, w_train = b, b
    elif s.fsdp and mixed:  # Accelerate upcasts trainable parameters to fp32 under FSDP
        w_frozen, w_train = w, 4
    else:
        w_frozen, w_train = w, w
    if lora:
        adapter = s.adapter_dtype or (s.weight_dtype if ds and stage >= 3 else "fp32")
        w_train = 4 if s.fsdp and mixed else dtype_bytes(adapter)
    return Layout(
        deepspeed=ds, stage=stage, mixed=mixed, weight=w, compute=b, frozen=w_frozen, trainable=w_train,
        shard_params=dp if (ds and stage >= 3) or s.fsdp else 1,
        shard_grads=dp if (ds and stage >= 2) or s.fsdp else 1,
        shard_states=dp if (ds and stage >= 1) or s.fsdp else 1,
        # tensor parallelism: each rank keeps its slice of the linears (and their gradients and states)
        tp_share=tensor_parallel_share(p, s.tensor_parallel),
    )


def model_states(s: TrainingSetup, shape: ModelShape, p: ParamGroups, trainable: int, lora: bool,
                 lay: Layout, notes: list[str]) -> ModelStates:
    """Weights, gradients, optimizer states and weight copies of one rank (notes: caveats)."""
    weights = _stored_weights(s, p, trainable, lora, lay, notes) / lay.shard_params
    cpu = 0.0
    if s.offload_params and lay.shard_params > 1:
        cpu += weights
        weights = 0.0
    grads, buckets = _gradients(s, trainable, lay)
    states, master, step_temp = _optimizer(s, trainable, lay, notes)
    if s.offload_optimizer:
        cpu += states + master + trainable * 4.0 / lay.shard_states
        states = master = step_temp = 0.0
        if lay.deepspeed:
            grads = 0.0  # reduced gradients are copied to the CPU optimizer
    weights, grads, buckets, states, master, step_temp, cpu = (
        x * lay.tp_share for x in (weights, grads, buckets, states, master, step_temp, cpu))
    reference = 0.0
    if s.reference_model:
        reference = p.total * (lay.compute if lay.deepspeed and lay.mixed else lay.weight) \
            / lay.shard_params * lay.tp_share
    return ModelStates(
        weights=weights,
        gradients=grads + buckets,
        persistent_gradients=buckets + (grads if s.gradient_accumulation > 1 else 0.0),
        optimizer_states=states,
        master_weights=master,
        optimizer_step=step_temp,
        gathered=_gathered(s, p, lay),
        weight_copies=_weight_copies(s, p, lora, lay, trainable, shape),
        reference_model=reference,
        cpu_offload=cpu,
    )


def _stored_weights(s: TrainingSetup, p: ParamGroups, trainable: int, lora: bool, lay: Layout,
                    notes: list[str]) -> float:
    """Bytes of all the weights before sharding: the frozen base (quantised for QLoRA) and the
    trainable parameters."""
    frozen = p.total if lora else 0
    quant = s.quantization or ("nf4" if s.method.lower() == "qlora" else None)
    if quant:
        key = f"{quant}-double" if s.double_quant and quant in ("nf4", "fp4") else quant
        q_bytes = QUANT_BYTES[key]
        frozen_bytes = p.linear * q_bytes + (frozen - p.linear) * lay.frozen
        notes.append(f"base linear weights in {quant} ({q_bytes:.3f} bytes per weight); "
                     "fused MoE experts, embeddings and norms are not quantised")
    else:
        frozen_bytes = frozen * lay.frozen
    if lora and s.train_embeddings:
        frozen_bytes += (p.embedding + p.lm_head) * lay.frozen  # modules_to_save keeps originals
    return frozen_bytes + trainable * lay.trainable


def _gradients(s: TrainingSetup, trainable: int, lay: Layout) -> tuple[float, float]:
    """(The gradients of the trainable parameters, DDP's bucket copy of them)."""
    grads = trainable * lay.trainable / lay.shard_grads
    ddp = not lay.deepspeed and not s.fsdp and s.world_size > 1
    buckets = trainable * lay.trainable if ddp else 0.0
    return grads, buckets


def _optimizer(s: TrainingSetup, trainable: int, lay: Layout, notes: list[str]) -> tuple[float, float, float]:
    """(Optimizer states, DeepSpeed's fp32 master weights, the step's temporaries)."""
    fp32_master = lay.deepspeed and lay.mixed
    states_per, foreach_temp = _optimizer_bytes(s.optimizer, 4 if fp32_master else lay.trainable, notes)
    states = trainable * states_per / lay.shard_states
    master = trainable * 4.0 / lay.shard_states if fp32_master else 0.0
    if fp32_master:  # fp32 gradient partition for the optimizer step
        part = trainable / lay.shard_states
        step_temp = 4.0 * (min(part, _DS_SUB_GROUP) if lay.stage >= 3 else part)
    else:
        step_temp = trainable * lay.trainable / lay.shard_states if foreach_temp else 0.0
    return states, master, step_temp


def _optimizer_bytes(optimizer: str, param_bytes: int, notes: list[str]) -> tuple[float, bool]:
    """State bytes per trainable element and whether the step needs a state-sized temporary."""
    kind, temp = _OPTIMIZERS.get(optimizer.lower(), ("2p", False))
    if optimizer.lower() not in _OPTIMIZERS:
        notes.append(f"optimizer {optimizer!r} is counted as AdamW (two states per parameter)")
    per = 2 * param_bytes if kind == "2p" else float(kind)
    if optimizer.lower() in ("adafactor",):
        notes.append("adafactor's factored states are counted as 0 (rows + columns per matrix)")
    return per, temp


def _gathered(s: TrainingSetup, p: ParamGroups, lay: Layout) -> float:
    """ZeRO-3/FSDP: layers gathered for compute, and their gradients before reduce-scatter."""
    gathered = 0.0
    if lay.deepspeed and lay.stage >= 3:
        gathered = 2.0 * lay.compute * p.largest_module
    elif s.fsdp:
        gathered = lay.compute * (p.embedding + p.lm_head + 2 * p.largest_layer)
    return gathered * lay.tp_share


def _weight_copies(s: TrainingSetup, p: ParamGroups, lora: bool, lay: Layout, trainable: int,
                   shape: ModelShape) -> float:
    """Weight-sized tensors kept for backward beside the weights themselves."""
    b = lay.compute
    copies = 0.0
    per_layer = 1.0 / max(shape.layers, 1)
    if lay.mixed and not lay.deepspeed and not s.fsdp:
        # autocast casts each wider weight to the compute dtype and the matmul keeps the cast
        base = p.matmul - (p.linear if s.quantization or s.method == "qlora" else 0)
        wide = base * b if lay.weight > b else 0.0
        adapters = trainable * b if lora else 0.0
        if s.gradient_checkpointing and lora:
            # frozen casts are not cached: only the layer being recomputed holds them
            wide = (p.embedding + (base - p.embedding) * per_layer) * b if lay.weight > b else 0.0
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
