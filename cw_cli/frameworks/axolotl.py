"""Axolotl: `axolotl train` for SFT and GRPO, `axolotl vllm-serve` as GRPO's generation server."""

from __future__ import annotations

from typing import Any

from cw_cli import __version__
from cw_cli.frameworks.base import CONFIG_FILE, BaseTrainingFramework, RunContext, ServiceDef, TrainingType
from cw_cli.frameworks.launch import accelerate_args
from cw_cli.frameworks.plugin import SimplePlugin

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

    def _server_port(self, context: RunContext) -> int:
        server = context.cluster.services.get("server")
        return (server.port if server else None) or VLLM_PORT

    def _server_gpus(self, context: RunContext) -> tuple[int, int]:
        server = context.cluster.services.get("server")
        gpus = server.gpu if server and server.gpu is not None else 1
        tensor_parallel = server.tensor_parallel_size if server and server.tensor_parallel_size else 1
        return gpus, tensor_parallel

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        if context.training_type is TrainingType.GRPO:
            gpus, tensor_parallel = self._server_gpus(context)
            config["rl"] = "grpo"
            config["vllm"] = {
                **(native.get("vllm") or {}),
                "host": "0.0.0.0",
                "port": self._server_port(context),
                "tensor_parallel_size": tensor_parallel,
                "data_parallel_size": max(1, gpus // tensor_parallel),
            }
            config["trl"] = {
                **(native.get("trl") or {}),
                "use_vllm": True,
                "vllm_server_host": context.names["server"],
                "vllm_server_port": self._server_port(context),
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
        spec = context.cluster.services.get("server")
        gpus, _ = self._server_gpus(context)
        return [
            ServiceDef(
                role="server",
                image=(spec.image if spec and spec.image else context.cluster.image or AXOLOTL_IMAGE),
                command=["axolotl", "vllm-serve", CONFIG_FILE, *(spec.args if spec else [])],
                port=self._server_port(context),
                gpus=gpus,
                cpu=spec.cpu if spec else None,
                memory=spec.memory if spec else None,
                health_path="/health/",
            )
        ]


def get_plugin() -> SimplePlugin:
    """Entry point: Axolotl as a plugin, registered like any other."""
    return SimplePlugin(AxolotlFramework, __version__)
