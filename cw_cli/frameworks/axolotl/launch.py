"""How the Axolotl trainer runs: `axolotl train` with accelerate as its launcher."""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.axolotl.pins import AXOLOTL_IMAGE
from cw_cli.frameworks.base import CONFIG_FILE, Launch, RunContext, TrainingType
from cw_cli.frameworks.distributed import accelerate_args


class AxolotlLaunch(Launch):
    """`axolotl train /etc/cw/config.yaml --launcher accelerate`; Axolotl resumes by itself."""

    def default_image(self, training_type: TrainingType) -> str:
        return AXOLOTL_IMAGE

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        # DeepSpeed or FSDP in the config already choose accelerate's mode.
        own_mode = any(key in config for key in ("deepspeed", "fsdp", "fsdp_config"))
        launch = accelerate_args(context, distributed_mode=not own_mode)
        return ["axolotl", "train", CONFIG_FILE, "--launcher", "accelerate", "--", *launch]
