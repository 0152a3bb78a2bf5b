"""TRL's config as the memory estimate reads it: a :class:`~cw_cli.estimate.native_setup.RunSetup`.

What `trl <type> --config` does with each key (and its defaults where the config says nothing),
for the trainer and its vLLM engine; the DeepSpeed / Accelerate / FSDP settings it names are read
by :mod:`cw_cli.estimate.sharding`. Loaded only when a run's model config.json was found (a launch
whose model is not here never reads this). The mapping is documented in docs/estimate.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from cw_cli.estimate.memory import TrainingSetup
from cw_cli.estimate.native_setup import (
    RunSetup,
    attention_name,
    dtype_name,
    lora_targets,
    server_vllm,
    trains_embeddings,
)
from cw_cli.estimate.sharding import Sharding, accelerate_sharding, deepspeed_sharding, parallelism
from cw_cli.estimate.values import as_count, as_mapping, as_number, truthy
from cw_cli.estimate.vllm import VllmSetup
from cw_cli.frameworks.distributed import trainer_world
from cw_cli.frameworks.trl.services import wants_vllm_server

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec

# TRL's predefined `accelerate_config` profiles (trl/accelerate_configs/<name>.yaml).
_TRL_PROFILES = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp1": "fsdp", "fsdp2": "fsdp",
                 "multi_gpu": None, "single_gpu": None}  # fmt: skip
#: Training types whose trainer generates completions (prompt + completion lengths, vLLM).
_GENERATING = ("grpo", "rloo")


def read_setup(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
               model_config: Mapping[str, Any] | None) -> RunSetup:
    """A TRL run's trainer and vLLM setup.

    Args:
        training_type: The `trl` command (``sft``, ``grpo``, ...).
        native: The TRL config (defaults merged, old spellings translated).
        cluster: cw's fields: ``gpu`` per node, ``nodes``, ``services.server``.
        base_dir: The config's folder (DeepSpeed / Accelerate files it names).
        model_config: The model's config.json (``dtype: auto``, PEFT's default targets).
    """
    notes: list[str] = []
    unmodelled: list[str] = []
    setup, vllm = _trl(training_type, native, cluster, base_dir, model_config, notes, unmodelled)
    return RunSetup(setup, vllm, tuple(notes), tuple(unmodelled))


def _trl_sharding(native: Mapping[str, Any], base_dir: Path | None, notes: list[str]) -> Sharding:
    """TRL / HF Trainer: `deepspeed` (file or dict), `fsdp`, or the `accelerate_config` it launches with."""
    if native.get("deepspeed"):
        found = deepspeed_sharding(native["deepspeed"], base_dir, notes)
        if found is not None:
            return found
    fsdp = native.get("fsdp")
    if fsdp:
        words = fsdp if isinstance(fsdp, list) else str(fsdp).split()
        if any(str(w).lower() in ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2") for w in words):
            offload = any(str(w).lower() == "offload" for w in words)
            if not any(str(w).lower() == "full_shard" for w in words):
                notes.append(f"FSDP `{' '.join(map(str, words))}` is counted as a full shard")
            return Sharding(fsdp=True, offload_optimizer=offload, offload_params=offload,
                            activation_checkpointing=_fsdp_checkpointing(native))
    found = accelerate_sharding(native.get("accelerate_config"), base_dir, notes, _TRL_PROFILES) or Sharding()
    # `accelerate launch` options written in the TRL config itself (TRL passes them on)
    return replace(found, **parallelism(native),
                   activation_checkpointing=found.activation_checkpointing or _fsdp_checkpointing(native))


def _fsdp_checkpointing(native: Mapping[str, Any]) -> bool:
    """FSDP's own activation checkpointing, as a launcher option or in the Trainer's ``fsdp_config``."""
    fsdp_config = as_mapping(native.get("fsdp_config"))
    return truthy(native.get("fsdp_activation_checkpointing")) or truthy(fsdp_config.get("activation_checkpointing"))


def _trl(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
         model_config: Mapping[str, Any] | None, notes: list[str],
         unmodelled: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    gpus, nodes = trainer_world(cluster)
    adapter = _adapter_fields(native, model_config, notes)
    peft = adapter["method"] != "full"
    precision = _precision_fields(native, model_config, notes)
    sharding = _trl_sharding(native, base_dir, notes)
    setup = TrainingSetup(
        **adapter,
        **precision,
        optimizer=str(native.get("optim") or "adamw_torch_fused"),
        **sharding.setup_fields(),
        gpus_per_node=gpus,
        nodes=nodes,
        **_batch_fields(training_type, native, notes),
        # FSDP's own checkpointing counts as gradient checkpointing (TRL: do not combine the two)
        gradient_checkpointing=sharding.activation_checkpointing or truthy(native.get("gradient_checkpointing", True)),
        **_objective_fields(training_type, native, peft),
    )
    if training_type == "distillation":
        teacher = native.get("teacher_model_name_or_path")
        if teacher is not None and teacher != native.get("model_name_or_path"):
            unmodelled.append(f"the teacher model ({teacher}) beside the student")
        else:
            setup = replace(setup, reference_model=True)
    if training_type not in _GENERATING:
        return setup, None
    setup = _generation(training_type, native, setup, peft, notes)
    steps = as_count(native.get("steps_per_generation"), setup.gradient_accumulation)
    return setup, _trl_vllm(native, cluster, setup.micro_batch, steps, notes)


def _adapter_fields(native: Mapping[str, Any], model_config: Mapping[str, Any] | None,
                    notes: list[str]) -> dict[str, Any]:
    """LoRA / QLoRA or full training: the method, the adapter's shape and the base's quantisation."""
    peft = truthy(native.get("use_peft")) or isinstance(native.get("peft_config"), Mapping)
    q4, q8 = truthy(native.get("load_in_4bit")), truthy(native.get("load_in_8bit"))
    if (q4 or q8) and not peft:
        notes.append("load_in_4bit/8bit without use_peft: TRL cannot train a quantised base in full; counted "
                     "without quantisation")
    quantization = None
    if peft and q4:
        quantization = str(native.get("bnb_4bit_quant_type") or "nf4").lower()
    elif peft and q8:
        quantization = "int8"
    targets, default_targets = lora_targets(native.get("lora_target_modules"), model_config)
    if peft and default_targets:
        notes.append(f"no lora_target_modules: PEFT's default for this model, {', '.join(targets)}")
    return {
        "method": ("qlora" if q4 else "lora") if peft else "full",
        "lora_rank": as_count(native.get("lora_r"), 16),
        "lora_targets": targets,
        "lora_dropout": as_number(native.get("lora_dropout"), 0.05),
        "train_embeddings": peft and trains_embeddings(native.get("lora_modules_to_save")),
        "quantization": quantization,
        "double_quant": truthy(native.get("use_bnb_nested_quant")),
    }


def _precision_fields(native: Mapping[str, Any], model_config: Mapping[str, Any] | None,
                      notes: list[str]) -> dict[str, Any]:
    """The weights' dtype, mixed precision and attention, from the config and ``model_init_kwargs``."""
    init = as_mapping(native.get("model_init_kwargs"))
    dtype_value = next((v for v in (init.get("dtype"), init.get("torch_dtype"), native.get("dtype"),
                                    native.get("torch_dtype")) if v is not None), None)  # fmt: skip
    if dtype_value is None:
        notes.append("no dtype (model_init_kwargs.dtype): TRL loads the weights in fp32")
    fp16 = truthy(native.get("fp16"))
    bf16 = (not fp16) if native.get("bf16") is None else truthy(native.get("bf16"))
    return {
        "weight_dtype": dtype_name(dtype_value, model_config, "fp32"),
        "mixed_precision": "bf16" if bf16 else "fp16" if fp16 else "no",
        "attention": attention_name(init.get("attn_implementation") or native.get("attn_implementation")),
    }


