"""`--local` without the framework's program installed (issue 32 item 7): one line saying which
program is missing and how to install it, exit 2, instead of cw's entrypoint's traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from unit_helpers import builtin_registry, load, write_config

from cw_cli.localrun.runner import LocalRunError, LocalRunner, check_installed, trainer_program

TRL = {"model_name_or_path": "m", "dataset_name": "trl-lib/Capybara"}


@pytest.fixture
def bare_python(tmp_path, monkeypatch) -> Path:
    """An interpreter in a folder with nothing else (no `trl` beside it), and a PATH of that folder only."""
    folder = tmp_path / "bare-bin"
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(folder))
    return folder / "python"


def _local_plan(tmp_path):
    from cw_cli.render.plan import RunRequest, build_plan

    path = write_config(tmp_path, {**TRL, "checkpoint_volume": None})
    loaded, training_type = builtin_registry().resolve_type("trl", "sft")
    return build_plan(RunRequest(loaded, training_type, load("trl", "sft", path), "local-run", local=True))


def test_the_program_is_the_one_the_entrypoint_execs():
    assert trainer_program(["python3", "/etc/cw/cw_entrypoint.py", "--no-resume", "--", "trl", "sft"]) == "trl"
    assert trainer_program(["axolotl", "train", "c.yaml"]) == "axolotl"


def test_a_missing_trl_is_named_with_how_to_install_it(tmp_path, bare_python):
    with pytest.raises(LocalRunError) as info:
        LocalRunner(_local_plan(tmp_path).manifests, tmp_path / "ck", python=str(bare_python)).prepare()
    message = str(info.value)
    assert "the trainer runs `trl`, which is not installed here" in message
    assert f"`{bare_python.parent / 'pip'} install trl`" in message


def test_an_installed_program_passes(tmp_path):
    (tmp_path / "trl").write_text("#!/bin/sh\n")
    (tmp_path / "trl").chmod(0o755)
    check_installed(["python3", "/x/cw_entrypoint.py", "--", "trl", "sft"], str(tmp_path), str(tmp_path / "python"))


def test_cw_local_without_trl_exits_2_in_one_line_and_starts_nothing(tmp_path, bare_python, monkeypatch):
    from cw_cli.cli.app import build_app

    monkeypatch.setattr(sys, "executable", str(bare_python))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, {**TRL, "checkpoint_volume": None})
    result = CliRunner().invoke(build_app(builtin_registry()), ["trl", "sft", str(config), "--local"])
    assert result.exit_code == 2, result.output
    assert "--local: the trainer runs `trl`, which is not installed here" in result.output
    assert "pip install trl" in result.output.replace(f"{bare_python.parent}/", "")
    assert "Traceback" not in result.output and "running locally" not in result.output
    assert not os.path.exists(tmp_path / "cw-local" / "local-run")
