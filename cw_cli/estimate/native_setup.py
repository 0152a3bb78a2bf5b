"""What every framework's config reader shares: the neutral :class:`RunSetup` and helpers.

A framework describes its training setup itself (``BaseTrainingFramework.training_setup``, e.g.
``cw_cli/frameworks/trl/setup.py``): it reads its own config into a
:class:`~cw_cli.estimate.memory.TrainingSetup` and an optional
:class:`~cw_cli.estimate.vllm.VllmSetup` and returns them as a :class:`RunSetup`. The helpers
here read what is not one framework's own: dtype and attention names, PEFT's LoRA targets, a
vLLM server pod from cw's ``services.server`` (DeepSpeed, Accelerate and FSDP files are
:mod:`cw_cli.estimate.sharding`'s). Pure apart from reading files; nothing here knows a framework
by name (the mapping of each built-in is documented in docs/estimate.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.estimate.values import as_count, as_number
from cw_cli.labels import SERVER

if TYPE_CHECKING:  # types only: reading a config never loads the memory model
    from cw_cli.config.models import ClusterSpec, ServiceResources
    from cw_cli.estimate.memory import TrainingSetup
    from cw_cli.estimate.vllm import VllmSetup

ALL_LINEAR = "all-linear"  # PEFT's shorthand (cw_cli.estimate.params.ALL_LINEAR)

# PEFT's default LoRA targets when a config names none (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
_PEFT_DEFAULT_TARGETS = {"gpt_neox": ("query_key_value",), "phi3": ("qkv_proj",)}
_QV = ("q_proj", "v_proj")
# Modules whose full training (`modules_to_save`) means the embedding / LM head are trained.
_EMBEDDING_MODULES = {"embed_tokens", "lm_head", "embed_in", "embed_out", "wte", "word_embeddings"}


class RunSetup(Struct, frozen=True):
    """A run's training and vLLM setup as its framework reads it from the config.

    What ``BaseTrainingFramework.training_setup`` returns; the estimate sizes it.

    Attributes:
        setup: The trainer's setup.
        vllm: The vLLM engine (a server pod or colocated in the trainer), or None.
        notes: Assumptions and what was not read, one short sentence each.
        unmodelled: Settings of the config the memory model does not count (each a short
            phrase): the estimate is shown but never refuses a launch.
    """

    setup: TrainingSetup
    vllm: VllmSetup | None = None
    notes: tuple[str, ...] = ()
    unmodelled: tuple[str, ...] = ()


def dtype_name(value: Any, model_config: Mapping[str, Any] | None, default: str) -> str:
    """A dtype name the memory model knows (``fp32``, ``bf16``, ``fp16``), from a config value."""
    if value is None:
        return default
    text = str(value).lower().removeprefix("torch.")
    if text == "auto":
        text = str((model_config or {}).get("torch_dtype") or (model_config or {}).get("dtype") or "bfloat16")
        text = text.lower().removeprefix("torch.")
    return {"float32": "fp32", "float": "fp32", "fp32": "fp32", "bfloat16": "bf16", "bf16": "bf16",
            "float16": "fp16", "half": "fp16", "fp16": "fp16"}.get(text, default)  # fmt: skip


def attention_name(value: Any) -> str:
    """The memory model's attention kernel (``flash_attention_2``, ``eager``, ``sdpa``) from a config value."""
    text = str(value or "sdpa").lower()
    if "flash" in text:
        return "flash_attention_2"
    return "eager" if text == "eager" else "sdpa"


def lora_targets(value: Any, model_config: Mapping[str, Any] | None) -> tuple[tuple[str, ...] | str, bool]:
    """LoRA targets from a config value; (PEFT's default for the model, True) when it names none."""
    if isinstance(value, str) and value:
        return (ALL_LINEAR if value == ALL_LINEAR else (value,)), False
    if isinstance(value, (list, tuple)) and value:
        names = tuple(str(v) for v in value)
        return (ALL_LINEAR if ALL_LINEAR in names else names), False
    model_type = str((model_config or {}).get("model_type", ""))
    return _PEFT_DEFAULT_TARGETS.get(model_type, _QV), True


def trains_embeddings(value: Any) -> bool:
    """Whether PEFT's ``modules_to_save`` (a name or a list) trains the embedding or the LM head."""
    names = [value] if isinstance(value, str) else list(value or []) if isinstance(value, (list, tuple)) else []
    return any(str(name).rsplit(".", 1)[-1] in _EMBEDDING_MODULES for name in names)


def _server_service(cluster: ClusterSpec) -> ServiceResources | None:
    """``services.server``, if the config has one."""
    return cluster.services.get(SERVER)  # type: ignore[call-overload]  # SERVER is the key's Literal "server", typed str


def _server_args(cluster: ClusterSpec) -> dict[str, str]:
    """`--flag value` / `--flag=value` pairs of ``services.server.args`` (they come last, so they win)."""
    spec = _server_service(cluster)
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


def server_vllm(cluster: ClusterSpec, settings: Mapping[str, Any], weight_dtype: str | None = None) -> VllmSetup:
    """A vLLM server pod: its settings, then ``services.server`` (tensor parallelism, extra args).

    Args:
        cluster: cw's fields (``services.server``: its tensor parallelism, and its ``args``,
            which come last on the server's command line and so win).
        settings: What the framework's config says of the engine, under vLLM's own names
            (``gpu_memory_utilization``, ``max_model_len``, ``dtype``, ...); unset ones left out.
        weight_dtype: The weights' dtype when the settings name none (None: the checkpoint's).
    """
    from cw_cli.estimate.vllm import VllmSetup

    spec = _server_service(cluster)
    merged = {**settings, **_server_args(cluster)}
    max_len = merged.get("max_model_len")
    dtype = merged.get("dtype", weight_dtype)
    return VllmSetup(
        gpu_memory_utilization=as_number(merged.get("gpu_memory_utilization"), 0.9),
        tensor_parallel=spec.tensor_parallel_size if spec and spec.tensor_parallel_size else 1,
        max_model_len=as_count(max_len, 0) or None,
        weight_dtype=None if dtype in (None, "auto") else dtype_name(dtype, None, "bf16"),
        kv_cache_dtype="fp8" if str(merged.get("kv_cache_dtype", "auto")).startswith("fp8") else "auto",
        max_num_seqs=as_count(merged.get("max_num_seqs"), 256),
        max_num_batched_tokens=as_count(merged.get("max_num_batched_tokens"), 8192),
    )


