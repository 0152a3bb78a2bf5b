"""The TRL config as the pods read it: cw's output folder, its servers' addresses, the reward
function, an inline chat template as a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.frameworks.base import CONFIG_MOUNT, MountedConfig, RunContext
from cw_cli.frameworks.distributed import total_processes
from cw_cli.frameworks.runtime_files import REWARD_CLIENT_FILE, REWARD_FUNCTION, REWARD_SERVER_FILE, runtime_file
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.trl.pins import CHAT_TEMPLATE_FILE, VLLM_PORT, inline_chat_template
from cw_cli.frameworks.trl.services import uses_generation_server, uses_reward_server

#: What configs written for one machine put in `vllm_server_host` (TRL's default is 0.0.0.0).
LOCAL_HOSTS = ("0.0.0.0", "localhost", "127.0.0.1")


class TrlMountedConfig(MountedConfig):
    """The mounted config `trl <type> --config /etc/cw/config.yaml` reads, and the files it names."""

    module_keys = (("reward_funcs",),)
    file_keys = (
        ("accelerate_config",),
        ("deepspeed",),
        ("chat_template_path",),
        ("dataset_name",),
        ("datasets", "*", "path"),
        ("datasets", "*", "data_files"),
        ("datasets", "*", "data_dir"),
        ("model_name_or_path",),
    )

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        own_script = context.cluster.script is not None  # its own parser reads `chat_template`
        if inline_chat_template(native, context.training_type) and not own_script:
            # open-r1 writes the template itself; `trl` reads a template file from chat_template_path.
            config["chat_template_path"] = f"{CONFIG_MOUNT}/{CHAT_TEMPLATE_FILE}"
            del config["chat_template"]
        if "num_processes" in config:  # TRL hands it to accelerate; keep the file true to the pod
            config["num_processes"] = total_processes(context)
        if uses_generation_server(native, context):
            host, port = context.names["server"], server_sizing(context, "server", VLLM_PORT).port
            written = native.get("vllm_server_host")
            if written is not None and written not in (host, *LOCAL_HOSTS):
                raise ValueError(
                    f"`vllm_server_host: {written}` names another server, but cw runs the run's own at {host}; remove it"
                )
            config.update(use_vllm=True, vllm_mode="server", vllm_server_host=host, vllm_server_port=port)
        if uses_reward_server(context):
            funcs = config.get("reward_funcs") or []
            funcs = [funcs] if isinstance(funcs, str) else list(funcs)
            if REWARD_FUNCTION not in funcs:
                funcs.append(REWARD_FUNCTION)
            config["reward_funcs"] = funcs
        return config

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        files: dict[str, str] = {}
        if inline_chat_template(native, context.training_type) and context.cluster.script is None:
            files[CHAT_TEMPLATE_FILE] = native["chat_template"]
        if uses_reward_server(context):
            files[REWARD_SERVER_FILE] = runtime_file(REWARD_SERVER_FILE)
            files[REWARD_CLIENT_FILE] = runtime_file(REWARD_CLIENT_FILE)
        return files
