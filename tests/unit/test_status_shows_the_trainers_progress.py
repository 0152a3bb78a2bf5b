"""`cw status` of a running run shows how far the trainer is (step / total, steps per second, ETA)
from the progress bar in the last lines of its log: TRL 1.16's real output (tests/fixtures/metrics),
read in one request of the running trainer pod, in the table and in `-o json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_output_formats import FakeKube, _job, _pod

from cw_cli.cli.formats import dump, status_dict
from cw_cli.diagnosis.progress import Progress, training_progress
from cw_cli.k8s.status import PROGRESS_LOG_LINES, run_status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def _log(name: str) -> list[str]:
    return (FIXTURES / f"trl-1.16.0-transformers-5.23.0-{name}.log").read_text(encoding="utf-8").split("\n")


@pytest.mark.parametrize("name", ["sft", "grpo"])
def test_the_training_bar_of_a_real_trl_log_is_read_and_the_other_bars_are_not(name):
    lines = _log(name)
    first = next(i for i, line in enumerate(lines) if "Writing model shards" in line or "| 1/6 [" in line)
    assert training_progress(lines[:first]) == Progress(0, 6, 0)  # "  0%| | 0/6 [00:00<?, ?it/s]": nothing known yet
    seen = [p.step for p in map(training_progress, (lines[: i + 1] for i in range(len(lines)))) if p]
    assert seen == sorted(seen) and seen[-1] == 6  # never a "Loading weights 21/21" or "Writing model shards 1/1"
    progress = training_progress(lines[: next(i for i, line in enumerate(lines) if "| 2/6 [" in line) + 1])
    assert progress is not None and (progress.step, progress.total) == (2, 6) and progress.steps_per_s


def test_a_long_run_has_an_eta_and_slow_steps_read_as_seconds_per_step():
    bar = "\r 45%|████▌     | 45/100 [1:02:03<1:15:50, 82.73s/it]\x1b[A"
    progress = training_progress(["Loading weights: 100%|██████████| 21/21 [00:00<00:00, 3324.79it/s]", bar])
    assert progress == Progress(45, 100, 3723, 4550, pytest.approx(1 / 82.73))
    assert progress.line() == "45/100 steps (45%), 82.7 s/step, ETA 1h 15m"
    assert Progress(45, 60, 20, 6, 2.31).line() == "45/60 steps (75%), 2.31 steps/s, ETA 6s"
    assert training_progress(["Map: 100%|██████████| 32/32 [00:00<00:00, 1048.08 examples/s]", "no bar"]) is None


def test_status_of_a_running_run_reads_its_trainers_last_lines_once_and_shows_the_progress():
    tail = "\n".join(_log("sft")[:50])
    kube = FakeKube(
        {"Job": [_job("busy", active=1)], "Pod": [_pod("busy", "Running", {"running": {"startedAt": "2026-03-01T11:00:02Z"}})]},
        {"busy-trainer-0-x": tail},
    )
    view = run_status(kube, "busy")
    assert [(path, q["tailLines"]) for path, q in kube.log_requests] == [("/api/v1/namespaces/ml/pods/busy-trainer-0-x/log", PROGRESS_LOG_LINES)]
    assert view.progress is not None and (view.progress.step, view.progress.total) == (4, 6)
    data = json.loads(dump(status_dict(view), "json"))
    assert data["progress"] == {"step": 4, "total": 6, "elapsed_s": 0, "eta_s": 0, "steps_per_s": 15.04, "samples_per_s": None,
                                "tokens_per_s": None, "checkpoint": None, "checkpoint_at": None, "checkpoint_age_s": None}  # fmt: skip


def test_a_failed_run_reads_no_progress():
    kube = FakeKube(
        {"Job": [_job("oom", [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "m"}])],
         "Pod": [_pod("oom", "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}})]},
        {},
    )  # fmt: skip
    view = run_status(kube, "oom")
    assert view.progress is None and kube.log_requests == [] and status_dict(view)["progress"] is None


def test_a_trainer_still_waiting_for_its_servers_is_not_asked_for_its_log():
    pod = _pod("busy", "Running", {"waiting": {"reason": "PodInitializing"}})
    kube = FakeKube({"Job": [_job("busy", active=1)], "Pod": [pod]}, {})
    assert run_status(kube, "busy").progress is None and kube.log_requests == []
