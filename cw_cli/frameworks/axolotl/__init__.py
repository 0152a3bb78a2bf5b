"""Axolotl: `axolotl train` for SFT, preference tuning (DPO, IPO, KTO, ORPO, SimPO) and GRPO,
`axolotl vllm-serve` as GRPO's generation server.

Everything cw knows of Axolotl is in this package: the framework (here), the keys of its schema
(``axolotl_keys.txt``), how its config reads for the memory estimate (``setup.py``, loaded only
when an estimate is made) and its words for suggestions and failure advice (:data:`AXOLOTL_WORDS`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from cw_cli import __version__
from cw_cli.estimate.words import ConfigWords
from cw_cli.frameworks.base import (
    CONFIG_FILE,
    BaseTrainingFramework,
    DatasetNeed,
    FailureHint,
    RunContext,
    ServiceDef,
    TrainingType,
    dataset_item_need,
)
from cw_cli.frameworks.distributed import accelerate_args, total_processes, trainer_world
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.tracking import Tracking

AXOLOTL_IMAGE = "axolotlai/axolotl:0.21.0"
VLLM_PORT = 8000
#: Where the Axolotl image keeps its repository (its working directory, with deepspeed_configs/).
AXOLOTL_HOME = "/workspace/axolotl"
BUNDLED_DEEPSPEED = ("deepspeed_configs/", "./deepspeed_configs/")
PREFERENCE_METHODS = ("dpo", "ipo", "kto", "orpo", "simpo")
#: `rl:` methods that generate completions while training (Axolotl's RLType): GRPO, GDPO
#: (GRPO with per-reward normalisation) and EBFT.
ONLINE_METHODS = ("grpo", "gdpo", "ebft")
#: Online methods not scored by `trl.reward_funcs` (EBFT matches features of reference completions).
UNREWARDED_METHODS = ("ebft",)
#: Axolotl's N-D parallelism sizes: their product is the run's GPU count (`dp_shard_size` x
#: `dp_replicate_size` x `tensor_parallel_size` x `context_parallel_size`, and x
#: `expert_parallel_size` with its expert-parallel plugin: "world size = ep x dp_shard_size").
PARALLEL_KEYS = ("dp_shard_size", "dp_replicate_size", "tensor_parallel_size", "context_parallel_size",
                 "sequence_parallel_degree", "expert_parallel_size")
#: GPUs per node cw sizes multi-node Axolotl runs with (its 8-GPU nodes).
GPUS_PER_NODE = 8
KEYS_FILE = Path(__file__).with_name("axolotl_keys.txt")
#: Axolotl's keys for what cw's memory suggestions and failure advice name.
AXOLOTL_WORDS = ConfigWords(
    micro_batch="micro_batch_size",
    accumulation="gradient_accumulation_steps",
    checkpointing="gradient_checkpointing",
    bf16_weights=("bf16: true",),
    length="sequence_len",
    completion="trl.max_completion_length",
    optimizer="optimizer",
    lora=("adapter: lora", "lora_target_linear: true"),
    qlora=("adapter: qlora", "load_in_4bit: true", "lora_target_linear: true"),
    zero3="deepspeed: deepspeed_configs/zero3_bf16.json",
    zero3_offload="deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json",
    vllm_max_model_len="vllm.max_model_len",
    vllm_gpu_memory_utilization="vllm.gpu_memory_utilization",
    max_steps="max_steps",
)


class AxolotlFramework(BaseTrainingFramework):
    """Axolotl through its own command line and YAML config."""

    name = "axolotl"
    description = "Axolotl: SFT, DPO/IPO/KTO/ORPO/SimPO and GRPO with `axolotl train` (vLLM server for GRPO)"
    training_types = (TrainingType.SFT, TrainingType.DPO, TrainingType.GRPO)
    # `rl:` in the config picks the preference method; each has its own command name too.
    aliases = {
        "rlhf": TrainingType.GRPO,
        **{method: TrainingType.DPO for method in PREFERENCE_METHODS if method != "dpo"},
        **{method: TrainingType.GRPO for method in ONLINE_METHODS if method != "grpo"},
    }
    model_key = "base_model"
    model_revision_key = "revision_of_model"
    words = AXOLOTL_WORDS
    count_keys = ("micro_batch_size", "eval_batch_size", "gradient_accumulation_steps", "batch_size")
    setup_module = "cw_cli.frameworks.axolotl.setup"

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """What only Axolotl's log says: a dataset ``type`` it has no strategy for (Axolotl 0.19,
        ``axolotl/utils/data/wrappers.py``). cw checks the data's columns before launch, but not
        a type naming the user's own loader, which only Axolotl can resolve."""
        return (
            FailureHint(
                kind="dataset-type",
                pattern=r"unhandled prompt tokenization strategy: ",
                summary="unknown dataset type",
                message="Axolotl has no prompt strategy for a dataset's `type`",
                fix="set `datasets[].type` to one of Axolotl's (e.g. `chat_template`, `alpaca`), or to your own "
                "`module.load_fn` shipped next to the config or with `code:`; `x:load_y` is written `x.load_y`",
            ),
        )
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
            if value is not None and _count(value) is None:
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
        sizes = _parallel_sizes(native)
        vllm = native.get("vllm")
        if training_type is not TrainingType.GRPO or not isinstance(vllm, dict) or not wants_vllm_server(native, {}):
            return sizes
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
        _check_parallel_sizes(native, context)
        if context.training_type is TrainingType.GRPO:
            _check_grpo_batch(native, total_processes(context))
            config["rl"] = native.get("rl") or "grpo"
            if not self._uses_generation_server(native, context):
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

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        # DeepSpeed or FSDP in the config already choose accelerate's mode.
        own_mode = any(key in config for key in ("deepspeed", "fsdp", "fsdp_config"))
        launch = accelerate_args(context, distributed_mode=not own_mode)
        return ["axolotl", "train", CONFIG_FILE, "--launcher", "accelerate", "--", *launch]

    def _uses_generation_server(self, native: dict[str, Any], context: RunContext) -> bool:
        return context.training_type is TrainingType.GRPO and wants_vllm_server(native, context.cluster.services)

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        if not self._uses_generation_server(native, context):
            return []
        server = server_sizing(context, "server", VLLM_PORT)
        image = context.cluster.image or AXOLOTL_IMAGE
        return [server.service(image, ["axolotl", "vllm-serve", CONFIG_FILE], "/health/")]




