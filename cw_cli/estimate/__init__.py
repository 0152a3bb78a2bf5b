"""Pre-launch estimates (issue 13): parameter counts and per-GPU memory.

Everything here is pure and cheap: no torch or transformers import at module level, so the
launch path can use it without slowing down.
"""

from cw_cli.estimate.fit import RoleVerdict, Suggestion, Verdict, fits, suggestions
from cw_cli.estimate.gpus import (
    GpuMemory,
    gpu_memory_from_node,
    gpu_memory_from_nodes,
    gpu_memory_from_product,
    parse_memory,
)
from cw_cli.estimate.memory import Estimate, TrainerMemory, TrainingSetup, estimate_memory
from cw_cli.estimate.params import (
    ParamCounts,
    UnknownArchitectureError,
    count_parameters,
    lora_trainable_parameters,
)
from cw_cli.estimate.vllm import VllmMemory, VllmSetup, kv_bytes_per_token, vllm_memory

__all__ = [
    "Estimate",
    "GpuMemory",
    "ParamCounts",
    "RoleVerdict",
    "Suggestion",
    "TrainerMemory",
    "TrainingSetup",
    "UnknownArchitectureError",
    "Verdict",
    "VllmMemory",
    "VllmSetup",
    "count_parameters",
    "estimate_memory",
    "fits",
    "gpu_memory_from_node",
    "gpu_memory_from_nodes",
    "gpu_memory_from_product",
    "kv_bytes_per_token",
    "lora_trainable_parameters",
    "parse_memory",
    "suggestions",
    "vllm_memory",
]
