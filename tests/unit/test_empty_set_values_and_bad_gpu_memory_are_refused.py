"""``--set gpu=`` (null) on a cw field that needs a value, and ``--gpu-memory 0``, are refused with exit code 2.

An empty ``--set`` value is YAML's null: for ``gpu``, ``cpu`` and ``memory`` that silently meant
the framework's default, whatever the config said; for ``nodes`` a pydantic message with no fix.
``--gpu-memory`` takes what the config's ``gpu_memory`` takes: a size greater than zero.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from unit_helpers import builtin_registry, load, write_config

from cw_cli.cli.options import check_gpu_memory_flag
from cw_cli.config.models import gpu_memory_size
from cw_cli.errors import ConfigError

BASE = {"model_name_or_path": "m", "dataset_name": "d", "gpu": 2}


def _issues(tmp_path, sets: list[str], type_name: str = "sft") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load("trl", type_name, write_config(tmp_path, BASE), sets)
    return caught.value.issues


@pytest.mark.parametrize("assignment,example", [
    ("gpu=", "--set gpu=8"), ("gpu=null", "--set gpu=8"), ("gpu=~", "--set gpu=8"), ("cpu=", "--set cpu=16"),
    ("memory=", "--set memory=64Gi"), ("nodes=", "--set nodes=2"), ("ttl_hours=", ""), ("env=", ""),
])  # fmt: skip
def test_a_null_set_on_a_cw_field_that_needs_a_value_is_refused_naming_the_set(tmp_path, assignment, example):
    issues = _issues(tmp_path, [assignment])
    assert len(issues) == 1, issues  # one line: not also pydantic's "Input should be a valid integer"
    field = assignment.partition("=")[0]
    assert issues[0].startswith(f"--set {assignment}: `{field}` cannot be null") and example in issues[0]


def test_a_null_set_on_a_service_gpu_is_refused(tmp_path):
    issues = _issues(tmp_path, ["services.server.gpu="], "grpo")
    assert issues == [
        "--set services.server.gpu=: `services.server.gpu` cannot be null (an empty value is null); give a value such "
        "as --set services.server.gpu=8, or leave the --set out"
    ]


@pytest.mark.parametrize("assignment", ["queue=", "gpu_type=", "save_steps=", "checkpoint_volume=ckpts"])
def test_a_null_set_where_null_means_unset_still_loads(tmp_path, assignment):
    config = load("trl", "sft", write_config(tmp_path, {**BASE, "queue": "q"}), [assignment])
    assert config.cluster.gpu == 2


@pytest.mark.parametrize("value", ["0", "-1", "abc", "0GB", "0.0", " ", "", "1e400", "80 GB GB", "x" * 100])
def test_gpu_memory_flag_refuses_what_the_config_field_refuses(value):
    with pytest.raises(ValueError):
        gpu_memory_size(value)
    with pytest.raises(ConfigError) as caught:
        check_gpu_memory_flag(value)
    assert caught.value.issues[0].startswith("--gpu-memory: ") and len(caught.value.issues[0]) < 200


@pytest.mark.parametrize("value,kept", [("80GB", "80GB"), (" 141GB ", "141GB"), ("81559MiB", "81559MiB"), ("80", "80"), (None, None)])
def test_gpu_memory_flag_keeps_a_size(value, kept):
    assert check_gpu_memory_flag(value) == kept


def _cli(tmp_path, *args: str):
    from cw_cli.cli.app import build_app

    path = write_config(tmp_path, BASE)
    return CliRunner().invoke(build_app(builtin_registry()), ["trl", "sft", str(path), "--dry-run", *args])


def test_the_cli_refuses_an_empty_set_with_exit_code_2_and_prints_no_manifest(tmp_path):
    result = _cli(tmp_path, "--set", "gpu=")
    assert result.exit_code == 2
    assert result.stdout == "" and "--set gpu=: `gpu` cannot be null" in result.stderr


@pytest.mark.parametrize("value", [
    "-1",
    "abc",
    "0",
])  # fmt: skip
def test_the_cli_refuses_a_bad_gpu_memory_with_exit_code_2(tmp_path, value):
    result = _cli(tmp_path, f"--gpu-memory={value}")
    assert result.exit_code == 2 and result.stdout == "" and "--gpu-memory" in result.stderr
