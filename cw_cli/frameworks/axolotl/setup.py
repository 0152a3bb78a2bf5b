"""Axolotl's config as the memory estimate reads it: a :class:`~cw_cli.estimate.native_setup.RunSetup`.

What `axolotl train` does with each key (and Axolotl's defaults where the config says nothing),
for the trainer and GRPO's vLLM engine; DeepSpeed / FSDP settings are read by
:mod:`cw_cli.estimate.sharding`, with Axolotl's bundled DeepSpeed files known by name. Loaded
only when a run's model config.json was found. The mapping is documented in docs/estimate.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from cw_cli.estimate.memory import TrainingSetup
from cw_cli.estimate.native_setup import (
    ALL_LINEAR,
    RunSetup,
    attention_name,
    lora_targets,
    server_vllm,
    trains_embeddings,
)
from cw_cli.estimate.sharding import Sharding, deepspeed_sharding, fsdp_sharding
from cw_cli.estimate.values import as_count, as_mapping, as_number, truthy
from cw_cli.estimate.vllm import VllmSetup
from cw_cli.frameworks.axolotl.pins import axolotl_bool
from cw_cli.frameworks.axolotl.services import wants_vllm_server
from cw_cli.frameworks.distributed import trainer_world

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec


def read_setup(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
               model_config: Mapping[str, Any] | None) -> RunSetup:
    """An Axolotl run's trainer and vLLM setup.

    Args:
        training_type: ``sft``, ``dpo`` (any ``rl:`` preference method) or ``grpo``.
        native: The Axolotl config (defaults merged).
        cluster: cw's fields: ``gpu`` per node, ``nodes``, ``services.server``.
        base_dir: The config's folder (DeepSpeed files it names).
        model_config: The model's config.json (PEFT's default targets).
    """
    notes: list[str] = []
    unmodelled: list[str] = []
    setup, vllm = _axolotl(training_type, native, cluster, base_dir, model_config, notes, unmodelled)
    return RunSetup(setup, vllm, tuple(notes), tuple(unmodelled))


#: Axolotl's own DeepSpeed files (its image's deepspeed_configs/), for configs that name them.
AXOLOTL_DEEPSPEED = {
    "zero1.json": Sharding(zero_stage=1),
    "zero1_torch_compile.json": Sharding(zero_stage=1),
    "zero2.json": Sharding(zero_stage=2, offload_optimizer=True),
    "zero2_torch_compile.json": Sharding(zero_stage=2),
    "zero3.json": Sharding(zero_stage=3),
    "zero3_bf16.json": Sharding(zero_stage=3),
    "zero3_bf16_cpuoffload_all.json": Sharding(zero_stage=3, offload_optimizer=True, offload_params=True),
    "zero3_bf16_cpuoffload_params.json": Sharding(zero_stage=3, offload_params=True),
    "zero3_cpuoffload.json": Sharding(zero_stage=3, offload_optimizer=True, offload_params=True),
}
_AXOLOTL_PAIRS = ("dpo", "ipo", "orpo", "simpo")  # chosen and rejected in one forward
_AXOLOTL_REFERENCE = ("dpo", "ipo", "kto")  # keep a frozen reference model (without an adapter)


def _axolotl(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
             model_config: Mapping[str, Any] | None, notes: list[str],
             unmodelled: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    gpus, nodes = trainer_world(cluster)
    adapter = _adapter_fields(native, model_config, notes)
    precision = _precision_fields(native, notes)
    sharding = _axolotl_sharding(native, base_dir, notes)
    checkpointing = _checkpointing(native, sharding, notes)
    sharding = replace(sharding, **_axolotl_parallelism(native, gpus * nodes))
    attention = native.get("attn_implementation") or ("flash_attention_2" if truthy(native.get("flash_attention"))
                                                      else None)  # fmt: skip
    setup = TrainingSetup(
        **adapter,
        **precision,
        optimizer=str(native.get("optimizer") or "adamw_torch_fused"),
        **sharding.setup_fields(),
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=as_count(native.get("micro_batch_size"), 1),
        gradient_accumulation=as_count(native.get("gradient_accumulation_steps"), 1),
        seq_len=as_count(native.get("sequence_len"), 2048),
        packing=truthy(native.get("sample_packing")),
        gradient_checkpointing=checkpointing,
        attention=attention_name(attention),
        **_objective_fields(native, adapter["method"], unmodelled),
    )
    if training_type != "grpo":
        return setup, None
    return _grpo(native, cluster, setup, notes)


def _adapter_fields(native: Mapping[str, Any], model_config: Mapping[str, Any] | None,
                    notes: list[str]) -> dict[str, Any]:
    """LoRA / QLoRA (``adapter``) or full training: the method, the adapter's shape and the base's quantisation."""
    adapter = str(native.get("adapter") or "").lower()
    q4, q8 = truthy(native.get("load_in_4bit")), truthy(native.get("load_in_8bit"))
    method = "qlora" if adapter == "qlora" or (adapter == "lora" and q4) else "lora" if adapter == "lora" else "full"
    if truthy(native.get("lora_target_linear")):
        targets: tuple[str, ...] | str = ALL_LINEAR
    else:
        targets, default = lora_targets(native.get("lora_target_modules"), model_config)
        if default and method != "full":
            notes.append(f"no lora_target_modules or lora_target_linear: counted as {', '.join(targets)}")
    return {
        "method": method,
        "lora_rank": as_count(native.get("lora_r"), 8),
        "lora_targets": targets,
        "lora_dropout": as_number(native.get("lora_dropout"), 0.0),
        "train_embeddings": method != "full" and trains_embeddings(native.get("lora_modules_to_save")),
        "quantization": "nf4" if method == "qlora" else "int8" if adapter == "lora" and q8 else None,
        "double_quant": True,
    }


def _precision_fields(native: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """The weights' dtype and mixed precision (``bf16``, ``fp16`` and their long spellings)."""
    bf16 = native.get("bf16")
    bf16_on = bf16 == "auto" or truthy(bf16) or truthy(native.get("bfloat16"))
    fp16_on = not bf16_on and (truthy(native.get("fp16")) or truthy(native.get("float16")))
    if bf16 == "auto":
        notes.append("bf16: auto is counted as bf16 (the GPUs support it)")
    return {
        "weight_dtype": "bf16" if bf16_on else "fp16" if fp16_on else "fp32",
        "mixed_precision": "bf16" if bf16_on else "fp16" if fp16_on else "no",
    }


