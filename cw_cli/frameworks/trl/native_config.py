"""Reading and checking a TRL config: the keys `trl <type>` reads, the spellings older releases
and recipe repositories use, its reward names, its datasets and the sizes it states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.frameworks.base import DatasetNeed, NativeConfig, TrainingType
from cw_cli.frameworks.runtime_files import REWARD_FUNCTION
from cw_cli.frameworks.trl.datasets import accepted_columns, trl_dataset_references
from cw_cli.frameworks.trl.pins import RENAMED_KEYS, every_trl_key, inline_chat_template, trl_keys
from cw_cli.frameworks.trl.services import wants_vllm_server

#: Keys of recipe repositories' own training scripts that `trl <cmd> --config` does not read (it
#: would pass them to `accelerate launch`, which stops): what to write instead.
FOREIGN_KEYS = {
    "dataset_mixer": "is read by alignment-handbook's own scripts, not `trl`; list the datasets under `datasets:` "
    "(each `{path: <hub id>, split: train}`) or set `dataset_name`",
    "dataset_mixture": "is read by open-r1's and alignment-handbook's own scripts, not `trl`; move "
    "`dataset_mixture.datasets` to `datasets:` (each item's `id` becomes `path`) or set `dataset_name`",
    "system_prompt": "is read by open-r1's own scripts, not `trl`, which has no such option; put the system message "
    "in the dataset's prompts and remove it",
    "dataset_prompt_column": "is read by open-r1's own scripts, not `trl`; `trl grpo` reads the `prompt` column, so "
    "rename the column in the dataset and remove it",
}
#: The other way round a recipe repository's keys: run the recipe's own script, as its authors did.
RECIPE_SCRIPT_FIX = (
    "`script`: instead of changing these keys, run the recipe's own training script, which reads them: add `code: {git: <its repository>, "
    "commit: <full commit id>}` and `script: <its script>`, e.g. https://github.com/huggingface/open-r1 with "
    "src/open_r1/grpo.py (docs/config.md, \"Your own code\")"
)


class TrlNativeConfig(NativeConfig):
    """What `trl` reads, checked before launch: unknown keys stop `accelerate launch` in the pod."""

    count_keys = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps")

    def known_native_keys(self) -> frozenset[str]:
        return every_trl_key()  # what `trl` reads is no misspelt cw field, whatever it looks like

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        keys: list[tuple[str, ...]] = [("model_name_or_path",), ("dataset_name", "datasets")]
        if training_type is TrainingType.DISTILLATION:
            keys.append(("teacher_model_name_or_path",))  # trl/scripts/distillation.py stops without it
        return keys

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        problems = super().validate_config(native, training_type)
        if "reward_files" in native:
            problems.append("`reward_files` is now the cw field `files` (it works for every framework)")
        if "reward_model_url" in native:
            problems.append("TRL has no `reward_model_url`; set `services.reward.model` and cw serves it")
        for key, fix in FOREIGN_KEYS.items():
            if key in native:
                problems.append(f"`{key}` {fix}")
        for old, new in RENAMED_KEYS.items():
            if old in native and new in native:
                problems.append(f"`{old}` and `{new}` are the same setting (`{old}` is its old name); keep `{new}`")
        problems += _unknown_keys(native, training_type)
        funcs = native.get("reward_funcs")
        if funcs is not None and not isinstance(funcs, (str, list)):
            problems.append("`reward_funcs` must be a name or a list of names / dotted import paths")
        elif funcs is not None and training_type.generates:
            problems += _unknown_reward_names(funcs, training_type)
        if any("own scripts" in problem or "another project's script" in problem or "open-r1 reward" in problem
               for problem in problems):  # fmt: skip
            problems.append(RECIPE_SCRIPT_FIX)
        if training_type.generates and native.get("use_vllm") and native.get("vllm_mode") == "server":
            if native.get("vllm_server_base_url"):
                problems.append(
                    "`vllm_server_base_url` points the trainer at a server of your own, but cw runs the run's vLLM "
                    "server itself; remove it (cw sets vllm_server_host/port to its Service)"
                )
        return problems

    def upgrade_config(self, native: dict[str, Any], training_type: TrainingType) -> tuple[dict[str, Any], list[str]]:
        config, notes = dict(native), []
        for old, new in RENAMED_KEYS.items():
            if old not in config:
                continue
            value = config.pop(old)
            if new is None:
                notes.append(f"`{old}` no longer exists in transformers 5; cw leaves it out")
            elif new in config and config[new] != value:
                config[old] = value  # keep both: validate_config reports the clash
            else:
                config[new] = value
                notes.append(f"`{old}: {value}` is spelled `{new}` in TRL {trl_keys()['trl']}; cw passes `{new}: {value}`")
        if inline_chat_template(config, training_type):
            notes.append("`chat_template` (a template string) ships as /etc/cw/chat_template.jinja for `chat_template_path`")
        return config, notes

    def dataset_needs(self, native: dict[str, Any], training_type: TrainingType) -> list[DatasetNeed]:
        accepted = accepted_columns(native, training_type)
        if accepted is None:
            return []
        forms, description = accepted
        return trl_dataset_references(native, forms, description)

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]:
        sizes: dict[tuple[str, ...], tuple[int, str]] = {}
        processes, machines, source = _process_count(native, base_dir)
        if processes is not None:
            if machines and machines > 1:
                sizes[("nodes",)] = (machines, f"num_machines{source}")
            sizes[("gpu",)] = (max(1, processes // max(1, machines or 1)), f"num_processes{source}")
        if training_type.generates and wants_vllm_server(native, {}):
            tensor = native.get("vllm_tensor_parallel_size")
            if isinstance(tensor, int) and not isinstance(tensor, bool) and tensor > 1:
                sizes[("services", "server", "tensor_parallel_size")] = (tensor, "vllm_tensor_parallel_size")
                sizes[("services", "server", "gpu")] = (tensor, "vllm_tensor_parallel_size")
            port = native.get("vllm_server_port")
            if isinstance(port, int) and not isinstance(port, bool):
                sizes[("services", "server", "port")] = (port, "vllm_server_port")
        return sizes


def _unknown_keys(native: dict[str, Any], training_type: TrainingType) -> list[str]:
    """Keys `trl` would hand to `accelerate launch`, which stops at any option it does not know."""
    keys = trl_keys()
    known = set(keys[training_type.value]) | set(keys["launcher"])
    if inline_chat_template(native, training_type):
        known.add("chat_template")
    problems = []
    # FOREIGN_KEYS have their own message; RENAMED_KEYS are translated by upgrade_config.
    for key in sorted(set(map(str, native)) - known - set(FOREIGN_KEYS) - set(RENAMED_KEYS)):
        from difflib import get_close_matches  # only for a config with a mistake

        close = get_close_matches(key, sorted(known), n=1, cutoff=0.8)  # typos only, not guesses
        fix = f"is not an option of `trl {training_type.value}` (TRL {keys['trl']})" + (
            f"; did you mean `{close[0]}`?" if close else "; it is read by another project's script, not by `trl`"
        )
        problems.append(f"`{key}` {fix} (trl would pass it to `accelerate launch`, which stops)")
    return problems


#: Reward function names `trl grpo` / `trl rloo` resolve themselves (trl/scripts/grpo.py
#: `reward_funcs_registry`); anything else must be a dotted import path.
TRL_REWARD_NAMES = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment")
#: open-r1's reward names (src/open_r1/rewards.py), which its own grpo.py resolves and `trl` does not.
OPEN_R1_REWARDS = ("accuracy", "format", "tag_count", "reasoning_steps", "cosine", "repetition_penalty", "length",
                   "code", "binary_code", "ioi_code", "cf_code", "code_format", "soft_overlong_punishment")


def _unknown_reward_names(funcs: str | list[Any], training_type: TrainingType) -> list[str]:
    """Plain names in `reward_funcs` that `trl` cannot resolve (it stops at start-up on them)."""
    names = [funcs] if isinstance(funcs, str) else funcs
    problems = []
    for name in names:
        if not isinstance(name, str) or "." in name or name in TRL_REWARD_NAMES or name == REWARD_FUNCTION:
            continue
        whose = " (an open-r1 reward, resolved by open-r1's own grpo.py)" if name in OPEN_R1_REWARDS else ""
        problems.append(
            f"`reward_funcs`: `{name}`{whose} is not a reward `trl {training_type.value}` knows; use one of "
            f"{', '.join(TRL_REWARD_NAMES)}, or a dotted path to your own function (`rewards.{name}` in a rewards.py "
            "next to the config ships with the run)"
        )
    return problems


def _process_count(native: dict[str, Any], base_dir: Path) -> tuple[int | None, int | None, str]:
    """``num_processes`` / ``num_machines`` from the config or the accelerate config file it names."""
    if isinstance(native.get("num_processes"), int):
        machines = native.get("num_machines") if isinstance(native.get("num_machines"), int) else None
        return native["num_processes"], machines, ""
    accelerate = native.get("accelerate_config")
    if isinstance(accelerate, str) and accelerate.endswith((".yaml", ".yml", ".json")):
        path = (base_dir / accelerate).expanduser()
        try:
            import yaml

            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError):
            return None, None, ""
        if isinstance(data, dict) and isinstance(data.get("num_processes"), int):
            machines = data.get("num_machines") if isinstance(data.get("num_machines"), int) else None
            return data["num_processes"], machines, f" (in {accelerate})"
    return None, None, ""
