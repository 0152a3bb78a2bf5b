"""With ``--no-resume`` (a framework cw does not resume through ``--resume_from_checkpoint``) the
entrypoint names the newest complete checkpoint of the run's folder in ``CW_RESUME_CHECKPOINT``
for its command (verifiers' RLTrainer is resumed from it by cw_vf_resume.py), never a save cut
short, never one inherited, and none with ``CW_AUTO_RESUME=0``."""

from __future__ import annotations

import json
import sys

import pytest
from test_runtime_units import _load


def _checkpoint(folder, step: int, complete: bool) -> None:
    child = folder / f"checkpoint-{step}"
    child.mkdir()
    (child / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if complete:
        (child / ".cw-complete").write_text("")


@pytest.mark.parametrize("auto_resume,expected", [(None, "checkpoint-4"), ("0", None)])
def test_the_newest_complete_checkpoint_is_named_for_the_command(tmp_path, monkeypatch, auto_resume, expected):
    launch = _load("cw_entrypoint")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CW_RUN_IDENTITY", raising=False)
    monkeypatch.setenv("CW_FAULT_TOLERANCE", "0")  # the exec path: the command's environment is seen, not run
    monkeypatch.setenv("CW_RESUME_CHECKPOINT", "/elsewhere/checkpoint-99")  # inherited: never passed on
    if auto_resume is not None:
        monkeypatch.setenv("CW_AUTO_RESUME", auto_resume)
    _checkpoint(tmp_path, 2, True)
    _checkpoint(tmp_path, 4, True)
    _checkpoint(tmp_path, 6, False)  # cut short: set aside, never resumed from
    seen = []
    monkeypatch.setattr(launch.os, "execvp", lambda prog, argv: seen.append(launch.os.environ.get("CW_RESUME_CHECKPOINT")))
    launch.main(["--no-resume", "--", sys.executable, "-c", "pass"])
    assert seen == [str(tmp_path / expected) if expected else None]
    assert not (tmp_path / "checkpoint-6").exists()
