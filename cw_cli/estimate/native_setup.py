"""A run's training and vLLM setup, read from the framework's own config and cw's cluster fields.

:func:`run_setup` reads a TRL, Axolotl or verifiers config (and the DeepSpeed / Accelerate
files it names, via :mod:`cw_cli.estimate.sharding`) into a
:class:`~cw_cli.estimate.memory.TrainingSetup` and an optional
:class:`~cw_cli.estimate.vllm.VllmSetup`, with the framework's defaults for what the config
leaves out (the mapping is documented in docs/estimate.md). Pure apart from reading those files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct
from msgspec.structs import replace

from cw_cli.estimate.model_config import FRAMEWORKS, MODEL_KEYS
from cw_cli.estimate.sharding import Sharding, accelerate_sharding, deepspeed_sharding, fsdp_sharding, parallelism
from cw_cli.estimate.values import as_count, as_mapping, as_number, truthy

if TYPE_CHECKING:  # types only: reading a config never loads the memory model
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.memory import TrainingSetup
    from cw_cli.estimate.vllm import VllmSetup

ALL_LINEAR = "all-linear"  # PEFT's shorthand (cw_cli.estimate.params.ALL_LINEAR)

# PEFT's default LoRA targets when a config names none (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
_PEFT_DEFAULT_TARGETS = {"gpt_neox": ("query_key_value",), "phi3": ("qkv_proj",)}
_QV = ("q_proj", "v_proj")
# Modules whose full training (`modules_to_save`) means the embedding / LM head are trained.
_EMBEDDING_MODULES = {"embed_tokens", "lm_head", "embed_in", "embed_out", "wte", "word_embeddings"}
# TRL's predefined `accelerate_config` profiles (trl/accelerate_configs/<name>.yaml).
_TRL_PROFILES = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp1": "fsdp", "fsdp2": "fsdp",
                 "multi_gpu": None, "single_gpu": None}  # fmt: skip


class RunSetup(Struct, frozen=True):
    """A run's training and vLLM setup as read from its config.

    Attributes:
        framework: The framework's name.
        training_type: ``sft``, ``dpo`` or ``grpo``.
        model: The model the config names (hub id or path), or None.
        setup: The trainer's setup; None when the framework is not read (a plugin).
        vllm: The vLLM engine (server or colocated), or None.
        notes: Assumptions and what was not read.
        skipped: Why there is no setup (None when there is one).
        unmodelled: Settings of the config the memory model does not count (each a short
            phrase): the estimate is shown but never refuses a launch.
    """

    framework: str
    training_type: str
    model: str | None
    setup: TrainingSetup | None
    vllm: VllmSetup | None = None
    notes: tuple[str, ...] = ()
    skipped: str | None = None
    unmodelled: tuple[str, ...] = ()


def _dtype(value: Any, model_config: Mapping[str, Any] | None, default: str) -> str:
    """A dtype name the memory model knows (``fp32``, ``bf16``, ``fp16``), from a config value."""
    if value is None:
        return default
    text = str(value).lower().removeprefix("torch.")
    if text == "auto":
        text = str((model_config or {}).get("torch_dtype") or (model_config or {}).get("dtype") or "bfloat16")
        text = text.lower().removeprefix("torch.")
    return {"float32": "fp32", "float": "fp32", "fp32": "fp32", "bfloat16": "bf16", "bf16": "bf16",
            "float16": "fp16", "half": "fp16", "fp16": "fp16"}.get(text, default)  # fmt: skip


def _attention(value: Any) -> str:
    text = str(value or "sdpa").lower()
    if "flash" in text:
        return "flash_attention_2"
    return "eager" if text == "eager" else "sdpa"


def _targets(value: Any, model_config: Mapping[str, Any] | None) -> tuple[tuple[str, ...] | str, bool]:
    """LoRA targets from a config value; (PEFT's default for the model, True) when it names none."""
    if isinstance(value, str) and value:
        return (ALL_LINEAR if value == ALL_LINEAR else (value,)), False
    if isinstance(value, (list, tuple)) and value:
        names = tuple(str(v) for v in value)
        return (ALL_LINEAR if ALL_LINEAR in names else names), False
    model_type = str((model_config or {}).get("model_type", ""))
    return _PEFT_DEFAULT_TARGETS.get(model_type, _QV), True


def _trains_embeddings(value: Any) -> bool:
    names = [value] if isinstance(value, str) else list(value or []) if isinstance(value, (list, tuple)) else []
    return any(str(name).rsplit(".", 1)[-1] in _EMBEDDING_MODULES for name in names)


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


def _world(cluster: ClusterSpec) -> tuple[int, int]:
    return max(1, cluster.gpu or 0), cluster.nodes


def _server_args(cluster: ClusterSpec) -> dict[str, str]:
    """`--flag value` / `--flag=value` pairs of ``services.server.args`` (they come last, so they win)."""
    spec = cluster.services.get("server")
    args = list(spec.args) if spec else []
    found: dict[str, str] = {}
    for index, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        if not eq and index + 1 < len(args) and not args[index + 1].startswith("--"):
            value = args[index + 1]
        found[name.replace("-", "_")] = value
    return found


def _server_vllm(cluster: ClusterSpec, settings: Mapping[str, Any], weight_dtype: str | None) -> VllmSetup:
    """A vLLM server pod: its settings, then ``services.server`` (tensor parallelism, extra args)."""
    from cw_cli.estimate.vllm import VllmSetup

    spec = cluster.services.get("server")
    merged = {**settings, **_server_args(cluster)}
    max_len = merged.get("max_model_len")
    dtype = merged.get("dtype", weight_dtype)
    return VllmSetup(
        mode="server",
        gpu_memory_utilization=as_number(merged.get("gpu_memory_utilization"), 0.9),
        tensor_parallel=spec.tensor_parallel_size if spec and spec.tensor_parallel_size else 1,
        max_model_len=as_count(max_len, 0) or None,
        weight_dtype=None if dtype in (None, "auto") else _dtype(dtype, None, "bf16"),
        kv_cache_dtype="fp8" if str(merged.get("kv_cache_dtype", "auto")).startswith("fp8") else "auto",
        max_num_seqs=as_count(merged.get("max_num_seqs"), 256),
        max_num_batched_tokens=as_count(merged.get("max_num_batched_tokens"), 8192),
    )


def _trl(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
         model_config: Mapping[str, Any] | None, notes: list[str],
         unmodelled: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    from cw_cli.estimate.memory import TrainingSetup

    gpus, nodes = _world(cluster)
    peft = truthy(native.get("use_peft")) or isinstance(native.get("peft_config"), Mapping)
    q4, q8 = truthy(native.get("load_in_4bit")), truthy(native.get("load_in_8bit"))
    if (q4 or q8) and not peft:
        notes.append("load_in_4bit/8bit without use_peft: TRL cannot train a quantised base in full; counted "
                     "without quantisation")
    method = ("qlora" if q4 else "lora") if peft else "full"
    quantization = None
    if peft and q4:
        quantization = str(native.get("bnb_4bit_quant_type") or "nf4").lower()
    elif peft and q8:
        quantization = "int8"
    targets, default_targets = _targets(native.get("lora_target_modules"), model_config)
    if peft and default_targets:
        notes.append(f"no lora_target_modules: PEFT's default for this model, {', '.join(targets)}")
    init = as_mapping(native.get("model_init_kwargs"))
    dtype_value = next((v for v in (init.get("dtype"), init.get("torch_dtype"), native.get("dtype"),
                                    native.get("torch_dtype")) if v is not None), None)  # fmt: skip
    if dtype_value is None:
        notes.append("no dtype (model_init_kwargs.dtype): TRL loads the weights in fp32")
    fp16 = truthy(native.get("fp16"))
    bf16 = (not fp16) if native.get("bf16") is None else truthy(native.get("bf16"))
    sharding = _trl_sharding(native, base_dir, notes)
    checkpointing = truthy(native.get("gradient_checkpointing", True))
    if sharding.activation_checkpointing:
        checkpointing = True  # FSDP's own (TRL: do not combine it with gradient_checkpointing)
    micro = as_count(native.get("per_device_train_batch_size"), 8)
    accumulation = as_count(native.get("gradient_accumulation_steps"), 1)
    seq = 1024
    if training_type not in _GENERATING:
        if "max_length" in native and native["max_length"] is None:
            notes.append("max_length: null (no truncation) is counted as 1024 tokens")
        seq = as_count(native.get("max_length"), 1024)
    setup = TrainingSetup(
        method=method,
        lora_rank=as_count(native.get("lora_r"), 16),
        lora_targets=targets,
        lora_dropout=as_number(native.get("lora_dropout"), 0.05),
        train_embeddings=peft and _trains_embeddings(native.get("lora_modules_to_save")),
        weight_dtype=_dtype(dtype_value, model_config, "fp32"),
        quantization=quantization,
        double_quant=truthy(native.get("use_bnb_nested_quant")),
        mixed_precision="bf16" if bf16 else "fp16" if fp16 else "no",
        optimizer=str(native.get("optim") or "adamw_torch_fused"),
        **sharding.setup_fields(),
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=micro,
        gradient_accumulation=accumulation,
        seq_len=seq,
        packing=truthy(native.get("packing")) or truthy(native.get("padding_free")),
        # TRL packs best-fit-decreasing by default, and then flattens each micro batch into one row
        padding_free=truthy(native.get("padding_free")) or (
            truthy(native.get("packing")) and str(native.get("packing_strategy") or "bfd") in ("bfd", "bfd_split")),
        gradient_checkpointing=checkpointing,
        attention=_attention(init.get("attn_implementation") or native.get("attn_implementation")),
        # DPO and reward modelling run chosen and rejected through one forward
        preference_pairs=training_type in ("dpo", "reward"),
        # DPO and KTO keep a frozen reference (PEFT disables the adapter instead)
        reference_model=training_type in ("dpo", "kto") and not peft,
        # TRL 1.16 scores every trainer's tokens through its fused LM head; SFT's label smoothing
        # alone still builds the full logits (transformers' loss).
        fused_lm_head=not (training_type == "sft" and as_number(native.get("label_smoothing_factor"), 0.0) > 0),
        # `trl reward` trains AutoModelForSequenceClassification with one label
        score_labels=1 if training_type == "reward" else None,
    )
    if training_type == "distillation":
        teacher = native.get("teacher_model_name_or_path")
        if teacher is not None and teacher != native.get("model_name_or_path"):
            unmodelled.append(f"the teacher model ({teacher}) beside the student")
        else:
            setup = replace(setup, reference_model=True)
    if training_type not in _GENERATING:
        return setup, None
    rloo = training_type == "rloo"
    beta = as_number(native.get("beta"), 0.05 if rloo else 0.0)
    steps = as_count(native.get("steps_per_generation"), accumulation)
    if "max_prompt_length" not in native:
        notes.append(f"{training_type.upper()} prompts are counted as 512 tokens (no max_prompt_length)")
    setup = replace(
        setup,
        num_generations=as_count(native.get("num_generations"), 2 if rloo else 8),
        generation_batch_size=as_count(native.get("generation_batch_size"), micro * gpus * nodes * steps),
        max_prompt_length=as_count(native.get("max_prompt_length"), 512),
        max_completion_length=as_count(native.get("max_completion_length"), 512),
        reference_model=beta > 0 and not peft,
    )
    return setup, _trl_vllm(native, cluster, micro, steps, notes)


def _trl_vllm(native: Mapping[str, Any], cluster: ClusterSpec, micro: int, steps: int,
              notes: list[str]) -> VllmSetup | None:
    """TRL GRPO's engine: cw's server (the rule of frameworks.trl.wants_vllm_server), or colocated."""
    from cw_cli.estimate.vllm import VllmSetup

    use_vllm, mode = native.get("use_vllm"), native.get("vllm_mode")
    server = not (use_vllm is False or mode == "colocate") and (
        (use_vllm is True and mode == "server") or "server" in cluster.services
    )
    dtype = native.get("dtype", native.get("torch_dtype"))
    if server:
        settings = {"gpu_memory_utilization": native.get("vllm_gpu_memory_utilization"),
                    "max_model_len": native.get("vllm_max_model_length"), "dtype": dtype}  # fmt: skip
        return _server_vllm(cluster, {k: v for k, v in settings.items() if v is not None}, None)
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
    from cw_cli.estimate.memory import TrainingSetup

    gpus, nodes = _world(cluster)
    adapter = str(native.get("adapter") or "").lower()
    q4, q8 = truthy(native.get("load_in_4bit")), truthy(native.get("load_in_8bit"))
    method = "qlora" if adapter == "qlora" or (adapter == "lora" and q4) else "lora" if adapter == "lora" else "full"
    quantization = "nf4" if method == "qlora" else "int8" if adapter == "lora" and q8 else None
    if truthy(native.get("lora_target_linear")):
        targets: tuple[str, ...] | str = ALL_LINEAR
    else:
        targets, default = _targets(native.get("lora_target_modules"), model_config)
        if default and method != "full":
            notes.append(f"no lora_target_modules or lora_target_linear: counted as {', '.join(targets)}")
    bf16 = native.get("bf16")
    bf16_on = bf16 == "auto" or truthy(bf16) or truthy(native.get("bfloat16"))
    fp16_on = not bf16_on and (truthy(native.get("fp16")) or truthy(native.get("float16")))
    if bf16 == "auto":
        notes.append("bf16: auto is counted as bf16 (the GPUs support it)")
    sharding = Sharding()
    if native.get("deepspeed"):
        sharding = deepspeed_sharding(native["deepspeed"], base_dir, notes, AXOLOTL_DEEPSPEED) or Sharding()
    elif native.get("fsdp") or native.get("fsdp_config"):
        found = fsdp_sharding(as_mapping(native.get("fsdp_config")), notes, source="fsdp_config")
        fsdp = native.get("fsdp")
        words: list[Any] = fsdp if isinstance(fsdp, list) else []
        offload = any(str(w).lower() == "offload" for w in words)
        sharding = replace(found or Sharding(fsdp=True), fsdp=True)
        if offload:
            sharding = replace(sharding, offload_optimizer=True, offload_params=True)
    checkpointing = native.get("gradient_checkpointing", False)
    if checkpointing == "offload":
        notes.append("gradient_checkpointing: offload moves the checkpoints to CPU; counted as on the GPU")
    if sharding.activation_checkpointing:
        checkpointing = True  # fsdp_config.activation_checkpointing: FSDP checkpoints each layer
    sharding = replace(sharding, **_axolotl_parallelism(native, gpus * nodes))
    rl = str(native.get("rl") or "").lower()
    plugins = " ".join(map(str, native.get("plugins") or [])) if isinstance(native.get("plugins"), list) else ""
    # cut-cross-entropy and Liger's fused linear cross-entropy never build the logits
    fused_head = ("cut_cross_entropy" in plugins and native.get("cut_cross_entropy") is not False) or (
        "liger" in plugins and truthy(native.get("liger_fused_linear_cross_entropy")))
    score_labels = None
    if truthy(native.get("reward_model")):
        score_labels = as_count(native.get("num_labels"), 1)  # TRL's RewardTrainer on a classifier
    elif truthy(native.get("process_reward_model")):
        score_labels = as_count(native.get("num_labels"), 2)  # a token classifier per step
    if rl == "ebft":
        unmodelled.append("`rl: ebft` (its training loop)")
    if as_count(native.get("expert_parallel_size"), 1) > 1:
        unmodelled.append("`expert_parallel_size` (experts sharded over ranks)")
    attention = native.get("attn_implementation") or ("flash_attention_2" if truthy(native.get("flash_attention"))
                                                      else None)  # fmt: skip
    setup = TrainingSetup(
        method=method,
        lora_rank=as_count(native.get("lora_r"), 8),
        lora_targets=targets,
        lora_dropout=as_number(native.get("lora_dropout"), 0.0),
        train_embeddings=method != "full" and _trains_embeddings(native.get("lora_modules_to_save")),
        weight_dtype="bf16" if bf16_on else "fp16" if fp16_on else "fp32",
        quantization=quantization,
        double_quant=True,
        mixed_precision="bf16" if bf16_on else "fp16" if fp16_on else "no",
        optimizer=str(native.get("optimizer") or "adamw_torch_fused"),
        **sharding.setup_fields(),
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=as_count(native.get("micro_batch_size"), 1),
        gradient_accumulation=as_count(native.get("gradient_accumulation_steps"), 1),
        seq_len=as_count(native.get("sequence_len"), 2048),
        packing=truthy(native.get("sample_packing")),
        gradient_checkpointing=checkpointing == "offload" or truthy(checkpointing),
        attention=_attention(attention),
        preference_pairs=rl in _AXOLOTL_PAIRS or (score_labels is not None and truthy(native.get("reward_model"))),
        reference_model=rl in _AXOLOTL_REFERENCE and method == "full",
        fused_lm_head=fused_head,
        tiled_mlp=truthy(native.get("tiled_mlp")),
        tiled_mlp_shards=as_count(native.get("tiled_mlp_num_shards"), 0) or None,
        score_labels=score_labels,
    )
    if training_type != "grpo":
        return setup, None
    trl = as_mapping(native.get("trl"))
    if "max_prompt_length" not in trl:
        notes.append("GRPO prompts are counted as 512 tokens (no trl.max_prompt_length)")
    setup = replace(
        setup,
        num_generations=as_count(trl.get("num_generations"), 8),
        generation_batch_size=as_count(trl.get("generation_batch_size"), 0) or None,
        max_prompt_length=as_count(trl.get("max_prompt_length"), 512),
        max_completion_length=as_count(trl.get("max_completion_length"), 512),
        reference_model=as_number(trl.get("beta"), 0.0) > 0 and method == "full",
    )
    vllm = as_mapping(native.get("vllm"))
    if _axolotl_vllm_server(trl, cluster):
        return setup, _server_vllm(cluster, {k: v for k, v in vllm.items() if v is not None}, None)
    if trl.get("use_vllm") is not True:
        notes.append("GRPO without vLLM generates with the trainer's own model (slow; counted as generate's KV cache)")
        return setup, None
    from cw_cli.estimate.vllm import VllmSetup

    # colocated: Axolotl copies the `vllm:` block's tensor parallelism and memory share to TRL
    tensor = as_count(vllm.get("tensor_parallel_size"), 1)
    micro = setup.micro_batch
    return setup, VllmSetup(
        mode="colocate",
        gpu_memory_utilization=as_number(vllm.get("gpu_memory_utilization"),
                                         as_number(trl.get("vllm_gpu_memory_utilization"), 0.3)),
        tensor_parallel=tensor,
        max_model_len=as_count(vllm.get("max_model_len"), 0) or None,
        max_num_seqs=micro * tensor * setup.gradient_accumulation,
        max_num_batched_tokens=4096,
        enable_sleep_mode=truthy(trl.get("vllm_enable_sleep_mode")),
    )


def _axolotl_vllm_server(trl: Mapping[str, Any], cluster: ClusterSpec) -> bool:
    """The rule of frameworks.axolotl.wants_vllm_server: a server only for `vllm_mode: server`
    or cw's `services.server`, never against `use_vllm: false` or `vllm_mode: colocate`."""
    use_vllm, mode = trl.get("use_vllm"), trl.get("vllm_mode")
    if use_vllm is False or mode == "colocate":
        return False
    return (use_vllm is True and mode == "server") or "server" in cluster.services


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


def _verifiers(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
               model_config: Mapping[str, Any] | None, notes: list[str],
         unmodelled: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    """verifiers 0.1.9.post3's RLConfig (``trainer.args``), under cw's accelerate launch."""
    from cw_cli.estimate.memory import TrainingSetup

    gpus, nodes = _world(cluster)
    trainer = as_mapping(native.get("trainer"))
    args = as_mapping(trainer.get("args"))
    lora = truthy(args.get("use_lora", True))
    targets, _ = _targets(args.get("lora_target_modules"), model_config)
    if args.get("lora_target_modules") is None:
        targets = ("q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "down_proj", "up_proj")
    strategy = str(native.get("accelerate_config") or "zero3")
    stage = int(strategy[-1]) if re.fullmatch(r"zero[123]", strategy) else None
    notes.append("verifiers trains on micro_batch_size sequences of max_seq_len tokens (logits over all of them; "
                 "its Liger kernels need less)")
    setup = TrainingSetup(
        method="lora" if lora else "full",
        lora_rank=as_count(args.get("lora_rank"), 8),
        lora_targets=targets,
        lora_dropout=as_number(args.get("lora_dropout"), 0.0),
        train_embeddings=lora and _trains_embeddings(args.get("lora_modules_to_save")),
        weight_dtype="bf16",  # verifiers loads the model in bf16 with flash attention
        mixed_precision="bf16" if truthy(args.get("bf16", True)) else "no",
        optimizer=str(args.get("optim") or "adamw_torch_fused"),
        zero_stage=stage,
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=as_count(args.get("micro_batch_size"), 8),
        gradient_accumulation=1,
        seq_len=as_count(args.get("max_seq_len"), 2048),
        gradient_checkpointing=truthy(args.get("gradient_checkpointing", False)),
        attention="flash_attention_2",
    )
    inference = as_mapping(as_mapping(native.get("inference")).get("args"))
    return setup, _server_vllm(cluster, {k: v for k, v in inference.items() if v is not None}, None)


_READERS = {"trl": _trl, "axolotl": _axolotl, "verifiers": _verifiers}
#: Training types whose trainer generates completions (prompt + completion lengths, vLLM).
_GENERATING = ("grpo", "rloo")


def run_setup(framework: str, training_type: str, native: Mapping[str, Any], cluster: ClusterSpec,
              base_dir: Path | None = None, model_config: Mapping[str, Any] | None = None) -> RunSetup:
    """Read a run's training and vLLM setup from its native config and cw's cluster fields.

    Args:
        framework: The framework's name (``trl``, ``axolotl``, ``verifiers``; any other gets
            ``skipped``).
        training_type: ``sft``, ``dpo`` or ``grpo`` (a :class:`~cw_cli.types.TrainingType` too).
        native: The framework's config (``PlannedRun.request.config.native``).
        cluster: cw's fields: ``gpu`` per node, ``nodes``, ``services.server``.
        base_dir: The config's folder: DeepSpeed / Accelerate files it names are read from there.
        model_config: The model's config.json when known (``dtype: auto``, PEFT's default targets).
    """
    kind = str(getattr(training_type, "value", training_type))
    key = MODEL_KEYS.get(framework)
    model = native.get(key) if key else None
    model = str(model) if isinstance(model, (str, Path)) and str(model) else None
    reader = _READERS.get(framework)
    if reader is None:
        return RunSetup(framework, kind, model, None, skipped=f"no estimate for framework {framework!r}: cw reads only "
                        f"{', '.join(FRAMEWORKS)} configs")  # fmt: skip
    notes: list[str] = []
    unmodelled: list[str] = []
    setup, vllm = reader(kind, native, cluster, base_dir, model_config, notes, unmodelled)
    return RunSetup(framework, kind, model, setup, vllm, tuple(notes), unmodelled=tuple(unmodelled))
