"""The dataset forms cw accepts before a GRPO, RLOO or distillation launch are the ones TRL 1.16
trains on.

These trainers read their columns only at the first training step (`prompt`, and the columns a
reward function asks for), so each form `TRLFramework.dataset_needs` declares is trained for one
real step on CPU with a tiny model (the teacher of distillation is the same tiny model); a form
cw refuses (no `prompt`) fails in that step too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cw_cli.frameworks.trl import TRLFramework
from cw_cli.types import TrainingType

pytestmark = pytest.mark.training

PROMPTS = {
    "prompt (text)": lambda q: q,
    "prompt (conversational)": lambda q: [{"role": "user", "content": q}],
}
QUESTIONS = ["what is two plus three ?", "what is one plus one ?"]


def short_answer(completions: list[Any], **kwargs: Any) -> list[float]:
    """A reward that reads only the completions (so the declared form is `prompt` alone)."""
    return [-float(len(str(c))) for c in completions]


def _declared(type_name: str) -> list[frozenset[str]]:
    needs = TRLFramework().dataset_needs({"dataset_name": "x", "reward_funcs": ["rewards.short_answer"]},
                                         TrainingType(type_name))  # fmt: skip
    return list(needs[0].accepted)


def _train_one_step(type_name: str, rows: list[dict[str, Any]], policy: Path, out: Path) -> None:
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer

    common = {"output_dir": str(out), "report_to": "none", "max_steps": 1, "per_device_train_batch_size": 2,
              "num_generations": 2, "max_completion_length": 4, "use_cpu": True, "bf16": False,
              "logging_steps": 1, "save_strategy": "no"}  # fmt: skip
    data, tokenizer = Dataset.from_list(rows), AutoTokenizer.from_pretrained(policy)
    if type_name == "distillation":
        del common["num_generations"]
        trainer = trl.DistillationTrainer(model=str(policy), teacher_model=str(policy), args=trl.DistillationConfig(**common),
                                          train_dataset=data, processing_class=tokenizer)  # fmt: skip
    else:
        trainer_class, config_class = (trl.GRPOTrainer, trl.GRPOConfig) if type_name == "grpo" else (trl.RLOOTrainer, trl.RLOOConfig)
        trainer = trainer_class(model=str(policy), reward_funcs=short_answer, args=config_class(**common),
                                train_dataset=data, processing_class=tokenizer)  # fmt: skip
    trainer.train()


@pytest.mark.parametrize("type_name", ["grpo", "rloo", "distillation"])
def test_the_declared_form_trains_a_step_in_trl(type_name, tiny_model, tmp_path):
    (form,) = _declared(type_name)
    assert form == frozenset({"prompt"})
    for index, (name, prompt) in enumerate(PROMPTS.items()):
        rows = [{"prompt": prompt(q)} for q in QUESTIONS * 2]
        try:
            _train_one_step(type_name, rows, tiny_model, tmp_path / str(index))
        except Exception as exc:  # noqa: BLE001 - name the form TRL refused
            pytest.fail(f"`trl {type_name}` could not train on the form cw accepts ({name}): {exc!r}")


@pytest.mark.parametrize("type_name", ["grpo", "rloo", "distillation"])
def test_a_form_without_prompt_fails_in_trl_at_the_first_step(type_name, tiny_model, tmp_path):
    rows = [{"question": q} for q in QUESTIONS * 2]
    assert not any(accepted <= {"question"} for accepted in _declared(type_name))  # cw refuses it
    with pytest.raises(KeyError) as info:
        _train_one_step(type_name, rows, tiny_model, tmp_path)
    assert info.value.args[0] == "prompt"
