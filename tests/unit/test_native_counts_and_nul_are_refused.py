"""Native values that cannot work are refused before launch (issue 32 item 7): a batch size or
accumulation of zero or less in the frameworks' known keys (`per_device_train_batch_size=-4`
launched), and a NUL anywhere in a native value (one in `model_name_or_path` reached the vLLM
server's arguments), each in one line naming the key."""

from __future__ import annotations

import pytest
from unit_helpers import plan_for, write_config

from cw_cli.errors import ConfigError

TRL = {"model_name_or_path": "m", "dataset_name": "trl-lib/Capybara"}
AXOLOTL = {"base_model": "m", "datasets": [{"path": "trl-lib/Capybara", "type": "chat_template"}]}


def _issues(tmp_path, framework, type_name, native, sets=None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        plan_for(framework, type_name, write_config(tmp_path, native), sets=sets)
    return info.value.issues


@pytest.mark.parametrize("key", ["per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"])
@pytest.mark.parametrize("value", [-4, 0, 2.5, "many", True])
def test_trl_refuses_a_count_below_one_naming_the_key(tmp_path, key, value):
    issues = _issues(tmp_path, "trl", "sft", {**TRL, key: value})
    assert any(f"`{key}: " in issue and ("at least 1" in issue) for issue in issues), issues


@pytest.mark.parametrize("key", ["micro_batch_size", "gradient_accumulation_steps", "eval_batch_size", "batch_size"])
def test_axolotl_refuses_a_count_below_one_naming_the_key(tmp_path, key):
    issues = _issues(tmp_path, "axolotl", "sft", {**AXOLOTL, key: -4})
    assert any(f"`{key}: -4` must be at least 1" in issue for issue in issues), issues


def test_a_set_flag_is_checked_too(tmp_path):
    issues = _issues(tmp_path, "trl", "sft", TRL, sets=["per_device_train_batch_size=-4"])
    assert any("`per_device_train_batch_size: -4` must be at least 1" in issue for issue in issues), issues


@pytest.mark.parametrize("value", [1, 8, "4", None])
def test_good_counts_and_unset_ones_pass(tmp_path, value):
    plan_for("trl", "sft", write_config(tmp_path, {**TRL, "per_device_train_batch_size": value}))


@pytest.mark.parametrize(
    ("native", "where"),
    [
        ({**TRL, "model_name_or_path": "Qwen/a\0b"}, "model_name_or_path"),
        ({**TRL, "model_init_kwargs": {"revision": "x\0"}}, "model_init_kwargs.revision"),
        ({**TRL, "reward_funcs": ["ok", "bad\0"]}, "reward_funcs[1]"),
    ],
)
def test_a_nul_anywhere_in_a_native_value_is_refused_naming_where(tmp_path, native, where):
    issues = _issues(tmp_path, "trl", "grpo" if "reward_funcs" in native else "sft", native)
    assert any(f"`{where}` holds a NUL character" in issue for issue in issues), issues


def test_a_nul_in_the_model_never_reaches_the_servers_arguments(tmp_path):
    native = {**TRL, "model_name_or_path": "Qwen/a\0b", "use_vllm": True, "vllm_mode": "server",
              "reward_funcs": ["accuracy_reward"]}  # fmt: skip
    issues = _issues(tmp_path, "trl", "grpo", native)
    assert len([i for i in issues if "NUL" in i]) == 1


def test_an_estimate_refuses_what_a_launch_refuses(tmp_path):
    from click.testing import CliRunner
    from unit_helpers import builtin_registry

    from cw_cli.cli.app import build_app

    config = write_config(tmp_path, {**TRL, "per_device_train_batch_size": -4})
    result = CliRunner().invoke(build_app(builtin_registry()), ["estimate", "trl", "sft", str(config), "--gpu-memory", "80GB"])
    assert result.exit_code == 2 and "`per_device_train_batch_size: -4` must be at least 1" in result.output


# A dry run and an estimate refuse what a launch refuses (issue 32 item 7).


def _cli(*args: str):
    from click.testing import CliRunner
    from unit_helpers import builtin_registry

    from cw_cli.cli.app import build_app

    return CliRunner().invoke(build_app(builtin_registry()), list(args))


@pytest.mark.parametrize("listed", ["/proc/self/status", "/dev/null", "missing.py", "folder"])
def test_an_estimate_refuses_the_files_a_launch_refuses(tmp_path, monkeypatch, listed):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "folder").mkdir()
    config = write_config(tmp_path, {**TRL, "files": [listed]})
    launch = _cli("trl", "sft", str(config), "--dry-run")
    estimate = _cli("estimate", "trl", "sft", str(config), "--gpu-memory", "80GB")
    assert launch.exit_code == estimate.exit_code == 2, (launch.output, estimate.output)
    said = launch.output.split("`files`: ", 1)[1].splitlines()[0]
    assert said in estimate.output


def test_an_estimate_refuses_a_fifo_in_files_without_opening_it(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    os.mkfifo(tmp_path / "pipe.py")
    result = _cli("estimate", "trl", "sft", str(write_config(tmp_path, {**TRL, "files": ["pipe.py"]})))
    assert result.exit_code == 2 and "is not a regular file" in result.output


@pytest.mark.parametrize("namespace", ["../..", "Team-A", "a" * 64, "x/y", "-a"])
def test_a_dry_run_refuses_a_namespace_a_launch_refuses(tmp_path, monkeypatch, namespace):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    result = _cli("trl", "sft", str(write_config(tmp_path, TRL)), "--dry-run", "-n", namespace)
    assert result.exit_code == 2 and "not a valid namespace name" in result.output
    assert "kind: Job" not in result.output


def test_a_dry_run_in_a_good_namespace_writes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    result = _cli("trl", "sft", str(write_config(tmp_path, TRL)), "--dry-run", "-n", "team-a")
    assert result.exit_code == 0 and "namespace: team-a" in result.output