def _axolotl_sharding(native: Mapping[str, Any], base_dir: Path | None, notes: list[str]) -> Sharding:
    """DeepSpeed (a file, Axolotl's own by name) or FSDP (``fsdp_config``, ``fsdp: [... offload]``)."""
    if native.get("deepspeed"):
        return deepspeed_sharding(native["deepspeed"], base_dir, notes, AXOLOTL_DEEPSPEED) or Sharding()
    if not (native.get("fsdp") or native.get("fsdp_config")):
        return Sharding()
    found = fsdp_sharding(as_mapping(native.get("fsdp_config")), notes, source="fsdp_config")
    fsdp = native.get("fsdp")
    words: list[Any] = fsdp if isinstance(fsdp, list) else []
    sharding = replace(found or Sharding(fsdp=True), fsdp=True)
    if any(str(w).lower() == "offload" for w in words):
        sharding = replace(sharding, offload_optimizer=True, offload_params=True)
    return sharding


def _checkpointing(native: Mapping[str, Any], sharding: Sharding, notes: list[str]) -> bool:
    """Gradient checkpointing: on, ``offload`` (counted as on the GPU), or FSDP's own per layer."""
    checkpointing = native.get("gradient_checkpointing", False)
    if checkpointing == "offload":
        notes.append("gradient_checkpointing: offload moves the checkpoints to CPU; counted as on the GPU")
    # fsdp_config.activation_checkpointing: FSDP checkpoints each layer
    return sharding.activation_checkpointing or checkpointing == "offload" or truthy(checkpointing)


