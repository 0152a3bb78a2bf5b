"""Pre-launch estimates (issue 13): parameter counts and per-GPU memory.

Everything here is pure and cheap: no torch or transformers import at module level, so the
launch path can use it without slowing down. The names below load on first use (PEP 562): the
launch path imports :mod:`cw_cli.estimate.from_config` (and the small readers it uses), and
loads the memory model only when the model's config.json is found.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cw_cli.estimate.fit import RoleVerdict, Suggestion, Verdict, fits, suggestions
    from cw_cli.estimate.from_config import RunEstimate, estimate_run
    from cw_cli.estimate.gpu_memory import GpuChoice, resolve_gpu_memory
    from cw_cli.estimate.gpus import (
        GpuMemory,
        gpu_memory_from_node,
        gpu_memory_from_nodes,
        gpu_memory_from_product,
        parse_memory,
    )
    from cw_cli.estimate.memory import Estimate, TrainerMemory, TrainingSetup, estimate_memory
    from cw_cli.estimate.model_config import ModelConfigLookup, find_model_config
    from cw_cli.estimate.native_setup import RunSetup
    from cw_cli.estimate.params import (
        ParamCounts,
        UnknownArchitectureError,
        count_parameters,
        lora_trainable_parameters,
    )
    from cw_cli.estimate.vllm import VllmMemory, VllmSetup, kv_bytes_per_token, vllm_memory
    from cw_cli.estimate.words import ConfigWords

#: Public name -> the module that defines it.
_WHERE = {
    **dict.fromkeys(("RoleVerdict", "Suggestion", "Verdict", "fits", "suggestions"), "fit"),
    **dict.fromkeys(("RunEstimate", "estimate_run"), "from_config"),
    **dict.fromkeys(("GpuChoice", "resolve_gpu_memory"), "gpu_memory"),
    **dict.fromkeys(("ModelConfigLookup", "find_model_config"), "model_config"),
    "RunSetup": "native_setup",
    "ConfigWords": "words",
    **dict.fromkeys(("GpuMemory", "gpu_memory_from_node", "gpu_memory_from_nodes", "gpu_memory_from_product",
                     "parse_memory"), "gpus"),  # fmt: skip
    **dict.fromkeys(("Estimate", "TrainerMemory", "TrainingSetup", "estimate_memory"), "memory"),
    **dict.fromkeys(("ParamCounts", "UnknownArchitectureError", "count_parameters", "lora_trainable_parameters"),
                    "params"),  # fmt: skip
    **dict.fromkeys(("VllmMemory", "VllmSetup", "kv_bytes_per_token", "vllm_memory"), "vllm"),
}

__all__ = [
    "ConfigWords",
    "Estimate",
    "GpuChoice",
    "GpuMemory",
    "ModelConfigLookup",
    "ParamCounts",
    "RoleVerdict",
    "RunEstimate",
    "RunSetup",
    "Suggestion",
    "TrainerMemory",
    "TrainingSetup",
    "UnknownArchitectureError",
    "Verdict",
    "VllmMemory",
    "VllmSetup",
    "count_parameters",
    "estimate_memory",
    "estimate_run",
    "find_model_config",
    "fits",
    "gpu_memory_from_node",
    "gpu_memory_from_nodes",
    "gpu_memory_from_product",
    "kv_bytes_per_token",
    "lora_trainable_parameters",
    "parse_memory",
    "resolve_gpu_memory",
    "suggestions",
    "vllm_memory",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