def _field(item: dict[str, Any], key: str, default: str) -> str:
    """A dataset item's column name setting, Axolotl's default where unset or not a name."""
    value = item.get(key)
    return value if isinstance(value, str) and value else default


def _command_for(method: object) -> TrainingType | None:
    if method in ONLINE_METHODS:
        return TrainingType.GRPO
    if method in PREFERENCE_METHODS:
        return TrainingType.DPO
    return None


#: Strings pydantic's lax ``bool`` (Axolotl's ``trl.use_vllm: bool``) reads as true or false.
_TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})


def axolotl_bool(value: object) -> bool | None:
    """A boolean as Axolotl's schema (pydantic, lax mode) reads it; None when unset or not one
    (Axolotl then refuses the config, or keeps its default)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, float) and value in (0.0, 1.0):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _TRUE_WORDS else False if word in _FALSE_WORDS else None
    return None


def wants_vllm_server(native: Mapping[str, Any], services: Collection[str]) -> bool:
    """Whether an Axolotl GRPO config generates with a separate `axolotl vllm-serve` server (the
    launch's rule, which the memory estimate follows too).

    Axolotl's own rule (``GRPOVllmValidationMixin.check_vllm_mode_set``, 0.19): with
    ``trl.use_vllm`` true and no ``trl.vllm_mode``, the mode is ``server``; it then forwards both
    to TRL. So a server for ``use_vllm`` true unless ``vllm_mode: colocate``, or for a
    ``services.server`` of cw's config; never against ``use_vllm: false`` or ``vllm_mode: colocate``.
    """
    trl: dict[str, Any] = native["trl"] if isinstance(native.get("trl"), dict) else {}
    use_vllm, mode = axolotl_bool(trl.get("use_vllm")), trl.get("vllm_mode")
    if use_vllm is False or mode == "colocate":
        return False
    return (use_vllm is True and mode in (None, "server")) or "server" in services


def _parallel_product(native: dict[str, Any]) -> tuple[int, list[str]]:
    """The product of the parallel sizes the config sets, and how each was written."""
    product, written = 1, []
    for key in PARALLEL_KEYS:
        size = _count(native.get(key))
        if size is None or (key == "sequence_parallel_degree" and "context_parallel_size" in native):
            continue  # the old name of context_parallel_size counts once
        product *= size
        written.append(f"{key}: {size}")
    return product, written


def _layout(total: int) -> tuple[int, int]:
    """(GPUs per node, nodes) for a run of ``total`` GPUs: one node up to 8, whole 8-GPU nodes beyond."""
    if total <= GPUS_PER_NODE or total % GPUS_PER_NODE:
        return total, 1
    return GPUS_PER_NODE, total // GPUS_PER_NODE


def _parallel_sizes(native: dict[str, Any]) -> dict[tuple[str, ...], tuple[int, str]]:
    """GPUs and nodes when the config names every dimension (``dp_shard_size`` included).

    Sizes that multiply to 1 say nothing (Axolotl's examples write the defaults out, e.g. the
    falcon-e DPO example run on 4 GPUs): the run keeps cw's sizing.
    """
    total, written = _parallel_product(native)
    if _count(native.get("dp_shard_size")) is None or total == 1:
        return {}
    source = " x ".join(written)
    gpus, nodes = _layout(total)
    sizes: dict[tuple[str, ...], tuple[int, str]] = {("gpu",): (gpus, source)}
    if nodes > 1:
        sizes[("nodes",)] = (nodes, source)
    return sizes


def _check_parallel_sizes(native: dict[str, Any], context: RunContext) -> None:
    """The run's GPUs must be what Axolotl's parallel sizes multiply to (or, without
    ``dp_shard_size``, which takes the GPUs left, a multiple of them)."""
    product, written = _parallel_product(native)
    if product == 1:
        return
    gpus = total_processes(context)
    per_node_now, nodes_now = trainer_world(context.cluster)
    where = f"{per_node_now} GPU(s) x {nodes_now} node(s) = {gpus}"
    sizes = " x ".join(written)
    per_node, nodes = _layout(product)
    if _count(native.get("dp_shard_size")) is not None and gpus != product:
        raise ValueError(f"{sizes} = {product} GPUs, but the run has {where}; run it with --gpu {per_node} --nodes {nodes}")
    if gpus % product:
        raise ValueError(
            f"{sizes} needs a multiple of {product} GPUs (dp_shard_size takes the GPUs left), but the run has "
            f"{where}; run it with --gpu {per_node} --nodes {nodes}, or change the sizes"
        )


def _check_grpo_batch(native: dict[str, Any], processes: int) -> None:
    """TRL's GRPO batch rule (GRPOConfig.__post_init__, which Axolotl's `trl:` block feeds),
    checked before the run rather than in the pod.

    The generation batch (``trl.generation_batch_size``, else micro_batch_size x trainer processes
    x ``trl.steps_per_generation`` or gradient_accumulation_steps) must be a multiple of
    ``trl.num_generations``; an explicit one must also be a multiple of micro_batch_size x
    processes (the global batch).
    """
    trl: dict[str, Any] = native["trl"] if isinstance(native.get("trl"), dict) else {}
    groups = _count(trl.get("num_generations"))
    if groups is None:
        return
    micro = _count(native.get("micro_batch_size")) or 1
    steps = _count(trl.get("steps_per_generation")) or _count(native.get("gradient_accumulation_steps")) or 1
    explicit = _count(trl.get("generation_batch_size"))
    global_batch = micro * processes
    if explicit is not None and explicit % global_batch:
        raise ValueError(
            f"`trl.generation_batch_size: {explicit}` must be a multiple of micro_batch_size x trainer processes "
            f"({micro} x {processes} = {global_batch})"
        )
    batch = explicit or global_batch * steps
    if batch % groups:
        source = ("`trl.generation_batch_size`" if explicit else
                  f"micro_batch_size x trainer processes x steps per generation ({micro} x {processes} x {steps})")
        fits = next((n for n in range(processes, 0, -1) if (explicit or micro * n * steps) % groups == 0), None)
        fix = f"run on {fits} GPU(s) (--gpu {fits}) or " if fits and fits != processes and not explicit else ""
        raise ValueError(
            f"{source} = {batch} must be a multiple of `trl.num_generations: {groups}` (TRL's rule); "
            f"{fix}change `gradient_accumulation_steps` or `trl.num_generations`"
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