def _batch_fields(training_type: str, native: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """Sequences per GPU and step, accumulation, sequence length and packing."""
    seq = 1024
    if training_type not in _GENERATING:
        if "max_length" in native and native["max_length"] is None:
            notes.append("max_length: null (no truncation) is counted as 1024 tokens")
        seq = as_count(native.get("max_length"), 1024)
    packing = truthy(native.get("packing"))
    return {
        "micro_batch": as_count(native.get("per_device_train_batch_size"), 8),
        "gradient_accumulation": as_count(native.get("gradient_accumulation_steps"), 1),
        "seq_len": seq,
        "packing": packing or truthy(native.get("padding_free")),
        # TRL packs best-fit-decreasing by default, and then flattens each micro batch into one row
        "padding_free": truthy(native.get("padding_free")) or (
            packing and str(native.get("packing_strategy") or "bfd") in ("bfd", "bfd_split")),
    }


def _objective_fields(training_type: str, native: Mapping[str, Any], peft: bool) -> dict[str, Any]:
    """What the training type's loss adds: paired forwards, a reference model, the LM head, a score head."""
    return {
        # DPO and reward modelling run chosen and rejected through one forward
        "preference_pairs": training_type in ("dpo", "reward"),
        # DPO and KTO keep a frozen reference (PEFT disables the adapter instead)
        "reference_model": training_type in ("dpo", "kto") and not peft,
        # TRL 1.16 scores every trainer's tokens through its fused LM head; SFT's label smoothing
        # alone still builds the full logits (transformers' loss).
        "fused_lm_head": not (training_type == "sft" and as_number(native.get("label_smoothing_factor"), 0.0) > 0),
        # `trl reward` trains AutoModelForSequenceClassification with one label
        "score_labels": 1 if training_type == "reward" else None,
    }


def _generation(training_type: str, native: Mapping[str, Any], setup: TrainingSetup, peft: bool,
                notes: list[str]) -> TrainingSetup:
    """GRPO's and RLOO's generation: completions per prompt, the generation batch, prompt and completion lengths."""
    rloo = training_type == "rloo"
    beta = as_number(native.get("beta"), 0.05 if rloo else 0.0)
    steps = as_count(native.get("steps_per_generation"), setup.gradient_accumulation)
    if "max_prompt_length" not in native:
        notes.append(f"{training_type.upper()} prompts are counted as 512 tokens (no max_prompt_length)")
    per_step = setup.micro_batch * setup.gpus_per_node * setup.nodes * steps
    return replace(
        setup,
        num_generations=as_count(native.get("num_generations"), 2 if rloo else 8),
        generation_batch_size=as_count(native.get("generation_batch_size"), per_step),
        max_prompt_length=as_count(native.get("max_prompt_length"), 512),
        max_completion_length=as_count(native.get("max_completion_length"), 512),
        reference_model=beta > 0 and not peft,
    )


def _trl_vllm(native: Mapping[str, Any], cluster: ClusterSpec, micro: int, steps: int,
              notes: list[str]) -> VllmSetup | None:
    """TRL GRPO's engine: cw's server (the rule the launch follows, :func:`wants_vllm_server`), or colocated."""
    use_vllm = native.get("use_vllm")
    dtype = native.get("dtype", native.get("torch_dtype"))
    if wants_vllm_server(native, cluster.services):
        settings = {"gpu_memory_utilization": native.get("vllm_gpu_memory_utilization"),
                    "max_model_len": native.get("vllm_max_model_length"), "dtype": dtype}  # fmt: skip
        return server_vllm(cluster, {k: v for k, v in settings.items() if v is not None})
    if use_vllm is not True:
        notes.append("GRPO without vLLM generates with the trainer's own model (slow; counted as generate's KV cache)")
        return None
    tensor = as_count(native.get("vllm_tensor_parallel_size"), 1)
    return VllmSetup(
        mode="colocate",
        gpu_memory_utilization=as_number(native.get("vllm_gpu_memory_utilization"), 0.3),
        tensor_parallel=tensor,
        max_model_len=as_count(native.get("vllm_max_model_length"), 0) or None,
        max_num_seqs=micro * tensor * steps,
        max_num_batched_tokens=4096,
        enable_sleep_mode=truthy(native.get("vllm_enable_sleep_mode")),
    )
