"""vLLM engines beside a trainer: weights, KV cache and what fits in ``gpu_memory_utilization``.

vLLM takes ``gpu_memory_utilization`` × GPU memory, loads the weights (split over tensor
parallel ranks), profiles one forward of ``max_num_batched_tokens`` and fills the rest with KV
cache blocks; it refuses to start when one ``max_model_len`` sequence does not fit.
"""

from __future__ import annotations

import math

from msgspec import Struct

from cw_cli.estimate.shapes import ModelShape

GIB = 1024**3

# vLLM outside its KV cache: CUDA context, NCCL and CUDA graphs (captured for max_num_seqs).
VLLM_BASE_BYTES = int(1.5 * GIB)

_DTYPE_BYTES = {"fp32": 4, "float32": 4, "float": 4, "bf16": 2, "bfloat16": 2, "fp16": 2,
                "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def _bytes(name: str) -> int:
    try:
        return _DTYPE_BYTES[name.lower()]
    except KeyError as err:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(_DTYPE_BYTES)})") from err


class VllmSetup(Struct, frozen=True):
    """A vLLM engine beside the trainer (TRL's ``use_vllm``).

    Attributes:
        mode: ``"server"`` (its own GPUs, ``trl vllm-serve``) or ``"colocate"`` (an engine
            inside each trainer process, on the trainer's GPUs).
        gpu_memory_utilization: Fraction of each GPU vLLM takes (vLLM's default 0.9; TRL's
            colocate default 0.3).
        tensor_parallel: GPUs one engine spans.
        max_model_len: Longest sequence; None means the model's ``max_position_embeddings``.
        weight_dtype: Dtype vLLM loads; None means the checkpoint's ``torch_dtype``.
        kv_cache_dtype: ``"auto"`` (the weights' dtype) or ``"fp8"``.
        max_num_seqs: vLLM's ``max_num_seqs`` (its sampler and CUDA graphs scale with it).
        max_num_batched_tokens: Tokens in vLLM's profiling forward (its activation peak).
        enable_sleep_mode: Colocated engine frees its memory while the trainer trains.
    """

    mode: str = "server"
    gpu_memory_utilization: float = 0.9
    tensor_parallel: int = 1
    max_model_len: int | None = None
    weight_dtype: str | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_sleep_mode: bool = False


class VllmMemory(Struct, frozen=True):
    """Per-GPU bytes of a vLLM engine (``role="vllm"``).

    Attributes:
        role: Always ``"vllm"``.
        mode: ``"server"`` or ``"colocate"``.
        tensor_parallel: GPUs one engine spans.
        gpu_memory_utilization: Fraction of the GPU vLLM takes.
        weights_bytes: Weights per GPU (the model / tensor parallel).
        overhead_bytes: Non-KV memory: context, CUDA graphs, activation and sampler peak.
        kv_bytes_per_token: KV cache per token per GPU: 2 × layers × kv_heads/TP × head_dim
            × dtype bytes.
        max_model_len: Longest sequence the engine accepts.
        min_per_gpu_bytes: What vLLM needs to start: weights, overhead and the KV cache of one
            ``max_model_len`` sequence.
        kv_cache_bytes: KV cache budget per GPU (utilization × GPU − weights − overhead);
            None without a GPU size.
        kv_cache_tokens: Tokens that budget holds (None without a GPU size).
        max_sequences: Sequences of ``max_model_len`` that fit at once (None without a GPU).
        generation_tokens: Tokens one generation round asks of this engine (GRPO), 0 when
            unknown.
        per_gpu_bytes: What the engine takes: utilization × GPU memory, or
            ``min_per_gpu_bytes`` without a GPU size.
        sleep_mode: A colocated engine releases its memory while the trainer trains.
    """

    role: str
    mode: str
    tensor_parallel: int
    gpu_memory_utilization: float
    weights_bytes: int
    overhead_bytes: int
    kv_bytes_per_token: int
    max_model_len: int
    min_per_gpu_bytes: int
    kv_cache_bytes: int | None
    kv_cache_tokens: int | None
    max_sequences: int | None
    generation_tokens: int
    per_gpu_bytes: int
    sleep_mode: bool = False


