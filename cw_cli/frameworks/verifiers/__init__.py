"""verifiers: its own RL stack, `vf-vllm` (inference) plus `vf-train @ config.toml` under accelerate.

The native config is the TOML that verifiers' `vf-rl` reads (``model``, ``[env]``,
``[inference]``, ``[trainer]``): the published ``.toml`` file itself, or the same in YAML beside
cw's fields, mounted as ``/etc/cw/config.toml``. Its ``[env]`` section may be written ``env:``
(a mapping with ``id``) or ``environment:``; an ``env:`` without ``id`` is cw's environment
variables. ``inference.gpus`` and ``trainer.gpus`` size the server and trainer pods. verifiers
0.1.9.post3 is the newest PyPI release whose trainer and
``vf-vllm`` are in the package (later releases moved them out, and no longer publish them on PyPI), so
cw pins it and installs it over the vLLM image it was built against when the image lacks it.

Everything cw knows of verifiers is in this package: the framework (here), how its config reads
for the memory estimate (``setup.py``, loaded only when an estimate is made) and its words for
suggestions and failure advice (:data:`VERIFIERS_WORDS`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from cw_cli import __version__
from cw_cli.estimate.words import ConfigWords
from cw_cli.frameworks.base import (
    CONFIG_MOUNT,
    BaseTrainingFramework,
    FailureHint,
    RunContext,
    ServiceDef,
    TrainingType,
)
from cw_cli.frameworks.distributed import accelerate_args, total_processes
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.tracking import Tracking, from_trainer_args

VERIFIERS_VERSION = "0.1.9.post3"
#: vLLM 0.10.2 ships torch 2.8, the versions verifiers' `rl` extra asks for (vllm<0.11, torch<2.9).
VERIFIERS_IMAGE = "vllm/vllm-openai:v0.10.2"
#: verifiers' `rl` extra, pinned; the image already has vLLM and torch (but no accelerate).
VERIFIERS_STACK = (
    f"verifiers=={VERIFIERS_VERSION}",
    "accelerate==1.10.1",
    "transformers>=4.56.2,<4.58",
    "peft==0.17.1",
    "liger-kernel==0.6.2",
    "deepspeed==0.17.6",
    "flash-attn==2.8.3",
    "wandb==0.22.2",
)
VLLM_PORT = 8000
#: verifiers' weight sync: the trainer asks vf-vllm to open an NCCL rendezvous (a TCPStore) bound
#: to <vllm_server_host>:51216 and connects there. The server pod can bind that name only if it
#: resolves to the pod's own IP, hence a headless Service.
WEIGHT_SYNC_PORT = 51216
CONFIG_NAME = "config.toml"
ACCELERATE_CONFIGS = ("zero1", "zero2", "zero3", "multi_gpu")
#: vf-vllm flags cw derives from `services.server` (name in `inference.args` -> where to set it);
#: written with the value cw uses they are accepted (vf-rl's own files write some of them).
SERVER_MANAGED_ARGS = {
    "model": "`model`",
    "host": "nothing (cw listens on 0.0.0.0)",
    "port": "`services.server.port`",
    "tensor_parallel_size": "`services.server.tensor_parallel_size`",
    "data_parallel_size": "`inference.gpus` (data parallel = GPUs / tensor parallel)",
}
#: RLConfig fields cw sets to reach the run's server and volume.
TRAINER_MANAGED_ARGS = ("vllm_server_host", "vllm_server_port")
#: The keys of a vf-rl file (section -> its keys); anything else would be ignored silently.
#: `trainer.run_name` appears in verifiers' own published configs.
SCHEMA_KEYS = {
    "": {"model", "env", "environment", "inference", "trainer", "accelerate_config"},
    "env": {"id", "args"},
    "inference": {"gpus", "args"},
    "trainer": {"gpus", "args", "run_name"},
}
#: verifiers' CLI that installs an environment from its hub (what vf-rl runs before vf-train).
PRIME_CLI = "prime==0.18.0"
#: Counts vf-train divides or sizes by (trainer.args key -> what it counts): a whole number from 1.
TRAINER_COUNTS = {
    "batch_size": "rollouts per step",
    "micro_batch_size": "rollouts per forward pass",
    "rollouts_per_example": "rollouts per prompt",
    "max_seq_len": "tokens",
}
#: Larger than any real count (torch and vLLM hold sizes as int32).
MAX_COUNT = 2**31 - 1
#: vf-rl's GPU counts (key -> cw's field it sizes); cw's own bound, a node's GPUs.
GPU_COUNTS = {"inference.gpus": "services.server.gpu", "trainer.gpus": "gpu"}
MAX_GPUS = 64
#: verifiers' keys for what cw's memory suggestions and failure advice name. RLConfig has no
#: gradient accumulation, no QLoRA and no CPU offload: the estimate suggests none of them.
VERIFIERS_WORDS = ConfigWords(
    micro_batch="trainer.args.micro_batch_size",
    checkpointing="trainer.args.gradient_checkpointing",
    bf16_weights=("trainer.args.bf16: true",),
    length="trainer.args.max_seq_len",
    completion="trainer.args.max_tokens",
    optimizer="trainer.args.optim",
    lora=("trainer.args.use_lora: true",),
    zero3="accelerate_config: zero3",
    vllm_max_model_len="inference.args.max_model_len",
    vllm_gpu_memory_utilization="inference.args.gpu_memory_utilization",
    max_steps="trainer.args.max_steps",
    gpus="trainer.gpus",
)


#: Keys that only prime-rl's `rl` TOML has (its GPU id lists and async orchestrator).
_PRIME_RL_KEYS = ("inference_gpu_ids", "trainer_gpu_ids", "max_async_level", "orchestrator", "ckpt")
#: Keys of Prime Intellect's hosted training configs (`prime rl` / the lab), with `[[env]]` tables.
_HOSTED_KEYS = ("rollouts_per_example", "batch_size", "sampling")


def _foreign_format(native: dict[str, Any]) -> str | None:
    """Why a TOML file is another program's config rather than verifiers' vf-rl one (None if it is not)."""
    what = "cw runs verifiers' vf-rl TOML files (`model`, `[env]`, `[inference]`, `[trainer]`; verifiers/rl/README.md)"
    prime = [key for key in _PRIME_RL_KEYS if key in native]
    if prime or isinstance(native.get("model"), dict):
        keys = ", ".join(f"`{key}`" for key in (prime or ["[model]"]))
        return f"this is a prime-rl config ({keys}), not a vf-rl config; {what}; run it with prime-rl itself"
    if isinstance(native.get("env"), list) or any(key in native for key in _HOSTED_KEYS):
        keys = ", ".join(f"`{key}`" for key in ["[[env]]" if isinstance(native.get("env"), list) else "",
                                                 *(k for k in _HOSTED_KEYS if k in native)] if key)
        return (f"this is a Prime Intellect hosted-training config ({keys}), not a vf-rl config; {what}; "
                "submit it with `prime rl` instead")
    return None


def _mapping(native: dict[str, Any], *path: str) -> dict[str, Any]:
    if path and path[0] == "env":  # vf-rl's [env], whichever spelling the file uses
        path = ("environment" if "environment" in native else "env", *path[1:])
    node: Any = native
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _nulls(value: Any, where: str) -> list[str]:
    """Dotted paths of null values (TOML has no null)."""
    if value is None:
        return [where]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _nulls(item, f"{where}.{key}" if where else str(key))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _nulls(item, f"{where}[{i}]")]
    return []


def _non_string_keys(value: Any, where: str) -> list[str]:
    """Dotted paths of mapping keys that are not strings (TOML keys are always strings)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            found += [path] if not isinstance(key, str) else []
            found += _non_string_keys(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _non_string_keys(item, f"{where}[{index}]")
    return found


def server_flags(args: dict[str, Any]) -> list[str]:
    """``inference.args`` as vf-vllm flags, the way verifiers' own ``vf-rl`` converts them.

    ``enforce_eager: true`` -> ``--enforce-eager``; false omits the flag; a mapping becomes JSON
    (vLLM's form for options such as ``--hf-overrides``); anything else ``--key value``.
    """
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


class VerifiersFramework(BaseTrainingFramework):
    """verifiers' RLTrainer (async GRPO) against its weight-syncing vLLM server."""

    name = "verifiers"
    description = f"verifiers {VERIFIERS_VERSION}: vf-vllm inference server + vf-train under accelerate"
    script_reads_its_own_keys = False  # a script takes vf-train's own `@ config.toml` arguments
    training_types = (TrainingType.GRPO,)
    aliases = {"rlhf": TrainingType.GRPO}
    config_file_name = CONFIG_NAME
    model_key = "model"
    output_keys = (("trainer", "args", "output_dir"),)
    words = VERIFIERS_WORDS
    setup_module = "cw_cli.frameworks.verifiers.setup"

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """What only verifiers' log says: the environment cannot be imported in the pod (verifiers
        0.1.9, ``verifiers/utils/env_utils.py``). cw installs a hub environment with
        ``prime env install`` first, which needs the network; a module next to the config is
        shipped instead."""
        return (
            FailureHint(
                kind="environment-missing",
                pattern=r"Could not import '[^']+' environment\. Ensure the package",
                summary="environment not installed",
                message="verifiers could not import the run's environment in the trainer pod",
                fix="check `env.id` against the Environments Hub and that the pods reach it (cw runs "
                "`prime env install ID` first), or put the environment's module (with `load_environment`) "
                "next to the config so cw ships it",
            ),
        )

    def default_image(self, training_type: TrainingType) -> str:
        return VERIFIERS_IMAGE


    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        # RLConfig reports to wandb by default, which fails in a pod without a login; opt in
        # with `trainer.args.report_to: wandb` and a WANDB_API_KEY secret.
        return {"accelerate_config": "zero3", "trainer": {"args": {"report_to": "none"}}}

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        return [("model",), ("env", "environment")]

    def tracking(self, native: dict[str, Any]) -> Tracking:
        # vf-train's RLConfig is a TrainingArguments: report_to and run_name live in trainer.args.
        return from_trainer_args(_trainer_args(native))

    def wandb_setting(self, native: dict[str, Any]) -> str:
        return f"trainer.args.report_to: {_trainer_args(native).get('report_to')}"

    def claims_native_keys(self, data: dict[str, Any]) -> set[str]:
        env = data.get("env")
        if isinstance(env, list) and env and all(isinstance(item, dict) for item in env):
            return {"env"}  # `[[env]]` tables: a hosted-training config, refused as a whole below
        return {"env"} if isinstance(env, dict) and ("id" in env or isinstance(env.get("args"), dict)) else set()

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]:
        sizes: dict[tuple[str, ...], tuple[int, str]] = {}
        for key_path, field_path in (
            (("trainer", "gpus"), ("gpu",)),
            (("inference", "gpus"), ("services", "server", "gpu")),
            (("inference", "args", "tensor_parallel_size"), ("services", "server", "tensor_parallel_size")),
            (("inference", "args", "port"), ("services", "server", "port")),
        ):
            value = _mapping(native, *key_path[:-1]).get(key_path[-1])
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                sizes[field_path] = (value, ".".join(key_path))
        return sizes

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        foreign = _foreign_format(native)
        if foreign:
            return [foreign]  # one clear line, not a dozen about keys of another program's schema
        problems = super().validate_config(native, training_type)
        if "model" in native and (not isinstance(native["model"], str) or not native["model"]):
            problems.append("`model` must be a model name or a path such as /checkpoints/base")
        if "env" in native and "environment" in native:
            problems.append("`env` and `environment` both give vf-rl's [env] section; keep one")
        env = _mapping(native, "env") if ("env" in native or "environment" in native) else None
        if env is not None and (not isinstance(env.get("id"), str) or not env["id"]):
            problems.append("`env.id` must name the verifiers environment (a module with `load_environment`, or a hub id)")
        for section, known in SCHEMA_KEYS.items():
            node = _mapping(native, section) if section else native
            for key in sorted(set(node) - known, key=str):
                where = f"{section}.{key}" if section else key
                problems.append(
                    f"`{where}` is not read by verifiers' vf-train; trainer settings go under `trainer.args`, "
                    f"vf-vllm options under `inference.args` (known here: {', '.join(sorted(known))})"
                )
        for section in ("environment", "inference", "trainer"):
            if section in native and not isinstance(native[section], dict):
                problems.append(f"`{section}` must be a mapping")
            elif "args" in _mapping(native, section) and not isinstance(native[section]["args"], dict):
                problems.append(f"`{section}.args` must be a mapping")
        for key, value in _mapping(native, "inference", "args").items():
            if isinstance(value, list):
                problems.append(f"`inference.args.{key}`: a list has no single vf-vllm flag form; use a string")
        for path in _non_string_keys(native, ""):
            last = path.rsplit(".", 1)[-1]
            problems.append(f"`{path}`: a TOML key is a string; quote it in the file ('{last}': ...)")
        for path in _nulls(native, ""):
            problems.append(f"`{path}` is null, which TOML cannot hold; remove the key or give a value")
        accelerate = native.get("accelerate_config")
        if accelerate not in ACCELERATE_CONFIGS:
            problems.append(f"`accelerate_config: {accelerate}` is not one of {', '.join(ACCELERATE_CONFIGS)}")
        return problems + _count_problems(native)

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        server = server_sizing(context, "server", VLLM_PORT)
        args = dict(_mapping(native, "trainer", "args"))
        _check_batch(args, total_processes(context))
        ours = {"vllm_server_host": context.names["server"], "vllm_server_port": server.port}
        _check_managed(args, ours, "trainer.args", "is set by cw to the run's server")
        args.setdefault("output_dir", context.output_dir)
        args.setdefault("run_name", _mapping(native, "trainer").get("run_name") or context.run_name)
        args.update(ours)
        server_args = dict(_mapping(native, "inference", "args"))
        managed = {
            "model": native.get("model"),
            "host": "0.0.0.0",
            "port": server.port,
            "tensor_parallel_size": server.tensor_parallel,
            "data_parallel_size": server.data_parallel,
        }
        _check_managed(server_args, managed, "inference.args", "is set by cw from {}", SERVER_MANAGED_ARGS)
        config = {("env" if key == "environment" else key): value for key, value in native.items()}
        # vf-rl's own GPU counts, written from cw's sizing so the mounted file tells the truth;
        # the flags cw derives itself are left out of `inference.args` (same values, checked above).
        inference = {**_mapping(native, "inference"), "gpus": server.gpus}
        if "args" in inference:
            inference["args"] = {k: v for k, v in server_args.items() if k not in managed}
        config["inference"] = inference
        config["trainer"] = {**_mapping(native, "trainer"), "gpus": context.gpus, "args": args}
        return config

    def setup_commands(self, config: dict[str, Any], context: RunContext) -> list[list[str]]:
        env_id = str(config["env"]["id"])
        if _module_name(env_id) in self._shipped_modules(context):
            return []
        # As vf-rl does before vf-train: install the environment from its hub (needs network).
        return [["prime", "env", "install", env_id, "--with", "pip"]]

    @staticmethod
    def _shipped_modules(context: RunContext) -> set[str]:
        return {Path(name).stem for name in context.cluster.files if name.endswith(".py")}

    def serialize_config(self, config: dict[str, Any]) -> str:
        import tomli_w  # lazily: only verifiers runs need it

        try:
            return tomli_w.dumps(config)
        except (TypeError, ValueError) as exc:  # a value TOML has no form for (a set, bytes, a non-string key)
            raise ValueError(f"the config cannot be written as verifiers' TOML: {exc}") from None

    def pip_packages(self, config: dict[str, Any], context: RunContext) -> list[str]:
        # A user's image (`image:`) is taken as complete; the pinned default lacks verifiers.
        packages = [] if context.cluster.image else list(VERIFIERS_STACK)
        if self.setup_commands(config, context):
            packages.append(PRIME_CLI)
        return packages

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        return self._launch(config, context, ["-m", "verifiers.scripts.train"])

    def script_command(
        self, config: dict[str, Any], context: RunContext, script: str
    ) -> tuple[list[str], dict[str, Any]]:
        # A user script takes the same `@ config.toml` arguments as verifiers' own vf-train.
        return self._launch(config, context, [script]), config

    @staticmethod
    def _launch(config: dict[str, Any], context: RunContext, program: list[str]) -> list[str]:
        strategy = config["accelerate_config"]
        if strategy == "multi_gpu":
            launch = ["accelerate", "launch", *accelerate_args(context)]
        else:
            launch = [
                "accelerate",
                "launch",
                "--use_deepspeed",
                "--zero_stage",
                strategy.removeprefix("zero"),
                *accelerate_args(context, distributed_mode=False),
            ]
        return [*launch, *program, "@", f"{CONFIG_MOUNT}/{CONFIG_NAME}"]

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        server = server_sizing(context, "server", VLLM_PORT)
        managed = set(SERVER_MANAGED_ARGS)
        own_args = {k: v for k, v in _mapping(native, "inference", "args").items() if k not in managed}
        command = ["vf-vllm", "--model", str(native["model"]), *server_flags(own_args), *server.parallel_args()]
        definition = server.service(context.cluster.image or VERIFIERS_IMAGE, command, "/health")
        return [replace(definition, extra_ports={"weight-sync": WEIGHT_SYNC_PORT}, headless=True)]


