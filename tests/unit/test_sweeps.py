"""Sweeps: a grid and/or variants of one config become named, labelled runs, validated as a whole."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from unit_helpers import env_map, mounted_config

from cw_cli import api
from cw_cli.errors import ConfigError
from cw_cli.sweep import SweepSpec, parse_flag, run_names

BASE = {"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "ckpt", "gpu": 1}
SWEEP_LABEL = "cw-cli.dev/sweep"


def _write(tmp_path, data, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_grid_is_every_combination_in_key_order_then_the_variants():
    spec = SweepSpec(grid={"lr": [1, 2], "r": [8, 16]}, variants=[{"lr": 9}])
    assert spec.points() == [{"lr": 1, "r": 8}, {"lr": 1, "r": 16}, {"lr": 2, "r": 8}, {"lr": 2, "r": 16}, {"lr": 9}]


def test_flag_values_are_typed_like_yaml():
    assert parse_flag("learning_rate=1e-5, 2.0e-5") == ("learning_rate", [1e-5, 2e-5])
    assert parse_flag("lora_r=8,16") == ("lora_r", [8, 16])
    with pytest.raises(ConfigError):
        parse_flag("learning_rate")


def test_run_names_sort_in_sweep_order():
    names = run_names("scan", 12)
    assert names[0] == "scan-00" and names[-1] == "scan-11" and sorted(names) == names


def test_a_sweep_makes_one_labelled_run_per_point_each_with_its_own_folder(tmp_path):
    path = _write(tmp_path, {**BASE, "sweep": {"grid": {"learning_rate": [1.0e-5, 2.0e-5]}, "variants": [{"max_steps": 7}]}})
    planned = api.plan_sweep(path, "trl", "sft", sweep=["lora_r=8,16"], name="scan")
    assert [run.name for run in planned.runs] == [f"scan-{i}" for i in range(5)]
    configs = [mounted_config(run.plan, run.name) for run in planned.runs]
    assert [(c.get("learning_rate"), c.get("lora_r")) for c in configs[:4]] == [
        (1e-5, 8), (1e-5, 16), (2e-5, 8), (2e-5, 16)
    ]  # fmt: skip
    assert configs[4]["max_steps"] == 7 and "learning_rate" not in configs[4]
    assert {c["output_dir"] for c in configs} == {f"/checkpoints/scan-{i}" for i in range(5)}
    for run in planned.runs:
        for manifest in run.manifests:
            assert manifest["metadata"]["labels"][SWEEP_LABEL] == "scan"
        assert "sweep" not in mounted_config(run.plan, run.name)  # cw's block never reaches the trainer


def test_a_flag_replaces_the_files_values_of_its_key(tmp_path):
    path = _write(tmp_path, {**BASE, "sweep": {"grid": {"learning_rate": [1.0e-5, 2.0e-5, 3.0e-5]}}})
    planned = api.plan_sweep(path, "trl", "sft", sweep=["learning_rate=5e-5"], name="one")
    assert [mounted_config(r.plan, r.name)["learning_rate"] for r in planned.runs] == [5e-5]


def test_a_sweeps_wandb_runs_share_its_group(tmp_path):
    data = {**BASE, "report_to": "wandb", "secrets": {"WANDB_API_KEY": "wandb"}}
    planned = api.plan_sweep(_write(tmp_path, data), "trl", "sft", sweep=["seed=1,2"], name="seeds")
    envs = [env_map(r.manifests[0]["spec"]["template"]["spec"]["containers"][0]) for r in planned.runs]
    assert [e["WANDB_RUN_GROUP"] for e in envs] == ["seeds", "seeds"]
    assert [e["WANDB_RUN_ID"] for e in envs] == ["seeds-0", "seeds-1"]


def test_one_invalid_point_refuses_the_whole_sweep_naming_it(tmp_path):
    path = _write(tmp_path, {**BASE, "sweep": {"variants": [{"gpu": 2}, {"gpu": "lots"}, {"gpu": 4}]}})
    with pytest.raises(ConfigError) as caught:
        api.plan_sweep(path, "trl", "sft", name="bad")
    assert len(caught.value.issues) == 1
    assert caught.value.issues[0].startswith("run bad-1 (gpu='lots'): ")
    assert "no run of it was created" in caught.value.hint


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"grid": {"learning_rate": []}}, "non-empty list"),
        ({"grid": {"learning_rate": 1e-5}}, "non-empty list"),
        ({"variants": "lr=1"}, "list of non-empty mappings"),
        ({"axes": {}}, "`grid` and/or `variants`"),
        ({}, "has no runs"),
    ],
)
def test_malformed_sweep_blocks_are_refused_with_the_fix(tmp_path, block, message):
    with pytest.raises(ConfigError) as caught:
        api.plan_sweep(_write(tmp_path, {**BASE, "sweep": block}), "trl", "sft", name="x")
    assert message in caught.value.issues[0]


def test_a_sweep_name_must_leave_room_for_the_index(tmp_path):
    with pytest.raises(ConfigError) as caught:
        api.plan_sweep(_write(tmp_path, BASE), "trl", "sft", sweep=["seed=" + ",".join(map(str, range(12)))], name="n" * 39)
    assert "no room for the run index" in caught.value.issues[0]


def test_dry_run_prints_every_run_of_the_sweep(tmp_path):
    path = _write(tmp_path, BASE)
    printed = subprocess.run(
        [sys.executable, "-m", "cw_cli", "trl", "sft", str(path), "--dry-run", "--sweep", "learning_rate=1e-5,2e-5,3e-5",
         "--name", "dry"], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    jobs = [doc for doc in yaml.safe_load_all(printed) if doc and doc["kind"] == "Job"]
    assert [job["metadata"]["name"] for job in jobs] == ["dry-0-trainer", "dry-1-trainer", "dry-2-trainer"]
