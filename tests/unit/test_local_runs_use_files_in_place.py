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
