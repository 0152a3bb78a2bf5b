"""Axolotl: `axolotl train` for SFT and GRPO, `axolotl vllm-serve` as GRPO's generation server."""

from __future__ import annotations

from typing import Any

from cw_cli import __version__
from cw_cli.frameworks.base import CONFIG_FILE, BaseTrainingFramework, RunContext, ServiceDef, TrainingType
from cw_cli.frameworks.launch import accelerate_args
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.servers import server_sizing

AXOLOTL_IMAGE = "axolotlai/axolotl:0.21.0"
VLLM_PORT = 8000


class AxolotlFramework(BaseTrainingFramework):
    """Axolotl through its own command line and YAML config."""

    name = "axolotl"
    description = "Axolotl: SFT and GRPO with `axolotl train` (vLLM server for GRPO)"
    training_types = (TrainingType.SFT, TrainingType.GRPO)
    aliases = {"rlhf": TrainingType.GRPO}

    def default_image(self, training_type: TrainingType) -> str:
        return AXOLOTL_IMAGE

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        return [("base_model",), ("datasets",)]

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        # Axolotl resumes from the newest checkpoint in output_dir by itself with this key.
        return {"auto_resume_from_checkpoints": True}

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        problems = super().validate_config(native, training_type)
        if training_type is TrainingType.GRPO:
            if native.get("rl", "grpo") != "grpo":
                problems.append(f"`rl: {native.get('rl')}` does not match `axolotl grpo`; use `rl: grpo`")
            trl = native.get("trl")
            if not isinstance(trl, dict) or not trl.get("reward_funcs"):
                problems.append("missing `trl.reward_funcs` (GRPO needs at least one reward function)")
        elif native.get("rl"):
            problems.append(f"`rl: {native['rl']}` is an RL method; run it with `cw axolotl grpo`")
        return problems

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        if context.training_type is TrainingType.GRPO:
            server = server_sizing(context, "server", VLLM_PORT)
            config["rl"] = "grpo"
            # `axolotl vllm-serve` reads the `vllm:` block; the trainer finds it through `trl:`.
            config["vllm"] = {
                **(native.get("vllm") or {}),
                "host": "0.0.0.0",
                "port": server.port,
                "tensor_parallel_size": server.tensor_parallel,
                "data_parallel_size": server.data_parallel,
            }
            config["trl"] = {
                **(native.get("trl") or {}),
                "use_vllm": True,
                "vllm_server_host": context.names["server"],
                "vllm_server_port": server.port,
            }
        return config

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        # DeepSpeed or FSDP in the config already choose accelerate's mode.
        own_mode = any(key in config for key in ("deepspeed", "fsdp", "fsdp_config"))
        launch = accelerate_args(context, distributed_mode=not own_mode)
        return ["axolotl", "train", CONFIG_FILE, "--launcher", "accelerate", "--", *launch]

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        if context.training_type is not TrainingType.GRPO:
            return []
        server = server_sizing(context, "server", VLLM_PORT)
        image = context.cluster.image or AXOLOTL_IMAGE
        return [server.service(image, ["axolotl", "vllm-serve", CONFIG_FILE], "/health/")]


def get_plugin() -> SimplePlugin:
    """Entry point: Axolotl as a plugin, registered like any other."""
    return SimplePlugin(AxolotlFramework, __version__)
