"""How the TRL trainer runs: `trl <type> --config` under accelerate, or a user's script with
`accelerate launch` as `trl` itself would start it."""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.base import CONFIG_FILE, Launch, RunContext, TrainingType
from cw_cli.frameworks.distributed import accelerate_args
from cw_cli.frameworks.runtime_files import REWARD_PORT, REWARD_URL_ENV
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.trl.pins import TRL_IMAGE, launcher_only_keys
from cw_cli.frameworks.trl.services import uses_reward_server
from cw_cli.types import CODE_MOUNT


class TrlLaunch(Launch):
    """`trl <type> --config /etc/cw/config.yaml` plus accelerate's process flags; resumed by cw's entrypoint."""

    entrypoint_resumes = True

    def default_image(self, training_type: TrainingType) -> str:
        return TRL_IMAGE

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        return [
            "trl",
            context.training_type.value,
            "--config",
            CONFIG_FILE,
            *accelerate_args(context, distributed_mode="accelerate_config" not in config),
        ]

    def script_command(
        self, config: dict[str, Any], context: RunContext, script: str
    ) -> tuple[list[str], dict[str, Any]]:
        # What `trl <type> --config` does for its own scripts: the launcher's keys become
        # `accelerate launch` flags, the rest stays in the file the script's TrlParser reads.
        launcher = launcher_only_keys(context.training_type)
        mounted = {key: value for key, value in config.items() if key not in launcher}
        flags: list[str] = []
        for key, value in config.items():
            if key not in launcher or key in ("num_processes", "num_machines") or value is None or value is False:
                continue  # cw sizes the run from the config's process counts already
            if key == "accelerate_config":
                flags += ["--config_file", _accelerate_file(value, context)]
            else:
                flags += [f"--{key}"] if value is True else [f"--{key}", str(value)]
        distributed = "accelerate_config" not in config
        command = ["accelerate", "launch", *accelerate_args(context, distributed_mode=distributed), *flags, script]
        return [*command, "--config", CONFIG_FILE], mounted

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        if uses_reward_server(context):
            port = server_sizing(context, "reward", REWARD_PORT).port
            return {REWARD_URL_ENV: f"http://{context.names['reward']}:{port}"}
        return {}


def _accelerate_file(value: object, context: RunContext) -> str:
    """`accelerate_config` for `accelerate launch --config_file`: a shipped file, or a path in the run's code."""
    text = str(value)
    if text.startswith("/"):
        return text  # shipped with the run (/etc/cw/files/...) or in the image
    if context.cluster.code is not None and text.endswith((".yaml", ".yml", ".json")):
        return f"{CODE_MOUNT}/{text}"
    raise ValueError(
        f"`accelerate_config: {text}` names no file next to the config; a script run takes a file (`accelerate "
        "launch --config_file`), not one of trl's named configs; put it next to the config or in `code`"
    )
