"""`cw export`'s pod-side step really exports, on CPU with a tiny Llama: a LoRA adapter merged
into its base model answers exactly as base + adapter did; a full checkpoint leaves its optimizer
behind; `latest` never takes a checkpoint still being written; an export is whole or absent and
says each file's size and SHA-256; an existing export is kept."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from cw_cli.runtime import cw_export

pytestmark = pytest.mark.training


def _adapter_run(tiny_model: Path, run_dir: Path) -> Path:
    """A run folder as `trl sft --use_peft` leaves it: checkpoint-2 and the final adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))  # fmt: skip
    with torch.no_grad():  # a trained adapter: B is no longer zero, so merging changes the weights
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn_like(parameter) * 0.5)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for folder in (run_dir / "checkpoint-2", run_dir):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    (run_dir / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (run_dir / "checkpoint-2" / "optimizer.pt").write_bytes(b"\0" * 64)
    (run_dir / "checkpoint-3").mkdir()  # being written: no trainer_state.json yet
    (run_dir / "checkpoint-3" / "adapter_model.safetensors").write_bytes(b"partial")
    return run_dir


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=ids).logits


def test_a_merged_adapter_answers_as_base_plus_adapter(tiny_model, tmp_path):
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    run_dir = _adapter_run(tiny_model, tmp_path / "run")
    assert cw_export.main(["--run-dir", str(run_dir), "--merge"]) == 0
    merged_dir = run_dir / "exported" / "final-merged"
    assert not (merged_dir / "adapter_config.json").exists() and (merged_dir / "model.safetensors").is_file()
    ids = torch.tensor([[2, 10, 11, 12, 13]])
    expected = _logits(AutoPeftModelForCausalLM.from_pretrained(run_dir), ids)
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    assert torch.allclose(_logits(merged, ids), expected, atol=1e-4)
    assert not torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(tiny_model), ids), expected, atol=1e-4)
    listed = json.loads((merged_dir / "export.json").read_text())
    assert listed["merged"] is True and listed["checkpoint"] == "final"
    weights = (merged_dir / "model.safetensors").read_bytes()
    assert listed["files"]["model.safetensors"] == {"size": len(weights), "sha256": hashlib.sha256(weights).hexdigest()}


def test_latest_takes_the_newest_complete_checkpoint_without_its_training_state(tiny_model, tmp_path):
    run_dir = _adapter_run(tiny_model, tmp_path / "run")
    assert cw_export.main(["--run-dir", str(run_dir), "--checkpoint", "latest"]) == 0
    exported = run_dir / "exported" / "checkpoint-2"  # not checkpoint-3, still being written
    names = {p.name for p in exported.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "export.json"} <= names
    assert not names & {"optimizer.pt", "trainer_state.json"}
    assert not list((run_dir / "exported").glob(".*partial*"))  # nothing half-written left behind


def test_a_full_checkpoint_exports_its_model_files_only(tiny_model, tmp_path):
    run_dir = tmp_path / "run"
    checkpoint = run_dir / "checkpoint-4"
    shutil.copytree(tiny_model, checkpoint)
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "optimizer.pt").write_bytes(b"\0" * 64)
    (checkpoint / "rng_state.pth").write_bytes(b"\0")
    assert cw_export.main(["--run-dir", str(run_dir), "--checkpoint", "4"]) == 0
    names = {p.name for p in (run_dir / "exported" / "checkpoint-4").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not names & {"optimizer.pt", "trainer_state.json", "rng_state.pth"}


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["--checkpoint", "final", "--merge"], 2, "holds a full model, not a LoRA adapter"),
        (["--checkpoint", "9"], 2, "checkpoint-9 is not a complete checkpoint; complete checkpoints: checkpoint-4"),
        (["--checkpoint", "nine"], 2, "expected final, latest or a step number"),  # the pod never sees best: cw export resolves it to a step first
    ],
)
def test_bad_choices_say_what_there_is(tiny_model, tmp_path, capsys, args, code, message):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_model, run_dir / "checkpoint-4")
    (run_dir / "checkpoint-4" / "trainer_state.json").write_text("{}")
    shutil.copytree(tiny_model, run_dir, dirs_exist_ok=True)  # the final model
    assert cw_export.main(["--run-dir", str(run_dir), *args]) == code
    assert message in capsys.readouterr().err


def test_an_existing_export_is_kept_unless_overwrite(tiny_model, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_model, run_dir)
    assert cw_export.main(["--run-dir", str(run_dir)]) == 0
    marker = run_dir / "exported" / "final" / "mine.txt"
    marker.write_text("kept")
    assert cw_export.main(["--run-dir", str(run_dir)]) == 3
    assert "exists already" in capsys.readouterr().err and marker.read_text() == "kept"
    assert cw_export.main(["--run-dir", str(run_dir), "--overwrite"]) == 0 and not marker.exists()
    assert cw_export.main(["--run-dir", str(tmp_path / "empty")]) == 2
