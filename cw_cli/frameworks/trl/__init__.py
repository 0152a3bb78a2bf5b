"""TRL: `trl sft|dpo|grpo|kto|reward|rloo|distillation --config ...`, with a vLLM generation server and a reward
server for the types that generate online (GRPO, RLOO).

Everything cw knows of TRL is in this package: the framework (here), the keys `trl` reads
(``trl_keys.json``), how its config reads for the memory estimate (``setup.py``, loaded only when
an estimate is made) and its words for suggestions and failure advice (:data:`TRL_WORDS`).
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
    CONFIG_MOUNT,
    BaseTrainingFramework,
    DatasetNeed,
    FailureHint,
    RunContext,
    ServiceDef,
    TrainingType,
    dataset_item_need,
)
from cw_cli.frameworks.distributed import accelerate_args, total_processes
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.runtime_files import (
    REWARD_CLIENT_FILE,
    REWARD_FUNCTION,
    REWARD_PORT,
    REWARD_SERVER_FILE,
    REWARD_URL_ENV,
    runtime_file,
)
from cw_cli.frameworks.servers import server_sizing
from cw_cli.types import CODE_MOUNT

TRL_IMAGE = "huggingface/trl:1.16.0"  # TRL's own image (built from its docker/trl); no vLLM inside
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
VLLM_PORT = 8000
KEYS_FILE = Path(__file__).with_name("trl_keys.json")
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
#: What configs written for one machine put in `vllm_server_host` (TRL's default is 0.0.0.0).
LOCAL_HOSTS = ("0.0.0.0", "localhost", "127.0.0.1")
#: TRL's keys for what cw's memory suggestions and failure advice name.
TRL_WORDS = ConfigWords(
    micro_batch="per_device_train_batch_size",
    accumulation="gradient_accumulation_steps",
    checkpointing="gradient_checkpointing",
    bf16_weights=("dtype: bfloat16",),
    length="max_length",
    completion="max_completion_length",
    optimizer="optim",
    lora=("use_peft: true",),
    qlora=("use_peft: true", "load_in_4bit: true"),
    zero3="accelerate_config: zero3",
    zero3_offload="accelerate_config: <a DeepSpeed ZeRO-3 file with offload_optimizer_device: cpu and "
    "offload_param_device: cpu>",
    vllm_max_model_len="vllm_max_model_length",
    vllm_gpu_memory_utilization="vllm_gpu_memory_utilization",
    max_steps="max_steps",
)


class TRLFramework(BaseTrainingFramework):
    """Hugging Face TRL through its own command line."""

    name = "trl"
    description = "Hugging Face TRL: SFT, DPO, GRPO, KTO, reward models, RLOO and distillation through the `trl` command line"
    #: Every training command of `trl` 1.16 (trl/cli/commands/__init__.py).
    training_types = (
        TrainingType.SFT,
        TrainingType.DPO,
        TrainingType.GRPO,
        TrainingType.KTO,
        TrainingType.REWARD,
        TrainingType.RLOO,
        TrainingType.DISTILLATION,
    )
    aliases = {"rlhf": TrainingType.GRPO}
    entrypoint_resumes = True
    model_revision_key = "model_revision"
    words = TRL_WORDS
    count_keys = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps")
    setup_module = "cw_cli.frameworks.trl.setup"

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """What only TRL's log says: its vLLM client gave up on the generation server.

        The trainer starts only once its servers answer (cw's init containers), so this is a
        server that died or hung mid-run (TRL 1.16, ``trl/generation/vllm_client.py``).
        """
        return (
            FailureHint(
                kind="vllm-server-lost",
                pattern=r"The vLLM server can't be reached at \S+ after \S+ seconds",
                summary="vLLM server lost",
                message="the trainer's vLLM client could not reach the generation server (it answered at the start)",
                fix="see why it stopped: cw logs RUN --role server; a server that ran out of GPU memory needs a "
                "lower `vllm_gpu_memory_utilization` or a larger `services.server.gpu`",
            ),
        )
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

    def default_image(self, training_type: TrainingType) -> str:
        return TRL_IMAGE


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
        if _inline_chat_template(config, training_type):
            notes.append("`chat_template` (a template string) ships as /etc/cw/chat_template.jinja for `chat_template_path`")
        return config, notes

    def dataset_needs(self, native: dict[str, Any], training_type: TrainingType) -> list[DatasetNeed]:
        accepted = _accepted_columns(native, training_type)
        if accepted is None:
            return []
        forms, description = accepted
        return trl_dataset_references(native, forms, description)

    def _uses_generation_server(self, native: dict[str, Any], context: RunContext) -> bool:
        return context.training_type.generates and wants_vllm_server(native, context.cluster.services)

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

    def _uses_reward_server(self, context: RunContext) -> bool:
        reward = context.cluster.services.get("reward")
        return context.training_type.generates and reward is not None and reward.model is not None

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        config = dict(native)
        config.setdefault("output_dir", context.output_dir)
        own_script = context.cluster.script is not None  # its own parser reads `chat_template`
        if _inline_chat_template(native, context.training_type) and not own_script:
            # open-r1 writes the template itself; `trl` reads a template file from chat_template_path.
            config["chat_template_path"] = f"{CONFIG_MOUNT}/{CHAT_TEMPLATE_FILE}"
            del config["chat_template"]
        if "num_processes" in config:  # TRL hands it to accelerate; keep the file true to the pod
            config["num_processes"] = total_processes(context)
        if self._uses_generation_server(native, context):
            host, port = context.names["server"], server_sizing(context, "server", VLLM_PORT).port
            written = native.get("vllm_server_host")
            if written is not None and written not in (host, *LOCAL_HOSTS):
                raise ValueError(
                    f"`vllm_server_host: {written}` names another server, but cw runs the run's own at {host}; remove it"
                )
            config.update(use_vllm=True, vllm_mode="server", vllm_server_host=host, vllm_server_port=port)
        if self._uses_reward_server(context):
            funcs = config.get("reward_funcs") or []
            funcs = [funcs] if isinstance(funcs, str) else list(funcs)
            if REWARD_FUNCTION not in funcs:
                funcs.append(REWARD_FUNCTION)
            config["reward_funcs"] = funcs
        return config

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        files: dict[str, str] = {}
        if _inline_chat_template(native, context.training_type) and context.cluster.script is None:
            files[CHAT_TEMPLATE_FILE] = native["chat_template"]
        if self._uses_reward_server(context):
            files[REWARD_SERVER_FILE] = runtime_file(REWARD_SERVER_FILE)
            files[REWARD_CLIENT_FILE] = runtime_file(REWARD_CLIENT_FILE)
        return files

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        return [
            "trl",
            context.training_type.value,
            "--config",
            CONFIG_FILE,
            *accelerate_args(context, distributed_mode="accelerate_config" not in config),
        ]

    def script_command(
        self, config: dict[str, Any], context: RunContext, script: str
    ) -> tuple[list[str], dict[str, Any]]:
        # What `trl <type> --config` does for its own scripts: the launcher's keys become
        # `accelerate launch` flags, the rest stays in the file the script's TrlParser reads.
        launcher = launcher_only_keys(context.training_type)
        mounted = {key: value for key, value in config.items() if key not in launcher}
        flags: list[str] = []
        for key, value in config.items():
            if key not in launcher or key in ("num_processes", "num_machines") or value is None or value is False:
                continue  # cw sizes the run from the config's process counts already
            if key == "accelerate_config":
                flags += ["--config_file", _accelerate_file(value, context)]
            else:
                flags += [f"--{key}"] if value is True else [f"--{key}", str(value)]
        distributed = "accelerate_config" not in config
        command = ["accelerate", "launch", *accelerate_args(context, distributed_mode=distributed), *flags, script]
        return [*command, "--config", CONFIG_FILE], mounted

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        if self._uses_reward_server(context):
            port = server_sizing(context, "reward", REWARD_PORT).port
            return {REWARD_URL_ENV: f"http://{context.names['reward']}:{port}"}
        return {}

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        services: list[ServiceDef] = []
        if self._uses_generation_server(native, context):
            server = server_sizing(context, "server", VLLM_PORT)
            # What `trl vllm-serve` (deprecated in TRL 1.16) runs: vLLM with the weight-sync and
            # logprob settings TRL's server mode relies on.
            command = [
                "vllm",
                "serve",
                str(native["model_name_or_path"]),
                *vllm_model_args(native),
                *server.parallel_args(),
                "--weight-transfer-config",
                '{"backend":"nccl"}',
                "--logprobs-mode",
                "processed_logprobs",
                "--max-logprobs",
                "-1",
            ]
            services.append(server.service(VLLM_IMAGE, command, "/health", {"VLLM_SERVER_DEV_MODE": "1"}))
        if self._uses_reward_server(context):
            reward = server_sizing(context, "reward", REWARD_PORT)
            command = [
                "python",
                f"{CONFIG_MOUNT}/{REWARD_SERVER_FILE}",
                "--model",
                str(context.cluster.services["reward"].model),
                "--host",
                "0.0.0.0",
                "--port",
                str(reward.port),
            ]
            services.append(reward.service(context.cluster.image or TRL_IMAGE, command, "/health"))
        return services


#: Keys of older TRL / transformers releases (what TRL's docs, open-r1 and alignment-handbook
#: still write) -> their current name, or None where the setting is gone. cw translates them with
#: a note; `warmup_steps` below 1 is a ratio in transformers 5, so `warmup_ratio` carries over.
RENAMED_KEYS: dict[str, str | None] = {
    "max_seq_length": "max_length",
    "torch_dtype": "dtype",
    "warmup_ratio": "warmup_steps",
    "evaluation_strategy": "eval_strategy",
    "overwrite_output_dir": None,  # cw gives each run its own folder and resumes there
}


CHAT_TEMPLATE_FILE = "chat_template.jinja"


def _inline_chat_template(native: dict[str, Any], training_type: TrainingType = TrainingType.SFT) -> bool:
    """An open-r1-style template string, for a command that reads `chat_template_path` (trl sft)."""
    return (
        training_type is TrainingType.SFT
        and isinstance(native.get("chat_template"), str)
        and "chat_template_path" not in native
    )


@lru_cache(maxsize=1)
def trl_keys() -> dict[str, Any]:
    """Keys `trl <type> --config` reads, per type, and `accelerate launch`'s (generated by tools/trl_keys.py)."""
    import json  # lazily, like everything only validation needs: `cw --help` stays fast

    return json.loads(KEYS_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def every_trl_key() -> frozenset[str]:
    """Keys `trl` reads for any training type, and `accelerate launch`'s."""
    keys = trl_keys()
    return frozenset(key for part in [*(t.value for t in TrainingType), "launcher"] for key in keys.get(part, ()))


def launcher_only_keys(training_type: TrainingType) -> frozenset[str]:
    """`accelerate launch` options a TRL config may carry that no training argument shares
    (``env`` stays: TrlParser reads it)."""
    keys = trl_keys()
    return frozenset(keys["launcher"]) - set(keys[training_type.value]) - {"env"}


def _accelerate_file(value: object, context: RunContext) -> str:
    """`accelerate_config` for `accelerate launch --config_file`: a shipped file, or a path in the run's code."""
    text = str(value)
    if text.startswith("/"):
        return text  # shipped with the run (/etc/cw/files/...) or in the image
    if context.cluster.code is not None and text.endswith((".yaml", ".yml", ".json")):
        return f"{CODE_MOUNT}/{text}"
    raise ValueError(
        f"`accelerate_config: {text}` names no file next to the config; a script run takes a file (`accelerate "
        "launch --config_file`), not one of trl's named configs; put it next to the config or in `code`"
    )


def _unknown_keys(native: dict[str, Any], training_type: TrainingType) -> list[str]:
    """Keys `trl` would hand to `accelerate launch`, which stops at any option it does not know."""
    keys = trl_keys()
    known = set(keys[training_type.value]) | set(keys["launcher"])
    if _inline_chat_template(native, training_type):
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


#: TRL's built-in rewards that read a dataset column besides the prompt (trl/rewards/accuracy_rewards.py).
REWARD_COLUMNS = {"accuracy_reward": "solution", "reasoning_accuracy_reward": "solution"}


def _accepted_columns(
    native: dict[str, Any], training_type: TrainingType
) -> tuple[tuple[frozenset[str], ...], str] | None:
    """The column sets `trl <type>` 1.16 accepts (any one suffices) and who reads them, or None
    where TRL reads the data in a way cw cannot tell (preparation skipped)."""
    kind = training_type
    command = f"`trl {kind.value}`"
    if kind is TrainingType.SFT:
        kwargs = native.get("dataset_kwargs")
        if isinstance(kwargs, dict) and kwargs.get("skip_prepare_dataset"):
            return None  # the user hands the collator ready examples
        text = native.get("dataset_text_field") or "text"
        if not isinstance(text, str):
            return None
        # trl/trainer/sft_trainer.py: pre-tokenized `input_ids`; ShareGPT `conversations` (converted to
        # `messages`); conversational `messages`; the `dataset_text_field` column; prompt-completion.
        sft_forms = ({"messages"}, {text}, {"prompt", "completion"}, {"conversations"}, {"input_ids"})
        renamed = " (`dataset_text_field`)" if text != "text" else ""
        return _frozen(sft_forms), f"{command} reads `messages`, `{text}`{renamed}, or `prompt` and `completion`"
    if kind is TrainingType.DPO:
        # dpo_trainer.py: explicit prompt, or the implicit form (extract_prompt splits chosen/rejected).
        return _frozen(({"prompt", "chosen", "rejected"}, {"chosen", "rejected"})), (
            f"{command} reads `prompt`, `chosen` and `rejected` (or `chosen` and `rejected` with the prompt inside)"
        )
    if kind is TrainingType.KTO:
        # kto_trainer.py: unpaired prompt/completion/label; paired data is unpaired by the trainer.
        forms = ({"prompt", "completion", "label"}, {"prompt", "chosen", "rejected"}, {"chosen", "rejected"})
        return _frozen(forms), (
            f"{command} reads `prompt`, `completion` and `label` (or paired `chosen` and `rejected`, which it unpairs)"
        )
    if kind is TrainingType.REWARD:
        # reward_trainer.py: chosen/rejected (prompt optional), or pre-tokenized ids (legacy names too).
        forms = ({"chosen", "rejected"}, {"chosen_ids", "rejected_ids"}, {"chosen_input_ids", "rejected_input_ids"})
        return _frozen(forms), f"{command} reads `chosen` and `rejected` (a `prompt` is optional)"
    if kind in (TrainingType.GRPO, TrainingType.RLOO):
        funcs = native.get("reward_funcs")
        names = [funcs] if isinstance(funcs, str) else (funcs if isinstance(funcs, list) else [])
        readers = sorted({name for name in names if isinstance(name, str) and name in REWARD_COLUMNS})
        needed = {"prompt", *(REWARD_COLUMNS[name] for name in readers)}
        # A dotted reward function of the user's may read any column: cw cannot tell which.
        why = "".join(f"; `{name}` reads `{REWARD_COLUMNS[name]}`" for name in readers)
        return _frozen((needed,)), f"{command} reads `prompt`{why}"
    if kind is TrainingType.DISTILLATION:
        return _frozen(({"prompt"},)), f"{command} reads `prompt`"
    return None


def _frozen(forms: tuple[set[str], ...]) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(form) for form in forms)


def trl_dataset_references(
    native: dict[str, Any], accepted: tuple[frozenset[str], ...], description: str
) -> list[DatasetNeed]:
    """The datasets `trl` trains on: each of `datasets` (which wins), else `dataset_name`
    (trl/scripts/utils.py `get_dataset`; the scripts' `load_dataset(dataset_name, name=dataset_config)`)."""
    listed = native.get("datasets")
    if isinstance(listed, list) and listed:
        needs = []
        for index, item in enumerate(listed):
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                continue
            need = dataset_item_need(item, index, accepted, description)
            if need is not None:  # else data files cw cannot make out: nothing to check against
                needs.append(need)
        return needs
    name = native.get("dataset_name")
    if not isinstance(name, str) or not name:
        return []
    split = native.get("dataset_train_split")
    config = native.get("dataset_config")
    split = split if isinstance(split, str) else "train"
    return [
        DatasetNeed(
            key="dataset_name",
            reference=name,
            accepted=accepted,
            description=description,
            split=split,
            config_name=config if isinstance(config, str) else None,
        )
    ]


def wants_vllm_server(native: Mapping[str, Any], services: Collection[str]) -> bool:
    """Whether a GRPO or RLOO config generates with a separate vLLM server (the launch's rule,
    which the memory estimate follows too).

    TRL's own defaults are ``use_vllm: false`` and ``vllm_mode: colocate`` (TRL 1.16): only a
    config that asks for server mode, or configures ``services.server``, gets one.
    """
    if native.get("use_vllm") is False or native.get("vllm_mode") == "colocate":
        return False
    return (native.get("use_vllm") is True and native.get("vllm_mode") == "server") or "server" in services


#: TRL settings that describe the model or vLLM, and the `vllm serve` flag that carries each.
_VLLM_FLAGS = {
    "model_revision": "--revision",
    "dtype": "--dtype",
    "torch_dtype": "--dtype",  # older TRL / transformers spelling
    "vllm_max_model_length": "--max-model-len",
    "vllm_gpu_memory_utilization": "--gpu-memory-utilization",
    "vllm_model_impl": "--model-impl",
}


def vllm_model_args(native: dict[str, Any]) -> list[str]:
    """`vllm serve` flags for what the config says about the model, so the server loads the same one."""
    args: list[str] = []
    for key, flag in _VLLM_FLAGS.items():
        value = native.get(key)
        if value is not None and flag not in args:
            args += [flag, str(value)]
    if native.get("trust_remote_code") is True:
        args.append("--trust-remote-code")
    return args


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


def get_plugin() -> SimplePlugin:
    """Entry point: TRL as a plugin, registered like any other."""
    return SimplePlugin(TRLFramework, __version__)
