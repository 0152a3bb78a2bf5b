"""Axolotl's GPU arithmetic, checked before the run: its N-D parallel sizes against the run's
GPUs, and TRL's GRPO batch rule that its `trl:` block feeds."""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.axolotl.pins import GPUS_PER_NODE, PARALLEL_KEYS, count
from cw_cli.frameworks.base import RunContext
from cw_cli.frameworks.distributed import total_processes, trainer_world


def _parallel_product(native: dict[str, Any]) -> tuple[int, list[str]]:
    """The product of the parallel sizes the config sets, and how each was written."""
    product, written = 1, []
    for key in PARALLEL_KEYS:
        size = count(native.get(key))
        if size is None or (key == "sequence_parallel_degree" and "context_parallel_size" in native):
            continue  # the old name of context_parallel_size counts once
        product *= size
        written.append(f"{key}: {size}")
    return product, written


def _layout(total: int) -> tuple[int, int]:
    """(GPUs per node, nodes) for a run of ``total`` GPUs: one node up to 8, whole 8-GPU nodes beyond."""
    if total <= GPUS_PER_NODE or total % GPUS_PER_NODE:
        return total, 1
    return GPUS_PER_NODE, total // GPUS_PER_NODE


def parallel_sizes(native: dict[str, Any]) -> dict[tuple[str, ...], tuple[int, str]]:
    """GPUs and nodes when the config names every dimension (``dp_shard_size`` included).

    Sizes that multiply to 1 say nothing (Axolotl's examples write the defaults out, e.g. the
    falcon-e DPO example run on 4 GPUs): the run keeps cw's sizing.
    """
    total, written = _parallel_product(native)
    if count(native.get("dp_shard_size")) is None or total == 1:
        return {}
    source = " x ".join(written)
    gpus, nodes = _layout(total)
    sizes: dict[tuple[str, ...], tuple[int, str]] = {("gpu",): (gpus, source)}
    if nodes > 1:
        sizes[("nodes",)] = (nodes, source)
    return sizes


def check_parallel_sizes(native: dict[str, Any], context: RunContext) -> None:
    """The run's GPUs must be what Axolotl's parallel sizes multiply to (or, without
    ``dp_shard_size``, which takes the GPUs left, a multiple of them)."""
    product, written = _parallel_product(native)
    if product == 1:
        return
    gpus = total_processes(context)
    per_node_now, nodes_now = trainer_world(context.cluster)
    where = f"{per_node_now} GPU(s) x {nodes_now} node(s) = {gpus}"
    sizes = " x ".join(written)
    per_node, nodes = _layout(product)
    if count(native.get("dp_shard_size")) is not None and gpus != product:
        raise ValueError(f"{sizes} = {product} GPUs, but the run has {where}; run it with --gpu {per_node} --nodes {nodes}")
    if gpus % product:
        raise ValueError(
            f"{sizes} needs a multiple of {product} GPUs (dp_shard_size takes the GPUs left), but the run has "
            f"{where}; run it with --gpu {per_node} --nodes {nodes}, or change the sizes"
        )


def check_grpo_batch(native: dict[str, Any], processes: int) -> None:
    """TRL's GRPO batch rule (GRPOConfig.__post_init__, which Axolotl's `trl:` block feeds),
    checked before the run rather than in the pod.

    The generation batch (``trl.generation_batch_size``, else micro_batch_size x trainer processes
    x ``trl.steps_per_generation`` or gradient_accumulation_steps) must be a multiple of
    ``trl.num_generations``; an explicit one must also be a multiple of micro_batch_size x
    processes (the global batch).
    """
    trl: dict[str, Any] = native["trl"] if isinstance(native.get("trl"), dict) else {}
    groups = count(trl.get("num_generations"))
    if groups is None:
        return
    micro = count(native.get("micro_batch_size")) or 1
    steps = count(trl.get("steps_per_generation")) or count(native.get("gradient_accumulation_steps")) or 1
    explicit = count(trl.get("generation_batch_size"))
    global_batch = micro * processes
    if explicit is not None and explicit % global_batch:
        raise ValueError(
            f"`trl.generation_batch_size: {explicit}` must be a multiple of micro_batch_size x trainer processes "
            f"({micro} x {processes} = {global_batch})"
        )
    batch = explicit or global_batch * steps
    if batch % groups:
        source = ("`trl.generation_batch_size`" if explicit else
                  f"micro_batch_size x trainer processes x steps per generation ({micro} x {processes} x {steps})")
        fits = next((n for n in range(processes, 0, -1) if (explicit or micro * n * steps) % groups == 0), None)
        fix = f"run on {fits} GPU(s) (--gpu {fits}) or " if fits and fits != processes and not explicit else ""
        raise ValueError(
            f"{source} = {batch} must be a multiple of `trl.num_generations: {groups}` (TRL's rule); "
            f"{fix}change `gradient_accumulation_steps` or `trl.num_generations`"
        )
