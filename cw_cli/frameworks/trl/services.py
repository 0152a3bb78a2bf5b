"""TRL's servers: a vLLM generation server for GRPO and RLOO in server mode, and a reward-model
server when ``services.reward.model`` is set."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from cw_cli.frameworks.base import CONFIG_MOUNT, RunContext, ServiceDef, Services
from cw_cli.frameworks.runtime_files import REWARD_PORT, REWARD_SERVER_FILE
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.trl.pins import TRL_IMAGE, VLLM_IMAGE, VLLM_PORT

#: TRL settings that describe the model or vLLM, and the `vllm serve` flag that carries each.
_VLLM_FLAGS = {
    "model_revision": "--revision",
    "dtype": "--dtype",
    "torch_dtype": "--dtype",  # older TRL / transformers spelling
    "vllm_max_model_length": "--max-model-len",
    "vllm_gpu_memory_utilization": "--gpu-memory-utilization",
    "vllm_model_impl": "--model-impl",
}


def wants_vllm_server(native: Mapping[str, Any], services: Collection[str]) -> bool:
    """Whether a GRPO or RLOO config generates with a separate vLLM server (the launch's rule,
    which the memory estimate follows too).

    TRL's own defaults are ``use_vllm: false`` and ``vllm_mode: colocate`` (TRL 1.16): only a
    config that asks for server mode, or configures ``services.server``, gets one.
    """
    if native.get("use_vllm") is False or native.get("vllm_mode") == "colocate":
        return False
    return (native.get("use_vllm") is True and native.get("vllm_mode") == "server") or "server" in services


def uses_generation_server(native: dict[str, Any], context: RunContext) -> bool:
    """Whether this run gets a vLLM server (a generating type that wants one)."""
    return context.training_type.generates and wants_vllm_server(native, context.cluster.services)


def uses_reward_server(context: RunContext) -> bool:
    """Whether this run gets a reward-model server (a generating type with ``services.reward.model``)."""
    reward = context.cluster.services.get("reward")
    return context.training_type.generates and reward is not None and reward.model is not None


def vllm_model_args(native: dict[str, Any]) -> list[str]:
    """`vllm serve` flags for what the config says about the model, so the server loads the same one."""
    args: list[str] = []
    for key, flag in _VLLM_FLAGS.items():
        value = native.get(key)
        if value is not None and flag not in args:
            args += [flag, str(value)]
    if native.get("trust_remote_code") is True:
        args.append("--trust-remote-code")
    return args


class TrlServices(Services):
    """The generation server (what `trl vllm-serve` runs) and the reward server."""

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        services: list[ServiceDef] = []
        if uses_generation_server(native, context):
            server = server_sizing(context, "server", VLLM_PORT)
            # What `trl vllm-serve` (deprecated in TRL 1.16) runs: vLLM with the weight-sync and
            # logprob settings TRL's server mode relies on.
            command = [
                "vllm",
                "serve",
                str(native["model_name_or_path"]),
                *vllm_model_args(native),
                *server.parallel_args(),
                "--weight-transfer-config",
                '{"backend":"nccl"}',
                "--logprobs-mode",
                "processed_logprobs",
                "--max-logprobs",
                "-1",
            ]
            services.append(server.service(VLLM_IMAGE, command, "/health", {"VLLM_SERVER_DEV_MODE": "1"}))
        if uses_reward_server(context):
            reward = server_sizing(context, "reward", REWARD_PORT)
            command = [
                "python",
                f"{CONFIG_MOUNT}/{REWARD_SERVER_FILE}",
                "--model",
                str(context.cluster.services["reward"].model),
                "--host",
                "0.0.0.0",
                "--port",
                str(reward.port),
            ]
            services.append(reward.service(context.cluster.image or TRL_IMAGE, command, "/health"))
        return services
