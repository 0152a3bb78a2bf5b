"""The parameters of a model grouped by what they are, for dtypes, sharding and quantisation.

The memory model (:mod:`cw_cli.estimate.memory`) stores, shards and quantises parameters by
kind: the decoder's linears (what bitsandbytes quantises and tensor parallelism splits), the
fused experts, the embedding and the LM head, and the largest module or layer that ZeRO-3 or
FSDP gathers at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from cw_cli.estimate.architectures import Architecture
from cw_cli.estimate.params import ALL_LINEAR
from cw_cli.estimate.shapes import ModelShape, tied_embeddings


class ParamGroups(Struct, frozen=True):
    """Parameter counts by what they are, for dtypes and sharding."""

    total: int
    linear: int  # decoder nn.Linear weights (what bitsandbytes quantises)
    matmul: int  # everything multiplied in a matmul under autocast: linears, routers, head
    experts: int  # fused routed experts (3-D tensors)
    embedding: int
    lm_head: int
    largest_module: int  # DeepSpeed's "largest layer": the biggest single module
    largest_layer: int  # the biggest decoder layer (FSDP's wrap unit)
    lora_experts: bool  # PEFT's all-linear adapts fused experts
    lora_experts_per_rank: int = 0  # their adapter parameters per unit of rank


def param_groups(config: Mapping[str, Any], arch: Architecture | None, total: int,
                 shape: ModelShape, targets: frozenset[str]) -> ParamGroups:
    """Group a model's ``total`` parameters (``targets``: the LoRA targets, empty without LoRA)."""
    embed = shape.vocab * shape.hidden
    head = 0 if tied_embeddings(config) else embed
    if arch is None:  # unknown family: a Llama-like reading of the config
        per_layer = (2 * shape.hidden * shape.q_dim + 2 * shape.hidden * shape.kv_dim
                     + 3 * shape.hidden * shape.intermediate)
        linear = per_layer * shape.layers
        return ParamGroups(total, linear, linear + embed, 0, embed, head,
                           max(embed, shape.hidden * shape.intermediate), per_layer, False)
    linear = sum(lin.in_features * lin.out_features for layer in arch.layers
                 for lin in layer.linears)
    experts = sum(layer.experts_total for layer in arch.layers)
    routers = sum(shape.experts * shape.hidden for i in range(len(arch.layers))
                  if i in shape.moe_layers)
    biggest_linear = max(
        (lin.parameters for layer in arch.layers for lin in layer.linears), default=0
    )
    biggest_experts = max((layer.experts_total for layer in arch.layers), default=0)
    lora_experts = ALL_LINEAR in targets and any(layer.all_linear_per_rank for layer in arch.layers)
    return ParamGroups(
        total=total,
        linear=linear,
        matmul=linear + routers + embed,  # the head's matmul uses V·H whether tied or not
        experts=experts,
        embedding=embed,
        lm_head=head,
        largest_module=max(embed, biggest_linear, biggest_experts),
        largest_layer=max(layer.total for layer in arch.layers),
        lora_experts=lora_experts,
        lora_experts_per_rank=sum(layer.all_linear_per_rank for layer in arch.layers)
        if lora_experts else 0,
    )


def score_head(p: ParamGroups, shape: ModelShape, labels: int) -> ParamGroups:
    """A sequence / token classifier (reward and process reward models): the vocabulary-sized LM
    head is replaced by a ``hidden x labels`` score layer (AutoModelFor*Classification)."""
    score = shape.hidden * labels
    total = p.total - p.lm_head + score
    return replace(p, total=total, matmul=p.matmul - p.embedding + score, lm_head=score)


def tensor_parallel_share(p: ParamGroups, tp: int) -> float:
    """The share of the parameters one tensor-parallel rank holds.

    transformers' TP plans shard every decoder linear, the fused experts and the LM head
    (column- or row-wise), and transformers 5 adds the input embedding (row-wise over the
    vocabulary) to every plan; norms and routers stay whole on every rank. Measured on 2 gloo
    ranks: tests/training/test_tensor_parallel_shapes.py.
    """
    if tp <= 1 or p.total <= 0:
        return 1.0
    sharded = min(p.total, p.linear + p.experts + p.lm_head + p.embedding)
    return (p.total - sharded * (1 - 1 / tp)) / p.total
