"""The Axolotl config as the pods read it: cw's output folder, the image's bundled DeepSpeed
configs, and for GRPO the `vllm:` and `trl:` blocks that reach the run's server."""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.axolotl.pins import AXOLOTL_HOME, BUNDLED_DEEPSPEED, VLLM_PORT
from cw_cli.frameworks.axolotl.services import uses_generation_server
from cw_cli.frameworks.axolotl.sizes import check_grpo_batch, check_parallel_sizes
from cw_cli.frameworks.base import MountedConfig, RunContext, TrainingType
from cw_cli.frameworks.distributed import total_processes
from cw_cli.frameworks.servers import server_sizing


class AxolotlMountedConfig(MountedConfig):
    """The mounted config `axolotl train /etc/cw/config.yaml` reads, and the files it names."""

    module_keys = (("trl", "reward_funcs"), ("datasets", "*", "type"))
    file_keys = (
        ("deepspeed",),
        ("datasets", "*", "path"),
        ("datasets", "*", "data_files"),
        ("test_datasets", "*", "path"),
        ("test_datasets", "*", "data_files"),
        ("pretraining_dataset", "*", "path"),
        ("chat_template_jinja",),
        ("base_model",),
        ("tokenizer_config",),
    )

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        deepspeed = config.get("deepspeed")
        if isinstance(deepspeed, str) and deepspeed.startswith(BUNDLED_DEEPSPEED):
            # Axolotl's examples name the repo's own deepspeed_configs/, which its image holds in
            # its working directory; the trainer works in the run's folder instead.
            config["deepspeed"] = f"{AXOLOTL_HOME}/{deepspeed.removeprefix('./')}"
        check_parallel_sizes(native, context)
        if context.training_type is TrainingType.GRPO:
            check_grpo_batch(native, total_processes(context))
            config["rl"] = native.get("rl") or "grpo"
            if not uses_generation_server(native, context):
                return config  # the trainer generates itself (colocated vLLM, or HF generate)
            server = server_sizing(context, "server", VLLM_PORT)
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
                "vllm_mode": "server",
                "vllm_server_host": context.names["server"],
                "vllm_server_port": server.port,
            }
        return config
