"""Axolotl: `axolotl train` for SFT, preference tuning (DPO, IPO, KTO, ORPO, SimPO) and GRPO,
`axolotl vllm-serve` as GRPO's generation server."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from cw_cli import __version__
from cw_cli.frameworks.base import CONFIG_FILE, BaseTrainingFramework, RunContext, ServiceDef, TrainingType
from cw_cli.frameworks.distributed import accelerate_args, total_processes
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.tracking import Tracking

AXOLOTL_IMAGE = "axolotlai/axolotl:0.21.0"
VLLM_PORT = 8000


class AxolotlFramework(BaseTrainingFramework):
    """Axolotl through its own command line and YAML config."""

    name = "axolotl"
    description = "Axolotl: SFT, DPO/IPO/KTO/ORPO/SimPO and GRPO with `axolotl train` (vLLM server for GRPO)"
    training_types = (TrainingType.SFT, TrainingType.DPO, TrainingType.GRPO)
    # `rl:` in the config picks the preference method; each has its own command name too.
    aliases = {"rlhf": TrainingType.GRPO, **{method: TrainingType.DPO for method in ("ipo", "kto", "orpo", "simpo")}}
    model_key = "base_model"
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

    def default_image(self, training_type: TrainingType) -> str:
        return AXOLOTL_IMAGE

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
        wanted = _command_for(method)
        if method is not None and wanted is None:
            known = ", ".join(["grpo", *PREFERENCE_METHODS])
            problems.append(f"`rl: {method}` is not a method cw runs with Axolotl (known: {known})")
        elif wanted is not None and wanted is not training_type:
            command = f"cw axolotl {method}" if wanted is TrainingType.DPO else "cw axolotl grpo"
            problems.append(f"`rl: {method}` is run by `{command} CONFIG`, not `cw axolotl {training_type.value}`")
        elif method is None and training_type is not TrainingType.SFT:
            problems.append(f"missing `rl` (`cw axolotl {training_type.value}` runs an `rl:` method)")
        if training_type is TrainingType.GRPO:
            trl = native.get("trl")
            if not isinstance(trl, dict) or not trl.get("reward_funcs"):
                problems.append("missing `trl.reward_funcs` (GRPO needs at least one reward function)")
        return problems

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]:
        vllm = native.get("vllm")
        if training_type is not TrainingType.GRPO or not isinstance(vllm, dict):
            return {}
        sizes: dict[tuple[str, ...], tuple[int, str]] = {}
        tensor, data = _count(vllm.get("tensor_parallel_size")), _count(vllm.get("data_parallel_size"))
        if tensor or data:
            sizes[("services", "server", "gpu")] = ((tensor or 1) * (data or 1), "vllm.tensor_parallel_size x data_parallel_size")
        if tensor:
            sizes[("services", "server", "tensor_parallel_size")] = (tensor, "vllm.tensor_parallel_size")
        if _count(vllm.get("port")):
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

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        deepspeed = config.get("deepspeed")
        if isinstance(deepspeed, str) and deepspeed.startswith(BUNDLED_DEEPSPEED):
            # Axolotl's examples name the repo's own deepspeed_configs/, which its image holds in
            # its working directory; the trainer works in the run's folder instead.
            config["deepspeed"] = f"{AXOLOTL_HOME}/{deepspeed.removeprefix('./')}"
        if context.training_type is TrainingType.GRPO:
            _check_grpo_batch(native, total_processes(context))
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


#: Where the Axolotl image keeps its repository (its working directory, with deepspeed_configs/).
AXOLOTL_HOME = "/workspace/axolotl"
BUNDLED_DEEPSPEED = ("deepspeed_configs/", "./deepspeed_configs/")
PREFERENCE_METHODS = ("dpo", "ipo", "kto", "orpo", "simpo")
KEYS_FILE = Path(__file__).with_name("axolotl_keys.txt")


def _command_for(method: object) -> TrainingType | None:
    if method == "grpo":
        return TrainingType.GRPO
    if method in PREFERENCE_METHODS:
        return TrainingType.DPO
    return None


def _check_grpo_batch(native: dict[str, Any], processes: int) -> None:
    """Axolotl's own GRPO batch rules, checked before the run rather than in the pod.

    The generation batch (``trl.generation_batch_size``, else micro_batch_size x
    gradient_accumulation_steps) must be a multiple of ``trl.num_generations``, and hold a whole
    group for every trainer process.
    """
    trl: dict[str, Any] = native["trl"] if isinstance(native.get("trl"), dict) else {}
    groups = _count(trl.get("num_generations"))
    if groups is None:
        return
    micro = _count(native.get("micro_batch_size")) or 1
    accumulation = _count(native.get("gradient_accumulation_steps")) or 1
    explicit = _count(trl.get("generation_batch_size"))
    batch = explicit or micro * accumulation
    source = "`trl.generation_batch_size`" if explicit else f"micro_batch_size x gradient_accumulation_steps ({micro} x {accumulation})"
    if batch % groups:
        raise ValueError(f"{source} = {batch} must be a multiple of `trl.num_generations: {groups}`")
    if processes > 1 and batch < groups * processes:
        fits = max(1, batch // groups)
        raise ValueError(
            f"`trl.num_generations: {groups}` on {processes} trainer processes needs a generation batch of at least "
            f"{groups * processes} (a whole group per process), but {source} = {batch}; run on {fits} GPU(s) "
            f"(--gpu {fits}) or raise `gradient_accumulation_steps` to {-(-groups * processes // micro)}"
        )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


@lru_cache(maxsize=1)
def axolotl_keys() -> frozenset[str]:
    """Top-level keys of Axolotl's own config schema (generated from its pinned release)."""
    lines = KEYS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def get_plugin() -> SimplePlugin:
    """Entry point: Axolotl as a plugin, registered like any other."""
    return SimplePlugin(AxolotlFramework, __version__)
