"""A verifiers run tells the user before it starts that a restart does not resume (vf-train
calls ``trainer.train()`` without a checkpoint), and how to go on from a checkpoint by hand;
a framework that resumes says nothing of the kind."""

from __future__ import annotations

import os
import subprocess
import sys

from unit_helpers import CONFIGS, REPO, plan_for

EXAMPLE = CONFIGS / "verifiers-grpo.yaml"


def _restart_notes(notices: list[str]) -> list[str]:
    return [notice for notice in notices if "does not resume" in notice]


def test_a_verifiers_plan_says_a_restart_starts_again_from_model_and_how_to_go_on():
    plan = plan_for("verifiers", "grpo", EXAMPLE, run_name="vf-run")
    [note] = _restart_notes(plan.notices)
    assert "starts again at step 0 from `model` (Qwen/Qwen2.5-0.5B-Instruct)" in note
    assert "preemption, stall, failure" in note
    assert "set `model:` to it (e.g. /checkpoints/vf-run/checkpoint-<step>)" in note
    assert "another --name" in note  # the run's folder is claimed for its first model (cw_entrypoint.claim_folder)


def test_a_resuming_framework_and_a_services_only_verifiers_plan_say_nothing_of_it():
    assert not _restart_notes(plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml").notices)
    assert not _restart_notes(plan_for("verifiers", "grpo", EXAMPLE, services_only=True).notices)


def test_the_dry_run_prints_the_note_on_stderr(tmp_path):
    environ = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    environ.pop("CW_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cw_cli", "verifiers", "grpo", str(EXAMPLE), "--dry-run", "--name", "vf-run"],
        env=environ, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "note: verifiers does not resume: a restart of the trainer" in done.stderr
