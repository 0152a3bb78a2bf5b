"""What cw pins of verifiers and how its vf-rl config reads: the image and package stack, the
server's ports, the flags cw manages, and the sections of the file."""

from __future__ import annotations

from typing import Any

VERIFIERS_VERSION = "0.1.9.post3"
#: vLLM 0.10.2 ships torch 2.8, the versions verifiers' `rl` extra asks for (vllm<0.11, torch<2.9).
VERIFIERS_IMAGE = "vllm/vllm-openai:v0.10.2"
#: verifiers' `rl` extra, pinned; the image already has vLLM and torch (but no accelerate).
VERIFIERS_STACK = (
    f"verifiers=={VERIFIERS_VERSION}",
    "accelerate==1.10.1",
    "transformers>=4.56.2,<4.58",
    "peft==0.17.1",
    "liger-kernel==0.6.2",
    "deepspeed==0.17.6",
    "flash-attn==2.8.3",
    "wandb==0.22.2",
)
VLLM_PORT = 8000
#: verifiers' weight sync: the trainer asks vf-vllm to open an NCCL rendezvous (a TCPStore) bound
#: to <vllm_server_host>:51216 and connects there. The server pod can bind that name only if it
#: resolves to the pod's own IP, hence a headless Service.
WEIGHT_SYNC_PORT = 51216
CONFIG_NAME = "config.toml"
#: vf-vllm flags cw derives from `services.server` (name in `inference.args` -> where to set it);
#: written with the value cw uses they are accepted (vf-rl's own files write some of them).
SERVER_MANAGED_ARGS = {
    "model": "`model`",
    "host": "nothing (cw listens on 0.0.0.0)",
    "port": "`services.server.port`",
    "tensor_parallel_size": "`services.server.tensor_parallel_size`",
    "data_parallel_size": "`inference.gpus` (data parallel = GPUs / tensor parallel)",
}
#: verifiers' CLI that installs an environment from its hub (what vf-rl runs before vf-train).
PRIME_CLI = "prime==0.18.0"


def mapping_at(native: dict[str, Any], *path: str) -> dict[str, Any]:
    """The mapping at ``path`` in the config (``{}`` where there is none)."""
    if path and path[0] == "env":  # vf-rl's [env], whichever spelling the file uses
        path = ("environment" if "environment" in native else "env", *path[1:])
    node: Any = native
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def trainer_args(native: dict[str, Any]) -> dict[str, Any]:
    """``trainer.args``: vf-train's RLConfig, a TrainingArguments (``{}`` where there is none)."""
    trainer = native.get("trainer")
    args = trainer.get("args") if isinstance(trainer, dict) else None
    return args if isinstance(args, dict) else {}
