"""How a training run is set up, as the memory model reads it (:class:`TrainingSetup`).

The frameworks' setup readers (``cw_cli.frameworks.*.setup``) fill it from a native config and
the launch options; :mod:`cw_cli.estimate.memory` estimates its per-GPU memory.
"""

from __future__ import annotations

from msgspec import Struct

from cw_cli.estimate.params import ALL_LINEAR


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

    @property
    def generation_batch(self) -> int:
        """GRPO completions per generation round, all processes together (TRL's default:
        micro batch x processes x gradient accumulation)."""
        if self.generation_batch_size:
            return self.generation_batch_size
        return self.micro_batch * self.world_size * self.gradient_accumulation


def targets_of(s: TrainingSetup) -> frozenset[str]:
    """The LoRA targets of a setup as a set of names."""
    if isinstance(s.lora_targets, str):
        return frozenset({s.lora_targets})
    return frozenset(s.lora_targets)
