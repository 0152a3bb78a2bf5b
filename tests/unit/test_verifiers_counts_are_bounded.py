"""A vf-rl TOML's GPU counts and batch sizes must be whole numbers a run can have.

``batch_size = 2^70``, ``micro_batch_size = 0`` or ``inference.gpus = -1`` were rendered into a
run; each is now refused at its TOML line, naming the key and the range it takes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from unit_helpers import CONFIGS, mounted_config, plan_for

from cw_cli.errors import ConfigError
from cw_cli.frameworks.verifiers import MAX_COUNT

TOML = """checkpoint_volume = "ckpts"
model = "Qwen/Qwen2.5-0.5B-Instruct"
files = ["cw_reverse_text.py"]
[env]
id = "cw-reverse-text"
[inference]
gpus = {inference}
[trainer]
gpus = {trainer}
[trainer.args]
batch_size = {batch}
micro_batch_size = {micro}
rollouts_per_example = 8
"""
LINES = {"inference.gpus": 7, "trainer.gpus": 9, "trainer.args.batch_size": 11, "trainer.args.micro_batch_size": 12}


def _write(tmp_path: Path, inference="1", trainer="2", batch="16", micro="8") -> Path:
    shutil.copy(CONFIGS / "cw_reverse_text.py", tmp_path)
    path = tmp_path / "config.toml"
    path.write_text(TOML.format(inference=inference, trainer=trainer, batch=batch, micro=micro))
    return path


def _problem(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        plan_for("verifiers", "grpo", path)
    return "\n".join(caught.value.issues)


def test_a_sane_toml_plans(tmp_path):
    config = mounted_config(plan_for("verifiers", "grpo", _write(tmp_path)))
    assert config["inference"]["gpus"] == 1 and config["trainer"]["args"]["micro_batch_size"] == 8


@pytest.mark.parametrize("key,change,shown", [
    ("trainer.args.batch_size", {"batch": str(2**70)}, str(2**70)),
    ("trainer.args.batch_size", {"batch": str(2**31)}, str(2**31)),
    ("trainer.args.batch_size", {"batch": "1.5"}, "1.5"),
    ("trainer.args.batch_size", {"batch": "true"}, "true"),
    ("trainer.args.micro_batch_size", {"micro": "0"}, "0"),
    ("trainer.args.micro_batch_size", {"micro": "-8"}, "-8"),
    ("inference.gpus", {"inference": "-1"}, "-1"),
    ("inference.gpus", {"inference": "0"}, "0"),
    ("inference.gpus", {"inference": "true"}, "true"),
    ("inference.gpus", {"inference": "1.5"}, "1.5"),
    ("inference.gpus", {"inference": '"2"'}, '"2"'),
    ("trainer.gpus", {"trainer": "-2"}, "-2"),
])  # fmt: skip
def test_an_impossible_count_is_refused_at_its_line_naming_the_key(tmp_path, key, change, shown):
    path = _write(tmp_path, **change)
    text = _problem(path)
    assert f"{path}:{LINES[key]}: `{key}: {shown}` must be a whole number of " in text, text
    largest = 64 if key.endswith("gpus") else MAX_COUNT
    assert f"from 1 to {largest}" in text


def test_the_largest_count_is_accepted(tmp_path):
    # 2**31 - 1 rollouts split over micro batches of 1 on one process.
    text = TOML.format(inference="1", trainer="1", batch=str(MAX_COUNT), micro="1")
    shutil.copy(CONFIGS / "cw_reverse_text.py", tmp_path)
    (tmp_path / "config.toml").write_text(text)
    config = mounted_config(plan_for("verifiers", "grpo", tmp_path / "config.toml"))
    assert config["trainer"]["args"]["batch_size"] == MAX_COUNT
