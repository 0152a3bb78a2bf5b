"""`cw trl kto | reward | rloo | distillation` really train: each example config in configs/ is
rendered by cw (ConfigMap + command, as --dry-run prints it), pointed at local fixtures, and its
trainer container's exact command is run through cw's local runner on CPU with a tiny Llama."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_trl_cpu import assert_trained, run_trainer
from training_helpers import CONFIGS_DIR

pytestmark = pytest.mark.training

QUESTIONS = ["what is two plus three ?", "why is the sky blue ?", "where is the moon ?", "who is happy ?"]
GOOD = ["two plus three equals five .", "the sky is blue because of the sun .", "the moon is up in the sky .",
        "the dog is happy ."]  # fmt: skip


def _jsonl(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def _render(render_plan, with_launcher, training_type: str, run_name: str, sets: list[str]) -> list[dict]:
    manifests, _ = with_launcher(render_plan("trl", training_type, CONFIGS_DIR / f"trl-{training_type}.yaml",
                                             run_name=run_name, sets=sets))  # fmt: skip
    job = next(m for m in manifests if m["kind"] == "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert ["trl", training_type, "--config", "/etc/cw/config.yaml"] == command[command.index("--") + 1 :][:4]
    return manifests


def test_trl_kto_trains_on_unpaired_labels(render_plan, with_launcher, tiny_model, tmp_path):
    rows = [{"prompt": q, "completion": " " + a, "label": True} for q, a in zip(QUESTIONS * 2, GOOD * 2)]
    rows += [{"prompt": q, "completion": " no no bad sad .", "label": False} for q in QUESTIONS * 2]
    data = _jsonl(tmp_path / "kto-data", rows)
    manifests = _render(render_plan, with_launcher, "kto", "t-kto", [f"model_name_or_path={tiny_model}", f"dataset_name={data}"])
    checkpoints = tmp_path / "checkpoints"
    run_trainer(manifests, checkpoints, tmp_path / "run", {"max_length": 64})
    state = assert_trained(checkpoints / "t-kto", 2)
    assert any("kl" in entry for entry in state["log_history"]), state["log_history"]


def test_trl_reward_trains_a_classifier_head(render_plan, with_launcher, tiny_model, dpo_dataset, tmp_path):
    manifests = _render(render_plan, with_launcher, "reward", "t-reward",
                        [f"model_name_or_path={tiny_model}", f"dataset_name={dpo_dataset}"])  # fmt: skip
    checkpoints = tmp_path / "checkpoints"
    run_trainer(manifests, checkpoints, tmp_path / "run", {"max_length": 64})
    assert_trained(checkpoints / "t-reward", 2)
    config = json.loads((checkpoints / "t-reward" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and len(config["id2label"]) == 1  # one score


def test_trl_rloo_trains_with_the_shipped_reward_function(render_plan, with_launcher, tiny_model, grpo_dataset, tmp_path):
    manifests = _render(render_plan, with_launcher, "rloo", "t-rloo",
                        [f"model_name_or_path={tiny_model}", f"dataset_name={grpo_dataset}"])  # fmt: skip
    assert "rewards.py" in next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
    checkpoints = tmp_path / "checkpoints"
    run_trainer(manifests, checkpoints, tmp_path / "run",
                {"num_generations": 2, "max_completion_length": 8, "temperature": 1.0})  # fmt: skip
    state = assert_trained(checkpoints / "t-rloo", 2)
    values = [e["rewards/length_penalty/mean"] for e in state["log_history"] if "rewards/length_penalty/mean" in e]
    assert len(values) == 2 and all(math.isfinite(v) for v in values), state["log_history"]


def test_trl_distillation_trains_the_student_on_the_teacher(render_plan, with_launcher, tiny_model, grpo_dataset, tmp_path):
    manifests = _render(render_plan, with_launcher, "distillation", "t-distil",
                        [f"model_name_or_path={tiny_model}", f"teacher_model_name_or_path={tiny_model}",
                         f"dataset_name={grpo_dataset}"])  # fmt: skip
    checkpoints = tmp_path / "checkpoints"
    run_trainer(manifests, checkpoints, tmp_path / "run", {"max_completion_length": 8})
    state = assert_trained(checkpoints / "t-distil", 2)
    # On-policy: the student generated the completions the teacher scored.
    assert any("completions/mean_length" in entry for entry in state["log_history"]), state["log_history"]
