"""A `--local` run reads the files its config names where they are; a cluster run ships them.

A model folder is the usual case: far over the 1 MiB a ConfigMap holds, refused for a cluster run
(the pod could not see it), but exactly what a run on this machine should load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cw_cli import api
from cw_cli.errors import ConfigError


def _model_folder(root: Path) -> Path:
    model = root / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    with open(model / "model.safetensors", "wb") as handle:
        handle.truncate(3 * 2**20)  # over a ConfigMap's 1 MiB, never read
    return model


def _config(root: Path) -> Path:
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").write_text('{"text": "hello"}\n')
    path = root / "sft.yaml"
    path.write_text("model_name_or_path: models/tiny\ndataset_name: data/train.jsonl\ngpu: 1\ncheckpoint_volume: none\n")
    return path


def _trainer_config(planned: api.PlannedRun) -> dict:
    configmap = next(m for m in planned.manifests if m["kind"] == "ConfigMap")
    return yaml.safe_load(configmap["data"]["config.yaml"])


def test_a_local_run_points_at_the_model_folder_and_the_dataset_where_they_are(tmp_path):
    model = _model_folder(tmp_path)
    planned = api.plan(_config(tmp_path), "trl", "sft", name="here", local=True)
    config = _trainer_config(planned)
    assert config["model_name_or_path"] == str(model.resolve())
    assert config["dataset_name"] == str((tmp_path / "data" / "train.jsonl").resolve())
    configmap = next(m for m in planned.manifests if m["kind"] == "ConfigMap")
    assert not any("safetensors" in key or "train.jsonl" in key for key in {**configmap.get("data", {}), **configmap.get("binaryData", {})})


def test_a_cluster_run_refuses_the_same_model_folder_and_says_why(tmp_path):
    _model_folder(tmp_path)
    with pytest.raises(ConfigError, match="too large to ship with the run"):
        api.plan(_config(tmp_path), "trl", "sft", name="there")


def test_a_cluster_run_still_ships_the_small_dataset(tmp_path):
    (tmp_path / "models").mkdir()
    path = _config(tmp_path)
    path.write_text(path.read_text().replace("models/tiny", "Qwen/Qwen2.5-0.5B"))
    config = _trainer_config(api.plan(path, "trl", "sft", name="there"))
    assert config["model_name_or_path"] == "Qwen/Qwen2.5-0.5B"
    assert config["dataset_name"].startswith("/etc/cw/")


# open-r1's OpenR1-Distill-7B recipe, as published: push_to_hub and report_to wandb.
OPEN_R1 = Path(__file__).resolve().parents[1] / "corpus" / "configs" / "openr1-sft-openr1-distill-7b.yaml"


def test_a_local_run_takes_the_tokens_a_public_recipe_needs_from_your_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    monkeypatch.setenv("WANDB_API_KEY", "w")
    planned = api.plan(OPEN_R1, "trl", "sft", name="here", local=True, set=["checkpoint_volume=none"])
    assert _trainer_config(planned)["push_to_hub"] is True


def test_a_local_run_without_the_tokens_says_to_export_them(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "")  # set but empty counts as missing
    with pytest.raises(ConfigError) as refused:
        api.plan(OPEN_R1, "trl", "sft", name="here", local=True, set=["checkpoint_volume=none"])
    problems = "\n".join(refused.value.issues)
    assert "needs HF_TOKEN, and neither your environment nor `secrets` has it; export HF_TOKEN" in problems
    assert "export WANDB_API_KEY" in problems


def test_a_cluster_run_of_the_same_recipe_still_needs_secrets_whatever_your_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    monkeypatch.setenv("WANDB_API_KEY", "w")
    with pytest.raises(ConfigError) as refused:
        api.plan(OPEN_R1, "trl", "sft", name="there", set=["checkpoint_volume=none"])
    assert "needs HF_TOKEN in the pods, and `secrets` has none" in "\n".join(refused.value.issues)
