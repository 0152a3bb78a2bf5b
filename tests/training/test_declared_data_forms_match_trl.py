"""The dataset forms cw accepts before launch are the ones TRL 1.16 prepares: for each column set
`TRLFramework.dataset_needs` declares for sft, dpo, kto and reward, TRL's own trainer (whose
__init__ prepares the dataset: prompt extraction, unpairing, EOS, tokenization) accepts a small
dataset of exactly those columns, and a form cw refuses fails there too. GRPO, RLOO and
distillation read their columns only at the first training step (`prompt`):
test_generation_data_forms_match_trl.py trains that step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cw_cli.frameworks.trl import TRLFramework
from cw_cli.types import TrainingType

pytestmark = pytest.mark.training

USER = [{"role": "user", "content": "what is two plus three ?"}]
#: A plausible value per column name, in the shape TRL expects it.
VALUES: dict[str, Any] = {
    "messages": [*USER, {"role": "assistant", "content": "five ."}],
    "conversations": [{"from": "user", "value": "hi"}, {"from": "assistant", "value": "hello ."}],
    "text": "the sky is blue .",
    "prompt": "what is two plus three ?",
    "completion": " five .",
    "chosen": "what is two plus three ? five .",
    "rejected": "what is two plus three ? six .",
    "label": True,
    "input_ids": [2, 10, 11, 12],
    "chosen_ids": [2, 10, 11],
    "rejected_ids": [2, 10, 12],
    "chosen_input_ids": [2, 10, 11],
    "rejected_input_ids": [2, 10, 12],
    "question": "what is two plus three ?",
    "answer": "five",
}
#: Per type: a form cw refuses that TRL's preparation also fails on.
REFUSED = {
    "sft": {"question", "answer"},
    "dpo": {"prompt", "completion", "label"},
    "kto": {"completion", "label"},
    "reward": {"prompt", "completion"},
}


def _rows(columns: set[str]) -> list[dict[str, Any]]:
    rows = [{c: VALUES[c] for c in sorted(columns)} for _ in range(4)]
    if "label" in columns:
        rows[1]["label"] = rows[3]["label"] = False  # KTO wants both kinds
    return rows


def _declared(type_name: str) -> list[frozenset[str]]:
    needs = TRLFramework().dataset_needs({"dataset_name": "x"}, TrainingType(type_name))
    return list(needs[0].accepted)


def _trainer(type_name: str, rows: list[dict[str, Any]], policy: Path, reward_model: Path, out: Path) -> Any:
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer

    data = Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    common = {"output_dir": str(out), "report_to": "none", "max_steps": 1, "per_device_train_batch_size": 2,
              "use_cpu": True, "bf16": False}  # fmt: skip
    if type_name == "sft":
        return trl.SFTTrainer(model=str(policy), args=trl.SFTConfig(**common), train_dataset=data, processing_class=tokenizer)
    if type_name == "dpo":
        return trl.DPOTrainer(model=str(policy), args=trl.DPOConfig(**common), train_dataset=data, processing_class=tokenizer)
    if type_name == "kto":
        return trl.KTOTrainer(model=str(policy), args=trl.KTOConfig(**common), train_dataset=data, processing_class=tokenizer)
    return trl.RewardTrainer(model=str(reward_model), args=trl.RewardConfig(**common), train_dataset=data,
                             processing_class=tokenizer)  # fmt: skip


@pytest.mark.parametrize("type_name", ["sft", "dpo", "kto", "reward"])
def test_every_declared_form_is_prepared_by_trl(type_name, tiny_model, tiny_reward_model, tmp_path):
    for index, form in enumerate(_declared(type_name)):
        try:
            _trainer(type_name, _rows(set(form)), tiny_model, tiny_reward_model, tmp_path / str(index))
        except Exception as exc:  # noqa: BLE001 - name the form TRL refused
            pytest.fail(f"`trl {type_name}` refused the form cw accepts {sorted(form)}: {exc!r}")


@pytest.mark.parametrize("type_name", sorted(REFUSED))
def test_a_form_cw_refuses_fails_in_trl_too(type_name, tiny_model, tiny_reward_model, tmp_path):
    form = REFUSED[type_name]
    assert not any(accepted <= form for accepted in _declared(type_name))
    with pytest.raises(KeyError) as info:  # a column TRL's preparation reads is missing
        _trainer(type_name, _rows(form), tiny_model, tiny_reward_model, tmp_path)
    missing = info.value.args[0]
    assert any(missing in accepted for accepted in _declared(type_name)), missing
