"""TRL: `trl sft|dpo|grpo --config ...`, with a vLLM generation server and a reward server for GRPO."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli import __version__
from cw_cli.frameworks.base import (
    CONFIG_FILE,
    CONFIG_MOUNT,
    BaseTrainingFramework,
    RunContext,
    ServiceDef,
    TrainingType,
)
from cw_cli.frameworks.launch import accelerate_args
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.runtime_files import (
    LAUNCHER_FILE,
    REWARD_CLIENT_FILE,
    REWARD_FUNCTION,
    REWARD_PORT,
    REWARD_SERVER_FILE,
    REWARD_URL_ENV,
    runtime_file,
)

TRL_IMAGE = "huggingface/trl:1.16.0"  # TRL's own image (built from its docker/trl); no vLLM inside
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
VLLM_PORT = 8000


class TRLFramework(BaseTrainingFramework):
    """Hugging Face TRL through its own command line."""

    name = "trl"
    description = "Hugging Face TRL: SFT, DPO and GRPO through the `trl` command line"
    training_types = (TrainingType.SFT, TrainingType.DPO, TrainingType.GRPO)
    aliases = {"rlhf": TrainingType.GRPO}

    def default_image(self, training_type: TrainingType) -> str:
        return TRL_IMAGE

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        keys: list[tuple[str, ...]] = [("model_name_or_path",), ("dataset_name", "datasets")]
        return keys

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        problems = super().validate_config(native, training_type)
        if "max_seq_length" in native:
            problems.append("`max_seq_length` was renamed `max_length` in current TRL")
        if "reward_files" in native:
            problems.append("`reward_files` is now the cw field `files` (it works for every framework)")
        if "reward_model_url" in native:
            problems.append("TRL has no `reward_model_url`; set `services.reward.model` and cw serves it")
        funcs = native.get("reward_funcs")
        if funcs is not None and not isinstance(funcs, (str, list)):
            problems.append("`reward_funcs` must be a name or a list of names / dotted import paths")
        return problems

    def _uses_generation_server(self, native: dict[str, Any], context: RunContext) -> bool:
        return (
            context.training_type is TrainingType.GRPO
            and native.get("use_vllm", True) is not False
            and native.get("vllm_mode", "server") == "server"
        )

    def _uses_reward_server(self, context: RunContext) -> bool:
        reward = context.cluster.services.get("reward")
        return context.training_type is TrainingType.GRPO and reward is not None and reward.model is not None

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        if self._uses_generation_server(native, context):
            config.update(
                use_vllm=True,
                vllm_mode="server",
                vllm_server_host=context.names["server"],
                vllm_server_port=self._server_port(context),
            )
        if self._uses_reward_server(context):
            funcs = config.get("reward_funcs") or []
            funcs = [funcs] if isinstance(funcs, str) else list(funcs)
            if REWARD_FUNCTION not in funcs:
                funcs.append(REWARD_FUNCTION)
            config["reward_funcs"] = funcs
        return config

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        files = {LAUNCHER_FILE: runtime_file(LAUNCHER_FILE)}
        if self._uses_reward_server(context):
            files[REWARD_SERVER_FILE] = runtime_file(REWARD_SERVER_FILE)
            files[REWARD_CLIENT_FILE] = runtime_file(REWARD_CLIENT_FILE)
        return files

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        return [
            "python",
            f"{CONFIG_MOUNT}/{LAUNCHER_FILE}",
            "trl",
            context.training_type.value,
            "--config",
            CONFIG_FILE,
            *accelerate_args(context, distributed_mode="accelerate_config" not in config),
        ]

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        if self._uses_reward_server(context):
            return {REWARD_URL_ENV: f"http://{context.names['reward']}:{self._reward_port(context)}"}
        return {}

    def _server_port(self, context: RunContext) -> int:
        server = context.cluster.services.get("server")
        return (server.port if server else None) or VLLM_PORT

    def _reward_port(self, context: RunContext) -> int:
        reward = context.cluster.services.get("reward")
        return (reward.port if reward else None) or REWARD_PORT

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        services: list[ServiceDef] = []
        image = context.cluster.image or TRL_IMAGE
        if self._uses_generation_server(native, context):
            spec = context.cluster.services.get("server")
            gpus = spec.gpu if spec and spec.gpu is not None else 1
            tensor_parallel = spec.tensor_parallel_size if spec and spec.tensor_parallel_size else 1
            port = self._server_port(context)
            services.append(
                ServiceDef(
                    role="server",
                    image=(spec.image if spec and spec.image else VLLM_IMAGE),
                    command=[
                        "vllm",
                        "serve",
                        str(native["model_name_or_path"]),
                        "--tensor-parallel-size",
                        str(tensor_parallel),
                        "--data-parallel-size",
                        str(max(1, gpus // tensor_parallel)),
                        "--host",
                        "0.0.0.0",
                        "--port",
                        str(port),
                        # The weight-sync and logprob settings TRL's server mode relies on.
                        "--weight-transfer-config",
                        '{"backend":"nccl"}',
                        "--logprobs-mode",
                        "processed_logprobs",
                        "--max-logprobs",
                        "-1",
                        *(spec.args if spec else []),
                    ],
                    port=port,
                    gpus=gpus,
                    cpu=spec.cpu if spec else None,
                    memory=spec.memory if spec else None,
                    health_path="/health",
                    env={"VLLM_SERVER_DEV_MODE": "1"},
                )
            )
        if self._uses_reward_server(context):
            spec = context.cluster.services["reward"]
            port = self._reward_port(context)
            services.append(
                ServiceDef(
                    role="reward",
                    image=spec.image or image,
                    command=[
                        "python",
                        f"/etc/cw/{REWARD_SERVER_FILE}",
                        "--model",
                        str(spec.model),
                        "--host",
                        "0.0.0.0",
                        "--port",
                        str(port),
                        *spec.args,
                    ],
                    port=port,
                    gpus=spec.gpu if spec.gpu is not None else 1,
                    cpu=spec.cpu,
                    memory=spec.memory,
                    health_path="/health",
                )
            )
        return services


def get_plugin() -> SimplePlugin:
    """Entry point: TRL as a plugin, registered like any other."""
    return SimplePlugin(TRLFramework, __version__)
