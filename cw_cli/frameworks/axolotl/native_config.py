"""Reading and checking an Axolotl config: its schema's keys, its `rl:` method against the command,
GRPO's rewards, its parallel sizes, its datasets' columns, and its hub and W&B settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.frameworks.axolotl.pins import (
    ONLINE_METHODS,
    PARALLEL_KEYS,
    PREFERENCE_METHODS,
    UNREWARDED_METHODS,
    axolotl_keys,
    command_for,
    count,
)
from cw_cli.frameworks.axolotl.services import wants_vllm_server
from cw_cli.frameworks.axolotl.sizes import parallel_sizes
from cw_cli.frameworks.base import DatasetNeed, NativeConfig, TrainingType, dataset_item_need
from cw_cli.frameworks.tracking import Tracking


class AxolotlNativeConfig(NativeConfig):
    """What Axolotl's schema reads, checked before launch."""

    count_keys = ("micro_batch_size", "eval_batch_size", "gradient_accumulation_steps", "batch_size")

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        return [("base_model",), ("datasets",)]

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        # Axolotl resumes from the newest checkpoint in output_dir by itself with this key.
        defaults: dict[str, Any] = {"auto_resume_from_checkpoints": True}
        if training_type is TrainingType.DPO:
            defaults["rl"] = "dpo"
        return defaults

    def known_native_keys(self) -> frozenset[str]:
        return axolotl_keys()

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        problems = super().validate_config(native, training_type)
        method = native.get("rl")
        wanted = command_for(method)
        if method is not None and wanted is None:
            known = ", ".join([*ONLINE_METHODS, *PREFERENCE_METHODS])
            problems.append(f"`rl: {method}` is not a method cw runs with Axolotl (known: {known})")
        elif wanted is not None and wanted is not training_type:
            command = f"cw axolotl {method}"
            problems.append(f"`rl: {method}` is run by `{command} CONFIG`, not `cw axolotl {training_type.value}`")
        elif method is None and training_type is not TrainingType.SFT:
            problems.append(f"missing `rl` (`cw axolotl {training_type.value}` runs an `rl:` method)")
        if training_type is TrainingType.GRPO and method not in UNREWARDED_METHODS:
            trl = native.get("trl")
            if not isinstance(trl, dict) or not trl.get("reward_funcs"):
                problems.append(f"missing `trl.reward_funcs` ({str(method or 'grpo').upper()} needs at least one reward function)")
        trl = native.get("trl")
        mode = trl.get("vllm_mode") if isinstance(trl, dict) else None
        if mode is not None and mode not in ("server", "colocate"):
            problems.append(f"`trl.vllm_mode: {mode}` is not a vLLM mode; use `server` or `colocate`")
        for key in PARALLEL_KEYS:
            value = native.get(key)
            if value is not None and count(value) is None:
                problems.append(f"`{key}: {value!r}` must be a whole number of GPUs, at least 1")
        return problems

    def dataset_needs(self, native: dict[str, Any], training_type: TrainingType) -> list[DatasetNeed]:
        # Only the forms Axolotl's code reads for certain (prompt_strategies/chat_template.py and
        # dpo/chat_template.py `default`); other `type:`s declare nothing.
        items = native.get("datasets")
        if not isinstance(items, list):
            return []
        method = native.get("rl")
        needs = []
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                continue
            kind = item.get("type")
            messages = _field(item, "field_messages", "messages")
            if method is None and kind == "chat_template":
                accepted = (frozenset({messages}),)
                description = f"Axolotl's `type: chat_template` reads `{messages}` (`field_messages`)"
            elif method == "dpo" and kind == "chat_template.default":
                chosen, rejected = _field(item, "field_chosen", "chosen"), _field(item, "field_rejected", "rejected")
                accepted = (frozenset({messages, chosen, rejected}),)
                description = (
                    f"Axolotl's DPO `type: chat_template.default` reads `{messages}`, `{chosen}` and `{rejected}` "
                    "(`field_messages`, `field_chosen`, `field_rejected`)"
                )
            else:
                continue
            need = dataset_item_need(item, index, accepted, description)
            if need is not None:  # else data files cw cannot make out
                needs.append(need)
        return needs

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]:
        sizes = parallel_sizes(native)
        vllm = native.get("vllm")
        if training_type is not TrainingType.GRPO or not isinstance(vllm, dict) or not wants_vllm_server(native, {}):
            return sizes
        tensor, data = count(vllm.get("tensor_parallel_size")), count(vllm.get("data_parallel_size"))
        if tensor or data:
            sizes[("services", "server", "gpu")] = ((tensor or 1) * (data or 1), "vllm.tensor_parallel_size x data_parallel_size")
        if tensor:
            sizes[("services", "server", "tensor_parallel_size")] = (tensor, "vllm.tensor_parallel_size")
        if count(vllm.get("port")):
            sizes[("services", "server", "port")] = (vllm["port"], "vllm.port")
        return sizes

    def pushes_to_hub(self, native: dict[str, Any]) -> bool:
        return bool(native.get("hub_model_id"))

    def secrets_needed(self, native: dict[str, Any]) -> dict[str, str]:
        needed = {"HF_TOKEN": f"hub_model_id: {native['hub_model_id']}"} if self.pushes_to_hub(native) else {}
        if self.tracking(native).wandb:
            needed["WANDB_API_KEY"] = f"wandb_project: {native['wandb_project']}"
        return needed

    def tracking(self, native: dict[str, Any]) -> Tracking:
        # Axolotl turns W&B on with `wandb_project` and exports every `wandb_*` key as WANDB_*.
        def text(key: str) -> str | None:
            return str(native[key]) if native.get(key) else None

        online = native.get("wandb_mode") not in ("offline", "disabled")
        return Tracking(
            wandb=bool(native.get("wandb_project")) and online,
            tensorboard=native.get("use_tensorboard") is True,
            mlflow=bool(native.get("mlflow_tracking_uri")),
            wandb_project=text("wandb_project"),
            wandb_entity=text("wandb_entity"),
            wandb_run_id=text("wandb_run_id"),
            run_name=text("wandb_name"),
            wandb_project_default=None,
        )


def _field(item: dict[str, Any], key: str, default: str) -> str:
    """A dataset item's column name setting, Axolotl's default where unset or not a name."""
    value = item.get(key)
    return value if isinstance(value, str) and value else default
