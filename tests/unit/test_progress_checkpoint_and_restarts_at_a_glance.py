"""Progress at a glance (issue 34 item 5): `cw status` and `cw list` show step / total, ETA,
samples and tokens per second, the last complete checkpoint and its age, and the restarts, in the
table and in `-o json`, from what they already read: the ``[cw-progress]`` lines cw's callback
really printed in a CPU TRL SFT (tests/fixtures/progress, written by
tests/training/test_progress_line_of_a_real_training.py), one log tail of each running trainer,
and the Job's pods or the JobSet's status."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_output_formats import FakeKube, _job, _pod

from cw_cli.cli.formats import dump, list_dict, status_dict
from cw_cli.diagnosis.progress import Progress, cw_progress_line, training_progress
from cw_cli.diagnosis.restarts import job_restarts, run_restarts
from cw_cli.k8s.run_view import PROGRESS_LOG_LINES, RunView, count_restarts, list_runs
from cw_cli.k8s.status import run_status

LOG = (Path(__file__).resolve().parents[1] / "fixtures" / "progress" / "trl-sft-cw-progress.log").read_text(encoding="utf-8").split("\n")
CHECKPOINT_3 = "/tmp/t/volume/t-progress/checkpoint-3"
NOW = datetime(2026, 11, 27, 15, 23, 53, tzinfo=timezone.utc)  # 3 minutes after checkpoint-3 was complete


def _upto(text: str) -> list[str]:
    """The log up to (with) the first line containing ``text``."""
    return LOG[: next(i for i, line in enumerate(LOG) if text in line) + 1]


def test_the_real_lines_give_rates_and_the_checkpoint_once_one_is_complete():
    before_save = training_progress(_upto('"step":2,')[-PROGRESS_LOG_LINES:])
    assert before_save is not None and (before_save.step, before_save.total) == (2, 6)
    assert before_save.samples_per_s == 13.6 and before_save.tokens_per_s == 264.0 and before_save.checkpoint is None
    saved = training_progress(_upto('"step":4,')[-PROGRESS_LOG_LINES:])
    assert saved is not None and saved.step == 4 and saved.checkpoint == CHECKPOINT_3
    assert saved.checkpoint_at == datetime(2026, 11, 27, 15, 20, 53, tzinfo=timezone.utc)
    assert saved.samples_per_s == pytest.approx(4 * saved.steps_per_s, rel=0.4)  # the bar's rate, the line's batch of 4
    assert saved.checkpoint_line(NOW) == f"{CHECKPOINT_3}, complete 3m 0s ago"
    assert "8.71 samples/s, 164 tokens/s" in saved.line()


def test_the_bar_gives_the_step_and_eta_and_without_a_bar_the_line_does():
    line = '[cw-progress] {"step":40,"total":100,"elapsed_s":80,"steps_per_s":0.5,"samples_per_s":16.0,"tokens_per_s":9200.0}'
    bar = "\r 41%|████      | 41/100 [01:22<01:58,  2.00s/it]"
    both = training_progress([line, bar])
    assert both is not None and (both.step, both.eta_s, both.tokens_per_s) == (41, 118, 9200.0)
    alone = training_progress([line])  # disable_tqdm: the line alone
    assert alone == Progress(40, 100, 80, 120, 0.5, 16.0, 9200.0)
    assert alone.line() == "40/100 steps (40%), 2 s/step, 16 samples/s, 9.2k tokens/s, ETA 2m 0s"


@pytest.mark.parametrize("bad", [
    '[cw-progress] {"step":7,"total":',  # cut short
    '[cw-progress] {"step":"7","total":60}',  # not cw's types
    '[cw-progress] not json',
    '[cw-progress] {"step":7,"total":60,"checkpoint":"' + "x" * 5000 + '"}',  # no path cw printed
])  # fmt: skip
def test_a_broken_line_is_passed_over_for_the_last_good_one(bad):
    good = '[cw-progress] {"step":5,"total":60,"checkpoint":"/c/r/checkpoint-5","checkpoint_at":"2026-11-27T13:00:00Z"}'
    found = cw_progress_line([good, bad])
    assert found is not None and (found.step, found.checkpoint) == (5, "/c/r/checkpoint-5")


def _trainer(name: str, phase: str, state: dict, created: str, rank: str = "0", restart_count: int = 0) -> dict:
    pod = _pod("busy", phase, state)
    pod["metadata"].update(name=name, creationTimestamp=created, annotations={"batch.kubernetes.io/job-completion-index": rank})
    pod["status"]["containerStatuses"][0]["restartCount"] = restart_count
    return pod


STOPPED = {"terminated": {"exitCode": 143, "reason": "Error"}}
RUNNING = {"running": {"startedAt": "2026-03-01T11:10:00Z"}}


def test_restarts_are_the_replaced_rank_zero_pods_or_the_jobs_count_or_the_jobsets():
    first = _trainer("busy-trainer-0-a", "Failed", STOPPED, "2026-03-01T11:00:01Z")
    second = _trainer("busy-trainer-0-b", "Failed", {"terminated": {"exitCode": 75}}, "2026-03-01T11:05:00Z")
    now = _trainer("busy-trainer-0-c", "Running", RUNNING, "2026-03-01T11:10:00Z", restart_count=1)
    other_rank = _trainer("busy-trainer-1-a", "Failed", STOPPED, "2026-03-01T11:00:01Z", rank="1")
    job = _job("busy", active=1)
    assert job_restarts(job, [first, second, now, other_rank]) == 3  # 2 pods replaced, 1 container restart in place
    assert job_restarts(job, [now]) == 1 and job_restarts(job, []) == 0
    finished = {**job, "spec": {**job["spec"], "completions": 2}, "status": {"failed": 4, "succeeded": 2}}
    assert job_restarts(finished, None) == 2  # pods not read (a finished run in `cw list`): the counted failures
    assert run_restarts([job], [first, now], None) == 2 and run_restarts([], [first, now], 5) == 5  # a JobSet counts its own
    assert run_restarts([], None, None) is None  # services only: no trainer

    view = RunView(name="gang")
    count_restarts(view, [("JobSet", {"metadata": {"name": "gang"}, "status": {"restarts": 5}})], [first, now])
    assert (view.restarts, view.restarts_counted_by) == (5, "JobSet")  # its pods are gone with each gang: its own count
    count_restarts(view, [("Job", job)], [first, now])
    assert (view.restarts, view.restarts_counted_by) == (2, None)  # 1 pod replaced, 1 restart in place


def _running_cluster() -> FakeKube:
    tail = "\n".join(_upto('"step":4,'))
    pods = [_trainer("busy-trainer-0-a", "Failed", STOPPED, "2026-03-01T11:00:01Z"),
            _trainer("busy-trainer-0-b", "Running", RUNNING, "2026-03-01T11:10:00Z")]  # fmt: skip
    return FakeKube({"Job": [_job("busy", active=1)], "Pod": pods}, {"busy-trainer-0-b": tail})


def test_status_shows_rates_checkpoint_age_and_restarts_from_one_log_read():
    kube = _running_cluster()
    view = run_status(kube, "busy")
    # One log read for the progress (the replaced pod exited 143: its own tail explains the restart).
    progress_reads = [path for path, q in kube.log_requests if q["tailLines"] == PROGRESS_LOG_LINES and "0-b" in path]
    assert len(progress_reads) == 1
    assert view.restarts == 1 and view.progress is not None and view.progress.checkpoint == CHECKPOINT_3
    data = json.loads(dump(status_dict(view, NOW), "json"))
    assert data["restarts"] == 1
    assert data["progress"] == {
        "step": 4, "total": 6, "elapsed_s": 1, "eta_s": 0, "steps_per_s": 2.39, "samples_per_s": 8.71, "tokens_per_s": 164.0,
        "checkpoint": CHECKPOINT_3, "checkpoint_at": "2026-11-27T15:20:53Z", "checkpoint_age_s": 180,
    }  # fmt: skip


def test_list_shows_step_eta_and_restarts_and_its_json_the_whole_progress(monkeypatch):
    kube = _running_cluster()
    done = copy.deepcopy(_job("done", [{"type": "Complete", "status": "True"}]))
    done["status"]["failed"] = 2
    kube.objects["Job"].append(done)
    runs = list_runs(kube)
    assert kube.lists.count("Pod") == 1  # the running run's pods, read to explain it, give the restarts too
    assert [(path.rsplit("/", 2)[1], q["tailLines"]) for path, q in kube.log_requests] == [("busy-trainer-0-b", PROGRESS_LOG_LINES)]
    by_name = {run.name: run for run in runs}
    assert (by_name["busy"].restarts, by_name["done"].restarts, by_name["done"].progress) == (1, 2, None)
    items = {item["name"]: item for item in json.loads(dump(list_dict(runs, NOW), "json"))["items"]}
    assert items["busy"]["progress"]["checkpoint_age_s"] == 180 and items["busy"]["progress"]["tokens_per_s"] == 164.0
    assert items["done"]["progress"] is None and items["done"]["restarts"] == 2

    from cw_cli import api
    from cw_cli.cli.runs import list_command, status_command

    monkeypatch.setattr(api.Session, "runs", lambda self, **_: runs)
    table = CliRunner().invoke(list_command, ["-n", "ml"])
    assert table.exit_code == 0, table.output
    header, *rows = table.output.splitlines()
    assert header.split() == ["RUN", "FRAMEWORK", "TYPE", "STATE", "GPUS", "STEP", "ETA", "RESTARTS", "AGE", "REASON"]
    busy = next(row.split() for row in rows if row.startswith("busy"))
    assert busy[:8] == ["busy", "trl", "sft", "Running", "4", "4/6", "0s", "1"]

    monkeypatch.setattr(api.Run, "status", lambda self: by_name["busy"])
    shown = " ".join(CliRunner().invoke(status_command, ["busy", "-n", "ml"]).output.split())
    assert "restarts: 1 (trainer pods replaced; each resumes from the last complete checkpoint)" in shown
    assert "progress: 4/6 steps (67%), 2.39 steps/s, 8.71 samples/s, 164 tokens/s" in shown
    assert f"last checkpoint: {CHECKPOINT_3}, complete " in shown
