"""cw_fault's callback reaches the Trainer of every framework cw runs: TRL here, Axolotl and
verifiers in their own environments (``CW_AXOLOTL_PYTHON``, ``CW_VERIFIERS_PYTHON``; skipped when
absent). Each environment runs check_fault_callback.py: Trainer patched at import, a real Trainer
built there carries the callback, and every named subclass's ``__init__`` chain reaches
``Trainer.__init__`` (read from its source where its module needs a package a CPU machine lacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_framework_configs import _python_with
from training_helpers import OFFLINE_ENV, RUNTIME_DIR

pytestmark = pytest.mark.training

CHECK = Path(__file__).resolve().parent / "check_fault_callback.py"
CLASSES = {
    "trl": ["trl:SFTTrainer", "trl:DPOTrainer", "trl:GRPOTrainer", "trl:RewardTrainer"],
    "axolotl": [
        "axolotl.core.trainers.base:AxolotlTrainer",
        "axolotl.core.trainers.grpo.trainer:AxolotlGRPOTrainer",
        "axolotl.core.trainers.trl:AxolotlKTOTrainer",
        "axolotl.core.trainers.trl:AxolotlORPOTrainer",
    ],
    "verifiers": ["verifiers.rl.trainer.trainer:RLTrainer"],
}


@pytest.mark.parametrize(("package", "env_var"), [("trl", ""), ("axolotl", "CW_AXOLOTL_PYTHON"), ("verifiers", "CW_VERIFIERS_PYTHON")])
def test_the_fault_callback_attaches_to_the_frameworks_trainers(package, env_var):
    python = _python_with(package, env_var) if env_var else sys.executable
    done = subprocess.run([python, str(CHECK), str(RUNTIME_DIR), *CLASSES[package]], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **OFFLINE_ENV})  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    result = json.loads(lines[-1])
    assert result["transformers_patched"] and result["callback_on_a_trainer"], result
    for name, found in result["classes"].items():
        assert found["reaches_trainer_init"], (name, found)
