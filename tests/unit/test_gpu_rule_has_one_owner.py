"""The estimate reads the GPU settings in one place each: ``--gpu-memory`` through
``gpu_memory.given_gpu_memory`` (the early check in ``from_config`` and the choice in
``resolve_gpu_memory``), the trainer's GPUs per pod through ``frameworks.distributed.trainer_world``
(the launch's reading, which the node filter of ``resolve_gpu_memory`` follows)."""

from __future__ import annotations

import ast

import pytest
from unit_helpers import REPO

from cw_cli.config.models import ClusterSpec
from cw_cli.estimate.gpu_memory import given_gpu_memory, resolve_gpu_memory
from cw_cli.estimate.gpus import parse_memory

ESTIMATE = REPO / "cw_cli" / "estimate"
GIB = 1024**3


def _node(name: str, gpus: int, memory_mib: int) -> dict:
    labels = {"nvidia.com/gpu.memory": str(memory_mib), "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def _calls(path, name: str) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == name]  # fmt: skip


def test_the_gpu_memory_flag_is_read_by_one_function():
    assert given_gpu_memory(None) is None and given_gpu_memory("") is None
    assert given_gpu_memory("80GB") == parse_memory("80GB")
    with pytest.raises(ValueError):
        given_gpu_memory("eighty")
    # nothing else in the estimate parses the flag (from_config's early check used to, again)
    assert _calls(ESTIMATE / "from_config.py", "parse_memory") == []
    assert _calls(ESTIMATE / "from_config.py", "given_gpu_memory")
    assert _calls(ESTIMATE / "gpu_memory.py", "given_gpu_memory")


def test_the_node_filter_counts_the_trainers_gpus_as_the_launch_does():
    # Nodes with fewer allocatable GPUs than a trainer pod takes are not where it lands; gpu: 0 is
    # one process (trainer_world), so any GPU node is.
    nodes = [_node("wide", 2, 81_559), _node("narrow", 1, 200_000)]
    two = resolve_gpu_memory(None, ClusterSpec(gpu=2), lambda: nodes)
    assert two.source == "nodes" and two.memory is not None and two.memory.bytes == 81_559 * 1024**2
    none = resolve_gpu_memory(None, ClusterSpec(gpu=0), lambda: nodes)
    assert none.memory is not None and none.memory.bytes == 200_000 * 1024**2
    # the reading is trainer_world's, not a copy of it
    source = (ESTIMATE / "gpu_memory.py").read_text(encoding="utf-8")
    assert "trainer_world(cluster)" in source and "cluster.gpu or 0" not in source
