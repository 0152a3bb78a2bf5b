"""A verifiers run whose restart cannot resume tells the user before it starts (the plan's notes,
also printed by ``--dry-run``), and how to go on from a checkpoint by hand; a run that resumes
(cw's entrypoint names the checkpoint, cw_vf_resume.py resumes RLTrainer) says nothing of it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from unit_helpers import CONFIGS, REPO, plan_for

EXAMPLE = CONFIGS / "verifiers-grpo.yaml"


def _restart_notes(notices: list[str]) -> list[str]:
    return [notice for notice in notices if "will not resume" in notice]


@pytest.mark.parametrize(
    "sets,why",
    [
        (["env.CW_FAULT_TOLERANCE=0"], "`env: CW_FAULT_TOLERANCE: 0` turns off cw's patch of RLTrainer"),
        (["env.CW_AUTO_RESUME=false"], "`env: CW_AUTO_RESUME: false` turns off the resume"),
        (["trainer.args.output_dir=/checkpoints/vf-run/out"],
         "`trainer.args.output_dir` is /checkpoints/vf-run/out, not the run's folder /checkpoints/vf-run"),
    ],
)
def test_a_verifiers_run_that_cannot_resume_says_a_restart_starts_again_from_model_and_how_to_go_on(sets, why):
    plan = plan_for("verifiers", "grpo", EXAMPLE, sets=sets, run_name="vf-run")
    [note] = _restart_notes(plan.notices)
    assert why in note
    assert "a restart of the trainer (preemption, stall, failure) will not resume" in note
    assert "starts again at step 0 from `model` (Qwen/Qwen2.5-0.5B-Instruct)" in note
    assert "set `model:` to it (e.g. /checkpoints/vf-run/checkpoint-<step>)" in note
    assert "another --name" in note  # the run's folder is claimed for its first model (cw_entrypoint.claim_folder)


def test_a_verifiers_run_that_resumes_and_a_services_only_plan_say_nothing_of_it():
    assert not _restart_notes(plan_for("verifiers", "grpo", EXAMPLE).notices)
    assert not _restart_notes(plan_for("verifiers", "grpo", EXAMPLE, sets=["env.CW_FAULT_TOLERANCE=0"],
                                       services_only=True).notices)  # fmt: skip


def test_the_dry_run_prints_the_note_on_stderr(tmp_path):
    environ = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    environ.pop("CW_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cw_cli", "verifiers", "grpo", str(EXAMPLE), "--dry-run", "--name", "vf-run",
         "--set", "env.CW_FAULT_TOLERANCE=0"],
        env=environ, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "note: a restart of the trainer (preemption, stall, failure) will not resume" in done.stderr
