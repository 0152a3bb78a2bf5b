"""Reading and checking a verifiers config: vf-rl's sections and keys (another program's TOML is
refused as a whole), TOML's limits (no null, string keys), and the counts vf-train sizes by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cw_cli.frameworks.base import NativeConfig, TrainingType
from cw_cli.frameworks.tracking import Tracking, from_trainer_args
from cw_cli.frameworks.verifiers.pins import mapping_at, trainer_args

ACCELERATE_CONFIGS = ("zero1", "zero2", "zero3", "multi_gpu")
#: The keys of a vf-rl file (section -> its keys); anything else would be ignored silently.
#: `trainer.run_name` appears in verifiers' own published configs.
SCHEMA_KEYS = {
    "": {"model", "env", "environment", "inference", "trainer", "accelerate_config"},
    "env": {"id", "args"},
    "inference": {"gpus", "args"},
    "trainer": {"gpus", "args", "run_name"},
}
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




class VerifiersNativeConfig(NativeConfig):
    """vf-rl's TOML (``model``, ``[env]``, ``[inference]``, ``[trainer]``), as TOML or as YAML."""

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        # RLConfig reports to wandb by default, which fails in a pod without a login; opt in
        # with `trainer.args.report_to: wandb` and a WANDB_API_KEY secret.
        return {"accelerate_config": "zero3", "trainer": {"args": {"report_to": "none"}}}

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        return [("model",), ("env", "environment")]

    def tracking(self, native: dict[str, Any]) -> Tracking:
        # vf-train's RLConfig is a TrainingArguments: report_to and run_name live in trainer.args.
        return from_trainer_args(trainer_args(native))

    def wandb_setting(self, native: dict[str, Any]) -> str:
        return f"trainer.args.report_to: {trainer_args(native).get('report_to')}"

    def trained_environment(self, native: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        env = mapping_at(native, "env")
        env_id, args = env.get("id"), env.get("args")
        if not isinstance(env_id, str) or not env_id:
            return None  # validate_config says what is wrong with it
        return env_id, dict(args) if isinstance(args, dict) else {}

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
            value = mapping_at(native, *key_path[:-1]).get(key_path[-1])
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
        env = mapping_at(native, "env") if ("env" in native or "environment" in native) else None
        if env is not None and (not isinstance(env.get("id"), str) or not env["id"]):
            problems.append("`env.id` must name the verifiers environment (a module with `load_environment`, or a hub id)")
        for section, known in SCHEMA_KEYS.items():
            node = mapping_at(native, section) if section else native
            for key in sorted(set(node) - known, key=str):
                where = f"{section}.{key}" if section else key
                problems.append(
                    f"`{where}` is not read by verifiers' vf-train; trainer settings go under `trainer.args`, "
                    f"vf-vllm options under `inference.args` (known here: {', '.join(sorted(known))})"
                )
        for section in ("environment", "inference", "trainer"):
            if section in native and not isinstance(native[section], dict):
                problems.append(f"`{section}` must be a mapping")
            elif "args" in mapping_at(native, section) and not isinstance(native[section]["args"], dict):
                problems.append(f"`{section}.args` must be a mapping")
        for key, value in mapping_at(native, "inference", "args").items():
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
        node = mapping_at(native, section)
        if key in node and (problem := _count_problem(dotted, node[key], MAX_GPUS, f"GPUs (cw's `{field}`)")):
            problems.append(problem)
    args = mapping_at(native, "trainer", "args")
    for key, what in TRAINER_COUNTS.items():
        if key in args and (problem := _count_problem(f"trainer.args.{key}", args[key], MAX_COUNT, what)):
            problems.append(problem)
    return problems
