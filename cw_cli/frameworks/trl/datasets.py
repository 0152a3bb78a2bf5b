"""The datasets `trl <type>` trains on and the columns it reads from them (TRL 1.16), declared so
cw checks them before launch."""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.base import DatasetNeed, TrainingType, dataset_item_need

#: TRL's built-in rewards that read a dataset column besides the prompt (trl/rewards/accuracy_rewards.py).
REWARD_COLUMNS = {"accuracy_reward": "solution", "reasoning_accuracy_reward": "solution"}


def accepted_columns(
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


