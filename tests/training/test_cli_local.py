"""`cw <framework> <type> CONFIG --local`: the real CLI runs the trainer's command here and streams it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

pytestmark = pytest.mark.training


def test_cw_local_trains_the_example_sft_config_on_cpu(tiny_model, sft_dataset, tmp_path):
    sets = {
        "model_name_or_path": tiny_model,
        "dataset_name": sft_dataset,
        "max_steps": 1,
        "save_steps": 1,
        "max_length": 64,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "use_cpu": "true",
        "bf16": "false",
        "report_to": "none",
        "checkpoint_volume": "null",
        "secrets": "{}",
    }
    args = [sys.executable, "-m", "cw_cli", "trl", "sft", str(CONFIGS_DIR / "trl-sft.yaml"), "--local", "--name", "cli-local"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    env = {**os.environ, **OFFLINE_ENV, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "running locally: " in result.stderr and "--num_processes 1" in result.stderr
    output_dir = tmp_path / "cw-local" / "cli-local" / "cli-local"
    state = json.loads((output_dir / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert "[cw-launch]" in result.stdout  # the trainer's own output was streamed