def _objective_fields(native: Mapping[str, Any], method: str, unmodelled: list[str]) -> dict[str, Any]:
    """What the method's loss adds: paired forwards, a reference model, a score head, the fused
    LM head of Axolotl's plugins, tiled MLPs; and what the model does not count."""
    rl = str(native.get("rl") or "").lower()
    plugins = " ".join(map(str, native.get("plugins") or [])) if isinstance(native.get("plugins"), list) else ""
    score_labels = None
    if truthy(native.get("reward_model")):
        score_labels = as_count(native.get("num_labels"), 1)  # TRL's RewardTrainer on a classifier
    elif truthy(native.get("process_reward_model")):
        score_labels = as_count(native.get("num_labels"), 2)  # a token classifier per step
    if rl == "ebft":
        unmodelled.append("`rl: ebft` (its training loop)")
    if as_count(native.get("expert_parallel_size"), 1) > 1:
        unmodelled.append("`expert_parallel_size` (experts sharded over ranks)")
    return {
        "preference_pairs": rl in _AXOLOTL_PAIRS or (score_labels is not None and truthy(native.get("reward_model"))),
        "reference_model": rl in _AXOLOTL_REFERENCE and method == "full",
        # cut-cross-entropy and Liger's fused linear cross-entropy never build the logits
        "fused_lm_head": ("cut_cross_entropy" in plugins and native.get("cut_cross_entropy") is not False) or (
            "liger" in plugins and truthy(native.get("liger_fused_linear_cross_entropy"))),
        "tiled_mlp": truthy(native.get("tiled_mlp")),
        "tiled_mlp_shards": as_count(native.get("tiled_mlp_num_shards"), 0) or None,
        "score_labels": score_labels,
    }


def _grpo(native: Mapping[str, Any], cluster: ClusterSpec, setup: TrainingSetup,
          notes: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    """GRPO's generation (the `trl:` block) and its engine: cw's server (the launch's rule), colocated, or none."""
    trl = as_mapping(native.get("trl"))
    if "max_prompt_length" not in trl:
        notes.append("GRPO prompts are counted as 512 tokens (no trl.max_prompt_length)")
    setup = replace(
        setup,
        num_generations=as_count(trl.get("num_generations"), 8),
        generation_batch_size=as_count(trl.get("generation_batch_size"), 0) or None,
        max_prompt_length=as_count(trl.get("max_prompt_length"), 512),
        max_completion_length=as_count(trl.get("max_completion_length"), 512),
        reference_model=as_number(trl.get("beta"), 0.0) > 0 and setup.method == "full",
    )
    vllm = as_mapping(native.get("vllm"))
    if wants_vllm_server(native, cluster.services):  # the launch's rule
        return setup, server_vllm(cluster, {k: v for k, v in vllm.items() if v is not None})
    if axolotl_bool(trl.get("use_vllm")) is not True:
        notes.append("GRPO without vLLM generates with the trainer's own model (slow; counted as generate's KV cache)")
        return setup, None
    # colocated: Axolotl copies the `vllm:` block's tensor parallelism and memory share to TRL
    tensor = as_count(vllm.get("tensor_parallel_size"), 1)
    return setup, VllmSetup(
        mode="colocate",
        gpu_memory_utilization=as_number(vllm.get("gpu_memory_utilization"),
                                         as_number(trl.get("vllm_gpu_memory_utilization"), 0.3)),
        tensor_parallel=tensor,
        max_model_len=as_count(vllm.get("max_model_len"), 0) or None,
        max_num_seqs=setup.micro_batch * tensor * setup.gradient_accumulation,
        max_num_batched_tokens=4096,
        enable_sleep_mode=truthy(trl.get("vllm_enable_sleep_mode")),
    )


def _axolotl_parallelism(native: Mapping[str, Any], world: int) -> dict[str, Any]:
    """Axolotl's N-D parallel sizes as the setup's: TP and CP degrees, and the FSDP shard group
    (``dp_shard_size`` x CP, Accelerate's ``dp_shard_cp`` mesh; without it, every rank that is
    neither tensor-parallel nor a replica)."""
    tp = as_count(native.get("tensor_parallel_size"), 1)
    cp = as_count(native.get("context_parallel_size"), 0) or as_count(native.get("sequence_parallel_degree"), 1)
    replicas = as_count(native.get("dp_replicate_size"), 1)
    shard = as_count(native.get("dp_shard_size"), 0)
    found: dict[str, Any] = {}
    if tp > 1:
        found["tensor_parallel"] = tp
    if cp > 1:
        found["context_parallel"] = cp
    if shard or replicas > 1:
        found["shard_group"] = shard * cp if shard else max(1, world // (tp * replicas))
    return found
