"""Arguments for `accelerate launch` (and CLIs that pass them through, like `trl`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cw_cli.frameworks.base import RunContext

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec

#: Environment variables the renderer sets in every multi-node trainer pod.
NODE_RANK_ENV = "CW_NODE_RANK"
MASTER_ADDR_ENV = "CW_MASTER_ADDR"
MASTER_PORT_ENV = "CW_MASTER_PORT"
NUM_NODES_ENV = "CW_NUM_NODES"
MASTER_PORT = 29500


def trainer_world(cluster: ClusterSpec) -> tuple[int, int]:
    """(trainer processes per node, nodes): one process per GPU, at least one per node.

    The one reading of cw's GPU count (``gpu``, which the loader filled from the flag, the
    native config's own count or the framework's default) that the launch command and the
    memory estimate share.
    """
    return max(1, cluster.gpu or 0), cluster.nodes


def total_processes(context: RunContext) -> int:
    """Trainer processes of the run: one per GPU (at least one per node) on every node."""
    per_node, nodes = trainer_world(context.cluster)
    return per_node * nodes


def accelerate_args(context: RunContext, *, distributed_mode: bool = True) -> list[str]:
    """Process-count and rendezvous flags for the trainer, derived from ``--gpu`` and ``--nodes``.

    The values that differ per pod are Kubernetes ``$(VAR)`` references, expanded by the kubelet
    from the pod's environment.

    Args:
        context: The run.
        distributed_mode: Add ``--multi_gpu`` when more than one process runs; pass False when
            another flag (DeepSpeed, FSDP, an accelerate config) already picks the mode.
    """
    total = total_processes(context)
    args = ["--num_processes", str(total)]
    # Without a mode, accelerate goes distributed only when it sees >1 GPU on its own node.
    if distributed_mode and total > 1:
        args.append("--multi_gpu")
    if context.cluster.nodes > 1:
        args += [
            "--num_machines",
            str(context.cluster.nodes),
            "--machine_rank",
            f"$({NODE_RANK_ENV})",
            "--main_process_ip",
            f"$({MASTER_ADDR_ENV})",
            "--main_process_port",
            f"$({MASTER_PORT_ENV})",
        ]
    return args
