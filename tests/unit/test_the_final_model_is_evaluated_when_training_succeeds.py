"""The final model is scored without the user asking: the trainer's entry point records a
successful end (and only that), the run's ConfigMap carries the final model's evaluation Job, and
the watcher's last look creates it where the trainer succeeded and a model is at the top of the
run's folder: not after a failure, not after a stop to be resumed, not twice."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from unit_helpers import plan_for, write_config

from cw_cli.runtime import cw_entrypoint, cw_eval_watch

BASE = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara"}
BLOCK = {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm"}


class RecordingApi:
    """Stands in for the API server's Job creation (the cluster test uses the real one)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}

    def create_job(self, job: dict) -> bool:
        name = job["metadata"]["name"]
        made = name not in self.jobs
        self.jobs.setdefault(name, job)
        return made


def _entrypoint(tmp_path: Path, monkeypatch, code: int) -> int:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CW_FAULT_TOLERANCE", raising=False)
    monkeypatch.delenv("CW_NOTIFY", raising=False)
    return cw_entrypoint.main(["--no-resume", sys.executable, "-c", f"raise SystemExit({code})"])


def test_the_entrypoint_records_a_successful_end_and_only_that(tmp_path, monkeypatch):
    finished = tmp_path / ".cw" / "finished.json"
    assert _entrypoint(tmp_path, monkeypatch, 0) == 0
    assert json.loads(finished.read_text())["exit_code"] == 0
    # A later attempt that fails leaves no record of the earlier success behind.
    assert _entrypoint(tmp_path, monkeypatch, 3) == 3
    assert not finished.exists()


def _plan_files(tmp_path: Path) -> tuple[dict, dict]:
    plan = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "gpu": 1, "output_dir": "out", "eval": BLOCK}), run_name="ev")
    data = next(m for m in plan.manifests if m["kind"] == "ConfigMap")["data"]
    pod = next(m for m in plan.manifests if m["kind"] == "Job")["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "eval-watch")
    return data, {e["name"]: e["value"] for e in sidecar["env"]}


def test_the_run_carries_the_final_models_evaluation_job(tmp_path):
    data, env = _plan_files(tmp_path)
    final = json.loads(data["cw-eval-final-job.json"])
    command = final["spec"]["template"]["spec"]["containers"][0]["command"]
    assert final["metadata"]["name"] == "ev-eval-final"
    assert command[command.index("--model") + 1] == "/checkpoints/ev/out"
    assert command[command.index("--out") + 1] == "/checkpoints/ev/out/cw-eval/final"
    assert command[command.index("--checkpoint") + 1] == "final" and "--step" not in command
    assert final["spec"]["template"]["spec"]["priorityClassName"] == "cw-eval"
    assert env["CW_EVAL_FINAL_JOB_FILE"] == "/etc/cw/cw-eval-final-job.json"
    assert env["CW_EVAL_FINISHED_FILE"] == "/checkpoints/ev/.cw/finished.json"  # the trainer's working folder


@pytest.fixture
def watched(tmp_path):
    data, env = _plan_files(tmp_path)
    (tmp_path / "cw-eval-final-job.json").write_text(data["cw-eval-final-job.json"])
    run_dir = tmp_path / "volume" / "out"
    run_dir.mkdir(parents=True)
    env.update({"CW_EVAL_RUN_DIR": str(run_dir), "CW_EVAL_FINAL_JOB_FILE": str(tmp_path / "cw-eval-final-job.json"),
                "CW_EVAL_FINISHED_FILE": str(tmp_path / "volume" / ".cw" / "finished.json")})  # fmt: skip
    return env, run_dir


def _finish(env: dict, record: object) -> None:
    path = Path(env["CW_EVAL_FINISHED_FILE"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record) if not isinstance(record, str) else record)


def test_the_last_look_scores_the_final_model_of_a_finished_run_once(watched):
    env, run_dir = watched
    api = RecordingApi()
    (run_dir / "config.json").write_text("{}")
    cw_eval_watch.look_final(api, env)
    assert api.jobs == {}  # no record of a successful end: stopped to be resumed, or failed
    _finish(env, {"exit_code": 0})
    cw_eval_watch.look_final(api, env)
    cw_eval_watch.look_final(api, env)  # a second node's watcher: found, not made twice
    assert list(api.jobs) == ["ev-eval-final"]
    (run_dir / "cw-eval" / "final").mkdir(parents=True)
    (run_dir / "cw-eval" / "final" / "scores.json").write_text("{}")
    assert not cw_eval_watch.final_ready(str(run_dir), env["CW_EVAL_FINISHED_FILE"])


@pytest.mark.parametrize("record", [{"exit_code": 1}, [0], "{", {"exit_code": "0"}])
def test_no_final_evaluation_without_a_good_record_or_a_model(watched, record):
    env, run_dir = watched
    _finish(env, record)
    (run_dir / "config.json").write_text("{}")
    assert not cw_eval_watch.final_ready(str(run_dir), env["CW_EVAL_FINISHED_FILE"])
    _finish(env, {"exit_code": 0})
    os.remove(run_dir / "config.json")  # succeeded, but no model at the top (saved elsewhere)
    assert not cw_eval_watch.final_ready(str(run_dir), env["CW_EVAL_FINISHED_FILE"])
    (run_dir / "adapter_config.json").write_text("{}")  # a LoRA run's final adapter counts
    assert cw_eval_watch.final_ready(str(run_dir), env["CW_EVAL_FINISHED_FILE"])


def test_the_watchers_last_look_on_sigterm_creates_the_final_job(watched, monkeypatch):
    env, run_dir = watched
    _finish(env, {"exit_code": 0})
    (run_dir / "config.json").write_text("{}")
    api = RecordingApi()
    monkeypatch.setattr(cw_eval_watch, "Api", lambda environ: api)
    env["CW_EVAL_JOB_FILE"] = env["CW_EVAL_FINAL_JOB_FILE"]  # no checkpoints here: the template is not used
    assert cw_eval_watch.main(["--once"], env) == 0
    assert list(api.jobs) == ["ev-eval-final"]
