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
from cw_cli.frameworks.servers import server_sizing
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
                vllm_server_port=server_sizing(context, "server", VLLM_PORT).port,
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
            port = server_sizing(context, "reward", REWARD_PORT).port
            return {REWARD_URL_ENV: f"http://{context.names['reward']}:{port}"}
        return {}

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        services: list[ServiceDef] = []
        if self._uses_generation_server(native, context):
            server = server_sizing(context, "server", VLLM_PORT)
            # What `trl vllm-serve` (deprecated in TRL 1.16) runs: vLLM with the weight-sync and
            # logprob settings TRL's server mode relies on.
            command = [
                "vllm",
                "serve",
                str(native["model_name_or_path"]),
                *server.parallel_args(),
                "--weight-transfer-config",
                '{"backend":"nccl"}',
                "--logprobs-mode",
                "processed_logprobs",
                "--max-logprobs",
                "-1",
            ]
            services.append(server.service(VLLM_IMAGE, command, "/health", {"VLLM_SERVER_DEV_MODE": "1"}))
        if self._uses_reward_server(context):
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


def get_plugin() -> SimplePlugin:
    """Entry point: TRL as a plugin, registered like any other."""
    return SimplePlugin(TRLFramework, __version__)