def kv_bytes_per_token(shape: ModelShape, dtype_bytes: int, tensor_parallel: int = 1) -> int:
    """KV cache bytes per token on one GPU: 2 (K and V) × layers × kv heads × head size.

    Args:
        shape: The model's dimensions.
        dtype_bytes: Bytes per cached element.
        tensor_parallel: GPUs the heads are split over (a head is replicated when there are
            fewer KV heads than GPUs).
    """
    heads = math.ceil(shape.kv_heads / tensor_parallel)
    return 2 * shape.layers * heads * shape.head_dim * dtype_bytes


def vllm_memory(v: VllmSetup, shape: ModelShape, parameters: int,
                gpu_memory_bytes: int | None = None, generation_sequences: int = 0,
                sequence_tokens: int = 0, world_size: int = 1) -> VllmMemory:
    """Per-GPU memory of a vLLM engine serving the model.

    Args:
        v: The engine's settings.
        shape: The model's dimensions.
        parameters: The model's parameter count.
        gpu_memory_bytes: Memory of one GPU; without it, no KV budget is derived.
        generation_sequences: Sequences one generation round asks for (GRPO), all engines.
        sequence_tokens: Tokens per such sequence (prompt + completion).
        world_size: Trainer processes (colocated engines: one per tensor-parallel group).

    Returns:
        The engine's breakdown.
    """
    tp = max(v.tensor_parallel, 1)
    wb = _bytes(v.weight_dtype or shape.dtype)
    kvb = wb if v.kv_cache_dtype == "auto" else _bytes(v.kv_cache_dtype)
    weights = parameters * wb / tp
    # profiling forward of max_num_batched_tokens (hidden, q/k/v, gate and up outputs) and the
    # sampler's fp32 logits and probabilities for max_num_seqs
    width = shape.hidden + shape.q_dim + 2 * shape.kv_dim
    width += 2 * (shape.top_k * shape.expert_intermediate if shape.experts else shape.intermediate)
    overhead = (VLLM_BASE_BYTES + v.max_num_batched_tokens * width * wb / tp
                + v.max_num_seqs * shape.vocab * 4 * 2)
    per_token = kv_bytes_per_token(shape, kvb, tp)
    max_len = v.max_model_len or shape.max_position_embeddings
    minimum = weights + overhead + max_len * per_token
    kv_budget = kv_tokens = max_seqs = None
    if gpu_memory_bytes:
        kv_budget = int(v.gpu_memory_utilization * gpu_memory_bytes - weights - overhead)
        kv_tokens = max(kv_budget, 0) // per_token
        max_seqs = kv_tokens // max_len
    generation_tokens = 0
    if generation_sequences:
        # colocated: every group of tensor_parallel trainer processes has its own engine
        engines = world_size // tp if v.mode == "colocate" else 1
        seqs = math.ceil(generation_sequences / max(engines, 1))
        generation_tokens = seqs * sequence_tokens
    taken = int(v.gpu_memory_utilization * gpu_memory_bytes) if gpu_memory_bytes else int(minimum)
    return VllmMemory(
        role="vllm",
        mode=v.mode,
        tensor_parallel=tp,
        gpu_memory_utilization=v.gpu_memory_utilization,
        weights_bytes=int(weights),
        overhead_bytes=int(overhead),
        kv_bytes_per_token=per_token,
        max_model_len=max_len,
        min_per_gpu_bytes=int(minimum),
        kv_cache_bytes=kv_budget,
        kv_cache_tokens=kv_tokens,
        max_sequences=max_seqs,
        generation_tokens=generation_tokens,
        per_gpu_bytes=taken,
        sleep_mode=v.enable_sleep_mode and v.mode == "colocate",
    )