def _module_name(env_id: str) -> str:
    """The module verifiers imports for an environment id (its own rule: last path part, '-' -> '_')."""
    return env_id.replace("-", "_").split("/")[-1]


def _count_problem(key: str, value: object, largest: int, what: str) -> str | None:
    """Why a count is no whole number from 1 to ``largest`` (None when it is one)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= largest:
        return None
    text = json.dumps(value) if isinstance(value, (bool, str)) else str(value)  # as the file writes it
    shown = text if len(text) <= 24 else text[:24] + "..."
    return f"`{key}: {shown}` must be a whole number of {what} from 1 to {largest}"


def _count_problems(native: dict[str, Any]) -> list[str]:
    """GPU counts and vf-train's batch sizes that no run can have (0, -1, 2^70, true, 1.5)."""
    problems = []
    for dotted, field in GPU_COUNTS.items():
        section, key = dotted.split(".")
        node = _mapping(native, section)
        if key in node and (problem := _count_problem(dotted, node[key], MAX_GPUS, f"GPUs (cw's `{field}`)")):
            problems.append(problem)
    args = _mapping(native, "trainer", "args")
    for key, what in TRAINER_COUNTS.items():
        if key in args and (problem := _count_problem(f"trainer.args.{key}", args[key], MAX_COUNT, what)):
            problems.append(problem)
    return problems


