"""verifiers: a vLLM inference server (`vf-vllm`) plus an `accelerate launch` GRPO trainer script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli import __version__
from cw_cli.frameworks.base import (
    CONFIG_MOUNT,
    BaseTrainingFramework,
    RunContext,
    ServiceDef,
    TrainingType,
)
from cw_cli.frameworks.launch import accelerate_args
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.runtime_files import user_file

VERIFIERS_IMAGE = "vllm/vllm-openai:v0.11.0"
VLLM_PORT = 8000
ACCELERATE_CONFIGS = ("zero1", "zero2", "zero3", "multi_gpu")


class VerifiersFramework(BaseTrainingFramework):
    """verifiers' GRPO: the user's training script under accelerate, generating through vLLM."""

    name = "verifiers"
    description = "verifiers: GRPO with a vf-vllm inference server and an accelerate-launched trainer"
    training_types = (TrainingType.GRPO,)
    aliases = {"rlhf": TrainingType.GRPO}

    def default_image(self, training_type: TrainingType) -> str:
        return VERIFIERS_IMAGE

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        return [("model",), ("script",)]

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        problems = super().validate_config(native, training_type)
        script = native.get("script")
        if script is not None and (not isinstance(script, str) or not script.endswith(".py")):
            problems.append("`script` must be the path of a .py training script")
        accelerate = native.get("accelerate_config", "zero3")
        if accelerate not in ACCELERATE_CONFIGS:
            problems.append(f"`accelerate_config: {accelerate}` is not one of {', '.join(ACCELERATE_CONFIGS)}")
        return problems

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config["script"] = Path(str(native["script"])).name
        config.setdefault("output_dir", context.output_dir)
        config["vllm_server_host"] = context.names["server"]
        config["vllm_server_port"] = server_sizing(context, "server", VLLM_PORT).port
        return config

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        name, text = user_file(base_dir, str(native["script"]), "script")
        return {name: text}

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        strategy = config.get("accelerate_config", "zero3")
        if strategy == "multi_gpu":
            return ["accelerate", "launch", *accelerate_args(context), f"{CONFIG_MOUNT}/{config['script']}"]
        return [
            "accelerate",
            "launch",
            "--use_deepspeed",
            "--zero_stage",
            strategy.removeprefix("zero"),
            *accelerate_args(context, distributed_mode=False),
            f"{CONFIG_MOUNT}/{config['script']}",
        ]

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        return {"CW_CONFIG": f"{CONFIG_MOUNT}/config.yaml"}

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        server = server_sizing(context, "server", VLLM_PORT)
        command = ["vf-vllm", "--model", str(native["model"]), *server.parallel_args()]
        return [server.service(context.cluster.image or VERIFIERS_IMAGE, command, "/health")]


def get_plugin() -> SimplePlugin:
    """Entry point: verifiers as a plugin, registered like any other."""
    return SimplePlugin(VerifiersFramework, __version__)
