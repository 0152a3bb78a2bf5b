"""Print the config keys `trl <type> --config` accepts, as JSON (run with an environment that has TRL).

A key of a `trl` YAML that none of the command's dataclasses knows is handed to `accelerate
launch`, which stops at an option it does not know; cw ships this list as
cw_cli/frameworks/trl/trl_keys.json to refuse such keys before the run, without importing TRL:
    python tools/trl_keys.py > cw_cli/frameworks/trl/trl_keys.json
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json

TYPES = ("sft", "dpo", "grpo", "kto", "reward", "rloo", "distillation")


def command_keys(training_type: str) -> list[str]:
    """Fields of every dataclass `trl <type>` parses its config into."""
    parser = importlib.import_module(f"trl.scripts.{training_type}").make_parser()
    return sorted({action.dest for action in parser._actions if action.dest not in ("help", "config")})


def launcher_keys() -> list[str]:
    """Options of `accelerate launch` (what TRL passes the remaining keys to), plus TRL's own."""
    from accelerate.commands.launch import launch_command_parser

    keys = {"accelerate_config"}
    for action in launch_command_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                keys.add(option[2:].replace("-", "_"))
    return sorted(keys - {"help"})


if __name__ == "__main__":
    listing = {
        "trl": importlib.metadata.version("trl"),
        "transformers": importlib.metadata.version("transformers"),
        "accelerate": importlib.metadata.version("accelerate"),
        "launcher": launcher_keys(),
        **{training_type: command_keys(training_type) for training_type in TYPES},
    }
    print(json.dumps(listing, indent=0, sort_keys=True))