def _check_managed(
    written: dict[str, Any], ours: dict[str, Any], section: str, why: str, where: dict[str, str] | None = None
) -> None:
    """A setting cw manages may be written only with the value cw uses."""
    for key, value in ours.items():
        if key in written and written[key] != value:
            reason = why.format((where or {}).get(key, ""))
            raise ValueError(f"`{section}.{key}: {written[key]}` {reason}, which gives {value}; remove it")


def _check_batch(args: dict[str, Any], processes: int) -> None:
    """RLConfig's own batch checks, made before the run instead of in the pod."""
    batch = args.get("batch_size", 512)
    micro = args.get("micro_batch_size", 8)
    rollouts = args.get("rollouts_per_example", 16)
    if isinstance(batch, int) and isinstance(micro, int) and micro > 0 and batch % (micro * processes):
        raise ValueError(
            f"`trainer.args.batch_size: {batch}` must be a multiple of micro_batch_size ({micro}) x "
            f"trainer processes ({processes}); try batch_size: {micro * processes * max(1, batch // (micro * processes))}"
        )
    if isinstance(rollouts, int) and rollouts < 2:
        raise ValueError("`trainer.args.rollouts_per_example` must be at least 2 (GRPO compares rollouts)")


def get_plugin() -> SimplePlugin:
    """Entry point: verifiers as a plugin, registered like any other."""
    return SimplePlugin(VerifiersFramework, __version__)


def _trainer_args(native: dict[str, Any]) -> dict[str, Any]:
    trainer = native.get("trainer")
    args = trainer.get("args") if isinstance(trainer, dict) else None
    return args if isinstance(args, dict) else {}
