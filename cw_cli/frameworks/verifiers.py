"""verifiers: its own RL stack, `vf-vllm` (inference) plus `vf-train @ config.toml` under accelerate.

The native config is the TOML that verifiers' `vf-rl` reads (``model``, ``[env]``,
``[inference]``, ``[trainer]``), written in YAML beside cw's fields and mounted as
``/etc/cw/config.toml``; its ``[env]`` section is spelled ``environment:`` in the YAML because
``env:`` is cw's field for environment variables. verifiers 0.1.9.post3 is the newest PyPI release whose trainer and
``vf-vllm`` are in the package (later releases moved them out, and no longer publish them on PyPI), so
cw pins it and installs it over the vLLM image it was built against when the image lacks it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from cw_cli import __version__
from cw_cli.frameworks.base import (
    CONFIG_MOUNT,
    BaseTrainingFramework,
    RunContext,
    ServiceDef,
    TrainingType,
)
from cw_cli.frameworks.launch import accelerate_args, total_processes
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.runtime_files import user_file
from cw_cli.frameworks.servers import server_sizing

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
#: vf-vllm flags cw derives from `services.server` (name in `inference.args` -> where to set it).
SERVER_MANAGED_ARGS = {
    "model": "`model`",
    "host": "nothing (cw listens on 0.0.0.0)",
    "port": "`services.server.port`",
    "tensor_parallel_size": "`services.server.tensor_parallel_size`",
    "data_parallel_size": "`services.server.gpu` (data parallel = GPUs / tensor parallel)",
}
#: RLConfig fields cw sets to reach the run's server and volume.
TRAINER_MANAGED_ARGS = ("vllm_server_host", "vllm_server_port")
#: The keys vf-rl and vf-train read (section -> its keys); anything else would be ignored silently.
SCHEMA_KEYS = {
    "": {"model", "environment", "inference", "trainer", "script", "accelerate_config"},
    "environment": {"id", "args"},
    "inference": {"gpus", "args"},
    "trainer": {"gpus", "args"},
}


def _mapping(native: dict[str, Any], *path: str) -> dict[str, Any]:
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
    training_types = (TrainingType.GRPO,)
    aliases = {"rlhf": TrainingType.GRPO}
    config_file_name = CONFIG_NAME

    def default_image(self, training_type: TrainingType) -> str:
        return VERIFIERS_IMAGE

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        # RLConfig reports to wandb by default, which fails in a pod without a login; opt in
        # with `trainer.args.report_to: wandb` and a WANDB_API_KEY secret.
        return {"accelerate_config": "zero3", "trainer": {"args": {"report_to": "none"}}}

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        return [("model",), ("environment",)]

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        problems = super().validate_config(native, training_type)
        if "model" in native and (not isinstance(native["model"], str) or not native["model"]):
            problems.append("`model` must be a model name or a path such as /checkpoints/base")
        env = native.get("environment")
        if env is not None and (not isinstance(env, dict) or not isinstance(env.get("id"), str) or not env["id"]):
            problems.append("`environment.id` must name the verifiers environment (a module with `load_environment`)")
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
        for key in SERVER_MANAGED_ARGS.keys() & _mapping(native, "inference", "args").keys():
            problems.append(f"`inference.args.{key}` is set by cw from {SERVER_MANAGED_ARGS[key]}; remove it")
        for key, value in _mapping(native, "inference", "args").items():
            if isinstance(value, list):
                problems.append(f"`inference.args.{key}`: a list has no single vf-vllm flag form; use a string")
        for key in set(TRAINER_MANAGED_ARGS) & _mapping(native, "trainer", "args").keys():
            problems.append(f"`trainer.args.{key}` is set by cw to the run's server; remove it")
        for path in _nulls(native, ""):
            problems.append(f"`{path}` is null, which TOML cannot hold; remove the key or give a value")
        script = native.get("script")
        if script is not None and (not isinstance(script, str) or not script.endswith(".py")):
            problems.append("`script` must be the path of a .py training script")
        accelerate = native.get("accelerate_config")
        if accelerate not in ACCELERATE_CONFIGS:
            problems.append(f"`accelerate_config: {accelerate}` is not one of {', '.join(ACCELERATE_CONFIGS)}")
        return problems

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        server = server_sizing(context, "server", VLLM_PORT)
        _check_gpu_split(native, server.gpus, context.gpus)
        args = dict(_mapping(native, "trainer", "args"))
        _check_batch(args, total_processes(context))
        args.setdefault("output_dir", context.output_dir)
        args.setdefault("run_name", context.run_name)
        args.update(vllm_server_host=context.names["server"], vllm_server_port=server.port)
        config = {("env" if key == "environment" else key): value for key, value in native.items()}
        if "script" in config:
            config["script"] = Path(str(native["script"])).name
        # vf-rl's own GPU counts, written from cw's sizing so the mounted file tells the truth.
        config["inference"] = {**_mapping(native, "inference"), "gpus": server.gpus}
        config["trainer"] = {**_mapping(native, "trainer"), "gpus": context.gpus, "args": args}
        return config

    def serialize_config(self, config: dict[str, Any]) -> str:
        import tomli_w  # lazily: only verifiers runs need it

        return tomli_w.dumps(config)

    def pip_packages(self, config: dict[str, Any], context: RunContext) -> list[str]:
        # A user's image (`image:`) is taken as complete; the pinned default lacks verifiers.
        return [] if context.cluster.image else list(VERIFIERS_STACK)

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        if "script" not in native:
            return {}
        name, text = user_file(base_dir, str(native["script"]), "script")
        return {name: text}

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
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
        # A user script takes the same `@ config.toml` arguments as verifiers' own vf-train.
        program = [f"{CONFIG_MOUNT}/{config['script']}"] if "script" in config else ["-m", "verifiers.scripts.train"]
        return [*launch, *program, "@", f"{CONFIG_MOUNT}/{CONFIG_NAME}"]

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        server = server_sizing(context, "server", VLLM_PORT)
        command = [
            "vf-vllm",
            "--model",
            str(native["model"]),
            *server_flags(_mapping(native, "inference", "args")),
            *server.parallel_args(),
        ]
        definition = server.service(context.cluster.image or VERIFIERS_IMAGE, command, "/health")
        return [replace(definition, extra_ports={"weight-sync": WEIGHT_SYNC_PORT}, headless=True)]


def _check_gpu_split(native: dict[str, Any], server_gpus: int, trainer_gpus: int) -> None:
    """vf-rl's `inference.gpus` / `trainer.gpus`, when written, must agree with cw's sizing."""
    for section, actual, field in (
        ("inference", server_gpus, "services.server.gpu"),
        ("trainer", trainer_gpus, "gpu (or --gpu)"),
    ):
        wanted = _mapping(native, section).get("gpus")
        if wanted is not None and wanted != actual:
            raise ValueError(
                f"`{section}.gpus: {wanted}` but cw gives the {section} {actual} GPUs; "
                f"set `{field}: {wanted}`, which sizes the pod (or remove `{section}.gpus`)"
            )


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
