"""GPU memory from a product name, a size string, or Kubernetes node labels.

NVIDIA's GPU feature discovery labels each GPU node with ``nvidia.com/gpu.memory`` (MiB, what
the driver reports) and ``nvidia.com/gpu.product`` (e.g. ``NVIDIA-H100-80GB-HBM3``; MIG
slices add ``-MIG-1g.10gb``). The memory label wins; the product is looked up in a small table
of what ``nvidia-smi`` reports as total memory for each product. Pure functions over plain
dicts (a node as ``kubectl get node -o json`` prints it, or the Kubernetes client's
``to_dict()``): no cluster access here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import Struct

MIB = 1024**2
MEMORY_LABEL = "nvidia.com/gpu.memory"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"

# (tokens that must all appear in the product name, total memory in MiB as nvidia-smi
# reports it). First match wins, so specific entries come before general ones.
_PRODUCTS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("gb200",), 189_471),
    (("b200",), 183_359),
    (("h200",), 143_771),
    (("gh200",), 97_871),
    (("h100", "nvl"), 95_830),
    (("h100", "94gb"), 95_830),
    (("h100",), 81_559),
    (("h800",), 81_559),
    (("a100", "80gb"), 81_920),
    (("a100",), 40_960),
    (("a800", "80gb"), 81_920),
    (("a800",), 40_960),
    (("l40s",), 46_068),
    (("l40",), 46_068),
    (("l20",), 46_068),
    (("a40",), 46_068),
    (("a10g",), 23_028),
    (("a10",), 23_028),
    (("l4",), 23_034),
    (("t4",), 15_360),
    (("v100", "32gb"), 32_768),
    (("v100",), 16_384),
    (("a6000",), 49_140),
    (("6000", "ada"), 49_140),
    (("rtx", "pro", "6000"), 97_887),
    (("4090",), 24_564),
    (("3090",), 24_576),
)


class GpuMemory(Struct, frozen=True):
    """One GPU's memory and where the figure came from.

    Attributes:
        bytes: Memory of one GPU (or MIG slice).
        product: The product name, when known.
        source: ``"label"`` (``nvidia.com/gpu.memory``), ``"product"`` (the table),
            ``"mig"`` (the MIG profile in the product name) or ``"given"``.
    """

    bytes: int
    product: str | None
    source: str


def _tokens(product: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9.]+", product.lower()) if t]


def gpu_memory_from_product(product: str) -> GpuMemory | None:
    """Memory of a GPU product, e.g. ``NVIDIA-H100-80GB-HBM3`` or ``Tesla T4``.

    A MIG slice (``...-MIG-3g.40gb``) is as large as its profile says.

    Args:
        product: The product name (GFD label value, ``nvidia-smi`` name, or a ``gpu_type``).

    Returns:
        The memory, or None for an unknown product.
    """
    mig = re.search(r"mig-\d+g\.(\d+)gb", product.lower())
    if mig:
        return GpuMemory(int(mig.group(1)) * 1024 * MIB, product, "mig")
    tokens = _tokens(product)
    for needed, mib in _PRODUCTS:
        if all(any(t == n or (n.isdigit() and n in t) for t in tokens) for n in needed):
            return GpuMemory(mib * MIB, product, "product")
    return None


_UNITS = {
    "": 1024**3, "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}


def parse_memory(text: str | int | float) -> int:
    """Bytes from a size such as ``80GB``, ``80Gi``, ``81559MiB`` or ``80`` (GiB).

    Decimal units (GB, MB, G) are powers of 1000, binary ones (GiB, Gi, MiB) powers of 1024; a
    bare number means GiB.

    Raises:
        ValueError: Not a size.
    """
    if isinstance(text, (int, float)):
        return int(text * 1024**3)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a memory size: {text!r} (e.g. 80GB, 80Gi, 81559MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    meta = node.get("metadata") or {}
    return meta.get("labels") or {}


def gpu_memory_from_node(node: Mapping[str, Any]) -> GpuMemory | None:
    """One GPU's memory on a node, from its GPU feature discovery labels.

    Args:
        node: A Kubernetes node as a dict (``metadata.labels`` is read).

    Returns:
        The memory, or None when the node has neither label (or an unknown product).
    """
    labels = _labels(node)
    product = labels.get(PRODUCT_LABEL)
    memory = labels.get(MEMORY_LABEL)
    if memory and str(memory).isdigit():
        return GpuMemory(int(memory) * MIB, product, "label")
    if product:
        return gpu_memory_from_product(product)
    return None


def gpu_memory_from_nodes(
    nodes: Iterable[Mapping[str, Any]], product: str | None = None
) -> GpuMemory | None:
    """The smallest GPU memory over the GPU nodes a run may land on.

    Args:
        nodes: Kubernetes nodes as dicts.
        product: Only nodes whose ``nvidia.com/gpu.product`` contains this (case-insensitive),
            e.g. the run's ``gpu_type``.

    Returns:
        The smallest figure (a run must fit wherever it is scheduled), or None when no node
        says.
    """
    found = []
    for node in nodes:
        labels = _labels(node)
        if product and product.lower() not in str(labels.get(PRODUCT_LABEL, "")).lower():
            continue
        mem = gpu_memory_from_node(node)
        if mem is not None:
            found.append(mem)
    return min(found, key=lambda m: m.bytes) if found else None
