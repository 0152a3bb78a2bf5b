"""From a run's config to its memory estimate: what `cw estimate` and the pre-launch check run.

Three jobs, each pure apart from reading local files (and, only when asked, one hub download):

- :func:`run_setup` reads the framework's own config (TRL, Axolotl, verifiers, and the
  DeepSpeed / Accelerate files it names) and cw's cluster fields into a
  :class:`~cw_cli.estimate.memory.TrainingSetup` and an optional
  :class:`~cw_cli.estimate.vllm.VllmSetup` (the mapping is documented in docs/estimate.md).
- :func:`find_model_config` locates the model's ``config.json``: a local folder, the Hugging
  Face cache, and the hub only when allowed and online.
- :func:`resolve_gpu_memory` picks one GPU's memory: the ``--gpu-memory`` flag, the
  ``gpu_memory``/``gpu_type`` fields, else the GPU nodes' labels (a callable that lists them;
  none in a dry run).

:func:`estimate_run` ties them together into a :class:`RunEstimate`, which never raises for a
run it cannot estimate (a plugin framework, a model not found, an unknown architecture): it
says why in ``skipped`` and ``notes`` instead. Nothing here prints or talks to a cluster itself.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli.errors import CwError, Forbidden
from cw_cli.estimate.gpus import (
    MEMORY_LABEL,
    PRODUCT_LABEL,
    GpuMemory,
    gpu_memory_from_node,
    gpu_memory_from_product,
    parse_memory,
)

if TYPE_CHECKING:  # types only: a launch whose model is not found here never loads the memory model
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.fit import Suggestion, Verdict
    from cw_cli.estimate.memory import Estimate, TrainingSetup
    from cw_cli.estimate.vllm import VllmSetup

GIB = 1024**3
ALL_LINEAR = "all-linear"  # PEFT's shorthand (cw_cli.estimate.params.ALL_LINEAR)

#: Frameworks whose config this module reads; any other (a plugin) gets no estimate.
FRAMEWORKS = ("trl", "axolotl", "verifiers")
#: The native key naming the model, per framework.
MODEL_KEYS = {"trl": "model_name_or_path", "axolotl": "base_model", "verifiers": "model"}
#: A refusal fires only when a run clearly cannot fit: past the estimate's error band
#: (docs/estimate.md, "What was compared, and how close").
REFUSAL_HEADROOM = -0.15
#: Keys of :meth:`RunEstimate.to_dict` (``-o json``), in order; scripts may rely on them.
JSON_KEYS = (
    "framework", "type", "model", "model_config", "estimated", "skipped",
    "model_type", "parameters", "active_parameters", "trainable_parameters", "counting",
    "gpu_memory_bytes", "gpu_product", "gpu_memory_source",
    "trainer", "vllm", "verdict", "suggestions", "setup", "vllm_setup", "notes",
)  # fmt: skip
#: Keys of ``verdict`` and of each item of ``verdict.roles`` and ``suggestions``.
VERDICT_KEYS = ("fits", "clearly_too_big", "refusal_headroom", "worst_ratio", "roles")
ROLE_KEYS = ("role", "fits", "required_bytes", "available_bytes", "ratio", "reason")
SUGGESTION_KEYS = ("key", "description", "changes", "per_gpu_bytes", "ratio")

# PEFT's default LoRA targets when a config names none (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
_PEFT_DEFAULT_TARGETS = {"gpt_neox": ("query_key_value",), "phi3": ("qkv_proj",)}
_QV = ("q_proj", "v_proj")
# Modules whose full training (`modules_to_save`) means the embedding / LM head are trained.
_EMBEDDING_MODULES = {"embed_tokens", "lm_head", "embed_in", "embed_out", "wte", "word_embeddings"}
# TRL's predefined `accelerate_config` profiles (trl/accelerate_configs/<name>.yaml).
_TRL_PROFILES = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp1": "fsdp", "fsdp2": "fsdp",
                 "multi_gpu": None, "single_gpu": None}  # fmt: skip
_TRUE = ("1", "true", "yes", "on")


# --- what the framework's config says ---------------------------------------------------------


@dataclass(frozen=True)
class RunSetup:
    """A run's training and vLLM setup as read from its config.

    Attributes:
        framework: The framework's name.
        training_type: ``sft``, ``dpo`` or ``grpo``.
        model: The model the config names (hub id or path), or None.
        setup: The trainer's setup; None when the framework is not read (a plugin).
        vllm: The vLLM engine (server or colocated), or None.
        notes: Assumptions and what was not read.
        skipped: Why there is no setup (None when there is one).
    """

    framework: str
    training_type: str
    model: str | None
    setup: TrainingSetup | None
    vllm: VllmSetup | None = None
    notes: tuple[str, ...] = ()
    skipped: str | None = None


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return bool(value)


def _count(value: Any, default: int) -> int:
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number >= 1 else default


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


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


@dataclass(frozen=True)
class _Sharding:
    """What DeepSpeed / FSDP / Accelerate settings say about sharding and offload."""

    zero_stage: int | None = None
    fsdp: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False


def _read_structured(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    import yaml  # lazily: only a named file needs it

    return yaml.safe_load(text)


def _local_file(value: str, base_dir: Path | None) -> Path | None:
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path if path.is_file() else None


def _offloaded(section: Any) -> bool:
    device = _mapping(section).get("device")
    return isinstance(device, str) and device.lower() in ("cpu", "nvme")


def deepspeed_sharding(value: Any, base_dir: Path | None, notes: list[str],
                       bundled: Mapping[str, _Sharding] | None = None) -> _Sharding | None:
    """ZeRO stage and offload from a DeepSpeed config: a dict, or a JSON file the config names.

    A file that is not here (e.g. one inside the framework's image) is read from its name when
    ``bundled`` knows it or the name says ``zero<N>`` / ``cpuoffload``, with a note.
    """
    data: Any = value if isinstance(value, Mapping) else None
    if isinstance(value, str):
        path = _local_file(value, base_dir)
        if path is not None:
            try:
                data = _read_structured(path)
            except (OSError, ValueError) as exc:
                notes.append(f"could not read the DeepSpeed config {value} ({exc}); counted without DeepSpeed")
                return None
        else:
            name = Path(value).name
            guess = (bundled or {}).get(name) or _sharding_from_name(name)
            if guess is None:
                notes.append(f"the DeepSpeed config {value} is not here and its name says no ZeRO stage; "
                             "counted without DeepSpeed")
                return None
            notes.append(f"the DeepSpeed config {value} is not here; ZeRO-{guess.zero_stage} read from its name"
                         + (" (with CPU offload)" if guess.offload_optimizer or guess.offload_params else ""))
            return guess
    zero = _mapping(_mapping(data).get("zero_optimization"))
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool):
        notes.append(f"DeepSpeed `zero_optimization.stage: {stage}` is not a number; counted as stage 0")
        stage = 0
    return _Sharding(zero_stage=stage, offload_optimizer=_offloaded(zero.get("offload_optimizer")),
                     offload_params=_offloaded(zero.get("offload_param")))  # fmt: skip


def _sharding_from_name(name: str) -> _Sharding | None:
    """``zero3_bf16_cpuoffload_all.json`` -> ZeRO-3, optimizer and parameters offloaded."""
    lower = name.lower()
    stage = re.search(r"zero(\d)", lower)
    if not stage:
        return None
    offload = "cpuoffload" in lower
    return _Sharding(zero_stage=int(stage.group(1)), offload_optimizer=offload and "cpuoffload_params" not in lower,
                     offload_params=offload)


def accelerate_sharding(value: Any, base_dir: Path | None, notes: list[str],
                        profiles: Mapping[str, Any] | None = None) -> _Sharding | None:
    """Sharding from an Accelerate config: a profile name, or a YAML/JSON file the config names."""
    if not isinstance(value, str) or not value:
        return None
    if profiles is not None and value in profiles:
        kind = profiles[value]
        if kind == "fsdp":
            return _Sharding(fsdp=True)
        return _Sharding(zero_stage=kind) if isinstance(kind, int) else _Sharding()
    path = _local_file(value, base_dir)
    if path is None:
        notes.append(f"the Accelerate config {value} is not here; counted without DeepSpeed or FSDP")
        return None
    try:
        data = _mapping(_read_structured(path))
    except (OSError, ValueError) as exc:
        notes.append(f"could not read the Accelerate config {value} ({exc}); counted without DeepSpeed or FSDP")
        return None
    kind = str(data.get("distributed_type", "")).upper()
    if kind == "DEEPSPEED":
        ds = _mapping(data.get("deepspeed_config"))
        if isinstance(ds.get("deepspeed_config_file"), str):
            folder = path.parent
            return deepspeed_sharding(ds["deepspeed_config_file"], folder, notes)
        stage = ds.get("zero_stage", 2)
        return _Sharding(
            zero_stage=stage if isinstance(stage, int) and not isinstance(stage, bool) else 2,
            offload_optimizer=str(ds.get("offload_optimizer_device", "none")).lower() in ("cpu", "nvme"),
            offload_params=str(ds.get("offload_param_device", "none")).lower() in ("cpu", "nvme"),
        )
    if kind == "FSDP":
        return _fsdp_sharding(_mapping(data.get("fsdp_config")), notes, source=value)
    return _Sharding()


def _fsdp_sharding(config: Mapping[str, Any], notes: list[str], source: str) -> _Sharding | None:
    strategy = str(config.get("fsdp_sharding_strategy", config.get("sharding_strategy", "FULL_SHARD"))).upper()
    if strategy in ("NO_SHARD", "3"):
        return _Sharding()
    if strategy not in ("FULL_SHARD", "1"):
        notes.append(f"FSDP {strategy.lower()} ({source}) is counted as a full shard")
    reshard = config.get("fsdp_reshard_after_forward", config.get("reshard_after_forward"))
    if reshard is False:
        notes.append(f"FSDP2 without reshard_after_forward ({source}) is counted as a full shard")
    offload = _truthy(config.get("fsdp_offload_params", config.get("offload_params", False)))
    return _Sharding(fsdp=True, offload_optimizer=offload, offload_params=offload)


def _trl_sharding(native: Mapping[str, Any], base_dir: Path | None, notes: list[str]) -> _Sharding:
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
            return _Sharding(fsdp=True, offload_optimizer=offload, offload_params=offload)
    found = accelerate_sharding(native.get("accelerate_config"), base_dir, notes, _TRL_PROFILES)
    return found or _Sharding()


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
        gpu_memory_utilization=_number(merged.get("gpu_memory_utilization"), 0.9),
        tensor_parallel=spec.tensor_parallel_size if spec and spec.tensor_parallel_size else 1,
        max_model_len=_count(max_len, 0) or None,
        weight_dtype=None if dtype in (None, "auto") else _dtype(dtype, None, "bf16"),
        kv_cache_dtype="fp8" if str(merged.get("kv_cache_dtype", "auto")).startswith("fp8") else "auto",
        max_num_seqs=_count(merged.get("max_num_seqs"), 256),
        max_num_batched_tokens=_count(merged.get("max_num_batched_tokens"), 8192),
    )


def _trl(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
         model_config: Mapping[str, Any] | None, notes: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    from cw_cli.estimate.memory import TrainingSetup

    gpus, nodes = _world(cluster)
    peft = _truthy(native.get("use_peft")) or isinstance(native.get("peft_config"), Mapping)
    q4, q8 = _truthy(native.get("load_in_4bit")), _truthy(native.get("load_in_8bit"))
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
    init = _mapping(native.get("model_init_kwargs"))
    dtype_value = next((v for v in (init.get("dtype"), init.get("torch_dtype"), native.get("dtype"),
                                    native.get("torch_dtype")) if v is not None), None)  # fmt: skip
    if dtype_value is None:
        notes.append("no dtype (model_init_kwargs.dtype): TRL loads the weights in fp32")
    fp16 = _truthy(native.get("fp16"))
    bf16 = (not fp16) if native.get("bf16") is None else _truthy(native.get("bf16"))
    sharding = _trl_sharding(native, base_dir, notes)
    micro = _count(native.get("per_device_train_batch_size"), 8)
    accumulation = _count(native.get("gradient_accumulation_steps"), 1)
    seq = 1024
    if training_type in ("sft", "dpo"):
        if "max_length" in native and native["max_length"] is None:
            notes.append("max_length: null (no truncation) is counted as 1024 tokens")
        seq = _count(native.get("max_length"), 1024)
    setup = TrainingSetup(
        method=method,
        lora_rank=_count(native.get("lora_r"), 16),
        lora_targets=targets,
        lora_dropout=_number(native.get("lora_dropout"), 0.05),
        train_embeddings=peft and _trains_embeddings(native.get("lora_modules_to_save")),
        weight_dtype=_dtype(dtype_value, model_config, "fp32"),
        quantization=quantization,
        double_quant=_truthy(native.get("use_bnb_nested_quant")),
        mixed_precision="bf16" if bf16 else "fp16" if fp16 else "no",
        optimizer=str(native.get("optim") or "adamw_torch_fused"),
        zero_stage=sharding.zero_stage,
        fsdp=sharding.fsdp,
        offload_optimizer=sharding.offload_optimizer,
        offload_params=sharding.offload_params,
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=micro,
        gradient_accumulation=accumulation,
        seq_len=seq,
        packing=_truthy(native.get("packing")) or _truthy(native.get("padding_free")),
        gradient_checkpointing=_truthy(native.get("gradient_checkpointing", True)),
        attention=_attention(init.get("attn_implementation") or native.get("attn_implementation")),
        preference_pairs=training_type == "dpo",
        reference_model=training_type == "dpo" and not peft,
    )
    if training_type != "grpo":
        return setup, None
    beta = _number(native.get("beta"), 0.0)
    steps = _count(native.get("steps_per_generation"), accumulation)
    if "max_prompt_length" not in native:
        notes.append("GRPO prompts are counted as 512 tokens (no max_prompt_length)")
    setup = replace(
        setup,
        num_generations=_count(native.get("num_generations"), 8),
        generation_batch_size=_count(native.get("generation_batch_size"), micro * gpus * nodes * steps),
        max_prompt_length=_count(native.get("max_prompt_length"), 512),
        max_completion_length=_count(native.get("max_completion_length"), 512),
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
    tensor = _count(native.get("vllm_tensor_parallel_size"), 1)
    return VllmSetup(
        mode="colocate",
        gpu_memory_utilization=_number(native.get("vllm_gpu_memory_utilization"), 0.3),
        tensor_parallel=tensor,
        max_model_len=_count(native.get("vllm_max_model_length"), 0) or None,
        max_num_seqs=micro * tensor * steps,
        max_num_batched_tokens=4096,
        enable_sleep_mode=_truthy(native.get("vllm_enable_sleep_mode")),
    )


#: Axolotl's own DeepSpeed files (its image's deepspeed_configs/), for configs that name them.
AXOLOTL_DEEPSPEED = {
    "zero1.json": _Sharding(zero_stage=1),
    "zero1_torch_compile.json": _Sharding(zero_stage=1),
    "zero2.json": _Sharding(zero_stage=2, offload_optimizer=True),
    "zero2_torch_compile.json": _Sharding(zero_stage=2),
    "zero3.json": _Sharding(zero_stage=3),
    "zero3_bf16.json": _Sharding(zero_stage=3),
    "zero3_bf16_cpuoffload_all.json": _Sharding(zero_stage=3, offload_optimizer=True, offload_params=True),
    "zero3_bf16_cpuoffload_params.json": _Sharding(zero_stage=3, offload_params=True),
    "zero3_cpuoffload.json": _Sharding(zero_stage=3, offload_optimizer=True, offload_params=True),
}
_AXOLOTL_PAIRS = ("dpo", "ipo", "orpo", "simpo")  # chosen and rejected in one forward
_AXOLOTL_REFERENCE = ("dpo", "ipo", "kto")  # keep a frozen reference model (without an adapter)


def _axolotl(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
             model_config: Mapping[str, Any] | None, notes: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    from cw_cli.estimate.memory import TrainingSetup

    gpus, nodes = _world(cluster)
    adapter = str(native.get("adapter") or "").lower()
    q4, q8 = _truthy(native.get("load_in_4bit")), _truthy(native.get("load_in_8bit"))
    method = "qlora" if adapter == "qlora" or (adapter == "lora" and q4) else "lora" if adapter == "lora" else "full"
    quantization = "nf4" if method == "qlora" else "int8" if adapter == "lora" and q8 else None
    if _truthy(native.get("lora_target_linear")):
        targets: tuple[str, ...] | str = ALL_LINEAR
    else:
        targets, default = _targets(native.get("lora_target_modules"), model_config)
        if default and method != "full":
            notes.append(f"no lora_target_modules or lora_target_linear: counted as {', '.join(targets)}")
    bf16 = native.get("bf16")
    bf16_on = bf16 == "auto" or _truthy(bf16) or _truthy(native.get("bfloat16"))
    fp16_on = not bf16_on and (_truthy(native.get("fp16")) or _truthy(native.get("float16")))
    if bf16 == "auto":
        notes.append("bf16: auto is counted as bf16 (the GPUs support it)")
    sharding = _Sharding()
    if native.get("deepspeed"):
        sharding = deepspeed_sharding(native["deepspeed"], base_dir, notes, AXOLOTL_DEEPSPEED) or _Sharding()
    elif native.get("fsdp") or native.get("fsdp_config"):
        found = _fsdp_sharding(_mapping(native.get("fsdp_config")), notes, source="fsdp_config")
        fsdp = native.get("fsdp")
        words: list[Any] = fsdp if isinstance(fsdp, list) else []
        offload = any(str(w).lower() == "offload" for w in words)
        sharding = replace(found or _Sharding(fsdp=True), fsdp=True)
        if offload:
            sharding = replace(sharding, offload_optimizer=True, offload_params=True)
    checkpointing = native.get("gradient_checkpointing", False)
    if checkpointing == "offload":
        notes.append("gradient_checkpointing: offload moves the checkpoints to CPU; counted as on the GPU")
    rl = str(native.get("rl") or "").lower()
    attention = native.get("attn_implementation") or ("flash_attention_2" if _truthy(native.get("flash_attention"))
                                                      else None)  # fmt: skip
    setup = TrainingSetup(
        method=method,
        lora_rank=_count(native.get("lora_r"), 8),
        lora_targets=targets,
        lora_dropout=_number(native.get("lora_dropout"), 0.0),
        train_embeddings=method != "full" and _trains_embeddings(native.get("lora_modules_to_save")),
        weight_dtype="bf16" if bf16_on else "fp16" if fp16_on else "fp32",
        quantization=quantization,
        double_quant=True,
        mixed_precision="bf16" if bf16_on else "fp16" if fp16_on else "no",
        optimizer=str(native.get("optimizer") or "adamw_torch_fused"),
        zero_stage=sharding.zero_stage,
        fsdp=sharding.fsdp,
        offload_optimizer=sharding.offload_optimizer,
        offload_params=sharding.offload_params,
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=_count(native.get("micro_batch_size"), 1),
        gradient_accumulation=_count(native.get("gradient_accumulation_steps"), 1),
        seq_len=_count(native.get("sequence_len"), 2048),
        packing=_truthy(native.get("sample_packing")),
        gradient_checkpointing=checkpointing == "offload" or _truthy(checkpointing),
        attention=_attention(attention),
        preference_pairs=rl in _AXOLOTL_PAIRS,
        reference_model=rl in _AXOLOTL_REFERENCE and method == "full",
    )
    if training_type != "grpo":
        return setup, None
    trl = _mapping(native.get("trl"))
    if "max_prompt_length" not in trl:
        notes.append("GRPO prompts are counted as 512 tokens (no trl.max_prompt_length)")
    setup = replace(
        setup,
        num_generations=_count(trl.get("num_generations"), 8),
        generation_batch_size=_count(trl.get("generation_batch_size"), 0) or None,
        max_prompt_length=_count(trl.get("max_prompt_length"), 512),
        max_completion_length=_count(trl.get("max_completion_length"), 512),
        reference_model=_number(trl.get("beta"), 0.0) > 0 and method == "full",
    )
    vllm = _mapping(native.get("vllm"))
    return setup, _server_vllm(cluster, {k: v for k, v in vllm.items() if v is not None}, None)


def _verifiers(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
               model_config: Mapping[str, Any] | None, notes: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    """verifiers 0.1.9.post3's RLConfig (``trainer.args``), under cw's accelerate launch."""
    from cw_cli.estimate.memory import TrainingSetup

    gpus, nodes = _world(cluster)
    trainer = _mapping(native.get("trainer"))
    args = _mapping(trainer.get("args"))
    lora = _truthy(args.get("use_lora", True))
    targets, _ = _targets(args.get("lora_target_modules"), model_config)
    if args.get("lora_target_modules") is None:
        targets = ("q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "down_proj", "up_proj")
    strategy = str(native.get("accelerate_config") or "zero3")
    stage = int(strategy[-1]) if re.fullmatch(r"zero[123]", strategy) else None
    notes.append("verifiers trains on micro_batch_size sequences of max_seq_len tokens (logits over all of them; "
                 "its Liger kernels need less)")
    setup = TrainingSetup(
        method="lora" if lora else "full",
        lora_rank=_count(args.get("lora_rank"), 8),
        lora_targets=targets,
        lora_dropout=_number(args.get("lora_dropout"), 0.0),
        train_embeddings=lora and _trains_embeddings(args.get("lora_modules_to_save")),
        weight_dtype="bf16",  # verifiers loads the model in bf16 with flash attention
        mixed_precision="bf16" if _truthy(args.get("bf16", True)) else "no",
        optimizer=str(args.get("optim") or "adamw_torch_fused"),
        zero_stage=stage,
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=_count(args.get("micro_batch_size"), 8),
        gradient_accumulation=1,
        seq_len=_count(args.get("max_seq_len"), 2048),
        gradient_checkpointing=_truthy(args.get("gradient_checkpointing", False)),
        attention="flash_attention_2",
    )
    inference = _mapping(_mapping(native.get("inference")).get("args"))
    return setup, _server_vllm(cluster, {k: v for k, v in inference.items() if v is not None}, None)


_READERS = {"trl": _trl, "axolotl": _axolotl, "verifiers": _verifiers}


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
    setup, vllm = reader(kind, native, cluster, base_dir, model_config, notes)
    return RunSetup(framework, kind, model, setup, vllm, tuple(notes))


# --- the model's config.json --------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfigLookup:
    """Where a model's config.json was found (or everywhere it was looked for).

    Attributes:
        config: The parsed config.json, or None.
        source: Its path (or ``hub:<id>``), or None.
        looked: Every place looked at, in order.
        note: Why it was not found (None when found).
    """

    config: dict[str, Any] | None
    source: str | None
    looked: tuple[str, ...] = ()
    note: str | None = None


def hf_cache_dirs() -> list[Path]:
    """The Hugging Face hub caches to search: ``HF_HUB_CACHE``, ``HF_HOME``/hub, the default."""
    env = os.environ
    found: list[Path] = []
    for value in (env.get("HF_HUB_CACHE"), env.get("HUGGINGFACE_HUB_CACHE"),
                  env.get("HF_HOME") and os.path.join(env["HF_HOME"], "hub")):  # fmt: skip
        if value:
            found.append(Path(value).expanduser())
    if not found:
        xdg = env.get("XDG_CACHE_HOME")
        found.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _from_cache(cache: Path, repo_id: str, revision: str | None) -> Path | None:
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    if commit and (snapshots / commit / "config.json").is_file():
        return snapshots / commit / "config.json"
    candidates = [p / "config.json" for p in snapshots.iterdir() if (p / "config.json").is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def find_model_config(model: str, base_dir: Path | None = None, *, hub: bool = False, revision: str | None = None,
                      cache_dirs: Iterable[Path] | None = None) -> ModelConfigLookup:
    """Find and read a model's config.json without loading the model.

    Looks at, in order: ``model`` as a local folder (relative to ``base_dir``) or a config.json
    file; each Hugging Face cache (``models--org--name/snapshots/<rev>/config.json``, the
    ``refs/<revision>`` snapshot first); then, only with ``hub`` and not offline
    (``HF_HUB_OFFLINE``), ``huggingface_hub.hf_hub_download`` when that package is installed.

    Args:
        model: A hub id (``org/name``) or a path.
        base_dir: Folder a relative path is read from (the config's).
        hub: Allow one download from the hub.
        revision: The model revision (``model_revision``); ``main`` by default.
        cache_dirs: Caches to search (default :func:`hf_cache_dirs`).
    """
    looked: list[str] = []
    path = Path(model).expanduser()
    local = [path] if path.is_absolute() or base_dir is None else [base_dir / path]
    for candidate in local:
        looked.append(str(candidate))
        config = candidate if candidate.name == "config.json" else candidate / "config.json"
        if config.is_file():
            data = _load_json(config)
            if data is not None:
                return ModelConfigLookup(data, str(config), tuple(looked))
    is_repo_id = re.fullmatch(r"[\w.-]+(/[\w.-]+)?", model) is not None and not path.is_absolute()
    if is_repo_id:
        for cache in cache_dirs if cache_dirs is not None else hf_cache_dirs():
            looked.append(str(cache))
            found = _from_cache(Path(cache), model, revision)
            if found is not None and (data := _load_json(found)) is not None:
                return ModelConfigLookup(data, str(found), tuple(looked))
    why = f"config.json of {model} not found (looked in {', '.join(looked)})"
    if not is_repo_id:
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; a path inside the pods cannot be read from here")
    if not hub:
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; `cw estimate` fetches it from the hub")
    if _offline():
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; HF_HUB_OFFLINE is set, so the hub was not asked")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; install huggingface_hub to fetch it from the hub")
    looked.append(f"hub:{model}")
    try:
        downloaded = hf_hub_download(model, "config.json", revision=revision)
    except Exception as exc:  # noqa: BLE001 - any hub failure (network, gated, missing) is a skip, not a crash
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; the hub said: {str(exc).splitlines()[0][:200]}")
    data = _load_json(Path(downloaded))
    if data is None:
        return ModelConfigLookup(None, None, tuple(looked), f"the hub's config.json of {model} is not a JSON object")
    return ModelConfigLookup(data, f"hub:{model} ({downloaded})", tuple(looked))


# --- one GPU's memory -------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuChoice:
    """One GPU's memory and where it came from.

    Attributes:
        memory: The memory (None when unknown).
        source: ``--gpu-memory``, ``gpu_memory``, ``gpu_type``, ``nodes``, or None.
        notes: How it was chosen, or why it is unknown.
    """

    memory: GpuMemory | None
    source: str | None
    notes: tuple[str, ...] = ()


def _gpu_count(node: Mapping[str, Any]) -> int | None:
    status = _mapping(node.get("status"))
    value = _mapping(status.get("allocatable")).get("nvidia.com/gpu")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(node.get("metadata")).get("labels"))


def resolve_gpu_memory(flag: str | int | None, cluster: ClusterSpec,
                       nodes: Callable[[], Iterable[Mapping[str, Any]]] | None = None) -> GpuChoice:
    """One GPU's memory for a run: the flag, else ``gpu_memory``, else ``gpu_type``, else the nodes.

    Args:
        flag: ``--gpu-memory`` (``80GB``, ``80Gi``, ``81559MiB``, a number of GiB).
        cluster: cw's fields (``gpu_memory``, ``gpu_type``, ``node_selector``, ``gpu``).
        nodes: Lists the cluster's nodes (as dicts); None never asks (a dry run). Only GPU nodes
            the trainer could land on count: those matching ``node_selector`` and ``gpu_type``,
            with at least ``gpu`` allocatable GPUs. When they differ, the largest is taken (a
            refusal must be sure), with a note.

    Raises:
        ValueError: ``flag`` is not a memory size.
    """
    product = getattr(cluster, "gpu_type", None)
    if flag is not None and flag != "":
        return GpuChoice(GpuMemory(parse_memory(flag), product, "given"), "--gpu-memory")
    field_value = getattr(cluster, "gpu_memory", None)
    if field_value:
        return GpuChoice(GpuMemory(parse_memory(field_value), product, "given"), "gpu_memory")
    notes: list[str] = []
    if product:
        known = gpu_memory_from_product(product)
        if known is not None:
            return GpuChoice(known, "gpu_type")
        notes.append(f"gpu_type {product!r} is not in cw's table of GPUs; looking at the nodes' labels")
    if nodes is None:
        notes.append("GPU memory unknown: give --gpu-memory, or gpu_memory / gpu_type in the config "
                     "(the cluster's nodes are not asked here)")
        return GpuChoice(None, None, tuple(notes))
    try:
        listed = list(nodes())
    except Forbidden:
        notes.append("GPU memory unknown: listing nodes is forbidden; set gpu_memory or gpu_type, or --gpu-memory")
        return GpuChoice(None, None, tuple(notes))
    except CwError as exc:
        notes.append(f"GPU memory unknown: the cluster did not answer ({exc.message}); give --gpu-memory")
        return GpuChoice(None, None, tuple(notes))
    wanted = max(1, cluster.gpu or 0)
    selector = dict(cluster.node_selector or {})
    labelled = [n for n in listed if MEMORY_LABEL in _labels(n) or PRODUCT_LABEL in _labels(n)]
    matching = [n for n in labelled
                if all(str(_labels(n).get(k)) == str(v) for k, v in selector.items())
                and (not product or product.lower() in str(_labels(n).get(PRODUCT_LABEL, "")).lower())]  # fmt: skip
    fitting = [n for n in matching if (_gpu_count(n) or wanted) >= wanted] or matching
    found = [m for m in (gpu_memory_from_node(n) for n in fitting) if m is not None]
    if not found:
        why = ("no node carries GPU feature discovery's nvidia.com/gpu.memory or nvidia.com/gpu.product labels"
               if not labelled else "no labelled GPU node matches the run's node_selector / gpu_type")
        notes.append(f"GPU memory unknown: {why}; set gpu_memory or gpu_type, or --gpu-memory")
        return GpuChoice(None, None, tuple(notes))
    largest = max(found, key=lambda m: m.bytes)
    sizes = sorted({m.bytes for m in found})
    if len(sizes) > 1:
        notes.append(f"the GPU nodes differ ({', '.join(f'{s / GIB:.1f}' for s in sizes)} GiB); checked against the "
                     "largest; set gpu_type, node_selector or --gpu-memory for the nodes the run will use")
    return GpuChoice(largest, "nodes", tuple(notes))


# --- the whole estimate -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEstimate:
    """A run's memory estimate with its verdict, or why there is none.

    Attributes:
        framework: The framework.
        training_type: The training type.
        model: The model the config names.
        model_config: Where its config.json was read (None when not found).
        setup: The trainer's setup read from the config (None when not read).
        vllm_setup: The vLLM engine's setup, if any.
        estimate: The per-GPU breakdown (None when skipped).
        gpu: One GPU's memory and where it came from.
        verdict: The fit at 0 headroom (None without an estimate or a GPU size).
        refusal: The fit within the estimate's error band (``REFUSAL_HEADROOM``); a launch is
            refused when this does not fit.
        suggestions: Changes that make the run fit, each re-estimated.
        changes: For each suggestion, what to write in the config (same order).
        roles: The roles checked (``("vllm",)`` for a servers-only run).
        notes: Assumptions, and why anything is unknown.
        skipped: Why there is no estimate (None when there is one).
    """

    framework: str
    training_type: str
    model: str | None
    model_config: str | None = None
    setup: TrainingSetup | None = None
    vllm_setup: VllmSetup | None = None
    estimate: Estimate | None = None
    gpu: GpuChoice = field(default_factory=lambda: GpuChoice(None, None))
    verdict: Verdict | None = None
    refusal: Verdict | None = None
    suggestions: tuple[Suggestion, ...] = ()
    changes: tuple[tuple[str, ...], ...] = ()
    roles: tuple[str, ...] = ("trainer", "vllm")
    notes: tuple[str, ...] = ()
    skipped: str | None = None

    @property
    def clearly_too_big(self) -> bool:
        """Whether a checked role needs more than its GPU even within the error band."""
        if self.refusal is None:
            return False
        return any(not r.fits for r in self.refusal.roles if r.role in self.roles)

    @property
    def fits(self) -> bool | None:
        """Whether every checked role fits (None when unknown)."""
        if self.verdict is None:
            return None
        return all(r.fits for r in self.verdict.roles if r.role in self.roles)

    def summary(self) -> str:
        """One line: what each role needs per GPU against the GPU, or why there is no estimate."""
        if self.estimate is None:
            return f"memory estimate skipped: {self.skipped}"
        gpu = self.gpu.memory
        parts = []
        for role, need in self._needs():
            text = f"{_ROLE_NAMES.get(role, role)} {need / GIB:.1f} GiB"
            if gpu is not None:
                text += f" ({need / gpu.bytes:.0%})"
            parts.append(text)
        where = f" of {gpu.bytes / GIB:.1f} GiB per GPU" if gpu else " per GPU (GPU memory unknown)"
        verdict = "" if self.fits is None else ": fits" if self.fits else (
            ": does not fit" + (" (clearly)" if self.clearly_too_big else " (within the estimate's error band)"))
        return f"memory estimate: {', '.join(parts)}{where}{verdict}"

    def _needs(self) -> list[tuple[str, int]]:
        assert self.estimate is not None
        if self.verdict is not None:
            return [(r.role, r.required_bytes) for r in self.verdict.roles if r.role in self.roles]
        needs = []
        if "trainer" in self.roles:
            needs.append(("trainer", self.estimate.trainer.per_gpu_bytes))
        if self.estimate.vllm is not None and "vllm" in self.roles:
            needs.append(("vllm", self.estimate.vllm.min_per_gpu_bytes))
        return needs

    def to_dict(self) -> dict[str, Any]:
        """The ``-o json`` form: :data:`JSON_KEYS`, each always present (null when unknown)."""
        est = self.estimate.to_dict() if self.estimate is not None else {}
        gpu = self.gpu.memory
        verdict = None
        if self.verdict is not None and self.refusal is not None:
            verdict = {
                "fits": bool(self.fits),
                "clearly_too_big": self.clearly_too_big,
                "refusal_headroom": REFUSAL_HEADROOM,
                "worst_ratio": max(r.ratio for r in self.verdict.roles if r.role in self.roles),
                "roles": [
                    {"role": r.role, "fits": r.fits, "required_bytes": r.required_bytes,
                     "available_bytes": r.available_bytes, "ratio": r.ratio, "reason": r.reason}
                    for r in self.verdict.roles if r.role in self.roles
                ],
            }  # fmt: skip
        data = {
            "framework": self.framework,
            "type": self.training_type,
            "model": self.model,
            "model_config": self.model_config,
            "estimated": self.estimate is not None,
            "skipped": self.skipped,
            "model_type": est.get("model_type"),
            "parameters": est.get("parameters"),
            "active_parameters": est.get("active_parameters"),
            "trainable_parameters": est.get("trainable_parameters"),
            "counting": est.get("counting"),
            "gpu_memory_bytes": gpu.bytes if gpu else None,
            "gpu_product": gpu.product if gpu else None,
            "gpu_memory_source": self.gpu.source,
            "trainer": est.get("trainer") if "trainer" in self.roles else None,
            "vllm": est.get("vllm"),
            "verdict": verdict,
            "suggestions": [
                {"key": s.key, "description": s.description, "changes": list(c), "per_gpu_bytes": s.per_gpu_bytes,
                 "ratio": s.ratio}
                for s, c in zip(self.suggestions, self.changes)
            ],
            "setup": _setup_dict(self.setup),
            "vllm_setup": asdict(self.vllm_setup) if self.vllm_setup is not None else None,
            "notes": list(self.notes),
        }  # fmt: skip
        return {key: data[key] for key in JSON_KEYS}


_ROLE_NAMES = {"trainer": "trainer", "vllm": "vLLM"}


def _setup_dict(setup: TrainingSetup | None) -> dict[str, Any] | None:
    if setup is None:
        return None
    data = asdict(setup)
    if not isinstance(setup.lora_targets, str):
        data["lora_targets"] = list(setup.lora_targets)
    return data


def estimate_run(
    framework: str,
    training_type: str,
    native: Mapping[str, Any],
    cluster: ClusterSpec,
    base_dir: Path | None = None,
    *,
    gpu_memory: str | int | None = None,
    nodes: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    hub: bool = False,
    suggest: bool = True,
    services_only: bool = False,
    allow_meta_device: bool = True,
    cache_dirs: Iterable[Path] | None = None,
) -> RunEstimate:
    """Estimate a run as configured: setup, model config, GPU memory, verdict and suggestions.

    Never raises for a run it cannot estimate: ``skipped`` says why (a plugin framework, a
    trainer without GPUs, a model whose config.json is not found, an unknown architecture
    without ``allow_meta_device``).

    Args:
        framework: The framework's name.
        training_type: ``sft``, ``dpo`` or ``grpo``.
        native: The framework's own config.
        cluster: cw's cluster fields.
        base_dir: The config's folder (local model folders, DeepSpeed / Accelerate files).
        gpu_memory: ``--gpu-memory``.
        nodes: Lists the cluster's nodes; asked only when the estimate exists and no GPU size
            was given (None: never).
        hub: Allow downloading config.json from the hub (see :func:`find_model_config`).
        suggest: Compute suggestions when a role does not fit (~50 ms).
        services_only: Only the servers run (``--services``): only the vLLM role is checked.
        allow_meta_device: Count an unknown architecture with transformers on the meta device
            (seconds); the launch path passes False and skips instead.
        cache_dirs: Hugging Face caches to search (default :func:`hf_cache_dirs`).

    Raises:
        ValueError: ``gpu_memory`` is not a memory size.
    """
    kind = str(getattr(training_type, "value", training_type))
    roles = ("vllm",) if services_only else ("trainer", "vllm")
    base = RunEstimate(framework, kind, None, roles=roles)
    if gpu_memory is not None and gpu_memory != "":
        parse_memory(gpu_memory)  # a bad flag fails before anything else
    # Cheap refusals first: a launch whose model is not here pays for a few stat() calls only.
    if framework not in _READERS:
        return replace(base, skipped=f"no estimate for framework {framework!r}: cw reads only "
                       f"{', '.join(FRAMEWORKS)} configs")  # fmt: skip
    key = MODEL_KEYS[framework]
    model = native.get(key)
    model = str(model) if isinstance(model, (str, Path)) and str(model) else None
    base = replace(base, model=model)
    if (cluster.gpu or 0) == 0:
        return replace(base, skipped="the trainer has no GPU (gpu: 0)")
    if model is None:
        return replace(base, skipped=f"the config names no model (`{key}`)")
    revision_key = {"trl": "model_revision", "axolotl": "revision_of_model"}.get(framework)
    revision = native.get(revision_key) if revision_key else None
    lookup = find_model_config(model, base_dir, hub=hub, revision=str(revision) if revision else None,
                               cache_dirs=cache_dirs)  # fmt: skip
    if lookup.config is None:
        return replace(base, skipped=lookup.note)
    config = lookup.config
    base = replace(base, model_config=lookup.source)

    from cw_cli.estimate.fit import fits, suggestions
    from cw_cli.estimate.memory import estimate_memory
    from cw_cli.estimate.params import UnknownArchitectureError, architecture

    if architecture(config) is None and not allow_meta_device:
        return replace(base, skipped=f"model_type {config.get('model_type')!r} has no formula in cw; `cw estimate` "
                       "counts it with transformers on the meta device")  # fmt: skip
    read = run_setup(framework, kind, native, cluster, base_dir, config)  # dtype: auto, PEFT's default targets
    assert read.setup is not None
    base = replace(base, setup=read.setup, vllm_setup=read.vllm)
    if services_only and read.vllm is None:
        return replace(base, skipped="the run has no vLLM server to estimate", notes=read.notes)
    gpu = resolve_gpu_memory(gpu_memory, cluster, nodes)
    memory = gpu.memory.bytes if gpu.memory else None
    try:
        estimate = estimate_memory(config, read.setup, read.vllm, memory)
    except (UnknownArchitectureError, ValueError) as exc:
        return replace(base, gpu=gpu, skipped=f"cannot estimate {model}: {exc}", notes=read.notes + gpu.notes)
    notes = read.notes + estimate.notes + gpu.notes
    base = replace(base, estimate=estimate, gpu=gpu, notes=notes)
    if memory is None:
        return base
    verdict = fits(estimate, memory)
    refusal = fits(estimate, memory, headroom=REFUSAL_HEADROOM)
    base = replace(base, verdict=verdict, refusal=refusal)
    if suggest and not base.fits:
        found = tuple(s for s in suggestions(config, read.setup, memory, read.vllm)
                      if _applies(framework, s, services_only))
        changes = tuple(tuple(config_changes(framework, kind, read.setup, read.vllm, s)) for s in found)
        base = replace(base, suggestions=found, changes=changes)
    return base


def _applies(framework: str, suggestion: Suggestion, services_only: bool) -> bool:
    """Whether the framework can do what a suggestion asks (verifiers has no QLoRA nor offload)."""
    if services_only:
        return suggestion.key.startswith("vllm_")
    s = suggestion.setup
    if framework == "verifiers":
        return s.method != "qlora" and not s.offload_optimizer and not s.offload_params and not s.fsdp
    return True


# --- suggestions in the framework's own words -------------------------------------------------------


def config_changes(framework: str, training_type: str, setup: TrainingSetup, vllm: VllmSetup | None,
                   suggestion: Suggestion) -> list[str]:
    """What to write in the config (or pass as a flag) for a suggestion, in the framework's keys."""
    new, old = suggestion.setup, setup
    changes: list[str] = []
    words = _WORDS.get(framework, _WORDS["trl"])
    grpo = training_type == "grpo"

    def add(key: str, value: Any) -> None:
        changes.append(f"{key}: {value}")

    if new.gradient_checkpointing and not old.gradient_checkpointing:
        add(words["checkpointing"], "true")
    if new.weight_dtype != old.weight_dtype:
        add(words["dtype"], words["bf16"])
    if new.micro_batch != old.micro_batch:
        add(words["micro_batch"], new.micro_batch)
        if "accumulation" in words:
            add(words["accumulation"], new.gradient_accumulation)
    if new.seq_len != old.seq_len:
        add(words["length"], new.seq_len)
    if grpo and new.max_completion_length != old.max_completion_length:
        add(words["completion"], new.max_completion_length)
    if new.optimizer != old.optimizer:
        add(words["optimizer"], new.optimizer)
    if new.method != old.method:
        changes.extend(words["qlora" if new.method == "qlora" else "lora"])
    sharding_changed = (new.zero_stage, new.offload_optimizer, new.offload_params) != (
        old.zero_stage, old.offload_optimizer, old.offload_params)
    if sharding_changed and new.zero_stage == 3:
        offload = new.offload_optimizer or new.offload_params
        changes.append(words["zero3_offload" if offload else "zero3"])
    if new.nodes != old.nodes:
        changes.append(f"--nodes {new.nodes}")
    if vllm is not None and suggestion.vllm is not None:
        if suggestion.vllm.max_model_len != vllm.max_model_len:
            add(words["vllm_len"], suggestion.vllm.max_model_len)
        if suggestion.vllm.gpu_memory_utilization != vllm.gpu_memory_utilization:
            add(words["vllm_util"], suggestion.vllm.gpu_memory_utilization)
    return changes


_WORDS: dict[str, dict[str, Any]] = {
    "trl": {
        "checkpointing": "gradient_checkpointing", "dtype": "dtype", "bf16": "bfloat16",
        "micro_batch": "per_device_train_batch_size", "accumulation": "gradient_accumulation_steps",
        "length": "max_length", "completion": "max_completion_length", "optimizer": "optim",
        "lora": ["use_peft: true"], "qlora": ["use_peft: true", "load_in_4bit: true"],
        "zero3": "accelerate_config: zero3",
        "zero3_offload": "accelerate_config: <a DeepSpeed ZeRO-3 file with offload_optimizer_device: cpu and "
                         "offload_param_device: cpu>",
        "vllm_len": "vllm_max_model_length", "vllm_util": "vllm_gpu_memory_utilization",
    },
    "axolotl": {
        "checkpointing": "gradient_checkpointing", "dtype": "bf16", "bf16": "true",
        "micro_batch": "micro_batch_size", "accumulation": "gradient_accumulation_steps",
        "length": "sequence_len", "completion": "trl.max_completion_length", "optimizer": "optimizer",
        "lora": ["adapter: lora", "lora_target_linear: true"],
        "qlora": ["adapter: qlora", "load_in_4bit: true", "lora_target_linear: true"],
        "zero3": "deepspeed: deepspeed_configs/zero3_bf16.json",
        "zero3_offload": "deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json",
        "vllm_len": "vllm.max_model_len", "vllm_util": "vllm.gpu_memory_utilization",
    },
    "verifiers": {
        "checkpointing": "trainer.args.gradient_checkpointing", "dtype": "trainer.args.bf16", "bf16": "true",
        "micro_batch": "trainer.args.micro_batch_size",
        "length": "trainer.args.max_seq_len", "completion": "trainer.args.max_tokens",
        "optimizer": "trainer.args.optim",
        "lora": ["trainer.args.use_lora: true"], "qlora": [],
        "zero3": "accelerate_config: zero3", "zero3_offload": "accelerate_config: zero3",
        "vllm_len": "inference.args.max_model_len", "vllm_util": "inference.args.gpu_memory_utilization",
    },
}  # fmt: skip
