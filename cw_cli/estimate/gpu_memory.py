"""One GPU's memory for a run: the ``--gpu-memory`` flag, the config's fields, or the cluster's nodes.

:func:`resolve_gpu_memory` takes the flag, else ``gpu_memory``, else ``gpu_type`` (cw's table
in :mod:`cw_cli.estimate.gpus`), else the labels of the GPU nodes the trainer could land on (a
callable that lists them; none in a dry run). It says how it chose, or why the memory is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.errors import CwError, Forbidden
from cw_cli.estimate.gpus import (
    MEMORY_LABEL,
    PRODUCT_LABEL,
    GpuMemory,
    gpu_memory_from_node,
    gpu_memory_from_product,
    parse_memory,
)
from cw_cli.estimate.values import as_mapping
from cw_cli.frameworks.distributed import trainer_world
from cw_cli.labels import GPU_RESOURCE

if TYPE_CHECKING:  # types only
    from cw_cli.config.models import ClusterSpec

GIB = 1024**3


class GpuChoice(Struct, frozen=True):
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
    status = as_mapping(node.get("status"))
    value = as_mapping(status.get("allocatable")).get(GPU_RESOURCE)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(as_mapping(node.get("metadata")).get("labels"))


def given_gpu_memory(flag: str | int | None) -> int | None:
    """``--gpu-memory`` in bytes, or None when it is not given (unset or empty): the one reading of
    the flag, for the estimate's early check and :func:`resolve_gpu_memory`.

    Raises:
        ValueError: ``flag`` is not a memory size.
    """
    return None if flag is None or flag == "" else parse_memory(flag)


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
    given = given_gpu_memory(flag)
    if given is not None:
        return GpuChoice(GpuMemory(given, product, "given"), "--gpu-memory")
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
    wanted, _ = trainer_world(cluster)  # GPUs per trainer pod, as the launch reads `gpu`
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
