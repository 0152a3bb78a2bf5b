"""A real `cw trl sft --local` run (a tiny model on CPU), then `cw artifacts --local` and
`cw download --local` on what it left: the listing shows its checkpoint and final model, and the
download copies the final model's files only, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

pytestmark = pytest.mark.training


def test_a_local_sft_runs_outputs_are_listed_and_downloaded(tiny_model, sft_dataset, tmp_path):
    sets = {"model_name_or_path": tiny_model, "dataset_name": sft_dataset, "max_steps": 1, "save_steps": 1, "max_length": 64,
            "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "use_cpu": "true", "bf16": "false",
            "report_to": "none", "checkpoint_volume": "null", "secrets": "{}"}  # fmt: skip
    env = {**os.environ, **OFFLINE_ENV, "CUDA_VISIBLE_DEVICES": ""}

    def cw(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cw_cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)  # fmt: skip

    args = ["trl", "sft", str(CONFIGS_DIR / "trl-sft.yaml"), "--local", "--name", "loc"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    trained = cw(*args)
    assert trained.returncode == 0, trained.stderr[-3000:]
    listed = cw("artifacts", "loc", "--local", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    kinds = [(a["kind"], a["step"], a["complete"]) for a in listing["artifacts"]]
    assert kinds == [("checkpoint", 1, True), ("final", 1, True)], kinds
    run_dir = tmp_path / "cw-local" / "loc" / "loc"
    assert listing["run_dir"] == str(run_dir.resolve())
    done = cw("download", "loc", "model", "--local")
    assert done.returncode == 0, done.stderr
    model = tmp_path / "model"
    copied = sorted(p.name for p in model.iterdir() if p.name != ".cw-download.json")
    assert copied == sorted(p.name for p in run_dir.iterdir() if p.is_file()) and "model.safetensors" in copied
    assert not any(name.startswith("checkpoint-") for name in copied)
    assert all((model / name).read_bytes() == (run_dir / name).read_bytes() for name in copied)
