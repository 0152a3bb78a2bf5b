"""A verifiers run's `eval:` block that names neither tasks nor environments scores the environment
the run trains on, loaded with the trainer's own `environment.args` (vf-eval's --env-args), by
`<env>/reward`; `environment_args` gives any named environment its arguments; `cw eval RUN
--environments ENV` passes the trainer's arguments read back from the run's ConfigMap. Bad
arguments are one line naming `eval.environment_args`."""

from __future__ import annotations

import datetime
import json
import shutil
import sys
from pathlib import Path

import pytest
from unit_helpers import REPO, load, obj, plan_for, write_config

from cw_cli.errors import ConfigError

sys.path.insert(0, str(REPO / "cw_cli" / "runtime"))
import cw_vf_eval  # noqa: E402

ENV = "cw-reverse-text"


def _verifiers(tmp_path: Path, block: dict | None, **more) -> Path:
    import yaml

    data = yaml.safe_load((REPO / "configs" / "verifiers-grpo.yaml").read_text())
    shutil.copy(REPO / "configs" / "cw_reverse_text.py", tmp_path / "cw_reverse_text.py")
    return write_config(tmp_path, {**data, **({"eval": block} if block is not None else {}), **more})


def _settings(tmp_path: Path, block: dict, **more) -> dict:
    from cw_cli.render.evaluation import settings_of

    config = load("verifiers", "grpo", _verifiers(tmp_path, block, **more))
    assert config.cluster.eval is not None
    return settings_of(config.cluster.eval, config.path.parent, config.cluster.gpu, list(config.cluster.files))


def test_an_eval_block_without_tasks_or_environments_scores_the_trained_environment_with_its_args(tmp_path):
    settings = _settings(tmp_path, {"limit": 4})
    assert settings["harness"] == "vf-eval" and settings["environments"] == [ENV]
    assert settings["metric"] == f"{ENV}/reward"
    assert settings["environment_args"] == {ENV: {"num_examples": 512}}  # configs/verifiers-grpo.yaml's environment.args
    assert "cw_reverse_text.py" in settings["environment_files"]
    command = cw_vf_eval.vf_eval_command(settings, ENV, "/m", 8000)
    assert command[command.index("--env-args") + 1] == json.dumps({"num_examples": 512})


def test_the_trained_environment_named_gets_the_trainers_args_unless_the_block_gives_its_own(tmp_path):
    named = _settings(tmp_path, {"environments": [ENV, "primeintellect/gsm8k"]})
    assert named["environment_args"] == {ENV: {"num_examples": 512}}
    assert "--env-args" not in cw_vf_eval.vf_eval_command(named, "primeintellect/gsm8k", "/m", 8000)
    own = _settings(tmp_path, {"environments": [ENV], "environment_args": {ENV: {"words_per_example": 1}}})
    assert own["environment_args"] == {ENV: {"words_per_example": 1}}
    hub = _settings(tmp_path, {"environments": ["primeintellect/gsm8k"], "environment_args": {"primeintellect/gsm8k": {"k": [1, 2]}}})
    assert hub["environment_args"] == {"primeintellect/gsm8k": {"k": [1, 2]}}


def test_a_run_without_environment_args_passes_none(tmp_path):
    settings = _settings(tmp_path, {"limit": 2}, environment={"id": ENV})
    assert settings["environments"] == [ENV] and settings["environment_args"] == {}
    assert "--env-args" not in cw_vf_eval.vf_eval_command(settings, ENV, "/m", 8000)


@pytest.mark.parametrize(
    ("framework", "block", "expected"),
    [
        ("trl", {"limit": 4}, "`eval.tasks` / `eval.environments`: name exactly one"),
        ("verifiers", {"environments": [ENV], "environment_args": {"other": {}}}, "`eval.environment_args`: 'other' is not in eval.environments"),
        ("verifiers", {"environments": [ENV], "environment_args": {ENV: {"when": datetime.date(2026, 1, 1)}}}, "its arguments are no JSON"),
        ("verifiers", {"environments": [ENV], "environment_args": {ENV: {"big": "x" * 20_000}}}, "over 16384"),
        ("verifiers", {"environments": [ENV], "environment_args": {ENV: [1]}}, "eval.environment_args"),
        ("verifiers", {"tasks": ["hellaswag"], "metric": "hellaswag/acc", "environment_args": {ENV: {}}}, "`eval.environment_args`: only for environments"),
    ],
)  # fmt: skip
def test_bad_environment_args_are_refused_naming_the_field(tmp_path, framework, block, expected):
    base = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara"}
    path = _verifiers(tmp_path, block) if framework == "verifiers" else write_config(tmp_path, {**base, "eval": block})
    with pytest.raises(ConfigError) as caught:
        load(framework, "grpo" if framework == "verifiers" else "sft", path)
    text = "\n".join(caught.value.issues)
    assert expected in text and "Traceback" not in text, text


class _ConfigMapOf:
    def __init__(self, config_map: dict) -> None:
        self.config_map = config_map

    def get(self, kind: str, name: str) -> dict | None:
        return self.config_map if (kind, name) == ("ConfigMap", self.config_map["metadata"]["name"]) else None


def test_cw_eval_environments_passes_the_trainers_args_read_back_from_the_runs_config_map(tmp_path):
    from cw_cli.after_training.evaluation import eval_settings, run_environments

    plan = plan_for("verifiers", "grpo", _verifiers(tmp_path, None), run_name="vr")  # launched without eval:
    shipped = run_environments(_ConfigMapOf(obj(plan, "ConfigMap", "vr-config")), "vr")  # type: ignore[arg-type]
    assert shipped.arguments == {ENV: {"num_examples": 512}} and "cw_reverse_text.py" in shipped.modules
    settings = eval_settings("vr", None, [], None, 2, 0, environments=[ENV, "primeintellect/gsm8k"], shipped=shipped)
    assert settings["environment_args"] == {ENV: {"num_examples": 512}}


@pytest.mark.parametrize("text", [None, 7, "", "[env]", "[env]\nid = 3\nargs = {a = 1}", "not = toml = at all", "[env]\nid = 'x'\nargs = 1",
                                  "a" + ".a" * 5000 + " = 1"])  # fmt: skip
def test_a_config_toml_without_a_usable_env_gives_no_args(text):
    from cw_cli.after_training.evaluation import trained_arguments

    assert trained_arguments(text) == {}
