"""W&B and TensorBoard from the user's own settings: the key is required, the W&B run is the cw run.

tests/training/test_trl_cpu.py proves with wandb itself (offline) that the id reaches W&B.
"""

from __future__ import annotations

import shutil

import pytest
from unit_helpers import CONFIGS, container, env_map, plan_for, write_config

from cw_cli.errors import ConfigError
from cw_cli.frameworks.tracking import reported_to

RUN = "golden-run"
SFT = {"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "ckpt"}
KEY = {"secrets": {"WANDB_API_KEY": "wandb"}}
URL = "cw-cli.dev/wandb-url"
TENSORBOARD = "cw-cli.dev/tensorboard-dir"


def _trainer_env(plan) -> dict:
    return env_map(container(plan.manifests[0], "trainer"))


def _annotations(plan) -> dict:
    return plan.manifests[0]["metadata"].get("annotations") or {}


@pytest.mark.parametrize("report_to", ["wandb", ["tensorboard", "wandb"], "all"])
def test_reporting_to_wandb_without_its_key_is_refused_naming_the_setting(tmp_path, report_to):
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "report_to": report_to}))
    problem = next(issue for issue in caught.value.issues if "WANDB_API_KEY" in issue)
    assert "report_to" in problem and "secrets: {WANDB_API_KEY: <Secret name>}" in problem


def test_the_wandb_run_is_the_cw_run_so_a_relaunch_resumes_it(tmp_path):
    path = write_config(tmp_path, {**SFT, **KEY, "report_to": "wandb"})
    env = _trainer_env(plan_for("trl", "sft", path))
    assert env["WANDB_RUN_ID"] == RUN and env["WANDB_NAME"] == RUN and env["WANDB_RESUME"] == "allow"
    assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "WANDB_API_KEY"}}
    again = _trainer_env(plan_for("trl", "sft", path, run_name=RUN))
    other = _trainer_env(plan_for("trl", "sft", path, run_name="another-run"))
    assert again["WANDB_RUN_ID"] == env["WANDB_RUN_ID"] != other["WANDB_RUN_ID"]


def test_the_users_own_run_name_and_wandb_variables_win(tmp_path):
    data = {**SFT, **KEY, "report_to": "wandb", "run_name": "my-exp", "env": {"WANDB_RUN_ID": "pinned"}}
    plan = plan_for("trl", "sft", write_config(tmp_path, data))
    trainer = container(plan.manifests[0], "trainer")
    assert "WANDB_NAME" not in env_map(trainer)  # the Trainer's run_name names the W&B run
    assert [e["value"] for e in trainer["env"] if e["name"] == "WANDB_RUN_ID"] == ["pinned"]  # once, the user's


def test_no_tracking_env_without_wandb(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "report_to": ["tensorboard"]}))
    assert not {"WANDB_RUN_ID", "WANDB_NAME", "WANDB_RESUME"} & set(_trainer_env(plan))


def test_status_link_needs_entity_and_project(tmp_path):
    unknown = plan_for("trl", "sft", write_config(tmp_path, {**SFT, **KEY, "report_to": "wandb"}))
    assert URL not in _annotations(unknown)  # W&B's default entity is only known to the pod's login
    data = {**SFT, **KEY, "report_to": "wandb", "env": {"WANDB_ENTITY": "my team", "WANDB_PROJECT": "grpo"}}
    known = plan_for("trl", "sft", write_config(tmp_path, data))
    assert _annotations(known)[URL] == f"https://wandb.ai/my%20team/grpo/runs/{RUN}"


def test_self_hosted_wandb_links_to_its_own_host(tmp_path):
    env = {"WANDB_ENTITY": "ml", "WANDB_BASE_URL": "https://wandb.example.com/"}
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, **KEY, "report_to": "wandb", "env": env}))
    assert _annotations(plan)[URL] == f"https://wandb.example.com/ml/huggingface/runs/{RUN}"


def test_tensorboard_files_are_under_the_runs_output_folder(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "report_to": "tensorboard"}))
    assert _annotations(plan)[TENSORBOARD] == f"/checkpoints/{RUN}/runs"


def test_axolotl_wandb_keys_give_the_link_and_a_pinned_id_is_kept(tmp_path):
    base = {"base_model": "m", "datasets": [{"path": "d", "type": "alpaca"}], "checkpoint_volume": "ckpt", **KEY}
    data = {**base, "wandb_project": "sft", "wandb_entity": "lab"}
    plan = plan_for("axolotl", "sft", write_config(tmp_path, data))
    assert _trainer_env(plan)["WANDB_RUN_ID"] == RUN
    assert _annotations(plan)[URL] == f"https://wandb.ai/lab/sft/runs/{RUN}"
    pinned = plan_for("axolotl", "sft", write_config(tmp_path, {**data, "wandb_run_id": "abc123"}))
    assert "WANDB_RUN_ID" not in _trainer_env(pinned)  # Axolotl exports wandb_run_id itself
    assert _annotations(pinned)[URL].endswith("/runs/abc123")


def test_axolotl_offline_wandb_needs_no_key(tmp_path):
    data = {"base_model": "m", "datasets": [{"path": "d", "type": "alpaca"}], "checkpoint_volume": "ckpt",
            "wandb_project": "p", "wandb_mode": "offline"}  # fmt: skip
    plan = plan_for("axolotl", "sft", write_config(tmp_path, data))
    assert "WANDB_RUN_ID" not in _trainer_env(plan)


def test_verifiers_report_to_in_trainer_args_needs_the_key(tmp_path):
    for name in ("verifiers-grpo.yaml", "cw_reverse_text.py"):
        shutil.copy(CONFIGS / name, tmp_path / name)
    path = tmp_path / "verifiers-grpo.yaml"
    with pytest.raises(ConfigError) as caught:
        plan_for("verifiers", "grpo", path, sets=["trainer.args.report_to=wandb"])
    assert any("trainer.args.report_to" in issue and "WANDB_API_KEY" in issue for issue in caught.value.issues)
    plan = plan_for("verifiers", "grpo", path, sets=["trainer.args.report_to=wandb", "secrets.WANDB_API_KEY=wandb"])
    assert _trainer_env(plan)["WANDB_RUN_ID"] == RUN


@pytest.mark.parametrize(
    ("value", "names"),
    [("none", set()), ("wandb", {"wandb"}), ("all", {"wandb", "tensorboard"}), (["WandB", "mlflow"], {"wandb", "mlflow"}), (None, set())],
)
def test_report_to_values(value, names):
    assert reported_to(value) == names
