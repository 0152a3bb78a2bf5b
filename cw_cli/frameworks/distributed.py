"""Arguments for `accelerate launch` (and CLIs that pass them through, like `trl`)."""

from __future__ import annotations

from cw_cli.frameworks.base import RunContext

#: Environment variables the renderer sets in every multi-node trainer pod.
NODE_RANK_ENV = "CW_NODE_RANK"
MASTER_ADDR_ENV = "CW_MASTER_ADDR"
MASTER_PORT_ENV = "CW_MASTER_PORT"
NUM_NODES_ENV = "CW_NUM_NODES"
MASTER_PORT = 29500


def total_processes(context: RunContext) -> int:
    """Trainer processes of the run: one per GPU (at least one per node) on every node."""
    return max(1, context.gpus) * context.cluster.nodes


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
