"""The trainer's activations, logits and layer backward, per GPU, for a whole micro batch.

:mod:`cw_cli.estimate.activations` gives bytes per token of one layer and of the head; this
module scales them to one rank's tokens (micro batch, preference pairs, GRPO's prompt and
completion, context parallelism), one rank's layer (tensor parallelism, a tiled MLP) and the
attention bias SDPA keeps, with and without gradient checkpointing.
"""

from __future__ import annotations

import math

from msgspec import Struct
from msgspec.structs import replace

from cw_cli.estimate import activations as act
from cw_cli.estimate.model_states import Layout
from cw_cli.estimate.param_groups import ParamGroups
from cw_cli.estimate.shapes import ModelShape
from cw_cli.estimate.training_setup import TrainingSetup, targets_of


class ActivationMemory(Struct, frozen=True):
    """Per-GPU bytes of what forward keeps for backward (floats, before rounding).

    Attributes:
        tokens: Tokens one forward sees on this rank.
        no_checkpointing: Activations without gradient checkpointing.
        checkpointing: Activations with gradient checkpointing.
        activations: Activations as configured.
        logits: Logits and loss buffers at their peak (fp32 upcast and gradients).
        recomputed: The layer recomputed in backward under checkpointing (0 without).
        layer_backward: One layer's backward: its transients and recomputed activations.
        first_layer: The first layer's activations (and its attention bias).
    """

    tokens: int
    no_checkpointing: float
    checkpointing: float
    activations: float
    logits: float
    recomputed: float
    layer_backward: float
    first_layer: float


def activation_memory(s: TrainingSetup, shape: ModelShape, p: ParamGroups, lora: bool,
                      lay: Layout) -> ActivationMemory:
    """Activations, logits and a layer's backward of one rank's micro batch."""
    seqs = s.micro_batch * (2 if s.preference_pairs else 1)
    seq = s.max_prompt_length + s.max_completion_length if s.grpo else s.seq_len
    cp = max(1, s.context_parallel)
    tokens = math.ceil(seqs * seq / cp)  # context parallelism: each rank holds 1/cp of the tokens
    setup_c = replace(_compute_setup(s, lora, p, lay), seq_len=seq)
    rank_shape = _rank_shape(shape, s, seq)  # one rank's heads and MLP width (TP, tiled MLP)
    head_shape = replace(shape, vocab=s.score_labels) if s.score_labels else shape
    layer = [act.layer_bytes_per_token(rank_shape, setup_c, i) for i in range(shape.layers)]
    head = act.head_bytes_per_token(head_shape, setup_c)
    bias = 0.0 if shape.eager_attention else _sdpa_mask_bias_bytes(s, seqs, seq, lay.compute) / cp  # per layer
    no_ckpt = tokens * (sum(layer) + head) + shape.layers * bias
    ckpt = tokens * (shape.layers * act.checkpointed_layer_input_bytes(shape, setup_c)
                     + max(layer) + head) + bias
    logit_tokens = math.ceil(seqs * (s.max_completion_length + 1 if s.grpo else seq) / cp)
    recomputed = tokens * max(layer) + bias if s.gradient_checkpointing else 0.0
    return ActivationMemory(
        tokens=tokens,
        no_checkpointing=no_ckpt,
        checkpointing=ckpt,
        activations=ckpt if s.gradient_checkpointing else no_ckpt,
        logits=_logits(s, shape, head_shape, setup_c, lora, lay, logit_tokens),
        recomputed=recomputed,
        layer_backward=tokens * act.backward_transient_bytes_per_token(rank_shape, setup_c) + recomputed,
        first_layer=tokens * layer[0] + bias,
    )


def _logits(s: TrainingSetup, shape: ModelShape, head_shape: ModelShape, setup_c: act.ComputeSetup,
            lora: bool, lay: Layout, logit_tokens: int) -> float:
    """The logits and loss buffers of ``logit_tokens`` tokens at their peak."""
    if s.score_labels:  # a classifier head: labels-wide logits, nothing vocabulary-sized
        return logit_tokens * act.logits_bytes_per_token(head_shape, setup_c)
    if s.fused_lm_head:
        # a full fine-tune trains the head in the trainable dtype; modules_to_save copies the original's
        head_weight = lay.trainable if not lora else (lay.frozen if s.train_embeddings else None)
        return act.fused_head_bytes(shape, setup_c, logit_tokens, head_weight)
    return logit_tokens * act.logits_bytes_per_token(shape, setup_c)


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


def _compute_setup(s: TrainingSetup, lora: bool, p: ParamGroups, lay: Layout) -> act.ComputeSetup:
    """The dtypes and adapters a layer computes with."""
    # DeepSpeed casts the model and FSDP gathers it in the compute dtype: no autocast copies,
    # a residual stream in the compute dtype. Plain torch runs the Trainer's autocast.
    autocast = lay.mixed and not lay.deepspeed and not s.fsdp
    residual = lay.weight if autocast else lay.compute
    return act.ComputeSetup(
        compute_bytes=lay.compute,
        weight_bytes=residual,
        autocast=autocast,
        full=not lora,
        train_head=lora and s.train_embeddings,
        lora_targets=targets_of(s) if lora else frozenset(),
        lora_experts=lora and p.lora_experts,
        lora_rank=s.lora_rank if lora else 0,
        lora_dropout=s.lora_dropout if lora else 0.0,
        adapter_bytes=lay.trainable,
        repeat_kv=s.attention == "sdpa" and not s.packing and s.micro_batch > 1,
        eager_attention=s.attention == "eager",
    )
